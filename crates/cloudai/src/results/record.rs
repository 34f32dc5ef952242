//! `cloudai-run.json`: the typed facts of one iteration (job id, nodes, times, how it ended and why), so reports,
//! baselines and re-attaching read facts instead of scraping logs.

use std::path::Path;

use serde::{Deserialize, Serialize};

pub(crate) const RECORD_FILE: &str = "cloudai-run.json";

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    Passed,
    Failed,
    Timeout,
    Cancelled,
    /// Stopped on purpose by an `end_post_comp` dependency; not a failure.
    Stopped,
    /// Never started (the run was cancelled first, or submission was impossible).
    #[default]
    Skipped,
    /// Dry-run: every file was written, nothing ran, nothing was graded.
    #[serde(rename = "DRY-RUN")]
    DryRun,
    /// cloudai stopped (killed) while the iteration's job was submitted or running: its end was never seen.
    Interrupted,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Passed => "PASSED",
            Status::Failed => "FAILED",
            Status::Timeout => "TIMEOUT",
            Status::Cancelled => "CANCELLED",
            Status::Stopped => "STOPPED",
            Status::Skipped => "SKIPPED",
            Status::DryRun => "DRY-RUN",
            Status::Interrupted => "INTERRUPTED",
        }
    }

    /// Whether this status lets the scenario count as a success (exit code 0): passed, stopped on purpose by an
    /// `end_post_comp` dependency, or a dry-run.
    pub(crate) fn is_success(self) -> bool {
        matches!(self, Status::Passed | Status::Stopped | Status::DryRun)
    }
}

/// Exit code of a scenario that ran to its end (not interrupted): 0 when every iteration succeeded, else
/// [`EXIT_TEST_FAILURES`]. Documented in docs/usage.md; other tools build on it.
pub fn exit_code(records: &[IterationRecord]) -> i32 {
    if records.iter().all(|r| r.status.is_success()) {
        0
    } else {
        EXIT_TEST_FAILURES
    }
}

pub use crate::exit_codes::{LEFTOVERS as EXIT_LEFTOVERS, TEST_FAILURES as EXIT_TEST_FAILURES};

/// The file in the results root that lists what could not be confirmed stopped.
pub(crate) const LEFTOVERS_FILE: &str = "leftovers.json";

/// A job or workload we asked to stop or delete without the scheduler confirming it is gone.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Leftover {
    /// The job as the runner knows it (the scheduler's job id, the Run:ai main workload name).
    pub job_id: String,
    /// For a person: what it is and where (`Run:ai workload x-1a2b (id …, project 4501)`).
    pub description: String,
    /// Why it could not be confirmed gone, in the scheduler's (or the network's) words.
    pub reason: String,
    /// For tools that clean up: the scheduler's own coordinates (`workload_id`, `workload_name`, `project_id`,
    /// `path`, …).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub resource: std::collections::BTreeMap<String, String>,
}

/// Why the job stopped running, independent of grading.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// The job ran to its end (its grade says whether it passed).
    Exited,
    /// We (or the scheduler) killed it at its time limit.
    TimeLimit,
    /// The user interrupted the run (Ctrl-C, SIGTERM): we cancelled the job.
    Cancelled,
    /// Someone else cancelled the job on the scheduler (an admin's or the user's own `scancel`).
    CancelledByScheduler,
    /// The scheduler can never start the job as submitted (more nodes than the partition has, bad account,
    /// nodes down or drained): we cancelled it instead of waiting forever.
    Unschedulable,
    /// The job waited in the queue longer than `max_pending_time`; we cancelled it.
    PendingTooLong,
    /// A node of the job failed (Slurm NODE_FAIL) and the job was not requeued.
    NodeFail,
    /// The job ran out of memory (OUT_OF_MEMORY).
    OutOfMemory,
    /// The scheduler preempted the job for another.
    Preempted,
    /// A container image could not be pulled (Kubernetes ImagePullBackOff, ErrImagePull): ended at once.
    ImagePullFailed,
    /// The node evicted a pod of the job (memory or disk pressure, a drain).
    Evicted,
    /// The job left the scheduler's queue and the scheduler kept no final state for it.
    Lost,
    /// The pre-flight check or the pre-test hooks failed on a node: the main command did not run.
    PreflightFailed,
    /// An `end_post_comp` dependency completed.
    StoppedByDependency,
    /// The scheduler refused the job.
    SubmitFailed,
    /// Nothing ran: dry-run.
    DryRun,
    /// Never submitted.
    #[default]
    NotStarted,
    /// cloudai itself stopped (killed) while the job was queued or running; what became of the job is unknown.
    Interrupted,
    /// A tree another tool wrote (CloudAI's): it records no end for the job and holds no output of it.
    Unknown,
}

