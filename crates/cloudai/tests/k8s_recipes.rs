//! Real GPU clusters, round 2, against the test kube-apiserver with the upstream MPIJob CRD: every documented
//! recipe (docs/recipes/kubernetes: on-prem IB, RoCE with Multus, AKS IB, CoreWeave, EKS EFA, GKE TCPXO) is
//! created as cloudai builds it and read back unpruned; pod-spec patches merge; the cluster survey requests the
//! RDMA device the nodes offer and refuses what they cannot give, before anything is created.

use crate::common;

use std::path::PathBuf;

use cloudai::scenario::{self as sc, Inputs};
use common::kube::{cluster, pruned, run, scenario, setup, Act, NCCL_TEST};
use common::{stdout_of, Work};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

fn recipes() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(common::repo().join("docs/recipes/kubernetes"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    v.sort();
    v
}

/// The recipe's system in namespace `ns` of the test cluster, with `edit` applied to its text.
fn recipe_in(path: &PathBuf, ns: &str, edit: &dyn Fn(String) -> String) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let text = text
        .replace(
            "default_namespace = \"nccl\"",
            &format!("default_namespace = \"{ns}\""),
        )
        .replace(
            "kube_config_path = \"~/.kube/config\"",
            &format!(
                "kube_config_path = \"{}\"",
                common::kube::kubeconfig().display()
            ),
        );
    edit(text)
}

/// The objects of a one-node and a two-node NCCL test on the system `system` (a dry plan: no survey).
fn objects(w: &Work, system: &str) -> Vec<Value> {
    let sys = w.file("system.toml", system);
    w.file("tests/nccl.toml", NCCL_TEST);
    let scen = w.file(
        "s.toml",
        r#"name = "recipe"
[[Tests]]
id = "one"
test_name = "nccl"
num_nodes = 1
time_limit = "00:05:00"
[[Tests]]
id = "two"
test_name = "nccl"
num_nodes = 2
time_limit = "00:05:00"
"#,
    );
    let tests = w.path().join("tests");
    let (cfg, s) = sc::load_all(&Inputs {
        system: Some(&sys),
        tests_dir: Some(&tests),
        scenario: &scen,
        hook_dir: None,
        survey: None,
    })
    .unwrap_or_else(|e| panic!("{system}\n{e:?}"));
    let cfg = std::sync::Arc::new(cfg);
    s.test_runs
        .iter()
        .flat_map(|r| {
            let dir = w.path().join("out/recipe_x").join(&r.id).join("0");
            cloudai::systems::kubernetes::manifests(&cfg, r, &dir)
        })
        .collect()
}

/// Creates `m` in the cluster's namespace and reads it back: the stored object, or the API server's refusal.
async fn create(c: &common::kube::Cluster, m: &Value) -> Result<Value, String> {
    let ar = if m["kind"] == "Job" {
        common::kube::jobs()
    } else {
        common::kube::mpijobs()
    };
    let api: Api<DynamicObject> = Api::namespaced_with(c.client.clone(), &c.ns, &ar);
    let obj: DynamicObject = serde_json::from_value(m.clone()).unwrap();
    let name = obj.metadata.name.clone().unwrap();
    api.create(&PostParams::default(), &obj)
        .await
        .map_err(|e| e.to_string())?;
    let back = serde_json::to_value(api.get(&name).await.unwrap()).unwrap();
    api.delete(&name, &DeleteParams::foreground())
        .await
        .unwrap();
    Ok(back)
}

