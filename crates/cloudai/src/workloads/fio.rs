//! fio (CloudAI's `Fio`): storage bandwidth, IOPS and latency. The command is CloudAI's (`cmd_args.args` become
//! `--name=value` flags); the output is read by fio's formats' rules: the classic text (a job header per job, an
//! `IOPS=…, BW=…` line per operation, `lat`/`clat` averages and percentiles, fio 2's `io=…, bw=…, iops=…` too) or
//! its JSON (`--output-format=json`), however many tasks printed into one file. Graded as CloudAI grades it, with
//! fio's own words when it failed; reported as `fio_summary.csv` (CloudAI's columns first) and a page.

use std::path::Path;

use serde_json::Value;

use super::{IterationReport, JobOutcome, Launch, Procs, Success, Verdict, Workload};
use crate::config::args::{ArgDefault as D, ArgSpec, ArgType as T, ArgValue, CmdArgs};
use crate::config::decode::{join, Ctx, View};
use crate::config::test::{TemplateSchema, TestDefinition};
use crate::html::{esc, page};
use crate::util::pytoml::py_float;
use crate::util::shell::quote;

pub struct Fio;

const OPERATIONS: &[&str] = &["read", "write", "trim", "all", "first"];
const METRICS: &[&str] = &["bw", "iops", "latency"];
const AGGREGATES: &[&str] = &["sum", "mean", "min", "max", "first"];

static ARGS: &[ArgSpec] = &[
    ArgSpec::new("fio_binary", T::Str, D::Str("fio")).single(),
    ArgSpec::new("job_file", T::Str, D::Unset).single(),
    ArgSpec::new("args", T::Dict, D::Table),
    ArgSpec::new("docker_image_url", T::Str, D::Unset).single(),
    ArgSpec::new("num_tasks_per_node", T::Int, D::Int(1))
        .single()
        .at_least(1),
    ArgSpec::new("metric_operation", T::Enum(OPERATIONS), D::Str("all")).single(),
    ArgSpec::new("metric_name", T::Enum(METRICS), D::Str("bw")).single(),
    ArgSpec::new("metric_aggregate", T::Enum(AGGREGATES), D::Str("sum")).single(),
];

pub const CSV_FILE: &str = "fio_summary.csv";
pub const HTML_FILE: &str = "fio_report.html";
/// The hook check of a fio run: a summary line (both orders fio has printed).
const SUMMARY_ERE: &str = "IOPS=.*BW=|BW=.*IOPS=";

fn has_summary(line: &str) -> bool {
    let (i, b) = (line.find("IOPS="), line.find("BW="));
    i.is_some() && b.is_some()
}

/// A fio option name: letters, digits, `_` and `-` (it goes unquoted on the command line).
fn option_name(k: &str) -> bool {
    let k = k.trim_start_matches('-');
    !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl TemplateSchema for Fio {
    fn template(&self) -> &'static str {
        "Fio"
    }
    fn args(&self) -> &'static [ArgSpec] {
        ARGS
    }
    fn validate(&self, ctx: &mut Ctx, v: &View, args: &CmdArgs) {
        let Some(ArgValue::Table(t)) = args.get("args") else {
            return;
        };
        let field = join(&v.field("cmd_args"), "args");
        let node = v
            .get("cmd_args")
            .and_then(|n| n.as_table())
            .and_then(|t| t.entries.get("args"))
            .and_then(|e| e.node.as_table());
        for k in t.keys().filter(|k| !option_name(k)) {
            let loc = node
                .and_then(|t| t.entries.get(k.as_str()))
                .map_or(v.loc.clone(), |e| e.key_loc.clone());
            ctx.err(
                &loc,
                &join(&field, k),
                "not a fio option name: keys of cmd_args.args become `--<name>=<value>` flags",
                Some("use fio's option name without dashes, e.g. `rw = \"randread\"` for --rw=randread".into()),
            );
        }
    }
}

