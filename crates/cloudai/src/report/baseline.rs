//! The baseline section of the scenario page: per test, the mean out-of-place value of its iterations' metric (bus
//! bandwidth, bandwidth, latency) over the baseline's (a chart overlay), a per-size table with the drop and its verdict, and what the baseline lacks.

use std::collections::BTreeMap;

use super::summary::Entry;
pub use super::summary::SizeRow;
use crate::baseline::Grading;
use crate::html::{chart, chart_spec, esc, series};
use crate::workloads::Metric;

/// The page section, and the per-size rows for summary.json.
pub fn section(
    entries: &[Entry],
    g: &Grading,
    charts: &mut serde_json::Map<String, serde_json::Value>,
) -> (String, Vec<SizeRow>) {
    let mut table = Vec::new();
    let mut out = format!(
        "<h2>Baseline</h2>\n<p class=\"muted\">{} &middot; tolerance {}% &middot; sizes from {} can fail a run</p>\n",
        esc(&g.baseline.file.display().to_string()),
        g.tolerance * 100.0,
        crate::html::size_iec(g.min_size)
    );
    let mut ids: Vec<&str> = entries.iter().map(|e| e.record.test_id.as_str()).collect();
    ids.dedup();
    for id in ids {
        let checks: Vec<&crate::baseline::Check> = entries
            .iter()
            .filter(|e| e.record.test_id == id)
            .filter_map(|e| e.baseline.as_ref())
            .collect();
        if checks.is_empty() {
            continue;
        }
        // (shape, metric, size) → (sum, n, baseline, worst status)
        type Per<'a> = BTreeMap<(String, Metric, u64), (f64, usize, f64, &'a str)>;
        let mut per: Per = BTreeMap::new();
        for c in &checks {
            for r in c.rows.iter().filter(|r| r.side == "out-of-place") {
                let e = per
                    .entry((r.shape.clone(), r.metric, r.size))
                    .or_insert((0.0, 0, r.baseline, "ok"));
                e.0 += r.value;
                e.1 += 1;
                if r.status == "drop" || (e.3 == "ok" && r.status != "ok") {
                    e.3 = r.status;
                }
            }
        }
        let mut missing: Vec<&str> = checks
            .iter()
            .flat_map(|c| c.not_in_baseline.iter().map(String::as_str))
            .collect();
        missing.sort_unstable();
        missing.dedup();
        out.push_str(&format!("<h3>{}</h3>\n", esc(id)));
        let shapes: Vec<(String, Metric)> = {
            let mut s: Vec<(String, Metric)> =
                per.keys().map(|(sh, m, _)| (sh.clone(), *m)).collect();
            s.dedup();
            s
        };
        for (shape, metric) in &shapes {
            let rows: Vec<(u64, f64, f64, &str)> = per
                .iter()
                .filter(|((sh, m, _), _)| sh == shape && m == metric)
                .map(|((_, _, size), (sum, n, base, st))| (*size, sum / *n as f64, *base, *st))
                .collect();
            let key = if *metric == Metric::BUSBW {
                format!("baseline-{id}-{shape}")
            } else {
                format!("baseline-{id}-{shape}-{}", metric.name)
            };
            let mine: Vec<(u64, f64)> = rows.iter().map(|r| (r.0, r.1)).collect();
            let base: Vec<(u64, f64)> = rows.iter().map(|r| (r.0, r.2)).collect();
            charts.insert(
                key.clone(),
                chart_spec(
                    &format!("{id}: {shape} out-of-place {} vs baseline", metric.name),
                    &metric.label(),
                    metric.unit,
                    false,
                    vec![
                        series(
                            &format!("this run (mean of {})", checks.len()),
                            &mine,
                            false,
                        ),
                        series("baseline", &base, true),
                    ],
                ),
            );
            out.push_str(&chart(&key));
            out.push_str(&format!(
                "\n<table><tr><th>size</th><th>baseline {0}</th><th>{0}</th><th>{1}</th><th class=\"l\">verdict</th></tr>\n",
                esc(&metric.label()),
                if metric.higher_is_better { "drop" } else { "rise" }
            ));
            for (size, cur, b, st) in rows {
                let loss = metric.loss(b, cur).unwrap_or(0.0);
                table.push(SizeRow {
                    test_id: id.to_string(),
                    shape: shape.clone(),
                    size,
                    metric: *metric,
                    unit: metric.unit,
                    baseline: b,
                    value: cur,
                    drop_pct: (loss * 1000.0).round() / 10.0,
                    status: st.to_string(),
                });
                let class = if st == "drop" { " class=\"flag\"" } else { "" };
                out.push_str(&format!(
                    "<tr{class}><td>{}</td><td>{b:.2}</td><td>{cur:.2}</td><td>{}</td><td class=\"l\">{}</td></tr>\n",
                    crate::html::size_iec(size),
                    crate::html::pct(loss * 100.0),
                    esc(st)
                ));
            }
            out.push_str("</table>\n");
        }
        if !missing.is_empty() {
            out.push_str(&format!(
                "<p class=\"fail\">not in baseline (not graded): {}</p>\n",
                esc(&missing.join("; "))
            ));
        }
    }
    (out, table)
}
