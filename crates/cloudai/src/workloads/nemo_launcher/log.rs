//! The training job's log, as the NeMo launcher leaves it under the iteration's directory: `<run name>/log-<job
//! name>_<job id>.out` (and `.err`). NeMo prints the step times at the end of training
//! (`… perf_metrics_utils:56] train_step_timing in s: [11.85, 6.98, …]`), Lightning the world it started
//! (`Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/16`) and why it stopped (`` `max_steps=20` reached``).
//! CloudAI reads the step times (the last 20 when there are more than 100) for its report and passes on the job's
//! state; the grade here also needs the log complete and the ranks asked.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use super::hydra::COMMAND_FILE;
use super::{run_name, TestDefinition};
use crate::config::args::ArgValue;
use crate::results::checks::{Check, CheckKind};
use crate::util::pytoml::py_float;
use crate::workloads::kit::{self, TablePage};
use crate::workloads::{IterationReport, JobOutcome, Verdict};

pub(super) const SUMMARY_FILE: &str = "train_step_timing_report.txt";
pub(super) const CSV_FILE: &str = "cloudai_nemo_launcher_step_timing.csv";
pub(super) const HTML_FILE: &str = "cloudai_nemo_launcher_bokeh_report.html";
const TIMINGS: &str = "train_step_timing in s:";

/// What the training log shows.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Log {
    pub file: PathBuf,
    /// The step times (s), as printed.
    pub timings: Vec<f64>,
    /// A step-time list was printed but did not read as numbers: (line, text).
    pub bad_timings: Option<(usize, String)>,
    /// The world size Lightning started (`MEMBER: k/W`).
    pub world: Option<u64>,
    /// `max_steps=N` reached.
    pub reached: Option<u64>,
    /// The last line saying why it failed (a traceback's end, an error), from the log or its `.err`.
    pub error: Option<String>,
}

impl Log {
    /// The step times CloudAI summarizes: the last 20 when there are more than 100.
    pub fn window(&self) -> &[f64] {
        if self.timings.len() > 100 {
            &self.timings[self.timings.len() - 20..]
        } else {
            &self.timings
        }
    }

    pub fn median_step_time(&self) -> Option<f64> {
        kit::median(self.window())
    }
}

/// `[1.5, 2, 3e-1]` → the numbers, `None` when one is not a number.
fn numbers(list: &str) -> Option<Vec<f64>> {
    let inner = list.trim().strip_prefix('[')?.split(']').next()?;
    inner
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse::<f64>().ok())
        .collect()
}

/// The world size in `… MEMBER: 3/16`.
fn member_world(line: &str) -> Option<u64> {
    let rest = line.split_once("MEMBER: ")?.1;
    let frac = rest.split(|c: char| c.is_whitespace() || c == ',').next()?;
    frac.split_once('/')?.1.parse().ok()
}

/// `max_steps=20` in Lightning's "`Trainer.fit` stopped: `max_steps=20` reached."
fn max_steps_reached(line: &str) -> Option<u64> {
    if !line.contains("reached") {
        return None;
    }
    let rest = line.split_once("max_steps=")?.1;
    rest.chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .ok()
}

/// The log the job wrote last under `<dir>/<run name>/` (a requeued job writes one per run).
fn latest_log(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.starts_with("log-") && n.ends_with(".out")
        })
        .max_by_key(|e| (e.metadata().and_then(|m| m.modified()).ok(), e.file_name()))
        .map(|e| e.path())
}

