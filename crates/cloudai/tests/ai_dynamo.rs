//! AI Dynamo (`AIDynamo`) on Slurm: graded on its markers and each benchmark's report (the job itself is
//! compat_dry_run.rs: CloudAI's three vLLM cases byte for byte), its values checked as CloudAI's models read them;
//! on Kubernetes, its DynamoGraphDeployment.

use crate::common;

use common::{data, stdout_of, Work};

const SYSTEM: &str = r#"name = "cluster"
scheduler = "slurm"
install_path = "install"
output_path = "out"
default_partition = "p"
gpus_per_node = 8
[[partitions]]
name = "p"
"#;

const TEST: &str = r#"name = "dyn"
description = "d"
test_template_name = "AIDynamo"
[cmd_args]
docker_image_url = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.1.1"
workloads = "aiperf.sh"
[cmd_args.dynamo]
model = "Qwen/Qwen3-0.6B"
[cmd_args.dynamo.prefill_worker]
num-nodes = 1
[cmd_args.dynamo.decode_worker]
num-nodes = 1
[cmd_args.aiperf.args]
concurrency = 2
request-count = 50
"#;

/// AIPerf's CSV layout (statistics, a blank line, totals: its public form), made-up numbers; `@N@` is the count.
const REPORT: &str = "Metric,avg,min,max,p50,p99,std\n\
Time to First Token (ms),49.87,17.15,99.91,49.87,92.31,9.20\n\
Inter Token Latency (ms),2.81,2.66,2.88,2.83,2.87,0.04\n\
\n\
Metric,Value\n\
Output Token Throughput (tokens/sec),598.78\n\
Request Count,@N@\n";

fn dry_run(w: &Work, test: &str) -> std::process::Output {
    w.file("system.toml", SYSTEM);
    w.file("tests/dyn.toml", test);
    w.file(
        "s.toml",
        "name = \"s\"\n[[Tests]]\nid = \"dyn\"\ntest_name = \"dyn\"\n",
    );
    w.cloudai().args(common::DRY_RUN_S_TOML).output().unwrap()
}

#[test]
fn a_run_passes_on_complete_reports_and_fails_naming_what_is_missing() {
    let w = Work::new();
    let out = dry_run(&w, TEST);
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let root = w.results_root();
    let dir = root.join("dyn/0");
    // the roles' nodes make the job's (1 prefill + 1 decode)
    let toml = std::fs::read_to_string(dir.join("test-run.toml")).unwrap();
    assert!(toml.contains("nnodes = 2"), "{toml}");
    std::fs::write(dir.join("stdout.txt"), "").unwrap();
    let grade = |files: &[(&str, String)]| {
        for f in [
            "success-marker.txt",
            "failure-marker.txt",
            "aiperf_report.csv",
        ] {
            let _ = std::fs::remove_file(dir.join(f));
        }
        for (name, text) in files {
            std::fs::write(dir.join(name), text).unwrap();
        }
        let rep = w.generate_report(&root);
        let summary: serde_json::Value =
            serde_json::from_slice(&std::fs::read(root.join("summary.json")).unwrap()).unwrap();
        let t = &summary["tests"][0];
        (
            rep.status.code(),
            format!("{} {}", t["message"], t["checks"]),
        )
    };
    let ok = ("success-marker.txt", "SUCCESS\n".to_string());
    let (code, said) = grade(&[
        ok.clone(),
        ("aiperf_report.csv", REPORT.replace("@N@", "50.00")),
    ]);
    assert_eq!(code, Some(0), "{said}");
    assert!(
        said.contains("time to first token 49.87") && said.contains("50 requests completed"),
        "{said}"
    );
    assert!(dir.join("ai_dynamo_report.csv").is_file());
    for (files, want) in [
        (
            vec![(
                "failure-marker.txt",
                "Prefill worker did not initialize\n".to_string(),
            )],
            "Failure marker found: Prefill worker did not initialize",
        ),
        (vec![], "Success marker file not found"),
        (vec![ok.clone()], "aiperf_report.csv was not written"),
        (
            vec![
                ok.clone(),
                ("aiperf_report.csv", REPORT.replace("@N@", "20.00")),
            ],
            "20 of the 50 requests asked completed",
        ),
        (
            vec![
                ok.clone(),
                (
                    "aiperf_report.csv",
                    REPORT.replace("@N@", "50.00").replace("598.78", "0.0"),
                ),
            ],
            "output token throughput of 0",
        ),
    ] {
        let (code, said) = grade(&files);
        assert_eq!(code, Some(3), "{want}: {said}");
        assert!(said.contains(want), "{want}: {said}");
    }
}

