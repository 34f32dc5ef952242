//! System TOML: the scheduler a scenario runs on. All four schedulers are validated here even when their runtime
//! lives in a later module, so a config can be checked before it is used.

use std::fmt;
use std::path::{Path, PathBuf};

use indexmap::IndexMap;

use super::args::ArgValue;
use super::decode::{unknown_hint, Ctx, View};
use super::error::{did_you_mean, ConfigError, ConfigErrors};
use super::node::{self, Kind, Node};

pub const SCHEDULERS: &[&str] = &["standalone", "slurm", "runai", "kubernetes"];
/// Schedulers CloudAI knows that we do not implement.
const FOREIGN_SCHEDULERS: &[&str] = &["lsf"];

/// Report names CloudAI registers; `[reports.X]` tables must use one of them.
pub const REPORT_NAMES: &[&str] = &[
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

    /// Tasks an MPI test gets per node: Slurm's `ntasks_per_node` when set, one per GPU on the others.
    pub fn tasks_per_node(&self) -> Option<u64> {
        match self {
            SystemKind::Slurm(s) => s.ntasks_per_node,
            other => other.gpus_per_node(),
        }
    }

    pub fn scheduler(&self) -> &'static str {
        match self {
            SystemKind::Standalone(_) => "standalone",
            SystemKind::Slurm(_) => "slurm",
            SystemKind::RunAi(_) => "runai",
            SystemKind::Kubernetes(_) => "kubernetes",
        }
    }
}

/// The local machine.
#[derive(Clone, Debug, Default)]
pub struct StandaloneConfig {
    /// GPUs of this machine (our field): an MPI test runs one rank per GPU group, as on a Slurm node. Unset: the
    /// NVIDIA device files (`/dev/nvidia<N>`) are counted.
    pub gpus_per_node: Option<u64>,
}

impl StandaloneConfig {
    /// GPUs an MPI test shares among its ranks here (at least 1).
    pub fn gpus(&self) -> u64 {
        self.gpus_per_node
            .unwrap_or_else(|| {
                std::fs::read_dir("/dev")
                    .map(|d| {
                        d.filter_map(Result::ok)
                            .filter(|e| {
                                let n = e.file_name();
                                let n = n.to_string_lossy();
                                n.strip_prefix("nvidia").is_some_and(|rest| {
                                    !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit())
                                })
                            })
                            .count() as u64
                    })
                    .unwrap_or(0)
            })
            .max(1)
    }
}

#[derive(Clone, Debug)]
pub struct SlurmConfig {
    pub default_partition: String,
    pub partitions: Vec<Partition>,
    pub account: Option<String>,
    pub distribution: Option<String>,
    pub mpi: String,
    pub gpus_per_node: Option<u64>,
    pub ntasks_per_node: Option<u64>,
    pub cache_docker_images_locally: bool,
    pub extra_srun_args: Option<String>,
    pub extra_sbatch_args: Vec<String>,
    pub extra_transient_status_errors: Vec<String>,
    pub status_retry_pause_seconds: u64,
    pub container_mount_home: bool,
    pub data_repository: Option<DataRepository>,
    pub reports: Option<Node>,
    pub supports_gpu_directives_cache: Option<bool>,
    /// A per-node check before each test's main command (`[preflight]`, a cloudai table; off unless enabled).
    pub preflight: Option<Preflight>,
}

/// The pre-flight check: `command` runs once on every allocated node; a node where it fails, or that lists fewer
/// than `min_gpus` lines (GPUs), stops the iteration before its main command.
#[derive(Clone, Debug, PartialEq)]
pub struct Preflight {
    pub command: String,
    pub min_gpus: Option<u64>,
}

pub const DEFAULT_PREFLIGHT: &str = "nvidia-smi --query-gpu=index,name --format=csv,noheader";

#[derive(Clone, Debug)]
pub struct Partition {
    pub name: String,
    pub groups: Vec<Group>,
}

#[derive(Clone, Debug)]
pub struct Group {
    pub name: String,
    pub nodes: Vec<String>,
}

