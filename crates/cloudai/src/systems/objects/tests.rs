//! The step machine against a scripted backend, in paused time: no API, no sleeping.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use super::*;
use crate::systems::Queued;

/// Answers scripted per step name; every call recorded.
#[derive(Default)]
struct Fake {
    seen: Mutex<BTreeMap<String, VecDeque<Seen>>>,
    /// Polls of `gone` that answer "not yet" after a deletion, per step; `None`: never gone.
    gone_after: Mutex<BTreeMap<String, Option<u32>>>,
    calls: Mutex<Vec<String>>,
    refuse_create: Mutex<Vec<String>>,
    /// Creations of a step the control plane cannot take for now (a 503) before it takes one.
    busy_create: Mutex<BTreeMap<String, u32>>,
    /// The scheduler does not answer deletions and their checks.
    down: Mutex<bool>,
}

impl Fake {
    fn script(&self, step: &str, seen: Vec<Seen>) {
        self.seen.lock().unwrap().insert(step.into(), seen.into());
    }
    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
    fn call(&self, what: &str, step: &Step<()>) {
        self.calls
            .lock()
            .unwrap()
            .push(format!("{what} {}", step.name));
    }
}

#[async_trait]
impl Backend for Arc<Fake> {
    type Spec = ();
    type Handle = u32;
    type Watch = ();
    const RUNNER: &'static str = "FakeRunner";
    const FILE: &'static str = "fake.json";

    fn config(&self) -> &Arc<SystemConfig> {
        unreachable!("the machine tests plan no steps")
    }
    fn spec(
        &self,
        _: &TestRun,
        _: &Launch,
        _: &[(String, String)],
        _: &Naming,
        _: Option<crate::workloads::object::OwnObject>,
    ) {
    }
    fn render(_: &()) -> String {
        String::new()
    }
    fn full_cmd(_: &()) -> String {
        String::new()
    }
    fn check(&self, _: &TestRun) -> Vec<String> {
        Vec::new()
    }
    async fn connect(&self) -> Result<(), SystemError> {
        Ok(())
    }
    fn describe(&self, step: &Step<()>, h: &u32) -> String {
        format!("fake {} ({h})", step.name)
    }
    fn leftover(&self, step: &Step<()>, _: &u32) -> (String, BTreeMap<String, String>) {
        (step.name.clone(), BTreeMap::new())
    }
    fn gone_wait(&self) -> Duration {
        Duration::from_secs(120)
    }
    async fn create(&self, step: &Step<()>) -> Result<u32, SystemError> {
        self.call("create", step);
        if self.refuse_create.lock().unwrap().contains(&step.name) {
            return Err(format!("{} refused", step.name).into());
        }
        if let Some(n) = self.busy_create.lock().unwrap().get_mut(&step.name) {
            if *n > 0 {
                *n -= 1;
                return Err(SystemError::transient("HTTP 503: unavailable"));
            }
        }
        Ok(7)
    }
    async fn adopt(&self, _: &Step<()>) -> Result<Option<u32>, SystemError> {
        Ok(None)
    }
    async fn observe(&self, step: &Step<()>, _: &u32, _: &mut (), _: &mut Vec<Attempt>) -> Seen {
        self.call("observe", step);
        let mut seen = self.seen.lock().unwrap();
        let q = seen.entry(step.name.clone()).or_default();
        if q.len() > 1 {
            q.pop_front().unwrap()
        } else {
            q.front().map_or(Seen::Running, clone_seen)
        }
    }
    async fn wrap_up(&self, step: &Step<()>, _: &u32, _: &mut (), _: &mut Ending) -> Vec<String> {
        self.call("wrap_up", step);
        vec!["node1".into()]
    }
    async fn cancelling(&self, step: &Step<()>, _: &u32, _: &mut ()) {
        self.call("cancelling", step);
    }
    async fn delete(&self, step: &Step<()>, _: &u32) -> Result<(), SystemError> {
        self.call("delete", step);
        if *self.down.lock().unwrap() {
            return Err(SystemError::transient("no answer"));
        }
        Ok(())
    }
    async fn gone(&self, step: &Step<()>, _: &u32) -> Result<bool, SystemError> {
        self.call("gone", step);
        if *self.down.lock().unwrap() {
            return Err(SystemError::transient("no answer"));
        }
        let mut g = self.gone_after.lock().unwrap();
        match g.entry(step.name.clone()).or_insert(Some(0)) {
            None => Ok(false),
            Some(0) => Ok(true),
            Some(n) => {
                *n -= 1;
                Ok(false)
            }
        }
    }
}

fn clone_seen(s: &Seen) -> Seen {
    match s {
        Seen::Waiting(q) => Seen::Waiting(q.clone()),
        Seen::Running => Seen::Running,
        Seen::Ended(e) => Seen::Ended(e.clone()),
        Seen::Vanished(w) => Seen::Vanished(w.clone()),
    }
}

