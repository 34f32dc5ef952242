//! What a verdict claims, check by check. A workload reads its output ([`Shown`]: the ranks it lists, the network
//! NCCL chose, its peak bandwidth per collective) and grades what only it understands (its table, its data check);
//! [`judge`] then holds what the output shows against what was launched ([`Asked`]: nodes, GPUs per node, the
//! system's declared fabric) and against what the hardware can do ([`hardware`]). Every verdict carries the list of
//! [`Check`]s behind it, so a PASS reads as "checked: 16 ranks on 2 hosts, NET/IB, 382 GB/s ≥ 230 GB/s expected".

pub mod hardware;
mod shape;

use super::Verdict;

/// A passed verdict in a line: `checked: shape 16 ranks on 2 hosts (a, b); transport NET/IB; … · not shown:
/// expectation` (empty without checks).
pub fn brief(checks: &[Check]) -> String {
    let passed: Vec<String> = checks
        .iter()
        .filter(|c| c.status == CheckStatus::Pass && c.check != CheckKind::Output)
        .map(|c| format!("{} {}", c.check.as_str(), c.detail))
        .collect();
    let unseen: Vec<&str> = checks
        .iter()
        .filter(|c| c.status == CheckStatus::NotShown)
        .map(|c| c.check.as_str())
        .collect();
    let mut out = String::new();
    if !passed.is_empty() {
        out = format!("checked: {}", passed.join("; "));
    }
    if !unseen.is_empty() {
        if !out.is_empty() {
            out.push_str(" · ");
        }
        out.push_str(&format!("not shown: {}", unseen.join(", ")));
    }
    out
}

/// One rank as an output lists it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SeenRank {
    pub host: String,
    /// The GPU on its host: its PCI bus id when printed (each rank may see its own GPU as device 0), else the
    /// device index.
    pub gpu: String,
    /// The device's name (`NVIDIA A100-SXM4-80GB`).
    pub device: String,
}

/// The network the communication library says it used.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Network {
    /// The library that said so (`NCCL`, `UCX`).
    pub library: &'static str,
    /// Its name of the network: NCCL's `Socket`, `IB`, `IBext_v8`, `AWS Libfabric`, `GPUDirectTCPX`, …
    pub name: String,
    /// TCP sockets carried the traffic between nodes.
    pub socket: bool,
    /// In the output's words: `NET/Socket on eth0`, `NET/IB/0/GDRDMA`.
    pub detail: String,
    /// NCCL said it found no InfiniBand device (`NET/IB : No device found`).
    pub no_ib_device: bool,
}

/// A collective's peak bus bandwidth in the output.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Peak {
    /// `all_reduce`, `all_gather`, … (`_perf`/`_mpi` dropped).
    pub collective: String,
    pub busbw_gbps: f64,
    pub at_size: u64,
    /// The largest message size of its table.
    pub max_size: u64,
}

/// What an output shows of how it ran; empty where it shows nothing (most workloads).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Shown {
    /// Every rank it lists, once (the first test's `# Rank … on <host> device <d>` lines of nccl-tests).
    pub ranks: Vec<SeenRank>,
    pub network: Option<Network>,
    pub peaks: Vec<Peak>,
    /// The test set its own floor (`min_busbw`): it replaces the hardware expectation.
    pub own_floor: bool,
}

pub use crate::config::system::fabric::{Fabric, DEFAULT_FRACTION};
pub use crate::results::checks::{Asked, Check, CheckKind, CheckStatus};

/// The verdict with every check behind it: the workload's own, then shape, transport and expectation from what its
/// output shows. A check that fails turns a PASS into a FAIL; its detail joins the message.
pub fn judge(mut v: Verdict, asked: Option<&Asked>) -> Verdict {
    let own_fail = v.checks.iter().any(|c| c.status == CheckStatus::Fail);
    if !v.passed && !own_fail {
        // the workload's reason is not one of its checks: it stands as the output check
        v.checks
            .insert(0, Check::fail(CheckKind::Output, v.message.clone()));
    } else if v.checks.is_empty() {
        v.checks.push(Check::pass(CheckKind::Output, "as expected"));
    }
    let Some(shown) = v.shown.take() else {
        // a launch of ranks whose output lists none (OSU, UCC): said, not failed
        if asked.is_some_and(|a| a.gpus_per_node.is_some()) {
            v.checks.push(Check::not_shown(
                CheckKind::Shape,
                "the output does not list its ranks and hosts",
            ));
        }
        return v;
    };
    let mut added = Vec::new();
    if let Some(asked) = asked {
        added.push(shape::check(asked, &shown.ranks));
    } else if !shown.ranks.is_empty() {
        added.push(Check::not_shown(
            CheckKind::Shape,
            format!(
                "{}; what was launched is not recorded",
                shape::describe(&shown.ranks)
            ),
        ));
    }
    let hosts = shape::hosts(&shown.ranks).len() as u64;
    let nodes = asked.map_or(hosts, |a| a.nodes.max(hosts));
    let fabric = asked.map(|a| a.fabric.clone()).unwrap_or_default();
    added.push(transport(nodes, &shown, &fabric));
    if !shown.own_floor {
        added.push(hardware::check(&shown, nodes, &fabric));
    }
    for c in added {
        if c.status == CheckStatus::Fail {
            v.passed = false;
            v.message = if v.message.is_empty() {
                c.detail.clone()
            } else {
                format!("{}; {}", v.message, c.detail)
            };
        }
        v.checks.push(c);
    }
    v
}

/// Removes the expectation check (a baseline grades the numbers instead) and recomputes whether the rest passed:
/// `Some(message)` of the remaining failures, `None` when none is left.
pub(crate) fn without_expectation(checks: &mut Vec<Check>) -> Option<String> {
    checks.retain(|c| c.check != CheckKind::Expectation);
    let fails: Vec<&str> = checks
        .iter()
        .filter(|c| c.status == CheckStatus::Fail)
        .map(|c| c.detail.as_str())
        .collect();
    (!fails.is_empty()).then(|| fails.join("; "))
}

/// Between nodes NCCL must have used the fabric, not TCP sockets (unless the system declares a TCP fabric).
fn transport(nodes: u64, shown: &Shown, fabric: &Fabric) -> Check {
    if nodes <= 1 {
        return Check::pass(
            CheckKind::Transport,
            "one node: no network between the ranks",
        );
    }
    match &shown.network {
        None => Check::not_shown(
            CheckKind::Transport,
            "the output does not say which network NCCL used (run with NCCL_DEBUG=INFO \
             NCCL_DEBUG_SUBSYS=INIT,NET to check it)",
        ),
        Some(n) if n.socket && fabric.tcp => Check::pass(
            CheckKind::Transport,
            format!("{} (the system declares fabric = \"tcp\")", n.detail),
        ),
        Some(n) if n.socket => Check::fail(
            CheckKind::Transport,
            format!(
                "{} used TCP sockets between nodes ({}{}): no RDMA device reached the ranks; give the pods an RDMA \
                 device (an rdma/* or EFA resource, or privileged) and check NCCL_IB_HCA / NCCL_NET, or declare \
                 fabric = \"tcp\" in the system if sockets are all it has",
                n.library,
                n.detail,
                if n.no_ib_device {
                    ", after NET/IB : No device found"
                } else {
                    ""
                }
            ),
        ),
        Some(n) => Check::pass(CheckKind::Transport, n.detail.clone()),
    }
}

#[cfg(test)]
mod tests;
