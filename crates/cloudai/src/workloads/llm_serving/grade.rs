//! A serving template as a workload: its schema, job, grade, agent metrics and report — the same for every
//! framework but for its fields, its flavour, its file names and the throughput it reports.

use std::path::Path;

use super::result::{self, BenchResult};
use super::{Args, Flavor, Serving};
use crate::config::args::{ArgSpec, ArgValue, CmdArgs};
use crate::config::decode::{Ctx, View};
use crate::config::test::{TemplateSchema, TestDefinition};
use crate::workloads::{
    kit, IterationReport, JobOutcome, Launch, Needs, Placement, Verdict, Workload,
};

/// What differs between the serving templates.
pub(crate) struct Template {
    /// The template's name in test files.
    pub name: &'static str,
    pub args: &'static [ArgSpec],
    /// Fields of the test definition beside the common ones (`bench_cmd_args`, `custom_bash`, …).
    pub fields: &'static [ArgSpec],
    /// The framework's own placement rules, after the shared ones.
    pub check: fn(&Serving) -> Vec<String>,
    pub flavor: &'static dyn Flavor,
    /// File-name prefix (`vllm`: `vllm-bench.log`, `vllm.csv`).
    pub slug: &'static str,
    /// The client's result file, in the iteration's directory.
    pub result: &'static str,
    /// The evaluation's JSON results, when it writes one.
    pub eval_json: Option<&'static str>,
    /// The evaluation's log reads `Score:` as well as `Accuracy:`.
    pub eval_score_too: bool,
    /// The record's key for the throughput the template reports (its `default` agent metric).
    pub throughput_key: &'static str,
    /// The client, as the report's heading names it.
    pub client: &'static str,
}

/// The test's `bench_cmd_args` table.
pub(crate) fn bench_args(test: &TestDefinition) -> &Args {
    static EMPTY: std::sync::LazyLock<Args> = std::sync::LazyLock::new(Args::new);
    match test.template_fields.get("bench_cmd_args") {
        Some(ArgValue::Table(t)) => t,
        _ => &EMPTY,
    }
}

/// The client's options the template does not declare (`bench_cmd_args` keys beyond `declared`), as CloudAI
/// appends them: `--key value`, in the table's order.
pub(crate) fn bench_extras(test: &TestDefinition, declared: &[ArgSpec]) -> Vec<String> {
    bench_args(test)
        .iter()
        .filter(|(k, _)| !declared.iter().any(|d| d.name == k.as_str()))
        .map(|(k, v)| format!("--{} {}", k.replace('_', "-"), v.py_str()))
        .collect()
}

