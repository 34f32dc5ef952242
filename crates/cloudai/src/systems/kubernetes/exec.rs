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

/// Why the benchmark did not run, or did not succeed.
#[derive(Debug)]
pub(crate) enum BenchError {
    /// Its script is not on this machine.
    Script { path: PathBuf, why: std::io::Error },
    /// The API server would not start a command in the pod.
    Exec {
        pod: String,
        why: String,
        forbidden: bool,
    },
    /// The connection ended before the command's exit status came.
    NoStatus { pod: String },
    /// The container runtime could not run the command.
    CouldNotRun { pod: String, message: String },
    /// The script exited non-zero.
    Exited {
        name: String,
        code: i32,
        pod: String,
        log: &'static str,
    },
    /// The results directory did not come back.
    Fetch {
        what: String,
        pod: String,
        why: String,
    },
    /// A file of the iteration's directory could not be written.
    Write { path: PathBuf, why: String },
    /// The task running it failed.
    Task(String),
}

impl std::fmt::Display for BenchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BenchError::Script { path, why } => write!(
                f,
                "cannot read the benchmark script {} ({why}); `cloudai install` puts it there",
                path.display()
            ),
            BenchError::Exec {
                pod,
                why,
                forbidden,
            } => {
                write!(f, "cannot run a command in pod {pod}: {why}")?;
                if *forbidden {
                    write!(
                        f,
                        " (cloudai's role needs `create` on `pods/exec` in the namespace)"
                    )?;
                }
                Ok(())
            }
            BenchError::NoStatus { pod } => write!(
                f,
                "the command in pod {pod} ended without an exit status (the connection was cut)"
            ),
            BenchError::CouldNotRun { pod, message } => {
                write!(f, "the command in pod {pod} could not run: {message}")
            }
            BenchError::Exited {
                name,
                code,
                pod,
                log,
            } => write!(f, "{name} exited {code} in pod {pod} (its output: {log})"),
            BenchError::Fetch { what, pod, why } => {
                write!(f, "cannot copy {what} out of pod {pod}: {why}")
            }
            BenchError::Write { path, why } => write!(f, "cannot write {}: {why}", path.display()),
            BenchError::Task(why) => write!(f, "the benchmark's task failed: {why}"),
        }
    }
}

/// The benchmark under way, and the pod it runs in.
pub(crate) struct Bench {
    task: JoinHandle<Result<(), BenchError>>,
    pod: String,
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
        let at = pod.clone();
        let task = tokio::spawn(async move {
            let r = run(&api, &at, &container, &b, &dir).await;
            wake.notify_one();
            r
        });
        Self { task, pod }
    }

    pub fn pod(&self) -> &str {
        &self.pod
    }

    /// How it ended, once it has: `Err` says why it did not run or did not succeed.
    pub fn finished(&mut self) -> Option<Result<(), BenchError>> {
        if !self.task.is_finished() {
            return None;
        }
        (&mut self.task)
            .now_or_never()
            .map(|r| r.unwrap_or_else(|e| Err(BenchError::Task(e.to_string()))))
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
) -> Result<(), BenchError> {
    let script = tokio::fs::read_to_string(&b.script)
        .await
        .map_err(|why| BenchError::Script {
            path: b.script.clone(),
            why,
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
    crate::util::fsx::write_atomic(&log_path, &log).map_err(|e| BenchError::Write {
        path: log_path.clone(),
        why: e.to_string(),
    })?;
    let tar = exec(
        api,
        pod,
        container,
        ["tar", "cf", "-", "-C", b.fetch.as_str(), "."]
            .map(String::from)
            .to_vec(),
    )
    .await?;
    let fetch_error = |why: String| BenchError::Fetch {
        what: b.fetch.clone(),
        pod: pod.to_string(),
        why,
    };
    let fetched = if tar.code == 0 {
        unpack(&tar.stdout, dir).map_err(fetch_error)
    } else {
        Err(fetch_error(format!(
            "tar exited {}: {}",
            tar.code,
            String::from_utf8_lossy(&tar.stderr).trim()
        )))
    };
    if let Some((file, marker)) = &b.done {
        if dir.join(file).is_file() {
            let m = dir.join(marker);
            std::fs::write(&m, b"").map_err(|e| BenchError::Write {
                path: m.clone(),
                why: e.to_string(),
            })?;
        }
    }
    if ran.code != 0 {
        return Err(BenchError::Exited {
            name,
            code: ran.code,
            pod: pod.to_string(),
            log: b.log,
        });
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
        .map_err(|e| format!("not a tar stream: {e}"))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| format!("the stream was cut short: {e}"))?;
        // `unpack_in` refuses `..` and absolute paths
        entry
            .unpack_in(dir)
            .map_err(|e| format!("cannot write into {}: {e}", dir.display()))?;
    }
    Ok(())
}

/// What a command in a pod left.
struct Ran {
    code: i32,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

async fn exec(
    api: &Api<Pod>,
    pod: &str,
    container: &str,
    cmd: Vec<String>,
) -> Result<Ran, BenchError> {
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
    let mut p = api
        .exec(pod, cmd, &ap)
        .await
        .map_err(|e| BenchError::Exec {
            pod: pod.to_string(),
            why: describe(&e),
            forbidden: status_code(&e) == Some(403),
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
            return Err(BenchError::NoStatus {
                pod: pod.to_string(),
            })
        }
        Some(s) if s.status.as_deref() == Some("Success") => 0,
        Some(s) => s
            .details
            .and_then(|d| d.causes)
            .into_iter()
            .flatten()
            .find(|c| c.reason.as_deref() == Some("ExitCode"))
            .and_then(|c| c.message.and_then(|m| m.trim().parse().ok()))
            .ok_or_else(|| BenchError::CouldNotRun {
                pod: pod.to_string(),
                message: s.message.unwrap_or_default(),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, data) in files {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o600);
            // written as the pod's `tar cf - -C dir .` names them; `..` is written raw, as a hostile tar could
            h.as_old_mut().name[..path.len()].copy_from_slice(path.as_bytes());
            h.set_cksum();
            b.append(&h, *data).unwrap();
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn results_land_in_the_iteration_and_nowhere_else() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("it");
        std::fs::create_dir(&dir).unwrap();
        let t = tar_of(&[
            ("./report.csv", b"a,b\n"),
            ("./artifacts/profile.json", b"{}"),
            ("../escaped.txt", b"x"),
        ]);
        unpack(&t, &dir).unwrap();
        assert_eq!(std::fs::read(dir.join("report.csv")).unwrap(), b"a,b\n");
        assert!(dir.join("artifacts/profile.json").is_file());
        assert!(!root.path().join("escaped.txt").exists());
        let cut = unpack(&t[..700], &dir).unwrap_err();
        assert!(cut.contains("cut short"), "{cut}");
    }

    #[test]
    fn a_refused_exec_names_the_right_it_needs() {
        let e = BenchError::Exec {
            pod: "d-frontend-0".into(),
            why: "403 Forbidden".into(),
            forbidden: true,
        };
        assert_eq!(
            e.to_string(),
            "cannot run a command in pod d-frontend-0: 403 Forbidden (cloudai's role needs `create` on \
             `pods/exec` in the namespace)"
        );
    }
}
