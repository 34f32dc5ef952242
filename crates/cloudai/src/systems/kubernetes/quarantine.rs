//! Quarantine on Kubernetes: a cordon with cloudai's taint and the annotation `cloudai.io/quarantined-by` (our mark,
//! the run and why) and `cloudai.io/quarantined-at`; given back (uncordon, our taint and annotations removed) only
//! while the annotation is still our mark. Every write carries the `resourceVersion` read just before it: a
//! concurrent change by someone else makes ours fail (409), and theirs stands.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::{json, Value};

use super::client;
use crate::config::system::KubernetesConfig;
use crate::quarantine::{label_value, Action, QuarantineError, Scheduler, Seen, TAINT_KEY};

pub(crate) const ANNOTATION: &str = "cloudai.io/quarantined-by";
pub(crate) const AT_ANNOTATION: &str = "cloudai.io/quarantined-at";

/// The cluster a Kubernetes system names, with a runtime of its own (quarantine runs off cloudai's).
pub struct Kube {
    pub cfg: KubernetesConfig,
    rt: tokio::runtime::Runtime,
}

impl Kube {
    pub fn new(cfg: KubernetesConfig) -> Result<Kube, String> {
        Ok(Kube {
            cfg,
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("Cannot start the async runtime: {e}"))?,
        })
    }

    async fn api(&self) -> Result<kube::Api<Node>, QuarantineError> {
        let (c, _) = client::connect(&self.cfg.kube_config_path)
            .await
            .map_err(QuarantineError::Scheduler)?;
        Ok(kube::Api::all(c))
    }

    /// The node a test names by its `kubernetes.io/hostname` (its name when no node carries that label); None when
    /// the cluster has no such node (removed since).
    async fn node(
        &self,
        api: &kube::Api<Node>,
        host: &str,
    ) -> Result<Option<Node>, QuarantineError> {
        let by_label = api
            .list(&ListParams::default().labels(&format!("kubernetes.io/hostname={host}")))
            .await
            .map_err(|e| {
                QuarantineError::Scheduler(format!(
                    "cannot list the nodes: {}",
                    client::describe(&e)
                ))
            })?;
        match by_label.items.into_iter().next() {
            Some(n) => Ok(Some(n)),
            None => api.get_opt(host).await.map_err(|e| {
                QuarantineError::Scheduler(format!(
                    "cannot read node {host}: {}",
                    client::describe(&e)
                ))
            }),
        }
    }

    /// Patches the node with our changes, valid only at `rv` (the version read).
    pub fn patch_at(&self, name: &str, rv: &str, patch: Value) -> Result<(), QuarantineError> {
        self.rt.block_on(async {
            let api = self.api().await?;
            let mut p = patch;
            p["metadata"]["resourceVersion"] = rv.into();
            api.patch(name, &PatchParams::default(), &Patch::Merge(p))
                .await
                .map(|_| ())
                .map_err(|e| match &e {
                    kube::Error::Api(s) if s.code == 409 => {
                        QuarantineError::Raced { node: name.into() }
                    }
                    kube::Error::Api(s) if s.code == 404 => {
                        QuarantineError::Gone { node: name.into() }
                    }
                    _ => QuarantineError::Scheduler(format!(
                        "cannot update node {name}: {}",
                        client::describe(&e)
                    )),
                })
        })
    }

    /// (name, resourceVersion, what it shows, its taints without ours); an error when the cluster has no such node.
    pub fn read(&self, host: &str) -> Result<Read, QuarantineError> {
        self.look(host)?
            .ok_or_else(|| QuarantineError::Gone { node: host.into() })
    }

    /// As [`Self::read`]; None when the cluster has no such node.
    fn look(&self, host: &str) -> Result<Option<Read>, QuarantineError> {
        self.rt.block_on(async {
            let api = self.api().await?;
            let Some(n) = self.node(&api, host).await? else {
                return Ok(None);
            };
            let name = n.metadata.name.clone().unwrap_or_else(|| host.to_string());
            let rv = n.metadata.resource_version.clone().unwrap_or_default();
            let v = serde_json::to_value(&n).unwrap_or_default();
            let taints: Vec<Value> = v["spec"]["taints"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|t| t["key"] != TAINT_KEY)
                .collect();
            Ok(Some((name, rv, seen_of(&v), taints)))
        })
    }
}

/// A node as read: (name, resourceVersion, what it shows, its taints without ours).
pub type Read = (String, String, Seen, Vec<Value>);

/// What a node (as JSON) shows: ours while our annotation is on a cordoned node; someone else's when cordoned,
/// tainted NoSchedule/NoExecute or not Ready otherwise.
pub(crate) fn seen_of(n: &Value) -> Seen {
    let ours = n["metadata"]["annotations"][ANNOTATION].as_str();
    let cordoned = n["spec"]["unschedulable"] == true;
    let has_our_taint = n["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|t| t["key"] == TAINT_KEY);
    if let Some(tag) = ours.filter(|_| cordoned || has_our_taint) {
        return Seen::Ours(tag.to_string());
    }
    if cordoned {
        return Seen::Others("cordoned".into());
    }
    let taint = n["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| {
            (t["effect"] == "NoSchedule" || t["effect"] == "NoExecute") && t["key"] != TAINT_KEY
        });
    if let Some(t) = taint {
        return Seen::Others(format!("taint {}", t["key"].as_str().unwrap_or("")));
    }
    let ready = n["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    if !ready && n["status"]["conditions"].is_array() {
        return Seen::Others("not Ready".into());
    }
    Seen::InService
}

