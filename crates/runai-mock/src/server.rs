//! The HTTP side of the mock: routes, bearer auth, request journal and fault injection.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::body::to_bytes;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::model::{self, now, Timing, Workload};

mod control;
mod lists;
mod logstream;
use crate::schema::Schemas;
mod org;
use org::*;

/// What the mock serves and how workloads behave.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Config {
    pub timing: Timing,
    /// Log served for workloads that complete / fail.
    pub stdout: String,
    pub failure_stdout: String,
    pub token_ttl_s: f64,
    pub project_id: String,
    pub project_name: String,
    pub namespace: String,
    pub cluster_id: String,
    pub gpus_per_node: u64,
    /// Accept CloudAI's `AppId`/`AppSecret` spelling so the reference client can be replayed.
    pub compat_cloudai_auth: bool,
    /// Accepted (client id, secret) pairs.
    pub credentials: Vec<(String, String)>,
    /// Outcome overrides for workloads whose name starts with a prefix: (prefix, outcome).
    pub outcome_by_prefix: Vec<(String, String)>,
    /// The cluster domain advertised by /clusters (for the log stream) when clients reach the mock through a
    /// proxy (TLS in front of it); the mock's own URL otherwise.
    pub advertised_url: Option<String>,
    /// Other projects the tenant shows, listed before ours (a large tenant: lists are paged).
    #[serde(default)]
    pub extra_projects: usize,
    /// Why a Pending workload waits (`phaseMessage`, `pendingSchedulingMessages`).
    #[serde(default = "default_pending_reason")]
    pub pending_reason: String,
    /// Serve `GET /api/v1/org-unit/projects/{id}` (else 403: only the paged list shows projects).
    #[serde(default = "yes")]
    pub project_by_id: bool,
    /// The cluster's nodes (`GET /api/v1/clusters/{uuid}/nodes`), where pods are placed.
    #[serde(default = "default_nodes")]
    pub nodes: Vec<String>,
    /// Nodes listed `NotReady`.
    #[serde(default)]
    pub not_ready_nodes: Vec<String>,
}

fn default_nodes() -> Vec<String> {
    (0..4).map(|i| format!("node-{i}")).collect()
}

fn yes() -> bool {
    true
}

fn default_pending_reason() -> String {
    "Insufficient free GPUs in node pool default".into()
}

impl Default for Config {
    fn default() -> Self {
        Self {
            timing: Timing::default(),
            stdout: String::new(),
            failure_stdout: String::new(),
            token_ttl_s: 3600.0,
            project_id: "4501".into(),
            project_name: "test".into(),
            namespace: "runai-test".into(),
            cluster_id: "71f69d83-ba66-4822-adf5-55ce55efd210".into(),
            gpus_per_node: 8,
            compat_cloudai_auth: false,
            credentials: vec![("my-app".into(), "s3cr3t".into())],
            outcome_by_prefix: Vec::new(),
            advertised_url: None,
            extra_projects: 0,
            pending_reason: default_pending_reason(),
            project_by_id: true,
            nodes: default_nodes(),
            not_ready_nodes: Vec::new(),
        }
    }
}

/// Faults for the next requests; set through `POST /mock/control` or the library.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Faults {
    /// Answer the next N API requests with 429 and `Retry-After`.
    pub rate_limit_next: u32,
    pub retry_after_s: u64,
    /// Answer the next N API requests with `error_status` (500 by default).
    pub error_burst: u32,
    pub error_status: u16,
    /// Delay every API response.
    pub latency_ms: u64,
    /// Create the workload of the next N creation requests, then drop the connection without answering.
    pub drop_next_create: u32,
    /// Invalidate every token issued so far.
    pub revoke_tokens: bool,
    /// Before the next N creation requests, someone else takes the name: a workload of that name (without the
    /// requester's annotations) appears and the request gets 409.
    pub conflict_next_create: u32,
    /// Answer every API request with 429 (and `Retry-After: retry_after_s`) until this time (epoch seconds); the
    /// control endpoint takes `rate_limit_for_s` from now.
    pub rate_limit_until: Option<f64>,
    pub rate_limit_for_s: Option<f64>,
    /// The next log stream opened breaks off (no closing handshake, as a proxy's idle timeout does) after this
    /// many lines.
    pub cut_log_after_lines: u32,
    /// The next N workloads run their pods on other nodes than their node affinity asks.
    pub ignore_affinity_next: u32,
    /// The next N creation requests are refused by policy (400 with a compliance issue).
    pub reject_next_create: u32,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Persisted {
    pub workloads: Vec<Workload>,
    /// Issued tokens and their expiry (epoch seconds).
    pub tokens: Vec<(String, f64)>,
    pub counter: u64,
}

