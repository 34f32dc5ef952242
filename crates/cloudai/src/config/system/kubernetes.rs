//! `scheduler = "kubernetes"`: the kubeconfig, the namespace, and what MPI workers and plain jobs run.

use super::MAX_GPUS_PER_NODE;
use std::path::PathBuf;

use super::super::decode::{Ctx, View};
use super::{job_image, mpi_worker_command, ssh_auth_mount_path};
use super::{Needs, Scheduler, SystemKind};

pub(super) const SCHEDULER: Scheduler = Scheduler {
    name: "kubernetes",
    fields: K8S_FIELDS,
    default_monitor_interval: 1,
    gives: &[Needs::Launch, Needs::Object],
    pods: true,
    decode: |ctx, v| decode_k8s(ctx, v).map(SystemKind::Kubernetes),
};

#[derive(Clone, Debug)]
pub struct KubernetesConfig {
    pub kube_config_path: PathBuf,
    pub default_namespace: String,
    /// GPUs per node: as written, else what the nodes' allocatable `nvidia.com/gpu` says once a run surveyed
    /// them (1 until then, as in a dry-run).
    pub gpus_per_node: u64,
    /// Whether the file sets `gpus_per_node` (else a run takes it from the nodes).
    pub gpus_per_node_given: bool,
    /// How pods are fitted for NCCL (shared memory, networks, RDMA, placement, limits, pass-through).
    pub pods: crate::config::pods::PodSettings,
    /// As on Run:ai: the image user's `~/.ssh`, where the MPI operator mounts the keys. Not a CloudAI field.
    pub ssh_auth_mount_path: String,
    /// As on Run:ai: what MPI workers run; empty = the image's own entrypoint. Not a CloudAI field.
    pub mpi_worker_command: String,
    /// Image of workloads that name none (Sleep, BashCmd): a cluster without internet pulls it from its own
    /// registry. Not a CloudAI field.
    pub job_image: String,
    /// `[preflight]`: a per-node check before each GPU test's command (off unless enabled); `min_gpus` unset means
    /// `gpus_per_node` as the run knows it.
    pub preflight: Option<super::Preflight>,
}

const K8S_FIELDS: &[&str] = &[
    "kube_config_path",
    "default_namespace",
    "gpus_per_node",
    "ssh_auth_mount_path",
    "mpi_worker_command",
    "job_image",
    "preflight",
];

fn decode_k8s(ctx: &mut Ctx, v: &View) -> Option<KubernetesConfig> {
    let kube_config_path = v.req_str(ctx, "kube_config_path").map(PathBuf::from);
    let default_namespace = v.req_str(ctx, "default_namespace");
    Some(KubernetesConfig {
        kube_config_path: kube_config_path?,
        default_namespace: default_namespace?,
        gpus_per_node: v.count_max(ctx, "gpus_per_node", 1, MAX_GPUS_PER_NODE),
        gpus_per_node_given: v.has("gpus_per_node"),
        pods: crate::config::pods::decode(ctx, v, false),
        ssh_auth_mount_path: ssh_auth_mount_path(ctx, v),
        mpi_worker_command: mpi_worker_command(ctx, v),
        job_image: job_image(ctx, v),
        preflight: super::slurm::decode_preflight(ctx, v, None),
    })
}
