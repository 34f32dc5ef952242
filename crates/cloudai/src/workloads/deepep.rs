//! DeepEP's own tests (CloudAI's `DeepEP`): one of `test_internode`, `test_intranode`, `test_low_latency` (DeepEP's
//! legacy tests) or `test_ep` (its elastic test), started by torchrun once per node, each spawning
//! `num_processes` processes (one per GPU). Slurm only, as CloudAI: the batch script finds its head node's address
//! first. Graded on what each test prints: every correctness case passed (`[testing] … passed`), the tuned
//! bandwidths of the legacy normal kernels (`[tuning] Best dispatch (FP8|BF16)`, `Best combine`), every rank's
//! bandwidth line for low-latency and elastic runs (`[rank r] Dispatch + combine bandwidth`, `EP: r/N | dispatch`),
//! no traceback, assertion or launcher failure.

use std::path::Path;

use super::kit::{self, TablePage};
use super::launch::{Step, Steps, RUN_DIR};
use super::{IterationReport, JobOutcome, Launch, Placement, Success, Verdict, Workload};
use crate::config::args::{ArgDefault as D, ArgSpec, ArgType as T, ArgValue};
use crate::config::test::{TemplateSchema, TestDefinition};
use crate::workloads::judge::{Check, CheckKind};

pub(crate) struct DeepEp;

const SUBTESTS: &[&str] = &[
    "test_internode",
    "test_intranode",
    "test_low_latency",
    "test_ep",
];

static ARGS: &[ArgSpec] = &[
    ArgSpec::new("docker_image_url", T::Str, D::Required).single(),
    ArgSpec::new("subtest_name", T::Enum(SUBTESTS), D::Str("test_internode")),
    ArgSpec::new("deep_ep_root", T::Str, D::Str("/workspace/DeepEP")),
    ArgSpec::new("legacy_tests_root", T::Str, D::Unset),
    ArgSpec::new("elastic_tests_root", T::Str, D::Unset),
    ArgSpec::new("python_executable", T::Str, D::Str("python")),
    ArgSpec::new("num_processes", T::Int, D::Int(8)).at_least(1),
    ArgSpec::new("num_tokens", T::Int, D::Int(4096)).at_least(1),
    ArgSpec::new("hidden", T::Int, D::Int(7168)).at_least(1),
    ArgSpec::new("num_topk", T::Int, D::Int(8)).at_least(1),
    ArgSpec::new("num_experts", T::Int, D::Int(256)).at_least(1),
    ArgSpec::new("num_topk_groups", T::Int, D::Unset).at_least(1),
    ArgSpec::new("allow_mnnvl", T::Bool, D::Bool(false)),
    ArgSpec::new("test_ll_compatibility", T::Bool, D::Bool(false)),
    ArgSpec::new("pressure_test_mode", T::Int, D::Int(0)).at_least(0),
    ArgSpec::new("pressure_test", T::Bool, D::Bool(false)),
    ArgSpec::new("shrink_test", T::Bool, D::Bool(false)),
    ArgSpec::new("disable_nvlink", T::Bool, D::Bool(false)),
    ArgSpec::new("use_logfmt", T::Bool, D::Bool(false)),
    ArgSpec::new("num_sms", T::Int, D::Int(0)).at_least(0),
    ArgSpec::new("num_qps", T::Int, D::Int(0)).at_least(0),
    ArgSpec::new("num_allocated_qps", T::Int, D::Int(0)).at_least(0),
    ArgSpec::new("num_gpu_timeout_secs", T::Int, D::Int(100)).at_least(1),
    ArgSpec::new("num_cpu_timeout_secs", T::Int, D::Int(100)).at_least(1),
    ArgSpec::new("sl_idx", T::Int, D::Int(0)).at_least(0),
    ArgSpec::new("do_cpu_sync", T::Int, D::Int(1)).at_least(0),
    ArgSpec::new("allow_hybrid_mode", T::Int, D::Int(1)).at_least(0),
    ArgSpec::new("allow_multiple_reduction", T::Int, D::Int(1)).at_least(0),
    ArgSpec::new("prefer_overlap_with_compute", T::Int, D::Int(0)).at_least(0),
    ArgSpec::new("deterministic", T::Bool, D::Bool(false)),
    ArgSpec::new("seed", T::Int, D::Int(0)).at_least(0),
    ArgSpec::new("skip_check", T::Bool, D::Bool(false)),
    ArgSpec::new("skip_perf_test", T::Bool, D::Bool(false)),
    ArgSpec::new("do_pressure_test", T::Bool, D::Bool(false)),
    ArgSpec::new("reuse_elastic_buffer", T::Bool, D::Bool(false)),
    ArgSpec::new("test_first_only", T::Bool, D::Bool(false)),
    ArgSpec::new("unbalanced_ratio", T::Float, D::Float(1.0)),
    ArgSpec::new("precise_unbalanced_ratio", T::Bool, D::Bool(false)),
    ArgSpec::new("masked_ratio", T::Float, D::Float(0.0)),
    ArgSpec::new("dump_profile_traces", T::Str, D::Str("")),
    ArgSpec::new("ignore_local_traffic", T::Bool, D::Bool(false)),
];

