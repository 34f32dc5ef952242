//! What a workload says about a step (`GET /api/v1/workloads/{id}`: `phase`, `phaseMessage`,
//! `pendingSchedulingMessages`, `deletedAt`), in Run:ai's words. Pure.

use serde_json::Value;

#[derive(Clone, Debug, PartialEq)]
pub enum Phase {
    /// Not running yet: the phase and the control plane's message, when it gives one.
    Waiting {
        state: String,
        reason: String,
    },
    Running,
    /// A pod failed, the others run on: it may recover.
    Degraded,
    Ended {
        ok: bool,
        state: String,
    },
}

/// The phase name in the workload's GET answer.
pub fn phase(workload: &Value) -> &str {
    workload["phase"]
        .as_str()
        .or(workload["actualPhase"].as_str())
        .unwrap_or("Unknown")
}

/// The step's phase from the workload's GET answer.
pub(crate) fn evaluate(workload: &Value) -> Phase {
    let state = workload["phase"]
        .as_str()
        .or(workload["actualPhase"].as_str())
        .unwrap_or("Unknown")
        .to_string();
    match state.as_str() {
        "Creating" | "Pending" | "Initializing" | "Resuming" => Phase::Waiting {
            reason: waiting_reason(workload),
            state,
        },
        "Completed" => Phase::Ended { ok: true, state },
        "Failed" | "Stopped" => Phase::Ended { ok: false, state },
        "Degraded" => Phase::Degraded,
        _ => Phase::Running,
    }
}

/// Why a workload waits: the scheduler's messages per node pool, else the phase message.
fn waiting_reason(workload: &Value) -> String {
    let pools: Vec<String> = workload["pendingSchedulingMessages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| {
            let text = m["userMessage"].as_str().or(m["reason"].as_str())?;
            Some(match m["nodePool"].as_str() {
                Some(pool) if !pool.is_empty() => format!("node pool {pool}: {text}"),
                _ => text.to_string(),
            })
        })
        .collect();
    if pools.is_empty() {
        workload["phaseMessage"].as_str().unwrap_or("").to_string()
    } else {
        pools.join("; ")
    }
}

/// Whether the scheduler says it finds no room for the workload (per node pool): waiting past `max_pending_time`
/// then ends it `unschedulable`.
pub fn unschedulable(workload: &Value) -> bool {
    workload["pendingSchedulingMessages"]
        .as_array()
        .is_some_and(|m| !m.is_empty())
}

/// The kubelet's word that an image cannot be pulled, from the workload's events: `pod: message`.
pub(crate) fn image_pull_failure(events: &[Value]) -> Option<String> {
    const REASONS: &[&str] = &[
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "Failed",
        "BackOff",
    ];
    events.iter().find_map(|e| {
        let reason = e["reason"].as_str().unwrap_or("");
        let message = e["message"].as_str().unwrap_or("");
        let pulling = message.contains("pull") && message.contains("image")
            || reason.starts_with("ErrImage")
            || reason == "ImagePullBackOff"
            || reason == "InvalidImageName";
        (e["type"] != "Normal" && REASONS.contains(&reason) && pulling).then(|| {
            format!(
                "pod {}: {reason}: {message}",
                e["involvedObject"]["name"].as_str().unwrap_or("?")
            )
        })
    })
}

/// Whether the API shows the workload as deleted: `deletedAt` set and no longer being torn down (a deleted
/// workload may stay visible for a while; a 404 says the same).
pub fn deleted(workload: &Value) -> bool {
    let set = workload["deletedAt"]
        .as_str()
        .is_some_and(|d| !d.is_empty());
    let phase = workload["actualPhase"]
        .as_str()
        .or(workload["phase"].as_str())
        .unwrap_or("");
    set && !matches!(
        phase,
        "Deleting" | "Terminating" | "Stopping" | "Running" | "Degraded"
    )
}

/// Whether a workload in this phase has run (its log exists).
pub(crate) fn has_run(workload: &Value) -> bool {
    matches!(
        workload["actualPhase"]
            .as_str()
            .or(workload["phase"].as_str())
            .unwrap_or(""),
        "Running" | "Degraded" | "Completed" | "Failed" | "Stopped"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn phases() {
        let w = |p: &str| json!({"actualPhase": p, "phaseMessage": "waiting for GPUs"});
        assert_eq!(
            evaluate(&w("Pending")),
            Phase::Waiting {
                state: "Pending".into(),
                reason: "waiting for GPUs".into()
            }
        );
        assert_eq!(
            evaluate(&w("Completed")),
            Phase::Ended {
                ok: true,
                state: "Completed".into()
            }
        );
        assert!(matches!(
            evaluate(&w("Stopped")),
            Phase::Ended { ok: false, .. }
        ));
        assert_eq!(evaluate(&w("Degraded")), Phase::Degraded);
        assert_eq!(evaluate(&w("Running")), Phase::Running);
        assert!(has_run(&w("Failed")) && !has_run(&w("Initializing")));
        assert!(!deleted(&w("Running")));
        assert!(unschedulable(
            &json!({"pendingSchedulingMessages": [{"reason": "r"}]})
        ));
        assert!(!unschedulable(&json!({"pendingSchedulingMessages": null})));
        let ev = |ty: &str, reason: &str, msg: &str| json!({"type": ty, "reason": reason, "message": msg, "involvedObject": {"name": "w-0-0"}});
        assert_eq!(
            image_pull_failure(&[
                ev("Normal", "Scheduled", "assigned"),
                ev("Warning", "Failed", "Failed to pull image \"x\": not found"),
            ]),
            Some("pod w-0-0: Failed: Failed to pull image \"x\": not found".into())
        );
        assert_eq!(
            image_pull_failure(&[ev("Warning", "Failed", "OOMKilled")]),
            None
        );
        assert!(deleted(
            &json!({"actualPhase": "Completed", "deletedAt": "2026-01-01T00:00:00Z"})
        ));
    }
}
