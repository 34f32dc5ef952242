//! DDLB, Distributed Deep Learning Benchmarks (CloudAI's `DDLBTest`): one MPI rank per GPU runs a tensor-parallel
//! primitive (a GEMM with its all-gather) for each implementation and shape asked, then rank 0 prints the
//! `Benchmark Results:` table (pandas: an index, then `m n k config Throughput (TFLOPS) …`, every column right
//! aligned under its header). Graded as CloudAI does (no `Error`, the table printed) and further: every asked shape
//! × configuration has its row with a throughput, no result failed DDLB's own validation.

use std::path::Path;

use super::kit::{self, TablePage};
use super::{IterationReport, JobOutcome, Launch, Success, Verdict, Workload};
use crate::config::args::{ArgDefault as D, ArgSpec, ArgType as T};
use crate::config::test::{TemplateSchema, TestDefinition};
use crate::util::shell::quote;
use crate::workloads::judge::{Check, CheckKind};

pub(crate) struct Ddlb;

static ARGS: &[ArgSpec] = &[
    ArgSpec::new("docker_image_url", T::Str, D::Required).single(),
    ArgSpec::new("primitive", T::Str, D::Required),
    ArgSpec::new("m", T::Int, D::Int(1024)).at_least(1),
    ArgSpec::new("n", T::Int, D::Int(128)).at_least(1),
    ArgSpec::new("k", T::Int, D::Int(1024)).at_least(1),
    ArgSpec::new("dtype", T::Str, D::Required),
    ArgSpec::new("num_iterations", T::Int, D::Int(50)).at_least(1),
    ArgSpec::new("num_warmups", T::Int, D::Int(5)).at_least(0),
    ArgSpec::new(
        "impl",
        T::Str,
        D::Str("pytorch;backend=nccl;order=AG_before"),
    ),
];

pub(crate) const CSV_FILE: &str = "ddlb_report.csv";
pub(crate) const HTML_FILE: &str = "ddlb_report.html";
const RESULTS: &str = "Benchmark Results";
/// The results table's columns after its index, as DDLB prints them.
const COLUMNS: [&str; 10] = [
    "m",
    "n",
    "k",
    "config",
    "Throughput (TFLOPS)",
    "Throughput std (TFLOPS)",
    "mean_time (ms)",
    "std_time",
    "min_time",
    "max_time",
];

impl TemplateSchema for Ddlb {
    fn template(&self) -> &'static str {
        "DDLBTest"
    }
    fn args(&self) -> &'static [ArgSpec] {
        ARGS
    }
}

impl Workload for Ddlb {
    /// CloudAI's command, flags in its field order. The implementation spec is quoted: CloudAI writes it bare, so
    /// the shell splits `pytorch;backend=nccl;…` at its `;` and DDLB runs `pytorch` without its options.
    fn launch(&self, test: &TestDefinition, _at: &super::Placement) -> Launch {
        let mut args = Vec::new();
        for spec in ARGS.iter().skip(1) {
            let Some(v) = test.cmd_args.get(spec.name) else {
                continue;
            };
            let flag = match spec.name {
                "m" | "n" | "k" => format!("-{}", spec.name),
                "num_iterations" | "num_warmups" => format!("--{}", spec.name.replace('_', "-")),
                other => format!("--{other}"),
            };
            args.extend([flag, quote(&v.py_str()).into_owned()]);
        }
        super::push_extra_args(test, &mut args);
        Launch::mpi("python ddlb/cli/benchmark.py", args)
            .in_test_image(test)
            .judged_by(Success::OutputContains(RESULTS))
    }

    fn grade(&self, test: &TestDefinition, dir: &Path, _outcome: &JobOutcome) -> Verdict {
        let path = dir.join("stdout.txt");
        match std::fs::read_to_string(&path) {
            Ok(text) => verdict(&parse(&text), test),
            Err(_) => Verdict::fail(format!(
                "{} was not created: DDLB produced no output; run the command from test-run.toml (full_cmd) by hand \
                 to see why",
                path.display()
            )),
        }
    }

    fn report(&self, test: &TestDefinition, dir: &Path, title: &str) -> Option<IterationReport> {
        let out = parse(&std::fs::read_to_string(dir.join("stdout.txt")).ok()?);
        let v = verdict(&out, test);
        let mut metrics = serde_json::Map::new();
        if let Some(b) = out.best() {
            metrics.insert("best_tflops".into(), b.tflops.into());
            metrics.insert("best_config".into(), b.config.clone().into());
        }
        metrics.insert("rows".into(), out.rows.len().into());
        let results = table(&out);
        Some(IterationReport {
            files: vec![
                (CSV_FILE.into(), results.csv()),
                (HTML_FILE.into(), page(title, &out, results, &v)),
            ],
            metrics,
            verdict: Some(v),
            ..Default::default()
        })
    }
}

/// One row of the results table (times in ms).
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub shape: (u64, u64, u64),
    pub config: String,
    pub tflops: f64,
    pub tflops_std: f64,
    pub times: [f64; 4],
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Output {
    /// `Benchmark Results:` was printed (CloudAI's success mark).
    pub finished: bool,
    pub rows: Vec<Row>,
    /// The MPI world size DDLB reports.
    pub world_size: Option<u64>,
    /// Lines saying the run failed (`Error`, a traceback, a launcher's abort) and results that failed DDLB's own
    /// validation, with their line numbers.
    pub errors: Vec<(usize, String)>,
    pub invalid: Vec<(usize, String)>,
}

