//! `run --single-sbatch`: the whole scenario as one job, on a system that can run one ([`System::single_job`];
//! Slurm). Every iteration is prepared as in a normal run, the system makes them one job that runs each in turn,
//! that one job is watched, then every iteration is graded from its own directory.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chrono::Local;

use super::{RunOutcome, Runner};
use crate::results::{EndReason, Status};
use crate::scenario::{Scenario, TestRun};
use crate::systems::{JobState, Prepared, SINGLE_EXIT_FILE as EXIT_FILE};
use crate::workloads::JobOutcome;
use crate::{error, info, warn};

/// Test runs with their dependencies first (resolve has rejected cycles).
fn ordered(s: &Scenario) -> Vec<Arc<TestRun>> {
    let mut out: Vec<Arc<TestRun>> = Vec::new();
    let mut left: Vec<Arc<TestRun>> = s.test_runs.clone();
    while !left.is_empty() {
        let before = left.len();
        left.retain(|r| {
            let ready = r.dependencies.iter().all(|d| {
                out.iter().any(|o| o.id == d.id) || !s.test_runs.iter().any(|t| t.id == d.id)
            });
            if ready {
                out.push(r.clone());
            }
            !ready
        });
        if left.len() == before {
            out.append(&mut left);
        }
    }
    out
}

