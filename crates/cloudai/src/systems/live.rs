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
    // one line per scheduler, each answering in its own module
    match scheduler {
        "slurm" => Ok(super::slurm::live(&ids)),
        "standalone" => Ok(super::standalone::live(&ids)),
        "runai" => super::runai::live(&ids, &recorded()?).await,
        "kubernetes" => super::kubernetes::live(&ids, &recorded()?).await,
        _ => Ok(HashMap::new()),
    }
}
