//! The engine against a fake system on paused time: dependencies, iterations, time limits, the unschedulable skip
//! and cancellation, each in milliseconds of real time. The fake's jobs wait and run for given spans of (paused)
//! time; every submit, first sight running, end and cancel is logged with its time, and the tests read the order.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

mod dry_run;
mod single_job;

use super::{RunOutcome, Runner};
use crate::results::{EndReason, Layout, Status};
use crate::scenario::TestRun;
use crate::systems::{ErrorKind, JobId, JobState, Prepared, Queued, Settings, System, SystemError};
use crate::workloads::JobOutcome;

/// How a test's jobs behave on the fake scheduler.
#[derive(Clone, Copy, Debug)]
struct Behave {
    /// Seconds in the queue before it runs.
    queue: u64,
    /// Seconds it runs (None: until cancelled).
    run: Option<u64>,
    exit: i32,
    /// The scheduler can never start it.
    hopeless: bool,
}

const QUICK: Behave = Behave {
    queue: 0,
    run: Some(5),
    exit: 0,
    hopeless: false,
};

struct Job {
    test: String,
    submitted: Instant,
    behave: Behave,
    cancelled: bool,
    seen_running: bool,
    ended: bool,
}

/// One thing the engine did or saw, at its second of (paused) time since the start.
#[derive(Clone, Debug, PartialEq)]
struct Event {
    at: u64,
    what: &'static str,
    test: String,
}

struct Fake {
    behave: HashMap<String, Behave>,
    /// Answers to a test's next submissions before they succeed (consumed in order).
    refusals: Mutex<HashMap<String, Vec<ErrorKind>>>,
    jobs: Mutex<Vec<Job>>,
    events: Mutex<Vec<Event>>,
    t0: Instant,
    interval: Duration,
    /// It runs a whole scenario as one job ([`System::single_job`]); the iterations it was given (test, directory).
    single: bool,
    items: Mutex<Vec<(String, std::path::PathBuf)>>,
}

impl Fake {
    fn new(behave: &[(&str, Behave)]) -> Arc<Self> {
        Arc::new(Self {
            behave: behave.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            refusals: Mutex::default(),
            jobs: Mutex::default(),
            events: Mutex::default(),
            t0: Instant::now(),
            interval: Duration::from_secs(1),
            single: false,
            items: Mutex::default(),
        })
    }

    /// A fake that can run a whole scenario as one job.
    fn single(behave: &[(&str, Behave)]) -> Arc<Self> {
        let mut f = Arc::into_inner(Self::new(behave)).unwrap();
        f.single = true;
        Arc::new(f)
    }

    /// The next submissions of `test` fail so, in order.
    fn failing(self: Arc<Self>, test: &str, kinds: &[ErrorKind]) -> Arc<Self> {
        self.refusals
            .lock()
            .unwrap()
            .insert(test.to_string(), kinds.to_vec());
        self
    }

    fn log(&self, what: &'static str, test: &str) {
        self.events.lock().unwrap().push(Event {
            at: self.t0.elapsed().as_secs(),
            what,
            test: test.to_string(),
        });
    }

    fn events(&self) -> Vec<Event> {
        self.events.lock().unwrap().clone()
    }

    /// When `what` first happened to `test`.
    fn first(&self, what: &str, test: &str) -> Option<u64> {
        self.events()
            .iter()
            .find(|e| e.what == what && e.test == test)
            .map(|e| e.at)
    }

    fn count(&self, what: &str, test: &str) -> usize {
        self.events()
            .iter()
            .filter(|e| e.what == what && e.test == test)
            .count()
    }
}

impl Fake {
    /// The single job ran every iteration it was given: each one's exit status in its directory, as the system's
    /// script writes it (the test's `exit`).
    fn write_exits(&self) {
        for (test, dir) in self.items.lock().unwrap().iter() {
            let exit = self.behave.get(test).copied().unwrap_or(QUICK).exit;
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(
                dir.join(crate::systems::SINGLE_EXIT_FILE),
                format!("{exit}\n"),
            )
            .unwrap();
        }
    }
}

