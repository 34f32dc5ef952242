//! One round of pair jobs (a sweep's round, or a requalification's): its scenario written, run as `run` runs one,
//! graded into its own results tree (`<root>/<label>/`).

use std::path::Path;
use std::sync::Arc;

use super::{round_scenario, Request};
use crate::exit_codes::Failure;
use crate::report::scenario::{generate, Options, Peaks, Summary};
use crate::results::Layout;
use crate::runner::Runner;
use crate::scenario::{self, Inputs};
use crate::warn;

/// Runs the pairs (inside a maintenance window when requalifying). None for a dry run (the job files are written,
/// nothing is submitted).
pub(super) fn run(
    req: &Request,
    root: &Path,
    label: &str,
    round: usize,
    pairs: &[[String; 2]],
    window: Option<&crate::systems::fleet::Window>,
) -> Result<Option<Summary>, Failure> {
    let scen = root.join(format!("{label}.toml"));
    crate::util::fsx::write_atomic(&scen, round_scenario(round, req.test, pairs).as_bytes())
        .map_err(|e| format!("Cannot write {}: {e}", scen.display()))?;
    let survey = |s: &mut crate::config::system::SystemConfig| {
        if let Some(w) = window {
            w.fit(s);
        }
        crate::systems::survey::survey(s, req.dry_run)
    };
    let inputs = Inputs {
        system: req.system,
        tests_dir: Some(req.tests_dir),
        scenario: &scen,
        hook_dir: None,
        survey: Some(&survey),
    };
    let (sys_cfg, scenario) = scenario::load_all(&inputs)?;
    if let Some(r) = scenario
        .test_runs
        .iter()
        .find(|r| r.test.test_template_name != "NcclTest")
    {
        return Err(Failure::Error(format!(
            "find-bad-nodes grades bus bandwidth: test '{}' is a {} test, not NcclTest",
            req.test, r.test.test_template_name
        )));
    }
    let sys_cfg = Arc::new(sys_cfg);
    // each round's engine starts as `run`'s does: built, checked, connected (on its own runtime)
    let started = crate::runner::start::start(&sys_cfg, &scenario, req.dry_run)?;
    let layout = Layout {
        root: root.join(label),
        step: None,
    };
    let runner = Runner::new(started.system, scenario, layout);
    let outcome = started.rt.block_on(runner.run());
    if req.dry_run {
        return Ok(None);
    }
    if !outcome.leftovers.is_empty() {
        return Err(Failure::Outcome(crate::results::record::report_leftovers(
            root,
            &outcome.leftovers,
        )));
    }
    if outcome.interrupted {
        warn!(
            "Interrupted: every submitted job was cancelled; partial results in {}",
            root.display()
        );
        return Err(Failure::Outcome(crate::exit_codes::INTERRUPTED));
    }
    let opts = Options {
        compare: Vec::new(),
        tolerance: req.tolerance,
        regrade: false,
        summary: true,
        dry_run: false,
        baseline: req.baseline.clone(),
        peaks: Peaks::of(&sys_cfg),
        per_test: true,
        fabric: None,
    };
    generate(&runner.layout().root, Some(&outcome.records), &opts)
        .map(Some)
        .map_err(|e| {
            Failure::Error(format!(
                "Cannot write the round's report in {}: {e}",
                runner.layout().root.display()
            ))
        })
}
