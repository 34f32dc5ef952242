//! What an object and its pods say about a step, in Kubernetes' own words: waiting (and why: the scheduler's
//! message when no node fits), running, or ended (and why: image pull, eviction, out of memory, the controller's
//! failure condition). Pure: it reads the watched objects, never the API server.

use serde_json::Value;

use super::manifest::Kind;
use crate::results::record::Attempt;
use crate::results::EndReason;

/// Container waiting reasons that mean the image will not come by waiting.
const IMAGE_PULL: &[&str] = &[
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "ErrImageNeverPull",
    "RegistryUnavailable",
];

#[derive(Clone, Debug, PartialEq)]
pub enum Phase {
    Waiting {
        state: String,
        reason: String,
        /// The scheduler's message when it found no node for a pod.
        unschedulable: Option<String>,
    },
    Running,
    Ended {
        ok: bool,
        state: String,
        reason: String,
        end: Option<EndReason>,
    },
}

pub(super) fn s<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    path.iter().fold(v, |v, k| &v[*k]).as_str().unwrap_or("")
}

pub fn name(obj: &Value) -> &str {
    s(obj, &["metadata", "name"])
}

/// Conditions of the object that are true, as (type, reason, message).
pub(super) fn true_conditions(obj: &Value) -> Vec<(&str, &str, &str)> {
    obj["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["status"] == "True")
        .map(|c| (s(c, &["type"]), s(c, &["reason"]), s(c, &["message"])))
        .collect()
}

pub(super) fn container_statuses(pod: &Value) -> impl Iterator<Item = &Value> {
    ["initContainerStatuses", "containerStatuses"]
        .into_iter()
        .flat_map(move |k| pod["status"][k].as_array().into_iter().flatten())
}

pub(super) fn with_message(reason: &str, message: &str) -> String {
    if message.is_empty() {
        reason.to_string()
    } else {
        format!("{reason}: {message}")
    }
}

/// Why a container cannot start, from its current or last state: the runtime could not create or exec it
/// (`StartError`, `RunContainerError`, `CreateContainerError`, `ContainerCannotRun`), in the runtime's words.
fn start_error(cs: &Value) -> Option<(&str, &str)> {
    const CANNOT_START: &[&str] = &[
        "StartError",
        "RunContainerError",
        "CreateContainerError",
        "ContainerCannotRun",
    ];
    [
        &cs["state"]["waiting"],
        &cs["state"]["terminated"],
        &cs["lastState"]["terminated"],
    ]
    .into_iter()
    .map(|st| (s(st, &["reason"]), s(st, &["message"])))
    .find(|(r, _)| CANNOT_START.contains(r))
}

/// The program a runtime could not exec (`exec: "/usr/sbin/sshd": stat …: no such file or directory`).
fn missing_program(message: &str) -> Option<&str> {
    if !message.contains("no such file or directory") && !message.contains("not found") {
        return None;
    }
    let rest = &message[message.find("exec: \"")? + 7..];
    rest.split('"').next().filter(|p| !p.is_empty())
}

/// A container that cannot start, named: a missing program by its path (and, for an MPI worker, what it is
/// for), anything else in the runtime's words.
fn cannot_start(pod: &Value, cs: &Value, reason: &str, message: &str) -> String {
    let cname = s(cs, &["name"]);
    let image = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == cname)
        .map(|c| s(c, &["image"]))
        .unwrap_or("");
    let role = s(pod, &["metadata", "labels", super::manifest::ROLE_LABEL]);
    let head = format!("pod {}, container {cname} cannot start", name(pod));
    match missing_program(message) {
        Some(prog) if role == "worker" && prog.ends_with("sshd") => format!(
            "{head}: image {image} has no {prog}; MPIJob workers need an SSH server (install openssh-server in \
             the image, or set mpi_worker_command to what starts one) ({reason})"
        ),
        Some(prog) => format!("{head}: image {image} has no {prog} ({reason})"),
        None => format!("{head}: {}", with_message(reason, message)),
    }
}

