//! The OSU micro-benchmarks (CloudAI's `OSUBench`): collective and point-to-point MPI benchmarks
//! (`osu_allreduce`, `osu_bw`, `osu_latency`, …). The command is CloudAI's; the output is read by its layout
//! rules: a `# Size …` header naming the columns (latency with or without `--full`'s min/max/iterations,
//! bandwidth, `MB/s  Messages/s`), or `# Avg Latency(us)` alone for size-less tests (barrier), rows of numbers
//! under it whatever launcher noise is around. Graded, reported as `osu_bench.csv` (CloudAI's columns first) and a
//! chart page, and measured per size for baselines.

use std::path::Path;

use super::kit::{Cell, Section, TablePage};
use super::{
    Curve, IterationReport, JobOutcome, Launch, Metric, Placement, Point, Success, Verdict,
    Workload,
};
use crate::config::args::{ArgDefault as D, ArgSpec, ArgType as T, ArgValue};
use crate::config::test::{TemplateSchema, TestDefinition};
use crate::html::{chart_spec, series};
use crate::util::pytoml::py_float;
use crate::util::shell::quote;
mod output;
pub use output::*;

pub(crate) struct OsuBench;

static ARGS: &[ArgSpec] = &[
    ArgSpec::new("docker_image_url", T::Str, D::Required).single(),
    ArgSpec::new("benchmarks_dir", T::Str, D::Required).single(),
    ArgSpec::new("benchmark", T::Str, D::Required),
    ArgSpec::new("message_size", T::Str, D::Unset),
    ArgSpec::new("iterations", T::Int, D::Unset)
        .single()
        .at_least(1),
    ArgSpec::new("warmup", T::Int, D::Unset)
        .single()
        .at_least(0),
    ArgSpec::new("mem_limit", T::Int, D::Unset)
        .single()
        .at_least(1),
    ArgSpec::new("full", T::Bool, D::Bool(true)).single(),
];

/// `cmd_args` that choose the program rather than pass a flag.
const NOT_FLAGS: &[&str] = &["docker_image_url", "benchmarks_dir", "benchmark"];

/// Benchmarks between exactly two processes.
const TWO_PROCESSES: &[&str] = &[
    "osu_latency",
    "osu_latency_mt",
    "osu_latency_mp",
    "osu_bw",
    "osu_bibw",
    "osu_latency_persistent",
    "osu_bw_persistent",
    "osu_bibw_persistent",
    "osu_put_latency",
    "osu_get_latency",
    "osu_acc_latency",
    "osu_get_acc_latency",
    "osu_cas_latency",
    "osu_fop_latency",
    "osu_put_bw",
    "osu_get_bw",
    "osu_put_bibw",
];

/// Benchmarks that do not take `--full` besides the two-process ones (CloudAI's list is both).
const NO_FULL_OTHERS: &[&str] = &["osu_multi_lat", "osu_mbw_mr", "osu_init", "osu_hello"];

fn takes_full(bench: &str) -> bool {
    !TWO_PROCESSES.contains(&bench) && !NO_FULL_OTHERS.contains(&bench)
}

pub(crate) const CSV_FILE: &str = "osu_bench.csv";
pub(crate) const HTML_FILE: &str = "osu_bench_report.html";

impl TemplateSchema for OsuBench {
    fn template(&self) -> &'static str {
        "OSUBench"
    }
    fn args(&self) -> &'static [ArgSpec] {
        ARGS
    }
    /// A benchmark is a program name inside `benchmarks_dir` (`osu_allreduce`): no path, no `..`, no blank.
    fn validate(
        &self,
        ctx: &mut crate::config::decode::Ctx,
        v: &crate::config::decode::View,
        args: &crate::config::args::CmdArgs,
    ) {
        let names: Vec<&str> = match args.get("benchmark") {
            Some(ArgValue::List(items)) => items.iter().filter_map(|x| x.as_str()).collect(),
            Some(ArgValue::Str(s)) => vec![s.as_str()],
            _ => Vec::new(),
        };
        for name in names {
            let ok = !name.is_empty()
                && !name.starts_with('.')
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
            if !ok {
                let node = v.cmd_arg_loc("benchmark");
                ctx.err(
                    &node,
                    &crate::config::decode::join(&v.field("cmd_args"), "benchmark"),
                    format!("\"{name}\" is not a benchmark name: it must name a program inside benchmarks_dir"),
                    Some("a name such as osu_allreduce or osu_bw; put the directory in benchmarks_dir".into()),
                );
            }
        }
    }
}

