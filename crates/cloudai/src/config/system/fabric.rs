//! The fabric and hardware a system declares (our fields: `fabric`, `nics_per_node`, `nic_gbps`,
//! `expected_busbw_gbps`, `expectation_fraction`), for the transport and expectation checks of a verdict.

use serde::{Deserialize, Serialize};

use crate::config::decode::{Ctx, View};

/// What the system declares of its hardware and fabric (system TOML fields of ours), for the transport and
/// expectation checks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fabric {
    /// The fabric between nodes is TCP only (`fabric = "tcp"`): NCCL over sockets is what it can do.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tcp: bool,
    /// Network adapters per node for GPU traffic and their rate, Gb/s (`nics_per_node`, `nic_gbps`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nics_per_node: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic_gbps: Option<f64>,
    /// The busbw this system is expected to give, GB/s (`expected_busbw_gbps`): replaces the table's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_busbw_gbps: Option<f64>,
    /// A run fails below this fraction of the expectation (`expectation_fraction`).
    #[serde(default = "default_fraction")]
    pub expectation_fraction: f64,
}

/// The documented default of `expectation_fraction`.
pub const DEFAULT_FRACTION: f64 = 0.6;

fn default_fraction() -> f64 {
    DEFAULT_FRACTION
}

impl Default for Fabric {
    fn default() -> Self {
        Fabric {
            tcp: false,
            nics_per_node: None,
            nic_gbps: None,
            expected_busbw_gbps: None,
            expectation_fraction: DEFAULT_FRACTION,
        }
    }
}

/// The fabric fields of a system file, each in its range.
pub fn decode(ctx: &mut Ctx, v: &View) -> Fabric {
    let tcp = match v.opt_str(ctx, "fabric").as_deref() {
        None | Some("rdma") => false,
        Some("tcp") => true,
        Some(other) => {
            if let Some(n) = v.get("fabric") {
                ctx.err(
                    &n.loc,
                    &v.field("fabric"),
                    format!("unknown fabric \"{other}\""),
                    Some(
                        "one of: \"rdma\" (InfiniBand, RoCE, EFA, GPUDirect: the default), \"tcp\" (NCCL over \
                         sockets is all the nodes have)"
                            .into(),
                    ),
                );
            }
            false
        }
    };
    Fabric {
        tcp,
        nics_per_node: v
            .float_in(ctx, "nics_per_node", 1.0, 64.0, true)
            .map(|n| n as u64),
        nic_gbps: v.float_in(ctx, "nic_gbps", 1.0, 3200.0, false),
        expected_busbw_gbps: v.float_in(ctx, "expected_busbw_gbps", 0.001, 100_000.0, false),
        expectation_fraction: v
            .float_in(ctx, "expectation_fraction", 0.001, 1.0, false)
            .unwrap_or(DEFAULT_FRACTION),
    }
}
