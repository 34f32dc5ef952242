//! Slurm's answers to find-bad-nodes and the quarantine: the default partition's nodes less those down, drained or
//! failing; the switch topology; drains with the reason `cloudai: <why>`; requalification in a maintenance
//! reservation.

use tokio::runtime::Runtime;

use crate::config::system::{SlurmConfig, SystemConfig, SystemKind};
use crate::systems::fleet::{in_service, Action, OutOfService, Topology, Wanted, Window};
use crate::{info, warn};

pub(crate) struct Fleet<'a>(pub &'a SlurmConfig);

impl crate::systems::fleet::Fleet for Fleet<'_> {
    fn name(&self) -> &'static str {
        "slurm"
    }

    fn refused(&self, w: Wanted) -> Option<String> {
        (w.cordon || w.label)
            .then(|| "--cordon and --label are for Kubernetes; on Slurm, --drain".into())
    }

    /// The nodes named, else every node of the default partition's groups; `sinfo` says which are out of service.
    fn nodes(
        &self,
        named: Option<Vec<String>>,
        rt: &Runtime,
    ) -> Result<(Vec<String>, OutOfService), String> {
        let s = self.0;
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
                            out.extend(crate::util::nodelist::parse(n)?);
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
        let out = match rt.block_on(super::out_of_service(&all)) {
            Ok(o) => o,
            Err(e) => {
                warn!("Cannot tell which nodes are in service ({e}): testing every node");
                Vec::new()
            }
        };
        Ok((in_service(all, &out), out))
    }

    fn topology(&self, _label: Option<&str>, rt: &Runtime) -> Option<Result<Topology, String>> {
        Some(
            rt.block_on(super::leaf_switches())
                .map(|l| ("Slurm topology (scontrol show topology)".to_string(), l))
                .map_err(|e| format!("Cannot read the switch topology: {e}")),
        )
    }

    fn take_out(&self, _w: Wanted, bad: &[(String, String)], _rt: &Runtime) -> Vec<Action> {
        drain(bad)
    }

    fn quarantines(&self, w: Wanted) -> bool {
        w.drain
    }

    fn quarantine(&self) -> Result<Box<dyn crate::quarantine::Scheduler + Send>, String> {
        Ok(Box::new(super::quarantine::Slurm))
    }

    fn window_check(&self) -> Result<(), String> {
        super::quarantine::clean_stale();
        Ok(())
    }

    fn window_open(&self, nodes: &[String]) -> Result<Window, String> {
        let r = super::quarantine::Reservation::create(nodes)
            .map_err(|e| format!("Cannot create the maintenance reservation: {e}"))?;
        info!("Maintenance reservation {} on {}", r.name, nodes.join(","));
        let arg = format!("--reservation={}", r.name);
        Ok(Window::new(
            move |s: &mut SystemConfig| {
                if let SystemKind::Slurm(slurm) = &mut s.kind {
                    slurm.extra_sbatch_args.push(arg.clone());
                }
            },
            Some(Box::new(r)),
        ))
    }

    fn window_describe(&self, nodes: &[String]) -> String {
        super::quarantine::Reservation::command(nodes)
    }
}

/// Drains each node with the reason `cloudai: <why>`.
fn drain(nodes: &[(String, String)]) -> Vec<Action> {
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
