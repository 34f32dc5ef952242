//! The Kubernetes test cluster (scripts/kube-cluster.sh: etcd, kube-apiserver, kube-controller-manager; no kubelet,
//! no scheduler, no MPI operator) and what stands in for the missing parts: per test a namespace, its own nodes, a
//! stand-in that does what the scheduler, the kubelet and the MPI operator would (bind pods, move pod and MPIJob
//! status, post events, finish deletions) and a kubelet log endpoint the API server proxies `pods/log` to.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::Client;
use serde_json::json;

use super::skip;

mod dynamo;
mod standin;
pub use dynamo::{dgds, Execs};
use standin::{kubelet, Standin};

pub fn kubeconfig() -> PathBuf {
    std::env::var_os("CLOUDAI_KUBECONFIG")
        .map(PathBuf::from)
        .unwrap_or_else(|| super::repo().join("build/kube/kubeconfig"))
}

pub fn mpijobs() -> ApiResource {
    ApiResource {
        group: "kubeflow.org".into(),
        version: "v2beta1".into(),
        api_version: "kubeflow.org/v2beta1".into(),
        kind: "MPIJob".into(),
        plural: "mpijobs".into(),
    }
}

pub fn jobs() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::batch::v1::Job>(&())
}

/// What the stand-in makes of every pod.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Act {
    /// Placed, runs ~1 s, exits 0 (workers run on until deleted).
    Succeed,
    /// As `Succeed`, but each worker was killed for memory once and restarted.
    SucceedAfterWorkerRestart,
    /// As `Succeed`, after 6 s.
    SucceedSlowly,
    /// Placed, runs until deleted.
    RunForever,
    /// As `Succeed`, but the launcher (or the Job's pod) exits 86: its pre-flight check failed on a node (the
    /// test serves the log that says which).
    PreflightFails,
    /// The scheduler finds no node: PodScheduled=False/Unschedulable and a FailedScheduling event.
    Unschedulable,
    /// Placed, the image cannot be pulled: ImagePullBackOff.
    ImagePull,
    /// Placed, runs ~1 s, then the container is killed for memory (exit 137, OOMKilled).
    OomKilled,
    /// Placed, runs ~1 s, then the kubelet evicts the pod (node low on memory).
    Evicted,
    /// As `Succeed` for Jobs, but no MPI operator: an MPIJob gets neither pods nor status.
    NoOperator,
    /// The image has no `/usr/sbin/sshd`: every MPIJob worker fails to start (the container runtime's words) and
    /// goes into CrashLoopBackOff; the launcher runs on, waiting for them.
    NoSshd,
}

