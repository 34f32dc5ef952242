//! The engine: starts test runs as their dependencies allow, repeats iterations, enforces time limits, stops
//! `end_post_comp` dependents, and on Ctrl-C/SIGTERM cancels every job it submitted.
//!
//! Dependency semantics (CloudAI's): runs without `start_*` dependencies start at once; `start_post_init` waits
//! until the dependency's job is running; `start_post_comp` waits until all its iterations are done;
//! `end_post_comp` stops this run when the dependency is done.

mod cancel;
pub mod journal;
mod progress;
mod queue;
pub mod resume;
mod single;
pub mod start;
mod stop;
mod submit;
#[cfg(test)]
mod tests;
pub mod verdict;

pub use submit::write_inputs;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use crate::util::signals;
use chrono::{DateTime, Local};

use crate::config::scenario::DepKind;
use crate::config::time_limit;
use crate::results::{EndReason, IterationRecord, Layout};
use crate::scenario::{Scenario, TestRun};
use crate::systems::{Effects, ErrorKind, JobId, JobState, Prepared, System};
use crate::util::fsx::write_atomic;
use crate::workloads::JobOutcome;
use crate::{error, info, warn};

/// How many times a submission the scheduler could not take for now (its controller or API unreachable) is tried
/// again, a monitor interval apart, before the iteration fails.
const SUBMIT_RETRIES: u32 = 3;

/// How long cancelled jobs get to disappear before we stop waiting for them: the cancels, the waits and the polls
/// together, so that Ctrl-C ends the process within the 15 s the docs promise (the reports take the rest).
const CANCEL_WAIT: Duration = Duration::from_secs(14);

/// The engine for one scenario on one system. Built by [`Runner::builder`] and not changed after: everything it
/// learns while it runs lives in the loop's own state.
pub(crate) struct Runner {
    system: Arc<dyn System>,
    scenario: Arc<Scenario>,
    layout: Layout,
    /// Every iteration's record as it goes.
    journal: journal::Journal,
    /// What the engine does around the jobs (waits between polls, keeps records, minds local resources): the
    /// system's facts, so that a dry-run is only a system whose jobs end at once and leave nothing behind.
    effects: Effects,
    interval: Duration,
    /// The system's `max_pending_time` (a test's own value wins), seconds.
    max_pending_time: Option<u64>,
    /// Where each test run stands when resuming a tree (None: a fresh run).
    plan: Option<Vec<resume::SlotPlan>>,
    /// Submit what can be submitted, then stop watching (`run --detach`); `resume` finishes.
    detach: bool,
    /// The whole scenario as one job (`run --single-sbatch`, on a system whose settings say it can).
    single: bool,
    /// Ending signals (and requests to stop this engine).
    stop: signals::Stop,
    /// Descriptors open before any job: a job never waits when no other holds any (nothing would free them).
    fd_base: u64,
}

/// How a [`Runner`] is made: the system, the scenario and its tree, then what differs from a plain run.
pub(crate) struct RunnerBuilder {
    system: Arc<dyn System>,
    scenario: Scenario,
    layout: Layout,
    detach: bool,
    single: bool,
    plan: Option<Vec<resume::SlotPlan>>,
}

impl RunnerBuilder {
    /// Submit what can be submitted, then stop watching (`run --detach`).
    pub fn detach(mut self, on: bool) -> Self {
        self.detach = on;
        self
    }

    /// Run the whole scenario as one job (`run --single-sbatch`): every iteration prepared as usual, the system
    /// makes them one job that runs each in turn ([`System::single_job`]), then each is graded from its directory.
    pub(crate) fn single_job(mut self, on: bool) -> Self {
        self.single = on;
        self
    }

    /// Continue a tree: where each test run stands, from its journal (`resume`).
    pub fn resume(mut self, plan: Vec<resume::SlotPlan>) -> Self {
        self.plan = Some(plan);
        self
    }