/// A value as fio reads it on its command line (Python's `str`, booleans in lower case).
fn scalar(v: &ArgValue) -> String {
    match v {
        ArgValue::Bool(b) => b.to_string(),
        other => other.py_str(),
    }
}

/// One option as CloudAI writes it: `--name=value` (quoted), `--name` for true, nothing for false; a list joins
/// its items with commas, a table repeats the flag for each of its values.
fn option(name: &str, v: &ArgValue, out: &mut Vec<String>) {
    let name = name.trim();
    let flag = if name.starts_with('-') {
        name.to_string()
    } else {
        format!("--{name}")
    };
    match v {
        ArgValue::Bool(false) => {}
        ArgValue::Bool(true) => out.push(flag),
        ArgValue::Table(t) => t.values().for_each(|v| option(name, v, out)),
        ArgValue::List(l) => {
            let joined: Vec<String> = l.iter().map(scalar).collect();
            out.push(format!("{flag}={}", quote(&joined.join(","))));
        }
        other => out.push(format!("{flag}={}", quote(&scalar(other)))),
    }
}

impl Workload for Fio {
    /// fio reads and writes the hosts' own file systems.
    fn needs(&self) -> super::Needs {
        super::Needs::Hosts
    }

    fn launch(&self, test: &TestDefinition, _at: &super::Placement) -> Launch {
        let mut args = Vec::new();
        if let Some(ArgValue::Table(t)) = test.cmd_args.get("args") {
            for (k, v) in t {
                option(k, v, &mut args);
            }
        }
        if let Some(f) = test.cmd_args.str("job_file") {
            args.push(quote(f).into_owned());
        }
        super::push_extra_args(test, &mut args);
        let per_node = test
            .cmd_args
            .get("num_tasks_per_node")
            .and_then(ArgValue::as_int)
            .map(|n| n.max(1) as u64);
        Launch {
            program: quote(test.cmd_args.str("fio_binary").unwrap_or("fio")).into_owned(),
            args,
            env: Vec::new(),
            env_default: Vec::new(),
            image: super::docker_image(test),
            image_field: None,
            procs: Procs::Tasks(per_node),
            gpus_per_rank: 0,
            exact_ranks: None,
            solo_program: None,
            has_profiler: false,
            success: Success::OutputMatches {
                ere: SUMMARY_ERE,
                matches: has_summary,
            },
            shell_env: true,
            install_mounts: Vec::new(),
            launcher_args: Vec::new(),
        }
    }

    /// CloudAI's fio metrics: `default` as `metric_operation` / `metric_name` / `metric_aggregate` say,
    /// `read_bw` / `write_bw` (MiB/s), `read_iops` / `write_iops`, `read_latency` (us).
    fn metric(&self, test: &TestDefinition, dir: &Path, name: &str) -> Option<f64> {
        let out = parse(&std::fs::read_to_string(dir.join("stdout.txt")).ok()?);
        metric(&out.rows, test, name)
    }

    fn grade(&self, _test: &TestDefinition, dir: &Path, outcome: &JobOutcome) -> Verdict {
        verdict(dir, outcome)
    }

    fn report(&self, _test: &TestDefinition, dir: &Path, title: &str) -> Option<IterationReport> {
        let out = parse(&std::fs::read_to_string(dir.join("stdout.txt")).ok()?);
        let v = verdict(dir, &JobOutcome::default());
        let mut metrics = serde_json::Map::new();
        for op in ["read", "write", "trim"] {
            let rows: Vec<&Row> = out.rows.iter().filter(|r| r.operation == op).collect();
            if rows.is_empty() {
                continue;
            }
            metrics.insert(
                format!("{op}_bw_mib"),
                rows.iter().map(|r| r.bw_mib()).sum::<f64>().into(),
            );
            metrics.insert(
                format!("{op}_iops"),
                rows.iter().map(|r| r.iops).sum::<f64>().into(),
            );
        }
        metrics.insert("rows".into(), out.rows.len().into());
        let status = if v.passed {
            "PASSED".to_string()
        } else {
            format!("FAILED: {}", v.message)
        };
        Some(IterationReport {
            files: vec![
                (CSV_FILE.into(), csv(&out.rows)),
                (HTML_FILE.into(), html(title, &out, &status, v.passed)),
            ],
            metrics,
            verdict: Some(v),
            ..IterationReport::default()
        })
    }
}

