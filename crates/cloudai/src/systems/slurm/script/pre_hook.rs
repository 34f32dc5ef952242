//! The pre-test hooks of a test whose own launcher submits its job (Megatron-Bridge), as CloudAI writes them: one
//! batch script, `pre_hook_sbatch_script.sh`, that runs each hook on every node of its allocation at once (one node
//! each: no communicator across nodes), checks each node's output (the workloads' rule,
//! [`crate::workloads::submit::pre_hook_check`]) and exits non-zero when a node failed. The launcher submits it first
//! and makes the test's job depend on it (`afterok`): the test runs only on nodes that passed. One difference: each
//! node's step asks for that node's tasks ([`ONE_NODES_TASKS`]); CloudAI's inherits every node's and cannot start.

use std::path::PathBuf;

use super::*;
use crate::workloads::submit::slurm_params;

pub(crate) const PRE_HOOK_SCRIPT: &str = "pre_hook_sbatch_script.sh";
/// The pre-hook job's own output (`stdout.txt`, `stderr.txt`), in the iteration's directory.
pub(crate) const PRE_HOOK_DIR: &str = "pre_hook";
/// The task count of a hook's step on one node (a documented difference from CloudAI's script, which has none).
pub(crate) const ONE_NODES_TASKS: &str = "--ntasks=${SLURM_NTASKS_PER_NODE:-1}";
/// What the pre-hook job writes on its standard error when a hook failed.
pub(crate) const PRE_HOOK_FAILED: &str = "Pre-hook tests failed";

impl Ctx<'_> {
    /// Writes the pre-hook job of `t` into `files`; returns the script's absolute path.
    pub(super) fn pre_hook(
        &self,
        t: &Target,
        hooks: &HookScenario,
        files: &mut Vec<(String, String)>,
    ) -> PathBuf {
        let out = t.dir.join(PRE_HOOK_DIR);
        let mut lines = vec![
            "#!/bin/bash".to_string(),
            format!("#SBATCH --job-name=pre_hook_{}", self.job_name(t.run)),
            format!("#SBATCH --output={}", sbatch_value(&out.join("stdout.txt"))),
            format!("#SBATCH --error={}", sbatch_value(&out.join("stderr.txt"))),
            format!("#SBATCH --partition={}", self.slurm.default_partition),
        ];
        if let Some(acc) = &self.slurm.account {
            lines.push(format!("#SBATCH --account={acc}"));
        }
        if let Some(r) = self.slurm.extra_srun_args.as_deref().and_then(reservation) {
            lines.push(format!("#SBATCH --reservation={r}"));
        }
        if let Some(d) = &self.slurm.distribution {
            lines.push(format!("#SBATCH --distribution={d}"));
        }
        if t.nodes.is_empty() {
            lines.push(format!("#SBATCH -N {}", t.num_nodes()));
            if !t.run.exclude_nodes.is_empty() {
                lines.push(format!(
                    "#SBATCH --exclude={}",
                    t.run.exclude_nodes.join(",")
                ));
            }
        } else {
            lines.push(format!("#SBATCH --nodelist={}", t.nodes.join(",")));
            files.push(("hostfile.txt".into(), self.hostfile(t.nodes)));
        }
        lines.extend(self.job_directives(t.run));
        for p in t.run.extra_srun_args.iter().flat_map(|a| slurm_params(a)) {
            lines.push(match p.split_once('=') {
                Some((k, v)) if !v.is_empty() => format!("#SBATCH --{k}={v}"),
                Some((k, _)) => format!("#SBATCH --{k}"),
                None => format!("#SBATCH --{p}"),
            });
        }
        lines.push(String::new());
        let mut passed = Vec::new();
        for (i, tr) in hooks.test_runs.iter().enumerate() {
            // each node on its own
            let one = TestRun {
                num_nodes: 1,
                ..(**tr).clone()
            };
            let (srun, dir, _) = self.hook_srun(&one, "pre_test", t.dir, files);
            let at = quote_path(&dir);
            // the node's own tasks: a step inherits the allocation's task count (SLURM_NTASKS, every node's), which
            // cannot fit on one node — CloudAI's script leaves it so and fails with `ntasks_per_node` set
            let srun = srun.replacen(
                "srun ",
                &format!(
                    "srun --nodelist=$_node {ONE_NODES_TASKS} --output={at}/stdout_$_node.txt --error={at}/stderr_$_node.txt "
                ),
                1,
            );
            let check = crate::workloads::submit::pre_hook_check(
                &tr.test,
                &format!("{at}/stdout_$_node.txt"),
            );
            let var = format!("SUCCESS_{i}");
            lines.extend([
                format!("# {}", tr.test.name),
                format!("mkdir -p {at}"),
                "for _node in $(scontrol show hostnames $SLURM_JOB_NODELIST); do".into(),
                format!("    {srun} &"),
                "done".into(),
                "wait".into(),
                format!("{var}=1"),
                "for _node in $(scontrol show hostnames $SLURM_JOB_NODELIST); do".into(),
                format!("    if ! {check}; then"),
                format!("        {var}=0"),
                "    fi".into(),
                "done".into(),
                String::new(),
            ]);
            passed.push(format!("[ ${var} -eq 1 ]"));
        }
        lines.extend([
            format!(
                "PRE_TEST_SUCCESS=$( {} && echo 1 || echo 0 )",
                passed.join(" && ")
            ),
            "if [ \"$PRE_TEST_SUCCESS\" -ne 1 ]; then".into(),
            format!("  echo \"{PRE_HOOK_FAILED}. Blocking training job.\" >&2"),
            "  exit 1".into(),
            "fi".into(),
        ]);
        files.push((PRE_HOOK_SCRIPT.into(), lines.join("\n")));
        t.dir.join(PRE_HOOK_SCRIPT)
    }
}
