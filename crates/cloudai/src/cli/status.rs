//! `cloudai status RESULTS_DIR [--json]`: every iteration of a tree from its journal records, with one query to
//! the scheduler for the jobs still unfinished (Slurm: one squeue; Standalone: whether the process group lives;
//! Run:ai: one workload list with the recorded system). Works while another process owns the tree.

use std::path::{Path, PathBuf};

use chrono::Local;
use clap::Args;
use serde::Serialize;

use crate::results::state;
use crate::results::IterationRecord;
use crate::{error, log};

#[derive(Args, Debug)]
pub struct StatusArgs {
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

/// Live Slurm states of the unfinished jobs, with one squeue: id → (state, reason, nodes).
fn squeue(ids: &[&str]) -> std::collections::HashMap<String, (String, String, String)> {
    let mut out = std::collections::HashMap::new();
    if ids.is_empty() {
        return out;
    }
    let o = std::process::Command::new("squeue")
        .args([
            "-h",
            "-o",
            "%i|%T|%r|%N",
            &format!("--jobs={}", ids.join(",")),
        ])
        .output();
    if let Ok(o) = o {
        for l in String::from_utf8_lossy(&o.stdout).lines() {
            let f: Vec<&str> = l.split('|').collect();
            if f.len() == 4 {
                out.insert(
                    f[0].to_string(),
                    (f[1].to_string(), f[2].to_string(), f[3].to_string()),
                );
            }
        }
    }
    out
}

/// The phases of the tree's Run:ai workloads or Kubernetes objects (list requests, not one per job), when some
/// are unfinished.
fn remote_phases(
    root: &Path,
    recs: &[IterationRecord],
    scheduler: &str,
) -> Result<std::collections::HashMap<String, (String, String)>, String> {
    if !recs
        .iter()
        .any(|r| r.is_unfinished() && r.scheduler == scheduler)
    {
        return Ok(Default::default());
    }
    let info = state::read_info(root).map_err(|e| e.to_string())?;
    let sys = info.system.as_ref().ok_or("no system recorded")?;
    let mut cfg = crate::config::system::load(&state::state_dir(root).join(sys))
        .map_err(|_| "the recorded system file does not load".to_string())?;
    state::restore_secret(&mut cfg, &info)?;
    let rt = crate::runner::runtime()?;
    if scheduler == "kubernetes" {
        rt.block_on(crate::systems::kubernetes::phases(&cfg))
    } else {
        rt.block_on(crate::systems::runai::phases(&cfg))
    }
}

fn group_alive(pid: &str) -> bool {
    // SAFETY: signal 0 only checks that the process group exists
    pid.parse::<i32>()
        .is_ok_and(|p| unsafe { libc::killpg(p, 0) == 0 })
}

pub fn status(args: &StatusArgs) -> i32 {
    let root = &args.result_dir;
    if !root.is_dir() {
        error!("{}: not a directory", root.display());
        return 1;
    }
    let recs = records(root);
    let unfinished: Vec<&str> = recs
        .iter()
        .filter(|r| r.is_unfinished() && r.scheduler == "slurm")
        .filter_map(|r| r.job_id.as_deref())
        .collect();
    let live = squeue(&unfinished);
    let runai = remote_phases(root, &recs, "runai");
    let k8s = remote_phases(root, &recs, "kubernetes");
    let now = Local::now();
    let rows: Vec<Row> = recs
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
                match r.scheduler.as_str() {
                    "slurm" => match live.get(id) {
                        Some((st, reason, nodes)) => {
                            row.state = st.to_lowercase();
                            row.reason = reason.clone();
                            if !nodes.is_empty() {
                                row.nodes =
                                    crate::util::nodelist::expand(nodes).unwrap_or_default();
                            }
                        }
                        None if !id.is_empty() => row.state = "ended (not collected)".into(),
                        None => {}
                    },
                    "standalone" if !id.is_empty() && !group_alive(id) => {
                        row.state = "ended (not collected)".into()
                    }
                    sched @ ("runai" | "kubernetes") => {
                        match if sched == "runai" { &runai } else { &k8s } {
                            Ok(p) => match p.get(id) {
                                Some((phase, reason)) => {
                                    row.state = phase.to_lowercase();
                                    if !reason.is_empty() {
                                        row.reason = reason.clone();
                                    }
                                }
                                None if !id.is_empty() => {
                                    row.state =
                                        "not found (a hook may run, or it was deleted)".into()
                                }
                                None => {}
                            },
                            Err(e) => row.reason = format!("{sched} not asked: {e}"),
                        }
                    }
                    _ => {}
                }
            }
            row
        })
        .collect();
    let owner = state::owner(root);
    let owner_alive = owner.as_ref().is_some_and(state::Owner::alive);
    if args.json {
        let rep = Report {
            results_root: root.display().to_string(),
            owner,
            owner_alive,
            iterations: rows,
        };
        println!("{}", serde_json::to_string_pretty(&rep).unwrap_or_default());
        return 0;
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
    0
}
