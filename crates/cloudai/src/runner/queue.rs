//! Jobs waiting in the scheduler's queue: every change of state or reason is shown and kept, and a job that can
//! never start (or waited past `max_pending_time`) is cancelled with the scheduler's reason instead of waiting
//! forever.

use std::time::Duration;
use tokio::time::Instant;

use chrono::Local;

use super::{Active, Runner};
use crate::config::time_limit;
use crate::results::record::QueueState;
use crate::results::EndReason;
use crate::scenario::TestRun;
use crate::systems::Queued;
use crate::{error, info, warn};

/// How long a job the scheduler cannot place may wait when no `max_pending_time` is set (seconds).
pub(crate) const DEFAULT_BLOCKED_WAIT: u64 = 600;

impl Runner {
    /// A job waiting in the queue: report changes of its state or reason, and cancel it when it can never start
    /// or waited longer than `max_pending_time`.
    pub(super) async fn pending(&self, run: &TestRun, a: &mut Active, q: Queued) {
        let reason = if q.reason.is_empty() || q.reason == "None" {
            "waiting"
        } else {
            q.reason.as_str()
        };
        if note_state(&mut a.queue, &q.state, &q.reason) {
            info!(
                "job {} ({}) {}: {reason}",
                a.id,
                run.id,
                q.state.to_lowercase()
            );
        }
        if a.kill.is_some() {
            return;
        }
        let since = *a.pending_since.get_or_insert_with(Instant::now);
        let max = run.max_pending_time.or(self.max_pending_time);
        let Some((kill, msg)) = give_up(&a.id, &q, max, since.elapsed()) else {
            return;
        };
        error!("{}: {msg}; cancelling it", run.id);
        a.kill = Some(kill);
        a.kill_msg = Some(msg);
        if let Err(e) = self.cancel_job(&a.id).await {
            warn!("Cannot cancel job {}: {e}", a.id);
        }
    }
}

/// Whether to stop waiting for a queued job, and why: the scheduler can never start it, or it waited past
/// `max_pending_time` (`max`, seconds) — a job the scheduler cannot place now gets a bounded wait even when none is
/// configured: at 3 a.m. nobody adds the GPUs it waits for.
pub(crate) fn give_up(
    id: &str,
    q: &Queued,
    max: Option<u64>,
    waited: Duration,
) -> Option<(EndReason, String)> {
    if let Some(why) = &q.failed_before {
        return Some((
            EndReason::PreflightFailed,
            format!("job {id} will never start: {why}"),
        ));
    }
    if let Some(why) = &q.hopeless {
        return Some((
            EndReason::Unschedulable,
            format!("the scheduler can never start job {id}: {why}"),
        ));
    }
    let max = max.or(q.blocked.as_ref().map(|_| DEFAULT_BLOCKED_WAIT))?;
    if waited < Duration::from_secs(max) {
        return None;
    }
    let limit = time_limit::format(max);
    Some(match &q.blocked {
        Some(why) => (
            EndReason::Unschedulable,
            format!("job {id} found no place to run within max_pending_time ({limit}): {why}"),
        ),
        None => {
            let reason = if q.reason.is_empty() || q.reason == "None" {
                "waiting"
            } else {
                q.reason.as_str()
            };
            (
                EndReason::PendingTooLong,
                format!(
                    "job {id} waited in the queue longer than max_pending_time ({limit}); last reason: {reason}"
                ),
            )
        }
    })
}

/// Appends a queue state when it differs from the last one; returns whether it did.
pub(super) fn note_state(queue: &mut Vec<QueueState>, state: &str, reason: &str) -> bool {
    if queue
        .last()
        .is_some_and(|l| l.state == state && l.reason == reason)
    {
        return false;
    }
    queue.push(QueueState {
        at: Local::now().to_rfc3339(),
        state: state.to_string(),
        reason: reason.to_string(),
    });
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queued(hopeless: Option<&str>, blocked: Option<&str>) -> Queued {
        Queued {
            hopeless: hopeless.map(str::to_string),
            blocked: blocked.map(str::to_string),
            ..Queued::new("PENDING", "Resources")
        }
    }

    #[test]
    fn a_job_whose_pre_test_hooks_failed_ends_as_a_failed_pre_flight() {
        let q = Queued {
            failed_before: Some("its pre-test hooks failed on node003".into()),
            ..queued(Some("the job's dependency can never be satisfied"), None)
        };
        let (end, msg) = give_up("7", &q, None, Duration::ZERO).unwrap();
        assert_eq!(end, EndReason::PreflightFailed);
        assert!(msg.contains("pre-test hooks failed on node003"), "{msg}");
    }

    #[test]
    fn a_hopeless_job_is_given_up_at_once() {
        let (end, msg) = give_up(
            "7",
            &queued(Some("no such partition"), None),
            None,
            Duration::ZERO,
        )
        .unwrap();
        assert_eq!(end, EndReason::Unschedulable);
        assert!(msg.contains("no such partition"), "{msg}");
    }

    #[test]
    fn a_waiting_job_is_given_up_only_past_max_pending_time() {
        let q = queued(None, None);
        assert_eq!(give_up("7", &q, None, Duration::from_secs(1_000_000)), None);
        assert_eq!(give_up("7", &q, Some(60), Duration::from_secs(59)), None);
        let (end, msg) = give_up("7", &q, Some(60), Duration::from_secs(60)).unwrap();
        assert_eq!(end, EndReason::PendingTooLong);
        assert!(msg.ends_with("last reason: Resources"), "{msg}");
    }

    #[test]
    fn a_job_no_node_fits_gets_a_bounded_wait_even_without_max_pending_time() {
        let q = queued(None, Some("0/4 nodes are available"));
        let short = Duration::from_secs(DEFAULT_BLOCKED_WAIT - 1);
        assert_eq!(give_up("7", &q, None, short), None);
        let (end, _) = give_up("7", &q, None, Duration::from_secs(DEFAULT_BLOCKED_WAIT)).unwrap();
        assert_eq!(end, EndReason::Unschedulable);
    }
}
