//! Watching Slurm jobs for what polling alone does not say: pending reasons that can never clear (including nodes
//! that are down or drained), requeues after a node failure, and a pre-flight check that stopped the job.

use std::path::Path;

use super::{nodes, run_cmd, script, state, Slurm};
use crate::debug;
use crate::results::record::Attempt;
use crate::results::EndReason;
use crate::workloads::JobOutcome;

impl Slurm {
    /// Down, drained or failed nodes among those that pending jobs wait for (`ReqNodeNotAvail`): one `sinfo` call,
    /// only when such a job exists.
    pub(super) async fn broken_nodes<'a>(
        &self,
        live: impl Iterator<Item = &'a state::Live>,
    ) -> Vec<(String, String, String)> {
        let lists: Vec<&str> = live
            .filter_map(|l| match l {
                state::Live::Pending(_, r) => state::unavailable_nodes(r),
                _ => None,
            })
            .collect();
        if lists.is_empty() {
            return Vec::new();
        }
        let out = run_cmd(
            "sinfo",
            &["-h", "-N", "-n", &lists.join(","), "-o", "%N|%t|%E"],
        )
        .await;
        if !out.ok {
            debug!("sinfo failed: {}", out.stderr);
            return Vec::new();
        }
        nodes::broken_nodes(&out.stdout)
    }

    /// Jobs Slurm requeued since the last poll (a node failure, a preemption): their restart count grew, or they
    /// were running and are pending again. Returns the run that ended, as sacct recorded it.
    pub(super) async fn requeued(
        &self,
        queue: &[(String, state::Live, Option<u32>)],
    ) -> Vec<(String, Attempt)> {
        let back: Vec<(String, String)> = {
            let mut jobs = self.jobs.lock().unwrap();
            queue
                .iter()
                .filter_map(|(id, live, restarts)| {
                    let t = jobs.get_mut(id)?;
                    let pending = matches!(live, state::Live::Pending(..));
                    let counted = restarts.is_some_and(|r| r > t.restarts);
                    if let Some(r) = restarts {
                        t.restarts = t.restarts.max(*r);
                    }
                    let was_running = pending && t.running_on.is_some();
                    let nodes = if pending {
                        t.running_on.take()
                    } else {
                        t.running_on.clone()
                    };
                    (counted || was_running).then(|| (id.clone(), nodes.unwrap_or_default()))
                })
                .collect()
        };
        let mut out = Vec::new();
        for (id, nodes) in back {
            let rows = self.sacct(&[&id], &["-X", "-D"]).await.unwrap_or_default();
            // the last finished run of this id is the one that just ended
            let row = rows
                .iter()
                .rev()
                .find(|r| r.job_id == id && state::is_terminal(&r.state));
            // sacct may not have the run yet: then what squeue showed
            let attempt = row.map_or_else(
                || Attempt {
                    nodes: crate::util::nodelist::expand(&nodes).unwrap_or_default(),
                    state: "REQUEUED".into(),
                    ..Default::default()
                },
                state::attempt,
            );
            out.push((id, attempt));
        }
        out
    }
}

/// A pre-flight check that stopped the job (its `FAILED` file names the nodes) decides how the job ended.
pub(super) fn preflight_verdict(dir: &Path, outcome: &mut JobOutcome) {
    let pdir = dir.join(script::PREFLIGHT_DIR);
    let Ok(text) = std::fs::read_to_string(pdir.join(script::PREFLIGHT_FAILED)) else {
        return;
    };
    outcome.end = Some(EndReason::PreflightFailed);
    outcome.failure = Some(format!(
        "{}; the test's command did not run (check outputs in {})",
        text.trim(),
        pdir.display()
    ));
}

/// Why a pending job can never start, if that is so: a reason waiting cannot fix, or nodes it needs that are down,
/// drained or failed.
pub(super) fn hopeless(reason: &str, broken: &[(String, String, String)]) -> Option<String> {
    if let Some(why) = state::hopeless_reason(reason) {
        return Some(format!("{why} (Slurm: {reason})"));
    }
    let wanted = crate::util::nodelist::expand(state::unavailable_nodes(reason)?)?;
    let bad: Vec<String> = broken
        .iter()
        .filter(|(n, _, _)| wanted.contains(n))
        .map(|(n, st, why)| {
            if why.is_empty() {
                format!("{n} is {st}")
            } else {
                format!("{n} is {st}: {why}")
            }
        })
        .collect();
    (!bad.is_empty()).then(|| {
        format!(
            "nodes the job requires are out of service ({}); resume them or exclude them (Slurm: {reason})",
            bad.join("; ")
        )
    })
}
