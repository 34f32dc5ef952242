//! Jobs made of several scheduler objects in turn (Run:ai workloads, Kubernetes Jobs): pre-test hooks, the test,
//! post-test hooks, each run and removed before the next starts.

use std::path::Path;

use crate::results::EndReason;
use crate::workloads::{JobOutcome, Success};

#[derive(Clone, Debug, PartialEq)]
pub enum StepKind {
    Pre,
    Main,
    Post,
}

impl StepKind {
    /// The part of an object name that tells hooks from the test.
    pub fn tag(&self) -> &'static str {
        match self {
            StepKind::Pre => "pre",
            StepKind::Main => "",
            StepKind::Post => "post",
        }
    }
}

/// How one step ended.
pub(crate) struct StepEnd<'a> {
    pub kind: &'a StepKind,
    pub name: &'a str,
    /// Where its output is (`stdout.txt`).
    pub dir: &'a Path,
    /// How a pre-test's success is judged (the workload's own rule: its output, or its status).
    pub success: &'a Success,
    pub failed: bool,
    pub state: String,
    pub reason: String,
    pub end: Option<EndReason>,
    /// Why its log is incomplete, when it is.
    pub log_incomplete: Option<String>,
}

/// Records an ended step: the test's end becomes the job's outcome (in `main`); a pre-test that failed (its object
/// failed, or fails the workload's own success rule) ends the job at once without the test, as on Slurm: returned.
pub(crate) fn conclude(e: StepEnd, main: &mut Option<JobOutcome>) -> Option<JobOutcome> {
    match e.kind {
        StepKind::Pre => {
            let ok = e.success.judge(e.failed, &e.dir.join("stdout.txt"));
            (!ok).then(|| JobOutcome {
                failure: Some(format!(
                    "pre-test {} failed, so the test was not run: {}",
                    e.name, e.reason
                )),
                state: Some(e.state),
                ..Default::default()
            })
        }
        StepKind::Main => {
            // a pre-flight check that stopped the test names its nodes in the output
            let preflight = e
                .failed
                .then(|| super::preflight::failure_in(&e.dir.join("stdout.txt")))
                .flatten();
            let (failure, end) = match preflight {
                Some(p) => (
                    Some(format!("{p}; the test's command did not run")),
                    Some(crate::results::EndReason::PreflightFailed),
                ),
                None => (e.failed.then_some(e.reason), e.end),
            };
            *main = Some(JobOutcome {
                exit_code: Some(i32::from(e.failed)),
                state: Some(e.state),
                failure,
                end,
                log_incomplete: e.log_incomplete,
                ..Default::default()
            });
            None
        }
        StepKind::Post => None,
    }
}
