//! CloudAI's `MoEBenchmark`: DeepEP's `benchmark/benchmark.py` once per expert-parallel backend asked
//! (`deepep_versions`: legacy, elastic, nixl_ep, uccl_ep, nccl_ep, deepep_hybrid), chained in one task launch, each
//! with CloudAI's per-backend environment; its configuration is a `config.yaml` written beside the script and
//! mounted where the benchmark reads it; the hybrid backend rendezvous through a per-test etcd. Each run writes
//! `benchmark_<ranks>_ranks_<time>_<mode>/results.json` into the iteration directory. Graded on those: a result
//! directory per backend, each run on every rank of the job, bandwidths above 0; CloudAI passes every run.

use std::path::{Path, PathBuf};

use super::kit::{self, TablePage};
use super::launch::{EnvFile, Mount, Step, Steps, RUN_DIR};
use super::{IterationReport, JobOutcome, Launch, Placement, Success, Verdict, Workload};
use crate::config::args::{ArgDefault as D, ArgSpec, ArgType as T, ArgValue};
use crate::config::test::{TemplateSchema, TestDefinition};
use crate::workloads::judge::{Check, CheckKind};

pub(crate) struct MoeBenchmark;

static ARGS: &[ArgSpec] = &[
    ArgSpec::new("docker_image_url", T::Str, D::Required).single(),
    ArgSpec::new(
        "benchmark_root",
        T::Str,
        D::Str("/workspace/DeepEP/benchmark"),
    ),
    ArgSpec::new(
        "mode",
        T::Enum(&["standard", "low_latency"]),
        D::Str("standard"),
    ),
    ArgSpec::new("deepep_versions", T::StrList, D::Unset).single(),
    ArgSpec::new("tokens", T::Int, D::Int(1024)).at_least(1),
    ArgSpec::new("num_experts", T::Int, D::Int(256)).at_least(1),
    ArgSpec::new("num_topk", T::Int, D::Int(8)).at_least(1),
    ArgSpec::new("hidden_size", T::Int, D::Int(7168)).at_least(1),
    ArgSpec::new(
        "data_type",
        T::Enum(&["bfloat16", "fp8"]),
        D::Str("bfloat16"),
    ),
    ArgSpec::new("allow_nvlink_for_low_latency", T::Bool, D::Bool(false)),
    ArgSpec::new("allow_mnnvl", T::Bool, D::Bool(false)),
    ArgSpec::new("round_scale", T::Bool, D::Bool(false)),
    ArgSpec::new("use_ue8m0", T::Bool, D::Bool(false)),
    ArgSpec::new("benchmark_combine", T::Bool, D::Bool(true)),
    ArgSpec::new("num_warmups", T::Int, D::Int(20)).at_least(0),
    ArgSpec::new("num_iterations", T::Int, D::Int(50)).at_least(1),
    ArgSpec::new("shuffle_columns", T::Bool, D::Bool(false)),
    ArgSpec::new("use_kineto_profiler", T::Bool, D::Bool(false)),
    ArgSpec::new("enable_tuning", T::Bool, D::Bool(false)),
    ArgSpec::new("num_sms", T::Int, D::Int(24)).at_least(1),
    ArgSpec::new("num_qps_per_rank", T::Int, D::Int(12)).at_least(1),
    ArgSpec::new("v2_num_sms", T::Int, D::Int(12)).at_least(0),
    ArgSpec::new("v2_num_qps", T::Int, D::Int(0)).at_least(0),
    ArgSpec::new("v2_prefer_overlap_with_compute", T::Bool, D::Bool(false)),
    ArgSpec::new("config_file_path", T::Str, D::Str("/tmp/config.yaml")),
    ArgSpec::new("results_dir", T::Str, D::Str("/workspace/DeepEP/results")),
];

/// Fields of the job, not of the benchmark's configuration.
const NOT_CONFIG: [&str; 8] = [
    "docker_image_url",
    "benchmark_root",
    "mode",
    "deepep_versions",
    "num_sms",
    "num_qps_per_rank",
    "config_file_path",
    "results_dir",
];

const DEFAULT_VERSIONS: [&str; 2] = ["legacy", "elastic"];
const HYBRID: [&str; 3] = ["deepep_hybrid", "hybrid", "hybrid_ep"];

