//! Standalone: each iteration is a local `bash -c` in its own process group, so cancelling kills everything it
//! started.

use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;

use super::{JobId, JobState, Prepared, Settings, System, SystemError};
use crate::config::system::{SystemConfig, SystemKind};
use crate::scenario::TestRun;
use crate::workloads::JobOutcome;

/// How long a job has between SIGTERM and SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(3);

pub struct Standalone {
    cfg: Arc<SystemConfig>,
    /// GPUs of this machine, found once.
    gpus: std::sync::OnceLock<u64>,
    jobs: Arc<Mutex<HashMap<JobId, Job>>>,
    wake: Arc<Notify>,
    /// `run --detach`: the jobs and what they started outlive us.
    released: std::sync::atomic::AtomicBool,
}

struct Job {
    pgid: i32,
    outcome: Option<JobOutcome>,
}

/// The job wrappers' pids (each leads its own group): waited for by their own tasks, never by the orphan sweep.
fn wrappers(jobs: &HashMap<String, Job>) -> std::collections::HashSet<i32> {
    jobs.values().map(|j| j.pgid).collect()
}

impl Standalone {
    pub fn new(cfg: Arc<SystemConfig>) -> Self {
        Self {
            cfg,
            gpus: std::sync::OnceLock::new(),
            jobs: Arc::default(),
            wake: Arc::new(Notify::new()),
            released: Default::default(),
        }
    }

    fn gpus(&self) -> u64 {
        *self.gpus.get_or_init(|| match &self.cfg.kind {
            SystemKind::Standalone(s) => s.gpus(),
            _ => 1,
        })
    }
}

/// The test as this machine runs it: MPI ranks, one per GPU group of the machine, under a local `mpirun` (as on
/// one Slurm node); one rank, or any other layout, as a plain process.
fn local_command(run: &TestRun, launch: &crate::workloads::Launch, gpus: u64) -> String {
    if launch.needs_launcher(1, gpus) {
        launch.local_mpirun(&run.test, gpus)
    } else {
        crate::workloads::full_command(launch, &run.test)
    }
}

/// What runs: the workload's own script when it wrote one, else `full_cmd`.
fn runs(job: &Prepared) -> &str {
    job.runs.as_deref().unwrap_or(&job.full_cmd)
}

/// The job's pid, written by its wrapper first thing (for `resume` after a kill between spawn and journal).
const PID_FILE: &str = ".cloudai-job";
/// The job's exit status, written by its wrapper last: read by `resume` when nobody was waiting for it.
const EXIT_FILE: &str = ".cloudai-exit";

/// The command in a wrapper that leaves its pid and exit status in the iteration directory, so a job that
/// outlives cloudai (kill -9) can be re-attached; a command killed by a signal ends the wrapper the same way.
fn wrapped(cmd: &str, dir: &Path) -> String {
    let d = crate::util::shell::quote(&dir.display().to_string()).into_owned();
    format!(
        "echo $$ > {d}/{PID_FILE}\n(\n{cmd}\n)\nrc=$?\necho $rc > {d}/{EXIT_FILE}\n\
         if [ $rc -gt 128 ]; then kill -$((rc - 128)) $$; fi\nexit $rc"
    )
}

/// Whether any process of the group is alive.
fn group_alive(pgid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence
    unsafe { libc::killpg(pgid, 0) == 0 }
}

/// Whether the process group a record names (its job id) still lives.
pub(crate) fn recorded_alive(id: &str) -> bool {
    id.parse().is_ok_and(group_alive)
}

