//! `cloudai resume RESULTS_DIR` (also `run --resume`): finish a tree whose cloudai was killed or detached. The
//! configs come from the copies in the tree; every iteration's journal record says whether it ended, whose job to
//! re-attach to, or that it never started.

use std::path::{Path, PathBuf};

use chrono::Local;
use clap::Args;

use super::BaselineArgs;
use crate::exit_codes::Failure;
use crate::results::state::{self, RunInfo};
use crate::results::{EndReason, IterationRecord, Layout};
use crate::runner::resume::{Attached, PlanState, SlotPlan};
use crate::runner::start::{start, Started};
use crate::runner::Runner;
use crate::scenario::{Inputs, TestRun};
use crate::systems::{Prepared, System};
use crate::{info, warn};

#[derive(Args, Debug)]
pub(crate) struct ResumeArgs {
    /// The results tree (`<output>/<scenario>_<timestamp>`)
    result_dir: PathBuf,
    #[command(flatten)]
    outputs: super::OutputArgs,
    #[command(flatten)]
    baseline: BaselineArgs,
}

pub(crate) fn resume_cmd(args: &ResumeArgs) -> Result<(), Failure> {
    resume(&args.result_dir, &args.outputs.asked(true), &args.baseline)
}

/// `test_cmd` / `full_cmd` of an iteration's test-run.toml and its batch script, as `prepare` made them.
fn prepared_from(sys: &dyn System, dir: &Path) -> Prepared {
    let toml = std::fs::read_to_string(dir.join("test-run.toml")).unwrap_or_default();
    let field = |k: &str| {
        toml.lines()
            .find_map(|l| l.strip_prefix(&format!("{k} = ")))
            .and_then(|v| v.parse::<toml_edit::Value>().ok())
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    };
    let files = sys
        .job_files()
        .iter()
        .filter_map(|f| Some((f.to_string(), std::fs::read_to_string(dir.join(f)).ok()?)))
        .collect();
    Prepared {
        test_cmd: field("test_cmd"),
        full_cmd: field("full_cmd"),
        files,
        env: Vec::new(),
        submit: None,
        runs: None,
    }
}

/// Where one test run stands, from its iterations' journal records; attached jobs are taken over.
async fn plan_for(sys: &dyn System, run: &TestRun, root: &Path) -> SlotPlan {
    let mut started = false;
    for i in 0..run.iterations {
        let dir = root.join(&run.id).join(i.to_string());
        let rec = match IterationRecord::read(&dir) {
            Ok(r) => r,
            // the record file deleted or damaged: the journal's copy is the truth
            Err(e) => match repaired(root, run, i, &dir, &e) {
                Some(r) => r,
                None => {
                    return SlotPlan {
                        iteration: i,
                        state: PlanState::Waiting,
                        started,
                    }
                }
            },
        };
        if !rec.is_unfinished() {
            started = true;
            // these end a test's iterations early, as the engine does
            if matches!(
                rec.end_reason,
                EndReason::Cancelled | EndReason::StoppedByDependency | EndReason::Unschedulable
            ) {
                return SlotPlan {
                    iteration: i,
                    state: PlanState::Done,
                    started,
                };
            }
            continue;
        }
        let id = match rec.job_id.clone() {
            Some(id) => Some(id),
            None => sys.find_submitted(run, &dir).await,
        };
        let Some(id) = id else {
            info!(
                "{} #{i}: its submission was never completed; submitting it again",
                run.id
            );
            return SlotPlan {
                iteration: i,
                state: PlanState::Waiting,
                started,
            };
        };
        let prepared = prepared_from(sys, &dir);
        if let Err(e) = sys.attach(run, &dir, &id, &prepared).await {
            warn!("{} #{i}: cannot re-attach to job {id}: {e}", run.id);
            let mut r = rec.clone();
            r.end_reason = EndReason::Lost;
            r.status = crate::results::Status::Failed;
            r.message =
                format!("after a restart of cloudai, job {id} could not be found again: {e}");
            r.ended_at = Some(Local::now().to_rfc3339());
            let _ = r.write(&dir);
            continue;
        }
        info!("{} #{i}: re-attached to job {id}", run.id);
        return SlotPlan {
            iteration: i,
            started: started || rec.started_at.is_some(),
            state: PlanState::Attached(Box::new(Attached {
                id,
                dir,
                prepared,
                submitted_at: crate::results::record::local_time(&rec.submitted_at)
                    .unwrap_or_else(Local::now),
                started_at: crate::results::record::local_time(&rec.started_at),
                queue: rec.queue_states.clone(),
            })),
        };
    }
    SlotPlan {
        iteration: run.iterations,
        state: PlanState::Done,
        started,
    }
}