/// The options each test takes, in CloudAI's order.
fn options(subtest: &str) -> &'static [&'static str] {
    match subtest {
        "test_internode" => &[
            "num_processes",
            "num_tokens",
            "hidden",
            "num_topk_groups",
            "num_topk",
            "pressure_test_mode",
            "num_experts",
            "test_ll_compatibility",
        ],
        "test_intranode" => &[
            "num_processes",
            "num_tokens",
            "hidden",
            "num_topk",
            "num_experts",
            "allow_mnnvl",
        ],
        "test_low_latency" => &[
            "num_processes",
            "num_tokens",
            "hidden",
            "num_topk",
            "num_experts",
            "allow_mnnvl",
            "disable_nvlink",
            "use_logfmt",
            "pressure_test",
            "shrink_test",
        ],
        _ => &[
            "num_processes",
            "num_sms",
            "num_qps",
            "num_allocated_qps",
            "num_gpu_timeout_secs",
            "num_cpu_timeout_secs",
            "sl_idx",
            "num_tokens",
            "hidden",
            "num_topk",
            "num_experts",
            "do_cpu_sync",
            "allow_hybrid_mode",
            "allow_multiple_reduction",
            "prefer_overlap_with_compute",
            "deterministic",
            "seed",
            "skip_check",
            "skip_perf_test",
            "do_pressure_test",
            "reuse_elastic_buffer",
            "test_first_only",
            "unbalanced_ratio",
            "precise_unbalanced_ratio",
            "masked_ratio",
            "dump_profile_traces",
            "ignore_local_traffic",
        ],
    }
}

/// The batch script's lines that find the head node's address for torchrun's rendezvous.
const HEAD_NODE: &[&str] = &[
    "",
    "nodes=( $( scontrol show hostnames $SLURM_JOB_NODELIST ) )",
    "nodes_array=($nodes)",
    "head_node=${nodes_array[0]}",
    "head_node_ip=$(srun --nodes=1 --ntasks=1 -w \"$head_node\" hostname --ip-address)",
    "",
    "echo Nodes: $SLURM_JOB_NODELIST",
    "echo Num Nodes: ${#nodes[@]}",
    "echo Head Node IP: $head_node_ip",
    "",
    "export MASTER_ADDR=$head_node_ip",
    "export MASTER_PORT=29500",
    "",
];

/// A hook's run of it succeeded when it printed a test or tuning line (CloudAI's check).
const SUCCESS_ERE: &str = "\\[testing\\]|dispatch|combine|passed|tuning|Best";

fn printed_a_result(line: &str) -> bool {
    [
        "[testing]",
        "dispatch",
        "combine",
        "passed",
        "tuning",
        "Best",
    ]
    .iter()
    .any(|w| line.contains(w))
}

impl TemplateSchema for DeepEp {
    fn template(&self) -> &'static str {
        "DeepEP"
    }
    fn args(&self) -> &'static [ArgSpec] {
        ARGS
    }
}

fn subtest(test: &TestDefinition) -> &str {
    test.cmd_args
        .str("subtest_name")
        .unwrap_or("test_internode")
}

fn int(test: &TestDefinition, k: &str) -> Option<i64> {
    test.cmd_args.get(k).and_then(ArgValue::as_int)
}

impl Workload for DeepEp {
    fn needs(&self) -> super::Needs {
        super::Needs::Srun
    }

