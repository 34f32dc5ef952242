//! A job's end as Slurm accounted it: `sacct` (waiting a moment for slurmdbd), every run of it (`--duplicates`,
//! requeues), its final node list, written into `slurm-job.toml`.

use std::path::Path;
use std::time::Duration;

use super::{script, state, JobId, Slurm};
use crate::results::record::Attempt;
use crate::warn;

impl Slurm {
    pub(super) async fn collect_job(
        &self,
        id: &JobId,
        dir: &Path,
        full: &str,
        test: &str,
        name: &str,
    ) {
        // slurmdbd may still be writing the job's final record: give it a moment.
        let mut rows = Vec::new();
        for attempt in 0..5 {
            rows = self.sacct(&[id], &[]).await.unwrap_or_default();
            if rows
                .iter()
                .any(|r| r.job_id == *id && (name.is_empty() || r.name == name))
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200 * (attempt + 1))).await;
        }
        let Some(alloc) = rows
            .iter()
            .find(|r| r.job_id == *id && (name.is_empty() || r.name == name))
        else {
            warn!(
                "sacct has no record of job {id}; {} keeps the submission-time values",
                script::JOB_FILE
            );
            return;
        };
        // Every run of the job (Slurm keeps one id across requeues; --duplicates lists each run).
        let runs: Vec<Attempt> = self
            .sacct(&[id], &["-X", "-D"])
            .await
            .unwrap_or_default()
            .iter()
            .filter(|r| r.job_id == *id && (name.is_empty() || r.name == name))
            .map(state::attempt)
            .collect();
        if let Some(t) = self.jobs.lock().unwrap().get_mut(id) {
            if runs.len() >= t.attempts.len() {
                t.attempts = runs;
            }
        }
        // The allocation's final node list (the one seen at poll time can be partial right at completion).
        if let (Some(nodes), Some(t)) = (
            crate::util::nodelist::expand(&alloc.nodes),
            self.jobs.lock().unwrap().get_mut(id),
        ) {
            if nodes.len() >= t.nodes.len() {
                t.nodes = nodes;
            }
        }
        let facts = script::JobFacts {
            job_id: id.parse().unwrap_or(0),
            name: Some(alloc.name.clone()),
            state: Some(alloc.state.clone()),
            start_time: alloc.start.clone(),
            end_time: alloc.end.clone(),
            elapsed_time_sec: alloc.elapsed,
            exit_code: Some(alloc.exit_code.clone()),
            steps: rows
                .iter()
                .filter(|r| r.job_id != *id)
                .map(|r| script::StepFacts {
                    job_id: r.job_id.clone(),
                    name: r.name.clone(),
                    state: r.state.clone(),
                    exit_code: r.exit_code.clone(),
                    start_time: r.start.clone(),
                    end_time: r.end.clone(),
                    elapsed_time_sec: r.elapsed,
                })
                .collect(),
        };
        let toml = script::job_toml(&facts, full, test, dir);
        if let Err(e) = crate::util::fsx::write_atomic(&dir.join(script::JOB_FILE), toml.as_bytes())
        {
            warn!("Cannot write {}: {e}", dir.join(script::JOB_FILE).display());
        }
    }
}
