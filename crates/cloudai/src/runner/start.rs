//! What `run`, `resume` (and the sweep steps of a design-space exploration) and each round of `find-bad-nodes`
//! share before the engine runs: the system built for its config — wrapped in a dry-run when asked —, checked
//! against every test and hook of the scenario, the runtime, and for a real run the scheduler connected. Nothing is
//! created when any of it fails.

use std::sync::Arc;

use crate::config::system::SystemConfig;
use crate::error;
use crate::exit_codes::Failure;
use crate::scenario::Scenario;
use crate::systems::{dry_run::DryRun, System};

pub struct Started {
    pub system: Arc<dyn System>,
    pub rt: tokio::runtime::Runtime,
}

pub fn start(
    cfg: &Arc<SystemConfig>,
    scenario: &Scenario,
    dry_run: bool,
) -> Result<Started, Failure> {
    let system = crate::systems::build(cfg);
    let system = if dry_run {
        DryRun::wrap(system)
    } else {
        system
    };
    let problems = checks(system.as_ref(), scenario);
    if !problems.is_empty() {
        for p in &problems {
            error!("{p}");
        }
        return Err(Failure::Error(format!(
            "{} problem(s) with running scenario '{}' on system '{}'; nothing was submitted.",
            problems.len(),
            scenario.name,
            cfg.name
        )));
    }
    let rt = super::runtime()?;
    if !dry_run {
        rt.block_on(system.connect())
            .map_err(|e| format!("Cannot use system '{}': {e}", cfg.name))?;
        crate::debug!(
            "Connected to system '{}' ({})",
            cfg.name,
            cfg.kind.scheduler()
        );
    }
    Ok(Started { system, rt })
}

/// What the system cannot run of the scenario's tests and hooks, all at once.
fn checks(sys: &dyn System, s: &Scenario) -> Vec<String> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for r in &s.test_runs {
        let hooks = [&r.pre_test, &r.post_test]
            .into_iter()
            .flatten()
            .flat_map(|h| h.test_runs.iter());
        for run in std::iter::once(r).chain(hooks) {
            for p in sys.check(run).into_iter().chain(sys.run_checks(run)) {
                if seen.insert(p.clone()) {
                    out.push(p);
                }
            }
        }
    }
    out
}
