//! Chakra execution-trace replay (CloudAI's `ChakraReplay`): PARAM's `comm_replay` replays the collectives of a
//! trace (`trace_path`, mounted from the hosts) `num_replays` times, one MPI rank per GPU. Its rank 0 lists every
//! rank (`Hello from Rank r: [Rank   r] host h, device: cuda:0, … world_size: W`), then prints the replay's
//! performance: the end-to-end latency over its iterations and a latency table per collective. Graded on that:
//! every rank said hello (and the ranks sit where the job put them), the replay finished every iteration asked,
//! each collective has its latencies; CloudAI passes every run.

use std::path::Path;

use super::judge::{Check, CheckKind, SeenRank, Shown};
use super::kit::{self, TablePage};
use super::{IterationReport, JobOutcome, Launch, Placement, Success, Verdict, Workload};
use crate::config::args::{ArgDefault as D, ArgSpec, ArgType as T, ArgValue};
use crate::config::test::{TemplateSchema, TestDefinition};

pub(crate) struct ChakraReplay;

static ARGS: &[ArgSpec] = &[
    ArgSpec::new("docker_image_url", T::Str, D::Required).single(),
    ArgSpec::new("mpi", T::Str, D::Str("pmix")),
    ArgSpec::new("trace_type", T::Str, D::Str("et")),
    ArgSpec::new("trace_path", T::Str, D::Unset),
    ArgSpec::new("num_replays", T::Int, D::Int(1)).at_least(1),
];

const DONE: &str = "Performance of replayed comms";

impl TemplateSchema for ChakraReplay {
    fn template(&self) -> &'static str {
        "ChakraReplay"
    }
    fn args(&self) -> &'static [ArgSpec] {
        ARGS
    }
    /// Other keys are comm_replay's options (`--<key-with-dashes> <value>`).
    fn extra_args(&self) -> bool {
        true
    }
}

impl Workload for ChakraReplay {
    /// Its trace is a path of the hosts, mounted into the job's container: Slurm only, as CloudAI.
    fn needs(&self) -> super::Needs {
        super::Needs::Srun
    }

    /// CloudAI writes `--trace-path None` when the test names no trace; refused here before anything runs.
    fn check(&self, test: &TestDefinition, _at: &Placement) -> Vec<String> {
        if test.cmd_args.str("trace_path").is_none() {
            return vec![
                "cmd_args.trace_path is not set: comm_replay has no trace to replay; set it to the trace directory on \
                 the hosts (it is mounted at the same path)"
                    .into(),
            ];
        }
        Vec::new()
    }

    fn launch(&self, test: &TestDefinition, _at: &Placement) -> Launch {
        let a = &test.cmd_args;
        let s = |k: &str| {
            a.get(k)
                .map(ArgValue::py_str)
                .unwrap_or_else(|| "None".into())
        };
        let q = |v: String| crate::util::shell::quote(&v).into_owned();
        let mut args = vec![
            "--trace-type".into(),
            q(s("trace_type")),
            "--trace-path".into(),
            q(s("trace_path")),
            "--num-replays".into(),
            s("num_replays"),
        ];
        let declared: Vec<&str> = ARGS.iter().map(|a| a.name).collect();
        for (k, v) in a
            .values
            .iter()
            .filter(|(k, _)| !declared.contains(&k.as_str()))
        {
            args.push(format!("--{}", k.replace('_', "-")));
            args.push(q(v.py_str()));
        }
        super::push_extra_args(test, &mut args);
        // CloudAI joins an empty extra-arguments word: its command ends with a space
        if test.extra_cmd_args.is_empty() {
            args.push(String::new());
        }
        let mut launch = Launch::mpi("comm_replay", args)
            .in_test_image(test)
            .judged_by(Success::OutputContains(DONE));
        if let Some(p) = a.str("trace_path") {
            launch.host_mounts.push(format!("{p}:{p}"));
        }
        launch
    }

    fn grade(&self, test: &TestDefinition, dir: &Path, _outcome: &JobOutcome) -> Verdict {
        match std::fs::read_to_string(dir.join("stdout.txt")) {
            Ok(text) => verdict(&parse(&text), replays(test)),
            Err(_) => Verdict::fail("stdout.txt was not created: the job wrote no output"),
        }
    }

    fn report(&self, test: &TestDefinition, dir: &Path, title: &str) -> Option<IterationReport> {
        let out = parse(&std::fs::read_to_string(dir.join("stdout.txt")).ok()?);
        let v = verdict(&out, replays(test));
        let num = |x: f64| kit::csv_num(Some(x));
        let table = kit::Table {
            header: vec![
                "comm", "count", "total_us", "max_us", "min_us", "avg_us", "p50_us", "p95_us",
            ],
            rows: out
                .colls
                .iter()
                .map(|c| {
                    let mut row = vec![c.name.clone(), c.count.to_string()];
                    row.extend(c.latency.iter().map(|x| num(*x)));
                    row
                })
                .collect(),
        };
        let mut metrics = serde_json::Map::new();
        if let Some(e) = out.e2e_per_iter_us {
            metrics.insert("e2e_latency_per_iter_us".into(), e.into());
        }
        let page = TablePage {
            title,
            verdict: &v.status_line(),
            passed: v.passed,
            cards: vec![
                (
                    "ranks".into(),
                    out.world.map_or("?".into(), |w| w.to_string()),
                ),
                (
                    "per iteration".into(),
                    out.e2e_per_iter_us
                        .map_or("none".into(), |e| format!("{e:.2} us")),
                ),
                ("collectives".into(), out.colls.len().to_string()),
            ],
            charts: serde_json::json!({}),
            show: Vec::new(),
            sections: vec![table.section("Latency (us) per collective")],
        }
        .render();
        Some(IterationReport {
            files: vec![
                ("chakra_replay.csv".into(), table.csv()),
                ("chakra_replay_report.html".into(), page),
            ],
            metrics,
            verdict: Some(v),
            ..Default::default()
        })
    }
}

