//! One module per scheduler behind the small `System` trait. The runner owns ordering, iterations, time limits
//! and cancellation; a system only turns a test iteration into a job and reports on it.

pub mod container;
pub mod dry_run;
mod error;
pub mod fleet;
pub mod kubernetes;
pub mod live;
pub mod objects;
mod orphans;
pub mod runai;
pub mod slurm;
pub mod standalone;
pub mod survey;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;

use crate::config::system::{SystemConfig, SystemKind};
use crate::scenario::TestRun;
use crate::workloads::JobOutcome;

pub use error::{ErrorKind, SystemError};

pub(crate) type JobId = String;

/// An iteration made ready for a scheduler: its command lines and any files to write next to its results.
#[derive(Clone, Debug, Default)]
pub struct Prepared {
    /// The workload's own command (`test_cmd` in test-run.toml).
    pub test_cmd: String,
    /// The command as the scheduler runs it (`full_cmd`).
    pub full_cmd: String,
    /// Files to write into the iteration directory before submitting: (file name, contents).
    pub files: Vec<(String, String)>,
    /// Environment of the job: system `global_env_vars`, then the test's `extra_env_vars`.
    pub env: Vec<(String, String)>,
    /// The workload's own launcher submits the job: this shell text, run on the login node in the iteration's
    /// directory, prints the id of the job it submitted (no batch script of ours).
    pub submit: Option<crate::workloads::submit::Login>,
    /// What the scheduler runs when `full_cmd` records something else (`"n/a"` for a predictor).
    pub runs: Option<String>,
}

#[derive(Clone, Debug)]
pub enum JobState {
    Pending(Queued),
    Running,
    Finished(JobOutcome),
}

/// A job waiting in the scheduler's queue, in the scheduler's own words.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Queued {
    /// The scheduler's state name (`PENDING`, `Pending`, …).
    pub state: String,
    /// Why it waits (`Resources`, `Priority`, `ReqNodeNotAvail, UnavailableNodes:node003`, …).
    pub reason: String,
    /// Set when waiting cannot help: why the scheduler can never start the job as submitted.
    pub hopeless: Option<String>,
    /// Set while the scheduler finds no place for the job now (Kubernetes `Unschedulable`), in its words: past
    /// `max_pending_time` the job ends `unschedulable` rather than `pending_too_long`.
    pub blocked: Option<String>,
    /// Set when a job it depends on failed, so that its command will never run (its pre-test hooks' job): why.
    pub failed_before: Option<String>,
}

impl Queued {
    pub fn new(state: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            state: state.into(),
            reason: reason.into(),
            hopeless: None,
            blocked: None,
            failed_before: None,
        }
    }
}

/// What the engine needs of a system beside its jobs: its own settings, from its config.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The scheduler's name in the system TOML (`slurm`, …), recorded with every iteration.
    pub scheduler: &'static str,
    /// How often jobs are polled (a system with a [`System::wakeup`] is also polled when it signals).
    pub monitor_interval: Duration,
    /// How long a job may wait in the queue (a test's own value wins), seconds.
    pub max_pending_time: Option<u64>,
    /// What the engine does around this system's jobs beside submitting and polling them.
    pub effects: Effects,
    /// It can run a whole scenario as one job ([`System::single_job`], `run --single-sbatch`).
    pub single_job: bool,
}

impl Settings {
    /// A system config's settings (polled at least every second).
    pub fn of(cfg: &SystemConfig) -> Self {
        Self {
            scheduler: cfg.kind.scheduler(),
            monitor_interval: Duration::from_secs(cfg.monitor_interval.max(1)),
            max_pending_time: cfg.max_pending_time,
            effects: Effects::REAL,
            single_job: false,
        }
    }

    /// Nothing runs: the system is a dry-run ([`dry_run::DryRun`], which turns every effect off). The reports say
    /// DRY-RUN; nothing is graded, recorded or packed.
    pub(crate) fn nothing_runs(&self) -> bool {
        self.effects == Effects::NONE
    }
}

/// What the engine does around a system's jobs beside submitting, polling and cancelling them — each a fact of
/// the system, so that the engine needs no notion of a dry-run: the dry-run decorator hands it [`Effects::NONE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Effects {
    /// Jobs take time: the engine sleeps a monitor interval between polls and shows a progress line. Without it,
    /// jobs end as soon as they are polled, and the engine polls them back to back, a round of submissions at a
    /// time.
    pub waits: bool,
    /// The engine keeps its own records: the journal and each iteration's run record (CloudAI's files are always
    /// written).
    pub records: bool,
    /// Jobs use this machine's resources: a job waits for file descriptors near the open-files limit, and an output
    /// written to a full disk is flagged as maybe cut short.
    pub local: bool,
}

