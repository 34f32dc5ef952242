//! A job submitted by the test's own launcher (NeMo launcher): its command runs here, on the login node, in the
//! iteration's directory; the job id it prints (sbatch's `Submitted batch job N`, or the NeMo launcher's
//! `submitted with Job ID N`) is the job cloudai then watches, cancels and collects like one of its own.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use super::super::{JobId, SystemError};
use crate::warn;

/// The launcher may install its runtime's packages first (Megatron-Bridge's pip), but a command that has not
/// submitted within this time is stuck.
const LAUNCHER_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Where the launcher's own output is kept, in the iteration's directory.
const LAUNCHER_STDOUT: &str = "launcher-stdout.txt";
const LAUNCHER_STDERR: &str = "launcher-stderr.txt";
/// The launcher's process id while it runs.
const LAUNCHER_PID: &str = "launcher.pid";

/// The phrases before a job id in what launchers print.
const ID_MARKS: &[&str] = &["Submitted batch job ", "submitted with Job ID "];

/// The job ids `text` announces, in order, each once.
pub(super) fn job_ids(text: &str) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for line in text.lines() {
        for mark in ID_MARKS {
            let mut rest = line;
            while let Some(at) = rest.find(mark) {
                rest = &rest[at + mark.len()..];
                let id: String = rest.chars().take_while(char::is_ascii_digit).collect();
                if !id.is_empty() && !ids.contains(&id) {
                    ids.push(id);
                }
            }
        }
    }
    ids
}

/// The last `n` non-blank lines of `text`, for an error message.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

/// Runs the launcher's command and returns the id of the job it submitted. The launcher writes its output into
/// the iteration's directory (not into pipes of ours) and runs in its own process group: a Ctrl-C at the terminal
/// or the death of cloudai never cuts it off between its `sbatch` and the id it prints; its pid file lets a
/// `resume` wait for it ([`recovered`]).
pub(super) async fn by_launcher(cmd: &str, dir: &Path) -> Result<JobId, SystemError> {
    let file = |name: &str| {
        std::fs::File::create(dir.join(name)).map_err(|e| {
            SystemError::refused(format!("cannot write {}: {e}", dir.join(name).display()))
        })
    };
    let mut child = tokio::process::Command::new("bash")
        .arg("-c")
        .arg(cmd)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(file(LAUNCHER_STDOUT)?)
        .stderr(file(LAUNCHER_STDERR)?)
        .process_group(0)
        .spawn()
        .map_err(|e| SystemError::refused(format!("cannot run the test's launcher: {e}")))?;
    if let Some(pid) = child.id() {
        if let Err(e) =
            crate::util::fsx::write_atomic(&dir.join(LAUNCHER_PID), pid.to_string().as_bytes())
        {
            warn!("Cannot write {}: {e}", dir.join(LAUNCHER_PID).display());
        }
    }
    let status = match tokio::time::timeout(LAUNCHER_TIMEOUT, child.wait()).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            return Err(SystemError::refused(format!(
                "the test's launcher failed to run: {e}"
            )))
        }
        Err(_) => {
            let _ = child.kill().await;
            let _ = std::fs::remove_file(dir.join(LAUNCHER_PID));
            return Err(SystemError::refused(format!(
                "the test's launcher printed no job id within {} minutes (it was stopped); see {}",
                LAUNCHER_TIMEOUT.as_secs() / 60,
                dir.join(LAUNCHER_STDERR).display()
            )));
        }
    };
    let _ = std::fs::remove_file(dir.join(LAUNCHER_PID));
    let (stdout, stderr) = said(dir);
    let ids = printed_ids(&stdout, &stderr);
    let Some(id) = ids.first().cloned() else {
        let status = status.code().map_or("was killed".to_string(), |c| {
            format!("exited with status {c}")
        });
        let tail = tail(
            if stderr.trim().is_empty() {
                &stdout
            } else {
                &stderr
            },
            5,
        );
        return Err(SystemError::refused(format!(
            "the test's launcher {status} without printing a job id (\"Submitted batch job N\"); it said: {tail}; \
             its output is in {}",
            dir.join(LAUNCHER_STDERR).display()
        )));
    };
    if !status.success() {
        warn!(
            "The test's launcher exited with {status} after submitting job {id}; watching the job (see {})",
            dir.join(LAUNCHER_STDERR).display()
        );
    }
    if ids.len() > 1 {
        warn!(
            "The test's launcher submitted jobs {}: watching {id}, the first",
            ids.join(", ")
        );
    }
    Ok(id)
}

/// The job ids the launcher announced on its stdout, else on its stderr.
fn printed_ids(stdout: &str, stderr: &str) -> Vec<String> {
    let ids = job_ids(stdout);
    if ids.is_empty() {
        job_ids(stderr)
    } else {
        ids
    }
}

/// What the launcher printed (stdout, stderr), as far as it was kept.
fn said(dir: &Path) -> (String, String) {
    let read = |name: &str| {
        std::fs::read(dir.join(name))
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    };
    (read(LAUNCHER_STDOUT), read(LAUNCHER_STDERR))
}

/// Whether the launcher an earlier cloudai started here still runs (its pid, working in this directory).
fn launcher_running(dir: &Path) -> bool {
    let Some(pid) = std::fs::read_to_string(dir.join(LAUNCHER_PID))
        .ok()
        .and_then(|p| p.trim().parse::<u32>().ok())
    else {
        return false;
    };
    let here = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == here)
}

/// After a crash: the job a launcher of this iteration submitted, from what it printed — once a launcher still
/// running from before has ended (it may be between its `sbatch` and its output).
pub(super) async fn recovered(dir: &Path) -> Option<JobId> {
    if launcher_running(dir) {
        crate::info!(
            "The test's launcher started before the crash still runs in {}: waiting for it",
            dir.display()
        );
        let deadline = tokio::time::Instant::now() + LAUNCHER_TIMEOUT;
        while launcher_running(dir) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    if !launcher_running(dir) {
        let _ = std::fs::remove_file(dir.join(LAUNCHER_PID));
    }
    let (stdout, stderr) = said(dir);
    printed_ids(&stdout, &stderr).into_iter().next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_ids_from_sbatch_and_the_nemo_launcher() {
        assert_eq!(job_ids("Submitted batch job 4711\n"), vec!["4711"]);
        assert_eq!(
            job_ids(
                "[NeMo I] Job nemo-megatron-run submitted with Job ID 12\nSubmitted batch job 12\n"
            ),
            vec!["12"]
        );
        assert_eq!(
            job_ids("Submitted batch job 3\nSubmitted batch job 4\n"),
            vec!["3", "4"]
        );
        assert!(
            job_ids("Submitted batch job \nsbatch: error: Batch job submission failed").is_empty()
        );
    }
}
