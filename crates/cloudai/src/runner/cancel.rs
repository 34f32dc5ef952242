//! Ctrl-C and SIGTERM: cancel every job we submitted, wait a while for each to stop, and record what did and
//! did not (jobs that never started are recorded as not started). What did not confirm it stopped is returned
//! as a leftover, so nobody is told "every job was cancelled" while one may still hold nodes.

use std::time::Duration;
use tokio::time::Instant;

use super::{Books, Phase, Runner, Slot, CANCEL_WAIT};
use crate::results::record::Leftover;
use crate::results::{EndReason, Status};
use crate::systems::Prepared;
use crate::util::signals;
use crate::{error, warn};

impl Runner {
    pub(super) async fn cancel_all(&self, slots: &mut [Slot], books: &mut Books) -> Vec<Leftover> {
        let n = slots
            .iter()
            .filter(|s| matches!(s.phase, Phase::Active(_)))
            .count();
        let first = self.stop.count();
        warn!(
            "Interrupted ({}): cancelling {n} running job(s); interrupt again to stop waiting for them",
            signals::last()
        );
        let mut ids = Vec::new();
        for slot in slots.iter_mut() {
            if let Phase::Active(a) = &mut slot.phase {
                a.kill = Some(EndReason::Cancelled);
                ids.push(a.id.clone());
            }
        }
        // every cancel goes out at once, under the one deadline: from the interrupt to the exit takes CANCEL_WAIT
        // at the most, whether the scheduler answers or not
        let deadline = Instant::now() + CANCEL_WAIT;
        let mut refused = std::collections::HashMap::new();
        match tokio::time::timeout_at(
            deadline,
            futures_util::future::join_all(ids.iter().map(|id| self.cancel_job(id))),
        )
        .await
        {
            Ok(answers) => {
                for (id, answer) in ids.into_iter().zip(answers) {
                    if let Err(e) = answer {
                        error!("Cannot cancel job {id}: {e}");
                        refused.insert(id, e.message);
                    }
                }
            }
            Err(_) => {
                for id in ids {
                    refused.insert(
                        id,
                        format!(
                            "cancel requested; the scheduler did not answer within {} s",
                            CANCEL_WAIT.as_secs()
                        ),
                    );
                }
            }
        }
        let mut cut_short = false;
        while slots.iter().any(|s| matches!(s.phase, Phase::Active(_))) && Instant::now() < deadline
        {
            // a second interrupt cuts even a slow poll short (a control plane that does not answer)
            tokio::select! {
                // a poll the scheduler does not answer ends at the deadline too
                _ = tokio::time::timeout_at(deadline, async {
                    self.poll(slots, books, false).await;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }) => {}
                _ = self.stop.after(first) => {}
            }
            if self.stop.count() > first {
                warn!("A second interrupt: not waiting for the cancelled jobs any longer");
                cut_short = true;
                break;
            }
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
                                self.journal.scheduler, a.id, slot.run.id
                            ),
                            reason: refused.remove(&a.id).unwrap_or_else(|| {
                                if cut_short {
                                    "cancel requested; a second interrupt stopped the wait before the scheduler \
                                     confirmed it stopped"
                                        .into()
                                } else {
                                    "cancel requested; the scheduler did not confirm it stopped".into()
                                }
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
                    let mut rec =
                        self.journal
                            .record(&slot.run, slot.iteration, &a.dir, &a.prepared);
                    rec.job_id = Some(a.id.clone());
                    rec.end_reason = EndReason::Cancelled;
                    rec.status = Status::Cancelled;
                    rec.message = "cancel requested but the job did not confirm it stopped; it may still hold \
                                   resources (see leftovers.json)"
                        .into();
                    self.journal.save(&rec, &a.dir);
                    books.records.push(rec);
                }
                Phase::Waiting => {
                    let dir = self.layout.iteration_dir(&slot.run.id, slot.iteration);
                    let mut rec =
                        self.journal
                            .record(&slot.run, slot.iteration, &dir, &Prepared::default());
                    rec.message = "not started: the run was interrupted".into();
                    books.records.push(rec);
                }
                Phase::Done => {}
            }
        }
        leftovers
    }
}
