//! Kubernetes' answers to find-bad-nodes and the quarantine: its usable GPU nodes (not NotReady, cordoned or
//! tainted), a node label as topology, cordon + taint or a label, and requalification under cloudai's own taint,
//! which only the test's pods tolerate.

use tokio::runtime::Runtime;

use super::nodes::{mark, Mark};
use crate::config::system::{KubernetesConfig, SystemConfig, SystemKind};
use crate::systems::fleet::{
    from_listing, label_value, Action, OutOfService, Topology, Wanted, Window, TAINT_KEY,
};

pub(crate) struct Fleet<'a>(pub &'a KubernetesConfig);

impl crate::systems::fleet::Fleet for Fleet<'_> {
    fn name(&self) -> &'static str {
        "kubernetes"
    }

    fn refused(&self, w: Wanted) -> Option<String> {
        w.drain
            .then(|| "--drain is for Slurm; on Kubernetes, --cordon or --label".into())
    }

    fn nodes(
        &self,
        named: Option<Vec<String>>,
        rt: &Runtime,
    ) -> Result<(Vec<String>, OutOfService), String> {
        from_listing(rt.block_on(super::nodes::gpu_nodes(self.0)), named)
    }

    fn topology(&self, label: Option<&str>, rt: &Runtime) -> Option<Result<Topology, String>> {
        Some(
            rt.block_on(super::nodes::topology(self.0, label))
                .map(|(key, l)| (format!("node label {key}"), l))
                .map_err(|e| format!("Cannot read the nodes' topology labels: {e}")),
        )
    }

    /// Cordons and taints (`--cordon`) and/or labels (`--label`) each node.
    fn take_out(&self, w: Wanted, bad: &[(String, String)], rt: &Runtime) -> Vec<Action> {
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
                let r = rt.block_on(mark(self.0, node, how, TAINT_KEY, &value));
                let name = r.as_deref().unwrap_or(node).to_string();
                let (command, undo) = match how {
                    Mark::Cordon => (
                        format!(
                            "kubectl cordon {name} && kubectl taint nodes {name} {TAINT_KEY}={value}:NoSchedule"
                        ),
                        format!("kubectl uncordon {name} && kubectl taint nodes {name} {TAINT_KEY}-"),
                    ),
                    Mark::Label => (
                        format!("kubectl label node {name} {TAINT_KEY}={value}"),
                        format!("kubectl label node {name} {TAINT_KEY}-"),
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

    fn quarantines(&self, w: Wanted) -> bool {
        w.cordon
    }

    fn quarantine(&self) -> Result<Box<dyn crate::quarantine::Scheduler + Send>, String> {
        Ok(Box::new(super::quarantine::Kube::new(self.0.clone())?))
    }

    fn window_check(&self) -> Result<(), String> {
        Ok(())
    }

    /// The held nodes keep cloudai's NoSchedule taint; the round's pods tolerate it.
    fn window_open(&self, _nodes: &[String]) -> Result<Window, String> {
        Ok(Window::new(
            |s: &mut SystemConfig| {
                if let SystemKind::Kubernetes(k) = &mut s.kind {
                    k.pods.tolerations.push(crate::config::pods::Toleration {
                        key: Some(TAINT_KEY.into()),
                        operator: "Exists".into(),
                        value: None,
                        effect: Some("NoSchedule".into()),
                        seconds: None,
                    });
                }
            },
            None,
        ))
    }

    fn window_describe(&self, _nodes: &[String]) -> String {
        format!(
            "(no reservation: the nodes keep the {TAINT_KEY} NoSchedule taint; the test's pods tolerate it)"
        )
    }
}
