//! How a scenario ends — the one place `run`, `resume` and `generate-report` conclude: the scenario report (each
//! iteration's files, the page, `summary.json`), the status table, every registered output ([`outputs::OUTPUTS`]:
//! ledger, metrics file, JUnit, tarball), and the exit code by its precedence (docs/design/runner.md).

pub mod outputs;

use crate::log;
use crate::runner::Runner;
use crate::{error, info};

pub use outputs::Asked;

/// How a run ends, beyond its outcome.
pub(crate) struct Conclusion<'a> {
    pub asked: &'a Asked,
    pub tolerance_pct: f64,
    pub grading: Option<crate::baseline::Grading>,
    /// Earlier iterations of the tree count too (their records are read from it).
    pub resumed: bool,
}

/// After the engine: reports (over the whole tree when resuming), the status table, JUnit, the tarball, and the
/// exit code.
pub(crate) fn conclude(
    runner: &Runner,
    mut outcome: crate::runner::RunOutcome,
    system: &crate::config::system::SystemConfig,
    c: Conclusion,
) -> i32 {
    let Conclusion {
        asked,
        tolerance_pct,
        grading,
        resumed,
    } = c;
    let opts = crate::report::scenario::Options {
        compare: Vec::new(),
        tolerance: tolerance_pct / 100.0,
        regrade: false,
        summary: true,
        dry_run: runner.system().settings().nothing_runs(),
        baseline: grading,
        peaks: crate::report::scenario::Peaks::of(system),
        per_test: runner.scenario().report_enabled(system, "per_test"),
        fabric: None,
    };
    let known = (!resumed).then_some(&outcome.records);
    let summary =
        crate::report::scenario::generate(&runner.layout().root, known.map(|v| &v[..]), &opts);
    match &summary {
        Ok(summary) => {
            info!(
                "Generated scenario report at {}",
                runner
                    .layout()
                    .root
                    .join(format!("{}.html", runner.scenario().name))
                    .display()
            );
            // the report pass may grade further (a baseline), and a resumed tree's earlier iterations count too:
            // its records are the final word
            if opts.baseline.is_some() || resumed {
                outcome.records = summary.tests.iter().map(|e| e.record.clone()).collect();
            }
        }
        Err(e) => error!(
            "Cannot write the scenario report in {}: {e}",
            runner.layout().root.display()
        ),
    }
    // detached, nothing has ended yet: no empty table (the runner said what runs on; `status` shows it)
    if !(runner.is_detached() && outcome.records.is_empty()) {
        info!("Scenario results");
        log::print(&crate::report::status_table::render(&outcome.records));
    }
    let ended = outputs::Ended {
        root: &runner.layout().root,
        scenario: &runner.scenario().name,
        records: &outcome.records,
        summary: summary.as_ref().ok(),
        dry_run: opts.dry_run,
        detached: runner.is_detached(),
        tarball_allowed: runner.scenario().report_enabled(system, "tarball"),
    };
    let outputs_ok = outputs::write_all(asked, &ended);
    if !outcome.leftovers.is_empty() {
        return crate::results::record::report_leftovers(&runner.layout().root, &outcome.leftovers);
    }
    if incomplete(&runner.layout().root) {
        return 1;
    }
    if outcome.interrupted {
        crate::warn!(
            "Run interrupted: every submitted job was cancelled. Results so far are in {dir}; `cloudai resume {dir}` \
             runs what never started (what was cancelled stays CANCELLED)",
            dir = runner.layout().root.display()
        );
        return crate::exit_codes::INTERRUPTED;
    }
    if crate::util::signals::interrupted() {
        // every job had ended; the signal came while the reports were written
        crate::warn!(
            "Interrupted ({}) after every job ended; if a report is incomplete, `cloudai generate-report \
             --result-dir {}` rebuilds it",
            crate::util::signals::last(),
            runner.layout().root.display()
        );
        return crate::exit_codes::INTERRUPTED;
    }
    if runner.is_detached() {
        return 0;
    }
    info!("All jobs are complete.");
    if !outputs_ok {
        return 1;
    }
    verdict(&outcome.records)
}

/// The closing verdict of a scenario that ran to its end: a summary line and the exit code (0 or 3).
pub fn verdict(records: &[crate::results::IterationRecord]) -> i32 {
    let code = crate::results::record::exit_code(records);
    if code != 0 {
        let bad: Vec<String> = records
            .iter()
            .filter(|r| !r.status.is_success())
            .map(|r| format!("{} #{} {}", r.test_id, r.iteration, r.status.as_str()))
            .collect();
        crate::warn!(
            "{} of {} test iterations did not pass: {} (exit code {code})",
            bad.len(),
            records.len(),
            bad.join(", ")
        );
    }
    code
}

/// Whether results files could not be written (a full disk): says so once, as an error. Callers exit 1.
pub fn incomplete(root: &std::path::Path) -> bool {
    match crate::util::fsx::failure_summary(root) {
        Some(msg) => {
            crate::error!("{msg}");
            true
        }
        None => false,
    }
}