#[derive(Clone, Debug)]
pub struct DataRepository {
    pub endpoint: String,
    pub verify_certs: bool,
}

/// A secret that never prints: `Debug`/`Display` show `***`, so it cannot leak through logs or dumps.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

/// Where the Run:ai secret comes from first: the environment wins over the system file.
pub const SECRET_ENV: &str = "RUNAI_APP_SECRET";

impl RunAiConfig {
    /// The secret to authenticate with: `RUNAI_APP_SECRET`, else the file's `app_secret`.
    pub fn secret(&self) -> Option<Secret> {
        std::env::var(SECRET_ENV)
            .ok()
            .filter(|s| !s.is_empty())
            .map(Secret::new)
            .or_else(|| self.app_secret.clone())
    }
}

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Self(s.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

#[derive(Clone, Debug)]
pub struct RunAiConfig {
    /// GPUs per node for distributed (MPI) workloads: slots per worker. Not a CloudAI field (it assumes 8).
    pub gpus_per_node: u64,
    pub base_url: String,
    pub user_email: String,
    pub app_id: String,
    /// None when the file has no `app_secret` (then `RUNAI_APP_SECRET` must be set; copies of inputs never
    /// keep it).
    pub app_secret: Option<Secret>,
    pub project_id: String,
    pub cluster_id: String,
    /// PEM file of CAs to trust besides the built-in roots (a private control plane). Not a CloudAI field.
    pub ca_bundle: Option<PathBuf>,
    /// Where the MPI operator mounts the SSH keys in launcher and workers: the image user's `~/.ssh`.
    pub ssh_auth_mount_path: String,
    /// What MPI workers run: sshd in the foreground, so the launcher can reach them; empty = the image's own
    /// entrypoint (when it starts sshd itself).
    pub mpi_worker_command: String,
    /// Image of workloads that name none (Sleep, BashCmd). Not a CloudAI field.
    pub job_image: String,
    /// How GPU pods are fitted for NCCL (shared memory, host IPC/network, RDMA, tolerations, node pools).
    pub pods: super::pods::PodSettings,
}

#[derive(Clone, Debug)]
pub struct KubernetesConfig {
    pub kube_config_path: PathBuf,
    pub default_namespace: String,
    pub gpus_per_node: u64,
    /// How pods are fitted for NCCL (shared memory, networks, RDMA, placement, limits, pass-through).
    pub pods: super::pods::PodSettings,
    /// As on Run:ai: the image user's `~/.ssh`, where the MPI operator mounts the keys. Not a CloudAI field.
    pub ssh_auth_mount_path: String,
    /// As on Run:ai: what MPI workers run; empty = the image's own entrypoint. Not a CloudAI field.
    pub mpi_worker_command: String,
    /// Image of workloads that name none (Sleep, BashCmd): a cluster without internet pulls it from its own
    /// registry. Not a CloudAI field.
    pub job_image: String,
}

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
];

