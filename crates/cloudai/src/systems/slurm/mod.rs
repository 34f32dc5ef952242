//! Slurm: sbatch scripts as CloudAI writes them, submitted with `sbatch --parsable`, watched with one `squeue`
//! call per poll for all our jobs (then `sacct` for the final state), cancelled with `scancel`.

mod collect;
pub mod fleet;
mod follow;
mod foreign;
pub mod nodes;
mod poll;
pub mod quarantine;
pub mod script;
mod single;
mod state;
mod submit;
pub use foreign::foreign_job;
mod watch;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;

use super::{JobId, JobState, Prepared, Settings, System, SystemError};
use crate::config::system::{SlurmConfig, SystemConfig, SystemKind};
use crate::results::record::Attempt;
use crate::scenario::TestRun;
use crate::{debug, info, warn};
mod cmd;
pub use cmd::*;

/// A Slurm command that takes longer than this is treated as failed (the controller is overloaded or gone).
const CMD_TIMEOUT: Duration = Duration::from_secs(60);
/// `scontrol show config` only decides the GPU directives, and an unreachable controller counts as "yes":
/// do not let a dry-run wait on scontrol's own retries.
const GRES_CHECK_TIMEOUT: Duration = Duration::from_secs(3);
/// Polls after a job left the queue during which sacct may still lack its record (slurmdbd lags).
const SACCT_PATIENCE: u32 = 30;

pub struct Slurm {
    cfg: Arc<SystemConfig>,
    install: PathBuf,
    /// Set by `connect`: before it (a dry-run), facts come from the config alone.
    connected: AtomicBool,
    gpu_directives: OnceLock<bool>,
    jobs: Mutex<HashMap<JobId, Tracked>>,
    /// The runner's id of a job → the job its launcher submitted in its place (`follow.rs`).
    aliases: Mutex<HashMap<JobId, JobId>>,
}

#[derive(Default)]
struct Tracked {
    dir: PathBuf,
    /// `#SBATCH --job-name`: sacct rows must carry it (ids get reused, and slurmdbd briefly holds a placeholder
    /// record named "allocation" right after a short job ends).
    job_name: String,
    full_cmd: String,
    test_cmd: String,
    /// Polls since the job left squeue without a final sacct state.
    misses: u32,
    nodes: Vec<String>,
    /// The node list (compressed) while it was last seen running: a job that goes back to PENDING was requeued.
    running_on: Option<String>,
    /// Slurm's restart count when last seen: it grows with every requeue.
    restarts: u32,
    /// Every run of the job, from `sacct --duplicates` once it ended.
    attempts: Vec<Attempt>,
    /// Runs of the jobs this one replaced (its launcher submitted it again after they ended).
    earlier: Vec<Attempt>,
    /// When the job was first seen ended while its launcher still ran.
    ended_at: Option<std::time::Instant>,
    /// cloudai cancelled it: a job its launcher submits again is cancelled too.
    cancelled: bool,
    /// What was read of its launcher's files for the job ids it announced.
    launcher_ids: submit::IdScan,
}

/// The job name written into the batch script.
impl Slurm {
    fn track(&self, id: &str, dir: &Path, job: &Prepared) {
        self.jobs.lock().unwrap().insert(
            id.to_string(),
            Tracked {
                dir: dir.to_path_buf(),
                job_name: job_name_of(job),
                full_cmd: job.full_cmd.clone(),
                test_cmd: job.test_cmd.clone(),
                ..Tracked::default()
            },
        );
    }
}

fn job_name_of(job: &Prepared) -> String {
    job.files
        .iter()
        .find(|(n, _)| n == script::SCRIPT)
        .and_then(|(_, text)| {
            text.lines()
                .find_map(|l| l.strip_prefix("#SBATCH --job-name="))
        })
        .unwrap_or_default()
        .to_string()
}

const METADATA_SCRIPT: &str = include_str!("slurm-metadata.sh");

impl Slurm {
    pub fn new(cfg: Arc<SystemConfig>) -> Self {
        let install =
            std::path::absolute(&cfg.install_path).unwrap_or_else(|_| cfg.install_path.clone());
        Self {
            cfg,
            install,
            connected: AtomicBool::new(false),
            gpu_directives: OnceLock::new(),
            jobs: Mutex::default(),
            aliases: Mutex::default(),
        }
    }

    fn slurm(&self) -> &SlurmConfig {
        match &self.cfg.kind {
            SystemKind::Slurm(s) => s,
            _ => unreachable!("Slurm system built from a non-slurm config"),
        }
    }

