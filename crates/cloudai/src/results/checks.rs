//! The checks behind a verdict and what was launched, as an iteration's record keeps them (`cloudai-run.json`,
//! `summary.json`); [`crate::workloads::judge`] makes them.

use serde::{Deserialize, Serialize};

use crate::config::system::fabric::Fabric;

/// What one check looked at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckKind {
    /// The workload's own reading of its output (errors, a missing summary, its exit status).
    Output,
    /// Ranks, hosts, ranks per host, one rank per GPU: the shape that ran against the shape asked.
    Shape,
    /// The network NCCL used between nodes (RDMA, or TCP sockets).
    Transport,
    /// Peak bus bandwidth against what the hardware is expected to give.
    Expectation,
    /// Peak bus bandwidth against the test's `min_busbw`.
    MinBusbw,
    /// Every size against a baseline file (`--baseline`).
    Baseline,
    /// The results table is complete: rows, the summary after them.
    Table,
    /// The data check (`#wrong`, out-of-bounds values).
    Wrong,
    /// One node's own evidence (kernel log, GPU state, DCGM diagnostic, InfiniBand ports).
    Node,
}

impl CheckKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckKind::Output => "output",
            CheckKind::Shape => "shape",
            CheckKind::Transport => "transport",
            CheckKind::Expectation => "expectation",
            CheckKind::MinBusbw => "min_busbw",
            CheckKind::Baseline => "baseline",
            CheckKind::Table => "table",
            CheckKind::Wrong => "wrong",
            CheckKind::Node => "node",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckStatus {
    Pass,
    Fail,
    /// The output does not show what the check needs (no Rank lines, no NCCL network lines, unknown hardware).
    NotShown,
}

impl CheckStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckStatus::Pass => "pass",
            CheckStatus::Fail => "fail",
            CheckStatus::NotShown => "not shown",
        }
    }
}

/// One check behind a verdict: what was looked at, its outcome, and the numbers (`16 ranks on 2 hosts`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Check {
    pub check: CheckKind,
    pub status: CheckStatus,
    pub detail: String,
}

impl Check {
    pub fn new(check: CheckKind, status: CheckStatus, detail: impl Into<String>) -> Self {
        Check {
            check,
            status,
            detail: detail.into(),
        }
    }
    pub fn pass(check: CheckKind, detail: impl Into<String>) -> Self {
        Self::new(check, CheckStatus::Pass, detail)
    }
    pub fn fail(check: CheckKind, detail: impl Into<String>) -> Self {
        Self::new(check, CheckStatus::Fail, detail)
    }
    pub fn not_shown(check: CheckKind, detail: impl Into<String>) -> Self {
        Self::new(check, CheckStatus::NotShown, detail)
    }
}

/// What was launched, as the output should show it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Asked {
    /// Hosts the ranks should be on.
    pub nodes: u64,
    /// GPUs (nccl-tests' Rank lines) per host, when the launch fixes them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus_per_node: Option<u64>,
    #[serde(default)]
    pub fabric: Fabric,
}
