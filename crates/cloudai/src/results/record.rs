//! `cloudai-run.json`: the typed facts of one iteration (job id, nodes, times, how it ended and why), so reports,
//! baselines and re-attaching read facts instead of scraping logs.

use std::path::Path;

use serde::{Deserialize, Serialize};

pub const RECORD_FILE: &str = "cloudai-run.json";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    Passed,
    Failed,
    Timeout,
    Cancelled,
    /// Stopped on purpose by an `end_post_comp` dependency; not a failure.
    Stopped,
    /// Never started (the run was cancelled first, or submission was impossible).
    Skipped,
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
        }
    }
}

/// Why the job stopped running, independent of grading.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// The job ran to its end (its grade says whether it passed).
    Exited,
    /// We (or the scheduler) killed it at its time limit.
    TimeLimit,
    /// The user interrupted the run.
    Cancelled,
    /// An `end_post_comp` dependency completed.
    StoppedByDependency,
    /// The scheduler refused the job.
    SubmitFailed,
    /// Nothing ran: dry-run.
    DryRun,
    /// Never submitted.
    NotStarted,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
}

impl IterationRecord {
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        let json = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        crate::util::fsx::write_atomic(&dir.join(RECORD_FILE), &json)
    }

    pub fn read(dir: &Path) -> std::io::Result<Self> {
        let text = std::fs::read(dir.join(RECORD_FILE))?;
        serde_json::from_slice(&text).map_err(std::io::Error::other)
    }
}