fn benchmark(test: &TestDefinition) -> &str {
    test.cmd_args.str("benchmark").unwrap_or("")
}

impl Workload for OsuBench {
    fn launch(&self, test: &TestDefinition, at: &Placement) -> Launch {
        let bench = benchmark(test);
        let dir = test.cmd_args.str("benchmarks_dir").unwrap_or("");
        let mut args = Vec::new();
        for (k, v) in &test.cmd_args.values {
            if NOT_FLAGS.contains(&k.as_str()) || k == "full" && !takes_full(bench) {
                continue;
            }
            let flag = format!("--{}", k.replace('_', "-"));
            match v {
                ArgValue::Bool(true) => args.push(flag),
                // CloudAI writes `--full False`, which the benchmarks read as a stray word: a false flag is left out
                ArgValue::Bool(false) => {}
                v => {
                    args.push(flag);
                    args.push(quote(&v.py_str()).into_owned());
                }
            }
        }
        super::push_extra_args(test, &mut args);
        // two-process tests: one rank per node across two nodes, two ranks on one node
        let two = TWO_PROCESSES.contains(&bench);
        let gpus = at.gpus_per_node.unwrap_or(1).max(1);
        let gpus_per_rank = if two {
            if at.nodes >= 2 {
                gpus
            } else {
                (gpus / 2).max(1)
            }
        } else {
            1
        };
        Launch {
            gpus_per_rank,
            exact_ranks: two.then_some(2),
            ..Launch::mpi(quote(&format!("{dir}/{bench}")), args)
        }
        .in_test_image(test)
        .judged_by(Success::ExitStatus)
    }

    /// `default`: the first size's average latency for latency tests, the peak bandwidth (MB/s) for bandwidth
    /// tests.
    fn metric(&self, _test: &TestDefinition, dir: &Path, name: &str) -> Option<f64> {
        let out = parse(&std::fs::read_to_string(dir.join("stdout.txt")).ok()?);
        match name {
            "default" => match out.kind {
                Kind::Latency => out.rows.first()?.avg_lat_us,
                _ => out.peak_mb_s(),
            },
            "latency" => out.rows.first()?.avg_lat_us,
            "bandwidth" => out.peak_mb_s(),
            _ => None,
        }
    }

    fn grade(&self, test: &TestDefinition, dir: &Path, outcome: &JobOutcome) -> Verdict {
        verdict(benchmark(test), dir, outcome)
    }

    fn report(&self, test: &TestDefinition, dir: &Path, title: &str) -> Option<IterationReport> {
        let out = parse(&std::fs::read_to_string(dir.join("stdout.txt")).ok()?);
        let bench = benchmark(test).to_string();
        let v = verdict(&bench, dir, &JobOutcome::default());
        let mut metrics = serde_json::Map::new();
        if let Some(p) = out.peak_mb_s() {
            metrics.insert("peak_bandwidth_mb_s".into(), p.into());
        }
        if let Some(r) = out.rows.first().filter(|r| r.avg_lat_us.is_some()) {
            metrics.insert("small_latency_us".into(), r.avg_lat_us.into());
            metrics.insert("small_size_bytes".into(), r.size.into());
        }
        metrics.insert("rows".into(), out.rows.len().into());
        let points = points(&out, &bench);
        let metric = points.first().map_or(Metric::LATENCY, |p| p.metric);
        let curve = Curve::new(metric, points.iter().map(|p| (p.size, p.value)).collect());
        let status = v.status_line();
        Some(IterationReport {
            files: vec![
                (CSV_FILE.into(), csv(&out)),
                (HTML_FILE.into(), html(title, &out, &status, v.passed)),
            ],
            metrics,
            curve,
            verdict: Some(v),
            points,
            ..IterationReport::default()
        })
    }
}

