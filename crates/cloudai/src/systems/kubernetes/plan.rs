//! A step's object from the workload's launch: a Kubeflow MPIJob for MPI ranks on several nodes, else a
//! `batch/v1` Job; and what this system cannot run.

use std::sync::Arc;

use kube::api::ApiResource;
use serde_json::Value;

use super::manifest::{self, Fit, Kind, Limits, Meta, Mpi, Pod};
use crate::config::system::KubernetesConfig;
use crate::scenario::TestRun;
use crate::systems::objects::Naming;
use crate::workloads::object::{ObjectRun, OwnObject};
use crate::workloads::Launch;

/// A step's object: its kind and manifest.
#[derive(Clone, Debug)]
pub struct Spec {
    pub kind: Kind,
    pub manifest: Value,
    /// A Job of one pod on each of this many nodes (a per-node check), each node's log kept apart; 0 otherwise.
    pub per_node: u64,
    /// The workload's own object ([`Kind::Own`]): its resource and how a run drives it.
    pub own: Option<Arc<Own>>,
}

/// A workload's own object as a step: its API resource and how a run drives it.
#[derive(Debug)]
pub struct Own {
    pub resource: ApiResource,
    pub run: ObjectRun,
}

pub type Step = crate::systems::objects::Step<Spec>;

impl Spec {
    /// The pod role whose log is the step's output, and its container (none for the workload's own object:
    /// each role's log is kept).
    pub(crate) fn log_source(&self) -> (&'static str, &'static str) {
        match self.kind {
            Kind::Job => ("main", "main"),
            Kind::MpiJob => ("launcher", "launcher"),
            Kind::Own => ("", ""),
        }
    }

    /// The object's kind as the API names it.
    pub fn kind_name(&self) -> &str {
        match &self.own {
            Some(o) => &o.resource.kind,
            None => self.kind.name(),
        }
    }

    /// Who serves the object's kind when it is not built in: (in a sentence's subject, as a name), for the messages
    /// of a cluster without it.
    pub fn operator(&self) -> Option<(&'static str, &'static str)> {
        match self.kind {
            Kind::Job => None,
            Kind::MpiJob => Some(("MPI operator", "the Kubeflow MPI operator")),
            Kind::Own => Some(("operator", "its operator")),
        }
    }

    /// The object's API resource.
    pub fn resource(&self) -> ApiResource {
        match (&self.own, self.kind) {
            (Some(o), _) => o.resource.clone(),
            (None, Kind::MpiJob) => manifest::mpijob_resource(),
            // a workload's own kind always has its resource (`own`)
            (None, _) => manifest::job_resource(),
        }
    }

    /// The command the step's output comes from, as a shell would read it.
    pub fn full_cmd(&self) -> String {
        let spec = match self.kind {
            Kind::Job => &self.manifest["spec"]["template"]["spec"],
            Kind::MpiJob => {
                &self.manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
            }
            Kind::Own => return "n/a".into(),
        };
        spec["containers"][0]["command"]
            .as_array()
            .and_then(|c| c.last())
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    }
}

/// Who the step's object is (`n`), in the system's namespace; `dir_s` is its directory's text.
fn meta<'a>(k: &'a KubernetesConfig, n: &Naming<'a>, dir_s: &'a str) -> Meta<'a> {
    Meta {
        name: n.name,
        namespace: &k.default_namespace,
        run_tag: n.run_tag,
        identity: n.identity,
        scenario: n.scenario,
        iteration: n.iteration,
        results_dir: dir_s,
    }
}

/// The object of `run` named as `n` says, in the system's namespace.
pub fn spec(
    run: &TestRun,
    launch: &Launch,
    k: &KubernetesConfig,
    job_env: &[(String, String)],
    n: &Naming,
) -> Spec {
    let per_node = k.gpus_per_node;
    let dir_s = n.dir.display().to_string();
    let meta = meta(k, n, &dir_s);
    let env = job_env.to_vec();
    let image = launch
        .image
        .as_deref()
        .map(crate::systems::container::image)
        .unwrap_or_else(|| k.job_image.clone());
    let fit = Fit {
        sys: k,
        host_network: k.pods.host_network(&env),
    };
    let limits = Limits {
        deadline: k.pods.deadline(run.time_limit, run.max_pending_time),
        ttl: k.pods.ttl_after_finished,
    };
    if launch.across_nodes(run.num_nodes) {
        let cmd = crate::workloads::full_command(launch, &run.test);
        let mpi = Mpi {
            image: &image,
            cmd: &cmd,
            env: &env,
            workers: run.num_nodes,
            slots: launch.ranks_per_node(per_node),
            gpus: launch.gpus_per_node(per_node),
            ssh_port: k.pods.ssh_port(fit.host_network),
            worker_wait: run.max_pending_time.unwrap_or(600),
            banner: crate::systems::objects::ssh::tagged(&k.mpi_worker_command)
                .then(|| crate::systems::objects::ssh::banner_tag(n.identity)),
            preflight: k
                .preflight
                .as_ref()
                .map(|pf| (pf, pf.min_gpus.unwrap_or(launch.gpus_per_node(per_node)))),
        };
        let manifest = manifest::mpijob(run, &fit, &meta, &mpi, &limits);
        return Spec {
            kind: Kind::MpiJob,
            manifest,
            per_node: 0,
            own: None,
        };
    }
    let mut cmd = launch.node_command(&run.test, per_node);
    let gpus = launch.gpus_per_node(per_node);
    if let (Some(pf), true) = (&k.preflight, gpus > 0) {
        cmd = crate::systems::objects::preflight::here(pf, pf.min_gpus.unwrap_or(gpus), &cmd);
    }
    let pod = Pod {
        role: "main",
        image: &image,
        command: Some(vec!["/bin/bash".into(), "-c".into(), cmd]),
        gpus,
        env: &env,
        restart: "Never",
        pinned: true,
        ssh_port: None,
    };
    let spread = if launch.procs == crate::workloads::Procs::PerNode && run.num_nodes > 1 {
        run.num_nodes
    } else {
        0
    };
    Spec {
        kind: Kind::Job,
        manifest: manifest::job(run, &fit, &meta, &pod, &limits, spread),
        per_node: spread,
        own: None,
    }
}

