//! Kubernetes against a real kube-apiserver + kube-controller-manager (scripts/kube-cluster.sh): NCCL as a Job on
//! one node and as an MPIJob on two, logs through the API server's `pods/log` proxy, events, find-bad-nodes with
//! pinned pairs, Ctrl-C, hooks, resume, and dry-run without any cluster. Faults: tests/kubernetes_faults.rs.

use crate::common;

use std::time::{Duration, Instant};

use cloudai::results::{EndReason, Status};
use common::kube::{cluster, run, sample, scenario, setup, Act, NCCL_TEST as TESTS};
use common::{record, stdout_of, Work};

const RUN: [&str; 7] = common::RUN_S_TOML;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_node_nccl_job_completes_with_its_log_and_events() {
    let Some(c) = cluster("k8s-job", Act::Succeed).await else {
        return;
    };
    let log = sample("single-node-8gpu-a100-allreduce-v2.19.4.txt");
    c.logs.lock().unwrap().insert("main".into(), log.clone());
    let w = setup(&c, "", &scenario(1));
    let out = run(&w).await;
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let root = w.results_root();
    let it = root.join("nccl/0");
    assert_eq!(
        std::fs::read_to_string(it.join("stdout.txt")).unwrap(),
        log,
        "the log came through pods/log"
    );
    let events = std::fs::read_to_string(it.join("events.txt")).unwrap();
    for e in ["SuccessfulCreate", "Scheduled", "Started"] {
        assert!(events.contains(e), "{e} missing from events.txt:\n{events}");
    }
    let r = record(&root, "nccl", 0);
    assert_eq!(r.status, Status::Passed, "{}", r.message);
    assert_eq!(r.scheduler_state.as_deref(), Some("Complete"));
    assert_eq!(r.nodes.len(), 1);
    assert!(r.nodes[0].starts_with(&c.ns), "{:?}", r.nodes);
    let manifest = std::fs::read_to_string(it.join("k8s-manifest.yaml")).unwrap();
    // one rank per GPU of the node, as on Slurm
    assert!(
        manifest.contains("kind: Job")
            && manifest.contains("nvidia.com/gpu: 8")
            && manifest.contains("mpirun --allow-run-as-root -np 8 "),
        "{manifest}"
    );
    assert!(
        c.objects().await.is_empty(),
        "left behind: {:?}",
        c.objects().await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_node_nccl_test_runs_as_an_mpijob() {
    // each worker was OOMKilled once and came back (restartPolicy OnFailure): recorded, and the run goes on
    let Some(c) = cluster("k8s-mpi", Act::SucceedAfterWorkerRestart).await else {
        return;
    };
    let log = sample("multinode-2x8-h100-allreduce-kubeflow-mpijob.txt");
    c.logs
        .lock()
        .unwrap()
        .insert("launcher".into(), log.clone());
    let w = setup(&c, "", &scenario(2));
    let out = run(&w).await;
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let root = w.results_root();
    let it = root.join("nccl/0");
    assert_eq!(std::fs::read_to_string(it.join("stdout.txt")).unwrap(), log);
    let r = record(&root, "nccl", 0);
    assert_eq!(r.status, Status::Passed, "{}", r.message);
    assert_eq!(r.scheduler_state.as_deref(), Some("Succeeded"));
    // the workers' hosts, not the launcher's
    assert_eq!(r.nodes, c.nodes, "{:?}", r.nodes);
    assert_eq!(r.attempts.len(), 2, "{:?}", r.attempts);
    assert!(
        r.attempts
            .iter()
            .all(|a| a.state == "OOMKilled" && a.reason.contains("exit code 137")),
        "{:?}",
        r.attempts
    );
    assert!(text.contains("restarted"), "{text}");
    let events = std::fs::read_to_string(it.join("events.txt")).unwrap();
    assert!(
        events.contains("-worker-1") && events.contains("-launcher"),
        "{events}"
    );
    let manifest = std::fs::read_to_string(it.join("k8s-manifest.yaml")).unwrap();
    for s in [
        "kind: MPIJob",
        "slotsPerWorker: 8",
        "replicas: 2",
        "-np 16",
        "all_reduce_perf_mpi --nthreads 1",
    ] {
        assert!(manifest.contains(s), "{s} missing:\n{manifest}");
    }
    assert!(
        c.objects().await.is_empty(),
        "left behind: {:?}",
        c.objects().await
    );
}

/// OSU through the launch seam: `osu_allreduce` on two nodes is an MPIJob of one rank per GPU (created on the
/// API server with the upstream CRD, its launcher's log read back), graded and reported; a point-to-point test on
/// two nodes is one rank per node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn osu_runs_as_an_mpijob() {
    let Some(c) = cluster("k8s-osu", Act::Succeed).await else {
        return;
    };
    let log =
        std::fs::read_to_string(common::data().join("osu-samples/osu-7.0-allreduce-full.txt"))
            .unwrap();
    c.logs
        .lock()
        .unwrap()
        .insert("launcher".into(), log.clone());
    let w = setup(
        &c,
        "",
        r#"name = "k8s"
[[Tests]]
id = "osu"
test_name = "osu"
num_nodes = 2
time_limit = "00:05:00"
"#,
    );
    w.file(
        "tests/osu.toml",
        r#"name = "osu"
description = "d"
test_template_name = "OSUBench"
[cmd_args]
docker_image_url = "nvcr.io#nvidia/pytorch:25.12-py3"
benchmarks_dir = "/opt/osu/c/mpi/collective/blocking"
benchmark = "osu_allreduce"
message_size = "4:256"
"#,
    );
    let out = run(&w).await;
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let root = w.results_root();
    let it = root.join("osu/0");
    assert_eq!(std::fs::read_to_string(it.join("stdout.txt")).unwrap(), log);
    let r = record(&root, "osu", 0);
    assert_eq!(r.status, Status::Passed, "{}", r.message);
    let manifest = std::fs::read_to_string(it.join("k8s-manifest.yaml")).unwrap();
    for s in [
        "kind: MPIJob",
        "slotsPerWorker: 8",
        "-np 16",
        "/opt/osu/c/mpi/collective/blocking/osu_allreduce --message-size 4:256 --full",
    ] {
        assert!(manifest.contains(s), "{s} missing:\n{manifest}");
    }
    let csv = std::fs::read_to_string(it.join("osu_bench.csv")).unwrap();
    assert_eq!(
        csv.lines().next(),
        Some("size,avg_lat,min_lat,max_lat,iterations")
    );
    assert_eq!(csv.lines().nth(1), Some("4,136.08,99.29,164.85,1000"));
    assert!(
        c.objects().await.is_empty(),
        "left behind: {:?}",
        c.objects().await
    );

    // a point-to-point test: one rank on each of the two nodes
    w.file(
        "tests/osu.toml",
        &std::fs::read_to_string(w.path().join("tests/osu.toml"))
            .unwrap()
            .replace("osu_allreduce", "osu_bw"),
    );
    let dry = w.cloudai().args(common::DRY_RUN_S_TOML).output().unwrap();
    assert_eq!(dry.status.code(), Some(0), "{}", stdout_of(&dry));
    let latest = std::fs::read_dir(w.path().join("out"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .max_by_key(|p| std::fs::metadata(p).unwrap().modified().unwrap())
        .unwrap();
    let manifest = std::fs::read_to_string(latest.join("osu/0/k8s-manifest.yaml")).unwrap();
    assert!(
        manifest.contains("slotsPerWorker: 1")
            && manifest.contains("-np 2 ")
            && !manifest.contains("--full"),
        "{manifest}"
    );
}

/// find-bad-nodes on four nodes where every pair holding n3 measures a fifth of the bandwidth: pairs pinned by
/// node affinity, each pair's workers on its two nodes, n3 named and its partner cleared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_bad_nodes_names_the_slow_node() {
    let Some(c) = common::kube::cluster_of("k8s-fbn", Act::Succeed, 4).await else {
        return;
    };
    let good = sample("multinode-2x8-h100-allreduce-kubeflow-mpijob.txt");
    let slow = &c.nodes[2];
    {
        let mut logs = c.logs.lock().unwrap();
        logs.insert("launcher".into(), good.clone());
        logs.insert(format!("launcher@{slow}"), common::scaled(&good, 0, 0.2));
    }
    let w = setup(
        &c,
        "",
        r#"name = "unused"
"#,
    );
    let ledger = w.path().join("ledger.sqlite");
    let metrics = w.path().join("cloudai.prom");
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("cloudai"));
    cmd.current_dir(w.path())
        .args(common::FIND_BAD_NODES_NCCL)
        .args(["--nodes", &c.nodes.join(",")])
        .arg("--ledger")
        .arg(&ledger)
        .arg("--metrics-file")
        .arg(&metrics);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    let root = w.results_root();
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("bad-nodes.json")).unwrap()).unwrap();
    assert_eq!(report["bad"], serde_json::json!([slow]), "{report}");
    assert_eq!(report["suspect"], serde_json::json!([]), "{report}");
    assert_eq!(report["jobs"], 4, "{report}");
    // the ledger holds the sweep: every pair once, every node's verdict; the metrics say the slow one is bad
    let mut l = cloudai::ledger::Ledger::open(&cloudai::ledger::Location::Sqlite(ledger)).unwrap();
    let counts = l.counts().unwrap();
    assert_eq!(
        (counts["runs"], counts["pairs"], counts["node_checks"]),
        (1, 4, 4),
        "{counts:?}"
    );
    let slow_history = l
        .history(&cloudai::ledger::query::Filter {
            node: Some(slow.clone()),
            ..Default::default()
        })
        .unwrap();
    assert!(
        slow_history
            .iter()
            .any(|h| h.kind == "check" && h.status == "bad"),
        "{slow_history:?}"
    );
    assert_eq!(
        slow_history.iter().filter(|h| h.kind == "pair").count(),
        2,
        "{slow_history:?}"
    );
    let m = std::fs::read_to_string(&metrics).unwrap();
    assert!(
        m.contains(&format!(
            "cloudai_node_verdict{{node=\"{slow}\",check=\"find-bad-nodes\"}} 0"
        )),
        "{m}"
    );
    // every pair ran on exactly its two nodes
    let mut checked = 0;
    for round in std::fs::read_dir(&root).unwrap().flatten() {
        let Ok(tests) = std::fs::read_dir(round.path()) else {
            continue;
        };
        for t in tests.flatten().filter(|t| t.path().join("0").is_dir()) {
            let id = t.file_name().to_string_lossy().to_string();
            let Some((a, b)) = id.split_once('+') else {
                continue;
            };
            let r = record(&round.path(), &id, 0);
            let mut pair = [a, b];
            pair.sort();
            assert_eq!(r.nodes, pair, "{id}");
            checked += 1;
        }
    }
    assert_eq!(checked, 4);
    assert!(c.objects().await.is_empty(), "{:?}", c.objects().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_deletes_everything_it_created() {
    let Some(c) = cluster("k8s-int", Act::RunForever).await else {
        return;
    };
    let w = setup(
        &c,
        "",
        &format!(
            r#"{}
[[Tests]]
id = "s"
test_name = "sleep"
"#,
            scenario(2)
        ),
    );
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("cloudai"))
        .current_dir(w.path())
        .args(RUN)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    c.wait_running().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!c.objects().await.is_empty());
    common::signal(child.id() as i32, libc::SIGINT);
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(130), "{text}");
    assert!(
        c.objects().await.is_empty(),
        "left behind: {:?}\n{text}",
        c.objects().await
    );
    let r = record(&w.results_root(), "nccl", 0);
    assert_eq!(r.end_reason, EndReason::Cancelled);
    assert!(!w.results_root().join("leftovers.json").exists());
}

