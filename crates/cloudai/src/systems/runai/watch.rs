//! One observation of a job: the current workload's phase, its log followed once it runs, and the end of each
//! step (events, nodes, log, then deletion confirmed) before the next step starts or the job finishes.

use std::time::{Duration, Instant};

use reqwest::Method;

use super::client::ApiError;
use super::{logs, Ending, RunAi, Step, StepKind};
use crate::results::EndReason;
use crate::systems::hooks::{conclude, StepEnd};
use crate::systems::{JobState, Queued};
use crate::workloads::JobOutcome;
use crate::{info, warn};

const MAX_READ_FAILURES: u32 = 10;
/// How long an ended stream may take to deliver the rest of a finished workload's log.
const LOG_WAIT: Duration = Duration::from_secs(30);
/// Within one poll, how long we wait for a deleted workload to be gone before looking again next poll.
const GONE_INLINE: Duration = Duration::from_secs(5);

fn secs_from_env(var: &str, default: f64) -> Duration {
    let s = std::env::var(var)
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(default);
    Duration::from_secs_f64(s.max(0.0))
}

/// How long a Degraded workload (a pod failed, the rest run on) may recover before it counts as failed.
fn degraded_grace() -> Duration {
    secs_from_env("CLOUDAI_RUNAI_DEGRADED_GRACE_S", 60.0)
}

/// How long we wait for the control plane to confirm a deletion before reporting the workload as left over.
fn gone_wait() -> Duration {
    secs_from_env("CLOUDAI_RUNAI_GONE_WAIT_S", 120.0)
}

fn is_running_phase(p: &str) -> bool {
    matches!(
        p,
        "Running" | "Degraded" | "Completed" | "Failed" | "Stopped"
    )
}

impl RunAi {
    /// Advances one job by one observation; returns its state for the runner.
    pub(super) async fn advance(&self, job_id: &str) -> JobState {
        let (step, wid, cancel, deleting) = {
            let jobs = self.jobs.lock().unwrap();
            let Some(j) = jobs.get(job_id) else {
                return JobState::Finished(JobOutcome::default());
            };
            if j.current >= j.steps.len() {
                // re-attached after every step had ended
                return JobState::Finished(j.main_outcome.clone().unwrap_or_default());
            }
            (
                j.steps[j.current].clone(),
                j.workload_id.clone(),
                j.cancel_requested,
                j.cancel_requested || j.ending.is_some(),
            )
        };
        let Some(wid) = wid else {
            if cancel {
                // cancelled between two steps: nothing exists to delete
                return JobState::Finished(JobOutcome {
                    end: Some(EndReason::Cancelled),
                    ..Default::default()
                });
            }
            return JobState::Pending(Queued::new("Submitting", ""));
        };
        let Ok(client) = self.client() else {
            return JobState::Finished(JobOutcome::default());
        };
        if deleting {
            return self.await_gone(job_id, &step, &wid).await;
        }
        let path = format!("{}/{wid}", step.kind_path());
        let v = match client.call(Method::GET, &path, &[], None).await {
            Ok(v) => v,
            Err(ApiError::Status { code: 404, .. }) => {
                self.confirmed_gone(&wid);
                self.finish_log(job_id, &step, "Deleted", false).await;
                return JobState::Finished(JobOutcome {
                    end: Some(EndReason::Exited),
                    failure: Some(format!(
                        "Run:ai workload {} disappeared (deleted outside cloudai)",
                        step.name
                    )),
                    state: Some("Deleted".into()),
                    ..Default::default()
                });
            }
            Err(e) => return self.read_failed(job_id, &step, &wid, e).await,
        };
        if let Some(j) = self.jobs.lock().unwrap().get_mut(job_id) {
            j.read_failures = 0;
        }
        let phase = v["actualPhase"].as_str().unwrap_or("Unknown").to_string();
        if is_running_phase(&phase) {
            self.follow_log(job_id, &step);
        }
        let failed = match phase.as_str() {
            "Creating" | "Pending" | "Initializing" | "Resuming" => {
                return JobState::Pending(Queued::new(phase, ""))
            }
            "Completed" => false,
            "Failed" | "Stopped" => true,
            "Degraded" => {
                let since = {
                    let mut jobs = self.jobs.lock().unwrap();
                    let j = jobs.get_mut(job_id).unwrap();
                    *j.degraded_since.get_or_insert_with(Instant::now)
                };
                if since.elapsed() < degraded_grace() {
                    return JobState::Running;
                }
                true
            }
            _ => return JobState::Running,
        };
        self.end_step(job_id, &step, &wid, phase, failed).await
    }

