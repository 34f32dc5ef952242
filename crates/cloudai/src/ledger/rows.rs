//! What the ledger keeps of a results tree, read from what the reports already hold: a scenario's graded
//! iterations (record, checks, metrics, per-size numbers) or a find-bad-nodes sweep's `bad-nodes.json`. Pure: no
//! database here.

use std::path::Path;

use crate::report::scenario::Entry;
use crate::results::checks::CheckKind;
use crate::results::Status;

/// One results tree's rows.
#[derive(Clone, Debug, Default)]
pub struct RunRows {
    /// What the tree is known by, from its contents: the same tree recorded again replaces its rows.
    pub uid: String,
    /// `run` (a scenario) or `find-bad-nodes`.
    pub kind: &'static str,
    pub scenario: String,
    /// The results tree (absolute).
    pub results: String,
    /// When it ran (Unix seconds).
    pub at: i64,
    pub iterations: Vec<IterRow>,
    pub pairs: Vec<PairRow>,
    pub node_checks: Vec<NodeCheckRow>,
}

impl RunRows {
    pub fn is_empty(&self) -> bool {
        self.iterations.is_empty() && self.pairs.is_empty() && self.node_checks.is_empty()
    }
    /// Rows in all (iterations, their sizes, pairs, node verdicts).
    pub fn len(&self) -> usize {
        self.iterations
            .iter()
            .map(|i| 1 + i.sizes.len())
            .sum::<usize>()
            + self.pairs.len()
            + self.node_checks.len()
    }
}

#[derive(Clone, Debug, Default)]
pub struct IterRow {
    pub test: String,
    pub template: String,
    pub iteration: u64,
    pub status: String,
    /// The verdict's reasons (its message), or the checks behind a pass.
    pub reasons: String,
    /// The hosts the output names, else the allocation.
    pub nodes: Vec<String>,
    pub gpu: Option<String>,
    pub driver: Option<String>,
    pub nccl: Option<String>,
    pub nccl_tests: Option<String>,
    pub collective: Option<String>,
    pub dtype: Option<String>,
    /// Nodes × GPUs per node of the measurement.
    pub shape: Option<(u64, u64)>,
    /// The workload's key metric: (name, value).
    pub metric: Option<(String, f64)>,
    /// What `sizes` measure (`workloads::Metric`'s name).
    pub point_metric: Option<&'static str>,
    pub at: i64,
    pub sizes: Vec<SizeRow>,
    /// Node evidence: (node, pass|fail, what was seen).
    pub node_checks: Vec<(String, String, String)>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct SizeRow {
    pub size: u64,
    /// The iteration's point metric (out of place), in its unit.
    pub value: Option<f64>,
    /// GB/s: size / time.
    pub algbw: Option<f64>,
    pub time_us: Option<f64>,
}

#[derive(Clone, Debug, Default)]
pub struct PairRow {
    pub test: String,
    pub a: String,
    pub b: String,
    pub round: usize,
    pub busbw: Option<f64>,
    pub passed: bool,
}

#[derive(Clone, Debug, Default)]
pub struct NodeCheckRow {
    pub node: String,
    /// `find-bad-nodes`, or an evidence check's name.
    pub check: String,
    pub status: String,
    pub detail: String,
}

/// The key metric of each workload, in order of preference (the first present is kept).
const KEY_METRICS: [&str; 9] = [
    "peak_busbw_gbps",
    "peak_bandwidth_mb_s",
    "tflops_per_gpu",
    "step_time_avg_s",
    "read_bw_mib",
    "write_bw_mib",
    "small_latency_us",
    "failed_nodes",
    "rows",
];

/// FNV-1a, 64 bits: a stable key from text (no dependency, same on every machine).
pub(crate) fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

/// `<name>_2026-12-02_13-07-15[_n]` → its time (local), as Unix seconds.
pub(crate) fn stamp_of(root: &Path) -> Option<i64> {
    let name = root.file_name()?.to_str()?;
    let b = name.as_bytes();
    (0..b.len().saturating_sub(18)).rev().find_map(|i| {
        let s = name.get(i..i + 19)?;
        let t = chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d_%H-%M-%S").ok()?;
        t.and_local_timezone(chrono::Local)
            .earliest()
            .map(|t| t.timestamp())
    })
}

fn mtime(p: &Path) -> Option<i64> {
    let m = std::fs::metadata(p).ok()?.modified().ok()?;
    Some(chrono::DateTime::<chrono::Utc>::from(m).timestamp())
}

fn rfc3339(s: &Option<String>) -> Option<i64> {
    s.as_deref()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.timestamp())
}

fn text(e: &Entry, key: &str) -> Option<String> {
    e.metrics
        .get(key)
        .and_then(|v| v.as_str())
        .map(str::to_string)
        .filter(|s| !s.is_empty())
}