pub struct Cluster {
    pub client: Client,
    pub ns: String,
    pub nodes: Vec<String>,
    /// Served as each pod's log, by the pod's `cloudai-role` label; `launcher@<node>` first for an MPIJob's
    /// launcher whose workers run on that node.
    pub logs: Arc<Mutex<HashMap<String, String>>>,
    /// Commands run in pods through `exec`, and where each pod's file system is (`pod_root`).
    pub execs: Execs,
    pub pods_root: tempfile::TempDir,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// The cluster with a fresh namespace and two nodes of 8 GPUs whose kubelet is this test's log endpoint; None
/// (visibly skipped) when no cluster runs, a failure when CLOUDAI_REQUIRE_K8S is set.
pub async fn cluster(test: &str, act: Act) -> Option<Cluster> {
    cluster_of(test, act, 2).await
}

/// As [`cluster`], with `n` nodes.
pub async fn cluster_of(test: &str, act: Act, n: usize) -> Option<Cluster> {
    let path = kubeconfig();
    if !path.exists() {
        if std::env::var_os("CLOUDAI_REQUIRE_K8S").is_some() {
            panic!(
                "CLOUDAI_REQUIRE_K8S is set but {} does not exist (scripts/kube-cluster.sh start)",
                path.display()
            );
        }
        skip("no Kubernetes test cluster: scripts/kube-cluster.sh install && scripts/kube-cluster.sh start");
        return None;
    }
    let kc = kube::config::Kubeconfig::read_from(&path).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let client = Client::try_from(cfg).unwrap();
    let ns = format!("{test}-{}", std::process::id()).replace('_', "-");
    let nsapi: Api<Namespace> = Api::all(client.clone());
    nsapi
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
        )
        .await
        .unwrap_or_else(|e| {
            panic!("the test cluster does not answer ({e}); scripts/kube-cluster.sh start")
        });
    let logs = Arc::new(Mutex::new(HashMap::new()));
    let placed = Arc::new(Mutex::new(HashMap::new()));
    let pods_root = tempfile::tempdir().unwrap();
    let execs: Execs = Default::default();
    let port = kubelet(
        logs.clone(),
        placed.clone(),
        pods_root.path().to_path_buf(),
        execs.clone(),
    )
    .await;
    let nodes: Vec<String> = (1..=n).map(|i| format!("{ns}-n{i}")).collect();
    let napi: Api<Node> = Api::all(client.clone());
    for n in &nodes {
        let node = json!({"metadata": {"name": n, "labels": {"kubernetes.io/hostname": n}}});
        napi.create(
            &PostParams::default(),
            &serde_json::from_value(node).unwrap(),
        )
        .await
        .unwrap();
        let status = json!({"status": {
            "capacity": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi", "pods": "110"},
            "allocatable": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi", "pods": "110"},
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "stand-in"}],
        }});
        napi.patch_status(n, &PatchParams::default(), &Patch::Merge(status))
            .await
            .unwrap();
        // the API server's TaintNodesByCondition admission taints a new node not-ready; the node lifecycle
        // controller (not run here) lifts it once the node reports Ready
        napi.patch(
            n,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": null}})),
        )
        .await
        .unwrap();
    }
    let mut c = Cluster {
        client,
        ns,
        nodes,
        logs,
        execs,
        pods_root,
        tasks: Vec::new(),
    };
    let standin = Standin {
        client: c.client.clone(),
        ns: c.ns.clone(),
        nodes: c.nodes.clone(),
        act,
        seen: Default::default(),
        started: Default::default(),
        placed,
        deployed: Default::default(),
    };
    c.tasks.push(tokio::spawn(standin.run()));
    Some(c)
}

impl Cluster {
    /// A Kubernetes system in this namespace.
    pub fn system(&self, extra: &str) -> String {
        format!(
            r#"name = "test-k8s"
scheduler = "kubernetes"
kube_config_path = "{}"
install_path = "install"
output_path = "out"
default_namespace = "{}"
gpus_per_node = 8
monitor_interval = 1
{extra}
[global_env_vars]
NCCL_IB_GID_INDEX = "3"
"#,
            kubeconfig().display(),
            self.ns
        )
    }