impl EndReason {
    /// The documented snake_case name (`time_limit`, `unschedulable`, …), as in `cloudai-run.json`.
    pub fn as_str(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IterationRecord {
    pub test_id: String,
    pub test_name: String,
    pub template: String,
    pub iteration: u64,
    pub iterations: u64,
    pub scheduler: String,
    pub job_id: Option<String>,
    pub nodes: Vec<String>,
    pub output_path: String,
    pub test_cmd: String,
    pub submitted_at: Option<String>,
    pub started_at: Option<String>,
    pub ended_at: Option<String>,
    pub time_limit_secs: Option<u64>,
    pub end_reason: EndReason,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub status: Status,
    pub message: String,
    /// The message ends with the sizes the baseline does not have (`not in baseline: …`), added by the report.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub baseline_noted: bool,
    /// The scheduler's own final state (`COMPLETED`, `NODE_FAIL`, `CANCELLED by 1000`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_state: Option<String>,
    /// Every queue state the job was seen in, with the scheduler's reason (`PENDING` / `Resources`), in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queue_states: Vec<QueueState>,
    /// Each time the scheduler started the job: more than one when it was requeued (after a node failure).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<Attempt>,
    /// Why the job's output is incomplete (a log stream that could not be read to its end), when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_incomplete: Option<String>,
    /// What was launched (hosts, GPUs per host, the system's declared fabric), so a re-grade checks the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launched: Option<super::checks::Asked>,
    /// The checks behind the status: shape, transport, expectation or baseline, table, data check.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<super::checks::Check>,
}

/// A change of the job's queue state as seen by polling.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueState {
    /// When it was first seen (RFC 3339).
    pub at: String,
    pub state: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// One run of the job on the scheduler (Slurm runs a requeued job again under the same id).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    pub nodes: Vec<String>,
    /// The scheduler's state for this attempt (`NODE_FAIL`, `REQUEUED`, `COMPLETED`, …).
    pub state: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<String>,
}

/// A recorded RFC 3339 time in local time.
pub(crate) fn local_time(s: &Option<String>) -> Option<chrono::DateTime<chrono::Local>> {
    s.as_deref()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&chrono::Local))
}

impl IterationRecord {
    /// Written durably: the record is the run's journal (see `resume`).
    /// Writes the record durably. Every record file keeps [`RESERVED_BYTES`] allocated (trailing blanks, which
    /// JSON ignores), so the final record replaces the journal's in place when the disk is full: a finished
    /// iteration is never left saying INTERRUPTED because some report could not be written.
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        crate::util::fsx::write_reserved(&dir.join(RECORD_FILE), &self.to_bytes()?)
    }

    /// As `write`, unless the file already says exactly this (a re-grade that changed nothing rewrites nothing).
    pub(crate) fn write_if_changed(&self, dir: &Path) -> std::io::Result<()> {
        let json = self.to_bytes()?;
        let path = dir.join(RECORD_FILE);
        match crate::util::fsx::read_regular(&path, 1 << 20) {
            Ok(old) if old == json => Ok(()),
            _ => crate::util::fsx::write_reserved(&path, &json),
        }
    }

    /// The file's bytes: pretty JSON, padded with blanks to the space a record keeps.
    fn to_bytes(&self) -> std::io::Result<Vec<u8>> {
        let mut json = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        json.push(b'\n');
        if json.len() < Self::RESERVED_BYTES {
            json.resize(Self::RESERVED_BYTES - 1, b' ');
            json.push(b'\n');
        }
        Ok(json)
    }

    /// The space a record file keeps for its final version.
    pub(crate) const RESERVED_BYTES: usize = 8 << 10;

    /// An iteration cloudai stopped watching before its end (killed, detached): its job may still run.
    pub(crate) fn is_unfinished(&self) -> bool {
        self.status == Status::Interrupted
    }

    pub fn read(dir: &Path) -> std::io::Result<Self> {
        let text = crate::util::fsx::read_regular(&dir.join(RECORD_FILE), 1 << 20)?;
        serde_json::from_slice(&text).map_err(std::io::Error::other)
    }
}

/// Names everything that may still hold resources, writes `leftovers.json` into the results root, and gives
/// the exit code that says so.
pub(crate) fn report_leftovers(
    root: &std::path::Path,
    leftovers: &[crate::results::record::Leftover],
) -> i32 {
    crate::error!(
        "{} job(s) could not be confirmed stopped and may still hold resources; delete them by hand:",
        leftovers.len()
    );
    for l in leftovers {
        crate::error!("  {}: {}", l.description, l.reason);
    }
    let path = root.join(LEFTOVERS_FILE);
    match serde_json::to_vec_pretty(leftovers)
        .map_err(std::io::Error::other)
        .and_then(|j| crate::util::fsx::write_atomic(&path, &j))
    {
        Ok(()) => crate::error!("The list is kept in {}", path.display()),
        Err(e) => crate::error!("Cannot write {}: {e}", path.display()),
    }
    EXIT_LEFTOVERS
}
