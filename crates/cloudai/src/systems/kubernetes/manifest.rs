//! The objects an iteration becomes on Kubernetes: a Kubeflow `MPIJob` (kubeflow.org/v2beta1) for NCCL on several
//! nodes, a `batch/v1` Job for everything else. Built as plain JSON so the same value is written to
//! `k8s-manifest.yaml` in dry-run and sent to the API server in a run.

use serde_json::{json, Map, Value};

use crate::config::system::KubernetesConfig;
use crate::scenario::TestRun;
use crate::systems::runai::payload;

pub const MPIJOB_GROUP: &str = "kubeflow.org";
pub const MPIJOB_VERSION: &str = "v2beta1";
pub const MPIJOB_PLURAL: &str = "mpijobs";

/// Labels every object (and pod template) we create carries.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const RUN_LABEL: &str = "cloudai-run";
pub const JOB_LABEL: &str = "cloudai-job";
pub const ROLE_LABEL: &str = "cloudai-role";
pub const IDENTITY: &str = "cloudai-identity";

pub const GPU_RESOURCE: &str = "nvidia.com/gpu";

/// Which kind of object a step is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Job,
    MpiJob,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Job => "Job",
            Kind::MpiJob => "MPIJob",
        }
    }
}

/// A label value: at most 63 characters of `[A-Za-z0-9._-]`, starting and ending alphanumeric.
pub fn label_value(s: &str) -> String {
    let mapped: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let trimmed = mapped.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    let mut v: String = trimmed.chars().take(63).collect();
    while v.ends_with(|c: char| !c.is_ascii_alphanumeric()) {
        v.pop();
    }
    v
}

/// Who an object is: its name and what ties it to the scenario, test and iteration.
pub struct Meta<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    /// Hash of this results tree: shared by every object of the run.
    pub run_tag: &'a str,
    /// Hash of the iteration (and hook) directory: an object of our name is ours only if it matches.
    pub identity: &'a str,
    pub scenario: &'a str,
    pub iteration: &'a str,
    pub results_dir: &'a str,
}

impl Meta<'_> {
    fn labels(&self, run: &TestRun, role: &str) -> Value {
        let mut m = Map::new();
        for (k, v) in [
            (MANAGED_BY, "cloudai".to_string()),
            (RUN_LABEL, self.run_tag.to_string()),
            (JOB_LABEL, self.name.to_string()),
            ("cloudai-scenario", label_value(self.scenario)),
            ("cloudai-test", label_value(&run.id)),
            ("cloudai-iteration", label_value(self.iteration)),
            (ROLE_LABEL, role.to_string()),
        ] {
            if !v.is_empty() {
                m.insert(k.to_string(), v.into());
            }
        }
        Value::Object(m)
    }

    fn metadata(&self, run: &TestRun) -> Value {
        let mut labels = self.labels(run, "");
        labels
            .as_object_mut()
            .expect("labels are a map")
            .remove(ROLE_LABEL);
        json!({
            "name": self.name,
            "namespace": self.namespace,
            "labels": labels,
            "annotations": {IDENTITY: self.identity, "cloudai-results": self.results_dir},
        })
    }
}

fn env(envs: &[(String, String)]) -> Value {
    envs.iter()
        .map(|(k, v)| json!({"name": k, "value": v}))
        .collect()
}

/// Hosts the test is pinned to (`nodes = [...]`, as find-bad-nodes sets them): required node affinity on the
/// hostname label.
fn affinity(run: &TestRun) -> Option<Value> {
    payload::pin(run).map(
        |terms| json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": terms}}),
    )
}

fn pod_spec(
    run: &TestRun,
    sys: &KubernetesConfig,
    restart: &str,
    container: Value,
    pinned: bool,
) -> Value {
    let mut spec = json!({"restartPolicy": restart, "containers": [container]});
    if let Some(h) = sys.use_host_network {
        spec["hostNetwork"] = h.into();
    }
    if pinned {
        if let Some(a) = affinity(run) {
            spec["affinity"] = a;
        }
    }
    spec
}

/// What one step runs: its image, its command as on Slurm, and the GPUs each node gives it.
pub struct Command<'a> {
    pub image: String,
    pub cmd: String,
    pub gpus: u64,
    pub env: &'a [(String, String)],
}

/// A `batch/v1` Job with one pod that is never restarted (a rerun would hide a failure).
pub fn job(run: &TestRun, sys: &KubernetesConfig, m: &Meta, c: &Command) -> Value {
    let mut container = json!({
        "name": "main", "image": c.image, "command": ["/bin/bash", "-c", c.cmd], "env": env(c.env),
    });
    if c.gpus > 0 {
        container["resources"] = json!({"limits": {GPU_RESOURCE: c.gpus}});
    }
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": m.metadata(run),
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": m.labels(run, "main")},
                "spec": pod_spec(run, sys, "Never", container, true),
            },
        },
    })
}

