//! One poll of our jobs: a single `squeue` for all of them; `sacct` for those that left the queue (with its lag
//! tolerated), requeues and hopeless pending reasons noticed on the way.

use std::collections::HashMap;

use super::{run_cmd, state, watch, Slurm, SACCT_PATIENCE};
use crate::results::EndReason;
use crate::systems::{JobId, JobState, Queued};
use crate::workloads::JobOutcome;
use crate::{debug, warn};

impl Slurm {
    pub(super) async fn poll_jobs(&self, ids: &[JobId]) -> Vec<JobState> {
        let joined = ids.join(",");
        let out = run_cmd(
            "squeue",
            &[
                "-h",
                "-O",
                state::SQUEUE_FORMAT,
                &format!("--jobs={joined}"),
            ],
        )
        .await;
        // squeue fails with "Invalid job id" when none of the ids is known any more: all have left the queue.
        let queue = if out.ok || out.stderr.contains("Invalid job id") {
            state::parse_squeue(&out.stdout)
        } else {
            warn!(
                "squeue failed ({}); keeping the last known job states",
                out.stderr
            );
            return ids.iter().map(|_| JobState::Running).collect();
        };
        let requeued = self.requeued(&queue).await;
        let live: HashMap<String, state::Live> =
            queue.into_iter().map(|(id, l, _)| (id, l)).collect();
        let gone: Vec<&str> = ids
            .iter()
            .filter(|id| !live.contains_key(*id))
            .map(String::as_str)
            .collect();
        let rows = if gone.is_empty() {
            Vec::new()
        } else {
            self.sacct(&gone, &["-X"]).await.unwrap_or_default()
        };
        let broken = self.broken_nodes(live.values()).await;
        let mut jobs = self.jobs.lock().unwrap();
        for (id, attempt) in requeued {
            warn!(
                "Slurm job {id} was requeued: its run on {} ended {}{}; it will run again, maybe elsewhere",
                attempt.nodes.join(","),
                attempt.state,
                if attempt.state == "NODE_FAIL" {
                    " (a node failed: check its health)"
                } else {
                    ""
                }
            );
            if let Some(t) = jobs.get_mut(&id) {
                t.attempts.push(attempt);
            }
        }
        let finals: HashMap<String, state::AcctRow> = rows
            .into_iter()
            .filter(|r| state::is_terminal(&r.state))
            .filter(|r| {
                jobs.get(&r.job_id)
                    .is_none_or(|t| t.job_name.is_empty() || t.job_name == r.name)
            })
            .map(|r| (r.job_id.clone(), r))
            .collect();
        ids.iter()
            .map(|id| match live.get(id) {
                Some(state::Live::Pending(st, reason)) => {
                    let mut q = Queued::new(st.as_str(), reason.as_str());
                    q.hopeless = watch::hopeless(reason, &broken);
                    if q.hopeless.is_some() {
                        q.failed_before =
                            jobs.get(id).and_then(|t| watch::pre_hook_failure(&t.dir));
                    }
                    JobState::Pending(q)
                }
                Some(state::Live::Running(nodes)) => {
                    if let Some(t) = jobs.get_mut(id) {
                        if !nodes.is_empty() {
                            t.running_on = Some(nodes.clone());
                        }
                    }
                    JobState::Running
                }
                None => match finals.get(id) {
                    Some(row) => {
                        debug!("Slurm job {id} ended: {row:?}");
                        let mut outcome = state::outcome(row);
                        if let Some(t) = jobs.get_mut(id) {
                            t.nodes = crate::util::nodelist::expand(&row.nodes).unwrap_or_default();
                            watch::preflight_verdict(&t.dir, &mut outcome);
                            watch::pre_hook_verdict(&t.dir, &mut outcome);
                        }
                        JobState::Finished(outcome)
                    }
                    None => {
                        let misses = jobs.get_mut(id).map_or(SACCT_PATIENCE, |t| {
                            t.misses += 1;
                            t.misses
                        });
                        if misses >= SACCT_PATIENCE {
                            JobState::Finished(JobOutcome {
                                end: Some(EndReason::Lost),
                                failure: Some(format!(
                                    "job {id} left the queue but sacct has no final state for it"
                                )),
                                ..Default::default()
                            })
                        } else {
                            JobState::Running
                        }
                    }
                },
            })
            .collect()
    }
}
