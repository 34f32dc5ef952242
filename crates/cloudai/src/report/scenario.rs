//! The scenario page `<scenario>.html` and `summary.json` in the results root: every test iteration with its
//! status, reason and key numbers, links to its reports, and busbw comparisons (across iterations, and against
//! other results trees given with `--compare`) that flag drops beyond a tolerance.

use std::path::{Path, PathBuf};

pub use super::sanity::Peaks;
pub use super::summary::{BaselineInfo, Entry, Flag, Summary};
use crate::config::node;
use crate::config::test as tdef;
use crate::html::{chart, chart_spec, esc, page_to, series};
use crate::results::{EndReason, IterationRecord, Status};
use crate::workloads;
mod compare;
use compare::*;
mod tree;
pub(crate) use tree::*;
mod summary_file;
pub(crate) use summary_file::*;

#[derive(Clone, Debug)]
pub struct Options {
    /// Other results trees to compare against (known-good baselines).
    pub compare: Vec<PathBuf>,
    /// Allowed busbw drop per size, as a fraction (0.05 = 5%).
    pub tolerance: f64,
    /// Grade again from the output (generate-report); a run has just graded.
    pub regrade: bool,
    /// Write summary.json (at the root, beside the page: iteration directories hold exactly CloudAI's files).
    pub summary: bool,
    /// The tree is a dry-run's: iterations without a record or output are DRY-RUN, not SKIPPED.
    pub dry_run: bool,
    /// Grade against a baseline (`--baseline`).
    pub baseline: Option<crate::baseline::Grading>,
    /// The system's link peaks per GPU (GB/s): NVLink for 1-node runs, the network for multi-node ones.
    pub peaks: Peaks,
    /// Write each iteration's own reports (CloudAI's `per_test` report; `[reports.per_test] enable = false`
    /// turns it off).
    pub per_test: bool,
    /// The system's declared fabric (`generate-report --system-config`): re-grading checks against it rather than
    /// what the run recorded.
    pub fabric: Option<workloads::judge::Fabric>,
}

