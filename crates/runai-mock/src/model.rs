//! Mock state: tokens, workloads and their time-driven phases, events and pods. Phases are derived from the
//! clock on every read, so the state is small and survives a restart (it is saved as JSON).

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// How long each phase lasts and how a workload ends.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Timing {
    pub create_s: f64,
    pub pending_s: f64,
    pub init_s: f64,
    pub run_s: f64,
    pub delete_s: f64,
    /// `completed`, `failed`, `degraded` (Degraded then Failed), `stuck` (never leaves Running) or `image_pull`
    /// (never leaves Initializing: the image cannot be pulled).
    pub outcome: String,
    /// How long a deleted workload stays visible (its `deletedAt` set, phase `Stopped`) before GETs answer 404.
    #[serde(default)]
    pub visible_deleted_s: f64,
    /// Preempted this long after it started running (0: never): Pending for a second, then it runs again from the
    /// start (a new pod, a new log).
    #[serde(default)]
    pub preempt_after_s: f64,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            create_s: 1.0,
            pending_s: 0.0,
            init_s: 1.0,
            run_s: 3.0,
            delete_s: 1.0,
            outcome: "completed".into(),
            visible_deleted_s: 0.0,
            preempt_after_s: 0.0,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Workload {
    pub id: String,
    pub name: String,
    pub requested_name: String,
    /// `training` or `distributed`.
    pub kind: String,
    pub project_id: String,
    pub cluster_id: String,
    /// The creation request as sent.
    pub request: Value,
    pub created_at: f64,
    pub deleted_at: Option<f64>,
    pub timing: Timing,
    /// Output served on the logs WebSocket.
    pub stdout: String,
    /// The node of each pod, in `pod_names` order.
    #[serde(default)]
    pub nodes: Vec<String>,
}

pub fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

pub fn iso(t: f64) -> String {
    chrono::DateTime::from_timestamp_millis((t * 1000.0) as i64)
        .unwrap_or_default()
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

/// A deterministic uuid from a seed (ids must be stable across restarts).
pub fn uuid(seed: &str) -> String {
    let mut h: u64 = 0xcbf29ce484222325;
    let mut h2: u64 = 0x84222325cbf29ce4;
    for b in seed.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x100000001b3);
        h2 = (h2 ^ b as u64).wrapping_mul(0x100000001b3).rotate_left(7);
    }
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        h >> 32,
        (h >> 16) & 0xffff,
        h & 0xfff,
        h2 & 0xfff,
        (h2 >> 16) & 0xffff_ffff_ffff
    )
}

/// How long a preempted workload waits before it runs again.
pub const PREEMPTED_S: f64 = 1.0;

/// Phase changes of a workload up to `t`: (time, phase).
pub fn timeline(w: &Workload, t: f64) -> Vec<(f64, &'static str)> {
    let tm = &w.timing;
    let mut out = vec![(w.created_at, "Creating")];
    let mut at = w.created_at + tm.create_s;
    let mut steps: Vec<(f64, &'static str)> = Vec::new();
    if tm.pending_s > 0.0 {
        steps.push((at, "Pending"));
        at += tm.pending_s;
    }
    steps.push((at, "Initializing"));
    at += tm.init_s;
    // an image that cannot be pulled: Initializing for ever, the kubelet's events say why
    let pull_fails = tm.outcome == "image_pull";
    if !pull_fails {
        steps.push((at, "Running"));
        if tm.preempt_after_s > 0.0 && tm.preempt_after_s < tm.run_s {
            steps.push((at + tm.preempt_after_s, "Pending"));
            at += tm.preempt_after_s + PREEMPTED_S;
            steps.push((at, "Running"));
        }
    }
    at += tm.run_s;
    match tm.outcome.as_str() {
        "stuck" | "image_pull" => {}
        "failed" => steps.push((at, "Failed")),
        "degraded" => {
            steps.push((at, "Degraded"));
            steps.push((at + tm.run_s, "Failed"));
        }
        _ => steps.push((at, "Completed")),
    }
    for (when, p) in steps {
        if let Some(d) = w.deleted_at {
            if when >= d {
                break;
            }
        }
        out.push((when, p));
    }
    if let Some(d) = w.deleted_at {
        out.push((d, "Deleting"));
        out.push((d + w.timing.delete_s, "Stopped"));
    }
    out.retain(|(when, _)| *when <= t);
    out
}

pub fn phase(w: &Workload, t: f64) -> &'static str {
    timeline(w, t).last().map_or("Creating", |(_, p)| p)
}