/// One operation of one job as fio summarized it.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The job's name and which of its reports this is (several tasks print the same job).
    pub job: String,
    pub instance: usize,
    pub operation: String,
    pub iops: f64,
    pub bw: f64,
    pub bw_unit: String,
    /// Total latency (`lat`) when fio printed it, else completion latency (`clat`), in `latency_unit`.
    pub latency_avg: Option<f64>,
    pub latency_unit: Option<String>,
    /// Completion-latency percentiles p50, p99, p99.9 in microseconds.
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub p999_us: Option<f64>,
}

impl Row {
    pub fn bw_mib(&self) -> f64 {
        self.bw * bw_to_mib(&self.bw_unit).unwrap_or(f64::NAN)
    }
    pub fn latency_us(&self) -> Option<f64> {
        Some(self.latency_avg? * to_us(self.latency_unit.as_deref()?)?)
    }
}

/// Bandwidth units fio prints (binary with `i`, decimal without), as a factor to MiB/s.
fn bw_to_mib(unit: &str) -> Option<f64> {
    const MIB: f64 = 1024.0 * 1024.0;
    Some(match unit {
        "B/s" => 1.0 / MIB,
        "KiB/s" => 1.0 / 1024.0,
        "MiB/s" => 1.0,
        "GiB/s" => 1024.0,
        "TiB/s" => MIB,
        "kB/s" | "KB/s" => 1e3 / MIB,
        "MB/s" => 1e6 / MIB,
        "GB/s" => 1e9 / MIB,
        "TB/s" => 1e12 / MIB,
        _ => return None,
    })
}

fn to_us(unit: &str) -> Option<f64> {
    Some(match unit {
        "nsec" => 0.001,
        "usec" => 1.0,
        "msec" => 1000.0,
        "sec" => 1_000_000.0,
        _ => return None,
    })
}

/// `12.3k`, `4801`: fio's scaled counts.
fn scaled(s: &str) -> Option<f64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last()?.to_ascii_lowercase() {
        'k' => (&s[..s.len() - 1], 1e3),
        'm' => (&s[..s.len() - 1], 1e6),
        'g' => (&s[..s.len() - 1], 1e9),
        _ => (s, 1.0),
    };
    num.trim().parse::<f64>().ok().map(|n| n * mult)
}

/// `1538MiB/s (1613MB/s)(80.0MiB/52msec)` → (1538, "MiB/s").
fn number_and_unit(s: &str) -> Option<(f64, String)> {
    let s = s.trim_start();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let num = s[..end].parse::<f64>().ok()?;
    // `269100 B/s`: a blank may stand between the number and its unit
    let unit: String = s[end..]
        .trim_start_matches(' ')
        .chars()
        .take_while(|c| c.is_ascii_alphabetic() || *c == '/')
        .collect();
    Some((num, unit))
}

/// What one fio output file says.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Output {
    pub rows: Vec<Row>,
    /// fio's own error lines (`fio: …`, a job header with `err=` other than 0, a JSON job's `error`), with line numbers.
    pub errors: Vec<(usize, String)>,
    pub version: Option<String>,
}

impl Output {
    /// Each operation's bandwidth (MiB/s) and IOPS summed over every job: (operation, MiB/s, IOPS), read, write,
    /// trim, those that ran.
    pub fn totals(&self) -> Vec<(&'static str, f64, f64)> {
        ["read", "write", "trim"]
            .into_iter()
            .filter_map(|op| {
                let rows: Vec<&Row> = self.rows.iter().filter(|r| r.operation == op).collect();
                (!rows.is_empty()).then(|| {
                    (
                        op,
                        rows.iter().map(|r| r.bw_mib()).sum(),
                        rows.iter().map(|r| r.iops).sum(),
                    )
                })
            })
            .collect()
    }
}

