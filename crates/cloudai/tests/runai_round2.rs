//! Run:ai, second round, against the mock: rate-limit storms that never end a workload, a tenant with many
//! projects, the scheduler's pending reasons, soft-deleted workloads, configuration refused before anything is
//! created.

use crate::common;

use std::time::{Duration, Instant};

use cloudai::results::Status;
use common::runai::{mock, requests, run, setup, RUN};
use common::{record, stdout_of, Work};
use runai_mock::model::{now, Timing};

fn one_test(id: &str) -> String {
    format!(
        r#"name = "runai"
[[Tests]]
id = "{id}"
test_name = "nccl"
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_of_429_never_ends_a_running_workload() {
    // every request answered 429 for 20 s while the workload runs, `Retry-After: 0` (a storm sped up: each poll's
    // retries are spent at once, so far more than ten polls in a row fail): the workload is neither deleted nor
    // failed, and passes once the storm is over
    let m = mock(25.0, None).await;
    let w = Work::new();
    setup(&w, &m.url(), &one_test("storm"));
    let shared = m.shared.clone();
    tokio::spawn(async move {
        while shared.data.lock().unwrap().workloads.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut f = shared.faults.lock().unwrap();
        f.retry_after_s = 0;
        f.rate_limit_until = Some(now() + 20.0);
    });
    let out = run(&w, RUN, &[]).await;
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let r = record(&w.results_root(), "storm", 0);
    assert_eq!(r.status, Status::Passed, "{}", r.message);
    let failed_polls = text
        .lines()
        .filter(|l| l.contains("Cannot read Run:ai workload") && l.contains("HTTP 429"))
        .count();
    assert!(failed_polls >= 10, "{failed_polls} failed polls: {text}");
    // one DELETE, after the workload completed
    assert_eq!(
        requests(&m.journal(), "DELETE", "/api/v1/workloads/").len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_with_120_projects_still_gets_its_logs() {
    let m = mock(0.5, None).await;
    {
        let mut c = m.shared.cfg.lock().unwrap();
        c.extra_projects = 119;
        // only the paged list shows projects
        c.project_by_id = false;
    }
    let w = Work::new();
    setup(&w, &m.url(), &one_test("many"));
    let out = run(&w, RUN, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let stdout =
        std::fs::read_to_string(w.results_root().join("many/0/stdout.txt")).unwrap_or_default();
    assert!(stdout.contains("Avg bus bandwidth"), "{stdout}");
    let j = m.journal();
    let lists: Vec<_> = requests(&j, "GET", "/api/v1/org-unit/projects")
        .into_iter()
        .filter(|r| r["path"] == "/api/v1/org-unit/projects")
        .collect();
    // read once per run, not once per workload, and asked for whole pages
    assert_eq!(lists.len(), 1, "{lists:?}");
    assert_eq!(lists[0]["query"]["limit"], "500");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schedulers_pending_reason_is_recorded() {
    let m = mock(0.5, None).await;
    m.set_timing(Timing {
        pending_s: 4.0,
        ..common::runai::timing(0.5)
    });
    m.shared.cfg.lock().unwrap().pending_reason = "Non-preemptible over quota".into();
    let w = Work::new();
    setup(&w, &m.url(), &one_test("queued"));
    let out = run(&w, RUN, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let r = record(&w.results_root(), "queued", 0);
    assert!(
        r.queue_states
            .iter()
            .any(|q| q.state == "Pending"
                && q.reason == "node pool default: Non-preemptible over quota"),
        "{:?}",
        r.queue_states
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_soft_deleted_workload_counts_as_gone() {
    // deleted workloads stay visible (deletedAt set) for ten minutes: waiting for a 404 would take the whole
    // deletion wait and report a leftover
    let m = mock(0.5, None).await;
    m.set_timing(Timing {
        visible_deleted_s: 600.0,
        ..common::runai::timing(0.5)
    });
    let w = Work::new();
    setup(&w, &m.url(), &one_test("soft"));
    let started = Instant::now();
    let out = run(&w, RUN, &[("CLOUDAI_RUNAI_GONE_WAIT_S", "60")]).await;
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(started.elapsed() < Duration::from_secs(40), "{text}");
    assert!(!w.results_root().join("leftovers.json").exists(), "{text}");
    assert!(text.contains("Deleted Run:ai workload"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_cluster_or_project_is_refused_before_anything_is_created() {
    let m = mock(0.5, None).await;
    for (from, to, words) in [
        (
            r#"cluster_id = "71f69d83-ba66-4822-adf5-55ce55efd210""#,
            r#"cluster_id = "your_cluster_id""#,
            vec![r#"cluster_id "your_cluster_id""#, "is not a cluster UUID"],
        ),
        (
            r#"cluster_id = "71f69d83-ba66-4822-adf5-55ce55efd210""#,
            r#"cluster_id = "00000000-ba66-4822-adf5-55ce55efd210""#,
            vec![
                "project 4501 (test) belongs to cluster 71f69d83-ba66-4822-adf5-55ce55efd210",
                "not to cluster_id 00000000-ba66-4822-adf5-55ce55efd210",
            ],
        ),
        (
            r#"project_id = "4501""#,
            r#"project_id = "4502""#,
            vec!["project_id 4502 is not among the 1 projects"],
        ),
    ] {
        let w = Work::new();
        setup(&w, &m.url(), &one_test("refused"));
        let sys = std::fs::read_to_string(w.path().join("system.toml")).unwrap();
        assert!(sys.contains(from));
        w.file("system.toml", &sys.replace(from, to));
        let out = run(&w, RUN, &[]).await;
        let text = stdout_of(&out);
        assert_ne!(out.status.code(), Some(0), "{text}");
        for word in words {
            assert!(text.contains(word), "{word:?} missing: {text}");
        }
        let results = std::fs::read_dir(w.path().join("out")).map_or(0, |d| d.count());
        assert_eq!(results, 0, "a results directory was created: {text}");
    }
    assert!(
        requests(&m.journal(), "POST", "/api/v1/workloads/").is_empty(),
        "a workload was created"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_stream_cut_mid_run_is_reopened_and_stdout_is_whole() {
    let m = mock(6.0, None).await;
    // the first stream breaks off after 5 lines, as behind a proxy with an idle timeout
    m.shared.faults.lock().unwrap().cut_log_after_lines = 5;
    let w = Work::new();
    setup(&w, &m.url(), &one_test("cut"));
    let out = run(&w, RUN, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let got = std::fs::read_to_string(w.results_root().join("cut/0/stdout.txt")).unwrap();
    assert_eq!(
        got,
        common::runai::sample("single-node-8gpu-a100-allreduce-v2.19.4.txt"),
        "stdout.txt is not the whole log, once"
    );
    // reopened while the workload ran (not only read again after it ended)
    let wl = m.shared.data.lock().unwrap().workloads[0].clone();
    let t = &wl.timing;
    let ended = wl.created_at + t.create_s + t.pending_s + t.init_s + t.run_s;
    let streams = requests(&m.journal(), "GET", "/cluster-api/")
        .iter()
        .filter(|r| r["t"].as_f64().unwrap() < ended)
        .count();
    assert!(streams >= 2, "{streams} log streams opened while it ran");
    let r = record(&w.results_root(), "cut", 0);
    assert_eq!(r.status, Status::Passed, "{}", r.message);
    assert_eq!(r.log_incomplete, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_and_the_log_stream_go_through_the_sites_proxy() {
    let m = mock(1.0, None).await;
    let proxy = common::runai::forward_proxy().await;
    let w = Work::new();
    setup(&w, &m.url(), &one_test("proxied"));
    let envs = [
        ("HTTP_PROXY", proxy.url.as_str()),
        ("HTTPS_PROXY", proxy.url.as_str()),
        ("http_proxy", proxy.url.as_str()),
        ("https_proxy", proxy.url.as_str()),
        ("NO_PROXY", "example.com"),
        ("no_proxy", "example.com"),
    ];
    let out = run(&w, RUN, &envs).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let stdout = std::fs::read_to_string(w.results_root().join("proxied/0/stdout.txt")).unwrap();
    assert!(stdout.contains("Avg bus bandwidth"), "{stdout}");
    let host = m.url().trim_start_matches("http://").to_string();
    assert!(
        proxy
            .forwarded
            .lock()
            .unwrap()
            .iter()
            .any(|t| t.contains("/api/v1/")),
        "REST calls bypassed the proxy"
    );
    assert!(
        proxy.tunnels.lock().unwrap().contains(&host),
        "the log stream bypassed the proxy: {:?}",
        proxy.tunnels.lock().unwrap()
    );
    // NO_PROXY naming the control plane: straight there
    let before = proxy.tunnels.lock().unwrap().len();
    let w = Work::new();
    setup(&w, &m.url(), &one_test("direct"));
    let envs = [
        ("HTTP_PROXY", proxy.url.as_str()),
        ("HTTPS_PROXY", proxy.url.as_str()),
        ("http_proxy", proxy.url.as_str()),
        ("https_proxy", proxy.url.as_str()),
        ("NO_PROXY", "127.0.0.1"),
        ("no_proxy", "127.0.0.1"),
    ];
    let out = run(&w, RUN, &envs).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    assert_eq!(proxy.tunnels.lock().unwrap().len(), before);

    // a control plane on https (a private CA): REST calls tunnel through the proxy too
    let tls = common::runai::tls_proxy(m.addr).await;
    let url = format!("https://localhost:{}", tls.addr.port());
    m.shared.cfg.lock().unwrap().advertised_url = Some(url.clone());
    let w = Work::new();
    let ca = w.file("ca.pem", &tls.ca_pem);
    setup(&w, &url, &one_test("tls"));
    let sys = std::fs::read_to_string(w.path().join("system.toml")).unwrap();
    w.file(
        "system.toml",
        &format!(
            r#"ca_bundle = "{}"
{sys}"#,
            ca.display()
        ),
    );
    let envs = [
        ("HTTPS_PROXY", proxy.url.as_str()),
        ("https_proxy", proxy.url.as_str()),
        ("NO_PROXY", "example.com"),
        ("no_proxy", "example.com"),
    ];
    let forwarded = proxy.forwarded.lock().unwrap().len();
    let out = run(&w, RUN, &envs).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let target = format!("localhost:{}", tls.addr.port());
    let tunnels = proxy
        .tunnels
        .lock()
        .unwrap()
        .iter()
        .filter(|t| **t == target)
        .count();
    // the REST client's connection(s) and at least one log stream
    assert!(
        tunnels >= 2,
        "{tunnels} tunnels: {:?}",
        proxy.tunnels.lock().unwrap()
    );
    assert_eq!(proxy.forwarded.lock().unwrap().len(), forwarded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_bad_nodes_lists_the_clusters_nodes_and_refuses_a_pair_that_ran_elsewhere() {
    let m = mock(0.5, None).await;
    {
        let mut c = m.shared.cfg.lock().unwrap();
        c.nodes = (0..5).map(|i| format!("node-{i}")).collect();
        c.not_ready_nodes = vec!["node-4".into()];
    }
    // the first pair's workload is placed on other nodes than it pins
    m.shared.faults.lock().unwrap().ignore_affinity_next = 1;
    let w = Work::new();
    setup(
        &w,
        &m.url(),
        r#"name = "unused"
"#,
    );
    let out = run(&w, &common::FIND_BAD_NODES_NCCL, &[]).await;
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("Leaving out node node-4: status NotReady"),
        "{text}"
    );
    assert!(
        text.contains("node-0+node-1: ran on node-2, node-3 instead"),
        "{text}"
    );
    let root = w.results_root();
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("bad-nodes.json")).unwrap()).unwrap();
    assert_eq!(report["bad"], serde_json::json!([]), "{report}");
    // node-0 and node-1 were judged from a later pair that did run on them
    let verdicts = report["verdicts"].as_array().cloned().unwrap_or_default();
    for n in ["node-0", "node-1", "node-2", "node-3"] {
        assert!(
            verdicts
                .iter()
                .any(|v| v["node"] == n && v["verdict"] == "good"),
            "{n} not cleared: {report}"
        );
    }
    assert!(requests(&m.journal(), "GET", "/api/v1/clusters/")
        .iter()
        .any(|r| r["path"].as_str().unwrap().ends_with("/nodes")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_that_cannot_be_pulled_ends_the_workload_with_the_kubelets_words() {
    let m = mock(0.5, None).await;
    m.set_timing(Timing {
        outcome: "image_pull".into(),
        ..common::runai::timing(0.5)
    });
    let w = Work::new();
    setup(&w, &m.url(), &one_test("pull"));
    let started = Instant::now();
    let out = run(&w, RUN, &[]).await;
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(started.elapsed() < Duration::from_secs(30), "{text}");
    let r = record(&w.results_root(), "pull", 0);
    assert_eq!(r.status, Status::Failed);
    assert_eq!(r.end_reason, cloudai::results::EndReason::ImagePullFailed);
    assert!(
        r.message.contains("Failed to pull image") && r.message.contains("not found"),
        "{}",
        r.message
    );
    assert_eq!(
        requests(&m.journal(), "DELETE", "/api/v1/workloads/").len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_submission_fails_its_iteration_and_the_next_ones_still_run() {
    let m = mock(0.5, None).await;
    m.shared.faults.lock().unwrap().reject_next_create = 1;
    let w = Work::new();
    setup(
        &w,
        &m.url(),
        r#"name = "runai"
[[Tests]]
id = "it"
test_name = "nccl"
iterations = 3
"#,
    );
    let out = run(&w, RUN, &[]).await;
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    let root = w.results_root();
    let r0 = record(&root, "it", 0);
    assert_eq!(r0.status, Status::Failed);
    assert!(
        r0.message.contains("HTTP 400")
            && r0
                .message
                .contains("not allowed by the administrator's policy"),
        "{}",
        r0.message
    );
    for i in 1..3 {
        let r = record(&root, "it", i);
        assert_eq!(r.status, Status::Passed, "iteration {i}: {}", r.message);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preempted_workload_that_runs_again_leaves_one_whole_log() {
    let m = mock(4.0, None).await;
    m.set_timing(Timing {
        preempt_after_s: 2.0,
        ..common::runai::timing(4.0)
    });
    let w = Work::new();
    setup(&w, &m.url(), &one_test("preempted"));
    let out = run(&w, RUN, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let got = std::fs::read_to_string(w.results_root().join("preempted/0/stdout.txt")).unwrap();
    assert_eq!(
        got,
        common::runai::sample("single-node-8gpu-a100-allreduce-v2.19.4.txt"),
        "the log repeated after the restart is not written twice"
    );
    let r = record(&w.results_root(), "preempted", 0);
    assert_eq!(r.status, Status::Passed, "{}", r.message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_workloads_are_read_with_one_list_per_poll() {
    let m = mock(4.0, None).await;
    let w = Work::new();
    let scenario: String = std::iter::once(
        r#"name = "runai"
"#
        .to_string(),
    )
    .chain((0..6).map(|i| {
        format!(
            r#"[[Tests]]
id = "t{i}"
test_name = "nccl"
"#
        )
    }))
    .collect();
    setup(&w, &m.url(), &scenario);
    let out = run(&w, RUN, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let j = m.journal();
    let lists = requests(&j, "GET", "/api/v1/workloads")
        .iter()
        .filter(|r| r["path"] == "/api/v1/workloads")
        .count();
    // before the first deletion (the deletions' confirmations read each workload by id)
    let first_delete = requests(&j, "DELETE", "/api/v1/workloads/")[0]["t"]
        .as_f64()
        .unwrap();
    let own = requests(&j, "GET", "/api/v1/workloads/")
        .iter()
        .filter(|r| r["t"].as_f64().unwrap() < first_delete)
        .filter(|r| {
            let rest = &r["path"].as_str().unwrap()["/api/v1/workloads/".len()..];
            !rest.is_empty() && !rest.contains('/')
        })
        .count();
    // six workloads watched for about five seconds at monitor_interval 1: one GET each per poll would be ~30
    assert!(lists >= 3, "{lists} lists");
    assert!(own <= 6, "{own} workload GETs beside {lists} lists");
}
