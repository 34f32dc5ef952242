//! A workload's own object as a step (AI Dynamo's DynamoGraphDeployment): its operator makes long-running pods
//! (they serve until deleted), found by the labels we put in each role's pod metadata. The step waits while a pod
//! is not placed (the scheduler's words), runs while they start, and once every pod the object asks for is
//! ready runs the workload's benchmark in one of them ([`super::exec`]); it ends when the benchmark returns, or
//! at once when a pod cannot run (image, eviction, a server that keeps crashing). At its end each role's pod log
//! is kept as `<role>_pod.log`. With no pod at all, it waits as other objects do ([`Kubernetes::podless`]: the
//! object's Warning events, or no operator giving it a status).

use std::collections::BTreeMap;

use serde_json::Value;

use super::manifest::ROLE_LABEL;
use super::observe::Watch;
use super::plan::Step;
use super::state::{self, container_statuses, s};
use super::Kubernetes;
use crate::results::EndReason;
use crate::systems::objects::{Ending, Seen};
use crate::systems::Queued;
use crate::workloads::object::ObjectRun;
use crate::{info, warn};

/// Restarts of a container in CrashLoopBackOff after which the step ends: a server that failed to start this
/// often will not by waiting.
const CRASH_RESTARTS: i64 = 3;

/// What the object's pods say.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum OwnPhase {
    /// Not every pod is made or placed: why (the scheduler's message when no node fits).
    Waiting {
        state: String,
        reason: String,
        unschedulable: Option<String>,
    },
    /// Every pod is placed, not all are ready: which one is waited for.
    Starting(String),
    /// Every pod is ready: the pod and container the benchmark runs in.
    Ready { pod: String, container: String },
    Ended {
        state: String,
        reason: String,
        end: Option<EndReason>,
    },
}

fn role_of(p: &Value) -> &str {
    s(p, &["metadata", "labels", ROLE_LABEL])
}

