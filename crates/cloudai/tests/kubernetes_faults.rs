//! Kubernetes faults against the real API server (scripts/kube-cluster.sh): a pod no node fits, an image that
//! cannot be pulled, a container killed for memory, an evicted pod, a quota refusing the pods, an MPIJob no
//! operator takes up, and a user whose role lacks watch, get or list.

use crate::common;

use std::time::{Duration, Instant};

use cloudai::results::IterationRecord;
use cloudai::results::{EndReason, Status};
use common::kube::{cluster, run, run_with, sample, scenario, setup, Act, Cluster};
use common::{record, stdout_of, Work};

/// Runs the work directory's scenario (with `env`) and checks that its iteration failed with `end`, that
/// Kubernetes' own `words` are in the message, and that nothing is left in the namespace.
async fn fails_with(
    c: &Cluster,
    w: &Work,
    env: &[(&str, &str)],
    end: EndReason,
    words: &[&str],
) -> IterationRecord {
    let out = run_with(w, env).await;
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    let r = record(&w.results_root(), "nccl", 0);
    assert_eq!(r.status, Status::Failed, "{}", r.message);
    assert_eq!(r.end_reason, end, "{}", r.message);
    for word in words {
        assert!(r.message.contains(word), "{word:?} not in: {}", r.message);
    }
    assert!(
        c.objects().await.is_empty(),
        "left behind: {:?}",
        c.objects().await
    );
    r
}

