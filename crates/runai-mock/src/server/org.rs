//! Projects and clusters as the control plane lists them: the project a workload names, the cluster and its nodes.

use super::*;

pub(super) fn project_json(c: &Config, id: &str, name: &str, namespace: &str) -> Value {
    json!({"id": id, "name": name, "clusterId": c.cluster_id, "parentId": "1", "createdBy": "admin",
        "status": {"phase": "Ready", "namespace": namespace}})
}

/// Every project the tenant shows: others first (`extra_projects`), ours last.
pub(super) fn all_projects(c: &Config) -> Vec<Value> {
    let mut v: Vec<Value> = (0..c.extra_projects)
        .map(|i| {
            let id = (10_000 + i).to_string();
            project_json(c, &id, &format!("other-{i}"), &format!("runai-other-{i}"))
        })
        .collect();
    v.push(project_json(
        c,
        &c.project_id,
        &c.project_name,
        &c.namespace,
    ));
    v
}

pub(super) async fn projects(
    State(s): State<S>,
    axum::extract::Query(p): axum::extract::Query<lists::Page>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = s.check_auth(&headers) {
        return r.into_response();
    }
    let all = all_projects(&s.cfg.lock().unwrap());
    match lists::page(&all, &p, false) {
        Ok((projects, next)) => lists::paged("projects", projects, next),
        Err(r) => r.into_response(),
    }
}

pub(super) async fn project(
    State(s): State<S>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = s.check_auth(&headers) {
        return r.into_response();
    }
    let cfg = s.cfg.lock().unwrap().clone();
    if !cfg.project_by_id {
        return err(403, "You do not have sufficient permissions.");
    }
    match all_projects(&cfg)
        .into_iter()
        .find(|p| p["id"] == id.as_str())
    {
        Some(p) => Json(p).into_response(),
        None => err(404, "Resource id not found."),
    }
}

pub(super) fn cluster_json(s: &Shared) -> Value {
    let c = s.cfg.lock().unwrap();
    let domain = c
        .advertised_url
        .clone()
        .unwrap_or_else(|| s.base_url.clone());
    json!({"uuid": c.cluster_id, "tenantId": 1, "name": "mock-cluster", "createdAt": model::iso(0.0),
        "domain": domain, "version": "2.21", "status": {"state": "Connected"}})
}

pub(super) async fn clusters(State(s): State<S>, headers: HeaderMap) -> Response {
    if let Err(r) = s.check_auth(&headers) {
        return r.into_response();
    }
    Json(json!([cluster_json(&s)])).into_response()
}

pub(super) async fn cluster(
    State(s): State<S>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = s.check_auth(&headers) {
        return r.into_response();
    }
    let c = cluster_json(&s);
    if c["uuid"] != id.as_str() {
        return err(404, "Resource id not found.");
    }
    Json(c).into_response()
}

pub(super) async fn cluster_nodes(
    State(s): State<S>,
    Path(id): Path<String>,
    axum::extract::Query(p): axum::extract::Query<lists::Page>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = s.check_auth(&headers) {
        return r.into_response();
    }
    let c = s.cfg.lock().unwrap().clone();
    if id != c.cluster_id {
        return err(404, "Resource id not found.");
    }
    let nodes: Vec<Value> = c
        .nodes
        .iter()
        .map(|n| {
            let status = if c.not_ready_nodes.contains(n) {
                "NotReady"
            } else {
                "Ready"
            };
            json!({"name": n, "status": status, "nodePool": "default", "createdAt": model::iso(0.0),
                "clusterUuid": c.cluster_id, "updatedAt": model::iso(0.0), "id": model::uuid(n),
                "gpuInfo": {"gpuType": "NVIDIA-A100-SXM4-80GB", "gpuCount": c.gpus_per_node}})
        })
        .collect();
    match lists::page(&nodes, &p, false) {
        Ok((nodes, next)) => lists::paged("nodes", nodes, next),
        Err(r) => r.into_response(),
    }
}

pub(super) async fn cluster_status(State(s): State<S>, headers: HeaderMap) -> Response {
    if let Err(r) = s.check_auth(&headers) {
        return r.into_response();
    }
    "OK".into_response()
}
