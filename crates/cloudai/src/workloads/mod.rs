//! One module per test template. A workload knows its `cmd_args` schema, the command it runs, and how to grade a
//! finished iteration; systems wrap that command for their scheduler.

pub mod ai_dynamo;
pub mod aiconfigurator;
mod bash_cmd;
pub mod chakra_replay;
pub mod ddlb;
pub mod deepep;
mod deepep_matrix;
pub mod dynamo_mocker;
mod etcd;
pub mod fio;
pub mod jax_toolbox;
pub mod judge;
pub mod kit;
pub mod launch;
pub mod llm_serving;
pub mod local;
pub mod megatron_bridge;
pub mod megatron_run;
pub mod metric;
pub mod moe_benchmark;
pub mod nccl;
pub mod nemo_launcher;
pub mod nemo_run;
pub mod nixl;
pub mod node_health;
pub mod object;
pub mod osu;
pub mod perf_csv;
pub mod serving;
pub mod sglang;
mod sleep;
pub mod slurm_container;
pub mod submit;
pub mod triton_inference;
pub mod ucc;
pub mod vllm;

use std::path::Path;

use crate::config::error::ConfigErrors;
use crate::config::node::Node;
use crate::config::test::{TemplateSchema, TestDefinition};

pub use crate::config::system::Needs;
pub use launch::{Launch, Procs, Success};
pub use metric::{Curve, Metric, Point};
pub use nccl::NcclTest;

/// What a system observed when an iteration's job ended.
#[derive(Clone, Debug, Default)]
pub struct JobOutcome {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// The scheduler's final state name (Slurm's COMPLETED, NODE_FAIL, …).
    pub state: Option<String>,
    /// Set when the scheduler itself ended the job (its own time limit, a cancel by someone else).
    pub end: Option<crate::results::EndReason>,
    /// The scheduler's verdict when the job failed regardless of its output.
    pub failure: Option<String>,
    /// Why the job's output (`stdout.txt`) is incomplete, when the scheduler knows it is.
    pub log_incomplete: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Verdict {
    pub passed: bool,
    pub message: String,
    /// The checks behind it ([`judge::judge`] adds shape, transport and expectation to the workload's own).
    pub checks: Vec<judge::Check>,
    /// What the output shows of how it ran, for [`judge::judge`]; `None` when the workload reads nothing of it.
    pub shown: Option<judge::Shown>,
}

impl Verdict {
    pub fn pass() -> Self {
        Self {
            passed: true,
            ..Default::default()
        }
    }
    /// A pass that says its key number (`read 1538 MiB/s, 12300 IOPS`), shown on the final table's PASSED row.
    pub(crate) fn pass_with(detail: impl Into<String>) -> Self {
        Self {
            passed: true,
            checks: vec![judge::Check::pass(judge::CheckKind::Table, detail)],
            ..Default::default()
        }
    }
    pub fn fail(message: impl Into<String>) -> Self {
        Self {
            passed: false,
            message: message.into(),
            ..Default::default()
        }
    }

    /// The verdict of a workload's checks: PASS when none failed, else the failed ones' details as its message.
    pub(crate) fn from_checks(checks: Vec<judge::Check>) -> Self {
        let failed: Vec<String> = checks
            .iter()
            .filter(|c| c.status == judge::CheckStatus::Fail)
            .map(|c| c.detail.clone())
            .collect();
        Self {
            passed: failed.is_empty(),
            message: failed.join("; "),
            checks,
            shown: None,
        }
    }

    /// The verdict line of an iteration's page: `PASSED`, or `FAILED: <why>`.
    pub(crate) fn status_line(&self) -> String {
        if self.passed {
            "PASSED".to_string()
        } else {
            format!("FAILED: {}", self.message)
        }
    }

    /// The grade of a plain process: its exit status.
    pub(crate) fn from_exit(out: &JobOutcome) -> Self {
        match (out.exit_code, out.signal) {
            (Some(0), _) => Self::pass(),
            (Some(c), _) => Self::fail(format!(
                "the command exited with status {c}; see stderr.txt"
            )),
            (None, Some(s)) => Self::fail(format!("the command was killed by signal {s}")),
            (None, None) => Self::fail("the command's exit status is unknown"),
        }
    }

