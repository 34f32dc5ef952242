//! The launcher log (`cloudai_megatron_bridge_launcher.log`): the launcher's own lines, then the job's log, which it
//! follows. Megatron-Bridge's performance callback prints a line per logged step (`… Step Time : 9.09s GPU
//! utilization: 663.5MODEL_TFLOP/s/GPU`), Megatron its training log (`iteration 50/ 50 | … | number of nan
//! iterations: 0 |`) and, at start, the world (`using world size: 16, …`). A retry of the job starts its iterations
//! again: the last run counts. CloudAI passes when one step line shows and reports the last ten; the grade here also
//! needs the job's exit, every iteration asked run, no NaN loss, and the ranks asked where the log shows them.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use super::launcher::LOG;
use super::TestDefinition;
use crate::config::args::ArgValue;
use crate::results::checks::{Check, CheckKind};
use crate::util::pytoml::py_float;
use crate::workloads::kit::{self, TablePage};
use crate::workloads::submit::job_ids;
use crate::workloads::{IterationReport, JobOutcome, Verdict};

pub(super) const SUMMARY_FILE: &str = "report.txt";
pub(super) const CSV_FILE: &str = "cloudai_megatron_bridge_steps.csv";
pub(super) const HTML_FILE: &str = "cloudai_megatron_bridge_report.html";
/// Steps CloudAI's report and metrics take: the last ten.
const WINDOW: usize = 10;

/// What the launcher log shows of the job's last run.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Log {
    pub file: PathBuf,
    /// (step time s, TFLOP/s per GPU) of each step line.
    pub steps: Vec<(f64, f64)>,
    /// The last `iteration N/ M` line: (N, M).
    pub iteration: Option<(u64, u64)>,
    /// Iterations the last run reported with a NaN loss.
    pub nan_iterations: u64,
    /// `using world size: W`.
    pub world: Option<u64>,
    /// The last line saying why it failed (a traceback's end, an error).
    pub error: Option<String>,
}

impl Log {
    /// The last ten steps' times and throughputs.
    pub fn window(&self) -> (Vec<f64>, Vec<f64>) {
        self.steps[self.steps.len().saturating_sub(WINDOW)..]
            .iter()
            .copied()
            .unzip()
    }
}

/// A number at the start of `s` (`9.09`, `663`), and what follows it.
fn number(s: &str) -> Option<(f64, &str)> {
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    Some((s[..end].parse().ok()?, &s[end..]))
}

/// `Step Time : 9.09s GPU utilization: 663.5MODEL_TFLOP/s/GPU` (either case, any blanks) → (9.09, 663.5).
fn step_line(line: &str) -> Option<(f64, f64)> {
    let lower = line.to_ascii_lowercase();
    let rest = &lower[lower.find("step time")? + "step time".len()..];
    let rest = rest.trim_start().strip_prefix(':')?.trim_start();
    let (time, rest) = number(rest)?;
    rest.trim_start().strip_prefix('s')?;
    let rest = &rest[rest.find("gpu utilization:")? + "gpu utilization:".len()..];
    let (tflops, rest) = number(rest.trim_start())?;
    let rest = rest.trim_start();
    rest.strip_prefix("model_")
        .unwrap_or(rest)
        .starts_with("tflop/s/gpu")
        .then_some((time, tflops))
}

/// Megatron's `iteration       50/      50 |` → (50, 50).
fn iteration(line: &str) -> Option<(u64, u64)> {
    let rest = line.split_once(" iteration ")?.1;
    let (n, rest) = rest.trim_start().split_once('/')?;
    let m: String = rest
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    Some((n.trim().parse().ok()?, m.parse().ok()?))
}

/// A count after `label` (`number of nan iterations:   0`).
fn count_after(line: &str, label: &str) -> Option<u64> {
    let rest = line.split_once(label)?.1.trim_start();
    rest.chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .ok()
}

/// Reads the launcher log in one pass; `Err` says why there is none.
pub(super) fn read(dir: &Path) -> Result<Log, String> {
    let file = dir.join(LOG);
    let f = std::fs::File::open(&file).map_err(|_| {
        format!(
            "Megatron-Bridge launcher log not found in {}",
            dir.display()
        )
    })?;
    let mut log = Log {
        file,
        ..Log::default()
    };
    // step lines since the last iteration line: they belong to the run that iteration line is of
    let mut pending = Vec::new();
    for line in std::io::BufReader::new(f).lines() {
        let Ok(line) = line else { break };
        // the launcher submitted the job again (NeMo-Run's `Job id: N`): what follows is a new run
        if log.iteration.is_some() && !job_ids(&line).is_empty() {
            log = Log {
                file: log.file,
                world: log.world,
                ..Log::default()
            };
            pending.clear();
        }
        if let Some(s) = step_line(&line) {
            pending.push(s);
        }
        if let Some((n, m)) = iteration(&line) {
            // a run of the job again (the launcher's retry) starts over
            if log.iteration.is_some_and(|(last, _)| n < last) {
                log.nan_iterations = 0;
                log.steps.clear();
            }
            log.steps.append(&mut pending);
            log.iteration = Some((n, m));
            log.nan_iterations += count_after(&line, "number of nan iterations:").unwrap_or(0);
        }
        if let Some(w) = count_after(&line, "using world size:") {
            log.world = Some(w);
        }
        if kit::error_line(&line) {
            log.error = Some(line.trim().chars().take(300).collect());
        }
    }
    log.steps.append(&mut pending);
    Ok(log)
}

