//! AI Dynamo's DynamoGraphDeployment run on the Kubernetes test cluster (scripts/kube-cluster.sh, with the DGD
//! CRD's service schema): created under cloudai's name and labels, its pods (made by the stand-in operator from the
//! object as the API server stored it) waited for until ready, CloudAI's `genai_perf.sh` run in the frontend pod
//! through the API server's `pods/exec`, the results copied back, graded, the pods' logs kept, the deployment
//! deleted; and what ends it early.

use crate::common;

use std::time::{Duration, Instant};

use cloudai::results::{EndReason, Status};
use common::kube::{cluster, Act, Cluster};
use common::{record, stdout_of, Work};

const TEST: &str = r#"name = "dyn"
description = "d"
test_template_name = "AIDynamo"
[cmd_args]
docker_image_url = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.1.1"
[cmd_args.dynamo]
model = "Qwen/Qwen3-0.6B"
[cmd_args.dynamo.prefill_worker]
num-nodes = 1
[cmd_args.dynamo.decode_worker]
num-nodes = 2
[cmd_args.genai_perf]
extra_args = "--streaming --verbose"
[cmd_args.genai_perf.args]
concurrency = 2
request-count = 50
"#;

/// Stands in for CloudAI's `genai_perf.sh`: its arguments one per line and a GenAI-Perf report (CSV, made-up
/// numbers) into `--result-dir`; `@SLEEP@` seconds first.
const BENCH: &str = r#"#!/bin/bash
all=("$@")
while [[ $# -gt 0 ]]; do
  case "$1" in
    --result-dir) dir="$2"; shift 2 ;;
    --report-name) report="$2"; shift 2 ;;
    *) shift ;;
  esac
done
sleep @SLEEP@
mkdir -p "$dir"
printf '%s\n' "${all[@]}" > "$dir/args.txt"
cat > "$dir/$report" <<'CSV'
Metric,avg,min,max,p50,p99,std
Time to First Token (ms),49.87,17.15,99.91,49.87,92.31,9.20
Inter Token Latency (ms),2.81,2.66,2.88,2.83,2.87,0.04

Metric,Value
Output Token Throughput (tokens/sec),598.78
Request Count,50.00
CSV
echo "genai-perf profile: done"
echo "a warning of genai-perf" >&2
"#;

fn setup(c: &Cluster, sleep: u32) -> Work {
    let w = Work::new();
    w.file("system.toml", &c.system(""));
    w.file("tests/dyn.toml", TEST);
    w.file(
        "s.toml",
        "name = \"s\"\n[[Tests]]\nid = \"dyn\"\ntest_name = \"dyn\"\ntime_limit = \"00:05:00\"\n",
    );
    // where `cloudai install` puts CloudAI's script
    w.file(
        "install/genai_perf.sh",
        &BENCH.replace("@SLEEP@", &sleep.to_string()),
    );
    for role in ["frontend", "decode", "prefill"] {
        c.logs
            .lock()
            .unwrap()
            .insert(role.into(), format!("{role} serving\n"));
    }
    w
}

fn command(w: &Work) -> std::process::Command {
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("cloudai"));
    cmd.current_dir(w.path())
        .args(common::RUN_S_TOML)
        .arg("--enable-cache-without-check");
    cmd
}

