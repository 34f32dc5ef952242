//! Standalone: each iteration is a local `bash -c` in its own process group, so cancelling kills everything it
//! started.

use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;

use super::{JobId, JobState, Prepared, System};
use crate::config::system::SystemConfig;
use crate::scenario::TestRun;
use crate::workloads::JobOutcome;

/// How long a job has between SIGTERM and SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(3);

pub struct Standalone {
    cfg: Arc<SystemConfig>,
    jobs: Arc<Mutex<HashMap<JobId, Job>>>,
    wake: Arc<Notify>,
}

struct Job {
    pgid: i32,
    outcome: Option<JobOutcome>,
}

impl Standalone {
    pub fn new(cfg: Arc<SystemConfig>) -> Self {
        Self {
            cfg,
            jobs: Arc::default(),
            wake: Arc::new(Notify::new()),
        }
    }
}

fn killpg(pgid: i32, sig: i32) {
    // SAFETY: plain syscall on a process group we created; errors (already gone) are irrelevant.
    unsafe {
        libc::killpg(pgid, sig);
    }
}

#[async_trait]
impl System for Standalone {
    fn runner_name(&self) -> &'static str {
        "StandaloneRunner"
    }

    fn prepare(&self, run: &TestRun, _iteration: u64, dir: &Path) -> Result<Prepared, String> {
        let cmd = crate::workloads::full_command(run.workload, &run.test);
        let full = if run.pre_test.is_some() || run.post_test.is_some() {
            with_hooks(run, dir, &cmd)
        } else {
            cmd.clone()
        };
        Ok(Prepared {
            test_cmd: cmd,
            full_cmd: full,
            files: Vec::new(),
            env: super::job_env(&self.cfg, run),
        })
    }

    async fn submit(
        &self,
        run: &TestRun,
        dir: &Path,
        job: &Prepared,
        dry_run: bool,
    ) -> Result<JobId, String> {
        crate::info!("Executing command for test {}: {}", run.id, job.full_cmd);
        if dry_run {
            return Ok("0".into());
        }
        let open = |name: &str| {
            std::fs::File::create(dir.join(name))
                .map_err(|e| format!("cannot create {}: {e}", dir.join(name).display()))
        };
        let mut cmd = tokio::process::Command::new("bash");
        cmd.arg("-c")
            .arg(&job.full_cmd)
            .envs(job.env.iter().map(|(k, v)| (k, v)))
            .env("CLOUDAI_OUTPUT_DIR", dir)
            .stdin(Stdio::null())
            .stdout(open("stdout.txt")?)
            .stderr(open("stderr.txt")?)
            .process_group(0)
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| format!("cannot start bash: {e}"))?;
        let pid = child
            .id()
            .ok_or("the process exited before it could be tracked")? as i32;
        let id = pid.to_string();
        self.jobs.lock().unwrap().insert(
            id.clone(),
            Job {
                pgid: pid,
                outcome: None,
            },
        );
        let (jobs, wake, key) = (self.jobs.clone(), self.wake.clone(), id.clone());
        tokio::spawn(async move {
            let status = child.wait().await;
            // Reap anything the command left behind in its group.
            killpg(pid, libc::SIGKILL);
            let outcome = match status {
                Ok(s) => {
                    use std::os::unix::process::ExitStatusExt;
                    JobOutcome {
                        exit_code: s.code(),
                        signal: s.signal(),
                        ..Default::default()
                    }
                }
                Err(_) => JobOutcome::default(),
            };
            if let Some(j) = jobs.lock().unwrap().get_mut(&key) {
                j.outcome = Some(outcome);
            }
            wake.notify_one();
        });
        Ok(id)
    }

    async fn poll(&self, ids: &[JobId]) -> Vec<JobState> {
        let jobs = self.jobs.lock().unwrap();
        ids.iter()
            .map(|id| match jobs.get(id).and_then(|j| j.outcome.clone()) {
                Some(o) => JobState::Finished(o),
                None if jobs.contains_key(id) => JobState::Running,
                None => JobState::Finished(JobOutcome::default()),
            })
            .collect()
    }

    async fn cancel(&self, id: &JobId) -> Result<(), String> {
        let pgid = {
            let jobs = self.jobs.lock().unwrap();
            match jobs.get(id) {
                Some(j) if j.outcome.is_none() => j.pgid,
                _ => return Ok(()),
            }
        };
        killpg(pgid, libc::SIGTERM);
        let jobs = self.jobs.clone();
        let key = id.clone();
        tokio::spawn(async move {
            tokio::time::sleep(KILL_GRACE).await;
            let alive = jobs
                .lock()
                .unwrap()
                .get(&key)
                .is_some_and(|j| j.outcome.is_none());
            if alive {
                killpg(pgid, libc::SIGKILL);
            }
        });
        Ok(())
    }

    fn nodes(&self, _id: &JobId) -> Vec<String> {
        vec![hostname()]
    }

    fn wakeup(&self) -> Option<Arc<Notify>> {
        Some(self.wake.clone())
    }
}

impl Drop for Standalone {
    fn drop(&mut self) {
        if let Ok(jobs) = self.jobs.lock() {
            for j in jobs.values().filter(|j| j.outcome.is_none()) {
                killpg(j.pgid, libc::SIGKILL);
            }
        }
    }
}

/// The command wrapped by its hooks, as on Slurm: pre-tests (outputs in `pre_test/<test>/`), the test only if
/// every pre-test succeeded, then the post-tests. A skipped test exits 1 with the reason on stderr.
fn with_hooks(run: &TestRun, dir: &Path, main: &str) -> String {
    let hook = |kind: &str, tr: &TestRun| {
        let d = dir.join(kind).join(&tr.test.name);
        let env: String = tr
            .test
            .extra_env_vars
            .iter()
            .map(|(k, v)| format!("{k}={} ", shell_quote(&v.py_str())))
            .collect();
        let cmd = crate::workloads::full_command(tr.workload, &tr.test);
        let line = format!(
            "mkdir -p {0} && ( {env}bash -c {1} ) > {0}/stdout.txt 2> {0}/stderr.txt",
            shell_quote(&d.display().to_string()),
            shell_quote(&cmd)
        );
        let check = tr.workload.hook_check(&d);
        (
            line,
            if check.is_empty() {
                "[ $? -eq 0 ] && echo 1 || echo 0".to_string()
            } else {
                check
            },
        )
    };
    let mut lines = Vec::new();
    if let Some(pre) = &run.pre_test {
        lines.extend(super::pre_test_lines(
            pre.test_runs.iter().map(|tr| hook("pre_test", tr)),
        ));
        lines.push("if [ $PRE_TEST_SUCCESS -ne 1 ]; then echo 'cloudai: a pre-test failed, the test was not run' >&2; exit 1; fi".into());
    }
    lines.push(format!("{main}\nSTATUS=$?"));
    for tr in run.post_test.iter().flat_map(|h| h.test_runs.iter()) {
        lines.push(hook("post_test", tr).0);
    }
    lines.push("exit $STATUS".into());
    lines.join("\n")
}

fn shell_quote(s: &str) -> String {
    crate::util::shell::quote(s).into_owned()
}

pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}
