//! The serving clients' result files — `vllm bench serve --save-result` (one JSON object), SGLang's
//! `bench_serving --output-file` (JSON lines, one record per run) — and the semantic evaluation's accuracy; graded
//! against what the run asked.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::results::checks::{Check, CheckKind};
use crate::workloads::{kit, Verdict};

/// One run of the client: its record's numbers and what identifies it.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct BenchResult {
    pub file: PathBuf,
    pub record: Map<String, Value>,
}

impl BenchResult {
    pub(crate) fn num(&self, key: &str) -> Option<f64> {
        let v = self.record.get(key)?;
        v.as_f64().or_else(|| v.as_str()?.parse().ok())
    }
    fn count(&self, key: &str) -> Option<u64> {
        self.num(key)
            .filter(|n| *n >= 0.0 && n.fract() == 0.0)
            .map(|n| n as u64)
    }
    /// Requests the client was told to send (SGLang's record may only list their input lengths).
    pub(crate) fn num_prompts(&self) -> Option<u64> {
        self.count("num_prompts").or_else(|| {
            self.record
                .get("input_lens")
                .and_then(Value::as_array)
                .map(|a| a.len() as u64)
        })
    }
    /// Every scalar number of the record, by name, as written (an integer stays one): the metrics table.
    pub(crate) fn metrics(&self) -> Vec<(&str, String)> {
        self.record
            .iter()
            .filter_map(|(k, v)| {
                let text = match v {
                    Value::Number(n) if n.is_f64() => kit::csv_num(n.as_f64()),
                    Value::Number(n) => n.to_string(),
                    _ => return None,
                };
                Some((k.as_str(), text))
            })
            .collect()
    }
}

/// Python's `json.dumps` writes an infinite or undefined float as a bare `Infinity`, `-Infinity` or `NaN` (SGLang's
/// `request_rate` when no rate is set): those words outside strings become `null`, which JSON can read.
fn without_python_floats(text: &str) -> std::borrow::Cow<'_, str> {
    if !(text.contains("Infinity") || text.contains("NaN")) {
        return text.into();
    }
    let mut out = String::with_capacity(text.len());
    let (mut in_string, mut escaped) = (false, false);
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if in_string {
            in_string = escaped || c != '"';
            escaped = !escaped && c == '\\';
        } else if c == '"' {
            in_string = true;
        } else if let Some(word) = ["-Infinity", "Infinity", "NaN"]
            .into_iter()
            .find(|w| rest.starts_with(w))
        {
            out.push_str("null");
            rest = &rest[word.len()..];
            continue;
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out.into()
}

/// The first record of a result file that is a JSON object: the whole file (vLLM) or one of its lines (SGLang).
pub(crate) fn read(file: &Path) -> Option<BenchResult> {
    let text = std::fs::read_to_string(file).ok()?;
    let object = |s: &str| match serde_json::from_str::<Value>(&without_python_floats(s)) {
        Ok(Value::Object(m)) => Some(m),
        _ => None,
    };
    let record = object(&text).or_else(|| text.lines().find_map(|l| object(l.trim())))?;
    Some(BenchResult {
        file: file.to_path_buf(),
        record,
    })
}

/// The evaluation's accuracy: the `accuracy` of its JSON results, else the first `Accuracy:` (or `Score:`) number
/// of its log.
pub(crate) fn accuracy(json: Option<&Path>, log: &Path, score_too: bool) -> Option<f64> {
    if let Some(a) = json
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|v| v.get("accuracy")?.as_f64())
    {
        return Some(a);
    }
    let text = std::fs::read_to_string(log).ok()?;
    let labels: &[&str] = if score_too {
        &["Score:", "Accuracy:"]
    } else {
        &["Accuracy:"]
    };
    text.lines().find_map(|line| {
        labels.iter().find_map(|label| {
            line.match_indices(label).find_map(|(at, _)| {
                // a word of its own: nothing of a word just before it
                if line[..at]
                    .chars()
                    .next_back()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_')
                {
                    return None;
                }
                let rest = line[at + label.len()..].trim_start();
                let end = rest
                    .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                    .unwrap_or(rest.len());
                rest[..end].parse().ok()
            })
        })
    })
}

/// What the run asked of the client.
#[derive(Clone, Debug, Default)]
pub(crate) struct Asked {
    pub model: String,
    pub num_prompts: Option<u64>,
    pub max_concurrency: Option<u64>,
    /// The record's key holding the throughput the flavour reports (vLLM: output tokens/s, SGLang: requests/s).
    pub throughput_key: &'static str,
    /// The evaluation ran: its accuracy must be found.
    pub accuracy: Option<Option<f64>>,
}

fn fail(kind: CheckKind, why: String) -> Verdict {
    let mut v = Verdict::fail(why.clone());
    v.checks.push(Check::fail(kind, why));
    v
}

