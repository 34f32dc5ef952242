//! A Run:ai control-plane mock: the endpoints a benchmark client needs, field for field as in the official
//! OpenAPI document, workloads that advance through the real phases over time, events, pods, logs over the
//! cluster WebSocket, and fault knobs (token expiry, 429 with Retry-After, 5xx bursts, slow responses,
//! dropped connections, restart with state kept). Usable as a binary and as a library from tests.

pub mod model;
pub mod schema;
pub mod server;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Once};

pub use model::Timing;
pub use server::{Config, Faults};

/// A running mock. Dropping it stops the server.
pub struct MockServer {
    pub addr: SocketAddr,
    pub shared: Arc<server::Shared>,
    shutdown: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
}

fn quiet_drop_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info
                .payload()
                .downcast_ref::<server::DropConnection>()
                .is_none()
            {
                prev(info);
            }
        }));
    });
}

impl MockServer {
    /// Starts on `addr` (port 0 picks a free one). With `state_file`, state is loaded from it when present and
    /// saved on every change, so a restarted mock keeps its workloads and tokens.
    pub async fn start(
        addr: SocketAddr,
        cfg: Config,
        state_file: Option<PathBuf>,
    ) -> std::io::Result<Self> {
        quiet_drop_panics();
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let data = state_file
            .as_ref()
            .and_then(|f| std::fs::read(f).ok())
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        let shared = Arc::new(server::Shared {
            cfg: Mutex::new(cfg),
            faults: Mutex::new(Faults::default()),
            data: Mutex::new(data),
            journal: Mutex::new(Vec::new()),
            schemas: schema::Schemas::default(),
            base_url: format!("http://{addr}"),
            state_file,
        });
        let app = server::router(shared.clone());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        // Graceful shutdown closes idle keep-alive connections too, so a stopped mock is really gone.
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = rx.await;
                })
                .await;
        });
        Ok(Self {
            addr,
            shared,
            shutdown: Mutex::new(Some(tx)),
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn set_faults(&self, f: Faults) {
        *self.shared.faults.lock().unwrap() = f;
    }

    pub fn set_timing(&self, t: Timing) {
        self.shared.cfg.lock().unwrap().timing = t;
    }

    /// Every request received so far (method, path, query, headers without secrets, body).
    pub fn journal(&self) -> Vec<serde_json::Value> {
        self.shared.journal.lock().unwrap().clone()
    }

    /// Stops serving: new connections are refused, idle ones closed. With a state file, a new `start` on the
    /// same address continues where this one stopped.
    pub fn stop(&self) {
        if let Some(tx) = self.shutdown.lock().unwrap().take() {
            let _ = tx.send(());
        }
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.stop();
    }
}