fn verdict(benchmark: &str, dir: &Path, outcome: &JobOutcome) -> Verdict {
    let stdout = dir.join("stdout.txt");
    let stderr = dir.join("stderr.txt");
    let last_err = || {
        std::fs::read_to_string(&stderr)
            .ok()
            .and_then(|e| {
                e.lines()
                    .map(str::trim)
                    .rfind(|l| !l.is_empty())
                    .map(|l| format!("; stderr.txt ends: {l}"))
            })
            .unwrap_or_default()
    };
    let Ok(text) = std::fs::read_to_string(&stdout) else {
        return Verdict::fail(format!(
            "stdout.txt file not found in the specified output directory {}. This file is expected to be created \
             as a result of the OSU Benchmark test run{}",
            dir.display(),
            last_err()
        ));
    };
    if text.trim().is_empty() {
        return Verdict::fail(format!(
            "stdout.txt file is empty in the specified output directory {}. Please check for fatal errors in {}{}",
            dir.display(),
            stderr.display(),
            last_err()
        ));
    }
    let out = parse(&text);
    if let Some((line, e)) = out.errors.first() {
        return Verdict::fail(format!("{}:{line}: {e}", stdout.display()));
    }
    let summary_only = ["osu_hello", "osu_init"].contains(&benchmark);
    if out.rows.is_empty() && !summary_only {
        return Verdict::fail(if out.columns.is_empty() {
            format!(
                "Expected OSU benchmark output marker not found in stdout.txt in {}: no `# Size` table; check for \
                 errors in the execution or for a different output format{}",
                dir.display(),
                last_err()
            )
        } else {
            format!(
                "{}: {} printed its table header but no row; it failed or hung{}",
                stdout.display(),
                out.title.as_deref().unwrap_or(benchmark),
                last_err()
            )
        });
    }
    if let Some(r) = out.rows.iter().find(|r| r.valid == Some(false)) {
        return Verdict::fail(format!(
            "{}:{}: the data check failed at size {} (Validation: Fail): {} computed wrong results; suspect a bad \
             GPU, memory or link on one of the nodes",
            stdout.display(),
            r.line,
            crate::html::size_iec(r.size),
            out.title.as_deref().unwrap_or(benchmark)
        ));
    }
    if let Some(c) = outcome.exit_code.filter(|c| *c != 0) {
        return Verdict::fail(format!(
            "{benchmark} printed {} rows but exited with status {c}; see {}",
            out.rows.len(),
            stderr.display()
        ));
    }
    let key = headline(&out).map_or(String::new(), |h| format!(", {h}"));
    Verdict::pass_with(format!("{} rows{key}", out.rows.len()))
}

/// The run's key number: the latency at its first size, or its peak bandwidth and where.
fn headline(out: &Output) -> Option<String> {
    match out.kind {
        Kind::Latency => out.rows.first().and_then(|r| {
            Some(format!(
                "{:.2} us at {}",
                r.avg_lat_us?,
                crate::html::size_iec(r.size)
            ))
        }),
        _ => out
            .rows
            .iter()
            .filter(|r| r.mb_s.is_some())
            .max_by(|a, b| a.mb_s.unwrap_or(0.0).total_cmp(&b.mb_s.unwrap_or(0.0)))
            .map(|r| {
                format!(
                    "{:.2} MB/s at {}",
                    r.mb_s.unwrap_or(0.0),
                    crate::html::size_iec(r.size)
                )
            }),
    }
}

