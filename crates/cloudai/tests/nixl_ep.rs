//! NIXL EP (`NixlEP`): the plan's rules (one clear error each), where its workers go, the launcher for plans that
//! expand and remove ranks, and the grade from the node logs. CloudAI's job is compat_dry_run.rs's `slurm-nixl-ep`.

use crate::common;

use common::{data, stdout_of, Work};
use serde_json::Value;

const SYSTEM: &str =
    "name = \"s\"\nscheduler = \"slurm\"\ninstall_path = \"install\"\noutput_path = \"out\"\n\
                      default_partition = \"p\"\n[[partitions]]\nname = \"p\"\n";

fn dry_run(w: &Work, args: &str, nodes: u64, scenario_extra: &str) -> std::process::Output {
    w.file("system.toml", SYSTEM);
    w.file(
        "tests/t.toml",
        &format!(
            "name = \"ep\"\ndescription = \"d\"\ntest_template_name = \"NixlEP\"\n[cmd_args]\n\
             docker_image_url = \"img\"\n{args}"
        ),
    );
    w.file(
        "s.toml",
        &format!("name = \"n\"\n[[Tests]]\nid = \"t\"\ntest_name = \"ep\"\nnum_nodes = {nodes}\n{scenario_extra}"),
    );
    w.cloudai().args(common::DRY_RUN_S_TOML).output().unwrap()
}

#[test]
fn a_plan_that_is_not_one_gets_one_clear_error() {
    for (args, want) in [
        (
            "plan = \"[[0, 1], [0, 1, 2\"\nnum_processes_per_node = 2\n",
            "the plan is not JSON",
        ),
        (
            "plan = \"[[0, 1.5]]\"\nnum_processes_per_node = 2\n",
            "each rank must be an integer",
        ),
        (
            "plan = \"[[0], []]\"\nnum_processes_per_node = 1\n",
            "each phase must be a non-empty list of ranks",
        ),
        (
            "plan = \"{}\"\nnum_processes_per_node = 1\n",
            "not a non-empty list of phases",
        ),
        (
            "plan = []\nnum_processes_per_node = 1\n",
            "an empty list of plans",
        ),
        (
            "plan = \"[[0]]\"\nnum_processes_per_node = 0\n",
            "must be 1 or more",
        ),
        (
            "plan = \"[[0]]\"\nnum_processes_per_node = 1\nstore_port = 70000\n",
            "must be 65535 or less",
        ),
    ] {
        let w = Work::new();
        let out = dry_run(&w, args, 1, "");
        let text = stdout_of(&out);
        assert_eq!(out.status.code(), Some(1), "{args}: {text}");
        assert!(text.contains(want), "{args}: {text}");
        assert!(!w.path().join("out").exists(), "{args}: nothing is created");
    }
}

#[test]
fn workers_must_fit_the_nodes() {
    for (args, nodes, want) in [
        (
            "plan = \"[[0, 1], [0, 1, 2, 3]]\"\nnum_processes_per_node = 2\n",
            1,
            "on one node num_processes_per_node must equal the workers the plan starts (4), found 2",
        ),
        (
            "plan = \"[[0, 1, 2, 3, 4]]\"\nnum_processes_per_node = 2\n",
            2,
            "the plan starts 5 workers but 2 nodes of num_processes_per_node = 2 hold 4",
        ),
    ] {
        let w = Work::new();
        let out = dry_run(&w, args, nodes, "");
        let text = stdout_of(&out);
        assert_ne!(out.status.code(), Some(0), "{text}");
        assert!(text.contains(want), "{text}");
    }
}

