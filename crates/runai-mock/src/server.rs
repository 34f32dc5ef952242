//! The HTTP side of the mock: routes, bearer auth, request journal and fault injection.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::body::{to_bytes, Body};
use axum::extract::ws::{Message, WebSocketUpgrade};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::model::{self, now, Timing, Workload};
use crate::schema::Schemas;

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
    json!({
        "type": if w.kind == "training" { "Training" } else { "Distributed" }, "name": w.name, "id": w.id,
        "source": "Control-plane", "priority": 50, "priorityClassName": "train", "clusterId": w.cluster_id,
        "projectName": cfg.project_name, "projectId": w.project_id, "departmentName": "default", "departmentId": "1",
        "namespace": cfg.namespace, "createdAt": model::iso(w.created_at), "phase": phase, "conditions": [],
        "k8sPhase": k8s, "tenantId": 1, "runningPods": running, "phaseUpdatedAt": model::iso(since),
        "k8sPhaseUpdatedAt": model::iso(since), "updatedAt": model::iso(since),
        "deletedAt": w.deleted_at.map(model::iso), "category": "Train",
        "distributedFramework": w.request["spec"]["distributedFramework"], "requestedPods": {"number": model::pod_names(w).len()},
        "completedAt": if model::is_terminal(phase) { Value::from(model::iso(since)) } else { Value::Null },
    })
}

async fn get_workload(State(s): State<S>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    match lookup(&s, &headers, &id, None) {
        Ok(w) => Json(detailed(&s, &w, now())).into_response(),
        Err(r) => r.into_response(),
    }
}

#[derive(Deserialize)]
struct Page {
    offset: Option<usize>,
    limit: Option<usize>,
    #[serde(rename = "sortOrder")]
    sort_order: Option<String>,
    #[serde(rename = "filterBy")]
    filter_by: Option<String>,
    deleted: Option<bool>,
}

fn page<T: Clone>(
    items: &[T],
    p: &Page,
    default_desc: bool,
) -> Result<(Vec<T>, Option<usize>), ApiErr> {
    let limit = p.limit.unwrap_or(50);
    if !(1..=500).contains(&limit) {
        return Err(ApiErr(400, "limit must be between 1 and 500".into()));
    }
    let desc = match p.sort_order.as_deref() {
        Some("asc") => false,
        Some("desc") => true,
        None => default_desc,
        Some(_) => return Err(ApiErr(400, "sortOrder must be asc or desc".into())),
    };
    let mut v = items.to_vec();
    if desc {
        v.reverse();
    }
    let off = p.offset.unwrap_or(0);
    let out: Vec<T> = v.iter().skip(off).take(limit).cloned().collect();
    let next = (off + out.len() < v.len()).then_some(off + out.len());
    Ok((out, next))
}

/// A list page: `{"<key>": [...], "next": <offset>}`, `next` only when there is more.
fn paged(key: &str, items: Vec<Value>, next: Option<usize>) -> Response {
    let mut body = json!({ key: items });
    if let Some(n) = next {
        body["next"] = n.into();
    }
    Json(body).into_response()
}

async fn list_events(
    State(s): State<S>,
    Path(id): Path<String>,
    Query(p): Query<Page>,
    headers: HeaderMap,
) -> Response {
    let w = match lookup(&s, &headers, &id, None) {
        Ok(w) => w,
        Err(r) => return r.into_response(),
    };
    let ns = s.cfg.lock().unwrap().namespace.clone();
    let ev = model::events(&w, now(), &ns);
    match page(&ev, &p, true) {
        Ok((events, next)) => paged("events", events, next),
        Err(r) => r.into_response(),
    }
}

async fn list_pods(
    State(s): State<S>,
    Path(id): Path<String>,
    Query(p): Query<Page>,
    headers: HeaderMap,
) -> Response {
    let w = match lookup(&s, &headers, &id, None) {
        Ok(w) => w,
        Err(r) => return r.into_response(),
    };
    let t = now();
    let d = detailed(&s, &w, t);
    let image = w.request["spec"]["image"].clone();
    let pods: Vec<Value> = model::pod_names(&w)
        .iter()
        .enumerate()
        .map(|(i, n)| {
            json!({"name": n, "priorityClassName": "train", "id": model::uuid(&format!("{}-{n}", w.id)), "workloadId": w.id,
                   "clusterId": w.cluster_id, "createdAt": model::iso(w.created_at),
                   "containers": [{"name": w.name, "image": image, "startedAt": null}], "k8sPhase": d["k8sPhase"],
                   "tenantId": 1, "k8sPhaseUpdatedAt": d["k8sPhaseUpdatedAt"], "updatedAt": d["updatedAt"], "nodeName": format!("node-{i}")})
        })
        .collect();
    match page(&pods, &p, false) {
        Ok((pods, next)) => paged("pods", pods, next),
        Err(r) => r.into_response(),
    }
}

