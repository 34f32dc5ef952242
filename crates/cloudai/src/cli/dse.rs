//! A design-space exploration run: for each sweep test, CloudAI's grid agent visits every combination as step
//! `<test>/0/<step>/` (the same files as any iteration), observes the test's `agent_metrics`, turns them into a
//! reward, appends `trajectory.csv`, and after a real run writes the best step's definition (`<test>.toml`) and a
//! scenario that runs just it (`<test>-best-in-scenario.toml`).

use std::path::Path;
use std::sync::Arc;

use crate::results::Layout;
use crate::runner::{RunOutcome, Runner};
use crate::scenario::dse::{self, METRIC_FAILURE};
use crate::scenario::{Scenario, TestRun};
use crate::systems::System;
use crate::util::fsx::write_atomic;
use crate::util::pytoml::{dumps, PyVal};
use crate::{error, info};

pub(crate) struct Dse<'a> {
    pub sys: Arc<dyn System>,
    pub scenario: Scenario,
    pub root: &'a Path,
}

/// Runs every step of every sweep; the engine's outcome over all steps, and the runner to conclude with.
pub fn run(d: Dse, rt: &tokio::runtime::Runtime) -> (Runner, RunOutcome) {
    let dry_run = d.sys.settings().nothing_runs();
    let mut all = RunOutcome::ended(Vec::new());
    'tests: for run in &d.scenario.test_runs {
        let space = dse::space(run);
        let grid = dse::grid(&space);
        let iter_dir = d.root.join(&run.id).join("0");
        let mut best: Option<(f64, TestRun)> = None;
        for (i, action) in grid.iter().enumerate() {
            let step = i as u64 + 1;
            info!(
                "Running step {step} (of {}) with action {}",
                grid.len(),
                dse::action_repr(action)
            );
            let applied = dse::apply(run, action, step);
            let broken = applied.workload.constraints(&applied.test);
            if !broken.is_empty() {
                // CloudAI's agent skips such a step: nothing runs, no trajectory row
                info!(
                    "Constraint check failed. Skipping step {step}: {}",
                    broken.join("; ")
                );
                continue;
            }
            let scenario = Scenario {
                test_runs: vec![Arc::new(applied.clone())],
                ..d.scenario.clone()
            };
            let layout = Layout {
                root: d.root.to_path_buf(),
                step: Some(step),
            };
            let runner = Runner::new(d.sys.clone(), scenario, layout);
            let outcome = rt.block_on(runner.run());
            all.records.extend(outcome.records);
            all.leftovers.extend(outcome.leftovers);
            if outcome.interrupted {
                all.interrupted = true;
                break 'tests;
            }
            let dir = runner.layout().iteration_dir(&run.id, 0);
            let observation: Vec<f64> = applied
                .test
                .agent_metrics
                .iter()
                .map(|m| {
                    let v = (!dry_run)
                        .then(|| applied.workload.metric(&applied.test, &dir, m))
                        .flatten();
                    v.unwrap_or(METRIC_FAILURE)
                })
                .collect();
            let reward = dse::reward(&applied.test.agent_reward_function, &observation);
            let rounded: Vec<f64> = observation
                .iter()
                .map(|x| (x * 1e4).round() / 1e4)
                .collect();
            info!(
                "Step {step}: Observation: {}, Reward: {reward:.4}",
                dse::floats_repr(&rounded)
            );
            append_trajectory(&iter_dir, step, action, reward, &observation);
            // the first of equal rewards stays best, as Python's max() keeps it
            if best.as_ref().is_none_or(|(r, _)| reward > *r) {
                best = Some((reward, applied));
            }
        }
        if let (false, Some((_, b))) = (dry_run, best) {
            write_best(&iter_dir, run, &b);
        }
    }
    let runner = Runner::new(
        d.sys,
        d.scenario,
        Layout {
            root: d.root.to_path_buf(),
            step: None,
        },
    );
    (runner, all)
}

fn append_trajectory(dir: &Path, step: u64, action: &dse::Action, reward: f64, obs: &[f64]) {
    use std::io::Write;
    let path = dir.join("trajectory.csv");
    let new = !path.exists();
    let line = format!(
        "{}{step},{},{},{}\n",
        if new {
            "step,action,reward,observation\n"
        } else {
            ""
        },
        dse::csv_field(&dse::action_repr(action)),
        crate::config::args::ArgValue::Float(reward).py_repr(),
        dse::csv_field(&dse::floats_repr(obs))
    );
    let r = std::fs::create_dir_all(dir).and_then(|_| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?
            .write_all(line.as_bytes())
    });
    if let Err(e) = r {
        crate::util::fsx::note_failure(&path, &e);
        error!("Cannot write {}: {e}", path.display());
    }
}

/// `<test>.toml`: the best step's test definition; `<test>-best-in-scenario.toml`: a scenario running it alone.
fn write_best(dir: &Path, original: &TestRun, best: &TestRun) {
    let def = crate::scenario::dump::definition(&best.test);
    let PyVal::Table(def_table) = def else { return };
    let cfg = dir.join(format!("{}.toml", original.id));
    info!(
        "Writing best config for {} to {}",
        original.id,
        cfg.display()
    );
    if let Err(e) = write_atomic(&cfg, dumps(&def_table).as_bytes()) {
        error!("Cannot write {}: {e}", cfg.display());
    }
    let get = |k: &str| {
        def_table
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
            .unwrap_or(PyVal::None)
    };
    let mut test = vec![
        ("id".to_string(), PyVal::str(original.id.clone())),
        ("num_nodes".into(), PyVal::Int(best.num_nodes as i64)),
        ("name".into(), get("name")),
        ("description".into(), get("description")),
        ("test_template_name".into(), get("test_template_name")),
        ("cmd_args".into(), get("cmd_args")),
    ];
    if let Some(t) = original.time_limit {
        test.push((
            "time_limit".into(),
            PyVal::str(crate::config::time_limit::format(t)),
        ));
    }
    if !original.nodes.is_empty() {
        test.push(("nodes".into(), PyVal::str_list(&original.nodes)));
    }
    if !best.test.extra_env_vars.is_empty() {
        test.push(("extra_env_vars".into(), get("extra_env_vars")));
    }
    let doc = vec![
        (
            "name".to_string(),
            PyVal::str(format!("{}_best_config", best.test.name)),
        ),
        ("Tests".into(), PyVal::List(vec![PyVal::Table(test)])),
    ];
    let sc = dir.join(format!("{}-best-in-scenario.toml", original.id));
    if let Err(e) = write_atomic(&sc, dumps(&doc).as_bytes()) {
        error!("Cannot write {}: {e}", sc.display());
    }
}
