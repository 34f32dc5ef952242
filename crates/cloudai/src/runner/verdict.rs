//! How an ended job becomes an iteration's status and message: pure functions of what the engine saw (why it ended
//! the job, the scheduler's outcome) and the workload's grade, taken only when the job ran to its own end.

use crate::config::time_limit;
use crate::results::{EndReason, Status};
use crate::workloads::{JobOutcome, Verdict};

/// Why the job ended: what the engine asked for wins; a cancel nobody here asked for is the scheduler's; a job
/// without a word ended by itself.
pub fn end_reason(killed: Option<EndReason>, reported: Option<EndReason>) -> EndReason {
    match (killed, reported) {
        // a job that never ran (a dry-run's) ended so whatever was asked of it
        (_, Some(EndReason::DryRun)) => EndReason::DryRun,
        (Some(k), _) => k,
        (None, Some(EndReason::Cancelled)) => EndReason::CancelledByScheduler,
        (None, Some(e)) => e,
        (None, None) => EndReason::Exited,
    }
}

/// Whether an iteration that ended so stops its test's remaining iterations: the user cancelled, a dependency
/// stopped it, or the scheduler can never start it (the next asks the same).
pub(crate) fn ends_test(end: EndReason) -> bool {
    matches!(
        end,
        EndReason::Cancelled | EndReason::StoppedByDependency | EndReason::Unschedulable
    )
}

/// What is known of an ended job when it is judged.
pub(crate) struct Graded<'a> {
    pub end_reason: EndReason,
    pub outcome: &'a JobOutcome,
    /// Why the engine ended it (unschedulable, pending too long), when the end reason alone does not say.
    pub kill_msg: Option<&'a str>,
    /// The `end_post_comp` dependency that stopped it.
    pub stopped_by: Option<&'a str>,
    /// The test's time limit, seconds.
    pub time_limit: Option<u64>,
    /// The scenario's `job_status_check`: false passes every job that ended by itself.
    pub job_status_check: bool,
}