impl Output {
    pub fn best(&self) -> Option<&Row> {
        self.rows
            .iter()
            .filter(|r| r.tflops.is_finite())
            .max_by(|a, b| a.tflops.total_cmp(&b.tflops))
    }
}

/// Reads DDLB's output: its world size, errors, validation warnings and the results table (pandas').
pub fn parse(text: &str) -> Output {
    let mut out = Output::default();
    let mut ends: Option<Vec<usize>> = None;
    let mut tracebacks = kit::Tracebacks::default();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if tracebacks.feed(n, line, &mut out.errors) {
            continue;
        }
        if let Some(w) = line
            .strip_prefix("Running ")
            .and_then(|r| r.split(" benchmark with ").nth(1))
        {
            out.world_size = w.split_whitespace().next().and_then(|w| w.parse().ok());
        } else if line.starts_with("Warning: Validation failed") {
            out.invalid.push((n, line.trim().to_string()));
        } else if line.contains("Error") || super::launcher_failure(line) {
            out.errors.push((n, line.trim().to_string()));
        } else if line.starts_with(RESULTS) {
            out.finished = true;
        } else if out.finished && ends.is_none() {
            ends = kit::aligned_header(line, &COLUMNS);
        } else if let Some(e) = &ends {
            match table_row(line, e) {
                Some(r) => out.rows.push(r),
                None => ends = None,
            }
        }
    }
    out
}

fn table_row(line: &str, ends: &[usize]) -> Option<Row> {
    let cells = kit::aligned_cells(line, ends)?;
    let num = |i: usize| cells[i].parse::<f64>().ok();
    let int = |i: usize| cells[i].parse::<u64>().ok();
    Some(Row {
        shape: (int(0)?, int(1)?, int(2)?),
        config: cells[3].to_string(),
        tflops: num(4)?,
        tflops_std: num(5)?,
        times: [num(6)?, num(7)?, num(8)?, num(9)?],
    })
}

/// The configurations an implementation spec (`name;key=v1,v2;key2=v`) expands to: DDLB runs each combination.
fn configurations(spec: &str) -> usize {
    spec.split(';')
        .skip(1)
        .filter_map(|t| t.split_once('=').map(|(_, v)| v))
        .map(|v| v.split(',').filter(|x| !x.trim().is_empty()).count().max(1))
        .product()
}

fn verdict(out: &Output, test: &TestDefinition) -> Verdict {
    if let Some((n, l)) = out.errors.first() {
        return Verdict::fail(format!("DDLB failed (stdout.txt line {n}): {l}"));
    }
    if !out.finished {
        return Verdict::fail(format!(
            "no '{RESULTS}' table in stdout.txt: DDLB did not run to completion"
        ));
    }
    let int = |k: &str| {
        test.cmd_args
            .get(k)
            .and_then(|v| v.as_int())
            .map(|v| v as u64)
    };
    let shape = (int("m"), int("n"), int("k"));
    let want = configurations(test.cmd_args.str("impl").unwrap_or(""));
    let asked = |r: &&Row| (Some(r.shape.0), Some(r.shape.1), Some(r.shape.2)) == shape;
    let ran = out.rows.iter().filter(asked).count();
    let mut v = if ran < want {
        Verdict::fail(format!(
            "{ran} of the {want} results asked (shape {}x{}x{}) are in the table",
            shape.0.unwrap_or(0),
            shape.1.unwrap_or(0),
            shape.2.unwrap_or(0)
        ))
    } else {
        match out.best() {
            Some(b) if b.tflops > 0.0 => Verdict::pass_with(format!(
                "{} result(s); best {:.2} TFLOPS ({})",
                out.rows.len(),
                b.tflops,
                b.config
            )),
            _ => Verdict::fail("no result has a throughput above 0 TFLOPS"),
        }
    };
    if let Some((n, l)) = out.invalid.first() {
        v = Verdict::fail(format!(
            "DDLB's validation failed (stdout.txt line {n}): {l}"
        ));
        v.checks.push(Check::fail(CheckKind::Wrong, l.clone()));
    }
    v
}

/// The results as one table: the CSV and the page's table.
fn table(out: &Output) -> kit::Table {
    let num = |x: f64| kit::csv_num(Some(x));
    kit::Table {
        header: vec![
            "m",
            "n",
            "k",
            "config",
            "throughput_tflops",
            "throughput_std_tflops",
            "mean_time_ms",
            "std_time_ms",
            "min_time_ms",
            "max_time_ms",
        ],
        rows: out
            .rows
            .iter()
            .map(|r| {
                let (m, n, k) = r.shape;
                vec![
                    m.to_string(),
                    n.to_string(),
                    k.to_string(),
                    r.config.clone(),
                    num(r.tflops),
                ]
                .into_iter()
                .chain([r.tflops_std, r.times[0], r.times[1], r.times[2], r.times[3]].map(num))
                .collect()
            })
            .collect(),
    }
}

fn page(title: &str, out: &Output, results: kit::Table, v: &Verdict) -> String {
    let best = out
        .best()
        .map_or("none".into(), |b| format!("{:.2} TFLOPS", b.tflops));
    let ranks = out.world_size.map_or("?".into(), |w| w.to_string());
    TablePage {
        title,
        verdict: &v.status_line(),
        passed: v.passed,
        cards: vec![
            ("best".into(), best),
            ("results".into(), out.rows.len().to_string()),
            ("ranks".into(), ranks),
        ],
        charts: serde_json::json!({}),
        show: Vec::new(),
        sections: vec![results.section("Results")],
    }
    .render()
}