/// Builds the entry of one iteration: writes its report files, and re-grades when asked.
fn entry(
    root: &Path,
    dir: &Path,
    known: Option<IterationRecord>,
    opts: &Options,
    write: bool,
) -> Option<Entry> {
    // the tree may have been copied or unpacked elsewhere: its iterations are where they are now, not where the
    // run wrote them
    let here = std::path::absolute(dir)
        .unwrap_or_else(|_| dir.to_path_buf())
        .display()
        .to_string();
    let Stored {
        id,
        iteration,
        iterations,
        def,
        nodes: stored_nodes,
    } = match stored_test(dir) {
        Ok(s) => s,
        Err(why) => {
            // an iteration whose files could not be written (a full disk when it was submitted): its record alone
            let Some(mut record) = known.or_else(|| IterationRecord::read(dir).ok()) else {
                if dir.join("test-run.toml").is_file() {
                    crate::warn!(
                        "{} is left out of the report: its test-run.toml cannot be read: {why}",
                        dir.display()
                    );
                }
                return None;
            };
            record.output_path = here;
            return Some(Entry {
                record,
                ..Default::default()
            });
        }
    };
    let workload = workloads::find(&def.test_template_name)?;
    let title = format!("{id} — iteration {iteration}");
    let mut report = workload.report(&def, dir, &title);
    let mut record = known
        .or_else(|| IterationRecord::read(dir).ok())
        .unwrap_or_else(|| {
            // a tree another tool wrote (CloudAI's): what its slurm-job.toml says, graded from the output if any
            let mut r = IterationRecord {
                test_id: id.clone(),
                test_name: def.name.clone(),
                template: def.test_template_name.clone(),
                iteration,
                iterations,
                output_path: dir.display().to_string(),
                ..Default::default()
            };
            crate::systems::foreign_job(dir, &mut r);
            if dir.join("stdout.txt").is_file() {
                r.end_reason = EndReason::Exited;
            } else if !opts.dry_run {
                // (our own dry-run trees hold no record either: they stay dry-run below)
                r.end_reason = EndReason::Unknown;
                r.message = "no stdout.txt in this directory: the job did not run, or its output was not kept"
                    .into();
            }
            r
        });
    let moved = record.output_path != here;
    record.output_path = here;
    // a dry-run writes no record into iteration directories (they hold exactly CloudAI's files); its summary
    // says it was a dry-run, and an iteration that has no output since is still one
    if opts.dry_run
        && record.end_reason == EndReason::NotStarted
        && !dir.join("stdout.txt").exists()
    {
        record.status = Status::DryRun;
        record.end_reason = EndReason::DryRun;
        record.message = "dry-run: files written, nothing ran".into();
        report = None;
    }
    // the record on disk is rewritten once, when re-grading or the baseline changed it, or the tree moved
    let mut changed = moved && write;
    let gradable = matches!(
        record.end_reason,
        EndReason::Exited | EndReason::DryRun | EndReason::NotStarted
    );
    if opts.regrade && gradable {
        if let Some(v) = report.as_ref().and_then(|r| r.verdict.clone()) {
            let outcome = workloads::JobOutcome {
                exit_code: record.exit_code,
                ..Default::default()
            };
            // what was launched, as the run recorded it; a tree without our record says its node count only
            let mut asked = record.launched.clone().or_else(|| {
                stored_nodes.map(|nodes| workloads::judge::Asked {
                    nodes,
                    ..Default::default()
                })
            });
            if let (Some(a), Some(f)) = (asked.as_mut(), &opts.fabric) {
                a.fabric = f.clone();
            }
            let v = workloads::judge::judge(v.with_stderr(dir, &outcome), asked.as_ref());
            record.status = if v.passed {
                Status::Passed
            } else {
                Status::Failed
            };
            record.message = v.message;
            record.checks = v.checks;
            record.baseline_noted = false;
            changed = true;
        }
    }
    let points = report
        .as_mut()
        .map(|r| std::mem::take(&mut r.points))
        .unwrap_or_default();
    let check = opts
        .baseline
        .as_ref()
        .filter(|_| !points.is_empty())
        .map(|g| {
            // the hosts the output names, else the allocation (a ledger baseline is each node set's own)
            let hosts: Vec<String> = report
                .as_ref()
                .and_then(|r| r.metrics.get("hosts"))
                .and_then(|h| h.as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(str::to_string))
                        .collect()
                })
                .filter(|v: &Vec<String>| !v.is_empty())
                .unwrap_or_else(|| record.nodes.clone());
            g.for_nodes(&hosts)
                .check(&record.template, &points, g.tolerance, g.min_size)
        });
    if let Some(c) = &check {
        // the baseline grades the numbers: the hardware expectation steps aside
        if record
            .checks
            .iter()
            .any(|k| k.check == workloads::judge::CheckKind::Expectation)
        {
            let was_failed = record.status == Status::Failed;
            let rest = workloads::judge::without_expectation(&mut record.checks);
            if was_failed && rest.is_none() && gradable {
                record.status = Status::Passed;
                record.message.clear();
            }
            changed = true;
        }
        record.checks.push(workloads::judge::Check::new(
            workloads::judge::CheckKind::Baseline,
            if c.failed {
                workloads::judge::CheckStatus::Fail
            } else {
                workloads::judge::CheckStatus::Pass
            },
            if c.failed {
                c.message.clone()
            } else {
                "every size within the baseline's tolerance".to_string()
            },
        ));
        if c.failed && record.status == Status::Passed {
            record.status = Status::Failed;
            record.message = c.message.clone();
            record.baseline_noted = false;
            changed = true;
        }
        if !c.not_in_baseline.is_empty() && !record.baseline_noted {
            let note = format!("not in baseline: {}", c.not_in_baseline.join("; "));
            record.message = if record.message.is_empty() {
                note
            } else {
                format!("{}; {note}", record.message)
            };
            record.baseline_noted = true;
            changed = true;
        }
    }
    // the page highlights the sizes that fell below the baseline
    if let (Some(c), Some(r)) = (&check, report.as_mut()) {
        let marks: Vec<(u64, String)> = c
            .rows
            .iter()
            .filter(|row| row.status == "drop")
            .map(|row| {
                (
                    row.size,
                    format!(
                        "below baseline ({} {})",
                        crate::html::pct(-row.drop_pct),
                        row.side
                    ),
                )
            })
            .collect();
        if !marks.is_empty() {
            if let Some(again) = workload.report_marked(&def, dir, &title, &marks) {
                r.files = again.files;
                r.streamed = again.streamed;
            }
        }
    }
    if changed && write && dir.join(crate::results::record::RECORD_FILE).exists() {
        let _ = record.write_if_changed(dir);
    }
    let mut reports = Vec::new();
    let (mut metrics, mut curve) = (serde_json::Map::new(), workloads::Curve::default());
    if let Some(r) = report {
        // the iteration's own reports: built in memory, or streamed (an output too long to hold)
        type Fill<'a> = Box<dyn Fn(&mut dyn std::io::Write) -> std::io::Result<()> + 'a>;
        let texts = r.files.iter().map(|(name, content)| {
            let fill: Fill = Box::new(move |w| w.write_all(content.as_bytes()));
            (name.as_str(), fill)
        });
        let streams = r.streamed.iter().map(|f| {
            let fill: Fill = Box::new(|w| (f.write)(w));
            (f.name.as_str(), fill)
        });
        for (name, fill) in texts.chain(streams).filter(|_| opts.per_test) {
            let dest = dir.join(name);
            if write {
                if let Err(e) = crate::util::fsx::write_changed_with(&dest, |w| fill(w)) {
                    crate::warn!("Cannot write {}: {e}", dest.display());
                    continue;
                }
            }
            reports.push(
                dest.strip_prefix(root)
                    .unwrap_or(&dest)
                    .display()
                    .to_string(),
            );
        }
        metrics = r.metrics;
        curve = r.curve;
    }
    let nodes = metrics
        .get("nodes")
        .and_then(|v| v.as_u64())
        .filter(|n| *n > 0)
        .map_or(record.nodes.len(), |n| n as usize);
    let suspect = opts.peaks.suspect(&metrics, nodes);
    Some(Entry {
        record,
        metrics,
        reports,
        curve,
        points,
        baseline: check,
        suspect,
    })
}

