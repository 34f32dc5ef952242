//! The per-node pre-flight check the batch script runs before the test's command (`[preflight]`).

use super::*;

/// The pre-flight directory of an iteration; `FAILED` in it lists the nodes that failed (the main command did not run).
pub(crate) const PREFLIGHT_DIR: &str = "preflight";
pub(crate) const PREFLIGHT_FAILED: &str = "FAILED";
/// The batch script's exit status when a pre-flight check failed.
pub(super) const PREFLIGHT_EXIT: u8 = 86;

/// The check once per node (its output in `preflight/<node>.out`, its status in `<node>.rc`), then the verdict over
/// every node of the allocation: a failed check or fewer GPU lines than `min_gpus` stops the job before its main
/// command.
pub(super) fn preflight_lines(
    pf: &crate::config::system::Preflight,
    dir: &Path,
    nodes: u64,
    files: &mut Vec<(String, String)>,
) -> Vec<String> {
    // the directory once as a quoted word, then only "$PF_DIR/…" (safe for any path)
    let q = quote_path(&dir.join(PREFLIGHT_DIR));
    files.push((
        format!("{PREFLIGHT_DIR}/preflight.sh"),
        format!(
            "#!/bin/bash\n# cloudai pre-flight check, once per node; files named by Slurm's node name (hostnames can differ)\nnode=${{SLURMD_NODENAME:-$(hostname -s)}}\nPF_DIR={q}\n( {} ) > \"$PF_DIR/$node.out\" 2> \"$PF_DIR/$node.err\"\necho $? > \"$PF_DIR/$node.rc\"\n",
            pf.command
        ),
    ));
    let min = pf.min_gpus.unwrap_or(0);
    vec![
        // one task per node whatever the test's hostfile says (it repeats nodes for their tasks)
        "# cloudai pre-flight: the check on every node; the test runs only if each one passes".into(),
        format!("PF_DIR={q}"),
        format!(
            "(unset SLURM_HOSTFILE; srun --export=ALL --distribution=block --nodes={nodes} --ntasks={nodes} --ntasks-per-node=1 --output=\"$PF_DIR/srun.out\" --error=\"$PF_DIR/srun.err\" bash \"$PF_DIR/preflight.sh\")"
        ),
        "PREFLIGHT_FAILED=\"\"".into(),
        "for node in $(scontrol show hostnames \"$SLURM_JOB_NODELIST\"); do".into(),
        "    rc=$(cat \"$PF_DIR/$node.rc\" 2>/dev/null); rc=${rc:-none}".into(),
        "    gpus=$(grep -c . \"$PF_DIR/$node.out\" 2>/dev/null); gpus=${gpus:-0}".into(),
        "    if [ \"$rc\" != 0 ]; then PREFLIGHT_FAILED=\"$PREFLIGHT_FAILED $node (check exit status $rc)\";".into(),
        format!(
            "    elif [ \"$gpus\" -lt {min} ]; then PREFLIGHT_FAILED=\"$PREFLIGHT_FAILED $node ($gpus of {min} GPUs)\"; fi"
        ),
        "done".into(),
        format!(
            "if [ -n \"$PREFLIGHT_FAILED\" ]; then echo \"pre-flight failed on:$PREFLIGHT_FAILED\" | tee \"$PF_DIR/{PREFLIGHT_FAILED}\" >&2; exit {PREFLIGHT_EXIT}; fi"
        ),
        String::new(),
    ]
}
