//! Run:ai: test launches submitted through the control-plane REST API and run by the shared step machine
//! ([`crate::systems::objects`]): each poll reads the workloads (one GET each, or one paged list for many), logs
//! are followed from the cluster's log stream into `stdout.txt` as they arrive, events paged into `events.txt`;
//! pre/post-test hooks run as their own workloads around the main one. Every workload we end is deleted and its
//! deletion confirmed before the next step.

mod client;
mod facts;
pub mod fleet;
mod logs;
pub mod nodes;
mod observe;
mod ops;
pub mod payload;
pub mod plan;
mod proxy;
mod state;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use super::objects::{self, Backend, Ending, Naming, Seen};
use crate::config::system::{RunAiConfig, SystemConfig, SystemKind};
use crate::results::record::Attempt;
use crate::scenario::TestRun;
use crate::systems::SystemError;
use crate::workloads::Launch;
use client::Client;
use plan::{Spec, Step};

pub(crate) const PAYLOAD_FILE: &str = "runai-workload.json";

/// The workloads of one iteration whose results go to `dir`, in order, as creation requests (and whether each is
/// a distributed workload), as they are written to `runai-workload.json` and sent.
pub fn payloads(cfg: &Arc<SystemConfig>, run: &TestRun, dir: &Path) -> Vec<(Value, bool)> {
    objects::plan(&RunAi::new(cfg.clone()), run, dir)
        .into_iter()
        .map(|s| (s.spec.payload, s.spec.distributed))
        .collect()
}

/// The Run:ai side of the step machine: a project's trainings and distributed workloads.
pub struct RunAi {
    cfg: Arc<SystemConfig>,
    /// Made by `connect`.
    client: std::sync::OnceLock<Arc<Client>>,
    /// The cluster's and the project's facts, read once per run.
    facts: tokio::sync::OnceCell<Facts>,
    /// The project's workloads by id from this poll's list, each taken by the first look at it.
    listed: std::sync::Mutex<HashMap<String, Value>>,
}

/// From this many jobs in a poll on, their workloads are read with one paged list instead of one GET each.
const LIST_FROM: usize = 4;

/// What the log stream's address needs: the cluster's domain and the project's name.
#[derive(Debug)]
struct Facts {
    domain: String,
    project: String,
}

/// The system for a Run:ai config: its client is made by `connect` (a dry-run never connects, so it needs no
/// secret).
pub fn system(cfg: Arc<SystemConfig>) -> objects::Stepped<RunAi> {
    objects::Stepped::new(RunAi::new(cfg))
}

impl RunAi {
    pub fn new(cfg: Arc<SystemConfig>) -> Self {
        Self {
            cfg,
            client: std::sync::OnceLock::new(),
            facts: tokio::sync::OnceCell::new(),
            listed: std::sync::Mutex::default(),
        }
    }

    /// The REST client, made once from the config (the environment's secret wins over the file's, so the secret
    /// need not be written into a config).
    fn make_client(&self) -> Result<&Arc<Client>, String> {
        if let Some(c) = self.client.get() {
            return Ok(c);
        }
        let r = self.r();
        let secret = r.secret().ok_or_else(|| {
            format!(
                "no Run:ai secret for app_id {}: set RUNAI_APP_SECRET, or app_secret in {}",
                r.app_id,
                self.cfg.file.display()
            )
        })?;
        let tls = client::tls_config(r.ca_bundle.as_deref())?;
        let c = Arc::new(Client::new(&r.base_url, &r.app_id, secret, tls)?);
        Ok(self.client.get_or_init(|| c))
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
            .get()
            .ok_or_else(|| "not connected to the Run:ai control plane".to_string())
    }

    /// The cluster's domain and the project's name, read once (and proving both exist and belong together).
    async fn facts(&self) -> Result<&Facts, String> {
        self.facts
            .get_or_try_init(|| async {
                let c = self.client()?;
                let r = self.r();
                let project = facts::project(c, &r.project_id).await?;
                if let Some(other) = project["clusterId"].as_str() {
                    if !other.is_empty() && other != r.cluster_id {
                        return Err(format!(
                            "project {} ({}) belongs to cluster {other}, not to cluster_id {} of {}",
                            r.project_id,
                            project["name"].as_str().unwrap_or("?"),
                            r.cluster_id,
                            self.cfg.file.display()
                        ));
                    }
                }
                let cluster = facts::cluster(c, &r.cluster_id).await?;
                let domain = cluster["domain"]
                    .as_str()
                    .filter(|d| !d.is_empty())
                    .ok_or_else(|| {
                        format!(
                            "cluster {} has no domain in /api/v1/clusters: no log stream",
                            r.cluster_id
                        )
                    })?;
                Ok(Facts {
                    domain: domain.to_string(),
                    project: project["name"].as_str().unwrap_or_default().to_string(),
                })
            })
            .await
    }

    /// The log stream of a step's workload.
    async fn log_url(&self, step: &Step) -> Result<String, String> {
        let f = self.facts().await?;
        Ok(logs::stream_url(
            &f.domain,
            &f.project,
            step.spec.log_kind(),
            &step.name,
        ))
    }
}

/// The recorded workloads as the control plane shows them now (`cloudai status`): one paged list.
pub async fn live(
    ids: &[&str],
    cfg: &SystemConfig,
) -> Result<HashMap<String, super::Live>, String> {
    Ok(super::Live::from_phases(ids, &phases(cfg).await?))
}

