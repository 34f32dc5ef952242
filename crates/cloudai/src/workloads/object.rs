//! A workload whose test is one object of its own kind on a container scheduler instead of a Job (AI Dynamo's
//! DynamoGraphDeployment on Kubernetes): the scheduler asks the workload for it with what its config says of the
//! place, writes it where CloudAI writes it, and creates nothing else for the test.

use serde_json::Value;

/// What the scheduler's config says of where the object goes.
#[derive(Clone, Debug)]
pub struct ObjectAt<'a> {
    pub namespace: &'a str,
    /// GPUs each of the object's GPU pods asks for.
    pub gpus_per_node: u64,
    /// Whether its pods use the host's network.
    pub host_network: bool,
    /// Secondary networks (`namespace/name` NetworkAttachmentDefinitions) its GPU pods attach to.
    pub networks: &'a [String],
    /// Pod-spec fields the system asks of every pod (tolerations, node selector, image pull secrets, service
    /// account), empty when it asks none.
    pub pod_spec: serde_json::Map<String, Value>,
}

/// The object: its manifest, and the file of the iteration's directory it is written to as CloudAI writes it.
#[derive(Clone, Debug)]
pub struct OwnObject {
    pub file: &'static str,
    pub text: String,
    pub manifest: Value,
    /// What a real run cannot do with it (one sentence each), checked before anything is created; a dry-run
    /// writes it all the same.
    pub problems: Vec<String>,
}
