//! nccl-tests (`all_reduce_perf_mpi` and friends).

pub mod grade;
mod model;
pub mod parse;
mod prefix;
pub mod read;
pub mod report;

use std::path::Path;

use super::{IterationReport, JobOutcome, Launch, Procs, Success, Verdict, Workload};
use crate::config::args::{ArgDefault as D, ArgSpec, ArgType as T, ArgValue};
use crate::config::test::{TemplateSchema, TestDefinition};
use crate::util::shell::quote;

pub struct NcclTest;

pub(crate) const SUBTESTS: &[&str] = &[
    "all_reduce_perf_mpi",
    "all_gather_perf_mpi",
    "alltoall_perf_mpi",
    "alltoallv_perf_mpi",
    "broadcast_perf_mpi",
    "gather_perf_mpi",
    "hypercube_perf_mpi",
    "reduce_perf_mpi",
    "reduce_scatter_perf_mpi",
    "scatter_perf_mpi",
    "sendrecv_perf_mpi",
    "bisection_perf_mpi",
    "all_reduce_perf",
    "all_gather_perf",
    "alltoall_perf",
    "alltoallv_perf",
    "broadcast_perf",
    "gather_perf",
    "hypercube_perf",
    "reduce_perf",
    "reduce_scatter_perf",
    "scatter_perf",
    "sendrecv_perf",
    "bisection_perf",
];

const OPS: &[&str] = &["sum", "prod", "min", "max", "avg", "all"];
/// CloudAI only lists uint8 and float; nccl-tests accepts all of these, so we do too.
const DATATYPES: &[&str] = &[
    "int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16",
    "fp8_e4m3", "fp8_e5m2", "all",
];

/// Counts nccl-tests would reject or misread are refused (each value of a sweep too): GPUs and threads per process
/// from 1, iteration counts and flags from 0.
static ARGS: &[ArgSpec] = &[
    ArgSpec::new("docker_image_url", T::Str, D::Required).single(),
    ArgSpec::new(
        "subtest_name",
        T::Enum(SUBTESTS),
        D::Str("all_reduce_perf_mpi"),
    ),
    ArgSpec::new("nthreads", T::Int, D::Int(1)).at_least(1),
    ArgSpec::new("ngpus", T::Int, D::Int(1)).at_least(1),
    ArgSpec::new("minbytes", T::Str, D::Str("32M")).size(),
    ArgSpec::new("maxbytes", T::Str, D::Str("32M")).size(),
    ArgSpec::new("stepbytes", T::Str, D::Str("1M")).size(),
    ArgSpec::new("op", T::Enum(OPS), D::Str("sum")),
    ArgSpec::new("datatype", T::Enum(DATATYPES), D::Str("float")),
    ArgSpec::new("root", T::Int, D::Int(0)).at_least(0),
    ArgSpec::new("iters", T::Int, D::Int(20)).at_least(0),
    ArgSpec::new("warmup_iters", T::Int, D::Int(5)).at_least(0),
    ArgSpec::new("agg_iters", T::Int, D::Int(1)).at_least(1),
    ArgSpec::new("average", T::Int, D::Int(1)).at_least(0),
    ArgSpec::new("parallel_init", T::Int, D::Int(0)).at_least(0),
    ArgSpec::new("check", T::Int, D::Int(1)).at_least(0),
    ArgSpec::new("blocking", T::Int, D::Int(0)).at_least(0),
    ArgSpec::new("cudagraph", T::Int, D::Int(0)).at_least(0),
    ArgSpec::new("stepfactor", T::Int, D::Unset).at_least(1),
    ArgSpec::new("use_deepep_matrix", T::Bool, D::Bool(false)).single(),
    ArgSpec::new(
        "alltoallv_matrix_container_path",
        T::Str,
        D::Str("/tmp/traffic_matrix.txt"),
    )
    .single(),
    ArgSpec::new("min_busbw", T::Float, D::Unset).single(),
];

/// cmd_args that configure the run but are not nccl-tests flags.
const NOT_FLAGS: &[&str] = &[
    "docker_image_url",
    "subtest_name",
    "use_deepep_matrix",
    "alltoallv_matrix_container_path",
    "min_busbw",
];

impl NcclTest {
    pub fn subtest(test: &TestDefinition) -> &str {
        test.cmd_args
            .str("subtest_name")
            .unwrap_or("all_reduce_perf_mpi")
    }

