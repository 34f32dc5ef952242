//! `scheduler = "standalone"`: the local machine.

use super::super::decode::{Ctx, View};
use super::MAX_GPUS_PER_NODE;
use super::{Needs, Scheduler, SystemKind};

pub(super) const SCHEDULER: Scheduler = Scheduler {
    name: "standalone",
    fields: &["gpus_per_node"],
    default_monitor_interval: 1,
    gives: &[Needs::Launch, Needs::Hosts, Needs::Local],
    pods: false,
    decode,
};

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

fn decode(ctx: &mut Ctx, v: &View) -> Option<SystemKind> {
    Some(SystemKind::Standalone(StandaloneConfig {
        gpus_per_node: v
            .get("gpus_per_node")
            .map(|_| v.count_max(ctx, "gpus_per_node", 1, MAX_GPUS_PER_NODE)),
    }))
}
