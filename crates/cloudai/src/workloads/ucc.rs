//! UCC's `ucc_perftest` (CloudAI's `UCCTest`): one MPI rank per GPU runs a collective over a range of message
//! sizes. The command is CloudAI's; the output is parsed by its layout rules (header block, `Count Size Time, us
//! [Bandwidth, GB/s]` table with `avg min max [avg max min]` columns, `N/A` where a value does not apply), graded,
//! and reported as CSV and a chart page.

use std::path::Path;

use super::kit::{self, Section, TablePage};
use super::{
    Curve, IterationReport, JobOutcome, Launch, Metric, Point, Success, Verdict, Workload,
};
use crate::config::args::{ArgDefault as D, ArgSpec, ArgType as T};
use crate::config::test::{TemplateSchema, TestDefinition};
use crate::html::{chart_spec, human_size, series};
use crate::util::shell::quote;

pub(crate) struct UccTest;

const COLLECTIVES: &[&str] = &[
    "allgather",
    "allgatherv",
    "allreduce",
    "alltoall",
    "alltoallv",
    "barrier",
    "bcast",
    "gather",
    "gatherv",
    "reduce",
    "reduce_scatter",
    "reduce_scatterv",
    "scatter",
    "scatterv",
    "memcpy",
    "reducedt",
    "reducedt_strided",
];

static ARGS: &[ArgSpec] = &[
    ArgSpec::new("docker_image_url", T::Str, D::Required).single(),
    ArgSpec::new("collective", T::Enum(COLLECTIVES), D::Str("alltoall")),
    ArgSpec::new("b", T::Int, D::Int(1)).at_least(1),
    ArgSpec::new("e", T::Str, D::Str("8M")).size(),
    ArgSpec::new("gen", T::Str, D::Unset),
    ArgSpec::new("use_deepep_matrix", T::Bool, D::Bool(false)).single(),
];

pub(crate) const PROGRAM: &str = "/opt/hpcx/ucc/bin/ucc_perftest";
pub(crate) const CSV_FILE: &str = "cloudai_ucc_test_csv_report.csv";
pub(crate) const HTML_FILE: &str = "cloudai_ucc_test_bokeh_report.html";

impl TemplateSchema for UccTest {
    fn template(&self) -> &'static str {
        "UCCTest"
    }
    fn args(&self) -> &'static [ArgSpec] {
        ARGS
    }
}

fn arg(test: &TestDefinition, k: &str) -> String {
    test.cmd_args
        .get(k)
        .map(|v| quote(&v.py_str()).into_owned())
        .unwrap_or_default()
}