async fn run(w: &Work) -> std::process::Output {
    let mut cmd = command(w);
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deployment_is_benchmarked_in_its_frontend_pod_graded_and_deleted() {
    let Some(c) = cluster("k8s-dgd", Act::Succeed).await else {
        return;
    };
    let w = setup(&c, 0);
    let out = run(&w).await;
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let root = w.results_root();
    let it = root.join("dyn/0");
    let r = record(&root, "dyn", 0);
    assert_eq!(r.status, Status::Passed, "{}", r.message);
    // its pods: one frontend, two decode (multinode), one prefill, found by the labels cloudai put in each
    // service's pod metadata, which the stand-in operator copied from the object as stored (so not pruned)
    let execs = c.execs.lock().unwrap().clone();
    assert_eq!(execs.len(), 2, "{execs:?}");
    let (pod, bench) = &execs[0];
    assert!(pod.ends_with("-frontend-0"), "{pod}");
    assert_eq!(&bench[..2], ["/bin/bash", "-c"]);
    assert_eq!(
        bench[2],
        BENCH.replace("@SLEEP@", "0"),
        "the script is run as it is"
    );
    assert_eq!(bench[3], "genai_perf.sh");
    assert_eq!(
        execs[1].1,
        ["tar", "cf", "-", "-C", "/tmp/cloudai/genai-perf", "."]
    );
    // CloudAI's arguments, in its order
    let args = std::fs::read_to_string(it.join("args.txt")).unwrap();
    let args: Vec<&str> = args.lines().collect();
    assert!(args[1].ends_with("/tmp/cloudai/genai-perf"), "{args:?}");
    assert_eq!(
        args[2..],
        [
            "--gpus-per-node",
            "8",
            "--model",
            "Qwen/Qwen3-0.6B",
            "--url",
            "http://localhost",
            "--port",
            "8000",
            "--endpoint",
            "v1/chat/completions",
            "--cmd",
            "genai-perf profile",
            "--report-name",
            "genai_perf_report.csv",
            "--extra-args",
            "--streaming --verbose",
            "--",
            "--concurrency",
            "2",
            "--request-count",
            "50",
        ]
    );
    let log = std::fs::read_to_string(it.join("genai_perf.log")).unwrap();
    assert_eq!(
        log,
        "genai-perf profile: done\n\nSTDERR:\na warning of genai-perf\n"
    );
    assert!(it.join("success-marker.txt").is_file());
    for role in ["frontend", "decode", "prefill"] {
        assert_eq!(
            std::fs::read_to_string(it.join(format!("{role}_pod.log"))).unwrap(),
            format!("{role} serving\n")
        );
    }
    // the file is CloudAI's (named after the namespace); the object was cloudai's own name
    let yaml = std::fs::read_to_string(it.join("deployment.yaml")).unwrap();
    assert!(
        yaml.contains(&format!("metadata:\n  name: {}\n", c.ns)),
        "{yaml}"
    );
    assert_eq!(r.nodes.len(), 2, "{:?}", r.nodes);
    assert!(
        text.contains("Created Kubernetes DynamoGraphDeployment"),
        "{text}"
    );
    c.assert_nothing_left().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_that_cannot_be_pulled_ends_the_run_and_removes_the_deployment() {
    let Some(c) = cluster("k8s-dgd-pull", Act::ImagePull).await else {
        return;
    };
    let w = setup(&c, 0);
    let t = Instant::now();
    let out = run(&w).await;
    let text = stdout_of(&out);
    assert!(t.elapsed() < Duration::from_secs(60), "{text}");
    let root = w.results_root();
    let r = record(&root, "dyn", 0);
    assert_eq!(r.status, Status::Failed, "{text}");
    assert_eq!(r.end_reason, EndReason::ImagePullFailed, "{}", r.message);
    assert!(r.message.contains("ImagePullBackOff"), "{}", r.message);
    assert!(c.execs.lock().unwrap().is_empty());
    c.assert_nothing_left().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_while_the_benchmark_runs_deletes_the_deployment() {
    let Some(c) = cluster("k8s-dgd-int", Act::Succeed).await else {
        return;
    };
    let w = setup(&c, 60);
    let mut cmd = command(&w);
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    // the benchmark started: its command reached the pod
    let t = Instant::now();
    while c.execs.lock().unwrap().is_empty() {
        assert!(t.elapsed() < Duration::from_secs(60), "no exec");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    common::signal(child.id() as i32, libc::SIGINT);
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(130), "{text}");
    let r = record(&w.results_root(), "dyn", 0);
    assert_eq!(r.end_reason, EndReason::Cancelled, "{}", r.message);
    c.assert_nothing_left().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_right_to_exec_the_run_fails_naming_it_and_removes_the_deployment() {
    let Some(c) = cluster("k8s-dgd-noexec", Act::Succeed).await else {
        return;
    };
    let w = setup(&c, 0);
    let verbs = ["get", "list", "watch", "create", "delete", "patch"];
    let system = c
        .restricted_kubeconfig(&w.path().join("kubeconfig"), &verbs)
        .await;
    w.file("system.toml", &system);
    let out = run(&w).await;
    let text = stdout_of(&out);
    let r = record(&w.results_root(), "dyn", 0);
    assert_eq!(r.status, Status::Failed, "{text}");
    assert!(
        r.message.contains("cannot run a command in pod")
            && r.message.contains("`create` on `pods/exec`"),
        "{}",
        r.message
    );
    assert!(c.execs.lock().unwrap().is_empty());
    c.assert_nothing_left().await;
}

/// kill -9 while the benchmark runs: `status` finds the deployment live, `resume` adopts it by name and identity
/// (not created twice), runs the benchmark again in its frontend pod, grades it and deletes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_then_resume_adopts_the_deployment() {
    let Some(c) = cluster("k8s-dgd-resume", Act::Succeed).await else {
        return;
    };
    let w = setup(&c, 3);
    let mut child = command(&w)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while c.execs.lock().unwrap().is_empty() {
        assert!(t.elapsed() < Duration::from_secs(60), "no exec");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // its operator (the stand-in) marks it Ready once every pod runs
    let dgds: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(c.client.clone(), &c.ns, &common::kube::dgds());
    let t = Instant::now();
    loop {
        let l = dgds.list(&Default::default()).await.unwrap();
        if l.items
            .iter()
            .any(|d| d.data["status"]["conditions"][0]["type"] == "Ready")
        {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "never Ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let root = w.results_root();
    let (st, out) = common::kube::status_then_resume(&w, &root).await;
    // the deployment as its operator says: every pod up
    assert_eq!(st["iterations"][0]["state"], "ready", "{st}");
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("Re-attached to Kubernetes DynamoGraphDeployment"),
        "{text}"
    );
    assert!(
        !text.contains("Created Kubernetes"),
        "created again: {text}"
    );
    let r = record(&root, "dyn", 0);
    assert_eq!(r.status, Status::Passed, "{}", r.message);
    assert!(root.join("dyn/0/genai_perf_report.csv").is_file());
    // the same frontend pod both times: one deployment was ever made
    let execs = c.execs.lock().unwrap().clone();
    let benches: Vec<&String> = execs
        .iter()
        .filter(|(_, argv)| argv[0] == "/bin/bash")
        .map(|(pod, _)| pod)
        .collect();
    assert_eq!(benches.len(), 2, "{execs:?}");
    assert_eq!(benches[0], benches[1]);
    c.assert_nothing_left().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_benchmark_script_is_found_before_the_deployment_exists() {
    let Some(c) = cluster("k8s-dgd-noscript", Act::Succeed).await else {
        return;
    };
    let w = setup(&c, 0);
    std::fs::remove_file(w.path().join("install/genai_perf.sh")).unwrap();
    let out = run(&w).await;
    let text = stdout_of(&out);
    assert_ne!(out.status.code(), Some(0), "{text}");
    let r = record(&w.results_root(), "dyn", 0);
    assert_eq!(r.end_reason, EndReason::SubmitFailed, "{}", r.message);
    assert!(
        r.message
            .contains("not created: cannot read the benchmark script")
            && r.message.contains("`cloudai install` puts it there"),
        "{}",
        r.message
    );
    assert!(!text.contains("Created Kubernetes"), "{text}");
    c.assert_nothing_left().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_operator_the_wait_names_it() {
    let Some(c) = cluster("k8s-dgd-nooperator", Act::NoOperator).await else {
        return;
    };
    let w = setup(&c, 0);
    w.file("system.toml", &c.system(r#"max_pending_time = "00:00:04""#));
    let mut cmd = command(&w);
    cmd.env("CLOUDAI_K8S_OPERATOR_WAIT_S", "1");
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let text = stdout_of(&out);
    let r = record(&w.results_root(), "dyn", 0);
    assert_eq!(r.end_reason, EndReason::Unschedulable, "{text}");
    assert!(
        r.message.contains("no operator took DynamoGraphDeployment")
            && r.message
                .contains("is its operator (nvidia.com/v1alpha1) running in the cluster?"),
        "{}",
        r.message
    );
    assert!(c.execs.lock().unwrap().is_empty());
    c.assert_nothing_left().await;
}