/// The system used when none is given: conf/common/system/standalone_system.toml, built in.
pub fn builtin_standalone() -> Result<SystemConfig, ConfigErrors> {
    const TEXT: &str = include_str!("../../../../conf/common/system/standalone_system.toml");
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
                    SCHEDULERS.join(", ")
                ))
                .into(),
        );
    };
    let Some(scheduler) = super::decode::as_str(&mut ctx, sched_node, "scheduler") else {
        return Err(ctx.errors);
    };
    let (kind_fields, default_interval): (&[&str], u64) = match scheduler.as_str() {
        "standalone" => (&["gpus_per_node"], 1),
        "slurm" => (SLURM_FIELDS, 60),
        "runai" => (RUNAI_FIELDS, 60),
        "kubernetes" => (K8S_FIELDS, 1),
        other => {
            let (msg, hint) = if FOREIGN_SCHEDULERS.contains(&other) {
                (
                    format!("scheduler '{other}' is not supported by this version of cloudai"),
                    format!("supported schedulers: {}", SCHEDULERS.join(", ")),
                )
            } else {
                let all: Vec<&str> = SCHEDULERS
                    .iter()
                    .chain(FOREIGN_SCHEDULERS)
                    .copied()
                    .collect();
                let hint = match did_you_mean(other, all) {
                    Some(s) => format!("did you mean \"{s}\"?"),
                    None => format!("one of: {}", SCHEDULERS.join(", ")),
                };
                (format!("unsupported system type '{other}'"), hint)
            };
            return Err(ConfigError::new(sched_node.loc.clone(), "scheduler", msg)
                .with_hint(hint)
                .into());
        }
    };

    let name = v.req_str(&mut ctx, "name");
    let install_path = v.req_str(&mut ctx, "install_path").map(PathBuf::from);
    let output_path = v.req_str(&mut ctx, "output_path").map(PathBuf::from);
    let hf_home_path = v.opt_str(&mut ctx, "hf_home_path").map(PathBuf::from);
    let global_env_vars = env_table(&mut ctx, &v, "global_env_vars");
    let monitor_interval = v.count(&mut ctx, "monitor_interval", default_interval);
    let max_pending_time = v.duration(&mut ctx, "max_pending_time");
    let nvlink_peak_gbps = v.opt_float(&mut ctx, "nvlink_peak_gbps");
    let net_peak_gbps = v.opt_float(&mut ctx, "net_peak_gbps");

    let kind = match scheduler.as_str() {
        "standalone" => Some(SystemKind::Standalone(StandaloneConfig {
            gpus_per_node: v
                .get("gpus_per_node")
                .map(|_| v.count(&mut ctx, "gpus_per_node", 1)),
        })),
        "slurm" => decode_slurm(&mut ctx, &v).map(|s| SystemKind::Slurm(Box::new(s))),
        "runai" => decode_runai(&mut ctx, &v).map(SystemKind::RunAi),
        _ => decode_k8s(&mut ctx, &v).map(SystemKind::Kubernetes),
    };
    let pod_fields: &[&str] = if matches!(scheduler.as_str(), "runai" | "kubernetes") {
        super::pods::FIELDS
    } else {
        &[]
    };
    let known: Vec<&str> = BASE_FIELDS
        .iter()
        .chain(kind_fields)
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

const SLURM_FIELDS: &[&str] = &[
    "default_partition",
    "partitions",
    "account",
    "distribution",
    "mpi",
    "gpus_per_node",
    "ntasks_per_node",
    "cache_docker_images_locally",
    "extra_srun_args",
    "extra_sbatch_args",
    "extra_transient_status_errors",
    "status_retry_pause_seconds",
    "preflight",
    "container_mount_home",
    "data_repository",
    "reports",
    "supports_gpu_directives_cache",
];

