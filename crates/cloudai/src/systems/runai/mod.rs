//! Run:ai: NCCL tests submitted through the control-plane REST API, monitored with one GET per workload per
//! poll, logs read from the cluster's log stream and events paged into `events.txt`; pre/post-test hooks run
//! as their own workloads around the main one.

mod client;
mod logs;
pub mod payload;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use reqwest::Method;
use serde_json::Value;

use super::{JobId, JobState, Prepared, System};
use crate::config::system::{RunAiConfig, Secret, SystemConfig, SystemKind};
use crate::results::EndReason;
use crate::scenario::TestRun;
use crate::workloads::JobOutcome;
use crate::{info, warn};
use client::{ApiError, Client};

pub const PAYLOAD_FILE: &str = "runai-workload.json";
const DEGRADED_GRACE_S: u64 = 60;
const MAX_READ_FAILURES: u32 = 10;

#[derive(Clone, Debug, PartialEq)]
enum StepKind {
    Pre,
    Main,
    Post,
}

/// One workload of a job: a hook or the test itself.
#[derive(Clone, Debug)]
struct Step {
    kind: StepKind,
    name: String,
    distributed: bool,
    payload: Value,
    dir: PathBuf,
    /// How the hook's success is judged (the NCCL summary line in its output).
    check_output: bool,
}

#[derive(Debug)]
struct Job {
    steps: Vec<Step>,
    current: usize,
    workload_id: Option<String>,
    cancel_requested: bool,
    main_outcome: Option<JobOutcome>,
    degraded_since: Option<std::time::Instant>,
    /// Polls in a row whose GET failed (after its own retries).
    read_failures: u32,
    nodes: Vec<String>,
}

pub struct RunAi {
    cfg: Arc<SystemConfig>,
    client: Option<Client>,
    jobs: Mutex<HashMap<JobId, Job>>,
    /// Unique per results tree, so names do not collide between runs.
    salt: Mutex<String>,
    /// Workloads planned by `prepare`, by iteration directory, for `submit`.
    planned: Mutex<HashMap<PathBuf, Vec<Step>>>,
}

impl RunAi {
    pub fn new(cfg: Arc<SystemConfig>, dry_run: bool) -> Result<Self, String> {
        let r = Self::conf(&cfg).clone();
        // The environment wins over the file, so the secret need not be written into a config.
        let secret = std::env::var("RUNAI_APP_SECRET")
            .map(Secret::new)
            .unwrap_or_else(|_| r.app_secret.clone());
        let client = if dry_run {
            None
        } else {
            Some(Client::new(&r.base_url, &r.app_id, secret)?)
        };
        Ok(Self {
            cfg,
            client,
            jobs: Mutex::default(),
            salt: Mutex::default(),
            planned: Mutex::default(),
        })
    }

    fn conf(cfg: &SystemConfig) -> &RunAiConfig {
        match &cfg.kind {
            SystemKind::RunAi(r) => r,
            _ => unreachable!("Run:ai system built from another config"),
        }
    }

    fn r(&self) -> &RunAiConfig {
        Self::conf(&self.cfg)
    }

    fn client(&self) -> Result<&Client, String> {
        self.client
            .as_ref()
            .ok_or_else(|| "no Run:ai client in dry-run".to_string())
    }

    fn step(&self, run: &TestRun, kind: StepKind, dir: &Path, salt: &str) -> Step {
        let tag = match kind {
            StepKind::Pre => "pre",
            StepKind::Main => "",
            StepKind::Post => "post",
        };
        let name = payload::k8s_name(&[
            &run.id,
            tag,
            &payload::short_hash(&format!("{salt}{}", dir.display())),
        ]);
        let env = super::job_env(&self.cfg, run);
        let (payload, distributed) = payload::nccl(
            run,
            &name,
            &self.r().project_id,
            &self.r().cluster_id,
            self.r().gpus_per_node,
            &env,
        );
        Step {
            kind,
            name,
            distributed,
            payload,
            dir: dir.to_path_buf(),
            check_output: true,
        }
    }