/// Each backend's own environment before its run (CloudAI's table).
fn backend_env(version: &str) -> &'static [&'static str] {
    const NCCL_GIN: [&str; 6] = [
        "NCCL_IB_GID_INDEX=auto",
        "NCCL_NET_PLUGIN=none",
        "NCCL_IB_QPS_PER_CONNECTION=4",
        "NCCL_IB_SPLIT_DATA_ON_QPS=0",
        "NCCL_IBEXT_DISABLE=0",
        "OMPI_MCA_btl=tcp,self",
    ];
    const NIXL_EP: [&str; 8] = [
        NCCL_GIN[0],
        NCCL_GIN[1],
        NCCL_GIN[2],
        NCCL_GIN[3],
        NCCL_GIN[4],
        NCCL_GIN[5],
        "EP_SUPPRESS_NCCL_CHECK=1",
        "NCCL_GIN_TYPE=3",
    ];
    const NCCL_EP: [&str; 9] = [
        NCCL_GIN[0],
        NCCL_GIN[1],
        NCCL_GIN[2],
        NCCL_GIN[3],
        NCCL_GIN[4],
        NCCL_GIN[5],
        "NCCL_GIN_TYPE=3",
        "EP_SKIP_DEEPEP_PREIMPORT=1",
        "LD_LIBRARY_PATH=/opt/nccl-ep-build/lib:$LD_LIBRARY_PATH",
    ];
    const HYBRID_ENV: [&str; 6] = [
        "NCCL_IB_GID_INDEX=auto",
        "NUM_OF_TOKENS_PER_CHUNK_DISPATCH_API=64",
        "NUM_OF_TOKENS_PER_CHUNK_COMBINE_API=64",
        "NUM_OF_TOKENS_PER_CHUNK_PREPROCESSING_API=64",
        "CPATH=/usr/local/ucx-nixl/include:/usr/local/nixl/include:/usr/local/nixl/include/gpu/ucx:$CPATH",
        "CPLUS_INCLUDE_PATH=/usr/local/ucx-nixl/include:/usr/local/nixl/include:/usr/local/nixl/include/gpu/ucx:$CPATH",
    ];
    match version {
        "nixl_ep" => &NIXL_EP,
        "nccl_ep" => &NCCL_EP,
        v if HYBRID.contains(&v) => &HYBRID_ENV,
        _ => &[],
    }
}

impl TemplateSchema for MoeBenchmark {
    fn template(&self) -> &'static str {
        "MoEBenchmark"
    }
    fn args(&self) -> &'static [ArgSpec] {
        ARGS
    }
    /// Other keys go into the benchmark's configuration.
    fn extra_args(&self) -> bool {
        true
    }
}

fn versions(test: &TestDefinition) -> Vec<String> {
    match test.cmd_args.get("deepep_versions") {
        Some(ArgValue::List(l)) if !l.is_empty() => l.iter().map(ArgValue::py_str).collect(),
        _ => vec!["legacy".into()],
    }
}

impl Workload for MoeBenchmark {
    fn needs(&self) -> super::Needs {
        super::Needs::Srun
    }

    /// `deepep_versions` defaults to legacy and elastic (CloudAI's default list), in its place among the fields.
    fn derive(&self, test: &mut TestDefinition, _tasks_per_node: Option<u64>) {
        let values = &mut test.cmd_args.values;
        if !values.contains_key("deepep_versions") {
            let at = values.get_index_of("mode").map_or(values.len(), |i| i + 1);
            let list = DEFAULT_VERSIONS
                .iter()
                .map(|v| ArgValue::Str(v.to_string()))
                .collect();
            values.shift_insert(at, "deepep_versions".into(), ArgValue::List(list));
        }
    }