#[test]
fn dry_run_needs_no_cluster_nor_kubeconfig() {
    let w = Work::new();
    w.file(
        "system.toml",
        r#"name = "k"
scheduler = "kubernetes"
kube_config_path = ""
install_path = "install"
output_path = "out"
default_namespace = "gpu-team"
gpus_per_node = 8
"#,
    );
    w.file("tests/nccl.toml", TESTS);
    w.file("s.toml", &scenario(2));
    let out = w
        .cloudai()
        .args(common::DRY_RUN_S_TOML)
        .env("HOME", w.path().join("no-home"))
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let m = std::fs::read_to_string(w.results_root().join("nccl/0/k8s-manifest.yaml")).unwrap();
    for s in [
        "kind: MPIJob",
        "namespace: gpu-team",
        "slotsPerWorker: 8",
        r#"image: "nvcr.io/nvidia/pytorch:25.12-py3""#,
    ] {
        assert!(m.contains(s), "{s} missing:\n{m}");
    }
    assert!(w.results_root().join("nccl/0/test-run.toml").exists());
}

#[test]
fn manifests_follow_the_systems_mpi_and_image_settings() {
    let w = Work::new();
    let system = common::kube::DRY_SYSTEM;
    w.file("tests/nccl.toml", TESTS);
    w.file(
        "tests/sleep.toml",
        r#"name = "sleep"
description = "d"
test_template_name = "Sleep"
"#,
    );
    w.file(
        "s.toml",
        &format!(
            r#"{}[[Tests]]
id = "nap"
test_name = "sleep"
num_nodes = 1
"#,
            scenario(2)
        ),
    );
    let manifests = |extra: &str| {
        w.file("system.toml", &format!("{system}{extra}"));
        let _ = std::fs::remove_dir_all(w.path().join("out"));
        let out = w.cloudai().args(common::DRY_RUN_S_TOML).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
        let read = |id: &str| {
            std::fs::read_to_string(w.results_root().join(id).join("0/k8s-manifest.yaml")).unwrap()
        };
        (read("nccl"), read("nap"))
    };
    let (mpi, sleep) = manifests("");
    assert!(mpi.contains("sshAuthMountPath: /root/.ssh\n"), "{mpi}");
    assert!(mpi.contains("S=/usr/sbin/sshd;"), "{mpi}");
    assert!(sleep.contains(r#"image: "ubuntu:24.04""#), "{sleep}");

    let (mpi, sleep) = manifests(
        r#"ssh_auth_mount_path = "/home/mpiuser/.ssh"
mpi_worker_command = ""
job_image = "registry.local/tools/ubuntu:24.04"
"#,
    );
    assert!(
        mpi.contains("sshAuthMountPath: /home/mpiuser/.ssh\n"),
        "{mpi}"
    );
    assert!(
        !mpi.contains("/usr/sbin/sshd"),
        "the image's entrypoint runs: {mpi}"
    );
    // its sshd is not ours: the launcher waits for any SSH banner, not for our tag
    assert!(mpi.contains(r#"== SSH-* ]]"#), "{mpi}");
    assert!(
        sleep.contains(r#"image: "registry.local/tools/ubuntu:24.04""#),
        "{sleep}"
    );
}

#[test]
fn a_run_without_a_kubeconfig_says_where_it_looked() {
    let w = Work::new();
    w.file(
        "system.toml",
        r#"name = "k"
scheduler = "kubernetes"
kube_config_path = "missing/kubeconfig"
install_path = "install"
output_path = "out"
default_namespace = "default"
"#,
    );
    w.file("tests/nccl.toml", TESTS);
    w.file("s.toml", &scenario(1));
    let out = w
        .cloudai()
        .args(RUN)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("kubeconfig missing/kubeconfig not found"),
        "{text}"
    );
    assert!(
        !w.path().join("out").exists(),
        "a results directory was created"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_run_as_their_own_jobs_and_a_failed_pre_test_skips_the_test() {
    let Some(c) = cluster("k8s-hooks", Act::Succeed).await else {
        return;
    };
    let hooked = format!(
        r#"pre_test = "check"
post_test = "check"
{}"#,
        scenario(1)
    );
    let w = setup(&c, "", &hooked);
    w.file(
        "hooks/check.toml",
        r#"name = "check"
[[Tests]]
id = "h"
test_name = "hook_nccl"
"#,
    );
    w.file(
        "hooks/test/hook_nccl.toml",
        &TESTS.replace(r#"name = "nccl""#, r#"name = "hook_nccl""#),
    );
    let run_hooked = || {
        let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("cloudai"));
        cmd.current_dir(w.path())
            .args(RUN)
            .args(["--hook-dir", "hooks"]);
        tokio::task::spawn_blocking(move || cmd.output().unwrap())
    };

    // every pod prints a good NCCL run: pre-test, test and post-test each ran as a Job of their own
    let good = sample("single-node-8gpu-a100-allreduce-v2.19.4.txt");
    c.logs.lock().unwrap().insert("main".into(), good.clone());
    let out = run_hooked().await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let it = w.results_root().join("nccl/0");
    for d in ["pre_test/hook_nccl", "post_test/hook_nccl", ""] {
        assert_eq!(
            std::fs::read_to_string(it.join(d).join("stdout.txt")).unwrap(),
            good,
            "{d}"
        );
        assert!(it.join(d).join("k8s-manifest.yaml").exists(), "{d}");
        assert!(it.join(d).join("events.txt").exists(), "{d}");
    }
    std::fs::remove_dir_all(w.path().join("out")).unwrap();

    // the pre-test's output shows no bus bandwidth: the test does not run
    c.logs.lock().unwrap().insert(
        "main".into(),
        sample("single-node-2gpu-nccl-failure-with-debug-info.txt"),
    );
    let out = run_hooked().await.unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", stdout_of(&out));
    let r = record(&w.results_root(), "nccl", 0);
    assert!(
        r.message.contains("pre-test") && r.message.contains("so the test was not run"),
        "{}",
        r.message
    );
    assert!(!w.results_root().join("nccl/0/stdout.txt").exists());
    assert!(
        c.objects().await.is_empty(),
        "left behind: {:?}",
        c.objects().await
    );
}

/// kill -9 while the Job runs: `status` asks the API server, `resume` adopts the Job by name and identity (nothing is
/// created twice), and collects its log and events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_then_resume_adopts_the_job() {
    let Some(c) = cluster("k8s-resume", Act::SucceedSlowly).await else {
        return;
    };
    let log = sample("single-node-8gpu-a100-allreduce-v2.19.4.txt");
    c.logs.lock().unwrap().insert("main".into(), log.clone());
    let w = setup(&c, "", &scenario(1));
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("cloudai"))
        .current_dir(w.path())
        .args(RUN)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    c.wait_running().await;
    child.kill().unwrap();
    child.wait().unwrap();
    let root = w.results_root();
    let (st, out) = common::kube::status_then_resume(&w, &root).await;
    assert_eq!(st["iterations"][0]["state"], "active", "{st}");
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("Re-attached to Kubernetes Job"), "{text}");
    let r = record(&root, "nccl", 0);
    assert_eq!(r.status, Status::Passed, "{}", r.message);
    assert_eq!(
        std::fs::read_to_string(root.join("nccl/0/stdout.txt")).unwrap(),
        log
    );
    assert!(
        !text.contains("Created Kubernetes"),
        "created again: {text}"
    );
    // one pod was ever made for the iteration: its controller's one SuccessfulCreate
    let events = std::fs::read_to_string(root.join("nccl/0/events.txt")).unwrap();
    assert_eq!(events.matches("SuccessfulCreate").count(), 1, "{events}");
    assert!(
        c.objects().await.is_empty(),
        "left behind: {:?}",
        c.objects().await
    );
}

/// Benchmark (not a check; `bench/bench.py` runs it): 16 Sleep tests at once on the test cluster, every pod running
/// 0.8 s. Prints the wall time and, with the cluster started with KUBE_AUDIT=1, cloudai's requests by verb.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn bench_sixteen_jobs() {
    let Some(c) = cluster("k8s-bench", Act::Succeed).await else {
        return;
    };
    let n = 16;
    let tests: String = (0..n)
        .map(|i| {
            format!(
                r#"[[Tests]]
id = "s{i}"
test_name = "sleep"
"#
            )
        })
        .collect();
    let w = setup(
        &c,
        "",
        &format!(
            r#"name = "bench"
{tests}"#
        ),
    );
    let audit = common::repo().join("build/kube/run/audit.log");
    let before = std::fs::read_to_string(&audit).unwrap_or_default().len();
    let started = Instant::now();
    let out = run(&w).await;
    let wall = started.elapsed().as_secs_f64();
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let log = std::fs::read_to_string(&audit).unwrap_or_default();
    let mut verbs = std::collections::BTreeMap::<String, u64>::new();
    for l in log.get(before..).unwrap_or("").lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(l) else {
            continue;
        };
        if v["stage"] == "ResponseComplete"
            && v["userAgent"]
                .as_str()
                .is_some_and(|u| u.starts_with("cloudai/"))
        {
            let key = format!(
                "{} {}{}",
                v["verb"].as_str().unwrap_or(""),
                v["objectRef"]["resource"].as_str().unwrap_or(""),
                v["objectRef"]["subresource"]
                    .as_str()
                    .map(|s| format!("/{s}"))
                    .unwrap_or_default()
            );
            *verbs.entry(key).or_default() += 1;
        }
    }
    let total: u64 = verbs.values().sum();
    println!(
        "BENCH kubernetes: {n} jobs in {wall:.2} s wall; {total} cloudai requests ({:.1} per job): {verbs:?}",
        total as f64 / n as f64
    );
}

/// Every field we write survives a real API server: Jobs against the built-in schema, MPIJobs against the
/// upstream MPI operator CRD (structural: it prunes what it does not describe, silently). Each object is created
/// as cloudai builds it, read back, and compared field by field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_read_back_unpruned_from_the_api_server() {
    let Some(c) = cluster("k8s-prune", Act::RunForever).await else {
        return;
    };
    use cloudai::scenario::{self as sc, Inputs};
    use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
    let w = Work::new();
    // every pod setting cloudai has, on the host network (a NIC is named) and with secondary networks
    let options = r#"shm_size = "32Gi"
extended_resources = { "rdma/rdma_shared_device_a" = 1 }
capabilities = ["IPC_LOCK", "SYS_RESOURCE"]
node_selector = { "nvidia.com/gpu.present" = "true" }
image_pull_secrets = ["ngc"]
service_account = "default"
tolerations = [{ operator = "Exists" }]
deadline_margin = 60
ttl_after_finished = 600
pod_spec_patch = { terminationGracePeriodSeconds = 7, enableServiceLinks = false }
"#;
    for (sys_extra, imex) in [
        (
            format!(
                r#"{options}networks = ["default/ib"]
"#
            ),
            false,
        ),
        (
            format!(
                r#"{options}use_host_network = true
imex_channel_template = "imex-0"
"#
            ),
            true,
        ),
    ] {
        let sys = w.file("system.toml", &c.system(&sys_extra));
        w.file("tests/nccl.toml", TESTS);
        let scen = w.file(
            "s.toml",
            &format!(
                r#"{}[[Tests]]
id = "one"
test_name = "nccl"
num_nodes = 1
time_limit = "00:05:00"
"#,
                scenario(2)
            ),
        );
        let tests = w.path().join("tests");
        let (cfg, s) = sc::load_all(&Inputs {
            system: Some(&sys),
            tests_dir: Some(&tests),
            scenario: &scen,
            hook_dir: None,
            survey: None,
        })
        .unwrap();
        for r in &s.test_runs {
            let dir = w
                .path()
                .join(format!("out/prune_{imex}"))
                .join(&r.id)
                .join("0");
            for m in
                cloudai::systems::kubernetes::manifests(&std::sync::Arc::new(cfg.clone()), r, &dir)
            {
                let kind = m["kind"].as_str().unwrap().to_string();
                if kind == "Job" && imex {
                    // resource claims are not in 1.20's core PodSpec (Jobs are checked in the other round)
                    continue;
                }
                let ar = if kind == "Job" {
                    common::kube::jobs()
                } else {
                    common::kube::mpijobs()
                };
                let api: Api<DynamicObject> = Api::namespaced_with(c.client.clone(), &c.ns, &ar);
                let obj: DynamicObject = serde_json::from_value(m.clone()).unwrap();
                let name = obj.metadata.name.clone().unwrap();
                api.create(&PostParams::default(), &obj).await.unwrap();
                let back = serde_json::to_value(api.get(&name).await.unwrap()).unwrap();
                let mut lost = Vec::new();
                common::kube::pruned(&m, &back, "", &mut lost);
                assert!(
                    lost.is_empty(),
                    "{kind} {name} lost fields:\n{}",
                    lost.join("\n")
                );
                api.delete(&name, &DeleteParams::foreground())
                    .await
                    .unwrap();
            }
        }
    }
    // the controllers remove what the deletions left (pods of the Job, finalizers)
    let deadline = Instant::now() + Duration::from_secs(30);
    while !c.objects().await.is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(c.objects().await.is_empty(), "{:?}", c.objects().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mpijob_whose_image_has_no_sshd_says_so() {
    let Some(c) = cluster("k8s-nosshd", Act::NoSshd).await else {
        return;
    };
    let w = setup(&c, "", &scenario(2));
    let out = run(&w).await;
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    let r = record(&w.results_root(), "nccl", 0);
    assert_eq!(r.status, Status::Failed);
    assert!(
        r.message.contains(
            "the image nvcr.io/nvidia/pytorch:25.12-py3 has no sshd (/usr/sbin/sshd, nor sshd on PATH): MPI workers \
             need an SSH server"
        ),
        "{}",
        r.message
    );
    assert!(c.objects().await.is_empty(), "{:?}", c.objects().await);
}

async fn find_bad_nodes_on(
    c: &common::kube::Cluster,
    extra: &[&str],
) -> (i32, String, serde_json::Value) {
    let w = setup(
        c,
        "",
        r#"name = "unused"
"#,
    );
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("cloudai"));
    cmd.current_dir(w.path())
        .args(common::FIND_BAD_NODES_NCCL)
        .args(["--nodes", &c.nodes.join(",")])
        .args(extra);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let text = stdout_of(&out);
    let report: serde_json::Value = serde_json::from_slice(
        &std::fs::read(w.results_root().join("bad-nodes.json"))
            .unwrap_or_else(|e| panic!("{e}: {text}")),
    )
    .unwrap();
    (out.status.code().unwrap_or(-1), text, report)
}

async fn node(c: &common::kube::Cluster, name: &str) -> serde_json::Value {
    let api: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(c.client.clone());
    serde_json::to_value(api.get(name).await.unwrap()).unwrap()
}

/// `--cordon` cordons and taints the node judged bad, and only it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_bad_nodes_cordons_only_the_bad_node() {
    let Some(c) = common::kube::cluster_of("k8s-fbnc", Act::Succeed, 4).await else {
        return;
    };
    let good = sample("multinode-2x8-h100-allreduce-kubeflow-mpijob.txt");
    let slow = c.nodes[2].clone();
    {
        let mut logs = c.logs.lock().unwrap();
        logs.insert("launcher".into(), good.clone());
        logs.insert(format!("launcher@{slow}"), common::scaled(&good, 0, 0.2));
    }
    let (code, text, report) = find_bad_nodes_on(&c, &["--cordon"]).await;
    assert_eq!(code, 3, "{text}");
    assert_eq!(report["actions"][0]["node"], slow.as_str(), "{report}");
    assert_eq!(report["actions"][0]["ok"], true, "{report}");
    for n in &c.nodes {
        let v = node(&c, n).await;
        let tainted = v["spec"]["taints"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|t| t["key"] == "cloudai.io/bad-node" && t["effect"] == "NoSchedule");
        let cordoned = v["spec"]["unschedulable"] == true;
        assert_eq!((cordoned, tainted), (*n == slow, *n == slow), "{n}: {v}");
    }
}

/// A node cordoned before the sweep is `unavailable` and gets no job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_bad_nodes_leaves_a_cordoned_node_out() {
    let Some(c) = common::kube::cluster_of("k8s-fbnu", Act::Succeed, 4).await else {
        return;
    };
    c.logs.lock().unwrap().insert(
        "launcher".into(),
        sample("multinode-2x8-h100-allreduce-kubeflow-mpijob.txt"),
    );
    let out = c.nodes[3].clone();
    let api: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(c.client.clone());
    api.patch(
        &out,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(serde_json::json!({"spec": {"unschedulable": true}})),
    )
    .await
    .unwrap();
    let (code, text, report) = find_bad_nodes_on(&c, &[]).await;
    assert_eq!(code, 0, "{text}");
    assert_eq!(report["unavailable"], serde_json::json!([out]), "{report}");
    let v = report["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["node"] == out.as_str())
        .cloned()
        .unwrap();
    assert_eq!(
        (v["verdict"].as_str(), v["reason"].as_str()),
        (Some("unavailable"), Some("cordoned"))
    );
    assert!(v["evidence"].as_array().unwrap().is_empty(), "{v}");
}