    /// A failure quotes what the job last said on stderr (`all_reduce_perf_mpi: command not found`) and its exit
    /// status, unless the message already does: the first thing to read when a run failed.
    pub(crate) fn with_stderr(mut self, dir: &Path, out: &JobOutcome) -> Self {
        if self.passed {
            return self;
        }
        if let Some(last) = last_stderr_line(dir) {
            if !self.message.contains(&last) {
                self.message = format!("{}; stderr.txt ends: {last}", self.message);
            }
        }
        if let Some(c) = out.exit_code.filter(|c| *c != 0) {
            if !self.message.contains(&format!("status {c}")) {
                self.message = format!("{} (exit status {c})", self.message);
            }
        }
        self
    }
}

/// The last non-blank line of an iteration's `stderr.txt` (read from its end: it may be large), cut to 300
/// characters.
pub(crate) fn last_stderr_line(dir: &Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(dir.join("stderr.txt")).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(8192))).ok()?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf);
    let line = text.lines().map(str::trim).rfind(|l| !l.is_empty())?;
    Some(line.chars().take(300).collect())
}

/// A launcher file of CloudAI's that a workload runs (it is CloudAI's code, not ours: found where the user's CloudAI
/// has it, copied into the install directory by `cloudai install`).
#[derive(Clone, Copy, Debug)]
pub struct Script {
    /// Its file name (`cloudai_nemorun.py`), also its name in the install directory.
    pub name: &'static str,
    /// Its path inside CloudAI's source tree (`src/cloudai/workloads/nemo_run/cloudai_nemorun.py`).
    pub in_cloudai: &'static str,
    /// The environment variable that names the file when it is elsewhere.
    pub env: &'static str,
    /// Run where it is found (CloudAI runs it from its own tree, beside the files it calls), not copied into the
    /// install directory.
    pub in_place: bool,
}

/// Where a test runs, for workloads whose command states it (NeMo-Run's `trainer.num_nodes` / `trainer.devices`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// Nodes of the run (the node list's length when one is given).
    pub nodes: u64,
    /// GPUs per node, when the system's config states it.
    pub gpus_per_node: Option<u64>,
    /// Tasks the scheduler starts per node for an MPI test, when known (Slurm's `ntasks_per_node`, one per GPU on
    /// container schedulers).
    pub tasks_per_node: Option<u64>,
    /// The test's time limit in seconds, as its scenario entry gives it.
    pub time_limit: Option<u64>,
    /// The system's scheduler (`slurm`, `kubernetes`, …); empty when not known.
    pub scheduler: &'static str,
}

/// A report file too large to build in memory: `write` produces it into the writer it is given.
#[derive(Clone)]
pub struct StreamedFile {
    pub name: String,
    #[allow(clippy::type_complexity)]
    pub write: std::sync::Arc<dyn Fn(&mut dyn std::io::Write) -> std::io::Result<()> + Send + Sync>,
}

impl std::fmt::Debug for StreamedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StreamedFile({})", self.name)
    }
}

/// What a finished iteration shows: report files (written next to its output), key numbers, its
/// curve (one metric per size) for comparisons and its measured points.
#[derive(Clone, Debug, Default)]
pub struct IterationReport {
    pub files: Vec<(String, String)>,
    /// Files written as a stream (an output too long to hold: its CSV).
    pub streamed: Vec<StreamedFile>,
    pub metrics: serde_json::Map<String, serde_json::Value>,
    pub curve: Curve,
    /// The grade from the same reading of the output (used when re-grading).
    pub verdict: Option<Verdict>,
    /// Measured points, keyed for baselines.
    pub points: Vec<Point>,
}

impl IterationReport {
    /// Nothing to report but a failed grade (the output is missing or unreadable).
    pub fn failed(why: impl Into<String>) -> Self {
        Self {
            verdict: Some(Verdict::fail(why.into())),
            ..Self::default()
        }
    }
}

/// Every workload's own kind of object ([`Workload::own_object`]): what `cloudai status` lists beside a
/// scheduler's own objects.
pub const OWN_KINDS: &[object::OwnKind] = &[ai_dynamo::OBJECT_KIND];