/// The recorded jobs (process groups) that no longer live; one that lives says nothing more (`cloudai status`).
pub fn live(ids: &[&str]) -> std::collections::HashMap<String, super::Live> {
    ids.iter()
        .filter(|id| !recorded_alive(id))
        .map(|id| (id.to_string(), super::Live::Gone("ended (not collected)")))
        .collect()
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

    fn check(&self, run: &TestRun) -> Vec<String> {
        run.launch()
            .shape_problem(&run.id, 1, self.gpus())
            .into_iter()
            .collect()
    }

    fn prepare(&self, run: &TestRun, _iteration: u64, dir: &Path) -> Result<Prepared, SystemError> {
        let gpus = self.gpus();
        let env = super::job_env(&self.cfg, run);
        if run.workload.needs() == crate::workloads::Needs::Local {
            let at = crate::workloads::local::LocalAt {
                install: &self.cfg.install_path,
                dir,
            };
            let job = run.workload.local_job(&run.test, &at).ok_or_else(|| {
                SystemError::refused(format!("test {} writes no script to run", run.id))
            })?;
            let runs = if run.pre_test.is_some() || run.post_test.is_some() {
                with_hooks(run, dir, &job.runs, gpus)
            } else {
                job.runs
            };
            return Ok(Prepared {
                test_cmd: job.test_cmd,
                full_cmd: job.full_cmd,
                files: job.files,
                env,
                submit: None,
                runs: Some(runs),
            });
        }
        let launch = run.launch();
        // the workload's own command; full_cmd is how this machine runs it
        let mut test_cmd = crate::workloads::full_command(&launch, &run.test);
        let mut cmd = local_command(run, &launch, gpus);
        if launch.shell_env {
            test_cmd = with_exports(&env, &test_cmd);
            cmd = format!(
                "{test_cmd} > {} 2> {}",
                shell_quote(&dir.join("stdout.txt").display().to_string()),
                shell_quote(&dir.join("stderr.txt").display().to_string())
            );
        }
        let full = if run.pre_test.is_some() || run.post_test.is_some() {
            with_hooks(run, dir, &cmd, gpus)
        } else {
            cmd.clone()
        };
        Ok(Prepared {
            test_cmd,
            full_cmd: full,
            files: Vec::new(),
            env,
            submit: None,
            runs: None,
        })
    }

    fn settings(&self) -> Settings {
        Settings::of(&self.cfg)
    }

    fn would_submit(&self, run: &TestRun, _dir: &Path, job: &Prepared) -> JobId {
        crate::info!("Executing command for test {}: {}", run.id, runs(job));
        "0".into()
    }

    async fn submit(
        &self,
        run: &TestRun,
        dir: &Path,
        job: &Prepared,
    ) -> Result<JobId, SystemError> {
        crate::info!("Executing command for test {}: {}", run.id, runs(job));
        let open = |name: &str| {
            std::fs::File::create(dir.join(name))
                .map_err(|e| format!("cannot create {}: {e}", dir.join(name).display()))
        };
        let mut cmd = tokio::process::Command::new("bash");
        cmd.arg("-c")
            .arg(wrapped(runs(job), dir))
            .envs(job.env.iter().map(|(k, v)| (k, v)))
            .env("CLOUDAI_OUTPUT_DIR", dir)
            // our own secrets are for the schedulers' APIs, never for the tests' processes
            .env_remove("RUNAI_APP_SECRET")
            .stdin(Stdio::null())
            .stdout(open("stdout.txt")?)
            .stderr(open("stderr.txt")?)
            .process_group(0)
            // no kill_on_drop: dropping the system kills the whole group, and a detached job must outlive us
            .kill_on_drop(false);
        // what the job leaves outside its group comes back to us (super::orphans)
        super::orphans::become_subreaper();
        // spawned and tracked under the lock: the orphan sweep never takes a new wrapper for a stray
        let mut tracked = self.jobs.lock().unwrap();
        let mut child = cmd.spawn().map_err(|e| format!("cannot start bash: {e}"))?;
        let pid = child
            .id()
            .ok_or("the process exited before it could be tracked")? as i32;
        let id = pid.to_string();
        tracked.insert(
            id.clone(),
            Job {
                pgid: pid,
                outcome: None,
            },
        );
        drop(tracked);
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
            {
                let mut g = jobs.lock().unwrap();
                if let Some(j) = g.get_mut(&key) {
                    j.outcome = Some(outcome);
                }
                // strays of ended jobs that exited by themselves: reaped, never left as zombies
                super::orphans::reap(&wrappers(&g));
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

    async fn cancel(&self, id: &JobId) -> Result<(), SystemError> {
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

    async fn attach(
        &self,
        _run: &TestRun,
        dir: &Path,
        id: &JobId,
        _job: &Prepared,
    ) -> Result<(), SystemError> {
        let pgid: i32 = id
            .parse()
            .map_err(|_| format!("{id:?} is not a process id"))?;
        if !group_alive(pgid) && !dir.join(EXIT_FILE).exists() {
            return Err(SystemError::gone(format!(
                "process group {pgid} is gone and left no exit status in {}",
                dir.display()
            )));
        }
        self.jobs.lock().unwrap().insert(
            id.clone(),
            Job {
                pgid,
                outcome: None,
            },
        );
        let (jobs, wake, key, dir) = (
            self.jobs.clone(),
            self.wake.clone(),
            id.clone(),
            dir.to_path_buf(),
        );
        // not our child: watch the group until it is gone, then read the status its wrapper wrote
        tokio::spawn(async move {
            while group_alive(pgid) {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let rc = std::fs::read_to_string(dir.join(EXIT_FILE))
                .ok()
                .and_then(|t| t.trim().parse::<i32>().ok());
            let outcome = match rc {
                Some(rc) if rc > 128 => JobOutcome {
                    signal: Some(rc - 128),
                    ..Default::default()
                },
                Some(rc) => JobOutcome {
                    exit_code: Some(rc),
                    ..Default::default()
                },
                None => JobOutcome {
                    failure: Some("the job ended unwatched and left no exit status".into()),
                    ..Default::default()
                },
            };
            if let Some(j) = jobs.lock().unwrap().get_mut(&key) {
                j.outcome = Some(outcome);
            }
            wake.notify_one();
        });
        Ok(())
    }

    async fn find_submitted(&self, _run: &TestRun, dir: &Path) -> Option<JobId> {
        let pid = std::fs::read_to_string(dir.join(PID_FILE)).ok()?;
        let pid = pid.trim().parse::<i32>().ok()?;
        (group_alive(pid) || dir.join(EXIT_FILE).exists()).then(|| pid.to_string())
    }

    fn nodes(&self, _id: &JobId) -> Vec<String> {
        vec![crate::util::hostname()]
    }

    fn release(&self) {
        // dropping the system kills what it tracks; detached jobs (and what they started) must outlive us
        self.jobs.lock().unwrap().clear();
        self.released
            .store(true, std::sync::atomic::Ordering::SeqCst);
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
            // what the jobs left outside their groups (`setsid cmd &`) ends with the run
            if !self.released.load(std::sync::atomic::Ordering::SeqCst) {
                super::orphans::end_all(&wrappers(&jobs));
            }
        }
    }
}

/// The command wrapped by its hooks, as on Slurm: pre-tests (outputs in `pre_test/<test>/`), the test only if
/// every pre-test succeeded, then the post-tests. A skipped test exits 1 with the reason on stderr.
fn with_hooks(run: &TestRun, dir: &Path, main: &str, gpus: u64) -> String {
    let hook = |kind: &str, tr: &TestRun| {
        let d = dir.join(kind).join(&tr.test.name);
        let env: String = tr
            .test
            .extra_env_vars
            .iter()
            .map(|(k, v)| format!("{k}={} ", shell_quote(&v.py_str())))
            .collect();
        let launch = tr.launch();
        let cmd = local_command(tr, &launch, gpus);
        let line = format!(
            "mkdir -p {0} && ( {env}bash -c {1} ) > {0}/stdout.txt 2> {0}/stderr.txt",
            shell_quote(&d.display().to_string()),
            shell_quote(&cmd)
        );
        let check = launch.shell_check(&d.join("stdout.txt"));
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

/// `export A="1"; export B="2"; <cmd>`: the job's environment on the command line, as CloudAI writes it for a
/// workload that asks for it ([`crate::workloads::Launch::shell_env`]); a value the double quotes would not keep
/// as is gets single quotes.
fn with_exports(env: &[(String, String)], cmd: &str) -> String {
    if env.is_empty() {
        return cmd.to_string();
    }
    let exports: Vec<String> = env
        .iter()
        .map(|(k, v)| crate::util::shell::export(k, v))
        .collect();
    format!("{}; {cmd}", exports.join("; "))
}

fn shell_quote(s: &str) -> String {
    crate::util::shell::quote(s).into_owned()
}

/// Standalone's answers to find-bad-nodes: it runs on this host only, so it cannot pin a job to nodes.
pub(crate) struct Fleet;

impl crate::systems::fleet::Fleet for Fleet {
    fn name(&self) -> &'static str {
        "standalone"
    }

    fn unpinnable(&self) -> Option<String> {
        Some(
            "find-bad-nodes runs on Slurm (jobs pinned with --nodelist), Run:ai and Kubernetes (node affinity); \
             standalone cannot pin a job to nodes"
                .into(),
        )
    }

    fn nodes(
        &self,
        named: Option<Vec<String>>,
        _rt: &tokio::runtime::Runtime,
    ) -> Result<(Vec<String>, crate::systems::fleet::OutOfService), String> {
        named
            .map(|n| (n, Vec::new()))
            .ok_or_else(|| "give --nodes (the system file lists no nodes)".into())
    }
}
