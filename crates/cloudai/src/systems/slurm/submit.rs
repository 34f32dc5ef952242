//! A job submitted by the test's own launcher (NeMo launcher, Megatron-Bridge): its command runs here, on the login
//! node, in the iteration's directory; the job id it prints (sbatch's `Submitted batch job N`, the NeMo launcher's
//! `submitted with Job ID N`, NeMo-Run's `Job id: N`), on its output or in the log it names, is the job cloudai then
//! watches, cancels and collects like one of its own. A launcher may stay with its job (Megatron-Bridge waits for
//! it and submits it again after a failure): it keeps running, its later job is followed ([`next_job`]), and the
//! iteration ends when the launcher has ([`launcher_done`]).

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::super::{JobId, SystemError};
use crate::workloads::submit::{job_ids, Login};
use crate::{info, warn};

/// The launcher may install its runtime's packages first (Megatron-Bridge's pip), but a command that has not
/// submitted within this time is stuck.
const LAUNCHER_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// With a pre-hook job ahead of the test's (its pre-test hooks), a launcher may wait this much longer for that job
/// to start before it submits the test's (CloudAI's wrapper gives up after an hour).
const AHEAD_WAIT: Duration = Duration::from_secs(60 * 60);
/// How long a launcher that stays with its job may take, once the job ended, to submit it again or end.
pub(super) const AFTER_JOB: Duration = Duration::from_secs(5 * 60);
/// Where the launcher's own output is kept, in the iteration's directory.
const LAUNCHER_STDOUT: &str = "launcher-stdout.txt";
const LAUNCHER_STDERR: &str = "launcher-stderr.txt";
/// The launcher's process id while it runs, then the files where its job ids show (one per line).
const LAUNCHER_PID: &str = "launcher.pid";
const POLL: Duration = Duration::from_millis(500);

/// The latest of the ids (Slurm numbers jobs upwards).
fn latest(ids: &[String]) -> Option<String> {
    ids.iter()
        .max_by_key(|id| id.parse::<u64>().unwrap_or(0))
        .cloned()
}

/// The last `n` non-blank lines of `text`, for an error message.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

impl super::Slurm {
    /// Cancels the jobs the iteration's launcher submitted ahead of the test's (its pre-test hooks' job) that are
    /// still queued or running: they serve nothing once the test's job is gone or was never submitted.
    pub(super) async fn cancel_ahead(&self, dir: &Path) {
        if !dir.join(super::script::PRE_HOOK_SCRIPT).exists() {
            return;
        }
        let out = super::run_cmd("squeue", &["-h", "--me", "-o", "%i|%o"]).await;
        for id in super::watch::ahead_jobs(&out.stdout, dir) {
            warn!("Cancelling job {id}, the pre-test hooks the test's launcher submitted ahead of its job");
            let _ = super::run_cmd("scancel", &[&id]).await;
        }
    }
}

/// How long the launcher of the iteration in `dir` may take to print its job's id.
fn patience(dir: &Path) -> Duration {
    if dir.join(super::script::PRE_HOOK_SCRIPT).exists() {
        LAUNCHER_TIMEOUT + AHEAD_WAIT
    } else {
        LAUNCHER_TIMEOUT
    }
}