/// A pod problem that ends the step at once, whatever the controller says.
pub(super) fn fatal(pod: &Value) -> Option<(String, String, Option<EndReason>)> {
    let pname = name(pod);
    for cs in container_statuses(pod) {
        if let Some((reason, message)) = start_error(cs) {
            return Some((
                reason.to_string(),
                cannot_start(pod, cs, reason, message),
                None,
            ));
        }
        // our own worker script names what it cannot do (an image without sshd) in its termination message
        if let Some(said) = ["state", "lastState"]
            .iter()
            .map(|k| s(&cs[*k]["terminated"], &["message"]))
            .find(|m| m.starts_with("cloudai: "))
        {
            return Some((
                "ContainerCannotRun".into(),
                format!(
                    "pod {pname}, container {}: {}",
                    s(cs, &["name"]),
                    said.trim_start_matches("cloudai: ").trim_end()
                ),
                None,
            ));
        }
        let waiting = &cs["state"]["waiting"];
        let reason = s(waiting, &["reason"]);
        if IMAGE_PULL.contains(&reason) {
            return Some((
                reason.to_string(),
                format!(
                    "pod {pname}, container {}: {}",
                    s(cs, &["name"]),
                    with_message(reason, s(waiting, &["message"]))
                ),
                Some(EndReason::ImagePullFailed),
            ));
        }
    }
    if s(pod, &["status", "phase"]) == "Failed" && s(pod, &["status", "reason"]) == "Evicted" {
        return Some((
            "Evicted".into(),
            format!(
                "pod {pname} on node {} was evicted: {}",
                s(pod, &["spec", "nodeName"]),
                s(pod, &["status", "message"])
            ),
            Some(EndReason::Evicted),
        ));
    }
    None
}

/// A container that was killed for memory, now or in an earlier run.
fn oom_killed(pod: &Value) -> Option<String> {
    container_statuses(pod).find_map(|cs| {
        ["state", "lastState"]
            .iter()
            .any(|k| cs[*k]["terminated"]["reason"] == "OOMKilled")
            .then(|| {
                format!(
                    "pod {}, container {} was OOMKilled",
                    name(pod),
                    s(cs, &["name"])
                )
            })
    })
}

/// Why a pod is not running yet, and the scheduler's message when no node fits it.
pub(super) fn pending_reason(pod: &Value) -> Option<(String, Option<String>)> {
    if s(pod, &["status", "phase"]) != "Pending" && !s(pod, &["status", "phase"]).is_empty() {
        return None;
    }
    let conds = pod["status"]["conditions"].as_array();
    if let Some(c) = conds
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "PodScheduled" && c["status"] == "False")
    {
        let msg = s(c, &["message"]).to_string();
        let reason = s(c, &["reason"]);
        let unsched = (reason == "Unschedulable").then(|| msg.clone());
        return Some((with_message(reason, &msg), unsched));
    }
    for cs in container_statuses(pod) {
        let r = s(cs, &["state", "waiting", "reason"]);
        if !r.is_empty() {
            return Some((format!("pod {}: {r}", name(pod)), None));
        }
    }
    Some((format!("pod {} pending", name(pod)), None))
}

/// The step's phase from its object (Job or MPIJob) and the pods it made.
pub(crate) fn evaluate(kind: Kind, obj: &Value, pods: &[&Value]) -> Phase {
    for p in pods {
        if let Some((state, reason, end)) = fatal(p) {
            return Phase::Ended {
                ok: false,
                state,
                reason,
                end,
            };
        }
    }
    let (done, failed) = match kind {
        Kind::Job => ("Complete", "Failed"),
        Kind::MpiJob => ("Succeeded", "Failed"),
        // its pods serve until deleted: see `own::phase`
        Kind::Own => ("", "Failed"),
    };
    let conds = true_conditions(obj);
    if let Some((t, r, m)) = conds.iter().find(|c| c.0 == done || c.0 == failed) {
        let ok = *t == done;
        let oom = pods.iter().find_map(|p| oom_killed(p));
        let end = if ok {
            None
        } else if oom.is_some() {
            Some(EndReason::OutOfMemory)
        } else if *r == "DeadlineExceeded" {
            Some(EndReason::TimeLimit)
        } else {
            None
        };
        let mut reason = format!("{} {} {t}", kind.name(), name(obj));
        if !r.is_empty() || !m.is_empty() {
            reason = format!("{reason} ({})", with_message(r, m));
        }
        if let (false, Some(o)) = (ok, oom) {
            reason = format!("{reason}; {o}");
        }
        return Phase::Ended {
            ok,
            state: t.to_string(),
            reason,
            end,
        };
    }
    let running = pods.iter().any(|p| s(p, &["status", "phase"]) == "Running")
        || conds.iter().any(|c| c.0 == "Running");
    // every pod must be placed before the test can start: the first one that waits says why
    let mut sorted: Vec<&&Value> = pods.iter().collect();
    sorted.sort_by_key(|p| name(p));
    let waiting = sorted.iter().find_map(|p| pending_reason(p));
    match waiting {
        Some((reason, unschedulable)) if !running || unschedulable.is_some() => Phase::Waiting {
            state: "Pending".into(),
            reason,
            unschedulable,
        },
        _ if running || !pods.is_empty() => Phase::Running,
        _ => Phase::Waiting {
            state: "Created".into(),
            reason: "waiting for pods".into(),
            unschedulable: None,
        },
    }
}