/// Entries of a results tree (reading only), for `--compare` and baselines. `regrade` grades iterations that have
/// no run record (a tree written by CloudAI) from their output.
pub(crate) fn read_tree(root: &Path, regrade: bool) -> Vec<Entry> {
    let opts = Options {
        compare: Vec::new(),
        tolerance: 0.0,
        regrade,
        summary: false,
        dry_run: false,
        baseline: None,
        peaks: Peaks::default(),
        per_test: true,
        fabric: None,
    };
    iteration_dirs(root)
        .iter()
        .filter_map(|d| entry(root, d, None, &opts, false))
        .collect()
}

/// Writes the per-iteration reports, `<scenario>.html` and `summary.json`. `records` are the run's own records
/// (a run); without them the tree on disk is read (generate-report).
pub fn generate(
    root: &Path,
    records: Option<&[IterationRecord]>,
    opts: &Options,
) -> std::io::Result<Summary> {
    let name = tree_scenario_name(root);
    let mut entries: Vec<Entry> = match records {
        Some(recs) => recs
            .iter()
            .map(|r| {
                let dir = PathBuf::from(&r.output_path);
                entry(root, &dir, Some(r.clone()), opts, true).unwrap_or_else(|| Entry {
                    record: r.clone(),
                    ..Default::default()
                })
            })
            .collect(),
        None => iteration_dirs(root)
            .iter()
            .filter_map(|d| entry(root, d, None, opts, true))
            .collect(),
    };
    entries.sort_by(|a, b| {
        (a.record.test_id.as_str(), a.record.iteration)
            .cmp(&(b.record.test_id.as_str(), b.record.iteration))
    });
    if let Some(recs) = records {
        // each test where the run first recorded it (one pass, not a search per entry)
        let mut first: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for (i, r) in recs.iter().enumerate() {
            first.entry(r.test_id.as_str()).or_insert(i);
        }
        let order = |id: &str| first.get(id).copied();
        entries.sort_by_key(|e| (order(&e.record.test_id), e.record.iteration));
    }

    let mut ids: Vec<String> = entries.iter().map(|e| e.record.test_id.clone()).collect();
    ids.dedup();
    let mut charts = serde_json::Map::new();
    let Compared {
        flags,
        mut sections,
        notes: compare_notes,
    } = within_and_across(&entries, &ids, opts, &mut charts);
    sections.push_str(&comparison_tables(&entries));
    let mut sizes = Vec::new();
    if let Some(g) = &opts.baseline {
        let (html, rows) = super::baseline::section(&entries, g, &mut charts);
        sections.push_str(&html);
        sizes = rows;
    }
    let mut counts = std::collections::BTreeMap::new();
    for e in &entries {
        *counts
            .entry(e.record.status.as_str().to_string())
            .or_insert(0) += 1;
    }
    let abs_root = std::path::absolute(root).unwrap_or_else(|_| root.to_path_buf());
    let mut summary = Summary {
        scenario: name.clone(),
        mode: if opts.dry_run { "dry-run" } else { "run" },
        results_root: abs_root.display().to_string(),
        generated_at: chrono::Local::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, false),
        tolerance_pct: opts.tolerance * 100.0,
        counts,
        tests: entries,
        compared_with: opts
            .compare
            .iter()
            .map(|p| p.display().to_string())
            .collect(),
        drops: flags,
        compare_notes,
        baseline: opts.baseline.as_ref().map(|g| BaselineInfo {
            file: g.baseline.file.display().to_string(),
            tolerance_pct: g.tolerance * 100.0,
            min_size_bytes: g.min_size,
            sizes,
        }),
    };
    // a tree whose results did not change keeps its summary and page as they are, time stamp included; both are
    // written as they are made, never held whole
    if opts.summary {
        write_summary(&root.join(SUMMARY_FILE), &mut summary, &abs_root)?;
    }
    let data = serde_json::json!({ "charts": charts });
    crate::util::fsx::write_changed_with(&root.join(format!("{name}.html")), |w| {
        page_to(w, &format!("{name} — cloudai results"), &data, |w| {
            super::page::body_to(w, &summary, &sections)
        })
    })?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_drops() {
        assert_eq!(
            scenario_name(Path::new("/x/nccl-test_2026-12-02_13-07-15")),
            "nccl-test"
        );
        assert_eq!(scenario_name(Path::new("/x/plain")), "plain");
        assert_eq!(
            scenario_name(Path::new("/x/nccl-test_2026-12-02_13-07-15_2")),
            "nccl-test"
        );
        assert_eq!(scenario_name(Path::new("/x/run_12")), "run_12");
        // a renamed copy keeps the name its summary records
        let d = tempfile::tempdir().unwrap();
        let copy = d.path().join("copy-for-the-vendor");
        std::fs::create_dir_all(&copy).unwrap();
        assert_eq!(tree_scenario_name(&copy), "copy-for-the-vendor");
        std::fs::write(copy.join("nccl-test.html"), "<html>").unwrap();
        assert_eq!(
            tree_scenario_name(&copy),
            "nccl-test",
            "CloudAI's page names it"
        );
        std::fs::write(copy.join(SUMMARY_FILE), r#"{"scenario": "nccl-suite"}"#).unwrap();
        assert_eq!(tree_scenario_name(&copy), "nccl-suite");
        let f = drops(
            "t",
            "a",
            "b",
            workloads::Metric::BUSBW,
            &[(8, 100.0), (16, 200.0)],
            &[(8, 96.0), (16, 150.0), (32, 1.0)],
            0.05,
        );
        assert_eq!(f.len(), 1);
        assert_eq!((f[0].size, f[0].drop_pct), (16, 25.0));
        // a latency drops when it rises
        let f = drops(
            "t",
            "a",
            "b",
            workloads::Metric::LATENCY,
            &[(8, 10.0), (16, 20.0)],
            &[(8, 13.0), (16, 15.0)],
            0.05,
        );
        assert_eq!(f.len(), 1);
        assert_eq!((f[0].size, f[0].drop_pct, f[0].unit), (8, 30.0, "us"));
    }
}
