//! Schedulers whose jobs are API objects (Run:ai workloads; Kubernetes Jobs and MPIJobs) share one step machine:
//! a job is its steps in turn (pre-test hooks, the test, post-test hooks), each created exactly once (or adopted
//! after a restart when its identity is ours), observed until it ends, wrapped up (events, nodes, log) while it
//! still exists, deleted, and confirmed gone before the next step starts. Whatever cannot be confirmed gone is a
//! leftover. A scheduler brings a [`Backend`]: what a step's object is, and the few API operations on it.
//!
//! Both backends keep the same files: `plan.rs` (a step's object from the launch), `ops.rs` (create, adopt,
//! delete, gone, events), `observe.rs` (what an observation and a step's end mean), `state.rs` (the scheduler's
//! phases, pure), `logs.rs`, `client.rs`.

pub mod hooks;
mod machine;
pub mod names;
mod own;
pub mod preflight;
pub mod ssh;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;

pub use hooks::StepKind;

use super::{JobId, JobState, Prepared, Queued, Settings, System, SystemError};
use crate::config::system::SystemConfig;
use crate::info;
use crate::results::record::{Attempt, Leftover};
use crate::results::EndReason;
use crate::scenario::TestRun;
use crate::workloads::{JobOutcome, Launch, Success};

/// One object of a job: a hook or the test itself.
#[derive(Clone, Debug)]
pub struct Step<S> {
    pub part: StepKind,
    pub name: String,
    /// Written into the object: an object found under our name is ours only if it carries this.
    pub identity: String,
    /// Where its output goes (`stdout.txt`, `events.txt`, the object's file).
    pub dir: PathBuf,
    /// How its success is judged when it is a pre-test hook (the workload's rule).
    pub success: Success,
    /// The scheduler's object.
    pub spec: S,
}

/// What names a step's object and ties it to this results tree.
pub struct Naming<'a> {
    pub name: &'a str,
    /// Hash of the results tree and the step's directory.
    pub identity: &'a str,
    /// Hash of the results tree: shared by every object of one run.
    pub run_tag: &'a str,
    /// The results tree's and the iteration's directory names.
    pub scenario: &'a str,
    pub iteration: &'a str,
    pub dir: &'a Path,
}

/// How a step ended, kept while its deletion is being confirmed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Ending {
    pub state: String,
    pub failed: bool,
    pub reason: String,
    pub end: Option<EndReason>,
    /// We can no longer read the object (the scheduler refuses us): its deletion is asked for and looked at once,
    /// not waited for.
    pub unreadable: bool,
    /// Why the step's log (`stdout.txt`) is incomplete, when it is.
    pub log_incomplete: Option<String>,
}

/// One observation of a step's object.
#[derive(Debug, PartialEq)]
pub enum Seen {
    Waiting(Queued),
    Running,
    Ended(Ending),
    /// Gone, not by our deletion: why.
    Vanished(String),
}

