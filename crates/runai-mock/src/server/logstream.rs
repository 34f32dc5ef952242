//! The cluster's log stream (the WebSocket the runai CLI reads), with follow semantics.

use axum::extract::ws::{Message, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};

use super::{err, Shared, S};
use crate::model::{self, now, Workload};

/// The cluster's log stream: one message per line; while running, lines trickle out over the run time.
pub(super) async fn logs(
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
    let cut = {
        let mut f = s.faults.lock().unwrap();
        std::mem::take(&mut f.cut_log_after_lines)
    };
    ws.on_upgrade(move |mut socket| async move {
        // follow semantics: line i is out once i/n of the run time has passed; the stream ends when the
        // workload ends or is deleted (its pods killed), so a hang's stream stays open until deletion
        let lines: Vec<String> = w.stdout.split_inclusive('\n').map(str::to_string).collect();
        let undeleted = Workload {
            deleted_at: None,
            ..w.clone()
        };
        let tl = model::timeline(&undeleted, f64::MAX);
        // the run under way (a preempted workload starts over with a new log)
        let run_start = tl
            .iter()
            .rfind(|(at, p)| *p == "Running" && *at <= t)
            .map_or(t, |(at, _)| *at);
        // (deleted, ended): deletion kills the stream at once; an ended workload's output is all out
        let state = |s: &Shared| {
            let data = s.data.lock().unwrap();
            data.workloads
                .iter()
                .find(|x| x.id == id)
                .map_or((true, true), |x| {
                    // deletion or preemption kills the pod, and its stream with it
                    let phase = model::phase(x, now());
                    let gone = x.deleted_at.is_some() || phase == "Pending";
                    (gone, gone || model::is_terminal(phase))
                })
        };
        let total = lines.len().max(1) as f64;
        for (i, line) in lines.into_iter().enumerate() {
            if cut > 0 && i == cut as usize {
                // dropped without a Close frame
                return;
            }
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