impl Effects {
    /// A system whose jobs run.
    pub(crate) const REAL: Effects = Effects {
        waits: true,
        records: true,
        local: true,
    };
    /// A system where nothing runs.
    pub(crate) const NONE: Effects = Effects {
        waits: false,
        records: false,
        local: false,
    };
}

#[async_trait]
pub trait System: Send + Sync {
    /// CloudAI's runner class name, printed as `Creating <name>`.
    fn runner_name(&self) -> &'static str;
    /// Its settings: scheduler name, monitor interval, max pending time.
    fn settings(&self) -> Settings;
    /// What this system cannot run of a test (more GPUs than a node has, an image it cannot pull), checked for
    /// every test and hook before anything is created; each entry is one complete sentence.
    fn check(&self, _run: &TestRun) -> Vec<String> {
        Vec::new()
    }
    /// What only a real run cannot do of a test (a dry-run writes its files all the same), checked with
    /// [`System::check`] before anything is created.
    fn run_checks(&self, _run: &TestRun) -> Vec<String> {
        Vec::new()
    }
    /// Proves the scheduler is reachable and accepts us (credentials, certificates) before the results
    /// directory exists. Until then a system takes its facts from its config only (a dry-run never connects).
    async fn connect(&self) -> Result<(), SystemError> {
        Ok(())
    }
    /// Builds the iteration's commands and files; an error (a node spec that cannot be met) fails the iteration.
    fn prepare(&self, run: &TestRun, iteration: u64, dir: &Path) -> Result<Prepared, SystemError>;
    /// Submits the job.
    async fn submit(&self, run: &TestRun, dir: &Path, job: &Prepared)
        -> Result<JobId, SystemError>;
    /// What [`System::submit`] would do, said in the scheduler's words instead of done (a dry-run), and the id it
    /// stands for.
    fn would_submit(&self, run: &TestRun, _dir: &Path, _job: &Prepared) -> JobId {
        crate::info!("Would submit test {}", run.id);
        "0".into()
    }
    /// The state of each job, in the order given. One call per poll for all jobs.
    async fn poll(&self, ids: &[JobId]) -> Vec<JobState>;
    /// Takes over a job an earlier cloudai process submitted (`resume`): from now on it is polled, cancelled and
    /// collected like one submitted here. `job` is rebuilt from the iteration's files.
    async fn attach(
        &self,
        _run: &TestRun,
        _dir: &Path,
        _id: &JobId,
        _job: &Prepared,
    ) -> Result<(), SystemError> {
        Err("this scheduler cannot re-attach to jobs".into())
    }
    /// Files of `prepare` the job needs again when it is taken over (`attach`), read back from its directory.
    fn job_files(&self) -> &'static [&'static str] {
        &[]
    }
    /// The job an earlier process submitted for this iteration but never recorded (killed in between), if the
    /// scheduler still knows it.
    async fn find_submitted(&self, _run: &TestRun, _dir: &Path) -> Option<JobId> {
        None
    }
    /// Asks the scheduler to stop the job; the runner keeps polling until it is finished.
    async fn cancel(&self, id: &JobId) -> Result<(), SystemError>;
    /// Fetches what the scheduler knows about a finished job into its directory (logs, accounting).
    async fn collect(&self, _id: &JobId) {}
    /// How long past a test's time limit we wait before cancelling, when the scheduler enforces limits itself.
    fn time_limit_grace(&self) -> Duration {
        Duration::ZERO
    }
    /// Hosts the job ran on, once known.
    fn nodes(&self, _id: &JobId) -> Vec<String> {
        Vec::new()
    }
    /// Every time the scheduler started the job, once it is collected (several when it was requeued).
    fn attempts(&self, _id: &JobId) -> Vec<crate::results::record::Attempt> {
        Vec::new()
    }
    /// Stops tracking every job without stopping it (`run --detach`): they run on for `resume`.
    fn release(&self) {}
    /// Everything we asked to stop or delete whose end the scheduler has not confirmed (it may hold resources).
    fn leftovers(&self) -> Vec<crate::results::record::Leftover> {
        Vec::new()
    }
    /// One job that runs the given iterations (run, iteration, directory, prepared files) one after another, for a
    /// system whose [`Settings::single_job`] says it can: its files, to write at the results `root`. Each
    /// iteration's exit status lands in [`SINGLE_EXIT_FILE`] in its directory.
    fn single_job(
        &self,
        _scenario: &str,
        _root: &Path,
        _items: &[(&TestRun, u64, &Path, &Prepared)],
    ) -> Option<Prepared> {
        None
    }
    /// Signalled when a job's state may have changed, so the runner need not wait a full monitor interval.
    fn wakeup(&self) -> Option<Arc<Notify>> {
        None
    }
}