fn first_container(p: &Value) -> String {
    p["spec"]["containers"][0]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn ready(p: &Value) -> bool {
    let mut statuses = container_statuses(p).peekable();
    s(p, &["status", "phase"]) == "Running"
        && statuses.peek().is_some()
        && container_statuses(p).all(|c| c["ready"] == true)
}

/// A container that keeps failing to start, with what its last run said.
fn crash_loop(p: &Value) -> Option<String> {
    container_statuses(p).find_map(|cs| {
        let restarts = cs["restartCount"].as_i64().unwrap_or(0);
        (s(cs, &["state", "waiting", "reason"]) == "CrashLoopBackOff" && restarts >= CRASH_RESTARTS)
            .then(|| {
                let t = &cs["lastState"]["terminated"];
                let mut last = format!("exit code {}", t["exitCode"]);
                for k in ["reason", "message"] {
                    if !s(t, &[k]).is_empty() {
                        last.push_str(&format!(", {}", s(t, &[k]).trim()));
                    }
                }
                format!(
                    "pod {} ({}), container {} keeps failing ({restarts} restarts; last: {last})",
                    state::name(p),
                    role_of(p),
                    s(cs, &["name"])
                )
            })
    })
}

/// The step's phase from the object and the pods it made so far (pure).
pub(crate) fn phase(run: &ObjectRun, obj: &Value, pods: &[&Value]) -> OwnPhase {
    let mut sorted: Vec<&Value> = pods.to_vec();
    sorted.sort_by_key(|p| state::name(p));
    for p in &sorted {
        if let Some((state, reason, end)) = state::fatal(p) {
            return OwnPhase::Ended { state, reason, end };
        }
        if let Some(reason) = crash_loop(p) {
            return OwnPhase::Ended {
                state: "CrashLoopBackOff".into(),
                reason,
                end: None,
            };
        }
    }
    let kind = s(obj, &["kind"]);
    if let Some((_, r, m)) = state::true_conditions(obj)
        .into_iter()
        .find(|c| c.0 == "Failed")
    {
        return OwnPhase::Ended {
            state: "Failed".into(),
            reason: format!(
                "{kind} {} failed ({})",
                state::name(obj),
                state::with_message(r, m)
            ),
            end: None,
        };
    }
    let mut made: BTreeMap<&str, u64> = BTreeMap::new();
    for p in &sorted {
        *made.entry(role_of(p)).or_default() += 1;
    }
    let missing: Vec<String> = run
        .roles
        .iter()
        .filter_map(|r| {
            let n = made.get(r.name.as_str()).copied().unwrap_or(0);
            (n < r.pods).then(|| format!("{}: {n} of {}", r.name, r.pods))
        })
        .collect();
    if let Some((reason, unschedulable)) = sorted.iter().find_map(|p| state::pending_reason(p)) {
        return OwnPhase::Waiting {
            state: "Pending".into(),
            reason,
            unschedulable,
        };
    }
    if !missing.is_empty() {
        return OwnPhase::Waiting {
            state: "Created".into(),
            reason: format!(
                "waiting for the operator to make the pods of {kind} {} ({})",
                state::name(obj),
                missing.join(", ")
            ),
            unschedulable: None,
        };
    }
    if let Some(p) = sorted.iter().find(|p| !ready(p)) {
        let total = sorted.len();
        let n = sorted.iter().filter(|p| ready(p)).count();
        return OwnPhase::Starting(format!(
            "{n} of {total} pods ready; waiting for pod {} ({})",
            state::name(p),
            role_of(p)
        ));
    }
    let bench = &run.bench.role;
    match sorted.iter().find(|p| role_of(p) == bench) {
        Some(p) => OwnPhase::Ready {
            pod: state::name(p).to_string(),
            container: first_container(p),
        },
        None => OwnPhase::Waiting {
            state: "Created".into(),
            reason: format!("no {bench} pod to run the benchmark in"),
            unschedulable: None,
        },
    }
}

impl Kubernetes {
    /// One look at the object's step: the benchmark's end, or what its pods say (starting the benchmark once
    /// they are all ready); `podless`: why it has no pod yet, when it has none ([`Kubernetes::podless`]).
    pub(super) fn look_own(
        &self,
        step: &Step,
        w: &mut Watch,
        obj: &Value,
        pods: &[&Value],
        podless: Option<String>,
    ) -> Seen {
        let Some(own) = step.spec.own.as_ref() else {
            return Seen::Running;
        };
        if let Some(b) = w.bench.as_mut() {
            return match b.finished() {
                None => Seen::Running,
                Some(Ok(())) => Seen::Ended(Ending {
                    state: "Completed".into(),
                    reason: format!("{} ran in pod {}", own.run.bench.log, b.pod()),
                    ..Default::default()
                }),
                Some(Err(why)) => Seen::Ended(Ending {
                    state: "BenchmarkFailed".into(),
                    failed: true,
                    reason: why.to_string(),
                    ..Default::default()
                }),
            };
        }
        match phase(&own.run, obj, pods) {
            OwnPhase::Waiting {
                state,
                reason,
                unschedulable,
            } => {
                let blocked = unschedulable.or(podless);
                Seen::Waiting(Queued {
                    state,
                    reason: blocked.clone().unwrap_or(reason),
                    blocked,
                    ..Queued::default()
                })
            }
            OwnPhase::Starting(why) => {
                if w.own_said != why {
                    info!("{} {}: {why}", step.spec.kind_name(), step.name);
                    w.own_said = why;
                }
                Seen::Running
            }
            OwnPhase::Ready { pod, container } => {
                let Some(c) = self.conn.get() else {
                    return Seen::Running;
                };
                if let Err(e) = std::fs::create_dir_all(&step.dir) {
                    warn!("Cannot create {}: {e}", step.dir.display());
                }
                info!(
                    "{} {}: every pod is ready",
                    step.spec.kind_name(),
                    step.name
                );
                w.bench = Some(super::exec::Bench::start(
                    self.pod_api(c),
                    pod,
                    container,
                    own.run.bench.clone(),
                    step.dir.clone(),
                    self.wake.clone(),
                ));
                Seen::Running
            }
            OwnPhase::Ended { state, reason, end } => Seen::Ended(Ending {
                state,
                failed: true,
                reason,
                end,
                ..Default::default()
            }),
        }
    }

    /// The step ended or is cancelled: its benchmark stopped if still running, each role's first pod's log into
    /// `<role>_pod.log` while the pods exist.
    pub(super) async fn end_own(&self, step: &Step, w: &mut Watch, pods: &[&Value]) {
        w.bench = None;
        let (Some(own), Some(c)) = (step.spec.own.as_ref(), self.conn.get()) else {
            return;
        };
        let api = self.pod_api(c);
        let mut sorted: Vec<&Value> = pods.to_vec();
        sorted.sort_by_key(|p| state::name(p));
        for role in &own.run.roles {
            let Some(p) = sorted.iter().find(|p| role_of(p) == role.name) else {
                continue;
            };
            let out = step.dir.join(format!("{}_pod.log", role.name));
            super::logs::write_whole(&api, state::name(p), &first_container(p), &out).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::workloads::object::{ObjectBench, PodRole};

    fn run() -> ObjectRun {
        let role = |n: &str, pods| PodRole {
            name: n.into(),
            labels_at: String::new(),
            pods,
        };
        ObjectRun {
            kind: crate::workloads::object::OwnKind {
                group: "example.com",
                version: "v1",
                kind: "Thing",
                plural: "things",
            },
            roles: vec![role("decode", 2), role("frontend", 1)],
            bench: ObjectBench {
                role: "frontend".into(),
                script: "b.sh".into(),
                args: vec![],
                log: "b.log",
                fetch: "/tmp/r".into(),
                done: None,
            },
        }
    }

    fn pod(name: &str, role: &str, status: Value) -> Value {
        json!({"metadata": {"name": name, "labels": {ROLE_LABEL: role}},
               "spec": {"containers": [{"name": "main"}], "nodeName": "n1"}, "status": status})
    }

    fn running(ready: bool) -> Value {
        json!({"phase": "Running", "containerStatuses": [{"name": "main", "ready": ready, "restartCount": 0,
               "state": {"running": {}}}]})
    }

    const OBJ: &str = r#"{"kind": "Thing", "metadata": {"name": "t"}}"#;

    #[test]
    fn waits_for_every_pod_then_for_readiness_then_names_the_bench_pod() {
        let obj: Value = serde_json::from_str(OBJ).unwrap();
        let r = run();
        let d0 = pod("t-decode-0", "decode", running(true));
        let f = pod("t-frontend-0", "frontend", running(true));
        match phase(&r, &obj, &[&d0, &f]) {
            OwnPhase::Waiting { reason, .. } => {
                assert!(reason.contains("decode: 1 of 2"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        let d1 = pod("t-decode-1", "decode", running(false));
        assert_eq!(
            phase(&r, &obj, &[&d0, &d1, &f]),
            OwnPhase::Starting("2 of 3 pods ready; waiting for pod t-decode-1 (decode)".into())
        );
        let d1 = pod("t-decode-1", "decode", running(true));
        assert_eq!(
            phase(&r, &obj, &[&f, &d0, &d1]),
            OwnPhase::Ready {
                pod: "t-frontend-0".into(),
                container: "main".into()
            }
        );
    }

    #[test]
    fn unplaced_pod_waits_with_the_schedulers_words() {
        let obj: Value = serde_json::from_str(OBJ).unwrap();
        let msg = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.";
        let p = pod(
            "t-decode-0",
            "decode",
            json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                   "reason": "Unschedulable", "message": msg}]}),
        );
        match phase(&run(), &obj, &[&p]) {
            OwnPhase::Waiting { unschedulable, .. } => {
                assert_eq!(unschedulable.as_deref(), Some(msg))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_server_that_keeps_crashing_ends_the_step() {
        let obj: Value = serde_json::from_str(OBJ).unwrap();
        let crashing = |restarts| {
            pod(
                "t-decode-0",
                "decode",
                json!({"phase": "Running", "containerStatuses": [{"name": "main", "ready": false,
                    "restartCount": restarts, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                    "message": "torch.OutOfMemoryError: CUDA out of memory"}}}]}),
            )
        };
        let once = crashing(1);
        assert!(matches!(
            phase(&run(), &obj, &[&once]),
            OwnPhase::Waiting { .. }
        ));
        let often = crashing(CRASH_RESTARTS);
        match phase(&run(), &obj, &[&often]) {
            OwnPhase::Ended { state, reason, .. } => {
                assert_eq!(state, "CrashLoopBackOff");
                assert!(
                    reason.contains("t-decode-0 (decode)") && reason.contains("CUDA out of memory"),
                    "{reason}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn failed_condition_of_the_object_ends_the_step() {
        let obj = json!({"kind": "Thing", "metadata": {"name": "t"}, "status": {"conditions": [
            {"type": "Failed", "status": "True", "reason": "InvalidSpec", "message": "bad service"}]}});
        match phase(&run(), &obj, &[]) {
            OwnPhase::Ended { reason, .. } => {
                assert!(
                    reason.contains("Thing t failed") && reason.contains("bad service"),
                    "{reason}"
                )
            }
            other => panic!("{other:?}"),
        }
    }
}
