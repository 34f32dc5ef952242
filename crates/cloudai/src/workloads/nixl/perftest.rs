//! CloudAI's `NixlPerftest`: kvbench's matrix generator writes the traffic matrices of a prefill/decode split
//! (one task), then `sequential-ct-perftest` runs them on every task of the job and writes `results.json`. CloudAI
//! passes every run; here the results must be complete: every iteration the run announced, each with a result per
//! traffic pattern, and the run's end recorded.

use std::path::Path;

use super::{word, ArgSpec, ArgValue, D, T};
use crate::config::args::CmdArgs;
use crate::config::decode::{join, Ctx, View};
use crate::config::test::{TemplateSchema, TestDefinition};
use crate::workloads::judge::{Check, CheckKind};
use crate::workloads::kit;
use crate::workloads::launch::{Step, RUN_DIR};
use crate::workloads::{IterationReport, JobOutcome, Launch, Placement, Verdict, Workload};

pub(crate) struct NixlPerftest;

static MATGEN: &[ArgSpec] = &[ArgSpec::new("ppn", T::Int, D::Unset).single().at_least(1)];

static ARGS: &[ArgSpec] = &[
    super::DOCKER_IMAGE,
    super::ETCD_PATH,
    super::WAIT_ETCD_FOR,
    super::ETCD_IMAGE,
    ArgSpec::new("subtest", T::Enum(&["sequential-ct-perftest"]), D::Required).single(),
    ArgSpec::new(
        "perftest_script",
        T::Str,
        D::Str("/workspace/nixl/benchmark/kvbench/main.py"),
    )
    .single(),
    ArgSpec::new(
        "matgen_script",
        T::Str,
        D::Str("/workspace/nixl/benchmark/kvbench/test/inference_workload_matgen.py"),
    )
    .single(),
    ArgSpec::new("python_executable", T::Str, D::Str("python")).single(),
    ArgSpec::new("num_user_requests", T::Int, D::Required).at_least(1),
    ArgSpec::new("batch_size", T::Int, D::Required).at_least(1),
    ArgSpec::new("num_prefill_nodes", T::Int, D::Required).at_least(1),
    ArgSpec::new("num_decode_nodes", T::Int, D::Required).at_least(1),
    ArgSpec::new("isl_mean", T::Int, D::Unset).at_least(1),
    ArgSpec::new("isl_scale", T::Int, D::Unset).at_least(0),
    ArgSpec::new("prefill_tp", T::Int, D::Int(1)).at_least(1),
    ArgSpec::new("prefill_pp", T::Int, D::Int(1)).at_least(1),
    ArgSpec::new("prefill_cp", T::Int, D::Int(1)).at_least(1),
    ArgSpec::new("decode_tp", T::Int, D::Int(1)).at_least(1),
    ArgSpec::new("decode_pp", T::Int, D::Int(1)).at_least(1),
    ArgSpec::new("decode_cp", T::Int, D::Int(1)).at_least(1),
    ArgSpec::new("model", T::Str, D::Unset),
    ArgSpec::new("hidden_size", T::Int, D::Unset)
        .single()
        .at_least(1),
    ArgSpec::new("num_layers", T::Int, D::Unset)
        .single()
        .at_least(1),
    ArgSpec::new("num_heads", T::Int, D::Unset)
        .single()
        .at_least(1),
    ArgSpec::new("num_kv_heads", T::Int, D::Unset)
        .single()
        .at_least(1),
    ArgSpec::new("dtype_size", T::Int, D::Unset)
        .single()
        .at_least(1),
    ArgSpec::new("matgen_args", T::Model(MATGEN, true), D::Table).single(),
];

/// A model's shape, given instead of a model's name.
const CUSTOM_MODEL: [&str; 5] = [
    "hidden_size",
    "num_layers",
    "num_heads",
    "num_kv_heads",
    "dtype_size",
];

const RESULTS: &str = "results.json";

