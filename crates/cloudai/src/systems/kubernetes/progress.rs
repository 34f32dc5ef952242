//! One observation of a job from the watched objects: the current step's phase, its output pod followed once it
//! runs, and the end of each step (events, nodes, log, then deletion confirmed) before the next step starts.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::client::{describe, status_code};
use super::manifest::Kind;
use super::state::{self, Phase};
use super::step::{Step, StepKind};
use super::{events, logs, Ending, Kubernetes, Podless};
use crate::results::EndReason;
use crate::systems::hooks::{conclude, StepEnd};
use crate::systems::{JobState, Queued};
use crate::workloads::JobOutcome;
use crate::{info, warn};

/// How long the stream of a container that ended may take to deliver the rest of its log.
const LOG_WAIT: Duration = Duration::from_secs(10);
/// Within one poll, how long we wait for a deleted object to be gone before looking again next poll.
const GONE_INLINE: Duration = Duration::from_secs(5);
/// A controller makes pods within a second or two; only after this is a missing pod worth a question.
const PODLESS_GRACE: Duration = Duration::from_secs(3);
const PODLESS_RECHECK: Duration = Duration::from_secs(5);
/// An MPI operator sets an MPIJob's `Created` condition at once; this long without one means there is none.
fn operator_wait() -> Duration {
    let s = std::env::var("CLOUDAI_K8S_OPERATOR_WAIT_S")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(30.0);
    Duration::from_secs_f64(s.max(0.0))
}

/// How long we wait for the API server to confirm a deletion before reporting the object as left over.
fn gone_wait() -> Duration {
    let s = std::env::var("CLOUDAI_K8S_GONE_WAIT_S")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(120.0);
    Duration::from_secs_f64(s.max(0.0))
}

fn phase_of(p: &Value) -> &str {
    p["status"]["phase"].as_str().unwrap_or("")
}

impl Kubernetes {
    pub(super) async fn poll_one(&self, id: &str) -> JobState {
        let (step, created, cancel, deleting, seen) = {
            let jobs = self.jobs.lock().unwrap();
            let Some(j) = jobs.get(id) else {
                return JobState::Finished(JobOutcome::default());
            };
            if j.current >= j.steps.len() {
                return JobState::Finished(j.main_outcome.clone().unwrap_or_default());
            }
            (
                j.steps[j.current].clone(),
                j.created,
                j.cancel_requested,
                j.cancel_requested || j.ending.is_some(),
                j.seen,
            )
        };
        if !created {
            if cancel {
                // cancelled between two steps: nothing exists to delete
                return JobState::Finished(JobOutcome {
                    end: Some(EndReason::Cancelled),
                    ..Default::default()
                });
            }
            return match self.create(&step).await {
                Ok(()) => {
                    if let Some(j) = self.jobs.lock().unwrap().get_mut(id) {
                        j.created = true;
                    }
                    JobState::Running
                }
                Err(e) => JobState::Finished(JobOutcome {
                    failure: Some(e),
                    ..Default::default()
                }),
            };
        }
        if deleting {
            return self.await_gone(id, &step).await;
        }
        let Ok(c) = self.conn().await else {
            return JobState::Finished(JobOutcome::default());
        };
        let read = match c.cache().object(step.kind, &step.name).await {
            Ok(o) => o,
            Err(e) if matches!(status_code(&e), Some(401 | 403)) => {
                // no right to read what we created: waiting cannot help, and the object must still go
                let reason = format!(
                    "cannot read Kubernetes {} {}: {}",
                    step.kind.name(),
                    step.name,
                    describe(&e)
                );
                let ending = Ending {
                    state: "Unreadable".into(),
                    failed: true,
                    reason,
                    end: None,
                };
                let pods = c.cache().pods(&step.name).await;
                let refs: Vec<&Value> = pods.iter().collect();
                return self.end_step(id, &step, &refs, ending).await;
            }
            Err(e) => {
                let why = format!("cannot read it: {}", describe(&e));
                return if seen {
                    JobState::Running
                } else {
                    JobState::Pending(Queued::new("Created", &why))
                };
            }
        };
        let Some(obj) = read else {
            if seen && matches!(self.gone(&step).await, Ok(true)) {
                self.confirmed_gone(&step.name);
                return JobState::Finished(JobOutcome {
                    failure: Some(format!(
                        "Kubernetes {} {} disappeared (deleted outside cloudai)",
                        step.kind.name(),
                        step.name
                    )),
                    state: Some("Deleted".into()),
                    ..Default::default()
                });
            }
            return JobState::Pending(Queued::new("Created", "waiting for the watch to show it"));
        };
        let pods = c.cache().pods(&step.name).await;
        let refs: Vec<&Value> = pods.iter().collect();
        self.note_restarts(id, &refs);
        self.follow_log(id, &step, &refs);
        if let Some(j) = self.jobs.lock().unwrap().get_mut(id) {
            j.seen = true;
            if !refs.is_empty() {
                j.podless = None;
            }
        }
        match state::evaluate(step.kind, &obj, &refs) {
            Phase::Waiting {
                state,
                reason,
                unschedulable,
            } => {
                // no pod at all: the controller's own complaint says why, and waiting on it is bounded
                let why = if pods.is_empty() {
                    self.podless(id, &step, &obj).await
                } else {
                    None
                };
                JobState::Pending(Queued {
                    state,
                    reason: why.clone().unwrap_or(reason),
                    hopeless: None,
                    blocked: why.or(unschedulable),
                })
            }
            Phase::Running => JobState::Running,
            Phase::Ended {
                ok,
                state,
                reason,
                end,
            } => {
                let ending = Ending {
                    state,
                    failed: !ok,
                    reason,
                    end,
                };
                self.end_step(id, &step, &refs, ending).await
            }
        }
    }