impl Graded<'_> {
    /// The iteration's status and message, and the checks behind its grade (none when the workload did not grade);
    /// `grade` (the workload reading the job's output) is called only for a job that ended by itself and whose
    /// status is checked.
    pub fn verdict(
        &self,
        grade: impl FnOnce() -> Verdict,
    ) -> (Status, String, Vec<crate::workloads::judge::Check>) {
        let failure = || self.outcome.failure.clone().unwrap_or_default();
        let (status, message) = match self.end_reason {
            EndReason::TimeLimit => (
                Status::Timeout,
                format!(
                    "killed at its time limit of {}",
                    self.time_limit.map(time_limit::format).unwrap_or_default()
                ),
            ),
            EndReason::CancelledByScheduler => (
                Status::Cancelled,
                self.outcome
                    .failure
                    .clone()
                    .unwrap_or_else(|| "cancelled outside cloudai".into()),
            ),
            EndReason::Unschedulable | EndReason::PendingTooLong => (
                Status::Failed,
                self.kill_msg.unwrap_or_default().to_string(),
            ),
            EndReason::PreflightFailed => (Status::Failed, failure()),
            EndReason::DryRun => (
                Status::DryRun,
                "dry-run: files written, nothing ran".to_string(),
            ),
            EndReason::Cancelled => (Status::Cancelled, "cancelled by the user".to_string()),
            EndReason::StoppedByDependency => (
                Status::Stopped,
                format!(
                    "stopped when {} completed (end_post_comp)",
                    self.stopped_by.unwrap_or("?")
                ),
            ),
            _ if !self.job_status_check => (Status::Passed, String::new()),
            _ => {
                let Verdict {
                    passed,
                    mut message,
                    checks,
                    ..
                } = grade();
                if let (false, Some(why)) = (passed, &self.outcome.log_incomplete) {
                    message = format!(
                        "its output is incomplete ({why}), so it could not be graded whole: {message}"
                    );
                }
                let (status, message) = match (&self.outcome.failure, passed) {
                    (Some(f), true) => (Status::Failed, f.clone()),
                    (Some(f), false) => (Status::Failed, format!("{f}; {message}")),
                    (None, true) => (Status::Passed, message),
                    (None, false) => (Status::Failed, message),
                };
                return (status, message, checks);
            }
        };
        (status, message, Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judged(end: EndReason, outcome: &JobOutcome, check: bool, passed: bool) -> (Status, String) {
        let g = Graded {
            end_reason: end,
            outcome,
            kill_msg: Some("no place"),
            stopped_by: Some("server"),
            time_limit: Some(90),
            job_status_check: check,
        };
        let (status, message, _) = g.verdict(|| Verdict {
            passed,
            message: if passed {
                "ok".into()
            } else {
                "no rows".into()
            },
            ..Default::default()
        });
        (status, message)
    }

    #[test]
    fn the_engine_s_reason_wins_and_an_unasked_cancel_is_the_scheduler_s() {
        use EndReason::*;
        assert_eq!(end_reason(Some(TimeLimit), Some(Cancelled)), TimeLimit);
        assert_eq!(end_reason(None, Some(Cancelled)), CancelledByScheduler);
        assert_eq!(end_reason(None, Some(NodeFail)), NodeFail);
        assert_eq!(end_reason(None, None), Exited);
    }

    #[test]
    fn only_cancels_stops_and_unschedulable_end_the_test() {
        use EndReason::*;
        for e in [Cancelled, StoppedByDependency, Unschedulable] {
            assert!(ends_test(e), "{e:?}");
        }
        for e in [
            Exited,
            TimeLimit,
            PendingTooLong,
            CancelledByScheduler,
            DryRun,
        ] {
            assert!(!ends_test(e), "{e:?}");
        }
    }

    #[test]
    fn each_end_reason_maps_to_its_status_without_grading_unless_the_job_ended_itself() {
        let o = JobOutcome::default();
        let no_grade = |end| {
            let (status, message, _) = Graded {
                end_reason: end,
                outcome: &o,
                kill_msg: Some("no place"),
                stopped_by: Some("server"),
                time_limit: Some(90),
                job_status_check: true,
            }
            .verdict(|| panic!("graded a job that did not end by itself: {end:?}"));
            (status, message)
        };
        assert_eq!(
            no_grade(EndReason::TimeLimit),
            (
                Status::Timeout,
                "killed at its time limit of 00:01:30".into()
            )
        );
        assert_eq!(no_grade(EndReason::Unschedulable).0, Status::Failed);
        assert_eq!(no_grade(EndReason::Unschedulable).1, "no place");
        assert_eq!(no_grade(EndReason::PendingTooLong).0, Status::Failed);
        assert_eq!(no_grade(EndReason::DryRun).0, Status::DryRun);
        assert_eq!(no_grade(EndReason::Cancelled).0, Status::Cancelled);
        assert_eq!(
            no_grade(EndReason::StoppedByDependency),
            (
                Status::Stopped,
                "stopped when server completed (end_post_comp)".into()
            )
        );
        assert_eq!(
            no_grade(EndReason::CancelledByScheduler),
            (Status::Cancelled, "cancelled outside cloudai".into())
        );
    }

    #[test]
    fn a_graded_job_passes_only_when_its_output_passes_and_the_scheduler_saw_no_failure() {
        let ok = JobOutcome::default();
        assert_eq!(
            judged(EndReason::Exited, &ok, true, true),
            (Status::Passed, "ok".into())
        );
        assert_eq!(
            judged(EndReason::Exited, &ok, true, false).0,
            Status::Failed
        );
        // job_status_check = false: ended by itself is enough
        assert_eq!(
            judged(EndReason::Exited, &ok, false, false),
            (Status::Passed, String::new())
        );
        let failed = JobOutcome {
            failure: Some("exit code 1".into()),
            ..Default::default()
        };
        assert_eq!(
            judged(EndReason::Exited, &failed, true, true),
            (Status::Failed, "exit code 1".into())
        );
        assert_eq!(
            judged(EndReason::Exited, &failed, true, false),
            (Status::Failed, "exit code 1; no rows".into())
        );
        let cut = JobOutcome {
            log_incomplete: Some("log stream lost".into()),
            ..Default::default()
        };
        assert!(judged(EndReason::Exited, &cut, true, false)
            .1
            .starts_with("its output is incomplete (log stream lost)"));
    }
}
