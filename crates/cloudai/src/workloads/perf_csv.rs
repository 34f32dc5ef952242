//! The CSV that NVIDIA's LLM benchmark clients write (AIPerf's `profile_export_aiperf.csv`, GenAI-Perf's
//! `profile_export_genai_perf.csv`), which the Dynamo templates copy to their report: tables one after another,
//! each headed by a row whose first cell is `Metric` — the per-request statistics (`Metric,avg,min,max,p99,…`),
//! then the run's totals (`Metric,Value`), and in newer versions more sections (telemetry) under their own
//! headers. A row belongs to the last header above it; cells are CSV (quoted when they hold a comma).

use indexmap::IndexMap;

use super::judge::{Check, CheckKind};

/// Every metric row by its name: (column, value) as written.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PerfCsv {
    pub rows: IndexMap<String, IndexMap<String, String>>,
}

/// Names the clients have used for the same metric (AIPerf `Time to First Token`, GenAI-Perf `Time To First Token`,
/// a unit suffix on counts in GenAI-Perf's, `Request Throughput (per sec)` / `(requests/sec)`).
pub const TTFT: &[&str] = &["Time to First Token (ms)", "Time To First Token (ms)"];
pub const ITL: &[&str] = &["Inter Token Latency (ms)"];
pub const THROUGHPUT: &[&str] = &["Output Token Throughput (tokens/sec)"];
pub const REQUESTS: &[&str] = &["Request Count", "Request Count (count)", "Request count"];
pub const ERRORS: &[&str] = &["Error Request Count", "Error Request Count (count)"];
pub const REQUEST_RATE: &[&str] = &[
    "Request Throughput (requests/sec)",
    "Request Throughput (per sec)",
];

/// The cells of one CSV line (RFC 4180 quoting: `"a,b"`, `""` inside quotes), each trimmed.
fn cells(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(std::mem::take(&mut cur).trim().to_string()),
            c => cur.push(c),
        }
    }
    out.push(cur.trim().to_string());
    out
}

impl PerfCsv {
    pub fn parse(text: &str) -> Self {
        let mut rows: IndexMap<String, IndexMap<String, String>> = IndexMap::new();
        let mut header: Option<Vec<String>> = None;
        for line in text.lines() {
            let line = line.trim_start_matches('\u{feff}');
            let c = cells(line);
            if c.iter().all(String::is_empty) {
                continue;
            }
            if c[0] == "Metric" {
                header = Some(c);
                continue;
            }
            let Some(h) = &header else { continue };
            let values = h
                .iter()
                .skip(1)
                .zip(c.iter().skip(1))
                .filter(|(_, v)| !v.is_empty())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            rows.insert(c[0].clone(), values);
        }
        Self { rows }
    }

    /// The first of `names` that has one of `columns` as a number (`1,234.5` read as 1234.5).
    pub fn value(&self, names: &[&str], columns: &[&str]) -> Option<f64> {
        names.iter().find_map(|n| {
            let row = self.rows.get(*n)?;
            columns
                .iter()
                .find_map(|c| row.get(*c)?.replace(',', "").parse::<f64>().ok())
        })
    }

    /// The mean of a per-request metric, or a run total.
    pub fn avg(&self, names: &[&str]) -> Option<f64> {
        self.value(names, &["avg", "mean", "Value"])
    }
}

/// The checks a serving benchmark's report passes: its time to first token, inter-token latency and output
/// throughput each above 0, every request `asked` counted (`Request Count`), none failed (`Error Request Count`).
/// `name` is the report's file name, for the messages.
pub(crate) fn checks(csv: &PerfCsv, name: &str, asked: Option<f64>) -> Vec<Check> {
    let mut checks = Vec::new();
    let mut numbers = Vec::new();
    for (label, names) in [
        ("time to first token", TTFT),
        ("inter-token latency", ITL),
        ("output token throughput", THROUGHPUT),
    ] {
        match csv.avg(names) {
            Some(x) if x.is_finite() && x > 0.0 => numbers.push(format!("{label} {x}")),
            Some(x) => checks.push(Check::fail(
                CheckKind::Output,
                format!("{name} gives a {label} of {x}: a measured one is above 0"),
            )),
            None => checks.push(Check::fail(
                CheckKind::Output,
                format!("{name} has no {label} ({})", names[0]),
            )),
        }
    }
    if checks.is_empty() {
        checks.push(Check::pass(
            CheckKind::Output,
            format!("{name}: {}", numbers.join(", ")),
        ));
    }
    let errors = csv.avg(ERRORS).unwrap_or(0.0);
    checks.push(match (csv.avg(REQUESTS), asked) {
        _ if errors > 0.0 => Check::fail(
            CheckKind::Table,
            format!("{errors} request(s) failed ({name}: Error Request Count)"),
        ),
        (Some(n), Some(a)) if n < a => Check::fail(
            CheckKind::Table,
            format!("{n} of the {a} requests asked completed ({name}: Request Count)"),
        ),
        (Some(n), _) => Check::pass(CheckKind::Table, format!("{n} requests completed ({name})")),
        (None, _) => Check::not_shown(
            CheckKind::Table,
            format!("{name} does not count its requests"),
        ),
    });
    checks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_clients_tables_and_quoted_cells() {
        // AIPerf's layout (CloudAI's documentation shows it): statistics, a blank line, totals
        let a = PerfCsv::parse(
            "\u{feff}Metric,avg,min,max,p25,p50,p75,p99,std\n\
             Inter Token Latency (ms),2.81,2.66,2.88,2.79,2.83,2.84,2.87,0.04\n\
             Time to First Token (ms),49.87,17.15,99.91,49.35,49.87,50.52,92.31,9.20\n\
             \n\
             Metric,Value\n\
             Output Token Throughput (tokens/sec),598.78\n\
             Request Throughput (requests/sec),1.20\n\
             Request Count,50.00\n",
        );
        assert_eq!(a.avg(TTFT), Some(49.87));
        assert_eq!(a.value(TTFT, &["p99"]), Some(92.31));
        assert_eq!(a.avg(THROUGHPUT), Some(598.78));
        assert_eq!(a.avg(REQUESTS), Some(50.0));
        assert_eq!(a.avg(ERRORS), None);
        // GenAI-Perf's names, CRLF lines and a quoted thousands separator
        let g = PerfCsv::parse(
            "Metric,avg,min,max,p99,p95,p90,p75,p50,p25\r\n\
             Time To First Token (ms),\"1,008.00\",7.00,9.00,8.98,8.90,8.80,8.50,8.00,7.50\r\n\
             \r\n\
             Metric,Value\r\n\
             Output Token Throughput (tokens/sec),456.00\r\n\
             Request Count (count),3.00\r\n",
        );
        assert_eq!(g.avg(TTFT), Some(1008.0));
        assert_eq!(g.avg(REQUESTS), Some(3.0));
        assert_eq!(g.avg(ITL), None);
        assert_eq!(cells(r#"a,"b ""c"", d",e"#), vec!["a", "b \"c\", d", "e"]);
    }
}
