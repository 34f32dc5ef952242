//! Per-iteration NCCL reports: `cloudai_nccl_test_csv_report.csv` (CloudAI's columns) and
//! `cloudai_nccl_test_bokeh_report.html` (name kept for compatibility; our own offline charts).

use super::grade::Metrics;
use super::parse::{Output, Row, Side};
use crate::html::{chart, chart_spec, esc, human_size, page, rich_series, size_iec, with_refs};
use crate::util::pytoml::py_float;
mod csv;
pub use csv::*;

pub(crate) const CSV_FILE: &str = "cloudai_nccl_test_csv_report.csv";
pub(crate) const HTML_FILE: &str = "cloudai_nccl_test_bokeh_report.html";

fn side(r: &Row, in_place: bool) -> Option<&Side> {
    if in_place {
        r.in_place.as_ref()
    } else {
        Some(&r.out_of_place)
    }
}

/// Rows shown in an iteration's page (table and charts) and kept in its curve for the scenario page; the CSV
/// holds every row. Pages stay small and fast however long the log.
pub(crate) const REPORT_ROW_CAP: usize = 5000;

/// Why a row is flagged on the page: wrong results on either side, the peak that fell below `min_busbw`, or what
/// the caller marks for its size (below the baseline).
fn row_problem(
    r: &Row,
    m: &Metrics,
    min_busbw: Option<f64>,
    marks: &[(u64, String)],
) -> Option<String> {
    let wrong = |s: &Side| {
        let t = s.wrong_text.trim();
        !(t.is_empty() || t == "0" || t == "N/A")
    };
    if wrong(&r.out_of_place) || r.in_place.as_ref().is_some_and(wrong) {
        return Some("wrong results (#wrong)".into());
    }
    if let Some((_, why)) = marks.iter().find(|(size, _)| *size == r.size) {
        return Some(why.clone());
    }
    match min_busbw {
        Some(min) if m.peak_busbw < min && r.size == m.peak_size => {
            Some("peak below min_busbw".into())
        }
        _ => None,
    }
}

/// The page for one iteration: what ran (collective, type, op, versions, ranks, command), summary cards, bus
/// bandwidth, latency and algorithm-bandwidth charts with the failing sizes marked, and the table with
/// out-of-place / in-place groups and its failing rows highlighted. A run without rows shows why instead.
pub fn html(
    title: &str,
    out: &Output,
    m: &Metrics,
    verdict: &str,
    passed: bool,
    min_busbw: Option<f64>,
) -> String {
    html_with(title, out, m, verdict, passed, min_busbw, None)
}

/// [`html`], with the command line that ran.
pub fn html_with(
    title: &str,
    out: &Output,
    m: &Metrics,
    verdict: &str,
    passed: bool,
    min_busbw: Option<f64>,
    command: Option<&str>,
) -> String {
    let ran = Ran {
        command,
        files: &[],
    };
    html_marked(title, out, m, verdict, passed, min_busbw, &ran, &[])
}

/// What ran, for the page's facts: the command the scheduler ran, and the iteration's files to link (the job's
/// script, manifest or payload, stdout.txt, stderr.txt, …).
pub struct Ran<'a> {
    pub command: Option<&'a str>,
    pub files: &'a [String],
}

