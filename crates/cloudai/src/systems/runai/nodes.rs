//! The cluster's GPU nodes as the Run:ai API lists them (`GET /api/v1/clusters/{uuid}/nodes`), for find-bad-nodes
//! without `--nodes`: every node that is Ready, not tainted NoSchedule/NoExecute, and has the GPUs a worker asks.

use serde_json::Value;

use super::{client, RunAi};
use crate::config::system::SystemConfig;

/// Usable nodes (sorted), and for each node left out the reason.
pub fn usable(nodes: &[Value], gpus: u64) -> (Vec<String>, Vec<(String, String)>) {
    let mut ok = Vec::new();
    let mut skipped = Vec::new();
    for n in nodes {
        let name = n["name"].as_str().unwrap_or("").to_string();
        if name.is_empty() {
            continue;
        }
        let have = n["gpuInfo"]["gpuCount"].as_u64().unwrap_or(0);
        let status = n["status"].as_str().unwrap_or("Unknown");
        let taint = n["taints"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|t| {
                (t["effect"] == "NoSchedule" || t["effect"] == "NoExecute")
                    && t["key"] != "nvidia.com/gpu"
            })
            .map(|t| {
                format!(
                    "{}={}:{}",
                    t["key"].as_str().unwrap_or(""),
                    t["value"].as_str().unwrap_or(""),
                    t["effect"].as_str().unwrap_or("")
                )
            });
        let why = if status != "Ready" {
            Some(format!("status {status}"))
        } else if let Some(t) = taint {
            Some(format!("tainted {t}"))
        } else if have == 0 {
            Some("no GPUs".to_string())
        } else if have < gpus {
            Some(format!("{have} GPUs, a worker asks {gpus}"))
        } else {
            None
        };
        match why {
            Some(w) => skipped.push((name, w)),
            None => ok.push(name),
        }
    }
    ok.sort();
    (ok, skipped)
}

/// The usable GPU nodes of the system's cluster, and the ones left out with why.
pub(crate) async fn gpu_nodes(
    cfg: &SystemConfig,
) -> Result<(Vec<String>, Vec<(String, String)>), String> {
    let nodes = list(cfg).await?;
    Ok(usable(&nodes, RunAi::conf(cfg).gpus_per_node))
}

/// The cluster's nodes as the API lists them.
pub async fn list(cfg: &SystemConfig) -> Result<Vec<Value>, String> {
    let r = RunAi::conf(cfg);
    let secret = r.secret().ok_or("no Run:ai secret: set RUNAI_APP_SECRET")?;
    let tls = client::tls_config(r.ca_bundle.as_deref())?;
    let c = client::Client::new(&r.base_url, &r.app_id, secret, tls)?;
    let path = format!("/api/v1/clusters/{}/nodes", r.cluster_id);
    c.list_all(&path, "nodes", &[], false)
        .await
        .map_err(|e| format!("cannot list the nodes of cluster {}: {e}", r.cluster_id))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn ready_untainted_gpu_nodes() {
        let nodes = [
            json!({"name": "a", "status": "Ready", "gpuInfo": {"gpuType": "H100", "gpuCount": 8}}),
            json!({"name": "b", "status": "NotReady", "gpuInfo": {"gpuType": "H100", "gpuCount": 8}}),
            json!({"name": "c", "status": "Ready", "gpuInfo": {"gpuType": "H100", "gpuCount": 8},
                   "taints": [{"key": "maint", "value": "x", "effect": "NoSchedule"}]}),
            json!({"name": "d", "status": "Ready", "gpuInfo": null}),
            json!({"name": "e", "status": "Ready", "gpuInfo": {"gpuType": "H100", "gpuCount": 8},
                   "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}),
        ];
        let (ok, skipped) = super::usable(&nodes, 8);
        assert_eq!(ok, ["a", "e"]);
        assert_eq!(
            skipped,
            [
                ("b".to_string(), "status NotReady".to_string()),
                ("c".to_string(), "tainted maint=x:NoSchedule".to_string()),
                ("d".to_string(), "no GPUs".to_string())
            ]
        );
    }
}
