//! Slurm job states from `squeue` (live) and `sacct` (final), mapped to our outcome with a reason.

use crate::results::EndReason;
use crate::workloads::JobOutcome;

#[derive(Clone, Debug, PartialEq)]
pub enum Live {
    /// State name and Slurm's reason.
    Pending(String, String),
    /// Hosts (`%N`, compressed).
    Running(String),
}

/// `squeue --Format` for [`parse_squeue`]: `:|` ends each field with `|` and no padding. RestartCnt counts
/// requeues, so a requeue is seen even when the job ran again between two polls.
pub(crate) const SQUEUE_FORMAT: &str = "JobID:|,State:|,Reason:|,NodeList:|,RestartCnt:|";

/// `squeue -h -O <SQUEUE_FORMAT>` → (job id, live state with the pending reason or the nodes, restart count).
pub(crate) fn parse_squeue(text: &str) -> Vec<(String, Live, Option<u32>)> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.trim().split('|');
            let (id, state) = (it.next()?.trim(), it.next()?.trim());
            let reason = it.next().unwrap_or("").trim();
            let nodes = it.next().unwrap_or("").trim();
            let restarts = it.next().and_then(|r| r.trim().parse().ok());
            if id.is_empty() {
                return None;
            }
            let live = match state {
                "PENDING" | "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" | "RESV_DEL_HOLD" => {
                    Live::Pending(state.to_string(), reason.to_string())
                }
                _ => Live::Running(nodes.to_string()),
            };
            Some((id.to_string(), live, restarts))
        })
        .collect()
}

/// Pending reasons that waiting cannot resolve: the job as submitted does not fit the partition, account, QOS or
/// constraints (squeue(1) "JOB REASON CODES"). Group limits (`AssocGrp*`, `QOSGrp*`) and per-user limits clear when
/// other jobs end, so they are not here; `ReqNodeNotAvail` depends on the nodes' state (see [`unavailable_nodes`]).
pub(crate) fn hopeless_reason(reason: &str) -> Option<&'static str> {
    let code = reason.split([',', ' ', '(']).next().unwrap_or("");
    Some(match code {
        "PartitionNodeLimit" => "the job asks for more nodes than its partition has or allows",
        "PartitionConfig" => {
            "the partition cannot provide what the job asks for (nodes, CPUs, GPUs, memory)"
        }
        "PartitionTimeLimit" => "the job's time limit is longer than its partition allows",
        "PartitionDown" => "the job's partition is DOWN",
        "PartitionInactive" => "the job's partition is INACTIVE",
        "BadConstraints" => "no node can satisfy the job's constraints (features, GPUs, memory)",
        "InvalidAccount" => "the job's account is not valid on this cluster",
        "InvalidQOS" => "the job's QOS is not valid for its account",
        "AccountNotAllowed" => "the job's account may not use its partition",
        "QOSNotAllowed" => "the job's QOS may not use its partition",
        "DependencyNeverSatisfied" => "the job's dependency can never be satisfied",
        "NodeDown" => "a node the job requires is DOWN",
        "MaxMemPerLimit" => "the job asks for more memory per CPU or node than allowed",
        "InvalidReservation" | "ReservationDeleted" => "the job's reservation does not exist",
        c if (c.starts_with("QOSMax") || c.starts_with("AssocMax")) && c.contains("PerJob") => {
            "the job alone exceeds a per-job limit of its QOS or association"
        }
        _ => return None,
    })
}

/// `ReqNodeNotAvail, UnavailableNodes:node[003-004]` → `node[003-004]` (the nodes the job needs that are not
/// available; whether they can become available is up to their state).
pub(crate) fn unavailable_nodes(reason: &str) -> Option<&str> {
    if !reason.starts_with("ReqNodeNotAvail") {
        return None;
    }
    let list = reason.split_once("UnavailableNodes:")?.1.trim();
    (!list.is_empty()).then_some(list)
}

/// One `sacct -P` row of `JobID,JobName,State,ExitCode,NodeList,Start,End,ElapsedRaw,Reason`.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct AcctRow {
    pub job_id: String,
    pub name: String,
    pub state: String,
    /// The state as sacct printed it (`CANCELLED by 1000`).
    pub state_raw: String,
    pub exit_code: String,
    pub nodes: String,
    pub start: String,
    pub end: String,
    pub elapsed: i64,
    /// Slurm's reason for the record (`BeginTime` for a requeued run), empty for `None`.
    pub reason: String,
}

pub(crate) const SACCT_FORMAT: &str =
    "JobID,JobName,State,ExitCode,NodeList,Start,End,ElapsedRaw,Reason";

pub(crate) fn parse_sacct(text: &str) -> Vec<AcctRow> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.trim().split('|').collect();
            if f.len() < 8 {
                return None;
            }
            Some(AcctRow {
                job_id: f[0].into(),
                name: f[1].into(),
                // "CANCELLED by 0" → "CANCELLED"
                state: f[2].split_whitespace().next().unwrap_or("").into(),
                state_raw: f[2].trim().into(),
                exit_code: f[3].into(),
                nodes: f[4].into(),
                start: f[5].into(),
                end: f[6].into(),
                elapsed: f[7].parse().unwrap_or(0),
                reason: f
                    .get(8)
                    .map(|r| r.trim())
                    .filter(|r| *r != "None")
                    .unwrap_or("")
                    .to_string(),
            })
        })
        .collect()
}

