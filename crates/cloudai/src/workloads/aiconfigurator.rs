//! Aiconfigurator (CloudAI's `Aiconfigurator`): NVIDIA's aiconfigurator predicts what one serving configuration of a
//! model would give on a system (time to first token, time per output token, tokens per second per GPU and per
//! user) from its performance database, without GPUs. CloudAI runs its own `simple_predictor.py` (from its tree)
//! with the Python of an environment holding `aiconfigurator`, for one aggregated (`agg`) or disaggregated
//! (`disagg`) configuration; the predictor writes `report.json`.
//!
//! Graded beyond CloudAI (which grades nothing): the predictor exited 0, its result is there, not out of memory,
//! the four numbers above 0, and the configuration it priced is the one asked (batch sizes, workers, GPUs in all,
//! system, backend, version, where the result states them).

use std::path::Path;

use serde_json::{Map, Value};

use super::judge::{Check, CheckKind};
use super::kit::{self, TablePage};
use super::local::{LocalAt, LocalJob, PythonEnv};
use super::{IterationReport, JobOutcome, Launch, Needs, Placement, Script, Verdict, Workload};
use crate::config::args::{ArgDefault as D, ArgSpec, ArgType as T, ArgValue, CmdArgs};
use crate::config::decode::{join, Ctx, View};
use crate::config::test::{TemplateSchema, TestDefinition};
use crate::util::shell::py_quote;

pub(crate) struct Aiconfigurator;

const fn count(name: &'static str) -> ArgSpec {
    ArgSpec::new(name, T::Int, D::Required).at_least(1)
}
const fn one(name: &'static str) -> ArgSpec {
    ArgSpec::new(name, T::Int, D::Int(1)).at_least(1)
}

static AGG: &[ArgSpec] = &[
    count("batch_size"),
    count("ctx_tokens"),
    one("tp"),
    one("pp"),
    one("dp"),
    one("moe_tp"),
    one("moe_ep"),
];
static DISAGG: &[ArgSpec] = &[
    count("p_tp"),
    count("p_pp"),
    count("p_dp"),
    count("p_bs"),
    count("p_workers"),
    count("d_tp"),
    count("d_pp"),
    count("d_dp"),
    count("d_bs"),
    count("d_workers"),
    ArgSpec::new("prefill_correction_scale", T::Float, D::Float(1.0)).single(),
    ArgSpec::new("decode_correction_scale", T::Float, D::Float(1.0)).single(),
];
static ARGS: &[ArgSpec] = &[
    ArgSpec::new("model_name", T::Str, D::Required).single(),
    ArgSpec::new("system", T::Str, D::Required).single(),
    ArgSpec::new("backend", T::Str, D::Str("trtllm")).single(),
    ArgSpec::new("version", T::Str, D::Str("0.20.0")).single(),
    count("isl"),
    count("osl"),
    ArgSpec::new("agg", T::Model(AGG, true), D::Unset),
    ArgSpec::new("disagg", T::Model(DISAGG, true), D::Unset),
];

/// CloudAI's predictor, run from its tree.
const SCRIPT: Script = Script {
    name: "simple_predictor.py",
    in_cloudai: "src/cloudai/workloads/aiconfig/runtime/simple_predictor.py",
    env: "CLOUDAI_AICONFIG_PREDICTOR",
    in_place: true,
};
const ENV: PythonEnv = PythonEnv {
    name: "aiconfigurator",
    python: "3.10",
    requirements: &["aiconfigurator~=0.5.0"],
};
const WRAPPER: &str = "run_simple_predictor.sh";
const REPORT: &str = "report.json";
const SUMMARY: &str = "summary.txt";
const CSV_FILE: &str = "aiconfigurator_report.csv";
const HTML_FILE: &str = "aiconfigurator_report.html";
/// The numbers a prediction gives, in CloudAI's summary order.
const NUMBERS: [&str; 4] = [
    "ttft_ms",
    "tpot_ms",
    "tokens_per_s_per_gpu",
    "tokens_per_s_per_user",
];

