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

/// Why the test's job will never run when its pre-test hooks' job failed (its standard error says so): each hook
/// with the nodes whose output has no result.
pub(super) fn pre_hook_failure(dir: &Path) -> Option<String> {
    let hook_dir = dir.join(script::PRE_HOOK_DIR);
    let said = std::fs::read_to_string(hook_dir.join("stderr.txt")).ok()?;
    if !said.contains(script::PRE_HOOK_FAILED) {
        return None;
    }
    let pre_test = dir.join("pre_test");
    let mut failed = Vec::new();
    let mut hooks: Vec<_> = std::fs::read_dir(&pre_test)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    hooks.sort();
    for hook in hooks {
        // each node's output, and whether it has the line
        let mut outputs: Vec<(String, bool)> = std::fs::read_dir(&hook)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let node = name
                    .strip_prefix("stdout_")?
                    .strip_suffix(".txt")?
                    .to_string();
                let text = std::fs::read_to_string(e.path()).unwrap_or_default();
                Some((node, crate::workloads::submit::pre_hook_has_result(&text)))
            })
            .collect();
        outputs.sort();
        let name = hook.file_name().unwrap_or_default().to_string_lossy();
        let lacking: Vec<&str> = outputs
            .iter()
            .filter(|(_, ok)| !ok)
            .map(|(n, _)| n.as_str())
            .collect();
        if outputs.is_empty() {
            failed.push(format!(
                "{name}: no output of any node (a hook that is not an srun step)"
            ));
        } else if !lacking.is_empty() {
            failed.push(format!("{name} on {}", lacking.join(", ")));
        }
    }
    let which = if failed.is_empty() {
        "a node's result below the hook's threshold".to_string()
    } else {
        format!("no result: {}", failed.join("; "))
    };
    Some(format!(
        "its pre-test hooks failed ({which}); the test's command did not run (outputs in {}, the hook job's in {})",
        pre_test.display(),
        hook_dir.display()
    ))
}

/// A job whose pre-test hooks' job failed ended as a failed pre-flight, whatever Slurm did with it (left it
/// pending on its dependency, or cancelled it).
pub(super) fn pre_hook_verdict(dir: &Path, outcome: &mut JobOutcome) {
    if let Some(why) = pre_hook_failure(dir) {
        outcome.end = Some(EndReason::PreflightFailed);
        outcome.failure = Some(why);
    }
}

/// The jobs `squeue -h -o '%i|%o'` lists whose batch script is the iteration's pre-hook script (the launcher
/// submitted them ahead of the test's job).
pub(super) fn ahead_jobs(squeue: &str, dir: &Path) -> Vec<String> {
    let script = dir.join(script::PRE_HOOK_SCRIPT);
    squeue
        .lines()
        .filter_map(|l| {
            let (id, cmd) = l.split_once('|')?;
            (Path::new(cmd.trim()) == script).then(|| id.trim().to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_pre_hook_names_the_nodes_without_a_result() {
        let d = tempfile::tempdir().unwrap();
        assert!(pre_hook_failure(d.path()).is_none());
        let hook = d.path().join("pre_test/nccl_ag");
        std::fs::create_dir_all(&hook).unwrap();
        std::fs::create_dir_all(d.path().join("pre_hook")).unwrap();
        let result = format!("# {} : 90.1\n", crate::workloads::submit::PRE_HOOK_RESULT);
        std::fs::write(hook.join("stdout_node001.txt"), result).unwrap();
        std::fs::write(hook.join("stdout_node002.txt"), "NCCL WARN net\n").unwrap();
        std::fs::write(d.path().join("pre_hook/stderr.txt"), "").unwrap();
        assert!(
            pre_hook_failure(d.path()).is_none(),
            "the hook job did not fail"
        );
        std::fs::write(
            d.path().join("pre_hook/stderr.txt"),
            "Pre-hook tests failed. Blocking training job.\n",
        )
        .unwrap();
        let why = pre_hook_failure(d.path()).unwrap();
        assert!(
            why.contains("nccl_ag on node002") && !why.contains("node001"),
            "{why}"
        );
        let mut outcome = JobOutcome::default();
        pre_hook_verdict(d.path(), &mut outcome);
        assert_eq!(outcome.end, Some(EndReason::PreflightFailed));
    }

    #[test]
    fn jobs_ahead_are_those_of_the_pre_hook_script() {
        let dir = Path::new("/r/t/0");
        let q = "41|/r/t/0/pre_hook_sbatch_script.sh\n42|/r/t/0/job/sbatch.sh\n43|/r/t/1/pre_hook_sbatch_script.sh\n";
        assert_eq!(ahead_jobs(q, dir), ["41"]);
    }
}
