//! The objects an iteration becomes on Kubernetes: a Kubeflow `MPIJob` (kubeflow.org/v2beta1) for MPI ranks on
//! several nodes, a `batch/v1` Job for everything else; pods fitted for collective benchmarks as the system says
//! (memory-backed `/dev/shm`, host or secondary networks, RDMA devices, capabilities, placement, deadlines).
//! Built as plain JSON so the same value is written to `k8s-manifest.yaml` in dry-run and sent to the API server
//! in a run.

use serde_json::{json, Map, Value};

use crate::config::pods::{patch, PodSettings};
use crate::config::system::KubernetesConfig;
use crate::scenario::TestRun;
use crate::systems::objects::{preflight, ssh};

pub(crate) const MPIJOB_GROUP: &str = "kubeflow.org";
pub(crate) const MPIJOB_VERSION: &str = "v2beta1";
pub(crate) const MPIJOB_PLURAL: &str = "mpijobs";

/// Labels every object (and pod template) we create carries.
pub(crate) const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub(crate) const RUN_LABEL: &str = "cloudai-run";
pub(crate) const JOB_LABEL: &str = "cloudai-job";
pub(crate) const ROLE_LABEL: &str = "cloudai-role";
pub(crate) const IDENTITY: &str = "cloudai-identity";

pub(crate) const GPU_RESOURCE: &str = "nvidia.com/gpu";

pub(crate) fn pod_resource() -> kube::api::ApiResource {
    kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&())
}

pub(crate) fn job_resource() -> kube::api::ApiResource {
    kube::api::ApiResource::erase::<k8s_openapi::api::batch::v1::Job>(&())
}

pub(crate) fn mpijob_resource() -> kube::api::ApiResource {
    kube::api::ApiResource {
        group: MPIJOB_GROUP.into(),
        version: MPIJOB_VERSION.into(),
        api_version: format!("{}/{}", MPIJOB_GROUP, MPIJOB_VERSION),
        kind: "MPIJob".into(),
        plural: MPIJOB_PLURAL.into(),
    }
}

/// Which kind of object a step is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Job,
    MpiJob,
    /// The workload's own kind ([`crate::workloads::object::OwnObject`]): its resource is in the step's spec.
    Own,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Job => "Job",
            Kind::MpiJob => "MPIJob",
            Kind::Own => "object",
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
    pub(crate) fn labels(&self, run: &TestRun, role: &str) -> Value {
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

    pub(crate) fn metadata(&self, run: &TestRun) -> Value {
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
    crate::systems::container::pin(run).map(
        |terms| json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": terms}}),
    )
}

/// The volume name of the memory-backed `/dev/shm`.
const SHM_VOLUME: &str = "dev-shm";
/// The claim name of a worker's IMEX channel.
const IMEX_CLAIM: &str = "imex-channel";
use crate::workloads::launch::MPI_HOSTFILE as HOSTFILE;

/// What one pod runs.
pub struct Pod<'a> {
    pub role: &'a str,
    pub image: &'a str,
    /// None: the image's entrypoint.
    pub command: Option<Vec<String>>,
    pub gpus: u64,
    pub env: &'a [(String, String)],
    pub restart: &'a str,
    /// Pinned to the test's hosts (`nodes = [...]`).
    pub pinned: bool,
    /// The port its sshd serves (MPI workers), declared on the container.
    pub ssh_port: Option<u64>,
}

/// Everything the system says about pods, for one step.
pub struct Fit<'a> {
    pub sys: &'a KubernetesConfig,
    pub host_network: bool,
}

