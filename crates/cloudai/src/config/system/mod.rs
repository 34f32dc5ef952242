//! System TOML: the scheduler a scenario runs on. Every scheduler is read and validated here, one module each
//! (its config type, its fields and its decoder) named by one line of [`SCHEDULERS`], so a config can be checked
//! before it is used. `docs/design/systems.md` lists what else a new scheduler touches.

pub mod fabric;
mod kubernetes;
mod runai;
mod slurm;
mod standalone;

pub use kubernetes::KubernetesConfig;
pub use runai::{RunAiConfig, Secret, SECRET_ENV};
pub use slurm::{
    DataRepository, Group, GroupSpec, Partition, Preflight, SlurmConfig, DEFAULT_PREFLIGHT,
};
pub use standalone::StandaloneConfig;

use std::path::{Path, PathBuf};

use indexmap::IndexMap;

use super::args::ArgValue;
use super::decode::{unknown_hint, Ctx, View};
use super::error::{did_you_mean, ConfigError, ConfigErrors};
use super::node::{self, Node};

/// A scheduler a system TOML can name: its `scheduler` value, its own fields and how they are read.
pub struct Scheduler {
    pub name: &'static str,
    /// Its fields beside the ones every system has.
    pub fields: &'static [&'static str],
    /// `monitor_interval` when the file sets none (CloudAI's default for the scheduler).
    pub default_monitor_interval: u64,
    /// It runs pods: it takes the pod fields (shared memory, networks, RDMA, placement).
    pub pods: bool,
    /// What it gives a workload (every scheduler gives [`Needs::Launch`]).
    pub gives: &'static [Needs],
    pub decode: fn(&mut Ctx, &View) -> Option<SystemKind>,
}

/// What a workload may need of a scheduler beyond a launch, which every scheduler renders.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs {
    /// A launch (command, ranks, image, environment): every scheduler.
    Launch,
    /// Commands on the hosts themselves and their file systems, not in pods.
    Hosts,
    /// Tasks started by `srun` in a batch allocation.
    Srun,
    /// A login node from which the workload's own launcher submits its batch job (NeMo launcher): the scheduler
    /// runs the launcher, reads the job id it prints and watches that job.
    Submit,
    /// This machine: the workload writes its own script into the iteration's directory and runs it here, with a
    /// Python environment of its own (Aiconfigurator's predictor).
    Local,
    /// An object of the workload's own kind that the scheduler creates for the test instead of a Job
    /// ([`crate::workloads::Workload::own_object`]: AI Dynamo's DynamoGraphDeployment).
    Object,
}

/// Whether the scheduler named `scheduler` gives `need`.
pub(crate) fn gives(scheduler: &str, need: Needs) -> bool {
    SCHEDULERS
        .iter()
        .any(|s| s.name == scheduler && s.gives.contains(&need))
}

/// Every scheduler, in the order messages list them.
pub(crate) const SCHEDULERS: &[Scheduler] = &[
    standalone::SCHEDULER,
    slurm::SCHEDULER,
    runai::SCHEDULER,
    kubernetes::SCHEDULER,
];

/// The schedulers' names, in order.
pub fn scheduler_names() -> Vec<&'static str> {
    SCHEDULERS.iter().map(|s| s.name).collect()
}

/// Schedulers CloudAI knows that we do not implement.
const FOREIGN_SCHEDULERS: &[&str] = &["lsf"];

/// Report names CloudAI registers; `[reports.X]` tables must use one of them.
pub(crate) const REPORT_NAMES: &[&str] = &[
    "ai_dynamo_comparison",
    "dse",
    "moe_benchmark_throughput",
    "nccl_comparison",
    "nixl_bench_summary",
    "nixl_ep_comparison",
    "osu_bench_comparison",
    "per_test",
    "sglang_comparison",
    "status",
    "tarball",
    "vllm_comparison",
];