/// A pod that dies of the node's troubles ends the iteration with the explicit reason and Kubernetes' words.
async fn ends_with(test: &str, act: Act, end: EndReason, words: &[&str]) {
    let Some(c) = cluster(test, act).await else {
        return;
    };
    let w = setup(&c, "", &scenario(1));
    fails_with(&c, &w, &[], end, words).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_killed_for_memory_ends_out_of_memory() {
    ends_with(
        "k8s-oom",
        Act::OomKilled,
        EndReason::OutOfMemory,
        &["OOMKilled"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_pod_ends_evicted_with_the_kubelets_words() {
    let words = ["evicted", "The node was low on resource: memory"];
    ends_with("k8s-evict", Act::Evicted, EndReason::Evicted, &words).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_right_to_watch_the_run_reads_objects_directly() {
    let Some(c) = cluster("k8s-nowatch", Act::Succeed).await else {
        return;
    };
    let log = sample("single-node-8gpu-a100-allreduce-v2.19.4.txt");
    c.logs.lock().unwrap().insert("main".into(), log.clone());
    let w = setup(&c, "", &scenario(1));
    let verbs = ["get", "list", "create", "delete", "patch"];
    let system = c
        .restricted_kubeconfig(&w.path().join("kubeconfig"), &verbs)
        .await;
    w.file("system.toml", &system);
    let out = run(&w).await;
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("reading them from the API server until it works again"),
        "{text}"
    );
    let root = w.results_root();
    assert_eq!(
        std::fs::read_to_string(root.join("nccl/0/stdout.txt")).unwrap(),
        log
    );
    let r = record(&root, "nccl", 0);
    assert_eq!(r.status, Status::Passed, "{}", r.message);
    assert!(c.objects().await.is_empty(), "{:?}", c.objects().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_right_to_read_its_job_an_iteration_fails_at_once_and_cleans_up() {
    let Some(c) = cluster("k8s-noget", Act::RunForever).await else {
        return;
    };
    let w = setup(&c, "", &scenario(1));
    let verbs = ["list", "create", "delete"];
    let system = c
        .restricted_kubeconfig(&w.path().join("kubeconfig"), &verbs)
        .await;
    w.file("system.toml", &system);
    let started = Instant::now();
    let words = ["cannot read Kubernetes Job", "403 Forbidden"];
    fails_with(&c, &w, &[], EndReason::Exited, &words).await;
    assert!(started.elapsed() < Duration::from_secs(60));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_right_to_list_jobs_the_run_stops_before_anything_exists() {
    let Some(c) = cluster("k8s-nolist", Act::RunForever).await else {
        return;
    };
    let w = setup(&c, "", &scenario(1));
    let system = c
        .restricted_kubeconfig(&w.path().join("kubeconfig"), &["get", "create", "delete"])
        .await;
    w.file("system.toml", &system);
    let out = run(&w).await;
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("cannot list Jobs in namespace") && text.contains("403 Forbidden"),
        "{text}"
    );
    // one error, no watch noise; beside it only what the survey could not read (nodes, namespace: rights this
    // user lacks)
    let errors: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with("[INFO] System test-k8s:"))
        .collect();
    assert_eq!(errors.len(), 1, "one error, no watch noise: {text}");
    assert!(text.contains("no RDMA device was looked for"), "{text}");
    assert!(!w.path().join("out").exists(), "no results directory");
    assert!(c.objects().await.is_empty(), "{:?}", c.objects().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unschedulable_pod_ends_with_the_schedulers_message() {
    let Some(c) = cluster("k8s-unsched", Act::Unschedulable).await else {
        return;
    };
    let w = setup(&c, r#"max_pending_time = "00:00:03""#, &scenario(1));
    let words = ["0/2 nodes are available: 2 Insufficient nvidia.com/gpu."];
    let r = fails_with(&c, &w, &[], EndReason::Unschedulable, &words).await;
    assert!(
        r.queue_states
            .iter()
            .any(|q| q.reason.starts_with("Unschedulable")),
        "{:?}",
        r.queue_states
    );
    let events = std::fs::read_to_string(w.results_root().join("nccl/0/events.txt")).unwrap();
    assert!(events.contains("FailedScheduling"), "{events}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_pods_a_quota_refuses_ends_with_the_controllers_words() {
    let Some(c) = cluster("k8s-quota", Act::Succeed).await else {
        return;
    };
    let quota = serde_json::json!({"metadata": {"name": "gpus"}, "spec": {"hard": {"requests.nvidia.com/gpu": "0"}}});
    let api: kube::Api<k8s_openapi::api::core::v1::ResourceQuota> =
        kube::Api::namespaced(c.client.clone(), &c.ns);
    api.create(&Default::default(), &serde_json::from_value(quota).unwrap())
        .await
        .unwrap();
    // admission enforces a quota once the quota controller has counted what it holds
    for _ in 0..100 {
        let q = api.get("gpus").await.unwrap();
        if q.status.and_then(|s| s.hard).is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let w = setup(&c, r#"max_pending_time = "00:00:08""#, &scenario(1));
    let words = ["FailedCreate", "exceeded quota: gpus"];
    let r = fails_with(&c, &w, &[], EndReason::Unschedulable, &words).await;
    assert!(
        r.queue_states
            .iter()
            .any(|q| q.reason.starts_with("FailedCreate")),
        "{:?}",
        r.queue_states
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mpijob_no_operator_takes_up_ends_saying_so() {
    let Some(c) = cluster("k8s-nooperator", Act::NoOperator).await else {
        return;
    };
    let w = setup(&c, r#"max_pending_time = "00:00:04""#, &scenario(2));
    let env = [("CLOUDAI_K8S_OPERATOR_WAIT_S", "1")];
    let words = ["is the Kubeflow MPI operator"];
    fails_with(&c, &w, &env, EndReason::Unschedulable, &words).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_that_cannot_be_pulled_ends_at_once() {
    let Some(c) = cluster("k8s-pull", Act::ImagePull).await else {
        return;
    };
    let w = setup(&c, "", &scenario(2));
    let started = Instant::now();
    let words = ["Back-off pulling image"];
    fails_with(&c, &w, &[], EndReason::ImagePullFailed, &words).await;
    // no max_pending_time: the end came from the pull failure, not from waiting
    assert!(started.elapsed() < Duration::from_secs(60));
}
