//! The Dynamo mocker (CloudAI's `DynamoMocker`): NVIDIA Dynamo's serving stack without GPUs — `nats-server`,
//! `dynamo.frontend` and `dynamo.mocker` workers that simulate an engine's KV cache and timing (one combined
//! worker, or prefill and decode workers with a simulated KV transfer) — benchmarked by AIPerf or GenAI-Perf.
//! CloudAI's `dynamo_mocker.sh` (from its tree, beside its `aiperf.sh` / `genai_perf.sh`) runs it all with the
//! Python of an environment holding `ai-dynamo`, `genai-perf` and `aiperf`; it leaves `success-marker.txt` or
//! `failure-marker.txt` and the client's CSV as `benchmark_report.csv`.
//!
//! Graded as CloudAI grades it (no failure marker, the success marker, the report) and further: the report has the
//! time to first token, the inter-token latency and the output throughput, each above 0, every request asked
//! completed and none failed.

use std::path::Path;

use super::kit::{self, TablePage};
use super::local::{LocalAt, LocalJob, PythonEnv};
use super::perf_csv::{self, PerfCsv};
use super::{IterationReport, JobOutcome, Launch, Needs, Placement, Script, Verdict, Workload};
use crate::config::args::{ArgDefault as D, ArgSpec, ArgType as T, ArgValue, CmdArgs};
use crate::config::decode::{join, Ctx, View};
use crate::config::test::{TemplateSchema, TestDefinition};
use crate::util::shell::py_quote;

pub(crate) struct DynamoMocker;

const fn one(name: &'static str) -> ArgSpec {
    ArgSpec::new(name, T::Int, D::Int(1)).at_least(1)
}

static ENGINE: &[ArgSpec] = &[
    ArgSpec::new("speedup_ratio", T::Float, D::Float(1.0)).single(),
    ArgSpec::new("block_size", T::Int, D::Int(64))
        .single()
        .at_least(1),
    ArgSpec::new("num_gpu_blocks_override", T::Int, D::Int(16384))
        .single()
        .at_least(1),
    ArgSpec::new("enable_prefix_caching", T::Bool, D::Bool(true)).single(),
    ArgSpec::new("kv_transfer_bandwidth", T::Float, D::Float(200.0)),
];
static INSTANCE: &[ArgSpec] = &[
    one("num_nodes").single(),
    ArgSpec::new("cmd", T::Str, D::Str("")).single(),
    ArgSpec::new(
        "worker_initialized_regex",
        T::Str,
        D::Str("created and running"),
    )
    .single(),
    ArgSpec::new("extra_args", T::Str, D::Unset).single(),
    ArgSpec::new("args", T::Model(&[], true), D::Table),
];
static WORKER: &[ArgSpec] = &[
    ArgSpec::new(
        "disaggregation_mode",
        T::Enum(&["none", "prefill_decode"]),
        D::Str("none"),
    )
    .single(),
    one("num_workers"),
    ArgSpec::new("prefill_worker", T::Model(INSTANCE, true), D::Table),
    ArgSpec::new("decode_worker", T::Model(INSTANCE, true), D::Table),
];
static FRONTEND: &[ArgSpec] = &[
    ArgSpec::new("http_port", T::Int, D::Int(8000))
        .single()
        .at_least(1),
    ArgSpec::new(
        "router_mode",
        T::Enum(&["round_robin", "kv_router"]),
        D::Str("round_robin"),
    )
    .single(),
];
/// AIPerf's and GenAI-Perf's fields (the same in CloudAI's two models).
static BENCH: &[ArgSpec] = &[
    ArgSpec::new("cmd", T::Str, D::Str("")).single(),
    ArgSpec::new("extra_args", T::Str, D::Unset).single(),
    ArgSpec::new("input_tokens", T::Int, D::Int(5000)).at_least(1),
    ArgSpec::new("output_tokens", T::Int, D::Int(500)).at_least(1),
    ArgSpec::new("request_count", T::Int, D::Int(1000))
        .single()
        .at_least(1),
    ArgSpec::new("replay_concurrency", T::Int, D::Int(100)).at_least(1),
    ArgSpec::new(
        "replay_mode",
        T::Enum(&["offline", "online"]),
        D::Str("offline"),
    )
    .single(),
];
static ARGS: &[ArgSpec] = &[
    ArgSpec::new("model_path", T::Str, D::Str("Qwen/Qwen3-0.6B")).single(),
    ArgSpec::new("nats_cmd", T::Str, D::Str("nats-server -js")).single(),
    ArgSpec::new("engine", T::Model(ENGINE, true), D::Table),
    ArgSpec::new("worker", T::Model(WORKER, true), D::Table),
    ArgSpec::new("frontend", T::Model(FRONTEND, true), D::Table),
    ArgSpec::new(
        "benchmark_tool",
        T::Enum(&["genai_perf", "aiperf"]),
        D::Str("genai_perf"),
    )
    .single(),
    ArgSpec::new("genai_perf", T::Model(BENCH, true), D::Table),
    ArgSpec::new("aiperf", T::Model(BENCH, true), D::Table),
];
static FIELDS: &[ArgSpec] = &[
    ArgSpec::new("success_marker", T::Str, D::Str("success-marker.txt")).single(),
    ArgSpec::new("failure_marker", T::Str, D::Str("failure-marker.txt")).single(),
];