    /// Why the step's object has no pod yet, once that lasted longer than a controller takes: its newest Warning
    /// event (asked at most every few seconds), or for an MPIJob no operator ever giving it a status.
    async fn podless(&self, id: &str, step: &Step, obj: &Value) -> Option<String> {
        let now = Instant::now();
        let (since, checked, why) = {
            let mut jobs = self.jobs.lock().unwrap();
            let j = jobs.get_mut(id)?;
            let p = j.podless.get_or_insert(Podless {
                since: now,
                checked: None,
                why: None,
            });
            (p.since, p.checked, p.why.clone())
        };
        if now - since < PODLESS_GRACE || checked.is_some_and(|c| now - c < PODLESS_RECHECK) {
            return why;
        }
        let c = self.conn().await.ok()?;
        let api = kube::Api::namespaced(c.client.clone(), self.ns());
        let mut why = events::latest_warning(&api, &step.name).await;
        if why.is_none()
            && step.kind == Kind::MpiJob
            && obj["status"]["conditions"]
                .as_array()
                .is_none_or(|c| c.is_empty())
            && now - since >= operator_wait()
        {
            why = Some(format!(
                "no MPI operator took MPIJob {} up within {} s (no status, no pods, no events): is the Kubeflow \
                 MPI operator (kubeflow.org/v2beta1) running in the cluster?",
                step.name,
                operator_wait().as_secs()
            ));
        }
        if let Some(p) = self
            .jobs
            .lock()
            .unwrap()
            .get_mut(id)
            .and_then(|j| j.podless.as_mut())
        {
            p.checked = Some(now);
            p.why = why.clone();
        }
        why
    }

    /// Records every new container restart as an attempt (a worker that crashed and came back).
    fn note_restarts(&self, id: &str, pods: &[&Value]) {
        let mut jobs = self.jobs.lock().unwrap();
        let Some(j) = jobs.get_mut(id) else { return };
        for p in pods {
            let n = state::restarts(p);
            let name = state::name(p).to_string();
            let before = j.restarts.get(&name).copied().unwrap_or(0);
            if n > before {
                if let Some(a) = state::restart_attempt(p) {
                    warn!("{} ({})", a.reason, a.state);
                    j.attempts.push(a);
                }
                j.restarts.insert(name, n);
            }
        }
    }