impl Runner {
    /// The single-job mode ([`super::RunnerBuilder::single_job`]): the scenario as one job; the outcome over every
    /// iteration.
    pub(super) async fn run_single(&self) -> RunOutcome {
        let (sys, scenario, layout) = (&self.system, &*self.scenario, &self.layout);
        let root = layout.root.clone();
        let runner = self;
        let interval = self.interval;
        let record = |run: &TestRun,
                      it: u64,
                      dir: &Path,
                      status: Status,
                      end: EndReason,
                      message: String| {
            let mut r = runner.journal.record(run, it, dir, &Prepared::default());
            (r.status, r.end_reason, r.message) = (status, end, message);
            r.ended_at = Some(Local::now().to_rfc3339());
            r
        };
        let mut items: Vec<(Arc<TestRun>, u64, PathBuf, Prepared)> = Vec::new();
        let mut records = Vec::new();
        for run in ordered(scenario) {
            for it in 0..run.iterations {
                let dir = layout.iteration_dir(&run.id, it);
                match sys
                    .prepare(&run, it, &dir)
                    .map_err(String::from)
                    .and_then(|p| {
                        crate::runner::write_inputs(&run, it, &dir, &p)
                            .map(|_| p)
                            .map_err(|e| format!("cannot write {}: {e}", dir.display()))
                    }) {
                    Ok(p) => items.push((run.clone(), it, dir, p)),
                    Err(e) => {
                        error!("Cannot prepare {} #{it}: {e}", run.id);
                        records.push(record(
                            &run,
                            it,
                            &dir,
                            Status::Failed,
                            EndReason::SubmitFailed,
                            e,
                        ));
                    }
                }
            }
        }
        let nodes = items.iter().map(|(r, ..)| r.num_nodes).max().unwrap_or(1);
        let refs: Vec<(&TestRun, u64, &Path, &Prepared)> = items
            .iter()
            .map(|(r, it, d, p)| (r.as_ref(), *it, d.as_path(), p))
            .collect();
        let Some(job) = sys.single_job(&scenario.name, &root, &refs) else {
            unreachable!("a single job is refused up front where the system cannot run one");
        };
        let mut written = Ok(());
        for (name, text) in &job.files {
            written = written.and(crate::util::fsx::write_atomic(
                &root.join(name),
                text.as_bytes(),
            ));
        }
        if let Err(e) = written {
            error!(
                "Cannot write the single job's files in {}: {e}",
                root.display()
            );
            return RunOutcome::ended(records);
        }
        let Some((first, ..)) = items.first() else {
            return RunOutcome::ended(records);
        };
        info!(
            "Submitting the whole scenario as one job ({} iteration(s) on {nodes} node(s))",
            items.len()
        );
        let (id, end, interrupted) = async {
            let id = match sys.submit(first, &root, &job).await {
                Ok(id) => id,
                Err(e) => return (Err(e), None, false),
            };
            let mut interrupted = false;
            let mut cancel_at = None;
            loop {
                match sys.poll(std::slice::from_ref(&id)).await.pop() {
                    Some(JobState::Finished(o)) => {
                        sys.collect(&id).await;
                        return (Ok(id), Some(o), interrupted);
                    }
                    Some(JobState::Running) => {}
                    Some(JobState::Pending(p)) => info!(
                        "job {id} (single sbatch) {}: {}",
                        p.state.to_lowercase(),
                        p.reason
                    ),
                    None => {}
                }
                if cancel_at
                    .is_some_and(|t: std::time::Instant| t.elapsed() > Duration::from_secs(15))
                {
                    return (Ok(id), None, true);
                }
                tokio::select! {
                    _ = tokio::time::sleep(interval) => {}
                    _ = self.stop.after(0), if !interrupted => {
                        warn!("Interrupted: cancelling job {id}");
                        interrupted = true;
                        cancel_at = Some(std::time::Instant::now());
                        if let Err(e) = sys.cancel(&id).await {
                            error!("Cannot cancel job {id}: {e}");
                        }
                    }
                }
            }
        }
        .await;
        let id = match id {
            Ok(id) => id,
            Err(e) => {
                error!("Failed to submit the scenario: {e}");
                for (run, it, dir, _) in &items {
                    records.push(record(
                        run,
                        *it,
                        dir,
                        Status::Failed,
                        EndReason::SubmitFailed,
                        e.message.clone(),
                    ));
                }
                return RunOutcome::ended(records);
            }
        };
        let nodes_seen = sys.nodes(&id);
        for (run, it, dir, p) in &items {
            let mut rec = record(
                run,
                *it,
                dir,
                Status::Skipped,
                EndReason::NotStarted,
                String::new(),
            );
            rec.job_id = Some(id.clone());
            rec.test_cmd = p.test_cmd.clone();
            rec.nodes = nodes_seen.clone();
            let rc = std::fs::read_to_string(dir.join(EXIT_FILE))
                .ok()
                .and_then(|t| t.trim().parse::<i32>().ok());
            // a job that never ran (a dry-run's) says so when it ends
            let nothing_ran = end.as_ref().and_then(|o| o.end) == Some(EndReason::DryRun);
            (rec.status, rec.end_reason, rec.message) = match (nothing_ran, rc) {
                (true, _) => (
                    Status::DryRun,
                    EndReason::DryRun,
                    "dry-run: files written, nothing ran".into(),
                ),
                (false, None) if interrupted => (
                    Status::Cancelled,
                    EndReason::Cancelled,
                    "cancelled by the user".into(),
                ),
                (false, None) => (
                    Status::Skipped,
                    EndReason::NotStarted,
                    format!(
                        "the single job ended before this iteration ran{}",
                        end.as_ref()
                            .and_then(|o| o.state.as_deref())
                            .map(|st| format!(" (job state {st})"))
                            .unwrap_or_default()
                    ),
                ),
                (false, Some(code)) => {
                    rec.exit_code = Some(code);
                    let outcome = JobOutcome {
                        exit_code: Some(code),
                        ..Default::default()
                    };
                    let asked = run.asked();
                    let v = run
                        .workload
                        .grade(&run.test, dir, &outcome)
                        .with_stderr(dir, &outcome);
                    let mut v = crate::workloads::judge::judge(v, Some(&asked));
                    rec.checks = std::mem::take(&mut v.checks);
                    rec.launched = Some(asked);
                    let st = if !scenario.job_status_check || v.passed {
                        Status::Passed
                    } else {
                        Status::Failed
                    };
                    (st, EndReason::Exited, v.message)
                }
            };
            if self.effects.records {
                if let Err(e) = rec.write(dir) {
                    error!("Cannot write the run record in {}: {e}", dir.display());
                }
            }
            records.push(rec);
        }
        let leftovers = if interrupted && end.is_none() {
            sys.leftovers()
        } else {
            Vec::new()
        };
        RunOutcome {
            records,
            interrupted,
            leftovers,
        }
    }
}
