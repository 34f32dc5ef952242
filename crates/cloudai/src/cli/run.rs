//! `run` and `dry-run`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::RunArgs;
use crate::log;
use crate::results::Layout;
use crate::runner::Runner;
use crate::scenario::{self, Inputs, Scenario};
use crate::{error, info};

pub fn run(args: &RunArgs, dry_run: bool) -> i32 {
    if let Some(dir) = &args.resume {
        return super::resume::resume(dir, args.junit.as_deref(), &args.baseline);
    }
    let c = &args.common;
    let inputs = Inputs {
        system: c.system_config.as_deref(),
        tests_dir: c.tests_dir.as_deref(),
        scenario: scenario_path(args),
        hook_dir: c.hook_dir.as_deref(),
    };
    let (system, scenario) = match scenario::load_all(&inputs) {
        Ok(x) => x,
        Err(e) => {
            e.report();
            return 1;
        }
    };

    if args.single_sbatch && scenario.test_runs.iter().any(|r| r.is_dse()) {
        error!("--single-sbatch with a design-space exploration is not supported by this version: run the sweep without it.");
        return 1;
    }
    let grading = match args.baseline.load() {
        Ok(g) => g,
        Err(e) => {
            e.report();
            return 1;
        }
    };
    let system = Arc::new(system);
    let sys = crate::systems::build(&system);
    let sys = if dry_run {
        crate::systems::dry_run::DryRun::wrap(sys)
    } else {
        sys
    };
    if args.single_sbatch && !sys.settings().single_job {
        error!("Single sbatch is only supported for Slurm systems.");
        return 1;
    }
    let problems = system_checks(sys.as_ref(), &scenario);
    if !problems.is_empty() {
        for p in &problems {
            error!("{p}");
        }
        error!(
            "{} problem(s) with running scenario '{}' on system '{}'; nothing was submitted.",
            problems.len(),
            scenario.name,
            system.name
        );
        return 1;
    }
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
            error!(
                "{} installable(s) missing: run `cloudai install` with the same --system-config, --tests-dir and \
                 --test-scenario first (or pass --enable-cache-without-check)",
                missing.len()
            );
            return 1;
        }
    }
    let rt = match crate::runner::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            error!("{e}");
            return 1;
        }
    };
    if !dry_run {
        if let Err(e) = rt.block_on(sys.connect()) {
            error!("Cannot use system '{}': {e}", system.name);
            return 1;
        }
    }
    let output = args
        .output_dir
        .clone()
        .unwrap_or_else(|| system.output_path.clone());
    let output = match prepare_output_dir(&output) {
        Ok(p) => p,
        Err(e) => {
            error!("{e}");
            return 1;
        }
    };

    info!("System Name: {}", system.name);
    info!("Scheduler: {}", system.kind.scheduler());
    info!("Test Scenario Name: {}", scenario.name);
    info!("Checking if workloads components are installed.");
    info!("Test Scenario: {}", scenario.name);
    log::print_info(&format!("\n{}", describe(&scenario)));
    info!(
        "Initializing Runner [{}] mode",
        if dry_run { "DRY-RUN" } else { "RUN" }
    );
    info!("Creating {}", sys.runner_name());
    let layout = match Layout::create(&output, &scenario.name, chrono::Local::now()) {
        Ok(l) => l,
        Err(e) => {
            error!("Failed to create a results directory in '{}': {e}. Please check directory permissions and available disk space.", output.display());
            return 1;
        }
    };
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
            error!(
                "Cannot record the run's inputs in {}: {e}",
                layout.root.display()
            );
            return 1;
        }
        crate::log::also_to(&crate::results::state::log_path(&layout.root));
    }
    let grading = if dry_run { None } else { grading };
    let (runner, outcome) = if args.single_sbatch {
        crate::runner::single::run(sys, scenario, layout, &rt)
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
        let mut runner = Runner::new(sys, scenario, layout);
        runner.detach = args.detach && !dry_run;
        let outcome = rt.block_on(runner.run());
        (runner, outcome)
    };
    let code = conclude(
        &runner,
        outcome,
        &system,
        Conclusion {
            junit: args.junit.as_deref(),
            tolerance_pct: args.baseline.tolerance,
            grading,
            resumed: false,
            tarball: !args.no_tarball,
        },
    );
    crate::results::state::unlock(&runner.layout.root);
    code
}

fn scenario_path(args: &RunArgs) -> &Path {
    args.common
        .test_scenario
        .as_deref()
        .unwrap_or(Path::new("scenario.toml"))
}

/// How a run ends, beyond its outcome.
pub(super) struct Conclusion<'a> {
    pub junit: Option<&'a Path>,
    pub tolerance_pct: f64,
    pub grading: Option<crate::baseline::Grading>,
    /// Earlier iterations of the tree count too (their records are read from it).
    pub resumed: bool,
    /// Write `<root>.tgz` when an iteration did not pass.
    pub tarball: bool,
}

/// After the engine: reports (over the whole tree when resuming), the status table, JUnit, the tarball, and the
/// exit code.
pub(super) fn conclude(
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
    };
    let known = (!resumed).then_some(&outcome.records);
    match crate::report::scenario::generate(&runner.layout.root, known.map(|v| &v[..]), &opts) {
        Ok(summary) => {
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
    info!("Scenario results");
    log::print(&crate::report::status_table::render(&outcome.records));
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

/// What the system cannot run of the scenario's tests and hooks, all at once.
fn system_checks(sys: &dyn crate::systems::System, s: &Scenario) -> Vec<String> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for r in &s.test_runs {
        let hooks = [&r.pre_test, &r.post_test]
            .into_iter()
            .flatten()
            .flat_map(|h| h.test_runs.iter());
        for run in std::iter::once(r).chain(hooks) {
            for p in sys.check(run) {
                if seen.insert(p.clone()) {
                    out.push(p);
                }
            }
        }
    }
    out
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