#[test]
fn a_plan_that_expands_and_kills_ranks_is_launched_phase_by_phase() {
    let w = Work::new();
    let out = dry_run(
        &w,
        "plan = \"[[0, 1], [0, 1, 2, 3], [0, 1, -2, 3], [0, 3]]\"\nnum_processes_per_node = 2\nkineto = true\nquiet = false\n",
        2,
        "time_limit = \"00:20:00\"\n",
    );
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let dir = w.results_root().join("t/0");
    let dir_abs = std::path::absolute(&dir).unwrap();
    let launcher = std::fs::read_to_string(dir.join("nixl-ep-launch.sh")).unwrap();
    for want in [
        // 20 minutes over four phases
        "    local timeout=300\n",
        "echo \"Waiting for phase 0 before starting phase 1...\"\n",
        "--nodelist=\"${nodes_array[1]}\" --ntasks-per-node=1 --ntasks=1 -N1 --open-mode=append",
        "--num-processes 2 --tcp-server $master_ip --kineto\"",
        "allow_planned_removal_143=1\n",
        &format!(
            "    wait_for_phase_completion \"3\" \"{}/nixl-ep-node-0.log\" \"$primary_pid\" || rc=143\n",
            dir_abs.display()
        ),
    ] {
        assert!(launcher.contains(want), "{want}\n---\n{launcher}");
    }
    assert!(!launcher.contains("--quiet"), "a false flag is left out");
    assert!(
        !launcher.contains("Waiting for phase 1 before starting phase 2"),
        "phases that start no worker launch nothing"
    );
    let plan = std::fs::read_to_string(dir.join("nixl-ep-plan.json")).unwrap();
    let parsed: Value = serde_json::from_str(&plan).unwrap();
    assert_eq!(parsed[2][2], -2);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.join("nixl-ep-launch.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o111, 0o111);
    }
}

fn summary(root: &std::path::Path) -> String {
    let summary: Value =
        serde_json::from_slice(&std::fs::read(root.join("summary.json")).unwrap()).unwrap();
    summary["tests"][0].to_string()
}

#[test]
fn the_node_logs_are_graded_on_the_plan() {
    let w = Work::new();
    let out = dry_run(
        &w,
        "plan = \"[[0, 1, 2, 3], [0, 1, 2, 3, 4, 5, 6, 7]]\"\nnum_processes_per_node = 4\n",
        2,
        "",
    );
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let root = w.results_root();
    let dir = root.join("t/0");
    let sample = |n: u32| {
        std::fs::read_to_string(data().join(format!("nixl-samples/ep/nixl-ep-node-{n}.log")))
            .unwrap()
    };
    std::fs::write(
        dir.join("stdout.txt"),
        "All NIXL EP launches completed successfully\n",
    )
    .unwrap();
    std::fs::write(dir.join("nixl-ep-node-0.log"), sample(0)).unwrap();
    let rep = w.generate_report(&root);
    assert_eq!(rep.status.code(), Some(3), "{}", stdout_of(&rep));
    assert!(
        summary(&root)
            .contains("no log from the nodes workers were started on: nixl-ep-node-1.log"),
        "{}",
        summary(&root)
    );

    std::fs::write(dir.join("nixl-ep-node-1.log"), sample(1)).unwrap();
    let rep = w.generate_report(&root);
    assert_eq!(rep.status.code(), Some(0), "{}", stdout_of(&rep));
    assert!(
        summary(&root)
            .contains("2 phases of 8 ranks ended; 12 bandwidth lines; dispatch + combine"),
        "{}",
        summary(&root)
    );
    let csv = std::fs::read_to_string(dir.join("nixl_ep.csv")).unwrap();
    assert!(
        csv.starts_with(
            "node,rank,dispatch_combine_gbps,avg_us,min_us,max_us,dispatch_gbps,combine_gbps\n"
        ),
        "{csv}"
    );
    assert_eq!(csv.lines().count(), 13, "{csv}");

    // the last phase never ended on the new ranks' node, and nothing else said so
    let cut: String = sample(1)
        .lines()
        .filter(|l| !l.contains("-> end phase 1") && !l.contains("[rank 6]"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(dir.join("nixl-ep-node-1.log"), &cut).unwrap();
    let zero = sample(0).replace("-> end phase 1", "-> still in phase 1");
    std::fs::write(dir.join("nixl-ep-node-0.log"), zero).unwrap();
    w.generate_report(&root);
    assert!(
        summary(&root).contains("phase(s) 1 of 2 never ended"),
        "{}",
        summary(&root)
    );
    std::fs::write(dir.join("nixl-ep-node-0.log"), sample(0)).unwrap();
    w.generate_report(&root);
    assert!(
        summary(&root).contains("rank(s) 6 of the plan measured nothing"),
        "{}",
        summary(&root)
    );

    // a worker that lost the rank store
    std::fs::write(
        dir.join("nixl-ep-node-1.log"),
        format!("{}RuntimeError: recvValueWithTimeout failed\n", sample(1)),
    )
    .unwrap();
    let rep = w.generate_report(&root);
    assert_eq!(rep.status.code(), Some(3), "{}", stdout_of(&rep));
    assert!(
        summary(&root).contains("a worker lost its rank store"),
        "{}",
        summary(&root)
    );
}
