//! NeMo-Run (CloudAI's `NeMoRun`): a NeMo 2.0 training recipe started by CloudAI's launcher `cloudai_nemorun.py`
//! with its `cmd_args` flattened into `trainer.max_steps=…` overrides. The models are CloudAI's (nested tables
//! that take extra keys), the derived values are CloudAI's (`trainer.num_nodes`, `trainer.devices`,
//! `data.num_train_samples`), as are the environment it adds and the grade (the trainer's "max_steps=… reached"
//! in stderr.txt). The report reads the trainer's per-step lines (`train_step_timing in s`, TFLOPS when logged).

use std::path::Path;

use super::kit::mean;
use super::{IterationReport, JobOutcome, Launch, Placement, Script, Success, Verdict, Workload};
use crate::config::args::{ArgDefault as D, ArgSpec, ArgType as T, ArgValue};
use crate::config::test::{TemplateSchema, TestDefinition};
use crate::html::{chart, esc, page};
use crate::util::pytoml::py_float;
use crate::util::shell::quote;

pub struct NeMoRun;

static PLUGIN: &[ArgSpec] = &[
    ArgSpec::new("fp8", T::Str, D::Unset),
    ArgSpec::new("fp8_margin", T::Int, D::Unset).at_least(0),
    ArgSpec::new("fp8_amax_history_len", T::Int, D::Unset).at_least(1),
    ArgSpec::new("fp8_amax_compute_algo", T::Str, D::Unset),
    ArgSpec::new("fp8_wgrad", T::Bool, D::Unset),
    ArgSpec::new("fp8_params", T::Bool, D::Unset),
    ArgSpec::new("grad_reduce_in_fp32", T::Bool, D::Unset),
];
static STRATEGY: &[ArgSpec] = &[
    ArgSpec::new("tensor_model_parallel_size", T::Int, D::Int(1)).at_least(1),
    ArgSpec::new("pipeline_model_parallel_size", T::Int, D::Int(1)).at_least(1),
    ArgSpec::new("context_parallel_size", T::Int, D::Int(2)).at_least(1),
    ArgSpec::new("virtual_pipeline_model_parallel_size", T::Int, D::Unset).at_least(1),
];
static TRAINER: &[ArgSpec] = &[
    ArgSpec::new("max_steps", T::Int, D::Int(100)).at_least(1),
    ArgSpec::new("val_check_interval", T::Num, D::Int(1000)),
    // sweeps over node counts are the scenario's num_nodes
    ArgSpec::new("num_nodes", T::Int, D::Unset)
        .single()
        .at_least(1),
    ArgSpec::new("strategy", T::Model(STRATEGY, true), D::Table),
    ArgSpec::new("plugins", T::Model(PLUGIN, true), D::Unset),
    ArgSpec::new("callbacks", T::Str, D::Unset),
    ArgSpec::new("log_every_n_steps", T::Int, D::Int(1))
        .single()
        .at_least(1),
];
static CKPT: &[ArgSpec] = &[
    ArgSpec::new("save_on_train_epoch_end", T::Bool, D::Unset).single(),
    ArgSpec::new("save_last", T::Bool, D::Unset).single(),
];
static TENSORBOARD: &[ArgSpec] = &[
    ArgSpec::new("save_dir", T::Str, D::Str("logs")).single(),
    ArgSpec::new("name", T::Str, D::Str("default")).single(),
];
static LOG: &[ArgSpec] = &[
    ArgSpec::new("ckpt", T::Model(CKPT, true), D::Unset),
    ArgSpec::new("tensorboard", T::Model(TENSORBOARD, true), D::Unset),
];
static DATA: &[ArgSpec] = &[
    ArgSpec::new("seq_length", T::Int, D::Int(8192)).at_least(1),
    ArgSpec::new("micro_batch_size", T::Int, D::Int(1)).at_least(1),
    ArgSpec::new("global_batch_size", T::Int, D::Int(1)).at_least(1),
    ArgSpec::new("num_train_samples", T::Int, D::Int(1000))
        .single()
        .at_least(1),
];
static OPTIM_CONFIG: &[ArgSpec] = &[ArgSpec::new(
    "use_precision_aware_optimizer",
    T::Bool,
    D::Unset,
)];
static OPTIM: &[ArgSpec] = &[ArgSpec::new(
    "config",
    T::Model(OPTIM_CONFIG, true),
    D::Unset,
)];
static ARGS: &[ArgSpec] = &[
    ArgSpec::new("docker_image_url", T::Str, D::Required).single(),
    ArgSpec::new("task", T::Str, D::Required).single(),
    ArgSpec::new("recipe_name", T::Str, D::Required).single(),
    ArgSpec::new("num_layers", T::Int, D::Unset)
        .single()
        .at_least(1),
    ArgSpec::new("trainer", T::Model(TRAINER, true), D::Table),
    ArgSpec::new("log", T::Model(LOG, true), D::Table),
    ArgSpec::new("data", T::Model(DATA, true), D::Table),
    ArgSpec::new("optim", T::Model(OPTIM, true), D::Table),
];