    /// The pod whose log is the step's output, once it has started (or already ended).
    fn log_pod<'a>(step: &Step, pods: &[&'a Value]) -> Option<&'a Value> {
        let (role, _) = step.log_source();
        pods.iter()
            .copied()
            .filter(|p| p["metadata"]["labels"][super::manifest::ROLE_LABEL] == role)
            .find(|p| matches!(phase_of(p), "Running" | "Succeeded" | "Failed"))
    }

    fn follow_log(&self, id: &str, step: &Step, pods: &[&Value]) {
        let Some(pod) = Self::log_pod(step, pods) else {
            return;
        };
        let Some(c) = self.conn.get() else { return };
        let mut jobs = self.jobs.lock().unwrap();
        let Some(j) = jobs.get_mut(id) else { return };
        if j.log.is_some() || j.log_pod.is_some() {
            return;
        }
        let name = state::name(pod).to_string();
        j.log_pod = Some(name.clone());
        if let Err(e) = std::fs::create_dir_all(&step.dir) {
            warn!("Cannot create {}: {e}", step.dir.display());
        }
        let (_, container) = step.log_source();
        j.log = Some(logs::Follow::start(
            self.pod_api(c),
            name,
            container.to_string(),
            step.dir.join("stdout.txt"),
        ));
    }

    /// Settles the step's `stdout.txt` while its pods still exist.
    pub(super) async fn settle_log(
        &self,
        id: &str,
        step: &Step,
        pods: &[&Value],
        state: &str,
        wait: Duration,
    ) {
        let Some(c) = self.conn.get() else { return };
        let (follow, known) = {
            let mut jobs = self.jobs.lock().unwrap();
            let Some(j) = jobs.get_mut(id) else { return };
            (j.log.take(), j.log_pod.take())
        };
        let pod = known.or_else(|| Self::log_pod(step, pods).map(|p| state::name(p).to_string()));
        let (_, container) = step.log_source();
        let never_ran = pod.is_none().then(|| {
            format!(
                "{} {} never ran its {} pod ({state})",
                step.kind.name(),
                step.name,
                step.log_source().0
            )
        });
        let out = step.dir.join("stdout.txt");
        if let Err(e) = std::fs::create_dir_all(&step.dir) {
            warn!("Cannot create {}: {e}", step.dir.display());
        }
        let target = pod.as_deref().map(|p| (p, container));
        logs::settle(&self.pod_api(c), target, follow, &out, never_ran, wait).await;
    }

    /// The step is over: events, nodes and the whole log while everything still exists, then its deletion; the
    /// job moves on once the object is gone.
    async fn end_step(
        &self,
        id: &str,
        step: &Step,
        pods: &[&Value],
        mut ending: Ending,
    ) -> JobState {
        let last_event = self.write_events(step).await;
        self.settle_log(id, step, pods, &ending.state, LOG_WAIT)
            .await;
        if ending.failed {
            if let Some(e) = last_event {
                ending.reason = format!("{} (last event: {e})", ending.reason);
            }
        }
        let why = format!("ended: {}", ending.state);
        if let Some(j) = self.jobs.lock().unwrap().get_mut(id) {
            if step.kind_of == StepKind::Main {
                j.nodes = state::nodes(pods);
            }
            j.ending = Some(ending);
            j.gone_by = Some(Instant::now() + gone_wait());
        }
        if let Err(e) = self.delete(id, step, &why).await {
            warn!("{e}; will retry");
        }
        self.await_gone(id, step).await
    }

    /// Waits (briefly) for an object we deleted to be gone, asking again for its deletion if that failed before;
    /// past `gone_wait` the job ends with the object as a leftover.
    async fn await_gone(&self, id: &str, step: &Step) -> JobState {
        let (sent, gone_by) = {
            let mut jobs = self.jobs.lock().unwrap();
            let Some(j) = jobs.get_mut(id) else {
                return JobState::Finished(JobOutcome::default());
            };
            let by = *j
                .gone_by
                .get_or_insert_with(|| Instant::now() + gone_wait());
            (j.delete_sent, by)
        };
        if !sent {
            let _ = self.delete(id, step, "deletion requested").await;
        }
        let until = Instant::now() + GONE_INLINE;
        loop {
            match self.gone(step).await {
                Ok(true) => break,
                Ok(false) if Instant::now() < until => {
                    tokio::time::sleep(Duration::from_millis(200)).await
                }
                Ok(false) => return self.not_gone_yet(id, step, gone_by, None),
                Err(e) => return self.not_gone_yet(id, step, gone_by, Some(e)),
            }
        }
        self.confirmed_gone(&step.name);
        info!(
            "Deleted Kubernetes {} {}/{}",
            step.kind.name(),
            self.ns(),
            step.name
        );
        self.next_step(id, step)
    }

    fn not_gone_yet(
        &self,
        id: &str,
        step: &Step,
        gone_by: Instant,
        err: Option<String>,
    ) -> JobState {
        if let Some(e) = &err {
            self.set_unconfirmed_reason(&step.name, format!("cannot confirm its deletion: {e}"));
        }
        if Instant::now() < gone_by {
            return JobState::Running;
        }
        let failure = format!(
            "could not confirm that Kubernetes {} {}/{} was deleted within {} s{}; it may still hold GPUs",
            step.kind.name(),
            self.ns(),
            step.name,
            gone_wait().as_secs(),
            err.map(|e| format!(" ({e})")).unwrap_or_default()
        );
        let mut jobs = self.jobs.lock().unwrap();
        let main = jobs.get_mut(id).and_then(|j| j.main_outcome.take());
        JobState::Finished(JobOutcome {
            failure: Some(failure),
            ..main.unwrap_or_default()
        })
    }

    /// After the current object is gone: the verdict of the step, then the next step or the job's end.
    fn next_step(&self, id: &str, step: &Step) -> JobState {
        let mut jobs = self.jobs.lock().unwrap();
        let Some(j) = jobs.get_mut(id) else {
            return JobState::Finished(JobOutcome::default());
        };
        if j.cancel_requested {
            return JobState::Finished(JobOutcome {
                end: Some(EndReason::Cancelled),
                state: Some("Deleted".into()),
                ..j.main_outcome.clone().unwrap_or_default()
            });
        }
        let Some(Ending {
            state,
            failed,
            reason,
            end,
        }) = j.ending.take()
        else {
            return JobState::Running;
        };
        let ended = StepEnd {
            kind: &step.kind_of,
            name: &step.name,
            dir: &step.dir,
            success: &step.success,
            failed,
            state,
            reason,
            end,
        };
        if let Some(skipped) = conclude(ended, &mut j.main_outcome) {
            return JobState::Finished(skipped);
        }
        j.current += 1;
        j.podless = None;
        j.created = false;
        j.seen = false;
        j.delete_sent = false;
        j.gone_by = None;
        j.log = None;
        j.log_pod = None;
        if j.current >= j.steps.len() {
            return JobState::Finished(j.main_outcome.clone().unwrap_or_default());
        }
        JobState::Running
    }
}