impl TemplateSchema for Aiconfigurator {
    fn template(&self) -> &'static str {
        "Aiconfigurator"
    }
    fn args(&self) -> &'static [ArgSpec] {
        ARGS
    }
    fn validate(&self, ctx: &mut Ctx, v: &View, args: &CmdArgs) {
        let field = |k: &str| join(&v.field("cmd_args"), k);
        match (args.get("agg"), args.get("disagg")) {
            (Some(_), Some(_)) => ctx.err(
                &v.cmd_arg_loc("disagg"),
                &field("disagg"),
                "both [cmd_args.agg] and [cmd_args.disagg] are given",
                Some("a test predicts one mode: keep one of the two tables".into()),
            ),
            (None, None) => ctx.err(
                &v.cmd_arg_loc("model_name"),
                &v.field("cmd_args"),
                "neither [cmd_args.agg] nor [cmd_args.disagg] is given",
                Some(
                    "add [cmd_args.agg] (batch_size, ctx_tokens, tp, pp, dp, …) or [cmd_args.disagg] (p_tp, p_bs, \
                     p_workers, d_tp, d_bs, d_workers, …)"
                        .into(),
                ),
            ),
            _ => {}
        }
        for k in ["prefill_correction_scale", "decode_correction_scale"] {
            if let Some(x) = args
                .at(&format!("disagg.{k}"))
                .and_then(ArgValue::as_float)
                .filter(|x| !(x.is_finite() && *x > 0.0))
            {
                ctx.err(
                    &v.cmd_arg_loc("disagg"),
                    &field(&format!("disagg.{k}")),
                    format!("must be above 0, found {x}"),
                    Some("a factor on the predicted rate: 1.0 leaves it as predicted".into()),
                );
            }
        }
    }
}

/// The predictor's quantization options, which `[cmd_args.agg]` / `[cmd_args.disagg]` may set (CloudAI accepts
/// them there and passes none, so the prediction is of its defaults whatever the file says; passed here).
const QUANT: [&str; 5] = [
    "gemm_quant_mode",
    "moe_quant_mode",
    "kvcache_quant_mode",
    "fmha_quant_mode",
    "comm_quant_mode",
];

/// The predictor's flags, in CloudAI's order, then the quantization options the test sets.
fn flags(args: &CmdArgs) -> Vec<String> {
    let mut out = Vec::new();
    let mut put = |flag: &str, v: String| out.extend([flag.to_string(), v]);
    for (flag, k) in [
        ("--model-name", "model_name"),
        ("--system", "system"),
        ("--backend", "backend"),
        ("--version", "version"),
        ("--isl", "isl"),
        ("--osl", "osl"),
    ] {
        put(flag, args.text_at(k));
    }
    let (mode, fields) = if args.get("agg").is_some() {
        ("agg", AGG)
    } else {
        ("disagg", DISAGG)
    };
    put("--mode", mode.into());
    for f in fields {
        put(
            &format!("--{}", f.name.replace('_', "-")),
            args.text_at(&format!("{mode}.{}", f.name)),
        );
    }
    for k in QUANT {
        if let Some(v) = args.at(&format!("{mode}.{k}")) {
            put(&format!("--{}", k.replace('_', "-")), v.py_str());
        }
    }
    out
}

impl Workload for Aiconfigurator {
    fn needs(&self) -> Needs {
        Needs::Local
    }
    fn script(&self) -> Option<Script> {
        Some(SCRIPT)
    }
    fn python_env(&self, _test: &TestDefinition) -> Option<PythonEnv> {
        Some(ENV)
    }

    /// What a [`Needs::Local`] workload would run elsewhere: never rendered (the scheduler asks for
    /// [`Workload::local_job`]).
    fn launch(&self, test: &TestDefinition, _at: &Placement) -> Launch {
        Launch::process("python", flags(&test.cmd_args))
    }

    /// CloudAI's `run_simple_predictor.sh`; `test-run.toml` records `test_cmd = ""`, `full_cmd = "n/a"` as CloudAI's.
    fn local_job(&self, test: &TestDefinition, at: &LocalAt) -> Option<LocalJob> {
        let script = super::local::script_path(test, &SCRIPT);
        let q = |p: &Path| py_quote(&p.display().to_string());
        let mut words = vec![py_quote(&ENV.python_in(at.install)), q(&script)];
        words.extend(flags(&test.cmd_args).iter().map(|w| py_quote(w)));
        words.extend(["--output".into(), q(&at.dir.join(REPORT))]);
        let line = format!(
            "{} 1> {} 2> {}",
            words.join(" "),
            q(&at.dir.join("stdout.txt")),
            q(&at.dir.join("stderr.txt"))
        );
        Some(LocalJob {
            files: vec![(
                WRAPPER.into(),
                format!("#!/usr/bin/env bash\nset -euo pipefail\n{line}\n"),
            )],
            test_cmd: String::new(),
            full_cmd: "n/a".into(),
            runs: format!("bash {}", q(&at.dir.join(WRAPPER))),
        })
    }