/// An iteration whose record file is missing or unreadable: rewritten from the journal's last copy; with none, an
/// iteration that left output is named and counted as ended (never run again over its output); `None`: it never
/// started.
fn repaired(
    root: &Path,
    run: &TestRun,
    i: u64,
    dir: &Path,
    e: &std::io::Error,
) -> Option<IterationRecord> {
    let missing = e.kind() == std::io::ErrorKind::NotFound;
    if let Some(mut r) = state::journal_entry(root, &run.id, i) {
        r.output_path = dir.display().to_string();
        warn!(
            "{} #{i}: its {} was {}; repaired from the journal ({})",
            run.id,
            crate::results::record::RECORD_FILE,
            if missing { "missing" } else { "damaged" },
            r.status.as_str()
        );
        if let Err(e) = std::fs::create_dir_all(dir).and_then(|_| r.write(dir)) {
            warn!("Cannot write the repaired record in {}: {e}", dir.display());
        }
        return Some(r);
    }
    let ran = ["stdout.txt", "stderr.txt"]
        .iter()
        .any(|f| dir.join(f).exists());
    if !ran {
        return None;
    }
    warn!(
        "{} #{i}: its {} is {} and the journal has no copy, but it left output: it is not run again (its output \
         stays as it is); `cloudai generate-report` grades it",
        run.id,
        crate::results::record::RECORD_FILE,
        if missing { "missing" } else { "damaged" }
    );
    let r = IterationRecord {
        test_id: run.id.clone(),
        test_name: run.test.name.clone(),
        template: run.test.test_template_name.clone(),
        iteration: i,
        iterations: run.iterations,
        output_path: dir.display().to_string(),
        status: crate::results::Status::Failed,
        end_reason: EndReason::Lost,
        message: format!(
            "its {} was lost ({e}) and the journal has no copy: not run again; its output is graded by \
             generate-report",
            crate::results::record::RECORD_FILE
        ),
        ..Default::default()
    };
    let _ = r.write(dir);
    Some(r)
}

fn inputs(
    root: &Path,
    info: &RunInfo,
) -> (Option<PathBuf>, PathBuf, Option<PathBuf>, Option<PathBuf>) {
    let st = state::state_dir(root);
    (
        info.system.as_ref().map(|s| st.join(s)),
        st.join(&info.scenario),
        info.tests_dir.as_ref().map(|t| st.join(t)),
        info.hook_dir.as_ref().map(|h| st.join(h)),
    )
}

