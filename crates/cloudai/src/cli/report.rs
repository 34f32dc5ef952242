//! `generate-report`: re-grade and re-render an existing results tree, optionally against other trees.

use crate::exit_codes::Failure;
use std::path::PathBuf;

use clap::Args;

use crate::report::scenario::{generate as write_reports, Options};
use crate::{info, log};

#[derive(Args, Debug)]
pub(crate) struct ReportArgs {
    /// Scenario results directory (`<output>/<scenario>_<timestamp>`)
    #[arg(long)]
    result_dir: PathBuf,
    /// Other results trees to compare against; busbw drops beyond --tolerance are flagged per size (in the table,
    /// the page and summary.json; informational unless --compare-fail)
    #[arg(long, num_args = 1..)]
    compare: Vec<PathBuf>,
    /// A --compare drop beyond --tolerance fails its iteration (exit code 3)
    #[arg(long, requires = "compare")]
    compare_fail: bool,
    #[command(flatten)]
    baseline: super::BaselineArgs,
    #[command(flatten)]
    outputs: super::OutputArgs,
    /// System TOML: only its link peaks (nvlink_peak_gbps, net_peak_gbps) and fabric (fabric, nics_per_node, nic_gbps, expected_busbw_gbps, expectation_fraction) are used: to flag implausible busbw and to re-grade against the hardware
    #[arg(long, env = "CLOUDAI_SYSTEM_CONFIG")]
    system_config: Option<PathBuf>,
    /// Accepted for CloudAI compatibility
    #[arg(long)]
    test_scenario: Option<PathBuf>,
    /// Accepted for CloudAI compatibility
    #[arg(long)]
    tests_dir: Option<PathBuf>,
    /// Accepted for CloudAI compatibility (hook outputs are read from the tree itself)
    #[arg(long)]
    hook_dir: Option<PathBuf>,
}

/// Each test's `--compare` drops in its row of the table (and JUnit): the sizes and how far they fell; with
/// `--compare-fail` a passed iteration of such a test fails.
fn note_drops(
    records: &mut [crate::results::IterationRecord],
    drops: &[crate::report::scenario::Flag],
    fail: bool,
) {
    for r in records.iter_mut() {
        let mine: Vec<&crate::report::scenario::Flag> =
            drops.iter().filter(|f| f.test_id == r.test_id).collect();
        if mine.is_empty() {
            continue;
        }
        let shown: Vec<String> = mine
            .iter()
            .take(4)
            .map(|f| {
                format!(
                    "{} -{:.1}% vs {}",
                    crate::html::size_iec(f.size),
                    f.drop_pct.abs(),
                    f.baseline
                )
            })
            .collect();
        let more = if mine.len() > shown.len() {
            format!(" and {} more", mine.len() - shown.len())
        } else {
            String::new()
        };
        let note = format!(
            "--compare: {} size(s) dropped: {}{more}",
            mine.len(),
            shown.join(", ")
        );
        r.message = if r.message.is_empty() {
            note
        } else {
            format!("{}; {note}", r.message)
        };
        if fail && r.status == crate::results::Status::Passed {
            r.status = crate::results::Status::Failed;
        }
    }
}