/// Reads fio output in either format (JSON documents where they start a line, the text format elsewhere).
pub fn parse(text: &str) -> Output {
    let mut out = parse_text(text);
    parse_json(text, &mut out);
    out
}

/// The operation and its numbers from a summary line: `write: IOPS=12.3k, BW=1538MiB/s (…)` (fio 3) or
/// `write: io=1024.0KB, bw=2039.9KB/s, iops=509, runt=…` (fio 2).
fn op_line(line: &str) -> Option<(String, f64, f64, String)> {
    let t = line.trim_start();
    let (op, rest) = t.split_once(':')?;
    let op = op.trim();
    if !["read", "write", "trim"].contains(&op) || line.len() == t.len() {
        return None;
    }
    let field = |key: &str| {
        rest.split(',')
            .map(str::trim)
            .find_map(|p| p.strip_prefix(key))
    };
    if let (Some(iops), Some(bw)) = (field("IOPS="), field("BW=")) {
        let (bw, unit) = number_and_unit(bw)?;
        return Some((op.to_string(), scaled(iops)?, bw, unit));
    }
    if let (Some(iops), Some(bw)) = (field("iops="), field("bw=")) {
        let (bw, unit) = number_and_unit(bw)?;
        // fio 2 prints KB/s for KiB/s
        let unit = match unit.as_str() {
            "B/s" => unit,
            u => u.replace("B/s", "iB/s"),
        };
        return Some((op.to_string(), scaled(iops)?, bw, unit));
    }
    None
}

/// `clat (usec): min=…, avg= 75.30, …` → ("clat", "usec", 75.3); `lat` likewise.
fn latency_line(line: &str) -> Option<(&'static str, String, f64)> {
    let t = line.trim_start();
    if t.len() == line.len() {
        return None;
    }
    let kind = if t.starts_with("clat (") {
        "clat"
    } else if t.starts_with("lat (") && !t.contains("percentiles") {
        "lat"
    } else {
        return None;
    };
    let unit = t.split_once('(')?.1.split_once(')')?.0.trim().to_string();
    to_us(&unit)?;
    let avg = t.split_once("avg=")?.1.trim_start();
    let end = avg
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(avg.len());
    Some((kind, unit, avg[..end].parse().ok()?))
}

fn parse_text(text: &str) -> Output {
    let mut out = Output::default();
    let mut job = String::new();
    let mut seen: std::collections::HashMap<String, usize> = Default::default();
    let mut instance = 0;
    // the row being read: its latency kind so far, and the percentiles block's unit while inside one
    let mut lat_kind: Option<&str> = None;
    let mut pct_unit: Option<f64> = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.starts_with('{') {
            // a JSON document: read by parse_json
            break;
        }
        if let Some(v) = t
            .strip_prefix("fio-")
            .filter(|v| v.chars().next().is_some_and(|c| c.is_ascii_digit()) && !v.contains(' '))
        {
            out.version = Some(v.to_string());
        }
        if let Some((name, rest)) = t.split_once(": (groupid=") {
            job = name.to_string();
            let n = seen.entry(job.clone()).or_default();
            *n += 1;
            instance = *n;
            if let Some(err) = rest.split_once("err=").map(|(_, e)| e.trim_start()) {
                if !err.starts_with("0:") && !err.starts_with("0 ") && err != "0" {
                    out.errors.push((i + 1, t.to_string()));
                }
            }
            pct_unit = None;
            continue;
        }
        if t.starts_with("fio: ") || t.starts_with("fio:") && t.contains("error") {
            out.errors.push((i + 1, t.to_string()));
            continue;
        }
        if let Some((op, iops, bw, unit)) = op_line(line) {
            out.rows.push(Row {
                job: job.clone(),
                instance,
                operation: op,
                iops,
                bw,
                bw_unit: unit,
                latency_avg: None,
                latency_unit: None,
                p50_us: None,
                p99_us: None,
                p999_us: None,
            });
            lat_kind = None;
            pct_unit = None;
            continue;
        }
        let Some(row) = out.rows.last_mut() else {
            continue;
        };
        if let Some((kind, unit, avg)) = latency_line(line) {
            // the total latency wins over the completion latency
            if lat_kind.is_none() || kind == "lat" {
                row.latency_avg = Some(avg);
                row.latency_unit = Some(unit);
                lat_kind = Some(kind);
            }
            continue;
        }
        if t.contains("percentiles (") && (t.starts_with("clat ") || t.starts_with("lat ")) {
            pct_unit = t
                .split_once('(')
                .and_then(|(_, r)| r.split_once(')'))
                .and_then(|(u, _)| to_us(u.trim()));
            continue;
        }
        match (pct_unit, t.strip_prefix('|')) {
            (Some(unit), Some(rest)) => {
                for p in rest.split("],") {
                    let Some((pct, v)) = p.split_once("th=[") else {
                        continue;
                    };
                    let v = v.trim().trim_end_matches(']').trim().parse::<f64>().ok();
                    let v = v.map(|v| v * unit);
                    match pct.trim() {
                        "50.00" => row.p50_us = v,
                        "99.00" => row.p99_us = v,
                        "99.90" => row.p999_us = v,
                        _ => {}
                    }
                }
            }
            (Some(_), None) => pct_unit = None,
            _ => {}
        }
    }
    out
}