/// Every workload of the system's project by name, with its phase and why it waits (`cloudai status`): one paged
/// list.
pub async fn phases(cfg: &SystemConfig) -> Result<HashMap<String, (String, String)>, String> {
    let r = RunAi::conf(cfg);
    let secret = r.secret().ok_or("no Run:ai secret: set RUNAI_APP_SECRET")?;
    let tls = client::tls_config(r.ca_bundle.as_deref())?;
    let c = Client::new(&r.base_url, &r.app_id, secret, tls)?;
    let list = c
        .list_all(
            "/api/v1/workloads",
            "workloads",
            &[("filterBy", format!("projectId=={}", r.project_id))],
            true,
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok(list
        .iter()
        .filter_map(|w| {
            let reason = match state::evaluate(w) {
                state::Phase::Waiting { reason, .. } => reason,
                _ => String::new(),
            };
            Some((
                w["name"].as_str()?.to_string(),
                (state::phase(w).to_string(), reason),
            ))
        })
        .collect())
}

#[async_trait]
impl Backend for RunAi {
    type Spec = Spec;
    /// The workload id the API gave it.
    type Handle = String;
    type Watch = observe::Watch;

    const RUNNER: &'static str = "RunAIRunner";
    const FILE: &'static str = PAYLOAD_FILE;
    const STEP_PER_NODE: bool = true;

    fn config(&self) -> &Arc<SystemConfig> {
        &self.cfg
    }

    /// Run:ai has no workload's own object ([`Backend::own_object`] is none).
    fn spec(
        &self,
        run: &TestRun,
        launch: &Launch,
        env: &[(String, String)],
        n: &Naming,
        _own: Option<crate::workloads::object::OwnObject>,
    ) -> Spec {
        plan::spec(run, launch, self.r(), env, n)
    }

    fn render(spec: &Spec) -> String {
        serde_json::to_string_pretty(&spec.payload).unwrap_or_default()
    }

    fn full_cmd(spec: &Spec) -> String {
        spec.full_cmd()
    }

    fn check(&self, run: &TestRun) -> Vec<String> {
        plan::check(run, self.r(), &crate::systems::job_env(&self.cfg, run))
    }

    /// The credentials, then the configured cluster and project (a placeholder `cluster_id` is named here, not at
    /// the first submission).
    async fn connect(&self) -> Result<(), SystemError> {
        let client = self.make_client()?;
        let r = self.r();
        if !facts::is_uuid(&r.cluster_id) {
            return Err(format!(
                "cluster_id {:?} in {} is not a cluster UUID (like 71f69d83-ba66-4822-adf5-55ce55efd210); the \
                 Run:ai UI shows it under Resources → Clusters, and GET /api/v1/clusters lists it as `uuid`",
                r.cluster_id,
                self.cfg.file.display()
            )
            .into());
        }
        client.token().await?;
        Ok(self.facts().await.map(|_| ())?)
    }

    fn describe(&self, step: &Step, wid: &String) -> String {
        format!(
            "Run:ai workload {} (id {wid}, project {})",
            step.name,
            self.r().project_id
        )
    }

    fn leftover(&self, step: &Step, wid: &String) -> (String, BTreeMap<String, String>) {
        let r = self.r();
        let resource = [
            ("workload_id", wid.as_str()),
            ("workload_name", step.name.as_str()),
            ("project_id", r.project_id.as_str()),
            ("cluster_id", r.cluster_id.as_str()),
            ("path", &format!("{}/{wid}", step.spec.kind_path())),
            ("base_url", r.base_url.as_str()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        (wid.clone(), resource)
    }

    fn gone_wait(&self) -> Duration {
        observe::gone_wait()
    }

    /// Many jobs: the project's workloads in one paged list (those it misses are read one by one).
    async fn refresh(&self, jobs: usize) {
        let mut fresh = HashMap::new();
        if jobs >= LIST_FROM {
            if let Ok(c) = self.client() {
                let filter = [("filterBy", format!("projectId=={}", self.r().project_id))];
                match c
                    .list_all("/api/v1/workloads", "workloads", &filter, false)
                    .await
                {
                    Ok(list) => {
                        for w in list {
                            if let Some(id) = w["id"].as_str() {
                                fresh.insert(id.to_string(), w.clone());
                            }
                        }
                    }
                    Err(e) => {
                        crate::debug!("Listing the project's workloads failed ({e}): one GET each")
                    }
                }
            }
        }
        *self.listed.lock().unwrap() = fresh;
    }

    async fn create(&self, step: &Step) -> Result<String, SystemError> {
        let wid = self.create_workload(step).await?;
        crate::info!("Submitted Run:ai workload {} ({wid})", step.name);
        Ok(wid)
    }

    async fn adopt(&self, step: &Step) -> Result<Option<String>, SystemError> {
        self.adopt_workload(step).await
    }

    async fn observe(
        &self,
        step: &Step,
        wid: &String,
        w: &mut observe::Watch,
        _attempts: &mut Vec<Attempt>,
    ) -> Seen {
        self.look(step, wid, w).await
    }

    async fn wrap_up(
        &self,
        step: &Step,
        wid: &String,
        w: &mut observe::Watch,
        ending: &mut Ending,
    ) -> Vec<String> {
        self.end_of(step, wid, w, ending).await
    }

    /// Events first (a deleted workload has none); its log is settled once it is gone.
    async fn cancelling(&self, step: &Step, wid: &String, _w: &mut observe::Watch) {
        self.write_events(wid, step, true).await;
    }

    async fn delete(&self, step: &Step, wid: &String) -> Result<(), SystemError> {
        self.delete_workload(wid, step).await
    }

    async fn gone(&self, _step: &Step, wid: &String) -> Result<bool, SystemError> {
        self.workload_gone(wid).await
    }

    async fn after_gone(&self, step: &Step, w: &mut observe::Watch) -> Option<String> {
        self.finish_log(step, w, "Deleted", false).await
    }
}