/// CloudAI's columns for the kind (`size,avg_lat`, `size,mb_sec`, `size,mb_sec,messages_sec`), then `--full`'s.
fn csv(out: &Output) -> String {
    let full = out.full();
    let mut s = match out.kind {
        Kind::Latency => "size,avg_lat".to_string(),
        Kind::Bandwidth => "size,mb_sec".to_string(),
        Kind::MultiBandwidth => "size,mb_sec,messages_sec".to_string(),
    };
    if full {
        s.push_str(",min_lat,max_lat,iterations");
    }
    s.push('\n');
    let f = |v: Option<f64>| v.map(py_float).unwrap_or_default();
    for r in &out.rows {
        s.push_str(&r.size.to_string());
        match out.kind {
            Kind::Latency => s.push_str(&format!(",{}", f(r.avg_lat_us))),
            Kind::Bandwidth => s.push_str(&format!(",{}", f(r.mb_s))),
            Kind::MultiBandwidth => s.push_str(&format!(",{},{}", f(r.mb_s), f(r.messages_s))),
        }
        if full {
            s.push_str(&format!(
                ",{},{},{}",
                f(r.min_lat_us),
                f(r.max_lat_us),
                r.iterations.map(|n| n.to_string()).unwrap_or_default()
            ));
        }
        s.push('\n');
    }
    s
}

fn html(title: &str, out: &Output, verdict: &str, passed: bool) -> String {
    let pts = |g: fn(&Row) -> Option<f64>| -> Vec<(u64, f64)> {
        out.rows
            .iter()
            .filter_map(|r| Some((r.size, g(r)?)))
            .collect()
    };
    let charts = match out.kind {
        Kind::Latency => {
            serde_json::json!({ "main": chart_spec("Latency", "latency (us, log)", "us", true, vec![
                series("avg", &pts(|r| r.avg_lat_us), false),
                series("min", &pts(|r| r.min_lat_us), true),
                series("max", &pts(|r| r.max_lat_us), true),
            ])})
        }
        _ => {
            serde_json::json!({ "main": chart_spec("Bandwidth", "bandwidth (MB/s)", "MB/s", false, vec![
                series("bandwidth", &pts(|r| r.mb_s), false),
            ])})
        }
    };
    let key = if out.kind == Kind::Latency {
        "smallest size"
    } else {
        "peak"
    };
    let dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    let mut header = vec!["size".to_string()];
    header.extend(
        out.columns
            .iter()
            .skip_while(|c| c.as_str() == "Size")
            .cloned(),
    );
    // a row has the cells its table prints
    let rows = out
        .rows
        .iter()
        .map(|r| {
            let mut cells: Vec<Cell> = vec![crate::html::size_iec(r.size).into()];
            let f = |v: Option<f64>| v.map(|v| Cell::from(format!("{v:.2}")));
            cells.extend(
                [f(r.avg_lat_us), f(r.min_lat_us), f(r.max_lat_us)]
                    .into_iter()
                    .flatten(),
            );
            cells.extend(r.iterations.map(|n| Cell::from(n.to_string())));
            cells.extend([f(r.mb_s), f(r.messages_s)].into_iter().flatten());
            cells
        })
        .collect();
    TablePage {
        title,
        verdict,
        passed,
        cards: vec![
            ("benchmark".into(), dash(out.title.clone())),
            (key.into(), dash(headline(out))),
            ("datatype".into(), dash(out.datatype.clone())),
        ],
        charts,
        show: if out.rows.iter().any(|r| r.size > 0) {
            vec!["main"]
        } else {
            vec![]
        },
        sections: vec![Section::Table {
            heading: "Results".into(),
            header,
            rows,
        }],
    }
    .render()
}

