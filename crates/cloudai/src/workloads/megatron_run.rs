//! Megatron-LM's training scripts (CloudAI's `MegatronRun`): `python <run_script> --<flag> <value> …` on every task
//! of the job, in the test's image. `save` and `load` are paths in the container that must come from
//! `extra_container_mounts` (checked as the test is read, as CloudAI does). Graded on Megatron's iteration lines
//! (`iteration 10/ 100 | … elapsed time per iteration (ms): … | throughput per GPU (TFLOP/s/GPU): … | lm loss: … |
//! number of nan iterations: 0 |`): the training reached its last iteration (or Megatron's own exit), no NaN
//! iteration or loss, and the job exited 0.

use std::path::Path;

use super::kit::{self, TablePage};
use super::{IterationReport, JobOutcome, Launch, Placement, Success, Verdict, Workload};
use crate::config::args::{ArgDefault as D, ArgSpec, ArgType as T, ArgValue, CmdArgs};
use crate::config::decode::{join, Ctx, View};
use crate::config::test::{TemplateSchema, TestDefinition};
use crate::workloads::judge::{Check, CheckKind};

pub(crate) struct MegatronRun;

static ARGS: &[ArgSpec] = &[
    ArgSpec::new("docker_image_url", T::Str, D::Required).single(),
    ArgSpec::new("run_script", T::Path, D::Required).single(),
    ArgSpec::new("global_batch_size", T::Int, D::Int(16)).at_least(1),
    ArgSpec::new("hidden_size", T::Int, D::Int(4096)).at_least(1),
    ArgSpec::new("max_position_embeddings", T::Int, D::Int(4096)).at_least(1),
    ArgSpec::new("num_attention_heads", T::Int, D::Int(32)).at_least(1),
    ArgSpec::new("num_layers", T::Int, D::Int(32)).at_least(1),
    ArgSpec::new("pipeline_model_parallel_size", T::Int, D::Int(1)).at_least(1),
    ArgSpec::new("recompute_activations", T::Str, D::Unset),
    ArgSpec::new("seq_length", T::Int, D::Int(4096)).at_least(1),
    ArgSpec::new("tensor_model_parallel_size", T::Int, D::Int(2)).at_least(1),
    ArgSpec::new("save", T::Path, D::Unset).single(),
    ArgSpec::new("load", T::Path, D::Unset).single(),
    ArgSpec::new("tokenizer_model", T::Path, D::Unset).single(),
    ArgSpec::new(
        "tensorboard_dir",
        T::Str,
        D::Str("/cloudai_run_results/tensorboard"),
    ),
    ArgSpec::new("log_timers_to_tensorboard", T::Str, D::Str("")),
    ArgSpec::new("log_throughput", T::Str, D::Str("")),
    ArgSpec::new("log_memory_to_tensorboard", T::Str, D::Str("")),
    ArgSpec::new("log_interval", T::Int, D::Int(1)).at_least(1),
];

/// Flags without a value unless one is given (`""` or `"true"`: the bare flag; `"false"`: left out).
const BARE: [&str; 4] = [
    "recompute_activations",
    "log_timers_to_tensorboard",
    "log_throughput",
    "log_memory_to_tensorboard",
];