    /// What DeepEP's tests assert of their placement, found before anything runs.
    fn check(&self, test: &TestDefinition, at: &Placement) -> Vec<String> {
        let procs = int(test, "num_processes").unwrap_or(8);
        let mut out = Vec::new();
        if let Some(g) = at.gpus_per_node.filter(|g| *g > 0 && (procs as u64) > *g) {
            out.push(format!(
                "cmd_args.num_processes = {procs}: one process per GPU, but the system has gpus_per_node = {g}"
            ));
        }
        if subtest(test) == "test_internode" && (procs != 8 || at.nodes < 2) {
            out.push(format!(
                "DeepEP's test_internode runs 8 processes on each of 2 or more nodes (it asserts so); this test asks \
                 num_processes = {procs} on {} node(s)",
                at.nodes
            ));
        }
        out
    }

    fn launch(&self, test: &TestDefinition, at: &Placement) -> Launch {
        let a = &test.cmd_args;
        let sub = subtest(test);
        let root = |k: &str, under: &str| match a.str(k) {
            Some(r) => r.trim_end_matches('/').to_string(),
            None => format!(
                "{}/tests/{under}",
                a.str("deep_ep_root").unwrap_or("").trim_end_matches('/')
            ),
        };
        let dir = if sub == "test_ep" {
            root("elastic_tests_root", "elastic")
        } else {
            root("legacy_tests_root", "legacy")
        };
        let mut args = vec![
            format!("--nnodes={}", at.nodes),
            "--nproc_per_node=1".into(),
            "--rdzv_id=\\${SLURM_JOB_ID:-0}".into(),
            "--rdzv_backend=c10d".into(),
            "--rdzv_endpoint=\\${MASTER_ADDR}:\\${MASTER_PORT}".into(),
            format!("{dir}/{sub}.py"),
        ];
        for k in options(sub) {
            let flag = format!("--{}", k.replace('_', "-"));
            match a.get(k) {
                Some(ArgValue::Bool(true)) => args.push(flag),
                Some(ArgValue::Bool(false)) | None => {}
                Some(v) if v.py_str().is_empty() => {}
                Some(v) => args.extend([flag, crate::util::shell::quote(&v.py_str()).into_owned()]),
            }
        }
        super::push_extra_args(test, &mut args);
        let launch = Launch::process("torchrun", args)
            .in_test_image(test)
            .judged_by(Success::OutputMatches {
                ere: SUCCESS_ERE,
                matches: printed_a_result,
            });
        let cmd = super::with_nsys(test, launch.command_line());
        let n = at.nodes;
        Launch {
            has_profiler: true,
            steps: Some(Steps {
                steps: vec![Step::Task {
                    all_nodes: false,
                    own_image: false,
                    opts: vec![
                        format!("--nodes={n}"),
                        format!("--ntasks={n}"),
                        "--ntasks-per-node=1".into(),
                    ],
                    cmd: format!("bash -c \"source {RUN_DIR}/env_vars.sh; {cmd}\""),
                }],
                setup_in_image: true,
                prologue: HEAD_NODE.iter().map(|l| l.to_string()).collect(),
                ..Default::default()
            }),
            ..launch
        }
    }

    fn grade(&self, test: &TestDefinition, dir: &Path, _outcome: &JobOutcome) -> Verdict {
        match std::fs::read_to_string(dir.join("stdout.txt")) {
            Ok(text) => grade_text(&text, test),
            Err(_) => Verdict::fail("stdout.txt was not created: the job wrote no output"),
        }
    }

    fn report(&self, test: &TestDefinition, dir: &Path, title: &str) -> Option<IterationReport> {
        let out = parse(&std::fs::read_to_string(dir.join("stdout.txt")).ok()?);
        let v = verdict(&out, subtest(test), skips_perf(test), procs(test));
        let table = kit::Table {
            header: vec!["kernel", "rank", "rdma_gbps", "nvl_gbps"],
            rows: out
                .results
                .iter()
                .map(|r| {
                    vec![
                        r.kernel.clone(),
                        r.rank.map(|x| x.to_string()).unwrap_or_default(),
                        kit::csv_num(r.rdma),
                        kit::csv_num(r.nvl),
                    ]
                })
                .collect(),
        };
        let mut metrics = serde_json::Map::new();
        for r in out.results.iter().filter(|r| r.rank.is_none()) {
            let key: Vec<String> = r
                .kernel
                .to_lowercase()
                .split(|c: char| !c.is_ascii_alphanumeric())
                .filter(|w| !w.is_empty())
                .map(str::to_string)
                .collect();
            let key = key.join("_");
            if let Some(x) = r.rdma {
                metrics.insert(format!("{key}_rdma_gbps"), x.into());
            }
            if let Some(x) = r.nvl {
                metrics.insert(format!("{key}_nvl_gbps"), x.into());
            }
        }
        let page = TablePage {
            title,
            verdict: &v.status_line(),
            passed: v.passed,
            cards: vec![
                ("test".into(), subtest(test).to_string()),
                (
                    "cases passed".into(),
                    format!("{}/{}", out.passed, out.cases),
                ),
                ("results".into(), out.results.len().to_string()),
            ],
            charts: serde_json::json!({}),
            show: Vec::new(),
            sections: vec![table.section("Bandwidth")],
        }
        .render();
        Some(IterationReport {
            files: vec![
                ("deepep.csv".into(), table.csv()),
                ("deepep.html".into(), page),
            ],
            metrics,
            verdict: Some(v),
            ..Default::default()
        })
    }
}

