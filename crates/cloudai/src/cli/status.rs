//! `cloudai status RESULTS_DIR [--json]`: every iteration of a tree from its journal records, with one query to
//! each scheduler for the jobs still unfinished (`systems::live`: one query per scheduler). Works while another
//! process owns the tree.

use crate::exit_codes::Failure;
use std::io::Write;
use std::path::{Path, PathBuf};

use chrono::Local;
use clap::Args;
use serde::Serialize;

use std::collections::HashMap;

use crate::log;
use crate::results::state;
use crate::results::IterationRecord;
use crate::systems::live::Live;

#[derive(Args, Debug)]
pub(crate) struct StatusArgs {
    /// The results tree (`<output>/<scenario>_<timestamp>`)
    result_dir: PathBuf,
    /// Print JSON (for scripts) instead of a table
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize)]
struct Row {
    test_id: String,
    iteration: u64,
    /// PASSED/FAILED/… once ended; `submitting`, `queued`, `running` or `gone` while unfinished.
    state: String,
    job_id: Option<String>,
    nodes: Vec<String>,
    elapsed_s: Option<i64>,
    reason: String,
}

#[derive(Debug, Serialize)]
struct Report {
    results_root: String,
    owner: Option<state::Owner>,
    owner_alive: bool,
    iterations: Vec<Row>,
}

/// Every iteration the tree's scenario plans (from its copy in `.cloudai/`): (test id, iteration); none when the
/// tree has no copy (not written by `run`) or it cannot be read.
fn planned(root: &Path) -> Vec<(String, u64)> {
    let Ok(info) = state::read_info(root) else {
        return Vec::new();
    };
    let Ok(file) = crate::config::scenario::load(&state::state_dir(root).join(&info.scenario))
    else {
        return Vec::new();
    };
    file.tests
        .iter()
        .flat_map(|t| (0..t.iterations.max(1)).map(move |i| (t.id.clone(), i)))
        .collect()
}

/// Every iteration directory's record, in test and iteration order.
fn records(root: &Path) -> Vec<IterationRecord> {
    let mut out = Vec::new();
    let mut tests: Vec<PathBuf> = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.is_dir()
                && !p
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect();
    tests.sort();
    for t in tests {
        let mut its: Vec<(u64, PathBuf)> = std::fs::read_dir(&t)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path())))
            .collect();
        its.sort();
        out.extend(
            its.iter()
                .filter_map(|(_, d)| IterationRecord::read(d).ok()),
        );
    }
    out
}

/// The tree's recorded system, secret restored (for schedulers asked through their API).
fn recorded_system(root: &Path) -> Result<crate::config::system::SystemConfig, String> {
    let info = state::read_info(root).map_err(|e| e.to_string())?;
    let sys = info.system.as_ref().ok_or("no system recorded")?;
    let mut cfg = crate::config::system::load(&state::state_dir(root).join(sys))
        .map_err(|_| "the recorded system file does not load".to_string())?;
    state::restore_secret(&mut cfg, &info)?;
    Ok(cfg)
}

/// What each scheduler says now of the tree's unfinished jobs: one query per scheduler.
fn live(
    root: &Path,
    recs: &[IterationRecord],
) -> HashMap<String, Result<HashMap<String, Live>, String>> {
    let mut by_scheduler: HashMap<&str, Vec<&str>> = HashMap::new();
    for r in recs.iter().filter(|r| r.is_unfinished()) {
        by_scheduler
            .entry(r.scheduler.as_str())
            .or_default()
            .extend(r.job_id.as_deref());
    }
    if by_scheduler.is_empty() {
        return HashMap::new();
    }
    let rt = crate::runner::runtime();
    by_scheduler
        .into_iter()
        .map(|(sched, ids)| {
            let seen = rt.as_ref().map_err(Clone::clone).and_then(|rt| {
                rt.block_on(crate::systems::live::observe(sched, &ids, || {
                    recorded_system(root)
                }))
            });
            (sched.to_string(), seen)
        })
        .collect()
}

