//! Reading a finished JAX toolbox run: every task's `error-*.txt` (Paxml logs to stderr), the profiling stage's
//! `profile_stderr_*.txt`, the measured stage's step times (`[PAX STATUS]: train_step() took X seconds`).

use std::path::Path;

use crate::config::args::ArgValue;
use crate::config::test::TestDefinition;
use crate::workloads::judge::{Check, CheckKind, CheckStatus};
use crate::workloads::kit::{self, TablePage};
use crate::workloads::{IterationReport, JobOutcome, Verdict};

/// What ends a finished run in Paxml's log.
const END: &str = "E2E time: Elapsed time for";
const PROFILE_END: &str = "[PAX STATUS]: E2E time: Elapsed time for ";
const STEP: &str = "[PAX STATUS]: train_step() took";
/// Steps left out of the numbers: compilation and warm-up (CloudAI's rule).
const WARMUP: usize = 10;

/// Known ways a run dies, each with what to do (CloudAI's four).
const KNOWN: &[(&str, &str)] = &[
    (
        "CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected",
        "no GPU is visible to the task: check the job's GPU directives and CUDA_VISIBLE_DEVICES",
    ),
    (
        "Terminating process because the coordinator detected missing heartbeats",
        "another task died (missing heartbeats): check that the nodes reach each other by host name and port",
    ),
    (
        "NCCL operation ncclGroupEnd() failed",
        "NCCL failed (ncclGroupEnd): run an NCCL test on these nodes, with NCCL_DEBUG=INFO",
    ),
    (
        "mktemp: failed to create directory via template",
        "pyxis could not unpack the image (mktemp failed): the nodes' container cache is full",
    ),
];

/// One log file of the run.
#[derive(Clone, Debug, Default)]
pub(super) struct TaskLog {
    pub name: String,
    pub ended: bool,
    /// A known failure the log shows: (its line, what to do).
    pub known: Option<(String, &'static str)>,
    pub steps: usize,
}

#[derive(Clone, Debug, Default)]
pub(super) struct Logs {
    pub tasks: Vec<TaskLog>,
    pub profile: Vec<TaskLog>,
    /// Step times after the warm-up, every task's.
    pub times: Vec<f64>,
    /// (step, seconds) of the first task's log, for the chart.
    pub first: Vec<(u64, f64)>,
}

fn read_log(
    path: &Path,
    times: Option<&mut Vec<f64>>,
    first: Option<&mut Vec<(u64, f64)>>,
) -> TaskLog {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut log = TaskLog {
        name: path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned(),
        ..Default::default()
    };
    let mut own = Vec::new();
    for line in text.lines() {
        if line.contains(END) {
            log.ended = true;
        }
        if log.known.is_none() {
            if let Some((_, what)) = KNOWN.iter().find(|(mark, _)| line.contains(mark)) {
                log.known = Some((line.trim().chars().take(300).collect(), what));
            }
        }
        if let Some(rest) = line.split_once(STEP).map(|(_, r)| r) {
            log.steps += 1;
            if let Some(t) = rest
                .trim()
                .split("seconds")
                .next()
                .and_then(|t| t.trim().parse::<f64>().ok())
            {
                own.push((log.steps as u64, t));
            }
        }
    }
    if let Some(first) = first {
        first.clone_from(&own);
    }
    if let Some(times) = times {
        times.extend(
            own.iter()
                .filter(|(n, _)| *n as usize > WARMUP)
                .map(|(_, t)| *t),
        );
    }
    log
}

fn files(dir: &Path, prefix: &str) -> Vec<std::path::PathBuf> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix) && n.ends_with(".txt"))
        })
        .collect();
    out.sort();
    out
}

pub(super) fn read(dir: &Path) -> Result<Logs, String> {
    let mut logs = Logs::default();
    let tasks = files(dir, "error-");
    if tasks.is_empty() {
        return Err(format!(
            "no error-*.txt in {}: the measured stage wrote no log (run the batch script by hand to see why)",
            dir.display()
        ));
    }
    for (i, p) in tasks.iter().enumerate() {
        let first = (i == 0).then_some(&mut logs.first);
        let log = read_log(p, Some(&mut logs.times), first);
        logs.tasks.push(log);
    }
    logs.profile = files(dir, "profile_stderr_")
        .iter()
        .map(|p| read_log(p, None, None))
        .collect();
    Ok(logs)
}

/// CloudAI's `report.txt` numbers of the step times.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Stats {
    pub min: f64,
    pub max: f64,
    pub average: f64,
    pub median: f64,
    pub stdev: f64,
}