impl TemplateSchema for MegatronRun {
    fn template(&self) -> &'static str {
        "MegatronRun"
    }
    fn args(&self) -> &'static [ArgSpec] {
        ARGS
    }
    /// Other keys are Megatron flags (`--<key-with-dashes>`), bare unless given a value.
    fn extra_args(&self) -> bool {
        true
    }
    /// Megatron's flags use dashes, cloudai's keys underscores (CloudAI refuses dashed keys); `save` and `load`
    /// must be mounted from an existing path of the hosts.
    fn validate(&self, ctx: &mut Ctx, v: &View, args: &CmdArgs) {
        let declared: Vec<&str> = ARGS.iter().map(|a| a.name).collect();
        for k in args
            .values
            .keys()
            .filter(|k| k.contains('-') && !declared.contains(&k.as_str()))
        {
            ctx.err(
                &v.cmd_arg_loc(k),
                &join(&v.field("cmd_args"), k),
                "a dashed key: cloudai writes `--<key>` with underscores turned into dashes",
                Some(format!("write it as {}", k.replace('-', "_"))),
            );
        }
        let mounts: Vec<String> = v
            .get("extra_container_mounts")
            .and_then(|n| match &n.kind {
                crate::config::node::Kind::Array(a) => Some(
                    a.iter()
                        .filter_map(|m| match &m.kind {
                            crate::config::node::Kind::Str(s) => Some(s.clone()),
                            _ => None,
                        })
                        .collect(),
                ),
                _ => None,
            })
            .unwrap_or_default();
        for field in ["load", "save"] {
            let Some(p) = args.str(field) else { continue };
            let path = absolute(&crate::util::shell::expand_vars(p));
            let source = mounts.iter().find_map(|m| {
                let m = crate::util::shell::expand_vars(m);
                match m.split_once(':') {
                    Some((src, dst)) => (dst == path).then(|| src.to_string()),
                    None => (m == path).then_some(m),
                }
            });
            let loc = v.cmd_arg_loc(field);
            let name = join(&v.field("cmd_args"), field);
            match source {
                None => ctx.err(
                    &loc,
                    &name,
                    format!("{path} is not mounted in the container"),
                    Some(format!(
                        "add it to extra_container_mounts, e.g. extra_container_mounts = [\"/host/dir:{path}\"]"
                    )),
                ),
                Some(src) if !Path::new(&src).exists() => ctx.err(
                    &loc,
                    &name,
                    format!("the mount's source {src} does not exist on this machine"),
                    Some("create it, or mount an existing directory".into()),
                ),
                Some(_) => {}
            }
        }
    }
}

/// `p` made absolute against the working directory, as Python's `Path.absolute()` (no `..` resolved).
fn absolute(p: &str) -> String {
    if p.starts_with('/') {
        return crate::config::args::pure_path(p);
    }
    let cwd = std::env::current_dir()
        .map(|d| d.display().to_string())
        .unwrap_or_default();
    crate::config::args::pure_path(&format!("{cwd}/{p}"))
}

impl Workload for MegatronRun {
    /// Megatron reads its ranks from the tasks Slurm starts: Slurm only, as CloudAI.
    fn needs(&self) -> super::Needs {
        super::Needs::Srun
    }

    /// `save` and `load` with their variables expanded, as CloudAI reads them.
    fn derive(&self, test: &mut TestDefinition, _tasks_per_node: Option<u64>) {
        for k in ["save", "load"] {
            if let Some(ArgValue::Path(p)) = test.cmd_args.values.get_mut(k) {
                *p = crate::config::args::pure_path(&crate::util::shell::expand_vars(p));
            }
        }
    }

    fn launch(&self, test: &TestDefinition, _at: &Placement) -> Launch {
        let a = &test.cmd_args;
        let declared: Vec<&str> = ARGS.iter().map(|a| a.name).collect();
        let mut args = vec![absolute(a.str("run_script").unwrap_or(""))];
        for (k, v) in a
            .values
            .iter()
            .filter(|(k, _)| k.as_str() != "docker_image_url" && k.as_str() != "run_script")
        {
            let flag = format!("--{}", k.replace('_', "-"));
            let bare = BARE.contains(&k.as_str()) || !declared.contains(&k.as_str());
            let text = v.py_str();
            // CloudAI writes `<flag> <value>`, an empty value leaving its space
            match (bare, text.as_str()) {
                (true, "false") => {}
                (true, "true") | (_, "") => args.push(format!("{flag} ")),
                _ => args.push(format!("{flag} {}", crate::util::shell::quote(&text))),
            }
        }
        super::push_extra_args(test, &mut args);
        Launch::process("python", args)
            .in_test_image(test)
            .judged_by(Success::OutputContains("elapsed time per iteration (ms)"))
    }

