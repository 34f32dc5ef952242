//! What the scenario report knows of a tree, as data: every iteration's entry, the drops found, the baseline
//! graded against. `summary.json` is this, serialized; the page (`page.rs`, `baseline.rs`) renders it.

use serde::Serialize;

use crate::results::IterationRecord;
use crate::workloads;

#[derive(Clone, Debug, Default, Serialize)]
pub struct Entry {
    #[serde(flatten)]
    pub record: IterationRecord,
    pub metrics: serde_json::Map<String, serde_json::Value>,
    /// Report files, relative to the results root.
    pub reports: Vec<String>,
    #[serde(skip)]
    pub curve: workloads::Curve,
    #[serde(skip)]
    pub points: Vec<workloads::Point>,
    /// The comparison with `--baseline`, per size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<crate::baseline::Check>,
    /// Why the numbers are physically implausible, when they are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suspect: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Flag {
    pub test_id: String,
    /// What is compared (`iteration 1`, or this tree).
    pub label: String,
    /// Against what (`iteration 0`, or another tree).
    pub baseline: String,
    pub size: u64,
    pub metric: workloads::Metric,
    pub unit: &'static str,
    pub baseline_value: f64,
    pub value: f64,
    /// Positive: worse than the baseline (below it for a bandwidth, above it for a latency).
    pub drop_pct: f64,
}

#[derive(Debug, Serialize)]
pub struct Summary {
    pub scenario: String,
    /// `run` or `dry-run`: what made this tree (kept by generate-report).
    pub mode: &'static str,
    pub results_root: String,
    pub generated_at: String,
    pub tolerance_pct: f64,
    pub counts: std::collections::BTreeMap<String, usize>,
    pub tests: Vec<Entry>,
    pub compared_with: Vec<String>,
    pub drops: Vec<Flag>,
    /// `--compare` trees that matched nothing, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub compare_notes: Vec<String>,
    /// The baseline graded against (`--baseline`), with its tolerance and minimum size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<BaselineInfo>,
}

#[derive(Debug, Serialize)]
pub struct BaselineInfo {
    pub file: String,
    pub tolerance_pct: f64,
    pub min_size_bytes: u64,
    /// Per test and size: the mean busbw of its iterations against the baseline.
    pub sizes: Vec<SizeRow>,
}

/// One size of one test against the baseline: the mean over the test's iterations.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SizeRow {
    pub test_id: String,
    pub shape: String,
    pub size: u64,
    pub metric: workloads::Metric,
    pub unit: &'static str,
    pub baseline: f64,
    pub value: f64,
    /// Positive: worse than the baseline (below it for a bandwidth, above it for a latency).
    pub drop_pct: f64,
    /// The worst verdict of the iterations: `drop`, `below min size` or `ok`.
    pub status: String,
}
