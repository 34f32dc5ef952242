//! The container kit: what the two container schedulers (Kubernetes and Run:ai) share about a test's pods —
//! the image reference and its checks, pinning to named nodes, and what a pod cannot run of a test.

use serde_json::{json, Value};

use crate::scenario::TestRun;

/// `nvcr.io#nvidia/pytorch:tag` (enroot syntax) → `nvcr.io/nvidia/pytorch:tag`.
pub fn image(url: &str) -> String {
    url.replacen('#', "/", 1)
}

/// `nodes = [...]` of a test: the workload's pods may only run on those hosts (a required node affinity on the
/// Kubernetes hostname label: Run:ai's `nodeAffinityRequired`, a pod's `nodeAffinity`). Group specs
/// (`partition:group:N`) are Slurm's and are not pinned here.
pub(crate) fn pin(run: &TestRun) -> Option<Value> {
    let hosts = crate::util::nodelist::hosts(&run.nodes);
    (!hosts.is_empty()).then(|| {
        json!({"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": hosts}
        ]}]})
    })
}

/// A plausible container image reference (`[registry/]path[:tag][@digest]`, enroot's `#` accepted).
pub(crate) fn image_problem(url: &str) -> Option<&'static str> {
    let img = image(url);
    if img.trim().is_empty() {
        return Some("is empty");
    }
    if img.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some("contains whitespace");
    }
    if img.contains("://") {
        return Some("is a URL, not an image reference (drop the scheme)");
    }
    let (path, _) = img.split_once('@').unwrap_or((&img, ""));
    let last = path.rsplit('/').next().unwrap_or("");
    if path.starts_with('/') || path.ends_with('/') || path.contains("//") || last.is_empty() {
        return Some("has an empty path component");
    }
    if last.starts_with(':') || last.ends_with(':') {
        return Some("has an empty name or tag");
    }
    if path.chars().any(|c| c.is_ascii_uppercase()) && !path.contains('/') {
        return Some("has upper-case letters in the repository name");
    }
    None
}

/// What a container scheduler (`scheduler`, running a test that does not span nodes as `one_unit`) cannot run of
/// a test: an image reference that is missing or malformed where the workload needs one (`image_field`), a shape
/// its nodes of `gpus_per_node` GPUs cannot give, several nodes for a layout that runs in one unit.
pub fn checks(
    run: &TestRun,
    scheduler: &str,
    one_unit: &str,
    gpus_per_node: u64,
    runs_per_node: bool,
) -> Vec<String> {
    let launch = run.launch();
    let mut out = Vec::new();
    if let Some(field) = launch.image_field {
        let image = launch.image.as_deref().unwrap_or("");
        if let Some(why) = image_problem(image) {
            out.push(format!(
                "test '{}': {field} {image:?} {why}; {scheduler} needs an image reference like \
                 \"nvcr.io/nvidia/pytorch:25.01-py3\"",
                run.id
            ));
        }
    }
    out.extend(launch.shape_problem(&run.id, run.num_nodes, gpus_per_node));
    if let Some(m) = run.test.extra_container_mounts.first() {
        out.push(format!(
            "test '{}': extra_container_mounts ({m:?}) name paths of Slurm nodes, which {scheduler} pods cannot \
             mount; put the files into the image, or run the test on Slurm",
            run.id
        ));
    }
    if run.num_nodes > 1 && launch.procs == crate::workloads::Procs::PerNode && runs_per_node {
        // one pod on each node
    } else if run.num_nodes > 1 && launch.procs == crate::workloads::Procs::PerNode {
        out.push(format!(
            "test '{}': {} checks each node, and {scheduler} runs it as one workload per node pinned to it: name \
             the nodes (nodes = [\"<host>\", ...], as many as num_nodes)",
            run.id, run.test.test_template_name
        ));
    } else if run.num_nodes > 1 && !launch.across_nodes(run.num_nodes) {
        out.push(format!(
            "test '{}': asks {} nodes but runs as {one_unit} on {scheduler} (only MPI tests span nodes); set \
             num_nodes = 1",
            run.id, run.num_nodes
        ));
    }
    out
}

/// GPUs per node as a cluster's GPU nodes have them: the most common of `counts` (one per node, 0 for a node
/// without GPUs, left out), the smallest on a tie; with how many nodes have it, how many have GPUs, and the
/// largest count. None without GPU nodes.
pub(crate) fn most_common(counts: impl IntoIterator<Item = u64>) -> Option<Common> {
    let mut by: std::collections::BTreeMap<u64, usize> = std::collections::BTreeMap::new();
    for g in counts.into_iter().filter(|g| *g > 0) {
        *by.entry(g).or_default() += 1;
    }
    let (&value, &nodes) = by
        .iter()
        .max_by_key(|(g, c)| (**c, std::cmp::Reverse(**g)))?;
    Some(Common {
        value,
        nodes,
        of: by.values().sum(),
        max: by.keys().max().copied().unwrap_or(value),
    })
}

/// What [`most_common`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Common {
    pub value: u64,
    /// Nodes that have it.
    pub nodes: usize,
    /// GPU nodes in all.
    pub of: usize,
    pub max: u64,
}

#[cfg(test)]
mod tests {
    use super::image_problem;

    #[test]
    fn image_references() {
        for ok in [
            "nvcr.io#nvidia/pytorch:25.01-py3",
            "ghcr.io/x/y:1",
            "ubuntu",
            "registry:5000/a/b@sha256:abc",
        ] {
            assert_eq!(image_problem(ok), None, "{ok}");
        }
        for bad in [
            "",
            "  ",
            "https://nvcr.io/x",
            "a//b",
            "x/",
            "x:",
            "nv cr.io/x",
        ] {
            assert!(image_problem(bad).is_some(), "{bad:?}");
        }
    }
}