#[derive(Clone, Debug)]
pub struct SystemConfig {
    pub file: PathBuf,
    pub name: String,
    pub install_path: PathBuf,
    pub output_path: PathBuf,
    pub hf_home_path: PathBuf,
    pub global_env_vars: IndexMap<String, ArgValue>,
    pub monitor_interval: u64,
    /// Seconds any job may wait in the queue before it is cancelled (our field; off when unset).
    pub max_pending_time: Option<u64>,
    /// Physical link peaks per GPU, GB/s (our fields): a busbw above them is flagged as a suspect measurement.
    pub nvlink_peak_gbps: Option<f64>,
    pub net_peak_gbps: Option<f64>,
    /// The fabric and hardware it declares (`fabric`, `nics_per_node`, `nic_gbps`, `expected_busbw_gbps`,
    /// `expectation_fraction`; our fields), for the transport and expectation checks of a verdict.
    pub fabric: fabric::Fabric,
    pub kind: SystemKind,
}

#[derive(Clone, Debug)]
pub enum SystemKind {
    Standalone(StandaloneConfig),
    Slurm(Box<SlurmConfig>),
    RunAi(RunAiConfig),
    Kubernetes(KubernetesConfig),
}

impl SystemKind {
    /// GPUs per node as the system's config states them (Standalone: only when written), for workloads whose
    /// command names them (NeMo-Run's `trainer.devices`).
    pub fn gpus_per_node(&self) -> Option<u64> {
        match self {
            SystemKind::Standalone(s) => s.gpus_per_node,
            SystemKind::Slurm(s) => s.gpus_per_node,
            SystemKind::RunAi(r) => Some(r.gpus_per_node),
            SystemKind::Kubernetes(k) => Some(k.gpus_per_node),
        }
    }

    /// Whether an MPI launch gets [`SystemKind::tasks_per_node`] ranks per node whatever GPUs each drives (Slurm's
    /// `ntasks_per_node`), rather than one per group of the node's GPUs.
    pub(crate) fn ranks_are_tasks(&self) -> bool {
        matches!(self, SystemKind::Slurm(_))
    }

    /// Tasks an MPI test gets per node: Slurm's `ntasks_per_node` when set, one per GPU on the others.
    pub(crate) fn tasks_per_node(&self) -> Option<u64> {
        match self {
            SystemKind::Slurm(s) => s.ntasks_per_node,
            other => other.gpus_per_node(),
        }
    }

    /// A `partition:group:count` node spec against what the file lists (only Slurm files list groups).
    pub(crate) fn group_spec(&self, spec: &str, part: &str, group: &str, n: u64) -> GroupSpec {
        match self {
            SystemKind::Slurm(s) => s.group_spec(spec, part, group, n),
            _ => GroupSpec::Fits,
        }
    }

    /// How many nodes the file lists for jobs without a partition, and where: (size, partition); None when it
    /// lists none.
    pub(crate) fn listed_size(&self) -> Option<(u64, &str)> {
        match self {
            SystemKind::Slurm(s) => {
                Some((s.listed_size(), s.default_partition.as_str())).filter(|(n, _)| *n > 0)
            }
            _ => None,
        }
    }

    /// The system file's own `[reports.<name>]` tables (Slurm files have them).
    pub fn reports(&self) -> Option<&Node> {
        match self {
            SystemKind::Slurm(s) => s.reports.as_ref(),
            _ => None,
        }
    }

    /// Whether container images are cached under `install_path` (Slurm's `cache_docker_images_locally`).
    pub(crate) fn caches_images(&self) -> bool {
        matches!(self, SystemKind::Slurm(s) if s.cache_docker_images_locally)
    }

    /// The file's app secret, for a scheduler that authenticates with one (Run:ai): `Some(slot)`.
    pub(crate) fn app_secret_mut(&mut self) -> Option<&mut Option<Secret>> {
        match self {
            SystemKind::RunAi(r) => Some(&mut r.app_secret),
            _ => None,
        }
    }

