//! A Run:ai control-plane mock: the endpoints a benchmark client needs, field for field as in the official
//! OpenAPI document, workloads that advance through the real phases over time, events, pods, logs over the
//! cluster WebSocket, and fault knobs (token expiry, 429 with Retry-After, 5xx bursts, slow responses,
//! dropped connections, restart with state kept). Usable as a binary and as a library from tests.

pub mod model;
pub mod schema;
pub mod server;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

pub use model::Timing;
pub use server::{Config, Faults};

/// A running mock. Dropping it stops the server.
pub struct MockServer {
    pub addr: SocketAddr,
    pub shared: Arc<server::Shared>,
    shutdown: tokio::sync::watch::Sender<bool>,
}

impl MockServer {
    /// Starts on `addr` (port 0 picks a free one). With `state_file`, state is loaded from it when present and
    /// saved on every change, so a restarted mock keeps its workloads and tokens.
    pub async fn start(
        addr: SocketAddr,
        cfg: Config,
        state_file: Option<PathBuf>,
    ) -> std::io::Result<Self> {
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
        let (shutdown, stop) = tokio::sync::watch::channel(false);
        tokio::spawn(serve(listener, app, stop));
        Ok(Self {
            addr,
            shared,
            shutdown,
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

    /// Stops serving: new connections are refused, open ones (idle or not) closed. With a state file, a new `start` on the
    /// same address continues where this one stopped.
    pub fn stop(&self) {
        let _ = self.shutdown.send(true);
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Accepts connections until stopped. Each connection gets a kill switch in its requests' extensions, so a
/// handler can make the connection vanish without an answer (a dropped reply), and all are closed on stop.
async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    use tower::ServiceExt;
    loop {
        let stream = tokio::select! {
            a = listener.accept() => match a {
                Ok((s, _)) => s,
                Err(_) => continue,
            },
            _ = stop.changed() => return,
        };
        let app = app.clone();
        let mut stop = stop.clone();
        tokio::spawn(async move {
            let (kill_tx, mut kill_rx) = tokio::sync::mpsc::channel::<()>(1);
            let svc = hyper::service::service_fn(
                move |mut req: hyper::Request<hyper::body::Incoming>| {
                    req.extensions_mut()
                        .insert(server::KillConnection(kill_tx.clone()));
                    app.clone().oneshot(req)
                },
            );
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                .with_upgrades();
            tokio::select! {
                _ = conn => {}
                _ = kill_rx.recv() => {}
                _ = stop.changed() => {}
            }
        });
    }
}
