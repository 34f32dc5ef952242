//! The stand-in for what the test cluster lacks: the scheduler (binding, or "no node fits"), the kubelet (pod and
//! container status, events, finishing graceful deletions, serving logs) and the MPI operator (launcher and
//! worker pods, MPIJob conditions), all through the real API server.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{mpijobs, Act};

pub(super) struct Standin {
    pub(super) client: Client,
    pub(super) ns: String,
    pub(super) nodes: Vec<String>,
    pub(super) act: Act,
    /// What was done already, by object name.
    pub(super) seen: HashMap<String, HashSet<&'static str>>,
    /// When each pod started running.
    pub(super) started: HashMap<String, std::time::Instant>,
    /// The node each pod was bound to, shared with the kubelet.
    pub(super) placed: Placed,
    /// DynamoGraphDeployments whose pods were made.
    pub(super) deployed: HashSet<String>,
}

pub(super) type Placed = Arc<Mutex<HashMap<String, String>>>;

fn label(p: &Pod, key: &str) -> String {
    p.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .cloned()
        .unwrap_or_default()
}

/// Values of a required node affinity on the hostname label (`nodes = [...]`), if any.
fn pinned_to(p: &Pod) -> Option<Vec<String>> {
    let v = serde_json::to_value(p.spec.as_ref()?).ok()?;
    let terms = v["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"]
        .as_array()?
        .clone();
    Some(
        terms
            .iter()
            .flat_map(|t| {
                t["matchExpressions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter(|e| e["key"] == "kubernetes.io/hostname" && e["operator"] == "In")
            .flat_map(|e| e["values"].as_array().cloned().unwrap_or_default())
            .filter_map(|n| n.as_str().map(str::to_string))
            .collect(),
    )
}

fn now() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

impl Standin {
    pub(super) async fn run(mut self) {
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
        let operated = if self.act == Act::NoOperator {
            Vec::new()
        } else {
            mpi.list(&ListParams::default()).await?.items
        };
        for m in operated {
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
            // what the operator makes beside the pods, owned by the MPIJob: its host file, ssh keys and headless
            // Service (the garbage collector removes them with it)
            let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
                Api::namespaced(self.client.clone(), &self.ns);
            let secrets: Api<k8s_openapi::api::core::v1::Secret> =
                Api::namespaced(self.client.clone(), &self.ns);
            let svcs: Api<k8s_openapi::api::core::v1::Service> =
                Api::namespaced(self.client.clone(), &self.ns);
            let meta = |n: String| json!({"name": n, "ownerReferences": owner});
            cms
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(json!({"metadata": meta(format!("{name}-config")),
                        "data": {"hostfile": format!("{name}-worker-0.{name}.{}.svc slots=8\n", self.ns)}}))
                    .unwrap(),
                )
                .await?;
            secrets
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(json!({"metadata": meta(format!("{name}-ssh")),
                        "type": "kubernetes.io/ssh-auth", "data": {"ssh-privatekey": "eA=="}}))
                    .unwrap(),
                )
                .await?;
            svcs
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(json!({"metadata": meta(name.clone()),
                        "spec": {"clusterIP": "None", "selector": {"training.kubeflow.org/job-name": name}}}))
                    .unwrap(),
                )
                .await?;
            self.status(&mpi, &name, "Created", "MPIJobCreated").await?;
        }
        if self.act != Act::NoOperator {
            // a cluster without the CRD has none to operate
            let _ = super::dynamo::operate(&self.client, &self.ns, &mut self.deployed).await;
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
            let role = label(p, "cloudai-role");
            let container = p
                .spec
                .as_ref()
                .map(|s| s.containers[0].name.clone())
                .unwrap_or_default();
            let node = self.place(p, i);
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
                            "message": r#"Back-off pulling image "nvcr.io/nvidia/does-not-exist:1""#}}}]}});
                        pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(st))
                            .await?;
                        self.event(
                            "Pod",
                            &name,
                            "Warning",
                            "Failed",
                            r#"Failed to pull image "nvcr.io/nvidia/does-not-exist:1": not found"#,
                        )
                        .await;
                    }
                }
                Act::NoSshd => {
                    if self.once(&name, "bind") {
                        self.bind(&pods, &name, &node).await?;
                        if role == "worker" {
                            // what the worker's command does in an image without /usr/sbin/sshd: cloudai's wrapper
                            // script says so and exits 127 (its words in the termination message); a bare sshd
                            // command is refused by the runtime (containerd + runc's words)
                            let script = p
                                .spec
                                .as_ref()
                                .and_then(|s| s.containers[0].command.clone())
                                .unwrap_or_default()
                                .join(" ");
                            let said = script
                                .split_once("echo '")
                                .and_then(|(_, r)| r.split_once("' | tee"))
                                .map(|(m, _)| format!("{m}\n"));
                            let terminated = match said {
                                Some(m) => json!({"exitCode": 127, "reason": "Error", "message": m,
                                    "startedAt": now(), "finishedAt": now()}),
                                None => json!({"exitCode": 128, "reason": "StartError", "message":
                                    r#"failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: exec: "/usr/sbin/sshd": stat /usr/sbin/sshd: no such file or directory: unknown"#,
                                    "startedAt": now(), "finishedAt": now()}),
                            };
                            let msg =
                                format!("back-off 10s restarting failed container={container}");
                            let st = json!({"status": {"phase": "Running", "startTime": now(), "containerStatuses": [{
                                "name": container, "ready": false, "restartCount": 1, "image": "x", "imageID": "",
                                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": msg}},
                                "lastState": {"terminated": terminated}}]}});
                            pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(st))
                                .await?;
                            self.event("Pod", &name, "Warning", "BackOff", &msg).await;
                        } else {
                            self.container(
                                &pods,
                                &name,
                                &container,
                                "Running",
                                json!({"running": {"startedAt": now()}}),
                            )
                            .await?;
                        }
                    }
                }
                Act::Succeed
                | Act::PreflightFails
                | Act::SucceedAfterWorkerRestart
                | Act::SucceedSlowly
                | Act::RunForever
                | Act::OomKilled
                | Act::Evicted
                | Act::NoOperator => {
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
                        // a deployment's servers run until deleted
                        && label(p, "nvidia.com/dynamo-graph-deployment-name").is_empty()
                        && self
                            .started
                            .get(&name)
                            .is_some_and(|t| t.elapsed() >= run_for)
                        && self.once(&name, "exit")
                    {
                        if self.act == Act::Evicted {
                            let msg = "The node was low on resource: memory. Container main was using 61Gi, which exceeds its request of 0.";
                            let st = json!({"status": {"phase": "Failed", "reason": "Evicted", "message": msg,
                                "containerStatuses": [{"name": container, "ready": false, "restartCount": 0, "image": "x",
                                "imageID": "", "state": {"terminated": {"exitCode": 137, "reason": "ContainerStatusUnknown",
                                "startedAt": now(), "finishedAt": now()}}}]}});
                            pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(st))
                                .await?;
                            self.event("Pod", &name, "Warning", "Evicted", msg).await;
                            continue;
                        }
                        let (code, reason, phase) = match self.act {
                            Act::OomKilled => (137, "OOMKilled", "Failed"),
                            // the launcher's (or the pod's) pre-flight check stopped the test
                            Act::PreflightFails => (86, "Error", "Failed"),
                            _ => (0, "Completed", "Succeeded"),
                        };
                        let term = json!({"terminated": {"exitCode": code, "reason": reason, "startedAt": now(), "finishedAt": now()}});
                        self.container(&pods, &name, &container, phase, term)
                            .await?;
                        if role == "launcher" {
                            let owner = p
                                .metadata
                                .owner_references
                                .as_ref()
                                .and_then(|o| o.first())
                                .map(|o| o.name.clone());
                            if let Some(m) = owner {
                                if code == 0 {
                                    self.status(&mpi, &m, "Succeeded", "MPIJobSucceeded")
                                        .await?;
                                } else {
                                    self.status(&mpi, &m, "Failed", "MPIJobFailed").await?;
                                }
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

    /// A node as the scheduler would choose it: within the pod's node affinity, never one that holds another
    /// worker of the same job (the MPIJob's anti-affinity), else spread by index.
    fn place(&self, p: &Pod, i: usize) -> String {
        let name = p.metadata.name.clone().unwrap_or_default();
        let mut placed = self.placed.lock().unwrap();
        if let Some(n) = placed.get(&name) {
            return n.clone();
        }
        let allowed = pinned_to(p).unwrap_or_else(|| self.nodes.clone());
        let job = label(p, "cloudai-job");
        let worker = name.contains("-worker-");
        // a per-node Job's pods keep apart too (their pod anti-affinity)
        let apart = p
            .spec
            .as_ref()
            .and_then(|s| s.affinity.as_ref())
            .is_some_and(|a| a.pod_anti_affinity.is_some());
        let taken: Vec<String> = placed
            .iter()
            .filter(|(other, _)| {
                (worker && other.starts_with(&format!("{job}-worker-")))
                    || (apart && !worker && other.starts_with(&format!("{job}-")))
            })
            .map(|(_, n)| n.clone())
            .collect();
        let free: Vec<&String> = allowed.iter().filter(|n| !taken.contains(n)).collect();
        let node = if free.is_empty() {
            allowed[i % allowed.len()].clone()
        } else {
            free[i % free.len()].clone()
        };
        placed.insert(name, node.clone());
        node
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
pub(super) async fn kubelet(
    logs: Arc<Mutex<HashMap<String, String>>>,
    placed: Placed,
    root: std::path::PathBuf,
    execs: super::Execs,
) -> u16 {
    // the API server does not verify kubelet certificates unless told to (no --kubelet-certificate-authority)
    let (acceptor, _) = super::super::tls_acceptor(&["localhost", "127.0.0.1"]);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let (acceptor, logs, placed) = (acceptor.clone(), logs.clone(), placed.clone());
            let (root, execs) = (root.clone(), execs.clone());
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
                if path.starts_with("/exec/") {
                    let head = String::from_utf8_lossy(&head).into_owned();
                    super::dynamo::exec(tls, &head, &root, &execs).await;
                    return;
                }
                // /containerLogs/<ns>/<pod>/<container>: launcher and main pods print the test's output, a
                // deployment's pods their service's
                let pod = path.split('/').nth(3).unwrap_or("");
                let service = ["frontend", "decode", "prefill"]
                    .into_iter()
                    .find(|s| pod.contains(&format!("-{s}-")));
                let role = if pod.ends_with("-launcher") {
                    "launcher"
                } else if pod.contains("-worker-") {
                    "worker"
                } else {
                    service.unwrap_or("main")
                };
                // a launcher prints what its workers' nodes measured
                let workers: Vec<String> = pod
                    .strip_suffix("-launcher")
                    .map(|job| {
                        let placed = placed.lock().unwrap();
                        placed
                            .iter()
                            .filter(|(p, _)| p.starts_with(&format!("{job}-worker-")))
                            .map(|(_, n)| n.clone())
                            .collect()
                    })
                    .unwrap_or_default();
                // a pod of a per-node Job prints its node's own output (`main@<node>`) when the test gives one
                let own = placed.lock().unwrap().get(pod).cloned();
                let body = {
                    let logs = logs.lock().unwrap();
                    workers
                        .iter()
                        .find_map(|n| logs.get(&format!("launcher@{n}")))
                        .or_else(|| own.and_then(|n| logs.get(&format!("{role}@{n}"))))
                        .or_else(|| logs.get(role))
                        .cloned()
                        .unwrap_or_default()
                };
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