impl Stats {
    pub(super) fn of(times: &[f64]) -> Option<Self> {
        let average = kit::mean(times)?;
        let n = times.len() as f64;
        let stdev = if times.len() > 1 {
            (times.iter().map(|t| (t - average).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
        } else {
            0.0
        };
        Some(Self {
            min: times.iter().copied().fold(f64::INFINITY, f64::min),
            max: times.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            average,
            median: kit::median(times)?,
            stdev,
        })
    }
}

fn pgle(test: &TestDefinition) -> bool {
    test.cmd_args.get("enable_pgle") != Some(&ArgValue::Bool(false))
}

fn grade(test: &TestDefinition, dir: &Path, logs: &Logs) -> Verdict {
    let mut checks = Vec::new();
    if pgle(test) {
        checks.push(match logs.profile.iter().find(|l| l.ended) {
            None if logs.profile.is_empty() => Check::fail(
                CheckKind::Output,
                "no profile_stderr_*.txt: the profiling stage did not run",
            ),
            None => Check::fail(
                CheckKind::Output,
                format!(
                    "the profiling stage did not end ('{PROFILE_END}' in no profile_stderr_*.txt)"
                ),
            ),
            Some(l) => match &l.known {
                Some((line, what)) => Check::fail(
                    CheckKind::Output,
                    format!("{} shows: {line} — {what}", l.name),
                ),
                None => Check::pass(CheckKind::Output, "the profiling stage ended"),
            },
        });
    }
    for l in &logs.tasks {
        if let Some((line, what)) = &l.known {
            checks.push(Check::fail(
                CheckKind::Output,
                format!("{} shows: {line} — {what}", l.name),
            ));
        } else if !l.ended {
            checks.push(Check::fail(
                CheckKind::Output,
                format!(
                    "{} does not end with '{END}': the measured stage did not finish",
                    l.name
                ),
            ));
        }
    }
    if checks.iter().all(|c| c.status != CheckStatus::Fail) {
        checks.push(Check::pass(
            CheckKind::Output,
            format!("{} task log(s) end the measured stage", logs.tasks.len()),
        ));
    }
    let unified = test
        .extra_env_vars
        .get("UNIFIED_STDOUT_STDERR")
        .is_some_and(|v| v.py_str() == "1");
    let want = if unified {
        1
    } else {
        kit::iteration_nodes(dir) as usize
    };
    checks.push(if logs.tasks.len() == want {
        Check::pass(CheckKind::Shape, format!("{want} task(s), one per node"))
    } else {
        Check::fail(
            CheckKind::Shape,
            format!(
                "{} task log(s) for the {want} task(s) asked (one per node)",
                logs.tasks.len()
            ),
        )
    });
    checks.push(match Stats::of(&logs.times) {
        Some(s) => Check::pass(
            CheckKind::Table,
            format!(
                "{} step(s) measured after {WARMUP}: mean {:.3} s",
                logs.times.len(),
                s.average
            ),
        ),
        None => Check::not_shown(
            CheckKind::Table,
            format!(
                "no step after the first {WARMUP}: too few steps to measure (raise fdl.max_steps)"
            ),
        ),
    });
    Verdict::from_checks(checks)
}

pub(super) fn verdict(test: &TestDefinition, dir: &Path, outcome: &JobOutcome) -> Verdict {
    let v = match read(dir) {
        Ok(logs) => grade(test, dir, &logs),
        Err(why) => Verdict::fail(why),
    };
    match outcome.exit_code.filter(|c| *c != 0) {
        Some(c) if v.passed => {
            Verdict::fail(format!("the job exited with status {c}")).with_stderr(dir, outcome)
        }
        _ => v.with_stderr(dir, outcome),
    }
}

/// CloudAI's `report.txt` (`Min: …` to `Stdev: …`, Python's number text), the steps as CSV, a page.
pub(super) fn report(test: &TestDefinition, dir: &Path, title: &str) -> Option<IterationReport> {
    let logs = match read(dir) {
        Ok(logs) => logs,
        Err(why) => return Some(IterationReport::failed(why)),
    };
    let v = grade(test, dir, &logs);
    let stats = Stats::of(&logs.times);
    let mut files = Vec::new();
    let mut metrics = serde_json::Map::new();
    if let Some(s) = stats {
        let f = crate::util::pytoml::py_float;
        files.push((
            "report.txt".to_string(),
            format!(
                "Min: {}\nMax: {}\nAverage: {}\nMedian: {}\nStdev: {}\n",
                f(s.min),
                f(s.max),
                f(s.average),
                f(s.median),
                if logs.times.len() > 1 {
                    f(s.stdev)
                } else {
                    "0".into()
                }
            ),
        ));
        metrics.insert("step_time_s".into(), s.average.into());
    }
    let table = kit::Table {
        header: vec!["step", "seconds"],
        rows: logs
            .first
            .iter()
            .map(|(n, t)| vec![n.to_string(), kit::csv_num(Some(*t))])
            .collect(),
    };
    let page = TablePage {
        title,
        verdict: &v.status_line(),
        passed: v.passed,
        cards: vec![
            (
                "mean step (s)".into(),
                kit::fixed2(stats.map(|s| s.average), "-"),
            ),
            (
                "median step (s)".into(),
                kit::fixed2(stats.map(|s| s.median), "-"),
            ),
            ("tasks".into(), logs.tasks.len().to_string()),
        ],
        charts: serde_json::json!({ "steps": kit::step_time_chart(&logs.first, "step") }),
        show: vec!["steps"],
        sections: vec![table.section("Step times (first task)")],
    }
    .render();
    files.push(("jax_toolbox_steps.csv".into(), table.csv()));
    files.push(("jax_toolbox_report.html".into(), page));
    Some(IterationReport {
        files,
        metrics,
        verdict: Some(v),
        ..Default::default()
    })
}