/// `cmd_args` that configure the launch rather than the recipe.
const NOT_OVERRIDES: &[&str] = &["docker_image_url", "num_layers", "task", "recipe_name"];

pub(crate) const SCRIPT: Script = Script {
    name: "cloudai_nemorun.py",
    in_cloudai: "src/cloudai/workloads/nemo_run/cloudai_nemorun.py",
    env: crate::config::test::NEMORUN_SCRIPT_ENV,
    in_place: false,
};
pub(crate) const CSV_FILE: &str = "cloudai_nemorun_step_timing.csv";
pub(crate) const HTML_FILE: &str = "cloudai_nemorun_bokeh_report.html";
pub(crate) const SUMMARY_FILE: &str = "report.txt";

impl TemplateSchema for NeMoRun {
    fn template(&self) -> &'static str {
        "NeMoRun"
    }
    fn args(&self) -> &'static [ArgSpec] {
        ARGS
    }
}

/// Sets `key`, in place when present, else where the model declares it (CloudAI's dump lists every declared field,
/// set or not, in declaration order).
fn put_declared(
    t: &mut indexmap::IndexMap<String, ArgValue>,
    specs: &[ArgSpec],
    key: &str,
    v: ArgValue,
) {
    if let Some(slot) = t.get_mut(key) {
        *slot = v;
        return;
    }
    let rank = |k: &str| specs.iter().position(|s| s.name == k);
    let target = rank(key);
    let at = t
        .keys()
        .take_while(|k| rank(k).is_some_and(|p| Some(p) < target))
        .count();
    t.shift_insert(at, key.to_string(), v);
}

fn env_is(test: &TestDefinition, name: &str, value: &str) -> bool {
    test.extra_env_vars
        .get(name)
        .is_some_and(|v| v.py_str() == value)
}

impl Workload for NeMoRun {
    /// NeMo-Run's recipe launches its tasks with srun.
    fn needs(&self) -> super::Needs {
        super::Needs::Srun
    }

    fn script(&self) -> Option<Script> {
        Some(SCRIPT)
    }

    /// `data.num_train_samples` is `global_batch_size × max_steps` when both are single values, else unset.
    fn derive(&self, test: &mut TestDefinition, _tasks_per_node: Option<u64>) {
        let gbs = test
            .cmd_args
            .at("data.global_batch_size")
            .and_then(ArgValue::as_int);
        let steps = test
            .cmd_args
            .at("trainer.max_steps")
            .and_then(ArgValue::as_int);
        if let Some(data) = test.cmd_args.table_at_mut("data") {
            match (gbs, steps) {
                (Some(g), Some(s)) => {
                    data.insert("num_train_samples".into(), ArgValue::Int(g * s));
                }
                _ => {
                    data.shift_remove("num_train_samples");
                }
            }
        }
    }

