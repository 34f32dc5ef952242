//! The step machine: one observation of a job moves it on — create the step's object, watch it, wrap up its end
//! while it exists, delete it, confirm it is gone, conclude the step (a failed pre-test ends the job), next step.

use std::time::Duration;

use tokio::time::Instant;

use super::hooks::{conclude, StepEnd};
use super::{Backend, Ending, Job, Seen, Step, StepKind, Stepped};
use crate::results::record::{Attempt, Leftover};
use crate::results::EndReason;
use crate::systems::{ErrorKind, JobState};
use crate::workloads::JobOutcome;
use crate::{info, warn};

/// Within one poll, how long we wait for a deleted object to be gone before looking again next poll.
const GONE_INLINE: Duration = Duration::from_secs(5);
const GONE_RECHECK: Duration = Duration::from_millis(250);
/// How many times a step the control plane could not take for now is tried, a growing pause apart.
const CREATE_TRIES: u32 = 4;

fn finished(failure: String) -> JobState {
    JobState::Finished(JobOutcome {
        failure: Some(failure),
        ..Default::default()
    })
}

impl<B: Backend> Stepped<B> {
    /// Advances one job by one observation; returns its state for the runner.
    pub(super) async fn advance(
        &self,
        id: &str,
        j: &mut Job<B>,
        attempts: &mut Vec<Attempt>,
    ) -> JobState {
        if j.current >= j.steps.len() {
            // re-attached after every step had ended
            return JobState::Finished(j.main_outcome.clone().unwrap_or_default());
        }
        let step = j.steps[j.current].clone();
        let Some(h) = j.handle.clone() else {
            if j.cancel_requested {
                // cancelled between two steps: nothing exists to delete
                return JobState::Finished(JobOutcome {
                    end: Some(EndReason::Cancelled),
                    ..Default::default()
                });
            }
            return self.create_step(j, &step).await;
        };
        if j.cancel_requested || j.ending.is_some() {
            return self.await_gone(id, j, &step, &h).await;
        }
        match self
            .backend
            .observe(&step, &h, &mut j.watch, attempts)
            .await
        {
            Seen::Waiting(q) => JobState::Pending(q),
            Seen::Running => JobState::Running,
            Seen::Ended(ending) => self.end_step(id, j, &step, &h, ending).await,
            Seen::Vanished(why) => {
                let (key, _) = self.backend.leftover(&step, &h);
                self.confirmed_gone(&key);
                let _ = self.backend.after_gone(&step, &mut j.watch).await;
                JobState::Finished(JobOutcome {
                    failure: Some(format!(
                        "{} disappeared ({why})",
                        self.backend.describe(&step, &h)
                    )),
                    state: Some("Deleted".into()),
                    ..Default::default()
                })
            }
        }
    }

    /// The step is over (or given up on): what must be read while the object exists, then its deletion; the job
    /// moves on once the object is gone.
    async fn end_step(
        &self,
        id: &str,
        j: &mut Job<B>,
        step: &Step<B::Spec>,
        h: &B::Handle,
        mut ending: Ending,
    ) -> JobState {
        let nodes = self
            .backend
            .wrap_up(step, h, &mut j.watch, &mut ending)
            .await;
        if step.part == StepKind::Main {
            self.facts
                .lock()
                .unwrap()
                .entry(id.to_string())
                .or_default()
                .nodes = nodes;
        }
        let why = format!("ended: {}", ending.state);
        j.ending = Some(ending);
        j.gone_by = Some(Instant::now() + self.backend.gone_wait());
        if let Err(e) = self.delete(id, j, step, h, &why).await {
            warn!("{e}; will retry");
        }
        self.await_gone(id, j, step, h).await
    }

    /// Asks for the object's deletion; until it is confirmed gone it counts as a leftover.
    pub(super) async fn delete(
        &self,
        id: &str,
        j: &mut Job<B>,
        step: &Step<B::Spec>,
        h: &B::Handle,
        why: &str,
    ) -> Result<(), String> {
        let (key, resource) = self.backend.leftover(step, h);
        let left = Leftover {
            job_id: id.to_string(),
            description: self.backend.describe(step, h),
            reason: format!("{why}; deletion not confirmed"),
            resource,
        };
        self.unconfirmed.lock().unwrap().insert(key.clone(), left);
        match self.backend.delete(step, h).await {
            Ok(()) => {
                j.delete_sent = true;
                crate::debug!("Deletion of {} accepted", self.backend.describe(step, h));
                Ok(())
            }
            Err(e) => {
                let msg = format!("cannot delete {}: {e}", self.backend.describe(step, h));
                self.set_unconfirmed_reason(&key, msg.clone());
                Err(msg)
            }
        }
    }