/// CloudAI's script, run from its tree (it calls `aiperf.sh` / `genai_perf.sh` beside it).
const SCRIPT: Script = Script {
    name: "dynamo_mocker.sh",
    in_cloudai: "src/cloudai/workloads/dynamo_mocker/dynamo_mocker.sh",
    env: "CLOUDAI_DYNAMO_MOCKER_SCRIPT",
    in_place: true,
};
const ENV: PythonEnv = PythonEnv {
    name: "dynamo-mocker",
    python: "3.12",
    requirements: &["ai-dynamo", "genai-perf", "aiperf"],
};
const WRAPPER: &str = "dynamo_mocker_run.sh";
const REPORT: &str = "benchmark_report.csv";
const CSV_FILE: &str = "dynamo_mocker_report.csv";
const HTML_FILE: &str = "dynamo_mocker_report.html";

impl TemplateSchema for DynamoMocker {
    fn template(&self) -> &'static str {
        "DynamoMocker"
    }
    fn args(&self) -> &'static [ArgSpec] {
        ARGS
    }
    fn fields(&self) -> &'static [ArgSpec] {
        FIELDS
    }
    /// CloudAI's `gt=0` rules on the floats and the port's range.
    fn validate(&self, ctx: &mut Ctx, v: &View, args: &CmdArgs) {
        let field = |k: &str| join(&v.field("cmd_args"), k);
        for path in ["engine.speedup_ratio", "engine.kv_transfer_bandwidth"] {
            let values = match args.at(path) {
                Some(ArgValue::List(l)) => l.iter().collect(),
                Some(x) => vec![x],
                None => Vec::new(),
            };
            if let Some(x) = values
                .iter()
                .filter_map(|x| x.as_float())
                .find(|x| !(x.is_finite() && *x > 0.0))
            {
                ctx.err(
                    &v.cmd_arg_loc("engine"),
                    &field(path),
                    format!("must be above 0, found {x}"),
                    None,
                );
            }
        }
        if let Some(p) = args.int_at("frontend.http_port").filter(|p| *p > 65535) {
            ctx.err(
                &v.cmd_arg_loc("frontend"),
                &field("frontend.http_port"),
                format!("must be a TCP port (1 to 65535), found {p}"),
                None,
            );
        }
    }
}

/// A value as CloudAI passes an undeclared key on: Python's `str()`, booleans in lower case (the script's
/// `true` test makes them bare flags).
fn flag_value(v: &ArgValue) -> String {
    match v {
        ArgValue::Bool(b) => b.to_string(),
        other => other.py_str(),
    }
}

/// The keys of a table that its model does not declare, each `--<prefix>-<key with dashes>` and its value.
fn extras(args: &CmdArgs, path: &str, spec: &[ArgSpec], prefix: &str) -> Vec<String> {
    let Some(ArgValue::Table(t)) = args.at(path) else {
        return Vec::new();
    };
    t.iter()
        .filter(|(k, _)| !spec.iter().any(|s| s.name == k.as_str()))
        .flat_map(|(k, v)| [format!("--{prefix}-{}", k.replace('_', "-")), flag_value(v)])
        .collect()
}

/// The benchmark section in use and its flag prefix.
fn bench(args: &CmdArgs) -> (&'static str, &'static str) {
    if args.str("benchmark_tool") == Some("aiperf") {
        ("aiperf", "aiperf")
    } else {
        ("genai_perf", "genai-perf")
    }
}

