//! What stands in for the Dynamo operator and a container's `exec` on the test cluster: for each
//! DynamoGraphDeployment, the pods of every service (`replicas` × `multinode.nodeCount`) with the service's pod
//! labels and annotations and the operator's own labels, the main container from `extraPodSpec.mainContainer`,
//! owned by the deployment (the garbage collector removes them with it); and the kubelet's exec endpoint over a
//! WebSocket (`v4.channel.k8s.io`), which runs the command on this machine with every argument under `/tmp/`
//! moved into the pod's own directory (the pod's file system), streaming stdout and stderr and ending with the
//! exit status as the kubelet does.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures_util::{SinkExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use kube::Client;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::Message;

pub fn dgds() -> ApiResource {
    ApiResource {
        group: "nvidia.com".into(),
        version: "v1alpha1".into(),
        api_version: "nvidia.com/v1alpha1".into(),
        kind: "DynamoGraphDeployment".into(),
        plural: "dynamographdeployments".into(),
    }
}

/// Every command the exec endpoint ran: (pod, argv as received).
pub type Execs = Arc<Mutex<Vec<(String, Vec<String>)>>>;

/// The operator's pass over the namespace's deployments: pods for each new one; names of those it handled go to
/// `done`.
pub(super) async fn operate(
    client: &Client,
    ns: &str,
    done: &mut std::collections::HashSet<String>,
) -> Result<(), kube::Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &dgds());
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    for d in api.list(&ListParams::default()).await?.items {
        let name = d.metadata.name.clone().unwrap_or_default();
        if d.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if !done.insert(name.clone()) {
            // its status as the operator keeps it: Ready once every pod it made runs
            let lp = ListParams::default()
                .labels(&format!("nvidia.com/dynamo-graph-deployment-name={name}"));
            let mine = pods.list(&lp).await?.items;
            let running = !mine.is_empty()
                && mine
                    .iter()
                    .all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
            let ready = d.data["status"]["conditions"][0]["status"] == "True";
            if running && !ready {
                let st = json!({"status": {"state": "successful", "conditions": [{"type": "Ready",
                    "status": "True", "reason": "all_resources_are_ready", "message": "All resources are ready",
                    "lastTransitionTime": chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()}]}});
                api.patch_status(&name, &Default::default(), &kube::api::Patch::Merge(st))
                    .await?;
            }
            continue;
        }
        let owner = json!([{"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment", "name": name,
            "uid": d.metadata.uid, "controller": true, "blockOwnerDeletion": true}]);
        let services = d.data["spec"]["services"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        for (svc, s) in services {
            let n = s["replicas"].as_u64().unwrap_or(1)
                * s["multinode"]["nodeCount"].as_u64().unwrap_or(1);
            let mut labels = s["extraPodMetadata"]["labels"].clone();
            if !labels.is_object() {
                labels = json!({});
            }
            labels["nvidia.com/dynamo-graph-deployment-name"] = json!(name);
            labels["nvidia.com/dynamo-component-type"] = s["componentType"].clone();
            let mut spec = s["extraPodSpec"].clone();
            let mut main = spec
                .as_object_mut()
                .and_then(|o| o.remove("mainContainer"))
                .unwrap_or(json!({}));
            main["name"] = json!("main");
            spec["containers"] = json!([main]);
            for i in 0..n {
                let p = json!({"metadata": {"name": format!("{name}-{}-{i}", svc.to_lowercase()), "labels": labels,
                    "annotations": s["extraPodMetadata"]["annotations"], "ownerReferences": owner}, "spec": spec});
                pods.create(&PostParams::default(), &serde_json::from_value(p).unwrap())
                    .await?;
            }
        }
    }
    Ok(())
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap_or(b'?'));
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A pod's own directory: where its `/tmp/…` is.
fn pod_root(root: &Path, pod: &str) -> PathBuf {
    root.join(pod)
}

/// `GET /exec/<ns>/<pod>/<container>?command=…` upgraded to a WebSocket: runs the command, streams its output,
/// sends its status, closes.
pub(super) async fn exec<S: AsyncRead + AsyncWrite + Unpin>(
    mut tls: S,
    head: &str,
    root: &Path,
    execs: &Execs,
) {
    let target = head.split_whitespace().nth(1).unwrap_or("");
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let pod = path.split('/').nth(3).unwrap_or("").to_string();
    let argv: Vec<String> = query
        .split('&')
        .filter_map(|kv| kv.strip_prefix("command="))
        .map(decode)
        .collect();
    execs.lock().unwrap().push((pod.clone(), argv.clone()));
    let key = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case("sec-websocket-key")
                .then(|| v.trim().to_string())
        })
        .unwrap_or_default();
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    let _ = tls
        .write_all(
            format!(
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                 Sec-WebSocket-Accept: {accept}\r\nSec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n"
            )
            .as_bytes(),
        )
        .await;
    let mut ws = tokio_tungstenite::WebSocketStream::from_raw_socket(tls, Role::Server, None).await;
    let dir = pod_root(root, &pod);
    let args: Vec<String> = argv
        .iter()
        .skip(1)
        .map(|a| match a.strip_prefix("/tmp/") {
            Some(rest) => dir.join("tmp").join(rest).display().to_string(),
            None => a.clone(),
        })
        .collect();
    let _ = std::fs::create_dir_all(dir.join("tmp"));
    let out = tokio::process::Command::new(argv.first().map(String::as_str).unwrap_or("true"))
        .args(&args)
        .current_dir(&dir)
        .output()
        .await;
    let status = match out {
        Ok(o) => {
            for (ch, data) in [(1u8, &o.stdout), (2u8, &o.stderr)] {
                for chunk in data.chunks(16 * 1024) {
                    let mut m = vec![ch];
                    m.extend_from_slice(chunk);
                    let _ = ws.send(Message::binary(m)).await;
                }
            }
            match o.status.code() {
                Some(0) => json!({"metadata": {}, "status": "Success"}),
                c => json!({"metadata": {}, "status": "Failure",
                    "message": format!("command terminated with non-zero exit code: {c:?}"),
                    "reason": "NonZeroExitCode",
                    "details": {"causes": [{"reason": "ExitCode", "message": c.unwrap_or(-1).to_string()}]}}),
            }
        }
        Err(e) => json!({"metadata": {}, "status": "Failure",
            "message": format!("OCI runtime exec failed: exec failed: {e}: unknown")}),
    };
    let mut m = vec![3u8];
    m.extend_from_slice(status.to_string().as_bytes());
    let _ = ws.send(Message::binary(m)).await;
    let _ = ws.close(None).await;
    // the client's close
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), async {
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
}
