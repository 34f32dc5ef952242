//! Run:ai's answers to find-bad-nodes: its Ready GPU nodes (jobs are pinned by node affinity). It offers no way
//! to take a node out of service through its API, so it keeps no quarantine.

use tokio::runtime::Runtime;

use crate::config::system::SystemConfig;
use crate::systems::fleet::{from_listing, OutOfService};

pub(crate) struct Fleet<'a>(pub &'a SystemConfig);

impl crate::systems::fleet::Fleet for Fleet<'_> {
    fn name(&self) -> &'static str {
        "runai"
    }

    fn nodes(
        &self,
        named: Option<Vec<String>>,
        rt: &Runtime,
    ) -> Result<(Vec<String>, OutOfService), String> {
        from_listing(rt.block_on(super::nodes::gpu_nodes(self.0)), named)
    }
}