/// The script's arguments, in CloudAI's order.
fn script_args(args: &CmdArgs, python: &str, dir: &Path) -> Vec<String> {
    let (b, prefix) = bench(args);
    let mut out: Vec<String> = Vec::new();
    let mut put = |flag: &str, v: String| out.extend([flag.to_string(), v]);
    put("--venv-python", python.to_string());
    put("--result-dir", dir.display().to_string());
    for (flag, path) in [
        ("--model-path", "model_path"),
        ("--nats-cmd", "nats_cmd"),
        ("--speedup-ratio", "engine.speedup_ratio"),
        ("--block-size", "engine.block_size"),
        (
            "--num-gpu-blocks-override",
            "engine.num_gpu_blocks_override",
        ),
    ] {
        put(flag, args.text_at(path));
    }
    put(
        "--enable-prefix-caching",
        args.text_at("engine.enable_prefix_caching").to_lowercase(),
    );
    for (flag, path) in [
        ("--http-port", "frontend.http_port"),
        ("--router-mode", "frontend.router_mode"),
        ("--disaggregation-mode", "worker.disaggregation_mode"),
        ("--benchmark-tool", "benchmark_tool"),
    ] {
        put(flag, args.text_at(path));
    }
    for k in [
        "input_tokens",
        "output_tokens",
        "request_count",
        "replay_concurrency",
        "replay_mode",
    ] {
        put(
            &format!("--{}", k.replace('_', "-")),
            args.text_at(&format!("{b}.{k}")),
        );
    }
    if args
        .at("worker.disaggregation_mode")
        .and_then(ArgValue::as_str)
        == Some("none")
    {
        put("--num-workers", args.text_at("worker.num_workers"));
    } else {
        for (flag, path) in [
            ("--prefill-num-nodes", "worker.prefill_worker.num_nodes"),
            ("--decode-num-nodes", "worker.decode_worker.num_nodes"),
            ("--kv-transfer-bandwidth", "engine.kv_transfer_bandwidth"),
            (
                "--prefill-initialized-regex",
                "worker.prefill_worker.worker_initialized_regex",
            ),
            (
                "--decode-initialized-regex",
                "worker.decode_worker.worker_initialized_regex",
            ),
        ] {
            put(flag, args.text_at(path));
        }
        for role in ["prefill", "decode"] {
            let cmd = args.text_at(&format!("worker.{role}_worker.cmd"));
            if !cmd.is_empty() {
                put(&format!("--{role}-cmd"), cmd);
            }
        }
    }
    for role in ["prefill", "decode"] {
        out.extend(extras(
            args,
            &format!("worker.{role}_worker.args"),
            &[],
            &format!("{role}-args"),
        ));
        let raw = args.text_at(&format!("worker.{role}_worker.extra_args"));
        if !raw.is_empty() {
            out.extend([format!("--{role}-extra-args"), raw]);
        }
    }
    out.extend(extras(args, "engine", ENGINE, "engine"));
    out.extend(extras(args, "worker", WORKER, "mocker"));
    out.extend(extras(args, "frontend", FRONTEND, "frontend"));
    for k in ["cmd", "extra_args"] {
        let v = args.text_at(&format!("{b}.{k}"));
        if !v.is_empty() {
            out.extend([format!("--{prefix}-{}", k.replace('_', "-")), v]);
        }
    }
    out.extend(extras(args, b, BENCH, prefix));
    out
}

