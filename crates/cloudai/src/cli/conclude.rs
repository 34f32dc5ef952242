//! How `run` and `resume` end after the engine: reports (over the whole tree when resuming), the status table,
//! JUnit, the tarball, and the exit code.

use std::path::Path;

use crate::log;
use crate::runner::Runner;
use crate::{error, info};

/// How a run ends, beyond its outcome.
pub struct Conclusion<'a> {
    pub junit: Option<&'a Path>,
    pub tolerance_pct: f64,
    pub grading: Option<crate::baseline::Grading>,
    /// Earlier iterations of the tree count too (their records are read from it).
    pub resumed: bool,
    /// Write `<root>.tgz` when an iteration did not pass.
    pub tarball: bool,
    /// `--metrics-file`: the ledger's metrics, written after the run is recorded.
    pub metrics_file: Option<&'a Path>,
}

/// After the engine: reports (over the whole tree when resuming), the status table, JUnit, the tarball, and the
/// exit code.
pub fn conclude(
    runner: &Runner,
    mut outcome: crate::runner::RunOutcome,
    system: &crate::config::system::SystemConfig,
    c: Conclusion,
) -> i32 {
    let Conclusion {
        junit,
        tolerance_pct,
        grading,
        resumed,
        tarball,
        metrics_file,
    } = c;
    let opts = crate::report::scenario::Options {
        compare: Vec::new(),
        tolerance: tolerance_pct / 100.0,
        regrade: false,
        summary: true,
        dry_run: runner.dry_run,
        baseline: grading,
        peaks: crate::report::scenario::Peaks::of(system),
        per_test: runner.scenario.report_enabled(system, "per_test"),
        fabric: None,
    };
    let known = (!resumed).then_some(&outcome.records);
    match crate::report::scenario::generate(&runner.layout.root, known.map(|v| &v[..]), &opts) {
        Ok(summary) => {
            if !runner.dry_run {
                crate::ledger::record_scenario(&runner.layout.root, &summary);
                super::history::write_metrics_file(metrics_file);
            }
            info!(
                "Generated scenario report at {}",
                runner
                    .layout
                    .root
                    .join(format!("{}.html", runner.scenario.name))
                    .display()
            );
            // the report pass may grade further (a baseline), and a resumed tree's earlier iterations count too:
            // its records are the final word
            if opts.baseline.is_some() || resumed {
                outcome.records = summary.tests.into_iter().map(|e| e.record).collect();
            }
        }
        Err(e) => error!(
            "Cannot write the scenario report in {}: {e}",
            runner.layout.root.display()
        ),
    }
    // detached, nothing has ended yet: no empty table (the runner said what runs on; `status` shows it)
    if !(runner.detach && outcome.records.is_empty()) {
        info!("Scenario results");
        log::print(&crate::report::status_table::render(&outcome.records));
    }
    let junit_ok = super::write_junit(junit, &runner.scenario.name, &outcome.records);
    let failed = outcome.records.iter().any(|r| !r.status.is_success());
    let tarball = tarball && runner.scenario.report_enabled(system, "tarball");
    if tarball && failed && !runner.dry_run && !runner.detach {
        match crate::report::tarball::write(&runner.layout.root) {
            Ok(p) => info!("Created tarball at {}", p.display()),
            Err(e) => error!("Cannot write the results tarball: {e}"),
        }
    }
    if !outcome.leftovers.is_empty() {
        return crate::results::record::report_leftovers(&runner.layout.root, &outcome.leftovers);
    }
    if super::incomplete(&runner.layout.root) {
        return 1;
    }
    if outcome.interrupted {
        crate::warn!(
            "Run interrupted: every submitted job was cancelled. Results so far are in {dir}; `cloudai resume {dir}` \
             runs what never started (what was cancelled stays CANCELLED)",
            dir = runner.layout.root.display()
        );
        return crate::exit_codes::INTERRUPTED;
    }
    if crate::util::signals::interrupted() {
        // every job had ended; the signal came while the reports were written
        crate::warn!(
            "Interrupted ({}) after every job ended; if a report is incomplete, `cloudai generate-report \
             --result-dir {}` rebuilds it",
            crate::util::signals::last(),
            runner.layout.root.display()
        );
        return crate::exit_codes::INTERRUPTED;
    }
    if runner.detach {
        return 0;
    }
    info!("All jobs are complete.");
    if !junit_ok {
        return 1;
    }
    super::verdict(&outcome.records)
}