/// Statuses worth remembering: the job ran (or was stopped or cancelled while running).
fn recorded(s: Status) -> bool {
    matches!(
        s,
        Status::Passed | Status::Failed | Status::Timeout | Status::Cancelled | Status::Stopped
    )
}

/// A scenario tree's graded iterations.
pub fn scenario(root: &Path, entries: &[Entry]) -> RunRows {
    let abs = std::path::absolute(root).unwrap_or_else(|_| root.to_path_buf());
    let stamp = stamp_of(&abs);
    let mut keys: Vec<String> = entries
        .iter()
        .map(|e| {
            let r = &e.record;
            // what a copy keeps (sizes, not times): trees without job ids or start times (CloudAI's dry-runs)
            // still differ by their files
            let len = |f: &str| {
                std::fs::metadata(Path::new(&r.output_path).join(f)).map_or(0, |m| m.len())
            };
            format!(
                "{}/{}/{}/{}/{}/{}",
                r.test_id,
                r.iteration,
                r.job_id.as_deref().unwrap_or(""),
                r.started_at.as_deref().unwrap_or(""),
                len("stdout.txt"),
                len("test-run.toml")
            )
        })
        .collect();
    keys.sort();
    let base = abs
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let iterations: Vec<IterRow> = entries
        .iter()
        .filter(|e| recorded(e.record.status))
        .map(|e| iteration(e, stamp))
        .collect();
    let at = iterations
        .iter()
        .map(|i| i.at)
        .min()
        .or(stamp)
        .unwrap_or_else(|| chrono::Utc::now().timestamp());
    RunRows {
        uid: format!("run:{base}:{:016x}", fnv(&keys.join("\n"))),
        kind: "run",
        scenario: crate::report::scenario::tree_scenario_name(root),
        results: abs.display().to_string(),
        at,
        iterations,
        ..Default::default()
    }
}

fn iteration(e: &Entry, stamp: Option<i64>) -> IterRow {
    let r = &e.record;
    let out = Path::new(&r.output_path);
    let at = rfc3339(&r.started_at)
        .or_else(|| rfc3339(&r.ended_at))
        .or(stamp)
        .or_else(|| mtime(&out.join("stdout.txt")))
        .or_else(|| mtime(out))
        .unwrap_or_else(|| chrono::Utc::now().timestamp());
    // the hosts the output names, else the allocation
    let mut nodes: Vec<String> = e
        .metrics
        .get("hosts")
        .and_then(|v| v.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|h| h.as_str().map(str::to_string))
                .collect()
        })
        .filter(|v: &Vec<String>| !v.is_empty())
        .unwrap_or_else(|| r.nodes.clone());
    nodes.sort();
    nodes.dedup();
    // one number per size: the first measurement of it (an output may repeat sizes: `-N` soak loops)
    let mut sizes: Vec<SizeRow> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let point_metric = e.points.first().map(|p| p.metric);
    for p in e.points.iter().filter(|p| Some(p.metric) == point_metric) {
        if seen.insert(p.size) {
            let time = p.time_us.filter(|t| *t > 0.0);
            sizes.push(SizeRow {
                size: p.size,
                value: Some(p.value).filter(|b| b.is_finite()),
                algbw: time.map(|t| p.size as f64 / t / 1000.0),
                time_us: time,
            });
        }
    }
    if sizes.is_empty() {
        for (s, b) in &e.curve.points {
            if seen.insert(*s) {
                sizes.push(SizeRow {
                    size: *s,
                    value: Some(*b).filter(|b| b.is_finite()),
                    ..Default::default()
                });
            }
        }
    }
    let point_metric = point_metric
        .or((!sizes.is_empty()).then_some(e.curve.metric))
        .map(|m| m.name);
    sizes.sort_by_key(|s| s.size);
    let metric = KEY_METRICS.iter().find_map(|k| {
        e.metrics
            .get(*k)
            .and_then(|v| v.as_f64())
            .filter(|v| v.is_finite())
            .map(|v| (k.to_string(), v))
    });
    let reasons = if r.message.is_empty() {
        crate::workloads::judge::brief(&r.checks)
    } else {
        r.message.clone()
    };
    let node_checks = r
        .checks
        .iter()
        .filter(|c| c.check == CheckKind::Node)
        .filter_map(|c| {
            let (node, what) = c.detail.split_once(": ")?;
            Some((
                node.to_string(),
                c.status.as_str().to_string(),
                what.to_string(),
            ))
        })
        .collect();
    let first = e.points.first();
    IterRow {
        test: r.test_id.clone(),
        template: r.template.clone(),
        iteration: r.iteration,
        status: r.status.as_str().to_string(),
        reasons,
        nodes,
        gpu: text(e, "gpu"),
        driver: text(e, "driver"),
        nccl: text(e, "nccl_version"),
        nccl_tests: text(e, "nccl_tests_version"),
        collective: first.map(|p| p.collective.clone()),
        dtype: first.map(|p| p.dtype.clone()),
        shape: first.map(|p| (p.nodes, p.gpus_per_node)),
        metric,
        point_metric,
        at,
        sizes,
        node_checks,
    }
}