/// A scheduler's side of the step machine.
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// A step's object as it is created.
    type Spec: Clone + Debug + Send + Sync + 'static;
    /// The scheduler's handle of a created object (its id where the API gives one).
    type Handle: Clone + Debug + Send + Sync + 'static;
    /// What the backend keeps while it watches one step (log follower, timers); fresh for every step.
    type Watch: Default + Send + 'static;

    /// CloudAI's runner class name.
    const RUNNER: &'static str;
    /// The file each step's object is written to, in the step's directory.
    const FILE: &'static str;
    /// A check of each node ([`crate::workloads::Procs::PerNode`]) on several nodes runs as one step per node,
    /// pinned to it, each in `nodes/<node>/` (a scheduler with no one-pod-per-node object of its own).
    const STEP_PER_NODE: bool = false;

    fn config(&self) -> &Arc<SystemConfig>;
    /// The step's object for `run`, whose launch is `launch` and environment `env`; `own`: the workload's own
    /// object here ([`Backend::own_object`], built once by the plan), which the step is instead.
    fn spec(
        &self,
        run: &TestRun,
        launch: &Launch,
        env: &[(String, String)],
        n: &Naming,
        own: Option<crate::workloads::object::OwnObject>,
    ) -> Self::Spec;
    /// The object as written to [`Self::FILE`].
    fn render(spec: &Self::Spec) -> String;
    /// The command the step's output comes from, as a shell would read it.
    fn full_cmd(spec: &Self::Spec) -> String;
    fn check(&self, run: &TestRun) -> Vec<String>;
    /// The object of the workload's own kind this scheduler creates for `run` instead of its steps, when the
    /// workload has one here ([`crate::workloads::Workload::own_object`]).
    fn own_object(&self, _run: &TestRun) -> Option<crate::workloads::object::OwnObject> {
        None
    }
    async fn connect(&self) -> Result<(), SystemError>;
    fn wakeup(&self) -> Option<Arc<Notify>> {
        None
    }

    /// The object in messages (`Run:ai workload x (id …)`, `Kubernetes Job ns/x`).
    fn describe(&self, step: &Step<Self::Spec>, h: &Self::Handle) -> String;
    /// How a leftover is keyed and found again (ids, paths, namespace).
    fn leftover(
        &self,
        step: &Step<Self::Spec>,
        h: &Self::Handle,
    ) -> (String, BTreeMap<String, String>);
    /// How long a deletion may take to be confirmed before the object counts as left over.
    fn gone_wait(&self) -> Duration;

    /// Before a poll observes `jobs` jobs: read them all at once where the scheduler allows (one paged list),
    /// so that `observe` need not ask for each.
    async fn refresh(&self, _jobs: usize) {}
    /// Creates the step's object exactly once (an ambiguous answer is settled by looking it up); a transient
    /// error means nothing of it exists and asking again is safe.
    async fn create(&self, step: &Step<Self::Spec>) -> Result<Self::Handle, SystemError>;
    /// The step's object when it exists and is ours; an error when an object of its name is someone else's.
    async fn adopt(&self, step: &Step<Self::Spec>) -> Result<Option<Self::Handle>, SystemError>;
    /// One look at the step's object; new container restarts go to `attempts`.
    async fn observe(
        &self,
        step: &Step<Self::Spec>,
        h: &Self::Handle,
        w: &mut Self::Watch,
        attempts: &mut Vec<Attempt>,
    ) -> Seen;
    /// The step ended: what must be read while the object exists (events, log; the ending's reason may grow);
    /// returns the nodes it ran on.
    async fn wrap_up(
        &self,
        step: &Step<Self::Spec>,
        h: &Self::Handle,
        w: &mut Self::Watch,
        ending: &mut Ending,
    ) -> Vec<String>;
    /// The user cancels the step: what must be read before it is deleted.
    async fn cancelling(&self, step: &Step<Self::Spec>, h: &Self::Handle, w: &mut Self::Watch);
    /// Asks for the object's deletion.
    async fn delete(&self, step: &Step<Self::Spec>, h: &Self::Handle) -> Result<(), SystemError>;
    /// Whether the object is gone; an error when the scheduler cannot say.
    async fn gone(&self, step: &Step<Self::Spec>, h: &Self::Handle) -> Result<bool, SystemError>;
    /// The object is gone: settle what is still open (a log stream); why the log is incomplete, when it is.
    async fn after_gone(&self, _step: &Step<Self::Spec>, _w: &mut Self::Watch) -> Option<String> {
        None
    }
}

/// A duration in seconds from an environment variable (tests shorten waits with them), else `default`.
pub(crate) fn secs_from_env(var: &str, default: f64) -> Duration {
    let s = std::env::var(var)
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(default);
    Duration::from_secs_f64(s.max(0.0))
}