/// A recorded job as its scheduler sees it now.
#[derive(Clone, Debug, PartialEq)]
pub enum Live {
    /// The scheduler's state (lower case), why it waits, and its nodes when it names them.
    Seen {
        state: String,
        reason: String,
        nodes: Vec<String>,
    },
    /// The scheduler no longer knows it: how to say so.
    Gone(&'static str),
}

impl Live {
    /// The jobs `ids` as one listing of a cluster's objects shows them (name → phase and why it waits): an id the
    /// listing lacks is gone (a hook may run under another name, or it was deleted).
    pub(crate) fn from_phases(
        ids: &[&str],
        phases: &std::collections::HashMap<String, (String, String)>,
    ) -> std::collections::HashMap<String, Live> {
        ids.iter()
            .map(|id| {
                let live = match phases.get(*id) {
                    Some((phase, reason)) => Live::Seen {
                        state: phase.to_lowercase(),
                        reason: reason.clone(),
                        nodes: Vec::new(),
                    },
                    None => Live::Gone("not found (a hook may run, or it was deleted)"),
                };
                (id.to_string(), live)
            })
            .collect()
    }
}

/// What CloudAI's own runner recorded of an iteration's job in a tree it wrote (its Slurm `slurm-job.toml`), for
/// `generate-report` on CloudAI's trees.
pub use slurm::foreign_job;

/// Where a [`System::single_job`] leaves each iteration's exit status.
pub(crate) const SINGLE_EXIT_FILE: &str = ".cloudai-exit";

/// CloudAI's pre-test guard: each hook command followed by `SUCCESS_<i>=$(<its check>)`, then
/// `PRE_TEST_SUCCESS` = 1 only when every check printed 1.
pub(crate) fn pre_test_lines(hooks: impl IntoIterator<Item = (String, String)>) -> Vec<String> {
    let mut lines = Vec::new();
    let mut vars = Vec::new();
    for (i, (cmd, check)) in hooks.into_iter().enumerate() {
        lines.push(cmd);
        lines.push(format!("SUCCESS_{i}=$({check})"));
        vars.push(format!("[ $SUCCESS_{i} -eq 1 ]"));
    }
    lines.push(format!(
        "PRE_TEST_SUCCESS=$( {} && echo 1 || echo 0 )",
        vars.join(" && ")
    ));
    lines
}

/// Environment of a test run as ordered (name, value) pairs; later entries win.
pub(crate) fn job_env(sys: &SystemConfig, run: &TestRun) -> Vec<(String, String)> {
    let mut env: indexmap::IndexMap<String, String> = sys
        .global_env_vars
        .iter()
        .map(|(k, v)| (k.clone(), v.py_str()))
        .collect();
    for (k, v) in &run.test.extra_env_vars {
        env.insert(k.clone(), v.py_str());
    }
    // what the workload adds: its own values last (a name already set keeps its place), its defaults only where
    // nobody set the name
    let launch = run.launch();
    env.extend(launch.env);
    for (k, v) in launch.env_default {
        env.entry(k).or_insert(v);
    }
    env.into_iter().collect()
}

/// What find-bad-nodes and the quarantine ask of the config's scheduler: one line per scheduler.
pub(crate) fn fleet_of(sys: &SystemConfig) -> Box<dyn fleet::Fleet + '_> {
    match &sys.kind {
        SystemKind::Standalone(_) => Box::new(standalone::Fleet),
        SystemKind::Slurm(s) => Box::new(slurm::fleet::Fleet(s)),
        SystemKind::RunAi(_) => Box::new(runai::fleet::Fleet(sys)),
        SystemKind::Kubernetes(k) => Box::new(kubernetes::fleet::Fleet(k)),
    }
}

/// The system for a config: one line per scheduler of `config::system::SCHEDULERS`. A dry-run wraps it: `dry_run::DryRun::wrap(build(cfg))`.
pub fn build(cfg: &Arc<SystemConfig>) -> Arc<dyn System> {
    match &cfg.kind {
        SystemKind::Standalone(_) => Arc::new(standalone::Standalone::new(cfg.clone())),
        SystemKind::Slurm(_) => Arc::new(slurm::Slurm::new(cfg.clone())),
        SystemKind::RunAi(_) => Arc::new(runai::system(cfg.clone())),
        SystemKind::Kubernetes(_) => Arc::new(kubernetes::system(cfg.clone())),
    }
}
