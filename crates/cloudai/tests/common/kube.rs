//! The Kubernetes test cluster (scripts/kube-cluster.sh: etcd, kube-apiserver, kube-controller-manager; no kubelet,
//! no scheduler, no MPI operator) and what stands in for the missing parts: per test a namespace, its own nodes, a
//! stand-in that does what the scheduler, the kubelet and the MPI operator would (bind pods, move pod and MPIJob
//! status, post events, finish deletions) and a kubelet log endpoint the API server proxies `pods/log` to.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Namespace, Node, Pod};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::Client;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::skip;

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
    /// The scheduler finds no node: PodScheduled=False/Unschedulable and a FailedScheduling event.
    Unschedulable,
    /// Placed, the image cannot be pulled: ImagePullBackOff.
    ImagePull,
}

pub struct Cluster {
    pub client: Client,
    pub ns: String,
    pub nodes: Vec<String>,
    /// Served as each pod's log, by the pod's `cloudai-role` label.
    pub logs: Arc<Mutex<HashMap<String, String>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// The cluster with a fresh namespace and two nodes of 8 GPUs whose kubelet is this test's log endpoint; None
/// (visibly skipped) when no cluster runs, a failure when CLOUDAI_REQUIRE_K8S is set.
pub async fn cluster(test: &str, act: Act) -> Option<Cluster> {
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
    let port = kubelet(logs.clone()).await;
    let nodes: Vec<String> = (1..=2).map(|i| format!("{ns}-n{i}")).collect();
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
    }
    let mut c = Cluster {
        client,
        ns,
        nodes,
        logs,
        tasks: Vec::new(),
    };
    let standin = Standin {
        client: c.client.clone(),
        ns: c.ns.clone(),
        nodes: c.nodes.clone(),
        act,
        seen: Default::default(),
        started: Default::default(),
    };
    c.tasks.push(tokio::spawn(standin.run()));
    Some(c)
}

impl Cluster {
    /// A Kubernetes system in this namespace.
    pub fn system(&self, extra: &str) -> String {
        format!(
            "name = \"test-k8s\"\nscheduler = \"kubernetes\"\nkube_config_path = \"{}\"\ninstall_path = \"install\"\n\
             output_path = \"out\"\ndefault_namespace = \"{}\"\ngpus_per_node = 8\nmonitor_interval = 1\n{extra}\n\
             [global_env_vars]\nNCCL_IB_GID_INDEX = \"3\"\n",
            kubeconfig().display(),
            self.ns
        )
    }

