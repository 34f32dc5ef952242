//! `run` and `dry-run`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::RunArgs;
use crate::exit_codes::Failure;
use crate::results::Layout;
use crate::runner::start::{start, Started};
use crate::runner::Runner;
use crate::scenario::{self, Inputs, Scenario};
use crate::{error, info};

pub fn run(args: &RunArgs, dry_run: bool) -> Result<(), Failure> {
    if let Some(dir) = &args.resume {
        return super::resume::resume(dir, &args.outputs.asked(true), &args.baseline);
    }
    let c = &args.common;
    let survey =
        |s: &mut crate::config::system::SystemConfig| crate::systems::survey::survey(s, dry_run);
    let inputs = Inputs {
        system: c.system_config.as_deref(),
        tests_dir: c.tests_dir.as_deref(),
        scenario: scenario_path(args),
        hook_dir: c.hook_dir.as_deref(),
        survey: Some(&survey),
    };
    let (system, scenario) = scenario::load_all(&inputs)?;

    if args.single_sbatch {
        if scenario.test_runs.iter().any(|r| r.is_dse()) {
            return Err(Failure::Error("--single-sbatch with a design-space exploration is not supported by this version: run the sweep without it.".into()));
        }
        if let Some(r) = scenario
            .test_runs
            .iter()
            .find(|r| r.workload.needs() == crate::workloads::Needs::Submit)
        {
            return Err(Failure::Error(format!(
                "--single-sbatch cannot run test '{}' ({}): its own launcher submits its job; run the scenario \
                 without --single-sbatch",
                r.id, r.test.test_template_name
            )));
        }
    }
    let grading = args.baseline.load()?;
    let system = Arc::new(system);
    if !dry_run && !args.enable_cache_without_check {
        let missing: Vec<_> = crate::install::installables(&system, &scenario)
            .into_iter()
            .filter(|i| !i.installed())
            .collect();
        if !missing.is_empty() {
            for i in &missing {
                error!(
                    "Not installed: {} (expected at {})",
                    i.describe(),
                    i.path().display()
                );
            }
            return Err(Failure::Error(format!(
                "{} installable(s) missing: run `cloudai install` with the same --system-config, --tests-dir and \
                 --test-scenario first (or pass --enable-cache-without-check)",
                missing.len()
            )));
        }
    }
    let Started { system: sys, rt } = start(&system, &scenario, dry_run)?;
    if args.single_sbatch && !sys.settings().single_job {
        return Err(Failure::Error(
            "Single sbatch is only supported for Slurm systems.".into(),
        ));
    }
    let output = args
        .output_dir
        .clone()
        .unwrap_or_else(|| system.output_path.clone());
    let output = prepare_output_dir(&output)?;

    info!("System Name: {}", system.name);
    info!("Scheduler: {}", system.kind.scheduler());
    info!("Test Scenario Name: {}", scenario.name);
    info!("Checking if workloads components are installed.");
    info!("Test Scenario: {}", scenario.name);
    // the outline CloudAI prints, one section per test: in debug.log, not on the console
    crate::debug!("\n{}", describe(&scenario));
    info!(
        "Initializing Runner [{}] mode",
        if dry_run { "DRY-RUN" } else { "RUN" }
    );
    info!("Creating {}", sys.runner_name());
    let layout = Layout::create(&output, &scenario.name, chrono::Local::now()).map_err(|e| {
        format!("Failed to create a results directory in '{}': {e}. Please check directory permissions and available disk space.", output.display())
    })?;
    info!(
        "Scenario results will be stored at: {}",
        layout.root.display()
    );

    if !dry_run {
        // the tree must be resumable by another process from now on: its inputs and its owner
        let c = &args.common;
        let recorded = crate::results::state::record_inputs(
            &layout.root,
            c.system_config.as_deref(),
            scenario_path(args),
            c.tests_dir.as_deref(),
            c.hook_dir.as_deref(),
            dry_run,
        )
        .map_err(|e| e.to_string())
        .and_then(|_| crate::results::state::lock(&layout.root));
        if let Err(e) = recorded {
            return Err(Failure::Error(format!(
                "Cannot record the run's inputs in {}: {e}",
                layout.root.display()
            )));
        }
        crate::log::also_to(&crate::results::state::log_path(&layout.root));
    }
    let grading = if dry_run { None } else { grading };
    let (runner, outcome) = if args.single_sbatch {
        let runner = Runner::builder(sys, scenario, layout)
            .single_job(true)
            .build();
        let outcome = rt.block_on(runner.run());
        (runner, outcome)
    } else if scenario.test_runs.iter().any(|r| r.is_dse()) {
        let root = layout.root.clone();
        super::dse::run(
            super::dse::Dse {
                sys,
                scenario,
                root: &root,
            },
            &rt,
        )
    } else {
        let runner = Runner::builder(sys, scenario, layout)
            .detach(args.detach && !dry_run)
            .build();
        let outcome = rt.block_on(runner.run());
        (runner, outcome)
    };
    let code = crate::ending::conclude(
        &runner,
        outcome,
        &system,
        crate::ending::Conclusion {
            asked: &args.outputs.asked(true),
            tolerance_pct: args.baseline.tolerance,
            grading,
            resumed: false,
        },
    );
    crate::results::state::unlock(&runner.layout().root);
    Failure::of_code(code)
}

fn scenario_path(args: &RunArgs) -> &Path {
    args.common
        .test_scenario
        .as_deref()
        .unwrap_or(Path::new("scenario.toml"))
}

/// The scenario outline CloudAI prints before running.
fn describe(s: &Scenario) -> String {
    let mut out = String::new();
    for r in &s.test_runs {
        out.push_str(&format!(
            "Section Name: {}\n  Test Name: {}\n  Description: {}\n",
            r.id, r.test.name, r.test.description
        ));
        if r.dependencies.is_empty() {
            out.push_str("  No dependencies\n");
        }
        for d in &r.dependencies {
            out.push_str(&format!("  {}: {}\n", d.kind.label(), d.id));
        }
    }
    out.trim_end().to_string()
}

/// The output directory must exist or be creatable (its parent exists), and be writable.
fn prepare_output_dir(p: &Path) -> Result<PathBuf, String> {
    let abs = std::path::absolute(p)
        .map_err(|e| format!("Output path '{}' is invalid: {e}", p.display()))?;
    if abs.exists() {
        if !abs.is_dir() {
            return Err(format!(
                "Output path '{}' exists but is not a directory.",
                abs.display()
            ));
        }
    } else {
        let parent = abs.parent().unwrap_or(Path::new("/"));
        if !parent.is_dir() {
            return Err(format!("Output path '{}' does not exist.", abs.display()));
        }
    }
    let probe_dir = if abs.exists() {
        abs.clone()
    } else {
        abs.parent().unwrap().to_path_buf()
    };
    let probe = probe_dir.join(format!(".cloudai-write-test-{}", std::process::id()));
    match std::fs::File::create(&probe) {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
        }
        Err(_) => return Err(format!("Output path '{}' is not writable.", abs.display())),
    }
    Ok(abs)
}
