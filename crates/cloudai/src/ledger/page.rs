//! `history page`: one self-contained HTML page of trends (offline, like every other page): every series' runs,
//! median, noise and drift in a table, and charts of the busbw at the largest size (or a pair's peak, or a key
//! metric) over runs with the series' noise band — drifting series first, then the weakest, at most
//! [`CHARTS`] charts so a 4,096-node fleet's page stays readable.

use std::collections::BTreeMap;

use super::drift::{self, Finding};
use super::query::{higher_is_better, SeriesKey, SeriesPoint};
use crate::html::{chart, chart_spec, esc, page, rich_series, with_refs};

/// Charts on one page.
pub(crate) const CHARTS: usize = 60;

/// The band a series' chart shows by preference: the bandwidth-bound one.
fn headline(band: &str) -> bool {
    !matches!(band, "small" | "medium")
}

pub(crate) fn render(title: &str, series: &BTreeMap<SeriesKey, Vec<SeriesPoint>>) -> String {
    let mut judged: Vec<(&SeriesKey, &Vec<SeriesPoint>, Finding)> = series
        .iter()
        .map(|(k, s)| {
            let v: Vec<f64> = s.iter().map(|p| p.value).collect();
            (k, s, drift::judge(&v, higher_is_better(&k.band)))
        })
        .collect();
    // drifting first, then the furthest below their own median
    judged.sort_by(|a, b| {
        b.2.flagged
            .cmp(&a.2.flagged)
            .then(a.2.latest.total_cmp(&b.2.latest))
            .then(a.0.cmp(b.0))
    });
    let flagged = judged.iter().filter(|j| j.2.flagged).count();
    let mut body = format!(
        "<h1>{}</h1>\n<p>{} series from the ledger; <span class=\"{}\">{flagged} drifting</span> (a slide beyond the series' \
         own noise over its recent runs; see docs/ledger.md).</p>\n",
        esc(title),
        judged.len(),
        if flagged > 0 { "fail" } else { "pass" }
    );
    let mut charts = serde_json::Map::new();
    for (i, (k, s, f)) in judged
        .iter()
        .filter(|j| headline(&j.0.band) || j.2.flagged)
        .take(CHARTS)
        .enumerate()
    {
        let pts: Vec<(u64, f64, serde_json::Value)> = s
            .iter()
            .enumerate()
            .map(|(n, p)| {
                let when = chrono::DateTime::from_timestamp(p.at, 0)
                    .map(|t| t.with_timezone(&chrono::Local).format("%Y-%m-%d %H:%M").to_string())
                    .unwrap_or_default();
                (
                    n as u64 + 1,
                    p.value,
                    serde_json::json!({"time": when, "status": if p.passed { "passed" } else { "failed" }}),
                )
            })
            .collect();
        let key = format!("trend-{i}");
        let mut spec = chart_spec(
            &format!("{} · {} · {}", k.subject, k.test, k.band),
            &if k.band == "peak" || headline(&k.band) && k.band.len() <= 6 {
                crate::workloads::Metric::BUSBW.label()
            } else if let Some(m) = super::query::band_metric(&k.band) {
                m.label()
            } else {
                k.band.clone()
            },
            "",
            false,
            vec![rich_series(&k.subject, pts, false)],
        );
        spec["linearX"] = true.into();
        spec["xlabel"] = "run".into();
        let noise = f.noise * f.median.abs();
        let spec = with_refs(
            spec,
            &[
                ("median", f.median),
                ("median − 2σ", f.median - 2.0 * noise),
                ("median + 2σ", f.median + 2.0 * noise),
            ],
        );
        charts.insert(key.clone(), spec);
        body.push_str(&format!(
            "<h2 class=\"{}\">{} · {} · {}{}</h2>\n{}\n",
            if f.flagged { "fail" } else { "" },
            esc(&k.subject),
            esc(&k.test),
            esc(&k.band),
            if f.flagged {
                format!(
                    " — drifting: {:.1}% over {} runs ({:.1} σ)",
                    f.slide * 100.0,
                    f.window,
                    f.sigmas
                )
            } else {
                String::new()
            },
            chart(&key)
        ));
    }
    body.push_str(
        "<h2>Every series</h2>\n<table><tr><th class=\"l\">node, link or node set</th><th class=\"l\">test</th>\
         <th class=\"l\">band</th><th>runs</th><th>median</th><th>noise σ</th><th>latest vs median</th>\
         <th>largest slide</th><th class=\"l\">drift</th></tr>\n",
    );
    for (k, s, f) in &judged {
        body.push_str(&format!(
            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td>{:.2}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td class=\"l {}\">{}</td></tr>\n",
            esc(&k.subject),
            esc(&k.test),
            esc(&k.band),
            s.len(),
            f.median,
            crate::html::pct(f.noise * 100.0),
            crate::html::pct(f.latest * 100.0),
            crate::html::pct(f.slide * 100.0),
            if f.flagged { "fail" } else { "pass" },
            if f.flagged {
                "drifting"
            } else if s.len() < drift::MIN_RUNS {
                "too few runs"
            } else {
                "steady"
            }
        ));
    }
    body.push_str("</table>\n");
    page(title, &body, &serde_json::json!({ "charts": charts }))
}
