//! What each scheduler says now of jobs an earlier cloudai process recorded (`cloudai status`): one query per
//! scheduler for all of a tree's unfinished jobs (Slurm: one squeue; Standalone: whether each process group lives;
//! Run:ai and Kubernetes: one list with the recorded system).

use std::collections::HashMap;

use crate::config::system::SystemConfig;

pub use super::Live;

/// The jobs `ids` of `scheduler` as it sees them now (an id it says nothing of is missing); `recorded` loads
/// the tree's system when the scheduler needs it to be asked. An error says why it could not be asked.
pub async fn observe(
    scheduler: &str,
    ids: &[&str],
    recorded: impl FnOnce() -> Result<SystemConfig, String>,
) -> Result<HashMap<String, Live>, String> {
    let ids: Vec<&str> = ids.iter().copied().filter(|i| !i.is_empty()).collect();
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    match scheduler {
        "slurm" => Ok(super::slurm::live(&ids)),
        "standalone" => Ok(ids
            .iter()
            .filter(|id| !super::standalone::recorded_alive(id))
            .map(|id| (id.to_string(), Live::Gone("ended (not collected)")))
            .collect()),
        "runai" | "kubernetes" => {
            let cfg = recorded()?;
            let phases = if scheduler == "kubernetes" {
                super::kubernetes::phases(&cfg).await?
            } else {
                super::runai::phases(&cfg).await?
            };
            Ok(ids
                .iter()
                .map(|id| {
                    let live = match phases.get(*id) {
                        Some((phase, reason)) => Live::Seen {
                            state: phase.to_lowercase(),
                            reason: reason.clone(),
                            nodes: Vec::new(),
                        },
                        None => Live::Gone("not found (a hook may run, or it was deleted)"),
                    };
                    (id.to_string(), live)
                })
                .collect())
        }
        _ => Ok(HashMap::new()),
    }
}