/// A find-bad-nodes tree: its pairs (each once) and every node's verdict, from `bad-nodes.json`.
pub fn sweep(root: &Path) -> Result<RunRows, String> {
    let file = root.join("bad-nodes.json");
    let bytes = crate::util::fsx::read_regular(&file, 256 << 20)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let v: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|e| format!("{}: not JSON ({e})", file.display()))?;
    let abs = std::path::absolute(root).unwrap_or_else(|_| root.to_path_buf());
    let test = v["test"].as_str().unwrap_or("").to_string();
    let mut pairs: Vec<PairRow> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut checks = Vec::new();
    let mut jobs = Vec::new();
    for n in v["verdicts"].as_array().into_iter().flatten() {
        let node = n["node"].as_str().unwrap_or("").to_string();
        if node.is_empty() {
            continue;
        }
        let verdict = n["verdict"].as_str().unwrap_or("").to_string();
        let detail = n["condemned"]
            .as_str()
            .or(n["reason"].as_str())
            .map(str::to_string)
            .unwrap_or_else(|| match &n["trials"] {
                serde_json::Value::Null => String::new(),
                t => format!(
                    "with good partners: {} passed, {} failed",
                    t["passed"].as_u64().unwrap_or(0),
                    t["failed"].as_u64().unwrap_or(0)
                ),
            });
        checks.push(NodeCheckRow {
            node: node.clone(),
            check: "find-bad-nodes".into(),
            status: verdict,
            detail,
        });
        if let Some(m) = n["checks"].as_object() {
            for (check, shown) in m {
                let shown = shown.as_str().unwrap_or("").to_string();
                checks.push(NodeCheckRow {
                    node: node.clone(),
                    check: check.clone(),
                    status: if shown == "healthy" { "pass" } else { "fail" }.into(),
                    detail: shown,
                });
            }
        }
        for ev in n["evidence"].as_array().into_iter().flatten() {
            let pair: Vec<&str> = ev["pair"]
                .as_array()
                .map(|p| p.iter().filter_map(|x| x.as_str()).collect())
                .unwrap_or_default();
            let round = ev["round"].as_u64().unwrap_or(0) as usize;
            if pair.len() != 2 || !seen.insert((round, pair[0].to_string(), pair[1].to_string())) {
                continue;
            }
            jobs.push(format!(
                "{round}/{}+{}/{}",
                pair[0],
                pair[1],
                ev["job_id"].as_str().unwrap_or("")
            ));
            pairs.push(PairRow {
                test: test.clone(),
                a: pair[0].to_string(),
                b: pair[1].to_string(),
                round,
                busbw: ev["busbw"].as_f64(),
                passed: ev["passed"].as_bool().unwrap_or(false),
            });
        }
    }
    jobs.sort();
    let base = abs
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let at = stamp_of(&abs)
        .or_else(|| mtime(&file))
        .unwrap_or_else(|| chrono::Utc::now().timestamp());
    Ok(RunRows {
        uid: format!(
            "find-bad-nodes:{base}:{:016x}",
            fnv(&format!("{test}\n{}", jobs.join("\n")))
        ),
        kind: "find-bad-nodes",
        scenario: format!("find-bad-nodes {test}"),
        results: abs.display().to_string(),
        at,
        pairs,
        node_checks: checks,
        ..Default::default()
    })
}

/// What a directory holds for the ledger: a sweep (`bad-nodes.json`), a scenario tree (iterations, graded again
/// from their output where no record of ours is there), or nothing.
pub fn of_tree(root: &Path) -> Result<Option<RunRows>, String> {
    if root.join("bad-nodes.json").is_file() {
        return sweep(root).map(Some);
    }
    let entries = crate::report::scenario::read_tree(root, true);
    if entries.is_empty() {
        return Ok(None);
    }
    Ok(Some(scenario(root, &entries)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_name_gives_its_time() {
        let t = stamp_of(Path::new("/r/nccl-test_2026-12-02_13-07-15")).unwrap();
        let local = chrono::NaiveDate::from_ymd_opt(2026, 12, 2)
            .unwrap()
            .and_hms_opt(13, 7, 15)
            .unwrap()
            .and_local_timezone(chrono::Local)
            .earliest()
            .unwrap();
        assert_eq!(t, local.timestamp());
        assert!(stamp_of(Path::new("/r/find-bad-nodes_2026-12-02_13-07-15_2")).is_some());
        assert_eq!(stamp_of(Path::new("/r/plain")), None);
        assert_ne!(fnv("a"), fnv("b"));
        assert_eq!(fnv(""), 0xcbf29ce484222325);
    }
}
