//! `elastic.py`'s node logs: each rank's `[rank R] Dispatch + combine bandwidth: B GB/s, avg_t=… us, min_t=… us,
//! max_t=… us` line per phase it runs (or its profiled `Dispatch bandwidth: … | Combine bandwidth: …` line), and
//! `… -> end phase P` as each phase ends. Graded on the plan: no failure of the launcher, Slurm or the workers, a
//! log from every node a worker was started on, every phase ended, a bandwidth above 0 from every rank the plan
//! starts (CloudAI: a bandwidth line in each node's log).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::ep_plan::{launched_nodes, parse_plan, PLAN};
use crate::config::test::TestDefinition;
use crate::results::checks::{Check, CheckKind};
use crate::workloads::{kit, IterationReport, Verdict};

/// One bandwidth line of a rank.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    pub rank: u64,
    /// Dispatch + combine, GB/s, with its times (µs).
    pub both_gbps: Option<f64>,
    pub avg_us: Option<f64>,
    pub min_us: Option<f64>,
    pub max_us: Option<f64>,
    /// The profiled line's separate bandwidths, GB/s.
    pub dispatch_gbps: Option<f64>,
    pub combine_gbps: Option<f64>,
}

/// What one node's log shows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeLog {
    pub samples: Vec<Sample>,
    pub ended_phases: BTreeSet<u64>,
}

/// The number at the start of `s` (sign, digits, fraction, exponent), and what follows it.
fn number(s: &str) -> Option<(f64, &str)> {
    let end = s
        .char_indices()
        .find(|&(i, c)| {
            !(c.is_ascii_digit()
                || c == '.'
                || ((c == '-' || c == '+') && (i == 0 || s[..i].ends_with(['e', 'E'])))
                || ((c == 'e' || c == 'E') && i > 0))
        })
        .map_or(s.len(), |(i, _)| i);
    Some((s[..end].parse().ok()?, &s[end..]))
}

/// `label` then a number then `unit`, at the start of `s`; the number and the rest.
fn field<'a>(s: &'a str, label: &str, unit: &str) -> Option<(f64, &'a str)> {
    let (v, rest) = number(s.strip_prefix(label)?)?;
    Some((v, rest.strip_prefix(unit)?))
}

/// A bandwidth line (either form), wherever it starts in the line.
pub fn sample(line: &str) -> Option<Sample> {
    let at = line.find("[rank ")?;
    let (rank, rest) = number(&line[at + 6..])?;
    let rest = rest.strip_prefix("] ")?;
    let rank = rank as u64;
    if let Some(rest) = rest.strip_prefix("Dispatch + combine bandwidth: ") {
        let (bw, r) = number(rest)?;
        let r = r.strip_prefix(" GB/s, ")?;
        let (avg, r) = field(r, "avg_t=", " us, ")?;
        let (min, r) = field(r, "min_t=", " us, ")?;
        let (max, _) = field(r, "max_t=", " us")?;
        return Some(Sample {
            rank,
            both_gbps: Some(bw),
            avg_us: Some(avg),
            min_us: Some(min),
            max_us: Some(max),
            ..Default::default()
        });
    }
    let (dispatch, r) = field(rest, "Dispatch bandwidth: ", " GB/s")?;
    let r = match r.strip_prefix(", avg_t=") {
        Some(t) => number(t)?.1.strip_prefix(" us")?,
        None => r,
    };
    let (combine, _) = field(r.strip_prefix(" | ")?, "Combine bandwidth: ", " GB/s")?;
    Some(Sample {
        rank,
        dispatch_gbps: Some(dispatch),
        combine_gbps: Some(combine),
        ..Default::default()
    })
}

pub fn parse(text: &str) -> NodeLog {
    let mut out = NodeLog::default();
    for line in text.lines() {
        if let Some(s) = sample(line) {
            out.samples.push(s);
        } else if let Some(at) = line.find("-> end phase ") {
            if let Some((p, _)) = number(&line[at + 13..]) {
                out.ended_phases.insert(p as u64);
            }
        }
    }
    out
}

/// What in a log means the run failed (CloudAI's list), and what it means.
const FAILURES: &[(&str, &str)] = &[
    (
        "python3: can't open file",
        "the benchmark's script could not be opened",
    ),
    (
        "Traceback (most recent call last):",
        "the benchmark raised a Python exception",
    ),
    (
        "Timed out waiting for NIXL EP master services",
        "the first node's rank store never answered",
    ),
    (
        "no plan phases were found for rank",
        "a worker was started for a rank the plan never has",
    ),
    (
        "recvValueWithTimeout failed",
        "a worker lost its rank store before the benchmark ended",
    ),
    (
        "timed out after 300000ms",
        "a worker timed out waiting on the rank store",
    ),
    (
        "Failed to prepare remote memory view",
        "NIXL EP could not set up its UCX remote memory view",
    ),
    ("srun: error:", "Slurm reported a failed step"),
    (
        "Exited with exit code",
        "a Slurm step exited with a non-zero status",
    ),
];

