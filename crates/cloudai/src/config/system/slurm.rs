//! `scheduler = "slurm"`: partitions and groups, sbatch options, the pre-flight check, data repositories.

use super::super::decode::{Ctx, View};
use super::super::error::did_you_mean;
use super::super::node::{Kind, Node};
use super::MAX_GPUS_PER_NODE;
use super::{check_reports, Needs, Scheduler, SystemKind};

pub(super) const SCHEDULER: Scheduler = Scheduler {
    name: "slurm",
    fields: SLURM_FIELDS,
    default_monitor_interval: 60,
    gives: &[Needs::Launch, Needs::Hosts, Needs::Srun, Needs::Submit],
    pods: false,
    decode: |ctx, v| decode_slurm(ctx, v).map(|s| SystemKind::Slurm(Box::new(s))),
};

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
            .map(|_| v.count_max(ctx, "gpus_per_node", 0, MAX_GPUS_PER_NODE)),
        ntasks_per_node: v
            .get("ntasks_per_node")
            .map(|_| v.count_max(ctx, "ntasks_per_node", 0, MAX_GPUS_PER_NODE)),
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

/// `[preflight]` (Slurm, Kubernetes, Run:ai): `min_gpus` defaults to `gpus_per_node` where it is given.
pub(super) fn decode_preflight(
    ctx: &mut Ctx,
    v: &View,
    gpus_per_node: Option<u64>,
) -> Option<Preflight> {
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
                        let nodes = gv.required(ctx, "nodes").and_then(|n| {
                            crate::config::decode::as_str_list(ctx, n, &gv.field("nodes"))
                        });
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

/// What the system file says of a `partition:group:count` node spec.
#[derive(Debug, PartialEq)]
pub enum GroupSpec {
    Fits,
    /// The file does not list the partition's groups: the scheduler decides.
    Unknown,
    Problem {
        msg: String,
        hint: String,
    },
}

impl SlurmConfig {
    /// `spec` (`part:group:n`) against the partitions and groups the file lists.
    pub(crate) fn group_spec(&self, spec: &str, part: &str, group: &str, n: u64) -> GroupSpec {
        let names = |v: Vec<&str>| v.join(", ");
        match self.partitions.iter().find(|p| p.name == part) {
            None if !self.partitions.is_empty() => GroupSpec::Problem {
                msg: format!("{spec:?}: the system has no partition {part:?}"),
                hint: format!(
                    "partitions: {}",
                    names(self.partitions.iter().map(|p| p.name.as_str()).collect())
                ),
            },
            Some(p) if !p.groups.is_empty() => match p.groups.iter().find(|g| g.name == group) {
                None => GroupSpec::Problem {
                    msg: format!("{spec:?}: partition {part:?} has no group {group:?}"),
                    hint: format!(
                        "groups: {}",
                        names(p.groups.iter().map(|g| g.name.as_str()).collect())
                    ),
                },
                Some(g) => {
                    let have = listed(&g.nodes);
                    if !g.nodes.is_empty() && n > have {
                        GroupSpec::Problem {
                            msg: format!("{spec:?} asks {n} nodes; group {group:?} has {have}"),
                            hint: "lower the count".into(),
                        }
                    } else {
                        GroupSpec::Fits
                    }
                }
            },
            _ => GroupSpec::Unknown,
        }
    }

    /// Nodes the file lists in the default partition's groups (0: none listed).
    pub(crate) fn listed_size(&self) -> u64 {
        self.partitions
            .iter()
            .find(|p| p.name == self.default_partition)
            .map(|p| p.groups.iter().map(|g| listed(&g.nodes)).sum())
            .unwrap_or(0)
    }
}

/// How many hosts node lists name.
fn listed(nodes: &[String]) -> u64 {
    nodes
        .iter()
        .filter_map(|n| crate::util::nodelist::expand(n))
        .map(|v| v.len() as u64)
        .sum()
}