    fn launch(&self, test: &TestDefinition, _at: &Placement) -> Launch {
        let a = &test.cmd_args;
        let s = |k: &str| a.get(k).map(ArgValue::py_str).unwrap_or_default();
        let script = format!(
            "{}/benchmark.py",
            crate::config::args::pure_path(&s("benchmark_root"))
        );
        let config = s("config_file_path");
        let mut words: Vec<String> = Vec::new();
        let versions = versions(test);
        for v in &versions {
            if !words.is_empty() {
                words.push("&&".into());
            }
            words.extend(backend_env(v).iter().map(|e| e.to_string()));
            words.extend(["python".into(), script.clone(), config.clone(), v.clone()]);
        }
        let (program, args) = (words[0].clone(), words[1..].to_vec());
        let hybrid = versions.iter().any(|v| HYBRID.contains(&v.as_str()));
        let nsys = super::nsys_prefix(test)
            .map(|p| format!("{p} "))
            .unwrap_or_default();
        let main = Step::Task {
            all_nodes: true,
            own_image: false,
            opts: Vec::new(),
            cmd: format!(
                "bash -c \"source {RUN_DIR}/env_vars.sh; {nsys}{}\"",
                words.join(" ")
            ),
        };
        let mut steps = Vec::new();
        if hybrid {
            steps.push(super::etcd::start("etcd", false));
            steps.extend(super::etcd::wait(60));
        }
        steps.push(main);
        if hybrid {
            steps.push(super::etcd::stop());
        }
        let mut job_env = vec![
            ("MASTER_ADDR", "$SLURM_JOB_MASTER_NODE"),
            ("MASTER_PORT", "29500"),
        ];
        if hybrid {
            job_env.push(("NIXL_ETCD_ENDPOINTS", "\"$SLURM_JOB_MASTER_NODE:2379\""));
        }
        let job_env = job_env
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Launch {
            has_profiler: true,
            steps: Some(Steps {
                steps,
                setup_in_image: true,
                job_env,
                env_file: EnvFile::WithJobEnv,
                mounts: vec![
                    Mount {
                        source: "config.yaml".into(),
                        target: config,
                        file_size: Some(0),
                    },
                    Mount {
                        source: String::new(),
                        target: s("results_dir"),
                        file_size: None,
                    },
                ],
                files: vec![("config.yaml".into(), config_yaml(test))],
                ..Default::default()
            }),
            ..Launch::process(program, args).in_test_image(test).judged_by(Success::OutputMatches {
                ere: "global_bw|RDMA BW \\(GB/s\\)|NVLink BW \\(GB/s\\)|Bus BW \\(GB/s\\)|Global BW \\(GB/s\\)",
                matches: printed_bandwidth,
            })
        }
    }

    fn grade(&self, test: &TestDefinition, dir: &Path, _outcome: &JobOutcome) -> Verdict {
        verdict(&read(dir), versions(test).len())
    }

    fn report(&self, test: &TestDefinition, dir: &Path, title: &str) -> Option<IterationReport> {
        if !dir.join("stdout.txt").exists() {
            return None;
        }
        let runs = read(dir);
        let v = verdict(&runs, versions(test).len());
        let num = |x: Option<f64>| kit::csv_num(x);
        let table = kit::Table {
            header: vec![
                "mode",
                "num_ranks",
                "num_tokens",
                "hidden",
                "time_s",
                "bus_bw_avg",
                "bus_bw_min",
                "bus_bw_max",
                "global_bw",
                "timestamp",
            ],
            rows: runs
                .iter()
                .flat_map(|r| {
                    r.results.iter().map(move |x| {
                        vec![
                            r.mode.clone(),
                            r.ranks.to_string(),
                            num(x.num_tokens),
                            num(x.hidden),
                            num(x.time_s),
                            num(x.bus_bw_avg),
                            num(x.bus_bw_min),
                            num(x.bus_bw_max),
                            num(x.global_bw),
                            r.timestamp.clone(),
                        ]
                    })
                })
                .collect(),
        };
        let page = TablePage {
            title,
            verdict: &v.status_line(),
            passed: v.passed,
            cards: vec![("runs".into(), runs.len().to_string())],
            charts: serde_json::json!({}),
            show: Vec::new(),
            sections: vec![table.section("Results")],
        }
        .render();
        Some(IterationReport {
            files: vec![
                (format!("cloudai_{}_report.csv", test.name), table.csv()),
                ("moe_benchmark.html".into(), page),
            ],
            verdict: Some(v),
            ..Default::default()
        })
    }
}

fn printed_bandwidth(line: &str) -> bool {
    [
        "global_bw",
        "RDMA BW (GB/s)",
        "NVLink BW (GB/s)",
        "Bus BW (GB/s)",
        "Global BW (GB/s)",
    ]
    .iter()
    .any(|w| line.contains(w))
}

/// The benchmark's configuration as CloudAI writes it: `benchmark_type`, then every other field (extra keys too):
/// booleans lower case, strings quoted.
fn config_yaml(test: &TestDefinition) -> String {
    let mut lines = vec![
        "# MoE Benchmark Configuration".to_string(),
        "# Generated by CloudAI".into(),
        String::new(),
        format!(
            "benchmark_type: \"{}\"",
            test.cmd_args.str("mode").unwrap_or("standard")
        ),
    ];
    for (k, v) in test
        .cmd_args
        .values
        .iter()
        .filter(|(k, _)| !NOT_CONFIG.contains(&k.as_str()))
    {
        lines.push(match v {
            ArgValue::Bool(b) => format!("{k}: {b}"),
            ArgValue::Str(s) => format!("{k}: \"{s}\""),
            other => format!("{k}: {}", other.py_str()),
        });
    }
    lines.join("\n")
}