    /// The workloads of one iteration in order: pre-test hooks, the test, post-test hooks. Names are stable for
    /// this results tree.
    fn steps(&self, run: &TestRun, dir: &Path) -> Vec<Step> {
        let salt = {
            let mut s = self.salt.lock().unwrap();
            if s.is_empty() {
                *s = chrono::Local::now().format("%Y%m%d%H%M%S%f").to_string();
            }
            s.clone()
        };
        let hooks = |h: &Option<Arc<crate::scenario::HookScenario>>,
                     kind: StepKind,
                     sub: &str|
         -> Vec<Step> {
            h.iter()
                .flat_map(|h| h.test_runs.iter())
                .map(|tr| self.step(tr, kind.clone(), &dir.join(sub).join(&tr.test.name), &salt))
                .collect()
        };
        let mut steps = hooks(&run.pre_test, StepKind::Pre, "pre_test");
        steps.push(self.step(run, StepKind::Main, dir, &salt));
        steps.extend(hooks(&run.post_test, StepKind::Post, "post_test"));
        steps
    }

    fn typed_path(step: &Step) -> &'static str {
        if step.distributed {
            "/api/v1/workloads/distributed"
        } else {
            "/api/v1/workloads/trainings"
        }
    }

    /// Looks a workload up by name (after an ambiguous create).
    async fn find_by_name(&self, name: &str) -> Result<Option<String>, ApiError> {
        let filter = format!("name=={name},projectId=={}", self.r().project_id);
        let v = self
            .client()
            .map_err(ApiError::Transport)?
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

    /// Creates the step's workload exactly once: after a lost answer or a conflict, the name tells whether it
    /// exists before anything is posted again.
    async fn create(&self, step: &Step) -> Result<String, String> {
        let client = self.client()?;
        for attempt in 0..4 {
            match client
                .call(
                    Method::POST,
                    Self::typed_path(step),
                    &[],
                    Some(&step.payload),
                )
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
                    match self.find_by_name(&step.name).await {
                        Ok(Some(id)) => return Ok(id),
                        Ok(None) if e.code() == Some(409) => {
                            return Err(format!(
                                "Run:ai reports a name conflict for {} but lists no such workload",
                                step.name
                            ))
                        }
                        Ok(None) => continue,
                        Err(le) => {
                            return Err(format!(
                                "cannot create {} ({e}) nor look it up ({le})",
                                step.name
                            ))
                        }
                    }
                }
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

    /// Events and logs of a finished step into its directory; returns the last event, for reasons.
    async fn collect_step(&self, id: &str, step: &Step) -> Option<String> {
        let client = self.client().ok()?;
        let mut events = Vec::new();
        let mut offset = 0;
        loop {
            let q = [
                ("offset", offset.to_string()),
                ("limit", "500".to_string()),
                ("sortOrder", "asc".to_string()),
            ];
            match client
                .call(
                    Method::GET,
                    &format!("/api/v1/workloads/{id}/events"),
                    &q,
                    None,
                )
                .await
            {
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
        let kind = if step.distributed {
            "distributed"
        } else {
            "training"
        };
        match logs::fetch(
            client,
            &self.r().project_id,
            &self.r().cluster_id,
            kind,
            &step.name,
        )
        .await
        {
            Ok(out) => {
                if let Err(e) =
                    crate::util::fsx::write_atomic(&step.dir.join("stdout.txt"), out.as_bytes())
                {
                    warn!("Cannot write stdout.txt: {e}");
                }
            }
            Err(e) => warn!("Cannot read the logs of {}: {e}", step.name),
        }
        events.last().map(|e| {
            format!(
                "{}: {}",
                e["reason"].as_str().unwrap_or(""),
                e["message"].as_str().unwrap_or("")
            )
        })
    }

    async fn pods(&self, id: &str) -> Vec<String> {
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

    /// Advances one job by one observation; returns its state for the runner.
    async fn advance(&self, job_id: &str) -> JobState {
        let (step, wid, cancel) = {
            let jobs = self.jobs.lock().unwrap();
            let Some(j) = jobs.get(job_id) else {
                return JobState::Finished(JobOutcome::default());
            };
            (
                j.steps[j.current].clone(),
                j.workload_id.clone(),
                j.cancel_requested,
            )
        };
        let Some(wid) = wid else {
            return JobState::Pending(super::Queued::new("Submitting", ""));
        };
        let client = match self.client() {
            Ok(c) => c,
            Err(_) => return JobState::Finished(JobOutcome::default()),
        };
        let path = format!("{}/{wid}", Self::typed_path(&step));
        let v = match client.call(Method::GET, &path, &[], None).await {
            Ok(v) => v,
            Err(ApiError::Status { code: 404, .. }) => {
                let end = if cancel {
                    EndReason::Cancelled
                } else {
                    EndReason::Exited
                };
                let failure = (!cancel).then(|| {
                    format!(
                        "Run:ai workload {} disappeared (deleted outside cloudai)",
                        step.name
                    )
                });
                return JobState::Finished(JobOutcome {
                    end: Some(end),
                    failure,
                    state: Some("Deleted".into()),
                    ..Default::default()
                });
            }
            Err(e) => {
                let mut jobs = self.jobs.lock().unwrap();
                let n = jobs.get_mut(job_id).map_or(0, |j| {
                    j.read_failures += 1;
                    j.read_failures
                });
                // A control plane that keeps refusing (403, a deleted project) will not recover on its own.
                if n >= MAX_READ_FAILURES && e.code().is_some_and(|c| (400..500).contains(&c)) {
                    let failure = format!(
                        "cannot read Run:ai workload {} ({n} polls in a row): {e}",
                        step.name
                    );
                    return JobState::Finished(JobOutcome {
                        failure: Some(failure),
                        ..Default::default()
                    });
                }
                warn!("Cannot read Run:ai workload {}: {e}; will retry", step.name);
                return JobState::Running;
            }
        };
        if let Some(j) = self.jobs.lock().unwrap().get_mut(job_id) {
            j.read_failures = 0;
        }
        let phase = v["actualPhase"].as_str().unwrap_or("Unknown").to_string();
        if cancel {
            return JobState::Running; // waiting for it to be gone (404)
        }
        let failed = match phase.as_str() {
            "Creating" | "Pending" | "Initializing" | "Resuming" => {
                return JobState::Pending(super::Queued::new(phase, ""))
            }
            "Completed" => false,
            "Failed" | "Stopped" => true,
            "Degraded" => {
                let mut jobs = self.jobs.lock().unwrap();
                let j = jobs.get_mut(job_id).unwrap();
                let since = *j.degraded_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed().as_secs() < DEGRADED_GRACE_S {
                    return JobState::Running;
                }
                true
            }
            _ => return JobState::Running,
        };
        // the step ended: collect it, then move on
        let last_event = self.collect_step(&wid, &step).await;
        let nodes = self.pods(&wid).await;
        let reason = format!(
            "Run:ai workload {} ended in phase {phase}{}",
            step.name,
            last_event
                .map(|e| format!(" (last event {e})"))
                .unwrap_or_default()
        );
        let mut jobs = self.jobs.lock().unwrap();
        let j = jobs.get_mut(job_id).unwrap();
        j.degraded_since = None;
        match step.kind {
            StepKind::Pre => {
                let ok = !failed
                    && (!step.check_output
                        || std::fs::read_to_string(step.dir.join("stdout.txt"))
                            .is_ok_and(|s| s.contains("Avg bus bandwidth")));
                if !ok {
                    let failure = format!(
                        "pre-test {} failed, so the test was not run: {reason}",
                        step.name
                    );
                    return JobState::Finished(JobOutcome {
                        failure: Some(failure),
                        state: Some(phase),
                        ..Default::default()
                    });
                }
            }
            StepKind::Main => {
                j.nodes = nodes;
                j.main_outcome = Some(JobOutcome {
                    exit_code: Some(if failed { 1 } else { 0 }),
                    state: Some(phase.clone()),
                    failure: failed.then(|| reason.clone()),
                    ..Default::default()
                });
            }
            StepKind::Post => {}
        }
        j.current += 1;
        j.workload_id = None;
        if j.current >= j.steps.len() {
            return JobState::Finished(j.main_outcome.clone().unwrap_or_default());
        }
        JobState::Running
    }
}

#[async_trait]
impl System for RunAi {
    fn runner_name(&self) -> &'static str {
        "RunAIRunner"
    }

    fn prepare(&self, run: &TestRun, _iteration: u64, dir: &Path) -> Result<Prepared, String> {
        let steps = self.steps(run, dir);
        let files = steps
            .iter()
            .map(|st| {
                let rel = st
                    .dir
                    .strip_prefix(dir)
                    .unwrap_or(Path::new(""))
                    .join(PAYLOAD_FILE);
                (
                    rel.display().to_string(),
                    serde_json::to_string_pretty(&st.payload).unwrap_or_default(),
                )
            })
            .collect();
        let main = steps
            .iter()
            .find(|st| st.kind == StepKind::Main)
            .expect("a plan has its main step");
        let spec = if main.distributed {
            &main.payload["masterSpec"]
        } else {
            &main.payload["spec"]
        };
        let full = format!(
            "{} {}",
            spec["command"].as_str().unwrap_or(""),
            spec["args"].as_str().unwrap_or("")
        );
        self.planned
            .lock()
            .unwrap()
            .insert(dir.to_path_buf(), steps);
        Ok(Prepared {
            test_cmd: run.workload.command(&run.test),
            full_cmd: full,
            files,
            env: super::job_env(&self.cfg, run),
        })
    }

    async fn submit(
        &self,
        run: &TestRun,
        dir: &Path,
        _job: &Prepared,
        dry_run: bool,
    ) -> Result<JobId, String> {
        let planned = self.planned.lock().unwrap().remove(dir);
        let steps = planned.unwrap_or_else(|| self.steps(run, dir));
        let main_name = steps
            .iter()
            .find(|s| s.kind == StepKind::Main)
            .map(|s| s.name.clone())
            .unwrap_or_default();
        if dry_run {
            info!(
                "Would submit Run:ai workload {main_name} ({} workload(s) with hooks)",
                steps.len()
            );
            return Ok(main_name);
        }
        let first = self.create(&steps[0]).await?;
        info!("Submitted Run:ai workload {} ({first})", steps[0].name);
        let job = Job {
            steps,
            current: 0,
            workload_id: Some(first),
            cancel_requested: false,
            main_outcome: None,
            degraded_since: None,
            read_failures: 0,
            nodes: Vec::new(),
        };
        self.jobs.lock().unwrap().insert(main_name.clone(), job);
        Ok(main_name)
    }

    async fn poll(&self, ids: &[JobId]) -> Vec<JobState> {
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let mut state = self.advance(id).await;
            // a step ended and the next one is due: submit it now
            let next = {
                let jobs = self.jobs.lock().unwrap();
                jobs.get(id)
                    .filter(|j| {
                        j.workload_id.is_none() && j.current < j.steps.len() && !j.cancel_requested
                    })
                    .map(|j| j.steps[j.current].clone())
            };
            if let (Some(step), false) = (next, matches!(state, JobState::Finished(_))) {
                match self.create(&step).await {
                    Ok(wid) => {
                        info!("Submitted Run:ai workload {} ({wid})", step.name);
                        if let Some(j) = self.jobs.lock().unwrap().get_mut(id) {
                            j.workload_id = Some(wid);
                        }
                    }
                    Err(e) => {
                        state = JobState::Finished(JobOutcome {
                            failure: Some(e),
                            ..Default::default()
                        })
                    }
                }
            }
            out.push(state);
        }
        out
    }

    async fn cancel(&self, id: &JobId) -> Result<(), String> {
        let (step, wid) = {
            let mut jobs = self.jobs.lock().unwrap();
            let Some(j) = jobs.get_mut(id) else {
                return Ok(());
            };
            j.cancel_requested = true;
            (
                j.steps[j.current.min(j.steps.len() - 1)].clone(),
                j.workload_id.clone(),
            )
        };
        let Some(wid) = wid else { return Ok(()) };
        match self
            .client()?
            .call(
                Method::DELETE,
                &format!("{}/{wid}", Self::typed_path(&step)),
                &[],
                None,
            )
            .await
        {
            Ok(_) | Err(ApiError::Status { code: 404, .. }) => {
                info!("Deleted Run:ai workload {}", step.name);
                Ok(())
            }
            Err(e) => Err(format!("cannot delete Run:ai workload {}: {e}", step.name)),
        }
    }

    fn nodes(&self, id: &JobId) -> Vec<String> {
        self.jobs
            .lock()
            .unwrap()
            .get(id)
            .map(|j| j.nodes.clone())
            .unwrap_or_default()
    }
}