    /// `--gpus-per-node`/`--gres` only where the cluster has a gpu GresType. An unreachable `scontrol` counts as
    /// yes, as in CloudAI; so does a dry-run (`supports_gpu_directives_cache` decides there). Asked once per process.
    fn gpu_directives(&self) -> bool {
        *self.gpu_directives.get_or_init(|| {
            if let Some(v) = self.slurm().supports_gpu_directives_cache {
                return v;
            }
            if self.slurm().gpus_per_node.is_none() {
                return false;
            }
            // Unconnected (a dry-run), facts come from the system TOML only: it must not wait on a controller.
            if !self.connected.load(Ordering::Relaxed) {
                return true;
            }
            let out = run_blocking("scontrol", &["show", "config"], GRES_CHECK_TIMEOUT);
            if !out.ok || !out.stderr.is_empty() {
                debug!("Error checking GPU support: {}", out.stderr);
                return true;
            }
            out.stdout
                .lines()
                .any(|l| l.contains("GresTypes") && l.contains("gpu"))
        })
    }

    fn resolve_nodes(&self, run: &TestRun) -> Result<Vec<String>, String> {
        if run.nodes.is_empty() {
            return Ok(Vec::new());
        }
        let needs_states = run.nodes.iter().any(|n| n.contains(':'));
        let states = if needs_states && self.connected.load(Ordering::Relaxed) {
            let out = run_blocking(
                "sinfo",
                &["-h", "-N", "-o", "%N|%t"],
                Duration::from_secs(10),
            );
            if !out.ok {
                return Err(format!(
                    "cannot read node states with sinfo: {}",
                    out.stderr
                ));
            }
            Some(nodes::parse_sinfo(&out.stdout))
        } else {
            None
        };
        nodes::resolve(
            self.slurm(),
            &run.nodes,
            &run.exclude_nodes,
            states.as_ref(),
        )
    }

    /// Our node-facts script, written where the batch script expects it.
    fn install_metadata_script(&self) -> std::io::Result<()> {
        let path = self.install.join("slurm-metadata.sh");
        if std::fs::read_to_string(&path).is_ok_and(|s| s == METADATA_SCRIPT) {
            return Ok(());
        }
        std::fs::create_dir_all(&self.install)?;
        crate::util::fsx::write_atomic(&path, METADATA_SCRIPT.as_bytes())
    }

    async fn sacct(&self, ids: &[&str], flags: &[&str]) -> Option<Vec<state::AcctRow>> {
        let joined = ids.join(",");
        let mut args = flags.to_vec();
        args.extend(["-n", "-P", "-j", &joined, "-o", state::SACCT_FORMAT]);
        let out = run_cmd("sacct", &args).await;
        if !out.ok {
            warn!("sacct failed: {}", out.stderr);
            return None;
        }
        Some(state::parse_sacct(&out.stdout))
    }
}

