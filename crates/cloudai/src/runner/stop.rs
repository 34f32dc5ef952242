//! Stopping: a job asked to stop, the tests that depend on a failed one, and the time limits enforced on
//! running jobs.

use super::*;

impl Runner {
    /// Asks the system to stop a job; one the scheduler no longer has needs no stopping (the next poll ends it).
    pub(super) async fn cancel_job(&self, id: &JobId) -> Result<(), crate::systems::SystemError> {
        match self.system.cancel(id).await {
            Err(e) if e.kind == ErrorKind::Gone => {
                crate::debug!("Job {id} is already gone: {e}");
                Ok(())
            }
            other => other,
        }
    }

    pub(super) async fn stop_dependents(&self, slots: &mut [Slot]) {
        for i in 0..slots.len() {
            let trigger = slots[i].run.dependencies.iter().find_map(|d| {
                let dep = slots.iter().find(|s| s.run.id == d.id)?;
                (d.kind == DepKind::EndPostComp && dep.done()).then(|| d.id.clone())
            });
            let Some(dep_id) = trigger else { continue };
            let slot = &mut slots[i];
            let Phase::Active(a) = &mut slot.phase else {
                continue;
            };
            if a.kill.is_some() {
                continue;
            }
            info!(
                "Stopping test {} (job {}): {dep_id} completed (end_post_comp)",
                slot.run.id, a.id
            );
            slot.stopped_by = Some(dep_id);
            a.kill = Some(EndReason::StoppedByDependency);
            if let Err(e) = self.cancel_job(&a.id).await {
                warn!("Cannot stop job {}: {e}", a.id);
            }
        }
    }

    pub(super) async fn enforce_time_limits(&self, slots: &mut [Slot]) {
        for slot in slots.iter_mut() {
            let Some(limit) = slot.run.effective_time_limit() else {
                continue;
            };
            let Phase::Active(a) = &mut slot.phase else {
                continue;
            };
            let Some((_, since)) = a.started else {
                continue;
            };
            let allowed = Duration::from_secs(limit) + self.system.time_limit_grace();
            if a.kill.is_some() || since.elapsed() < allowed {
                continue;
            }
            warn!(
                "Test {} reached its time limit of {}; cancelling job {}",
                slot.run.id,
                time_limit::format(limit),
                a.id
            );
            a.kill = Some(EndReason::TimeLimit);
            if let Err(e) = self.cancel_job(&a.id).await {
                warn!("Cannot cancel job {}: {e}", a.id);
            }
        }
    }
}
