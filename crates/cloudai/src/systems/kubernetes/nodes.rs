//! The cluster's GPU nodes, for find-bad-nodes without `--nodes`: every node that is Ready, not cordoned, not
//! tainted NoSchedule/NoExecute, and offers the GPUs a worker asks. Named by their `kubernetes.io/hostname` label,
//! which is what a test's `nodes = [...]` pins to.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use serde_json::Value;

use super::client;
use super::manifest::GPU_RESOURCE;
use crate::config::system::KubernetesConfig;

/// Usable nodes (sorted), and for each node left out the reason.
pub fn usable(nodes: &[Value], gpus: u64) -> (Vec<String>, Vec<(String, String)>) {
    let mut ok = Vec::new();
    let mut skipped = Vec::new();
    for n in nodes {
        let name = n["metadata"]["name"].as_str().unwrap_or("").to_string();
        let host = n["metadata"]["labels"]["kubernetes.io/hostname"]
            .as_str()
            .unwrap_or(&name)
            .to_string();
        let have: u64 = n["status"]["allocatable"][GPU_RESOURCE]
            .as_str()
            .and_then(|g| g.parse().ok())
            .unwrap_or(0);
        let ready = n["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        let taint = n["spec"]["taints"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|t| t["effect"] == "NoSchedule" || t["effect"] == "NoExecute")
            .map(|t| t["key"].as_str().unwrap_or("").to_string());
        let why = if have == 0 {
            Some("no nvidia.com/gpu".to_string())
        } else if have < gpus {
            Some(format!("{have} GPUs allocatable, a worker asks {gpus}"))
        } else if n["spec"]["unschedulable"] == true {
            Some("cordoned".into())
        } else if !ready {
            Some("not Ready".into())
        } else {
            taint.map(|k| format!("tainted {k}"))
        };
        match why {
            // nodes without GPUs are not candidates at all: only say why for GPU nodes
            Some(w) if have > 0 => skipped.push((host, w)),
            Some(_) => {}
            None => ok.push(host),
        }
    }
    ok.sort();
    (ok, skipped)
}

/// Asks the API server for the nodes (needs `list` on nodes, a cluster-wide right).
pub(crate) async fn gpu_nodes(
    k: &KubernetesConfig,
) -> Result<(Vec<String>, Vec<(String, String)>), String> {
    Ok(usable(&list_nodes(k).await?, k.gpus_per_node))
}

/// Node labels that name where a node sits in the network, nearest the node first, tried in this order when no
/// label is configured: NVIDIA Topograph's levels, EKS's network layers, GKE's sub-block, and the zone.
pub(crate) const LEAF_LABELS: [&str; 5] = [
    "topology.kubernetes.io/network-level-1",
    "network.topology.nvidia.com/leaf",
    "topology.k8s.aws/network-node-layer-3",
    "cloud.google.com/gce-topology-subblock",
    "topology.kubernetes.io/zone",
];

/// Each node's (by `kubernetes.io/hostname`) value of the topology label `key`, or of the first of
/// [`LEAF_LABELS`] that any node carries; with the key used. Empty when no node carries one.
pub fn leaves(nodes: &[Value], key: Option<&str>) -> (String, BTreeMap<String, String>) {
    let label = |n: &Value, k: &str| n["metadata"]["labels"][k].as_str().map(String::from);
    let key = match key {
        Some(k) => k.to_string(),
        None => match LEAF_LABELS
            .iter()
            .find(|k| nodes.iter().any(|n| label(n, k).is_some()))
        {
            Some(k) => k.to_string(),
            None => return (String::new(), BTreeMap::new()),
        },
    };
    let map = nodes
        .iter()
        .filter_map(|n| {
            let name = n["metadata"]["name"].as_str().unwrap_or("");
            let host = label(n, "kubernetes.io/hostname").unwrap_or_else(|| name.to_string());
            label(n, &key).map(|v| (host, v))
        })
        .collect();
    (key, map)
}

/// [`leaves`] of the cluster's nodes.
pub async fn topology(
    k: &KubernetesConfig,
    key: Option<&str>,
) -> Result<(String, BTreeMap<String, String>), String> {
    Ok(leaves(&list_nodes(k).await?, key))
}

/// The cluster's nodes and the system's namespace, for [`super::survey`]: None where the API refuses us the read
/// (a missing cluster-wide right); an error when the API server cannot be reached at all.
pub(crate) async fn survey_reads(
    k: &KubernetesConfig,
) -> Result<(Option<Vec<Value>>, Option<Value>), String> {
    use k8s_openapi::api::core::v1::Namespace;
    let (c, server) = client::connect(&k.kube_config_path).await?;
    let nodes: kube::Api<Node> = kube::Api::all(c.clone());
    let nodes = match nodes.list(&Default::default()).await {
        Ok(l) => Some(
            l.items
                .iter()
                .filter_map(|n| serde_json::to_value(n).ok())
                .collect(),
        ),
        Err(e) if matches!(client::status_code(&e), Some(401 | 403)) => None,
        Err(e) => {
            return Err(format!(
                "cannot list the nodes at {server}: {}",
                client::describe(&e)
            ))
        }
    };
    let nss: kube::Api<Namespace> = kube::Api::all(c);
    let ns = match nss.get(&k.default_namespace).await {
        Ok(n) => serde_json::to_value(n).ok(),
        Err(e) if matches!(client::status_code(&e), Some(401 | 403)) => None,
        Err(e) if client::status_code(&e) == Some(404) => {
            return Err(format!(
                "namespace {} does not exist at {server}",
                k.default_namespace
            ))
        }
        Err(e) => {
            return Err(format!(
                "cannot read namespace {} at {server}: {}",
                k.default_namespace,
                client::describe(&e)
            ))
        }
    };
    Ok((nodes, ns))
}

async fn list_nodes(k: &KubernetesConfig) -> Result<Vec<Value>, String> {
    let (c, server) = client::connect(&k.kube_config_path).await?;
    let api: kube::Api<Node> = kube::Api::all(c);
    let list = api.list(&Default::default()).await.map_err(|e| {
        format!(
            "cannot list the nodes at {server}: {}",
            client::describe(&e)
        )
    })?;
    Ok(list
        .items
        .iter()
        .filter_map(|n| serde_json::to_value(n).ok())
        .collect())
}

/// What find-bad-nodes does to a node it judged bad, on request.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mark {
    /// `spec.unschedulable` and a NoSchedule taint `<key>=<value>`.
    Cordon,
    /// A label `<key>=<value>`.
    Label,
}