pub fn status(args: &StatusArgs) -> Result<(), Failure> {
    let root = &args.result_dir;
    if !root.is_dir() {
        return Err(Failure::Error(format!(
            "{}: not a directory",
            root.display()
        )));
    }
    let recs = records(root);
    if recs.is_empty() && crate::report::scenario::iteration_dirs(root).is_empty() {
        return Err(Failure::Error(format!(
            "{}: not a results tree (no iteration directories with a test-run.toml or cloudai-run.json; give the \
             directory `cloudai run` created, such as results/<scenario>_<timestamp>)",
            root.display()
        )));
    }
    let live = live(root, &recs);
    let now = Local::now();
    let mut rows: Vec<Row> = recs
        .iter()
        .map(|r| {
            let end = crate::results::record::local_time(&r.ended_at).unwrap_or(now);
            let from = crate::results::record::local_time(&r.started_at)
                .or(crate::results::record::local_time(&r.submitted_at));
            let mut row = Row {
                test_id: r.test_id.clone(),
                iteration: r.iteration,
                state: r.status.as_str().to_string(),
                job_id: r.job_id.clone(),
                nodes: r.nodes.clone(),
                elapsed_s: from.map(|f| (end - f).num_seconds()),
                reason: r
                    .queue_states
                    .last()
                    .map(|q| q.reason.clone())
                    .unwrap_or_default(),
            };
            if r.is_unfinished() {
                row.state = match (&r.job_id, &r.started_at) {
                    (None, _) => "submitting".into(),
                    (Some(_), None) => "queued".into(),
                    (Some(_), Some(_)) => "running".into(),
                };
                let id = r.job_id.as_deref().unwrap_or("");
                match live.get(&r.scheduler) {
                    Some(Ok(seen)) => match seen.get(id) {
                        Some(Live::Seen {
                            state,
                            reason,
                            nodes,
                        }) => {
                            row.state = state.clone();
                            if !reason.is_empty() {
                                row.reason = reason.clone();
                            }
                            if !nodes.is_empty() {
                                row.nodes = nodes.clone();
                            }
                        }
                        Some(Live::Gone(what)) => row.state = what.to_string(),
                        None => {}
                    },
                    Some(Err(e)) => row.reason = format!("{} not asked: {e}", r.scheduler),
                    None => {}
                }
            }
            row
        })
        .collect();
    // iterations the scenario has that never started (no record yet): listed too
    let seen: std::collections::HashSet<(String, u64)> = rows
        .iter()
        .map(|r| (r.test_id.clone(), r.iteration))
        .collect();
    for (test_id, iteration) in planned(root) {
        if !seen.contains(&(test_id.clone(), iteration)) {
            rows.push(Row {
                test_id,
                iteration,
                state: "not started".into(),
                job_id: None,
                nodes: Vec::new(),
                elapsed_s: None,
                reason: String::new(),
            });
        }
    }
    rows.sort_by(|a, b| (&a.test_id, a.iteration).cmp(&(&b.test_id, b.iteration)));
    let owner = state::owner(root);
    let owner_alive = owner.as_ref().is_some_and(state::Owner::alive);
    if args.json {
        let rep = Report {
            results_root: root.display().to_string(),
            owner,
            owner_alive,
            iterations: rows,
        };
        // a reader that stops early (`| head`) ends the output quietly
        let _ = writeln!(
            std::io::stdout(),
            "{}",
            serde_json::to_string_pretty(&rep).unwrap_or_default()
        );
        return Ok(());
    }
    match (&owner, owner_alive) {
        (Some(o), true) => log::print(&format!(
            "{}: owned by cloudai pid {} on {} since {}",
            root.display(),
            o.pid,
            o.host,
            o.since
        )),
        _ => log::print(&format!("{}: no cloudai process owns it", root.display())),
    }
    // columns aligned like squeue's (the reason, last, is not padded)
    let cells: Vec<[String; 7]> = rows
        .iter()
        .map(|r| {
            [
                r.test_id.clone(),
                r.iteration.to_string(),
                r.state.clone(),
                r.job_id.clone().unwrap_or_else(|| "-".into()),
                if r.nodes.is_empty() {
                    "-".into()
                } else {
                    r.nodes.join(",")
                },
                r.elapsed_s
                    .map_or("-".into(), crate::config::time_limit::format_signed),
                if r.reason.is_empty() {
                    "-".into()
                } else {
                    r.reason.clone()
                },
            ]
        })
        .collect();
    let head = ["TEST", "ITER", "STATE", "JOB", "NODES", "ELAPSED", "REASON"].map(String::from);
    let mut width = [0usize; 6];
    for row in std::iter::once(&head).chain(&cells) {
        for (w, c) in width.iter_mut().zip(row.iter()) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut t = String::new();
    for row in std::iter::once(&head).chain(&cells) {
        let mut line = String::new();
        for (i, c) in row.iter().enumerate() {
            match width.get(i) {
                Some(w) => line.push_str(&format!("{c:<w$}  ")),
                None => line.push_str(c),
            }
        }
        t.push_str(line.trim_end());
        t.push('\n');
    }
    log::print(t.trim_end());
    Ok(())
}