impl Workload for UccTest {
    /// Without a generator spec of its own, the test needs the benchmark's matrix.
    fn needs_post_comp(&self, test: &TestDefinition) -> Option<&'static str> {
        (super::deepep_matrix::requested(test) && test.cmd_args.get("gen").is_none())
            .then_some(super::deepep_matrix::NEEDS_DEPENDENCY)
    }

    /// `use_deepep_matrix`: the benchmark's `ucc_matrix.txt` handed over ([`super::deepep_matrix::to_ucc`]).
    fn handed(
        &self,
        test: &TestDefinition,
        chain: &[std::path::PathBuf],
    ) -> Result<Option<TestDefinition>, String> {
        super::deepep_matrix::to_ucc(test, chain)
    }

    fn launch(&self, test: &TestDefinition, _at: &super::Placement) -> Launch {
        let mut args = vec![
            "-c".to_string(),
            arg(test, "collective"),
            "-b".into(),
            arg(test, "b"),
            "-e".into(),
            arg(test, "e"),
        ];
        if test.cmd_args.get("gen").is_some() {
            args.extend(["--gen".into(), arg(test, "gen")]);
        }
        args.extend(["-m".into(), "cuda".into(), "-F".into()]);
        super::push_extra_args(test, &mut args);
        Launch::mpi(PROGRAM, args)
            .in_test_image(test)
            .judged_by(Success::ExitStatus)
    }

    /// A generator file (`gen = "file:name=<path in the container>"`, mounted from the host by
    /// `extra_container_mounts`) describes a team of a fixed size: one that the run's ranks do not match makes
    /// ucc_perftest fail on every node, so it is refused here. A file not present on this machine is not judged.
    fn check(&self, test: &TestDefinition, at: &super::Placement) -> Vec<String> {
        let matrix = super::deepep_matrix::check(test, at);
        if !matrix.is_empty() {
            return matrix;
        }
        let Some(target) = test
            .cmd_args
            .str("gen")
            .and_then(|g| g.strip_prefix("file:name="))
        else {
            return Vec::new();
        };
        let Some(host) = test.extra_container_mounts.iter().find_map(|m| {
            let (src, rest) = m.split_once(':')?;
            (rest.split(':').next()? == target).then_some(src)
        }) else {
            return Vec::new();
        };
        let path = crate::util::shell::expand_vars(host);
        let (Ok(text), Some(per_node)) = (std::fs::read_to_string(&path), at.tasks_per_node) else {
            return Vec::new();
        };
        let team = text.lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == "team_size").then(|| v.trim().parse::<u64>().ok())?
        });
        let ranks = at.nodes * per_node;
        match team {
            Some(t) if t != ranks => vec![format!(
                "the UCC generator file {path} (cmd_args.gen) is for a team of {t} ranks, but {} node(s) x {per_node} \
                 tasks run {ranks}; use num_nodes = {} or a matrix for {ranks} ranks",
                at.nodes,
                if t % per_node == 0 { (t / per_node).to_string() } else { format!("{t}/{per_node}") }
            )],
            _ => Vec::new(),
        }
    }

    /// CloudAI's UCC metrics: `default` and `time-avg` the average time of the first size (a sweep optimises one
    /// size), `time-max` its maximum.
    fn metric(&self, _test: &TestDefinition, dir: &Path, name: &str) -> Option<f64> {
        let out = parse(&std::fs::read_to_string(dir.join("stdout.txt")).ok()?);
        let first = out.rows.first()?;
        match name {
            "default" | "time-avg" => Some(first.time_avg),
            "time-max" => Some(first.time_max),
            _ => None,
        }
    }

    fn grade(&self, _test: &TestDefinition, dir: &Path, outcome: &JobOutcome) -> Verdict {
        let path = dir.join("stdout.txt");
        match std::fs::read_to_string(&path) {
            Ok(text) => verdict(&parse(&text), &path, outcome),
            Err(_) => Verdict::fail(format!(
                "{} was not created: ucc_perftest produced no output; run the command from test-run.toml \
                 (full_cmd) by hand to see why",
                path.display()
            )),
        }
    }

    fn report(&self, test: &TestDefinition, dir: &Path, title: &str) -> Option<IterationReport> {
        let path = dir.join("stdout.txt");
        let out = parse(&std::fs::read_to_string(&path).ok()?);
        let v = verdict(&out, &path, &JobOutcome::default());
        let mut metrics = serde_json::Map::new();
        if let Some(p) = out.peak() {
            metrics.insert("peak_busbw_gbps".into(), p.bw_avg.into());
            metrics.insert("peak_size_bytes".into(), p.size.into());
        }
        if let Some(r) = out.rows.first() {
            metrics.insert("small_latency_us".into(), r.time_avg.into());
            metrics.insert("small_size_bytes".into(), r.size.into());
        }
        metrics.insert("rows".into(), out.rows.len().into());
        let curve = Curve::new(
            Metric::BUSBW,
            out.rows
                .iter()
                .filter(|r| r.bw_avg.is_finite())
                .map(|r| (r.size, r.bw_avg))
                .collect(),
        );
        let collective = out
            .collective
            .clone()
            .unwrap_or_else(|| test.cmd_args.str("collective").unwrap_or("").to_string())
            .to_ascii_lowercase();
        let points = out
            .rows
            .iter()
            .filter(|r| r.bw_avg.is_finite())
            .map(|r| Point {
                time_us: Some(r.time_avg),
                ..Point::new(
                    format!("ucc_{collective}"),
                    out.datatype.clone().unwrap_or_default(),
                    r.size,
                    Metric::BUSBW,
                    r.bw_avg,
                )
            })
            .collect();
        let status = v.status_line();
        Some(IterationReport {
            files: vec![
                (CSV_FILE.into(), csv(&out)),
                (HTML_FILE.into(), html(title, &out, &status, v.passed)),
            ],
            streamed: Vec::new(),
            metrics,
            curve,
            verdict: Some(v),
            points,
        })
    }
}

/// One row of the table: message count and size, time (avg, min, max) and, with `-F`, bandwidth (avg, max, min:
/// from the average, fastest and slowest rank's time). `N/A` reads as NaN.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub line: usize,
    pub count: u64,
    pub size: u64,
    pub time_avg: f64,
    pub time_min: f64,
    pub time_max: f64,
    pub bw_avg: f64,
    pub bw_max: f64,
    pub bw_min: f64,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Output {
    pub collective: Option<String>,
    pub memory_type: Option<String>,
    pub datatype: Option<String>,
    /// The table has bandwidth columns (`-F`).
    pub full: bool,
    pub rows: Vec<Row>,
    /// Lines that say the run failed (UCC/MPI errors, kills), with their line numbers.
    pub errors: Vec<(usize, String)>,
}