#[test]
fn values_are_read_as_cloudais_models_read_them() {
    let w = Work::new();
    for (from, to, want) in [
        ("workloads = \"aiperf.sh\"", "workloads = \"aiperf.sh,bench.sh\"", "\"bench.sh\" is not a benchmark"),
        ("num-nodes = 1\n[cmd_args.dynamo.decode", "num-nodes = 1\nnum_nodes = 2\n[cmd_args.dynamo.decode", "are the same field, given twice"),
        ("model = \"Qwen/Qwen3-0.6B\"", "model = \"Qwen/Qwen3-0.6B\"\nconnector = \"nixl fast\"", "\"fast\" is not a connector"),
        ("[cmd_args.aiperf.args]", "[[cmd_args.aiperf_phases]]\nname = \"a\"\n[[cmd_args.aiperf_phases]]\nname = \"a\"\n[cmd_args.aiperf.args]", "phase \"a\" is named twice"),
        ("request-count = 50", "request-count = 50\nextra-inputs = { min_tokens = 10 }", "AIPerf argument 'extra-inputs' (aiperf.args) must be a single value"),
        ("[cmd_args.dynamo.decode_worker]", "nodes = \"n[1-2]\"\n[cmd_args.dynamo.decode_worker]", "\"n[1-2]\" is not a host name"),
    ] {
        let out = dry_run(&w, &TEST.replace(from, to));
        let text = stdout_of(&out);
        assert_eq!(out.status.code(), Some(1), "{want}: {text}");
        assert!(text.contains(want), "{want}: {text}");
        assert!(!w.path().join("out").exists());
    }
    // a shared-node run needs at least as many nodes as its larger role
    w.file(
        "s.toml",
        "name = \"s\"\n[[Tests]]\nid = \"dyn\"\ntest_name = \"dyn\"\nnum_nodes = 1\n",
    );
    w.file(
        "tests/dyn.toml",
        &TEST.replace(
            "num-nodes = 1\n[cmd_args.dynamo.decode",
            "num-nodes = 2\n[cmd_args.dynamo.decode",
        ),
    );
    let out = w.cloudai().args(common::DRY_RUN_S_TOML).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stdout_of(&out));
    assert!(
        stdout_of(&out).contains("need at least 2 node(s), the job has 1"),
        "{}",
        stdout_of(&out)
    );
    // CloudAI's whole AI Dynamo suite dry-runs (the lmcache and hicache configurations written beside the job)
    let conf = data().join("compat/conf");
    for sc in [
        "vllm_lmcache",
        "sglang_hicache",
        "sglang_slurm",
        "vllm_kvbm_slurm",
    ] {
        let out = w
            .cloudai()
            .args(["dry-run", "--system-config"])
            .arg(conf.join("common/system/example_slurm_cluster.toml"))
            .arg("--tests-dir")
            .arg(conf.join("experimental/ai_dynamo/test"))
            .arg("--test-scenario")
            .arg(conf.join(format!("experimental/ai_dynamo/test_scenario/{sc}.toml")))
            .arg("--output-dir")
            .arg(w.path().join(sc))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{sc}: {}", stdout_of(&out));
    }
    let yaml = walk(&w.path().join("vllm_lmcache"), "lmcache-config.yaml");
    assert!(
        yaml.contains("controller_pull_url: '{frontend_node}:8300'\n")
            && yaml.contains("lmcache_worker_ports:\n- 8788\n"),
        "{yaml}"
    );
    let toml = walk(&w.path().join("sglang_hicache"), "hicache-config.toml");
    assert!(toml.starts_with("[plugin.posix]\n"), "{toml}");
}