fn decode_slurm(ctx: &mut Ctx, v: &View) -> Option<SlurmConfig> {
    let default_partition = v.req_str(ctx, "default_partition");
    let mut partitions = Vec::new();
    if let Some(n) = v.required(ctx, "partitions") {
        match &n.kind {
            Kind::Array(items) => {
                for (i, it) in items.iter().enumerate() {
                    let path = format!("partitions.{i}");
                    if let Some(p) = ctx
                        .table(it, &path)
                        .and_then(|pv| decode_partition(ctx, &pv))
                    {
                        partitions.push(p);
                    }
                }
            }
            _ => ctx.type_err(n, "partitions", "an array of [[partitions]] tables"),
        }
    }
    if let (Some(dp), Some(n)) = (&default_partition, v.get("default_partition")) {
        if !partitions.is_empty() && !partitions.iter().any(|p| &p.name == dp) {
            let names: Vec<&str> = partitions.iter().map(|p| p.name.as_str()).collect();
            let hint = match did_you_mean(dp, names.iter().copied()) {
                Some(s) => format!("did you mean \"{s}\"?"),
                None => format!("declared partitions: {}", names.join(", ")),
            };
            ctx.err(
                &n.loc,
                "default_partition",
                format!("partition '{dp}' is not declared in [[partitions]]"),
                Some(hint),
            );
        }
    }
    let transient = v.str_list(ctx, "extra_transient_status_errors");
    if transient.iter().any(|s| s.trim().is_empty()) {
        let loc = v
            .get("extra_transient_status_errors")
            .map(|n| n.loc.clone())
            .unwrap_or(v.loc.clone());
        ctx.err(
            &loc,
            "extra_transient_status_errors",
            "entries must be non-blank",
            None,
        );
    }
    let data_repository = v.get("data_repository").and_then(|n| {
        let dv = ctx.table(n, "data_repository")?;
        // CloudAI ignores extra keys in this table, so we do too.
        Some(DataRepository {
            endpoint: dv.req_str(ctx, "endpoint")?,
            verify_certs: dv.opt_bool(ctx, "verify_certs").unwrap_or(true),
        })
    });
    let reports = v.get("reports").cloned();
    if let Some(r) = &reports {
        check_reports(ctx, r, "reports");
    }
    let cfg = SlurmConfig {
        default_partition: default_partition?,
        partitions,
        account: v.opt_str(ctx, "account"),
        distribution: v.opt_str(ctx, "distribution"),
        mpi: v.opt_str(ctx, "mpi").unwrap_or_else(|| "pmix".into()),
        gpus_per_node: v
            .get("gpus_per_node")
            .map(|_| v.count(ctx, "gpus_per_node", 0)),
        ntasks_per_node: v
            .get("ntasks_per_node")
            .map(|_| v.count(ctx, "ntasks_per_node", 0)),
        cache_docker_images_locally: v
            .opt_bool(ctx, "cache_docker_images_locally")
            .unwrap_or(false),
        extra_srun_args: v.opt_str(ctx, "extra_srun_args"),
        extra_sbatch_args: v.str_list(ctx, "extra_sbatch_args"),
        extra_transient_status_errors: transient,
        status_retry_pause_seconds: v.count(ctx, "status_retry_pause_seconds", 10),
        container_mount_home: v.opt_bool(ctx, "container_mount_home").unwrap_or(false),
        data_repository,
        reports,
        supports_gpu_directives_cache: v.opt_bool(ctx, "supports_gpu_directives_cache"),
        preflight: None,
    };
    let preflight = decode_preflight(ctx, v, cfg.gpus_per_node);
    Some(SlurmConfig { preflight, ..cfg })
}

fn decode_preflight(ctx: &mut Ctx, v: &View, gpus_per_node: Option<u64>) -> Option<Preflight> {
    let n = v.get("preflight")?;
    let pv = ctx.table(n, "preflight")?;
    let enable = pv.opt_bool(ctx, "enable").unwrap_or(false);
    let command = pv
        .opt_str(ctx, "command")
        .unwrap_or_else(|| DEFAULT_PREFLIGHT.to_string());
    if command.contains('\n') || command.trim().is_empty() {
        let loc = pv.get("command").map_or(pv.loc.clone(), |c| c.loc.clone());
        ctx.err(
            &loc,
            "preflight.command",
            "must be one non-blank line",
            None,
        );
    }
    let min_gpus = pv
        .get("min_gpus")
        .map(|_| pv.count(ctx, "min_gpus", 0))
        .or(gpus_per_node);
    pv.done(ctx, &["enable", "command", "min_gpus"]);
    enable.then_some(Preflight { command, min_gpus })
}

fn decode_partition(ctx: &mut Ctx, pv: &View) -> Option<Partition> {
    let name = pv.req_str(ctx, "name");
    let mut groups = Vec::new();
    if let Some(g) = pv.get("groups") {
        match &g.kind {
            Kind::Array(items) => {
                for (j, it) in items.iter().enumerate() {
                    let path = format!("{}.{j}", pv.field("groups"));
                    if let Some(gv) = ctx.table(it, &path) {
                        let gname = gv.req_str(ctx, "name");
                        let nodes = gv
                            .required(ctx, "nodes")
                            .and_then(|n| super::decode::as_str_list(ctx, n, &gv.field("nodes")));
                        gv.done(ctx, &["name", "nodes"]);
                        if let (Some(name), Some(nodes)) = (gname, nodes) {
                            groups.push(Group { name, nodes });
                        }
                    }
                }
            }
            _ => ctx.type_err(
                g,
                &pv.field("groups"),
                "an array of [[partitions.groups]] tables",
            ),
        }
    }
    pv.done(ctx, &["name", "groups"]);
    Some(Partition {
        name: name?,
        groups,
    })
}