/// Whether a log's `srun:` lines are exactly those of a step stopped on purpose (a planned rank removal): each of
/// the three shapes present, nothing else.
fn planned_termination(text: &str) -> bool {
    let srun: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("srun:"))
        .collect();
    let shapes: [&dyn Fn(&str) -> bool; 3] = [
        &|l| l.starts_with("srun: error: ") && l.contains(": task ") && l.ends_with(": Terminated"),
        &|l| l.starts_with("srun: Terminating StepId="),
        &|l| l.starts_with("srun: Force Terminated StepId="),
    ];
    !srun.is_empty()
        && srun.iter().all(|l| shapes.iter().any(|s| s(l)))
        && shapes.iter().all(|s| srun.iter().any(|l| s(l)))
}

/// The first failure a log shows, as a sentence naming the file.
fn failure(path: &Path, removal: bool) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let text = if removal && planned_termination(&text) {
        text.lines()
            .filter(|l| !l.trim().starts_with("srun:"))
            .collect::<Vec<_>>()
            .join("\n")
    } else {
        text
    };
    const EARLY_EXIT: &str = "Primary NIXL EP launch exited before phase ";
    if let Some(at) = text.find(EARLY_EXIT) {
        let phase = number(&text[at + EARLY_EXIT.len()..]).map_or(0, |(p, _)| p as u64);
        return Some(format!(
            "the first node's workers exited before phase {phase} ended, so later phases never started ({})",
            path.display()
        ));
    }
    FAILURES
        .iter()
        .find(|(p, _)| text.contains(p))
        .map(|(p, what)| format!("{what}: \"{p}\" in {}", path.display()))
}

fn log_path(dir: &Path, node: usize) -> PathBuf {
    dir.join(format!("nixl-ep-node-{node}.log"))
}

/// The plan the job ran: its file in the iteration, else the test's.
fn plan(test: &TestDefinition, dir: &Path) -> Vec<Vec<i64>> {
    std::fs::read_to_string(dir.join(PLAN))
        .ok()
        .or_else(|| test.cmd_args.str("plan").map(str::to_string))
        .and_then(|p| parse_plan(&p).ok())
        .unwrap_or_default()
}

/// Every node log the job wrote, by node.
fn logs(test: &TestDefinition, dir: &Path) -> Vec<(usize, Option<NodeLog>)> {
    launched_nodes(test, kit::iteration_nodes(dir))
        .into_iter()
        .map(|n| {
            let log = std::fs::read_to_string(log_path(dir, n))
                .ok()
                .map(|t| parse(&t));
            (n, log)
        })
        .collect()
}

fn fail(kind: CheckKind, why: String) -> Verdict {
    let mut v = Verdict::fail(why.clone());
    v.checks.push(Check::fail(kind, why));
    v
}

pub(crate) fn verdict(test: &TestDefinition, dir: &Path) -> Verdict {
    let plan = plan(test, dir);
    let removal = plan.iter().flatten().any(|r| *r < 0);
    let logs = logs(test, dir);
    let paths = logs
        .iter()
        .map(|(n, _)| log_path(dir, *n))
        .chain(["stdout.txt", "stderr.txt"].map(|f| dir.join(f)));
    if let Some(why) = paths.into_iter().find_map(|p| failure(&p, removal)) {
        return fail(CheckKind::Output, why);
    }
    let missing: Vec<String> = logs
        .iter()
        .filter(|(_, l)| l.is_none())
        .map(|(n, _)| format!("nixl-ep-node-{n}.log"))
        .collect();
    if !missing.is_empty() {
        return fail(
            CheckKind::Output,
            format!(
                "no log from the nodes workers were started on: {}",
                missing.join(", ")
            ),
        );
    }
    let read: Vec<&NodeLog> = logs.iter().filter_map(|(_, l)| l.as_ref()).collect();
    if let Some((n, _)) = logs
        .iter()
        .find(|(_, l)| l.as_ref().is_some_and(|l| l.samples.is_empty()))
    {
        return fail(
            CheckKind::Table,
            format!("nixl-ep-node-{n}.log has no bandwidth line (`[rank N] Dispatch + combine bandwidth: …`)"),
        );
    }
    let ended: BTreeSet<u64> = read
        .iter()
        .flat_map(|l| l.ended_phases.iter().copied())
        .collect();
    let open: Vec<String> = (0..plan.len() as u64)
        .filter(|p| !ended.contains(p))
        .map(|p| p.to_string())
        .collect();
    if !open.is_empty() {
        return fail(
            CheckKind::Table,
            format!(
                "phase(s) {} of {} never ended (`-> end phase P`)",
                open.join(", "),
                plan.len()
            ),
        );
    }
    let samples: Vec<&Sample> = read.iter().flat_map(|l| l.samples.iter()).collect();
    let planned: BTreeSet<u64> = plan
        .iter()
        .flatten()
        .filter(|r| **r >= 0)
        .map(|r| *r as u64)
        .collect();
    let measured: BTreeSet<u64> = samples.iter().map(|s| s.rank).collect();
    let silent: Vec<String> = planned.difference(&measured).map(u64::to_string).collect();
    if !silent.is_empty() {
        return fail(
            CheckKind::Shape,
            format!("rank(s) {} of the plan measured nothing", silent.join(", ")),
        );
    }
    let bandwidths = |s: &Sample| [s.both_gbps, s.dispatch_gbps, s.combine_gbps];
    if let Some(s) = samples
        .iter()
        .find(|s| bandwidths(s).iter().flatten().any(|b| *b <= 0.0))
    {
        return fail(
            CheckKind::Table,
            format!("rank {} measured a bandwidth of 0 GB/s", s.rank),
        );
    }
    let mean = mean_of(&samples);
    Verdict::pass_with(format!(
        "{} phases of {} ranks ended; {} bandwidth lines{}",
        plan.len(),
        planned.len(),
        samples.len(),
        mean.map_or(String::new(), |m| format!(
            "; dispatch + combine {m:.2} GB/s on average"
        ))
    ))
}

