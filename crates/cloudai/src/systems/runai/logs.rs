//! Logs from the cluster's log stream (the WebSocket the runai CLI reads), followed into `stdout.txt` while the
//! workload runs or read whole, and CloudAI's events.txt lines.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use reqwest::Method;
use serde_json::Value;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

use super::client::Client;

/// `RunAIEvent(created_at=2025-04-03 10:45:05+00:00, id=…, type=Normal, …, involved_object=InvolvedObject(…))`
pub fn event_line(e: &Value) -> String {
    let s = |k: &str| e[k].as_str().unwrap_or("").to_string();
    let created = chrono::DateTime::parse_from_rfc3339(&s("createdAt"))
        .map(|t| {
            let t = t.with_timezone(&chrono::Utc);
            if t.timestamp_subsec_micros() == 0 {
                t.format("%Y-%m-%d %H:%M:%S+00:00").to_string()
            } else {
                t.format("%Y-%m-%d %H:%M:%S%.6f+00:00").to_string()
            }
        })
        .unwrap_or_else(|_| s("createdAt"));
    let o = &e["involvedObject"];
    let os = |k: &str| o[k].as_str().unwrap_or("").to_string();
    format!(
        "RunAIEvent(created_at={created}, id={}, type={}, cluster_id={}, message={}, reason={}, source={}, involved_object=InvolvedObject(uid={}, kind={}, name={}, namespace={}))",
        s("id"),
        s("type"),
        s("clusterId"),
        s("message"),
        s("reason"),
        s("source"),
        os("uid"),
        os("kind"),
        os("name"),
        os("namespace")
    )
}

/// Which workload's log: the stream is addressed by project name, kind and workload name.
#[derive(Clone, Debug)]
pub struct Target {
    pub project_id: String,
    pub cluster_id: String,
    /// `training` or `distributed`.
    pub kind: &'static str,
    pub name: String,
}

/// The cluster's log stream URL: the cluster's domain from /clusters, the project's name from
/// /org-unit/projects. The route is the one the runai CLI reads; openapi.json documents no logs endpoint.
async fn stream_url(client: &Client, t: &Target) -> Result<String, String> {
    let clusters = client
        .call(Method::GET, "/api/v1/clusters", &[], None)
        .await
        .map_err(|e| format!("clusters: {e}"))?;
    let list = clusters
        .as_array()
        .cloned()
        .or_else(|| clusters["clusters"].as_array().cloned())
        .unwrap_or_default();
    let domain = list
        .iter()
        .find(|c| c["uuid"] == t.cluster_id.as_str())
        .and_then(|c| c["domain"].as_str())
        .filter(|d| !d.is_empty())
        .ok_or_else(|| format!("cluster {} has no domain in /api/v1/clusters", t.cluster_id))?
        .trim_end_matches('/')
        .to_string();
    let projects = client
        .call(Method::GET, "/api/v1/org-unit/projects", &[], None)
        .await
        .map_err(|e| format!("projects: {e}"))?;
    let project = projects["projects"]
        .as_array()
        .and_then(|p| {
            p.iter().find(|p| {
                p["id"].as_str() == Some(t.project_id.as_str())
                    || p["id"].as_u64().map(|i| i.to_string()).as_deref() == Some(&t.project_id)
            })
        })
        .and_then(|p| p["name"].as_str())
        .ok_or_else(|| format!("project {} not found", t.project_id))?
        .to_string();
    let ws_base = if let Some(rest) = domain.strip_prefix("https://") {
        format!("wss://{rest}")
    } else if let Some(rest) = domain.strip_prefix("http://") {
        format!("ws://{rest}")
    } else {
        format!("wss://{domain}")
    };
    Ok(format!(
        "{ws_base}/cluster-api/api/v1/{project}/workloads/{}/runai/{}/logs",
        t.kind, t.name
    ))
}

/// Small buffers: a run follows one stream per running workload (hundreds at once), and log lines are short.
fn ws_config() -> tokio_tungstenite::tungstenite::protocol::WebSocketConfig {
    let mut c = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default();
    c.read_buffer_size = 16 * 1024;
    c.write_buffer_size = 0;
    c
}

