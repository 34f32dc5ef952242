//! Logs from the cluster's log stream (the WebSocket the runai CLI reads), and CloudAI's events.txt lines.

use futures_util::StreamExt;
use reqwest::Method;
use serde_json::Value;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

use super::client::Client;

/// `RunAIEvent(created_at=2025-04-03 10:45:05+00:00, id=…, type=Normal, …, involved_object=InvolvedObject(…))`
pub fn event_line(e: &Value) -> String {
    let s = |k: &str| e[k].as_str().unwrap_or("").to_string();
    let created = chrono::DateTime::parse_from_rfc3339(&s("createdAt"))
        .map(|t| {
            let t = t.with_timezone(&chrono::Utc);
            if t.timestamp_subsec_micros() == 0 {
                t.format("%Y-%m-%d %H:%M:%S+00:00").to_string()
            } else {
                t.format("%Y-%m-%d %H:%M:%S%.6f+00:00").to_string()
            }
        })
        .unwrap_or_else(|_| s("createdAt"));
    let o = &e["involvedObject"];
    let os = |k: &str| o[k].as_str().unwrap_or("").to_string();
    format!(
        "RunAIEvent(created_at={created}, id={}, type={}, cluster_id={}, message={}, reason={}, source={}, involved_object=InvolvedObject(uid={}, kind={}, name={}, namespace={}))",
        s("id"),
        s("type"),
        s("clusterId"),
        s("message"),
        s("reason"),
        s("source"),
        os("uid"),
        os("kind"),
        os("name"),
        os("namespace")
    )
}

/// Reads a finished workload's log: the cluster URL from /clusters, the project name from /org-unit/projects,
/// then the cluster's WebSocket log stream until it closes.
pub async fn fetch(
    client: &Client,
    project_id: &str,
    cluster_id: &str,
    kind: &str,
    name: &str,
) -> Result<String, String> {
    let clusters = client
        .call(Method::GET, "/api/v1/clusters", &[], None)
        .await
        .map_err(|e| format!("clusters: {e}"))?;
    let list = clusters
        .as_array()
        .cloned()
        .or_else(|| clusters["clusters"].as_array().cloned())
        .unwrap_or_default();
    let domain = list
        .iter()
        .find(|c| c["uuid"] == cluster_id)
        .and_then(|c| c["domain"].as_str())
        .filter(|d| !d.is_empty())
        .ok_or_else(|| format!("cluster {cluster_id} has no domain in /api/v1/clusters"))?
        .trim_end_matches('/')
        .to_string();
    let projects = client
        .call(Method::GET, "/api/v1/org-unit/projects", &[], None)
        .await
        .map_err(|e| format!("projects: {e}"))?;
    let project = projects["projects"]
        .as_array()
        .and_then(|p| {
            p.iter().find(|p| {
                p["id"].as_str() == Some(project_id)
                    || p["id"].as_u64().map(|i| i.to_string()).as_deref() == Some(project_id)
            })
        })
        .and_then(|p| p["name"].as_str())
        .ok_or_else(|| format!("project {project_id} not found"))?
        .to_string();
    let ws_base = if let Some(rest) = domain.strip_prefix("https://") {
        format!("wss://{rest}")
    } else if let Some(rest) = domain.strip_prefix("http://") {
        format!("ws://{rest}")
    } else {
        format!("wss://{domain}")
    };
    let url = format!("{ws_base}/cluster-api/api/v1/{project}/workloads/{kind}/runai/{name}/logs");
    let token = client.token().await.map_err(|e| e.to_string())?;
    let mut req = url
        .as_str()
        .into_client_request()
        .map_err(|e| e.to_string())?;
    req.headers_mut().insert(
        "Authorization",
        format!("Bearer {token}")
            .parse()
            .map_err(|_| "bad token".to_string())?,
    );
    let (mut ws, _) = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        tokio_tungstenite::connect_async(req),
    )
    .await
    .map_err(|_| "timed out connecting to the log stream".to_string())?
    .map_err(|e| format!("log stream {url}: {e}"))?;
    let mut out = String::new();
    while let Some(msg) = tokio::time::timeout(std::time::Duration::from_secs(120), ws.next())
        .await
        .map_err(|_| "the log stream stalled".to_string())?
    {
        match msg {
            Ok(Message::Text(t)) => out.push_str(&t),
            Ok(Message::Binary(b)) => out.push_str(&String::from_utf8_lossy(&b)),
            Ok(Message::Close(_)) => break,
            Ok(_) => {}
            Err(e) => return Err(format!("log stream: {e}")),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_lines_in_cloudai_form() {
        let e = serde_json::json!({"createdAt": "2025-04-03T10:45:05Z", "id": "5a", "type": "Normal", "clusterId": "a6",
            "message": "Created pod: x-0-0", "reason": "SuccessfulCreate", "source": "runaijobcontroller",
            "involvedObject": {"uid": "31", "kind": "RunaiJob", "name": "x", "namespace": "runai-cloudai"}});
        assert_eq!(event_line(&e), "RunAIEvent(created_at=2025-04-03 10:45:05+00:00, id=5a, type=Normal, cluster_id=a6, message=Created pod: x-0-0, reason=SuccessfulCreate, source=runaijobcontroller, involved_object=InvolvedObject(uid=31, kind=RunaiJob, name=x, namespace=runai-cloudai))");
        let ms = serde_json::json!({"createdAt": "2025-04-01T12:00:00.123Z"});
        assert!(
            event_line(&ms).starts_with("RunAIEvent(created_at=2025-04-01 12:00:00.123000+00:00,")
        );
    }
}
