//! What find-bad-nodes asks of a scheduler: whether it can pin jobs to nodes, its GPU nodes and which it holds out
//! of service, where they sit in the fabric, taking bad nodes out of service, and the window a requalification
//! runs in. Each scheduler answers in its own module ([`Fleet`]); [`super::fleet_of`] is the one table. The search itself
//! (`bad_nodes/`) knows no scheduler.

use std::collections::BTreeMap;

use serde::Serialize;
use tokio::runtime::Runtime;

use crate::config::system::SystemConfig;
use crate::info;

/// A scheduler's answers to find-bad-nodes and the quarantine.
pub(crate) trait Fleet {
    /// The scheduler's name, for messages.
    fn name(&self) -> &'static str;
    /// Why find-bad-nodes cannot run here: it pins each job to its pair of nodes.
    fn unpinnable(&self) -> Option<String> {
        None
    }
    /// Why `--drain`/`--cordon`/`--label` as asked cannot be done here (None: they can, or none is asked).
    fn refused(&self, w: Wanted) -> Option<String> {
        w.any().then(|| {
            format!(
                "{} offers no way to take a node out of service through its API: act by hand on the nodes \
                 bad-nodes.json names (--drain is for Slurm, --cordon/--label for Kubernetes)",
                self.name()
            )
        })
    }
    /// The nodes to test — the ones named, else every node the scheduler has for tests — less those it holds out
    /// of service, which come back apart with its reason (they get no job).
    fn nodes(
        &self,
        named: Option<Vec<String>>,
        rt: &Runtime,
    ) -> Result<(Vec<String>, OutOfService), String>;
    /// Where the nodes sit in the fabric: (where it comes from, node → leaf); None when the scheduler does not say.
    fn topology(&self, _label: Option<&str>, _rt: &Runtime) -> Option<Result<Topology, String>> {
        None
    }
    /// Takes the nodes out of service as asked (`bad`: node and why), each change with what undoes it.
    fn take_out(&self, _w: Wanted, _bad: &[(String, String)], _rt: &Runtime) -> Vec<Action> {
        Vec::new()
    }
    /// Whether the asked action is a quarantine, kept in the ledger.
    fn quarantines(&self, _w: Wanted) -> bool {
        false
    }
    /// The scheduler's side of the quarantine.
    fn quarantine(&self) -> Result<Box<dyn crate::quarantine::Scheduler + Send>, String> {
        Err(format!(
            "quarantine state is kept for Slurm and Kubernetes systems; {} offers no way to take a node out of \
             service",
            self.name()
        ))
    }
    /// Whether a requalification can run here; removes what a killed cloudai left of its windows.
    fn window_check(&self) -> Result<(), String> {
        Err(format!(
            "--requalify runs on Slurm and Kubernetes (where cloudai keeps quarantine state); {} offers no way \
             to take a node out of service",
            self.name()
        ))
    }
    /// Opens the window a requalification tests the nodes in (the ones to test and their partners).
    fn window_open(&self, _nodes: &[String]) -> Result<Window, String> {
        Err(self.window_check().err().unwrap_or_default())
    }
    /// What opening the window runs, as an operator would type it (dry runs).
    fn window_describe(&self, _nodes: &[String]) -> String {
        String::new()
    }

    /// The nodes to test: `spec` (`node[001-016]`, comma lists) when given, else every node the scheduler has for
    /// tests ([`Fleet::nodes`]).
    fn nodes_to_test(
        &self,
        spec: Option<&str>,
        rt: &Runtime,
    ) -> Result<(Vec<String>, OutOfService), String> {
        let named = spec.map(crate::util::nodelist::parse).transpose()?;
        self.nodes(named, rt)
    }

    /// Where the nodes sit in the fabric, as far as the scheduler says ([`Fleet::topology`]); nothing otherwise,
    /// with a warning when the scheduler cannot be asked or no node carries an asked-for label.
    fn fabric(&self, label: Option<&str>, rt: &Runtime) -> Option<Topology> {
        let (source, leaf) = match self.topology(label, rt)? {
            Ok(t) => t,
            Err(e) => {
                crate::warn!("{e}");
                return None;
            }
        };
        if leaf.is_empty() && label.is_some() {
            crate::warn!(
                "No checked node carries the topology label: slow links are reported without their switches"
            );
        }
        Some((source, leaf))
    }
}

/// Where the nodes sit: (where it comes from, node → leaf switch).
pub(crate) type Topology = (String, BTreeMap<String, String>);

/// The nodes of a scheduler that lists its usable GPU nodes (Kubernetes, Run:ai): all of them, or the ones named;
/// a listing that failed tests every node named (and needs names).
pub(crate) fn from_listing(
    listed: Result<(Vec<String>, OutOfService), String>,
    named: Option<Vec<String>>,
) -> Result<(Vec<String>, OutOfService), String> {
    let (ok, skipped) = match (listed, &named) {
        (Ok(l), _) => l,
        (Err(e), None) => return Err(format!("{e}; give --nodes")),
        (Err(e), Some(n)) => {
            crate::warn!("Cannot tell which nodes are in service ({e}): testing every node named");
            return Ok((n.clone(), Vec::new()));
        }
    };
    let Some(named) = named else {
        info!("{} usable GPU node(s) in the cluster", ok.len());
        return Ok((ok, skipped));
    };
    let out: OutOfService = skipped
        .into_iter()
        .filter(|(n, _)| named.contains(n))
        .collect();
    Ok((in_service(named, &out), out))
}

/// The nodes less those out of service.
pub(crate) fn in_service(nodes: Vec<String>, out: &OutOfService) -> Vec<String> {
    nodes
        .into_iter()
        .filter(|n| !out.iter().any(|(o, _)| o == n))
        .collect()
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

/// Nodes the scheduler holds out of service, with its reason.
pub(crate) type OutOfService = Vec<(String, String)>;

/// What keeps users off the nodes a requalification tests (Slurm's maintenance reservation, deleted when the
/// window is dropped; on Kubernetes cloudai's own NoSchedule taint, which only the test's pods tolerate).
pub struct Window {
    /// Fits a round's system into the window.
    fit: Box<dyn Fn(&mut SystemConfig) + Send + Sync>,
    /// What the window holds while it is open, released when dropped.
    _held: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl Window {
    pub fn new(
        fit: impl Fn(&mut SystemConfig) + Send + Sync + 'static,
        held: Option<Box<dyn std::any::Any + Send + Sync>>,
    ) -> Self {
        Self {
            fit: Box::new(fit),
            _held: held,
        }
    }

    /// A round's system inside the window.
    pub fn fit(&self, s: &mut SystemConfig) {
        (self.fit)(s)
    }
}