/// JSON documents (`--output-format=json`), one per task, possibly behind notes fio printed first.
fn parse_json(text: &str, out: &mut Output) {
    let mut offset = 0;
    let mut seen: std::collections::HashMap<String, usize> = Default::default();
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let start = offset;
        offset += line.len();
        if !line.starts_with('{') {
            continue;
        }
        let mut docs = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
        let Some(Ok(doc)) = docs.next() else {
            continue;
        };
        if let Some(v) = doc["fio version"].as_str() {
            out.version = Some(v.trim_start_matches("fio-").to_string());
        }
        for job in doc["jobs"].as_array().into_iter().flatten() {
            let name = job["jobname"].as_str().unwrap_or("").to_string();
            let n = seen.entry(name.clone()).or_default();
            *n += 1;
            if job["error"].as_i64().is_some_and(|e| e != 0) {
                out.errors.push((
                    i + 1,
                    format!(
                        "job {name}: fio error {}",
                        job["error"].as_i64().unwrap_or(0)
                    ),
                ));
            }
            for op in ["read", "write", "trim"] {
                let o = &job[op];
                if o["io_bytes"].as_f64().unwrap_or(0.0) <= 0.0 {
                    continue;
                }
                let ns = |k: &str, p: &str| o[k]["percentile"][p].as_f64().map(|v| v / 1000.0);
                let pct = |p: &str| ns("clat_ns", p).or_else(|| ns("lat_ns", p));
                out.rows.push(Row {
                    job: name.clone(),
                    instance: *n,
                    operation: op.into(),
                    iops: o["iops"].as_f64().unwrap_or(0.0),
                    bw: o["bw"].as_f64().unwrap_or(0.0),
                    bw_unit: "KiB/s".into(),
                    latency_avg: o["lat_ns"]["mean"].as_f64().map(|v| v / 1000.0),
                    latency_unit: o["lat_ns"]["mean"].as_f64().map(|_| "usec".into()),
                    p50_us: pct("50.000000"),
                    p99_us: pct("99.000000"),
                    p999_us: pct("99.900000"),
                });
            }
        }
    }
}

