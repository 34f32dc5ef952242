//! One look at a step from the watched objects: its phase, its output pod followed once it runs, new container
//! restarts; and at its end, events, nodes and the whole log while everything still exists.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::client::{describe, status_code};
use super::manifest::Kind;
use super::plan::Step;
use super::state::{self, Phase};
use super::{events, logs, Kubernetes};
use crate::results::record::Attempt;
use crate::systems::objects::{secs_from_env, Ending, Seen, StepKind};
use crate::systems::Queued;
use crate::warn;

/// How long the stream of a container that ended may take to deliver the rest of its log.
const LOG_WAIT: Duration = Duration::from_secs(10);
/// A controller makes pods within a second or two; only after this is a missing pod worth a question.
const PODLESS_GRACE: Duration = Duration::from_secs(3);
const PODLESS_RECHECK: Duration = Duration::from_secs(5);

/// An operator sets the status of what it serves (an MPIJob's `Created` condition) at once; this long without
/// one means there is none.
fn operator_wait() -> Duration {
    secs_from_env("CLOUDAI_K8S_OPERATOR_WAIT_S", 30.0)
}

/// How long we wait for the API server to confirm a deletion before reporting the object as left over.
pub(super) fn gone_wait() -> Duration {
    secs_from_env("CLOUDAI_K8S_GONE_WAIT_S", 120.0)
}

fn phase_of(p: &Value) -> &str {
    p["status"]["phase"].as_str().unwrap_or("")
}

/// What we keep while watching one step.
#[derive(Default)]
pub struct Watch {
    /// The object appeared in the watch at least once.
    seen: bool,
    log: Option<logs::Follow>,
    /// The pod whose log is being followed.
    log_pod: Option<String>,
    /// Container restarts seen per pod, to record each new one once.
    restarts: HashMap<String, i64>,
    /// Since when the object exists without any pod, and what was last found to say why.
    podless: Option<Podless>,
    /// A workload's own object: its benchmark once started, what was last said of its pods' start.
    pub(super) bench: Option<super::exec::Bench>,
    pub(super) own_said: String,
}

struct Podless {
    since: Instant,
    checked: Option<Instant>,
    why: Option<String>,
}

impl Kubernetes {
    pub(super) async fn look(
        &self,
        step: &Step,
        w: &mut Watch,
        attempts: &mut Vec<Attempt>,
    ) -> Seen {
        let Ok(c) = self.conn().await else {
            return Seen::Running;
        };
        let kind = step.spec.kind;
        let read = match c.cache().object(&step.spec, &step.name).await {
            Ok(o) => o,
            Err(e) if matches!(status_code(&e), Some(401 | 403)) => {
                // no right to read what we created: waiting cannot help, and the object must still go
                return Seen::Ended(Ending {
                    state: "Unreadable".into(),
                    failed: true,
                    reason: format!(
                        "cannot read Kubernetes {} {}: {}",
                        kind.name(),
                        step.name,
                        describe(&e)
                    ),
                    end: None,
                    unreadable: true,
                    ..Default::default()
                });
            }
            Err(e) => {
                let why = format!("cannot read it: {}", describe(&e));
                return if w.seen {
                    Seen::Running
                } else {
                    Seen::Waiting(Queued::new("Created", why))
                };
            }
        };
        let Some(obj) = read else {
            if w.seen && matches!(self.object_gone(step).await, Ok(true)) {
                return Seen::Vanished("deleted outside cloudai".into());
            }
            return Seen::Waiting(Queued::new("Created", "waiting for the watch to show it"));
        };
        let pods = c.cache().pods(&step.name).await;
        let refs: Vec<&Value> = pods.iter().collect();
        note_restarts(w, &refs, attempts);
        w.seen = true;
        if !refs.is_empty() {
            w.podless = None;
        }
        if kind == Kind::Own {
            let podless = if refs.is_empty() {
                self.podless(step, w, &obj).await
            } else {
                None
            };
            return self.look_own(step, w, &obj, &refs, podless);
        }
        self.follow_log(step, w, &refs);
        match state::evaluate(kind, &obj, &refs) {
            Phase::Waiting {
                state,
                reason,
                unschedulable,
            } => {
                // no pod at all: the controller's own complaint says why, and waiting on it is bounded
                let why = if pods.is_empty() {
                    self.podless(step, w, &obj).await
                } else {
                    None
                };
                Seen::Waiting(Queued {
                    state,
                    reason: why.clone().unwrap_or(reason),
                    blocked: why.or(unschedulable),
                    ..Queued::default()
                })
            }
            Phase::Running => Seen::Running,
            Phase::Ended {
                ok,
                state,
                reason,
                end,
            } => Seen::Ended(Ending {
                state,
                failed: !ok,
                reason,
                end,
                unreadable: false,
                ..Default::default()
            }),
        }
    }

