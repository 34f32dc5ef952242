//! What the cluster offers, read once per scenario before anything is planned (one list of nodes, one read of
//! the namespace), and what it means for the pods: `gpus_per_node` when the file leaves it out, the RDMA device
//! NCCL workers must request to reach the fabric, and everything the API server or the nodes would refuse only
//! after submission (a node selector no GPU node matches, a resource no node offers, a PodSecurity level the
//! pods cannot meet) — refused here with the system field to change.

use std::collections::BTreeMap;

use serde_json::Value;

use super::manifest::GPU_RESOURCE;
use crate::config::system::KubernetesConfig;

/// A problem with the system as the cluster is: the system field to change, what is wrong, what to do.
#[derive(Clone, Debug, PartialEq)]
pub struct Refusal {
    pub field: String,
    pub message: String,
    pub hint: String,
}

/// What the survey changed or could not check (said in the log), and what it refuses.
#[derive(Debug, Default, PartialEq)]
pub struct Findings {
    pub notes: Vec<String>,
    pub refused: Vec<Refusal>,
}

/// Extended resources that give a pod an RDMA device: the RDMA shared-device and SR-IOV plugins' `rdma/*`,
/// AWS EFA.
pub(crate) fn is_rdma(resource: &str) -> bool {
    resource.starts_with("rdma/") || resource == EFA
}

pub const EFA: &str = "vpc.amazonaws.com/efa";

/// The PodSecurity label of a namespace that the API server enforces.
pub(crate) const ENFORCE: &str = "pod-security.kubernetes.io/enforce";

/// Capabilities the PodSecurity `baseline` level allows to add (Kubernetes' Pod Security Standards).
const BASELINE_CAPS: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// A count of a resource quantity (`8`, `1k`, `2Ki`, `500m` → 0), 0 when it is none.
fn quantity(v: &Value) -> u64 {
    if let Some(n) = v.as_u64() {
        return n;
    }
    let Some(q) = v.as_str() else { return 0 };
    let end = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(q.len());
    let (num, suffix) = q.split_at(end);
    let factor: f64 = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        _ => return 0,
    };
    num.parse::<f64>().map_or(0, |n| (n * factor) as u64)
}

/// The GPU nodes pods of this system may land on: `nvidia.com/gpu` allocatable and the node selector's labels.
fn gpu_nodes<'a>(k: &KubernetesConfig, nodes: &'a [Value]) -> (Vec<&'a Value>, usize) {
    let gpu: Vec<&Value> = nodes
        .iter()
        .filter(|n| quantity(&n["status"]["allocatable"][GPU_RESOURCE]) > 0)
        .collect();
    let all = gpu.len();
    let fits = gpu
        .into_iter()
        .filter(|n| {
            k.pods
                .node_selector
                .iter()
                .all(|(key, val)| n["metadata"]["labels"][key].as_str() == Some(val.as_str()))
        })
        .collect();
    (fits, all)
}

/// The survey of `nodes` (the cluster's node list) and `namespace` (None: not readable) for system `k`, whose
/// global environment is `env`: `k` is completed (gpus_per_node, the RDMA device, IPC_LOCK) and the findings
/// returned.
pub fn survey(
    k: &mut KubernetesConfig,
    env: &[(String, String)],
    nodes: Option<&[Value]>,
    namespace: Option<&Value>,
) -> Findings {
    let mut f = Findings::default();
    match nodes {
        Some(nodes) => survey_nodes(k, nodes, &mut f),
        None => {
            let d = if k.gpus_per_node_given {
                String::new()
            } else {
                format!(
                    "; gpus_per_node is not set: {} assumed (set it in the system)",
                    k.gpus_per_node
                )
            };
            f.notes.push(format!(
                "the nodes could not be read (listing nodes needs a cluster-wide right): no RDMA device was looked \
                 for{d}"
            ));
        }
    }
    match namespace {
        Some(ns) => pod_security(k, env, ns, &mut f),
        None => f.notes.push(format!(
            "namespace {} could not be read: its PodSecurity level was not checked",
            k.default_namespace
        )),
    }
    f
}