/// Each row as the table measures it: latency tables on their average latency (lower is better), bandwidth tables
/// on their bandwidth (MB/s: 10^6 bytes a second, over 1,000 in GB/s).
fn points(out: &Output, bench: &str) -> Vec<Point> {
    let metric = match out.kind {
        Kind::Latency => Metric::LATENCY,
        Kind::Bandwidth | Kind::MultiBandwidth => Metric::BANDWIDTH,
    };
    out.rows
        .iter()
        .filter_map(|r| {
            let (value, time_us) = match out.kind {
                Kind::Latency => (r.avg_lat_us?, r.avg_lat_us),
                _ => (r.mb_s? / 1e3, None),
            };
            Some(Point {
                time_us,
                ..Point::new(
                    bench.to_string(),
                    out.datatype.clone().unwrap_or_default(),
                    r.size,
                    metric,
                    value,
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_tables_are_points_of_latency_and_bandwidth_tables_of_gb_s() {
        let lat =
            parse("# OSU MPI Latency Test v5.8\n# Size          Latency (us)\n0 1.61\n8 1.70\n");
        let p = points(&lat, "osu_latency");
        assert_eq!(
            p.iter()
                .map(|p| (p.size, p.metric, p.value, p.time_us))
                .collect::<Vec<_>>(),
            [
                (0, Metric::LATENCY, 1.61, Some(1.61)),
                (8, Metric::LATENCY, 1.70, Some(1.70))
            ]
        );
        let bw = parse("# OSU MPI Bandwidth Test v5.8\n# Size      Bandwidth (MB/s)\n1 3.88\n4194304 24345.67\n");
        let p = points(&bw, "osu_bw");
        assert_eq!(
            p.iter()
                .map(|p| (p.size, p.metric, p.value))
                .collect::<Vec<_>>(),
            [
                (1, Metric::BANDWIDTH, 3.88 / 1e3),
                (4194304, Metric::BANDWIDTH, 24345.67 / 1e3)
            ]
        );
        assert!(p
            .iter()
            .all(|p| p.collective == "osu_bw" && p.time_us.is_none()));
    }

    #[test]
    fn headers_name_their_columns() {
        assert_eq!(
            header("# Size       Avg Latency(us)   Min Latency(us)   Max Latency(us)  Iterations")
                .unwrap(),
            [
                "Size",
                "Avg Latency(us)",
                "Min Latency(us)",
                "Max Latency(us)",
                "Iterations"
            ]
        );
        assert_eq!(
            header("# Size Bandwidth (MB/s)").unwrap(),
            ["Size", "Bandwidth (MB/s)"]
        );
        assert_eq!(header("# Avg Latency(us)").unwrap(), ["Avg Latency(us)"]);
        assert!(header("# OSU MPI Latency Test v5.8").is_none());
        assert!(header("# Datatype: MPI_CHAR.").is_none());
    }

    #[test]
    fn multiple_bandwidth_and_truncation() {
        let text = "# OSU MPI Multiple Bandwidth / Message Rate Test v7.3\n# [ pairs: 1 ] [ window size: 64 ]\n\
                    # Size                  MB/s        Messages/s\n1                       2.87        2866743.89\n\
                    2                       5.77        2885020.66\n4                      11";
        let out = parse(text);
        assert_eq!(out.kind, Kind::MultiBandwidth);
        assert_eq!(out.rows.len(), 2, "the cut row is not a row");
        assert_eq!(out.rows[1].messages_s, Some(2885020.66));
        assert_eq!(csv(&out).lines().next(), Some("size,mb_sec,messages_sec"));
    }

    #[test]
    fn two_process_tests_are_refused_past_two_nodes() {
        let p = |nodes| Placement {
            nodes,
            gpus_per_node: Some(8),
            tasks_per_node: Some(8),
            time_limit: None,
            scheduler: "",
        };
        let mut t = crate::config::test::TestDefinition::for_tests("OSUBench");
        for (k, v) in [
            ("docker_image_url", "img"),
            ("benchmarks_dir", "/osu"),
            ("benchmark", "osu_bw"),
        ] {
            t.cmd_args.values.insert(k.into(), ArgValue::Str(v.into()));
        }
        t.cmd_args
            .values
            .insert("full".into(), ArgValue::Bool(true));
        let l = OsuBench.launch(&t, &p(2));
        assert_eq!(l.command_line(), "/osu/osu_bw");
        assert_eq!(l.ranks_per_node(8), 1);
        assert_eq!(l.shape_problem("t", 2, 8), None);
        assert!(l.shape_problem("t", 4, 8).unwrap().contains("exactly 2"));
        assert_eq!(OsuBench.launch(&t, &p(1)).ranks_per_node(8), 2);
        t.cmd_args
            .values
            .insert("benchmark".into(), ArgValue::Str("osu_allreduce".into()));
        let l = OsuBench.launch(&t, &p(2));
        assert_eq!(l.command_line(), "/osu/osu_allreduce --full");
        assert_eq!(l.ranks_per_node(8), 8);
    }
}
