//! What find-bad-nodes asks of a scheduler: whether it can pin jobs to nodes, its GPU nodes and which it holds out
//! of service, where they sit in the fabric, and taking bad nodes out of service. The search itself
//! (`bad_nodes/`) knows no scheduler.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::config::system::{SystemConfig, SystemKind};
use crate::{info, warn};

/// Why find-bad-nodes cannot run on the system: it pins each job to its pair of nodes, which Slurm
/// (`--nodelist`), Run:ai and Kubernetes (node affinity) do and Standalone cannot.
pub fn unpinnable(sys: &SystemConfig) -> Option<String> {
    matches!(sys.kind, SystemKind::Standalone(_)).then(|| {
        format!(
            "find-bad-nodes runs on Slurm (jobs pinned with --nodelist), Run:ai and Kubernetes (node affinity); {} \
             cannot pin a job to nodes",
            sys.kind.scheduler()
        )
    })
}

/// What was asked on the command line.
#[derive(Clone, Copy, Debug, Default)]
pub struct Wanted {
    pub drain: bool,
    pub cordon: bool,
    pub label: bool,
    /// At most this fraction of the checked nodes may be acted on.
    pub max_fraction: f64,
}

impl Wanted {
    pub fn any(&self) -> bool {
        self.drain || self.cordon || self.label
    }
}

/// One change made (or refused) to one node.
#[derive(Clone, Debug, Serialize)]
pub struct Action {
    pub node: String,
    /// `drain`, `cordon`, `label`.
    pub action: &'static str,
    /// What was run, as an operator would type it.
    pub command: String,
    /// What undoes it.
    pub undo: String,
    pub ok: bool,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub error: String,
}

pub use crate::quarantine::{label_value, TAINT_KEY};

/// Why `--drain`/`--cordon`/`--label` cannot be done on this scheduler.
pub fn refused(w: Wanted, sys: &SystemConfig) -> Option<String> {
    match (sys.kind.scheduler(), w) {
        ("slurm", Wanted { cordon: false, label: false, .. }) => None,
        ("kubernetes", Wanted { drain: false, .. }) => None,
        (_, w) if !w.any() => None,
        ("slurm", _) => Some("--cordon and --label are for Kubernetes; on Slurm, --drain".into()),
        ("kubernetes", _) => Some("--drain is for Slurm; on Kubernetes, --cordon or --label".into()),
        (other, _) => Some(format!(
            "{other} offers no way to take a node out of service through its API: act by hand on the nodes \
             bad-nodes.json names (--drain is for Slurm, --cordon/--label for Kubernetes)"
        )),
    }
}

/// Nodes the scheduler holds out of service, with its reason.
pub type OutOfService = Vec<(String, String)>;

/// Nodes named on the command line (`node[001-016]`, comma lists); else every node of the Slurm system's default
/// partition, or every usable GPU node of the Kubernetes or Run:ai cluster. Nodes the scheduler holds out of service
/// (Slurm down/drained/failing; Kubernetes NotReady, cordoned or tainted; Run:ai not Ready) come back apart, with
/// the scheduler's reason: they get no job.
pub fn nodes(
    spec: Option<&str>,
    sys: &SystemConfig,
    rt: &tokio::runtime::Runtime,
) -> Result<(Vec<String>, OutOfService), String> {
    let named = match spec {
        Some(s) => Some(
            crate::util::nodelist::expand(s)
                .ok_or_else(|| format!("cannot parse node list '{s}'"))?,
        ),
        None => None,
    };
    let listed = match &sys.kind {
        SystemKind::Kubernetes(k) => {
            Some(rt.block_on(crate::systems::kubernetes::nodes::gpu_nodes(k)))
        }
        SystemKind::RunAi(_) => Some(rt.block_on(crate::systems::runai::nodes::gpu_nodes(sys))),
        _ => None,
    };
    if let Some(listed) = listed {
        let (ok, skipped) = match (listed, &named) {
            (Ok(l), _) => l,
            (Err(e), None) => return Err(format!("{e}; give --nodes")),
            (Err(e), Some(n)) => {
                warn!("Cannot tell which nodes are in service ({e}): testing every node named");
                return Ok((n.clone(), Vec::new()));
            }
        };
        let Some(named) = named else {
            info!("{} usable GPU node(s) in the cluster", ok.len());
            return Ok((ok, skipped));
        };
        let out: Vec<(String, String)> = skipped
            .into_iter()
            .filter(|(n, _)| named.contains(n))
            .collect();
        let usable = named
            .into_iter()
            .filter(|n| !out.iter().any(|(o, _)| o == n))
            .collect();
        return Ok((usable, out));
    }
    let SystemKind::Slurm(s) = &sys.kind else {
        return Err("give --nodes (the system file lists no nodes)".into());
    };
    let all = match named {
        Some(n) => n,
        None => {
            let mut out = Vec::new();
            for p in s
                .partitions
                .iter()
                .filter(|p| p.name == s.default_partition)
            {
                for g in &p.groups {
                    for n in &g.nodes {
                        out.extend(
                            crate::util::nodelist::expand(n)
                                .ok_or_else(|| format!("cannot parse node list '{n}'"))?,
                        );
                    }
                }
            }
            if out.is_empty() {
                return Err(format!(
                    "partition '{}' has no node groups: give --nodes",
                    s.default_partition
                ));
            }
            out
        }
    };
    let out = match rt.block_on(crate::systems::slurm::out_of_service(&all)) {
        Ok(o) => o,
        Err(e) => {
            warn!("Cannot tell which nodes are in service ({e}): testing every node");
            Vec::new()
        }
    };
    let usable = all
        .into_iter()
        .filter(|n| !out.iter().any(|(o, _)| o == n))
        .collect();
    Ok((usable, out))
}