    /// The secret it authenticates with (the environment's first), for a scheduler that needs one: `Some(found)`.
    pub fn app_secret(&self) -> Option<Option<Secret>> {
        match self {
            SystemKind::RunAi(r) => Some(r.secret()),
            _ => None,
        }
    }

    /// The scheduler's entry in [`SCHEDULERS`].
    pub fn entry(&self) -> &'static Scheduler {
        match self {
            SystemKind::Standalone(_) => &standalone::SCHEDULER,
            SystemKind::Slurm(_) => &slurm::SCHEDULER,
            SystemKind::RunAi(_) => &runai::SCHEDULER,
            SystemKind::Kubernetes(_) => &kubernetes::SCHEDULER,
        }
    }

    /// The `scheduler` value of the system TOML.
    pub fn scheduler(&self) -> &'static str {
        self.entry().name
    }
}

/// The most GPUs (or tasks) a node can have: a larger `gpus_per_node` or `ntasks_per_node` is a typo.
pub(crate) const MAX_GPUS_PER_NODE: u64 = 1024;

const BASE_FIELDS: &[&str] = &[
    "name",
    "scheduler",
    "install_path",
    "output_path",
    "hf_home_path",
    "global_env_vars",
    "monitor_interval",
    "max_pending_time",
    "nvlink_peak_gbps",
    "net_peak_gbps",
    "fabric",
    "nics_per_node",
    "nic_gbps",
    "expected_busbw_gbps",
    "expectation_fraction",
];

/// The system used when none is given: conf/common/system/standalone_system.toml, built in.
pub(crate) fn builtin_standalone() -> Result<SystemConfig, ConfigErrors> {
    const TEXT: &str = include_str!("../../../../../conf/common/system/standalone_system.toml");
    let path = Path::new("<built-in standalone system>");
    decode(&node::parse(path, TEXT, "system config")?, path)
}

pub fn load(path: &Path) -> Result<SystemConfig, ConfigErrors> {
    let root = node::load(path, "system config")?;
    decode(&root, path)
}

pub fn decode(root: &Node, path: &Path) -> Result<SystemConfig, ConfigErrors> {
    let mut ctx = Ctx::new();
    let Some(v) = ctx.table(root, "") else {
        return Err(ctx.errors);
    };
    super::decode::reject_control_chars(&mut ctx, root, "");
    let Some(sched_node) = v.get("scheduler") else {
        return Err(
            ConfigError::new(root.loc.clone(), "scheduler", "required field is missing")
                .with_hint(format!(
                    "add `scheduler = \"...\"`, one of: {}",
                    scheduler_names().join(", ")
                ))
                .into(),
        );
    };
    let Some(scheduler) = super::decode::as_str(&mut ctx, sched_node, "scheduler") else {
        return Err(ctx.errors);
    };
    let Some(sched) = SCHEDULERS.iter().find(|s| s.name == scheduler) else {
        let names = scheduler_names();
        let other = scheduler.as_str();
        let (msg, hint) = if FOREIGN_SCHEDULERS.contains(&other) {
            (
                format!("scheduler '{other}' is not supported by this version of cloudai"),
                format!("supported schedulers: {}", names.join(", ")),
            )
        } else {
            let all: Vec<&str> = names.iter().chain(FOREIGN_SCHEDULERS).copied().collect();
            let hint = match did_you_mean(other, all) {
                Some(s) => format!("did you mean \"{s}\"?"),
                None => format!("one of: {}", names.join(", ")),
            };
            (format!("unsupported system type '{other}'"), hint)
        };
        return Err(ConfigError::new(sched_node.loc.clone(), "scheduler", msg)
            .with_hint(hint)
            .into());
    };

    let name = v.req_str(&mut ctx, "name");
    let install_path = v.req_str(&mut ctx, "install_path").map(PathBuf::from);
    let output_path = v.req_str(&mut ctx, "output_path").map(PathBuf::from);
    let hf_home_path = v.opt_str(&mut ctx, "hf_home_path").map(PathBuf::from);
    let global_env_vars = env_table(&mut ctx, &v, "global_env_vars");
    let monitor_interval = v.count(&mut ctx, "monitor_interval", sched.default_monitor_interval);
    let max_pending_time = v.duration(&mut ctx, "max_pending_time");
    let nvlink_peak_gbps = v.float_in(&mut ctx, "nvlink_peak_gbps", 0.001, 100_000.0, false);
    let net_peak_gbps = v.float_in(&mut ctx, "net_peak_gbps", 0.001, 100_000.0, false);
    let fabric = fabric::decode(&mut ctx, &v);

    let kind = (sched.decode)(&mut ctx, &v);
    let pod_fields: &[&str] = if sched.pods { super::pods::FIELDS } else { &[] };
    let known: Vec<&str> = BASE_FIELDS
        .iter()
        .chain(sched.fields)
        .chain(pod_fields)
        .copied()
        .collect();
    v.done(&mut ctx, &known);

    match (name, install_path, output_path, kind) {
        (Some(name), Some(install_path), Some(output_path), Some(kind))
            if !ctx.errors.has_errors() =>
        {
            let hf_home_path = hf_home_path.unwrap_or_else(|| install_path.join("huggingface"));
            Ok(SystemConfig {
                file: path.to_path_buf(),
                name,
                install_path,
                output_path,
                hf_home_path,
                global_env_vars,
                monitor_interval,
                max_pending_time,
                nvlink_peak_gbps,
                net_peak_gbps,
                fabric,
                kind,
            })
        }
        _ => Err(ctx.errors),
    }
}