/// Marks the node whose `kubernetes.io/hostname` is `host` (its name when no node carries that label).
pub async fn mark(
    k: &KubernetesConfig,
    host: &str,
    how: Mark,
    key: &str,
    value: &str,
) -> Result<String, String> {
    use kube::api::{ListParams, Patch, PatchParams};
    let (c, server) = client::connect(&k.kube_config_path).await?;
    let api: kube::Api<Node> = kube::Api::all(c);
    let by_label = api
        .list(&ListParams::default().labels(&format!("kubernetes.io/hostname={host}")))
        .await
        .map_err(|e| {
            format!(
                "cannot list the nodes at {server}: {}",
                client::describe(&e)
            )
        })?;
    let name = by_label
        .items
        .first()
        .and_then(|n| n.metadata.name.clone())
        .unwrap_or_else(|| host.to_string());
    let patch = match how {
        Mark::Cordon => {
            let node = api
                .get(&name)
                .await
                .map_err(|e| format!("cannot read node {name}: {}", client::describe(&e)))?;
            let mut taints: Vec<Value> = node
                .spec
                .and_then(|s| s.taints)
                .unwrap_or_default()
                .iter()
                .filter_map(|t| serde_json::to_value(t).ok())
                .filter(|t| t["key"] != key)
                .collect();
            taints.push(serde_json::json!({"key": key, "value": value, "effect": "NoSchedule"}));
            serde_json::json!({"spec": {"unschedulable": true, "taints": taints}})
        }
        Mark::Label => serde_json::json!({"metadata": {"labels": {key: value}}}),
    };
    api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map_err(|e| format!("cannot update node {name}: {}", client::describe(&e)))?;
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaves_take_the_configured_label_or_the_nearest_known_one() {
        let node = |name: &str, labels: Value| serde_json::json!({"metadata": {"name": name, "labels": labels}});
        let nodes = vec![
            node(
                "a",
                serde_json::json!({"kubernetes.io/hostname": "host-a",
                "topology.kubernetes.io/zone": "z1", "topology.k8s.aws/network-node-layer-3": "nn-1"}),
            ),
            node(
                "b",
                serde_json::json!({"topology.kubernetes.io/zone": "z1", "rack": "r2"}),
            ),
        ];
        let (key, m) = leaves(&nodes, None);
        assert_eq!(key, "topology.k8s.aws/network-node-layer-3");
        assert_eq!(m.len(), 1);
        assert_eq!(m["host-a"], "nn-1");
        let (key, m) = leaves(&nodes, Some("rack"));
        assert_eq!(key, "rack");
        assert_eq!(m["b"], "r2");
        assert!(leaves(&[node("c", serde_json::json!({}))], None)
            .1
            .is_empty());
    }
    use serde_json::json;

    fn node(name: &str, gpus: &str, extra: Value) -> Value {
        let mut n = json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": format!("{name}-host")}},
            "spec": {},
            "status": {"allocatable": {"nvidia.com/gpu": gpus},
                       "conditions": [{"type": "Ready", "status": "True"}]},
        });
        if let Some(o) = extra.as_object() {
            for (k, v) in o {
                n["spec"][k] = v.clone();
            }
        }
        n
    }

    #[test]
    fn only_ready_schedulable_gpu_nodes_with_enough_gpus() {
        let mut not_ready = node("e", "8", json!({}));
        not_ready["status"]["conditions"][0]["status"] = "Unknown".into();
        let nodes = [
            node("b", "8", json!({})),
            node("a", "8", json!({})),
            node("cpu", "0", json!({})),
            node("c", "8", json!({"unschedulable": true})),
            node("d", "4", json!({})),
            not_ready,
            node(
                "f",
                "8",
                json!({"taints": [{"key": "gpu-broken", "effect": "NoSchedule"}]}),
            ),
            node(
                "g",
                "8",
                json!({"taints": [{"key": "soft", "effect": "PreferNoSchedule"}]}),
            ),
        ];
        let (ok, skipped) = usable(&nodes, 8);
        assert_eq!(ok, ["a-host", "b-host", "g-host"]);
        let why: Vec<(&str, &str)> = skipped
            .iter()
            .map(|(n, w)| (n.as_str(), w.as_str()))
            .collect();
        assert_eq!(
            why,
            [
                ("c-host", "cordoned"),
                ("d-host", "4 GPUs allocatable, a worker asks 8"),
                ("e-host", "not Ready"),
                ("f-host", "tainted gpu-broken"),
            ]
        );
    }
}