/// (where it comes from, node → leaf) — where the nodes sit in the fabric, as far as the scheduler says: Slurm's topology plugin, a Kubernetes node
/// label. Nothing otherwise, with a warning when the scheduler cannot be asked or no node carries an asked-for label.
pub fn topology(
    sys: &SystemConfig,
    label: Option<&str>,
    rt: &tokio::runtime::Runtime,
) -> Option<(String, BTreeMap<String, String>)> {
    let (source, leaf) = match &sys.kind {
        SystemKind::Slurm(_) => match rt.block_on(crate::systems::slurm::leaf_switches()) {
            Ok(l) => ("Slurm topology (scontrol show topology)".to_string(), l),
            Err(e) => {
                warn!("Cannot read the switch topology: {e}");
                return None;
            }
        },
        SystemKind::Kubernetes(k) => {
            match rt.block_on(crate::systems::kubernetes::nodes::topology(k, label)) {
                Ok((key, l)) => (format!("node label {key}"), l),
                Err(e) => {
                    warn!("Cannot read the nodes' topology labels: {e}");
                    return None;
                }
            }
        }
        _ => return None,
    };
    if leaf.is_empty() && label.is_some() {
        warn!("No checked node carries the topology label: slow links are reported without their switches");
    }
    Some((source, leaf))
}

/// Takes the nodes out of service as asked (`bad`: node and why), each change recorded with what undoes it:
/// Slurm drains, Kubernetes cordons and taints or labels; other schedulers offer no way (refused up front).
pub fn take_out(
    w: Wanted,
    sys: &SystemConfig,
    bad: &[(String, String)],
    rt: &tokio::runtime::Runtime,
) -> Vec<Action> {
    match &sys.kind {
        SystemKind::Slurm(_) => slurm_drain(bad),
        SystemKind::Kubernetes(k) => {
            use crate::systems::kubernetes::nodes::{mark, Mark};
            let mut out = Vec::new();
            for (node, why) in bad {
                let value = label_value(why);
                for (wanted, how, verb) in [
                    (w.cordon, Mark::Cordon, "cordon"),
                    (w.label, Mark::Label, "label"),
                ] {
                    if !wanted {
                        continue;
                    }
                    let r = rt.block_on(mark(k, node, how, TAINT_KEY, &value));
                    let name = r.as_deref().unwrap_or(node).to_string();
                    let (command, undo) = match how {
                        Mark::Cordon => (
                            format!(
                                "kubectl cordon {name} && kubectl taint nodes {name} {}={value}:NoSchedule",
                                TAINT_KEY
                            ),
                            format!("kubectl uncordon {name} && kubectl taint nodes {name} {}-", TAINT_KEY),
                        ),
                        Mark::Label => (
                            format!("kubectl label node {name} {}={value}", TAINT_KEY),
                            format!("kubectl label node {name} {}-", TAINT_KEY),
                        ),
                    };
                    out.push(Action {
                        node: node.clone(),
                        action: verb,
                        command,
                        undo,
                        ok: r.is_ok(),
                        error: r.err().unwrap_or_default(),
                    });
                }
            }
            out
        }
        _ => Vec::new(),
    }
}

