//! Logs from the cluster's log stream (the WebSocket the runai CLI reads), followed into `stdout.txt` while the
//! workload runs or read whole, and CloudAI's events.txt lines.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::Value;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

use super::client::Client;

/// `RunAIEvent(created_at=2025-04-03 10:45:05+00:00, id=…, type=Normal, …, involved_object=InvolvedObject(…))`
pub(crate) fn event_line(e: &Value) -> String {
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

/// The log stream of a workload (the route the runai CLI reads; openapi.json documents no logs endpoint): on the
/// cluster's domain (from /clusters), by project name, workload kind (`training`, `distributed`) and name.
pub(crate) fn stream_url(domain: &str, project: &str, kind: &str, name: &str) -> String {
    let domain = domain.trim_end_matches('/');
    let ws_base = if let Some(rest) = domain.strip_prefix("https://") {
        format!("wss://{rest}")
    } else if let Some(rest) = domain.strip_prefix("http://") {
        format!("ws://{rest}")
    } else {
        format!("wss://{domain}")
    };
    format!("{ws_base}/cluster-api/api/v1/{project}/workloads/{kind}/runai/{name}/logs")
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
    url: &str,
    stall: Option<Duration>,
    mut sink: impl FnMut(&[u8]) -> Result<(), String>,
) -> Result<u64, String> {
    let token = client.token().await.map_err(|e| e.to_string())?;
    let mut req = url.into_client_request().map_err(|e| e.to_string())?;
    req.headers_mut().insert(
        "Authorization",
        format!("Bearer {token}")
            .parse()
            .map_err(|_| "bad token".to_string())?,
    );
    let connector = tokio_tungstenite::Connector::Rustls(client.tls());
    let target = reqwest::Url::parse(url).map_err(|e| format!("log stream {url}: {e}"))?;
    let connect = async {
        match super::proxy::proxy_for(&target) {
            Some(p) => {
                let tcp = super::proxy::tunnel(&p, &target).await?;
                tokio_tungstenite::client_async_tls_with_config(
                    req,
                    tcp,
                    Some(ws_config()),
                    Some(connector),
                )
                .await
                .map_err(|e| format!("log stream {url} through proxy {}: {e}", p.as_str()))
            }
            None => tokio_tungstenite::connect_async_tls_with_config(
                req,
                Some(ws_config()),
                false,
                Some(connector),
            )
            .await
            .map_err(|e| format!("log stream {url}: {e}")),
        }
    };
    let (mut ws, _) = tokio::time::timeout(Duration::from_secs(30), connect)
        .await
        .map_err(|_| "timed out connecting to the log stream".to_string())??;
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
pub(crate) async fn fetch(client: &Client, url: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    read_stream(client, url, Some(Duration::from_secs(120)), |b| {
        out.extend_from_slice(b);
        Ok(())
    })
    .await?;
    Ok(out)
}

/// A running workload's log, appended to a file as it arrives, so a hang or a cancel keeps what was printed. A
/// stream that ends before the workload does (preemption, a pod restart, a proxy's idle timeout) is opened again
/// after a pause: what it repeats of the log already written is skipped, and a log that starts over (a restarted
/// pod printing something else) is appended after a marker line.
pub(crate) struct Follow {
    handle: tokio::task::JoinHandle<Result<u64, String>>,
    written: Arc<AtomicU64>,
    /// Set by `finish`: the workload ended; one last reading completes the log.
    ended: Arc<tokio::sync::Notify>,
    ended_flag: Arc<std::sync::atomic::AtomicBool>,
}

/// The first pause before the stream is opened again; it doubles up to [`RECONNECT_CAP`].
const RECONNECT_FIRST: Duration = Duration::from_millis(500);
const RECONNECT_CAP: Duration = Duration::from_secs(30);
/// Once the workload ended, how long its stream may stay silent.
const LAST_READ_STALL: Duration = Duration::from_secs(20);

/// Where a reopened stream stands against the file: repeating its first `len` bytes, or past them.
struct Replay {
    file: std::fs::File,
    len: u64,
    pos: u64,
    /// The stream stopped repeating the file: what it sends is new.
    diverged: bool,
}

impl Replay {
    fn new(path: &std::path::Path, len: u64) -> Result<Self, String> {
        Ok(Self {
            file: std::fs::File::open(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?,
            len,
            pos: 0,
            diverged: len == 0,
        })
    }

    /// The part of `b` that is new: nothing while the stream repeats the file; at the first difference (another
    /// log), everything this stream sent, after `marker`.
    fn new_part(&mut self, b: &[u8], marker: &mut Vec<u8>) -> Result<Vec<u8>, String> {
        use std::io::{Read, Seek, SeekFrom};
        if self.diverged {
            return Ok(b.to_vec());
        }
        let n = ((self.len - self.pos) as usize).min(b.len());
        let mut have = vec![0u8; n];
        self.file
            .read_exact(&mut have)
            .map_err(|e| format!("cannot read back the log: {e}"))?;
        if have == b[..n] {
            self.pos += n as u64;
            self.diverged = self.pos == self.len;
            return Ok(b[n..].to_vec());
        }
        self.diverged = true;
        marker.extend_from_slice(
            b"\n[cloudai] the log stream was opened again and the log started over\n",
        );
        // what the stream sent before this piece repeated the file's first `pos` bytes
        let mut again = vec![0u8; self.pos as usize];
        self.file
            .seek(SeekFrom::Start(0))
            .and_then(|_| self.file.read_exact(&mut again))
            .map_err(|e| format!("cannot read back the log: {e}"))?;
        again.extend_from_slice(b);
        Ok(again)
    }
}

impl Follow {
    pub fn start(client: Arc<Client>, url: String, path: PathBuf) -> Self {
        let written = Arc::new(AtomicU64::new(0));
        let ended = Arc::new(tokio::sync::Notify::new());
        let ended_flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (count, wake, flag) = (written.clone(), ended.clone(), ended_flag.clone());
        let handle = tokio::spawn(async move {
            let mut f = std::fs::File::create(&path)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            let mut pause = RECONNECT_FIRST;
            loop {
                let last = flag.load(Ordering::Relaxed);
                let mut replay = Replay::new(&path, count.load(Ordering::Relaxed))?;
                let r = read_stream(&client, &url, last.then_some(LAST_READ_STALL), |b| {
                    let mut marker = Vec::new();
                    let new = replay.new_part(b, &mut marker)?;
                    for part in [&marker, &new] {
                        f.write_all(part)
                            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                        count.fetch_add(part.len() as u64, Ordering::Relaxed);
                    }
                    Ok(())
                })
                .await;
                if last {
                    return r.map(|_| count.load(Ordering::Relaxed));
                }
                let clean = r.is_ok();
                if let Err(e) = &r {
                    crate::debug!("The log stream {url} ended early ({e}); opening it again");
                }
                // a stream that closed cleanly may have closed because the workload ended: wait for the word
                tokio::select! {
                    _ = wake.notified() => {
                        if clean {
                            return Ok(count.load(Ordering::Relaxed));
                        }
                    }
                    _ = tokio::time::sleep(pause) => {}
                }
                pause = (pause * 2).min(RECONNECT_CAP);
            }
        });
        Self {
            handle,
            written,
            ended,
            ended_flag,
        }
    }

    /// (bytes written, outcome) once the workload ended (or was deleted): the outcome is an error when the log
    /// could not be read to its end within `wait` (the reading is stopped then, keeping what arrived).
    pub async fn finish(mut self, wait: Duration) -> (u64, Result<u64, String>) {
        self.ended_flag.store(true, Ordering::Relaxed);
        self.ended.notify_one();
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