impl Output {
    /// The row of the highest average bandwidth.
    pub fn peak(&self) -> Option<&Row> {
        self.rows
            .iter()
            .filter(|r| r.bw_avg.is_finite())
            .max_by(|a, b| a.bw_avg.total_cmp(&b.bw_avg))
    }
}

fn num(t: &str) -> Option<f64> {
    if t == "N/A" {
        return Some(f64::NAN);
    }
    t.parse::<f64>().ok()
}

/// Lines that mean the run did not complete.
fn is_error(line: &str) -> bool {
    line.contains("UCC ERROR")
        || line.contains("ucc_perftest: ") && (line.contains("failed") || line.contains("error"))
        || super::launcher_failure(line)
}

/// Parses `ucc_perftest` output: header fields by name, rows by shape (5 numeric columns, 8 with `-F`; `N/A`
/// where a value does not apply), whatever launcher noise is around them.
pub fn parse(text: &str) -> Output {
    let mut out = Output::default();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        let field = |name: &str| {
            line.strip_prefix(name)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        if let Some(v) = field("Collective:") {
            out.collective = Some(v);
            continue;
        }
        if let Some(v) = field("Memory type:") {
            out.memory_type = Some(v);
            continue;
        }
        if let Some(v) = field("Datatype:") {
            out.datatype = Some(v);
            continue;
        }
        if line.starts_with("Count") && line.contains("Time, us") {
            out.full = line.contains("Bandwidth");
            continue;
        }
        let t: Vec<&str> = line.split_ascii_whitespace().collect();
        let count = |s: &str| {
            if s == "N/A" {
                Some(0)
            } else {
                s.parse::<u64>().ok()
            }
        };
        if t.len() == 5 || t.len() == 8 {
            if let (Some(c), Some(s)) = (count(t[0]), count(t[1])) {
                let vals: Option<Vec<f64>> = t[2..].iter().map(|x| num(x)).collect();
                if let Some(v) = vals {
                    let bw = |k: usize| v.get(k).copied().unwrap_or(f64::NAN);
                    out.rows.push(Row {
                        line: i + 1,
                        count: c,
                        size: s,
                        time_avg: v[0],
                        time_min: v[1],
                        time_max: v[2],
                        bw_avg: bw(3),
                        bw_max: bw(4),
                        bw_min: bw(5),
                    });
                    continue;
                }
            }
        }
        if is_error(line) {
            out.errors.push((i + 1, line.to_string()));
        }
    }
    out
}

fn verdict(out: &Output, path: &Path, outcome: &JobOutcome) -> Verdict {
    let at = |line: usize| format!("{}:{line}", path.display());
    if let Some((line, text)) = out.errors.first() {
        return Verdict::fail(format!(
            "{}: {text}; ucc_perftest did not complete: check UCX/UCC transport settings (UCX_TLS, \
             UCX_NET_DEVICES) and stderr.txt",
            at(*line)
        ));
    }
    if out.rows.is_empty() {
        return Verdict::fail(match &out.collective {
            Some(c) => format!(
                "{}: ucc_perftest started ({c}) but printed no result row; it failed or hung; check stderr.txt",
                path.display()
            ),
            None => format!(
                "{}: no ucc_perftest output found; check that {PROGRAM} exists in the image and stderr.txt",
                path.display()
            ),
        });
    }
    if let Some(code) = outcome.exit_code.filter(|c| *c != 0) {
        return Verdict::fail(format!(
            "ucc_perftest printed {} rows but exited with status {code}; see stderr.txt",
            out.rows.len()
        ));
    }
    let peak = out
        .peak()
        .map(|r| {
            format!(
                ", peak bandwidth {:.2} GB/s at {}",
                r.bw_avg,
                crate::html::size_iec(r.size)
            )
        })
        .unwrap_or_default();
    Verdict::pass_with(format!("{} rows{peak}", out.rows.len()))
}

fn csv(out: &Output) -> String {
    let mut s = String::from(
        "Count,Size (B),Time Avg (us),Time Min (us),Time Max (us),Bandwidth (GB/s) avg,Bandwidth (GB/s) max,\
         Bandwidth (GB/s) min,Size Human-readable\n",
    );
    let f = |x: f64| kit::csv_num(Some(x));
    for r in &out.rows {
        s.push_str(&format!(
            "{},{},{},{},{},{},{},{},{}\n",
            r.count,
            r.size,
            f(r.time_avg),
            f(r.time_min),
            f(r.time_max),
            f(r.bw_avg),
            f(r.bw_max),
            f(r.bw_min),
            human_size(r.size)
        ));
    }
    s
}

