//! The run's journal: each iteration's `cloudai-run.json`, written durably before its job is submitted, once the
//! scheduler's id is known, when the job is first seen running, and at its end, and each version appended to the
//! tree's `.cloudai/journal.jsonl` as well (the record a `resume` repairs a lost or damaged file from). A `kill -9`
//! of cloudai at any moment leaves a tree from which `resume` loses nothing and submits nothing twice. A dry-run keeps none (its tree
//! holds exactly CloudAI's files).

use std::path::Path;

use chrono::{DateTime, Local};

use crate::error;
use crate::results::record::QueueState;
use crate::results::{EndReason, IterationRecord, Status};
use crate::scenario::TestRun;
use crate::systems::Prepared;

#[derive(Clone, Debug)]
pub struct Journal {
    /// The scheduler's name, recorded with every iteration.
    pub scheduler: &'static str,
    /// Records are written (not in a dry-run).
    pub writes: bool,
    /// The results root: each record is also appended to its `.cloudai/journal.jsonl`, when the tree has one
    /// (a tree `run` made; not a find-bad-nodes round), so a record file deleted or damaged later can be repaired.
    pub root: std::path::PathBuf,
}

/// A job seen running, as the journal keeps it.
pub struct Running<'a> {
    pub id: &'a str,
    pub submitted_at: DateTime<Local>,
    pub started_at: Option<DateTime<Local>>,
    pub nodes: Vec<String>,
    pub queue: &'a [QueueState],
}

impl Journal {
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

    /// Writes an iteration's record (a full disk is noted, not fatal).
    pub fn save(&self, rec: &IterationRecord, dir: &Path) {
        if !self.writes {
            return;
        }
        if let Err(e) = rec.write(dir) {
            error!("Cannot write the run record in {}: {e}", dir.display());
        }
        if crate::results::state::state_dir(&self.root).is_dir() {
            if let Err(e) = crate::results::state::append_journal(&self.root, rec) {
                error!(
                    "Cannot append to {}: {e}",
                    crate::results::state::journal_path(&self.root).display()
                );
            }
        }
    }

    /// An unfinished iteration's record: submitting (no id yet) or submitted (`id`). Its status is INTERRUPTED,
    /// which is what the tree says if nobody ever writes the final record.
    pub fn submitted(
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
    pub fn running(&self, run: &TestRun, iteration: u64, dir: &Path, p: &Prepared, job: Running) {
        let mut rec = self.record(run, iteration, dir, p);
        rec.job_id = Some(job.id.to_string());
        rec.submitted_at = Some(job.submitted_at.to_rfc3339());
        rec.started_at = job.started_at.map(|t| t.to_rfc3339());
        rec.nodes = job.nodes;
        rec.queue_states = job.queue.to_vec();
        rec.status = Status::Interrupted;
        rec.end_reason = EndReason::Interrupted;
        rec.message = format!(
            "cloudai stopped while job {} was running (killed or detached); `cloudai resume` re-attaches to it",
            job.id
        );
        self.save(&rec, dir);
    }
}