#[async_trait]
impl System for Slurm {
    fn runner_name(&self) -> &'static str {
        "SlurmRunner"
    }

    /// A process that drives more GPUs than a node has (the workload's GPUs per process above `gpus_per_node`) is refused
    /// before anything is submitted; `gpus_per_node` unset or 0 manages no GPUs.
    fn check(&self, run: &TestRun) -> Vec<String> {
        let launch = run.launch();
        match self.slurm().gpus_per_node {
            Some(g) if g > 0 && launch.gpus_per_rank > g => vec![format!(
                "test '{}': one process drives {} GPUs but the system has gpus_per_node = \
                 {g}; lower the GPUs per process or set gpus_per_node in the system",
                run.id, launch.gpus_per_rank
            )],
            _ => Vec::new(),
        }
    }

    fn prepare(&self, run: &TestRun, iteration: u64, dir: &Path) -> Result<Prepared, SystemError> {
        let nodes = self.resolve_nodes(run)?;
        let timestamp = chrono::Local::now().format("%Y%m%d_%H%M%S").to_string();
        let ctx = script::Ctx {
            sys: &self.cfg,
            slurm: self.slurm(),
            install: &self.install,
            gpu_directives: self.gpu_directives(),
            timestamp: &timestamp,
        };
        // what the tests it starts after left, taken now that they have ended (a benchmark's traffic matrix)
        let handed = run
            .workload
            .handed(&run.test, &run.post_comp_dirs(dir))
            .map_err(|e| SystemError::refused(format!("test '{}': {e}", run.id)))?
            .map(|test| TestRun {
                test,
                ..run.clone()
            });
        let g = ctx.generate(handed.as_ref().unwrap_or(run), iteration, dir, &nodes);
        if let Some(steps) = &g.steps {
            script::make_mount_sources(steps, dir).map_err(SystemError::refused)?;
        }
        if g.files.iter().any(|(n, _)| n == script::PRE_HOOK_SCRIPT) {
            // the pre-hook job's output goes there: Slurm does not make it
            std::fs::create_dir_all(dir.join(script::PRE_HOOK_DIR))
                .map_err(|e| SystemError::refused(format!("cannot make {}: {e}", dir.display())))?;
        }
        Ok(Prepared {
            test_cmd: g.test_cmd,
            full_cmd: g.full_cmd,
            files: g.files,
            env: super::job_env(&self.cfg, run),
            submit: g.submit,
            runs: None,
        })
    }

    fn settings(&self) -> Settings {
        Settings {
            single_job: true,
            ..Settings::of(&self.cfg)
        }
    }

    /// The batch script (`attach` reads the job name from it).
    fn job_files(&self) -> &'static [&'static str] {
        &[script::SCRIPT]
    }

    fn single_job(
        &self,
        scenario: &str,
        root: &Path,
        items: &[(&TestRun, u64, &Path, &Prepared)],
    ) -> Option<Prepared> {
        Some(single::script(self.slurm(), scenario, root, items))
    }

    /// A launcher that submits its own job runs pre-test hooks only when it takes them as a job of their own
    /// ahead of its job, and post-test hooks never (a dry-run writes what CloudAI writes, which leaves them out).
    fn run_checks(&self, run: &TestRun) -> Vec<String> {
        if run.workload.needs() != crate::workloads::Needs::Submit {
            return Vec::new();
        }
        let hooks = match (&run.pre_test, &run.post_test) {
            (_, Some(_)) => "post_test",
            (Some(_), None) if !run.workload.pre_test_job() => "pre_test",
            _ => return Vec::new(),
        };
        vec![format!(
            "test '{}': its own launcher submits the job, so there is no batch script of ours to run {hooks} \
             hooks in; run the hooks as tests of their own",
            run.id
        )]
    }

    /// Slurm is asked for facts (GPU directives, node states) only from here on.
    async fn connect(&self) -> Result<(), SystemError> {
        self.connected.store(true, Ordering::Relaxed);
        Ok(())
    }

    fn would_submit(&self, _run: &TestRun, dir: &Path, job: &Prepared) -> JobId {
        match &job.submit {
            Some(_) => info!(
                "Dry-run: would run the test's own launcher on this node ({})",
                dir.display()
            ),
            None => info!(
                "Dry-run: would submit {} with sbatch",
                dir.join(script::SCRIPT).display()
            ),
        }
        "0".into()
    }

    async fn submit(
        &self,
        _run: &TestRun,
        dir: &Path,
        job: &Prepared,
    ) -> Result<JobId, SystemError> {
        if let Some(cmd) = &job.submit {
            let id = match submit::by_launcher(cmd, dir).await {
                Ok(id) => id,
                Err(e) => {
                    self.cancel_ahead(dir).await;
                    return Err(e);
                }
            };
            info!("Submitted slurm job: {id}");
            self.track(&id, dir, job);
            return Ok(id);
        }
        self.install_metadata_script()
            .and_then(|_| std::fs::create_dir_all(dir.join("metadata")))
            .map_err(|e| format!("cannot prepare {}: {e}", dir.display()))?;
        let script = dir.join(script::SCRIPT);
        let script = script.to_string_lossy();
        let out = run_cmd("sbatch", &["--parsable", &script]).await;
        if !out.ok {
            let msg = format!("sbatch rejected {script}: {}", out.stderr);
            // the controller was never reached, so no job exists: asking again is safe (a timeout is not: the
            // job may have been queued while the answer was lost)
            return Err(
                if out.stderr.contains("Unable to contact slurm controller") {
                    SystemError::transient(msg)
                } else {
                    SystemError::refused(msg)
                },
            );
        }
        let id = out
            .stdout
            .trim()
            .split(';')
            .next()
            .unwrap_or("")
            .to_string();
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_digit()) {
            return Err(format!(
                "sbatch gave no job id (stdout: {:?}, stderr: {:?})",
                out.stdout.trim(),
                out.stderr
            )
            .into());
        }
        info!("Submitted slurm job: {id}");
        self.track(&id, dir, job);
        Ok(id)
    }

    async fn attach(
        &self,
        _run: &TestRun,
        dir: &Path,
        id: &JobId,
        job: &Prepared,
    ) -> Result<(), SystemError> {
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_digit()) {
            return Err(format!("{id:?} is not a Slurm job id").into());
        }
        // polling finds it queued, running or (through sacct) ended while nobody watched
        self.track(id, dir, job);
        Ok(())
    }

    /// The job a test's own launcher said it submitted here (after waiting for a launcher still running from
    /// before); else a job whose batch script lies in this iteration's directory (`squeue -o %o` shows the script
    /// path: ours, or the one a launcher wrote under it), still queued or running.
    async fn find_submitted(&self, _run: &TestRun, dir: &Path) -> Option<JobId> {
        if let Some(id) = submit::recovered(dir).await {
            return Some(id);
        }
        let out = run_cmd("squeue", &["-h", "--me", "-o", "%i|%o"]).await;
        if !out.ok {
            return None;
        }
        let ahead = watch::ahead_jobs(&out.stdout, dir);
        out.stdout.lines().find_map(|l| {
            let (id, cmd) = l.split_once('|')?;
            let id = id.trim().to_string();
            (Path::new(cmd.trim()).starts_with(dir) && !ahead.contains(&id)).then_some(id)
        })
    }

    async fn poll(&self, runner_ids: &[JobId]) -> Vec<JobState> {
        // a launcher's later job stands in for the one the runner knows
        let actual: Vec<JobId> = runner_ids.iter().map(|id| self.actual(id)).collect();
        let mut states = self.poll_jobs(&actual).await;
        for ((st, runner_id), id) in states.iter_mut().zip(runner_ids).zip(&actual) {
            if let JobState::Finished(outcome) = st {
                if let Some(now) = self.launcher_after(runner_id, id, outcome).await {
                    *st = now;
                }
            }
        }
        states
    }

    async fn cancel(&self, id: &JobId) -> Result<(), SystemError> {
        let id = self.actual(id);
        let dir = self.jobs.lock().unwrap().get_mut(&id).map(|t| {
            t.cancelled = true;
            t.dir.clone()
        });
        if let Some(dir) = dir.as_ref().filter(|d| submit::launcher_running(d)) {
            // a launcher that stays with its job is stopped first, so that it submits nothing more; a job it
            // submitted in the meantime is cancelled with this one
            for later in submit::later(&submit::launcher_done(dir, Duration::ZERO).await, &id) {
                warn!("The test's launcher had submitted job {later}: cancelling it too");
                let _ = run_cmd("scancel", &[&later]).await;
            }
        }
        let out = run_cmd("scancel", &[&id]).await;
        if let Some(dir) = dir {
            self.cancel_ahead(&dir).await;
        }
        if out.ok {
            Ok(())
        } else if out.stderr.contains("Invalid job id")
            || out.stderr.contains("already completing or completed")
        {
            Err(SystemError::gone(out.stderr))
        } else {
            Err(out.stderr.into())
        }
    }

    async fn collect(&self, id: &JobId) {
        let id = &self.actual(id);
        let Some((dir, full, test, name, cancelled)) = self.jobs.lock().unwrap().get(id).map(|t| {
            (
                t.dir.clone(),
                t.full_cmd.clone(),
                t.test_cmd.clone(),
                t.job_name.clone(),
                t.cancelled,
            )
        }) else {
            return;
        };
        // a launcher that stayed with its job writes the rest of its log as it ends
        let _ = submit::launcher_done(
            &dir,
            if cancelled {
                Duration::from_secs(30)
            } else {
                Duration::from_secs(60)
            },
        )
        .await;
        self.collect_job(id, &dir, &full, &test, &name).await;
    }

    fn nodes(&self, id: &JobId) -> Vec<String> {
        self.jobs
            .lock()
            .unwrap()
            .get(&self.actual(id))
            .map(|t| t.nodes.clone())
            .unwrap_or_default()
    }

    fn attempts(&self, id: &JobId) -> Vec<Attempt> {
        self.jobs
            .lock()
            .unwrap()
            .get(&self.actual(id))
            .map(|t| t.earlier.iter().chain(&t.attempts).cloned().collect())
            .unwrap_or_default()
    }

    fn time_limit_grace(&self) -> Duration {
        // Slurm enforces --time itself (rounded up to whole minutes); we step in only if it did not.
        Duration::from_secs(5)
    }
}
