//! Ctrl-C and SIGTERM: cancel every job we submitted, wait a while for each to stop, and record what did and
//! did not (jobs that never started are recorded as not started). What did not confirm it stopped is returned
//! as a leftover, so nobody is told "every job was cancelled" while one may still hold nodes.

use std::time::{Duration, Instant};

use super::{Phase, Runner, Slot, CANCEL_WAIT};
use crate::results::record::Leftover;
use crate::results::{EndReason, IterationRecord, Status};
use crate::systems::Prepared;
use crate::{error, warn};

impl Runner {
    pub(super) async fn cancel_all(
        &self,
        slots: &mut [Slot],
        records: &mut Vec<IterationRecord>,
    ) -> Vec<Leftover> {
        let n = slots
            .iter()
            .filter(|s| matches!(s.phase, Phase::Active(_)))
            .count();
        warn!("Interrupted: cancelling {n} running job(s)");
        let mut refused = std::collections::HashMap::new();
        for slot in slots.iter_mut() {
            if let Phase::Active(a) = &mut slot.phase {
                a.kill = Some(EndReason::Cancelled);
                if let Err(e) = self.system.cancel(&a.id).await {
                    error!("Cannot cancel job {}: {e}", a.id);
                    refused.insert(a.id.clone(), e);
                }
            }
        }
        let deadline = Instant::now() + CANCEL_WAIT;
        while slots.iter().any(|s| matches!(s.phase, Phase::Active(_))) && Instant::now() < deadline
        {
            self.poll(slots, records).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut leftovers = self.system.leftovers();
        for slot in slots.iter_mut() {
            match std::mem::replace(&mut slot.phase, Phase::Done) {
                Phase::Active(a) => {
                    if !leftovers.iter().any(|l| l.job_id == a.id) {
                        leftovers.push(Leftover {
                            job_id: a.id.clone(),
                            description: format!(
                                "{} job {} (test {})",
                                self.scheduler, a.id, slot.run.id
                            ),
                            reason: refused.remove(&a.id).unwrap_or_else(|| {
                                "cancel requested; the scheduler did not confirm it stopped".into()
                            }),
                            resource: Default::default(),
                        });
                    }
                    error!(
                        "Job {} of test {} did not stop within {}s",
                        a.id,
                        slot.run.id,
                        CANCEL_WAIT.as_secs()
                    );
                    let mut rec = self.record(&slot.run, slot.iteration, &a.dir, &a.prepared);
                    rec.job_id = Some(a.id.clone());
                    rec.end_reason = EndReason::Cancelled;
                    rec.status = Status::Cancelled;
                    rec.message = "cancel requested but the job did not confirm it stopped; it may still hold \
                                   resources (see leftovers.json)"
                        .into();
                    self.save(&rec, &a.dir);
                    records.push(rec);
                }
                Phase::Waiting => {
                    let dir = self.layout.iteration_dir(&slot.run.id, slot.iteration);
                    let mut rec =
                        self.record(&slot.run, slot.iteration, &dir, &Prepared::default());
                    rec.message = "not started: the run was interrupted".into();
                    records.push(rec);
                }
                Phase::Done => {}
            }
        }
        leftovers
    }
}