    fn flag(out: &mut Vec<String>, name: &str, v: &ArgValue) {
        let dash = if name.chars().count() == 1 { "-" } else { "--" };
        out.push(format!("{dash}{name}"));
        out.push(quote(&v.py_str()).into_owned());
    }

    /// GPUs one process drives: `ngpus` × `nthreads`.
    pub(crate) fn gpus_per_process(test: &TestDefinition) -> u64 {
        let int = |k: &str| test.cmd_args.get(k).and_then(ArgValue::as_int).unwrap_or(1);
        (int("ngpus") * int("nthreads")).max(1) as u64
    }

    /// alltoallv with a traffic matrix: CloudAI runs the non-MPI build from its fixed path.
    fn alltoallv(test: &TestDefinition) -> (String, Vec<String>) {
        let a = &test.cmd_args;
        let get = |k: &str| {
            a.get(k)
                .map(|v| quote(&v.py_str()).into_owned())
                .unwrap_or_default()
        };
        let mut args = Vec::new();
        for (flag, key) in [
            ("-b", "minbytes"),
            ("-e", "maxbytes"),
            ("-g", "ngpus"),
            ("-w", "warmup_iters"),
            ("-n", "iters"),
        ] {
            args.push(flag.to_string());
            args.push(get(key));
        }
        let used = ["minbytes", "maxbytes", "ngpus", "warmup_iters", "iters"];
        for (k, v) in &a.values {
            if NOT_FLAGS.contains(&k.as_str()) || used.contains(&k.as_str()) {
                continue;
            }
            match v {
                ArgValue::Bool(true) => args.push(format!("--{k}")),
                ArgValue::Bool(false) => {}
                _ => {
                    args.push(format!("--{k}"));
                    args.push(quote(&v.py_str()).into_owned());
                }
            }
        }
        ("/opt/nccl-tests/build/alltoallv_perf".to_string(), args)
    }
}

impl TemplateSchema for NcclTest {
    fn template(&self) -> &'static str {
        "NcclTest"
    }
    fn args(&self) -> &'static [ArgSpec] {
        ARGS
    }
    fn extra_args(&self) -> bool {
        true
    }
}

impl Workload for NcclTest {
    fn check(&self, test: &TestDefinition, at: &super::Placement) -> Vec<String> {
        super::deepep_matrix::check(test, at)
    }