/// Workers pinned to nodes: the job runs on those nodes (prefill's first, then decode's, then the scenario's,
/// each once), every launch names them, `ai_dynamo.sh` gets each role's list; lists that overlap share nodes.
#[test]
fn workers_named_to_nodes_place_the_job_on_them() {
    let w = Work::new();
    let test = TEST.replace(
        "[cmd_args.dynamo.decode_worker]",
        "nodes = \"n1,n2\"\n[cmd_args.dynamo.decode_worker]",
    ) + "[cmd_args.dynamo.dcgm_exporter]\nenabled = true\n";
    let test = test.replace(
        "[cmd_args.dynamo.decode_worker]\nnum-nodes = 1",
        "[cmd_args.dynamo.decode_worker]\nnum-nodes = 1\nnodes = \"n2,n3\"",
    );
    w.file("system.toml", SYSTEM);
    w.file("tests/dyn.toml", &test);
    w.file(
        "s.toml",
        "name = \"s\"\n[[Tests]]\nid = \"dyn\"\ntest_name = \"dyn\"\nnodes = [\"n4\", \"n1\"]\n",
    );
    let out = w.cloudai().args(common::DRY_RUN_S_TOML).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let dir = w.results_root().join("dyn/0");
    let sbatch = std::fs::read_to_string(dir.join("cloudai_sbatch_script.sh")).unwrap();
    for want in [
        "#SBATCH --nodelist=n1,n2,n3,n4\n",
        "  --nodes=4 \\\n  --nodelist=n1,n2,n3,n4 \\\n  --ntasks=4 \\\n",
        "  --prefill-node-list n1,n2 \\\n",
        "  --decode-node-list n2,n3 \\\n",
        " -N4 --nodelist=n1,n2,n3,n4 --ntasks=4 ",
        "\ndcgm_nodes=(n1 n2 n3 n4)\n",
    ] {
        assert!(sbatch.contains(want), "{want:?} not in\n{sbatch}");
    }
    assert!(!sbatch.contains("\u{E000}"), "{sbatch}");
    // the role's list follows its other values
    let p = sbatch.find("--prefill-node-list").unwrap();
    assert!(sbatch[..p].contains("--prefill-args-"), "{sbatch}");
    assert!(!sbatch[p..].contains("--prefill-args-"), "{sbatch}");
    let rec = std::fs::read_to_string(dir.join("test-run.toml")).unwrap();
    assert!(
        rec.contains("nnodes = 4\nnodes = [ \"n1\", \"n2\", \"n3\", \"n4\",]\n"),
        "{rec}"
    );
}

