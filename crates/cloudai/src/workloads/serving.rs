//! The profile export of LLM serving benchmarks (genai-perf's `profile_export_genai_perf.json`, AIPerf's
//! `profile_export_aiperf.json`): one object per metric (`{"unit": "ms", "avg": …, "p50": …, "p99": …}`) at the
//! top level. Read by every workload that runs such a client (Triton/NIM inference), and graded on what the run
//! asked: every request completed, none failed, the token lengths the client asked for.

use std::path::{Path, PathBuf};

use super::judge::{Check, CheckKind};
use super::kit;
use super::Verdict;

/// The export files, by the tool that writes them.
pub(crate) const EXPORTS: [&str; 2] = [
    "profile_export_genai_perf.json",
    "profile_export_aiperf.json",
];

/// One metric of an export.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Metric {
    pub name: String,
    pub unit: String,
    pub avg: Option<f64>,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
}

/// An export's metrics, in its order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Export {
    pub file: PathBuf,
    pub metrics: Vec<Metric>,
}

impl Export {
    pub fn get(&self, name: &str) -> Option<&Metric> {
        self.metrics.iter().find(|m| m.name == name)
    }

    fn avg(&self, name: &str) -> Option<f64> {
        self.get(name).and_then(|m| m.avg)
    }
}

/// Reads an export's text: every top-level object with a `unit` is a metric (numbers given as text are read too).
pub fn parse(text: &str) -> Option<Vec<Metric>> {
    let json: serde_json::Value = serde_json::from_str(text).ok()?;
    let num = |v: &serde_json::Value| {
        v.as_f64()
            .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
    };
    Some(
        json.as_object()?
            .iter()
            .filter_map(|(k, v)| {
                let o = v.as_object()?;
                let unit = o.get("unit")?.as_str()?.to_string();
                let at = |s: &str| o.get(s).and_then(num);
                Some(Metric {
                    name: k.clone(),
                    unit,
                    avg: at("avg"),
                    p50: at("p50"),
                    p90: at("p90"),
                    p99: at("p99"),
                    min: at("min"),
                    max: at("max"),
                })
            })
            .collect(),
    )
}

/// The export under an iteration's directory (the client may write it one or two levels down).
pub fn find(dir: &Path) -> Option<Export> {
    fn walk(dir: &Path, depth: u32) -> Option<PathBuf> {
        for name in EXPORTS {
            let p = dir.join(name);
            if p.is_file() {
                return Some(p);
            }
        }
        if depth == 0 {
            return None;
        }
        let mut subdirs: Vec<PathBuf> = std::fs::read_dir(dir)
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_dir())
            .collect();
        subdirs.sort();
        subdirs.into_iter().find_map(|d| walk(&d, depth - 1))
    }
    let file = walk(dir, 2)?;
    let metrics = parse(&std::fs::read_to_string(&file).ok()?)?;
    Some(Export { file, metrics })
}

/// What the client was told to send.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Asked {
    pub requests: Option<u64>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
}

/// How far a measured mean token length may stray from the asked one (the client counts tokens again with its own
/// tokenizer).
const LENGTH_TOLERANCE: f64 = 0.10;

/// The grade of an export against what was asked.
pub fn verdict(e: &Export, asked: &Asked) -> Verdict {
    let fail = |kind: CheckKind, why: String| {
        let mut v = Verdict::fail(why.clone());
        v.checks.push(Check::fail(kind, why));
        v
    };
    let errors = e.avg("error_request_count").unwrap_or(0.0);
    if errors > 0.0 {
        return fail(
            CheckKind::Output,
            format!("{errors} request(s) failed (error_request_count)"),
        );
    }
    let done = e.avg("request_count");
    if let (Some(want), Some(got)) = (asked.requests, done) {
        if got < want as f64 {
            return fail(
                CheckKind::Table,
                format!("{got} of the {want} requests asked completed"),
            );
        }
    }
    if done.is_none() && e.get("request_latency").is_none() {
        return fail(
            CheckKind::Table,
            "the export has no request count or latency: the client measured nothing".into(),
        );
    }
    let Some(tput) = e.avg("output_token_throughput").filter(|t| *t > 0.0) else {
        return fail(
            CheckKind::Table,
            "no output token throughput above 0: the server generated nothing".into(),
        );
    };
    for (name, want, what) in [
        ("output_sequence_length", asked.output_tokens, "output"),
        ("input_sequence_length", asked.input_tokens, "input"),
    ] {
        if let (Some(want), Some(got)) = (want, e.avg(name)) {
            let want = want as f64;
            if want > 0.0 && ((got - want) / want).abs() > LENGTH_TOLERANCE {
                return fail(
                    CheckKind::Shape,
                    format!("requests had {got:.1} {what} tokens on average, {want} asked: the server did not serve what was asked"),
                );
            }
        }
    }
    let ms = |name: &str| {
        e.get(name).map(|m| {
            format!(
                "{name} p50 {} ms, p99 {} ms",
                kit::fixed2(m.p50, "?"),
                kit::fixed2(m.p99, "?")
            )
        })
    };
    let mut detail = format!(
        "{} requests; {tput:.2} output tokens/s",
        done.map_or("?".into(), |d| format!("{d}"))
    );
    for part in [ms("time_to_first_token"), ms("inter_token_latency")]
        .into_iter()
        .flatten()
    {
        detail.push_str("; ");
        detail.push_str(&part);
    }
    Verdict::pass_with(detail)
}

/// The export as a table: one row per metric (none without an export).
pub(crate) fn table(e: Option<&Export>) -> kit::Table {
    kit::Table {
        header: vec!["metric", "unit", "avg", "p50", "p90", "p99", "min", "max"],
        rows: e
            .into_iter()
            .flat_map(|e| e.metrics.iter())
            .map(|m| {
                let mut row = vec![m.name.clone(), m.unit.clone()];
                row.extend([m.avg, m.p50, m.p90, m.p99, m.min, m.max].map(kit::csv_num));
                row
            })
            .collect(),
    }
}