/// Reads the iteration's training log, one pass over it (and its `.err`); `Err` says why there is none.
pub(super) fn read(test: &TestDefinition, dir: &Path) -> Result<Log, String> {
    let run_dir = dir.join(run_name(test));
    let file = latest_log(&run_dir).ok_or_else(|| {
        format!(
            "no training log (log-*.out) in {}: the launcher's job wrote none",
            run_dir.display()
        )
    })?;
    let mut log = Log {
        file: file.clone(),
        ..Log::default()
    };
    let open = |p: &Path| std::fs::File::open(p).map(std::io::BufReader::new);
    let f = open(&file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    for (i, line) in f.lines().enumerate() {
        let Ok(line) = line else { break };
        if let Some((_, list)) = line.split_once(TIMINGS) {
            if log.timings.is_empty() && log.bad_timings.is_none() {
                match numbers(list) {
                    Some(t) => log.timings = t,
                    None => log.bad_timings = Some((i + 1, line.trim().to_string())),
                }
            }
        }
        scan(&line, &mut log);
    }
    if let Ok(err) = open(&file.with_extension("err")) {
        for line in err.lines().map_while(Result::ok) {
            scan(&line, &mut log);
        }
    }
    Ok(log)
}

fn scan(line: &str, log: &mut Log) {
    if let Some(w) = member_world(line) {
        log.world = Some(w);
    }
    if let Some(n) = max_steps_reached(line) {
        log.reached = Some(n);
    }
    if kit::error_line(line) {
        log.error = Some(line.trim().chars().take(300).collect());
    }
}

/// GPUs per node the launcher was given (`cluster.gpus_per_node=N` in the command we wrote).
fn gpus_per_node(dir: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(dir.join(COMMAND_FILE)).ok()?;
    text.split_whitespace()
        .find_map(|w| w.strip_prefix("cluster.gpus_per_node=")?.parse().ok())
}

pub(super) fn verdict(test: &TestDefinition, dir: &Path, outcome: &JobOutcome) -> Verdict {
    let log = match read(test, dir) {
        Ok(l) => l,
        Err(why) => return Verdict::fail(why),
    };
    grade(test, dir, &log, outcome)
}

fn grade(test: &TestDefinition, dir: &Path, log: &Log, outcome: &JobOutcome) -> Verdict {
    let name = log
        .file
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    let last_error = || {
        log.error
            .as_ref()
            .map_or(String::new(), |e| format!("; last error: {e}"))
    };
    if let Some(c) = outcome.exit_code.filter(|c| *c != 0) {
        return Verdict::fail(format!(
            "the training job exited with status {c} (see {name}){}",
            last_error()
        ));
    }
    if let Some((n, l)) = &log.bad_timings {
        return Verdict::fail(format!(
            "the step times in {name} line {n} do not read as numbers: {l}"
        ));
    }
    if log.timings.is_empty() {
        return Verdict::fail(format!(
            "no '{TIMINGS} [...]' in {name}: the training did not run to its end{}",
            last_error()
        ));
    }
    if let Some(t) = log.timings.iter().find(|t| !t.is_finite() || **t <= 0.0) {
        return Verdict::fail(format!(
            "{name} has a step time of {t} s: every step must take a measured time above 0"
        ));
    }
    let asked_steps = test
        .cmd_args
        .at("training.trainer.max_steps")
        .and_then(ArgValue::as_int);
    let mut checks = Vec::new();
    match (log.reached, asked_steps) {
        (Some(r), Some(a)) if r as i64 != a => {
            return Verdict::fail(format!(
                "the training stopped at max_steps={r}, but {a} steps were asked ({name})"
            ))
        }
        (Some(r), _) => checks.push(Check::pass(
            CheckKind::Output,
            format!("max_steps={r} reached"),
        )),
        (None, _) => checks.push(Check::not_shown(
            CheckKind::Output,
            "the log does not say max_steps was reached",
        )),
    }
    let nodes = kit::iteration_nodes(dir);
    match (log.world, gpus_per_node(dir)) {
        (Some(w), Some(g)) if w != nodes * g => {
            return Verdict::fail(format!(
            "the training ran {w} ranks, but {nodes} node(s) × {g} GPUs = {} were asked ({name})",
            nodes * g
        ))
        }
        (Some(w), Some(g)) => checks.push(Check::pass(
            CheckKind::Shape,
            format!("{w} ranks = {nodes} node(s) × {g} GPUs"),
        )),
        (Some(w), None) => checks.push(Check::not_shown(
            CheckKind::Shape,
            format!("{w} ranks; the system does not state its GPUs per node"),
        )),
        (None, _) => checks.push(Check::not_shown(
            CheckKind::Shape,
            "the log does not show the ranks it started",
        )),
    }
    let median = log.median_step_time().unwrap_or(f64::NAN);
    let mut v = Verdict::pass_with(format!(
        "{} step times, median {median:.3} s",
        log.timings.len()
    ));
    v.checks.extend(checks);
    v
}

/// CloudAI's summary (`Avg: 1.2345` …), the step times as CSV, the page.
pub(super) fn report(test: &TestDefinition, dir: &Path, title: &str) -> Option<IterationReport> {
    let log = match read(test, dir) {
        Ok(l) => l,
        // nothing to chart, but a grade all the same
        Err(why) => return Some(IterationReport::failed(why)),
    };
    let v = grade(test, dir, &log, &JobOutcome::default());
    let window = log.window();
    let median_s = log.median_step_time();
    let mut files = Vec::new();
    let mut metrics = serde_json::Map::new();
    if let Some(median) = median_s {
        let avg = kit::mean(window).unwrap_or(f64::NAN);
        let min = window.iter().copied().fold(f64::INFINITY, f64::min);
        let max = window.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        files.push((
            SUMMARY_FILE.into(),
            format!("Avg: {avg:.4}\nMedian: {median:.4}\nMin: {min:.4}\nMax: {max:.4}\n"),
        ));
        metrics.insert("step_time_avg_s".into(), avg.into());
        metrics.insert("step_time_median_s".into(), median.into());
    }
    metrics.insert("steps".into(), log.timings.len().into());
    let table = kit::Table {
        header: vec!["step", "train_step_timing_s"],
        rows: log
            .timings
            .iter()
            .enumerate()
            .map(|(i, t)| vec![(i + 1).to_string(), py_float(*t)])
            .collect(),
    };
    files.push((CSV_FILE.into(), table.csv()));
    let pts: Vec<(u64, f64)> = log
        .timings
        .iter()
        .enumerate()
        .map(|(i, t)| (i as u64 + 1, *t))
        .collect();
    let spec = kit::step_time_chart(&pts, "step");
    let median = median_s.map_or("-".into(), |m| format!("{m:.3} s"));
    let page = TablePage {
        title,
        verdict: &v.status_line(),
        passed: v.passed,
        cards: vec![
            ("median step time".into(), median),
            ("steps".into(), log.timings.len().to_string()),
            (
                "ranks".into(),
                log.world.map_or("?".into(), |w| w.to_string()),
            ),
        ],
        charts: serde_json::json!({ "steps": spec }),
        show: vec!["steps"],
        sections: vec![table.section("Step times")],
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
            numbers(" [11.85, 6.98, 5.36]"),
            Some(vec![11.85, 6.98, 5.36])
        );
        assert_eq!(numbers("[1.0, nan-ish]"), None);
        assert_eq!(numbers("[]"), Some(vec![]));
        assert_eq!(
            member_world("Initializing distributed: GLOBAL_RANK: 5, MEMBER: 6/16"),
            Some(16)
        );
        assert_eq!(
            max_steps_reached("`Trainer.fit` stopped: `max_steps=20` reached."),
            Some(20)
        );
        assert_eq!(max_steps_reached("max_steps=20"), None);
        let log = Log {
            timings: (0..150).map(f64::from).collect(),
            ..Log::default()
        };
        assert_eq!(log.window().len(), 20);
        assert_eq!(log.median_step_time(), Some(139.5));
    }
}
