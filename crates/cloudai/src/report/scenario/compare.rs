//! Comparing within and across runs: CloudAI's side-by-side comparison tables, and each size's mean curve and drops
//! against other trees.

use super::*;

/// CloudAI's comparison report, inside the scenario page: the tests that measured the same collective and data type
/// side by side, a latency and a bus-bandwidth table each, per size, out-of-place and in-place for every test, and
/// each test's out-of-place difference from the first one (percent). One group per collective and type with two or
/// more tests (each test's first iteration); at most eight tests a group.
pub(super) fn comparison_tables(entries: &[Entry]) -> String {
    use std::collections::BTreeMap;
    let mut groups: BTreeMap<(String, String, workloads::Metric), Vec<&Entry>> = BTreeMap::new();
    for e in entries.iter().filter(|e| !e.points.is_empty()) {
        let p = &e.points[0];
        let g = groups
            .entry((
                format!("{} {}", e.record.template, p.collective),
                p.dtype.clone(),
                p.metric,
            ))
            .or_default();
        if !g.iter().any(|x| x.record.test_id == e.record.test_id) && g.len() < 8 {
            g.push(e);
        }
    }
    let mut out = String::new();
    for ((what, dtype, metric), members) in groups.iter().filter(|(_, m)| m.len() >= 2) {
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
                     oop: fn(&workloads::Point) -> Option<f64>,
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
                let first = at(members[0]).and_then(|p| oop(&p));
                t.push_str(&format!("<tr><td>{}</td>", crate::html::size_iec(*size)));
                for (i, m) in members.iter().enumerate() {
                    let p = at(m);
                    let f = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.2}"));
                    t.push_str(&format!(
                        "<td>{}</td><td>{}</td>",
                        f(p.as_ref().and_then(oop)),
                        f(p.as_ref().and_then(ip))
                    ));
                    if i > 0 {
                        let d = match (first, p.as_ref().and_then(oop)) {
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
        // the time of one operation, then the metric (CloudAI's pair: latency and bus bandwidth); a latency is shown once
        if *metric != workloads::Metric::LATENCY {
            out.push_str(&table("Latency", "us", |p| p.time_us, |p| p.time_ip_us));
        }
        let title = match metric.name {
            "busbw" => "Bandwidth".to_string(),
            other => format!("{}{}", other[..1].to_uppercase(), &other[1..]),
        };
        out.push_str(&table(
            &title,
            metric.unit,
            |p| Some(p.value),
            |p| p.in_place,
        ));
    }
    out
}
/// Mean value per size over the given entries (their curves' metric).
pub(super) fn mean_curve(entries: &[&Entry]) -> Vec<(u64, f64)> {
    let mut acc: std::collections::BTreeMap<u64, (f64, usize)> = Default::default();
    for e in entries {
        for (s, v) in e.curve.points.iter().filter(|(_, v)| v.is_finite()) {
            let a = acc.entry(*s).or_default();
            a.0 += v;
            a.1 += 1;
        }
    }
    acc.into_iter()
        .map(|(s, (sum, n))| (s, sum / n as f64))
        .collect()
}

/// Sizes where `cur` is more than `tol` worse than `base` in the direction of `metric`.
pub(super) fn drops(
    test: &str,
    label: &str,
    baseline: &str,
    metric: workloads::Metric,
    base: &[(u64, f64)],
    cur: &[(u64, f64)],
    tol: f64,
) -> Vec<Flag> {
    cur.iter()
        .filter_map(|(s, v)| {
            let (_, b) = base.iter().find(|(bs, _)| bs == s)?;
            let drop = metric.loss(*b, *v)?;
            (drop > tol).then(|| Flag {
                test_id: test.into(),
                label: label.into(),
                baseline: baseline.into(),
                size: *s,
                metric,
                unit: metric.unit,
                baseline_value: *b,
                value: *v,
                drop_pct: (drop * 1000.0).round() / 10.0,
            })
        })
        .collect()
}

/// What comparing found: the sizes that dropped, the page's sections (their charts added to the page's) and a note
/// for each `--compare` tree that matched nothing.
pub(super) struct Compared {
    pub flags: Vec<Flag>,
    pub sections: String,
    pub notes: Vec<String>,
}

/// Each test's iterations against its first, and this run against every `--compare` tree (the mean curve per
/// test id), one chart a test, in the metric of its first iteration.
pub(super) fn within_and_across(
    entries: &[Entry],
    ids: &[String],
    opts: &Options,
    charts: &mut serde_json::Map<String, serde_json::Value>,
) -> Compared {
    let others: Vec<(String, Vec<Entry>)> = opts
        .compare
        .iter()
        .map(|d| (d.display().to_string(), read_tree(d, false)))
        .collect();
    let mut flags = Vec::new();
    let mut sections = String::new();
    let mut matched = std::collections::HashSet::new();
    // each test's entries with results, here and in every compared tree: one pass each, not one per test
    let with_curves = |list: &'_ [Entry]| {
        let mut m: std::collections::HashMap<String, Vec<usize>> = std::collections::HashMap::new();
        for (i, e) in list.iter().enumerate() {
            if !e.curve.is_empty() {
                m.entry(e.record.test_id.clone()).or_default().push(i);
            }
        }
        m
    };
    let mine_by_id = with_curves(entries);
    let theirs_by_id: Vec<_> = others.iter().map(|(_, t)| with_curves(t)).collect();
    for id in ids {
        let mine: Vec<&Entry> = mine_by_id
            .get(id)
            .map(|ix| ix.iter().map(|i| &entries[*i]).collect())
            .unwrap_or_default();
        if mine.is_empty() {
            continue;
        }
        let flags_from = flags.len();
        // one metric a chart: the first iteration's (an iteration or tree measuring another is not compared)
        let metric = mine[0].curve.metric;
        let mine: Vec<&Entry> = mine
            .into_iter()
            .filter(|e| e.curve.metric == metric)
            .collect();
        let mut ser = Vec::new();
        if mine.len() > 1 {
            for e in &mine {
                ser.push(series(
                    &format!("iteration {}", e.record.iteration),
                    &e.curve.points,
                    false,
                ));
                if e.record.iteration > mine[0].record.iteration {
                    let label = format!("iteration {}", e.record.iteration);
                    let base = format!("iteration {}", mine[0].record.iteration);
                    flags.extend(drops(
                        id,
                        &label,
                        &base,
                        metric,
                        &mine[0].curve.points,
                        &e.curve.points,
                        opts.tolerance,
                    ));
                }
            }
        }
        let cur = mean_curve(&mine);
        for ((other, theirs), by_id) in others.iter().zip(&theirs_by_id) {
            let t: Vec<&Entry> = by_id
                .get(id)
                .map(|ix| {
                    ix.iter()
                        .map(|i| &theirs[*i])
                        .filter(|e| e.curve.metric == metric)
                        .collect()
                })
                .unwrap_or_default();
            if t.is_empty() {
                continue;
            }
            matched.insert(other.clone());
            let base = mean_curve(&t);
            if ser.is_empty() {
                ser.push(series("this run", &cur, false));
            }
            ser.push(series(other, &base, true));
            flags.extend(drops(
                id,
                "this run",
                other,
                metric,
                &base,
                &cur,
                opts.tolerance,
            ));
        }
        if ser.is_empty() {
            continue;
        }
        let key = format!("cmp-{id}");
        charts.insert(
            key.clone(),
            chart_spec(
                &format!(
                    "{id}: {}",
                    if metric == workloads::Metric::BUSBW {
                        "bus bandwidth"
                    } else {
                        metric.name
                    }
                ),
                &metric.label(),
                metric.unit,
                false,
                ser,
            ),
        );
        sections.push_str(&format!("<h2>{}</h2>\n{}\n", esc(id), chart(&key)));
        // this test's flags are the ones just added
        let mine_flags: Vec<&Flag> = flags[flags_from..].iter().collect();
        if !mine_flags.is_empty() {
            sections.push_str(&format!(
                "<p class=\"fail\">{} size(s) {} more than {}% {} the baseline</p>\n<table><tr><th class=\"l\">run</th><th class=\"l\">baseline</th><th>size</th><th>baseline {4}</th><th>{4}</th><th>{5}</th></tr>\n",
                mine_flags.len(),
                if metric.higher_is_better { "dropped" } else { "rose" },
                opts.tolerance * 100.0,
                if metric.higher_is_better { "below" } else { "above" },
                esc(&metric.label()),
                if metric.higher_is_better { "drop" } else { "rise" },
            ));
            for f in mine_flags {
                sections.push_str(&format!(
                    "<tr class=\"flag\"><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td>{:.2}</td><td>{:.2}</td><td>{}</td></tr>\n",
                    esc(&f.label),
                    esc(&f.baseline),
                    crate::html::size_iec(f.size),
                    f.baseline_value,
                    f.value,
                    crate::html::pct(f.drop_pct)
                ));
            }
            sections.push_str("</table>\n");
        }
    }

    // a comparison that compares nothing must say so, not show an empty page
    let mut notes = Vec::new();
    for (other, theirs) in &others {
        if matched.contains(other) {
            continue;
        }
        let note = if theirs.iter().all(|e| e.curve.is_empty()) {
            format!("--compare {other}: no iteration there has NCCL results to compare with")
        } else {
            let mut their_ids: Vec<&str> =
                theirs.iter().map(|e| e.record.test_id.as_str()).collect();
            their_ids.dedup();
            format!(
                "--compare {other}: none of its tests ({}) has results in this run; comparisons match test ids",
                their_ids.join(", ")
            )
        };
        crate::warn!("{note}");
        sections.insert_str(0, &format!("<p class=\"other\">{}</p>\n", esc(&note)));
        notes.push(note);
    }

    Compared {
        flags,
        sections,
        notes,
    }
}
