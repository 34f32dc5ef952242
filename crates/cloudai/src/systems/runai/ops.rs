//! The API operations on one workload: create exactly once (adopting a workload only when its identity is
//! ours), delete, events, pods.

use reqwest::Method;

use super::client::ApiError;
use super::plan::Step;
use super::{logs, payload, state, RunAi};
use crate::systems::{ErrorKind, SystemError};
use crate::warn;

impl RunAi {
    /// Looks a workload up by name (after an ambiguous create): its id, or None when no such workload exists
    /// (a deleted one the API still shows does not count).
    async fn find_by_name(&self, name: &str) -> Result<Option<String>, ApiError> {
        let filter = format!("name=={name},projectId=={}", self.r().project_id);
        let client = self.client().map_err(ApiError::Transport)?;
        let list = client
            .list_all(
                "/api/v1/workloads",
                "workloads",
                &[("filterBy", filter)],
                false,
            )
            .await?;
        Ok(list
            .iter()
            .filter(|w| w["name"] == name && !state::deleted(w))
            .find_map(|w| w["id"].as_str())
            .map(str::to_string))
    }

    /// The workload of that name when it is the one this step created (its identity annotation matches);
    /// an error when a workload of that name belongs to something else.
    pub(super) async fn adopt_workload(&self, step: &Step) -> Result<Option<String>, SystemError> {
        let Some(id) = self
            .find_by_name(&step.name)
            .await
            .map_err(|e| e.doing(&format!("cannot look up Run:ai workload {}", step.name)))?
        else {
            return Ok(None);
        };
        let v = self
            .client()?
            .call(
                Method::GET,
                &format!("{}/{id}", step.spec.kind_path()),
                &[],
                None,
            )
            .await
            .map_err(|e| e.doing(&format!("cannot read Run:ai workload {} ({id})", step.name)))?;
        match payload::identity_of(&v) {
            Some(i) if i == step.identity => Ok(Some(id)),
            other => Err(format!(
                "Run:ai already has a workload named {} (id {id}, project {}) that this run did not create \
                 (its {} is {}, ours {}); not adopting it: delete it or change the test id",
                step.name,
                self.r().project_id,
                payload::IDENTITY,
                other.unwrap_or("missing"),
                step.identity
            )
            .into()),
        }
    }

    /// Creates the step's workload exactly once: after a lost answer or a conflict, a lookup by name tells
    /// whether ours exists before anything is posted again. A control plane that kept failing (no answer, 429,
    /// 5xx) while the lookups found nothing is a transient error: the engine tries again later, and the lookup
    /// makes that safe too.
    pub(super) async fn create_workload(&self, step: &Step) -> Result<String, SystemError> {
        let client = self.client()?;
        let mut last = None;
        for attempt in 0..4 {
            match client
                .call(
                    Method::POST,
                    step.spec.kind_path(),
                    &[],
                    Some(&step.spec.payload),
                )
                .await
            {
                Ok(v) => {
                    return v["workloadId"].as_str().map(str::to_string).ok_or_else(|| {
                        format!("Run:ai accepted {} but returned no workloadId", step.name).into()
                    })
                }
                Err(
                    e @ (ApiError::Transport(_)
                    | ApiError::Status {
                        code: 409 | 429 | 500 | 502 | 503 | 504,
                        ..
                    }),
                ) => {
                    warn!(
                        "Creating Run:ai workload {}: {e}; checking whether it exists",
                        step.name
                    );
                    tokio::time::sleep(std::time::Duration::from_millis(200 * (attempt + 1))).await;
                    match self.adopt_workload(step).await? {
                        Some(id) => return Ok(id),
                        None if e.code() == Some(409) => {
                            return Err(format!(
                                "Run:ai reports a name conflict for {} but lists no such workload",
                                step.name
                            )
                            .into())
                        }
                        None => last = Some(e),
                    }
                }
                Err(e @ (ApiError::Auth(_) | ApiError::Tls(_))) => {
                    return Err(SystemError::refused(e.to_string()))
                }
                Err(ApiError::Status { code, message }) => {
                    return Err(SystemError::new(
                        ErrorKind::of_http(code).creating(),
                        format!(
                            "Run:ai rejected workload {} (HTTP {code}): {message}",
                            step.name
                        ),
                    ))
                }
            }
        }
        let why = last.map(|e| format!(": {e}")).unwrap_or_default();
        Err(SystemError::transient(format!(
            "could not create Run:ai workload {} (4 tries; none of it exists){why}",
            step.name
        )))
    }

    /// Asks for the workload's deletion (one quick retry: on the way out we report rather than wait).
    pub(super) async fn delete_workload(&self, wid: &str, step: &Step) -> Result<(), SystemError> {
        let path = format!("{}/{wid}", step.spec.kind_path());
        match self
            .client()?
            .call_brief(Method::DELETE, &path, &[], None)
            .await
        {
            Ok(_) | Err(ApiError::Status { code: 404, .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Whether the workload is gone: a 404, or the API's own deleted state (`deletedAt`).
    pub(super) async fn workload_gone(&self, wid: &str) -> Result<bool, SystemError> {
        let path = format!("/api/v1/workloads/{wid}");
        match self
            .client()?
            .call_brief(Method::GET, &path, &[], None)
            .await
        {
            Err(ApiError::Status { code: 404, .. }) => Ok(true),
            Ok(v) => Ok(state::deleted(&v)),
            Err(e) => Err(e.into()),
        }
    }

    /// Pages the workload's events into `events.txt`; returns the last one ("reason: message"), for messages.
    pub(super) async fn write_events(&self, id: &str, step: &Step, brief: bool) -> Option<String> {
        let client = self.client().ok()?;
        let path = format!("/api/v1/workloads/{id}/events");
        let q = [("sortOrder", "asc".to_string())];
        let events = match client.list_all(&path, "events", &q, brief).await {
            Ok(e) => e,
            Err(e) => {
                warn!("Cannot read the events of {}: {e}", step.name);
                return None; // keep what an earlier read wrote
            }
        };
        let text: String = events
            .iter()
            .map(|e| format!("{}\n", logs::event_line(e)))
            .collect();
        if let Err(e) =
            crate::util::fsx::write_atomic(&step.dir.join("events.txt"), text.as_bytes())
        {
            warn!("Cannot write events.txt: {e}");
        }
        events.last().map(|e| {
            format!(
                "{}: {}",
                e["reason"].as_str().unwrap_or(""),
                e["message"].as_str().unwrap_or("")
            )
        })
    }

    /// The nodes the workload's pods run on, sorted.
    pub(super) async fn pods(&self, id: &str) -> Vec<String> {
        let Ok(c) = self.client() else {
            return Vec::new();
        };
        let path = format!("/api/v1/workloads/{id}/pods");
        let mut n: Vec<String> = match c.list_all(&path, "pods", &[], false).await {
            // the launcher of a distributed workload runs anywhere; the test ran on the workers' nodes
            Ok(pods) => pods
                .iter()
                .filter(|p| !p["name"].as_str().unwrap_or("").ends_with("-launcher"))
                .filter_map(|p| p["nodeName"].as_str().map(str::to_string))
                .collect(),
            Err(e) => {
                warn!("Cannot list the pods of workload {id}: {e}");
                Vec::new()
            }
        };
        n.sort();
        n.dedup();
        n
    }
}