#[async_trait]
impl System for Fake {
    fn runner_name(&self) -> &'static str {
        "FakeRunner"
    }

    fn settings(&self) -> Settings {
        Settings {
            scheduler: "fake",
            monitor_interval: self.interval,
            max_pending_time: None,
            effects: crate::systems::Effects::REAL,
            single_job: self.single,
        }
    }

    fn single_job(
        &self,
        _scenario: &str,
        _root: &Path,
        items: &[(&TestRun, u64, &Path, &Prepared)],
    ) -> Option<Prepared> {
        if !self.single {
            return None;
        }
        *self.items.lock().unwrap() = items
            .iter()
            .map(|(r, _, d, _)| (r.id.clone(), d.to_path_buf()))
            .collect();
        Some(Prepared::default())
    }

    fn prepare(
        &self,
        _run: &TestRun,
        _iteration: u64,
        _dir: &Path,
    ) -> Result<Prepared, SystemError> {
        Ok(Prepared::default())
    }

    async fn submit(
        &self,
        run: &TestRun,
        _dir: &Path,
        _job: &Prepared,
    ) -> Result<JobId, SystemError> {
        let refusal = {
            let mut r = self.refusals.lock().unwrap();
            r.get_mut(&run.id)
                .filter(|v| !v.is_empty())
                .map(|v| v.remove(0))
        };
        if let Some(kind) = refusal {
            self.log("refused", &run.id);
            return Err(SystemError {
                kind,
                message: format!("{kind:?}"),
            });
        }
        self.log("submit", &run.id);
        let mut jobs = self.jobs.lock().unwrap();
        jobs.push(Job {
            test: run.id.clone(),
            submitted: Instant::now(),
            behave: self.behave.get(&run.id).copied().unwrap_or(QUICK),
            cancelled: false,
            seen_running: false,
            ended: false,
        });
        Ok((jobs.len() - 1).to_string())
    }

    async fn poll(&self, ids: &[JobId]) -> Vec<JobState> {
        let mut out = Vec::new();
        for id in ids {
            let (state, event) = {
                let mut jobs = self.jobs.lock().unwrap();
                let j = &mut jobs[id.parse::<usize>().unwrap()];
                let age = j.submitted.elapsed().as_secs();
                let b = j.behave;
                let state = if j.cancelled {
                    JobState::Finished(JobOutcome {
                        end: Some(EndReason::Cancelled),
                        ..Default::default()
                    })
                } else if b.hopeless {
                    JobState::Pending(Queued {
                        hopeless: Some("asks more nodes than the partition has".into()),
                        ..Queued::new("PENDING", "PartitionNodeLimit")
                    })
                } else if age < b.queue {
                    JobState::Pending(Queued::new("PENDING", "Resources"))
                } else if b.run.is_none_or(|r| age < b.queue + r) {
                    JobState::Running
                } else {
                    JobState::Finished(JobOutcome {
                        exit_code: Some(b.exit),
                        ..Default::default()
                    })
                };
                let event = match &state {
                    JobState::Running if !j.seen_running => {
                        j.seen_running = true;
                        Some("running")
                    }
                    JobState::Finished(_) if !j.ended => {
                        j.ended = true;
                        if !j.cancelled {
                            self.write_exits();
                        }
                        Some("end")
                    }
                    _ => None,
                };
                (state, event.map(|e| (e, j.test.clone())))
            };
            if let Some((what, test)) = event {
                self.log(what, &test);
            }
            out.push(state);
        }
        out
    }

    async fn cancel(&self, id: &JobId) -> Result<(), SystemError> {
        let test = {
            let mut jobs = self.jobs.lock().unwrap();
            let j = &mut jobs[id.parse::<usize>().unwrap()];
            j.cancelled = true;
            j.test.clone()
        };
        self.log("cancel", &test);
        Ok(())
    }
}

/// A scenario of Sleep tests from its `[[Tests]]` tables, loaded as `run` loads one (built-in standalone system).
fn scenario(tests: &str) -> (tempfile::TempDir, crate::scenario::Scenario) {
    let dir = tempfile::tempdir().unwrap();
    let tests_dir = dir.path().join("tests");
    std::fs::create_dir_all(&tests_dir).unwrap();
    std::fs::write(
        tests_dir.join("sleep.toml"),
        "name = \"sleep\"\ndescription = \"d\"\ntest_template_name = \"Sleep\"\n[cmd_args]\nseconds = 1\n",
    )
    .unwrap();
    let path = dir.path().join("scenario.toml");
    std::fs::write(&path, format!("name = \"engine\"\n{tests}")).unwrap();
    let (_, s) = crate::scenario::load_all(&crate::scenario::Inputs {
        system: None,
        tests_dir: Some(&tests_dir),
        scenario: &path,
        hook_dir: None,
        survey: None,
    })
    .unwrap_or_else(|e| panic!("{e:?}"));
    (dir, s)
}

/// Runs the scenario on the fake on paused time; the outcome, the records' (test, iteration, status) and the
/// runner's results root.
async fn run_on(fake: Arc<Fake>, tests: &str) -> (RunOutcome, Vec<(String, u64, Status)>) {
    run_with(fake, tests, |_| {}).await
}

