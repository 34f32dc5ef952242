//! JUnit XML of a scenario, for CI systems (GitLab, Jenkins): one `testsuite` per scenario, one `testcase` per
//! test iteration. Interface, keep stable:
//! - `classname` = `<scenario>.<test id>`, `name` = `<test id>` or `<test id> #<iteration>` when it repeats;
//! - `time` = seconds from start (or submission) to end, 0 when it never ran;
//! - FAILED, TIMEOUT and CANCELLED → `<failure type="STATUS" message="reason">` with the end reason and job in
//!   the body; SKIPPED and DRY-RUN → `<skipped message=…>`; PASSED and STOPPED pass;
//! - `<system-out>` names the iteration directory, the checks behind the verdict (`check shape: pass: 16 ranks on
//!   2 hosts (a, b)`, one line each) and its `stdout.txt` (GitLab's `[[ATTACHMENT|path]]` form).

use std::fmt::Write as _;
use std::path::Path;

use chrono::DateTime;

use crate::results::{IterationRecord, Status};

/// XML text: escaped as in HTML, without the control characters XML 1.0 forbids (a log may hold any byte).
fn xml(s: &str) -> String {
    let allowed = |c: &char| {
        (!c.is_control() || matches!(c, '\t' | '\n' | '\r'))
            && !matches!(c, '\u{FFFE}' | '\u{FFFF}')
    };
    crate::html::esc(&s.chars().filter(allowed).collect::<String>())
}

fn seconds(r: &IterationRecord) -> f64 {
    let t = |s: &Option<String>| {
        s.as_deref()
            .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
    };
    match (t(&r.started_at).or(t(&r.submitted_at)), t(&r.ended_at)) {
        (Some(a), Some(b)) => ((b - a).num_milliseconds().max(0) as f64) / 1000.0,
        _ => 0.0,
    }
}

/// The JUnit document for a scenario's records.
pub(crate) fn render(scenario: &str, records: &[IterationRecord]) -> String {
    let count = |f: fn(Status) -> bool| records.iter().filter(|r| f(r.status)).count();
    let failures = count(|s| {
        matches!(
            s,
            Status::Failed | Status::Timeout | Status::Cancelled | Status::Interrupted
        )
    });
    let skipped = count(|s| matches!(s, Status::Skipped | Status::DryRun));
    let total: f64 = records.iter().map(seconds).sum();
    let stamp = records
        .iter()
        .filter_map(|r| r.submitted_at.as_deref())
        .min()
        .unwrap_or("");
    let mut o = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        o,
        "<testsuites name=\"cloudai\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" skipped=\"{skipped}\" time=\"{total:.3}\">",
        records.len()
    );
    let _ = writeln!(
        o,
        "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" skipped=\"{skipped}\" time=\"{total:.3}\"{}>",
        xml(scenario),
        records.len(),
        if stamp.is_empty() {
            String::new()
        } else {
            format!(" timestamp=\"{}\"", xml(stamp))
        }
    );
    for r in records {
        let name = if r.iterations > 1 {
            format!("{} #{}", r.test_id, r.iteration)
        } else {
            r.test_id.clone()
        };
        let _ = writeln!(
            o,
            "    <testcase classname=\"{}.{}\" name=\"{}\" time=\"{:.3}\">",
            xml(scenario),
            xml(&r.test_id),
            xml(&name),
            seconds(r)
        );
        let what = if r.message.is_empty() {
            r.status.as_str().to_string()
        } else {
            r.message.clone()
        };
        match r.status {
            Status::Failed | Status::Timeout | Status::Cancelled | Status::Interrupted => {
                let mut body = format!("end reason: {}\n", r.end_reason.as_str());
                if let Some(j) = &r.job_id {
                    let _ = writeln!(body, "job: {j} ({})", r.scheduler);
                }
                if !r.nodes.is_empty() {
                    let _ = writeln!(body, "nodes: {}", r.nodes.join(","));
                }
                if let Some(s) = &r.scheduler_state {
                    let _ = writeln!(body, "scheduler state: {s}");
                }
                body.push_str(&r.message);
                let _ = writeln!(
                    o,
                    "      <failure type=\"{}\" message=\"{}\">{}</failure>",
                    r.status.as_str(),
                    xml(&what),
                    xml(&body)
                );
            }
            Status::Skipped | Status::DryRun => {
                let _ = writeln!(o, "      <skipped message=\"{}\"/>", xml(&what));
            }
            Status::Passed | Status::Stopped => {}
        }
        let stdout = Path::new(&r.output_path).join("stdout.txt");
        let checks: String = r
            .checks
            .iter()
            .map(|c| {
                format!(
                    "check {}: {}: {}\n",
                    c.check.as_str(),
                    c.status.as_str(),
                    c.detail
                )
            })
            .collect();
        let _ = writeln!(
            o,
            "      <system-out>results: {}\n{}[[ATTACHMENT|{}]]</system-out>",
            xml(&r.output_path),
            xml(&checks),
            xml(&stdout.display().to_string())
        );
        o.push_str("    </testcase>\n");
    }
    o.push_str("  </testsuite>\n</testsuites>\n");
    o
}

/// Writes the JUnit file atomically.
pub fn write(path: &Path, scenario: &str, records: &[IterationRecord]) -> std::io::Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    crate::util::fsx::write_changed(path, render(scenario, records).as_bytes()).map(drop)
}