fn survey_nodes(k: &mut KubernetesConfig, nodes: &[Value], f: &mut Findings) {
    let (fit, all) = gpu_nodes(k, nodes);
    if fit.is_empty() {
        if all > 0 && !k.pods.node_selector.is_empty() {
            let sel: Vec<String> = k
                .pods
                .node_selector
                .iter()
                .map(|(a, b)| format!("{a}={b}"))
                .collect();
            f.refused.push(Refusal {
                field: "node_selector".into(),
                message: format!(
                    "none of the cluster's {all} GPU node(s) carries the labels {}: no GPU pod could be scheduled",
                    sel.join(", ")
                ),
                hint: "name labels the GPU nodes carry (kubectl get nodes --show-labels), or remove node_selector"
                    .into(),
            });
        } else {
            f.notes.push(format!(
                "no node of the cluster offers {GPU_RESOURCE}: pods that need GPUs will wait for one"
            ));
        }
        return;
    }
    // GPUs per node: the most common count among the nodes pods may use (the smallest on a tie)
    // the nodes pods may use all have GPUs (see gpu_nodes)
    let Some(c) = crate::systems::container::most_common(
        fit.iter()
            .map(|n| quantity(&n["status"]["allocatable"][GPU_RESOURCE])),
    ) else {
        return;
    };
    let (most, max) = (c.value, c.max);
    if !k.gpus_per_node_given {
        k.gpus_per_node = most;
        f.notes.push(format!(
            "gpus_per_node taken from the nodes: {most} ({GPU_RESOURCE} allocatable on {} of {} GPU node(s))",
            c.nodes,
            c.of
        ));
    } else if k.gpus_per_node > max {
        f.refused.push(Refusal {
            field: "gpus_per_node".into(),
            message: format!(
                "gpus_per_node = {} but no GPU node offers more than {max} {GPU_RESOURCE}: the workers could never \
                 be scheduled",
                k.gpus_per_node
            ),
            hint: format!("set gpus_per_node = {most}, or leave it out to take it from the nodes"),
        });
    }
    // what the nodes offer beside GPUs, and on how many of them
    let mut offered: BTreeMap<String, (usize, u64)> = BTreeMap::new();
    for n in &fit {
        if let Some(a) = n["status"]["allocatable"].as_object() {
            for (name, q) in a {
                let q = quantity(q);
                if q > 0 {
                    let e = offered.entry(name.clone()).or_insert((0, u64::MAX));
                    e.0 += 1;
                    e.1 = e.1.min(q);
                }
            }
        }
    }
    for (name, _) in &k.pods.extended_resources {
        if name.starts_with("hugepages-") && offered.contains_key(name) {
            continue;
        }
        match offered.get(name) {
            Some((on, _)) if *on == fit.len() => {}
            Some((on, _)) => f.notes.push(format!(
                "extended_resources: {name} is offered by {on} of the {} GPU node(s) pods may use: the others \
                 cannot take the pods",
                fit.len()
            )),
            None => {
                let rdma: Vec<&str> = offered.keys().filter(|r| is_rdma(r)).map(String::as_str).collect();
                f.refused.push(Refusal {
                    field: format!("extended_resources.{name}"),
                    message: format!(
                        "no GPU node pods may use offers {name}: the pods asking it could never be scheduled"
                    ),
                    hint: if rdma.is_empty() {
                        "remove it, or name a resource the nodes list under allocatable (kubectl describe node)"
                            .into()
                    } else {
                        format!("the nodes offer {}", rdma.join(", "))
                    },
                });
            }
        }
    }
    rdma(k, &offered, fit.len(), f);
}