fn worker_spec(m: &Value) -> &Value {
    if m["kind"] == "Job" {
        &m["spec"]["template"]["spec"]
    } else {
        &m["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_recipe_is_accepted_and_read_back_unpruned() {
    let Some(c) = cluster("k8s-recipes", Act::RunForever).await else {
        return;
    };
    let all = recipes();
    assert_eq!(all.len(), 6, "{all:?}");
    for path in &all {
        let w = Work::new();
        let system = recipe_in(path, &c.ns, &|t| t);
        let ms = objects(&w, &system);
        assert_eq!(ms.len(), 2, "{}", path.display());
        for m in &ms {
            let back = create(&c, m)
                .await
                .unwrap_or_else(|e| panic!("{}: {} refused: {e}", path.display(), m["kind"]));
            let mut lost = Vec::new();
            pruned(m, &back, "", &mut lost);
            assert!(
                lost.is_empty(),
                "{}: {} lost fields:\n{}",
                path.display(),
                m["kind"],
                lost.join("\n")
            );
            // every GPU pod asks CPU and memory: never BestEffort
            let gpu = &worker_spec(m)["containers"][0];
            assert!(gpu["resources"]["requests"]["cpu"].is_string(), "{gpu}");
            assert!(gpu["resources"]["requests"]["memory"].is_string(), "{gpu}");
        }
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        let mpi = &ms[1];
        let containers: Vec<&str> = worker_spec(mpi)["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        match name.as_str() {
            "gke-tcpxo" => {
                // the sidecar beside the test's container, after it (the operator mounts its keys into the first)
                assert_eq!(containers, ["worker", "tcpxo-daemon"]);
                let wc = &worker_spec(mpi)["containers"][0];
                assert!(wc["command"][2].as_str().unwrap().contains("sshd"), "{wc}");
                assert_eq!(
                    wc["volumeMounts"],
                    json!([{"name": "dev-shm", "mountPath": "/dev/shm"},
                           {"name": "libraries", "mountPath": "/usr/local/nvidia"}])
                );
                let ann = &mpi["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"]
                    ["annotations"];
                assert_eq!(ann["networking.gke.io/default-interface"], "eth0");
                // the one-node Job's GPU container (`main`) got the same libraries, and no launcher any
                let job = &ms[0];
                let jc: Vec<&str> = worker_spec(job)["containers"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c["name"].as_str().unwrap())
                    .collect();
                assert_eq!(jc, ["main", "tcpxo-daemon"]);
                let launcher = &mpi["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"];
                assert_eq!(launcher["containers"].as_array().unwrap().len(), 1);
                assert!(launcher["volumes"].is_null());
            }
            "eks-efa" => {
                let limits = &worker_spec(mpi)["containers"][0]["resources"]["limits"];
                assert_eq!(limits["vpc.amazonaws.com/efa"], "32");
                assert_eq!(limits["hugepages-2Mi"], "5120Mi");
            }
            "onprem-ib" => {
                // host network: the workers' sshd on 2222, declared, and mpirun's ssh on the same port
                let wc = &worker_spec(mpi)["containers"][0];
                assert_eq!(wc["ports"][0]["containerPort"], 2222);
                let l = &mpi["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
                    ["containers"][0];
                assert!(l["command"][2]
                    .as_str()
                    .unwrap()
                    .contains("\"-p 2222 -o StrictHostKeyChecking=no"));
            }
            _ => assert_eq!(containers, ["worker"], "{name}"),
        }
        assert_eq!(containers[0], "worker");
    }
    // EKS's huge pages without a cpu or memory request: what the API server says when requests are left out
    let efa = all.iter().find(|p| p.ends_with("eks-efa.toml")).unwrap();
    let bare = recipe_in(efa, &c.ns, &|t| {
        t.replace("memory = \"8000Mi\"", "memory = \"\"\ncpu = \"\"")
    });
    let w = Work::new();
    let job = objects(&w, &bare).remove(0);
    let err = create(&c, &job).await.unwrap_err();
    assert!(err.contains("HugePages require cpu or memory"), "{err}");
}

#[test]
fn a_patch_that_would_drop_the_test_container_is_refused() {
    let w = Work::new();
    let base = common::kube::DRY_SYSTEM;
    w.file("tests/nccl.toml", NCCL_TEST);
    w.file("s.toml", &scenario(2));
    for (patch, words) in [
        (
            r#"pod_spec_patch = { containers = [{ name = "worker", "$patch" = "delete" }] }"#,
            "this patch would remove the test's container \"worker\"",
        ),
        (
            r#"gpu_pod_spec_patch = { containers = { name = "x" } }"#,
            "containers must be a list of containers, each with a name",
        ),
        (
            r#"pod_spec_patch = { containers = [{ image = "x" }] }"#,
            "a container of a pod-spec patch needs a name",
        ),
    ] {
        w.file("system.toml", &format!("{base}{patch}\n"));
        let out = w.cloudai().args(common::DRY_RUN_S_TOML).output().unwrap();
        let text = stdout_of(&out);
        assert_eq!(out.status.code(), Some(1), "{text}");
        assert!(text.contains(words), "{words}: {text}");
        assert!(text.contains("system.toml:8:"), "file and line: {text}");
        assert!(!w.path().join("out").exists(), "nothing created");
    }
}

/// Labels the cluster's nodes so that only its own are GPU nodes its pods may use, and adds `allocatable` to
/// each of them.
async fn nodes_offer(c: &common::kube::Cluster, allocatable: Value) {
    let api: Api<k8s_openapi::api::core::v1::Node> = Api::all(c.client.clone());
    for n in &c.nodes {
        api.patch(
            n,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"cloudai-test": c.ns}}})),
        )
        .await
        .unwrap();
        api.patch_status(
            n,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"allocatable": allocatable, "capacity": allocatable}})),
        )
        .await
        .unwrap();
    }
}

/// The launcher prints a real 2 × 8 H100 all-reduce.
fn mpi_log(c: &common::kube::Cluster) {
    c.logs.lock().unwrap().insert(
        "launcher".into(),
        common::kube::sample("multinode-2x8-h100-allreduce-kubeflow-mpijob.txt"),
    );
}