/// `[reports.X]` names must be registered reports.
pub fn check_reports(ctx: &mut Ctx, node: &Node, path: &str) {
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

const RUNAI_FIELDS: &[&str] = &[
    "gpus_per_node",
    "base_url",
    "user_email",
    "app_id",
    "app_secret",
    "project_id",
    "cluster_id",
    "nodes",
    "ca_bundle",
    "ssh_auth_mount_path",
    "mpi_worker_command",
    "job_image",
];

fn decode_runai(ctx: &mut Ctx, v: &View) -> Option<RunAiConfig> {
    let base_url = v.req_str(ctx, "base_url");
    if let (Some(u), Some(n)) = (&base_url, v.get("base_url")) {
        if !(u.starts_with("http://") || u.starts_with("https://")) {
            ctx.err(
                &n.loc,
                "base_url",
                format!("{u:?} is not an http(s) URL"),
                Some("write it like \"https://runai.example.com\"".into()),
            );
        }
    }
    let user_email = v.req_str(ctx, "user_email");
    let app_id = v.req_str(ctx, "app_id");
    // optional: RUNAI_APP_SECRET may give it instead (checked when the system is built)
    let app_secret = v
        .get("app_secret")
        .and_then(|_| ctx.secret(v, "app_secret"))
        .map(Secret::new);
    let project_id = v.req_str(ctx, "project_id");
    let cluster_id = v.req_str(ctx, "cluster_id");
    let ca_bundle = v.opt_str(ctx, "ca_bundle").map(PathBuf::from);
    if let (Some(p), Some(n)) = (&ca_bundle, v.get("ca_bundle")) {
        if !p.is_file() {
            ctx.err(
                &n.loc,
                "ca_bundle",
                format!("{} is not a readable file", p.display()),
                Some(
                    "give the PEM file of the CA that signed the control plane's certificate"
                        .into(),
                ),
            );
        }
    }
    Some(RunAiConfig {
        job_image: job_image(ctx, v),
        pods: super::pods::decode(ctx, v, true),
        ca_bundle,
        ssh_auth_mount_path: ssh_auth_mount_path(ctx, v),
        mpi_worker_command: mpi_worker_command(ctx, v),
        gpus_per_node: v.count(ctx, "gpus_per_node", 8),
        base_url: base_url?,
        user_email: user_email?,
        app_id: app_id?,
        app_secret,
        project_id: project_id?,
        cluster_id: cluster_id?,
    })
}

fn ssh_auth_mount_path(ctx: &mut Ctx, v: &View) -> String {
    v.opt_str(ctx, "ssh_auth_mount_path")
        .unwrap_or_else(|| "/root/.ssh".into())
}

fn mpi_worker_command(ctx: &mut Ctx, v: &View) -> String {
    v.opt_str(ctx, "mpi_worker_command")
        .unwrap_or_else(|| "/usr/sbin/sshd -De".into())
}

const K8S_FIELDS: &[&str] = &[
    "kube_config_path",
    "default_namespace",
    "gpus_per_node",
    "ssh_auth_mount_path",
    "mpi_worker_command",
    "job_image",
];

fn decode_k8s(ctx: &mut Ctx, v: &View) -> Option<KubernetesConfig> {
    let kube_config_path = v.req_str(ctx, "kube_config_path").map(PathBuf::from);
    let default_namespace = v.req_str(ctx, "default_namespace");
    Some(KubernetesConfig {
        kube_config_path: kube_config_path?,
        default_namespace: default_namespace?,
        gpus_per_node: v.count(ctx, "gpus_per_node", 1),
        pods: super::pods::decode(ctx, v, false),
        ssh_auth_mount_path: ssh_auth_mount_path(ctx, v),
        mpi_worker_command: mpi_worker_command(ctx, v),
        job_image: job_image(ctx, v),
    })
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
