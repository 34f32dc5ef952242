//! Kubernetes: a launch of MPI ranks on several nodes as a Kubeflow MPIJob, everything else (one node, however
//! many ranks; scripts; hooks) as `batch/v1` Jobs, rendered from the workload's [`crate::workloads::Launch`] and
//! run by the shared step machine ([`crate::systems::objects`]). Objects are watched (one watch per kind in the
//! namespace), never polled; the pod that prints the results is followed into `stdout.txt`, events of the object
//! and its pods go to `events.txt`. Every object we end is deleted in the foreground and its deletion confirmed
//! before the next step.

mod cache;
mod client;
mod events;
mod exec;
pub mod fleet;
mod logs;
pub mod manifest;
pub mod nodes;
mod observe;
mod ops;
mod own;
pub mod plan;
pub mod quarantine;
pub mod state;
pub mod survey;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{Notify, OnceCell};

use super::objects::{self, Backend, Ending, Naming, Seen};
use crate::config::system::{KubernetesConfig, SystemConfig, SystemKind};
use crate::results::record::Attempt;
use crate::scenario::TestRun;
use crate::systems::SystemError;
use crate::workloads::Launch;
use manifest::Kind;
use plan::{Spec, Step};

pub(crate) const MANIFEST_FILE: &str = "k8s-manifest.yaml";

struct Conn {
    client: kube::Client,
    server: String,
    namespace: String,
    wake: Arc<tokio::sync::Notify>,
    /// Started with the first object, after `connect` proved the credentials: a refused run shows one error.
    cache: std::sync::OnceLock<cache::Cache>,
}

impl Conn {
    fn cache(&self) -> &cache::Cache {
        self.cache.get_or_init(|| {
            cache::Cache::start(self.client.clone(), &self.namespace, self.wake.clone())
        })
    }
}

/// The Kubernetes side of the step machine: a namespace's Jobs and MPIJobs.
pub struct Kubernetes {
    cfg: Arc<SystemConfig>,
    conn: OnceCell<Conn>,
    wake: Arc<Notify>,
}

/// The system for a Kubernetes config.
pub fn system(cfg: Arc<SystemConfig>) -> objects::Stepped<Kubernetes> {
    objects::Stepped::new(Kubernetes::new(cfg))
}