/// Hosts the pods run on (workers of an MPIJob, the pod of a Job), sorted.
pub fn nodes(pods: &[&Value]) -> Vec<String> {
    let mut n: Vec<String> = pods
        .iter()
        .filter(|p| p["metadata"]["labels"][super::manifest::ROLE_LABEL] != "launcher")
        .map(|p| s(p, &["spec", "nodeName"]).to_string())
        .filter(|n| !n.is_empty())
        .collect();
    n.sort();
    n.dedup();
    n
}

/// Total container restarts of a pod.
pub fn restarts(pod: &Value) -> i64 {
    container_statuses(pod)
        .map(|cs| cs["restartCount"].as_i64().unwrap_or(0))
        .sum()
}

/// The earlier runs of a pod's containers that ended and were restarted (the last one each keeps in
/// `lastState`).
pub(crate) fn restart_attempt(pod: &Value) -> Option<Attempt> {
    let cs = container_statuses(pod).find(|cs| cs["restartCount"].as_i64().unwrap_or(0) > 0)?;
    let t = &cs["lastState"]["terminated"];
    let node = s(pod, &["spec", "nodeName"]);
    Some(Attempt {
        nodes: if node.is_empty() {
            vec![]
        } else {
            vec![node.to_string()]
        },
        state: if s(t, &["reason"]).is_empty() {
            "Restarted".into()
        } else {
            s(t, &["reason"]).to_string()
        },
        reason: format!(
            "pod {}, container {} restarted (restart {}{})",
            name(pod),
            s(cs, &["name"]),
            cs["restartCount"],
            t["exitCode"]
                .as_i64()
                .map(|c| format!(", exit code {c}"))
                .unwrap_or_default()
        ),
        start: Some(s(t, &["startedAt"]).to_string()).filter(|x| !x.is_empty()),
        end: Some(s(t, &["finishedAt"]).to_string()).filter(|x| !x.is_empty()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(status: Value) -> Value {
        json!({"metadata": {"name": "p-0", "labels": {}}, "spec": {"nodeName": "n1"}, "status": status})
    }

    #[test]
    fn unschedulable_pod_waits_with_the_schedulers_words() {
        let p = pod(
            json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable", "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."}]}),
        );
        let job = json!({"metadata": {"name": "j"}, "status": {"active": 1}});
        let Phase::Waiting {
            unschedulable,
            reason,
            ..
        } = evaluate(Kind::Job, &job, &[&p])
        else {
            panic!("not waiting")
        };
        assert_eq!(
            unschedulable.as_deref(),
            Some("0/4 nodes are available: 4 Insufficient nvidia.com/gpu.")
        );
        assert!(reason.starts_with("Unschedulable: 0/4"));
    }

    #[test]
    fn a_worker_without_sshd_is_named() {
        let mut p = pod(
            json!({"phase": "Running", "containerStatuses": [{"name": "worker",
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s"}},
            "lastState": {"terminated": {"reason": "StartError", "exitCode": 128, "message":
                "failed to create containerd task: ... unable to start container process: exec: \"/usr/sbin/sshd\": \
                 stat /usr/sbin/sshd: no such file or directory: unknown"}}}]}),
        );
        p["metadata"]["labels"] = json!({"cloudai-role": "worker"});
        p["spec"] = json!({"containers": [{"name": "worker", "image": "img:1"}]});
        match evaluate(Kind::MpiJob, &json!({}), &[&p]) {
            Phase::Ended {
                ok, state, reason, ..
            } => {
                assert!(!ok);
                assert_eq!(state, "StartError");
                assert!(
                    reason.contains(
                        "image img:1 has no /usr/sbin/sshd; MPIJob workers need an SSH server"
                    ),
                    "{reason}"
                );
            }
            other => panic!("{other:?}"),
        }
        // another program, another role: named by its path
        p["metadata"]["labels"] = json!({"cloudai-role": "main"});
        let Phase::Ended { reason, .. } = evaluate(Kind::Job, &json!({}), &[&p]) else {
            panic!()
        };
        assert!(
            reason.ends_with("image img:1 has no /usr/sbin/sshd (StartError)"),
            "{reason}"
        );
    }

    #[test]
    fn a_worker_script_that_names_its_trouble_ends_the_step() {
        let mut p = pod(
            json!({"phase": "Running", "containerStatuses": [{"name": "worker",
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s"}},
            "lastState": {"terminated": {"reason": "Error", "exitCode": 127, "message":
                "cloudai: the image img:1 has no sshd (/usr/sbin/sshd, nor sshd on PATH): MPI workers need an SSH \
                 server\n"}}}]}),
        );
        p["metadata"]["labels"] = json!({"cloudai-role": "worker"});
        let Phase::Ended { ok, reason, .. } = evaluate(Kind::MpiJob, &json!({}), &[&p]) else {
            panic!()
        };
        assert!(!ok);
        assert!(
            reason.ends_with("container worker: the image img:1 has no sshd (/usr/sbin/sshd, nor sshd on PATH): MPI workers need an SSH server"),
            "{reason}"
        );
    }

    #[test]
    fn image_pull_ends_at_once() {
        let p = pod(
            json!({"phase": "Pending", "containerStatuses": [{"name": "main", "restartCount": 0,
            "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image \"x\""}}}]}),
        );
        let job = json!({"metadata": {"name": "j"}});
        match evaluate(Kind::Job, &job, &[&p]) {
            Phase::Ended {
                ok: false,
                end: Some(EndReason::ImagePullFailed),
                reason,
                ..
            } => {
                assert!(reason.contains("Back-off pulling image"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn conditions_decide_the_end() {
        let ok = json!({"metadata": {"name": "j"}, "status": {"conditions": [{"type": "Complete", "status": "True"}]}});
        assert!(matches!(
            evaluate(Kind::Job, &ok, &[]),
            Phase::Ended { ok: true, .. }
        ));
        let failed = json!({"metadata": {"name": "m"}, "status": {"conditions": [
            {"type": "Running", "status": "False"},
            {"type": "Failed", "status": "True", "reason": "MPIJobFailed", "message": "launcher failed"}]}});
        let oom = pod(
            json!({"phase": "Running", "containerStatuses": [{"name": "worker", "restartCount": 1,
            "state": {"running": {}}, "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}]}),
        );
        match evaluate(Kind::MpiJob, &failed, &[&oom]) {
            Phase::Ended {
                ok: false,
                end: Some(EndReason::OutOfMemory),
                reason,
                ..
            } => {
                assert!(
                    reason.contains("MPIJobFailed: launcher failed")
                        && reason.contains("OOMKilled"),
                    "{reason}"
                )
            }
            other => panic!("{other:?}"),
        }
        let a = restart_attempt(&oom).unwrap();
        assert_eq!(
            (a.state.as_str(), a.nodes.clone()),
            ("OOMKilled", vec!["n1".to_string()])
        );
        let evicted =
            pod(json!({"phase": "Failed", "reason": "Evicted", "message": "low on memory"}));
        assert!(matches!(
            evaluate(Kind::Job, &json!({}), &[&evicted]),
            Phase::Ended {
                end: Some(EndReason::Evicted),
                ..
            }
        ));
    }

    #[test]
    fn running_and_created() {
        let job = json!({"metadata": {"name": "j"}});
        assert!(matches!(
            evaluate(Kind::Job, &job, &[]),
            Phase::Waiting { .. }
        ));
        let p = pod(json!({"phase": "Running"}));
        assert_eq!(evaluate(Kind::Job, &job, &[&p]), Phase::Running);
        assert_eq!(nodes(&[&p]), vec!["n1".to_string()]);
    }
}
