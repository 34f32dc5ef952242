//! The API operations on one workload: create exactly once (adopting a workload only when its identity is
//! ours), delete, events, pods.

use reqwest::Method;

use super::client::ApiError;
use super::{logs, payload, RunAi, Step};
use crate::warn;

impl RunAi {
    /// Looks a workload up by name (after an ambiguous create): its id, or None when no such workload exists.
    async fn find_by_name(&self, name: &str) -> Result<Option<String>, ApiError> {
        let filter = format!("name=={name},projectId=={}", self.r().project_id);
        let client = self.client().map_err(ApiError::Transport)?;
        let v = client
            .call(
                Method::GET,
                "/api/v1/workloads",
                &[("filterBy", filter)],
                None,
            )
            .await?;
        Ok(v["workloads"]
            .as_array()
            .and_then(|w| w.iter().find(|w| w["name"] == name))
            .and_then(|w| w["id"].as_str())
            .map(str::to_string))
    }

    /// The workload of that name when it is the one this step created (its identity annotation matches);
    /// an error when a workload of that name belongs to something else.
    pub(super) async fn adopt(&self, step: &Step) -> Result<Option<String>, String> {
        let Some(id) = self
            .find_by_name(&step.name)
            .await
            .map_err(|e| format!("cannot look up Run:ai workload {}: {e}", step.name))?
        else {
            return Ok(None);
        };
        let v = self
            .client()?
            .call(
                Method::GET,
                &format!("{}/{id}", step.kind_path()),
                &[],
                None,
            )
            .await
            .map_err(|e| format!("cannot read Run:ai workload {} ({id}): {e}", step.name))?;
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
            )),
        }
    }

    /// Creates the step's workload exactly once: after a lost answer or a conflict, a lookup by name tells
    /// whether ours exists before anything is posted again.
    pub(super) async fn create(&self, step: &Step) -> Result<String, String> {
        let client = self.client()?;
        for attempt in 0..4 {
            match client
                .call(Method::POST, step.kind_path(), &[], Some(&step.payload))
                .await
            {
                Ok(v) => {
                    return v["workloadId"].as_str().map(str::to_string).ok_or_else(|| {
                        format!("Run:ai accepted {} but returned no workloadId", step.name)
                    })
                }
                Err(
                    e @ (ApiError::Transport(_)
                    | ApiError::Status {
                        code: 409 | 500 | 502 | 503 | 504,
                        ..
                    }),
                ) => {
                    warn!(
                        "Creating Run:ai workload {}: {e}; checking whether it exists",
                        step.name
                    );
                    tokio::time::sleep(std::time::Duration::from_millis(200 * (attempt + 1))).await;
                    match self.adopt(step).await? {
                        Some(id) => return Ok(id),
                        None if e.code() == Some(409) => {
                            return Err(format!(
                                "Run:ai reports a name conflict for {} but lists no such workload",
                                step.name
                            ))
                        }
                        None => continue,
                    }
                }
                Err(e @ (ApiError::Auth(_) | ApiError::Tls(_))) => return Err(e.to_string()),
                Err(ApiError::Status { code, message }) => {
                    return Err(format!(
                        "Run:ai rejected workload {} (HTTP {code}): {message}",
                        step.name
                    ))
                }
            }
        }
        Err(format!("could not create Run:ai workload {}", step.name))
    }

    /// Asks for the workload's deletion (one quick retry: on the way out we report rather than wait). Until a
    /// GET answers 404 it counts as a leftover.
    pub(super) async fn delete(
        &self,
        job_id: &str,
        wid: &str,
        step: &Step,
        why: &str,
    ) -> Result<(), String> {
        self.expect_gone(job_id, wid, step, &format!("{why}; deletion not confirmed"));
        let path = format!("{}/{wid}", step.kind_path());
        match self
            .client()?
            .call_brief(Method::DELETE, &path, &[], None)
            .await
        {
            Ok(_) | Err(ApiError::Status { code: 404, .. }) => {
                if let Some(j) = self.jobs.lock().unwrap().get_mut(job_id) {
                    j.delete_sent = true;
                }
                crate::debug!("Deletion of Run:ai workload {} accepted", step.name);
                Ok(())
            }
            Err(e) => {
                let msg = format!("cannot delete Run:ai workload {} ({wid}): {e}", step.name);
                self.set_unconfirmed_reason(wid, msg.clone());
                Err(msg)
            }
        }
    }

    /// Pages the workload's events into `events.txt`; returns the last one ("reason: message"), for messages.
    pub(super) async fn write_events(&self, id: &str, step: &Step, brief: bool) -> Option<String> {
        let client = self.client().ok()?;
        let mut events = Vec::new();
        let mut offset = 0;
        loop {
            let q = [
                ("offset", offset.to_string()),
                ("limit", "500".to_string()),
                ("sortOrder", "asc".to_string()),
            ];
            let path = format!("/api/v1/workloads/{id}/events");
            let r = if brief {
                client.call_brief(Method::GET, &path, &q, None).await
            } else {
                client.call(Method::GET, &path, &q, None).await
            };
            match r {
                Ok(v) => {
                    let page = v["events"].as_array().cloned().unwrap_or_default();
                    let n = page.len();
                    events.extend(page);
                    match v["next"].as_u64() {
                        Some(next) if n > 0 && next as usize > offset => offset = next as usize,
                        _ => break,
                    }
                }
                Err(e) => {
                    warn!("Cannot read the events of {}: {e}", step.name);
                    if events.is_empty() {
                        return None; // keep what an earlier read wrote
                    }
                    break;
                }
            }
        }
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

    pub(super) async fn pods(&self, id: &str) -> Vec<String> {
        let Ok(c) = self.client() else {
            return Vec::new();
        };
        match c
            .call(
                Method::GET,
                &format!("/api/v1/workloads/{id}/pods"),
                &[],
                None,
            )
            .await
        {
            Ok(v) => {
                let mut n: Vec<String> = v["pods"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|p| p["nodeName"].as_str().map(str::to_string))
                    .collect();
                n.sort();
                n.dedup();
                n
            }
            Err(_) => Vec::new(),
        }
    }
}