/// Reads the log stream until it closes, handing each piece to `sink`; `stall` bounds the wait for a piece.
async fn read_stream(
    client: &Client,
    t: &Target,
    stall: Option<Duration>,
    mut sink: impl FnMut(&[u8]) -> Result<(), String>,
) -> Result<u64, String> {
    let url = stream_url(client, t).await?;
    let token = client.token().await.map_err(|e| e.to_string())?;
    let mut req = url
        .as_str()
        .into_client_request()
        .map_err(|e| e.to_string())?;
    req.headers_mut().insert(
        "Authorization",
        format!("Bearer {token}")
            .parse()
            .map_err(|_| "bad token".to_string())?,
    );
    let connector = tokio_tungstenite::Connector::Rustls(client.tls());
    let (mut ws, _) = tokio::time::timeout(
        Duration::from_secs(30),
        tokio_tungstenite::connect_async_tls_with_config(
            req,
            Some(ws_config()),
            false,
            Some(connector),
        ),
    )
    .await
    .map_err(|_| "timed out connecting to the log stream".to_string())?
    .map_err(|e| format!("log stream {url}: {e}"))?;
    let mut n = 0u64;
    loop {
        let next = match stall {
            Some(d) => tokio::time::timeout(d, ws.next())
                .await
                .map_err(|_| "the log stream stalled".to_string())?,
            None => ws.next().await,
        };
        let Some(msg) = next else { break };
        let bytes: &[u8] = match &msg {
            Ok(Message::Text(t)) => t.as_bytes(),
            Ok(Message::Binary(b)) => b,
            Ok(Message::Close(_)) => break,
            Ok(_) => continue,
            Err(e) => return Err(format!("log stream: {e}")),
        };
        sink(bytes)?;
        n += bytes.len() as u64;
    }
    Ok(n)
}

/// Reads a finished workload's whole log.
pub async fn fetch(client: &Client, t: &Target) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    read_stream(client, t, Some(Duration::from_secs(120)), |b| {
        out.extend_from_slice(b);
        Ok(())
    })
    .await?;
    Ok(out)
}

/// A running workload's log, appended to a file as it arrives, so a hang or a cancel keeps what was printed.
pub struct Follow {
    handle: tokio::task::JoinHandle<Result<u64, String>>,
    written: Arc<AtomicU64>,
}

impl Follow {
    pub fn start(client: Arc<Client>, t: Target, path: PathBuf) -> Self {
        let written = Arc::new(AtomicU64::new(0));
        let count = written.clone();
        let handle = tokio::spawn(async move {
            let mut f = std::fs::File::create(&path)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            read_stream(&client, &t, None, |b| {
                f.write_all(b)
                    .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                count.fetch_add(b.len() as u64, Ordering::Relaxed);
                Ok(())
            })
            .await
        });
        Self { handle, written }
    }

    /// (bytes written, outcome) once the stream has closed (the workload ended or was deleted): the outcome is
    /// an error when the stream failed or did not close within `wait` (it is stopped then, keeping what arrived).
    pub async fn finish(mut self, wait: Duration) -> (u64, Result<u64, String>) {
        let r = match tokio::time::timeout(wait, &mut self.handle).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => Err(format!("log reader failed: {e}")),
            Err(_) => {
                self.handle.abort();
                Err(format!(
                    "the log stream was still open {} s after the workload ended",
                    wait.as_secs()
                ))
            }
        };
        (self.written.load(Ordering::Relaxed), r)
    }
}

impl std::fmt::Debug for Follow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Follow")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_lines_in_cloudai_form() {
        let e = serde_json::json!({"createdAt": "2025-04-03T10:45:05Z", "id": "5a", "type": "Normal", "clusterId": "a6",
            "message": "Created pod: x-0-0", "reason": "SuccessfulCreate", "source": "runaijobcontroller",
            "involvedObject": {"uid": "31", "kind": "RunaiJob", "name": "x", "namespace": "runai-cloudai"}});
        assert_eq!(event_line(&e), "RunAIEvent(created_at=2025-04-03 10:45:05+00:00, id=5a, type=Normal, cluster_id=a6, message=Created pod: x-0-0, reason=SuccessfulCreate, source=runaijobcontroller, involved_object=InvolvedObject(uid=31, kind=RunaiJob, name=x, namespace=runai-cloudai))");
        let ms = serde_json::json!({"createdAt": "2025-04-01T12:00:00.123Z"});
        assert!(
            event_line(&ms).starts_with("RunAIEvent(created_at=2025-04-01 12:00:00.123000+00:00,")
        );
    }
}
