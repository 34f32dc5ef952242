//! `dcgmi diag` of one node: its JSON (`-j`; DCGM 3.x root `DCGM GPU Diagnostic`, 4.x root `DCGM Diagnostic`, the
//! `--iterations` wrapper) or its text table, read into every test's result per GPU. Graded by DCGM's own rules:
//! a `Fail` fails the node — except that `dcgmi` prints a warning as `Fail` in JSON, so a `Fail` whose every error
//! record has a CONFIG or MONITOR severity (persistence mode off, clocks events) is the `Warn` it was —; a `Warn` is
//! shown; `Skip` and `Not Run` are context; a runtime error means the diagnostic did not run (no verdict on the
//! GPUs). Every GPU's result counts, not only the first one's.

use serde_json::Value;

use super::{Finding, Severity};

/// One test's result on one entity (a GPU, or the whole node for 3.x deployment checks).
#[derive(Clone, Debug, PartialEq)]
pub struct Result {
    pub test: String,
    /// `GPU0`, or empty when the result is not per GPU.
    pub entity: String,
    pub status: Status,
    pub messages: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Pass,
    Fail,
    Warn,
    Skip,
    NotRun,
}

fn status(s: &str) -> Option<Status> {
    Some(match s.trim().to_ascii_lowercase().as_str() {
        "pass" => Status::Pass,
        "fail" => Status::Fail,
        "warn" | "warning" => Status::Warn,
        "skip" => Status::Skip,
        "not run" | "not_run" => Status::NotRun,
        _ => return None,
    })
}

/// What a run of `dcgmi diag` shows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    pub version: String,
    pub driver: String,
    pub results: Vec<Result>,
    /// The diagnostic did not run: why.
    pub runtime_error: Option<String>,
}

/// DCGM error severities that mean configuration or monitoring, not a defect (`DCGM_ERROR_MONITOR`,
/// `DCGM_ERROR_CONFIG`).
const NOT_A_DEFECT: &[i64] = &[1, 5];

/// The JSON or the text form; None when the output is neither.
pub fn parse(text: &str) -> Option<Report> {
    let start = text.find('{');
    if let Some(i) = start {
        if let Ok(v) = serde_json::from_str::<Value>(text[i..].trim_end()) {
            return Some(from_json(&v));
        }
    }
    from_text(text)
}

fn from_json(v: &Value) -> Report {
    // `--iterations N`: every run counts
    if let Some(its) = v["iterations"].as_array() {
        let mut r = Report::default();
        for it in its {
            let one = from_json(it);
            r.version = one.version;
            r.driver = one.driver;
            r.results.extend(one.results);
            r.runtime_error = r.runtime_error.or(one.runtime_error);
        }
        return r;
    }
    let root = if v.get("DCGM Diagnostic").is_some() {
        &v["DCGM Diagnostic"]
    } else {
        &v["DCGM GPU Diagnostic"]
    };
    let text = |x: &Value| x.as_str().map(str::to_string).unwrap_or_default();
    let mut r = Report {
        version: [&v["metadata"]["version"], &root["version"]]
            .into_iter()
            .map(text)
            .find(|s| !s.is_empty())
            .unwrap_or_default(),
        driver: [
            &v["metadata"]["Driver Version Detected"],
            &v["Driver Version Detected"],
            &root["Driver Version Detected"],
        ]
        .into_iter()
        .map(text)
        .find(|s| !s.is_empty())
        .unwrap_or_default(),
        runtime_error: root["runtime_error"].as_str().map(str::to_string),
        results: Vec::new(),
    };
    for cat in root["test_categories"].as_array().into_iter().flatten() {
        for t in cat["tests"].as_array().into_iter().flatten() {
            let name = text(&t["name"]);
            for res in t["results"].as_array().into_iter().flatten() {
                let Some(st) = res["status"].as_str().and_then(status) else {
                    continue;
                };
                let entity = match (&res["entity_id"], &res["gpu_id"]) {
                    (id, _) if !id.is_null() => {
                        format!("{}{}", res["entity_group"].as_str().unwrap_or("GPU"), id)
                    }
                    (_, g) if !g.is_null() => format!(
                        "GPU{}",
                        g.as_str()
                            .map(str::to_string)
                            .unwrap_or_else(|| g.to_string())
                    ),
                    _ => String::new(),
                };
                // 3.x deployment checks carry one text under `warnings`; the others a list of records
                let (messages, severities): (Vec<String>, Vec<i64>) = match &res["warnings"] {
                    Value::String(s) => (vec![s.clone()], vec![]),
                    Value::Array(a) => a
                        .iter()
                        .map(|w| {
                            (
                                w["warning"].as_str().unwrap_or("").trim().to_string(),
                                w["error_severity"].as_i64().unwrap_or(-1),
                            )
                        })
                        .unzip(),
                    _ => (vec![], vec![]),
                };
                let st = if st == Status::Fail
                    && !severities.is_empty()
                    && severities.iter().all(|s| NOT_A_DEFECT.contains(s))
                {
                    Status::Warn
                } else {
                    st
                };
                r.results.push(Result {
                    test: name.clone(),
                    entity,
                    status: st,
                    messages: messages.into_iter().filter(|m| !m.is_empty()).collect(),
                });
            }
        }
    }
    r
}

