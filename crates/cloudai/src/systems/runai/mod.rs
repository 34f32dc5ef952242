//! Run:ai: test launches submitted through the control-plane REST API, monitored with one GET per workload per
//! poll, logs followed from the cluster's log stream into `stdout.txt` as they arrive and events paged into
//! `events.txt`; pre/post-test hooks run as their own workloads around the main one. Every workload we end,
//! whatever the reason, is deleted and its deletion confirmed; what cannot be confirmed is a leftover.

mod client;
mod logs;
pub mod payload;
mod watch;
mod workload;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use serde_json::Value;

use super::hooks::StepKind;
use super::{JobId, JobState, Prepared, System};
use crate::config::system::{RunAiConfig, SystemConfig, SystemKind};
use crate::info;
use crate::results::record::Leftover;
use crate::scenario::TestRun;
use crate::workloads::JobOutcome;
use client::Client;

pub const PAYLOAD_FILE: &str = "runai-workload.json";

/// The workloads of one iteration whose results go to `dir`, in order, as creation requests (and whether each is
/// a distributed workload), as they are written to `runai-workload.json` and sent.
pub fn payloads(cfg: &Arc<SystemConfig>, run: &TestRun, dir: &Path) -> Vec<(Value, bool)> {
    RunAi::new(cfg.clone(), true)
        .map(|r| {
            r.steps(run, dir)
                .into_iter()
                .map(|s| (s.payload, s.distributed))
                .collect()
        })
        .unwrap_or_default()
}

/// One workload of a job: a hook or the test itself.
#[derive(Clone, Debug)]
struct Step {
    kind: StepKind,
    name: String,
    /// Written into the workload (annotation): a workload found under our name is ours only if it matches.
    identity: String,
    distributed: bool,
    payload: Value,
    dir: PathBuf,
    /// How the hook's success is judged (the workload's rule).
    success: crate::workloads::Success,
}

impl Step {
    fn kind_path(&self) -> &'static str {
        if self.distributed {
            "/api/v1/workloads/distributed"
        } else {
            "/api/v1/workloads/trainings"
        }
    }

    fn log_target(&self, r: &RunAiConfig) -> logs::Target {
        logs::Target {
            project_id: r.project_id.clone(),
            cluster_id: r.cluster_id.clone(),
            kind: if self.distributed {
                "distributed"
            } else {
                "training"
            },
            name: self.name.clone(),
        }
    }
}

/// How a step ended, kept while its deletion is being confirmed.
#[derive(Debug)]
struct Ending {
    phase: String,
    failed: bool,
    reason: String,
}

#[derive(Debug, Default)]
struct Job {
    steps: Vec<Step>,
    current: usize,
    workload_id: Option<String>,
    cancel_requested: bool,
    /// The current workload's DELETE was accepted; waiting for it to be gone.
    delete_sent: bool,
    /// The current step ended; its workload is being deleted before the next step starts.
    ending: Option<Ending>,
    /// Give up waiting for the deletion to be confirmed after this.
    gone_by: Option<Instant>,
    /// The current step reached a running phase (its log exists).
    ran: bool,
    log: Option<logs::Follow>,
    /// `stdout.txt` of the current step is final.
    log_settled: bool,
    main_outcome: Option<JobOutcome>,
    degraded_since: Option<Instant>,
    /// Polls in a row whose GET failed (after its own retries).
    read_failures: u32,
    nodes: Vec<String>,
}

pub struct RunAi {
    cfg: Arc<SystemConfig>,
    client: Option<Arc<Client>>,
    jobs: Mutex<HashMap<JobId, Job>>,
    /// Workloads planned by `prepare`, by iteration directory, for `submit`.
    planned: Mutex<HashMap<PathBuf, Vec<Step>>>,
    /// Workloads we asked to delete whose deletion is not confirmed yet, by workload id.
    unconfirmed: Mutex<BTreeMap<String, Leftover>>,
}