pub(super) fn verdict(test: &TestDefinition, dir: &Path, outcome: &JobOutcome) -> Verdict {
    match read(dir) {
        Ok(log) => grade(test, &log, outcome),
        Err(why) => Verdict::fail(why),
    }
}

fn grade(test: &TestDefinition, log: &Log, outcome: &JobOutcome) -> Verdict {
    let last_error = || {
        log.error
            .as_ref()
            .map_or(String::new(), |e| format!("; last error: {e}"))
    };
    if let Some(c) = outcome.exit_code.filter(|c| *c != 0) {
        return Verdict::fail(format!(
            "the training job exited with status {c} (see {LOG}){}",
            last_error()
        ));
    }
    if log.steps.is_empty() {
        return Verdict::fail(format!(
            "no 'Step Time : … GPU utilization: … TFLOP/s/GPU' line in {LOG}: the training reported no step{}",
            last_error()
        ));
    }
    if let Some((t, f)) = log
        .steps
        .iter()
        .find(|(t, f)| !(t.is_finite() && *t > 0.0 && f.is_finite() && *f >= 0.0))
    {
        return Verdict::fail(format!(
            "{LOG} has a step of {t} s at {f} TFLOP/s/GPU: every step must take a measured time"
        ));
    }
    if log.nan_iterations > 0 {
        return Verdict::fail(format!(
            "{} iteration(s) of the training had a NaN loss ({LOG}): the numbers it computed are wrong",
            log.nan_iterations
        ));
    }
    let mut checks = Vec::new();
    let asked = test.cmd_args.get("max_steps").and_then(ArgValue::as_int);
    match (log.iteration, asked) {
        (Some((_, m)), Some(a)) if m as i64 != a => {
            return Verdict::fail(format!(
                "the training ran toward {m} iterations, but max_steps = {a} was asked ({LOG})"
            ))
        }
        (Some((n, m)), _) if n < m => {
            return Verdict::fail(format!(
                "the training stopped at iteration {n} of {m} ({LOG}){}",
                last_error()
            ))
        }
        (Some((n, m)), _) => checks.push(Check::pass(
            CheckKind::Output,
            format!("iteration {n} of {m} reached, no NaN loss"),
        )),
        (None, _) => checks.push(Check::not_shown(
            CheckKind::Output,
            "the log shows no Megatron iteration line",
        )),
    }
    let gpus = test.cmd_args.get("num_gpus").and_then(ArgValue::as_int);
    match (log.world, gpus) {
        (Some(w), Some(g)) if w as i64 != g => {
            return Verdict::fail(format!(
                "the training ran {w} ranks, but num_gpus = {g} was asked ({LOG})"
            ))
        }
        (Some(w), _) => checks.push(Check::pass(
            CheckKind::Shape,
            format!("{w} ranks = num_gpus"),
        )),
        (None, _) => checks.push(Check::not_shown(
            CheckKind::Shape,
            "the log does not show the world size the training started",
        )),
    }
    let (times, tflops) = log.window();
    if tflops.iter().all(|f| *f == 0.0) {
        // Megatron-Bridge prints 0 for hybrid models (Nemotron-H): no throughput, but no failure either
        checks.push(Check::not_shown(
            CheckKind::Output,
            "the log prints 0 TFLOP/s/GPU (Megatron-Bridge does for hybrid models): throughput not measured",
        ));
    }
    let mut v = Verdict::pass_with(format!(
        "{} step(s); last {}: mean {:.3} s, {:.1} TFLOP/s/GPU",
        log.steps.len(),
        times.len(),
        kit::mean(&times).unwrap_or(f64::NAN),
        kit::mean(&tflops).unwrap_or(f64::NAN)
    ));
    v.checks.extend(checks);
    v
}

