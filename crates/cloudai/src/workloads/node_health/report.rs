//! The per-node table of a node-evidence iteration: `node_checks.csv` (one row per finding) and `node_checks.html`.

use super::{worst, Finding, Severity};
use crate::workloads::Verdict;

pub(crate) const CSV_FILE: &str = "node_checks.csv";
pub(crate) const HTML_FILE: &str = "node_checks.html";

/// One row per finding (a healthy node gets one `ok` row): node, verdict, severity, finding.
pub fn csv(nodes: &[(String, Vec<Finding>)]) -> String {
    let mut s = String::from("node,node_verdict,severity,finding\n");
    for (node, f) in nodes {
        let verdict = if worst(f) == Some(Severity::Fail) {
            "fail"
        } else {
            "pass"
        };
        if f.is_empty() {
            s.push_str(&format!("{},{verdict},ok,\n", crate::util::csv_field(node)));
        }
        for x in f {
            s.push_str(&format!(
                "{},{verdict},{},{}\n",
                crate::util::csv_field(node),
                x.severity.as_str(),
                crate::util::csv_field(&x.what)
            ));
        }
    }
    s
}

pub fn html(title: &str, template: &str, nodes: &[(String, Vec<Finding>)], v: &Verdict) -> String {
    use crate::html::{esc, page};
    let failed = nodes
        .iter()
        .filter(|(_, f)| worst(f) == Some(Severity::Fail))
        .count();
    let mut body = format!(
        "<h1>{}</h1>\n<p class=\"{}\">{}</p>\n<div class=\"cards\"><div class=\"card\"><span class=\"muted\">\
         {template}</span><b>{} of {} node(s) failed</b></div></div>\n<h2>Nodes</h2>\n<table>\n\
         <tr><th>node</th><th>verdict</th><th>findings</th></tr>\n",
        esc(title),
        if v.passed { "pass" } else { "fail" },
        esc(if v.passed { "PASSED" } else { &v.message }),
        failed,
        nodes.len()
    );
    for (node, f) in nodes {
        let bad = worst(f) == Some(Severity::Fail);
        let items: String = if f.is_empty() {
            "healthy".into()
        } else {
            f.iter()
                .map(|x| {
                    format!(
                        "<div class=\"{}\">{}: {}</div>",
                        x.severity.as_str(),
                        x.severity.as_str(),
                        esc(&x.what)
                    )
                })
                .collect()
        };
        body.push_str(&format!(
            "<tr><td>{}</td><td class=\"{}\">{}</td><td>{items}</td></tr>\n",
            esc(node),
            if bad { "fail" } else { "pass" },
            if bad { "fail" } else { "pass" },
        ));
    }
    body.push_str("</table>\n");
    page(title, &body, &serde_json::json!({ "charts": {} }))
}