impl Template {
    pub(crate) fn serving<'a>(&self, test: &'a TestDefinition, at: &Placement) -> Serving<'a> {
        Serving::new(self.flavor, self.slug, test, at)
    }

    fn bench_log(&self) -> String {
        format!("{}-bench.log", self.slug)
    }

    fn read(&self, dir: &Path) -> Option<BenchResult> {
        result::read(&dir.join(self.result))
    }

    fn evaluated(test: &TestDefinition) -> bool {
        test.template_fields.contains_key("semantic_eval_cmd_args")
    }

    /// The evaluation's accuracy, when it ran and reported one.
    pub(crate) fn accuracy(&self, dir: &Path) -> Option<f64> {
        result::accuracy(
            self.eval_json.map(|f| dir.join(f)).as_deref(),
            &dir.join(format!("{}-semantic-eval.log", self.slug)),
            self.eval_score_too,
        )
    }

    fn asked(&self, test: &TestDefinition, dir: &Path) -> result::Asked {
        let b = bench_args(test);
        let n = |k: &str| b.get(k).and_then(ArgValue::as_int).map(|v| v as u64);
        result::Asked {
            model: test.cmd_args.str("model").unwrap_or_default().to_string(),
            num_prompts: n("num_prompts"),
            max_concurrency: n("max_concurrency"),
            throughput_key: self.throughput_key,
            accuracy: Self::evaluated(test).then(|| self.accuracy(dir)),
        }
    }

    fn verdict(&self, test: &TestDefinition, dir: &Path, r: Option<&BenchResult>) -> Verdict {
        if let Some(r) = r {
            return result::verdict(r, &self.asked(test, dir));
        }
        let log = std::fs::read_to_string(dir.join(self.bench_log())).unwrap_or_default();
        let why = if log.contains("Serving Benchmark Result") {
            "the client printed its result but wrote no"
        } else if log.is_empty() {
            "the client did not run (was the server healthy?); no"
        } else {
            "the client did not finish; no"
        };
        Verdict::fail(format!("{why} {} under {}", self.result, dir.display()))
    }

    fn grade_in(&self, test: &TestDefinition, dir: &Path) -> Verdict {
        self.verdict(test, dir, self.read(dir).as_ref())
    }

    /// `default`/`throughput`: the template's throughput; `tps-per-user`: per request slot; `tps-per-gpu`: per GPU
    /// the servers used (the node count from the iteration's `test-run.toml`); `accuracy`: the evaluation's, when
    /// it ran.
    fn metric_in(&self, test: &TestDefinition, dir: &Path, name: &str) -> Option<f64> {
        if name == "accuracy" {
            return Self::evaluated(test).then(|| self.accuracy(dir)).flatten();
        }
        let r = self.read(dir)?;
        let tput = r.num(self.throughput_key)?;
        match name {
            "default" | "throughput" => Some(tput),
            "tps-per-user" => r
                .num("max_concurrency")
                .filter(|c| *c > 0.0)
                .map(|c| tput / c),
            "tps-per-gpu" => {
                let nodes = kit::iteration_nodes(dir);
                let at = Placement {
                    nodes,
                    gpus_per_node: None,
                    tasks_per_node: None,
                    time_limit: None,
                    scheduler: "",
                };
                let s = self.serving(test, &at);
                let per_node = s.gpu_ids().len() as u64;
                let gpus = match s.prefill() {
                    Some(p) if nodes > 1 => {
                        if p.contains_key("gpu_ids") && s.decode().contains_key("gpu_ids") {
                            (s.role_gpus("prefill").len() + s.role_gpus("decode").len()) as u64
                        } else {
                            per_node * nodes
                        }
                    }
                    _ => per_node,
                };
                (gpus > 0).then(|| tput / gpus as f64)
            }
            _ => None,
        }
    }

    fn report_in(&self, test: &TestDefinition, dir: &Path, title: &str) -> Option<IterationReport> {
        let r = self.read(dir);
        if r.is_none() && !dir.join(self.bench_log()).exists() {
            return None;
        }
        let v = self.verdict(test, dir, r.as_ref());
        let table = result::table(r.as_ref(), self.accuracy(dir));
        let page = kit::TablePage {
            title,
            verdict: &v.status_line(),
            passed: v.passed,
            cards: vec![("metrics".into(), table.rows.len().to_string())],
            charts: serde_json::json!({}),
            show: Vec::new(),
            sections: vec![table.section(self.client)],
        }
        .render();
        Some(IterationReport {
            files: vec![
                (format!("{}.csv", self.slug), table.csv()),
                (format!("{}.html", self.slug), page),
            ],
            verdict: Some(v),
            ..Default::default()
        })
    }
}

impl TemplateSchema for Template {
    fn template(&self) -> &'static str {
        self.name
    }
    fn args(&self) -> &'static [ArgSpec] {
        self.args
    }
    fn fields(&self) -> &'static [ArgSpec] {
        self.fields
    }
    fn validate(&self, ctx: &mut Ctx, v: &View, args: &CmdArgs) {
        super::validate(ctx, v, args);
    }
}

/// Several job steps of a generated script: Slurm only, as CloudAI.
impl Workload for Template {
    fn needs(&self) -> Needs {
        Needs::Srun
    }

    fn check(&self, test: &TestDefinition, at: &Placement) -> Vec<String> {
        let s = self.serving(test, at);
        let out = s.check();
        if out.is_empty() {
            (self.check)(&s)
        } else {
            out
        }
    }

    fn launch(&self, test: &TestDefinition, at: &Placement) -> Launch {
        super::launch(&self.serving(test, at))
    }

    fn grade(&self, test: &TestDefinition, dir: &Path, _outcome: &JobOutcome) -> Verdict {
        self.grade_in(test, dir)
    }

    fn metric(&self, test: &TestDefinition, dir: &Path, name: &str) -> Option<f64> {
        self.metric_in(test, dir, name)
    }

    fn report(&self, test: &TestDefinition, dir: &Path, title: &str) -> Option<IterationReport> {
        self.report_in(test, dir, title)
    }
}