    fn launch(&self, test: &TestDefinition, at: &Placement) -> Launch {
        let mut values = test.cmd_args.values.clone();
        for k in NOT_OVERRIDES {
            values.shift_remove(*k);
        }
        if let Some(trainer) = crate::config::args::table_at_mut(&mut values, "trainer") {
            // the run's real node count and the system's GPUs per node win over what the test says
            put_declared(
                trainer,
                TRAINER,
                "num_nodes",
                ArgValue::Int(at.nodes as i64),
            );
            if let Some(g) = at.gpus_per_node {
                trainer.insert("devices".into(), ArgValue::Int(g as i64));
            }
        }
        let recipe = test.cmd_args.str("recipe_name").unwrap_or("");
        let mut args = vec![
            format!("/cloudai_install/{}", SCRIPT.name),
            "--factory".into(),
            quote(recipe).into_owned(),
            "-y".into(),
        ];
        args.extend(
            crate::config::args::leaves(&values)
                .into_iter()
                .map(|(k, v)| quote(&format!("{k}={}", v.py_str())).into_owned()),
        );
        for (k, v) in &test.extra_cmd_args {
            args.push(if v.is_empty() {
                k.clone()
            } else {
                format!("{k}={v}")
            });
        }
        let mut program = "python".to_string();
        if env_is(test, "ENABLE_NUMA_CONTROL", "1") {
            let d = if env_is(test, "CLOUDAI_GPU_TYPE", "gb200") {
                2
            } else {
                4
            };
            program = format!(
                "numactl --cpunodebind=$((SLURM_LOCALID/{d})) --membind=$((SLURM_LOCALID/{d})) python"
            );
        }
        let mut env = vec![
            (
                "CLOUDAI_NEMO_TASK".to_string(),
                test.cmd_args.str("task").unwrap_or("").to_string(),
            ),
            ("CLOUDAI_NEMO_RECIPE".to_string(), recipe.to_string()),
        ];
        let pp = match test
            .cmd_args
            .at("trainer.strategy.pipeline_model_parallel_size")
        {
            Some(ArgValue::List(l)) => l.first().and_then(ArgValue::as_int),
            Some(v) => v.as_int(),
            None => None,
        };
        if pp.unwrap_or(1) > 1 {
            env.push(("NCCL_P2P_NET_CHUNKSIZE".into(), "2097152".into()));
        }
        if env_is(test, "CLOUDAI_ENABLE_FSDP", "1") {
            // NeMo-Run does not support FSDP with TP communication overlap
            env.push(("CLOUDAI_DISABLE_TP_COMM_OVERLAP".into(), "1".into()));
        }
        Launch {
            env,
            env_default: vec![("NEMO_LOG_MEMORY_USAGE".into(), "1".into())],
            gpus_per_rank: 1,
            install_mounts: vec!["/cloudai_workspace"],
            ..Launch::process(program, args)
        }
        .in_test_image(test)
        .judged_by(Success::ExitStatus)
    }

    /// CloudAI's NeMo-Run metrics: `default` and `step-time`, the mean step time (s).
    fn metric(&self, _test: &TestDefinition, dir: &Path, name: &str) -> Option<f64> {
        let log = parse(&std::fs::read_to_string(dir.join("stdout.txt")).ok()?);
        match name {
            "default" | "step-time" => mean(&log.window()),
            _ => None,
        }
    }

    fn grade(&self, _test: &TestDefinition, dir: &Path, outcome: &JobOutcome) -> Verdict {
        verdict(dir, outcome)
    }