    /// Why the step's object has no pod yet, once that lasted longer than a controller takes: its newest Warning
    /// event (asked at most every few seconds), or for a kind an operator serves (an MPIJob, a workload's own) no
    /// operator ever giving it a status.
    async fn podless(&self, step: &Step, w: &mut Watch, obj: &Value) -> Option<String> {
        let now = Instant::now();
        let p = w.podless.get_or_insert(Podless {
            since: now,
            checked: None,
            why: None,
        });
        if now - p.since < PODLESS_GRACE || p.checked.is_some_and(|c| now - c < PODLESS_RECHECK) {
            return p.why.clone();
        }
        let since = p.since;
        let c = self.conn().await.ok()?;
        let api = kube::Api::namespaced(c.client.clone(), self.ns());
        let mut why = events::latest_warning(&api, &step.name).await;
        if let (None, Some((who, named))) = (&why, step.spec.operator()) {
            if obj["status"]["conditions"]
                .as_array()
                .is_none_or(|c| c.is_empty())
                && now - since >= operator_wait()
            {
                why = Some(format!(
                    "no {who} took {} {} up within {} s (no status, no pods, no events): is {named} ({}) running \
                     in the cluster?",
                    step.spec.kind_name(),
                    step.name,
                    operator_wait().as_secs(),
                    step.spec.resource().api_version
                ));
            }
        }
        if let Some(p) = w.podless.as_mut() {
            p.checked = Some(now);
            p.why = why.clone();
        }
        why
    }

    /// The pod whose log is the step's output, once it has started (or already ended).
    fn log_pod<'a>(step: &Step, pods: &[&'a Value]) -> Option<&'a Value> {
        let (role, _) = step.spec.log_source();
        pods.iter()
            .copied()
            .filter(|p| p["metadata"]["labels"][super::manifest::ROLE_LABEL] == role)
            .find(|p| matches!(phase_of(p), "Running" | "Succeeded" | "Failed"))
    }

    fn follow_log(&self, step: &Step, w: &mut Watch, pods: &[&Value]) {
        if w.log.is_some() || w.log_pod.is_some() {
            return;
        }
        let Some(pod) = Self::log_pod(step, pods) else {
            return;
        };
        let Some(c) = self.conn.get() else { return };
        let name = state::name(pod).to_string();
        w.log_pod = Some(name.clone());
        if let Err(e) = std::fs::create_dir_all(&step.dir) {
            warn!("Cannot create {}: {e}", step.dir.display());
        }
        let (_, container) = step.spec.log_source();
        w.log = Some(logs::Follow::start(
            self.pod_api(c),
            name,
            container.to_string(),
            step.dir.join("stdout.txt"),
        ));
    }

    /// Settles the step's `stdout.txt` while its pods still exist.
    pub(super) async fn settle_log(
        &self,
        step: &Step,
        w: &mut Watch,
        pods: &[&Value],
        state: &str,
        wait: Duration,
    ) -> Option<String> {
        let c = self.conn.get()?;
        let (follow, known) = (w.log.take(), w.log_pod.take());
        let pod = known.or_else(|| Self::log_pod(step, pods).map(|p| state::name(p).to_string()));
        let (role, container) = step.spec.log_source();
        let never_ran = pod.is_none().then(|| {
            format!(
                "{} {} never ran its {role} pod ({state})",
                step.spec.kind.name(),
                step.name,
            )
        });
        let out = step.dir.join("stdout.txt");
        if let Err(e) = std::fs::create_dir_all(&step.dir) {
            warn!("Cannot create {}: {e}", step.dir.display());
        }
        let target = pod.as_deref().map(|p| (p, container));
        logs::settle(&self.pod_api(c), target, follow, &out, never_ran, wait).await
    }

    /// A per-node Job's pods: each one's whole log into `nodes/<node>/stdout.txt` (a pod that never got a node has
    /// none: the Job did not complete, which its end already says).
    async fn node_logs(&self, step: &Step, pods: &[&Value]) {
        let Some(c) = self.conn.get() else { return };
        let api = self.pod_api(c);
        let (_, container) = step.spec.log_source();
        for p in pods {
            let Some(node) = p["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) else {
                continue;
            };
            let dir = step
                .dir
                .join(crate::workloads::launch::NODES_DIR)
                .join(node);
            if let Err(e) = std::fs::create_dir_all(&dir) {
                warn!("Cannot create {}: {e}", dir.display());
                continue;
            }
            logs::write_whole(&api, state::name(p), container, &dir.join("stdout.txt")).await;
        }
    }

    /// The step is over: events and the whole log while everything still exists; the nodes it ran on.
    pub(super) async fn end_of(
        &self,
        step: &Step,
        w: &mut Watch,
        ending: &mut Ending,
    ) -> Vec<String> {
        let pods = match self.conn().await {
            Ok(c) => c.cache().pods(&step.name).await,
            Err(_) => Vec::new(),
        };
        let refs: Vec<&Value> = pods.iter().collect();
        let last_event = self.write_events(step).await;
        if step.spec.kind == Kind::Own {
            self.end_own(step, w, &refs).await;
        } else {
            ending.log_incomplete = self
                .settle_log(step, w, &refs, &ending.state, LOG_WAIT)
                .await;
        }
        if step.spec.per_node > 0 {
            self.node_logs(step, &refs).await;
        }
        if ending.failed {
            if let Some(e) = last_event {
                ending.reason = format!("{} (last event: {e})", ending.reason);
            }
        }
        if step.part == StepKind::Main {
            state::nodes(&refs)
        } else {
            Vec::new()
        }
    }
}

/// Records every new container restart as an attempt (a worker that crashed and came back).
fn note_restarts(w: &mut Watch, pods: &[&Value], attempts: &mut Vec<Attempt>) {
    for p in pods {
        let n = state::restarts(p);
        let name = state::name(p).to_string();
        let before = w.restarts.get(&name).copied().unwrap_or(0);
        if n > before {
            if let Some(a) = state::restart_attempt(p) {
                warn!("{} ({})", a.reason, a.state);
                attempts.push(a);
            }
            w.restarts.insert(name, n);
        }
    }
}
