//! One look at a step: the workload's phase, its log followed once it runs; and at its end, events, nodes and
//! the whole log while the workload still exists.

use std::time::{Duration, Instant};

use reqwest::Method;

use super::client::ApiError;
use super::plan::Step;
use super::state::{self, Phase};
use super::{logs, RunAi};
use crate::systems::objects::{secs_from_env, Ending, Seen, StepKind};
use crate::systems::Queued;
use crate::warn;

/// Polls in a row whose GET was refused (after its own retries) before waiting is given up.
const MAX_READ_FAILURES: u32 = 10;
/// How long an ended stream may take to deliver the rest of a finished workload's log.
const LOG_WAIT: Duration = Duration::from_secs(30);
/// How long a deleted workload's stream may take to close.
const GONE_LOG_WAIT: Duration = Duration::from_secs(5);

/// How long a Degraded workload (a pod failed, the rest run on) may recover before it counts as failed.
fn degraded_grace() -> Duration {
    secs_from_env("CLOUDAI_RUNAI_DEGRADED_GRACE_S", 60.0)
}

/// How long we wait for the control plane to confirm a deletion before reporting the workload as left over.
pub(super) fn gone_wait() -> Duration {
    secs_from_env("CLOUDAI_RUNAI_GONE_WAIT_S", 120.0)
}

/// What we keep while watching one step.
#[derive(Debug, Default)]
pub struct Watch {
    /// The workload reached a running phase (its log exists).
    ran: bool,
    log: Option<logs::Follow>,
    /// `stdout.txt` of the step is final.
    log_settled: bool,
    degraded_since: Option<Instant>,
    /// Polls in a row whose GET failed (after its own retries).
    read_failures: u32,
    /// When the events of a waiting workload were last read (an image that cannot be pulled shows there).
    events_read: Option<Instant>,
    unknown_told: bool,
}

/// How often the events of a waiting workload are read.
const WAITING_EVENTS_EVERY: Duration = Duration::from_secs(10);

impl RunAi {
    pub(super) async fn look(&self, step: &Step, wid: &str, w: &mut Watch) -> Seen {
        let Ok(client) = self.client() else {
            return Seen::Running;
        };
        let path = format!("/api/v1/workloads/{wid}");
        let listed = self.listed.lock().unwrap().remove(wid);
        let got = match listed {
            Some(v) => Ok(v),
            None => client.call(Method::GET, &path, &[], None).await,
        };
        let v = match got {
            Ok(v) => v,
            Err(ApiError::Status { code: 404, .. }) => {
                return Seen::Vanished("deleted outside cloudai".into())
            }
            Err(e) => return self.read_failed(step, w, e),
        };
        w.read_failures = 0;
        if state::has_run(&v) {
            self.follow_log(step, w).await;
        }
        match state::evaluate(&v) {
            Phase::Waiting { state, reason } => {
                // pods placed, containers being made: where an image pull fails
                if state == "Initializing" {
                    if let Some(end) = self.image_pull_failed(wid, step, w).await {
                        return end;
                    }
                }
                Seen::Waiting(Queued {
                    blocked: state::unschedulable(&v).then(|| reason.clone()),
                    ..Queued::new(state, reason)
                })
            }
            Phase::Running if state::phase(&v) == "Unknown" => {
                if !w.unknown_told {
                    w.unknown_told = true;
                    warn!(
                        "Run:ai reports workload {} as Unknown (the cluster may be disconnected); still watching it",
                        step.name
                    );
                }
                Seen::Running
            }
            Phase::Running => Seen::Running,
            Phase::Degraded => {
                let since = *w.degraded_since.get_or_insert_with(Instant::now);
                if since.elapsed() < degraded_grace() {
                    return Seen::Running;
                }
                warn!(
                    "Run:ai workload {} stayed Degraded for {} s: deleting it (it would keep its GPUs)",
                    step.name,
                    degraded_grace().as_secs()
                );
                self.ended(step, "Degraded", true)
            }
            Phase::Ended { ok, state } => self.ended(step, &state, !ok),
        }
    }

    /// A waiting workload whose image cannot be pulled ends at once with the kubelet's words, as on Kubernetes
    /// (its events are read at most every few seconds while it waits).
    async fn image_pull_failed(&self, wid: &str, step: &Step, w: &mut Watch) -> Option<Seen> {
        if w.events_read
            .is_some_and(|t| t.elapsed() < WAITING_EVENTS_EVERY)
        {
            return None;
        }
        w.events_read = Some(Instant::now());
        let c = self.client().ok()?;
        let path = format!("/api/v1/workloads/{wid}/events");
        let events = c
            .list_all(&path, "events", &[("sortOrder", "asc".to_string())], true)
            .await
            .ok()?;
        let why = state::image_pull_failure(&events)?;
        Some(Seen::Ended(Ending {
            state: "ImagePullBackOff".into(),
            failed: true,
            reason: format!("Run:ai workload {}: {why}", step.name),
            end: Some(crate::results::EndReason::ImagePullFailed),
            ..Default::default()
        }))
    }