/// The steps of one iteration whose results go to `dir` (`<results root>/<test id>/<iteration>`), in order; names
/// are unique per results tree and the same again when `resume` plans them.
pub fn plan<B: Backend>(b: &B, run: &TestRun, dir: &Path) -> Vec<Step<B::Spec>> {
    // the results tree (created exclusively, with its timestamp) names the run
    let root = dir.parent().and_then(Path::parent).unwrap_or(dir);
    let file_name = |p: &Path| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    // the tree as it is on disk, however its path was written (`./results/…` or absolute, through a symlink): a
    // `resume` from elsewhere computes the same names
    let real_root = std::fs::canonicalize(root)
        .or_else(|_| std::path::absolute(root))
        .unwrap_or_else(|_| root.to_path_buf());
    let salt = names::short_hash(&real_root.display().to_string());
    let (scenario, iteration) = (file_name(root), file_name(dir));
    let step = |run: &TestRun, part: StepKind, dir: &Path| {
        // the step's directory (within the tree) names scenario, test, iteration and hook; the salt, this tree
        let within = dir.strip_prefix(root).unwrap_or(dir);
        let identity_src = format!("{salt}|{}", within.display());
        let launch = run.launch();
        let readable = [run.id.as_str(), part.tag()];
        let own = b.own_object(run);
        let name = if own.is_some() {
            names::object_name(&readable, &identity_src)
        } else if launch.across_nodes(run.num_nodes) {
            // the MPI operator names its pods after the job
            names::mpi_job_name(&readable, &identity_src, run.num_nodes)
        } else {
            names::unique_name(&readable, &identity_src)
        };
        let identity = names::short_hash(&identity_src);
        let env = super::job_env(b.config(), run);
        let n = Naming {
            name: &name,
            identity: &identity,
            run_tag: &salt,
            scenario: &scenario,
            iteration: &iteration,
            dir,
        };
        let spec = b.spec(run, &launch, &env, &n, own);
        Step {
            part,
            name: name.clone(),
            identity: identity.clone(),
            dir: dir.to_path_buf(),
            success: launch.success,
            spec,
        }
    };
    let hooks = |h: &Option<Arc<crate::scenario::HookScenario>>, part: StepKind, sub: &str| {
        h.iter()
            .flat_map(|h| h.test_runs.iter())
            .map(|tr| step(tr, part.clone(), &dir.join(sub).join(&tr.test.name)))
            .collect::<Vec<_>>()
    };
    let mut steps = hooks(&run.pre_test, StepKind::Pre, "pre_test");
    match per_node_hosts::<B>(run) {
        // one object per node, pinned to it, its output where each node's output goes
        Some(hosts) => {
            for h in hosts {
                let mut one = run.clone();
                one.nodes = vec![h.clone()];
                one.num_nodes = 1;
                let d = dir.join(crate::workloads::launch::NODES_DIR).join(&h);
                steps.push(step(&one, StepKind::Main, &d));
            }
        }
        None => steps.push(step(run, StepKind::Main, dir)),
    }
    steps.extend(hooks(&run.post_test, StepKind::Post, "post_test"));
    steps
}

/// The hosts a per-node check runs on as one step each, when the backend does it so.
pub(crate) fn per_node_hosts<B: Backend>(run: &TestRun) -> Option<Vec<String>> {
    if !B::STEP_PER_NODE
        || run.num_nodes < 2
        || run.launch().procs != crate::workloads::Procs::PerNode
    {
        return None;
    }
    let hosts = crate::util::nodelist::hosts(&run.nodes);
    (!hosts.is_empty()).then_some(hosts)
}

fn main_of<S>(steps: &[Step<S>]) -> usize {
    steps
        .iter()
        .position(|s| s.part == StepKind::Main)
        .expect("a plan has its main step")
}

/// One job: its steps and where it is.
struct Job<B: Backend> {
    steps: Vec<Step<B::Spec>>,
    current: usize,
    /// The current step's object exists (we created or adopted it).
    handle: Option<B::Handle>,
    cancel_requested: bool,
    /// The deletion of the current step's object was accepted.
    delete_sent: bool,
    /// The current step ended; its object is being deleted before the next step starts.
    ending: Option<Ending>,
    gone_by: Option<tokio::time::Instant>,
    /// After a failed deletion request or check: not before this, and how many failed in a row.
    retry_at: Option<tokio::time::Instant>,
    failures: u32,
    watch: B::Watch,
    main_outcome: Option<JobOutcome>,
}

impl<B: Backend> Job<B> {
    fn new(steps: Vec<Step<B::Spec>>, current: usize, handle: Option<B::Handle>) -> Self {
        Self {
            steps,
            current,
            handle,
            cancel_requested: false,
            delete_sent: false,
            ending: None,
            gone_by: None,
            retry_at: None,
            failures: 0,
            watch: B::Watch::default(),
            main_outcome: None,
        }
    }
}

/// The first pause after a failed deletion request or check; it doubles up to [`RETRY_CAP`].
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_CAP: Duration = Duration::from_secs(30);

impl<B: Backend> Job<B> {
    /// The scheduler failed to answer about the current step's deletion: wait longer before asking again.
    fn back_off(&mut self) {
        let pause = RETRY_FIRST
            .saturating_mul(1 << self.failures.min(5))
            .min(RETRY_CAP);
        self.failures += 1;
        self.retry_at = Some(tokio::time::Instant::now() + pause);
    }
}