/// One result of a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Result {
    pub num_tokens: Option<f64>,
    pub hidden: Option<f64>,
    pub time_s: Option<f64>,
    pub bus_bw_avg: Option<f64>,
    pub bus_bw_min: Option<f64>,
    pub bus_bw_max: Option<f64>,
    pub global_bw: Option<f64>,
}

/// One run's result directory (`benchmark_<ranks>_ranks_<time>_<mode>`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Run {
    pub dir: PathBuf,
    pub ranks: u64,
    pub timestamp: String,
    pub mode: String,
    /// None when `results.json` is missing or not a list of results.
    pub parsed: bool,
    pub results: Vec<Result>,
}

/// Every run under an iteration's directory (`results/benchmark_*` or `benchmark_*`), in name order.
pub fn read(dir: &Path) -> Vec<Run> {
    let mut dirs: Vec<PathBuf> = [dir.join("results"), dir.to_path_buf()]
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_dir()
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("benchmark_") && n.contains("_ranks_"))
        })
        .collect();
    dirs.sort();
    dirs.into_iter().map(|d| run(&d)).collect()
}

fn run(d: &Path) -> Run {
    let name = d
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("")
        .to_string();
    let rest = name.strip_prefix("benchmark_").unwrap_or("");
    let (ranks, rest) = rest.split_once("_ranks_").unwrap_or(("0", rest));
    let (timestamp, mode) = ["_low_latency", "_standard"]
        .iter()
        .find_map(|m| {
            rest.strip_suffix(m)
                .map(|t| (t.to_string(), m[1..].to_string()))
        })
        .unwrap_or((rest.to_string(), "unknown".into()));
    let json: Option<serde_json::Value> = std::fs::read_to_string(d.join("results.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    let list = json.as_ref().and_then(|j| j.as_array());
    let results = list
        .into_iter()
        .flatten()
        .filter_map(|r| r.as_object())
        .map(|r| {
            let f = |k: &str| r.get(k).and_then(|v| v.as_f64());
            Result {
                num_tokens: f("num_tokens"),
                hidden: f("hidden"),
                time_s: f("time_s"),
                bus_bw_avg: f("bus_bw_avg"),
                bus_bw_min: f("bus_bw_min"),
                bus_bw_max: f("bus_bw_max"),
                global_bw: f("global_bw"),
            }
        })
        .collect();
    Run {
        dir: d.to_path_buf(),
        ranks: ranks.parse().unwrap_or(0),
        timestamp,
        mode,
        parsed: list.is_some(),
        results,
    }
}

/// The grade of the runs of `backends` backends.
pub fn verdict(runs: &[Run], backends: usize) -> Verdict {
    let fail = |kind: CheckKind, why: String| {
        let mut v = Verdict::fail(why.clone());
        v.checks.push(Check::fail(kind, why));
        v
    };
    if runs.len() < backends {
        return fail(
            CheckKind::Table,
            format!(
                "{} of the {backends} backends asked left a result directory (benchmark_<ranks>_ranks_<time>_<mode>): the chain stopped at a failed backend",
                runs.len()
            ),
        );
    }
    if let Some(r) = runs.iter().find(|r| !r.parsed || r.results.is_empty()) {
        return fail(
            CheckKind::Table,
            format!("{}: no results in results.json", r.dir.display()),
        );
    }
    // every backend ran in the same job: on the same ranks
    if let Some(r) = runs.iter().find(|r| r.ranks != runs[0].ranks) {
        return fail(
            CheckKind::Shape,
            format!(
                "{} ran on {} ranks, {} on {}",
                r.dir.display(),
                r.ranks,
                runs[0].dir.display(),
                runs[0].ranks
            ),
        );
    }
    let bw = |x: &Result| x.bus_bw_avg.or(x.global_bw);
    if let Some(r) = runs
        .iter()
        .find(|r| r.results.iter().any(|x| bw(x).is_none_or(|b| b <= 0.0)))
    {
        return fail(
            CheckKind::Table,
            format!("{}: a result without a bandwidth above 0", r.dir.display()),
        );
    }
    let low = runs
        .iter()
        .flat_map(|r| r.results.iter().filter_map(bw))
        .fold(f64::INFINITY, f64::min);
    Verdict::pass_with(format!(
        "{} run(s) on {} ranks; lowest bus bandwidth {low:.2} GB/s",
        runs.len(),
        runs[0].ranks
    ))
}