pub struct Shared {
    pub cfg: Mutex<Config>,
    pub faults: Mutex<Faults>,
    pub data: Mutex<Persisted>,
    pub journal: Mutex<Vec<Value>>,
    pub schemas: Schemas,
    pub base_url: String,
    pub state_file: Option<PathBuf>,
}

type S = Arc<Shared>;

fn err(code: u16, message: &str) -> Response {
    ApiErr(code, message.to_string()).into_response()
}

/// The documented `Error` body, as a small error value.
pub struct ApiErr(u16, String);

impl IntoResponse for ApiErr {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.0).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(json!({"code": self.0, "message": self.1}))).into_response()
    }
}

impl Shared {
    pub fn save(&self) {
        if let Some(f) = &self.state_file {
            let data = self.data.lock().unwrap();
            if let Ok(text) = serde_json::to_vec(&*data) {
                let tmp = f.with_extension("tmp");
                if std::fs::write(&tmp, text).is_ok() {
                    let _ = std::fs::rename(tmp, f);
                }
            }
        }
    }

    fn check_auth(&self, headers: &HeaderMap) -> Result<(), ApiErr> {
        let token = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| ApiErr(401, "Issuer is not familiar.".into()))?;
        let data = self.data.lock().unwrap();
        match data.tokens.iter().find(|(t, _)| t == token) {
            Some((_, exp)) if *exp > now() => Ok(()),
            _ => Err(ApiErr(401, "Issuer is not familiar.".into())),
        }
    }
}

fn b64url(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, b)| acc | (*b as u32) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

async fn token(State(s): State<S>, body: axum::body::Bytes) -> Response {
    let Ok(v) = serde_json::from_slice::<Value>(&body) else {
        return err(400, "Required parameter is missing");
    };
    let cfg = s.cfg.lock().unwrap().clone();
    let mut issues = s.schemas.validate(&v, "TokenRequest");
    if cfg.compat_cloudai_auth {
        issues.retain(|i| i.field != "AppId" && i.field != "AppSecret");
    }
    if !issues.is_empty() {
        return (StatusCode::BAD_REQUEST, Json(json!({"code": 400, "message": "Required parameter is missing", "details": issues.iter().map(|i| format!("{} {}", i.field, i.details)).collect::<Vec<_>>().join("; ")}))).into_response();
    }
    let get = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let (id, secret) = match get("grantType").as_str() {
        "client_credentials" => (get("clientID"), get("clientSecret")),
        "app_token" if cfg.compat_cloudai_auth && v.get("AppId").is_some() => {
            (get("AppId"), get("AppSecret"))
        }
        "app_token" => (get("appID"), get("appSecret")),
        _ => return err(400, "Unsupported grant type"),
    };
    if !cfg
        .credentials
        .iter()
        .any(|(i, sec)| *i == id && *sec == secret)
    {
        return err(401, "Invalid client credentials");
    }
    let mut data = s.data.lock().unwrap();
    data.counter += 1;
    let exp = now() + cfg.token_ttl_s;
    let tok = format!(
        "hdr.{}.sig{}",
        b64url(format!("{{\"exp\":{}}}", exp as u64).as_bytes()),
        data.counter
    );
    data.tokens.push((tok.clone(), exp));
    drop(data);
    s.save();
    Json(json!({"accessToken": tok, "idToken": tok, "refreshToken": format!("refresh-{}", model::uuid(&tok)), "expiresIn": cfg.token_ttl_s as u64}))
        .into_response()
}

