//! Comparing within and across runs: CloudAI's side-by-side comparison tables, and each size's mean curve and drops
//! against other trees.

use super::*;

/// CloudAI's comparison report, inside the scenario page: the tests that measured the same collective and data type
/// side by side, a latency and a bus-bandwidth table each, per size, out-of-place and in-place for every test, and
/// each test's out-of-place difference from the first one (percent). One group per collective and type with two or
/// more tests (each test's first iteration); at most eight tests a group.
pub(super) fn comparison_tables(entries: &[Entry]) -> String {
    use std::collections::BTreeMap;
    let mut groups: BTreeMap<(String, String), Vec<&Entry>> = BTreeMap::new();
    for e in entries.iter().filter(|e| !e.points.is_empty()) {
        let p = &e.points[0];
        let g = groups
            .entry((
                format!("{} {}", e.record.template, p.collective),
                p.dtype.clone(),
            ))
            .or_default();
        if !g.iter().any(|x| x.record.test_id == e.record.test_id) && g.len() < 8 {
            g.push(e);
        }
    }
    let mut out = String::new();
    for ((what, dtype), members) in groups.iter().filter(|(_, m)| m.len() >= 2) {
        out.push_str(&format!(
            "<h2>Comparison: {} ({})</h2>\n",
            esc(what),
            esc(dtype)
        ));
        let sizes: std::collections::BTreeSet<u64> = members
            .iter()
            .flat_map(|e| e.points.iter().map(|p| p.size))
            .collect();
        let table = |title: &str,
                     unit: &str,
                     oop: fn(&workloads::Point) -> f64,
                     ip: fn(&workloads::Point) -> Option<f64>| {
            let mut t =
                format!("<h3>{title}</h3>\n<table class=\"cmp\">\n<tr><th rowspan=\"2\">size</th>");
            for (i, m) in members.iter().enumerate() {
                let span = if i == 0 { 2 } else { 3 };
                t.push_str(&format!(
                    "<th colspan=\"{span}\" class=\"group\">{}</th>",
                    esc(&m.record.test_id)
                ));
            }
            t.push_str("</tr>\n<tr>");
            for i in 0..members.len() {
                t.push_str(&format!(
                    "<th>out-of-place ({unit})</th><th>in-place ({unit})</th>"
                ));
                if i > 0 {
                    t.push_str("<th>diff</th>");
                }
            }
            t.push_str("</tr>\n");
            for size in &sizes {
                let at = |e: &Entry| e.points.iter().find(|p| p.size == *size).cloned();
                let first = at(members[0]).map(|p| oop(&p));
                t.push_str(&format!("<tr><td>{}</td>", crate::html::size_iec(*size)));
                for (i, m) in members.iter().enumerate() {
                    let p = at(m);
                    let f = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.2}"));
                    t.push_str(&format!(
                        "<td>{}</td><td>{}</td>",
                        f(p.as_ref().map(oop)),
                        f(p.as_ref().and_then(ip))
                    ));
                    if i > 0 {
                        let d = match (first, p.as_ref().map(oop)) {
                            (Some(a), Some(b)) if a > 0.0 => crate::html::pct((b - a) / a * 100.0),
                            _ => String::new(),
                        };
                        t.push_str(&format!("<td>{d}</td>"));
                    }
                }
                t.push_str("</tr>\n");
            }
            t.push_str("</table>\n");
            t
        };
        out.push_str(&table("Latency", "us", |p| p.time_oop_us, |p| p.time_ip_us));
        out.push_str(&table("Bandwidth", "GB/s", |p| p.busbw_oop, |p| p.busbw_ip));
    }
    out
}
/// Mean busbw per size over the given entries.
pub(super) fn mean_curve(entries: &[&Entry]) -> Vec<(u64, f64)> {
    let mut acc: std::collections::BTreeMap<u64, (f64, usize)> = Default::default();
    for e in entries {
        for (s, v) in e.curve.iter().filter(|(_, v)| v.is_finite()) {
            let a = acc.entry(*s).or_default();
            a.0 += v;
            a.1 += 1;
        }
    }
    acc.into_iter()
        .map(|(s, (sum, n))| (s, sum / n as f64))
        .collect()
}

/// Sizes where `cur` is more than `tol` below `base`.
pub(super) fn drops(
    test: &str,
    label: &str,
    baseline: &str,
    base: &[(u64, f64)],
    cur: &[(u64, f64)],
    tol: f64,
) -> Vec<Flag> {
    cur.iter()
        .filter_map(|(s, v)| {
            let (_, b) = base.iter().find(|(bs, _)| bs == s)?;
            let drop = (b - v) / b;
            (*b > 0.0 && drop > tol).then(|| Flag {
                test_id: test.into(),
                label: label.into(),
                baseline: baseline.into(),
                size: *s,
                baseline_busbw: *b,
                busbw: *v,
                drop_pct: (drop * 1000.0).round() / 10.0,
            })
        })
        .collect()
}