    /// The engine, with the system's own settings (monitor interval, max pending time).
    pub fn build(self) -> Runner {
        let settings = self.system.settings();
        let root = self.layout.root.clone();
        Runner {
            system: self.system,
            scenario: Arc::new(self.scenario),
            layout: self.layout,
            journal: journal::Journal {
                scheduler: settings.scheduler,
                writes: settings.effects.records,
                root,
            },
            effects: settings.effects,
            interval: settings.monitor_interval,
            max_pending_time: settings.max_pending_time,
            plan: self.plan,
            detach: self.detach,
            single: self.single,
            stop: signals::Stop::default(),
            fd_base: crate::util::fds::open_count().unwrap_or(0),
        }
    }
}

pub(crate) struct RunOutcome {
    pub records: Vec<IterationRecord>,
    pub interrupted: bool,
    /// What we asked to stop or delete without the scheduler confirming it: it may still hold resources.
    pub leftovers: Vec<crate::results::record::Leftover>,
}

impl RunOutcome {
    /// A run that ended by itself with these records.
    pub fn ended(records: Vec<IterationRecord>) -> Self {
        Self {
            records,
            interrupted: false,
            leftovers: Vec::new(),
        }
    }
}

/// What one run of the engine has done beside its slots: the records of ended iterations, the submissions made
/// (the loop polls a freshly submitted job before it sleeps), whether a wait for descriptors was said.
#[derive(Default)]
struct Books {
    records: Vec<IterationRecord>,
    submissions: u64,
    fd_said: bool,
}

struct Active {
    id: JobId,
    dir: PathBuf,
    prepared: Prepared,
    submitted_at: DateTime<Local>,
    started: Option<(DateTime<Local>, Instant)>,
    kill: Option<EndReason>,
    /// Why we ended it, when the end reason alone does not say (unschedulable, pending too long).
    kill_msg: Option<String>,
    /// Since when the job waits in the queue (reset when it runs; a requeued job waits again).
    pending_since: Option<Instant>,
    /// Every queue state seen, with the scheduler's reason.
    queue: Vec<crate::results::record::QueueState>,
}

enum Phase {
    Waiting,
    Active(Box<Active>),
    Done,
}

struct Slot {
    run: Arc<TestRun>,
    iteration: u64,
    phase: Phase,
    /// A job of this run has been seen running (satisfies `start_post_init`).
    started: bool,
    /// Set by an `end_post_comp` dependency: the id that completed.
    stopped_by: Option<String>,
    /// Submissions of the current iteration that failed for now (transient) and are tried again.
    retries: u32,
}

impl Slot {
    fn done(&self) -> bool {
        matches!(self.phase, Phase::Done)
    }
}

impl Runner {
    /// How an engine for a scenario on a system is made ([`RunnerBuilder`]).
    pub fn builder(system: Arc<dyn System>, scenario: Scenario, layout: Layout) -> RunnerBuilder {
        RunnerBuilder {
            system,
            scenario,
            layout,
            detach: false,
            single: false,
            plan: None,
        }
    }

    /// A plain run's engine: `builder(..).build()`.
    pub fn new(system: Arc<dyn System>, scenario: Scenario, layout: Layout) -> Self {
        Self::builder(system, scenario, layout).build()
    }

    pub fn system(&self) -> &Arc<dyn System> {
        &self.system
    }