async fn run_with(
    fake: Arc<Fake>,
    tests: &str,
    setup: impl FnOnce(&Runner),
) -> (RunOutcome, Vec<(String, u64, Status)>) {
    let (dir, s) = scenario(tests);
    let layout = Layout {
        root: dir.path().join("results"),
        step: None,
    };
    let single = fake.single;
    let runner = Runner::builder(fake, s, layout).single_job(single).build();
    setup(&runner);
    // an engine that never ends fails here, after an hour of paused time (a few milliseconds of real time)
    let outcome = tokio::time::timeout(Duration::from_secs(3600), runner.run())
        .await
        .expect("the engine did not finish within an hour");
    let rows = outcome
        .records
        .iter()
        .map(|r| (r.test_id.clone(), r.iteration, r.status))
        .collect();
    (outcome, rows)
}

/// Asks the engine to stop `secs` seconds (of paused time) after it starts.
fn stop_after(secs: u64) -> impl FnOnce(&Runner) {
    move |r| {
        let stop = r.stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(secs)).await;
            stop.request();
        });
    }
}

fn test(id: &str, extra: &str) -> String {
    format!("[[Tests]]\nid = \"{id}\"\ntest_name = \"sleep\"\n{extra}\n")
}

fn dep(kind: &str, on: &str) -> String {
    format!("[[Tests.dependencies]]\ntype = \"{kind}\"\nid = \"{on}\"\n")
}

#[tokio::test(start_paused = true)]
async fn start_post_init_waits_for_the_dependency_to_run_not_to_end() {
    let fake = Fake::new(&[(
        "a",
        Behave {
            queue: 30,
            run: Some(100),
            ..QUICK
        },
    )]);
    let tests = test("a", "") + &test("b", &dep("start_post_init", "a"));
    let (_, rows) = run_on(fake.clone(), &tests).await;
    let a_runs = fake.first("running", "a").unwrap();
    let b_submit = fake.first("submit", "b").unwrap();
    assert!(a_runs >= 30, "{:?}", fake.events());
    assert!(
        b_submit >= a_runs,
        "b submitted at {b_submit}s, before a ran at {a_runs}s"
    );
    assert!(
        b_submit < fake.first("end", "a").unwrap(),
        "b waited for a's end: {:?}",
        fake.events()
    );
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r.2 == Status::Passed), "{rows:?}");
}