impl Fit<'_> {
    fn pods(&self) -> &PodSettings {
        &self.sys.pods
    }

    /// A pod template: the container, then what the system asks of every pod and, for pods with GPUs, what GPU
    /// collectives need (shared memory, NICs, RDMA devices, capabilities); last the operator's own patch.
    fn template(&self, run: &TestRun, m: &Meta, pod: &Pod) -> Value {
        let p = self.pods();
        let mut container = json!({"name": pod.role, "image": pod.image, "env": env(pod.env)});
        if let Some(c) = &pod.command {
            container["command"] = json!(c);
        }
        let mut spec = json!({"restartPolicy": pod.restart});
        let mut labels = m.labels(run, pod.role);
        for (k, v) in &p.pod_labels {
            // ours name the job: an operator's label of the same key does not replace them
            labels
                .as_object_mut()
                .expect("labels are a map")
                .entry(k.clone())
                .or_insert_with(|| v.as_str().into());
        }
        let mut meta = json!({"labels": labels});
        // the host's network is for the pods of a GPU launch (and their launcher), not for scripts and sleeps
        if self.host_network && (pod.gpus > 0 || pod.role == "launcher") {
            spec["hostNetwork"] = true.into();
            spec["dnsPolicy"] = "ClusterFirstWithHostNet".into();
        }
        if pod.pinned {
            if let Some(a) = affinity(run) {
                spec["affinity"] = a;
            }
        }
        for (k, v) in every_pod(p) {
            spec[k] = v;
        }
        if pod.gpus > 0 {
            let mut limits = Map::new();
            limits.insert(GPU_RESOURCE.into(), pod.gpus.into());
            for (k, q) in &p.extended_resources {
                limits.insert(k.clone(), q.as_str().into());
            }
            container["resources"] = p.gpu_resources.to_json(limits);
            if !p.shm_size.is_empty() {
                spec["volumes"] = json!([{"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": p.shm_size}}]);
                container["volumeMounts"] = json!([{"name": SHM_VOLUME, "mountPath": "/dev/shm"}]);
            }
            if p.privileged {
                container["securityContext"] = json!({"privileged": true});
            } else if !p.capabilities.is_empty() {
                container["securityContext"] = json!({"capabilities": {"add": p.capabilities}});
            }
            let mut annotations: Map<String, Value> = p
                .pod_annotations
                .iter()
                .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
                .collect();
            if !p.networks.is_empty() {
                annotations.insert(MULTUS_NETWORKS.into(), p.networks.join(",").into());
            }
            if !annotations.is_empty() {
                meta["annotations"] = annotations.into();
            }
        } else {
            let r = p.launcher_resources.to_json(Map::new());
            if r.as_object().is_some_and(|o| !o.is_empty()) {
                container["resources"] = r;
            }
        }
        if let Some(port) = pod.ssh_port {
            container["ports"] = json!([{"name": "ssh", "containerPort": port, "protocol": "TCP"}]);
        }
        spec["containers"] = json!([container]);
        if let Some(patch) = &p.pod_spec_patch {
            patch::merge(&mut spec, &patch::for_pod(patch, pod.role));
        }
        if pod.gpus > 0 {
            if let Some(patch) = &p.gpu_pod_spec_patch {
                patch::merge(&mut spec, &patch::for_pod(patch, pod.role));
            }
        }
        json!({"metadata": meta, "spec": spec})
    }
}

/// The pod-spec fields the system asks of every pod it runs: tolerations, node selector, image pull secrets,
/// service account (each only when set).
pub(crate) fn every_pod(p: &PodSettings) -> Map<String, Value> {
    let mut spec = Map::new();
    if !p.tolerations.is_empty() {
        spec.insert(
            "tolerations".into(),
            p.tolerations
                .iter()
                .map(|t| t.to_json("tolerationSeconds"))
                .collect(),
        );
    }
    if !p.node_selector.is_empty() {
        spec.insert(
            "nodeSelector".into(),
            p.node_selector
                .iter()
                .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
                .collect::<Map<_, _>>()
                .into(),
        );
    }
    if !p.image_pull_secrets.is_empty() {
        spec.insert("imagePullSecrets".into(), p.pull_secrets_json());
    }
    if let Some(sa) = &p.service_account {
        spec.insert("serviceAccountName".into(), sa.as_str().into());
    }
    spec
}

/// Multus' pod annotation naming the secondary networks.
pub(crate) const MULTUS_NETWORKS: &str = "k8s.v1.cni.cncf.io/networks";

/// Server-side limits of one object: deadline (time limit plus margin) and how long it stays once finished.
pub struct Limits {
    pub deadline: Option<u64>,
    pub ttl: u64,
}

/// A `batch/v1` Job with one pod that is never restarted (a rerun would hide a failure); with `spread` > 1, one such
/// pod on each of `spread` nodes (a per-node check: never two on one node).
pub fn job(run: &TestRun, fit: &Fit, m: &Meta, pod: &Pod, limits: &Limits, spread: u64) -> Value {
    let mut template = fit.template(run, m, pod);
    let mut spec = json!({
        "backoffLimit": 0,
        "ttlSecondsAfterFinished": limits.ttl,
    });
    if spread > 1 {
        spec["parallelism"] = spread.into();
        spec["completions"] = spread.into();
        let peers = json!({JOB_LABEL: m.name, ROLE_LABEL: pod.role});
        template["spec"]["affinity"]["podAntiAffinity"] = json!({"requiredDuringSchedulingIgnoredDuringExecution": [{
            "topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": peers},
        }]});
    }
    spec["template"] = template;
    if let Some(d) = limits.deadline {
        spec["activeDeadlineSeconds"] = d.into();
    }
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": m.metadata(run), "spec": spec})
}

/// What the launcher of an MPIJob runs and how its workers serve it.
pub struct Mpi<'a> {
    pub image: &'a str,
    /// The rank's command line (program, arguments, profiler).
    pub cmd: &'a str,
    pub env: &'a [(String, String)],
    pub workers: u64,
    pub slots: u64,
    pub gpus: u64,
    pub ssh_port: u64,
    /// Seconds the launcher waits for every worker's sshd before it gives up with a named reason.
    pub worker_wait: u64,
    /// The tag of the workers' sshd banner when cloudai starts it ([`ssh::banner_tag`]).
    pub banner: Option<String>,
    /// The pre-flight check on every worker before the test, with the GPUs each must list.
    pub preflight: Option<(&'a crate::config::system::Preflight, u64)>,
}