/// `filterBy=name==x,projectId==y` with `==`, `!=`, `=@` (contains) and `=^` (starts with).
fn matches(v: &Value, filter: &str) -> bool {
    filter.split(',').filter(|f| !f.is_empty()).all(|f| {
        for (op, test) in [
            ("==", (|a: &str, b: &str| a == b) as fn(&str, &str) -> bool),
            ("!=", |a, b| a != b),
            ("=@", |a, b| a.contains(b)),
            ("=^", |a, b| a.starts_with(b)),
        ] {
            if let Some((field, want)) = f.split_once(op) {
                let have = match &v[field] {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                return test(&have, want);
            }
        }
        false
    })
}

async fn list_workloads(State(s): State<S>, Query(p): Query<Page>, headers: HeaderMap) -> Response {
    if let Err(r) = s.check_auth(&headers) {
        return r.into_response();
    }
    let t = now();
    let all: Vec<Workload> = s.data.lock().unwrap().workloads.clone();
    let items: Vec<Value> = all
        .iter()
        .filter(|w| model::gone(w, t) == p.deleted.unwrap_or(false))
        .map(|w| detailed(&s, w, t))
        .filter(|v| p.filter_by.as_deref().is_none_or(|f| matches(v, f)))
        .collect();
    match page(&items, &p, false) {
        Ok((workloads, next)) => {
            Json(json!({"workloads": workloads, "next": next})).into_response()
        }
        Err(r) => r.into_response(),
    }
}

async fn projects(State(s): State<S>, headers: HeaderMap) -> Response {
    if let Err(r) = s.check_auth(&headers) {
        return r.into_response();
    }
    let c = s.cfg.lock().unwrap();
    Json(json!({"projects": [{"id": c.project_id, "name": c.project_name, "clusterId": c.cluster_id, "parentId": "1",
        "createdBy": "admin", "status": {"phase": "Ready", "namespace": c.namespace}}]}))
    .into_response()
}

async fn clusters(State(s): State<S>, headers: HeaderMap) -> Response {
    if let Err(r) = s.check_auth(&headers) {
        return r.into_response();
    }
    let c = s.cfg.lock().unwrap();
    let domain = c
        .advertised_url
        .clone()
        .unwrap_or_else(|| s.base_url.clone());
    Json(json!([{"uuid": c.cluster_id, "tenantId": 1, "name": "mock-cluster", "createdAt": model::iso(0.0),
        "domain": domain, "version": "2.21", "status": {"state": "Connected"}}]))
    .into_response()
}

async fn cluster_status(State(s): State<S>, headers: HeaderMap) -> Response {
    if let Err(r) = s.check_auth(&headers) {
        return r.into_response();
    }
    "OK".into_response()
}

/// The cluster's log stream: one message per line; while running, lines trickle out over the run time.
async fn logs(
    State(s): State<S>,
    Path((project, kind, name)): Path<(String, String, String)>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Response {
    if let Err(r) = s.check_auth(&headers) {
        return r.into_response();
    }
    let want = if kind == "training" {
        "training"
    } else {
        "distributed"
    };
    let t = now();
    let w = s
        .data
        .lock()
        .unwrap()
        .workloads
        .iter()
        .find(|w| w.name == name && w.kind == want && w.deleted_at.is_none())
        .cloned();
    let Some(w) = w else {
        return err(404, "Resource id not found.");
    };
    if project != s.cfg.lock().unwrap().project_name {
        return err(404, "Resource id not found.");
    }
    let phase = model::phase(&w, t);
    if !matches!(phase, "Running" | "Degraded" | "Completed" | "Failed") {
        return err(404, "The workload has not started.");
    }
    let id = w.id.clone();
    ws.on_upgrade(move |mut socket| async move {
        // follow semantics: line i is out once i/n of the run time has passed; the stream ends when the
        // workload ends or is deleted (its pods killed), so a hang's stream stays open until deletion
        let lines: Vec<String> = w.stdout.split_inclusive('\n').map(str::to_string).collect();
        let undeleted = Workload {
            deleted_at: None,
            ..w.clone()
        };
        let tl = model::timeline(&undeleted, f64::MAX);
        let run_start = tl
            .iter()
            .find(|(_, p)| *p == "Running")
            .map_or(t, |(at, _)| *at);
        // (deleted, ended): deletion kills the stream at once; an ended workload's output is all out
        let state = |s: &Shared| {
            let data = s.data.lock().unwrap();
            data.workloads
                .iter()
                .find(|x| x.id == id)
                .map_or((true, true), |x| {
                    let deleted = x.deleted_at.is_some();
                    (
                        deleted,
                        deleted || model::is_terminal(model::phase(x, now())),
                    )
                })
        };
        let total = lines.len().max(1) as f64;
        for (i, line) in lines.into_iter().enumerate() {
            let due = run_start + w.timing.run_s * (i as f64 / total);
            while now() < due {
                if state(&s).0 {
                    let _ = socket.send(Message::Close(None)).await;
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_secs_f64(
                    (due - now()).clamp(0.0, 0.1),
                ))
                .await;
            }
            if socket.send(Message::Text(line.into())).await.is_err() {
                return;
            }
        }
        while !state(&s).1 {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        let _ = socket.send(Message::Close(None)).await;
    })
}

async fn control(State(s): State<S>, Json(f): Json<Value>) -> Response {
    if let Some(t) = f.get("timing") {
        if let Ok(t) = serde_json::from_value::<Timing>(t.clone()) {
            s.cfg.lock().unwrap().timing = t;
        }
    }
    if let Some(ttl) = f.get("token_ttl_s").and_then(Value::as_f64) {
        s.cfg.lock().unwrap().token_ttl_s = ttl;
    }
    if let Ok(faults) = serde_json::from_value::<Faults>(f) {
        if faults.revoke_tokens {
            s.data.lock().unwrap().tokens.clear();
        }
        *s.faults.lock().unwrap() = Faults {
            revoke_tokens: false,
            ..faults
        };
    }
    Json(json!({"ok": true})).into_response()
}

async fn journal(State(s): State<S>) -> Response {
    Json(Value::Array(s.journal.lock().unwrap().clone())).into_response()
}

/// Journal every request (secrets masked), then apply the fault knobs to API requests.
async fn middleware(State(s): State<S>, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let bytes = to_bytes(body, 16 << 20).await.unwrap_or_default();
    let path = parts.uri.path().to_string();
    if !path.starts_with("/mock/") {
        let mut headers = serde_json::Map::new();
        for (k, v) in &parts.headers {
            let v = if k == "authorization" {
                "Bearer ***"
            } else {
                v.to_str().unwrap_or("")
            };
            headers.insert(k.to_string(), v.into());
        }
        let query: HashMap<String, String> = parts
            .uri
            .query()
            .map(|q| {
                q.split('&')
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.into(), v.into()))
                    .collect()
            })
            .unwrap_or_default();
        let mut body_text = String::from_utf8_lossy(&bytes).into_owned();
        if let Ok(mut v) = serde_json::from_str::<Value>(&body_text) {
            for k in ["appSecret", "clientSecret", "AppSecret", "password"] {
                if v.get(k).is_some() {
                    v[k] = "***".into();
                }
            }
            body_text = v.to_string();
        }
        s.journal.lock().unwrap().push(json!({"t": now(), "kind": "http", "method": parts.method.as_str(), "path": path, "query": query, "headers": headers, "body": body_text}));
        let (latency, limited, error) = {
            let mut f = s.faults.lock().unwrap();
            let limited = (f.rate_limit_next > 0).then_some(f.retry_after_s);
            f.rate_limit_next = f
                .rate_limit_next
                .saturating_sub(u32::from(limited.is_some()));
            let error =
                (limited.is_none() && f.error_burst > 0).then_some(if f.error_status == 0 {
                    500
                } else {
                    f.error_status
                });
            f.error_burst = f.error_burst.saturating_sub(u32::from(error.is_some()));
            (f.latency_ms, limited, error)
        };
        if latency > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(latency)).await;
        }
        if let Some(after) = limited {
            let mut r = err(429, "Too many requests");
            r.headers_mut()
                .insert("retry-after", after.to_string().parse().unwrap());
            return r;
        }
        if let Some(code) = error {
            return err(
                code,
                if code == 503 {
                    "Please try again in few minutes."
                } else {
                    "Something went wrong."
                },
            );
        }
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
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
        .route("/api/v1/workloads", get(list_workloads))
        .route("/api/v1/workloads/{id}", get(get_workload))
        .route("/api/v1/workloads/{id}/events", get(list_events))
        .route("/api/v1/workloads/{id}/pods", get(list_pods))
        .route("/api/v1/org-unit/projects", get(projects))
        .route("/api/v1/clusters", get(clusters))
        .route("/cluster-api/status", get(cluster_status))
        .route(
            "/cluster-api/api/v1/{project}/workloads/{kind}/runai/{name}/logs",
            get(logs),
        )
        .route("/mock/control", post(control))
        .route("/mock/journal", get(journal))
        .fallback(|| async { err(404, "Resource id not found.") })
        .layer(axum::middleware::from_fn_with_state(s.clone(), middleware))
        .with_state(s)
}