/// [`html_with`], with sizes the caller flags (size, why): a baseline's drops.
#[allow(clippy::too_many_arguments)]
pub(crate) fn html_marked(
    title: &str,
    out: &Output,
    m: &Metrics,
    verdict: &str,
    passed: bool,
    min_busbw: Option<f64>,
    ran: &Ran,
    marks: &[(u64, String)],
) -> String {
    let command = ran.command;
    let (gpu, per_node, ranks) = device_facts(out);
    let total = out
        .runs
        .iter()
        .map(|r| r.tally.rows as usize)
        .sum::<usize>();
    let rows: Vec<&Row> = out
        .runs
        .iter()
        .flat_map(|r| r.rows.iter())
        .take(REPORT_ROW_CAP)
        .collect();
    // every chart point carries the other values of its row, for the hover and the CSV export
    let rich = |ip: bool, val: fn(&Side) -> f64, extra: fn(&Side) -> serde_json::Value| {
        rows.iter()
            .filter_map(|r| side(r, ip).map(|s| (r.size, val(s), extra(s))))
            .collect::<Vec<_>>()
    };
    let bw_extra: fn(&Side) -> serde_json::Value = |s| serde_json::json!({"algbw": format!("{:.2} GB/s", s.algbw), "time": format!("{} us", s.time_us)});
    let t_extra: fn(&Side) -> serde_json::Value = |s| serde_json::json!({"busbw": format!("{:.2} GB/s", s.busbw), "algbw": format!("{:.2} GB/s", s.algbw)});
    let alg_extra: fn(&Side) -> serde_json::Value = |s| serde_json::json!({"busbw": format!("{:.2} GB/s", s.busbw), "time": format!("{} us", s.time_us)});
    let pair = |val: fn(&Side) -> f64, extra: fn(&Side) -> serde_json::Value| {
        vec![
            rich_series("out-of-place", rich(false, val, extra), false),
            rich_series("in-place", rich(true, val, extra), true),
        ]
    };
    let refs: Vec<(&str, f64)> = min_busbw
        .map(|m| vec![("min_busbw", m)])
        .unwrap_or_default();
    let failing: Vec<(u64, f64, serde_json::Value)> = rows
        .iter()
        .filter_map(|r| {
            row_problem(r, m, min_busbw, marks).map(|why| {
                (
                    r.size,
                    r.out_of_place.busbw,
                    serde_json::json!({ "problem": why }),
                )
            })
        })
        .collect();
    let mut busbw_series = pair(|s| s.busbw, bw_extra);
    if !failing.is_empty() {
        let mut f = rich_series("failing sizes", failing, false);
        f["pointsOnly"] = true.into();
        f["color"] = "#cf222e".into();
        // an X: the in-place series' markers are squares
        f["marker"] = "cross".into();
        busbw_series.push(f);
    }
    let data = serde_json::json!({ "charts": {
        "busbw": with_refs(chart_spec("Bus bandwidth", "busbw (GB/s)", "GB/s", false, busbw_series), &refs),
        "latency": chart_spec("Latency", "time (us, log)", "us", true, pair(|s| s.time_us, t_extra)),
        "algbw": chart_spec("Algorithm bandwidth", "algbw (GB/s)", "GB/s", false, pair(|s| s.algbw, alg_extra)),
    }});
    let mut body = format!(
        "<h1>{}</h1>\n<p class=\"{}\">{}</p>\n",
        esc(title),
        if passed { "pass" } else { "fail" },
        esc(verdict)
    );
    // what ran, at the top
    let run = out
        .runs
        .iter()
        .find(|r| !r.rows.is_empty())
        .or(out.runs.first());
    let first = rows.first();
    let mut facts: Vec<(String, String)> = Vec::new();
    if let Some(t) = run.and_then(|r| r.test.clone()) {
        facts.push(("collective".into(), t));
    }
    if let Some(r) = first {
        facts.push(("type / op".into(), format!("{} / {}", r.dtype, r.redop)));
    }
    if let Some(v) = run.and_then(|r| r.version.clone()) {
        facts.push(("nccl-tests / NCCL".into(), v));
    }
    facts.push((
        "ranks".into(),
        format!(
            "{ranks} ({} node{} × {per_node} GPU{}{})",
            m.nodes,
            if m.nodes == 1 { "" } else { "s" },
            if per_node == 1 { "" } else { "s" },
            if gpu.is_empty() {
                String::new()
            } else {
                format!(", {gpu}")
            }
        ),
    ));
    if let Some(c) = command {
        facts.push(("command".into(), c.to_string()));
    }
    if !ran.files.is_empty() {
        facts.push(("files".into(), String::new()));
    }
    body.push_str("<table class=\"facts\">\n");
    for (k, v) in &facts {
        let v = if k == "command" {
            format!("<code>{}</code>", esc(v))
        } else if k == "files" {
            // beside the page in the iteration's directory: relative links travel with the tree
            ran.files
                .iter()
                .map(|f| format!("<a href=\"{0}\">{0}</a>", esc(f)))
                .collect::<Vec<_>>()
                .join(" &middot; ")
        } else {
            esc(v)
        };
        body.push_str(&format!(
            "<tr><th class=\"l\">{}</th><td class=\"l\">{v}</td></tr>\n",
            esc(k)
        ));
    }
    body.push_str("</table>\n");
    if rows.is_empty() {
        // no result row: why, in the output's own words, instead of zeros and empty charts
        body.push_str("<h2>No result rows</h2>\n<p>The output holds no nccl-tests result row. What it said:</p>\n<pre class=\"excerpt\">");
        let mut lines: Vec<String> = out
            .errors
            .iter()
            .take(20)
            .map(|e| format!("stdout.txt:{}: {}", e.line, e.text))
            .collect();
        if lines.is_empty() {
            lines.push(
                "(no error line either: the program printed nothing recognisable; see stderr.txt)"
                    .into(),
            );
        }
        body.push_str(&esc(&lines.join("\n")));
        body.push_str("</pre>\n");
        return page(title, &body, &serde_json::json!({ "charts": {} }));
    }
    let card = |label: &str, value: String| {
        format!(
            "<div class=\"card\"><span class=\"muted\">{}</span><b>{}</b></div>",
            esc(label),
            esc(&value)
        )
    };
    body.push_str("<div class=\"cards\">");
    body.push_str(&card(
        "peak bus bandwidth",
        format!("{:.2} GB/s at {}", m.peak_busbw, size_iec(m.peak_size)),
    ));
    body.push_str(&card(
        "average bus bandwidth",
        m.avg_busbw.map_or("-".into(), |v| format!("{v:.2} GB/s")),
    ));
    if let (Some(t), Some(s)) = (m.small_latency_us, m.small_size) {
        body.push_str(&card(
            "small-message latency",
            format!("{t:.2} us at {}", size_iec(s)),
        ));
    }
    body.push_str("</div>\n");
    body.push_str(&chart("busbw"));
    body.push_str(&chart("latency"));
    body.push_str(&chart("algbw"));
    body.push_str("<h2>Results</h2>\n");
    if total > rows.len() {
        body.push_str(&format!(
            "<p class=\"muted\">Showing the first {} of {total} rows; {CSV_FILE} holds all of them.</p>\n",
            rows.len()
        ));
    }
    body.push_str("<table class=\"results\">\n<tr><th colspan=\"5\"></th><th colspan=\"4\" class=\"group\">out-of-place</th><th colspan=\"4\" class=\"group\">in-place</th><th></th></tr>\n<tr><th>size</th><th>count</th><th class=\"l\">type</th><th class=\"l\">redop</th><th>root</th><th>time (us)</th><th>algbw (GB/s)</th><th>busbw (GB/s)</th><th>#wrong</th><th>time (us)</th><th>algbw (GB/s)</th><th>busbw (GB/s)</th><th>#wrong</th><th class=\"l\">problem</th></tr>\n");
    for r in &rows {
        let ip = r.in_place.as_ref();
        let cell = |v: Option<String>| format!("<td>{}</td>", esc(&v.unwrap_or_default()));
        let problem = row_problem(r, m, min_busbw, marks);
        body.push_str(&format!(
            "<tr{}><td>{}</td><td>{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td>{}{}{}{}{}{}{}{}{}<td class=\"l\">{}</td></tr>\n",
            if problem.is_some() { " class=\"flag\"" } else { "" },
            size_iec(r.size),
            r.count,
            esc(&r.dtype),
            esc(&r.redop),
            cell(r.root.map(|x| x.to_string())),
            cell(Some(format!("{:.2}", r.out_of_place.time_us))),
            cell(Some(format!("{:.2}", r.out_of_place.algbw))),
            cell(Some(format!("{:.2}", r.out_of_place.busbw))),
            cell(Some(r.out_of_place.wrong_text.to_string())),
            cell(ip.map(|s| format!("{:.2}", s.time_us))),
            cell(ip.map(|s| format!("{:.2}", s.algbw))),
            cell(ip.map(|s| format!("{:.2}", s.busbw))),
            cell(ip.map(|s| s.wrong_text.to_string())),
            esc(problem.as_deref().unwrap_or("")),
        ));
    }
    body.push_str("</table>\n");
    page(title, &body, &data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::nccl::parse::parse;

    #[test]
    fn csv_matches_cloudai_for_the_reference_sample() {
        let text = "#  Rank  0 Group  0 Pid 1 on h device  0 [0000:14:00] NVIDIA A100-SXM4-80GB\n\
                    #  Rank  1 Group  0 Pid 1 on h device  1 [0000:19:00] NVIDIA A100-SXM4-80GB\n\
                    #       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong\n\
                    \x20 134217728      33554432     float     sum      -1  1295.41  103.61  181.32       0  1284.21  104.51  182.90       0\n\
                    \x20 1073741824    268435456     float     sum      -1    10314  104.11  195.20       0    10339  103.85  194.73     N/A\n";
        let c = csv(&parse(text));
        let lines: Vec<&str> = c.lines().collect();
        assert_eq!(lines[1], "134217728,33554432,float,sum,-1,1295.41,103.61,181.32,0,1284.21,104.51,182.9,0,A100-SXM4-80GB,2,2,128MB");
        assert_eq!(lines[2], "1073741824,268435456,float,sum,-1,10314.0,104.11,195.2,0,10339.0,103.85,194.73,N/A,A100-SXM4-80GB,2,2,1GB");
    }
}
