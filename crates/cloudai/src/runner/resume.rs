//! Starting the engine part-way: each test run's next iteration, and the jobs of an earlier cloudai process it
//! takes over (their time limits count from when they really started).

use std::path::PathBuf;
use tokio::time::Instant;

use chrono::{DateTime, Local};

use super::{Active, Phase, Slot};
use crate::results::record::QueueState;
use crate::systems::{JobId, Prepared};

/// Where one test run stands.
pub(crate) struct SlotPlan {
    /// The iteration to watch or start next.
    pub iteration: u64,
    pub state: PlanState,
    /// A job of the run has run (satisfies `start_post_init` dependents).
    pub started: bool,
}

pub(crate) enum PlanState {
    /// `iteration` is to be submitted (when its dependencies allow).
    Waiting,
    /// Every iteration has ended.
    Done,
    /// `iteration`'s job, taken over from the journal.
    Attached(Box<Attached>),
}

pub(crate) struct Attached {
    pub id: JobId,
    pub dir: PathBuf,
    pub prepared: Prepared,
    pub submitted_at: DateTime<Local>,
    pub started_at: Option<DateTime<Local>>,
    pub queue: Vec<QueueState>,
}

pub(super) fn apply(slots: &mut [Slot], plan: &[SlotPlan]) {
    for (slot, p) in slots.iter_mut().zip(plan) {
        slot.iteration = p.iteration;
        slot.started = p.started;
        slot.phase = match &p.state {
            PlanState::Waiting => Phase::Waiting,
            PlanState::Done => Phase::Done,
            PlanState::Attached(a) => {
                let started = a.started_at.map(|t| {
                    let ago = (Local::now() - t).to_std().unwrap_or_default();
                    (
                        t,
                        Instant::now().checked_sub(ago).unwrap_or_else(Instant::now),
                    )
                });
                Phase::Active(Box::new(Active {
                    id: a.id.clone(),
                    dir: a.dir.clone(),
                    prepared: a.prepared.clone(),
                    submitted_at: a.submitted_at,
                    pending_since: started.is_none().then(Instant::now),
                    started,
                    kill: None,
                    kill_msg: None,
                    queue: a.queue.clone(),
                }))
            }
        };
    }
}