/// The text table: `| name | value |` rows (messages cut over continuation rows), section rules, per-test status
/// rows and per-entity rows of either version.
fn from_text(text: &str) -> Option<Report> {
    let mut r = Report::default();
    let mut seen_table = false;
    let mut test = String::new();
    // the result a message or continuation row belongs to
    let mut last: Option<usize> = None;
    for line in text.lines() {
        let l = line.trim();
        if !l.starts_with('|') {
            continue;
        }
        let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
        if cells.len() < 2 || cells[0].starts_with('-') {
            continue;
        }
        seen_table = true;
        let (name, value) = (cells[0], cells[1]);
        match name {
            "Diagnostic" => continue,
            "DCGM Version" => {
                r.version = value.to_string();
                continue;
            }
            "Driver Version Detected" => {
                r.driver = value.to_string();
                continue;
            }
            _ => {}
        }
        if name.starts_with("Warning") || name.starts_with("Error") {
            let who = name.split_once(':').map(|(_, w)| w.trim()).unwrap_or("");
            // a 3.x message names no entity: it goes with the test's first row
            let i = if who.is_empty() {
                r.results.iter().position(|x| x.test == test)
            } else {
                r.results
                    .iter()
                    .rposition(|x| x.test == test && x.entity == who)
            }
            .or(last);
            if let Some(i) = i {
                r.results[i].messages.push(value.to_string());
                last = Some(i);
            }
            continue;
        }
        if name.is_empty() {
            // `GPU0: Fail` (4.x), or the rest of a message cut at the column's width
            if let Some((ent, st)) = value
                .split_once(": ")
                .and_then(|(e, s)| status(s).map(|s| (e, s)))
            {
                r.results.push(Result {
                    test: test.clone(),
                    entity: ent.to_string(),
                    status: st,
                    messages: vec![],
                });
                last = Some(r.results.len() - 1);
            } else if let Some(i) = last {
                if let Some(m) = r.results[i].messages.last_mut() {
                    m.push(' ');
                    m.push_str(value);
                }
            }
            continue;
        }
        // a test row: `Pass`, `Fail - GPUs: 0, 2`, `Warn - All`
        let (head, gpus) = value.split_once(" - ").unwrap_or((value, ""));
        let Some(st) = status(head) else { continue };
        test = name.to_string();
        let ids: Vec<String> = gpus
            .split_once(':')
            .map(|(_, l)| l.split(',').map(|g| format!("GPU{}", g.trim())).collect())
            .unwrap_or_default();
        if ids.is_empty() {
            r.results.push(Result {
                test: test.clone(),
                entity: String::new(),
                status: st,
                messages: vec![],
            });
        } else {
            for id in ids {
                r.results.push(Result {
                    test: test.clone(),
                    entity: id,
                    status: st,
                    messages: vec![],
                });
            }
        }
        last = Some(r.results.len() - 1);
    }
    if !seen_table {
        return None;
    }
    // 4.x prints the test's own row and one per entity: the entities' rows are the verdict
    let with_entities: std::collections::HashSet<String> = r
        .results
        .iter()
        .filter(|x| !x.entity.is_empty())
        .map(|x| x.test.clone())
        .collect();
    r.results.retain(|x| {
        !(x.entity.is_empty() && with_entities.contains(&x.test) && x.messages.is_empty())
    });
    Some(r)
}