/// The grade of a result record against what was asked: every request asked completed and none failed, the
/// model, request count and concurrency those asked, a throughput above 0 and latencies measured, the
/// evaluation's accuracy found when it ran.
pub(crate) fn verdict(r: &BenchResult, asked: &Asked) -> Verdict {
    let completed = r.count("completed").unwrap_or(0);
    if completed == 0 {
        return fail(
            CheckKind::Output,
            format!("{}: no request completed", r.file.display()),
        );
    }
    if let Some(failed) = r.count("failed").filter(|f| *f > 0) {
        return fail(
            CheckKind::Output,
            format!("{failed} request(s) failed ({completed} completed)"),
        );
    }
    if let (Some(want), Some(got)) = (asked.num_prompts, r.num_prompts()) {
        if want != got {
            return fail(
                CheckKind::Shape,
                format!("the client sent {got} prompts, {want} asked"),
            );
        }
    }
    let want = asked.num_prompts.or(r.num_prompts());
    if let Some(want) = want.filter(|w| completed < *w) {
        return fail(
            CheckKind::Table,
            format!("{completed} of the {want} requests asked completed"),
        );
    }
    if let (Some(want), Some(got)) = (asked.max_concurrency, r.count("max_concurrency")) {
        if want != got {
            return fail(
                CheckKind::Shape,
                format!("the client ran at concurrency {got}, {want} asked"),
            );
        }
    }
    if let Some(model) = r.record.get("model_id").and_then(Value::as_str) {
        if !asked.model.is_empty() && model != asked.model {
            return fail(
                CheckKind::Shape,
                format!("the client measured model {model}, {} asked", asked.model),
            );
        }
    }
    let Some(tput) = r.num(asked.throughput_key).filter(|t| *t > 0.0) else {
        return fail(
            CheckKind::Table,
            format!(
                "no {} above 0: the server served nothing",
                asked.throughput_key
            ),
        );
    };
    if r.num("mean_ttft_ms").is_none() {
        return fail(
            CheckKind::Table,
            "no time to first token (mean_ttft_ms) in the result: the client measured no latency"
                .into(),
        );
    }
    let mut detail = format!(
        "{completed} requests; {} {tput:.2}; TTFT median {} ms, p99 {} ms; TPOT median {} ms",
        asked.throughput_key,
        kit::fixed2(r.num("median_ttft_ms"), "?"),
        kit::fixed2(r.num("p99_ttft_ms"), "?"),
        kit::fixed2(r.num("median_tpot_ms"), "?"),
    );
    match asked.accuracy {
        Some(None) => {
            return fail(
                CheckKind::Output,
                "the semantic evaluation ran but no accuracy was found in its results or log"
                    .into(),
            )
        }
        Some(Some(a)) => detail.push_str(&format!("; accuracy {a:.4}")),
        None => {}
    }
    Verdict::pass_with(detail)
}

/// The record as a table: one row per number.
pub(crate) fn table(r: Option<&BenchResult>, accuracy: Option<f64>) -> kit::Table {
    let mut rows: Vec<Vec<String>> = r
        .into_iter()
        .flat_map(|r| r.metrics())
        .map(|(k, v)| vec![k.to_string(), unit(k).into(), v])
        .collect();
    if let Some(a) = accuracy {
        rows.push(vec![
            "accuracy".into(),
            String::new(),
            kit::csv_num(Some(a)),
        ]);
    }
    kit::Table {
        header: vec!["metric", "unit", "value"],
        rows,
    }
}

/// A record key's unit, from its name.
fn unit(key: &str) -> &'static str {
    if key.ends_with("_ms") {
        "ms"
    } else if key.starts_with("request_") && key.contains("throughput") {
        "req/s"
    } else if key.contains("throughput") {
        "tok/s"
    } else if key == "duration" {
        "s"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_float_words_outside_strings_read_as_null() {
        let text =
            r#"{"rate": Infinity, "low": -Infinity, "x": NaN, "t": "NaN \"Infinity\"", "n": 1}"#;
        let v: Value = serde_json::from_str(&without_python_floats(text)).unwrap();
        assert_eq!(v["rate"], Value::Null);
        assert_eq!(v["low"], Value::Null);
        assert_eq!(v["x"], Value::Null);
        assert_eq!(v["t"], "NaN \"Infinity\"");
        assert_eq!(v["n"], 1);
    }

    #[test]
    fn accuracy_is_a_labelled_number_of_its_own() {
        let dir = std::env::temp_dir().join(format!("cloudai-acc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("eval.log");
        std::fs::write(&log, "TopAccuracy: 0.1\nScore: 0.72\nAccuracy: 0.5\n").unwrap();
        assert_eq!(accuracy(None, &log, true), Some(0.72));
        assert_eq!(accuracy(None, &log, false), Some(0.5));
        std::fs::write(&log, "no number here\n").unwrap();
        assert_eq!(accuracy(None, &log, true), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
