//! The body of the scenario page: counts, then one row per iteration with its status, end reason, job, nodes,
//! key numbers, reason (with the checks behind the verdict, requeues, queue states and suspect measurements) and
//! report links.

use std::io::Write as _;
use std::path::Path;

use super::summary::{Entry, Summary};
use crate::html::esc;
use crate::results::Status;

/// Writes the body as it is made: one row at a time (a page of 10,000 iterations is not held whole).
pub(super) fn body_to(
    w: &mut dyn std::io::Write,
    s: &Summary,
    sections: &str,
) -> std::io::Result<()> {
    let mut w = std::io::BufWriter::with_capacity(1 << 16, w);
    write!(
        w,
        "<h1>{}</h1>\n<p class=\"muted\">{} &middot; generated {}</p>\n<p>{}</p>\n",
        esc(&s.scenario),
        // the tree's own name: the page travels with the tree (a tarball, a copy), its absolute path does not
        esc(Path::new(&s.results_root)
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or(&s.results_root)),
        esc(&s.generated_at.replacen('T', " ", 1)),
        s.counts
            .iter()
            .map(|(k, v)| format!("{v} {k}"))
            .collect::<Vec<_>>()
            .join(", ")
    )?;
    w.write_all(b"<table>\n<tr><th class=\"l\">test</th><th>iter</th><th class=\"l\">status</th><th class=\"l\">end</th><th class=\"l\">job</th><th class=\"l\">nodes</th><th>peak busbw</th><th>avg busbw</th><th>latency</th><th class=\"l\">reason</th><th class=\"l\">reports</th></tr>\n")?;
    for e in &s.tests {
        let r = &e.record;
        let class = match r.status {
            Status::Passed => "pass",
            Status::Failed | Status::Timeout => "fail",
            _ => "other",
        };
        let num = |k: &str, unit: &str| {
            e.metrics
                .get(k)
                .and_then(|v| v.as_f64())
                .map_or(String::new(), |v| format!("{v:.2} {unit}"))
        };
        let links: Vec<String> = e
            .reports
            .iter()
            .map(|p| {
                format!(
                    "<a href=\"{}\">{}</a>",
                    esc(p),
                    esc(Path::new(p)
                        .extension()
                        .and_then(|x| x.to_str())
                        .unwrap_or("file"))
                )
            })
            .collect();
        writeln!(
            w,
            "<tr><td class=\"l\">{}</td><td>{}</td><td class=\"l {class}\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"reason\">{}</td><td class=\"l\">{}</td></tr>",
            esc(&r.test_id),
            r.iteration,
            r.status.as_str(),
            esc(&r.end_reason.as_str()),
            esc(r.job_id.as_deref().unwrap_or("")),
            esc(&r.nodes.join(",")),
            num("peak_busbw_gbps", "GB/s"),
            num("avg_busbw_gbps", "GB/s"),
            num("small_latency_us", "us"),
            reason_cell(e),
            links.join(" ")
        )?;
    }
    w.write_all(b"</table>\n")?;
    if !sections.is_empty() {
        w.write_all(b"<h2>Comparisons</h2>\n")?;
        w.write_all(sections.as_bytes())?;
    }
    w.flush()
}

/// The reason, then what the scheduler did on the way: every run of a requeued job, and the last pending reason
/// of a job that never started.
fn reason_cell(e: &Entry) -> String {
    let r = &e.record;
    let mut out = esc(&r.message);
    if !r.checks.is_empty() {
        let items: String = r
            .checks
            .iter()
            .map(|c| {
                let class = match c.status {
                    crate::workloads::judge::CheckStatus::Pass => "pass",
                    crate::workloads::judge::CheckStatus::Fail => "fail",
                    crate::workloads::judge::CheckStatus::NotShown => "muted",
                };
                format!(
                    "<li class=\"{class}\">{} {}: {}</li>",
                    c.check.as_str(),
                    c.status.as_str(),
                    esc(&c.detail)
                )
            })
            .collect();
        out.push_str(&format!("<ul class=\"checks\">{items}</ul>"));
    }
    if let Some(s) = &e.suspect {
        out.push_str(&format!("<br><span class=\"fail\">{}</span>", esc(s)));
    }
    if r.attempts.len() > 1 {
        let runs: Vec<String> = r
            .attempts
            .iter()
            .enumerate()
            .map(|(i, a)| format!("#{} {} on {}", i + 1, a.state, a.nodes.join(",")))
            .collect();
        out.push_str(&format!(
            "<br><span class=\"muted\">requeued, {} runs: {}</span>",
            r.attempts.len(),
            esc(&runs.join("; "))
        ));
    }
    if r.started_at.is_none() {
        if let Some(q) = r.queue_states.iter().rev().find(|q| !q.reason.is_empty()) {
            out.push_str(&format!(
                "<br><span class=\"muted\">last queue state: {} ({})</span>",
                esc(&q.state),
                esc(&q.reason)
            ));
        }
    }
    out
}
