//! How GPU pods are fitted for NCCL on container clusters (Kubernetes, Run:ai): shared memory, networks, RDMA
//! devices, capabilities, placement, pull secrets, server-side limits. Our fields (CloudAI has none of them);
//! defaults work on a typical GPU cluster and every one can be overridden in the system TOML.

mod fields;
pub mod nics;
pub mod patch;

pub use fields::{is_quantity, to_json, RUNAI_CAPABILITIES};
use fields::{meta_map, resources, tolerations};

use indexmap::IndexMap;
use serde_json::Value;

use super::decode::{Ctx, View};
use super::node::Kind;

/// A taint the pods tolerate.
#[derive(Clone, Debug, PartialEq)]
pub struct Toleration {
    pub key: Option<String>,
    /// `Exists` or `Equal`.
    pub operator: String,
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule`, `NoExecute`; None: every effect.
    pub effect: Option<String>,
    pub seconds: Option<u64>,
}

#[derive(Clone, Debug)]
pub struct PodSettings {
    /// Size of the memory-backed `/dev/shm` of GPU pods (a Kubernetes quantity); empty: the runtime's 64 MiB.
    pub shm_size: String,
    /// `use_host_network`: true/false forces it; unset: host networking when `global_env_vars` names a NIC
    /// (`NCCL_SOCKET_IFNAME`, `NCCL_IB_HCA`) and no secondary `networks` are configured.
    pub use_host_network: Option<bool>,
    /// Share the host's IPC namespace (Run:ai `security.hostIpc`).
    pub host_ipc: bool,
    /// Secondary networks (Multus `NetworkAttachmentDefinition`s, `namespace/name`) attached to GPU pods.
    pub networks: Vec<String>,
    /// Extended resources each GPU pod asks besides its GPUs (`rdma/rdma_shared_device_a = 1`,
    /// `vpc.amazonaws.com/efa = 32`).
    pub extended_resources: IndexMap<String, String>,
    /// Linux capabilities of GPU containers (default `IPC_LOCK`: RDMA registers pinned memory).
    pub capabilities: Vec<String>,
    /// Privileged GPU containers (Kubernetes only; every device and capability).
    pub privileged: bool,
    pub tolerations: Vec<Toleration>,
    /// Node labels every pod must match (Kubernetes `nodeSelector`).
    pub node_selector: IndexMap<String, String>,
    /// Run:ai node pools, in order of preference.
    pub node_pools: Vec<String>,
    pub image_pull_secrets: Vec<String>,
    pub service_account: Option<String>,
    /// Merged into every pod spec we create ([`patch::merge`]: named lists merge by name): any pod-spec field
    /// we do not model, sidecars and init containers included.
    pub pod_spec_patch: Option<Value>,
    /// Merged after it into the pods that run the test's GPU ranks only (MPI workers, GPU Jobs): a GPUDirect
    /// sidecar, device volumes.
    pub gpu_pod_spec_patch: Option<Value>,
    /// Requests and limits of the pods with GPUs (Kubernetes quantities): requests keep them out of the
    /// BestEffort class, the first evicted, and make hugepages valid.
    pub gpu_resources: Compute,
    /// Requests and limits of every other pod (MPI launchers, scripts, hooks).
    pub launcher_resources: Compute,
    /// Annotations of the pods that run the test's GPU ranks (GKE's multi-network, device annotations).
    pub pod_annotations: IndexMap<String, String>,
    /// Labels of every pod (cost centres, Kueue, policy selectors).
    pub pod_labels: IndexMap<String, String>,
    /// `rdma`: unset = the RDMA device the nodes offer is requested for NCCL workers when the system asks none;
    /// false = never (pods unchanged); true = required (refused when the nodes offer none).
    pub rdma: Option<bool>,
    /// GB200/GB300 multi-node NVLink: the `ResourceClaimTemplate` of a ComputeDomain's IMEX channel, claimed by
    /// every worker.
    pub imex_channel_template: Option<String>,
    /// Seconds the server lets a job live beyond its time limit (queueing counts on the server's clock).
    pub deadline_margin: u64,
    /// Seconds a finished object is kept before the server deletes it (if cloudai did not).
    pub ttl_after_finished: u64,
    /// Port of the workers' sshd: 22 on the pod network, 2222 with host networking (the node's sshd has 22).
    pub ssh_port: Option<u64>,
}

impl Default for PodSettings {
    fn default() -> Self {
        Self {
            shm_size: DEFAULT_SHM.into(),
            use_host_network: None,
            host_ipc: false,
            networks: Vec::new(),
            extended_resources: IndexMap::new(),
            capabilities: vec!["IPC_LOCK".into()],
            privileged: false,
            tolerations: vec![gpu_toleration()],
            node_selector: IndexMap::new(),
            node_pools: Vec::new(),
            image_pull_secrets: Vec::new(),
            service_account: None,
            pod_spec_patch: None,
            gpu_pod_spec_patch: None,
            gpu_resources: Compute {
                cpu: Some(DEFAULT_GPU_CPU.into()),
                memory: Some(DEFAULT_GPU_MEMORY.into()),
                cpu_limit: None,
                memory_limit: None,
            },
            launcher_resources: Compute {
                cpu: Some(DEFAULT_LAUNCHER_CPU.into()),
                memory: Some(DEFAULT_LAUNCHER_MEMORY.into()),
                cpu_limit: None,
                memory_limit: None,
            },
            pod_annotations: IndexMap::new(),
            pod_labels: IndexMap::new(),
            rdma: None,
            imex_channel_template: None,
            deadline_margin: DEFAULT_DEADLINE_MARGIN,
            ttl_after_finished: DEFAULT_TTL,
            ssh_port: None,
        }
    }
}

/// CPU and memory of one kind of pod (Kubernetes quantities; None: not asked).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Compute {
    pub cpu: Option<String>,
    pub memory: Option<String>,
    pub cpu_limit: Option<String>,
    pub memory_limit: Option<String>,
}

impl Compute {
    /// `{requests, limits}` of a container, the extra `limits` (GPUs, devices) added.
    pub fn to_json(&self, mut limits: serde_json::Map<String, Value>) -> Value {
        let mut requests = serde_json::Map::new();
        for (k, v) in [("cpu", &self.cpu), ("memory", &self.memory)] {
            if let Some(v) = v {
                requests.insert(k.into(), v.as_str().into());
            }
        }
        for (k, v) in [("cpu", &self.cpu_limit), ("memory", &self.memory_limit)] {
            if let Some(v) = v {
                limits.insert(k.into(), v.as_str().into());
            }
        }
        let mut out = serde_json::Map::new();
        if !requests.is_empty() {
            out.insert("requests".into(), requests.into());
        }
        if !limits.is_empty() {
            out.insert("limits".into(), limits.into());
        }
        Value::Object(out)
    }
}

/// CPU cores of a quantity (`"500m"` → 0.5, `"2"` → 2), as Run:ai's API takes them.
pub(crate) fn cores(q: &str) -> Option<f64> {
    match q.strip_suffix('m') {
        Some(milli) => milli.parse::<f64>().ok().map(|m| m / 1000.0),
        None => q.parse().ok(),
    }
}

pub(crate) const DEFAULT_GPU_CPU: &str = "1";
pub(crate) const DEFAULT_GPU_MEMORY: &str = "4Gi";
pub(crate) const DEFAULT_LAUNCHER_CPU: &str = "250m";
pub(crate) const DEFAULT_LAUNCHER_MEMORY: &str = "512Mi";
pub(crate) const DEFAULT_SHM: &str = "16Gi";
pub(crate) const DEFAULT_DEADLINE_MARGIN: u64 = 900;
pub(crate) const DEFAULT_TTL: u64 = 86_400;
/// Variables that name the NICs NCCL uses: they only exist in the host's network namespace.
pub(crate) const NIC_VARS: &[&str] = &["NCCL_SOCKET_IFNAME", "NCCL_IB_HCA"];

/// GPU nodes are commonly tainted `nvidia.com/gpu:NoSchedule`; not every cluster tolerates it for GPU pods.
fn gpu_toleration() -> Toleration {
    Toleration {
        key: Some("nvidia.com/gpu".into()),
        operator: "Exists".into(),
        value: None,
        effect: Some("NoSchedule".into()),
        seconds: None,
    }
}

impl Toleration {
    /// As Kubernetes writes it; `seconds_key` names the grace field (`tolerationSeconds`, Run:ai's `seconds`).
    pub fn to_json(&self, seconds_key: &str) -> Value {
        let mut v = serde_json::json!({"operator": self.operator});
        for (k, x) in [
            ("key", &self.key),
            ("value", &self.value),
            ("effect", &self.effect),
        ] {
            if let Some(x) = x {
                v[k] = x.as_str().into();
            }
        }
        if let Some(s) = self.seconds {
            v[seconds_key] = s.into();
        }
        v
    }
}

impl PodSettings {
    /// `image_pull_secrets` as both APIs take them: `[{name}]`.
    pub(crate) fn pull_secrets_json(&self) -> Value {
        self.image_pull_secrets
            .iter()
            .map(|n| serde_json::json!({"name": n}))
            .collect()
    }

    /// Whether pods use the host's network, given the job's environment.
    pub(crate) fn host_network(&self, env: &[(String, String)]) -> bool {
        self.use_host_network.unwrap_or_else(|| {
            self.networks.is_empty() && env.iter().any(|(k, _)| NIC_VARS.contains(&k.as_str()))
        })
    }

    /// The workers' sshd port for a host-network choice.
    pub(crate) fn ssh_port(&self, host_network: bool) -> u64 {
        self.ssh_port
            .unwrap_or(if host_network { 2222 } else { 22 })
    }

    /// The server's deadline for a job with this time limit (None without one).
    pub fn deadline(&self, time_limit: Option<u64>, max_pending: Option<u64>) -> Option<u64> {
        time_limit.map(|t| t + max_pending.unwrap_or(600) + self.deadline_margin)
    }
}

/// Field names of [`PodSettings`] in a system TOML.
pub(crate) const FIELDS: &[&str] = &[
    "use_host_network",
    "shm_size",
    "host_ipc",
    "networks",
    "extended_resources",
    "capabilities",
    "privileged",
    "tolerations",
    "node_selector",
    "node_pools",
    "image_pull_secrets",
    "service_account",
    "pod_spec_patch",
    "gpu_pod_spec_patch",
    "cpu",
    "memory",
    "cpu_limit",
    "memory_limit",
    "launcher_cpu",
    "launcher_memory",
    "launcher_cpu_limit",
    "launcher_memory_limit",
    "pod_annotations",
    "pod_labels",
    "rdma",
    "imex_channel_template",
    "deadline_margin",
    "ttl_after_finished",
    "ssh_port",
];

/// Reads the pod settings of a system table. `runai` selects the Run:ai API's rules (no privileged, no
/// pod-spec patch, node pools instead of a node selector).
pub fn decode(ctx: &mut Ctx, v: &View, runai: bool) -> PodSettings {
    let d = PodSettings::default();
    let shm_size = v.opt_str(ctx, "shm_size").unwrap_or(d.shm_size);
    if let Some(n) = v.get("shm_size") {
        if !shm_size.is_empty() && !is_quantity(&shm_size) {
            ctx.err(
                &n.loc,
                "shm_size",
                format!("{shm_size:?} is not a Kubernetes quantity"),
                Some("write it like \"16Gi\" or \"512Mi\"; \"\" keeps the runtime's 64 MiB".into()),
            );
        }
    }
    let capabilities = match v.get("capabilities") {
        Some(_) => v.str_list(ctx, "capabilities"),
        None => d.capabilities,
    };
    if let Some(n) = v.get("capabilities") {
        for c in &capabilities {
            let ok = if runai {
                RUNAI_CAPABILITIES.contains(&c.as_str())
            } else {
                !c.is_empty() && c.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')
            };
            if !ok {
                ctx.err(
                    &n.loc,
                    "capabilities",
                    format!("{c:?} is not a Linux capability name"),
                    Some("write names like \"IPC_LOCK\" (without CAP_)".into()),
                );
            }
        }
    }
    let extended_resources = resources(ctx, v);
    let tolerations = match v.get("tolerations") {
        Some(n) => tolerations(ctx, n),
        None => d.tolerations,
    };
    let spec_patch = |ctx: &mut Ctx, key: &str| {
        v.get(key).and_then(|n| match &n.kind {
            Kind::Table(_) => {
                patch::check(ctx, n, key);
                Some(to_json(n))
            }
            _ => {
                ctx.type_err(n, key, "a table of pod-spec fields");
                None
            }
        })
    };
    let pod_spec_patch = spec_patch(ctx, "pod_spec_patch");
    let gpu_pod_spec_patch = spec_patch(ctx, "gpu_pod_spec_patch");
    let quantity = |ctx: &mut Ctx, key: &str, default: Option<&str>| {
        let Some(n) = v.get(key) else {
            return default.map(String::from);
        };
        let q = match &n.kind {
            Kind::Int(i) if *i > 0 => Some(i.to_string()),
            Kind::Float(f) if *f > 0.0 => Some(f.to_string()),
            Kind::Str(s) if s.is_empty() => return None,
            Kind::Str(s)
                if is_quantity(s)
                    && s.trim_end_matches(char::is_alphabetic)
                        .parse::<f64>()
                        .is_ok_and(|x| x > 0.0) =>
            {
                Some(s.clone())
            }
            _ => None,
        };
        if q.is_none() {
            ctx.err(
                &n.loc,
                key,
                format!("{} is not a positive Kubernetes quantity", n.show()),
                Some("write it like 2, \"500m\" (CPU) or \"8Gi\" (memory); \"\" asks none".into()),
            );
        }
        q
    };
    let gpu_resources = Compute {
        cpu: quantity(ctx, "cpu", Some(DEFAULT_GPU_CPU)),
        memory: quantity(ctx, "memory", Some(DEFAULT_GPU_MEMORY)),
        cpu_limit: quantity(ctx, "cpu_limit", None),
        memory_limit: quantity(ctx, "memory_limit", None),
    };
    let launcher_resources = Compute {
        cpu: quantity(ctx, "launcher_cpu", Some(DEFAULT_LAUNCHER_CPU)),
        memory: quantity(ctx, "launcher_memory", Some(DEFAULT_LAUNCHER_MEMORY)),
        cpu_limit: quantity(ctx, "launcher_cpu_limit", None),
        memory_limit: quantity(ctx, "launcher_memory_limit", None),
    };
    let pod_annotations = meta_map(ctx, v, "pod_annotations", false);
    let pod_labels = meta_map(ctx, v, "pod_labels", true);
    let privileged = v.opt_bool(ctx, "privileged").unwrap_or(false);
    let scheduler_only = |ctx: &mut Ctx, key: &str, on: &str, hint: &str| {
        if let Some(n) = v.get(key) {
            ctx.err(
                &n.loc,
                key,
                format!("only a {on} system has this field"),
                Some(hint.into()),
            );
        }
    };
    if runai {
        scheduler_only(
            ctx,
            "privileged",
            "Kubernetes",
            "Run:ai's API has no privileged containers: ask the capabilities you need",
        );
        for key in ["pod_spec_patch", "gpu_pod_spec_patch"] {
            scheduler_only(
                ctx,
                key,
                "Kubernetes",
                "Run:ai builds its pods itself; its API has no pod-spec pass-through",
            );
        }
        scheduler_only(
            ctx,
            "node_selector",
            "Kubernetes",
            "use node_pools on Run:ai",
        );
        scheduler_only(
            ctx,
            "service_account",
            "Kubernetes",
            "Run:ai runs workloads under its own service account",
        );
        scheduler_only(
            ctx,
            "imex_channel_template",
            "Kubernetes",
            "Run:ai's API has no resource claims",
        );
        scheduler_only(
            ctx,
            "networks",
            "Kubernetes",
            "Run:ai's API has no network attachments",
        );
    } else {
        scheduler_only(
            ctx,
            "node_pools",
            "Run:ai",
            "use node_selector on Kubernetes",
        );
        scheduler_only(
            ctx,
            "host_ipc",
            "Run:ai",
            "add hostIPC through pod_spec_patch on Kubernetes",
        );
    }
    let duration = |ctx: &mut Ctx, key: &str, default: u64| match v.get(key) {
        None => default,
        Some(n) => match &n.kind {
            Kind::Int(_) => v.count(ctx, key, default),
            _ => v.duration(ctx, key).unwrap_or(default),
        },
    };
    PodSettings {
        shm_size,
        use_host_network: v.opt_bool(ctx, "use_host_network"),
        host_ipc: v.opt_bool(ctx, "host_ipc").unwrap_or(false),
        networks: v.str_list(ctx, "networks"),
        extended_resources,
        capabilities,
        privileged,
        tolerations,
        node_selector: v.str_map(ctx, "node_selector"),
        node_pools: v.str_list(ctx, "node_pools"),
        image_pull_secrets: v.str_list(ctx, "image_pull_secrets"),
        service_account: v.opt_str(ctx, "service_account"),
        pod_spec_patch,
        gpu_pod_spec_patch,
        gpu_resources,
        launcher_resources,
        pod_annotations,
        pod_labels,
        rdma: v.opt_bool(ctx, "rdma"),
        imex_channel_template: v.opt_str(ctx, "imex_channel_template"),
        deadline_margin: duration(ctx, "deadline_margin", d.deadline_margin),
        ttl_after_finished: duration(ctx, "ttl_after_finished", d.ttl_after_finished),
        ssh_port: v.get("ssh_port").map(|_| v.count(ctx, "ssh_port", 22)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        for ok in ["16Gi", "1", "0.5", "512Mi", "100m", "32"] {
            assert!(is_quantity(ok), "{ok}");
        }
        for bad in ["", "Gi", "16 Gi", "16GB", "-1", "x1"] {
            assert!(!is_quantity(bad), "{bad}");
        }
    }

    #[test]
    fn host_network_follows_the_nic_variables() {
        let p = PodSettings::default();
        let nic = [("NCCL_SOCKET_IFNAME".to_string(), "ib".to_string())];
        assert!(p.host_network(&nic));
        assert!(!p.host_network(&[]));
        let with_nads = PodSettings {
            networks: vec!["default/ib-a".into()],
            ..PodSettings::default()
        };
        assert!(!with_nads.host_network(&nic));
        let forced = PodSettings {
            use_host_network: Some(false),
            ..PodSettings::default()
        };
        assert!(!forced.host_network(&nic));
        assert_eq!((p.ssh_port(true), p.ssh_port(false)), (2222, 22));
        assert_eq!(p.deadline(Some(600), None), Some(600 + 600 + 900));
        assert_eq!(p.deadline(None, Some(5)), None);
    }

    fn errors(extra: &str) -> Vec<(String, String)> {
        let text = format!(
            "name = \"k\"\nscheduler = \"kubernetes\"\nkube_config_path = \"\"\ninstall_path = \"i\"\n\
             output_path = \"o\"\ndefault_namespace = \"n\"\n{extra}\n"
        );
        let path = std::path::Path::new("s.toml");
        let node = crate::config::node::parse(path, &text, "system config").unwrap();
        match crate::config::system::decode(&node, path) {
            Ok(_) => Vec::new(),
            Err(e) => e.0.into_iter().map(|e| (e.field, e.message)).collect(),
        }
    }

    #[test]
    fn requests_labels_and_annotations_have_a_grammar() {
        assert!(
            errors("cpu = 2\nmemory = \"8Gi\"\nlauncher_cpu = \"\"\ncpu_limit = 0.5").is_empty()
        );
        for (extra, field, words) in [
            ("cpu = \"-1\"", "cpu", "not a positive Kubernetes quantity"),
            (
                "memory = \"8GB\"",
                "memory",
                "not a positive Kubernetes quantity",
            ),
            ("launcher_memory = 0", "launcher_memory", "not a positive"),
            (
                "pod_labels = { \"a b\" = \"x\" }",
                "pod_labels.a b",
                "not a Kubernetes label key",
            ),
            (
                "pod_labels = { team = \"a/b\" }",
                "pod_labels.team",
                "not a label value",
            ),
            (
                "pod_annotations = { \"Example.com/x\" = \"1\" }",
                "pod_annotations.Example.com/x",
                "annotation key",
            ),
            ("rdma = \"sometimes\"", "rdma", "expected a boolean"),
        ] {
            let e = errors(extra);
            assert!(
                e.iter().any(|(f, m)| f == field && m.contains(words)),
                "{extra}: {e:?}"
            );
        }
        // a long annotation value is fine (GKE's interface list)
        assert!(errors(&format!(
            "pod_annotations = {{ \"networking.gke.io/interfaces\" = \"{}\" }}",
            "x".repeat(500)
        ))
        .is_empty());
    }
}