    fn grade(&self, _test: &TestDefinition, dir: &Path, outcome: &JobOutcome) -> Verdict {
        if let Some(c) = outcome.exit_code.filter(|c| *c != 0) {
            return Verdict::fail(format!("the job exited with status {c}"));
        }
        match std::fs::read_to_string(dir.join("stdout.txt")) {
            Ok(text) => verdict(&parse(&text)),
            Err(_) => Verdict::fail("stdout.txt was not created: the job wrote no output"),
        }
    }

    fn metric(&self, _test: &TestDefinition, dir: &Path, name: &str) -> Option<f64> {
        let out = parse(&std::fs::read_to_string(dir.join("stdout.txt")).ok()?);
        let last = out.last_ten();
        let mean = |f: fn(&Iteration) -> Option<f64>| {
            let v: Vec<f64> = last.iter().filter_map(f).collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        match name {
            "default" | "iteration-time" => mean(|i| Some(i.time_ms)),
            "tflops-per-gpu" => mean(|i| i.tflops),
            _ => None,
        }
    }

    fn report(&self, _test: &TestDefinition, dir: &Path, title: &str) -> Option<IterationReport> {
        let out = parse(&std::fs::read_to_string(dir.join("stdout.txt")).ok()?);
        let v = verdict(&out);
        let last = out.last_ten();
        let stats = |xs: Vec<f64>| -> Vec<String> {
            if xs.is_empty() {
                return vec![String::new(); 5];
            }
            let n = xs.len() as f64;
            let mean = xs.iter().sum::<f64>() / n;
            let mut sorted = xs.clone();
            sorted.sort_by(f64::total_cmp);
            let median = if sorted.len() % 2 == 1 {
                sorted[sorted.len() / 2]
            } else {
                (sorted[sorted.len() / 2 - 1] + sorted[sorted.len() / 2]) / 2.0
            };
            let std = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
            [
                mean,
                median,
                sorted[0],
                sorted[sorted.len() - 1],
                if xs.len() > 1 { std } else { 0.0 },
            ]
            .map(|x| kit::csv_num(Some(x)))
            .to_vec()
        };
        let mut rows = Vec::new();
        if last.is_empty() {
            rows.push(vec![
                "error: No iteration timing lines were found.".to_string(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
            ]);
        } else {
            let mut t = vec!["iteration_time_ms".to_string()];
            t.extend(stats(last.iter().map(|i| i.time_ms).collect()));
            let mut f = vec!["tflops_per_gpu".to_string()];
            let tf: Vec<f64> = last.iter().filter_map(|i| i.tflops).collect();
            f.extend(if tf.is_empty() {
                stats(vec![0.0])
            } else {
                stats(tf)
            });
            rows.extend([t, f]);
        }
        let table = kit::Table {
            header: vec!["metric_type", "avg", "median", "min", "max", "std"],
            rows,
        };
        let page = TablePage {
            title,
            verdict: &v.status_line(),
            passed: v.passed,
            cards: vec![(
                "iterations".into(),
                match (out.iterations.last(), out.total) {
                    (Some(i), Some(t)) => format!("{}/{t}", i.number),
                    _ => "none".into(),
                },
            )],
            charts: serde_json::json!({}),
            show: Vec::new(),
            sections: vec![table.section("Last ten iterations")],
        }
        .render();
        Some(IterationReport {
            files: vec![
                ("megatron_run_report.csv".into(), table.csv()),
                ("megatron_run_report.html".into(), page),
            ],
            verdict: Some(v),
            ..Default::default()
        })
    }
}

/// One logged iteration.
#[derive(Clone, Debug, PartialEq)]
pub struct Iteration {
    pub number: u64,
    pub time_ms: f64,
    pub tflops: Option<f64>,
    pub loss: Option<f64>,
    pub nan_iterations: u64,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Output {
    pub iterations: Vec<Iteration>,
    /// The training's iteration count (`iteration 10/ 100`).
    pub total: Option<u64>,
    /// Megatron stopped on its own exit condition (`exiting program at iteration …`, `… after … minutes`).
    pub exited_early: bool,
    pub validation: bool,
    pub errors: Vec<(usize, String)>,
}

impl Output {
    /// The last ten iterations (CloudAI's statistics leave the warm-up out this way).
    pub fn last_ten(&self) -> &[Iteration] {
        &self.iterations[self.iterations.len().saturating_sub(10)..]
    }
}

/// The number after `key` (up to `|` or `/`: Primus prints `13100.0/13240.9`).
fn value(line: &str, key: &str) -> Option<f64> {
    let at = line.find(key)? + key.len();
    line[at..]
        .trim_start()
        .split(['|', '/', ' '])
        .next()?
        .parse()
        .ok()
}

/// Reads a Megatron training log.
pub fn parse(text: &str) -> Output {
    let mut out = Output::default();
    let mut tracebacks = kit::Tracebacks::default();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if tracebacks.feed(n, line, &mut out.errors) {
            continue;
        }
        if line.contains("elapsed time per iteration (ms)") {
            let Some(at) = line.find("iteration ") else {
                continue;
            };
            let mut counter = line[at + 10..].split('|').next().unwrap_or("").split('/');
            let number = counter.next().and_then(|x| x.trim().parse().ok());
            out.total = counter
                .next()
                .and_then(|x| x.trim().parse().ok())
                .or(out.total);
            let (Some(number), Some(time_ms)) =
                (number, value(line, "elapsed time per iteration (ms):"))
            else {
                continue;
            };
            let loss = line
                .find("lm loss:")
                .and_then(|at| line[at + 8..].split('|').next())
                .and_then(|x| x.trim().parse::<f64>().ok());
            out.iterations.push(Iteration {
                number,
                time_ms,
                tflops: value(line, "throughput per GPU (TFLOP/s/GPU):"),
                loss,
                nan_iterations: value(line, "number of nan iterations:").map_or(0, |x| x as u64),
            });
        } else if line.contains("validation loss at iteration") {
            out.validation = true;
        } else if line.contains("exiting program at iteration")
            || line.contains("exiting program after")
        {
            out.exited_early = true;
        } else if super::launcher_failure(line) {
            out.errors.push((n, line.trim().to_string()));
        }
    }
    out
}

pub fn verdict(out: &Output) -> Verdict {
    if let Some((n, l)) = out.errors.first() {
        return Verdict::fail(format!("Megatron failed (stdout.txt line {n}): {l}"));
    }
    let fail = |kind: CheckKind, why: String| {
        let mut v = Verdict::fail(why.clone());
        v.checks.push(Check::fail(kind, why));
        v
    };
    let Some(last) = out.iterations.last() else {
        if out.validation {
            return Verdict::pass_with("validation loss reported");
        }
        return Verdict::fail(
            "no iteration line (… elapsed time per iteration (ms): …) in stdout.txt: the training did not log an \
             iteration",
        );
    };
    if let Some(i) = out
        .iterations
        .iter()
        .find(|i| i.nan_iterations > 0 || i.loss.is_some_and(|l| !l.is_finite()))
    {
        return fail(
            CheckKind::Wrong,
            format!(
                "iteration {}: NaN in the training (lm loss or nan iterations)",
                i.number
            ),
        );
    }
    if let Some(t) = out.total.filter(|t| last.number < *t && !out.exited_early) {
        return fail(
            CheckKind::Table,
            format!("the training stopped at iteration {} of {t}: it did not finish (no exit of Megatron's own)", last.number),
        );
    }
    let last = out.last_ten();
    let time = last.iter().map(|i| i.time_ms).sum::<f64>() / last.len() as f64;
    let tf: Vec<f64> = last.iter().filter_map(|i| i.tflops).collect();
    let mut detail = format!(
        "{} iterations logged; {time:.1} ms per iteration",
        out.iterations.len()
    );
    if !tf.is_empty() {
        detail.push_str(&format!(
            ", {:.1} TFLOP/s per GPU",
            tf.iter().sum::<f64>() / tf.len() as f64
        ));
    }
    Verdict::pass_with(detail)
}