/// The workload's own object as the step creates it: named and labelled as our objects are (the file CloudAI
/// writes keeps its own name), its pods labelled through each role's `labels_at` so the watch finds them and
/// knows their role.
pub fn own(run: &TestRun, o: OwnObject, k: &KubernetesConfig, n: &Naming) -> Spec {
    let dir_s = n.dir.display().to_string();
    let meta = meta(k, n, &dir_s);
    let mut manifest = o.manifest;
    manifest["metadata"] = meta.metadata(run);
    for role in &o.run.roles {
        add_labels(&mut manifest, &role.labels_at, meta.labels(run, &role.name));
    }
    let resource = own_resource(&o.run.kind);
    Spec {
        kind: Kind::Own,
        manifest,
        per_node: 0,
        own: Some(Arc::new(Own {
            resource,
            run: o.run,
        })),
    }
}

/// The API resource of a workload's own kind.
pub(crate) fn own_resource(k: &crate::workloads::object::OwnKind) -> ApiResource {
    ApiResource {
        group: k.group.into(),
        version: k.version.into(),
        api_version: format!("{}/{}", k.group, k.version),
        kind: k.kind.into(),
        plural: k.plural.into(),
    }
}

/// Adds `labels` (a map) to the map at `pointer` in `v`, made where missing; ours win over the same keys.
fn add_labels(v: &mut Value, pointer: &str, labels: Value) {
    let Value::Object(ours) = labels else {
        return;
    };
    let at = pointer_or_insert(v, pointer);
    if !at.is_object() {
        *at = Value::Object(Default::default());
    }
    if let Value::Object(map) = at {
        map.extend(ours);
    }
}

/// The value at a JSON pointer, made (as objects) where missing.
fn pointer_or_insert<'a>(v: &'a mut Value, pointer: &str) -> &'a mut Value {
    pointer
        .split('/')
        .skip(1)
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .fold(v, |v, key| {
            if !v.is_object() {
                *v = Value::Object(Default::default());
            }
            v.as_object_mut()
                .expect("made an object above")
                .entry(key)
                .or_insert(Value::Null)
        })
}

/// What cannot run as configured, one sentence each, before anything is created (warnings are logged).
pub fn check(run: &TestRun, k: &KubernetesConfig, env: &[(String, String)]) -> Vec<String> {
    let mut out =
        crate::systems::container::checks(run, "Kubernetes", "one pod", k.gpus_per_node, true);
    out.extend(k.pods.nic_errors(&run.id, env));
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn labels_go_where_each_role_says_beside_what_is_there() {
        let mut dgd = json!({"spec": {"services": {
            "decode": {"extraPodMetadata": {"annotations": {"a": "1"}, "labels": {"team": "x", "cloudai-role": "no"}}},
            "frontend": {"replicas": 1},
        }}});
        for (svc, role) in [
            ("decode", "decode"),
            ("frontend", "frontend"),
            ("a~1b", "odd"),
        ] {
            add_labels(
                &mut dgd,
                &format!("/spec/services/{svc}/extraPodMetadata/labels"),
                json!({"cloudai-role": role, "cloudai-job": "j"}),
            );
        }
        assert_eq!(
            dgd["spec"]["services"]["decode"]["extraPodMetadata"],
            json!({"annotations": {"a": "1"}, "labels": {"team": "x", "cloudai-role": "decode", "cloudai-job": "j"}})
        );
        assert_eq!(
            dgd["spec"]["services"]["frontend"],
            json!({"replicas": 1, "extraPodMetadata": {"labels": {"cloudai-role": "frontend", "cloudai-job": "j"}}})
        );
        // a pointer's escapes: `~1` is `/`
        assert_eq!(
            dgd["spec"]["services"]["a/b"]["extraPodMetadata"]["labels"]["cloudai-role"],
            "odd"
        );
    }
}
