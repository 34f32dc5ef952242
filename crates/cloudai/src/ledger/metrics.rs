//! The ledger's latest values as metrics, in the OpenMetrics text format (which node_exporter's textfile collector
//! and Prometheus read): `history metrics` prints it, `--metrics-file` writes it atomically.
//!
//! - `cloudai_busbw_gbytes{node,test,band,size}`: the newest busbw (GB/s) of each series of bus bandwidth: a node,
//!   a link `a+b` (find-bad-nodes), or the node set of a larger run, per size band (`small`, `medium`, `large`:
//!   the value at the band's largest size; `peak`: a find-bad-nodes pair's peak).
//! - `cloudai_metric{node,test,metric}`: the newest key metric of other workloads.
//! - `cloudai_node_verdict{node,check}`: a node's newest verdict per check: 1 passed/good, 0 failed/bad,
//!   0.5 suspect (unavailable nodes are left out).
//! - `cloudai_drift{node,test,band}`: 1 where the drift rule flags the series, else 0.
//! - `cloudai_last_run_timestamp_seconds{node,test}`: when each series last had a value.

use std::fmt::Write as _;

use super::{drift, query, Ledger};

/// A label value as the format escapes it.
fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn family(out: &mut String, name: &str, help: &str, unit: Option<&str>) {
    let _ = writeln!(out, "# TYPE {name} gauge");
    if let Some(u) = unit {
        let _ = writeln!(out, "# UNIT {name} {u}");
    }
    let _ = writeln!(out, "# HELP {name} {help}");
}

fn num(v: f64) -> String {
    if v.is_finite() {
        format!("{v}")
    } else {
        "NaN".into()
    }
}

/// The exposition, ending with `# EOF`.
pub(crate) fn render(l: &mut Ledger) -> Result<String, super::LedgerError> {
    let series = l.series(None, None)?;
    let verdicts = l.latest_verdicts()?;
    let mut out = String::new();
    family(
        &mut out,
        "cloudai_busbw_gbytes",
        "Newest bus bandwidth of a node, link or node set per test and size band (GB/s).",
        Some("gbytes"),
    );
    let is_busbw = |b: &str| query::BANDS.iter().any(|x| x.0 == b) || b == "peak";
    for (k, s) in series.iter().filter(|(k, _)| is_busbw(&k.band)) {
        if let Some(p) = s.last() {
            let _ = writeln!(
                out,
                "cloudai_busbw_gbytes{{node=\"{}\",test=\"{}\",band=\"{}\",size=\"{}\"}} {}",
                esc(&k.subject),
                esc(&k.test),
                esc(&k.band),
                p.size,
                num(p.value)
            );
        }
    }
    family(
        &mut out,
        "cloudai_metric",
        "Newest key metric of a workload other than bus bandwidth, in the metric's own unit.",
        None,
    );
    for (k, s) in series.iter().filter(|(k, _)| !is_busbw(&k.band)) {
        if let Some(p) = s.last() {
            let _ = writeln!(
                out,
                "cloudai_metric{{node=\"{}\",test=\"{}\",metric=\"{}\"}} {}",
                esc(&k.subject),
                esc(&k.test),
                esc(&k.band),
                num(p.value)
            );
        }
    }
    family(
        &mut out,
        "cloudai_node_verdict",
        "Newest verdict of a node per check: 1 passed or good, 0 failed or bad, 0.5 suspect.",
        None,
    );
    for (node, check, status, _, _) in &verdicts {
        let v = match status.as_str() {
            "pass" | "good" | "PASSED" => 1.0,
            "suspect" => 0.5,
            "unavailable" => continue,
            _ => 0.0,
        };
        let _ = writeln!(
            out,
            "cloudai_node_verdict{{node=\"{}\",check=\"{}\"}} {}",
            esc(node),
            esc(check),
            num(v)
        );
    }
    family(
        &mut out,
        "cloudai_drift",
        "1 where a series slides beyond its own noise over recent runs (the drift rule), else 0.",
        None,
    );
    for (k, s) in &series {
        let values: Vec<f64> = s.iter().map(|p| p.value).collect();
        let f = drift::judge(&values, query::higher_is_better(&k.band));
        let _ = writeln!(
            out,
            "cloudai_drift{{node=\"{}\",test=\"{}\",band=\"{}\"}} {}",
            esc(&k.subject),
            esc(&k.test),
            esc(&k.band),
            if f.flagged { 1 } else { 0 }
        );
    }
    family(
        &mut out,
        "cloudai_last_run_timestamp_seconds",
        "When a node, link or node set last measured a test (Unix time).",
        Some("seconds"),
    );
    let mut last: std::collections::BTreeMap<(&str, &str), i64> = Default::default();
    for (k, s) in &series {
        if let Some(p) = s.last() {
            let e = last.entry((&k.subject, &k.test)).or_insert(p.at);
            *e = (*e).max(p.at);
        }
    }
    for ((node, test), at) in last {
        let _ = writeln!(
            out,
            "cloudai_last_run_timestamp_seconds{{node=\"{}\",test=\"{}\"}} {at}",
            esc(node),
            esc(test)
        );
    }
    out.push_str("# EOF\n");
    Ok(out)
}

/// Writes the exposition for node_exporter's textfile collector: whole or not at all (a temporary file renamed).
pub(crate) fn write_file(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    crate::util::fsx::write_atomic(path, text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(esc("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(num(f64::NAN), "NaN");
        assert_eq!(num(1.5), "1.5");
    }
}