pub fn resume(
    root: &Path,
    asked: &crate::ending::Asked,
    baseline: &BaselineArgs,
) -> Result<(), Failure> {
    if !root.is_dir() {
        return Err(Failure::Error(format!(
            "{}: not a directory",
            root.display()
        )));
    }
    if crate::report::scenario::is_dry_run_tree(root) {
        return Err(Failure::Error(format!("{} is a dry-run tree: nothing ran, so there is nothing to resume (run the scenario instead)", root.display())));
    }
    // a tree cloudai was killed in before it recorded how it started: nothing ran in it, and nothing says what to run
    let stub = crate::report::scenario::iteration_dirs(root).is_empty()
        && !state::state_dir(root).join("run.json").is_file();
    if stub {
        return Err(Failure::Error(format!(
            "{}: cloudai was stopped before this run started anything (no job ran and the tree does not record its \
             inputs): nothing to resume; run the scenario again (this directory can be removed)",
            root.display()
        )));
    }
    if !state::state_dir(root).is_dir() {
        return Err(Failure::Error(format!(
            "{} cannot be resumed: it has no {}/ (only trees written by `cloudai run` of this version can be)",
            root.display(),
            state::STATE_DIR
        )));
    }
    // one owner per tree, taken before anything of the tree is read: a second resume stops here
    state::lock(root)?;
    crate::log::also_to(&state::log_path(root));
    let result = match state::read_info(root) {
        Ok(info) => resume_locked(root, &info, asked, baseline),
        Err(e) => Err(Failure::Error(format!(
            "{} cannot be resumed: {}/run.json: {e} (only trees written by `cloudai run` of this version can be)",
            root.display(),
            state::STATE_DIR
        ))),
    };
    state::unlock(root);
    result
}

fn resume_locked(
    root: &Path,
    info: &RunInfo,
    asked: &crate::ending::Asked,
    baseline: &BaselineArgs,
) -> Result<(), Failure> {
    for f in state::changed_inputs(root, info) {
        warn!(
            "{} changed since the run started; resuming with the copy taken then (in {}/inputs)",
            f.display(),
            state::STATE_DIR
        );
    }
    // what a kill -9 in the middle of an atomic write left: temporary files nobody will finish
    let swept: usize = std::iter::once(root.to_path_buf())
        .chain(std::iter::once(state::state_dir(root)))
        .chain(crate::report::scenario::iteration_dirs(root))
        .map(|d| crate::util::fsx::sweep_stale_temps(&d))
        .sum();
    if swept > 0 {
        info!("Removed {swept} temporary file(s) an interrupted write left in the tree");
    }
    let (system, scenario, tests, hooks) = inputs(root, info);
    // the cluster surveyed again, as the run did (its secret first: the tree keeps none)
    let survey = |s: &mut crate::config::system::SystemConfig| {
        let _ = state::restore_secret(s, info);
        crate::systems::survey::survey(s, false)
    };
    let loaded = crate::scenario::load_all(&Inputs {
        system: system.as_deref(),
        tests_dir: tests.as_deref(),
        scenario: &scenario,
        hook_dir: hooks.as_deref(),
        survey: Some(&survey),
    });
    let (mut system, scenario) = loaded?;
    state::restore_secret(&mut system, info)?;
    if scenario.test_runs.iter().any(|r| r.is_dse()) {
        return Err(Failure::Error(format!(
            "{} is a design-space exploration: resuming a sweep is not supported by this version (run it again)",
            root.display()
        )));
    }
    let grading = baseline.load()?;
    let system = std::sync::Arc::new(system);
    let Started { system: sys, rt } = start(&system, &scenario, false)?;
    let plan: Vec<SlotPlan> = rt.block_on(async {
        let mut out = Vec::new();
        for r in &scenario.test_runs {
            out.push(plan_for(sys.as_ref(), r, root).await);
        }
        out
    });
    let open = plan
        .iter()
        .filter(|p| !matches!(p.state, PlanState::Done))
        .count();
    if open == 0 {
        info!(
            "Nothing to resume: every iteration of {} has ended",
            root.display()
        );
    } else {
        info!(
            "Resuming {} ({open} test(s) still to finish)",
            root.display()
        );
    }
    let runner = Runner::builder(
        sys,
        scenario,
        Layout {
            root: root.to_path_buf(),
            step: None,
        },
    )
    .resume(plan)
    .build();
    let outcome = rt.block_on(runner.run());
    Failure::of_code(crate::ending::conclude(
        &runner,
        outcome,
        &system,
        crate::ending::Conclusion {
            asked,
            tolerance_pct: baseline.tolerance,
            grading,
            resumed: true,
        },
    ))
}
