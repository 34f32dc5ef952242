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
pub const DEFAULT_BLOCKED_WAIT: u64 = 600;

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
        // a scheduler that cannot place the job now gets a bounded wait even when none is configured: at 3 a.m.
        // nobody adds the GPUs it waits for
        let max = run
            .max_pending_time
            .or(self.max_pending_time)
            .or(q.blocked.as_ref().map(|_| DEFAULT_BLOCKED_WAIT));
        let (kill, msg) = if let Some(why) = q.hopeless {
            (
                EndReason::Unschedulable,
                format!("the scheduler can never start job {}: {why}", a.id),
            )
        } else if let Some(max) = max.filter(|m| since.elapsed() >= Duration::from_secs(*m)) {
            if let Some(why) = &q.blocked {
                (
                    EndReason::Unschedulable,
                    format!(
                        "job {} found no place to run within max_pending_time ({}): {why}",
                        a.id,
                        time_limit::format(max)
                    ),
                )
            } else {
                (
                EndReason::PendingTooLong,
                format!(
                    "job {} waited in the queue longer than max_pending_time ({}); last reason: {reason}",
                    a.id,
                    time_limit::format(max)
                ),
            )
            }
        } else {
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
