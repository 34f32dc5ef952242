//! The baseline section of the scenario page: per test, the mean out-of-place busbw of its iterations over the
//! baseline's (a chart overlay), a per-size table with the drop and its verdict, and what the baseline lacks.

use std::collections::BTreeMap;

use super::summary::Entry;
pub use super::summary::SizeRow;
use crate::baseline::Grading;
use crate::html::{chart, chart_spec, esc, series};

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
        // (shape, size) → (sum, n, baseline, worst status)
        let mut per: BTreeMap<(String, u64), (f64, usize, f64, &str)> = BTreeMap::new();
        for c in &checks {
            for r in c.rows.iter().filter(|r| r.side == "out-of-place") {
                let e = per
                    .entry((r.shape.clone(), r.size))
                    .or_insert((0.0, 0, r.baseline, "ok"));
                e.0 += r.busbw;
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
        let shapes: Vec<String> = {
            let mut s: Vec<String> = per.keys().map(|(sh, _)| sh.clone()).collect();
            s.dedup();
            s
        };
        for shape in &shapes {
            let rows: Vec<(u64, f64, f64, &str)> = per
                .iter()
                .filter(|((sh, _), _)| sh == shape)
                .map(|((_, size), (sum, n, base, st))| (*size, sum / *n as f64, *base, *st))
                .collect();
            let key = format!("baseline-{id}-{shape}");
            let mine: Vec<(u64, f64)> = rows.iter().map(|r| (r.0, r.1)).collect();
            let base: Vec<(u64, f64)> = rows.iter().map(|r| (r.0, r.2)).collect();
            charts.insert(
                key.clone(),
                chart_spec(
                    &format!("{id}: {shape} out-of-place busbw vs baseline"),
                    "busbw (GB/s)",
                    "GB/s",
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
            out.push_str("\n<table><tr><th>size</th><th>baseline busbw</th><th>busbw</th><th>drop</th><th class=\"l\">verdict</th></tr>\n");
            for (size, cur, b, st) in rows {
                table.push(SizeRow {
                    test_id: id.to_string(),
                    shape: shape.clone(),
                    size,
                    baseline_gbps: b,
                    busbw_gbps: cur,
                    drop_pct: ((b - cur) / b * 1000.0).round() / 10.0,
                    status: st.to_string(),
                });
                let class = if st == "drop" { " class=\"flag\"" } else { "" };
                out.push_str(&format!(
                    "<tr{class}><td>{}</td><td>{b:.2}</td><td>{cur:.2}</td><td>{}</td><td class=\"l\">{}</td></tr>\n",
                    crate::html::size_iec(size),
                    crate::html::pct((b - cur) / b * 100.0),
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