/// Runs the launcher's command and returns the id of the job it submitted, as soon as one shows (a launcher that
/// stays with its job keeps running). The launcher writes its output into the iteration's directory (not into
/// pipes of ours) and runs in its own process group: a Ctrl-C at the terminal or the death of cloudai never cuts
/// it off between its `sbatch` and the id it prints; its pid file lets a `resume` wait for it ([`recovered`]).
pub(super) async fn by_launcher(login: &Login, dir: &Path) -> Result<JobId, SystemError> {
    let file = |name: &str| {
        std::fs::File::create(dir.join(name)).map_err(|e| {
            SystemError::refused(format!("cannot write {}: {e}", dir.join(name).display()))
        })
    };
    let mut child = tokio::process::Command::new("bash")
        .arg("-c")
        .arg(&login.command)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(file(LAUNCHER_STDOUT)?)
        .stderr(file(LAUNCHER_STDERR)?)
        .process_group(0)
        .spawn()
        .map_err(|e| SystemError::refused(format!("cannot run the test's launcher: {e}")))?;
    if let Some(pid) = child.id() {
        let text: String = std::iter::once(pid.to_string())
            .chain(login.ids_in.iter().cloned())
            .map(|l| l + "\n")
            .collect();
        if let Err(e) = crate::util::fsx::write_atomic(&dir.join(LAUNCHER_PID), text.as_bytes()) {
            warn!("Cannot write {}: {e}", dir.join(LAUNCHER_PID).display());
        }
    }
    let started = Instant::now();
    let patience = patience(dir);
    let status = loop {
        if let Some(id) = latest(&printed(dir, &login.ids_in)) {
            info!("The test's launcher submitted job {id}; it stays with it (pid file {LAUNCHER_PID})");
            return Ok(id);
        }
        match tokio::time::timeout(POLL, child.wait()).await {
            Ok(Ok(s)) => break s,
            Ok(Err(e)) => {
                return Err(SystemError::refused(format!(
                    "the test's launcher failed to run: {e}"
                )))
            }
            Err(_) if started.elapsed() < patience => {}
            Err(_) => {
                let _ = child.kill().await;
                let _ = std::fs::remove_file(dir.join(LAUNCHER_PID));
                return Err(SystemError::refused(format!(
                    "the test's launcher printed no job id within {} minutes (it was stopped); see {}",
                    patience.as_secs() / 60,
                    dir.join(LAUNCHER_STDERR).display()
                )));
            }
        }
    };
    let ids = printed(dir, &login.ids_in);
    let _ = std::fs::remove_file(dir.join(LAUNCHER_PID));
    let Some(id) = latest(&ids) else {
        let (stdout, stderr) = said(dir);
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
            "The test's launcher submitted jobs {}: watching {id}, the latest",
            ids.join(", ")
        );
    }
    Ok(id)
}

/// What the launcher printed (stdout, stderr), as far as it was kept.
fn said(dir: &Path) -> (String, String) {
    (read(dir, LAUNCHER_STDOUT), read(dir, LAUNCHER_STDERR))
}

