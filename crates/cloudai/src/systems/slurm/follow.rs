//! Jobs of a launcher that stays with them (Megatron-Bridge): the runner knows the first job's id; when that job
//! ends while the launcher still runs, the launcher may submit it again (its retries), and that job is followed
//! in its place — polled, cancelled and collected under the runner's id, the ended one kept as an earlier attempt.
//! The iteration ends when the launcher has, or [`submit::AFTER_JOB`] after the job did.

use std::time::Instant;

use super::{run_cmd, submit, JobId, JobState, Slurm, Tracked};
use crate::results::record::Attempt;
use crate::warn;
use crate::workloads::JobOutcome;

impl Slurm {
    /// The job the runner's id stands for now: the launcher's latest.
    pub(super) fn actual(&self, id: &str) -> JobId {
        self.aliases
            .lock()
            .unwrap()
            .get(id)
            .cloned()
            .unwrap_or_else(|| id.to_string())
    }

    /// For a job that ended while its iteration's launcher still runs: the launcher's next job, followed from now
    /// on (`Running`); `Running` while the launcher may still submit one; `None` when the end stands.
    pub(super) async fn launcher_after(
        &self,
        runner_id: &str,
        actual: &str,
        outcome: &JobOutcome,
    ) -> Option<JobState> {
        let (dir, cancelled, mut seen) = {
            let mut jobs = self.jobs.lock().unwrap();
            let t = jobs.get_mut(actual)?;
            (
                t.dir.clone(),
                t.cancelled,
                std::mem::take(&mut t.launcher_ids),
            )
        };
        if !submit::launcher_running(&dir) {
            return None;
        }
        let next = submit::next_job(&dir, actual, &mut seen);
        if let Some(t) = self.jobs.lock().unwrap().get_mut(actual) {
            t.launcher_ids = seen.clone();
        }
        if let Some(next) = next {
            if cancelled {
                warn!(
                    "The test's launcher submitted job {next} after job {actual} was cancelled: cancelling it too"
                );
                let out = run_cmd("scancel", &[&next]).await;
                if !out.ok {
                    warn!("scancel {next} failed: {}", out.stderr.trim());
                }
                return None;
            }
            let state = outcome.state.clone().unwrap_or_else(|| "ENDED".into());
            // the ended job's runs as Slurm accounted them
            let runs: Vec<Attempt> = self
                .sacct(&[actual], &["-X", "-D"])
                .await
                .unwrap_or_default()
                .iter()
                .filter(|r| r.job_id == actual)
                .map(super::state::attempt)
                .collect();
            let mut jobs = self.jobs.lock().unwrap();
            let old = jobs.get(actual)?;
            let mut earlier = old.earlier.clone();
            if runs.is_empty() {
                earlier.push(Attempt {
                    nodes: old.nodes.clone(),
                    state: state.clone(),
                    reason: outcome.failure.clone().unwrap_or_default(),
                    start: None,
                    end: None,
                });
            } else {
                earlier.extend(runs);
            }
            let followed = Tracked {
                dir: old.dir.clone(),
                // the launcher names its jobs itself
                job_name: String::new(),
                full_cmd: old.full_cmd.clone(),
                test_cmd: old.test_cmd.clone(),
                earlier,
                launcher_ids: seen,
                ..Tracked::default()
            };
            jobs.insert(next.clone(), followed);
            self.aliases
                .lock()
                .unwrap()
                .insert(runner_id.to_string(), next.clone());
            warn!(
                "Slurm job {actual} ended {state}; the test's launcher submitted job {next} in its place: watching it"
            );
            return Some(JobState::Running);
        }
        if cancelled {
            return None;
        }
        let mut jobs = self.jobs.lock().unwrap();
        let since = *jobs
            .get_mut(actual)?
            .ended_at
            .get_or_insert_with(Instant::now);
        if since.elapsed() < submit::AFTER_JOB {
            Some(JobState::Running)
        } else {
            warn!(
                "Slurm job {actual} ended {} s ago and the test's launcher still runs without a new job: ending the \
                 iteration",
                since.elapsed().as_secs()
            );
            None
        }
    }
}