/// Gone (404) once deletion has finished and the deleted workload is no longer shown.
pub fn gone(w: &Workload, t: f64) -> bool {
    w.deleted_at
        .is_some_and(|d| t >= d + w.timing.delete_s + w.timing.visible_deleted_s)
}

pub fn is_terminal(p: &str) -> bool {
    matches!(p, "Completed" | "Failed" | "Stopped")
}

pub fn pod_names(w: &Workload) -> Vec<String> {
    if w.kind == "distributed" {
        let n = w.request["spec"]["numWorkers"].as_u64().unwrap_or(1);
        std::iter::once(format!("{}-launcher", w.name))
            .chain((0..n).map(|i| format!("{}-worker-{i}", w.name)))
            .collect()
    } else {
        let n = w.request["spec"]["parallelism"].as_u64().unwrap_or(1);
        (0..n).map(|i| format!("{}-0-{i}", w.name)).collect()
    }
}

/// The hosts a creation request pins its pods to (`nodeAffinityRequired` on `kubernetes.io/hostname`).
pub fn pinned_hosts(request: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for spec in ["spec", "masterSpec"] {
        for term in request[spec]["nodeAffinityRequired"]["nodeSelectorTerms"]
            .as_array()
            .into_iter()
            .flatten()
        {
            for e in term["matchExpressions"].as_array().into_iter().flatten() {
                if e["key"] == "kubernetes.io/hostname" && e["operator"] == "In" {
                    out.extend(
                        e["values"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|v| v.as_str().map(str::to_string)),
                    );
                }
            }
        }
    }
    out
}

/// Where the pods of a new workload run: a distributed workload's launcher on the first node, its workers (or a
/// training's replicas) on the pinned hosts in turn, else on the cluster's nodes in turn; `ignore_pins` places them
/// on nodes that were not asked for (a scheduler that does not honour the affinity).
pub fn place(w: &Workload, cluster: &[String], ignore_pins: bool) -> Vec<String> {
    let pinned = pinned_hosts(&w.request);
    let others: Vec<String> = cluster
        .iter()
        .filter(|n| !pinned.contains(n))
        .cloned()
        .collect();
    let pool: &[String] = if pinned.is_empty() {
        cluster
    } else if ignore_pins && !others.is_empty() {
        &others
    } else {
        &pinned
    };
    let fallback = |i: usize| format!("node-{i}");
    let at = |i: usize| {
        if pool.is_empty() {
            fallback(i)
        } else {
            pool[i % pool.len()].clone()
        }
    };
    pod_names(w)
        .iter()
        .enumerate()
        .map(|(i, p)| {
            if p.ends_with("-launcher") {
                cluster.first().cloned().unwrap_or_else(|| fallback(0))
            } else if w.kind == "distributed" {
                at(i - 1)
            } else {
                at(i)
            }
        })
        .collect()
}