fn workload_json(s: &Shared, w: &Workload, t: f64) -> Value {
    let phase = model::phase(w, t);
    let mut v = json!({
        "name": w.name, "requestedName": w.requested_name, "workloadId": w.id, "projectId": w.project_id,
        "clusterId": w.cluster_id, "createdBy": "cloudai-client", "createdAt": model::iso(w.created_at),
        "desiredPhase": if w.deleted_at.is_some() { "Deleted" } else { "Running" },
        "actualPhase": phase, "spec": w.request["spec"],
    });
    if let Some(d) = w.deleted_at {
        v["deletedAt"] = model::iso(d).into();
    }
    if w.kind == "distributed" {
        v["masterSpecSameAsWorker"] = w
            .request
            .get("masterSpecSameAsWorker")
            .cloned()
            .unwrap_or(Value::Null);
        v["masterSpec"] = w.request.get("masterSpec").cloned().unwrap_or(Value::Null);
    }
    let _ = s;
    v
}

async fn create(s: S, kind: &'static str, req: Request) -> Response {
    let kill = req.extensions().get::<KillConnection>().cloned();
    let (parts, body) = req.into_parts();
    let headers = parts.headers;
    let body = to_bytes(body, 16 << 20).await.unwrap_or_default();
    if let Err(r) = s.check_auth(&headers) {
        return r.into_response();
    }
    let Ok(v) = serde_json::from_slice::<Value>(&body) else {
        return err(400, "The request body is not valid JSON");
    };
    let schema = if kind == "training" {
        "TrainingCreationRequest"
    } else {
        "DistributedCreationRequest"
    };
    let mut issues = s.schemas.validate(&v, schema);
    let cfg = s.cfg.lock().unwrap().clone();
    let gpus = v["spec"]["compute"]["gpuDevicesRequest"]
        .as_u64()
        .unwrap_or(0);
    if gpus > cfg.gpus_per_node {
        issues.push(crate::schema::Issue {
            field: "compute.gpuDevicesRequest".into(),
            details: format!("value must be no more than {}", cfg.gpus_per_node),
            rule: Some("max"),
        });
    }
    // the API takes registry references; enroot's `registry#path` is refused
    for spec in ["spec", "masterSpec"] {
        if v[spec]["image"].as_str().is_some_and(|i| i.contains('#')) {
            issues.push(crate::schema::Issue {
                field: format!("{spec}.image").replace("spec.", ""),
                details: "invalid image reference format".into(),
                rule: None,
            });
        }
    }
    let reject = {
        let mut f = s.faults.lock().unwrap();
        let r = f.reject_next_create > 0;
        f.reject_next_create = f.reject_next_create.saturating_sub(1);
        r
    };
    if reject {
        issues.push(crate::schema::Issue {
            field: "image".into(),
            details: "the image is not allowed by the administrator's policy".into(),
            rule: Some("options"),
        });
    }
    if !issues.is_empty() {
        return (StatusCode::BAD_REQUEST, Json(json!({"code": 400, "message": "The workload request does not comply with the policy set by the administrator", "complianceIssues": issues}))).into_response();
    }
    if v["projectId"].as_str() != Some(cfg.project_id.as_str())
        || v["clusterId"].as_str() != Some(cfg.cluster_id.as_str())
    {
        return err(403, "You do not have sufficient permissions.");
    }
    let conflict = {
        let mut f = s.faults.lock().unwrap();
        let c = f.conflict_next_create > 0;
        f.conflict_next_create = f.conflict_next_create.saturating_sub(1);
        c
    };
    if conflict {
        let mut foreign = v.clone();
        foreign["spec"]["annotations"] = Value::Null;
        foreign["spec"]["labels"] = Value::Null;
        let _ = register(&s, kind, foreign, &cfg);
    }
    let body = match register(&s, kind, v, &cfg) {
        Ok(b) => b,
        Err(r) => return r.into_response(),
    };
    s.save();
    let drop_it = {
        let mut f = s.faults.lock().unwrap();
        let d = f.drop_next_create > 0;
        f.drop_next_create = f.drop_next_create.saturating_sub(1);
        d
    };
    if let (true, Some(k)) = (drop_it, kill) {
        // The workload exists now; the client never hears about it (as when a proxy drops the reply).
        let _ = k.0.send(()).await;
        std::future::pending::<()>().await;
    }
    (StatusCode::ACCEPTED, Json(body)).into_response()
}