/// What the diagnostic says of the node.
pub fn judge(r: &Report) -> Vec<Finding> {
    let mut out = Vec::new();
    if let Some(e) = &r.runtime_error {
        out.push(Finding::new(
            Severity::Fail,
            format!("dcgmi diag did not run: {e} (no verdict on the GPUs)"),
        ));
    }
    if r.results.is_empty() && r.runtime_error.is_none() {
        out.push(Finding::new(
            Severity::Fail,
            "dcgmi diag printed no test result",
        ));
    }
    for x in &r.results {
        let sev = match x.status {
            Status::Fail => Severity::Fail,
            Status::Warn => Severity::Warn,
            Status::Skip | Status::NotRun | Status::Pass => continue,
        };
        let on = if x.entity.is_empty() {
            String::new()
        } else {
            format!(" on {}", x.entity)
        };
        let word = if sev == Severity::Fail {
            "failed"
        } else {
            "warned"
        };
        let why = if x.messages.is_empty() {
            String::new()
        } else {
            format!(": {}", x.messages.join("; "))
        };
        out.push(Finding::new(sev, format!("{} {word}{on}{why}", x.test)));
    }
    out.sort_by_key(|f| std::cmp::Reverse(f.severity));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_of_either_version_every_gpu_counts_and_warnings_are_recovered() {
        let v4 = r#"{"DCGM Diagnostic": {"test_categories": [
            {"category": "Deployment", "tests": [{"name": "software", "results": [
                {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status": "Fail", "warnings": [
                    {"warning": "Persistence mode for GPU 0 is disabled.", "error_id": 29, "error_category": 1, "error_severity": 5}]}],
                "test_summary": {"status": "Fail"}}]},
            {"category": "Hardware", "tests": [{"name": "memory", "results": [
                {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status": "Pass"},
                {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 1, "status": "Fail", "warnings": [
                    {"warning": "A DBE occurred on GPU 1", "error_id": 4, "error_category": 10, "error_severity": 2}]}],
                "test_summary": {"status": "Fail"}}]}]},
            "metadata": {"version": "4.6.0", "Driver Version Detected": "570.124.06"}}"#;
        let r = parse(v4).unwrap();
        assert_eq!(
            (r.version.as_str(), r.driver.as_str()),
            ("4.6.0", "570.124.06")
        );
        let f = judge(&r);
        assert_eq!(f.len(), 2, "{f:?}");
        assert_eq!(f[0].severity, Severity::Fail);
        assert_eq!(f[0].what, "memory failed on GPU1: A DBE occurred on GPU 1");
        assert_eq!(f[1].severity, Severity::Warn);
        assert!(f[1]
            .what
            .starts_with("software warned on GPU0: Persistence mode"));

        let v3 = r#"{"DCGM GPU Diagnostic": {"test_categories": [
            {"category": "Deployment", "tests": [{"name": "Blacklist", "results": [{"status": "Pass"}]},
                {"name": "Page Retirement/Row Remap", "results": [{"status": "Fail", "warnings": "Row remap pending on GPU 3"}]}]},
            {"category": "Integration", "tests": [{"name": "PCIe", "results": [
                {"gpu_id": "0", "status": "Pass"}, {"gpu_id": "3", "status": "Skip"}]}]}],
            "version": "3.3.9"}, "Driver Version Detected": "535.183.01"}"#;
        let f = judge(&parse(v3).unwrap());
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(
            f[0].what,
            "Page Retirement/Row Remap failed: Row remap pending on GPU 3"
        );
        let err = judge(&parse(r#"{"DCGM GPU Diagnostic": {"version": "3.3.9", "runtime_error": "Another diagnostic is running"}}"#).unwrap());
        assert!(err[0]
            .what
            .starts_with("dcgmi diag did not run: Another diagnostic"));
        let its = r#"{"iterations": [{"DCGM GPU Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [{"name": "GPU Memory", "results": [{"gpu_id": "2", "status": "Fail"}]}]}]}}], "Overall Result": "Fail"}"#;
        assert_eq!(
            judge(&parse(its).unwrap())[0].what,
            "GPU Memory failed on GPU2"
        );
    }

    #[test]
    fn text_tables_of_either_version() {
        let v4 = "Successfully ran diagnostic for group.\n\
+---------------------------+------------------------------------------------+\n\
| Diagnostic                | Result                                         |\n\
+===========================+================================================+\n\
|-----  Metadata  ----------+------------------------------------------------|\n\
| DCGM Version              | 4.6.0                                          |\n\
| Driver Version Detected   | 570.124.06                                     |\n\
+-----  Hardware  ----------+------------------------------------------------+\n\
| memory                    | Fail                                           |\n\
|                           | GPU0: Pass                                     |\n\
|                           | GPU1: Fail                                     |\n\
| Warning: GPU1             | A DBE occurred on GPU 1 in the memory test; the|\n\
|                           | GPU should be reset                            |\n\
| diagnostic                | Skip                                           |\n\
+---------------------------+------------------------------------------------+\n";
        let r = parse(v4).unwrap();
        assert_eq!(r.version, "4.6.0");
        let f = judge(&r);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(
            f[0].what,
            "memory failed on GPU1: A DBE occurred on GPU 1 in the memory test; the GPU should be reset"
        );
        let v3 = "| Deployment                | Pass                                           |\n\
| Diagnostic                | Result                                         |\n\
| PCIe                      | Fail - GPUs: 0, 2                              |\n\
| Warning                   | GPU 0 PCIe replay rate above the limit         |\n\
| GPU Memory                | Pass - All                                     |\n";
        let f = judge(&parse(v3).unwrap());
        assert_eq!(
            f.iter().filter(|x| x.severity == Severity::Fail).count(),
            2,
            "{f:?}"
        );
        assert!(f.iter().any(|x| x.what == "PCIe failed on GPU2"));
        // a run killed before its table: no verdict, said so
        assert_eq!(
            parse("Error: unable to establish a connection to the specified host: localhost"),
            None
        );
    }
}
