//! The workload kit: what every table benchmark's iteration page and CSV share, so a workload says only what it
//! measured. A page is a title, the verdict line, summary cards, charts and sections (tables, preformatted text);
//! a CSV row's numbers are written as CloudAI's Python writes them.

use crate::html::{chart, esc, page};
use crate::util::pytoml::py_float;

/// The node count an iteration ran on, from its `test-run.toml` (1 when unreadable): for reports re-read later.
pub(crate) fn iteration_nodes(dir: &std::path::Path) -> u64 {
    std::fs::read_to_string(dir.join("test-run.toml"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("nnodes = ")?.trim().parse().ok())
        })
        .unwrap_or(1)
}

/// A line of a training log that says something failed (an exception's name, `error:`, a traceback's start): the
/// last such line is quoted when a run fails.
pub(crate) fn error_line(line: &str) -> bool {
    line.contains("Error") || line.contains("error:") || line.contains("Traceback")
}

/// The mean of the numbers, `None` when there are none.
pub(crate) fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// The median of the numbers (the mean of the middle two when their count is even), `None` when there are none.
pub(crate) fn median(v: &[f64]) -> Option<f64> {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => None,
        n if n % 2 == 1 => Some(s[n / 2]),
        n => Some((s[n / 2 - 1] + s[n / 2]) / 2.0),
    }
}

/// A training's step times (step, seconds) as a line chart's spec.
pub(crate) fn step_time_chart(pts: &[(u64, f64)], xlabel: &str) -> serde_json::Value {
    use crate::html::{chart_spec, series};
    let mut spec = chart_spec(
        "Train step timing",
        "step time (s)",
        "s",
        false,
        vec![series("step time", pts, false)],
    );
    spec["xlabel"] = xlabel.into();
    spec["linearX"] = true.into();
    spec
}

/// One cell of a results table: text (escaped) or markup of ours (a bar).
pub enum Cell {
    Text(String),
    Html(String),
}

impl From<String> for Cell {
    fn from(s: String) -> Self {
        Cell::Text(s)
    }
}

impl From<&str> for Cell {
    fn from(s: &str) -> Self {
        Cell::Text(s.to_string())
    }
}

/// A part of the page below its charts.
pub enum Section {
    /// `<h2>` and a table: its header, then its rows.
    Table {
        heading: String,
        header: Vec<String>,
        rows: Vec<Vec<Cell>>,
    },
    /// `<h2>` and preformatted text (errors the output printed).
    Pre { heading: String, text: String },
}

/// An iteration's page.
pub(crate) struct TablePage<'a> {
    pub title: &'a str,
    /// The verdict line (`PASSED`, `FAILED: …`) and whether it passed.
    pub verdict: &'a str,
    pub passed: bool,
    /// Summary cards: (label, value).
    pub cards: Vec<(String, String)>,
    /// The charts' specs by id (`crate::html::chart_spec`), and the ids to show, in order.
    pub charts: serde_json::Value,
    pub show: Vec<&'static str>,
    pub sections: Vec<Section>,
}

impl TablePage<'_> {
    pub(crate) fn render(&self) -> String {
        let mut body = format!(
            "<h1>{}</h1>\n<p class=\"{}\">{}</p>\n<div class=\"cards\">",
            esc(self.title),
            if self.passed { "pass" } else { "fail" },
            esc(self.verdict),
        );
        for (label, value) in &self.cards {
            body.push_str(&format!(
                "<div class=\"card\"><span class=\"muted\">{}</span><b>{}</b></div>",
                esc(label),
                esc(value)
            ));
        }
        body.push_str("</div>\n");
        for id in &self.show {
            body.push_str(&chart(id));
        }
        for s in &self.sections {
            match s {
                Section::Table {
                    heading,
                    header,
                    rows,
                } => {
                    body.push_str(&format!("<h2>{}</h2>\n<table>\n<tr>", esc(heading)));
                    for h in header {
                        body.push_str(&format!("<th>{}</th>", esc(h)));
                    }
                    body.push_str("</tr>\n");
                    for row in rows {
                        body.push_str("<tr>");
                        for c in row {
                            match c {
                                Cell::Text(t) => body.push_str(&format!("<td>{}</td>", esc(t))),
                                Cell::Html(h) => body.push_str(&format!("<td>{h}</td>")),
                            }
                        }
                        body.push_str("</tr>\n");
                    }
                    body.push_str("</table>\n");
                }
                Section::Pre { heading, text } => {
                    body.push_str(&format!(
                        "<h2>{}</h2>\n<pre>{}</pre>\n",
                        esc(heading),
                        esc(text)
                    ));
                }
            }
        }
        page(
            self.title,
            &body,
            &serde_json::json!({ "charts": self.charts }),
        )
    }
}

/// A results table that is both the iteration's CSV and the table on its page: one header, rows of text.
pub(crate) struct Table {
    pub header: Vec<&'static str>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// The table as CSV (a field with a comma or quote is quoted).
    pub(crate) fn csv(&self) -> String {
        let mut s = self.header.join(",") + "\n";
        for r in &self.rows {
            let fields: Vec<String> = r.iter().map(|f| crate::util::csv_field(f)).collect();
            s.push_str(&(fields.join(",") + "\n"));
        }
        s
    }

    /// The table as a page section under `heading`.
    pub(crate) fn section(&self, heading: &str) -> Section {
        Section::Table {
            heading: heading.into(),
            header: self.header.iter().map(|h| h.to_string()).collect(),
            rows: self
                .rows
                .iter()
                .map(|r| r.iter().map(|c| Cell::Text(c.clone())).collect())
                .collect(),
        }
    }
}

