//! `cloudai run` against the Run:ai mock (crates/runai-mock, which validates every body against the official
//! OpenAPI document): 1-node training and 2-node MPI workloads, logs, events, reports, hooks, faults, SIGINT.

use crate::common;

use std::time::{Duration, Instant};

use cloudai::results::{EndReason, Status};
use common::runai::{
    mock, no_secret_anywhere, requests, run, sample, setup, timing, workload_names, RUN, SECRET,
};
use common::{record, stdout_of, Work};
use runai_mock::{Faults, MockServer, Timing};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_and_two_node_nccl_end_to_end() {
    let m = mock(1.0, None).await;
    let w = Work::new();
    setup(
        &w,
        &m.url(),
        r#"name = "runai"
[[Tests]]
id = "one"
test_name = "nccl"
[Tests.cmd_args]
ngpus = 8
[[Tests]]
id = "two"
test_name = "nccl"
num_nodes = 2
"#,
    );
    let started = Instant::now();
    let out = run(&w, RUN, &[]).await;
    let elapsed = started.elapsed().as_secs_f64();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let root = w.results_root();
    for id in ["one", "two"] {
        let r = record(&root, id, 0);
        assert_eq!(r.status, Status::Passed, "{id}: {}", r.message);
        let stdout = std::fs::read_to_string(root.join(id).join("0/stdout.txt")).unwrap();
        if id == "one" {
            assert_eq!(
                stdout,
                sample("single-node-8gpu-a100-allreduce-v2.19.4.txt")
            );
            // the page names what the workload ran: one rank runs the non-MPI build (issue 41, item 9)
            let page =
                std::fs::read_to_string(root.join("one/0/cloudai_nccl_test_bokeh_report.html"))
                    .unwrap();
            assert!(
                page.contains("<code>all_reduce_perf "),
                "the page's command"
            );
            assert!(!page.contains("all_reduce_perf_mpi"), "the page's command");
            // and links what the workload was given and printed
            for f in ["stdout.txt", "runai-workload.json", "test-run.toml"] {
                assert!(
                    page.contains(&format!("<a href=\"{f}\">")),
                    "no link to {f}"
                );
            }
        } else {
            // the mock prints the ranks of the workers it ran: 2 × 8 on two pods, and the sample's table
            assert_eq!(stdout.matches("#  Rank ").count(), 16, "{stdout}");
            assert!(
                stdout.contains("on two-worker-1") || stdout.contains("-worker-1 device"),
                "{stdout}"
            );
            assert!(stdout.ends_with(
                sample("single-node-8gpu-a100-allreduce-v2.19.4.txt")
                    .split("#  Rank  7")
                    .nth(1)
                    .unwrap()
                    .split_once('\n')
                    .unwrap()
                    .1
            ));
        }
        let events = std::fs::read_to_string(root.join(id).join("0/events.txt")).unwrap();
        assert!(
            events.lines().count() >= 4
                && events
                    .lines()
                    .all(|l| l.starts_with("RunAIEvent(created_at=") && l.ends_with("))")),
            "{events}"
        );
        assert!(root
            .join(id)
            .join("0/cloudai_nccl_test_csv_report.csv")
            .is_file());
    }
    // the workers' nodes (the launcher runs anywhere and is not where the test ran)
    assert_eq!(record(&root, "two", 0).nodes, ["node-0", "node-1"]);
    let j = m.journal();
    // the token came from the environment's secret with the documented grant
    let tok = requests(&j, "POST", "/api/v1/token");
    assert!(
        tok[0]["body"]
            .as_str()
            .unwrap()
            .contains(r#""grantType":"client_credentials""#),
        "{:?}",
        tok[0]
    );
    let train = requests(&j, "POST", "/api/v1/workloads/trainings");
    assert_eq!(train.len(), 1);
    let body: Value = serde_json::from_str(train[0]["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["spec"]["command"], "all_reduce_perf");
    assert_eq!(body["spec"]["image"], "nvcr.io/nvidia/pytorch:25.12-py3");
    assert_eq!(body["spec"]["compute"]["gpuDevicesRequest"], 8);
    let args = body["spec"]["args"].as_str().unwrap();
    assert!(
        args.starts_with("--nthreads 1 --ngpus 8 --minbytes 32M"),
        "{args}"
    );
    for bad in [
        "None",
        "False",
        "min_busbw",
        "use_deepep_matrix",
        "alltoallv",
    ] {
        assert!(!args.contains(bad), "{args}");
    }
    assert_eq!(
        body["spec"]["environmentVariables"],
        serde_json::json!([{"name": "NCCL_IB_GID_INDEX", "value": "3"}, {"name": "NCCL_DEBUG", "value": "INFO"}])
    );
    let dist = requests(&j, "POST", "/api/v1/workloads/distributed");
    assert_eq!(dist.len(), 1);
    let d: Value = serde_json::from_str(dist[0]["body"].as_str().unwrap()).unwrap();
    // both bodies conform to the official OpenAPI schemas
    let schemas = runai_mock::schema::Schemas::default();
    assert_eq!(schemas.validate(&body, "TrainingCreationRequest"), vec![]);
    assert_eq!(schemas.validate(&d, "DistributedCreationRequest"), vec![]);
    assert_eq!(
        (
            d["spec"]["distributedFramework"].as_str(),
            d["spec"]["numWorkers"].as_u64(),
            d["spec"]["slotsPerWorker"].as_u64()
        ),
        (Some("MPI"), Some(2), Some(8))
    );
    // workers keep sshd up for the launcher (host keys, /run/sshd, its port), with the keys where the image user
    // looks for them
    assert_eq!(d["spec"]["command"], "/bin/bash");
    let args = d["spec"]["args"].as_str().unwrap();
    assert!(
        args.starts_with("-c '") && args.contains("ssh-keygen -A"),
        "{args}"
    );
    assert!(args.contains("-De -p 22 -o StrictModes=no"), "{args}");
    assert_eq!(d["spec"]["sshAuthMountPath"], "/root/.ssh");
    assert!(
        d["masterSpec"]["args"].as_str().unwrap().contains("-np 16")
            && d["masterSpec"]["args"]
                .as_str()
                .unwrap()
                .contains("all_reduce_perf_mpi --nthreads 1")
    );
    // at most one GET per workload per monitor interval while it runs (plus one right after submission); then
    // it is deleted, as CloudAI does, and its deletion confirmed
    let deleted = requests(&j, "DELETE", "/api/v1/workloads/trainings/");
    assert_eq!(deleted.len(), 1);
    let del_t = deleted[0]["t"].as_f64().unwrap();
    // the workload's own GET (`/api/v1/workloads/<id>`: phase, reasons, deletion)
    let id = deleted[0]["path"]
        .as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap();
    let gets = requests(&j, "GET", &format!("/api/v1/workloads/{id}"))
        .iter()
        .filter(|r| r["path"].as_str().unwrap().ends_with(id))
        .filter(|r| r["t"].as_f64().unwrap() < del_t)
        .count() as f64;
    assert!(gets >= 1.0, "the workload was never read");
    assert!(gets <= elapsed / 1.0 + 2.0, "{gets} GETs in {elapsed:.1} s");
    assert_eq!(
        requests(&j, "DELETE", "/api/v1/workloads/distributed/").len(),
        1
    );
    let now = runai_mock::model::now();
    assert!(m
        .shared
        .data
        .lock()
        .unwrap()
        .workloads
        .iter()
        .all(|w| runai_mock::model::gone(w, now)));
    no_secret_anywhere(w.path(), &text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_writes_payloads_and_makes_no_call() {
    let m = mock(1.0, None).await;
    let w = Work::new();
    setup(
        &w,
        &m.url(),
        r#"name = "runai"
[[Tests]]
id = "two"
test_name = "nccl"
num_nodes = 2
"#,
    );
    let mut args = RUN.to_vec();
    args[0] = "dry-run";
    let out = run(&w, &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    assert!(m.journal().is_empty(), "dry-run called the API");
    let p: Value = serde_json::from_slice(
        &std::fs::read(w.results_root().join("two/0/runai-workload.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(p["spec"]["distributedFramework"], "MPI");
    no_secret_anywhere(w.path(), &stdout_of(&out));
}

/// `nodes = [...]` pins a workload to hosts (find-bad-nodes' pairs): node affinity on the hostname label, a field the
/// official schemas take for training and distributed workloads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_nodes_become_node_affinity() {
    let m = mock(1.0, None).await;
    let w = Work::new();
    setup(
        &w,
        &m.url(),
        r#"name = "runai"
[[Tests]]
id = "pair"
test_name = "nccl"
num_nodes = 2
nodes = ["gpu-[07-08]"]
[[Tests]]
id = "one"
test_name = "nccl"
nodes = ["gpu-03"]
"#,
    );
    let mut args = RUN.to_vec();
    args[0] = "dry-run";
    let out = run(&w, &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let schemas = runai_mock::schema::Schemas::default();
    for (id, kind, hosts) in [
        (
            "pair",
            "DistributedCreationRequest",
            vec!["gpu-07", "gpu-08"],
        ),
        ("one", "TrainingCreationRequest", vec!["gpu-03"]),
    ] {
        let p: Value = serde_json::from_slice(
            &std::fs::read(w.results_root().join(id).join("0/runai-workload.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(
            p["spec"]["nodeAffinityRequired"],
            serde_json::json!({"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": hosts}
            ]}]}),
            "{p}"
        );
        assert_eq!(schemas.validate(&p, kind), vec![], "{p}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_workload_reports_phase_and_last_event() {
    let m = mock(0.5, None).await;
    m.set_timing(Timing {
        outcome: "failed".into(),
        ..timing(0.5)
    });
    let w = Work::new();
    setup(
        &w,
        &m.url(),
        r#"name = "runai"
[[Tests]]
id = "bad"
test_name = "nccl"
"#,
    );
    let out = run(&w, RUN, &[]).await;
    assert_eq!(out.status.code(), Some(3), "{}", stdout_of(&out));
    let r = record(&w.results_root(), "bad", 0);
    assert_eq!(r.status, Status::Failed);
    assert!(
        r.message.contains("ended in phase Failed") && r.message.contains("BackoffLimitExceeded"),
        "{}",
        r.message
    );
    assert!(
        r.message.contains("Test NCCL failure"),
        "the output's reason is kept too: {}",
        r.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survives_token_expiry_429s_500s_slow_answers_and_dropped_creates() {
    let m = mock(3.0, None).await;
    m.shared.cfg.lock().unwrap().token_ttl_s = 1.0;
    m.set_faults(Faults {
        rate_limit_next: 3,
        retry_after_s: 1,
        latency_ms: 100,
        drop_next_create: 1,
        ..Faults::default()
    });
    let w = Work::new();
    setup(
        &w,
        &m.url(),
        r#"name = "runai"
[[Tests]]
id = "a"
test_name = "nccl"
"#,
    );
    // 500 bursts arrive in the middle of the run
    let shared = m.shared.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        shared.faults.lock().unwrap().error_burst = 3;
    });
    let out = run(&w, RUN, &[]).await;
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let r = record(&w.results_root(), "a", 0);
    assert_eq!(r.status, Status::Passed, "{}\n{text}", r.message);
    let j = m.journal();
    assert!(
        requests(&j, "POST", "/api/v1/token").len() >= 2,
        "the token was refreshed"
    );
    assert!(
        text.contains("HTTP 429") && text.contains("retrying"),
        "{text}"
    );
    // the dropped create was found by name, not posted twice
    let data = m.shared.data.lock().unwrap();
    assert_eq!(data.workloads.len(), 1, "submitted more than once");
    assert!(requests(&j, "GET", "/api/v1/workloads")
        .iter()
        .any(|r| r["query"]["filterBy"]
            .as_str()
            .is_some_and(|f| f.starts_with("name%3D%3D") || f.starts_with("name=="))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_and_post_hooks_run_as_their_own_workloads() {
    let m = mock(0.3, None).await;
    let w = Work::new();
    setup(
        &w,
        &m.url(),
        r#"name = "runai"
pre_test = "check"
post_test = "check"
[[Tests]]
id = "main"
test_name = "nccl"
"#,
    );
    w.file(
        "hooks/check.toml",
        r#"name = "check"
[[Tests]]
id = "h"
test_name = "hook_nccl"
"#,
    );
    w.file(
        "hooks/test/hook.toml",
        r#"name = "hook_nccl"
description = "h"
test_template_name = "NcclTest"
[cmd_args]
docker_image_url = "img"
"#,
    );
    let mut args = RUN.to_vec();
    args.extend(["--hook-dir", "hooks"]);
    let out = run(&w, &args, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let root = w.results_root();
    assert_eq!(record(&root, "main", 0).status, Status::Passed);
    for d in ["pre_test/hook_nccl", "post_test/hook_nccl", ""] {
        assert!(
            root.join("main/0").join(d).join("stdout.txt").is_file(),
            "{d}"
        );
    }
    let names = workload_names(&m);
    assert_eq!(names.len(), 3, "{names:?}");
    assert!(
        names[0].starts_with("h-pre")
            && names[1].starts_with("main")
            && names[2].starts_with("h-post"),
        "{names:?}"
    );

    // a failing pre-test skips the main test
    let m = mock(0.3, None).await;
    m.shared.cfg.lock().unwrap().outcome_by_prefix = vec![("h-pre".into(), "failed".into())];
    let w = Work::new();
    setup(
        &w,
        &m.url(),
        r#"name = "runai"
pre_test = "check"
[[Tests]]
id = "main"
test_name = "nccl"
"#,
    );
    w.file(
        "hooks/check.toml",
        r#"name = "check"
[[Tests]]
id = "h"
test_name = "hook_nccl"
"#,
    );
    w.file(
        "hooks/test/hook.toml",
        r#"name = "hook_nccl"
description = "h"
test_template_name = "NcclTest"
[cmd_args]
docker_image_url = "img"
"#,
    );
    let out = run(&w, &args, &[]).await;
    assert_eq!(out.status.code(), Some(3), "{}", stdout_of(&out));
    let r = record(&w.results_root(), "main", 0);
    assert_eq!(r.status, Status::Failed);
    assert!(
        r.message.contains("pre-test") && r.message.contains("not run"),
        "{}",
        r.message
    );
    assert_eq!(
        m.shared.data.lock().unwrap().workloads.len(),
        1,
        "the main workload was submitted after a failed pre-test"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_deletes_every_workload() {
    let m = mock(120.0, None).await;
    let w = Work::new();
    setup(
        &w,
        &m.url(),
        r#"name = "runai"
[[Tests]]
id = "a"
test_name = "nccl"
[[Tests]]
id = "b"
test_name = "nccl"
num_nodes = 2
"#,
    );
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("cloudai"))
        .current_dir(w.path())
        .args(RUN)
        .env("RUNAI_APP_SECRET", SECRET)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while m.shared.data.lock().unwrap().workloads.len() < 2 {
        assert!(Instant::now() < deadline, "workloads were not submitted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    common::signal(child.id() as i32, libc::SIGINT);
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(130), "{text}");
    let now = runai_mock::model::now();
    let data = m.shared.data.lock().unwrap();
    assert!(
        data.workloads
            .iter()
            .all(|w| runai_mock::model::gone(w, now)),
        "a workload survived the interrupt"
    );
    let root = w.results_root();
    for id in ["a", "b"] {
        let r = record(&root, id, 0);
        assert_eq!(
            (r.status, r.end_reason),
            (Status::Cancelled, EndReason::Cancelled)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mock_restart_keeps_state_and_the_job_completes() {
    let w = Work::new();
    let state = w.path().join("mock-state.json");
    let m = mock(3.0, Some(state.clone())).await;
    let addr = m.addr;
    setup(
        &w,
        &m.url(),
        r#"name = "runai"
[[Tests]]
id = "a"
test_name = "nccl"
"#,
    );
    let shared = m.shared.clone();
    let runner = tokio::spawn({
        let w_path = w.path().to_path_buf();
        async move {
            let mut c = std::process::Command::new(assert_cmd::cargo::cargo_bin("cloudai"));
            c.current_dir(w_path)
                .args(RUN)
                .env("RUNAI_APP_SECRET", SECRET);
            tokio::task::spawn_blocking(move || c.output().unwrap())
                .await
                .unwrap()
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while shared.data.lock().unwrap().workloads.is_empty() {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // down for two seconds, then back with the state it saved
    drop(m);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cfg = shared.cfg.lock().unwrap().clone();
    let m2 = MockServer::start(addr, cfg, Some(state)).await.unwrap();
    let out = runner.await.unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert_eq!(
        record(&w.results_root(), "a", 0).status,
        Status::Passed,
        "{text}"
    );
    assert!(
        text.contains("no answer"),
        "the outage was not noticed: {text}"
    );
    assert_eq!(m2.shared.data.lock().unwrap().workloads.len(), 1);
    assert!(
        !m2.journal().is_empty(),
        "the restarted mock served the rest of the run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_plane_that_keeps_refusing_fails_the_job_with_the_reason() {
    let m = mock(60.0, None).await;
    let w = Work::new();
    setup(
        &w,
        &m.url(),
        r#"name = "runai"
[[Tests]]
id = "a"
test_name = "nccl"
"#,
    );
    let shared = m.shared.clone();
    tokio::spawn(async move {
        while shared.data.lock().unwrap().workloads.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut f = shared.faults.lock().unwrap();
        f.error_burst = 1000;
        f.error_status = 403;
    });
    let out = run(&w, RUN, &[]).await;
    // the workload we stop watching cannot be deleted either: it is named as a leftover
    assert_eq!(out.status.code(), Some(4), "{}", stdout_of(&out));
    let r = record(&w.results_root(), "a", 0);
    assert_eq!(r.status, Status::Failed);
    assert!(
        r.message.contains("cannot read Run:ai workload") && r.message.contains("HTTP 403"),
        "{}",
        r.message
    );
    let left = std::fs::read_to_string(w.results_root().join("leftovers.json")).unwrap();
    assert!(left.contains("HTTP 403"), "{left}");
}