/// Records a validated creation request as a new workload; its JSON, or the conflict answer.
fn register(s: &Shared, kind: &str, v: Value, cfg: &Config) -> Result<Value, ApiErr> {
    let requested = v["name"].as_str().unwrap_or("").to_string();
    let t = now();
    let mut data = s.data.lock().unwrap();
    data.counter += 1;
    let name = if v["useGivenNameAsPrefix"].as_bool() == Some(true) {
        format!(
            "{requested}-{}",
            &model::uuid(&format!("{requested}{}", data.counter))[..5]
        )
    } else {
        requested.clone()
    };
    if data
        .workloads
        .iter()
        .any(|w| w.name == name && w.project_id == cfg.project_id && !model::gone(w, t))
    {
        return Err(ApiErr(409, "Resource with this name already exists".into()));
    }
    let mut timing = cfg.timing.clone();
    if let Some((_, o)) = cfg
        .outcome_by_prefix
        .iter()
        .find(|(p, _)| name.starts_with(p.as_str()))
    {
        timing.outcome = o.clone();
    }
    // a hang prints the regular output until it stops making progress
    let outcome_stdout = if matches!(timing.outcome.as_str(), "completed" | "stuck") {
        cfg.stdout.clone()
    } else {
        cfg.failure_stdout.clone()
    };
    let w = Workload {
        id: model::uuid(&format!("{name}-{}-{}", data.counter, t)),
        name,
        requested_name: requested,
        kind: kind.into(),
        project_id: cfg.project_id.clone(),
        cluster_id: cfg.cluster_id.clone(),
        request: v,
        created_at: t,
        deleted_at: None,
        timing,
        stdout: outcome_stdout,
        nodes: Vec::new(),
    };
    let ignore = {
        let mut f = s.faults.lock().unwrap();
        let i = f.ignore_affinity_next > 0;
        f.ignore_affinity_next = f.ignore_affinity_next.saturating_sub(1);
        i
    };
    let w = Workload {
        nodes: model::place(&w, &cfg.nodes, ignore),
        stdout: model::as_ranks_of(&w.stdout, &w),
        ..w
    };
    let body = workload_json(s, &w, t);
    data.workloads.push(w);
    Ok(body)
}

/// Closes the connection a request came on, without an answer (see `serve` in lib.rs).
#[derive(Clone)]
pub struct KillConnection(pub tokio::sync::mpsc::Sender<()>);

async fn create_training(State(s): State<S>, req: Request) -> Response {
    create(s, "training", req).await
}
async fn create_distributed(State(s): State<S>, req: Request) -> Response {
    create(s, "distributed", req).await
}

/// An authorized request's workload (of `kind`, when given) that still exists.
fn lookup(
    s: &Shared,
    headers: &HeaderMap,
    id: &str,
    kind: Option<&str>,
) -> Result<Workload, ApiErr> {
    s.check_auth(headers)?;
    find(s, id, kind)
}

fn find(s: &Shared, id: &str, kind: Option<&str>) -> Result<Workload, ApiErr> {
    let data = s.data.lock().unwrap();
    data.workloads
        .iter()
        .find(|w| w.id == id && kind.is_none_or(|k| w.kind == k) && !model::gone(w, now()))
        .cloned()
        .ok_or_else(|| ApiErr(404, "Resource id not found.".into()))
}

