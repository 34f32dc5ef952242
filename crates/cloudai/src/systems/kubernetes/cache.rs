//! One watch per kind in the namespace for the objects cloudai made (label `app.kubernetes.io/managed-by=cloudai`),
//! mirrored into in-memory stores: a poll reads the stores and costs no request. Every event wakes the runner.
//! While a watch fails, polls read the API server directly, so a broken watch slows a run but never stalls it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use futures_util::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::runtime::reflector::{store::Writer, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;
use serde_json::Value;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::manifest::{self, job_resource, mpijob_resource, pod_resource, Kind, JOB_LABEL};
use super::plan::Spec;
use crate::warn;

fn key(ar: &ApiResource) -> String {
    format!("{}.{}", ar.plural, ar.group)
}

/// A kind's watch mirrored into a store, and whether the store is current: false from a watch error until the
/// next complete re-list (or a watch event), while it may show a past state.
struct Watched {
    store: Store<DynamicObject>,
    current: Arc<AtomicBool>,
    api: Api<DynamicObject>,
}

pub(crate) struct Cache {
    client: Client,
    namespace: String,
    wake: Arc<Notify>,
    pods: Watched,
    jobs: Arc<Watched>,
    mpijobs: OnceLock<Arc<Watched>>,
    /// The workloads' own kinds, by resource (plural.group), each watched from its first object on.
    own: Mutex<HashMap<String, Arc<Watched>>>,
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
            jobs: Arc::new(jobs),
            mpijobs: OnceLock::new(),
            own: Mutex::default(),
            tasks: Mutex::new(vec![t1, t2]),
        }
    }

    /// Watching MPIJobs starts with the first one: a cluster without the CRD must not warn for Jobs-only runs.
    pub(crate) fn watch_mpijobs(&self) {
        self.mpijobs.get_or_init(|| {
            let (w, task) = spawn(&self.client, &self.namespace, mpijob_resource(), &self.wake);
            self.tasks.lock().unwrap().push(task);
            Arc::new(w)
        });
    }

    /// Watching a kind other than Jobs starts with its first object: a cluster without an MPIJob or an operator's
    /// CRD must not warn for runs that create none.
    pub(crate) fn watch(&self, spec: &Spec) {
        match spec.kind {
            Kind::Job => {}
            Kind::MpiJob => self.watch_mpijobs(),
            Kind::Own => {
                let ar = spec.resource();
                let mut own = self.own.lock().unwrap();
                own.entry(key(&ar)).or_insert_with(|| {
                    let (w, task) = spawn(&self.client, &self.namespace, ar, &self.wake);
                    self.tasks.lock().unwrap().push(task);
                    Arc::new(w)
                });
            }
        }
    }

    fn watched(&self, spec: &Spec) -> Option<Arc<Watched>> {
        match spec.kind {
            Kind::Job => Some(self.jobs.clone()),
            Kind::MpiJob => self.mpijobs.get().cloned(),
            Kind::Own => self
                .own
                .lock()
                .unwrap()
                .get(&key(&spec.resource()))
                .cloned(),
        }
    }

    /// The object as JSON (metadata, spec, status): as last seen by the watch, or read from the API server while
    /// the watch is failing (a proxy cutting long requests, RBAC without `watch`). `Ok(None)`: not (yet) there.
    pub async fn object(&self, spec: &Spec, name: &str) -> Result<Option<Value>, kube::Error> {
        let Some(w) = self.watched(spec) else {
            return Ok(None);
        };
        if !w.current.load(Ordering::Relaxed) {
            return Ok(w
                .api
                .get_opt(name)
                .await?
                .and_then(|o| serde_json::to_value(&o).ok()));
        }
        let key = kube::runtime::reflector::ObjectRef::new_with(name, spec.resource())
            .within(&self.namespace);
        Ok(w.store
            .get(&key)
            .and_then(|o| serde_json::to_value(&*o).ok()))
    }

    /// Pods made for the object (they carry its name in our job label), as JSON; listed from the API server while
    /// the pod watch is failing, and as last seen if that fails too.
    pub async fn pods(&self, job_name: &str) -> Vec<Value> {
        let w = &self.pods;
        if !w.current.load(Ordering::Relaxed) {
            let lp = ListParams::default().labels(&format!("{JOB_LABEL}={job_name}"));
            if let Ok(l) = w.api.list(&lp).await {
                return l
                    .items
                    .iter()
                    .filter_map(|p| serde_json::to_value(p).ok())
                    .collect();
            }
        }
        w.store
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
) -> (Watched, JoinHandle<()>) {
    let writer = Writer::new(ar.clone());
    let store = writer.as_reader();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ar);
    let cfg = watcher::Config::default().labels(&format!("{}=cloudai", manifest::MANAGED_BY));
    let wake = wake.clone();
    let what = format!("{} in namespace {namespace}", ar.plural);
    let current = Arc::new(AtomicBool::new(true));
    let flag = current.clone();
    let watched_api = api.clone();
    let task = tokio::spawn(async move {
        let mut last_err = String::new();
        let mut stream = watcher(api, cfg).default_backoff().reflect(writer).boxed();
        while let Some(ev) = stream.next().await {
            match ev {
                // a re-list has begun: the store keeps the old state until it is done
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
                Ok(_) => {
                    flag.store(true, Ordering::Relaxed);
                    if !last_err.is_empty() {
                        crate::info!("Watching {what} again");
                        last_err.clear();
                    }
                }
                Err(e) => {
                    flag.store(false, Ordering::Relaxed);
                    let text = describe_watch(&e);
                    if text != last_err {
                        warn!(
                            "Watch of {what} failed: {text}; reading them from the API server until it works again"
                        );
                        last_err = text;
                    }
                }
            }
            wake.notify_one();
        }
    });
    (
        Watched {
            store,
            current,
            api: watched_api,
        },
        task,
    )
}

/// A watch failure as one sentence with the server's own words (not the client's debug dump).
fn describe_watch(e: &watcher::Error) -> String {
    use super::client::describe;
    match e {
        watcher::Error::InitialListFailed(k) => format!("cannot list them: {}", describe(k)),
        watcher::Error::WatchStartFailed(k) => format!("cannot watch them: {}", describe(k)),
        watcher::Error::WatchFailed(k) => format!("the watch broke: {}", describe(k)),
        watcher::Error::WatchError(s) => format!("{} {}: {}", s.code, s.reason, s.message),
        other => other.to_string(),
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        for t in self.tasks.lock().unwrap().drain(..) {
            t.abort();
        }
    }
}
