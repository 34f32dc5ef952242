//! The cluster's GPU nodes, for find-bad-nodes without `--nodes`: every node that is Ready, not cordoned, not
//! tainted NoSchedule/NoExecute, and offers the GPUs a worker asks. Named by their `kubernetes.io/hostname` label,
//! which is what a test's `nodes = [...]` pins to.

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
pub async fn gpu_nodes(
    k: &KubernetesConfig,
) -> Result<(Vec<String>, Vec<(String, String)>), String> {
    let (c, server) = client::connect(&k.kube_config_path).await?;
    let api: kube::Api<Node> = kube::Api::all(c);
    let list = api.list(&Default::default()).await.map_err(|e| {
        format!(
            "cannot list the nodes at {server}: {}",
            client::describe(&e)
        )
    })?;
    let values: Vec<Value> = list
        .items
        .iter()
        .filter_map(|n| serde_json::to_value(n).ok())
        .collect();
    Ok(usable(&values, k.gpus_per_node))
}

#[cfg(test)]
mod tests {
    use super::*;
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