fn html(title: &str, out: &Output, verdict: &str, passed: bool) -> String {
    let pts = |g: fn(&Row) -> f64| -> Vec<(u64, f64)> {
        out.rows.iter().map(|r| (r.size, g(r))).collect()
    };
    let charts = serde_json::json!({
        "bw": chart_spec("Bandwidth", "bandwidth (GB/s)", "GB/s", false, vec![
            series("avg", &pts(|r| r.bw_avg), false),
            series("max (fastest rank)", &pts(|r| r.bw_max), true),
            series("min (slowest rank)", &pts(|r| r.bw_min), true),
        ]),
        "time": chart_spec("Time", "time (us, log)", "us", true, vec![
            series("avg", &pts(|r| r.time_avg), false),
            series("min", &pts(|r| r.time_min), true),
            series("max", &pts(|r| r.time_max), true),
        ]),
    });
    let peak = out.peak().map_or("-".to_string(), |p| {
        format!("{:.2} GB/s at {}", p.bw_avg, crate::html::size_iec(p.size))
    });
    let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let f = |x: f64| kit::fixed2(Some(x), "N/A");
    TablePage {
        title,
        verdict,
        passed,
        cards: vec![
            ("collective".into(), dash(&out.collective)),
            ("peak bandwidth".into(), peak),
            (
                "memory / datatype".into(),
                format!("{} / {}", dash(&out.memory_type), dash(&out.datatype)),
            ),
        ],
        charts,
        show: vec!["bw", "time"],
        sections: vec![Section::Table {
            heading: "Results".into(),
            header: [
                "count",
                "size",
                "time avg (us)",
                "min",
                "max",
                "bw avg (GB/s)",
                "max",
                "min",
            ]
            .map(String::from)
            .to_vec(),
            rows: out
                .rows
                .iter()
                .map(|r| {
                    vec![
                        r.count.to_string().into(),
                        crate::html::size_iec(r.size).into(),
                        f(r.time_avg).into(),
                        f(r.time_min).into(),
                        f(r.time_max).into(),
                        f(r.bw_avg).into(),
                        f(r.bw_max).into(),
                        f(r.bw_min).into(),
                    ]
                })
                .collect(),
        }],
    }
    .render()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "Collective:             Allreduce\nMemory type:            cuda\nDatatype:               float32\n\
        Reduction:              sum\nInplace:                0\nWarmup:\n  small                 100\n  large                 20\n\
        Iterations:\n  small                 1000\n  large                 200\n\n";

    #[test]
    fn full_and_short_tables_and_na() {
        let full = format!(
            "{HEAD}       Count        Size                Time, us                           Bandwidth, GB/s\n\
             \x20                                avg         min         max         avg         max         min\n\
             \x20          1           4       14.65       13.42       16.49        0.00        0.00        0.00\n\
             0: node1:1:2 [0] NCCL INFO noise 1 2 3\n\
             \x20       1024        4096       20.00       19.00       21.00        0.41        0.43        0.39\n"
        );
        let out = parse(&full);
        assert_eq!(out.collective.as_deref(), Some("Allreduce"));
        assert!(out.full);
        assert_eq!(out.rows.len(), 2);
        assert_eq!((out.rows[1].size, out.rows[1].bw_max), (4096, 0.43));
        assert_eq!(out.peak().unwrap().size, 4096);
        // without -F: times only
        let short = format!(
            "{HEAD}       Count        Size                Time, us\n                                 avg         min         max\n\
             \x20          8          32       10.00        9.00       11.00\n"
        );
        let out = parse(&short);
        assert!(!out.full && out.rows.len() == 1 && out.rows[0].bw_avg.is_nan());
        // barrier: no range, N/A everywhere but the times
        let barrier = "Collective: Barrier\n         N/A         N/A        5.10        4.90        5.30         N/A         N/A         N/A\n";
        let out = parse(barrier);
        assert_eq!(out.rows.len(), 1);
        assert!(out.peak().is_none());
    }

    #[test]
    fn verdicts_name_the_failure() {
        let p = Path::new("stdout.txt");
        let v = verdict(&parse("Collective: Alltoall\n"), p, &JobOutcome::default());
        assert!(
            !v.passed && v.message.contains("printed no result row"),
            "{}",
            v.message
        );
        let v = verdict(&parse(""), p, &JobOutcome::default());
        assert!(
            v.message.contains("no ucc_perftest output"),
            "{}",
            v.message
        );
        let err =
            "Collective: Alltoall\n[1700000000.1] ucc_team.c:1 UCC ERROR failed to create team\n";
        let v = verdict(&parse(err), p, &JobOutcome::default());
        assert!(
            v.message.contains("stdout.txt:2: ") && v.message.contains("UCC ERROR"),
            "{}",
            v.message
        );
    }
}