impl RunAi {
    pub fn new(cfg: Arc<SystemConfig>, dry_run: bool) -> Result<Self, String> {
        let r = Self::conf(&cfg).clone();
        // The environment wins over the file, so the secret need not be written into a config.
        let client = if dry_run {
            None
        } else {
            let secret = r.secret().ok_or_else(|| {
                format!(
                    "no Run:ai secret for app_id {}: set RUNAI_APP_SECRET, or app_secret in {}",
                    r.app_id,
                    cfg.file.display()
                )
            })?;
            let tls = client::tls_config(r.ca_bundle.as_deref())?;
            Some(Arc::new(Client::new(&r.base_url, &r.app_id, secret, tls)?))
        };
        Ok(Self {
            cfg,
            client,
            jobs: Mutex::default(),
            planned: Mutex::default(),
            unconfirmed: Mutex::default(),
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

    fn client(&self) -> Result<&Arc<Client>, String> {
        self.client
            .as_ref()
            .ok_or_else(|| "no Run:ai client in dry-run".to_string())
    }

    fn step(&self, run: &TestRun, kind: StepKind, dir: &Path, salt: &str) -> Step {
        let tag = kind.tag();
        // the iteration directory names scenario, test, iteration and hook; the salt, this results tree
        let identity = format!("{salt}|{}", dir.display());
        let launch = run.launch();
        let name = if launch.across_nodes(run.num_nodes) {
            // a distributed workload: its pods are named after it by the MPI operator
            payload::mpi_job_name(&[&run.id, tag], &identity, run.num_nodes)
        } else {
            payload::unique_name(&[&run.id, tag], &identity)
        };
        let env = super::job_env(&self.cfg, run);
        let who = payload::Names {
            name: &name,
            identity: &payload::short_hash(&identity),
            run_tag: salt,
        };
        let (payload, distributed) = payload::workload(run, &launch, &who, self.r(), &env);
        Step {
            kind,
            name: name.clone(),
            identity: who.identity.to_string(),
            distributed,
            payload,
            dir: dir.to_path_buf(),
            success: launch.success,
        }
    }

    /// The workloads of one iteration in order: pre-test hooks, the test, post-test hooks. Names are stable for
    /// this results tree.
    fn steps(&self, run: &TestRun, dir: &Path) -> Vec<Step> {
        // the results tree (created exclusively, with its timestamp) names the run: identities are unique per
        // tree and the same again when `resume` rebuilds them
        let root = dir.parent().and_then(Path::parent).unwrap_or(dir);
        let salt = payload::short_hash(&root.display().to_string());
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

    /// Notes that a workload must be gone before we can say nothing is left; cleared when a GET says 404.
    fn expect_gone(&self, job_id: &str, wid: &str, step: &Step, reason: &str) {
        let r = self.r();
        let resource = [
            ("workload_id", wid),
            ("workload_name", step.name.as_str()),
            ("project_id", r.project_id.as_str()),
            ("cluster_id", r.cluster_id.as_str()),
            ("path", &format!("{}/{wid}", step.kind_path())),
            ("base_url", r.base_url.as_str()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let left = Leftover {
            job_id: job_id.to_string(),
            description: format!(
                "Run:ai workload {} (id {wid}, project {})",
                step.name, r.project_id
            ),
            reason: reason.to_string(),
            resource,
        };
        self.unconfirmed
            .lock()
            .unwrap()
            .insert(wid.to_string(), left);
    }

    fn set_unconfirmed_reason(&self, wid: &str, reason: String) {
        if let Some(l) = self.unconfirmed.lock().unwrap().get_mut(wid) {
            l.reason = reason;
        }
    }

    fn confirmed_gone(&self, wid: &str) {
        self.unconfirmed.lock().unwrap().remove(wid);
    }
}

/// Every workload of the system's project by name, with its phase: one list request (`cloudai status`).
pub async fn phases(cfg: &SystemConfig) -> Result<HashMap<String, String>, String> {
    let r = RunAi::conf(cfg);
    let secret = r.secret().ok_or("no Run:ai secret: set RUNAI_APP_SECRET")?;
    let tls = client::tls_config(r.ca_bundle.as_deref())?;
    let c = Client::new(&r.base_url, &r.app_id, secret, tls)?;
    let v = c
        .call_brief(
            reqwest::Method::GET,
            "/api/v1/workloads",
            &[
                ("filterBy", format!("projectId=={}", r.project_id)),
                ("limit", "500".into()),
            ],
            None,
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok(v["workloads"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|w| {
            Some((
                w["name"].as_str()?.to_string(),
                w["phase"]
                    .as_str()
                    .or(w["actualPhase"].as_str())?
                    .to_string(),
            ))
        })
        .collect())
}

/// A plausible container image reference (`[registry/]path[:tag][@digest]`, enroot's `#` accepted).
pub(crate) fn image_problem(url: &str) -> Option<&'static str> {
    let img = payload::image(url);
    if img.trim().is_empty() {
        return Some("is empty");
    }
    if img.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some("contains whitespace");
    }
    if img.contains("://") {
        return Some("is a URL, not an image reference (drop the scheme)");
    }
    let (path, _) = img.split_once('@').unwrap_or((&img, ""));
    let last = path.rsplit('/').next().unwrap_or("");
    if path.starts_with('/') || path.ends_with('/') || path.contains("//") || last.is_empty() {
        return Some("has an empty path component");
    }
    if last.starts_with(':') || last.ends_with(':') {
        return Some("has an empty name or tag");
    }
    if path.chars().any(|c| c.is_ascii_uppercase()) && !path.contains('/') {
        return Some("has upper-case letters in the repository name");
    }
    None
}

/// Jobs advanced at once by one poll.
const POLL_CONCURRENCY: usize = 16;

impl RunAi {
    async fn poll_one(&self, id: &JobId) -> JobState {
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
        state
    }
}

#[async_trait]
impl System for RunAi {
    fn runner_name(&self) -> &'static str {
        "RunAIRunner"
    }

    fn check(&self, run: &TestRun) -> Vec<String> {
        super::container_checks(run, "Run:ai", "one training", self.r().gpus_per_node)
    }

    async fn connect(&self) -> Result<(), String> {
        self.client()?
            .token()
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
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
            test_cmd: run.launch().command_line(),
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
            workload_id: Some(first),
            ..Default::default()
        };
        self.jobs.lock().unwrap().insert(main_name.clone(), job);
        Ok(main_name)
    }

    /// Jobs are advanced a few at a time (a step's end means events, log, deletion): 200 workloads must not
    /// wait for each other in turn, nor all hit the control plane at once.
    async fn poll(&self, ids: &[JobId]) -> Vec<JobState> {
        use futures_util::StreamExt;
        let mut futs: Vec<
            std::pin::Pin<Box<dyn std::future::Future<Output = JobState> + Send + '_>>,
        > = Vec::with_capacity(ids.len());
        for id in ids {
            futs.push(Box::pin(self.poll_one(id)));
        }
        futures_util::stream::iter(futs)
            .buffered(POLL_CONCURRENCY)
            .collect()
            .await
    }

    /// Events first (a deleted workload has none), then DELETE; `poll` reports the job finished once a GET says
    /// the workload is gone.
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
        self.write_events(&wid, &step, true).await;
        self.delete(id, &wid, &step, "cancel requested").await
    }

    async fn attach(
        &self,
        run: &TestRun,
        dir: &Path,
        id: &JobId,
        _job: &Prepared,
    ) -> Result<(), String> {
        let steps = self.steps(run, dir);
        let main = steps
            .iter()
            .position(|s| s.kind == StepKind::Main)
            .expect("a plan has its main step");
        if steps[main].name != *id {
            return Err(format!(
                "the journal names workload {id}, this tree's test {} would be {}",
                run.id, steps[main].name
            ));
        }
        // the step under way is the last one that still exists (ended ones were deleted); none: start over
        // after the main step when its output is settled, else from the first step
        let mut current = None;
        for (i, st) in steps.iter().enumerate().rev() {
            if let Some(wid) = self.adopt(st).await? {
                current = Some((i, Some(wid)));
                break;
            }
        }
        let (current, workload_id) = current.unwrap_or_else(|| {
            if dir.join("stdout.txt").exists() {
                (main + 1, None)
            } else {
                (0, None)
            }
        });
        if let Some(w) = &workload_id {
            info!(
                "Re-attached to Run:ai workload {} ({w})",
                steps[current].name
            );
        }
        let job = Job {
            steps,
            current,
            workload_id,
            ..Default::default()
        };
        self.jobs.lock().unwrap().insert(id.clone(), job);
        Ok(())
    }

    async fn find_submitted(&self, run: &TestRun, dir: &Path) -> Option<JobId> {
        let steps = self.steps(run, dir);
        let main = steps
            .iter()
            .find(|s| s.kind == StepKind::Main)?
            .name
            .clone();
        for st in &steps {
            if let Ok(Some(_)) = self.adopt(st).await {
                return Some(main);
            }
        }
        None
    }

    fn nodes(&self, id: &JobId) -> Vec<String> {
        self.jobs
            .lock()
            .unwrap()
            .get(id)
            .map(|j| j.nodes.clone())
            .unwrap_or_default()
    }

    fn leftovers(&self) -> Vec<Leftover> {
        self.unconfirmed.lock().unwrap().values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::image_problem;

    #[test]
    fn image_references() {
        for ok in [
            "nvcr.io#nvidia/pytorch:25.01-py3",
            "ghcr.io/x/y:1",
            "ubuntu",
            "registry:5000/a/b@sha256:abc",
        ] {
            assert_eq!(image_problem(ok), None, "{ok}");
        }
        for bad in [
            "",
            "  ",
            "https://nvcr.io/x",
            "a//b",
            "x/",
            "x:",
            "nv cr.io/x",
        ] {
            assert!(image_problem(bad).is_some(), "{bad:?}");
        }
    }
}
