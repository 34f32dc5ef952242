//! What the hardware can do: the bus bandwidth a healthy system of a known GPU gives at large messages, within a
//! node (from the GPU's NVLink or PCIe link, recognised from the device names nccl-tests prints) and between nodes
//! (from the network adapters the system declares). A run whose peak falls below a fraction of it (60 % unless the
//! system says otherwise) fails with both numbers; unknown hardware gets no floor and a note on how to give one.
//! The figures and their sources are in docs/verdicts.md.

use super::{Check, CheckKind, Fabric, Shown};

/// A GPU system whose intra-node bandwidth is documented.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Gpu {
    /// How the docs and messages name it.
    pub name: &'static str,
    /// The link between the GPUs of a node.
    pub link: &'static str,
    /// Its one-way bandwidth per GPU, GB/s (the vendor's figure; bidirectional / 2).
    pub link_gbps: f64,
    /// The bus bandwidth a healthy node gives for all_reduce, all_gather, reduce_scatter, broadcast and reduce at
    /// large messages, GB/s.
    pub busbw_gbps: f64,
}

/// Recognised device names, most specific first: (any of these substrings, the system).
const TABLE: &[(&[&str], Gpu)] = &[
    (
        &["GB200"],
        Gpu {
            name: "GB200 NVL",
            link: "NVLink 5",
            link_gbps: 900.0,
            busbw_gbps: 650.0,
        },
    ),
    (
        &["GH200"],
        Gpu {
            name: "GH200",
            link: "none (one GPU per node)",
            link_gbps: 0.0,
            busbw_gbps: 0.0,
        },
    ),
    (
        &["B200"],
        Gpu {
            name: "B200 (HGX/DGX)",
            link: "NVLink 5",
            link_gbps: 900.0,
            busbw_gbps: 650.0,
        },
    ),
    (
        &["H200 NVL"],
        Gpu {
            name: "H200 NVL (PCIe)",
            link: "PCIe 5.0 x16",
            link_gbps: 64.0,
            busbw_gbps: 40.0,
        },
    ),
    (
        &["H200"],
        Gpu {
            name: "H200 SXM",
            link: "NVLink 4",
            link_gbps: 450.0,
            busbw_gbps: 360.0,
        },
    ),
    (
        &["H100 PCIe", "H100 NVL"],
        Gpu {
            name: "H100 PCIe / NVL",
            link: "PCIe 5.0 x16",
            link_gbps: 64.0,
            busbw_gbps: 40.0,
        },
    ),
    (
        &["H100 80GB HBM3", "H100 SXM", "H100-SXM"],
        Gpu {
            name: "H100 SXM",
            link: "NVLink 4",
            link_gbps: 450.0,
            busbw_gbps: 360.0,
        },
    ),
    (
        &["A100-PCIE", "A100 PCIe", "A100 80GB PCIe", "A100-PCIe"],
        Gpu {
            name: "A100 PCIe",
            link: "PCIe 4.0 x16",
            link_gbps: 32.0,
            busbw_gbps: 20.0,
        },
    ),
    (
        &["A100-SXM", "A100 SXM"],
        Gpu {
            name: "A100 SXM",
            link: "NVLink 3",
            link_gbps: 300.0,
            busbw_gbps: 230.0,
        },
    ),
    (
        &["L40S"],
        Gpu {
            name: "L40S",
            link: "PCIe 4.0 x16",
            link_gbps: 32.0,
            busbw_gbps: 15.0,
        },
    ),
];

/// Collectives whose bus bandwidth tracks the link rate (nccl-tests' busbw normalises them to it); the others
/// (alltoall, sendrecv, gather, scatter, hypercube) get no floor.
const JUDGED: &[&str] = &[
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "reduce",
];

/// Below this largest message size, bandwidth has not reached its plateau: not judged.
pub(crate) const MIN_SIZE: u64 = 128 << 20;

/// Share of the adapters' line rate NCCL reaches between nodes.
const NET_EFFICIENCY: f64 = 0.9;

/// The documented system a device name belongs to.
pub(crate) fn recognise(device: &str) -> Option<Gpu> {
    TABLE
        .iter()
        .find(|(keys, _)| keys.iter().any(|k| device.contains(k)))
        .map(|(_, g)| *g)
}