fn ended(ok: bool) -> Seen {
    Seen::Ended(Ending {
        state: if ok { "Completed" } else { "Failed" }.into(),
        failed: !ok,
        reason: if ok { "done" } else { "it failed" }.into(),
        end: None,
        unreadable: false,
        ..Default::default()
    })
}

fn step(part: StepKind, name: &str) -> Step<()> {
    Step {
        part,
        name: name.into(),
        identity: "id".into(),
        dir: PathBuf::from("/nonexistent/cloudai-machine-test"),
        success: Success::ExitStatus,
        spec: (),
    }
}

fn machine(steps: Vec<Step<()>>, fake: &Arc<Fake>) -> Stepped<Arc<Fake>> {
    let m = Stepped::new(fake.clone());
    m.track(&"job".to_string(), Job::new(steps, 0, Some(1)));
    m
}

async fn poll(m: &Stepped<Arc<Fake>>) -> JobState {
    m.poll(&["job".to_string()]).await.remove(0)
}

async fn until_finished(m: &Stepped<Arc<Fake>>) -> JobOutcome {
    for _ in 0..100 {
        if let JobState::Finished(o) = poll(m).await {
            return o;
        }
    }
    panic!("the job never finished")
}

#[tokio::test(start_paused = true)]
async fn steps_run_in_turn_each_gone_before_the_next() {
    let fake = Arc::new(Fake::default());
    fake.script("pre", vec![ended(true)]);
    fake.script(
        "main",
        vec![
            Seen::Waiting(Queued::new("Pending", "no GPUs")),
            Seen::Running,
            ended(true),
        ],
    );
    fake.script("post", vec![ended(false)]);
    let m = machine(
        vec![
            step(StepKind::Pre, "pre"),
            step(StepKind::Main, "main"),
            step(StepKind::Post, "post"),
        ],
        &fake,
    );
    let o = until_finished(&m).await;
    // the test's verdict, not the post-test's
    assert_eq!(o.failure, None);
    assert_eq!(o.state.as_deref(), Some("Completed"));
    assert_eq!(
        fake.calls(),
        [
            "observe pre",
            "wrap_up pre",
            "delete pre",
            "gone pre",
            "create main",
            "observe main",
            "observe main",
            "observe main",
            "wrap_up main",
            "delete main",
            "gone main",
            "create post",
            "observe post",
            "wrap_up post",
            "delete post",
            "gone post"
        ]
    );
    assert_eq!(m.nodes(&"job".to_string()), ["node1"]);
    assert!(m.leftovers().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_failed_pre_test_skips_the_test() {
    let fake = Arc::new(Fake::default());
    fake.script("pre", vec![ended(false)]);
    let m = machine(
        vec![step(StepKind::Pre, "pre"), step(StepKind::Main, "main")],
        &fake,
    );
    let o = until_finished(&m).await;
    assert!(o.failure.unwrap().starts_with("pre-test pre failed"));
    assert!(!fake.calls().contains(&"create main".to_string()));
}

#[tokio::test(start_paused = true)]
async fn an_unconfirmed_deletion_is_a_leftover_not_a_failed_test() {
    let fake = Arc::new(Fake::default());
    fake.script("main", vec![ended(true)]);
    fake.gone_after.lock().unwrap().insert("main".into(), None);
    let m = machine(vec![step(StepKind::Main, "main")], &fake);
    let started = tokio::time::Instant::now();
    let o = until_finished(&m).await;
    assert!(started.elapsed() >= Duration::from_secs(120));
    assert_eq!(o.failure, None, "the test passed");
    let left = m.leftovers();
    assert_eq!(left.len(), 1);
    assert!(
        left[0]
            .reason
            .contains("ended: Completed; deletion not confirmed"),
        "{}",
        left[0].reason
    );
}

#[tokio::test(start_paused = true)]
async fn an_unreadable_object_is_deleted_once_without_waiting() {
    let fake = Arc::new(Fake::default());
    fake.script(
        "main",
        vec![Seen::Ended(Ending {
            state: "Unreadable".into(),
            failed: true,
            reason: "cannot read it: 403".into(),
            end: None,
            unreadable: true,
            ..Default::default()
        })],
    );
    fake.gone_after.lock().unwrap().insert("main".into(), None);
    let m = machine(vec![step(StepKind::Main, "main")], &fake);
    let started = tokio::time::Instant::now();
    let o = until_finished(&m).await;
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(o.failure.as_deref(), Some("cannot read it: 403"));
    assert_eq!(m.leftovers().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn cancel_deletes_and_the_job_ends_cancelled_once_gone() {
    let fake = Arc::new(Fake::default());
    fake.gone_after
        .lock()
        .unwrap()
        .insert("main".into(), Some(3));
    let m = machine(
        vec![step(StepKind::Main, "main"), step(StepKind::Post, "post")],
        &fake,
    );
    assert!(matches!(poll(&m).await, JobState::Running));
    m.cancel(&"job".to_string()).await.unwrap();
    let o = until_finished(&m).await;
    assert_eq!(o.end, Some(EndReason::Cancelled));
    let calls = fake.calls();
    assert_eq!(calls[1..3], ["cancelling main", "delete main"]);
    assert!(m.leftovers().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_vanished_object_fails_the_job_and_a_refused_step_ends_it() {
    let fake = Arc::new(Fake::default());
    fake.script(
        "main",
        vec![Seen::Vanished("deleted outside cloudai".into())],
    );
    let m = machine(vec![step(StepKind::Main, "main")], &fake);
    let o = until_finished(&m).await;
    assert_eq!(
        o.failure.as_deref(),
        Some("fake main (1) disappeared (deleted outside cloudai)")
    );

    let fake = Arc::new(Fake::default());
    fake.script("pre", vec![ended(true)]);
    fake.refuse_create.lock().unwrap().push("main".into());
    let m = machine(
        vec![step(StepKind::Pre, "pre"), step(StepKind::Main, "main")],
        &fake,
    );
    assert_eq!(
        until_finished(&m).await.failure.as_deref(),
        Some("main refused")
    );
}

#[tokio::test(start_paused = true)]
async fn an_unreachable_scheduler_is_asked_less_and_less_often() {
    let fake = Arc::new(Fake::default());
    let m = machine(vec![step(StepKind::Main, "main")], &fake);
    assert!(matches!(poll(&m).await, JobState::Running));
    *fake.down.lock().unwrap() = true;
    assert!(m.cancel(&"job".to_string()).await.is_err());
    // the runner polls every 100 ms for a minute
    for _ in 0..600 {
        assert!(matches!(poll(&m).await, JobState::Running));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let asked = fake
        .calls()
        .iter()
        .filter(|c| c.starts_with("delete") || c.starts_with("gone"))
        .count();
    // 1 + 2 + 4 + 8 + 16 + 30 s pauses: a handful of requests, not ten a second
    assert!(
        (4..=14).contains(&asked),
        "{asked} requests: {:?}",
        fake.calls()
    );
    *fake.down.lock().unwrap() = false;
    let o = until_finished_within(&m, Duration::from_secs(31)).await;
    assert_eq!(o.end, Some(EndReason::Cancelled));
    assert!(m.leftovers().is_empty());
}

async fn until_finished_within(m: &Stepped<Arc<Fake>>, limit: Duration) -> JobOutcome {
    let start = tokio::time::Instant::now();
    while start.elapsed() <= limit {
        if let JobState::Finished(o) = poll(m).await {
            return o;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("not finished within {limit:?}")
}

/// How many times the step was asked to be created.
fn creates(fake: &Fake, name: &str) -> usize {
    fake.calls()
        .iter()
        .filter(|c| *c == &format!("create {name}"))
        .count()
}

#[tokio::test(start_paused = true)]
async fn a_step_the_control_plane_cannot_take_for_now_is_created_at_a_later_poll() {
    let fake = Arc::new(Fake::default());
    fake.script("pre", vec![ended(true)]);
    fake.script("main", vec![Seen::Running, ended(true)]);
    fake.busy_create.lock().unwrap().insert("main".into(), 2);
    let m = machine(
        vec![step(StepKind::Pre, "pre"), step(StepKind::Main, "main")],
        &fake,
    );
    let t0 = tokio::time::Instant::now();
    let o = until_finished_within(&m, Duration::from_secs(60)).await;
    // two 503s, then created: the test ran and its verdict stands
    assert_eq!(o.failure, None, "{:?}", fake.calls());
    assert_eq!(o.state.as_deref(), Some("Completed"));
    assert_eq!(creates(&fake, "main"), 3);
    // asked again after a pause (1 s, then 2 s), not at every poll
    assert!(t0.elapsed() >= Duration::from_secs(3), "{:?}", t0.elapsed());
}

#[tokio::test(start_paused = true)]
async fn a_step_the_control_plane_never_takes_ends_the_job_after_its_tries() {
    let fake = Arc::new(Fake::default());
    fake.script("pre", vec![ended(true)]);
    fake.busy_create.lock().unwrap().insert("main".into(), 100);
    let m = machine(
        vec![step(StepKind::Pre, "pre"), step(StepKind::Main, "main")],
        &fake,
    );
    let o = until_finished_within(&m, Duration::from_secs(600)).await;
    assert_eq!(creates(&fake, "main"), 4);
    let why = o.failure.unwrap_or_default();
    assert!(why.contains("503"), "{why}");
}