    async fn read_failed(&self, job_id: &str, step: &Step, wid: &str, e: ApiError) -> JobState {
        let n = self.jobs.lock().unwrap().get_mut(job_id).map_or(0, |j| {
            j.read_failures += 1;
            j.read_failures
        });
        // A control plane that keeps refusing (403, a deleted project) will not recover on its own.
        if n >= MAX_READ_FAILURES && e.code().is_some_and(|c| (400..500).contains(&c)) {
            let failure = format!(
                "cannot read Run:ai workload {} ({n} polls in a row): {e}",
                step.name
            );
            // we stop watching it: it must not run on unseen (a leftover if the deletion is refused too)
            if let Err(d) = self.delete(job_id, wid, step, &failure).await {
                warn!("{d}");
            }
            return JobState::Finished(JobOutcome {
                failure: Some(failure),
                ..Default::default()
            });
        }
        warn!("Cannot read Run:ai workload {}: {e}; will retry", step.name);
        JobState::Running
    }

    fn follow_log(&self, job_id: &str, step: &Step) {
        let mut jobs = self.jobs.lock().unwrap();
        let Some(j) = jobs.get_mut(job_id) else {
            return;
        };
        if j.ran {
            return;
        }
        j.ran = true;
        if let Ok(c) = self.client() {
            if let Err(e) = std::fs::create_dir_all(&step.dir) {
                warn!("Cannot create {}: {e}", step.dir.display());
            }
            j.log = Some(logs::Follow::start(
                c.clone(),
                step.log_target(self.r()),
                step.dir.join("stdout.txt"),
            ));
        }
    }

    /// The step is over (or given up on): events, nodes and the whole log while the workload still exists,
    /// then its deletion; the job moves on once the workload is gone.
    async fn end_step(
        &self,
        job_id: &str,
        step: &Step,
        wid: &str,
        phase: String,
        failed: bool,
    ) -> JobState {
        let last_event = self.write_events(wid, step, false).await;
        let nodes = if step.kind == StepKind::Main {
            self.pods(wid).await
        } else {
            Vec::new()
        };
        // a finished workload's stream closes by itself; a Degraded one runs on until deleted
        if phase != "Degraded" {
            self.finish_log(job_id, step, &phase, true).await;
        }
        let reason = format!(
            "Run:ai workload {} ended in phase {phase}{}",
            step.name,
            last_event
                .map(|e| format!(" (last event {e})"))
                .unwrap_or_default()
        );
        if let Some(j) = self.jobs.lock().unwrap().get_mut(job_id) {
            if step.kind == StepKind::Main {
                j.nodes = nodes;
            }
            j.ending = Some(Ending {
                phase: phase.clone(),
                failed,
                reason,
            });
            j.gone_by = Some(Instant::now() + gone_wait());
        }
        if phase == "Degraded" {
            warn!(
                "Run:ai workload {} stayed Degraded for {} s: deleting it (it would keep its GPUs)",
                step.name,
                degraded_grace().as_secs()
            );
        }
        if let Err(e) = self
            .delete(job_id, wid, step, &format!("ended in phase {phase}"))
            .await
        {
            warn!("{e}; will retry");
        }
        self.await_gone(job_id, step, wid).await
    }

    /// Waits (briefly) for a workload we deleted to be gone, asking again for its deletion if that failed
    /// before; once gone, the job moves on. Past `gone_wait` the job ends with the workload as a leftover.
    async fn await_gone(&self, job_id: &str, step: &Step, wid: &str) -> JobState {
        let (sent, gone_by) = {
            let mut jobs = self.jobs.lock().unwrap();
            let Some(j) = jobs.get_mut(job_id) else {
                return JobState::Finished(JobOutcome::default());
            };
            let by = *j
                .gone_by
                .get_or_insert_with(|| Instant::now() + gone_wait());
            (j.delete_sent, by)
        };
        if !sent {
            let _ = self.delete(job_id, wid, step, "deletion requested").await;
        }
        let Ok(client) = self.client() else {
            return JobState::Finished(JobOutcome::default());
        };
        let path = format!("{}/{wid}", step.kind_path());
        let until = Instant::now() + GONE_INLINE;
        loop {
            match client.call_brief(Method::GET, &path, &[], None).await {
                Err(ApiError::Status { code: 404, .. }) => break,
                Ok(_) if Instant::now() < until => {
                    tokio::time::sleep(Duration::from_millis(250)).await
                }
                Ok(_) => return self.not_gone_yet(job_id, step, wid, gone_by, None),
                Err(e) => return self.not_gone_yet(job_id, step, wid, gone_by, Some(e)),
            }
        }
        self.confirmed_gone(wid);
        info!("Run:ai workload {} deleted", step.name);
        self.finish_log(job_id, step, "Deleted", false).await;
        self.next_step(job_id, step)
    }