fn mean_of(samples: &[&Sample]) -> Option<f64> {
    let v: Vec<f64> = samples.iter().filter_map(|s| s.both_gbps).collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// The mean dispatch + combine bandwidth of every sample (GB/s).
pub(crate) fn mean_bandwidth(test: &TestDefinition, dir: &Path) -> Option<f64> {
    let logs = logs(test, dir);
    let samples: Vec<&Sample> = logs
        .iter()
        .filter_map(|(_, l)| l.as_ref())
        .flat_map(|l| l.samples.iter())
        .collect();
    mean_of(&samples)
}

pub(crate) fn report(test: &TestDefinition, dir: &Path, title: &str) -> Option<IterationReport> {
    let logs = logs(test, dir);
    if logs.iter().all(|(_, l)| l.is_none()) && !dir.join("stdout.txt").exists() {
        return None;
    }
    let v = verdict(test, dir);
    let table = kit::Table {
        header: vec![
            "node",
            "rank",
            "dispatch_combine_gbps",
            "avg_us",
            "min_us",
            "max_us",
            "dispatch_gbps",
            "combine_gbps",
        ],
        rows: logs
            .iter()
            .filter_map(|(n, l)| Some((n, l.as_ref()?)))
            .flat_map(|(n, l)| {
                l.samples.iter().map(move |s| {
                    let mut row = vec![n.to_string(), s.rank.to_string()];
                    row.extend(
                        [
                            s.both_gbps,
                            s.avg_us,
                            s.min_us,
                            s.max_us,
                            s.dispatch_gbps,
                            s.combine_gbps,
                        ]
                        .map(kit::csv_num),
                    );
                    row
                })
            })
            .collect(),
    };
    let page = kit::TablePage {
        title,
        verdict: &v.status_line(),
        passed: v.passed,
        cards: vec![("samples".into(), table.rows.len().to_string())],
        charts: serde_json::json!({}),
        show: Vec::new(),
        sections: vec![table.section("elastic.py bandwidth")],
    }
    .render();
    Some(IterationReport {
        files: vec![
            ("nixl_ep.csv".into(), table.csv()),
            ("nixl_ep.html".into(), page),
        ],
        verdict: Some(v),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_line_forms_and_phase_ends_are_read() {
        let log = parse(
            "global_rank=0, local_rank=0 -> end phase 0\n\
             [rank 3] Dispatch + combine bandwidth: 41.27 GB/s, avg_t=512.30 us, min_t=498.10 us, max_t=530.02 us\n\
             [rank 1] Dispatch bandwidth: 20.5 GB/s, avg_t=100.00 us | Combine bandwidth: 18.25 GB/s, avg_t=120.00 us\n\
             [rank 2] Dispatch bandwidth: 2e1 GB/s | Combine bandwidth: 1.5E1 GB/s\n\
             global_rank=0, local_rank=0 -> end phase 1\n",
        );
        assert_eq!(log.ended_phases, BTreeSet::from([0, 1]));
        assert_eq!(log.samples.len(), 3);
        assert_eq!(
            (
                log.samples[0].rank,
                log.samples[0].both_gbps,
                log.samples[0].max_us
            ),
            (3, Some(41.27), Some(530.02))
        );
        assert_eq!(
            (log.samples[1].dispatch_gbps, log.samples[1].combine_gbps),
            (Some(20.5), Some(18.25))
        );
        assert_eq!(log.samples[2].combine_gbps, Some(15.0));
        assert!(
            sample("[rank 1] Dispatch + combine bandwidth: 41.27 GB/s").is_none(),
            "a cut line is no sample"
        );
    }

    #[test]
    fn only_the_three_shapes_of_a_planned_stop_are_forgiven() {
        let planned = "srun: error: node002: task 0: Terminated\nsrun: Terminating StepId=12.3\nsrun: Force Terminated StepId=12.3\n";
        assert!(planned_termination(planned));
        assert!(!planned_termination(
            "srun: error: node002: task 0: Terminated\n"
        ));
        assert!(!planned_termination(&format!(
            "{planned}srun: error: node002: task 0: Exited with exit code 1\n"
        )));
    }
}