    pub fn scenario(&self) -> &Scenario {
        &self.scenario
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Whether jobs are left running for `resume` (`run --detach`).
    pub(crate) fn is_detached(&self) -> bool {
        self.detach
    }

    pub async fn run(&self) -> RunOutcome {
        if self.single {
            return self.run_single().await;
        }
        let began = Instant::now();
        let mut slots: Vec<Slot> = self
            .scenario
            .test_runs
            .iter()
            .map(|r| Slot {
                run: r.clone(),
                iteration: 0,
                phase: Phase::Waiting,
                started: false,
                stopped_by: None,
                retries: 0,
            })
            .collect();
        if let Some(plan) = &self.plan {
            resume::apply(&mut slots, plan);
        }
        let mut books = Books::default();
        if let Err(e) = signals::install() {
            error!("{e}; refusing to start jobs that could not be cancelled");
            return RunOutcome {
                records: Vec::new(),
                interrupted: true,
                leftovers: Vec::new(),
            };
        }
        let wake = self.system.wakeup();
        let mut interrupted = false;
        loop {
            // a signal that came before (while connecting, between sweep steps or rounds) submits nothing more
            if self.stop.requested() {
                interrupted = true;
                break;
            }
            loop {
                if self.stop.requested() {
                    break;
                }
                let before = books.submissions;
                self.start_ready(&mut slots, &mut books).await;
                self.poll(&mut slots, &mut books, true).await;
                if books.submissions == before || !self.effects.waits {
                    break;
                }
            }
            self.stop_dependents(&mut slots).await;
            self.enforce_time_limits(&mut slots).await;
            if slots.iter().all(Slot::done) {
                break;
            }
            if self.detach {
                // the journal records every submitted job; `resume` re-attaches to them
                let n = slots
                    .iter()
                    .filter(|s| matches!(s.phase, Phase::Active(_)))
                    .count();
                info!("Detached: {n} job(s) submitted and left running; `cloudai resume {}` finishes the scenario", self.layout.root.display());
                self.system.release();
                break;
            }
            if !self.effects.waits {
                continue;
            }
            progress::show(&slots, began);
            let notified = async {
                match &wake {
                    Some(n) => n.notified().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(self.interval) => {}
                _ = notified => {}
                _ = self.stop.after(0) => { interrupted = true; }
            }
            if interrupted {
                break;
            }
        }
        crate::log::clear_status();
        let mut leftovers = self.system.leftovers();
        if interrupted {
            leftovers = self.cancel_all(&mut slots, &mut books).await;
        }
        // the scenario's order, looked up once per test (a search per record is quadratic in the tests)
        let place: std::collections::HashMap<&str, usize> = self
            .scenario
            .test_runs
            .iter()
            .enumerate()
            .map(|(i, r)| (r.id.as_str(), i))
            .collect();
        let mut records = books.records;
        records.sort_by_key(|r| (place.get(r.test_id.as_str()).copied(), r.iteration));
        RunOutcome {
            records,
            interrupted,
            leftovers,
        }
    }

    fn deps_met(&self, slots: &[Slot], run: &TestRun) -> bool {
        run.dependencies.iter().all(|d| {
            let Some(dep) = slots.iter().find(|s| s.run.id == d.id) else {
                return true;
            };
            match d.kind {
                DepKind::StartPostInit => dep.started || dep.done(),
                DepKind::StartPostComp => dep.done(),
                DepKind::EndPostComp => true,
            }
        })
    }

    /// Polls every active job once and acts on what ended. `interruptible`: an ending signal cuts the scheduler's
    /// answer short (a control plane that does not answer must not hold a Ctrl-C for its timeouts); nothing is
    /// changed then, and the caller sees the stop.
    async fn poll(&self, slots: &mut [Slot], books: &mut Books, interruptible: bool) {
        let active: Vec<usize> = (0..slots.len())
            .filter(|&i| matches!(slots[i].phase, Phase::Active(_)))
            .collect();
        if active.is_empty() {
            return;
        }
        let ids: Vec<JobId> = active
            .iter()
            .map(|&i| match &slots[i].phase {
                Phase::Active(a) => a.id.clone(),
                _ => unreachable!(),
            })
            .collect();
        crate::debug!("Poll: {} active job(s)", ids.len());
        let states = if interruptible {
            tokio::select! {
                s = self.system.poll(&ids) => s,
                _ = self.stop.after(0) => return,
            }
        } else {
            self.system.poll(&ids).await
        };
        for (&i, state) in active.iter().zip(states) {
            let slot = &mut slots[i];
            let Phase::Active(a) = &mut slot.phase else {
                continue;
            };
            match state {
                JobState::Pending(q) => self.pending(&slot.run, a, q).await,
                JobState::Running => {
                    let first = a.started.is_none();
                    if first {
                        a.started = Some((Local::now(), Instant::now()));
                    }
                    a.pending_since = None;
                    if queue::note_state(&mut a.queue, "RUNNING", "") {
                        info!("job {} ({}) running", a.id, slot.run.id);
                    }
                    slot.started = true;
                    if first {
                        self.journal.running(
                            &slot.run,
                            slot.iteration,
                            &a.dir,
                            &a.prepared,
                            journal::Running {
                                id: &a.id,
                                submitted_at: a.submitted_at,
                                started_at: a.started.map(|(t, _)| t),
                                nodes: self.system.nodes(&a.id),
                                queue: &a.queue,
                            },
                        );
                    }
                }
                JobState::Finished(outcome) => {
                    slot.started = true;
                    self.finish(slot, outcome, books).await;
                }
            }
        }
    }

    async fn finish(&self, slot: &mut Slot, outcome: JobOutcome, books: &mut Books) {
        let Phase::Active(a) = std::mem::replace(&mut slot.phase, Phase::Waiting) else {
            return;
        };
        let run = slot.run.clone();
        let end_reason = verdict::end_reason(a.kill, outcome.end);
        self.system.collect(&a.id).await;
        let graded = verdict::Graded {
            end_reason,
            outcome: &outcome,
            kill_msg: a.kill_msg.as_deref(),
            stopped_by: slot.stopped_by.as_deref(),
            time_limit: run.effective_time_limit(),
            job_status_check: self.scenario.job_status_check,
        };
        let asked = run.asked();
        let (status, message, checks) = graded.verdict(|| {
            let v = run
                .workload
                .grade(&run.test, &a.dir, &outcome)
                .with_stderr(&a.dir, &outcome);
            crate::workloads::judge::judge(v, Some(&asked))
        });
        let mut rec = self
            .journal
            .record(&run, slot.iteration, &a.dir, &a.prepared);
        rec.job_id = Some(a.id.clone());
        rec.nodes = self.system.nodes(&a.id);
        rec.submitted_at = Some(a.submitted_at.to_rfc3339());
        rec.started_at = a.started.map(|(t, _)| t.to_rfc3339());
        rec.ended_at = Some(Local::now().to_rfc3339());
        rec.end_reason = end_reason;
        rec.exit_code = outcome.exit_code;
        rec.signal = outcome.signal;
        rec.scheduler_state = outcome.state.clone();
        rec.queue_states = a.queue.clone();
        rec.log_incomplete = outcome.log_incomplete.clone();
        rec.attempts = self.system.attempts(&a.id);
        (rec.status, rec.message, rec.checks) = (status, message, checks);
        rec.launched = Some(asked);
        if self.effects.local && crate::util::fsx::is_full(&a.dir) {
            crate::error!(
                "The disk holding {} is full: the output of {} #{} may be cut short",
                a.dir.display(),
                run.id,
                slot.iteration
            );
            rec.message = format!(
                "the disk holding the results is full, so the output may be cut short; {}",
                rec.message
            );
        }
        self.journal.save(&rec, &a.dir);
        crate::log::log_file_only(
            crate::log::Level::Debug,
            &format!("{} iteration {}: {:?}", run.id, slot.iteration, rec),
        );
        books.records.push(rec);
        info!(
            "Job completed: {} (iteration {} of {})",
            run.id,
            slot.iteration + 1,
            run.iterations
        );
        let more = slot.iteration + 1 < run.iterations;
        if more && end_reason == EndReason::Unschedulable {
            // the next iteration asks for the same resources: it cannot start either
            info!(
                "Skipping the remaining iterations of {}: the scheduler cannot start them either",
                run.id
            );
        }
        if more && !verdict::ends_test(end_reason) {
            slot.iteration += 1;
            self.submit(slot, books).await;
        } else {
            slot.phase = Phase::Done;
        }
    }
}

/// The single-threaded runtime the engine runs on (one process drives every job with async I/O).
pub fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("Cannot start the async runtime: {e}"))
}