impl Kubernetes {
    pub fn new(cfg: Arc<SystemConfig>) -> Self {
        Self {
            cfg,
            conn: OnceCell::new(),
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

    fn object_api(&self, c: &Conn, spec: &Spec) -> kube::Api<kube::api::DynamicObject> {
        kube::Api::namespaced_with(c.client.clone(), self.ns(), &spec.resource())
    }
}

/// The objects of one iteration whose results go to `dir`, in order (pre-test hooks, the test, post-test hooks),
/// as they are written to `k8s-manifest.yaml` and created.
pub fn manifests(cfg: &Arc<SystemConfig>, run: &TestRun, dir: &Path) -> Vec<serde_json::Value> {
    if !matches!(cfg.kind, SystemKind::Kubernetes(_)) {
        return Vec::new();
    }
    objects::plan(&Kubernetes::new(cfg.clone()), run, dir)
        .into_iter()
        .map(|s| s.spec.manifest)
        .collect()
}

/// The recorded jobs as the cluster shows them now (`cloudai status`): one list per kind.
pub async fn live(
    ids: &[&str],
    cfg: &SystemConfig,
) -> Result<HashMap<String, super::Live>, String> {
    Ok(super::Live::from_phases(ids, &phases(cfg).await?))
}

/// Every Job, MPIJob and workload's own object (a DynamoGraphDeployment) cloudai made in the system's namespace by
/// name, with its phase: one list per kind (`cloudai status`).
pub async fn phases(cfg: &SystemConfig) -> Result<HashMap<String, (String, String)>, String> {
    let SystemKind::Kubernetes(k) = &cfg.kind else {
        return Err("not a Kubernetes system".into());
    };
    let (client, server) = client::connect(&k.kube_config_path).await?;
    let lp = kube::api::ListParams::default().labels(&format!("{}=cloudai", manifest::MANAGED_BY));
    let mut out = HashMap::new();
    let own = crate::workloads::OWN_KINDS
        .iter()
        .map(|k| (Kind::Own, plan::own_resource(k)));
    for (kind, resource) in [
        (Kind::Job, manifest::job_resource()),
        (Kind::MpiJob, manifest::mpijob_resource()),
    ]
    .into_iter()
    .chain(own)
    {
        let api: kube::Api<kube::api::DynamicObject> =
            kube::Api::namespaced_with(client.clone(), &k.default_namespace, &resource);
        let list = match api.list(&lp).await {
            Ok(l) => l,
            // a cluster without the MPIJob CRD (or an operator's) simply has none
            Err(e) if kind != Kind::Job && client::status_code(&e) == Some(404) => continue,
            Err(e) => {
                return Err(format!(
                    "cannot list {}s at {server}: {}",
                    resource.kind,
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
                .find(|t| {
                    matches!(
                        *t,
                        "Complete" | "Succeeded" | "Failed" | "Running" | "Ready"
                    )
                })
                .map(str::to_string)
                .unwrap_or_else(|| {
                    if v["status"]["active"].as_i64().unwrap_or(0) > 0 {
                        "Active"
                    } else {
                        "Created"
                    }
                    .into()
                });
            out.insert(o.metadata.name.unwrap_or_default(), (phase, String::new()));
        }
    }
    Ok(out)
}

#[async_trait]
impl Backend for Kubernetes {
    type Spec = Spec;
    /// The object's name (in the step) is all the API needs.
    type Handle = ();
    type Watch = observe::Watch;

    const RUNNER: &'static str = "KubernetesRunner";
    const FILE: &'static str = MANIFEST_FILE;

    fn config(&self) -> &Arc<SystemConfig> {
        &self.cfg
    }

    fn spec(
        &self,
        run: &TestRun,
        launch: &Launch,
        env: &[(String, String)],
        n: &Naming,
        own: Option<crate::workloads::object::OwnObject>,
    ) -> Spec {
        match own {
            Some(o) => plan::own(run, o, self.k(), n),
            None => plan::spec(run, launch, self.k(), env, n),
        }
    }

    fn render(spec: &Spec) -> String {
        manifest::to_yaml(std::slice::from_ref(&spec.manifest))
    }

    fn full_cmd(spec: &Spec) -> String {
        spec.full_cmd()
    }

    fn check(&self, run: &TestRun) -> Vec<String> {
        plan::check(run, self.k(), &crate::systems::job_env(&self.cfg, run))
    }

    /// Its pods use the host's network as `use_host_network` says, by default unless the system names secondary
    /// networks (`networks`), which its GPU pods then attach to; CloudAI attaches every NetworkAttachmentDefinition
    /// the cluster has instead, listed with `kubectl` even in a dry-run. What the system asks of every pod
    /// (tolerations it sets, node selector, pull secrets, service account) goes into each service's pod spec.
    fn own_object(&self, run: &TestRun) -> Option<crate::workloads::object::OwnObject> {
        let k = self.k();
        let host_network = k
            .pods
            .use_host_network
            .unwrap_or(k.pods.networks.is_empty());
        let mut pod_spec = manifest::every_pod(&k.pods);
        // the GPU taint our own pods tolerate by default is the operator's to add here (as in CloudAI's file)
        if k.pods.tolerations == crate::config::pods::PodSettings::default().tolerations {
            pod_spec.remove("tolerations");
        }
        let at = crate::workloads::object::ObjectAt {
            namespace: &k.default_namespace,
            gpus_per_node: k.gpus_per_node,
            host_network,
            networks: if host_network { &[] } else { &k.pods.networks },
            pod_spec,
        };
        run.workload.own_object(&run.test, &at)
    }

    async fn connect(&self) -> Result<(), SystemError> {
        let c = self.conn().await?;
        // proves the credentials and that we may manage Jobs in the namespace before anything exists
        let api: kube::Api<kube::api::DynamicObject> =
            kube::Api::namespaced_with(c.client.clone(), self.ns(), &manifest::job_resource());
        api.list(&kube::api::ListParams::default().limit(1))
            .await
            .map(|_| ())
            .map_err(|e| {
                client::error(
                    &e,
                    &format!(
                        "cannot list Jobs in namespace {} at {}",
                        self.ns(),
                        c.server
                    ),
                )
            })
    }

    fn wakeup(&self) -> Option<Arc<Notify>> {
        Some(self.wake.clone())
    }

    fn describe(&self, step: &Step, _: &()) -> String {
        format!(
            "Kubernetes {} {}/{}",
            step.spec.kind_name(),
            self.ns(),
            step.name
        )
    }

    fn leftover(&self, step: &Step, _: &()) -> (String, BTreeMap<String, String>) {
        let r = step.spec.resource();
        let resource = [
            ("kind", r.kind.as_str()),
            ("name", step.name.as_str()),
            ("namespace", self.ns()),
            ("api_version", r.api_version.as_str()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        (step.name.clone(), resource)
    }

    fn gone_wait(&self) -> Duration {
        observe::gone_wait()
    }

    async fn create(&self, step: &Step) -> Result<(), SystemError> {
        self.create_object(step).await
    }

    async fn adopt(&self, step: &Step) -> Result<Option<()>, SystemError> {
        Ok(self.adopt_object(step).await?.then_some(()))
    }

    async fn observe(
        &self,
        step: &Step,
        _: &(),
        w: &mut observe::Watch,
        attempts: &mut Vec<Attempt>,
    ) -> Seen {
        self.look(step, w, attempts).await
    }

    async fn wrap_up(
        &self,
        step: &Step,
        _: &(),
        w: &mut observe::Watch,
        ending: &mut Ending,
    ) -> Vec<String> {
        self.end_of(step, w, ending).await
    }

    async fn cancelling(&self, step: &Step, _: &(), w: &mut observe::Watch) {
        self.write_events(step).await;
        if let Ok(c) = self.conn().await {
            let pods = c.cache().pods(&step.name).await;
            let refs: Vec<&serde_json::Value> = pods.iter().collect();
            if step.spec.kind == Kind::Own {
                self.end_own(step, w, &refs).await;
                return;
            }
            // still running: its stream would not end by itself
            let _ = self
                .settle_log(step, w, &refs, "cancelled", Duration::ZERO)
                .await;
        }
    }

    async fn delete(&self, step: &Step, _: &()) -> Result<(), SystemError> {
        self.delete_object(step).await
    }

    async fn gone(&self, step: &Step, _: &()) -> Result<bool, SystemError> {
        self.object_gone(step).await
    }
}