/// `global_env_vars` accepts any scalar; values are exported as Python would print them.
fn env_table(ctx: &mut Ctx, v: &View, key: &str) -> IndexMap<String, ArgValue> {
    let mut out = IndexMap::new();
    let Some(n) = v.get(key) else { return out };
    let Some(t) = ctx.table(n, &v.field(key)) else {
        return out;
    };
    for (k, e) in &t.table.entries {
        if !super::decode::env_name(ctx, &e.key_loc, &t.field(k), k) {
            continue;
        }
        if let Some(val) = ArgValue::from_node(&e.node) {
            out.insert(k.clone(), val);
        }
    }
    out
}

/// `[reports.X]` names must be registered reports.
pub(crate) fn check_reports(ctx: &mut Ctx, node: &Node, path: &str) {
    let Some(t) = ctx.table(node, path) else {
        return;
    };
    for (k, e) in &t.table.entries {
        if !REPORT_NAMES.contains(&k.as_str()) {
            ctx.err(
                &e.key_loc,
                &t.field(k),
                format!("report configuration for '{k}' not found in the registry"),
                unknown_hint(k, REPORT_NAMES),
            );
        }
    }
}

/// Fields Run:ai and Kubernetes share (MPI workers' ssh keys and command, the image of plain jobs).
fn ssh_auth_mount_path(ctx: &mut Ctx, v: &View) -> String {
    v.opt_str(ctx, "ssh_auth_mount_path")
        .unwrap_or_else(|| "/root/.ssh".into())
}

fn mpi_worker_command(ctx: &mut Ctx, v: &View) -> String {
    v.opt_str(ctx, "mpi_worker_command")
        .unwrap_or_else(|| "/usr/sbin/sshd -De".into())
}

fn job_image(ctx: &mut Ctx, v: &View) -> String {
    let image = v
        .opt_str(ctx, "job_image")
        .unwrap_or_else(|| "ubuntu:24.04".into());
    if let Some(n) = v.get("job_image") {
        if image.trim().is_empty() || image.chars().any(char::is_whitespace) {
            ctx.err(
                &n.loc,
                "job_image",
                format!("{image:?} is not an image reference"),
                Some(
                    "name an image with sleep and bash, like \"registry.local/ubuntu:24.04\""
                        .into(),
                ),
            );
        }
    }
    image
}
