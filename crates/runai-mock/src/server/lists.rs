//! Paged lists: a workload's events and pods, and workloads filtered with `filterBy`.

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{detailed, lookup, ApiErr, S};
use crate::model::{self, now, Workload};

#[derive(Deserialize)]
pub(crate) struct Page {
    offset: Option<usize>,
    limit: Option<usize>,
    #[serde(rename = "sortOrder")]
    sort_order: Option<String>,
    #[serde(rename = "filterBy")]
    filter_by: Option<String>,
    deleted: Option<bool>,
}

pub(super) fn page<T: Clone>(
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
pub(super) fn paged(key: &str, items: Vec<Value>, next: Option<usize>) -> Response {
    let mut body = json!({ key: items });
    if let Some(n) = next {
        body["next"] = n.into();
    }
    Json(body).into_response()
}

pub(super) async fn list_events(
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

pub(super) async fn list_pods(
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
                   "tenantId": 1, "k8sPhaseUpdatedAt": d["k8sPhaseUpdatedAt"], "updatedAt": d["updatedAt"],
                   "nodeName": w.nodes.get(i).cloned().unwrap_or_else(|| format!("node-{i}"))})
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

pub(super) async fn list_workloads(
    State(s): State<S>,
    Query(p): Query<Page>,
    headers: HeaderMap,
) -> Response {
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
