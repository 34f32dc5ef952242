//! Reading a finished AI Dynamo run: its markers, each benchmark's report (AIPerf's or GenAI-Perf's CSV), the
//! accuracy result.

use std::path::Path;

use super::aiperf::phases;
use super::{marker, workloads};
use crate::config::args::ArgValue;
use crate::config::test::TestDefinition;
use crate::workloads::judge::{Check, CheckKind};
use crate::workloads::kit::{self, TablePage};
use crate::workloads::perf_csv::{self, PerfCsv};
use crate::workloads::{IterationReport, Verdict};

/// Each benchmark the test runs: (its script, its report's file name).
fn reports(test: &TestDefinition) -> Vec<(String, String)> {
    let a = &test.cmd_args;
    workloads(a)
        .into_iter()
        .map(|w| {
            let key = w.trim_end_matches(".sh").to_string();
            let name = a.text_at(&format!("{key}.report_name"));
            let name = if name.is_empty() {
                format!("{key}_report.csv")
            } else {
                name
            };
            (w, name)
        })
        .collect()
}

/// The requests a benchmark was asked to send: GenAI-Perf's `request-count`, the last AIPerf phase's.
fn asked_requests(test: &TestDefinition, workload: &str) -> Option<f64> {
    let a = &test.cmd_args;
    let v = if workload.starts_with("aiperf") {
        phases(a).last().and_then(|(_, r)| match r.get("args") {
            Some(ArgValue::Table(t)) => t.get("request-count").cloned(),
            _ => None,
        })
    } else {
        a.at("genai_perf.args.request-count").cloned()
    };
    match v? {
        ArgValue::Int(i) => Some(i as f64),
        other => other.py_str().parse().ok(),
    }
}

/// The accuracy in `accuracy_results.csv` (the OVERALL row, else the first), as a fraction.
pub(super) fn accuracy(dir: &Path) -> Option<f64> {
    let candidates = [
        dir.join("accuracy_results.csv"),
        dir.join("aiperf_accuracy_artifacts/accuracy_results.csv"),
        dir.join("aiperf_artifacts/accuracy_results.csv"),
    ];
    let frac = |s: &str| {
        let t = s.trim();
        let pct = t.ends_with('%');
        let x: f64 = t.trim_end_matches('%').trim().parse().ok()?;
        Some(if pct || x > 1.0 { x / 100.0 } else { x })
    };
    for path in candidates {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let mut lines = text.lines().filter(|l| !l.trim().is_empty());
        let Some(header) = lines.next() else { continue };
        let cols: Vec<String> = header.split(',').map(|c| c.trim().to_lowercase()).collect();
        let at = |name: &str| cols.iter().position(|c| c == name);
        let mut first = None;
        for line in lines {
            let cells: Vec<&str> = line.split(',').collect();
            let cell = |i: Option<usize>| i.and_then(|i| cells.get(i).copied());
            let value = cell(at("accuracy").or(at("value")))
                .and_then(frac)
                .or_else(|| {
                    let c: f64 = cell(at("correct"))?.trim().parse().ok()?;
                    let t: f64 = cell(at("total"))?.trim().parse().ok()?;
                    (t > 0.0).then(|| c / t)
                });
            let Some(v) = value else { continue };
            let task = cell(at("task").or(at("metric")))
                .unwrap_or("")
                .trim()
                .to_uppercase();
            if task == "OVERALL" {
                return Some(v);
            }
            first.get_or_insert(v);
        }
        if first.is_some() {
            return first;
        }
    }
    None
}

pub(super) fn verdict(test: &TestDefinition, dir: &Path) -> Verdict {
    if let Ok(why) =
        std::fs::read_to_string(dir.join(marker(test, "failure_marker", "failure-marker.txt")))
    {
        return Verdict::fail(format!("Failure marker found: {}", why.trim()));
    }
    let success = dir.join(marker(test, "success_marker", "success-marker.txt"));
    if !success.exists() {
        return Verdict::fail(format!(
            "Success marker file not found: {} (see the nodes' node-*-stderr.txt)",
            success.display()
        ));
    }
    let mut checks = Vec::new();
    for (w, name) in reports(test) {
        let Ok(body) = std::fs::read_to_string(dir.join(&name)) else {
            checks.push(Check::fail(
                CheckKind::Output,
                format!("{name} was not written: the {w} benchmark did not complete"),
            ));
            continue;
        };
        let csv = PerfCsv::parse(&body);
        checks.extend(perf_csv::checks(&csv, &name, asked_requests(test, &w)));
    }
    if test.cmd_args.get("aiperf_accuracy").is_some() {
        checks.push(match accuracy(dir) {
            Some(x) => Check::pass(CheckKind::Output, format!("accuracy {:.2} %", x * 100.0)),
            None => Check::fail(
                CheckKind::Output,
                "no accuracy result (accuracy_results.csv): the accuracy benchmark did not complete",
            ),
        });
    }
    Verdict::from_checks(checks)
}

