//! Kubernetes: a launch of MPI ranks on several nodes as a Kubeflow MPIJob, everything else (one node, however
//! many ranks; scripts; hooks) as `batch/v1` Jobs, rendered from the workload's [`crate::workloads::Launch`].
//! Objects are watched (one watch per kind in the namespace), never polled; the pod that prints the results is
//! followed into `stdout.txt`, events of the object and its pods go to `events.txt`.
//! Every object we end, whatever the reason, is deleted in the foreground and its deletion confirmed before the
//! next step; what cannot be confirmed is a leftover.

mod client;
mod events;
mod logs;
pub mod manifest;
pub mod nodes;
mod ops;
mod progress;
pub mod state;
mod step;
mod watch;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use tokio::sync::{Notify, OnceCell};

use super::{JobId, JobState, Prepared, System};
use crate::config::system::{KubernetesConfig, SystemConfig, SystemKind};
use crate::info;
use crate::results::record::{Attempt, Leftover};
use crate::scenario::TestRun;
use crate::workloads::JobOutcome;
use manifest::Kind;
use step::{Step, StepKind};

pub const MANIFEST_FILE: &str = "k8s-manifest.yaml";

/// How a step ended, kept while its deletion is being confirmed.
#[derive(Debug)]
struct Ending {
    state: String,
    failed: bool,
    reason: String,
    end: Option<crate::results::EndReason>,
}

#[derive(Debug, Default)]
struct Job {
    steps: Vec<Step>,
    current: usize,
    /// The current step's object exists (we created or adopted it).
    created: bool,
    /// It appeared in the watch at least once.
    seen: bool,
    cancel_requested: bool,
    delete_sent: bool,
    ending: Option<Ending>,
    gone_by: Option<Instant>,
    log: Option<logs::Follow>,
    /// The pod whose log is being followed.
    log_pod: Option<String>,
    main_outcome: Option<JobOutcome>,
    nodes: Vec<String>,
    attempts: Vec<Attempt>,
    /// Container restarts seen per pod, to record each new one once.
    restarts: HashMap<String, i64>,
    /// Since when the current step's object exists without any pod, and what was last found to say why.
    podless: Option<Podless>,
}

#[derive(Debug)]
struct Podless {
    since: Instant,
    checked: Option<Instant>,
    why: Option<String>,
}

impl std::fmt::Debug for logs::Follow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Follow")
    }
}

struct Conn {
    client: kube::Client,
    server: String,
    namespace: String,
    wake: Arc<tokio::sync::Notify>,
    /// Started with the first object, after `connect` proved the credentials: a refused run shows one error.
    cache: std::sync::OnceLock<watch::Cache>,
}

impl Conn {
    fn cache(&self) -> &watch::Cache {
        self.cache.get_or_init(|| {
            watch::Cache::start(self.client.clone(), &self.namespace, self.wake.clone())
        })
    }
}

pub struct Kubernetes {
    cfg: Arc<SystemConfig>,
    conn: OnceCell<Conn>,
    jobs: Mutex<HashMap<JobId, Job>>,
    planned: Mutex<HashMap<PathBuf, Vec<Step>>>,
    /// Objects we asked to delete whose deletion is not confirmed yet, by name.
    unconfirmed: Mutex<BTreeMap<String, Leftover>>,
    wake: Arc<Notify>,
}

impl Kubernetes {
    pub fn new(cfg: Arc<SystemConfig>) -> Self {
        Self {
            cfg,
            conn: OnceCell::new(),
            jobs: Mutex::default(),
            planned: Mutex::default(),
            unconfirmed: Mutex::default(),
            wake: Arc::new(Notify::new()),
        }
    }

    fn k(&self) -> &KubernetesConfig {
        match &self.cfg.kind {
            SystemKind::Kubernetes(k) => k,
            _ => unreachable!("Kubernetes system built from another config"),
        }
    }

    fn ns(&self) -> &str {
        &self.k().default_namespace
    }

    /// The client and the watches, set up once (never in dry-run).
    async fn conn(&self) -> Result<&Conn, String> {
        self.conn
            .get_or_try_init(|| async {
                let (client, server) = client::connect(&self.k().kube_config_path).await?;
                Ok::<_, String>(Conn {
                    client,
                    server,
                    namespace: self.ns().to_string(),
                    wake: self.wake.clone(),
                    cache: Default::default(),
                })
            })
            .await
    }

    fn pod_api(&self, c: &Conn) -> kube::Api<k8s_openapi::api::core::v1::Pod> {
        kube::Api::namespaced(c.client.clone(), self.ns())
    }

