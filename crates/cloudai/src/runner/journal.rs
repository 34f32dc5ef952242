//! The run's journal: each iteration's `cloudai-run.json`, written durably before its job is submitted, once the
//! scheduler's id is known, when the job is first seen running, and at its end. A `kill -9` of cloudai at any
//! moment leaves a tree from which `resume` loses nothing and submits nothing twice.

use std::path::Path;

use chrono::{DateTime, Local};

use super::{Phase, Runner, Slot};
use crate::error;
use crate::results::{EndReason, IterationRecord, Status};
use crate::scenario::TestRun;
use crate::systems::Prepared;

impl Runner {
    pub(super) fn fail_submit(
        &self,
        slot: &mut Slot,
        records: &mut Vec<IterationRecord>,
        dir: &Path,
        p: &Prepared,
        msg: String,
    ) {
        error!("Failed to submit test {}: {msg}", slot.run.id);
        let mut rec = self.record(&slot.run, slot.iteration, dir, p);
        rec.end_reason = EndReason::SubmitFailed;
        rec.status = Status::Failed;
        rec.message = msg;
        self.save(&rec, dir);
        records.push(rec);
    }

    /// An iteration's record as far as its configuration goes; status and outcome are the caller's to set.
    pub fn record(
        &self,
        run: &TestRun,
        iteration: u64,
        dir: &Path,
        p: &Prepared,
    ) -> IterationRecord {
        IterationRecord {
            test_id: run.id.clone(),
            test_name: run.test.name.clone(),
            template: run.test.test_template_name.clone(),
            iteration,
            iterations: run.iterations,
            scheduler: self.scheduler.to_string(),
            output_path: dir.display().to_string(),
            test_cmd: p.test_cmd.clone(),
            time_limit_secs: run.effective_time_limit(),
            ..Default::default()
        }
    }

    pub(super) fn save(&self, rec: &IterationRecord, dir: &Path) {
        if self.dry_run {
            return; // a dry-run tree holds exactly CloudAI's files
        }
        if let Err(e) = rec.write(dir) {
            error!("Cannot write the run record in {}: {e}", dir.display());
        }
    }

    /// An unfinished iteration's record: submitting (no id yet) or submitted (`id`). Its status is INTERRUPTED,
    /// which is what the tree says if nobody ever writes the final record.
    pub(super) fn journal(
        &self,
        run: &TestRun,
        iteration: u64,
        dir: &Path,
        p: &Prepared,
        id: Option<&str>,
        submitted_at: DateTime<Local>,
    ) {
        let mut rec = self.record(run, iteration, dir, p);
        rec.job_id = id.map(str::to_string);
        rec.submitted_at = Some(submitted_at.to_rfc3339());
        rec.status = Status::Interrupted;
        rec.end_reason = EndReason::Interrupted;
        rec.message = match id {
            Some(id) => format!(
                "cloudai stopped while job {id} was queued or running (killed or detached); `cloudai resume` \
                 re-attaches to it"
            ),
            None => "cloudai stopped while submitting this iteration; `cloudai resume` looks for its job".into(),
        };
        self.save(&rec, dir);
    }

    /// The job was seen running: when and where, for `status` and for time limits after a `resume`.
    pub(super) fn journal_running(&self, slot: &Slot) {
        let Phase::Active(a) = &slot.phase else {
            return;
        };
        let mut rec = self.record(&slot.run, slot.iteration, &a.dir, &a.prepared);
        rec.job_id = Some(a.id.clone());
        rec.submitted_at = Some(a.submitted_at.to_rfc3339());
        rec.started_at = a.started.map(|(t, _)| t.to_rfc3339());
        rec.nodes = self.system.nodes(&a.id);
        rec.queue_states = a.queue.clone();
        rec.status = Status::Interrupted;
        rec.end_reason = EndReason::Interrupted;
        rec.message = format!(
            "cloudai stopped while job {} was running (killed or detached); `cloudai resume` re-attaches to it",
            a.id
        );
        self.save(&rec, &a.dir);
    }
}