/// A Kubeflow MPIJob: one launcher running mpirun with the test's command line, `num_nodes` workers with the
/// node's GPUs each and `slotsPerWorker` ranks each.
pub fn mpijob(run: &TestRun, sys: &KubernetesConfig, m: &Meta, c: &Command, slots: u64) -> Value {
    let ranks = run.num_nodes * slots;
    let mut mpirun = vec![
        "mpirun".to_string(),
        "--allow-run-as-root".into(),
        "-np".into(),
        ranks.to_string(),
        "-bind-to".into(),
        "none".into(),
        "-map-by".into(),
        format!("ppr:{slots}:node"),
    ];
    for (k, _) in c.env {
        mpirun.push("-x".into());
        mpirun.push(k.clone());
    }
    mpirun.push(c.cmd.clone());
    let launcher = json!({
        "name": "launcher", "image": c.image, "command": ["/bin/bash", "-c", mpirun.join(" ")], "env": env(c.env),
    });
    let mut worker = json!({
        "name": "worker", "image": c.image, "env": env(c.env),
        "resources": {"limits": {GPU_RESOURCE: c.gpus}},
    });
    // workers only serve the launcher's ssh: sshd in the foreground, unless the image's entrypoint does it
    let command: Vec<&str> = sys.mpi_worker_command.split_whitespace().collect();
    if !command.is_empty() {
        worker["command"] = json!(command);
    }
    let run_policy = json!({"cleanPodPolicy": "Running", "backoffLimit": 0});
    // num_nodes means that many hosts: never two workers of one job on one node, even where GPUs would allow it
    let mut worker_spec = pod_spec(run, sys, "OnFailure", worker, true);
    worker_spec["affinity"]["podAntiAffinity"] = json!({"requiredDuringSchedulingIgnoredDuringExecution": [{
        "topologyKey": "kubernetes.io/hostname",
        "labelSelector": {"matchLabels": {JOB_LABEL: m.name, ROLE_LABEL: "worker"}},
    }]});
    json!({
        "apiVersion": format!("{MPIJOB_GROUP}/{MPIJOB_VERSION}"),
        "kind": "MPIJob",
        "metadata": m.metadata(run),
        "spec": {
            "slotsPerWorker": slots,
            "runPolicy": run_policy,
            "mpiImplementation": "OpenMPI",
            "sshAuthMountPath": sys.ssh_auth_mount_path,
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "restartPolicy": "Never",
                    "template": {
                        "metadata": {"labels": m.labels(run, "launcher")},
                        "spec": pod_spec(run, sys, "Never", launcher, false),
                    },
                },
                "Worker": {
                    "replicas": run.num_nodes,
                    "restartPolicy": "OnFailure",
                    "template": {
                        "metadata": {"labels": m.labels(run, "worker")},
                        "spec": worker_spec,
                    },
                },
            },
        },
    })
}

/// Block-style YAML of a JSON value (what `kubectl apply -f` takes). Strings that YAML would read as something
/// else are written JSON-quoted, which YAML reads back unchanged.
pub fn to_yaml(docs: &[Value]) -> String {
    let mut out = String::new();
    for d in docs {
        out.push_str("---\n");
        emit(&mut out, d, 0);
    }
    out
}

fn emit(out: &mut String, v: &Value, indent: usize) {
    let pad = " ".repeat(indent);
    match v {
        Value::Object(m) => {
            for (k, val) in m {
                out.push_str(&format!("{pad}{}:", scalar_str(k)));
                nested(out, val, indent);
            }
        }
        Value::Array(items) => {
            for item in items {
                let mut sub = String::new();
                match item {
                    Value::Object(m) if !m.is_empty() => emit(&mut sub, item, indent + 2),
                    Value::Array(a) if !a.is_empty() => emit(&mut sub, item, indent + 2),
                    _ => sub = format!("{pad}  {}\n", scalar(item)),
                }
                // the first line of the item goes on the dash
                out.push_str(&pad);
                out.push_str("- ");
                out.push_str(&sub[indent + 2..]);
            }
        }
        _ => out.push_str(&format!("{pad}{}\n", scalar(v))),
    }
}

fn nested(out: &mut String, val: &Value, indent: usize) {
    match val {
        Value::Object(m) if !m.is_empty() => {
            out.push('\n');
            emit(out, val, indent + 2);
        }
        Value::Array(a) if !a.is_empty() => {
            out.push('\n');
            emit(out, val, indent);
        }
        _ => out.push_str(&format!(" {}\n", scalar(val))),
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => scalar_str(s),
        Value::Object(_) => "{}".into(),
        Value::Array(_) => "[]".into(),
    }
}

fn scalar_str(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '-'))
        && !s.starts_with(['-', '.'])
        && s.parse::<f64>().is_err()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && !matches!(
            s.to_ascii_lowercase().as_str(),
            "true" | "false" | "yes" | "no" | "on" | "off" | "y" | "n" | "null" | "nan" | "inf"
        );
    if plain {
        s.to_string()
    } else {
        serde_json::to_string(s).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_valid() {
        assert_eq!(label_value("Tests.all_reduce"), "Tests.all_reduce");
        assert_eq!(label_value("a b/c"), "a_b_c");
        assert_eq!(label_value("__x__"), "x");
        assert_eq!(label_value(&"y".repeat(80)).len(), 63);
        assert_eq!(label_value("-"), "");
    }

    #[test]
    fn yaml_of_a_manifest() {
        let v = json!({
            "kind": "Job",
            "metadata": {"name": "a-1", "labels": {"cloudai-iteration": "0", "x": "true"}, "annotations": {}},
            "spec": {"containers": [{"name": "main", "command": ["/bin/bash", "-c", "echo \"hi\": $X"],
                     "resources": {"limits": {"nvidia.com/gpu": 8}}}], "backoffLimit": 0, "empty": []},
        });
        assert_eq!(
            to_yaml(&[v]),
            "---\nkind: Job\nmetadata:\n  annotations: {}\n  labels:\n    cloudai-iteration: \"0\"\n    x: \"true\"\n  \
             name: a-1\nspec:\n  backoffLimit: 0\n  containers:\n  - command:\n    - /bin/bash\n    - \"-c\"\n    \
             - \"echo \\\"hi\\\": $X\"\n    name: main\n    resources:\n      limits:\n        nvidia.com/gpu: 8\n  \
             empty: []\n"
        );
    }
}
