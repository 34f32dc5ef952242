//! `scheduler = "runai"`: the control plane, its credentials (a [`Secret`] that never prints) and the project.

use super::MAX_GPUS_PER_NODE;
use std::fmt;
use std::path::PathBuf;

use super::super::decode::{Ctx, View};
use super::{job_image, mpi_worker_command, ssh_auth_mount_path};
use super::{Needs, Scheduler, SystemKind};

pub(super) const SCHEDULER: Scheduler = Scheduler {
    name: "runai",
    fields: RUNAI_FIELDS,
    default_monitor_interval: 60,
    gives: &[Needs::Launch],
    pods: true,
    decode: |ctx, v| decode_runai(ctx, v).map(SystemKind::RunAi),
};

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
    /// Whether the file sets `gpus_per_node` (else a run takes it from the cluster's nodes; 8 until then).
    pub gpus_per_node_given: bool,
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
    pub pods: crate::config::pods::PodSettings,
    /// `[preflight]`: a per-node check before each GPU test's command (off unless enabled); `min_gpus` unset means
    /// `gpus_per_node` as the run knows it.
    pub preflight: Option<super::Preflight>,
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
    "preflight",
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
        preflight: super::slurm::decode_preflight(ctx, v, None),
        pods: crate::config::pods::decode(ctx, v, true),
        ca_bundle,
        ssh_auth_mount_path: ssh_auth_mount_path(ctx, v),
        mpi_worker_command: mpi_worker_command(ctx, v),
        gpus_per_node: v.count_max(ctx, "gpus_per_node", 8, MAX_GPUS_PER_NODE),
        gpus_per_node_given: v.has("gpus_per_node"),
        base_url: base_url?,
        user_email: user_email?,
        app_id: app_id?,
        app_secret,
        project_id: project_id?,
        cluster_id: cluster_id?,
    })
}