impl TemplateSchema for NixlPerftest {
    fn template(&self) -> &'static str {
        "NixlPerftest"
    }
    fn args(&self) -> &'static [ArgSpec] {
        ARGS
    }
    /// A model by name, or its whole shape; never both.
    fn validate(&self, ctx: &mut Ctx, v: &View, args: &CmdArgs) {
        let given: Vec<&str> = CUSTOM_MODEL
            .into_iter()
            .filter(|k| args.get(k).is_some())
            .collect();
        let field = join(&v.field("cmd_args"), "model");
        if args.get("model").is_some() && !given.is_empty() {
            ctx.err(
                &v.cmd_arg_loc(given[0]),
                &join(&v.field("cmd_args"), given[0]),
                "a model is named (model) and its shape given too",
                Some("keep model, or remove it and give hidden_size, num_layers, num_heads, num_kv_heads and dtype_size".into()),
            );
        } else if args.get("model").is_none() && given.len() < CUSTOM_MODEL.len() {
            let missing: Vec<&str> = CUSTOM_MODEL
                .into_iter()
                .filter(|k| !given.contains(k))
                .collect();
            ctx.err(
                &v.cmd_arg_loc("model"),
                &field,
                format!("no model: neither model nor its whole shape is given (missing {})", missing.join(", ")),
                Some("set model = \"deepseek-r1\" (a name the matrix generator knows), or all five shape fields".into()),
            );
        }
    }
}

impl Workload for NixlPerftest {
    fn needs(&self) -> crate::workloads::Needs {
        crate::workloads::Needs::Srun
    }

    /// The matrix generator's processes per node default to the system's tasks per node (CloudAI writes it into
    /// the test).
    fn derive(&self, test: &mut TestDefinition, tasks_per_node: Option<u64>) {
        let Some(n) = tasks_per_node else { return };
        if let Some(ArgValue::Table(m)) = test.cmd_args.values.get_mut("matgen_args") {
            m.entry("ppn".to_string())
                .or_insert(ArgValue::Int(n as i64));
        }
    }

    fn launch(&self, test: &TestDefinition, _at: &Placement) -> Launch {
        let a = &test.cmd_args;
        let s = |k: &str| a.get(k).map(ArgValue::py_str).unwrap_or_default();
        let mut gen = vec![
            word(&s("python_executable")),
            word(&s("matgen_script")),
            "generate".into(),
        ];
        let flag = |k: &str| format!("--{}={}", k.replace('_', "-"), word(&s(k)));
        for k in [
            "num_user_requests",
            "batch_size",
            "num_prefill_nodes",
            "num_decode_nodes",
        ] {
            gen.push(flag(k));
        }
        gen.push(format!("--results-dir={RUN_DIR}/matrices"));
        for k in [
            "prefill_tp",
            "prefill_pp",
            "prefill_cp",
            "decode_tp",
            "decode_pp",
            "decode_cp",
        ] {
            gen.push(flag(k));
        }
        let model: &[&str] = if a.get("model").is_some() {
            &["model"]
        } else {
            &CUSTOM_MODEL
        };
        for k in model.iter().chain(&["isl_mean", "isl_scale"]) {
            if a.get(k).is_some() {
                gen.push(flag(k));
            }
        }
        if let Some(ArgValue::Table(m)) = a.get("matgen_args") {
            for (k, v) in m {
                gen.push(format!("--{}={}", k.replace('_', "-"), word(&v.py_str())));
            }
        }
        let matgen = Step::Task {
            all_nodes: false,
            own_image: false,
            opts: ["--ntasks-per-node=1", "--ntasks=1", "-N1"]
                .map(str::to_string)
                .to_vec(),
            cmd: format!("bash -c \"{}\"", gen.join(" ")),
        };
        let perftest = Step::Task {
            all_nodes: true,
            own_image: false,
            opts: vec!["--overlap".into()],
            cmd: format!(
                "bash -c \"source {RUN_DIR}/env_vars.sh;  {} {} {} {RUN_DIR}/matrices/metadata.yaml \
                 --json-output-path={RUN_DIR}/{RESULTS} \"",
                word(&s("python_executable")),
                word(&s("perftest_script")),
                word(&s("subtest")),
            ),
        };
        let wait = super::int(test, "wait_etcd_for").unwrap_or(60);
        let mut steps = super::with_etcd(test, vec![perftest], wait);
        steps.steps.insert(0, matgen);
        steps.dirs = vec!["matrices".into()];
        Launch {
            steps: Some(steps),
            ..Launch::process("", Vec::new()).in_test_image(test)
        }
    }

    fn grade(&self, _test: &TestDefinition, dir: &Path, _outcome: &JobOutcome) -> Verdict {
        read(dir).0
    }