/// The expectation for a run on `nodes` nodes of `gpus` GPUs each: GB/s and where it comes from.
fn expectation(
    device: &str,
    gpus_per_host: u64,
    nodes: u64,
    fabric: &Fabric,
) -> Result<(f64, String), String> {
    if let Some(e) = fabric.expected_busbw_gbps {
        return Ok((e, "expected_busbw_gbps of the system".into()));
    }
    let gpu = recognise(device).filter(|g| g.busbw_gbps > 0.0);
    let intra = gpu.filter(|_| gpus_per_host >= 2).map(|g| {
        (
            g.busbw_gbps,
            format!("{gpus_per_host} × {} over {}", g.name, g.link),
        )
    });
    if nodes <= 1 {
        return intra.ok_or_else(|| match (gpu, gpus_per_host) {
            (_, 0 | 1) => "one GPU: bus bandwidth measures no link".to_string(),
            _ => format!(
                "no documented expectation for {} (set expected_busbw_gbps in the system to give one)",
                if device.is_empty() { "this GPU" } else { device }
            ),
        });
    }
    let net = match (fabric.nics_per_node, fabric.nic_gbps) {
        (Some(n), Some(g)) if n > 0 && g > 0.0 => Some((
            n as f64 * g / 8.0 * NET_EFFICIENCY,
            format!("{n} × {g} Gb/s adapters per node"),
        )),
        _ => None,
    };
    match (net, intra) {
        (Some((n, _)), Some((i, iwhy))) if i < n => Ok((i, iwhy)),
        (Some(x), _) => Ok(x),
        (None, _) => Err(
            "between nodes the expectation comes from the network: declare nics_per_node and nic_gbps (or \
             expected_busbw_gbps) in the system to give one"
                .into(),
        ),
    }
}

/// The peak bus bandwidth of every judged collective against the hardware's expectation.
pub fn check(shown: &Shown, nodes: u64, fabric: &Fabric) -> Check {
    let device = shown.ranks.first().map(|r| r.device.as_str()).unwrap_or("");
    let per_host = super::shape::hosts(&shown.ranks)
        .iter()
        .map(|(_, n)| *n)
        .min()
        .unwrap_or(0);
    let judged: Vec<&super::Peak> = shown
        .peaks
        .iter()
        .filter(|p| JUDGED.contains(&p.collective.as_str()))
        .collect();
    if shown.peaks.is_empty() {
        return Check::not_shown(CheckKind::Expectation, "no bandwidth rows to judge");
    }
    let Some(first) = judged.first() else {
        return Check::not_shown(
            CheckKind::Expectation,
            format!(
                "{} has no documented expectation (judged: {})",
                shown.peaks[0].collective,
                JUDGED.join(", ")
            ),
        );
    };
    let large: Vec<&&super::Peak> = judged.iter().filter(|p| p.max_size >= MIN_SIZE).collect();
    if large.is_empty() {
        return Check::not_shown(
            CheckKind::Expectation,
            format!(
                "largest message {} is below the {} needed to judge bandwidth against the hardware (raise maxbytes)",
                crate::html::size_iec(first.max_size),
                crate::html::size_iec(MIN_SIZE)
            ),
        );
    }
    let (expected, source) = match expectation(device, per_host, nodes, fabric) {
        Ok(x) => x,
        Err(why) => return Check::not_shown(CheckKind::Expectation, why),
    };
    let floor = expected * fabric.expectation_fraction;
    let worst = large
        .iter()
        .min_by(|a, b| a.busbw_gbps.total_cmp(&b.busbw_gbps))
        .expect("not empty");
    let pct = fabric.expectation_fraction * 100.0;
    if worst.busbw_gbps < floor {
        return Check::fail(
            CheckKind::Expectation,
            format!(
                "peak busbw {:.2} GB/s ({} at {}) is {:.0}% of the {expected} GB/s expected for {source} (floor \
                 {floor:.1} GB/s = {pct:.0}%): the hardware runs far below what it can do; check NVLink/PCIe and \
                 network health (nvidia-smi topo -m, nvidia-smi nvlink -s, ibstat)",
                worst.busbw_gbps,
                worst.collective,
                crate::html::size_iec(worst.at_size),
                worst.busbw_gbps / expected * 100.0
            ),
        );
    }
    Check::pass(
        CheckKind::Expectation,
        format!(
            "{:.2} GB/s ≥ {floor:.1} GB/s ({pct:.0}% of {expected} GB/s expected for {source})",
            worst.busbw_gbps
        ),
    )
}
