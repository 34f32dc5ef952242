//! A workload's benchmark in a pod of its own object ([`ObjectBench`]), as `kubectl exec` and `kubectl cp` would
//! do it: the script runs as `bash -c <script> <name> <args>…` (nothing is copied into the pod first), its stdout
//! and stderr go to the iteration's log file, then the results directory comes back as a tar stream (the pod's
//! `tar`, as `kubectl cp` needs) and is unpacked into the iteration's directory. Runs as a task beside the poll;
//! dropping it stops it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures_util::FutureExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::client::{describe, status_code};
use crate::workloads::object::ObjectBench;

/// Bytes buffered per stream between the connection and our reader.
const STREAM_BUF: usize = 64 * 1024;

/// The benchmark under way.
pub(crate) struct Bench {
    task: JoinHandle<Result<(), String>>,
}

impl Bench {
    /// Starts `b` in `container` of `pod`; `wake` is told when it ends, so the poll sees it at once.
    pub fn start(
        api: Api<Pod>,
        pod: String,
        container: String,
        b: ObjectBench,
        dir: PathBuf,
        wake: Arc<Notify>,
    ) -> Self {
        let task = tokio::spawn(async move {
            let r = run(&api, &pod, &container, &b, &dir).await;
            wake.notify_one();
            r
        });
        Self { task }
    }

    /// How it ended, once it has: `Err` says why it did not run or did not succeed.
    pub fn finished(&mut self) -> Option<Result<(), String>> {
        if !self.task.is_finished() {
            return None;
        }
        (&mut self.task)
            .now_or_never()
            .map(|r| r.unwrap_or_else(|e| Err(format!("the benchmark's task failed: {e}"))))
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn run(
    api: &Api<Pod>,
    pod: &str,
    container: &str,
    b: &ObjectBench,
    dir: &Path,
) -> Result<(), String> {
    let script = tokio::fs::read_to_string(&b.script).await.map_err(|e| {
        format!(
            "cannot read the benchmark script {} ({e}); `cloudai install` puts it there",
            b.script.display()
        )
    })?;
    let name = b
        .script
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "bench.sh".into());
    crate::info!("Running {name} in pod {pod}");
    let mut cmd = vec!["/bin/bash".to_string(), "-c".into(), script, name.clone()];
    cmd.extend(b.args.iter().cloned());
    let ran = exec(api, pod, container, cmd).await?;
    let mut log = ran.stdout;
    if !ran.stderr.is_empty() {
        log.extend_from_slice(b"\nSTDERR:\n");
        log.extend_from_slice(&ran.stderr);
    }
    let log_path = dir.join(b.log);
    crate::util::fsx::write_atomic(&log_path, &log)
        .map_err(|e| format!("cannot write {}: {e}", log_path.display()))?;
    let tar = exec(
        api,
        pod,
        container,
        ["tar", "cf", "-", "-C", b.fetch.as_str(), "."]
            .map(String::from)
            .to_vec(),
    )
    .await?;
    let fetched = if tar.code == 0 {
        unpack(&tar.stdout, dir)
    } else {
        Err(format!(
            "cannot copy {} out of pod {pod}: tar exited {}: {}",
            b.fetch,
            tar.code,
            String::from_utf8_lossy(&tar.stderr).trim()
        ))
    };
    if let Some((file, marker)) = &b.done {
        if dir.join(file).is_file() {
            let m = dir.join(marker);
            std::fs::write(&m, b"").map_err(|e| format!("cannot write {}: {e}", m.display()))?;
        }
    }
    if ran.code != 0 {
        return Err(format!(
            "{name} exited {} in pod {pod} (its output: {})",
            ran.code, b.log
        ));
    }
    fetched
}

/// The results as `tar` wrote them, into `dir` (entries that would land outside it are skipped).
fn unpack(tar: &[u8], dir: &Path) -> Result<(), String> {
    let mut archive = tar::Archive::new(tar);
    archive.set_preserve_permissions(false);
    archive.set_overwrite(true);
    let entries = archive
        .entries()
        .map_err(|e| format!("the results from the pod are not a tar stream: {e}"))?;
    for entry in entries {
        let mut entry =
            entry.map_err(|e| format!("the results from the pod are cut short: {e}"))?;
        // `unpack_in` refuses `..` and absolute paths
        entry
            .unpack_in(dir)
            .map_err(|e| format!("cannot write the results into {}: {e}", dir.display()))?;
    }
    Ok(())
}

/// What a command in a pod left.
struct Ran {
    code: i32,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

async fn exec(api: &Api<Pod>, pod: &str, container: &str, cmd: Vec<String>) -> Result<Ran, String> {
    let ap = AttachParams {
        container: Some(container.to_string()),
        stdin: false,
        stdout: true,
        stderr: true,
        tty: false,
        max_stdin_buf_size: None,
        max_stdout_buf_size: Some(STREAM_BUF),
        max_stderr_buf_size: Some(STREAM_BUF),
    };
    let mut p = api.exec(pod, cmd, &ap).await.map_err(|e| {
        let hint = if status_code(&e) == Some(403) {
            " (cloudai's role needs `create` on `pods/exec` in the namespace)"
        } else {
            ""
        };
        format!("cannot run a command in pod {pod}: {}{hint}", describe(&e))
    })?;
    let (out, err) = (p.stdout(), p.stderr());
    let status = p.take_status();
    let (stdout, stderr) = tokio::join!(read_all(out), read_all(err));
    let status = match status {
        Some(s) => s.await,
        None => None,
    };
    let code = match status {
        None => {
            return Err(format!(
                "the command in pod {pod} ended without an exit status (the connection was cut)"
            ))
        }
        Some(s) if s.status.as_deref() == Some("Success") => 0,
        Some(s) => s
            .details
            .and_then(|d| d.causes)
            .into_iter()
            .flatten()
            .find(|c| c.reason.as_deref() == Some("ExitCode"))
            .and_then(|c| c.message.and_then(|m| m.trim().parse().ok()))
            .ok_or_else(|| {
                format!(
                    "the command in pod {pod} could not run: {}",
                    s.message.unwrap_or_default()
                )
            })?,
    };
    Ok(Ran {
        code,
        stdout,
        stderr,
    })
}

async fn read_all(r: Option<impl AsyncRead + Unpin>) -> Vec<u8> {
    let mut buf = Vec::new();
    if let Some(mut r) = r {
        let _ = r.read_to_end(&mut buf).await;
    }
    buf
}