    fn report(&self, _test: &TestDefinition, dir: &Path, title: &str) -> Option<IterationReport> {
        let log = parse(&std::fs::read_to_string(dir.join("stdout.txt")).ok()?);
        let window = log.window();
        let v = verdict(dir, &JobOutcome::default());
        if window.is_empty() {
            // nothing to chart, but a grade all the same
            return Some(IterationReport {
                verdict: Some(v),
                ..IterationReport::default()
            });
        }
        let mut sorted = window.clone();
        sorted.sort_by(f64::total_cmp);
        let median = if sorted.len() % 2 == 1 {
            sorted[sorted.len() / 2]
        } else {
            (sorted[sorted.len() / 2 - 1] + sorted[sorted.len() / 2]) / 2.0
        };
        let avg = mean(&window).unwrap_or(f64::NAN);
        let (min, max) = (sorted[0], sorted[sorted.len() - 1]);
        let mut metrics = serde_json::Map::new();
        metrics.insert("step_time_avg_s".into(), avg.into());
        metrics.insert("step_time_median_s".into(), median.into());
        metrics.insert("steps".into(), log.steps.len().into());
        if let Some(t) = mean(
            &log.steps
                .iter()
                .filter_map(|s| s.tflops)
                .collect::<Vec<_>>(),
        ) {
            metrics.insert("tflops_per_gpu".into(), t.into());
        }
        let summary = format!(
            "Average: {}\nMedian: {}\nMin: {}\nMax: {}\n",
            py_float(avg),
            py_float(median),
            py_float(min),
            py_float(max)
        );
        let mut csv =
            String::from("global_step,train_step_timing_s,tflops_per_gpu,reduced_train_loss\n");
        for s in &log.steps {
            let o = |v: Option<f64>| v.map(py_float).unwrap_or_default();
            csv.push_str(&format!(
                "{},{},{},{}\n",
                s.global_step.map(|g| g.to_string()).unwrap_or_default(),
                py_float(s.time_s),
                o(s.tflops),
                o(s.loss)
            ));
        }
        let status = v.status_line();
        Some(IterationReport {
            files: vec![
                (SUMMARY_FILE.into(), summary),
                (CSV_FILE.into(), csv),
                (
                    HTML_FILE.into(),
                    html(title, &log, &status, v.passed, avg, median),
                ),
            ],
            metrics,
            verdict: Some(v),
            ..IterationReport::default()
        })
    }
}

/// One trainer step line: `… | global_step: 17 | reduced_train_loss: 11.03 | train_step_timing in s: 12.64 | …`.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub global_step: Option<u64>,
    pub time_s: f64,
    pub loss: Option<f64>,
    pub tflops: Option<f64>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Log {
    pub steps: Vec<Step>,
}

impl Log {
    /// The step times CloudAI averages: global steps 80–100 when there are at least 20 of them, else every step
    /// but the first (warm-up).
    pub fn window(&self) -> Vec<f64> {
        let late: Vec<f64> = self
            .steps
            .iter()
            .filter(|s| s.global_step.is_some_and(|g| (80..=100).contains(&g)))
            .map(|s| s.time_s)
            .collect();
        if late.len() >= 20 {
            late
        } else {
            self.steps.iter().skip(1).map(|s| s.time_s).collect()
        }
    }
}

/// The number after `key` (`key 12.64 …`, `key: 12.64`), up to the next blank or `|`.
fn after(line: &str, key: &str) -> Option<f64> {
    let rest = line.split_once(key)?.1.trim_start_matches([':', ' ', '=']);
    rest.split(|c: char| c.is_whitespace() || c == '|' || c == ',')
        .next()?
        .parse()
        .ok()
}

pub fn parse(text: &str) -> Log {
    let mut log = Log::default();
    for line in text.lines() {
        let Some(time_s) = after(line, "train_step_timing in s") else {
            continue;
        };
        log.steps.push(Step {
            global_step: after(line, "global_step").map(|g| g as u64),
            time_s,
            loss: after(line, "reduced_train_loss"),
            tflops: after(line, "TFLOPS_per_GPU").or_else(|| after(line, "tflops_per_sec_per_gpu")),
        });
    }
    log
}

