//! A workload whose test is one object of its own kind on a container scheduler instead of a Job (AI Dynamo's
//! DynamoGraphDeployment on Kubernetes): the scheduler asks the workload for it with what its config says of the
//! place, writes it where CloudAI writes it, and for a real run creates it under its own name with its pods
//! labelled as its own, waits for every pod to be ready, runs the workload's benchmark in one of them, fetches the
//! results and the pods' logs, and deletes it.

use std::path::PathBuf;

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
    /// How a real run drives it.
    pub run: ObjectRun,
}

/// A workload's own kind of object, as its API serves it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnKind {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
}

/// How a real run drives the object: its API resource, the pods it makes, what runs once they are all ready.
#[derive(Clone, Debug, PartialEq)]
pub struct ObjectRun {
    /// Its kind (the manifest's `apiVersion` and `kind` are the same).
    pub kind: OwnKind,
    /// The roles of its pods, in the order their logs are written.
    pub roles: Vec<PodRole>,
    /// Run in the first pod of its role once every pod is ready; the step ends when it returns.
    pub bench: ObjectBench,
}

/// Pods the object makes for one role.
#[derive(Clone, Debug, PartialEq)]
pub struct PodRole {
    pub name: String,
    /// Where the labels of its pods are, as a JSON pointer into the manifest: the scheduler adds its own there
    /// (whose run, which role), and finds the pods by them.
    pub labels_at: String,
    /// How many pods it makes.
    pub pods: u64,
}

/// A script run in a pod of the object once every pod is ready, as `bash -c <script> <name> <args>…`.
#[derive(Clone, Debug, PartialEq)]
pub struct ObjectBench {
    pub role: String,
    /// The script's file on this machine (installed with the test), read when it runs.
    pub script: PathBuf,
    pub args: Vec<String>,
    /// Its stdout (then `STDERR:` and its stderr) goes to this file of the iteration's directory.
    pub log: &'static str,
    /// A directory in the pod whose contents are copied into the iteration's directory afterwards.
    pub fetch: String,
    /// (a file of the fetched results, a marker): the marker is created when the file came back.
    pub done: Option<(String, String)>,
}
