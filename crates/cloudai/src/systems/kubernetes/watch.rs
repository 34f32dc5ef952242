//! One watch per kind in the namespace for the objects cloudai made (label `app.kubernetes.io/managed-by=cloudai`),
//! mirrored into in-memory stores: a poll reads the stores and costs no request. Every event wakes the runner.

use std::sync::{Arc, Mutex, OnceLock};

use futures_util::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::reflector::{store::Writer, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;
use serde_json::Value;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::manifest::{self, Kind, JOB_LABEL};
use crate::warn;

pub fn pod_resource() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&())
}

pub fn job_resource() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::batch::v1::Job>(&())
}

pub fn mpijob_resource() -> ApiResource {
    ApiResource {
        group: manifest::MPIJOB_GROUP.into(),
        version: manifest::MPIJOB_VERSION.into(),
        api_version: format!("{}/{}", manifest::MPIJOB_GROUP, manifest::MPIJOB_VERSION),
        kind: "MPIJob".into(),
        plural: manifest::MPIJOB_PLURAL.into(),
    }
}

pub fn resource(kind: Kind) -> ApiResource {
    match kind {
        Kind::Job => job_resource(),
        Kind::MpiJob => mpijob_resource(),
    }
}

pub struct Cache {
    client: Client,
    namespace: String,
    wake: Arc<Notify>,
    pods: Store<DynamicObject>,
    jobs: Store<DynamicObject>,
    mpijobs: OnceLock<Store<DynamicObject>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Cache {
    pub fn start(client: Client, namespace: &str, wake: Arc<Notify>) -> Self {
        let (pods, t1) = spawn(&client, namespace, pod_resource(), &wake);
        let (jobs, t2) = spawn(&client, namespace, job_resource(), &wake);
        Self {
            client,
            namespace: namespace.to_string(),
            wake,
            pods,
            jobs,
            mpijobs: OnceLock::new(),
            tasks: Mutex::new(vec![t1, t2]),
        }
    }

    /// Watching MPIJobs starts with the first one: a cluster without the CRD must not warn for Jobs-only runs.
    pub fn watch_mpijobs(&self) {
        self.mpijobs.get_or_init(|| {
            let (store, task) = spawn(&self.client, &self.namespace, mpijob_resource(), &self.wake);
            self.tasks.lock().unwrap().push(task);
            store
        });
    }

    fn store(&self, kind: Kind) -> Option<&Store<DynamicObject>> {
        match kind {
            Kind::Job => Some(&self.jobs),
            Kind::MpiJob => self.mpijobs.get(),
        }
    }

    /// The object as last seen, as JSON (metadata, spec, status).
    pub fn object(&self, kind: Kind, name: &str) -> Option<Value> {
        let store = self.store(kind)?;
        let key = kube::runtime::reflector::ObjectRef::new_with(name, resource(kind))
            .within(&self.namespace);
        store.get(&key).and_then(|o| serde_json::to_value(&*o).ok())
    }

    /// Pods made for the object (they carry its name in our job label), as JSON.
    pub fn pods(&self, job_name: &str) -> Vec<Value> {
        self.pods
            .state()
            .iter()
            .filter(|p| {
                p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(JOB_LABEL))
                    .map(String::as_str)
                    == Some(job_name)
            })
            .filter_map(|p| serde_json::to_value(&**p).ok())
            .collect()
    }
}

/// A watch of one kind mirrored into a store; the task runs until the cache is dropped.
fn spawn(
    client: &Client,
    namespace: &str,
    ar: ApiResource,
    wake: &Arc<Notify>,
) -> (Store<DynamicObject>, JoinHandle<()>) {
    let writer = Writer::new(ar.clone());
    let store = writer.as_reader();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ar);
    let cfg = watcher::Config::default().labels(&format!("{}=cloudai", manifest::MANAGED_BY));
    let wake = wake.clone();
    let what = format!("{} in namespace {namespace}", ar.plural);
    let task = tokio::spawn(async move {
        let mut last_err = String::new();
        let mut stream = watcher(api, cfg).default_backoff().reflect(writer).boxed();
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(_) if !last_err.is_empty() => {
                    crate::info!("Watching {what} again");
                    last_err.clear();
                }
                Ok(_) => {}
                Err(e) => {
                    let text = e.to_string();
                    if text != last_err {
                        warn!("Watch of {what} failed: {text}; retrying");
                        last_err = text;
                    }
                }
            }
            wake.notify_one();
        }
    });
    (store, task)
}

impl Drop for Cache {
    fn drop(&mut self) {
        for t in self.tasks.lock().unwrap().drain(..) {
            t.abort();
        }
    }
}