/// `startup_cmd`: one task per node before the job (on the hosts, or in `startup_cmd_docker_image`), told where to
/// leave its findings, quoted as Python's `shlex.quote` quotes it, its failure ending the job; recorded with the
/// main launch as the test's command.
#[test]
fn a_startup_command_runs_on_every_node_before_the_job() {
    let w = Work::new();
    let test = TEST.replace(
        "workloads = ",
        "startup_cmd = \"nvidia-smi -L > $CLOUDAI_RUNTIME_FILE; echo 'it''s'\"\nworkloads = ",
    );
    let out = dry_run(&w, &test);
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let dir = w.results_root().join("dyn/0");
    let d = std::path::absolute(&dir).unwrap().display().to_string();
    let sbatch = std::fs::read_to_string(dir.join("cloudai_sbatch_script.sh")).unwrap();
    let want = format!(
        "srun \\\n  --export=ALL \\\n  --mpi=pmix \\\n  --nodes=2 \\\n  --ntasks=2 \\\n  --ntasks-per-node=1 \\\n  \
         --output={d}/startup-node-%n-stdout.txt \\\n  --error={d}/startup-node-%n-stderr.txt \\\n  bash \\\n  -lc \\\n  \
         'mkdir -p {d}/runtime; export CLOUDAI_RUNTIME_FILE=\"{d}/runtime/${{SLURMD_NODENAME:-$(hostname)}}.json\"; \
         nvidia-smi -L > $CLOUDAI_RUNTIME_FILE; echo '\"'\"'it'\"'\"''\"'\"'s'\"'\"'' || exit 1\nsrun \\\n  --export=ALL"
    );
    assert!(sbatch.contains(&want), "{want}\nnot in\n{sbatch}");
    let rec = std::fs::read_to_string(dir.join("test-run.toml")).unwrap();
    assert!(
        rec.lines().any(|l| l.starts_with("full_cmd = ")
            && l.contains("startup-node-%n-stdout.txt")
            && l.contains("/cloudai_install/ai_dynamo.sh")),
        "{rec}"
    );

    // in an image of its own: the job's mounts, the results directory as the container sees it
    let w = Work::new();
    let out = dry_run(
        &w,
        &test.replace(
            "workloads = ",
            "startup_cmd_docker_image = \"nvcr.io/nvidia/cuda:12.8.0-base-ubuntu24.04\"\nworkloads = ",
        ),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let sbatch =
        std::fs::read_to_string(w.results_root().join("dyn/0/cloudai_sbatch_script.sh")).unwrap();
    for want in [
        "srun \\\n  --export=ALL \\\n  --mpi=pmix \\\n  --container-image=nvcr.io/nvidia/cuda:12.8.0-base-ubuntu24.04 \\\n  --container-mounts=",
        "  -lc \\\n  'mkdir -p /cloudai_run_results/runtime; export CLOUDAI_RUNTIME_FILE=\"/cloudai_run_results/runtime/",
    ] {
        assert!(sbatch.contains(want), "{want}\nnot in\n{sbatch}");
    }
    assert!(
        !sbatch.contains('\u{E000}') && !sbatch.contains('\u{E001}'),
        "{sbatch}"
    );
}

/// The first file named `name` under `dir`.
fn walk(dir: &std::path::Path, name: &str) -> String {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            let found = walk(&p, name);
            if !found.is_empty() {
                return found;
            }
        } else if p.file_name().is_some_and(|n| n == name) {
            return std::fs::read_to_string(p).unwrap();
        }
    }
    String::new()
}

const K8S: &str = r#"name = "k"
scheduler = "kubernetes"
kube_config_path = "missing/kubeconfig"
install_path = "install"
output_path = "out"
default_namespace = "serving"
gpus_per_node = 4
networks = ["net-ns/ib-a", "net-ns/ib-b"]
image_pull_secrets = ["regcred"]
node_selector = { "nvidia.com/gpu.product" = "NVIDIA-H100-80GB-HBM3" }
"#;