/// A test template: its config schema ([`TemplateSchema`]), what it runs ([`Launch`], rendered by every
/// scheduler) and how it is graded and reported.
pub trait Workload: TemplateSchema + Send + Sync {
    /// What it needs of a scheduler beyond a [`Launch`], which every scheduler renders: most need nothing more;
    /// a workload that depends on a scheduler's features says which, and runs where they are given.
    fn needs(&self) -> Needs {
        Needs::Launch
    }
    /// The schedulers it runs on: those that give what it needs.
    fn schedulers(&self) -> Vec<&'static str> {
        crate::config::system::SCHEDULERS
            .iter()
            .filter(|s| s.gives.contains(&self.needs()))
            .map(|s| s.name)
            .collect()
    }
    /// A design-space exploration metric (`agent_metrics`) of a finished iteration; None when it cannot be
    /// measured (the agent observes -1 then, as CloudAI does).
    fn metric(&self, _test: &TestDefinition, _dir: &Path, _name: &str) -> Option<f64> {
        None
    }
    /// What the test runs where it is placed, as data. Profiling (`nsys`) is added by the system unless the launch
    /// carries it.
    fn launch(&self, test: &TestDefinition, at: &Placement) -> Launch;
    /// Grades a finished iteration from its output directory.
    fn grade(&self, test: &TestDefinition, dir: &Path, outcome: &JobOutcome) -> Verdict;
    /// What the test asks that cannot work where it is placed, found before anything runs (one sentence each).
    fn check(&self, _test: &TestDefinition, _at: &Placement) -> Vec<String> {
        Vec::new()
    }
    /// Rules between the values of one run (CloudAI's `constraint_check`), one sentence per rule broken: a sweep
    /// skips the steps that break one; [`Workload::check`] refuses a single run that does.
    fn constraints(&self, _test: &TestDefinition) -> Vec<String> {
        Vec::new()
    }
    /// Records where the test's own installables go on the system (`installed_path` in `test-run.toml`), once the
    /// test is placed on one with install path `install` as configured.
    fn record_installed(&self, _test: &mut TestDefinition, _install: &Path) {}
    /// A launcher file the workload runs from the install directory, which CloudAI ships in its package.
    fn script(&self) -> Option<Script> {
        None
    }
    /// More files of CloudAI's the job runs from the install directory, each recorded in `cmd_args` at its dotted
    /// path as CloudAI's `File` (`src`, `_installed_path`): AI Dynamo's benchmark scripts.
    fn scripts(&self, _test: &TestDefinition) -> Vec<(&'static str, Script)> {
        Vec::new()
    }
    /// A git repository the job mounts from the install directory, named by a template field (AI Dynamo's `repo`):
    /// (url, commit).
    fn repo(&self, _test: &TestDefinition) -> Option<(String, String)> {
        None
    }
    /// Nodes the test's roles name on `scheduler` (AI Dynamo's workers' `nodes`), in order: the run's nodes are
    /// these and the scenario's, each once.
    fn nodes_named(&self, _test: &TestDefinition, _scheduler: &str) -> Vec<String> {
        Vec::new()
    }
    /// The node count the test's roles need on `scheduler` when the scenario gives none (AI Dynamo's prefill +
    /// decode nodes in one Slurm job).
    fn nodes_needed(&self, _test: &TestDefinition, _scheduler: &str) -> Option<u64> {
        None
    }
    /// A launcher the workload runs from a Python environment of its own, installed with the test.
    fn python_launcher(&self, _test: &TestDefinition) -> Option<submit::PythonLauncher> {
        None
    }
    /// A Python environment made from package requirements that the workload runs from, installed with the test.
    fn python_env(&self, _test: &TestDefinition) -> Option<local::PythonEnv> {
        None
    }
    /// The script of an iteration that runs on this machine, for a workload that writes its own
    /// ([`Needs::Local`]); `None` for every other.
    fn local_job(&self, _test: &TestDefinition, _at: &local::LocalAt) -> Option<local::LocalJob> {
        None
    }
    /// Why the test needs a `start_post_comp` dependency, when what it asks can only come from one (UCC's and
    /// NCCL's `use_deepep_matrix`): a scenario entry without one is refused.
    fn needs_post_comp(&self, _test: &TestDefinition) -> Option<&'static str> {
        None
    }
    /// The test as its job runs it, given what the tests it starts after left (`chain`: their last iteration's
    /// directories along the `start_post_comp` chain, nearest first), when it takes something from them (the
    /// DeepEP traffic matrix); `Ok(None)`: as it is. An error says why the job cannot be written.
    fn handed(
        &self,
        _test: &TestDefinition,
        _chain: &[std::path::PathBuf],
    ) -> Result<Option<TestDefinition>, String> {
        Ok(None)
    }
    /// The object of its own kind a container scheduler creates for the test instead of a Job, for a workload
    /// that has one there (AI Dynamo's DynamoGraphDeployment on Kubernetes); `None` for every other.
    fn own_object(
        &self,
        _test: &TestDefinition,
        _at: &object::ObjectAt,
    ) -> Option<object::OwnObject> {
        None
    }
    /// The login-node command of an iteration, for a workload whose own launcher submits its job
    /// ([`Needs::Submit`]); `None` for every other.
    fn submission(
        &self,
        _test: &TestDefinition,
        _at: &submit::SubmitAt,
    ) -> Option<submit::Submission> {
        None
    }
    /// Whether the test's pre-test hooks run as a batch job of their own, submitted by its launcher ahead of the
    /// job it depends on (Megatron-Bridge's pre-hook job; [`Needs::Submit`] only): each hook on every node at
    /// once, one node each, the test's job starting only if all passed.
    fn pre_test_job(&self) -> bool {
        false
    }
    /// Values CloudAI computes from others before the test runs (NeMo-Run's `data.num_train_samples`, NIXL's buffer
    /// size in bytes), some from the system's tasks per node; they show in `test-run.toml` too. Applied when the
    /// test is resolved and to every step of a sweep.
    fn derive(&self, _test: &mut TestDefinition, _tasks_per_node: Option<u64>) {}
    /// What CloudAI's second reading changes of a test a scenario entry names by `test_name` (it dumps the test
    /// by alias, merges the entry's values and reads it again: an alias it writes but does not read comes back as
    /// an undeclared key). Applied after [`Workload::derive`] when such a test is resolved; not to a test the
    /// scenario defines itself.
    fn reread(&self, _test: &mut TestDefinition) {}
    /// Reports of a finished iteration, `None` when there is nothing to report (no output).
    fn report(&self, _test: &TestDefinition, _dir: &Path, _title: &str) -> Option<IterationReport> {
        None
    }
    /// [`Workload::report`] with sizes flagged by the caller (size, why: a baseline's drops), for pages that
    /// highlight them; others ignore the marks.
    fn report_marked(
        &self,
        test: &TestDefinition,
        dir: &Path,
        title: &str,
        _marks: &[(u64, String)],
    ) -> Option<IterationReport> {
        self.report(test, dir, title)
    }
}