/// Kubernetes-style events per transition, as the Run:ai events endpoint returns them.
pub fn events(w: &Workload, t: f64, namespace: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let pods = pod_names(w);
    let image = w.request["spec"]["image"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let mut push = |at: f64, ty: &str, reason: &str, message: String, kind: &str, obj: &str| {
        let n = out.len();
        out.push(json!({
            "createdAt": iso(at), "id": uuid(&format!("{}-event-{n}", w.id)), "type": ty, "clusterId": w.cluster_id,
            "message": message, "reason": reason, "source": "runai-job-controller",
            "involvedObject": {"uid": uuid(&format!("{}-{obj}", w.id)), "kind": kind, "name": obj, "namespace": namespace}
        }));
    };
    push(
        w.created_at,
        "Normal",
        "Submitted",
        "Workload submitted".into(),
        "Workload",
        &w.name,
    );
    for (at, p) in timeline(w, t) {
        match p {
            "Pending" => {
                for pod in &pods {
                    push(
                        at,
                        "Normal",
                        "Scheduling",
                        "Waiting for resources".into(),
                        "Pod",
                        pod,
                    );
                }
            }
            "Initializing" => {
                for (i, pod) in pods.iter().enumerate() {
                    push(
                        at,
                        "Normal",
                        "Scheduled",
                        format!(
                            "Successfully assigned {namespace}/{pod} to {}",
                            w.nodes
                                .get(i)
                                .cloned()
                                .unwrap_or_else(|| format!("node-{i}"))
                        ),
                        "Pod",
                        pod,
                    );
                    if w.timing.outcome == "image_pull" {
                        push(
                            at,
                            "Warning",
                            "Failed",
                            format!(
                                "Failed to pull image \"{image}\": rpc error: code = NotFound desc = failed to \
                                 pull and unpack image \"{image}\": not found"
                            ),
                            "Pod",
                            pod,
                        );
                        push(
                            at,
                            "Warning",
                            "BackOff",
                            format!("Back-off pulling image \"{image}\""),
                            "Pod",
                            pod,
                        );
                        continue;
                    }
                    push(
                        at,
                        "Normal",
                        "Pulled",
                        format!("Container image \"{image}\" already present on machine"),
                        "Pod",
                        pod,
                    );
                }
            }
            "Running" => {
                for pod in &pods {
                    push(
                        at,
                        "Normal",
                        "Started",
                        format!("Started container {}", w.name),
                        "Pod",
                        pod,
                    );
                }
            }
            "Completed" => push(
                at,
                "Normal",
                "Completed",
                "Job completed".into(),
                "RunaiJob",
                &w.name,
            ),
            "Degraded" => push(
                at,
                "Warning",
                "PodFailed",
                format!("Pod {} failed", pods[0]),
                "RunaiJob",
                &w.name,
            ),
            "Failed" => push(
                at,
                "Warning",
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit".into(),
                "RunaiJob",
                &w.name,
            ),
            "Deleting" => {
                for pod in &pods {
                    push(
                        at,
                        "Normal",
                        "Killing",
                        format!("Stopping container {}", w.name),
                        "Pod",
                        pod,
                    );
                }
            }
            _ => {}
        }
    }
    out
}

/// A log printed as this workload's ranks would print it: nccl-tests' Rank lines (`#  Rank  0 … on <host> device
/// 0 …`) become one per GPU of each worker (a distributed workload's `numWorkers` × `slotsPerWorker`, on the worker
/// pods), keeping the original's device names and bus ids. A log without Rank lines, or a single-pod workload, is
/// served as given.
pub fn as_ranks_of(stdout: &str, w: &Workload) -> String {
    if w.kind != "distributed" {
        return stdout.to_string();
    }
    let workers = w.request["spec"]["numWorkers"].as_u64().unwrap_or(1);
    let slots = w.request["spec"]["slotsPerWorker"].as_u64().unwrap_or(1);
    let rank_line = |l: &str| {
        let t = l.trim_start_matches('#').trim_start();
        l.starts_with('#') && t.starts_with("Rank ") && t.contains(" device ")
    };
    let originals: Vec<&str> = stdout.lines().filter(|l| rank_line(l)).collect();
    if originals.is_empty() {
        return stdout.to_string();
    }
    let mut ranks = String::new();
    let mut r = 0;
    for worker in 0..workers {
        let host = format!("{}-worker-{worker}", w.name);
        for d in 0..slots {
            // the original line's device part (`[0000:14:00] NVIDIA A100-SXM4-80GB`) for this local device
            let orig = originals[(d as usize) % originals.len()];
            let tail = orig
                .split_once(" device ")
                .and_then(|(_, rest)| rest.trim_start().split_once(' '))
                .map(|(_, t)| t)
                .unwrap_or("");
            ranks.push_str(&format!(
                "#  Rank {r:2} Group  0 Pid {:6} on {host:>10} device {d:2} {tail}\n",
                100 + d
            ));
            r += 1;
        }
    }
    let mut out = String::new();
    let mut done = false;
    for l in stdout.split_inclusive('\n') {
        if rank_line(l.trim_end_matches(['\n', '\r'])) {
            if !done {
                out.push_str(&ranks);
                done = true;
            }
            continue;
        }
        out.push_str(l);
    }
    out
}
