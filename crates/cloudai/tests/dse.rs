//! A design-space exploration run on Standalone with a stand-in NCCL binary whose speed follows the swept value:
//! every grid point runs as its own step, trajectory.csv holds CloudAI's rows (inverse of the mean in-place time),
//! and the best step's definition and a scenario that runs it are written.

use crate::common;

use common::{data, stdout_of, Work};

#[test]
fn a_sweep_runs_every_step_and_names_the_fastest() {
    let w = Work::new();
    w.standalone();
    let sample = data().join("nccl-samples/single-node-8gpu-a100-allreduce-v2.19.4.txt");
    // rows sped up by $SPEED: times divided, bandwidths multiplied
    let bin = w.file(
        "bin/all_reduce_perf_mpi",
        &format!(
            r#"#!/bin/bash
awk -v S="$SPEED" 'NF==13 && $1 ~ /^[0-9]+$/ {{ $6=$6/S; $7=$7*S; $8=$8*S; $10=$10/S; $11=$11*S; $12=$12*S }} {{ print }}' {}
"#,
            sample.display()
        ),
    );
    std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    w.file("tests/nccl.toml", common::scratch::fixtures::NCCL);
    w.file(
        "s.toml",
        r#"name = "sweep"
[[Tests]]
id = "ar"
test_name = "nccl"
time_limit = "00:05:00"
[Tests.extra_env_vars]
SPEED = ["1", "4", "2"]
"#,
    );
    let out = w
        .cloudai_with_bin()
        .args(common::RUN_S_TOML)
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("Running step 2 (of 3) with action {'extra_env_vars.SPEED': '4'}"),
        "{text}"
    );
    let root = w.results_root();
    for step in 1..=3 {
        assert!(
            root.join(format!("ar/0/{step}/stdout.txt")).is_file(),
            "step {step}"
        );
    }
    let traj = std::fs::read_to_string(root.join("ar/0/trajectory.csv")).unwrap();
    let rows: Vec<&str> = traj.lines().collect();
    assert_eq!(rows[0], "step,action,reward,observation");
    assert_eq!(rows.len(), 4, "{traj}");
    let reward = |line: &str| -> f64 {
        // step,action,reward,[obs]
        line.rsplit(',').nth(1).unwrap().parse().unwrap()
    };
    let r: Vec<f64> = rows[1..].iter().map(|l| reward(l)).collect();
    assert!(r[1] > r[2] && r[2] > r[0], "rewards {r:?}:\n{traj}");
    // quoted only when the action holds a comma, as Python's csv writer does
    assert!(
        rows[2].starts_with("2,{'extra_env_vars.SPEED': '4'},"),
        "{traj}"
    );
    // the best step's definition, and a scenario that runs it alone
    let best = std::fs::read_to_string(root.join("ar/0/ar.toml")).unwrap();
    assert!(best.contains(r#"SPEED = "4""#), "{best}");
    let sc = std::fs::read_to_string(root.join("ar/0/ar-best-in-scenario.toml")).unwrap();
    assert!(
        sc.contains(r#"name = "nccl_best_config""#)
            && sc.contains("[[Tests]]")
            && sc.contains(r#"SPEED = "4""#),
        "{sc}"
    );
    // the best-in-scenario file is itself a scenario cloudai accepts
    w.file("best.toml", &sc);
    let mut args = common::DRY_RUN_S_TOML.to_vec();
    args[6] = "best.toml";
    let out = w.cloudai().args(&args).output().unwrap();
    assert!(out.status.success(), "{}", stdout_of(&out));
}
