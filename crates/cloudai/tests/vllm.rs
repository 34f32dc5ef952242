//! vLLM serving (`vllm`): its schema's rules (one clear error each, nothing created), the placement checked before
//! anything runs, `custom_bash` in the script, and the grade from `vllm bench serve`'s result file (real public
//! outputs). CloudAI's jobs are compat_dry_run.rs's `slurm-vllm`.

use crate::common;

use common::{data, stdout_of, Work};
use serde_json::Value;

const SYSTEM: &str =
    "name = \"s\"\nscheduler = \"slurm\"\ninstall_path = \"install\"\noutput_path = \"out\"\n\
                      default_partition = \"p\"\ngpus_per_node = 8\n[[partitions]]\nname = \"p\"\n";

/// A dry-run of one vLLM test: `top` before its `cmd_args`, `test` after them.
fn dry_run_with(
    w: &Work,
    top: &str,
    test: &str,
    scenario_extra: &str,
    nodes: u64,
) -> std::process::Output {
    w.file("system.toml", SYSTEM);
    w.file(
        "tests/t.toml",
        &format!(
            "name = \"v\"\ndescription = \"d\"\ntest_template_name = \"vllm\"\n{top}[cmd_args]\n\
             docker_image_url = \"img\"\n{test}"
        ),
    );
    w.file(
        "s.toml",
        &format!("name = \"n\"\n[[Tests]]\nid = \"t\"\ntest_name = \"v\"\nnum_nodes = {nodes}\n{scenario_extra}"),
    );
    w.cloudai().args(common::DRY_RUN_S_TOML).output().unwrap()
}

fn dry_run(w: &Work, test: &str, scenario_extra: &str, nodes: u64) -> std::process::Output {
    dry_run_with(w, "", test, scenario_extra, nodes)
}

#[test]
fn bad_fields_get_one_clear_error_each_and_nothing_is_created() {
    for (test, want) in [
        (
            "port = 65400\n[cmd_args.prefill]\n[cmd_args.decode]\n",
            "must be 65335 or less (disaggregated",
        ),
        ("port = 0\n", "must be 1 or more, found 0"),
        (
            "[cmd_args.prefill]\ngpu_ids = \"0,1\"\n[cmd_args.decode]\n",
            "prefill and decode gpu_ids must both be set or both be omitted",
        ),
        (
            "[semantic_eval_cmd_args]\nentrypoint = \"x\"\nclis = \"y\"\n",
            "semantic_eval_cmd_args.clis",
        ),
        (
            "[custom_bash]\n\"vllm (serve\" = \"echo hi\"\n",
            "invalid regular expression",
        ),
        ("[bench_cmd_args]\nnum_prompts = \"many\"\n", "num_prompts"),
    ] {
        let w = Work::new();
        let out = dry_run(&w, test, "", 1);
        let text = stdout_of(&out);
        assert_eq!(out.status.code(), Some(1), "{test}: {text}");
        assert!(text.contains(want), "{test}: {text}");
        assert!(!w.path().join("out").exists(), "{test}: nothing is created");
    }
}