    /// A kubeconfig for a user holding only `verbs` on what cloudai touches in this namespace (the admin
    /// impersonates it), written to `path`; the system then uses it.
    pub async fn restricted_kubeconfig(&self, path: &std::path::Path, verbs: &[&str]) -> String {
        let user = format!("{}-limited", self.ns);
        let role = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "cloudai", "namespace": self.ns},
            "rules": [{"apiGroups": ["", "batch", "kubeflow.org"],
                       "resources": ["pods", "pods/log", "jobs", "mpijobs", "events"], "verbs": verbs}],
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
            &format!("kube_config_path = \"{}\"", kubeconfig().display()),
            &format!("kube_config_path = \"{}\"", path.display()),
        )
    }

    /// Names of the Jobs, MPIJobs and pods left in the namespace.
    pub async fn objects(&self) -> Vec<String> {
        let mut out = Vec::new();
        for ar in [jobs(), mpijobs()] {
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
        out
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

struct Standin {
    client: Client,
    ns: String,
    nodes: Vec<String>,
    act: Act,
    /// What was done already, by object name.
    seen: HashMap<String, HashSet<&'static str>>,
    /// When each pod started running.
    started: HashMap<String, std::time::Instant>,
}

fn now() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

impl Standin {
    async fn run(mut self) {
        loop {
            let _ = self.tick().await;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn once(&mut self, name: &str, what: &'static str) -> bool {
        self.seen.entry(name.to_string()).or_default().insert(what)
    }

    async fn event(&self, kind: &str, name: &str, type_: &str, reason: &str, message: &str) {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &self.ns);
        let e = json!({
            "metadata": {"name": format!("{name}.{}", rand_suffix())},
            "involvedObject": {"kind": kind, "name": name, "namespace": self.ns},
            "type": type_, "reason": reason, "message": message, "count": 1,
            "firstTimestamp": now(), "lastTimestamp": now(), "source": {"component": "stand-in"},
        });
        let _ = api
            .create(&PostParams::default(), &serde_json::from_value(e).unwrap())
            .await;
    }

    async fn tick(&mut self) -> Result<(), kube::Error> {
        let mpi: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &self.ns, &mpijobs());
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
        // the MPI operator: a launcher and the workers from the templates, owned by the MPIJob
        for m in mpi.list(&ListParams::default()).await?.items {
            let name = m.metadata.name.clone().unwrap_or_default();
            if m.metadata.deletion_timestamp.is_some() || !self.once(&name, "pods") {
                continue;
            }
            let owner = json!([{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": name,
                "uid": m.metadata.uid, "controller": true, "blockOwnerDeletion": true}]);
            let specs = &m.data["spec"]["mpiReplicaSpecs"];
            for (role, n) in [
                ("Launcher", 1),
                ("Worker", specs["Worker"]["replicas"].as_u64().unwrap_or(1)),
            ] {
                for i in 0..n {
                    let t = &specs[role]["template"];
                    let pname = if role == "Launcher" {
                        format!("{name}-launcher")
                    } else {
                        format!("{name}-worker-{i}")
                    };
                    let p = json!({"metadata": {"name": pname, "labels": t["metadata"]["labels"], "ownerReferences": owner},
                        "spec": t["spec"]});
                    pods.create(&PostParams::default(), &serde_json::from_value(p).unwrap())
                        .await?;
                }
            }
            self.status(&mpi, &name, "Created", "MPIJobCreated").await?;
        }
        let list = pods.list(&ListParams::default()).await?.items;
        for (i, p) in list.iter().enumerate() {
            let name = p.metadata.name.clone().unwrap_or_default();
            if p.metadata.deletion_timestamp.is_some() {
                // the kubelet confirms the deletion once the containers are stopped
                let _ = pods
                    .delete(
                        &name,
                        &DeleteParams {
                            grace_period_seconds: Some(0),
                            ..Default::default()
                        },
                    )
                    .await;
                continue;
            }
            let role = p
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("cloudai-role"))
                .cloned()
                .unwrap_or_default();
            let container = p
                .spec
                .as_ref()
                .map(|s| s.containers[0].name.clone())
                .unwrap_or_default();
            let node = self.nodes[i % self.nodes.len()].clone();
            match self.act {
                Act::Unschedulable => {
                    if self.once(&name, "unsched") {
                        let msg = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.";
                        let st = json!({"status": {"phase": "Pending", "conditions": [{"type": "PodScheduled",
                            "status": "False", "reason": "Unschedulable", "message": msg}]}});
                        pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(st))
                            .await?;
                        self.event("Pod", &name, "Warning", "FailedScheduling", msg)
                            .await;
                    }
                }
                Act::ImagePull => {
                    if self.once(&name, "bind") {
                        self.bind(&pods, &name, &node).await?;
                        let st = json!({"status": {"phase": "Pending", "containerStatuses": [{"name": container,
                            "ready": false, "restartCount": 0, "image": "x", "imageID": "",
                            "state": {"waiting": {"reason": "ImagePullBackOff",
                            "message": "Back-off pulling image \"nvcr.io/nvidia/does-not-exist:1\""}}}]}});
                        pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(st))
                            .await?;
                        self.event(
                            "Pod",
                            &name,
                            "Warning",
                            "Failed",
                            "Failed to pull image \"nvcr.io/nvidia/does-not-exist:1\": not found",
                        )
                        .await;
                    }
                }
                Act::Succeed
                | Act::SucceedAfterWorkerRestart
                | Act::SucceedSlowly
                | Act::RunForever => {
                    let run_for = Duration::from_millis(if self.act == Act::SucceedSlowly {
                        6000
                    } else {
                        800
                    });
                    if self.once(&name, "bind") {
                        self.started.insert(name.clone(), std::time::Instant::now());
                        self.bind(&pods, &name, &node).await?;
                        self.container(
                            &pods,
                            &name,
                            &container,
                            "Running",
                            json!({"running": {"startedAt": now()}}),
                        )
                        .await?;
                        self.event(
                            "Pod",
                            &name,
                            "Normal",
                            "Started",
                            &format!("Started container {container}"),
                        )
                        .await;
                        if self.act == Act::SucceedAfterWorkerRestart && role == "worker" {
                            let st = json!({"status": {"containerStatuses": [{"name": container, "ready": true,
                                "restartCount": 1, "image": "x", "imageID": "", "state": {"running": {"startedAt": now()}},
                                "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled",
                                "startedAt": now(), "finishedAt": now()}}}]}});
                            pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(st))
                                .await?;
                            self.event(
                                "Pod",
                                &name,
                                "Warning",
                                "BackOff",
                                "Back-off restarting failed container",
                            )
                            .await;
                        }
                    } else if self.act != Act::RunForever
                        && role != "worker"
                        && self
                            .started
                            .get(&name)
                            .is_some_and(|t| t.elapsed() >= run_for)
                        && self.once(&name, "exit")
                    {
                        let term = json!({"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now(), "finishedAt": now()}});
                        self.container(&pods, &name, &container, "Succeeded", term)
                            .await?;
                        if role == "launcher" {
                            let owner = p
                                .metadata
                                .owner_references
                                .as_ref()
                                .and_then(|o| o.first())
                                .map(|o| o.name.clone());
                            if let Some(m) = owner {
                                self.status(&mpi, &m, "Succeeded", "MPIJobSucceeded")
                                    .await?;
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    async fn bind(&self, pods: &Api<Pod>, name: &str, node: &str) -> Result<(), kube::Error> {
        let b = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
        let _: Value = pods
            .create_subresource("binding", name, &PostParams::default(), &b)
            .await?;
        self.event(
            "Pod",
            name,
            "Normal",
            "Scheduled",
            &format!("Successfully assigned {}/{name} to {node}", self.ns),
        )
        .await;
        Ok(())
    }

    async fn container(
        &self,
        pods: &Api<Pod>,
        name: &str,
        container: &str,
        phase: &str,
        state: Value,
    ) -> Result<(), kube::Error> {
        let st = json!({"status": {"phase": phase, "startTime": now(), "containerStatuses": [{"name": container,
            "ready": phase == "Running", "restartCount": 0, "image": "x", "imageID": "", "state": state}]}});
        pods.patch_status(name, &PatchParams::default(), &Patch::Merge(st))
            .await?;
        Ok(())
    }

    async fn status(
        &self,
        mpi: &Api<DynamicObject>,
        name: &str,
        type_: &str,
        reason: &str,
    ) -> Result<(), kube::Error> {
        let st = json!({"status": {"conditions": [{"type": type_, "status": "True", "reason": reason,
            "message": format!("MPIJob {}/{name} is {}", self.ns, type_.to_lowercase()), "lastTransitionTime": now()}]}});
        mpi.patch_status(name, &PatchParams::default(), &Patch::Merge(st))
            .await?;
        Ok(())
    }
}

fn rand_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{:x}{:x}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed) + chrono::Utc::now().timestamp_subsec_nanos() as u64
    )
}

/// A kubelet's log endpoint over TLS (`GET /containerLogs/<ns>/<pod>/<container>`): the pod's log by its role,
/// sent in two pieces so that a follower sees it arrive.
async fn kubelet(logs: Arc<Mutex<HashMap<String, String>>>) -> u16 {
    // the API server does not verify kubelet certificates unless told to (no --kubelet-certificate-authority)
    let (acceptor, _) = super::tls_acceptor(&["localhost", "127.0.0.1"]);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let (acceptor, logs) = (acceptor.clone(), logs.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(s).await else {
                    return;
                };
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let line = String::from_utf8_lossy(&head)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_string();
                let path = line
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or("")
                    .split('?')
                    .next()
                    .unwrap_or("")
                    .to_string();
                // /containerLogs/<ns>/<pod>/<container>: launcher and main pods print the test's output
                let pod = path.split('/').nth(3).unwrap_or("");
                let role = if pod.ends_with("-launcher") {
                    "launcher"
                } else if pod.contains("-worker-") {
                    "worker"
                } else {
                    "main"
                };
                let body = logs.lock().unwrap().get(role).cloned().unwrap_or_default();
                let _ = tls
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
                    .await;
                let mid = body.len() / 2;
                let mid = (mid..body.len())
                    .find(|i| body.is_char_boundary(*i))
                    .unwrap_or(body.len());
                for part in [&body[..mid], &body[mid..]] {
                    if !part.is_empty() {
                        let _ = tls
                            .write_all(format!("{:x}\r\n", part.len()).as_bytes())
                            .await;
                        let _ = tls.write_all(part.as_bytes()).await;
                        let _ = tls.write_all(b"\r\n").await;
                        let _ = tls.flush().await;
                        tokio::time::sleep(Duration::from_millis(300)).await;
                    }
                }
                let _ = tls.write_all(b"0\r\n\r\n").await;
                let _ = tls.shutdown().await;
            });
        }
    });
    port
}