    fn not_gone_yet(
        &self,
        job_id: &str,
        step: &Step,
        wid: &str,
        gone_by: Instant,
        err: Option<ApiError>,
    ) -> JobState {
        if let Some(e) = &err {
            self.set_unconfirmed_reason(wid, format!("cannot confirm its deletion: {e}"));
        }
        if Instant::now() < gone_by {
            return JobState::Running;
        }
        let failure = format!(
            "could not confirm that Run:ai workload {} (id {wid}, project {}) was deleted within {} s{}; it may \
             still hold GPUs",
            step.name,
            self.r().project_id,
            gone_wait().as_secs(),
            err.map(|e| format!(" ({e})")).unwrap_or_default()
        );
        let mut jobs = self.jobs.lock().unwrap();
        let main = jobs.get_mut(job_id).and_then(|j| j.main_outcome.take());
        JobState::Finished(JobOutcome {
            failure: Some(failure),
            ..main.unwrap_or_default()
        })
    }

    /// After the current workload is gone: the verdict of the step, then the next step or the job's end.
    fn next_step(&self, job_id: &str, step: &Step) -> JobState {
        let mut jobs = self.jobs.lock().unwrap();
        let Some(j) = jobs.get_mut(job_id) else {
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
            phase,
            failed,
            reason,
        }) = j.ending.take()
        else {
            return JobState::Running;
        };
        let ended = StepEnd {
            kind: &step.kind,
            name: &step.name,
            dir: &step.dir,
            success: &step.success,
            failed,
            state: phase,
            reason,
            end: None,
        };
        if let Some(skipped) = conclude(ended, &mut j.main_outcome) {
            return JobState::Finished(skipped);
        }
        j.current += 1;
        j.workload_id = None;
        j.delete_sent = false;
        j.gone_by = None;
        j.ran = false;
        j.log = None;
        j.log_settled = false;
        j.degraded_since = None;
        if j.current >= j.steps.len() {
            return JobState::Finished(j.main_outcome.clone().unwrap_or_default());
        }
        JobState::Running
    }

    /// Settles the step's `stdout.txt`: the followed stream when it delivered, else the whole log read again
    /// while the workload exists, else a "logs unavailable" line saying why (never a silent empty file).
    async fn finish_log(&self, job_id: &str, step: &Step, phase: &str, exists: bool) {
        let (follow, ran) = {
            let mut jobs = self.jobs.lock().unwrap();
            match jobs.get_mut(job_id) {
                Some(j) if !j.log_settled => {
                    j.log_settled = true;
                    (j.log.take(), j.ran)
                }
                _ => return,
            }
        };
        let out = step.dir.join("stdout.txt");
        let why = match follow {
            Some(f) => match f.finish(if exists { LOG_WAIT } else { GONE_INLINE }).await {
                (_, Ok(n)) if n > 0 => return,
                (0, Ok(_)) => "the log stream was empty".to_string(),
                (0, Err(e)) => e,
                (n, Err(e)) if !exists => {
                    warn!(
                        "The log stream of {} ended early ({e}); stdout.txt keeps the {n} bytes received",
                        step.name
                    );
                    return;
                }
                (_, r) => r.err().unwrap_or_default(),
            },
            None if !ran => {
                let line = format!(
                    "logs unavailable: Run:ai workload {} never ran (it ended in phase {phase})\n",
                    step.name
                );
                if !out.exists() {
                    let _ = crate::util::fsx::write_atomic(&out, line.as_bytes());
                }
                return;
            }
            None => "the log stream was never opened".to_string(),
        };
        if exists {
            if let Ok(c) = self.client() {
                match logs::fetch(c, &step.log_target(self.r())).await {
                    Ok(b) if !b.is_empty() => {
                        if let Err(e) = crate::util::fsx::write_atomic(&out, &b) {
                            warn!("Cannot write {}: {e}", out.display());
                        }
                        return;
                    }
                    Ok(_) => {}
                    Err(e) => warn!("Cannot read the log of {} again: {e}", step.name),
                }
            }
        }
        warn!("No log for Run:ai workload {}: {why}", step.name);
        let line = format!("logs unavailable: {why}\n");
        if let Err(e) = crate::util::fsx::write_atomic(&out, line.as_bytes()) {
            warn!("Cannot write {}: {e}", out.display());
        }
    }
}