fn read(dir: &Path, name: &str) -> String {
    std::fs::read(dir.join(name))
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// Every job id the launcher announced: on its stdout, its stderr, and in the files it writes its output to.
fn printed(dir: &Path, ids_in: &[String]) -> Vec<String> {
    let mut ids = Vec::new();
    let names = [LAUNCHER_STDOUT, LAUNCHER_STDERR];
    for name in names
        .iter()
        .copied()
        .chain(ids_in.iter().map(String::as_str))
    {
        for id in job_ids(&read(dir, name)) {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
    }
    ids
}

/// The launcher an earlier call started here, while it runs: its pid (working in this directory) and the files
/// where its job ids show.
fn running_launcher(dir: &Path) -> Option<(u32, Vec<String>)> {
    let text = std::fs::read_to_string(dir.join(LAUNCHER_PID)).ok()?;
    let mut lines = text.lines();
    let pid: u32 = lines.next()?.trim().parse().ok()?;
    let here = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let alive = std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == here);
    alive.then(|| (pid, lines.map(str::to_string).collect()))
}

/// Whether the test's launcher still runs in this iteration's directory.
pub(super) fn launcher_running(dir: &Path) -> bool {
    running_launcher(dir).is_some()
}

/// After a crash: the job a launcher of this iteration submitted (its latest), from what it printed — once a
/// launcher still running from before has shown one or ended (it may be between its `sbatch` and its output).
pub(super) async fn recovered(dir: &Path) -> Option<JobId> {
    let ids_in = running_launcher(dir).map(|(_, f)| f).unwrap_or_default();
    let deadline = Instant::now() + patience(dir);
    let mut said_so = false;
    while launcher_running(dir)
        && latest(&printed(dir, &ids_in)).is_none()
        && Instant::now() < deadline
    {
        if !said_so {
            info!(
                "The test's launcher started before the crash still runs in {}: waiting for its job id",
                dir.display()
            );
            said_so = true;
        }
        tokio::time::sleep(POLL).await;
    }
    if !launcher_running(dir) {
        let _ = std::fs::remove_file(dir.join(LAUNCHER_PID));
    }
    latest(&printed(dir, &ids_in))
}

/// A job the iteration's launcher submitted after `current` (its retry), while the launcher still runs; `seen`
/// keeps what was read of its files, so each poll reads only what they gained.
pub(super) fn next_job(dir: &Path, current: &str, seen: &mut IdScan) -> Option<JobId> {
    let (_, ids_in) = running_launcher(dir)?;
    let names: Vec<&str> = [LAUNCHER_STDOUT, LAUNCHER_STDERR]
        .into_iter()
        .chain(ids_in.iter().map(String::as_str))
        .collect();
    latest(&later(seen.update(dir, &names), current))
}

/// The job ids a launcher's files announced so far, read incrementally: a long training's log is read once, not
/// at every poll.
#[derive(Clone, Debug, Default)]
pub(super) struct IdScan {
    /// Bytes of each file read so far (up to its last complete line).
    read: std::collections::HashMap<String, u64>,
    ids: Vec<String>,
}

impl IdScan {
    /// Reads what each file gained since the last call (its complete lines; a file that shrank is read again from
    /// its start) and returns every id announced so far.
    pub(super) fn update(&mut self, dir: &Path, names: &[&str]) -> &[String] {
        use std::io::{Read, Seek, SeekFrom};
        for name in names {
            let Ok(mut f) = std::fs::File::open(dir.join(name)) else {
                continue;
            };
            let len = f.metadata().map(|m| m.len()).unwrap_or(0);
            let mut at = self.read.get(*name).copied().unwrap_or(0);
            if len < at {
                at = 0;
            }
            let mut buf = Vec::new();
            if f.seek(SeekFrom::Start(at)).is_err() || f.read_to_end(&mut buf).is_err() {
                continue;
            }
            let Some(end) = buf.iter().rposition(|b| *b == b'\n') else {
                continue;
            };
            for id in job_ids(&String::from_utf8_lossy(&buf[..=end])) {
                if !self.ids.contains(&id) {
                    self.ids.push(id);
                }
            }
            self.read.insert(name.to_string(), at + end as u64 + 1);
        }
        &self.ids
    }
}

/// At the end of an iteration (or when it is cancelled, with no grace): waits up to `grace` for a launcher still
/// running here to end, then stops its process group (TERM, then KILL), so that nothing of the iteration is left
/// running and it submits nothing more. Returns every job id it announced.
pub(super) async fn launcher_done(dir: &Path, grace: Duration) -> Vec<JobId> {
    let Some((pid, ids_in)) = running_launcher(dir) else {
        let _ = std::fs::remove_file(dir.join(LAUNCHER_PID));
        return printed(dir, &[]);
    };
    let deadline = Instant::now() + grace;
    while launcher_running(dir) && Instant::now() < deadline {
        tokio::time::sleep(POLL).await;
    }
    for (sig, wait) in [
        (libc::SIGTERM, Duration::from_secs(10)),
        (libc::SIGKILL, Duration::from_secs(2)),
    ] {
        if !launcher_running(dir) {
            break;
        }
        crate::debug!(
            "Stopping the test's launcher (pid {pid}, its process group) with signal {sig}"
        );
        // its own process group: the launcher and what it started
        unsafe {
            libc::kill(-(pid as i32), sig);
        }
        let until = Instant::now() + wait;
        while launcher_running(dir) && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let _ = std::fs::remove_file(dir.join(LAUNCHER_PID));
    printed(dir, &ids_in)
}

/// The ids in `ids` above `current` (jobs submitted after it).
pub(super) fn later(ids: &[JobId], current: &str) -> Vec<JobId> {
    let now: u64 = current.parse().unwrap_or(u64::MAX);
    ids.iter()
        .filter(|id| id.parse::<u64>().is_ok_and(|n| n > now))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_read_once_and_a_line_only_when_complete() {
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join("log.txt");
        let mut scan = IdScan::default();
        std::fs::write(&log, "- Job id: 7\n- Job id: 8").unwrap();
        assert_eq!(scan.update(d.path(), &["log.txt", "missing.txt"]), ["7"]);
        let read = scan.read["log.txt"];
        std::fs::write(&log, "- Job id: 7\n- Job id: 8\nstep 1\n").unwrap();
        assert_eq!(scan.update(d.path(), &["log.txt"]), ["7", "8"]);
        assert!(scan.read["log.txt"] > read);
        // a file written anew (shorter) is read from its start
        std::fs::write(&log, "Job id: 9\n").unwrap();
        assert_eq!(scan.update(d.path(), &["log.txt"]), ["7", "8", "9"]);
    }

    #[test]
    fn the_latest_job_is_the_highest_id() {
        assert_eq!(
            latest(&["9".into(), "12".into(), "10".into()]),
            Some("12".into())
        );
        assert_eq!(
            later(&["9".into(), "12".into(), "10".into()], "9"),
            ["12", "10"]
        );
    }
}