/// On Kubernetes the test is one DynamoGraphDeployment: workers ask for the system's GPUs, attach to its secondary
/// networks (no host network then), a worker of several nodes is multinode, the run's node count stays the
/// scenario's; a real run whose workers need more GPUs than their pods ask for is refused before anything is
/// created.
#[test]
fn on_kubernetes_the_test_is_one_dynamo_graph_deployment() {
    let w = Work::new();
    w.file("system.toml", K8S);
    let test = TEST
        .replace("[cmd_args.dynamo.decode_worker]\nnum-nodes = 1", "[cmd_args.dynamo.decode_worker]\nnum-nodes = 2\nextra_args = \"--enforce-eager --max-num-seqs 8\"\n[cmd_args.dynamo.decode_worker.args]\ntensor-parallel-size = 4");
    w.file("tests/dyn.toml", &test);
    w.file(
        "s.toml",
        "name = \"s\"\n[[Tests]]\nid = \"dyn\"\ntest_name = \"dyn\"\n",
    );
    let out = w.cloudai().args(common::DRY_RUN_S_TOML).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let dir = w.results_root().join("dyn/0");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["deployment.yaml", "test-run.toml"]);
    let yaml = std::fs::read_to_string(dir.join("deployment.yaml")).unwrap();
    let decode = &yaml[yaml.find("    decode:").unwrap()..yaml.find("    frontend:").unwrap()];
    for want in [
        "      extraPodMetadata:\n        annotations:\n          k8s.v1.cni.cncf.io/networks: net-ns/ib-a,net-ns/ib-b\n",
        "          - --is-decode-worker\n",
        "          - --tensor-parallel-size\n          - '4'\n",
        // the extra arguments are one word, as CloudAI passes them
        "          - --enforce-eager --max-num-seqs 8\n",
        "      multinode:\n        nodeCount: 2\n",
        "      resources:\n        limits:\n          custom:\n            nvidia.com/ib-a: '1'\n            nvidia.com/ib-b: '1'\n          gpu: '4'\n        requests:\n          custom:\n",
    ] {
        assert!(decode.contains(want), "{want:?} not in\n{decode}");
    }
    assert!(!yaml.contains("hostNetwork"), "{yaml}");
    // what the system asks of every pod, in every service's pod spec
    let asked = "        imagePullSecrets:\n        - name: regcred\n";
    assert_eq!(yaml.matches(asked).count(), 3, "{yaml}");
    assert_eq!(
        yaml.matches(
            "        nodeSelector:\n          nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3\n"
        )
        .count(),
        3,
        "{yaml}"
    );
    assert!(yaml.contains("metadata:\n  name: serving\n"), "{yaml}");
    let rec = std::fs::read_to_string(dir.join("test-run.toml")).unwrap();
    assert!(rec.contains("nnodes = 1\n"), "{rec}");
    assert!(rec.contains("full_cmd = \"n/a\"\n"), "{rec}");

    // a real run: refused with its reason, nothing created, no cluster contacted
    let w = Work::new();
    w.file(
        "system.toml",
        &K8S.replace("gpus_per_node = 4", "gpus_per_node = 2"),
    );
    w.file("tests/dyn.toml", &test);
    w.file(
        "s.toml",
        "name = \"s\"\n[[Tests]]\nid = \"dyn\"\ntest_name = \"dyn\"\n",
    );
    let out = w
        .cloudai()
        .args(common::RUN_S_TOML)
        .arg("--enable-cache-without-check")
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("decode worker needs 4 GPUs per pod"),
        "{text}"
    );
    assert!(!w.path().join("out").exists(), "{text}");
    // the template list names both schedulers
    let list = w.cloudai().args(["list", "templates"]).output().unwrap();
    assert!(
        stdout_of(&list).contains("\"AIDynamo\" schedulers=slurm,kubernetes\n"),
        "{}",
        stdout_of(&list)
    );
}

/// The YAML writer behind `deployment.yaml` against PyYAML itself: 229 documents (quoting, resolvers, blanks, line
/// breaks, non-ASCII, folding at 80 columns, nesting) byte for byte as PyYAML 6.0.3's `safe_dump` wrote them
/// (tests/data/pyyaml/ORIGIN.txt).
#[test]
fn the_yaml_writer_matches_pyyaml_byte_for_byte() {
    let read = |f: &str| std::fs::read_to_string(data().join("pyyaml").join(f)).unwrap();
    let cases: Vec<serde_json::Value> = serde_json::from_str(&read("cases.json")).unwrap();
    let want: Vec<String> = serde_json::from_str(&read("want.json")).unwrap();
    assert_eq!(cases.len(), want.len());
    for (case, want) in cases.iter().zip(&want) {
        assert_eq!(&cloudai::util::pyyaml::dump(case), want, "{case}");
    }
}