/// CloudAI's metrics: `accuracy`; `<tool>:<metric>:<column>`; a metric's average in the first benchmark's report.
/// `default` (which CloudAI looks up as a metric named "default", and finds none) is the output throughput.
pub(super) fn metric(test: &TestDefinition, dir: &Path, name: &str) -> Option<f64> {
    if name.eq_ignore_ascii_case("accuracy") {
        return test.cmd_args.get("aiperf_accuracy").and(accuracy(dir));
    }
    let (bench, metric, column) = match name.splitn(3, ':').collect::<Vec<_>>()[..] {
        [b, m, c] => (format!("{b}_report.csv"), m.to_string(), c.to_string()),
        _ => (
            reports(test).first()?.1.clone(),
            name.to_string(),
            "avg".to_string(),
        ),
    };
    let csv = PerfCsv::parse(&std::fs::read_to_string(dir.join(bench)).ok()?);
    if metric == "default" {
        return csv.avg(perf_csv::THROUGHPUT);
    }
    csv.value(&[&metric], &[&column, "Value"])
}

pub(super) fn report(test: &TestDefinition, dir: &Path, title: &str) -> IterationReport {
    let v = verdict(test, dir);
    if !reports(test)
        .iter()
        .any(|(_, name)| dir.join(name).is_file())
    {
        // nothing measured: the verdict alone
        return IterationReport {
            verdict: Some(v),
            ..Default::default()
        };
    }
    let mut metrics = serde_json::Map::new();
    let mut rows = Vec::new();
    for (w, name) in reports(test) {
        let Ok(body) = std::fs::read_to_string(dir.join(&name)) else {
            continue;
        };
        let csv = PerfCsv::parse(&body);
        let key = w.trim_end_matches(".sh");
        for (k, names) in [
            ("ttft_ms", perf_csv::TTFT),
            ("itl_ms", perf_csv::ITL),
            ("output_tokens_per_s", perf_csv::THROUGHPUT),
        ] {
            if let Some(x) = csv.avg(names) {
                metrics.insert(format!("{key}_{k}"), x.into());
            }
        }
        for (metric, cols) in &csv.rows {
            let cell = |c: &str| cols.get(c).cloned().unwrap_or_default();
            rows.push(vec![
                key.to_string(),
                metric.clone(),
                cell("avg"),
                cell("p50"),
                cell("p99"),
                cell("Value"),
            ]);
        }
    }
    if let Some(a) = accuracy(dir) {
        metrics.insert("accuracy".into(), a.into());
    }
    let table = kit::Table {
        header: vec!["benchmark", "metric", "avg", "p50", "p99", "value"],
        rows,
    };
    let nodes = kit::iteration_nodes(dir);
    let page = TablePage {
        title,
        verdict: &v.status_line(),
        passed: v.passed,
        cards: vec![
            ("nodes".into(), nodes.to_string()),
            (
                "prefill nodes".into(),
                test.cmd_args
                    .int_at("dynamo.prefill_worker.num_nodes")
                    .unwrap_or(0)
                    .to_string(),
            ),
            (
                "decode nodes".into(),
                test.cmd_args
                    .int_at("dynamo.decode_worker.num_nodes")
                    .unwrap_or(0)
                    .to_string(),
            ),
        ],
        charts: serde_json::json!({}),
        show: Vec::new(),
        sections: vec![table.section("Benchmarks")],
    }
    .render();
    IterationReport {
        files: vec![
            ("ai_dynamo_report.csv".into(), table.csv()),
            ("ai_dynamo_report.html".into(), page),
        ],
        metrics,
        verdict: Some(v),
        ..Default::default()
    }
}