#[test]
fn placement_is_checked_before_anything_runs() {
    for (test, nodes, want) in [
        (
            "[cmd_args.prefill]\n[cmd_args.decode]\n",
            3,
            "over more than 2 nodes needs both cmd_args.prefill.num_nodes and cmd_args.decode.num_nodes",
        ),
        (
            "[cmd_args.prefill]\nnum_nodes = 1\n[cmd_args.decode]\nnum_nodes = 2\n",
            4,
            "= 1 + 2 must equal the test's 4 node(s)",
        ),
        (
            "[cmd_args.decode]\ntensor_parallel_size = 16\n",
            1,
            "tensor × pipeline × data parallel = 16 × 1 × 1 = 16 GPUs, it has 8",
        ),
        (
            "[cmd_args.prefill]\ntensor_parallel_size = 8\n[cmd_args.decode]\n",
            1,
            "the prefill server needs tensor × pipeline × data parallel = 8 × 1 × 1 = 8 GPUs, it has 4",
        ),
        (
            "[cmd_args.decode]\ngpu_ids = \"0,x\"\n",
            1,
            "cmd_args.decode.gpu_ids = '0,x': not a comma-separated list of GPU numbers",
        ),
    ] {
        let w = Work::new();
        let out = dry_run(&w, test, "", nodes);
        let text = stdout_of(&out);
        assert_ne!(out.status.code(), Some(0), "{test}: {text}");
        assert!(text.contains(want), "{test}: {text}");
    }
    // 16 GPUs over two nodes is a Ray cluster of two
    let w = Work::new();
    let out = dry_run(&w, "[cmd_args.decode]\ntensor_parallel_size = 16\n", "", 2);
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let script =
        std::fs::read_to_string(w.results_root().join("t/0/cloudai_sbatch_script.sh")).unwrap();
    assert!(
        script.contains("--tensor-parallel-size 16 --port 8300 --distributed-executor-backend ray"),
        "{script}"
    );
    assert!(
        script.contains("srun --export=ALL --mpi=none -N2 "),
        "no MPI plugin, whatever the system's: {script}"
    );
}