    fn needs_post_comp(&self, test: &TestDefinition) -> Option<&'static str> {
        super::deepep_matrix::requested(test).then_some(super::deepep_matrix::NEEDS_DEPENDENCY)
    }

    /// `use_deepep_matrix`: the benchmark's `nccl_matrix.txt` handed over ([`super::deepep_matrix::to_nccl`]).
    fn handed(
        &self,
        test: &TestDefinition,
        chain: &[std::path::PathBuf],
    ) -> Result<Option<TestDefinition>, String> {
        super::deepep_matrix::to_nccl(test, chain)
    }

    /// `_mpi` subtests run one rank per `ngpus` × `nthreads` GPUs under an MPI launcher (a one-rank run uses the
    /// non-MPI build); the others run one process that drives its GPUs itself (`-g`).
    fn launch(&self, test: &TestDefinition, _at: &super::Placement) -> Launch {
        let subtest = Self::subtest(test);
        let mpi = subtest.ends_with("_mpi");
        let (program, mut args) = if subtest == "alltoallv_perf_mpi" {
            Self::alltoallv(test)
        } else {
            let mut args = Vec::new();
            for (k, v) in &test.cmd_args.values {
                if NOT_FLAGS.contains(&k.as_str()) {
                    continue;
                }
                if k == "ngpus" && !mpi {
                    args.push("-g".into());
                    args.push(quote(&v.py_str()).into_owned());
                } else {
                    Self::flag(&mut args, k, v);
                }
            }
            (quote(subtest).into_owned(), args)
        };
        // the user's own text, as written (CloudAI appends it unquoted)
        super::push_extra_args(test, &mut args);
        let solo = (mpi && subtest != "alltoallv_perf_mpi")
            .then(|| subtest.trim_end_matches("_mpi").to_string());
        Launch {
            procs: if mpi { Procs::Mpi } else { Procs::Single },
            gpus_per_rank: Self::gpus_per_process(test),
            solo_program: solo,
            ..Launch::process(program, args)
        }
        .in_test_image(test)
        .judged_by(Success::OutputContains("Avg bus bandwidth"))
    }

    /// CloudAI's NCCL metrics: `default` and `latency-in-place` are the mean in-place time (us) over the rows,
    /// `latency-out-of-place` the out-of-place one; ours, `busbw`, the mean in-place busbw (GB/s).
    fn metric(&self, _test: &TestDefinition, dir: &Path, name: &str) -> Option<f64> {
        let out = read::parse_file(&dir.join("stdout.txt")).ok()?;
        // means over every row (tallied as read, kept in memory or not)
        let (mut sum, mut n) = (0.0, 0u64);
        for t in out.runs.iter().map(|r| &r.tally) {
            let (s, k) = match name {
                "default" | "latency-in-place" => (t.ip_time_sum, t.ip_rows),
                "latency-out-of-place" => (t.oop_time_sum, t.rows),
                "busbw" => (t.ip_busbw_sum, t.ip_rows),
                _ => return None,
            };
            sum += s;
            n += k;
        }
        (n > 0).then(|| sum / n as f64)
    }

    fn grade(&self, test: &TestDefinition, dir: &Path, _outcome: &JobOutcome) -> Verdict {
        let path = dir.join("stdout.txt");
        match read::parse_file(&path) {
            Ok(out) => verdict(&out, &path, test),
            Err(_) => Verdict::fail(format!(
                "{} was not created: the NCCL test produced no output. Run the command from test-run.toml \
                 (full_cmd) by hand on one node to see why.",
                path.display()
            )),
        }
    }

    fn report(&self, test: &TestDefinition, dir: &Path, title: &str) -> Option<IterationReport> {
        self.report_marked(test, dir, title, &[])
    }

    fn report_marked(
        &self,
        test: &TestDefinition,
        dir: &Path,
        title: &str,
        marks: &[(u64, String)],
    ) -> Option<IterationReport> {
        let path = dir.join("stdout.txt");
        // one read: graded and its CSV rows written in the same pass
        let (out, csv_rows) = report::parse_with_csv(&path).ok()?;
        let v = verdict(&out, &path, test);
        let m = grade::metrics(&out);
        let status = v.status_line();
        // the CSV holds every row: written as the output was read (in memory while small), else from the
        // rows kept, else by reading the file again
        let all_kept = out.runs.iter().all(|r| r.tally.dropped == 0);
        let mut streamed = Vec::new();
        let mut files = Vec::new();
        match csv_rows {
            Some(crate::util::spill::Spilled::Memory(rows)) => {
                let mut text = report::csv_header();
                text.push_str(&String::from_utf8_lossy(&rows));
                files.push((report::CSV_FILE.to_string(), text));
            }
            Some(spilled) => streamed.push(super::StreamedFile {
                name: report::CSV_FILE.to_string(),
                write: std::sync::Arc::new(move |w| {
                    w.write_all(report::csv_header().as_bytes())?;
                    spilled.copy_to(w)
                }),
            }),
            None if all_kept => files.push((report::CSV_FILE.to_string(), report::csv(&out))),
            None => {
                let facts = report::device_facts(&out);
                let src = path.clone();
                streamed.push(super::StreamedFile {
                    name: report::CSV_FILE.to_string(),
                    write: std::sync::Arc::new(move |w| {
                        report::write_csv_streaming(&src, &facts, w)
                    }),
                });
            }
        }
        let command = recorded_command(dir);
        let linked = job_files(dir);
        let ran = report::Ran {
            command: command.as_deref(),
            files: &linked,
        };
        files.extend([(
            report::HTML_FILE.to_string(),
            report::html_marked(
                title,
                &out,
                &m,
                &status,
                v.passed,
                test.cmd_args.get("min_busbw").and_then(ArgValue::as_float),
                &ran,
                marks,
            ),
        )]);
        let mut metrics = serde_json::Map::new();
        if m.rows > 0 {
            metrics.insert("peak_busbw_gbps".into(), m.peak_busbw.into());
            metrics.insert("peak_size_bytes".into(), m.peak_size.into());
        }
        if let Some(a) = m.avg_busbw {
            metrics.insert("avg_busbw_gbps".into(), a.into());
        }
        if let (Some(t), Some(s)) = (m.small_latency_us, m.small_size) {
            metrics.insert("small_latency_us".into(), t.into());
            metrics.insert("small_size_bytes".into(), s.into());
        }
        metrics.insert("rows".into(), m.rows.into());
        metrics.insert("ranks".into(), m.ranks.into());
        metrics.insert("nodes".into(), m.nodes.into());
        // what the ledger keeps beside the numbers: the GPU, the hosts the ranks ran on, the versions shown
        let (gpu, _, _) = report::device_facts(&out);
        if !gpu.is_empty() {
            metrics.insert("gpu".into(), gpu.into());
        }
        if let Some(run) = out.runs.iter().find(|r| !r.ranks.is_empty()) {
            let mut hosts: Vec<&str> = run.ranks.iter().map(|r| r.host.as_str()).collect();
            hosts.sort_unstable();
            hosts.dedup();
            metrics.insert("hosts".into(), hosts.into());
        }
        if let Some(v) = out.runs.iter().find_map(|r| r.version.as_deref()) {
            let (tests, lib) = v.split_once(", NCCL ").unwrap_or((v, ""));
            metrics.insert("nccl_tests_version".into(), tests.into());
            if !lib.is_empty() {
                metrics.insert("nccl_version".into(), lib.into());
            }
        }
        let curve = crate::workloads::Curve::new(
            crate::workloads::Metric::BUSBW,
            out.runs
                .iter()
                .flat_map(|r| r.rows.iter())
                .take(report::REPORT_ROW_CAP)
                .map(|r| (r.size, r.busbw()))
                .collect(),
        );
        Some(IterationReport {
            files,
            streamed,
            metrics,
            curve,
            verdict: Some(v),
            points: points(&out, test),
        })
    }
}