fn skips_perf(test: &TestDefinition) -> bool {
    test.cmd_args.get("skip_perf_test") == Some(&ArgValue::Bool(true))
}

fn grade_text(text: &str, test: &TestDefinition) -> Verdict {
    verdict(&parse(text), subtest(test), skips_perf(test), procs(test))
}

/// Processes each node's torchrun spawns.
fn procs(test: &TestDefinition) -> u64 {
    int(test, "num_processes").map_or(8, |n| n.max(1) as u64)
}

/// One bandwidth result: a tuned best (no rank) or one rank's line.
#[derive(Clone, Debug, PartialEq)]
pub struct Bandwidth {
    /// `dispatch (FP8)`, `dispatch (BF16)`, `combine`, `dispatch + combine`, `dispatch`, …
    pub kernel: String,
    pub rank: Option<u64>,
    /// Across nodes (DeepEP's RDMA, the elastic test's scale-out) and within (NVL, scale-up), GB/s.
    pub rdma: Option<f64>,
    pub nvl: Option<f64>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Output {
    /// Correctness cases started (`[testing] Running with …`) and passed (` passed` after them).
    pub cases: usize,
    pub passed: usize,
    pub results: Vec<Bandwidth>,
    /// The world size the elastic test states (`EP:   3/16`).
    pub world: Option<u64>,
    /// Lines saying the run failed, with their line numbers.
    pub errors: Vec<(usize, String)>,
}

/// The number before `unit` in `text` (`44.89 GB/s (RDMA)` → 44.89).
fn number_before(text: &str, unit: &str) -> Option<f64> {
    let at = text.find(unit)?;
    text[..at]
        .trim_end()
        .rsplit([' ', ',', ':'])
        .next()?
        .parse()
        .ok()
}

/// Reads a DeepEP test's output.
pub fn parse(text: &str) -> Output {
    let mut out = Output::default();
    let mut tracebacks = kit::Tracebacks::default();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if tracebacks.feed(n, line, &mut out.errors) {
            continue;
        }
        let t = line.trim();
        if t.contains("[testing] Running with") {
            out.cases += 1;
            if t.ends_with("passed") {
                out.passed += 1;
            }
        } else if let Some(rest) = t.strip_prefix("[tuning] Best ") {
            let kernel = rest.split(':').next().unwrap_or("").trim().to_string();
            out.results.push(Bandwidth {
                kernel,
                rank: None,
                rdma: number_before(rest, "GB/s (RDMA)"),
                nvl: number_before(rest, "GB/s (NVL)"),
            });
        } else if t.starts_with("[rank ") {
            // each rank's line; two ranks' prints may share a line (no newline between them)
            for rest in t.split("[rank ").skip(1) {
                let rank = rest.split(']').next().and_then(|r| r.trim().parse().ok());
                for part in rest.split('|') {
                    let Some((name, _)) = part.split_once(" bandwidth:") else {
                        continue;
                    };
                    let kernel = name
                        .rsplit(']')
                        .next()
                        .unwrap_or(name)
                        .trim()
                        .to_lowercase();
                    out.results.push(Bandwidth {
                        kernel,
                        rank,
                        rdma: None,
                        nvl: number_before(part, "GB/s"),
                    });
                }
            }
        } else if let Some(at) = t.find("EP: ").filter(|_| t.contains("GB/s (SO)")) {
            let rest = &t[at + 4..];
            let (who, what) = rest.split_once('|').unwrap_or((rest, ""));
            let (r, w) = who.trim().split_once('/').unwrap_or(("", ""));
            out.world = w.trim().parse().ok().or(out.world);
            out.results.push(Bandwidth {
                kernel: what.split(':').next().unwrap_or("").trim().to_string(),
                rank: r.trim().parse().ok(),
                rdma: number_before(what, "GB/s (SO)"),
                nvl: number_before(what, "GB/s (SU)"),
            });
        } else if t.contains("failed when first calling")
            || t.starts_with("AssertionError")
            || t.contains("DeepEP error")
            || t.contains("timeout") && t.contains("DeepEP")
            || super::launcher_failure(t)
        {
            out.errors.push((n, t.to_string()));
        }
    }
    out
}