async fn get_typed(
    State(s): State<S>,
    Path((kind, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    match lookup(&s, &headers, &id, Some(&kind)) {
        Ok(w) => Json(workload_json(&s, &w, now())).into_response(),
        Err(r) => r.into_response(),
    }
}

async fn delete_typed(
    State(s): State<S>,
    Path((kind, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = s.check_auth(&headers) {
        return r.into_response();
    }
    let mut data = s.data.lock().unwrap();
    let t = now();
    let Some(w) = data
        .workloads
        .iter_mut()
        .find(|w| w.id == id && w.kind == kind && !model::gone(w, t))
    else {
        return err(404, "Resource id not found.");
    };
    if w.deleted_at.is_none() {
        w.deleted_at = Some(t);
    }
    drop(data);
    s.save();
    (
        StatusCode::ACCEPTED,
        Json(json!({"code": 202, "message": "Request has been accepted."})),
    )
        .into_response()
}

fn detailed(s: &Shared, w: &Workload, t: f64) -> Value {
    let cfg = s.cfg.lock().unwrap();
    let tl = model::timeline(w, t);
    let (since, phase) = tl.last().copied().unwrap_or((w.created_at, "Creating"));
    let k8s = match phase {
        "Running" | "Degraded" => "Running",
        "Completed" => "Succeeded",
        "Failed" => "Failed",
        _ => "Pending",
    };
    let running = if matches!(phase, "Running" | "Degraded") {
        model::pod_names(w).len()
    } else {
        0
    };
    let mut v = json!({
        "type": if w.kind == "training" { "Training" } else { "Distributed" }, "name": w.name, "id": w.id,
        "source": "Control-plane", "priority": 50, "priorityClassName": "train", "clusterId": w.cluster_id,
        "projectName": cfg.project_name, "projectId": w.project_id, "departmentName": "default", "departmentId": "1",
        "namespace": cfg.namespace, "createdAt": model::iso(w.created_at), "phase": phase, "conditions": [],
        "k8sPhase": k8s, "tenantId": 1, "runningPods": running, "phaseUpdatedAt": model::iso(since),
        "k8sPhaseUpdatedAt": model::iso(since), "updatedAt": model::iso(since),
        "deletedAt": w.deleted_at.map(model::iso), "category": "Train",
        "distributedFramework": w.request["spec"]["distributedFramework"], "requestedPods": {"number": model::pod_names(w).len()},
        "completedAt": if model::is_terminal(phase) { Value::from(model::iso(since)) } else { Value::Null },
    });
    if phase == "Pending" {
        // the scheduler's words while it finds no room
        v["phaseMessage"] = cfg.pending_reason.clone().into();
        v["pendingSchedulingMessages"] = json!([{"nodePool": "default", "phaseReason": "OverLimit",
            "reason": cfg.pending_reason}]);
    }
    v
}

async fn get_workload(State(s): State<S>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    match lookup(&s, &headers, &id, None) {
        Ok(w) => Json(detailed(&s, &w, now())).into_response(),
        Err(r) => r.into_response(),
    }
}

pub fn router(s: S) -> Router {
    Router::new()
        .route("/api/v1/token", post(token))
        .route("/api/v1/workloads/trainings", post(create_training))
        .route("/api/v1/workloads/distributed", post(create_distributed))
        .route(
            "/api/v1/workloads/trainings/{id}",
            get(|st, Path(id): Path<String>, h| {
                get_typed(st, Path(("training".to_string(), id)), h)
            })
            .delete(|st, Path(id): Path<String>, h| {
                delete_typed(st, Path(("training".to_string(), id)), h)
            }),
        )
        .route(
            "/api/v1/workloads/distributed/{id}",
            get(|st, Path(id): Path<String>, h| {
                get_typed(st, Path(("distributed".to_string(), id)), h)
            })
            .delete(|st, Path(id): Path<String>, h| {
                delete_typed(st, Path(("distributed".to_string(), id)), h)
            }),
        )
        .route("/api/v1/workloads", get(lists::list_workloads))
        .route("/api/v1/workloads/{id}", get(get_workload))
        .route("/api/v1/workloads/{id}/events", get(lists::list_events))
        .route("/api/v1/workloads/{id}/pods", get(lists::list_pods))
        .route("/api/v1/org-unit/projects", get(projects))
        .route("/api/v1/org-unit/projects/{id}", get(project))
        .route("/api/v1/clusters", get(clusters))
        .route("/api/v1/clusters/{id}", get(cluster))
        .route("/api/v1/clusters/{id}/nodes", get(cluster_nodes))
        .route("/cluster-api/status", get(cluster_status))
        .route(
            "/cluster-api/api/v1/{project}/workloads/{kind}/runai/{name}/logs",
            get(logstream::logs),
        )
        .route("/mock/control", post(control::control))
        .route("/mock/journal", get(control::journal))
        .fallback(|| async { err(404, "Resource id not found.") })
        .layer(axum::middleware::from_fn_with_state(
            s.clone(),
            control::middleware,
        ))
        .with_state(s)
}