    fn grade(&self, test: &TestDefinition, dir: &Path, outcome: &JobOutcome) -> Verdict {
        if outcome.exit_code.is_some_and(|c| c != 0) || outcome.signal.is_some() {
            return Verdict::from_exit(outcome).with_stderr(dir, outcome);
        }
        match load(dir) {
            Ok(r) => verdict(&test.cmd_args, &r),
            Err(why) => Verdict::fail(why).with_stderr(dir, outcome),
        }
    }

    /// CloudAI's metrics: `default` is the throughput per GPU (else per user, else the inverse of a latency).
    fn metric(&self, _test: &TestDefinition, dir: &Path, name: &str) -> Option<f64> {
        let r = load(dir).ok()?;
        let num = |k: &str| r.get(k).and_then(Value::as_f64);
        match name {
            "default" => num("tokens_per_s_per_gpu")
                .or_else(|| num("tokens_per_s_per_user"))
                .or_else(|| {
                    ["tpot_ms", "ttft_ms"]
                        .iter()
                        .find_map(|k| num(k))
                        .map(|v| 1.0 / v.max(1e-9))
                }),
            n if NUMBERS.contains(&n) => num(n),
            _ => None,
        }
    }

    fn report(&self, test: &TestDefinition, dir: &Path, title: &str) -> Option<IterationReport> {
        let r = match load(dir) {
            Ok(r) => r,
            Err(why) => return Some(IterationReport::failed(why)),
        };
        let v = verdict(&test.cmd_args, &r);
        let mut metrics = Map::new();
        for k in NUMBERS {
            if let Some(x) = r.get(k).filter(|x| x.is_number()) {
                metrics.insert(k.into(), x.clone());
            }
        }
        let table = table(&test.cmd_args, &r);
        let page = TablePage {
            title,
            verdict: &v.status_line(),
            passed: v.passed,
            cards: NUMBERS
                .iter()
                .map(|k| (k.to_string(), r.get(*k).map_or("-".into(), py_value)))
                .collect(),
            charts: serde_json::json!({}),
            show: Vec::new(),
            sections: vec![table.section("Prediction")],
        }
        .render();
        Some(IterationReport {
            files: vec![
                (SUMMARY.into(), summary(&r)),
                (CSV_FILE.into(), table.csv()),
                (HTML_FILE.into(), page),
            ],
            metrics,
            verdict: Some(v),
            ..Default::default()
        })
    }
}

/// The prediction: `report.json`, else the last JSON line of `stdout.txt` (the predictor prints its summary there),
/// as CloudAI reads it.
fn load(dir: &Path) -> Result<Map<String, Value>, String> {
    let path = dir.join(REPORT);
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str::<Map<String, Value>>(&text)
            .map_err(|e| format!("{} is not a JSON object: {e}", path.display())),
        Err(_) => std::fs::read_to_string(dir.join("stdout.txt"))
            .ok()
            .and_then(|out| {
                out.lines()
                    .map(str::trim)
                    .rfind(|l| l.starts_with('{') && l.ends_with('}'))
                    .and_then(|l| serde_json::from_str(l).ok())
            })
            .ok_or_else(|| {
                format!(
                    "{} was not written and stdout.txt has no result: the predictor did not finish",
                    path.display()
                )
            }),
    }
}

/// A value as Python's `str()` prints it (CloudAI's summary): `10.0`, `7`, `False`.
fn py_value(v: &Value) -> String {
    match v {
        Value::Bool(b) => if *b { "True" } else { "False" }.into(),
        Value::Number(n) if n.is_f64() => {
            crate::util::pytoml::py_float(n.as_f64().unwrap_or(f64::NAN))
        }
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Null => "None".into(),
        other => other.to_string(),
    }
}

/// CloudAI's `summary.txt`: `key: value` for the keys the prediction has.
fn summary(r: &Map<String, Value>) -> String {
    NUMBERS
        .iter()
        .chain(&["oom"])
        .filter_map(|k| Some(format!("{k}: {}\n", py_value(r.get(*k)?))))
        .collect()
}