/// The grade of a DeepEP output of test `sub` (`skip_perf`: the elastic test was told to skip its performance test;
/// `procs`: processes per node, so a world is whole nodes).
pub fn verdict(out: &Output, sub: &str, skip_perf: bool, procs: u64) -> Verdict {
    if let Some((n, l)) = out.errors.first() {
        return Verdict::fail(format!("DeepEP failed (stdout.txt line {n}): {l}"));
    }
    let legacy_normal = sub == "test_internode" || sub == "test_intranode";
    if legacy_normal && out.cases == 0 {
        return Verdict::fail(format!(
            "no correctness case ([testing] Running with …) in stdout.txt: {sub} did not start"
        ));
    }
    if out.passed < out.cases {
        let why = format!(
            "{} of {} correctness cases passed: the run stopped inside a case",
            out.passed, out.cases
        );
        let mut v = Verdict::fail(why.clone());
        v.checks.push(Check::fail(CheckKind::Wrong, why));
        return v;
    }
    let fail = |why: String| {
        let mut v = Verdict::fail(why.clone());
        v.checks.push(Check::fail(CheckKind::Table, why));
        v
    };
    let best = |k: &str| {
        out.results
            .iter()
            .find(|r| r.rank.is_none() && r.kernel == k)
    };
    let summary = if legacy_normal {
        let wanted = ["dispatch (FP8)", "dispatch (BF16)", "combine"];
        if let Some(k) = wanted.iter().find(|k| best(k).is_none()) {
            return fail(format!(
                "no tuned result for {k} ([tuning] Best {k}): the run stopped before its end"
            ));
        }
        let show = |k: &str| {
            let r = best(k).expect("checked above");
            match (r.rdma, r.nvl) {
                (Some(x), Some(y)) => format!("{k} {x:.2} GB/s RDMA, {y:.2} GB/s NVL"),
                (_, Some(y)) => format!("{k} {y:.2} GB/s NVL"),
                _ => format!("{k} (no bandwidth)"),
            }
        };
        format!(
            "{} cases passed; {}",
            out.passed,
            wanted.map(show).join("; ")
        )
    } else if sub == "test_ep" && skip_perf {
        "performance test skipped (skip_perf_test)".to_string()
    } else {
        // every rank prints its own bandwidth lines
        // the world the elastic test states, else the ranks seen rounded up to whole nodes (the last node's ranks
        // may all be missing from a cut output only if a whole node is: that shows in the shape of the job)
        let world = out.world.or_else(|| {
            let ranks: std::collections::BTreeSet<u64> =
                out.results.iter().filter_map(|r| r.rank).collect();
            ranks
                .last()
                .map(|r| (r + 1).div_ceil(procs.max(1)) * procs.max(1))
        });
        let Some(world) = world else {
            return fail(format!(
                "no bandwidth line in stdout.txt: {sub} did not reach its performance test"
            ));
        };
        let seen: std::collections::BTreeSet<u64> =
            out.results.iter().filter_map(|r| r.rank).collect();
        if let Some(r) = (0..world).find(|r| !seen.contains(r)) {
            return fail(format!(
                "rank {r} of {world} printed no bandwidth: the run stopped early"
            ));
        }
        let low = out
            .results
            .iter()
            .filter_map(|r| r.nvl.or(r.rdma))
            .fold(f64::INFINITY, f64::min);
        format!("{world} ranks; lowest rank bandwidth {low:.2} GB/s")
    };
    if let Some(r) = out
        .results
        .iter()
        .find(|r| [r.rdma, r.nvl].iter().flatten().any(|x| *x <= 0.0))
    {
        return fail(format!(
            "{} of rank {:?} moved nothing (0 GB/s)",
            r.kernel, r.rank
        ));
    }
    Verdict::pass_with(summary)
}