fn manifest_of(w: &Work) -> String {
    std::fs::read_to_string(w.results_root().join("nccl/0/k8s-manifest.yaml")).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nccl_workers_request_the_rdma_device_the_nodes_offer() {
    let Some(c) = cluster("k8s-rdma", Act::Succeed).await else {
        return;
    };
    nodes_offer(&c, json!({"nvidia.com/gpu": "8", "rdma/ib": "1k"})).await;
    mpi_log(&c);
    let own = format!("node_selector = {{ \"cloudai-test\" = \"{}\" }}", c.ns);
    // gpus_per_node left out: the nodes say 8
    let system = c.system(&own).replace("gpus_per_node = 8\n", "");
    let w = setup(&c, "", &scenario(2));
    w.file("system.toml", &system);
    let out = run(&w).await;
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("gpus_per_node taken from the nodes: 8"),
        "{text}"
    );
    assert!(
        text.contains("pods with GPUs request rdma/ib = 1 and IPC_LOCK"),
        "{text}"
    );
    let m = manifest_of(&w);
    assert!(m.contains("rdma/ib: \"1\""), "{m}");
    assert!(m.contains("nvidia.com/gpu: 8"), "{m}");
    assert!(m.contains("- IPC_LOCK"), "{m}");
    assert!(c.objects().await.is_empty(), "{:?}", c.objects().await);

    // the operator turns it off: pods unchanged
    let w = setup(&c, "", &scenario(2));
    let off = c
        .system(&format!("{own}\nrdma = false"))
        .replace("gpus_per_node = 8\n", "");
    w.file("system.toml", &off);
    let out = run(&w).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    assert!(!manifest_of(&w).contains("rdma/"), "{}", manifest_of(&w));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_rdma_on_the_nodes_pods_are_unchanged_and_mismatches_are_refused_before_anything_exists(
) {
    let Some(c) = cluster("k8s-nordma", Act::Succeed).await else {
        return;
    };
    nodes_offer(&c, json!({"nvidia.com/gpu": "8"})).await;
    mpi_log(&c);
    let own = format!("node_selector = {{ \"cloudai-test\" = \"{}\" }}", c.ns);
    let w = setup(&c, &own, &scenario(2));
    let out = run(&w).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let m = manifest_of(&w);
    assert!(!m.contains("rdma/"), "{m}");

    for (extra, field, words) in [
        (
            "node_selector = { \"cloudai-test\" = \"elsewhere\" }".to_string(),
            "node_selector",
            "carries the labels cloudai-test=elsewhere",
        ),
        (
            format!("{own}\nextended_resources = {{ \"rdma/roce\" = 1 }}"),
            "extended_resources.rdma/roce",
            "offers rdma/roce",
        ),
        (format!("{own}\nrdma = true"), "rdma", "rdma = true"),
    ] {
        let w = setup(&c, &extra, &scenario(2));
        let out = run(&w).await;
        let text = stdout_of(&out);
        assert_eq!(out.status.code(), Some(1), "{text}");
        assert!(
            text.contains(&format!("{field}: ")) || text.contains(field),
            "{field}: {text}"
        );
        assert!(text.contains(words), "{words}: {text}");
        assert!(
            !w.path().join("out").exists(),
            "no results directory: {text}"
        );
    }
    assert!(c.objects().await.is_empty(), "{:?}", c.objects().await);
}

/// `[preflight]` on Kubernetes: the launcher checks every worker (one rank per node, in the test's image) before
/// the test; a node that lists too few GPUs stops it, named, and the iteration ends `preflight_failed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_failing_the_preflight_check_stops_the_mpijob_before_the_test() {
    let Some(c) = cluster("k8s-preflight", Act::PreflightFails).await else {
        return;
    };
    // what the launcher's script prints when the second node lists 4 of its 8 GPUs
    c.logs.lock().unwrap().insert(
        "launcher".into(),
        format!(
            "{} n2 (4 of 8 GPUs)\nGPU 0: NVIDIA H100\n",
            cloudai::systems::objects::preflight::MARK
        ),
    );
    let w = setup(&c, "[preflight]\nenable = true", &scenario(2));
    let out = run(&w).await;
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    let r = common::record(&w.results_root(), "nccl", 0);
    assert_eq!(
        (r.status, r.end_reason),
        (
            cloudai::results::Status::Failed,
            cloudai::results::EndReason::PreflightFailed
        ),
        "{text}"
    );
    assert!(
        r.message
            .contains("pre-flight failed on: n2 (4 of 8 GPUs); the test's command did not run"),
        "{}",
        r.message
    );
    // the launcher's script: the check on each worker through mpirun, one rank per node, before the test
    let m = manifest_of(&w);
    let check = m
        .find("-np 2 -bind-to none -map-by ppr:1:node /bin/bash -c")
        .expect(&m);
    let test = m.find("-map-by ppr:8:node").expect(&m);
    assert!(check < test, "{m}");
    assert!(
        m.contains("nvidia-smi --query-gpu=index,name --format=csv,noheader"),
        "{m}"
    );
    assert!(c.objects().await.is_empty(), "{:?}", c.objects().await);
}