/// Why `dir` is not a results tree (nothing is written into it then), naming the trees below it if any.
fn not_a_tree(dir: &std::path::Path) -> Option<String> {
    // `<test id>/<n>/test-run.toml`, or `<test id>/<n>/<step>/test-run.toml` for a sweep (n, step: numbers)
    fn subdirs(d: &std::path::Path, numeric: bool) -> Vec<std::path::PathBuf> {
        std::fs::read_dir(d)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.is_dir()
                    && (!numeric
                        || p.file_name()
                            .and_then(|n| n.to_str())
                            .is_some_and(|n| n.parse::<u64>().is_ok()))
            })
            .collect()
    }
    let is_tree = |d: &std::path::Path| {
        subdirs(d, false).iter().any(|t| {
            subdirs(t, true).iter().any(|n| {
                n.join("test-run.toml").is_file()
                    || subdirs(n, true)
                        .iter()
                        .any(|s| s.join("test-run.toml").is_file())
            })
        })
    };
    if is_tree(dir) {
        return None;
    }
    let mut below: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir() && is_tree(p))
        .map(|p| p.display().to_string())
        .collect();
    below.sort();
    let hint = match below.len() {
        0 => String::new(),
        1 => format!("; did you mean {}?", below[0]),
        n => format!(
            "; it holds {n} results trees, give one of them: {}",
            below.join(", ")
        ),
    };
    Some(format!(
        "{} is not a results tree: it has no <test id>/<iteration>/test-run.toml (a tree is what `cloudai run` \
         writes: <output>/<scenario>_<timestamp>/<test id>/<n>/){hint}",
        dir.display()
    ))
}

pub fn generate(args: &ReportArgs) -> Result<(), Failure> {
    for dir in std::iter::once(&args.result_dir).chain(&args.compare) {
        if !dir.is_dir() {
            return Err(Failure::Error(format!(
                "{}: not a directory",
                dir.display()
            )));
        }
    }
    // reports are written into --result-dir: it must be a tree (a --compare tree that holds nothing is warned of)
    if let Some(why) = not_a_tree(&args.result_dir) {
        return Err(Failure::Error(why));
    }
    // the system file only matters for its link peaks (a busbw above them is flagged) and its declared fabric
    // (the transport and expectation checks)
    let (peaks, fabric) = match args
        .system_config
        .as_deref()
        .map(crate::config::system::load)
    {
        Some(Ok(sys)) => (
            crate::report::scenario::Peaks::of(&sys),
            Some(sys.fabric.clone()),
        ),
        Some(Err(e)) => {
            return Err(e.into());
        }
        None => Default::default(),
    };
    let grading = args.baseline.load()?;
    let opts = Options {
        compare: args.compare.clone(),
        tolerance: args.baseline.tolerance / 100.0,
        regrade: true,
        summary: true,
        dry_run: crate::report::scenario::is_dry_run_tree(&args.result_dir),
        baseline: grading,
        peaks,
        per_test: true,
        fabric,
    };
    match write_reports(&args.result_dir, None, &opts) {
        Ok(summary) => {
            info!(
                "Generated scenario report at {}",
                args.result_dir
                    .join(format!("{}.html", summary.scenario))
                    .display()
            );
            for f in &summary.drops {
                crate::warn!(
                    "{}: {} at {} {} {}% ({:.2} -> {:.2} {}) vs {}",
                    f.test_id,
                    f.metric.name,
                    crate::html::size_iec(f.size),
                    if f.metric.higher_is_better {
                        "dropped"
                    } else {
                        "rose"
                    },
                    f.drop_pct,
                    f.baseline_value,
                    f.value,
                    f.metric.unit,
                    f.baseline
                );
            }
            let mut records: Vec<_> = summary.tests.iter().map(|e| e.record.clone()).collect();
            note_drops(&mut records, &summary.drops, args.compare_fail);
            info!("Scenario results");
            log::print(&crate::report::status_table::render(&records));
            let ended = crate::ending::outputs::Ended {
                root: &args.result_dir,
                scenario: &summary.scenario,
                records: &records,
                summary: Some(&summary),
                dry_run: opts.dry_run,
                detached: false,
                tarball_allowed: false,
            };
            if !crate::ending::outputs::write_all(&args.outputs.asked(false), &ended) {
                return Err(Failure::Reported);
            }
            if crate::ending::incomplete(&args.result_dir) {
                return Err(Failure::Reported);
            }
            Failure::of_code(crate::ending::verdict(&records))
        }
        Err(e) => Err(Failure::Error(format!(
            "Cannot write reports in {}: {e}",
            args.result_dir.display()
        ))),
    }
}