    /// A kubeconfig for a user holding only `verbs` on what cloudai touches in this namespace (not `pods/exec`; the
    /// admin impersonates it), written to `path`; the system then uses it.
    pub async fn restricted_kubeconfig(&self, path: &std::path::Path, verbs: &[&str]) -> String {
        let user = format!("{}-limited", self.ns);
        let role = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "cloudai", "namespace": self.ns},
            "rules": [{"apiGroups": ["", "batch", "kubeflow.org", "nvidia.com"],
                       "resources": ["pods", "pods/log", "jobs", "mpijobs", "dynamographdeployments", "events"],
                       "verbs": verbs}],
        });
        let binding = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "cloudai", "namespace": self.ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cloudai"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        });
        for (obj, plural) in [(role, "roles"), (binding, "rolebindings")] {
            let ar = ApiResource {
                group: "rbac.authorization.k8s.io".into(),
                version: "v1".into(),
                api_version: "rbac.authorization.k8s.io/v1".into(),
                kind: obj["kind"].as_str().unwrap().into(),
                plural: plural.into(),
            };
            let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &self.ns, &ar);
            api.create(
                &PostParams::default(),
                &serde_json::from_value(obj).unwrap(),
            )
            .await
            .unwrap();
        }
        let mut kc = kube::config::Kubeconfig::read_from(kubeconfig()).unwrap();
        for a in &mut kc.auth_infos {
            if let Some(info) = a.auth_info.as_mut() {
                info.impersonate = Some(user.clone());
            }
        }
        // JSON is YAML: the kubeconfig reader takes it as is
        std::fs::write(path, serde_json::to_vec(&kc).unwrap()).unwrap();
        self.system("").replace(
            &format!(r#"kube_config_path = "{}""#, kubeconfig().display()),
            &format!(r#"kube_config_path = "{}""#, path.display()),
        )
    }

    /// Names of the Jobs, MPIJobs, DynamoGraphDeployments and pods left in the namespace.
    pub async fn objects(&self) -> Vec<String> {
        let mut out = Vec::new();
        for ar in [jobs(), mpijobs(), dgds()] {
            let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &self.ns, &ar);
            for o in api.list(&ListParams::default()).await.unwrap().items {
                out.push(format!(
                    "{}/{}",
                    ar.kind,
                    o.metadata.name.unwrap_or_default()
                ));
            }
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
        for p in pods.list(&ListParams::default()).await.unwrap().items {
            out.push(format!("Pod/{}", p.metadata.name.unwrap_or_default()));
        }
        // what the MPI operator made for an MPIJob (owned by it): gone with it, or held for ever
        let owned = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            m.owner_references
                .iter()
                .flatten()
                .any(|o| o.kind == "MPIJob")
        };
        let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
            Api::namespaced(self.client.clone(), &self.ns);
        for o in cms.list(&ListParams::default()).await.unwrap().items {
            if owned(&o.metadata) {
                out.push(format!("ConfigMap/{}", o.metadata.name.unwrap_or_default()));
            }
        }
        let secrets: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(self.client.clone(), &self.ns);
        for o in secrets.list(&ListParams::default()).await.unwrap().items {
            if owned(&o.metadata) {
                out.push(format!("Secret/{}", o.metadata.name.unwrap_or_default()));
            }
        }
        let svcs: Api<k8s_openapi::api::core::v1::Service> =
            Api::namespaced(self.client.clone(), &self.ns);
        for o in svcs.list(&ListParams::default()).await.unwrap().items {
            if owned(&o.metadata) {
                out.push(format!("Service/{}", o.metadata.name.unwrap_or_default()));
            }
        }
        out
    }

    /// Fails when any Job, MPIJob, DynamoGraphDeployment or pod is left in the namespace.
    pub async fn assert_nothing_left(&self) {
        let left = self.objects().await;
        assert!(left.is_empty(), "left behind: {left:?}");
    }

    /// Waits until a pod of ours runs.
    pub async fn wait_running(&self) {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
        for _ in 0..300 {
            let l = pods.list(&ListParams::default()).await.unwrap();
            if l.items
                .iter()
                .any(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("no pod ran in namespace {}", self.ns);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        let (client, ns, nodes) = (self.client.clone(), self.ns.clone(), self.nodes.clone());
        // best effort, on a runtime of its own: the test's runtime may be shutting down
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let napi: Api<Node> = Api::all(client.clone());
                for n in nodes {
                    let _ = napi.delete(&n, &DeleteParams::default()).await;
                }
                let nsapi: Api<Namespace> = Api::all(client);
                let _ = nsapi.delete(&ns, &DeleteParams::default()).await;
            })
        })
        .join();
    }
}

/// An NCCL test definition (`tests/nccl.toml` of [`setup`]).
pub const NCCL_TEST: &str = r#"name = "nccl"
description = "d"
test_template_name = "NcclTest"
[cmd_args]
docker_image_url = "nvcr.io#nvidia/pytorch:25.12-py3"
subtest_name = "all_reduce_perf_mpi"
"#;

/// A Kubernetes system for dry-runs (no cluster is reached).
pub const DRY_SYSTEM: &str = r#"name = "k"
scheduler = "kubernetes"
kube_config_path = ""
install_path = "install"
output_path = "out"
default_namespace = "gpu-team"
gpus_per_node = 8
"#;