/// The RDMA device of NCCL workers: requested when the nodes offer one and the system asks none (nor runs
/// privileged pods, which see every device); refused when it is ambiguous or required and absent.
fn rdma(
    k: &mut KubernetesConfig,
    offered: &BTreeMap<String, (usize, u64)>,
    nodes: usize,
    f: &mut Findings,
) {
    let p = &mut k.pods;
    if p.rdma == Some(false) {
        return;
    }
    // devices the operator chose (an SR-IOV pool, EFA, an RDMA pool) or secondary networks: the fabric is theirs
    let asked = p
        .extended_resources
        .keys()
        .any(|r| !r.starts_with("hugepages-"))
        || !p.networks.is_empty();
    let everywhere: Vec<(&String, u64)> = offered
        .iter()
        .filter(|(r, (on, _))| is_rdma(r) && *on == nodes)
        .map(|(r, (_, q))| (r, *q))
        .collect();
    let somewhere: Vec<&String> = offered.keys().filter(|r| is_rdma(r)).collect();
    if asked || p.privileged {
        if !p.privileged && !p.capabilities.iter().any(|c| c == "IPC_LOCK") {
            f.notes.push(
                "capabilities: the pods ask an RDMA device without IPC_LOCK: RDMA cannot pin memory unless the \
                 image runs with an unlimited memlock limit"
                    .into(),
            );
        }
        return;
    }
    match everywhere.as_slice() {
        [(name, q)] => {
            // EFA: every interface of the node, as AWS's recipes ask; an RDMA shared device: one
            let q = if name.as_str() == EFA { *q } else { 1 };
            p.extended_resources.insert((*name).clone(), q.to_string());
            // IPC_LOCK joins capabilities the system asks; `capabilities = []` (a baseline namespace) stays empty
            let lock = if p.capabilities.is_empty() {
                " (without IPC_LOCK: capabilities = [] is kept, so RDMA needs an unlimited memlock in the image)"
            } else {
                if !p.capabilities.iter().any(|c| c == "IPC_LOCK") {
                    p.capabilities.push("IPC_LOCK".into());
                }
                " and IPC_LOCK"
            };
            f.notes.push(format!(
                "the GPU nodes offer {name}: pods with GPUs request {name} = {q}{lock}, so NCCL reaches the \
                 fabric (extended_resources chooses another device, rdma = false none)"
            ));
        }
        [] if p.rdma == Some(true) => f.refused.push(Refusal {
            field: "rdma".into(),
            message: format!(
                "rdma = true, but {} offers an RDMA device (rdma/*, vpc.amazonaws.com/efa)",
                if somewhere.is_empty() {
                    "no GPU node pods may use".to_string()
                } else {
                    format!("not every GPU node pods may use ({} on some)", join(&somewhere))
                }
            ),
            hint: "name the device in extended_resources (with node_selector to the nodes that have it), or \
                   set rdma = false for a TCP fabric"
                .into(),
        }),
        [] if !somewhere.is_empty() => f.notes.push(format!(
            "only some GPU nodes offer an RDMA device ({}): pods ask none, so NCCL may run over sockets; name it \
             in extended_resources with node_selector to those nodes",
            join(&somewhere)
        )),
        [] => {}
        several => {
            let names: Vec<&String> = several.iter().map(|(n, _)| *n).collect();
            f.refused.push(Refusal {
                field: "extended_resources".into(),
                message: format!(
                    "every GPU node offers several RDMA devices ({}): which one NCCL workers need cannot be \
                     guessed, and without one NCCL falls back to sockets",
                    join(&names)
                ),
                hint: format!(
                    "name it, like extended_resources = {{ \"{}\" = 1 }}, or set rdma = false",
                    names[0]
                ),
            });
        }
    }
}

fn join(names: &[&String]) -> String {
    names
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The namespace's enforced PodSecurity level against what the pods need.
fn pod_security(k: &KubernetesConfig, env: &[(String, String)], ns: &Value, f: &mut Findings) {
    let level = ns["metadata"]["labels"][ENFORCE]
        .as_str()
        .unwrap_or("privileged");
    let p = &k.pods;
    let nsname = &k.default_namespace;
    let refuse = |f: &mut Findings, field: &str, what: String, hint: String| {
        f.refused.push(Refusal {
            field: field.into(),
            message: format!(
                "namespace {nsname} enforces PodSecurity \"{level}\" ({ENFORCE}), which refuses {what}: the API \
                 server would reject the pods after submission"
            ),
            hint,
        });
    };
    match level {
        "restricted" => refuse(
            f,
            "default_namespace",
            "containers that run as root or keep capabilities (MPI workers run sshd as root; GPU pods need \
             IPC_LOCK)"
                .into(),
            format!(
                "run in a namespace labelled {ENFORCE}=baseline or privileged (kubectl label ns {nsname} \
                 {ENFORCE}=privileged --overwrite)"
            ),
        ),
        "baseline" => {
            let label = format!("or label the namespace {ENFORCE}=privileged");
            if p.host_network(env) {
                refuse(
                    f,
                    "use_host_network",
                    "pods on the host's network".into(),
                    format!("set use_host_network = false (NICs through networks instead) {label}"),
                );
            }
            if p.privileged {
                refuse(
                    f,
                    "privileged",
                    "privileged containers".into(),
                    format!("set privileged = false {label}"),
                );
            }
            let extra: Vec<&str> = p
                .capabilities
                .iter()
                .map(String::as_str)
                .filter(|c| !BASELINE_CAPS.contains(c))
                .collect();
            if !extra.is_empty() && !p.privileged {
                refuse(
                    f,
                    "capabilities",
                    format!("the capabilities {}", extra.join(", ")),
                    format!(
                        "set capabilities = [] (then RDMA cannot pin memory; rdma = false for a TCP fabric) \
                         {label}"
                    ),
                );
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests;
