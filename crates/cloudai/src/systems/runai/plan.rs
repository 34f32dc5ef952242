//! A step's workload from the workload's launch: a training for one node, a distributed MPI workload for MPI
//! ranks on several nodes ([`super::payload`]); and what this system cannot run.

use serde_json::Value;

use super::payload;
use crate::config::system::RunAiConfig;
use crate::scenario::TestRun;
use crate::systems::objects::Naming;
use crate::workloads::Launch;

/// A step's creation request and whether it is a distributed workload.
#[derive(Clone, Debug)]
pub struct Spec {
    pub payload: Value,
    pub distributed: bool,
}

pub type Step = crate::systems::objects::Step<Spec>;

impl Spec {
    /// Where workloads of this kind are created, read and deleted.
    pub(crate) fn kind_path(&self) -> &'static str {
        if self.distributed {
            "/api/v1/workloads/distributed"
        } else {
            "/api/v1/workloads/trainings"
        }
    }

    /// The workload kind in the log stream's path.
    pub(crate) fn log_kind(&self) -> &'static str {
        if self.distributed {
            "distributed"
        } else {
            "training"
        }
    }

    /// The command the step's output comes from, as a shell would read it.
    pub fn full_cmd(&self) -> String {
        let spec = if self.distributed {
            &self.payload["masterSpec"]
        } else {
            &self.payload["spec"]
        };
        format!(
            "{} {}",
            spec["command"].as_str().unwrap_or(""),
            spec["args"].as_str().unwrap_or("")
        )
    }
}

/// The workload of `run` named as `n` says, in the system's project.
pub fn spec(
    run: &TestRun,
    launch: &Launch,
    r: &RunAiConfig,
    env: &[(String, String)],
    n: &Naming,
) -> Spec {
    let who = payload::Names {
        name: n.name,
        identity: n.identity,
        run_tag: n.run_tag,
    };
    let (payload, distributed) = payload::workload(run, launch, &who, r, env);
    Spec {
        payload,
        distributed,
    }
}

/// What cannot run as configured, one sentence each, before anything is created (warnings are logged).
pub fn check(run: &TestRun, r: &RunAiConfig, env: &[(String, String)]) -> Vec<String> {
    // a per-node check runs as one workload per named node
    let hosts = crate::systems::objects::per_node_hosts::<super::RunAi>(run);
    let mut out = crate::systems::container::checks(
        run,
        "Run:ai",
        "one training",
        r.gpus_per_node,
        hosts
            .as_ref()
            .is_some_and(|h| h.len() as u64 == run.num_nodes),
    );
    out.extend(r.pods.nic_errors(&run.id, env));
    out
}