/// A CSV number as Python writes it; empty when there is none (or it is NaN: not measured).
pub(crate) fn csv_num(v: Option<f64>) -> String {
    v.filter(|x| !x.is_nan()).map(py_float).unwrap_or_default()
}

/// A table's number with two places, or `none` when there is none.
pub(crate) fn fixed2(v: Option<f64>, none: &str) -> String {
    v.filter(|x| !x.is_nan())
        .map_or(none.to_string(), |v| format!("{v:.2}"))
}

/// The end of each named column in the header line of a table printed with right-aligned columns (pandas'
/// `DataFrame` as text: an index column first, each header right-aligned over its values); None when the line does
/// not name them all, in order.
pub(crate) fn aligned_header(line: &str, columns: &[&str]) -> Option<Vec<usize>> {
    let mut from = 0;
    let mut ends = Vec::with_capacity(columns.len());
    for c in columns {
        let at = from + line.get(from..)?.find(&format!(" {c}"))? + 1;
        from = at + c.len();
        ends.push(from);
    }
    Some(ends)
}

/// A row's cells under [`aligned_header`]'s column ends, after its leading index; a cell lies between the end of
/// the column before it and its own end, so it may hold spaces. None when the line is not such a row.
pub(crate) fn aligned_cells<'a>(line: &'a str, ends: &[usize]) -> Option<Vec<&'a str>> {
    let mut from = line
        .find(|c: char| !c.is_ascii_digit())
        .filter(|&i| i > 0)?;
    let mut cells = Vec::with_capacity(ends.len());
    for &e in ends {
        cells.push(line.get(from..e)?.trim());
        from = e;
    }
    line[from..].trim().is_empty().then_some(cells)
}

/// Python tracebacks in an output, read line by line: each is one error, named by its exception line (the first
/// unindented line after `Traceback`), at that line's number.
#[derive(Default)]
pub(crate) struct Tracebacks {
    open: Option<usize>,
}

impl Tracebacks {
    /// Reads line `n`; true when it was a traceback's (its start or its exception), which `errors` now holds.
    pub(crate) fn feed(&mut self, n: usize, line: &str, errors: &mut Vec<(usize, String)>) -> bool {
        let chained =
            line.starts_with("During handling") || line.starts_with("The above exception");
        let unindented = !line.trim().is_empty() && !line.starts_with(char::is_whitespace);
        if line.starts_with("Traceback") {
            if self.open.is_none() {
                self.open = Some(errors.len());
                errors.push((n, line.trim().to_string()));
            }
            return true;
        }
        match self.open {
            Some(at) if unindented && !chained => {
                errors[at] = (n, line.trim().to_string());
                self.open = None;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_escapes_text_keeps_markup_and_places_every_part() {
        let p = TablePage {
            title: "t<1>",
            verdict: "FAILED: a & b",
            passed: false,
            cards: vec![("peak".into(), "1 < 2".into())],
            charts: serde_json::json!({}),
            show: vec![],
            sections: vec![
                Section::Table {
                    heading: "Results".into(),
                    header: vec!["size".into(), "".into()],
                    rows: vec![vec!["8 B".into(), Cell::Html("<div></div>".into())]],
                },
                Section::Pre {
                    heading: "errors".into(),
                    text: "x<y\n".into(),
                },
            ],
        }
        .render();
        assert!(
            p.contains("<h1>t&lt;1&gt;</h1>\n<p class=\"fail\">FAILED: a &amp; b</p>"),
            "{p}"
        );
        assert!(p.contains("<b>1 &lt; 2</b>"));
        assert!(p.contains(
            "<tr><th>size</th><th></th></tr>\n<tr><td>8 B</td><td><div></div></td></tr>\n</table>"
        ));
        assert!(p.contains("<h2>errors</h2>\n<pre>x&lt;y\n</pre>"));
        assert_eq!(csv_num(Some(f64::NAN)), "");
        assert_eq!(csv_num(Some(10.0)), "10.0");
        assert_eq!(fixed2(None, "N/A"), "N/A");
    }

    #[test]
    fn a_traceback_is_named_by_its_exception() {
        let text = "ok\nTraceback (most recent call last):\n  File \"x\", line 1\nValueError: bad\nDuring handling of the \
                    above exception, another exception occurred:\nafter\n";
        let mut t = Tracebacks::default();
        let mut errors = Vec::new();
        let fed: Vec<bool> = text
            .lines()
            .enumerate()
            .map(|(i, l)| t.feed(i + 1, l, &mut errors))
            .collect();
        assert_eq!(errors, [(4, "ValueError: bad".to_string())]);
        assert_eq!(fed, [false, true, false, true, false, false]);
    }

    #[test]
    fn an_aligned_table_is_cut_at_its_header_ends() {
        // as pandas lays it out: an index, then each column right-aligned to its widest text
        let header = format!(
            "{:<1}{:>6}{:>5}{:>20}{:>21}",
            "", "m", "n", "config", "Throughput (TFLOPS)"
        );
        let ends = aligned_header(&header, &["m", "n", "config", "Throughput (TFLOPS)"]).unwrap();
        let row = format!(
            "{:<1}{:>6}{:>5}{:>20}{:>21}",
            0, 1024, 128, "pytorch (a=1, b=2)", "5.316291"
        );
        let row = row.as_str();
        assert_eq!(
            aligned_cells(row, &ends).unwrap(),
            ["1024", "128", "pytorch (a=1, b=2)", "5.316291"]
        );
        // not a row: no index, or more than the columns
        assert_eq!(aligned_cells("  1024  128", &ends), None);
        assert_eq!(aligned_cells(&format!("{row}  extra"), &ends), None);
        assert_eq!(aligned_header("m n", &["m", "n", "k"]), None);
    }
}