fn verdict(dir: &Path, outcome: &JobOutcome) -> Verdict {
    let stderr = dir.join("stderr.txt");
    let Ok(content) = std::fs::read_to_string(&stderr) else {
        return Verdict::fail(format!(
            "stderr.txt file not found in the specified output directory {}. This file is expected to be created \
             as part of the NeMo training job. Please ensure the job was submitted and executed properly. You can \
             try re-running the job manually and verify that {} is created with the expected output.",
            dir.display(),
            stderr.display()
        ));
    };
    if content.contains("max_steps=") && content.contains("reached") {
        return match outcome.exit_code.filter(|c| *c != 0) {
            Some(c) => Verdict::fail(format!(
                "training reached max_steps but the job exited with status {c}; see {}",
                stderr.display()
            )),
            None => Verdict::pass(),
        };
    }
    let missing: Vec<&str> = [("max_steps=", "'max_steps='"), ("reached", "'reached'")]
        .iter()
        .filter(|(k, _)| !content.contains(k))
        .map(|(_, q)| *q)
        .collect();
    // the last error line the job printed says more than the missing keywords
    let last = content
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.contains("Error") || l.contains("error:") || l.contains("Traceback"))
        .map_or(String::new(), |l| format!(" Last error: {l}"));
    Verdict::fail(format!(
        "Missing success indicators in {}: {}. These keywords are expected to be present in stderr.txt when the \
         NeMo training job completes successfully; the training did not run to completion or its logger output \
         was suppressed.{last}",
        stderr.display(),
        missing.join(", ")
    ))
}

fn html(title: &str, log: &Log, verdict: &str, passed: bool, avg: f64, median: f64) -> String {
    let pts: Vec<(u64, f64)> = log
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.global_step.unwrap_or(i as u64), s.time_s))
        .collect();
    let spec = super::kit::step_time_chart(&pts, "global step");
    let tflops = mean(
        &log.steps
            .iter()
            .filter_map(|s| s.tflops)
            .collect::<Vec<_>>(),
    )
    .map_or("-".to_string(), |t| format!("{t:.1}"));
    let body = format!(
        "<h1>{}</h1>\n<p class=\"{}\">{}</p>\n<div class=\"cards\">\
         <div class=\"card\"><span class=\"muted\">step time (avg / median)</span><b>{avg:.3} s / {median:.3} s</b></div>\
         <div class=\"card\"><span class=\"muted\">steps logged</span><b>{}</b></div>\
         <div class=\"card\"><span class=\"muted\">TFLOPS per GPU</span><b>{}</b></div></div>\n{}\n",
        esc(title),
        if passed { "pass" } else { "fail" },
        esc(verdict),
        log.steps.len(),
        esc(&tflops),
        chart("steps"),
    );
    page(
        title,
        &body,
        &serde_json::json!({ "charts": { "steps": spec } }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_lines_and_the_window() {
        let line = |g: u64, t: f64| {
            format!(
                "Training epoch 0, iteration {g}/99 | lr: 2.699e-06 | global_batch_size: 128 | global_step: {g} | \
                 reduced_train_loss: 11.03 | train_step_timing in s: {t} | TFLOPS_per_GPU: 401.5 | consumed_samples: 2304"
            )
        };
        let text: Vec<String> = (0..5).map(|g| line(g, 10.0 + g as f64)).collect();
        let log = parse(&text.join("\n"));
        assert_eq!(log.steps.len(), 5);
        assert_eq!(log.steps[2].global_step, Some(2));
        assert_eq!(log.steps[2].loss, Some(11.03));
        assert_eq!(log.steps[2].tflops, Some(401.5));
        // fewer than 20 steps in 80..=100: all but the first
        assert_eq!(log.window(), vec![11.0, 12.0, 13.0, 14.0]);
        let text: Vec<String> = (0..=100)
            .map(|g| line(g, if g >= 80 { 2.0 } else { 9.0 }))
            .collect();
        let w = parse(&text.join("\n")).window();
        assert_eq!((w.len(), mean(&w)), (21, Some(2.0)));
    }
}