/// The test's `extra_cmd_args` as CloudAI's `extra_args_str` writes them: `key=value`, or `key` alone, joined by
/// blanks; `None` when there are none.
pub(crate) fn extra_args_str(test: &TestDefinition) -> Option<String> {
    (!test.extra_cmd_args.is_empty()).then(|| {
        test.extra_cmd_args
            .iter()
            .map(|(k, v)| {
                if v.is_empty() {
                    k.clone()
                } else {
                    format!("{k}={v}")
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    })
}

/// The test's `extra_cmd_args` as written (CloudAI appends them unquoted): `key [value]` each.
pub(crate) fn push_extra_args(test: &TestDefinition, args: &mut Vec<String>) {
    for (k, v) in &test.extra_cmd_args {
        args.push(k.clone());
        if !v.is_empty() {
            args.push(v.clone());
        }
    }
}

/// A line by which an MPI launcher or the scheduler says the run died (an abort, a signal, a time limit, a task's
/// exit), whatever the benchmark.
pub(crate) fn launcher_failure(line: &str) -> bool {
    let has = |s: &str| line.contains(s);
    has("MPI_ABORT")
        || has("Segmentation fault")
        || has("exited on signal")
        || has("DUE TO TIME LIMIT")
        || has("mpirun noticed that process")
        || has("prterun noticed that process")
        || has("UCX  ERROR")
        || has("UCX ERROR")
        // Open MPI's fatal-error banner: `*** An error occurred in MPI_Init` … `*** MPI_ERRORS_ARE_FATAL …`
        || has("*** An error occurred in")
        || has("MPI_ERRORS_ARE_FATAL")
        || (has("srun: error:") && has("Exited with exit code"))
}

/// A line with an error written into it by another process (no newline between them): the text before the error
/// and the error's own text. UCX prefixes its lines with `[<seconds>.<micros>] [host:pid:tid]`; Open MPI's banner
/// starts with `***`.
pub(crate) fn split_glued_error(line: &str) -> (&str, Option<&str>) {
    let ucx = line.find("UCX").and_then(|u| {
        // the `[` of the UCX line's time stamp, before its message
        line[..u].match_indices('[').map(|(i, _)| i).find(|&i| {
            line[i + 1..].split(']').next().is_some_and(|t| {
                t.contains('.') && t.bytes().all(|b| b.is_ascii_digit() || b == b'.')
            })
        })
    });
    let mpi = line.find("*** An error occurred in");
    match ucx.into_iter().chain(mpi).min() {
        Some(i) if !line[..i].trim().is_empty() && launcher_failure(&line[i..]) => {
            (&line[..i], Some(&line[i..]))
        }
        _ => (line, None),
    }
}

/// A workload's `cmd_args.docker_image_url`, when set.
pub(crate) fn docker_image(test: &TestDefinition) -> Option<String> {
    test.cmd_args
        .str("docker_image_url")
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

static REGISTRY: &[&dyn Workload] = &[
    &NcclTest,
    &sleep::Sleep,
    &bash_cmd::BashCmd,
    &ucc::UccTest,
    &fio::Fio,
    &nemo_run::NeMoRun,
    &slurm_container::SlurmContainer,
    &osu::OsuBench,
    &node_health::template::DCGM_DIAG,
    &node_health::template::NVIDIA_SMI,
    &node_health::template::KERNEL_LOG,
    &node_health::template::IB_STAT,
    &ddlb::Ddlb,
    &deepep::DeepEp,
    &chakra_replay::ChakraReplay,
    &megatron_run::MegatronRun,
    &triton_inference::TritonInference,
    &vllm::VLLM,
    &sglang::SGLANG,
    &moe_benchmark::MoeBenchmark,
    &nixl::NIXL_BENCH,
    &nixl::NIXL_KVBENCH,
    &nixl::NixlPerftest,
    &nixl::NixlEp,
    &nemo_launcher::NeMoLauncher,
    &megatron_bridge::MegatronBridge,
    &aiconfigurator::Aiconfigurator,
    &dynamo_mocker::DynamoMocker,
    &jax_toolbox::GPT,
    &jax_toolbox::GROK,
    &jax_toolbox::NEMOTRON,
    &ai_dynamo::AiDynamo,
];

pub fn find(template: &str) -> Option<&'static dyn Workload> {
    REGISTRY.iter().copied().find(|w| w.template() == template)
}

pub fn names() -> Vec<&'static str> {
    REGISTRY.iter().map(|w| w.template()).collect()
}

pub fn all() -> &'static [&'static dyn Workload] {
    REGISTRY
}

/// Decodes a test definition against the templates this build runs.
pub(crate) fn decode_test(node: &Node, path_prefix: &str) -> Result<TestDefinition, ConfigErrors> {
    let schemas: Vec<&dyn TemplateSchema> =
        REGISTRY.iter().map(|w| *w as &dyn TemplateSchema).collect();
    crate::config::test::decode(node, path_prefix, &schemas)
}

/// `[nsys ...]` prefix for the command, when profiling is enabled.
pub(crate) fn nsys_prefix(test: &TestDefinition) -> Option<String> {
    let n = test.nsys.as_ref().filter(|n| n.enable)?;
    let force = n.force_overwrite.map(|f| f.to_string());
    let opts: [(&str, &Option<String>); 8] = [
        ("-s ", &n.sample),
        ("-o ", &n.output),
        ("-t ", &n.trace),
        ("--force-overwrite=", &force),
        ("--capture-range ", &n.capture_range),
        ("--capture-range-end ", &n.capture_range_end),
        ("--cuda-graph-trace ", &n.cuda_graph_trace),
        ("--gpu-metrics-devices ", &n.gpu_metrics_devices),
    ];
    let mut parts = vec![n.nsys_binary.clone(), n.task.clone()];
    parts.extend(
        opts.iter()
            .filter_map(|(flag, v)| v.as_ref().map(|v| format!("{flag}{v}"))),
    );
    parts.extend(n.extra_args.iter().cloned());
    Some(parts.join(" "))
}

pub(crate) fn with_nsys(test: &TestDefinition, cmd: String) -> String {
    match nsys_prefix(test) {
        Some(p) => format!("{p} {cmd}"),
        None => cmd,
    }
}

/// The command with profiling, as a system that runs it directly (no wrapper) executes it.
pub(crate) fn full_command(launch: &Launch, test: &TestDefinition) -> String {
    launch.profiled(test, launch.command_line())
}