    /// The traffic patterns' latencies per iteration: `nixl_perftest.csv` and a page.
    fn report(&self, _test: &TestDefinition, dir: &Path, title: &str) -> Option<IterationReport> {
        // nothing to report until the job ran (its log, at least)
        if !dir.join("stdout.txt").exists() && !dir.join(RESULTS).exists() {
            return None;
        }
        let (v, json) = read(dir);
        let table = kit::Table {
            header: vec![
                "iteration",
                "pattern",
                "size_gb",
                "latency_ms",
                "isolated_latency_ms",
            ],
            rows: json
                .as_ref()
                .and_then(|j| j["iterations_results"].as_array())
                .into_iter()
                .flatten()
                .enumerate()
                .flat_map(|(i, it)| {
                    it.as_array()
                        .into_iter()
                        .flatten()
                        .enumerate()
                        .map(move |(p, r)| {
                            let num = |k: &str| kit::csv_num(r[k].as_f64());
                            vec![
                                (i + 1).to_string(),
                                (p + 1).to_string(),
                                num("size"),
                                num("latency"),
                                num("isolated_latency"),
                            ]
                        })
                })
                .collect(),
        };
        let page = kit::TablePage {
            title,
            verdict: &v.status_line(),
            passed: v.passed,
            cards: vec![("results".into(), table.rows.len().to_string())],
            charts: serde_json::json!({}),
            show: Vec::new(),
            sections: vec![table.section("Traffic patterns")],
        }
        .render();
        Some(IterationReport {
            files: vec![
                ("nixl_perftest.csv".into(), table.csv()),
                ("nixl_perftest.html".into(), page),
            ],
            verdict: Some(v),
            ..Default::default()
        })
    }
}

/// The grade of an iteration's `results.json`, and the JSON when it parses.
fn read(dir: &Path) -> (Verdict, Option<serde_json::Value>) {
    let path = dir.join(RESULTS);
    let Ok(text) = std::fs::read_to_string(&path) else {
        let why = format!(
            "{} was not written: the perftest did not finish (see stdout.txt and stderr.txt)",
            path.display()
        );
        return (Verdict::fail(why), None);
    };
    (grade_results(&text), serde_json::from_str(&text).ok())
}

/// `results.json` of sequential-ct-perftest: `iterations_results` (one list per iteration, a result per traffic
/// pattern) and `metadata` (`iters`: one entry per iteration asked; `finished_ts` once the run ended).
pub(crate) fn grade_results(text: &str) -> Verdict {
    let Ok(json) = serde_json::from_str::<serde_json::Value>(text) else {
        return Verdict::fail(format!(
            "{RESULTS} is not JSON: the perftest's output is cut short"
        ));
    };
    let iterations = json["iterations_results"].as_array();
    let asked = json["metadata"]["iters"].as_array().map(Vec::len);
    let Some(iterations) = iterations.filter(|i| !i.is_empty()) else {
        return Verdict::fail(format!("{RESULTS} holds no iteration result"));
    };
    if let Some(n) = asked.filter(|&n| n != iterations.len()) {
        return Verdict::fail(format!(
            "{RESULTS} holds {} of the {n} iterations the run announced",
            iterations.len()
        ));
    }
    if json["metadata"]["finished_ts"].is_null() {
        return Verdict::fail(format!(
            "{RESULTS} does not record the run's end (metadata.finished_ts)"
        ));
    }
    let patterns = iterations[0].as_array().map_or(0, Vec::len);
    let short = iterations
        .iter()
        .position(|i| i.as_array().map_or(0, Vec::len) != patterns || patterns == 0);
    if let Some(i) = short {
        return Verdict::fail(format!(
            "iteration {} of {RESULTS} lacks traffic-pattern results (the first has {patterns})",
            i + 1
        ));
    }
    let latency: Vec<f64> = iterations
        .iter()
        .flat_map(|i| i.as_array().into_iter().flatten())
        .filter_map(|r| r["latency"].as_f64())
        .collect();
    if latency.len() != iterations.len() * patterns
        || latency.iter().any(|l| !l.is_finite() || *l <= 0.0)
    {
        return Verdict::fail(format!(
            "a traffic pattern of {RESULTS} has no latency above 0"
        ));
    }
    let mean = latency.iter().sum::<f64>() / latency.len() as f64;
    let mut v = Verdict::pass_with(format!(
        "{} iteration(s) × {patterns} traffic pattern(s); mean latency {mean:.3} ms",
        iterations.len()
    ));
    v.checks.push(Check::pass(
        CheckKind::Output,
        format!("{RESULTS} complete"),
    ));
    v
}