/// Python's `statistics` summary of the numbers, as CloudAI's report writes it.
fn stats(v: &[f64]) -> [(&'static str, f64); 5] {
    let n = v.len() as f64;
    let avg = kit::mean(v).unwrap_or(f64::NAN);
    let median = kit::median(v).unwrap_or(f64::NAN);
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let std = if v.len() > 1 {
        (v.iter().map(|x| (x - avg).powi(2)).sum::<f64>() / n).sqrt()
    } else {
        0.0
    };
    [
        ("avg", avg),
        ("median", median),
        ("min", min),
        ("max", max),
        ("std", std),
    ]
}

/// CloudAI's `report.txt`, the steps as CSV, the page.
pub(super) fn report(test: &TestDefinition, dir: &Path, title: &str) -> Option<IterationReport> {
    let log = match read(dir) {
        Ok(l) => l,
        Err(why) => return Some(IterationReport::failed(why)),
    };
    let v = grade(test, &log, &JobOutcome::default());
    let (times, tflops) = log.window();
    let summary = if times.is_empty() {
        format!(
            "MegatronBridge report\nNo 'Step Time' / 'GPU utilization' lines were found.\n\nSearched file:\n  - {}\n",
            log.file.display()
        )
    } else {
        let block = |title: &str, v: &[f64]| {
            let lines: String = stats(v)
                .iter()
                .map(|(k, x)| format!("  {k}: {}\n", py_float(*x)))
                .collect();
            format!("{title}\n{lines}")
        };
        format!(
            "Source log: {}\n\n{}\n{}",
            log.file.display(),
            block("Step Time (s)", &times),
            block("TFLOP/s per GPU", &tflops)
        )
    };
    let mut files = vec![(SUMMARY_FILE.to_string(), summary)];
    let mut metrics = serde_json::Map::new();
    if let (Some(t), Some(f)) = (kit::mean(&times), kit::mean(&tflops)) {
        metrics.insert("step_time_mean_s".into(), t.into());
        metrics.insert("tflops_per_gpu_mean".into(), f.into());
    }
    metrics.insert("steps".into(), log.steps.len().into());
    let table = kit::Table {
        header: vec!["step_line", "step_time_s", "tflops_per_gpu"],
        rows: log
            .steps
            .iter()
            .enumerate()
            .map(|(i, (t, f))| vec![(i + 1).to_string(), py_float(*t), py_float(*f)])
            .collect(),
    };
    files.push((CSV_FILE.into(), table.csv()));
    let pts: Vec<(u64, f64)> = log
        .steps
        .iter()
        .enumerate()
        .map(|(i, (t, _))| (i as u64 + 1, *t))
        .collect();
    let page = TablePage {
        title,
        verdict: &v.status_line(),
        passed: v.passed,
        cards: vec![
            (
                "mean step time (last 10)".into(),
                kit::mean(&times).map_or("-".into(), |m| format!("{m:.3} s")),
            ),
            (
                "TFLOP/s/GPU (last 10)".into(),
                kit::mean(&tflops).map_or("-".into(), |m| format!("{m:.1}")),
            ),
            (
                "iterations".into(),
                log.iteration
                    .map_or("?".into(), |(n, m)| format!("{n}/{m}")),
            ),
        ],
        charts: serde_json::json!({ "steps": kit::step_time_chart(&pts, "step line") }),
        show: vec!["steps"],
        sections: vec![table.section("Steps")],
    }
    .render();
    files.push((HTML_FILE.into(), page));
    Some(IterationReport {
        files,
        metrics,
        verdict: Some(v),
        ..IterationReport::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_of_the_log() {
        assert_eq!(
            step_line("ain_fp8_mx/0 Step Time : 9.09s GPU utilization: 663.5MODEL_TFLOP/s/GPU"),
            Some((9.09, 663.5))
        );
        assert_eq!(
            step_line("step time: 1 s | gpu utilization: 20 TFLOP/s/GPU"),
            Some((1.0, 20.0))
        );
        assert_eq!(
            step_line("Step Time: 0.50s , 32680.36 tok/s/gpu, GPU utilization: 257.1 MODEL_TFLOP/s/GPU , Peak Mem: 64.5GB"),
            Some((0.5, 257.1))
        );
        assert_eq!(step_line("Step Time : 9.09s GPU utilization: n/a"), None);
        assert_eq!(step_line("Step Time : fast"), None);
        assert_eq!(
            iteration(
                " [2025-12-22 15:18:33] iteration       50/      50 | consumed samples: 25600 |"
            ),
            Some((50, 50))
        );
        assert_eq!(
            count_after(
                "| number of nan iterations:   2 |",
                "number of nan iterations:"
            ),
            Some(2)
        );
        assert_eq!(
            count_after(
                "using world size: 16, data-parallel size: 4",
                "using world size:"
            ),
            Some(16)
        );
        let s = stats(&[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(s[1], ("median", 2.5));
        assert!((s[4].1 - 1.118033988749895).abs() < 1e-12);
    }
}
