//! Test control: fault knobs and timing (`POST /mock/control`), the request journal (`GET /mock/journal`), and
//! the middleware that journals every API request (secrets masked) and applies the faults.

use std::collections::HashMap;

use axum::body::{to_bytes, Body};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::{err, Faults, S};
use crate::model::{now, Timing};

pub(super) async fn control(State(s): State<S>, Json(f): Json<Value>) -> Response {
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
        let until = faults.rate_limit_for_s.map(|d| now() + d);
        *s.faults.lock().unwrap() = Faults {
            revoke_tokens: false,
            rate_limit_until: until.or(faults.rate_limit_until),
            rate_limit_for_s: None,
            ..faults
        };
    }
    Json(json!({"ok": true})).into_response()
}

pub(super) async fn journal(State(s): State<S>) -> Response {
    Json(Value::Array(s.journal.lock().unwrap().clone())).into_response()
}

/// Journal every request (secrets masked), then apply the fault knobs to API requests.
pub(super) async fn middleware(State(s): State<S>, req: Request, next: Next) -> Response {
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
            let storm = f.rate_limit_until.is_some_and(|u| now() < u);
            let limited = (storm || f.rate_limit_next > 0).then_some(f.retry_after_s);
            f.rate_limit_next = f
                .rate_limit_next
                .saturating_sub(u32::from(limited.is_some() && !storm));
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