fn metric(rows: &[Row], test: &TestDefinition, name: &str) -> Option<f64> {
    if rows.is_empty() {
        return None;
    }
    // the last row of an operation, as CloudAI's by-operation lookup keeps it
    let by_op = |op: &str| rows.iter().rev().find(|r| r.operation == op);
    match name {
        "default" => {
            let a =
                |k: &str, d: &'static str| test.cmd_args.str(k).unwrap_or(d).to_ascii_lowercase();
            let (op, metric, agg) = (
                a("metric_operation", "all"),
                a("metric_name", "bw"),
                a("metric_aggregate", "sum"),
            );
            let chosen: Vec<&Row> = match op.as_str() {
                "first" => rows.iter().take(1).collect(),
                "all" => rows.iter().collect(),
                op => rows.iter().filter(|r| r.operation == op).collect(),
            };
            let values: Vec<f64> = match metric.as_str() {
                "bw" => chosen.iter().map(|r| r.bw_mib()).collect(),
                "iops" => chosen.iter().map(|r| r.iops).collect(),
                "latency" => chosen.iter().filter_map(|r| r.latency_us()).collect(),
                _ => Vec::new(),
            };
            if values.is_empty() {
                return None;
            }
            match agg.as_str() {
                "sum" => Some(values.iter().sum()),
                "mean" => Some(values.iter().sum::<f64>() / values.len() as f64),
                "min" => values.iter().copied().reduce(f64::min),
                "max" => values.iter().copied().reduce(f64::max),
                "first" => values.first().copied(),
                _ => None,
            }
        }
        "read_bw" => by_op("read").map(Row::bw_mib),
        "write_bw" => by_op("write").map(Row::bw_mib),
        "read_iops" => by_op("read").map(|r| r.iops),
        "write_iops" => by_op("write").map(|r| r.iops),
        "read_latency" => by_op("read").and_then(Row::latency_us),
        _ => None,
    }
}

/// The last line of `stderr.txt` that is fio's (or any last line), to quote when stdout says nothing.
fn stderr_hint(dir: &Path) -> String {
    let Ok(err) = std::fs::read_to_string(dir.join("stderr.txt")) else {
        return String::new();
    };
    let lines: Vec<&str> = err
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines
        .iter()
        .rev()
        .find(|l| l.starts_with("fio"))
        .or(lines.last())
        .map_or(String::new(), |l| format!("; stderr.txt says: {l}"))
}

fn verdict(dir: &Path, outcome: &JobOutcome) -> Verdict {
    let stdout = dir.join("stdout.txt");
    let stderr = dir.join("stderr.txt");
    let Ok(text) = std::fs::read_to_string(&stdout) else {
        return Verdict::fail(format!(
            "stdout.txt file not found in {}. Check whether fio started successfully and inspect {}{}",
            dir.display(),
            stderr.display(),
            stderr_hint(dir)
        ));
    };
    if text.trim().is_empty() {
        return Verdict::fail(format!(
            "stdout.txt is empty in {}. Check {} for fio errors{}",
            dir.display(),
            stderr.display(),
            stderr_hint(dir)
        ));
    }
    let out = parse(&text);
    if let Some((line, err)) = out.errors.first() {
        return Verdict::fail(format!(
            "{}:{line}: fio reported an error: {err}",
            stdout.display()
        ));
    }
    if out.rows.is_empty() {
        return Verdict::fail(format!(
            "fio summary metrics were not found in {}. Expected fio stdout to include IOPS, BW, and latency \
             lines{}",
            stdout.display(),
            stderr_hint(dir)
        ));
    }
    if let Some(code) = outcome.exit_code.filter(|c| *c != 0) {
        return Verdict::fail(format!(
            "fio printed {} results but exited with status {code}; see {}",
            out.rows.len(),
            stderr.display()
        ));
    }
    // the key numbers: each operation's bandwidth and IOPS over every job
    let key: Vec<String> = out
        .totals()
        .iter()
        .map(|(op, bw, iops)| format!("{op} {bw:.1} MiB/s, {} IOPS", fmt_count(*iops)))
        .collect();
    Verdict::pass_with(format!("{} results: {}", out.rows.len(), key.join("; ")))
}

