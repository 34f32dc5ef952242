//! fio (CloudAI's `Fio`): storage bandwidth, IOPS and latency. The command is CloudAI's (`cmd_args.args` become
//! `--name=value` flags); the output is read by fio's formats' rules: the classic text (a job header per job, an
//! `IOPS=…, BW=…` line per operation, `lat`/`clat` averages and percentiles, fio 2's `io=…, bw=…, iops=…` too) or
//! its JSON (`--output-format=json`), however many tasks printed into one file. Graded as CloudAI grades it, with
//! fio's own words when it failed; reported as `fio_summary.csv` (CloudAI's columns first) and a page.

use std::path::Path;

use serde_json::Value;

use super::kit::{self, Cell, Section, TablePage};
use super::{IterationReport, JobOutcome, Launch, Procs, Success, Verdict, Workload};
use crate::config::args::{ArgDefault as D, ArgSpec, ArgType as T, ArgValue, CmdArgs};
use crate::config::decode::{join, Ctx, View};
use crate::config::test::{TemplateSchema, TestDefinition};
use crate::util::pytoml::py_float;
use crate::util::shell::quote;
mod output;
pub use output::*;

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

pub(crate) const CSV_FILE: &str = "fio_summary.csv";
pub(crate) const HTML_FILE: &str = "fio_report.html";
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
            host_mounts: Vec::new(),
            launcher_args: Vec::new(),
            steps: None,
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
        let status = v.status_line();
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
    let mut cards: Vec<(String, String)> = out
        .totals()
        .into_iter()
        .map(|(op, bw, iops)| {
            (
                format!("{op} (all jobs)"),
                format!("{bw:.1} MiB/s · {} IOPS", fmt_count(iops)),
            )
        })
        .collect();
    if let Some(v) = &out.version {
        cards.push(("fio".into(), v.clone()));
    }
    let max_bw = out
        .rows
        .iter()
        .map(Row::bw_mib)
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let f = |v: Option<f64>| Cell::from(kit::fixed2(v, "-"));
    let rows = out
        .rows
        .iter()
        .map(|r| {
            let bw = r.bw_mib();
            let pct = if max_bw > 0.0 {
                bw / max_bw * 100.0
            } else {
                0.0
            };
            vec![
                r.job.as_str().into(),
                r.instance.to_string().into(),
                r.operation.as_str().into(),
                format!("{bw:.2}").into(),
                Cell::Html(format!(
                    "<div style=\"background:#4e79a7;height:0.8em;width:{pct:.0}%;min-width:1px\"></div>"
                )),
                fmt_count(r.iops).into(),
                f(r.latency_us()),
                f(r.p50_us),
                f(r.p99_us),
                f(r.p999_us),
            ]
        })
        .collect();
    let mut sections = vec![Section::Table {
        heading: "Jobs".into(),
        header: [
            "job",
            "#",
            "operation",
            "bandwidth (MiB/s)",
            "",
            "IOPS",
            "latency avg (us)",
            "p50 (us)",
            "p99 (us)",
            "p99.9 (us)",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    }];
    if !out.errors.is_empty() {
        sections.push(Section::Pre {
            heading: "fio errors".into(),
            text: out
                .errors
                .iter()
                .map(|(line, e)| format!("stdout.txt:{line}: {e}\n"))
                .collect(),
        });
    }
    TablePage {
        title,
        verdict,
        passed,
        cards,
        charts: serde_json::json!({}),
        show: vec![],
        sections,
    }
    .render()
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