    /// Waits (briefly) for an object we deleted to be gone, asking again for its deletion if that failed before;
    /// past the backend's `gone_wait` the job ends with the object as a leftover.
    async fn await_gone(
        &self,
        id: &str,
        j: &mut Job<B>,
        step: &Step<B::Spec>,
        h: &B::Handle,
    ) -> JobState {
        let gone_by = *j
            .gone_by
            .get_or_insert_with(|| Instant::now() + self.backend.gone_wait());
        // a scheduler that failed to answer is asked again after a growing pause, not at every poll
        if j.retry_at.is_some_and(|at| Instant::now() < at) {
            return self.not_gone_yet(j, step, h, gone_by, None).await;
        }
        if !j.delete_sent {
            if let Err(e) = self.delete(id, j, step, h, "deletion requested").await {
                j.back_off();
                return self.not_gone_yet(j, step, h, gone_by, Some(e)).await;
            }
        }
        let until = Instant::now() + GONE_INLINE;
        loop {
            match self.backend.gone(step, h).await {
                Ok(true) => break,
                Ok(false) if Instant::now() < until => tokio::time::sleep(GONE_RECHECK).await,
                Ok(false) => return self.not_gone_yet(j, step, h, gone_by, None).await,
                Err(e) => {
                    j.back_off();
                    return self
                        .not_gone_yet(j, step, h, gone_by, Some(e.message))
                        .await;
                }
            }
        }
        let (key, _) = self.backend.leftover(step, h);
        self.confirmed_gone(&key);
        info!("Deleted {}", self.backend.describe(step, h));
        self.settle(j, step).await;
        self.next_step(j, step).await
    }

    /// The object is not gone yet: look again next poll, until the backend's `gone_wait` (at once for an object we
    /// cannot read). Then it stays a leftover (named in `leftovers.json`, a warning here) and the step's own
    /// verdict stands: a test that passed is not failed by a deletion we could not confirm.
    async fn not_gone_yet(
        &self,
        j: &mut Job<B>,
        step: &Step<B::Spec>,
        h: &B::Handle,
        gone_by: Instant,
        err: Option<String>,
    ) -> JobState {
        let (key, _) = self.backend.leftover(step, h);
        if let Some(e) = &err {
            self.set_unconfirmed_reason(&key, format!("cannot confirm its deletion: {e}"));
        }
        let unreadable = j.ending.as_ref().is_some_and(|e| e.unreadable);
        if Instant::now() < gone_by && !unreadable {
            return JobState::Running;
        }
        let waited = if unreadable {
            String::new()
        } else {
            format!(" within {} s", self.backend.gone_wait().as_secs())
        };
        warn!(
            "Could not confirm that {} was deleted{waited}{}; it may still hold GPUs (recorded as a leftover)",
            self.backend.describe(step, h),
            err.map(|e| format!(" ({e})")).unwrap_or_default()
        );
        self.settle(j, step).await;
        self.next_step(j, step).await
    }

    /// What the backend settles once the object is gone; an incomplete log is noted on the step's end.
    async fn settle(&self, j: &mut Job<B>, step: &Step<B::Spec>) {
        let incomplete = self.backend.after_gone(step, &mut j.watch).await;
        if let (Some(why), Some(e)) = (incomplete, j.ending.as_mut()) {
            e.log_incomplete.get_or_insert(why);
        }
    }

    /// After the current object is gone: the verdict of the step, then the next step (created at once) or the
    /// job's end.
    async fn next_step(&self, j: &mut Job<B>, step: &Step<B::Spec>) -> JobState {
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
            log_incomplete,
            ..
        }) = j.ending.take()
        else {
            return JobState::Running;
        };
        let ended = StepEnd {
            kind: &step.part,
            name: &step.name,
            dir: &step.dir,
            success: &step.success,
            failed,
            state,
            reason,
            end,
            log_incomplete,
        };
        if let Some(skipped) = conclude(ended, &mut j.main_outcome) {
            return JobState::Finished(skipped);
        }
        j.current += 1;
        j.handle = None;
        j.delete_sent = false;
        j.gone_by = None;
        j.retry_at = None;
        j.failures = 0;
        j.watch = B::Watch::default();
        let Some(next) = j.steps.get(j.current).cloned() else {
            return JobState::Finished(j.main_outcome.clone().unwrap_or_default());
        };
        self.create_step(j, &next).await
    }

    /// Creates the job's current step (a hook or the test after the one before it). A control plane that cannot
    /// take it for now (no answer, 429, 5xx: nothing of it exists) is asked again at a later poll, after a growing
    /// pause, up to [`CREATE_TRIES`] times; a refusal ends the job.
    async fn create_step(&self, j: &mut Job<B>, step: &Step<B::Spec>) -> JobState {
        if j.retry_at.is_some_and(|at| Instant::now() < at) {
            return JobState::Running;
        }
        match self.backend.create(step).await {
            Ok(h) => {
                j.handle = Some(h);
                j.retry_at = None;
                j.failures = 0;
                JobState::Running
            }
            Err(e) if e.kind == ErrorKind::Transient && j.failures + 1 < CREATE_TRIES => {
                j.back_off();
                warn!(
                    "Cannot create {} for now ({e}); trying again (attempt {} of {CREATE_TRIES})",
                    step.name,
                    j.failures + 1
                );
                JobState::Running
            }
            Err(e) => finished(e.message),
        }
    }

    fn set_unconfirmed_reason(&self, key: &str, reason: String) {
        if let Some(l) = self.unconfirmed.lock().unwrap().get_mut(key) {
            l.reason = reason;
        }
    }

    fn confirmed_gone(&self, key: &str) {
        self.unconfirmed.lock().unwrap().remove(key);
    }
}