/// CloudAI's columns (Python's csv: floats by repr, None empty), then ours: job, instance, percentiles.
fn csv(rows: &[Row]) -> String {
    let opt = |v: Option<f64>| v.map(py_float).unwrap_or_default();
    let mut s = String::from(
        "operation,iops,bw,bw_unit,bw_mib,latency_avg,latency_unit,latency_usec,job,instance,p50_usec,p99_usec,\
         p99.9_usec\n",
    );
    for r in rows {
        s.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
            r.operation,
            py_float(r.iops),
            py_float(r.bw),
            r.bw_unit,
            py_float(r.bw_mib()),
            opt(r.latency_avg),
            r.latency_unit.clone().unwrap_or_default(),
            opt(r.latency_us()),
            crate::util::csv_field(&r.job),
            r.instance,
            opt(r.p50_us),
            opt(r.p99_us),
            opt(r.p999_us),
        ));
    }
    s
}

fn html(title: &str, out: &Output, verdict: &str, passed: bool) -> String {
    let mut cards = String::new();
    for (op, bw, iops) in out.totals() {
        cards.push_str(&format!(
            "<div class=\"card\"><span class=\"muted\">{op} (all jobs)</span><b>{bw:.1} MiB/s · {} IOPS</b></div>",
            fmt_count(iops)
        ));
    }
    if let Some(v) = &out.version {
        cards.push_str(&format!(
            "<div class=\"card\"><span class=\"muted\">fio</span><b>{}</b></div>",
            esc(v)
        ));
    }
    let max_bw = out
        .rows
        .iter()
        .map(Row::bw_mib)
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let mut body = format!(
        "<h1>{}</h1>\n<p class=\"{}\">{}</p>\n<div class=\"cards\">{cards}</div>\n<h2>Jobs</h2>\n<table>\n\
         <tr><th>job</th><th>#</th><th>operation</th><th>bandwidth (MiB/s)</th><th></th><th>IOPS</th>\
         <th>latency avg (us)</th><th>p50 (us)</th><th>p99 (us)</th><th>p99.9 (us)</th></tr>\n",
        esc(title),
        if passed { "pass" } else { "fail" },
        esc(verdict),
    );
    let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
    for r in &out.rows {
        let bw = r.bw_mib();
        let pct = if max_bw > 0.0 {
            bw / max_bw * 100.0
        } else {
            0.0
        };
        body.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{bw:.2}</td>\
             <td><div style=\"background:#4e79a7;height:0.8em;width:{pct:.0}%;min-width:1px\"></div></td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
            esc(&r.job),
            r.instance,
            esc(&r.operation),
            fmt_count(r.iops),
            f(r.latency_us()),
            f(r.p50_us),
            f(r.p99_us),
            f(r.p999_us),
        ));
    }
    body.push_str("</table>\n");
    if !out.errors.is_empty() {
        body.push_str("<h2>fio errors</h2>\n<pre>");
        for (line, e) in &out.errors {
            body.push_str(&esc(&format!("stdout.txt:{line}: {e}\n")));
        }
        body.push_str("</pre>\n");
    }
    page(title, &body, &serde_json::json!({ "charts": {} }))
}

