//! Slurm job states from `squeue` (live) and `sacct` (final), mapped to our outcome with a reason.

use crate::results::EndReason;
use crate::workloads::JobOutcome;

#[derive(Clone, Debug, PartialEq)]
pub enum Live {
    Pending(String),
    Running,
}

/// `squeue -h -o '%i|%T|%r'` → job id → live state (with the pending reason).
pub fn parse_squeue(text: &str) -> Vec<(String, Live)> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.trim().split('|');
            let (id, state, reason) = (it.next()?, it.next()?, it.next().unwrap_or(""));
            let live = match state {
                "PENDING" | "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" | "RESV_DEL_HOLD" => {
                    Live::Pending(reason.to_string())
                }
                _ => Live::Running,
            };
            Some((id.to_string(), live))
        })
        .collect()
}

/// One `sacct -P` row of `JobID,JobName,State,ExitCode,NodeList,Start,End,ElapsedRaw`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AcctRow {
    pub job_id: String,
    pub name: String,
    pub state: String,
    pub exit_code: String,
    pub nodes: String,
    pub start: String,
    pub end: String,
    pub elapsed: i64,
}

pub const SACCT_FORMAT: &str = "JobID,JobName,State,ExitCode,NodeList,Start,End,ElapsedRaw";

pub fn parse_sacct(text: &str) -> Vec<AcctRow> {
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
                exit_code: f[3].into(),
                nodes: f[4].into(),
                start: f[5].into(),
                end: f[6].into(),
                elapsed: f[7].parse().unwrap_or(0),
            })
        })
        .collect()
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
            Some(EndReason::Cancelled),
            Some("the Slurm job was cancelled (CANCELLED)".to_string()),
        ),
        "FAILED" => (
            None,
            Some(format!(
                "the Slurm job failed (FAILED, exit code {})",
                row.exit_code
            )),
        ),
        "NODE_FAIL" => (
            None,
            Some(format!(
                "a node of the job failed (NODE_FAIL on {}); check the node's health",
                row.nodes
            )),
        ),
        "OUT_OF_MEMORY" => (
            None,
            Some("the job ran out of memory (OUT_OF_MEMORY)".to_string()),
        ),
        "PREEMPTED" => (
            None,
            Some("the job was preempted by a higher-priority job (PREEMPTED)".to_string()),
        ),
        other => (None, Some(format!("the Slurm job ended in state {other}"))),
    };
    JobOutcome {
        exit_code,
        signal,
        state: Some(row.state.clone()),
        end,
        failure,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_squeue_and_sacct() {
        let q = parse_squeue("12|PENDING|Resources\n13|RUNNING|None\n14|COMPLETING|None\n");
        assert_eq!(q[0], ("12".into(), Live::Pending("Resources".into())));
        assert_eq!(q[1].1, Live::Running);
        assert_eq!(q[2].1, Live::Running);
        let rows = parse_sacct(
            "7|job|CANCELLED by 0|0:15|node[001-002]|2026-12-02T10:00:00|2026-12-02T10:00:05|5\n7.batch|batch|CANCELLED|0:15|node001|a|b|5\n",
        );
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].state, "CANCELLED");
        let o = outcome(&rows[0]);
        assert_eq!(
            (o.exit_code, o.signal, o.end),
            (Some(0), Some(15), Some(EndReason::Cancelled))
        );
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
}