impl Scheduler for Kube {
    fn seen(&mut self, nodes: &[String]) -> Result<BTreeMap<String, Seen>, QuarantineError> {
        // a node the cluster no longer has is left out: the quarantine says it is no longer listed
        let mut out = BTreeMap::new();
        for n in nodes {
            if let Some((_, _, s, _)) = self.look(n)? {
                out.insert(n.clone(), s);
            }
        }
        Ok(out)
    }

    fn take_out(&mut self, node: &str, tag: &str) -> Result<(), QuarantineError> {
        let (name, rv, seen, mut taints) = self.read(node)?;
        if let Seen::Others(r) = seen {
            return Err(QuarantineError::NotOurs { by: r });
        }
        let why = tag.split_once(' ').map_or(tag, |(_, w)| w);
        taints.push(json!({"key": TAINT_KEY, "value": label_value(why), "effect": "NoSchedule"}));
        self.patch_at(
            &name,
            &rv,
            json!({
                "metadata": {"annotations": {ANNOTATION: tag, AT_ANNOTATION: chrono::Utc::now().to_rfc3339()}},
                "spec": {"unschedulable": true, "taints": taints},
            }),
        )
    }

    fn put_back(&mut self, node: &str, tag: &str, force: bool) -> Result<(), QuarantineError> {
        let (name, rv, seen, taints) = self.read(node)?;
        if !seen.may_put_back(tag, force)? {
            return Ok(());
        }
        self.patch_at(
            &name,
            &rv,
            json!({
                "metadata": {"annotations": {ANNOTATION: null, AT_ANNOTATION: null}},
                "spec": {"unschedulable": null, "taints": if taints.is_empty() { Value::Null } else { Value::Array(taints) }},
            }),
        )
    }

    fn open_window(&mut self, node: &str, tag: &str) -> Result<(), QuarantineError> {
        let (name, rv, seen, _) = self.read(node)?;
        match seen {
            Seen::Ours(t) if t == tag => {}
            other => {
                return Err(QuarantineError::MarkGone {
                    now: format!("{other:?}"),
                })
            }
        }
        // our taint and annotation stay: only pods that tolerate the taint (the requalification's) land
        self.patch_at(&name, &rv, json!({"spec": {"unschedulable": null}}))
    }

    fn close_window(&mut self, node: &str, tag: &str) -> Result<(), QuarantineError> {
        let (name, rv, seen, _) = self.read(node)?;
        match seen {
            Seen::Ours(t) if t == tag => {
                self.patch_at(&name, &rv, json!({"spec": {"unschedulable": true}}))
            }
            // someone else acted meanwhile: theirs stands
            _ => Ok(()),
        }
    }

    fn command(&self, action: Action, node: &str, tag: &str) -> String {
        match action {
            Action::TakeOut => format!(
                "kubectl cordon {node} && kubectl taint nodes {node} {TAINT_KEY}={}:NoSchedule && kubectl annotate node \
                 {node} {ANNOTATION}={}",
                label_value(tag.split_once(' ').map_or(tag, |(_, w)| w)),
                crate::util::shell::single_quote(tag)
            ),
            Action::PutBack => format!(
                "kubectl uncordon {node} && kubectl taint nodes {node} {TAINT_KEY}- && kubectl annotate node {node} \
                 {ANNOTATION}- {AT_ANNOTATION}-"
            ),
            Action::Note => String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ours_only_with_our_annotation_on_a_cordoned_node() {
        let ready = json!([{"type": "Ready", "status": "True"}]);
        let n = |ann: Value, unsched: bool, taints: Value| {
            json!({"metadata": {"annotations": ann}, "spec": {"unschedulable": unsched, "taints": taints},
                   "status": {"conditions": ready}})
        };
        assert_eq!(seen_of(&n(json!({}), false, json!([]))), Seen::InService);
        assert_eq!(
            seen_of(&n(
                json!({ANNOTATION: "cloudai:r slow"}),
                true,
                json!([{"key": TAINT_KEY, "effect": "NoSchedule"}])
            )),
            Seen::Ours("cloudai:r slow".into())
        );
        assert_eq!(
            seen_of(&n(json!({}), true, json!([]))),
            Seen::Others("cordoned".into())
        );
        assert_eq!(
            seen_of(&n(
                json!({}),
                false,
                json!([{"key": "nvidia.com/gpu-fault", "effect": "NoExecute"}])
            )),
            Seen::Others("taint nvidia.com/gpu-fault".into())
        );
        // our annotation left on a node someone uncordoned and untainted: not held by us any more
        assert_eq!(
            seen_of(&n(json!({ANNOTATION: "cloudai:r slow"}), false, json!([]))),
            Seen::InService
        );
    }
}