/// `28800`, `1.23M`: IOPS at a glance.
fn fmt_count(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_as_cloudai_writes_them() {
        let mut out = Vec::new();
        option("rw", &ArgValue::Str("randwrite".into()), &mut out);
        option("group_reporting", &ArgValue::Bool(true), &mut out);
        option("direct", &ArgValue::Bool(false), &mut out);
        option("iodepth", &ArgValue::Int(4), &mut out);
        option(
            "bssplit",
            &ArgValue::List(vec![
                ArgValue::Str("4k/50".into()),
                ArgValue::Str("64k/50".into()),
            ]),
            &mut out,
        );
        option("-x", &ArgValue::Str("a b".into()), &mut out);
        assert_eq!(
            out.join(" "),
            "--rw=randwrite --group_reporting --iodepth=4 --bssplit=4k/50,64k/50 -x='a b'"
        );
    }

    #[test]
    fn summary_lines_of_both_generations() {
        let (op, iops, bw, unit) =
            op_line("  write: IOPS=28.8k, BW=112MiB/s (118MB/s)(4096MiB/36447msec)").unwrap();
        assert_eq!(
            (op.as_str(), iops, bw, unit.as_str()),
            ("write", 28800.0, 112.0, "MiB/s")
        );
        let (op, iops, bw, unit) =
            op_line("  read : io=326081KB, bw=1023.3KB/s, iops=170 , runt=318686msec").unwrap();
        assert_eq!(
            (op.as_str(), iops, bw, unit.as_str()),
            ("read", 170.0, 1023.3, "KiB/s")
        );
        // the group summary (upper case) and the job header are not rows
        assert!(op_line("  WRITE: bw=112MiB/s (118MB/s), 112MiB/s-112MiB/s").is_none());
        // a blank before the unit (fio 2's small rates)
        assert_eq!(
            op_line("  read : io=1024.0KB, bw=269100 B/s, iops=65 , runt=  3897msec").unwrap(),
            ("read".to_string(), 65.0, 269100.0, "B/s".to_string())
        );
        assert!(
            op_line("write: IOPS=1, BW=1MiB/s").is_none(),
            "summary lines are indented"
        );
    }

    #[test]
    fn latency_with_a_blank_after_avg() {
        assert_eq!(
            latency_line("    slat (usec): min=2, max=1841, avg= 7.63, stdev= 5.14"),
            None
        );
        assert_eq!(
            latency_line("    clat (usec): min=359, max=45445, avg=1294.12, stdev=1983.67"),
            Some(("clat", "usec".into(), 1294.12))
        );
        assert_eq!(
            latency_line("     lat (msec): min=17, max=107, avg= 25.97, stdev= 8.55"),
            Some(("lat", "msec".into(), 25.97))
        );
    }

    #[test]
    fn errors_are_fios_words() {
        let text = "fio-smoke: (groupid=0, jobs=1): err= 2 (file:filesetup.c:174, func=open, error=No such file or directory): pid=7\n";
        let out = parse(text);
        assert_eq!(out.errors.len(), 1);
        assert!(out.errors[0].1.contains("No such file"), "{:?}", out.errors);
        let out =
            parse("fio: pid=0, err=13/file:filesetup.c:1, func=open, error=Permission denied\n");
        assert_eq!(out.errors[0].0, 1);
        let ok =
            parse("fio-smoke: (groupid=0, jobs=1): err= 0: pid=379504: Mon Jul  3 22:30:33 2023\n");
        assert!(ok.errors.is_empty());
    }

    #[test]
    fn json_documents_one_per_task() {
        let doc = r#"{"fio version":"fio-3.36","jobs":[{"jobname":"j","error":0,
            "read":{"io_bytes":0,"bw":0,"iops":0.0},
            "write":{"io_bytes":83886080,"bw":1572864,"iops":12288.5,"lat_ns":{"mean":80500.0},
                     "clat_ns":{"mean":75300.0,"percentile":{"50.000000":72192,"99.000000":130048,"99.900000":250880}}},
            "trim":{"io_bytes":0}}]}"#;
        let text = format!(
            "note: both iodepth >= 1 and synchronous I/O engine are selected\n{doc}\n{doc}\n"
        );
        let out = parse(&text);
        assert_eq!(out.rows.len(), 2, "{out:?}");
        assert_eq!(out.version.as_deref(), Some("3.36"));
        let r = &out.rows[1];
        assert_eq!(
            (r.operation.as_str(), r.instance, r.bw_mib()),
            ("write", 2, 1536.0)
        );
        assert_eq!(r.latency_us(), Some(80.5));
        assert_eq!((r.p50_us, r.p99_us), (Some(72.192), Some(130.048)));
    }

    #[test]
    fn truncated_output_keeps_what_was_printed() {
        let text = "j: (groupid=0, jobs=1): err= 0: pid=1\n  write: IOPS=4801, BW=18.8MiB/s (19.7MB/s)\n    clat (nsec): min=1";
        let out = parse(text);
        assert_eq!(out.rows.len(), 1);
        assert_eq!(out.rows[0].latency_avg, None);
    }
}