/// What a job reports outside a poll.
#[derive(Default)]
struct Facts {
    nodes: Vec<String>,
    attempts: Vec<Attempt>,
}

/// A [`System`] made of a [`Backend`] and the step machine.
pub struct Stepped<B: Backend> {
    backend: B,
    /// Each job is advanced by one task at a time (a poll or a cancel), which may wait on the API meanwhile.
    jobs: Mutex<HashMap<JobId, Arc<tokio::sync::Mutex<Job<B>>>>>,
    facts: Mutex<HashMap<JobId, Facts>>,
    /// Steps planned by `prepare`, by iteration directory, for `submit`.
    planned: Mutex<HashMap<PathBuf, Vec<Step<B::Spec>>>>,
    /// Objects we asked to delete whose deletion is not confirmed yet.
    unconfirmed: Mutex<BTreeMap<String, Leftover>>,
}

/// Jobs advanced at once by one poll: a step's end means events, log and deletion; 200 jobs must not wait for
/// each other in turn, nor all hit the control plane at once.
const POLL_CONCURRENCY: usize = 16;

impl<B: Backend> Stepped<B> {
    pub fn new(backend: B) -> Self {
        Self {
            backend,
            jobs: Mutex::default(),
            facts: Mutex::default(),
            planned: Mutex::default(),
            unconfirmed: Mutex::default(),
        }
    }

    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// A step's object as written into the iteration's directory `dir`: (its path within, its text).
    pub(super) fn step_file(&self, dir: &Path, st: &Step<B::Spec>) -> (String, String) {
        let rel = st
            .dir
            .strip_prefix(dir)
            .unwrap_or(Path::new(""))
            .join(B::FILE);
        (rel.display().to_string(), B::render(&st.spec))
    }

    fn job(&self, id: &str) -> Option<Arc<tokio::sync::Mutex<Job<B>>>> {
        self.jobs.lock().unwrap().get(id).cloned()
    }

    fn track(&self, id: &JobId, job: Job<B>) {
        self.jobs
            .lock()
            .unwrap()
            .insert(id.clone(), Arc::new(tokio::sync::Mutex::new(job)));
    }

    async fn poll_one(&self, id: &JobId) -> JobState {
        let Some(job) = self.job(id) else {
            return JobState::Finished(JobOutcome::default());
        };
        let mut j = job.lock().await;
        let mut attempts = Vec::new();
        let state = self.advance(id, &mut j, &mut attempts).await;
        if !attempts.is_empty() {
            let mut facts = self.facts.lock().unwrap();
            facts
                .entry(id.clone())
                .or_default()
                .attempts
                .extend(attempts);
        }
        state
    }
}