#[tokio::test(start_paused = true)]
async fn start_post_comp_waits_for_every_iteration_of_the_dependency() {
    let fake = Fake::new(&[]);
    let tests = test("a", "iterations = 3") + &test("b", &dep("start_post_comp", "a"));
    let (_, rows) = run_on(fake.clone(), &tests).await;
    assert_eq!(fake.count("submit", "a"), 3);
    let a_ends: Vec<u64> = fake
        .events()
        .iter()
        .filter(|e| e.what == "end" && e.test == "a")
        .map(|e| e.at)
        .collect();
    let b_submit = fake.first("submit", "b").unwrap();
    assert!(
        b_submit >= *a_ends.last().unwrap(),
        "b submitted at {b_submit}s before a's last iteration ended ({a_ends:?})"
    );
    assert_eq!(
        rows,
        vec![
            ("a".into(), 0, Status::Passed),
            ("a".into(), 1, Status::Passed),
            ("a".into(), 2, Status::Passed),
            ("b".into(), 0, Status::Passed),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn end_post_comp_stops_the_dependent_when_the_dependency_ends() {
    let fake = Fake::new(&[("server", Behave { run: None, ..QUICK })]);
    // the server runs until the client is done
    let tests = test(
        "server",
        &format!("iterations = 2\n{}", dep("end_post_comp", "client")),
    ) + &test("client", "");
    let (_, rows) = run_on(fake.clone(), &tests).await;
    let client_end = fake.first("end", "client").unwrap();
    let cancel = fake
        .first("cancel", "server")
        .expect("server never stopped");
    assert!(
        cancel >= client_end && cancel <= client_end + 2,
        "{:?}",
        fake.events()
    );
    // a stopped test runs no further iterations
    assert_eq!(fake.count("submit", "server"), 1);
    assert_eq!(
        rows,
        vec![
            ("server".into(), 0, Status::Stopped),
            ("client".into(), 0, Status::Passed),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn iterations_run_one_after_another_and_a_failed_one_does_not_stop_the_rest() {
    let fake = Fake::new(&[("a", Behave { exit: 1, ..QUICK })]);
    let (_, rows) = run_on(fake.clone(), &test("a", "iterations = 3")).await;
    let ev = fake.events();
    let order: Vec<&str> = ev
        .iter()
        .filter(|e| e.what != "running")
        .map(|e| e.what)
        .collect();
    assert_eq!(order, ["submit", "end", "submit", "end", "submit", "end"]);
    assert_eq!(rows.len(), 3);
    assert!(rows.iter().all(|r| r.2 == Status::Failed), "{rows:?}");
}

#[tokio::test(start_paused = true)]
async fn a_job_past_its_time_limit_is_cancelled_and_times_out() {
    let fake = Fake::new(&[("a", Behave { run: None, ..QUICK })]);
    let (outcome, rows) = run_on(fake.clone(), &test("a", "time_limit = \"00:01:00\"")).await;
    let cancel = fake.first("cancel", "a").expect("never cancelled");
    assert!((60..=62).contains(&cancel), "cancelled at {cancel}s");
    assert_eq!(rows, vec![("a".into(), 0, Status::Timeout)]);
    assert_eq!(outcome.records[0].end_reason, EndReason::TimeLimit);
    assert!(!outcome.interrupted);
}

#[tokio::test(start_paused = true)]
async fn an_unschedulable_iteration_skips_the_remaining_ones() {
    let fake = Fake::new(&[(
        "a",
        Behave {
            hopeless: true,
            ..QUICK
        },
    )]);
    let (outcome, rows) = run_on(fake.clone(), &test("a", "iterations = 4")).await;
    assert_eq!(fake.count("submit", "a"), 1);
    assert_eq!(rows, vec![("a".into(), 0, Status::Failed)]);
    assert_eq!(outcome.records[0].end_reason, EndReason::Unschedulable);
    assert!(outcome.records[0]
        .message
        .contains("asks more nodes than the partition has"));
}

#[tokio::test(start_paused = true)]
async fn a_stop_request_cancels_every_running_job_and_submits_nothing_more() {
    let fake = Fake::new(&[
        ("a", Behave { run: None, ..QUICK }),
        ("b", Behave { run: None, ..QUICK }),
    ]);
    let tests = test("a", "") + &test("b", "") + &test("c", &dep("start_post_comp", "a"));
    let (outcome, rows) = run_with(fake.clone(), &tests, stop_after(10)).await;
    assert!(outcome.interrupted);
    assert!(outcome.leftovers.is_empty());
    assert_eq!(fake.count("cancel", "a"), 1);
    assert_eq!(fake.count("cancel", "b"), 1);
    assert_eq!(fake.count("submit", "c"), 0, "{:?}", fake.events());
    assert_eq!(
        rows,
        vec![
            ("a".into(), 0, Status::Cancelled),
            ("b".into(), 0, Status::Cancelled),
            ("c".into(), 0, Status::Skipped),
        ]
    );
    // the whole run took ten seconds of paused time, not real ones
    assert!(fake.first("cancel", "a").unwrap() >= 10);
}

#[tokio::test(start_paused = true)]
async fn independent_tests_start_together() {
    let fake = Fake::new(&[]);
    let tests = test("a", "") + &test("b", "") + &test("c", "");
    let (_, rows) = run_on(fake.clone(), &tests).await;
    for t in ["a", "b", "c"] {
        assert_eq!(fake.first("submit", t), Some(0), "{t}: {:?}", fake.events());
    }
    assert_eq!(rows.len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_submission_the_scheduler_cannot_take_for_now_is_tried_again_a_turn_later() {
    let fake = Fake::new(&[]).failing("a", &[ErrorKind::Transient, ErrorKind::Transient]);
    let (_, rows) = run_on(fake.clone(), &test("a", "")).await;
    assert_eq!(fake.count("refused", "a"), 2);
    assert_eq!(fake.count("submit", "a"), 1);
    // a monitor interval between tries, not a tight loop
    let tries: Vec<u64> = fake
        .events()
        .iter()
        .filter(|e| e.test == "a" && matches!(e.what, "refused" | "submit"))
        .map(|e| e.at)
        .collect();
    assert_eq!(tries, [0, 1, 2], "{:?}", fake.events());
    assert_eq!(rows, vec![("a".into(), 0, Status::Passed)]);
}

#[tokio::test(start_paused = true)]
async fn a_refused_submission_fails_its_iteration_at_once_and_the_next_one_runs() {
    let fake = Fake::new(&[]).failing("a", &[ErrorKind::Refused]);
    let (outcome, rows) = run_on(fake.clone(), &test("a", "iterations = 2")).await;
    assert_eq!(fake.count("refused", "a"), 1);
    assert_eq!(
        rows,
        vec![
            ("a".into(), 0, Status::Failed),
            ("a".into(), 1, Status::Passed)
        ]
    );
    assert_eq!(outcome.records[0].end_reason, EndReason::SubmitFailed);
}

#[tokio::test(start_paused = true)]
async fn transient_failures_past_the_retries_fail_the_iteration() {
    let fake = Fake::new(&[]).failing("a", &[ErrorKind::Transient; 10]);
    let (_, rows) = run_on(fake.clone(), &test("a", "")).await;
    assert_eq!(
        fake.count("refused", "a"),
        super::SUBMIT_RETRIES as usize + 1
    );
    assert_eq!(rows, vec![("a".into(), 0, Status::Failed)]);
}
