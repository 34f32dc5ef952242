//! Chakra replay (`ChakraReplay`): comm_replay's log read through its logger prefix, graded on every rank joining,
//! every iteration replayed and each collective's latencies, the ranks held against the job's shape; CloudAI's job
//! is compat_dry_run.rs.

use crate::common;

use cloudai::workloads::chakra_replay::{parse, verdict};
use cloudai::workloads::judge::{self, Asked};
use common::{data, stdout_of, Work};

fn sample() -> String {
    std::fs::read_to_string(data().join("chakra-samples").join("two-nodes.txt")).unwrap()
}

#[test]
fn the_log_is_read_and_graded_on_what_it_shows() {
    let out = parse(&sample());
    assert_eq!((out.world, out.ranks.len()), (Some(16), 16));
    assert_eq!(
        (out.ranks[9].1.host.as_str(), out.ranks[9].1.gpu.as_str()),
        ("node-b", "cuda:1")
    );
    assert_eq!(out.iterations, Some(3));
    assert_eq!(out.colls.len(), 2);
    assert_eq!(
        (out.colls[0].name.as_str(), out.colls[0].count),
        ("all_reduce", 3)
    );
    assert_eq!(
        out.colls[1].latency,
        [1200.0, 450.0, 350.0, 400.0, 398.0, 448.0]
    );
    let v = verdict(&out, 3);
    assert!(v.passed, "{}", v.message);
    // the ranks sit as the job asked: 2 nodes of 8
    let asked = Asked {
        nodes: 2,
        gpus_per_node: Some(8),
        fabric: Default::default(),
    };
    let judged = judge::judge(v.clone(), Some(&asked));
    assert!(judged.passed, "{}", judged.message);
    assert!(
        judge::brief(&judged.checks).contains("shape 16 ranks on 2 hosts"),
        "{:?}",
        judged.checks
    );
    let wrong = Asked { nodes: 4, ..asked };
    assert!(!judge::judge(v, Some(&wrong)).passed);

    let text = sample();
    let fewer = verdict(&out, 5);
    assert!(
        !fewer.passed && fewer.message.contains("ran 3 of the 5 iterations"),
        "{}",
        fewer.message
    );
    let lost: String = text
        .lines()
        .filter(|l| !l.contains("Hello from Rank 7:"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(verdict(&parse(&lost), 3)
        .message
        .starts_with("rank 7 of 16 is missing"));
    let unfinished: String = text
        .lines()
        .take_while(|l| !l.contains("Performance of replayed"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(verdict(&parse(&unfinished), 3)
        .message
        .contains("did not finish"));
    let crashed = format!("{unfinished}Traceback (most recent call last):\n  File \"comm_replay.py\"\nRuntimeError: NCCL error: unhandled system error\n");
    assert!(verdict(&parse(&crashed), 3)
        .message
        .contains("RuntimeError: NCCL error"));
}

#[test]
fn a_test_without_a_trace_is_refused_and_extra_options_are_passed() {
    let sys = "name = \"s\"\nscheduler = \"slurm\"\ninstall_path = \"install\"\noutput_path = \"out\"\ndefault_partition = \"p\"\n[[partitions]]\nname = \"p\"\n";
    let test = "name = \"cr\"\ndescription = \"d\"\ntest_template_name = \"ChakraReplay\"\n[cmd_args]\ndocker_image_url = \"pt\"\n";
    let w = Work::new();
    w.file("system.toml", sys);
    w.file("tests/t.toml", test);
    w.file(
        "s.toml",
        "name = \"n\"\n[[Tests]]\nid = \"t\"\ntest_name = \"cr\"\nnum_nodes = 1\n",
    );
    let out = w.cloudai().args(common::DRY_RUN_S_TOML).output().unwrap();
    let text = stdout_of(&out);
    assert_ne!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("cmd_args.trace_path is not set"), "{text}");
    let w = Work::new();
    w.file("system.toml", sys);
    w.file(
        "tests/t.toml",
        &format!("{test}trace_path = \"/traces/my run\"\nwarmup_iters = 2\n"),
    );
    w.file(
        "s.toml",
        "name = \"n\"\n[[Tests]]\nid = \"t\"\ntest_name = \"cr\"\nnum_nodes = 1\n",
    );
    let out = w.cloudai().args(common::DRY_RUN_S_TOML).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let script =
        std::fs::read_to_string(w.results_root().join("t/0/cloudai_sbatch_script.sh")).unwrap();
    assert!(
        script.contains(",/traces/my run:/traces/my run'"),
        "{script}"
    );
    assert!(script.contains("comm_replay --trace-type et --trace-path '/traces/my run' --num-replays 1 --warmup-iters 2 \""), "{script}");
}