impl Workload for DynamoMocker {
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
        let _ = test;
        Launch::process("bash", vec![SCRIPT.name.to_string()])
    }

    /// CloudAI's `dynamo_mocker_run.sh` (no newline at its end, as CloudAI writes it).
    fn local_job(&self, test: &TestDefinition, at: &LocalAt) -> Option<LocalJob> {
        let script = super::local::script_path(test, &SCRIPT);
        let q = |p: &Path| py_quote(&p.display().to_string());
        let words: Vec<String> = script_args(&test.cmd_args, &ENV.python_in(at.install), at.dir)
            .iter()
            .map(|w| py_quote(w))
            .collect();
        let test_cmd = format!("bash {} {}", q(&script), words.join(" "));
        let full_cmd = format!("bash \"{}\"", at.dir.join(WRAPPER).display());
        let wrapper = format!(
            "#!/usr/bin/env bash\n{test_cmd} > {} 2> {}",
            q(&at.dir.join("stdout.txt")),
            q(&at.dir.join("stderr.txt"))
        );
        Some(LocalJob {
            files: vec![(WRAPPER.into(), wrapper)],
            test_cmd,
            runs: full_cmd.clone(),
            full_cmd,
        })
    }

    fn grade(&self, test: &TestDefinition, dir: &Path, outcome: &JobOutcome) -> Verdict {
        match markers(test, dir) {
            Err(why) => Verdict::fail(why).with_stderr(dir, outcome),
            Ok(csv) => verdict(&test.cmd_args, &csv),
        }
    }

    /// A metric of the report by its name (`Time to First Token (ms)`: its average; a total by its name), or
    /// `<tool>:<name>:<column>` (`aiperf:Time to First Token (ms):p99`); `default` is the output throughput.
    /// CloudAI's reader looks for `aiperf_report.csv`, which this template never writes, so it finds none.
    fn metric(&self, _test: &TestDefinition, dir: &Path, name: &str) -> Option<f64> {
        let csv = read(dir).ok()?;
        match name {
            "default" => csv.avg(perf_csv::THROUGHPUT),
            n => match n.splitn(3, ':').collect::<Vec<_>>()[..] {
                [_, metric, column] => csv.value(&[metric], &[column]),
                _ => csv.avg(&[n]),
            },
        }
    }

    fn report(&self, test: &TestDefinition, dir: &Path, title: &str) -> Option<IterationReport> {
        let v = self.grade(test, dir, &JobOutcome::default());
        let Ok(csv) = read(dir) else {
            return Some(IterationReport {
                verdict: Some(v),
                ..Default::default()
            });
        };
        let mut metrics = serde_json::Map::new();
        for (k, names) in [
            ("ttft_ms", perf_csv::TTFT),
            ("itl_ms", perf_csv::ITL),
            ("output_tokens_per_s", perf_csv::THROUGHPUT),
        ] {
            if let Some(x) = csv.avg(names) {
                metrics.insert(k.into(), x.into());
            }
        }
        let table = table(&csv);
        let cards = [
            ("TTFT (ms)", perf_csv::TTFT),
            ("ITL (ms)", perf_csv::ITL),
            ("tokens/s", perf_csv::THROUGHPUT),
            ("requests", perf_csv::REQUESTS),
        ]
        .iter()
        .map(|(l, n)| (l.to_string(), kit::fixed2(csv.avg(n), "-")))
        .collect();
        let page = TablePage {
            title,
            verdict: &v.status_line(),
            passed: v.passed,
            cards,
            charts: serde_json::json!({}),
            show: Vec::new(),
            sections: vec![table.section("Benchmark")],
        }
        .render();
        Some(IterationReport {
            files: vec![(CSV_FILE.into(), table.csv()), (HTML_FILE.into(), page)],
            metrics,
            verdict: Some(v),
            ..Default::default()
        })
    }
}

fn read(dir: &Path) -> Result<PerfCsv, String> {
    let path = dir.join(REPORT);
    std::fs::read_to_string(&path)
        .map(|t| PerfCsv::parse(&t))
        .map_err(|_| {
            format!(
                "{REPORT} not found in {}: the benchmark did not complete",
                dir.display()
            )
        })
}

/// CloudAI's rule: the failure marker says why; without the success marker or the report the run did not finish.
fn markers(test: &TestDefinition, dir: &Path) -> Result<PerfCsv, String> {
    let marker = |k: &str, default: &str| {
        dir.join(
            test.template_fields
                .get(k)
                .and_then(ArgValue::as_str)
                .unwrap_or(default),
        )
    };
    let failure = marker("failure_marker", "failure-marker.txt");
    if let Ok(why) = std::fs::read_to_string(&failure) {
        return Err(format!("Failure marker found: {}", why.trim()));
    }
    let success = marker("success_marker", "success-marker.txt");
    if !success.exists() {
        return Err(format!(
            "Success marker not found: {}. Check stdout.txt and stderr.txt for errors.",
            success.display()
        ));
    }
    read(dir)
}

fn verdict(args: &CmdArgs, csv: &PerfCsv) -> Verdict {
    let (b, _) = bench(args);
    let asked = args.int_at(&format!("{b}.request_count")).map(|a| a as f64);
    Verdict::from_checks(perf_csv::checks(csv, REPORT, asked))
}

/// The statistics a report's rows carry, as its columns are named; a total's is `Value`.
const COLUMNS: [&str; 8] = ["avg", "min", "max", "p50", "p90", "p99", "std", "Value"];

/// The report's rows as one table: each metric with its statistics (empty where the client gave none).
fn table(csv: &PerfCsv) -> kit::Table {
    let mut header = vec!["metric"];
    header.extend(
        COLUMNS
            .iter()
            .map(|c| if *c == "Value" { "value" } else { c }),
    );
    kit::Table {
        header,
        rows: csv
            .rows
            .iter()
            .map(|(name, row)| {
                std::iter::once(name.clone())
                    .chain(
                        COLUMNS
                            .iter()
                            .map(|c| row.get(*c).cloned().unwrap_or_default()),
                    )
                    .collect()
            })
            .collect(),
    }
}