#[test]
fn custom_bash_runs_before_the_commands_it_matches() {
    let w = Work::new();
    let out = dry_run(
        &w,
        "[cmd_args.decode]\nenable_prefix_caching = false\n[custom_bash]\n\"^vllm serve\" = \"pip install x\"\n",
        "",
        1,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let script =
        std::fs::read_to_string(w.results_root().join("t/0/cloudai_sbatch_script.sh")).unwrap();
    assert!(
        script.contains("bash -c 'pip install x; exec vllm serve Qwen/Qwen3-0.6B --host 0.0.0.0 --no-enable-prefix-caching --port 8300' &"),
        "{script}"
    );
    assert!(
        script.contains("\n    vllm bench serve --model"),
        "the client does not match: {script}"
    );
    let w = Work::new();
    let out = dry_run_with(&w, "custom_bash = \"module load x\"\n", "", "", 1);
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let script =
        std::fs::read_to_string(w.results_root().join("t/0/cloudai_sbatch_script.sh")).unwrap();
    assert_eq!(
        script.matches("bash -c 'module load x; exec ").count(),
        2,
        "{script}"
    );
}

fn sample(name: &str) -> String {
    std::fs::read_to_string(data().join("serving-samples").join(name)).unwrap()
}

fn summary_message(root: &std::path::Path) -> String {
    let summary: Value =
        serde_json::from_slice(&std::fs::read(root.join("summary.json")).unwrap()).unwrap();
    summary["tests"][0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The test's whole entry in summary.json (a pass says what it saw in its checks).
fn summary_entry(root: &std::path::Path) -> String {
    let summary: Value =
        serde_json::from_slice(&std::fs::read(root.join("summary.json")).unwrap()).unwrap();
    summary["tests"][0].to_string()
}

#[test]
fn the_result_file_is_graded_on_what_was_asked() {
    let w = Work::new();
    let model = "/workspace/shared_assets/models/Qwen/Qwen3-VL-8B-Instruct";
    let out = dry_run(
        &w,
        &format!("model = \"{model}\"\n[bench_cmd_args]\nnum_prompts = 200\n"),
        "",
        1,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let root = w.results_root();
    let dir = root.join("t/0");
    std::fs::write(dir.join("stdout.txt"), "").unwrap();
    std::fs::write(
        dir.join("vllm-bench.log"),
        "Traceback (most recent call last):\n",
    )
    .unwrap();
    let rep = w.generate_report(&root);
    assert_eq!(rep.status.code(), Some(3), "{}", stdout_of(&rep));
    assert!(
        summary_message(&root).contains("the client did not finish; no vllm-bench.json"),
        "{}",
        summary_message(&root)
    );

    std::fs::write(
        dir.join("vllm-bench.json"),
        sample("vllm-bench-one-failed.json"),
    )
    .unwrap();
    let rep = w.generate_report(&root);
    assert_eq!(rep.status.code(), Some(3), "{}", stdout_of(&rep));
    assert!(
        summary_message(&root).contains("1 request(s) failed (199 completed)"),
        "{}",
        summary_message(&root)
    );

    std::fs::write(
        dir.join("vllm-bench.json"),
        sample("vllm-bench-complete.json"),
    )
    .unwrap();
    let rep = w.generate_report(&root);
    assert_eq!(rep.status.code(), Some(0), "{}", stdout_of(&rep));
    let csv = std::fs::read_to_string(dir.join("vllm.csv")).unwrap();
    assert!(csv.starts_with("metric,unit,value\n"), "{csv}");
    assert!(
        csv.contains("\noutput_throughput,tok/s,125.79203608539055\n"),
        "{csv}"
    );
    assert!(
        csv.contains("\np99_ttft_ms,ms,143.32562107359988\n"),
        "{csv}"
    );
    assert!(std::fs::read_to_string(dir.join("vllm.html"))
        .unwrap()
        .contains("vllm bench serve"));

    // another model measured, or fewer prompts sent than asked: the run is not the one asked
    let other = sample("vllm-bench-complete.json").replace(model, "facebook/opt-125m");
    std::fs::write(dir.join("vllm-bench.json"), other).unwrap();
    w.generate_report(&root);
    assert!(
        summary_message(&root).contains("the client measured model facebook/opt-125m"),
        "{}",
        summary_message(&root)
    );
    let fewer = sample("vllm-bench-complete.json")
        .replace("\"num_prompts\": 200", "\"num_prompts\": 100")
        .replace("\"completed\": 200", "\"completed\": 100");
    std::fs::write(dir.join("vllm-bench.json"), fewer).unwrap();
    w.generate_report(&root);
    assert!(
        summary_message(&root).contains("the client sent 100 prompts, 200 asked"),
        "{}",
        summary_message(&root)
    );
}

#[test]
fn a_semantic_evaluation_that_ran_must_report_its_accuracy() {
    let w = Work::new();
    let model = "/workspace/shared_assets/models/Qwen/Qwen3-VL-8B-Instruct";
    let out = dry_run(
        &w,
        &format!(
            "model = \"{model}\"\n[bench_cmd_args]\nnum_prompts = 200\n[semantic_eval_cmd_args]\n\
             entrypoint = \"python3 eval.py\"\ncli = \"--url {{url}} --out {{output_path}}/vllm-gsm8k.json\"\n"
        ),
        "",
        1,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let root = w.results_root();
    let dir = root.join("t/0");
    let script = std::fs::read_to_string(dir.join("cloudai_sbatch_script.sh")).unwrap();
    assert!(
        script.contains(&format!(
            "python3 eval.py --url http://${{NODE}}:8300 --out {}/vllm-gsm8k.json",
            std::path::absolute(&dir).unwrap().display()
        )),
        "{script}"
    );
    std::fs::write(dir.join("stdout.txt"), "").unwrap();
    std::fs::write(
        dir.join("vllm-bench.json"),
        sample("vllm-bench-complete.json"),
    )
    .unwrap();
    let rep = w.generate_report(&root);
    assert_eq!(rep.status.code(), Some(3), "{}", stdout_of(&rep));
    assert!(
        summary_message(&root).contains("no accuracy was found"),
        "{}",
        summary_message(&root)
    );
    std::fs::write(
        dir.join("vllm-semantic-eval.log"),
        "Running 200 questions\nAccuracy: 0.815\n",
    )
    .unwrap();
    let rep = w.generate_report(&root);
    assert_eq!(rep.status.code(), Some(0), "{}", stdout_of(&rep));
    assert!(
        summary_entry(&root).contains("accuracy 0.8150"),
        "{}",
        summary_entry(&root)
    );
    std::fs::write(
        dir.join("vllm-gsm8k.json"),
        "{\"accuracy\": 0.9, \"questions\": 200}",
    )
    .unwrap();
    w.generate_report(&root);
    assert!(
        summary_entry(&root).contains("accuracy 0.9000"),
        "{}",
        summary_entry(&root)
    );
}
