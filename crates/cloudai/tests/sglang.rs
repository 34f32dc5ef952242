//! SGLang serving (`sglang`): the distributed launch over several nodes, the router of a prefill/decode pair, and
//! the grade from `bench_serving`'s JSON-lines result (an unlimited request rate written as `Infinity`, as Python
//! writes it). CloudAI's jobs are compat_dry_run.rs's `slurm-sglang`.

use crate::common;

use common::{data, stdout_of, Work};
use serde_json::Value;

const SYSTEM: &str =
    "name = \"s\"\nscheduler = \"slurm\"\ninstall_path = \"install\"\noutput_path = \"out\"\n\
                      default_partition = \"p\"\ngpus_per_node = 8\n[[partitions]]\nname = \"p\"\n";

fn dry_run(w: &Work, test: &str, nodes: u64) -> std::process::Output {
    w.file("system.toml", SYSTEM);
    w.file(
        "tests/t.toml",
        &format!(
            "name = \"g\"\ndescription = \"d\"\ntest_template_name = \"sglang\"\n[cmd_args]\n\
             docker_image_url = \"img\"\n{test}"
        ),
    );
    w.file(
        "s.toml",
        &format!("name = \"n\"\n[[Tests]]\nid = \"t\"\ntest_name = \"g\"\nnum_nodes = {nodes}\n"),
    );
    w.cloudai().args(common::DRY_RUN_S_TOML).output().unwrap()
}

fn script(w: &Work) -> String {
    std::fs::read_to_string(w.results_root().join("t/0/cloudai_sbatch_script.sh")).unwrap()
}

#[test]
fn a_pair_over_four_nodes_launches_each_role_across_its_nodes() {
    let w = Work::new();
    let out = dry_run(
        &w,
        "[cmd_args.prefill]\nnum_nodes = 2\n[cmd_args.decode]\nnum_nodes = 2\ndisaggregation_transfer_backend = \"mooncake\"\n\
         [custom_bash]\n\"disaggregation-mode decode\" = \"ulimit -l unlimited\"\n",
        4,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let s = script(&w);
    for want in [
        "export PREFILL_DIST_INIT_PORT=$((20000 + PORT_OFFSET))\nexport DECODE_DIST_INIT_PORT=$((21000 + PORT_OFFSET))\n",
        "PREFILL_NODES=( \"${NODES[@]:0:2}\" )\nDECODE_NODES=( \"${NODES[@]:2:2}\" )",
        "--overlap --nodelist=\"${PREFILL_NODELIST}\" --nodes=2 --ntasks=2 --ntasks-per-node=1 \\\n",
        "--disaggregation-mode prefill --disaggregation-transfer-backend nixl --dist-init-addr \"${PREFILL_NODE}:${PREFILL_DIST_INIT_PORT}\" --nnodes 2 --node-rank \"$SLURM_PROCID\"' &\nPREFILL_PID=$!",
        "bash -c 'ulimit -l unlimited; exec env CUDA_VISIBLE_DEVICES=\"0,1,2,3,4,5,6,7\" python3 -m sglang.launch_server",
        "--disaggregation-transfer-backend mooncake",
        "python3 -m sglang_router.launch_router --pd-disaggregation --prefill http://${PREFILL_NODE}:8400 --decode http://${DECODE_NODE}:8500 --host 0.0.0.0 --port 8300 &",
        "--output-details --pd-separated\n",
    ] {
        assert!(s.contains(want), "{want}\n---\n{s}");
    }
    // one node per role's task, none of the pair's GPUs split: each role has its nodes' GPUs
    assert!(!s.contains("--job-name=cloudai-sglang-prefill"), "{s}");
}

fn summary(root: &std::path::Path) -> String {
    let summary: Value =
        serde_json::from_slice(&std::fs::read(root.join("summary.json")).unwrap()).unwrap();
    summary["tests"][0].to_string()
}

#[test]
fn the_result_lines_are_graded_on_what_was_asked() {
    let w = Work::new();
    let out = dry_run(
        &w,
        "[semantic_eval_cmd_args]\nentrypoint = \"python3 -m sglang.test.run_eval\"\ncli = \"--host {host} --port {port}\"\n",
        1,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    assert!(
        script(&w).contains("python3 -m sglang.test.run_eval --host ${NODE} --port 8300\n"),
        "SGLang's evaluation takes the bare host"
    );
    let root = w.results_root();
    let dir = root.join("t/0");
    std::fs::write(dir.join("stdout.txt"), "").unwrap();
    let sample =
        std::fs::read_to_string(data().join("serving-samples/sglang-bench.jsonl")).unwrap();
    std::fs::write(dir.join("sglang-bench.jsonl"), &sample).unwrap();
    let rep = w.generate_report(&root);
    assert_eq!(rep.status.code(), Some(3), "{}", stdout_of(&rep));
    assert!(
        summary(&root).contains("no accuracy was found"),
        "{}",
        summary(&root)
    );

    std::fs::write(
        dir.join("sglang-semantic-eval.log"),
        "Total latency: 12.1 s\nScore: 0.873\n",
    )
    .unwrap();
    let rep = w.generate_report(&root);
    assert_eq!(rep.status.code(), Some(0), "{}", stdout_of(&rep));
    assert!(
        summary(&root).contains("request_throughput 16.01"),
        "{}",
        summary(&root)
    );
    assert!(
        summary(&root).contains("accuracy 0.8730"),
        "{}",
        summary(&root)
    );
    let csv = std::fs::read_to_string(dir.join("sglang.csv")).unwrap();
    assert!(
        csv.contains("\nrequest_throughput,req/s,16.0137\n"),
        "{csv}"
    );
    assert!(csv.contains("\naccuracy,,0.873\n"), "{csv}");

    // a request that failed: fewer completed than sent
    let one_failed = sample.replacen("\"completed\": 30", "\"completed\": 29", 1);
    std::fs::write(dir.join("sglang-bench.jsonl"), one_failed).unwrap();
    let rep = w.generate_report(&root);
    assert_eq!(rep.status.code(), Some(3), "{}", stdout_of(&rep));
    assert!(
        summary(&root).contains("29 of the 30 requests asked completed"),
        "{}",
        summary(&root)
    );
    // another concurrency than asked
    let other = sample.replacen("\"max_concurrency\": 16", "\"max_concurrency\": 4", 1);
    std::fs::write(dir.join("sglang-bench.jsonl"), other).unwrap();
    w.generate_report(&root);
    assert!(
        summary(&root).contains("the client ran at concurrency 4, 16 asked"),
        "{}",
        summary(&root)
    );
}