/// Every row as a baseline point: the collective (`all_reduce_perf`, `_mpi` dropped so MPI and single-process
/// builds compare), the data type and the shape from the Rank lines (distinct hosts × ranks per host).
fn points(out: &parse::Output, test: &TestDefinition) -> Vec<crate::workloads::Point> {
    let mut pts = Vec::new();
    for run in &out.runs {
        let collective = run
            .test
            .as_deref()
            .unwrap_or(NcclTest::subtest(test))
            .trim_end_matches("_mpi")
            .to_string();
        let mut hosts: Vec<&str> = run.ranks.iter().map(|r| r.host.as_str()).collect();
        hosts.sort_unstable();
        hosts.dedup();
        let nodes = hosts.len() as u64;
        let gpus_per_node = (run.ranks.len() as u64).checked_div(nodes).unwrap_or(0);
        for r in &run.rows {
            pts.push(crate::workloads::Point {
                collective: collective.clone(),
                dtype: r.dtype.to_string(),
                nodes,
                gpus_per_node,
                size: r.size,
                metric: crate::workloads::Metric::BUSBW,
                value: r.out_of_place.busbw,
                in_place: r.in_place.as_ref().map(|s| s.busbw),
                time_us: Some(r.out_of_place.time_us),
                time_ip_us: r.in_place.as_ref().map(|s| s.time_us),
            });
        }
    }
    pts
}

/// The iteration's own files to link from its page: what the scheduler was given (the batch script, the manifest,
/// the workload's payload), its output and its record, by name, in order; not the reports themselves.
fn job_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| !n.starts_with('.') && n != report::HTML_FILE && n != report::CSV_FILE)
        .collect();
    // output first, then the job's files
    let rank = |n: &str| match n {
        "stdout.txt" => 0,
        "stderr.txt" => 1,
        _ => 2,
    };
    names.sort_by(|a, b| (rank(a), a).cmp(&(rank(b), b)));
    names.truncate(30);
    names
}

/// The command the scheduler ran, as the iteration's test-run.toml records it: `full_cmd` (srun's line, the
/// pod's or workload's command: `all_reduce_perf` where a one-rank Run:ai job runs the non-MPI build), else
/// `test_cmd`.
fn recorded_command(dir: &Path) -> Option<String> {
    let root = crate::config::node::load(&dir.join("test-run.toml"), "test-run.toml").ok()?;
    let t = root.as_table()?;
    ["full_cmd", "test_cmd"]
        .iter()
        .find_map(|k| match &t.get(k)?.kind {
            crate::config::node::Kind::Str(s) if !s.is_empty() => Some(s.clone()),
            _ => None,
        })
}