/// The launcher's script: wait (bounded) until every worker of the operator's host file answers with its own
/// sshd ([`ssh::wait_for_workers`]) — a worker without sshd is named instead of failing inside mpirun —, then
/// mpirun with the host file, the workers' port and ssh options, every variable forwarded to the ranks.
pub(crate) fn launcher_script(mpi: &Mpi) -> String {
    let slots = mpi.slots;
    let mut run = ssh::mpirun(mpi.workers * slots, slots, mpi.env, mpi.cmd, mpi.ssh_port).join(" ");
    if let Some((pf, min)) = mpi.preflight {
        // one rank per worker, nothing forwarded: the check sees the node as the test will
        let one = ssh::mpirun(mpi.workers, 1, &[], "", mpi.ssh_port);
        run = preflight::across(pf, min, mpi.workers, one.join(" ").trim_end(), &run);
    }
    format!(
        "{wait}; {run}",
        wait = ssh::wait_for_workers(
            HOSTFILE,
            mpi.ssh_port,
            mpi.worker_wait,
            mpi.image,
            mpi.banner.as_deref()
        ),
    )
}

/// A Kubeflow MPIJob: one launcher running mpirun with the test's command line, `workers` workers with the
/// node's GPUs each and `slots` ranks each.
pub fn mpijob(run: &TestRun, fit: &Fit, m: &Meta, mpi: &Mpi, limits: &Limits) -> Value {
    let sys = fit.sys;
    let launcher = Pod {
        role: "launcher",
        image: mpi.image,
        command: Some(vec!["/bin/bash".into(), "-c".into(), launcher_script(mpi)]),
        gpus: 0,
        env: mpi.env,
        restart: "Never",
        pinned: false,
        ssh_port: None,
    };
    // workers only serve the launcher's ssh: sshd in the foreground, unless the image's entrypoint does it
    let worker = Pod {
        role: "worker",
        image: mpi.image,
        command: ssh::worker_command(&sys.mpi_worker_command, mpi.ssh_port, mpi.image, m.identity),
        gpus: mpi.gpus,
        env: mpi.env,
        restart: "OnFailure",
        pinned: true,
        ssh_port: Some(mpi.ssh_port),
    };
    let mut worker_tpl = fit.template(run, m, &worker);
    let wspec = &mut worker_tpl["spec"];
    // ready once sshd listens, so the operator and `kubectl get` show workers that can take ranks
    wspec["containers"][0]["readinessProbe"] =
        json!({"tcpSocket": {"port": mpi.ssh_port}, "initialDelaySeconds": 2, "periodSeconds": 5});
    // num_nodes means that many hosts: never two workers of one job on one node, even where GPUs would allow it
    let peers = json!({JOB_LABEL: m.name, ROLE_LABEL: "worker"});
    wspec["affinity"]["podAntiAffinity"] = json!({"requiredDuringSchedulingIgnoredDuringExecution": [{
        "topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": peers},
    }]});
    if let Some(t) = &sys.pods.imex_channel_template {
        // multi-node NVLink: every worker claims the ComputeDomain's IMEX channel, all in one NVLink clique
        wspec["resourceClaims"] = json!([{"name": IMEX_CLAIM, "resourceClaimTemplateName": t}]);
        wspec["containers"][0]["resources"]["claims"] = json!([{"name": IMEX_CLAIM}]);
        wspec["affinity"]["podAffinity"] = json!({"requiredDuringSchedulingIgnoredDuringExecution": [{
            "topologyKey": "nvidia.com/gpu.clique", "labelSelector": {"matchLabels": peers},
        }]});
    }
    let mut run_policy = json!({
        "cleanPodPolicy": "Running", "backoffLimit": 0, "ttlSecondsAfterFinished": limits.ttl,
    });
    if let Some(d) = limits.deadline {
        run_policy["activeDeadlineSeconds"] = d.into();
    }
    json!({
        "apiVersion": format!("{MPIJOB_GROUP}/{MPIJOB_VERSION}"),
        "kind": "MPIJob",
        "metadata": m.metadata(run),
        "spec": {
            "slotsPerWorker": mpi.slots,
            "runPolicy": run_policy,
            "mpiImplementation": "OpenMPI",
            "launcherCreationPolicy": "AtStartup",
            "sshAuthMountPath": sys.ssh_auth_mount_path,
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "restartPolicy": "Never", "template": fit.template(run, m, &launcher)},
                "Worker": {"replicas": mpi.workers, "restartPolicy": "OnFailure", "template": worker_tpl},
            },
        },
    })
}

/// Block-style YAML of a JSON value (what `kubectl apply -f` takes). Strings that YAML would read as something
/// else are written JSON-quoted, which YAML reads back unchanged.
pub(crate) fn to_yaml(docs: &[Value]) -> String {
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