    fn object_api(&self, c: &Conn, kind: Kind) -> kube::Api<kube::api::DynamicObject> {
        kube::Api::namespaced_with(c.client.clone(), self.ns(), &watch::resource(kind))
    }

    /// Notes that an object must be gone before we can say nothing is left; cleared once it is.
    fn expect_gone(&self, job_id: &str, step: &Step, reason: &str) {
        let resource = [
            ("kind", step.kind.name()),
            ("name", step.name.as_str()),
            ("namespace", self.ns()),
            (
                "api_version",
                if step.kind == Kind::Job {
                    "batch/v1"
                } else {
                    "kubeflow.org/v2beta1"
                },
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let left = Leftover {
            job_id: job_id.to_string(),
            description: format!(
                "Kubernetes {} {}/{}",
                step.kind.name(),
                self.ns(),
                step.name
            ),
            reason: reason.to_string(),
            resource,
        };
        self.unconfirmed
            .lock()
            .unwrap()
            .insert(step.name.clone(), left);
    }

    fn confirmed_gone(&self, name: &str) {
        self.unconfirmed.lock().unwrap().remove(name);
    }

    fn set_unconfirmed_reason(&self, name: &str, reason: String) {
        if let Some(l) = self.unconfirmed.lock().unwrap().get_mut(name) {
            l.reason = reason;
        }
    }
}

/// The objects of one iteration whose results go to `dir`, in order (pre-test hooks, the test, post-test hooks),
/// as they are written to `k8s-manifest.yaml` and created.
pub fn manifests(cfg: &SystemConfig, run: &TestRun, dir: &Path) -> Vec<serde_json::Value> {
    let SystemKind::Kubernetes(k) = &cfg.kind else {
        return Vec::new();
    };
    step::plan(run, k, cfg, dir)
        .into_iter()
        .map(|s| s.manifest)
        .collect()
}

/// Every Job and MPIJob cloudai made in the system's namespace by name, with its phase: one list per kind
/// (`cloudai status`).
pub async fn phases(cfg: &SystemConfig) -> Result<HashMap<String, String>, String> {
    let SystemKind::Kubernetes(k) = &cfg.kind else {
        return Err("not a Kubernetes system".into());
    };
    let (client, server) = client::connect(&k.kube_config_path).await?;
    let lp = kube::api::ListParams::default().labels(&format!("{}=cloudai", manifest::MANAGED_BY));
    let mut out = HashMap::new();
    for kind in [Kind::Job, Kind::MpiJob] {
        let api: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
            client.clone(),
            &k.default_namespace,
            &watch::resource(kind),
        );
        let list = match api.list(&lp).await {
            Ok(l) => l,
            // a cluster without the MPIJob CRD simply has none
            Err(e) if kind == Kind::MpiJob && client::status_code(&e) == Some(404) => continue,
            Err(e) => {
                return Err(format!(
                    "cannot list {}s at {server}: {}",
                    kind.name(),
                    client::describe(&e)
                ))
            }
        };
        for o in list.items {
            let v = serde_json::to_value(&o).unwrap_or_default();
            let phase = v["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|c| c["status"] == "True")
                .filter_map(|c| c["type"].as_str())
                .find(|t| matches!(*t, "Complete" | "Succeeded" | "Failed" | "Running"))
                .map(str::to_string)
                .unwrap_or_else(|| {
                    if v["status"]["active"].as_i64().unwrap_or(0) > 0 {
                        "Active"
                    } else {
                        "Created"
                    }
                    .into()
                });
            out.insert(o.metadata.name.unwrap_or_default(), phase);
        }
    }
    Ok(out)
}

#[async_trait]
impl System for Kubernetes {
    fn runner_name(&self) -> &'static str {
        "KubernetesRunner"
    }

    fn check(&self, run: &TestRun) -> Vec<String> {
        step::check(run, self.k())
    }

    async fn connect(&self) -> Result<(), String> {
        let c = self.conn().await?;
        // proves the credentials and that we may manage Jobs in the namespace before anything exists
        let api = self.object_api(c, Kind::Job);
        api.list(&kube::api::ListParams::default().limit(1))
            .await
            .map(|_| ())
            .map_err(|e| {
                format!(
                    "cannot list Jobs in namespace {} at {}: {}",
                    self.ns(),
                    c.server,
                    client::describe(&e)
                )
            })
    }

    fn prepare(&self, run: &TestRun, _iteration: u64, dir: &Path) -> Result<Prepared, String> {
        let steps = step::plan(run, self.k(), &self.cfg, dir);
        let files = steps
            .iter()
            .map(|st| {
                let rel = st
                    .dir
                    .strip_prefix(dir)
                    .unwrap_or(Path::new(""))
                    .join(MANIFEST_FILE);
                (
                    rel.display().to_string(),
                    manifest::to_yaml(std::slice::from_ref(&st.manifest)),
                )
            })
            .collect();
        let main = steps
            .iter()
            .find(|st| st.kind_of == StepKind::Main)
            .expect("a plan has its main step");
        let full_cmd = main.full_cmd();
        self.planned
            .lock()
            .unwrap()
            .insert(dir.to_path_buf(), steps);
        Ok(Prepared {
            test_cmd: run.launch().command_line(),
            full_cmd,
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
        let steps = planned.unwrap_or_else(|| step::plan(run, self.k(), &self.cfg, dir));
        let main = steps
            .iter()
            .find(|s| s.kind_of == StepKind::Main)
            .map(|s| s.name.clone())
            .unwrap_or_default();
        if dry_run {
            info!(
                "Would create Kubernetes objects for {main} ({} with hooks)",
                steps.len()
            );
            return Ok(main);
        }
        self.create(&steps[0]).await?;
        let job = Job {
            steps,
            created: true,
            ..Default::default()
        };
        self.jobs.lock().unwrap().insert(main.clone(), job);
        Ok(main)
    }

    async fn poll(&self, ids: &[JobId]) -> Vec<JobState> {
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            out.push(self.poll_one(id).await);
        }
        out
    }

    async fn cancel(&self, id: &JobId) -> Result<(), String> {
        let step = {
            let mut jobs = self.jobs.lock().unwrap();
            let Some(j) = jobs.get_mut(id) else {
                return Ok(());
            };
            j.cancel_requested = true;
            if !j.created || j.current >= j.steps.len() {
                return Ok(());
            }
            j.steps[j.current].clone()
        };
        self.write_events(&step).await;
        if let Ok(c) = self.conn().await {
            let pods = c.cache().pods(&step.name).await;
            let refs: Vec<&serde_json::Value> = pods.iter().collect();
            // still running: its stream would not end by itself
            self.settle_log(id, &step, &refs, "cancelled", std::time::Duration::ZERO)
                .await;
        }
        self.delete(id, &step, "cancel requested").await
    }

    async fn attach(
        &self,
        run: &TestRun,
        dir: &Path,
        id: &JobId,
        _job: &Prepared,
    ) -> Result<(), String> {
        let steps = step::plan(run, self.k(), &self.cfg, dir);
        let main = steps
            .iter()
            .position(|s| s.kind_of == StepKind::Main)
            .expect("a plan has its main step");
        if steps[main].name != *id {
            return Err(format!(
                "the journal names object {id}, this tree's test {} would be {}",
                run.id, steps[main].name
            ));
        }
        let mut current = None;
        for (i, st) in steps.iter().enumerate().rev() {
            if self.adopt(st).await? {
                current = Some(i);
                break;
            }
        }
        let (current, created) = match current {
            Some(i) => (i, true),
            None if dir.join("stdout.txt").exists() => (main + 1, false),
            None => (0, false),
        };
        if created {
            info!(
                "Re-attached to Kubernetes {} {}",
                steps[current].kind.name(),
                steps[current].name
            );
        }
        let job = Job {
            steps,
            current,
            created,
            ..Default::default()
        };
        self.jobs.lock().unwrap().insert(id.clone(), job);
        Ok(())
    }

    async fn find_submitted(&self, run: &TestRun, dir: &Path) -> Option<JobId> {
        let steps = step::plan(run, self.k(), &self.cfg, dir);
        let main = steps
            .iter()
            .find(|s| s.kind_of == StepKind::Main)?
            .name
            .clone();
        for st in &steps {
            if let Ok(true) = self.adopt(st).await {
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

    fn attempts(&self, id: &JobId) -> Vec<Attempt> {
        self.jobs
            .lock()
            .unwrap()
            .get(id)
            .map(|j| j.attempts.clone())
            .unwrap_or_default()
    }

    fn release(&self) {
        self.jobs.lock().unwrap().clear();
    }

    fn leftovers(&self) -> Vec<Leftover> {
        self.unconfirmed.lock().unwrap().values().cloned().collect()
    }

    fn wakeup(&self) -> Option<Arc<Notify>> {
        Some(self.wake.clone())
    }
}