/// The grade of parsed output, with CloudAI's `min_busbw` threshold when set: the table's and the data check's
/// outcomes as checks, and what the output shows of its shape, network and peaks for [`crate::workloads::judge`].
fn verdict(out: &parse::Output, path: &Path, test: &TestDefinition) -> Verdict {
    use crate::workloads::judge::{Check, CheckKind};
    let min = test.cmd_args.get("min_busbw").and_then(ArgValue::as_float);
    let failure = grade::failure(out, path, min);
    let m = grade::metrics(out);
    let mut checks = Vec::new();
    let sizes = |r: &parse::Run| {
        let first = r.rows.first().map(|x| x.size);
        let last = r.tally.last.as_ref().map(|x| x.size);
        match (first, last) {
            (Some(a), Some(b)) => format!(
                ", {} – {}",
                crate::html::size_iec(a),
                crate::html::size_iec(b)
            ),
            _ => String::new(),
        }
    };
    let complete = out
        .runs
        .iter()
        .filter(|r| r.tally.rows > 0)
        .all(|r| r.avg_busbw.is_some() || r.out_of_bounds.is_some() || r.concluded);
    match out.runs.iter().find(|r| r.tally.rows > 0) {
        Some(r) if complete => checks.push(Check::pass(
            CheckKind::Table,
            format!(
                "{} rows{}, peak busbw {:.2} GB/s at {}, summary present",
                m.rows,
                sizes(r),
                m.peak_busbw,
                crate::html::size_iec(m.peak_size)
            ),
        )),
        Some(r) => checks.push(Check::fail(
            CheckKind::Table,
            format!("{} rows{}, no summary after them", m.rows, sizes(r)),
        )),
        None => checks.push(Check::fail(CheckKind::Table, "no result row")),
    }
    let bad_data = out.runs.iter().any(|r| grade::data_fault(r).is_some());
    let unchecked = out
        .runs
        .iter()
        .flat_map(|r| r.rows.iter())
        .all(|r| r.out_of_place.wrong.is_none());
    if m.rows > 0 {
        checks.push(if bad_data {
            Check::fail(
                CheckKind::Wrong,
                "wrong elements or out-of-bounds values: the data check failed",
            )
        } else if unchecked {
            Check::not_shown(CheckKind::Wrong, "data check off (-c 0): #wrong is N/A")
        } else {
            Check::pass(CheckKind::Wrong, "0 wrong elements")
        });
    }
    if let Some(min) = min {
        let status = if m.rows > 0 && m.peak_busbw >= min {
            Check::pass(
                CheckKind::MinBusbw,
                format!("peak {:.2} GB/s ≥ min_busbw {min} GB/s", m.peak_busbw),
            )
        } else {
            Check::fail(
                CheckKind::MinBusbw,
                format!("peak {:.2} GB/s < min_busbw {min} GB/s", m.peak_busbw),
            )
        };
        checks.push(status);
    }
    let passed = failure.is_none();
    // the grade's own reason is the most specific: an error line of the output stands as the output's check beside
    // the others; a reason about the table, the data or min_busbw replaces that check's shorter detail
    if let Some(msg) = &failure {
        let fatal = out.errors.iter().any(|e| e.kind.is_fatal());
        match checks
            .iter_mut()
            .find(|c| c.status == crate::workloads::judge::CheckStatus::Fail)
        {
            Some(c) if !fatal => c.detail = msg.clone(),
            _ => checks.insert(0, Check::fail(CheckKind::Output, msg.clone())),
        }
    }
    Verdict {
        passed,
        message: failure.unwrap_or_default(),
        checks,
        shown: Some(shown(out, NcclTest::subtest(test), min.is_some())),
    }
}

/// What nccl-tests' output shows of how it ran: the first test's Rank lines, NCCL's network, each test's peak.
fn shown(out: &parse::Output, subtest: &str, own_floor: bool) -> crate::workloads::judge::Shown {
    use crate::workloads::judge::{Peak, SeenRank, Shown};
    let ranks = out
        .runs
        .iter()
        .find(|r| !r.ranks.is_empty())
        .map(|r| {
            r.ranks
                .iter()
                .map(|k| SeenRank {
                    host: k.host.clone(),
                    gpu: if k.bus_id.is_empty() {
                        format!("device {}", k.device)
                    } else {
                        k.bus_id.clone()
                    },
                    device: k.device_name.clone(),
                })
                .collect()
        })
        .unwrap_or_default();
    let network = out.network.clone().map(|mut n| {
        n.no_ib_device = out.no_ib_device;
        if n.socket {
            if let Some(ifs) = &out.socket_ifs {
                n.detail = format!("{} on {ifs}", n.detail);
            }
        }
        n
    });
    let peaks = out
        .runs
        .iter()
        .filter(|r| r.tally.rows > 0)
        .map(|r| Peak {
            collective: r
                .test
                .as_deref()
                .unwrap_or(subtest)
                .trim_end_matches("_mpi")
                .trim_end_matches("_perf")
                .to_string(),
            busbw_gbps: r.tally.peak_busbw,
            at_size: r.tally.peak_size,
            max_size: r.tally.max_size,
        })
        .collect();
    Shown {
        ranks,
        network,
        peaks,
        own_floor,
    }
}