/// One run of a job as sacct recorded it (with `--duplicates`, a requeued job has several).
pub(crate) fn attempt(row: &AcctRow) -> crate::results::record::Attempt {
    crate::results::record::Attempt {
        nodes: crate::util::nodelist::expand(&row.nodes).unwrap_or_default(),
        state: row.state_raw.clone(),
        reason: row.reason.clone(),
        start: Some(row.start.clone()),
        end: Some(row.end.clone()),
    }
}

/// Whether sacct's state for the allocation is final.
pub fn is_terminal(state: &str) -> bool {
    matches!(
        state,
        "COMPLETED"
            | "FAILED"
            | "TIMEOUT"
            | "CANCELLED"
            | "NODE_FAIL"
            | "OUT_OF_MEMORY"
            | "PREEMPTED"
            | "BOOT_FAIL"
            | "DEADLINE"
            | "REVOKED"
    )
}

/// The outcome of a finished allocation row.
pub fn outcome(row: &AcctRow) -> JobOutcome {
    let (code, sig) = row
        .exit_code
        .split_once(':')
        .unwrap_or((&row.exit_code, "0"));
    let exit_code = code.parse::<i32>().ok();
    let signal = sig.parse::<i32>().ok().filter(|s| *s != 0);
    let (end, failure) = match row.state.as_str() {
        "COMPLETED" => (None, None),
        "TIMEOUT" => (
            Some(EndReason::TimeLimit),
            Some("Slurm stopped the job at its time limit (TIMEOUT)".to_string()),
        ),
        "CANCELLED" => (
            Some(EndReason::CancelledByScheduler),
            Some(format!(
                "the Slurm job was cancelled outside cloudai ({}{})",
                row.state_raw,
                match row.state_raw.strip_prefix("CANCELLED by ") {
                    Some(uid) => format!(", uid {uid}: scancel by a user or an admin"),
                    None => String::new(),
                }
            )),
        ),
        "FAILED" => (
            None,
            Some(format!(
                "the Slurm job failed (FAILED, exit code {})",
                row.exit_code
            )),
        ),
        "NODE_FAIL" | "BOOT_FAIL" => (
            Some(EndReason::NodeFail),
            Some(format!(
                "a node of the job failed ({} on {}); check the node's health",
                row.state, row.nodes
            )),
        ),
        "OUT_OF_MEMORY" => (
            Some(EndReason::OutOfMemory),
            Some("the job ran out of memory (OUT_OF_MEMORY)".to_string()),
        ),
        "PREEMPTED" => (
            Some(EndReason::Preempted),
            Some("the job was preempted by a higher-priority job (PREEMPTED)".to_string()),
        ),
        other => (None, Some(format!("the Slurm job ended in state {other}"))),
    };
    JobOutcome {
        exit_code,
        signal,
        state: Some(row.state_raw.clone()),
        end,
        failure,
        log_incomplete: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_squeue_and_sacct() {
        let q = parse_squeue(
            "12|PENDING|Resources||0|\n13|RUNNING|None|node[001-002]|2|\n14|COMPLETING|None|node003\n",
        );
        assert_eq!((q[0].2, q[1].2, q[2].2), (Some(0), Some(2), None));
        assert_eq!(q[0].0, "12");
        assert_eq!(q[0].1, Live::Pending("PENDING".into(), "Resources".into()));
        assert_eq!(q[2].1, Live::Running("node003".into()));
        let rows = parse_sacct(
            "7|job|CANCELLED by 0|0:15|node[001-002]|2026-12-02T10:00:00|2026-12-02T10:00:05|5\n7.batch|batch|CANCELLED|0:15|node001|a|b|5\n",
        );
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].state, "CANCELLED");
        let o = outcome(&rows[0]);
        assert_eq!(
            (o.exit_code, o.signal, o.end),
            (Some(0), Some(15), Some(EndReason::CancelledByScheduler))
        );
        assert!(o.failure.unwrap().contains("CANCELLED by 0, uid 0"));
        let t = outcome(&AcctRow {
            state: "TIMEOUT".into(),
            exit_code: "0:0".into(),
            ..Default::default()
        });
        assert_eq!(t.end, Some(EndReason::TimeLimit));
        let n = outcome(&AcctRow {
            state: "NODE_FAIL".into(),
            nodes: "node003".into(),
            exit_code: "1:0".into(),
            ..Default::default()
        });
        assert!(n.failure.unwrap().contains("node003"));
        assert!(is_terminal("OUT_OF_MEMORY") && !is_terminal("RUNNING"));
    }

    #[test]
    fn hopeless_reasons_are_the_ones_waiting_cannot_fix() {
        for r in [
            "PartitionNodeLimit",
            "PartitionConfig",
            "BadConstraints",
            "InvalidAccount",
            "InvalidQOS",
            "QOSMaxNodePerJobLimit",
            "AssocMaxGRESPerJob",
            "DependencyNeverSatisfied",
        ] {
            assert!(hopeless_reason(r).is_some(), "{r}");
        }
        for r in [
            "Resources",
            "Priority",
            "BeginTime",
            "Dependency",
            "AssocGrpNodeLimit",
            "QOSMaxJobsPerUserLimit",
            "ReqNodeNotAvail, UnavailableNodes:node003",
            "None",
            "",
        ] {
            assert!(hopeless_reason(r).is_none(), "{r}");
        }
        assert_eq!(
            unavailable_nodes("ReqNodeNotAvail, UnavailableNodes:node[003-004]"),
            Some("node[003-004]")
        );
        assert_eq!(
            unavailable_nodes("ReqNodeNotAvail, Reserved for maintenance"),
            None
        );
        assert_eq!(unavailable_nodes("Resources"), None);
    }
}