/// Drains each node on Slurm with the reason `cloudai: <why>`.
fn slurm_drain(nodes: &[(String, String)]) -> Vec<Action> {
    nodes
        .iter()
        .map(|(node, why)| {
            let reason = format!("cloudai: {why}");
            let out = std::process::Command::new("scontrol")
                .args([
                    "update",
                    &format!("nodename={node}"),
                    "state=drain",
                    &format!("reason={reason}"),
                ])
                .output();
            let (ok, error) = match out {
                Ok(o) if o.status.success() => (true, String::new()),
                Ok(o) => (false, String::from_utf8_lossy(&o.stderr).trim().to_string()),
                Err(e) => (false, format!("cannot run scontrol: {e}")),
            };
            Action {
                node: node.clone(),
                action: "drain",
                command: format!(
                    "scontrol update nodename={node} state=drain reason={}",
                    crate::util::shell::quote(&reason)
                ),
                undo: format!("scontrol update nodename={node} state=resume"),
                ok,
                error,
            }
        })
        .collect()
}

/// Whether the asked action is a quarantine on this system, kept in the ledger: Slurm's `--drain`, Kubernetes'
/// `--cordon`.
pub fn quarantines(w: Wanted, sys: &SystemConfig) -> bool {
    match sys.kind {
        SystemKind::Slurm(_) => w.drain,
        SystemKind::Kubernetes(_) => w.cordon,
        _ => false,
    }
}

/// The scheduler side of quarantine: Slurm's drains, Kubernetes' cordons, taints and annotations.
pub fn quarantine_scheduler(
    sys: &SystemConfig,
) -> Result<Box<dyn crate::quarantine::Scheduler + Send>, String> {
    match &sys.kind {
        SystemKind::Slurm(_) => Ok(Box::new(crate::systems::slurm::quarantine::Slurm)),
        SystemKind::Kubernetes(k) => Ok(Box::new(
            crate::systems::kubernetes::quarantine::Kube::new(k.clone())?,
        )),
        other => Err(format!(
            "quarantine state is kept for Slurm and Kubernetes systems; {} offers no way to take a node out of \
             service",
            other.scheduler()
        )),
    }
}

/// What keeps users off the nodes a requalification tests: Slurm's maintenance reservation (deleted when dropped),
/// or on Kubernetes cloudai's own NoSchedule taint, which only the test's pods tolerate.
pub struct Window {
    reservation: Option<crate::systems::slurm::quarantine::Reservation>,
    tolerate: bool,
}

impl Window {
    /// Refuses a system that keeps no quarantine; on Slurm, removes what killed cloudai's of this host left.
    pub fn check(sys: &SystemConfig) -> Result<(), String> {
        match sys.kind {
            SystemKind::Slurm(_) => {
                crate::systems::slurm::quarantine::clean_stale();
                Ok(())
            }
            SystemKind::Kubernetes(_) => Ok(()),
            _ => Err(format!(
                "--requalify runs on Slurm and Kubernetes (where cloudai keeps quarantine state); {} offers no way \
                 to take a node out of service",
                sys.kind.scheduler()
            )),
        }
    }

    /// Opens the window on the nodes (the ones to test and their partners).
    pub fn open(sys: &SystemConfig, nodes: &[String]) -> Result<Window, String> {
        Ok(match sys.kind {
            SystemKind::Slurm(_) => {
                let r = crate::systems::slurm::quarantine::Reservation::create(nodes)
                    .map_err(|e| format!("Cannot create the maintenance reservation: {e}"))?;
                info!("Maintenance reservation {} on {}", r.name, nodes.join(","));
                Window {
                    reservation: Some(r),
                    tolerate: false,
                }
            }
            _ => Window {
                reservation: None,
                tolerate: true,
            },
        })
    }

    /// What opening the window on these nodes runs, as an operator would type it (dry runs).
    pub fn describe(sys: &SystemConfig, nodes: &[String]) -> String {
        match sys.kind {
            SystemKind::Slurm(_) => crate::systems::slurm::quarantine::Reservation::command(nodes),
            _ => format!(
                "(no reservation: the nodes keep the {TAINT_KEY} NoSchedule taint; the test's pods tolerate it)"
            ),
        }
    }

    /// A round's system inside the window: its jobs in the reservation, its pods tolerating the taint.
    pub fn fit(&self, s: &mut SystemConfig) {
        match &mut s.kind {
            SystemKind::Slurm(slurm) => {
                if let Some(r) = &self.reservation {
                    slurm
                        .extra_sbatch_args
                        .push(format!("--reservation={}", r.name));
                }
            }
            SystemKind::Kubernetes(k) if self.tolerate => {
                k.pods.tolerations.push(crate::config::pods::Toleration {
                    key: Some(TAINT_KEY.into()),
                    operator: "Exists".into(),
                    value: None,
                    effect: Some("NoSchedule".into()),
                    seconds: None,
                });
            }
            _ => {}
        }
    }
}