#[async_trait]
impl<B: Backend> System for Stepped<B> {
    fn runner_name(&self) -> &'static str {
        B::RUNNER
    }

    fn check(&self, run: &TestRun) -> Vec<String> {
        if self.backend.own_object(run).is_some() {
            return Vec::new();
        }
        self.backend.check(run)
    }

    fn run_checks(&self, run: &TestRun) -> Vec<String> {
        self.own_problems(run)
    }

    async fn connect(&self) -> Result<(), SystemError> {
        self.backend.connect().await
    }

    fn prepare(&self, run: &TestRun, _iteration: u64, dir: &Path) -> Result<Prepared, SystemError> {
        let steps = plan(&self.backend, run, dir);
        let prepared = self
            .prepare_own(run, dir, &steps)
            .unwrap_or_else(|| Prepared {
                test_cmd: run.launch().command_line(),
                full_cmd: B::full_cmd(&steps[main_of(&steps)].spec),
                files: steps.iter().map(|st| self.step_file(dir, st)).collect(),
                env: super::job_env(self.backend.config(), run),
                submit: None,
                runs: None,
            });
        self.planned
            .lock()
            .unwrap()
            .insert(dir.to_path_buf(), steps);
        Ok(prepared)
    }

    fn settings(&self) -> Settings {
        Settings::of(self.backend.config())
    }

    fn would_submit(&self, run: &TestRun, dir: &Path, _job: &Prepared) -> JobId {
        let planned = self.planned.lock().unwrap().remove(dir);
        let steps = planned.unwrap_or_else(|| plan(&self.backend, run, dir));
        let main = steps[main_of(&steps)].name.clone();
        if let Some(id) = self.would_create_own(run, &main) {
            return id;
        }
        info!(
            "Would create {} {main} ({} with hooks)",
            B::RUNNER.trim_end_matches("Runner"),
            steps.len()
        );
        main
    }

    async fn submit(
        &self,
        run: &TestRun,
        dir: &Path,
        _job: &Prepared,
    ) -> Result<JobId, SystemError> {
        let planned = self.planned.lock().unwrap().remove(dir);
        let steps = planned.unwrap_or_else(|| plan(&self.backend, run, dir));
        let main = steps[main_of(&steps)].name.clone();
        let handle = self.backend.create(&steps[0]).await?;
        self.track(&main, Job::new(steps, 0, Some(handle)));
        Ok(main)
    }

    async fn poll(&self, ids: &[JobId]) -> Vec<JobState> {
        use futures_util::StreamExt;
        self.backend.refresh(ids.len()).await;
        let mut futs: Vec<
            std::pin::Pin<Box<dyn std::future::Future<Output = JobState> + Send + '_>>,
        > = Vec::with_capacity(ids.len());
        for id in ids {
            futs.push(Box::pin(self.poll_one(id)));
        }
        futures_util::stream::iter(futs)
            .buffered(POLL_CONCURRENCY)
            .collect()
            .await
    }

    /// What must be read first, then the deletion; `poll` reports the job finished once it is gone.
    async fn cancel(&self, id: &JobId) -> Result<(), SystemError> {
        let Some(job) = self.job(id) else {
            return Ok(());
        };
        let mut j = job.lock().await;
        j.cancel_requested = true;
        if j.current >= j.steps.len() {
            return Ok(());
        }
        let Some(h) = j.handle.clone() else {
            return Ok(());
        };
        let step = j.steps[j.current].clone();
        self.backend.cancelling(&step, &h, &mut j.watch).await;
        Ok(self
            .delete(id, &mut j, &step, &h, "cancel requested")
            .await?)
    }

    async fn attach(
        &self,
        run: &TestRun,
        dir: &Path,
        id: &JobId,
        _job: &Prepared,
    ) -> Result<(), SystemError> {
        let steps = plan(&self.backend, run, dir);
        let main = main_of(&steps);
        if steps[main].name != *id {
            return Err(format!(
                "the journal names {id}, this tree's test {} would be {}",
                run.id, steps[main].name
            )
            .into());
        }
        // the step under way is the last one that still exists (ended ones were deleted); none: start over after
        // the main step when its output is settled, else from the first step
        let mut found = None;
        for (i, st) in steps.iter().enumerate().rev() {
            if let Some(h) = self.backend.adopt(st).await? {
                found = Some((i, h));
                break;
            }
        }
        let (current, handle) = match found {
            Some((i, h)) => {
                info!("Re-attached to {}", self.backend.describe(&steps[i], &h));
                (i, Some(h))
            }
            None if dir.join("stdout.txt").exists() => (main + 1, None),
            None => (0, None),
        };
        self.track(id, Job::new(steps, current, handle));
        Ok(())
    }

    async fn find_submitted(&self, run: &TestRun, dir: &Path) -> Option<JobId> {
        let steps = plan(&self.backend, run, dir);
        for st in &steps {
            if let Ok(Some(_)) = self.backend.adopt(st).await {
                return Some(steps[main_of(&steps)].name.clone());
            }
        }
        None
    }

    fn nodes(&self, id: &JobId) -> Vec<String> {
        let facts = self.facts.lock().unwrap();
        facts.get(id).map(|f| f.nodes.clone()).unwrap_or_default()
    }

    fn attempts(&self, id: &JobId) -> Vec<Attempt> {
        let facts = self.facts.lock().unwrap();
        facts
            .get(id)
            .map(|f| f.attempts.clone())
            .unwrap_or_default()
    }

    fn release(&self) {
        self.jobs.lock().unwrap().clear();
    }

    fn leftovers(&self) -> Vec<Leftover> {
        self.unconfirmed.lock().unwrap().values().cloned().collect()
    }

    fn wakeup(&self) -> Option<Arc<Notify>> {
        self.backend.wakeup()
    }
}

#[cfg(test)]
mod tests;