/// A scenario of one NCCL test on `nodes` nodes.
pub fn scenario(nodes: u64) -> String {
    format!(
        r#"name = "k8s"
[[Tests]]
id = "nccl"
test_name = "nccl"
num_nodes = {nodes}
time_limit = "00:05:00"
"#
    )
}

/// A work directory with the cluster's system (plus `system_extra`), the NCCL and Sleep tests, and `scenario`.
pub fn setup(c: &Cluster, system_extra: &str, scenario: &str) -> super::Work {
    let w = super::Work::new();
    w.file("system.toml", &c.system(system_extra));
    w.file("tests/nccl.toml", NCCL_TEST);
    w.file(
        "tests/sleep.toml",
        r#"name = "sleep"
description = "d"
test_template_name = "Sleep"
"#,
    );
    w.file("s.toml", scenario);
    w
}

/// `cloudai run` of the work directory's scenario, off the test's runtime.
pub async fn run(w: &super::Work) -> std::process::Output {
    run_with(w, &[]).await
}

pub async fn run_with(w: &super::Work, env: &[(&str, &str)]) -> std::process::Output {
    let mut c = std::process::Command::new(assert_cmd::cargo::cargo_bin("cloudai"));
    c.current_dir(w.path()).args(super::RUN_S_TOML);
    for (k, v) in env {
        c.env(k, v);
    }
    tokio::task::spawn_blocking(move || c.output().unwrap())
        .await
        .unwrap()
}

/// `cloudai status --json` of a results tree, then `cloudai resume` of it (after a kill -9), off the test's
/// runtime: the status as JSON and resume's output.
pub async fn status_then_resume(
    w: &super::Work,
    root: &std::path::Path,
) -> (serde_json::Value, std::process::Output) {
    let cloudai = |args: Vec<String>| {
        let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("cloudai"));
        cmd.current_dir(w.path()).args(args);
        tokio::task::spawn_blocking(move || cmd.output().unwrap())
    };
    let root = root.display().to_string();
    let st = cloudai(vec!["status".into(), "--json".into(), root.clone()])
        .await
        .unwrap();
    let st = serde_json::from_slice(&st.stdout).unwrap();
    let out = cloudai(vec!["resume".into(), root]).await.unwrap();
    (st, out)
}

/// A real nccl-tests output from tests/data/nccl-samples.
pub fn sample(name: &str) -> String {
    std::fs::read_to_string(super::data().join("nccl-samples").join(name)).unwrap()
}

/// What the server dropped of what we sent: every path of `sent` that `got` lacks or holds another value at
/// (quantities compare by their text: the API server turns `8` into `"8"`).
pub fn pruned(
    sent: &serde_json::Value,
    got: &serde_json::Value,
    path: &str,
    out: &mut Vec<String>,
) {
    use serde_json::Value;
    match (sent, got) {
        (Value::Object(s), Value::Object(g)) => {
            for (k, v) in s {
                match g.get(k) {
                    Some(gv) => pruned(v, gv, &format!("{path}/{k}"), out),
                    None => out.push(format!("{path}/{k}")),
                }
            }
        }
        (Value::Array(s), Value::Array(g)) if s.len() == g.len() => {
            for (i, (a, b)) in s.iter().zip(g).enumerate() {
                pruned(a, b, &format!("{path}/{i}"), out);
            }
        }
        (a, b) => {
            let text = |v: &Value| {
                v.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| v.to_string())
            };
            // the API server writes quantities canonically ("5120Mi" is stored as "5Gi")
            if text(a) != text(b)
                && quantity(&text(a)).is_none_or(|q| Some(q) != quantity(&text(b)))
            {
                out.push(format!("{path}: sent {a}, stored {b}"));
            }
        }
    }
}

/// A resource quantity's value (`5120Mi`, `5Gi`, `1k`, `500m`), for comparing what the API server canonicalized.
fn quantity(s: &str) -> Option<f64> {
    let end = s.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (num, suffix) = s.split_at(end);
    let f = match suffix {
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    num.parse::<f64>().ok().map(|n| n * f)
}
