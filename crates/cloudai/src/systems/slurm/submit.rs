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
pub(super) const LAUNCHER_STDOUT: &str = "launcher-stdout.txt";
pub(super) const LAUNCHER_STDERR: &str = "launcher-stderr.txt";

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

/// Runs the launcher's command and returns the id of the job it submitted.
pub(super) async fn by_launcher(cmd: &str, dir: &Path) -> Result<JobId, SystemError> {
    let child = tokio::process::Command::new("bash")
        .arg("-c")
        .arg(cmd)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| SystemError::refused(format!("cannot run the test's launcher: {e}")))?;
    let out = match tokio::time::timeout(LAUNCHER_TIMEOUT, child.wait_with_output()).await {
        Ok(Ok(o)) => o,
        Ok(Err(e)) => {
            return Err(SystemError::refused(format!(
                "the test's launcher failed to run: {e}"
            )))
        }
        Err(_) => {
            return Err(SystemError::refused(format!(
                "the test's launcher printed no job id within {} minutes (it was stopped); see {}",
                LAUNCHER_TIMEOUT.as_secs() / 60,
                dir.display()
            )))
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    for (name, text) in [(LAUNCHER_STDOUT, &stdout), (LAUNCHER_STDERR, &stderr)] {
        if let Err(e) = crate::util::fsx::write_atomic(&dir.join(name), text.as_bytes()) {
            warn!("Cannot write {}: {e}", dir.join(name).display());
        }
    }
    let mut ids = job_ids(&stdout);
    if ids.is_empty() {
        ids = job_ids(&stderr);
    }
    let Some(id) = ids.first().cloned() else {
        let status = out.status.code().map_or("was killed".to_string(), |c| {
            format!("exited with status {c}")
        });
        let said = tail(
            if stderr.trim().is_empty() {
                &stdout
            } else {
                &stderr
            },
            5,
        );
        return Err(SystemError::refused(format!(
            "the test's launcher {status} without printing a job id (\"Submitted batch job N\"); it said: {said}; \
             its output is in {}",
            dir.join(LAUNCHER_STDERR).display()
        )));
    };
    if !out.status.success() {
        warn!(
            "The test's launcher exited with {} after submitting job {id}; watching the job (see {})",
            out.status,
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