    fn ended(&self, step: &Step, phase: &str, failed: bool) -> Seen {
        Seen::Ended(Ending {
            state: phase.to_string(),
            failed,
            reason: format!("Run:ai workload {} ended in phase {phase}", step.name),
            end: None,
            unreadable: false,
            ..Default::default()
        })
    }

    /// A GET that failed after its own retries: waiting goes on, unless the control plane keeps refusing us (403,
    /// a deleted project), which will not change by itself. A rate limit (429) is never a reason to give up.
    fn read_failed(&self, step: &Step, w: &mut Watch, e: ApiError) -> Seen {
        w.read_failures += 1;
        let n = w.read_failures;
        let refused = e
            .code()
            .is_some_and(|c| (400..500).contains(&c) && c != 429 && c != 408);
        if n >= MAX_READ_FAILURES && refused {
            return Seen::Ended(Ending {
                state: "Unreadable".into(),
                failed: true,
                reason: format!(
                    "cannot read Run:ai workload {} ({n} polls in a row): {e}",
                    step.name
                ),
                end: None,
                unreadable: true,
                ..Default::default()
            });
        }
        warn!("Cannot read Run:ai workload {}: {e}; will retry", step.name);
        Seen::Running
    }

    async fn follow_log(&self, step: &Step, w: &mut Watch) {
        if w.ran {
            return;
        }
        w.ran = true;
        let Ok(c) = self.client() else { return };
        let url = match self.log_url(step).await {
            Ok(u) => u,
            Err(e) => {
                warn!("Cannot follow the log of {}: {e}", step.name);
                return;
            }
        };
        if let Err(e) = std::fs::create_dir_all(&step.dir) {
            warn!("Cannot create {}: {e}", step.dir.display());
        }
        w.log = Some(logs::Follow::start(
            c.clone(),
            url,
            step.dir.join("stdout.txt"),
        ));
    }

    /// The step is over: events, nodes and the whole log while the workload still exists (a Degraded one runs
    /// on until deleted: its log is settled once it is gone).
    pub(super) async fn end_of(
        &self,
        step: &Step,
        wid: &str,
        w: &mut Watch,
        ending: &mut Ending,
    ) -> Vec<String> {
        if let Some(e) = self.write_events(wid, step, false).await {
            ending.reason = format!("{} (last event {e})", ending.reason);
        }
        let nodes = if step.part == StepKind::Main {
            self.pods(wid).await
        } else {
            Vec::new()
        };
        // a Degraded workload runs on until deleted; an unreadable one cannot be asked for its log again
        if ending.state != "Degraded" {
            ending.log_incomplete = self
                .finish_log(step, w, &ending.state, !ending.unreadable)
                .await;
        }
        nodes
    }

    /// Settles the step's `stdout.txt`: the followed stream when it delivered the whole log, else the whole log
    /// read again while the workload exists, else what the stream delivered, else a "logs unavailable" line
    /// saying why (never a silent empty file). Returns why the log is incomplete, when it is.
    pub(super) async fn finish_log(
        &self,
        step: &Step,
        w: &mut Watch,
        phase: &str,
        exists: bool,
    ) -> Option<String> {
        if w.log_settled {
            return None;
        }
        w.log_settled = true;
        let out = step.dir.join("stdout.txt");
        let (kept, why) = match w.log.take() {
            Some(f) => match f
                .finish(if exists { LOG_WAIT } else { GONE_LOG_WAIT })
                .await
            {
                (_, Ok(n)) if n > 0 => return None,
                (n, Ok(_)) => (n, "the log stream was empty".to_string()),
                (n, Err(e)) => (n, e),
            },
            None if !w.ran => {
                let line = format!(
                    "logs unavailable: Run:ai workload {} never ran (it ended in phase {phase})\n",
                    step.name
                );
                if !out.exists() {
                    let _ = crate::util::fsx::write_atomic(&out, line.as_bytes());
                }
                return None;
            }
            None => (0, "the log stream was never opened".to_string()),
        };
        if exists {
            if let (Ok(c), Ok(url)) = (self.client(), self.log_url(step).await) {
                match logs::fetch(c, &url).await {
                    Ok(b) if !b.is_empty() && b.len() as u64 >= kept => {
                        if let Err(e) = crate::util::fsx::write_atomic(&out, &b) {
                            warn!("Cannot write {}: {e}", out.display());
                        }
                        return None;
                    }
                    Ok(_) => {}
                    Err(e) => warn!("Cannot read the log of {} again: {e}", step.name),
                }
            }
        }
        if kept > 0 {
            warn!(
                "The log of Run:ai workload {} is incomplete ({why}); stdout.txt keeps the {kept} bytes received",
                step.name
            );
            return Some(why);
        }
        warn!("No log for Run:ai workload {}: {why}", step.name);
        let line = format!("logs unavailable: {why}\n");
        if let Err(e) = crate::util::fsx::write_atomic(&out, line.as_bytes()) {
            warn!("Cannot write {}: {e}", out.display());
        }
        Some(why)
    }
}