/// The configuration asked, as the prediction states it back: (its key, the value asked).
fn asked(args: &CmdArgs) -> Vec<(&'static str, Value)> {
    let mut out: Vec<(&'static str, Value)> = Vec::new();
    for k in ["system", "backend", "version"] {
        out.push((k, Value::String(args.text_at(k))));
    }
    let i = |p: &str| args.int_at(p).unwrap_or(0);
    if args.get("agg").is_some() {
        out.push(("batch_size", i("agg.batch_size").into()));
        out.push((
            "num_total_gpus",
            (i("agg.tp") * i("agg.pp") * i("agg.dp")).into(),
        ));
    } else {
        let gpus = |r: &str| {
            i(&format!("disagg.{r}_tp"))
                * i(&format!("disagg.{r}_pp"))
                * i(&format!("disagg.{r}_dp"))
        };
        out.push(("prefill_bs", i("disagg.p_bs").into()));
        out.push(("decode_bs", i("disagg.d_bs").into()));
        out.push(("prefill_workers", i("disagg.p_workers").into()));
        out.push(("decode_workers", i("disagg.d_workers").into()));
        let total = gpus("p") * i("disagg.p_workers") + gpus("d") * i("disagg.d_workers");
        out.push(("num_total_gpus", total.into()));
    }
    out
}

fn same(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

fn verdict(args: &CmdArgs, r: &Map<String, Value>) -> Verdict {
    if r.get("oom").and_then(Value::as_bool) == Some(true) {
        return Verdict::fail(
            "the predictor finds this configuration out of memory (\"oom\": true): it cannot serve as asked",
        );
    }
    let mut checks = Vec::new();
    for k in NUMBERS {
        match r.get(k).and_then(Value::as_f64) {
            Some(x) if x.is_finite() && x > 0.0 => {}
            Some(x) => checks.push(Check::fail(
                CheckKind::Output,
                format!("{k} is {x}: a prediction is above 0"),
            )),
            None => checks.push(Check::fail(
                CheckKind::Output,
                format!("the prediction has no {k}"),
            )),
        }
    }
    if checks.is_empty() {
        checks.push(Check::pass(
            CheckKind::Output,
            format!(
                "{} tokens/s/GPU, {} tokens/s/user, TTFT {} ms, TPOT {} ms",
                py_value(&r["tokens_per_s_per_gpu"]),
                py_value(&r["tokens_per_s_per_user"]),
                py_value(&r["ttft_ms"]),
                py_value(&r["tpot_ms"])
            ),
        ));
    }
    let mut wrong = Vec::new();
    let mut shown = Vec::new();
    for (k, want) in asked(args) {
        match r.get(k) {
            Some(got) if !same(got, &want) => wrong.push(format!(
                "{k} {} for {} asked",
                py_value(got),
                py_value(&want)
            )),
            Some(_) => shown.push(format!("{k} {}", py_value(&want))),
            None => {}
        }
    }
    checks.push(if !wrong.is_empty() {
        Check::fail(
            CheckKind::Shape,
            format!(
                "the prediction is of another configuration: {}",
                wrong.join(", ")
            ),
        )
    } else if shown.is_empty() {
        Check::not_shown(
            CheckKind::Shape,
            "the prediction does not state its configuration",
        )
    } else {
        Check::pass(CheckKind::Shape, shown.join(", "))
    });
    Verdict::from_checks(checks)
}

/// The configuration and its prediction, one row.
fn table(args: &CmdArgs, r: &Map<String, Value>) -> kit::Table {
    let mode = if args.get("agg").is_some() {
        "agg"
    } else {
        "disagg"
    };
    let mut header = vec![
        "model_name",
        "system",
        "backend",
        "version",
        "mode",
        "isl",
        "osl",
    ];
    let mut row: Vec<String> = ["model_name", "system", "backend", "version"]
        .iter()
        .map(|k| args.text_at(k))
        .collect();
    row.extend([mode.to_string(), args.text_at("isl"), args.text_at("osl")]);
    let fields = if mode == "agg" { AGG } else { DISAGG };
    for f in fields {
        header.push(f.name);
        row.push(args.text_at(&format!("{mode}.{}", f.name)));
    }
    for k in NUMBERS.iter().chain(&["num_total_gpus", "oom"]) {
        header.push(k);
        row.push(r.get(*k).map_or(String::new(), py_value));
    }
    kit::Table {
        header,
        rows: vec![row],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disagg() -> TestDefinition {
        let mut t = TestDefinition::for_tests("Aiconfigurator");
        let v = &mut t.cmd_args.values;
        for (k, s) in [
            ("model_name", "LLAMA3.1_70B"),
            ("system", "h100_sxm"),
            ("backend", "trtllm"),
            ("version", "1.0.0rc3"),
        ] {
            v.insert(k.into(), ArgValue::Str(s.into()));
        }
        v.insert("isl".into(), ArgValue::Int(3000));
        v.insert("osl".into(), ArgValue::Int(150));
        let mut d = indexmap::IndexMap::new();
        for (k, n) in [
            ("p_tp", 4),
            ("p_pp", 1),
            ("p_dp", 1),
            ("p_bs", 1),
            ("p_workers", 1),
            ("d_tp", 4),
            ("d_pp", 1),
            ("d_dp", 1),
            ("d_bs", 256),
            ("d_workers", 2),
        ] {
            d.insert(k.to_string(), ArgValue::Int(n));
        }
        d.insert("prefill_correction_scale".into(), ArgValue::Float(1.0));
        d.insert("decode_correction_scale".into(), ArgValue::Float(0.9));
        v.insert("disagg".into(), ArgValue::Table(d));
        t
    }

    fn prediction() -> Map<String, Value> {
        serde_json::from_str(
            r#"{"ttft_ms": 231.5, "tpot_ms": 18.25, "tokens_per_s_per_gpu": 512.0, "tokens_per_s_per_user": 54.8,
                "num_total_gpus": 12, "prefill_workers": 1, "decode_workers": 2, "prefill_bs": 1,
                "decode_bs": 256, "oom": false}"#,
        )
        .unwrap()
    }

    #[test]
    fn the_predictors_flags_in_cloudais_order() {
        let t = disagg();
        let f = flags(&t.cmd_args).join(" ");
        assert!(f.starts_with("--model-name LLAMA3.1_70B --system h100_sxm --backend trtllm --version 1.0.0rc3 --isl 3000 --osl 150 --mode disagg --p-tp 4"), "{f}");
        assert!(
            f.ends_with(
                "--d-workers 2 --prefill-correction-scale 1.0 --decode-correction-scale 0.9"
            ),
            "{f}"
        );
    }

    #[test]
    fn a_prediction_of_the_configuration_asked_passes() {
        let v = verdict(&disagg().cmd_args, &prediction());
        assert!(v.passed, "{v:?}");
        assert!(
            v.checks
                .iter()
                .any(|c| c.check == CheckKind::Shape && c.detail.contains("num_total_gpus 12")),
            "{v:?}"
        );
    }

    #[test]
    fn out_of_memory_other_configurations_and_missing_numbers_fail() {
        let args = disagg().cmd_args;
        let oom: Map<String, Value> = serde_json::from_str(r#"{"oom": true}"#).unwrap();
        assert!(verdict(&args, &oom).message.contains("out of memory"));
        let mut r = prediction();
        r.insert("decode_workers".into(), 1.into());
        r.insert("num_total_gpus".into(), 8.into());
        let v = verdict(&args, &r);
        assert!(
            !v.passed
                && v.message.contains("decode_workers 1 for 2 asked")
                && v.message.contains("num_total_gpus 8 for 12 asked"),
            "{}",
            v.message
        );
        let mut r = prediction();
        r.insert("tpot_ms".into(), 0.0.into());
        r.remove("ttft_ms");
        let v = verdict(&args, &r);
        assert!(
            v.message.contains("tpot_ms is 0") && v.message.contains("no ttft_ms"),
            "{}",
            v.message
        );
    }

    #[test]
    fn summary_as_cloudai_writes_it() {
        let r: Map<String, Value> = serde_json::from_str(
            r#"{"ttft_ms": 10.0, "tpot_ms": 2.0, "tokens_per_s_per_gpu": 3.0, "tokens_per_s_per_user": 4, "oom": false, "x": 1}"#,
        )
        .unwrap();
        assert_eq!(
            summary(&r),
            "ttft_ms: 10.0\ntpot_ms: 2.0\ntokens_per_s_per_gpu: 3.0\ntokens_per_s_per_user: 4\noom: False\n"
        );
    }
}
