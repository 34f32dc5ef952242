//! The log of the pod that prints the results (a Job's pod, an MPIJob's launcher): followed into `stdout.txt`
//! while it runs, then read whole once it ended, so a stream cut halfway does not cut the results.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::AsyncReadExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams};
use tokio::io::AsyncWriteExt;
use tokio::task::JoinHandle;

use super::client::describe;
use crate::warn;

/// A running copy of a pod's log into a file; ends when the container ends (the server closes the stream).
pub(crate) struct Follow {
    task: JoinHandle<Result<u64, String>>,
}

impl Follow {
    pub fn start(api: Api<Pod>, pod: String, container: String, out: PathBuf) -> Self {
        let task = tokio::spawn(async move {
            let lp = LogParams {
                follow: true,
                container: Some(container),
                ..Default::default()
            };
            let mut stream = api
                .log_stream(&pod, &lp)
                .await
                .map_err(|e| format!("cannot follow the log of pod {pod}: {}", describe(&e)))?;
            let mut file = tokio::fs::File::create(&out)
                .await
                .map_err(|e| format!("cannot write {}: {e}", out.display()))?;
            let mut buf = vec![0u8; 64 * 1024];
            let mut total = 0u64;
            loop {
                let n = stream
                    .read(&mut buf)
                    .await
                    .map_err(|e| format!("the log stream of pod {pod} broke: {e}"))?;
                if n == 0 {
                    break;
                }
                file.write_all(&buf[..n])
                    .await
                    .map_err(|e| format!("cannot write {}: {e}", out.display()))?;
                total += n as u64;
            }
            file.flush().await.map_err(|e| e.to_string())?;
            Ok(total)
        });
        Self { task }
    }

    /// Waits up to `wait` for the stream to end by itself, then stops it; the bytes it wrote, or why it failed.
    pub async fn finish(mut self, wait: Duration) -> Result<u64, String> {
        match tokio::time::timeout(wait, &mut self.task).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => Err(format!("the log stream task failed: {e}")),
            Err(_) => {
                self.task.abort();
                Err(format!(
                    "the log stream did not end within {} s",
                    wait.as_secs()
                ))
            }
        }
    }
}

/// Settles `stdout.txt`: the whole log read once more (it is complete when the container ended), else what the
/// stream delivered, else one `logs unavailable: <why>` line; never a silent empty file. `wait`: how long an ended
/// container's stream may take to close by itself (zero when we stop a running one). Returns why the log is
/// incomplete, when it is.
pub(crate) async fn settle(
    api: &Api<Pod>,
    pod: Option<(&str, &str)>,
    follow: Option<Follow>,
    out: &Path,
    never_ran: Option<String>,
    wait: Duration,
) -> Option<String> {
    let streamed = match follow {
        Some(f) => f.finish(wait).await,
        None => Err("the log was never followed".to_string()),
    };
    let whole = match pod {
        Some((pod, container)) => {
            let lp = LogParams {
                container: Some(container.to_string()),
                ..Default::default()
            };
            api.logs(pod, &lp)
                .await
                .map_err(|e| format!("cannot read the log of pod {pod}: {}", describe(&e)))
        }
        None => Err(never_ran
            .clone()
            .unwrap_or_else(|| "no pod to read a log from".into())),
    };
    let kept = std::fs::metadata(out).map(|m| m.len()).unwrap_or(0);
    match whole {
        Ok(text) if text.len() as u64 >= kept => {
            if let Err(e) = crate::util::fsx::write_atomic(out, text.as_bytes()) {
                warn!("Cannot write {}: {e}", out.display());
            }
            None
        }
        Ok(_) => None,
        Err(e) if kept > 0 => {
            warn!(
                "{e}; {} keeps the {kept} bytes streamed{}",
                out.display(),
                streamed
                    .as_ref()
                    .err()
                    .map(|s| format!(" ({s})"))
                    .unwrap_or_default()
            );
            // a stream that ended by itself delivered everything
            streamed.err().map(|_| e)
        }
        Err(e) => {
            let never = never_ran.is_some();
            let why = never_ran.unwrap_or(e);
            warn!("No log for {}: {why}", out.display());
            let line = format!("logs unavailable: {why}\n");
            if let Err(e) = crate::util::fsx::write_atomic(out, line.as_bytes()) {
                warn!("Cannot write {}: {e}", out.display());
            }
            (!never).then_some(why)
        }
    }
}

/// A pod's whole log (one container) into `out`, while the pod exists; a log that cannot be read leaves one
/// `logs unavailable: <why>` line instead.
pub(crate) async fn write_whole(api: &Api<Pod>, pod: &str, container: &str, out: &Path) {
    let lp = LogParams {
        container: Some(container.to_string()),
        ..Default::default()
    };
    let text = match api.logs(pod, &lp).await {
        Ok(t) => t,
        Err(e) => format!(
            "logs unavailable: cannot read the log of pod {pod}: {}\n",
            describe(&e)
        ),
    };
    if let Err(e) = crate::util::fsx::write_atomic(out, text.as_bytes()) {
        warn!("Cannot write {}: {e}", out.display());
    }
}