fn replays(test: &TestDefinition) -> u64 {
    test.cmd_args
        .get("num_replays")
        .and_then(ArgValue::as_int)
        .map_or(1, |n| n.max(1) as u64)
}

/// One replayed collective: how many calls, and their latency (total, max, min, average, p50, p95), µs.
#[derive(Clone, Debug, PartialEq)]
pub struct Coll {
    pub name: String,
    pub count: u64,
    pub latency: Vec<f64>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Output {
    /// Every rank rank 0 listed, by rank number.
    pub ranks: Vec<(u64, SeenRank)>,
    pub world: Option<u64>,
    /// The performance summary was printed.
    pub finished: bool,
    /// `E2E latency (us): … for N iters, X per iter in avg`.
    pub iterations: Option<u64>,
    pub e2e_per_iter_us: Option<f64>,
    pub colls: Vec<Coll>,
    pub errors: Vec<(usize, String)>,
}

/// The text after `key` up to the next comma or space.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let at = line.find(key)? + key.len();
    line[at..].trim_start().split([',', ' ']).next()
}

/// Reads comm_replay's output (its log lines may carry a logger prefix).
pub fn parse(text: &str) -> Output {
    let mut out = Output::default();
    let mut tracebacks = kit::Tracebacks::default();
    let mut want_latency = false;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if tracebacks.feed(n, line, &mut out.errors) {
            continue;
        }
        if let Some(at) = line.find("Hello from Rank ") {
            let rest = &line[at..];
            let rank =
                field(rest, "Hello from Rank ").and_then(|r| r.trim_end_matches(':').parse().ok());
            out.world = field(rest, "world_size:")
                .and_then(|w| w.parse().ok())
                .or(out.world);
            if let Some(r) = rank {
                out.ranks.push((
                    r,
                    SeenRank {
                        host: field(rest, " host ").unwrap_or("").to_string(),
                        gpu: field(rest, "device:").unwrap_or("").to_string(),
                        device: String::new(),
                    },
                ));
            }
        } else if line.contains(DONE) {
            out.finished = true;
        } else if let Some(at) = line.find("E2E latency (us):") {
            let rest = &line[at..];
            out.iterations = field(rest, " for ").and_then(|x| x.parse().ok());
            out.e2e_per_iter_us = rest
                .split("iters,")
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .and_then(|x| x.parse().ok());
        } else if let Some(at) = line.find(" Replayed ").filter(|_| line.contains("%)")) {
            let mut words = line[at + 10..].split_whitespace();
            if let (Some(count), Some(name)) =
                (words.next().and_then(|c| c.parse().ok()), words.next())
            {
                out.colls.push(Coll {
                    name: name.to_string(),
                    count,
                    latency: Vec::new(),
                });
            }
        } else if line.contains("Latency (us)") {
            want_latency = true;
        } else if want_latency {
            let nums: Vec<f64> = line
                .split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect();
            if nums.len() == 6 && line.split_whitespace().count() >= 6 {
                if let Some(c) = out.colls.last_mut().filter(|c| c.latency.is_empty()) {
                    c.latency = nums;
                }
                want_latency = false;
            }
        } else if super::launcher_failure(line) {
            out.errors.push((n, line.trim().to_string()));
        }
    }
    out
}

/// The grade of a replay asked for `replays` iterations.
pub fn verdict(out: &Output, replays: u64) -> Verdict {
    if let Some((n, l)) = out.errors.first() {
        return Verdict::fail(format!("comm_replay failed (stdout.txt line {n}): {l}"));
    }
    let Some(world) = out.world.filter(|_| !out.ranks.is_empty()) else {
        return Verdict::fail(
            "no rank said hello (Hello from Rank …): comm_replay did not set up its ranks",
        );
    };
    if let Some(r) = (0..world).find(|r| !out.ranks.iter().any(|(x, _)| x == r)) {
        return Verdict::fail(format!(
            "rank {r} of {world} is missing from the hello list: the ranks did not all join"
        ));
    }
    let fail = |why: String| {
        let mut v = Verdict::fail(why.clone());
        v.checks.push(Check::fail(CheckKind::Table, why));
        v
    };
    if !out.finished {
        return fail(format!("no '{DONE}' summary: the replay did not finish"));
    }
    match out.iterations {
        Some(n) if n == replays => {}
        Some(n) => {
            return fail(format!(
                "the replay ran {n} of the {replays} iterations asked (num_replays)"
            ))
        }
        None => {
            return fail("no end-to-end latency line (E2E latency (us): …) in the summary".into())
        }
    }
    if out.colls.is_empty() {
        return fail("the summary lists no replayed collective".into());
    }
    if let Some(c) = out
        .colls
        .iter()
        .find(|c| c.latency.len() != 6 || c.latency[0] <= 0.0)
    {
        return fail(format!("{} has no latency table", c.name));
    }
    let mut v = Verdict::pass_with(format!(
        "{replays} iteration(s), {} collective(s), {:.2} us per iteration",
        out.colls.len(),
        out.e2e_per_iter_us.unwrap_or(0.0)
    ));
    v.shown = Some(Shown {
        ranks: out.ranks.iter().map(|(_, r)| r.clone()).collect(),
        own_floor: true,
        ..Default::default()
    });
    v
}
