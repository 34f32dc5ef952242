//! Test launches as Run:ai workloads: one node → a training; MPI ranks on several nodes → a distributed MPI
//! workload (launcher + workers, slots per worker = ranks per node) under mpirun.

use serde_json::{json, Value};

use crate::config::pods::Toleration;
use crate::config::system::RunAiConfig;
use crate::scenario::TestRun;
use crate::systems::container::{image, pin};
use crate::systems::objects::names::k8s_name;
use crate::systems::objects::{preflight, ssh};
use crate::workloads::Launch;

/// The annotation that ties a workload to the iteration (and hook) that created it: a workload with our name but
/// another identity is never adopted as ours.
pub(crate) const IDENTITY: &str = "cloudai-identity";
/// The label shared by every workload of one results tree.
pub(crate) const RUN_LABEL: &str = "cloudai-run";

/// The identity a workload was created with, from its GET answer (`spec.annotations`).
pub(crate) fn identity_of(workload: &Value) -> Option<&str> {
    workload["spec"]["annotations"]
        .as_array()?
        .iter()
        .find(|a| a["name"] == IDENTITY)?["value"]
        .as_str()
}

fn env(env: &[(String, String)]) -> Value {
    Value::Array(
        env.iter()
            .map(|(k, v)| json!({"name": k, "value": v}))
            .collect(),
    )
}

/// Who a workload is: its name and the identity/run tag written into it.
pub struct Names<'a> {
    pub name: &'a str,
    pub identity: &'a str,
    pub run_tag: &'a str,
}

/// `program rest…` → (`program`, `rest…`): Run:ai takes the command and its arguments as two strings.
fn split_line(line: &str) -> (String, String) {
    match line.split_once(' ') {
        Some((c, a)) => (c.to_string(), a.to_string()),
        None => (line.to_string(), String::new()),
    }
}

/// What the system asks of every pod that has GPUs (shared memory, host IPC/network, RDMA devices,
/// capabilities), and of every pod (tolerations, node pools, pull secrets, clean-up after completion).
fn fit(spec: &mut Value, sys: &RunAiConfig, gpus: u64, host_network: bool, master: bool) {
    let p = &sys.pods;
    let compute = if gpus > 0 {
        &p.gpu_resources
    } else {
        &p.launcher_resources
    };
    for (key, q) in [
        ("cpuCoreRequest", &compute.cpu),
        ("cpuCoreLimit", &compute.cpu_limit),
    ] {
        if let Some(c) = q.as_deref().and_then(crate::config::pods::cores) {
            spec["compute"][key] = c.into();
        }
    }
    for (key, q) in [
        ("cpuMemoryRequest", &compute.memory),
        ("cpuMemoryLimit", &compute.memory_limit),
    ] {
        if let Some(m) = q {
            spec["compute"][key] = m.as_str().into();
        }
    }
    if !p.tolerations.is_empty() {
        spec["tolerations"] = p
            .tolerations
            .iter()
            .enumerate()
            .map(|(i, t)| toleration(i, t))
            .collect();
    }
    if !p.node_pools.is_empty() {
        spec["nodePools"] = json!(p.node_pools);
    }
    if !p.image_pull_secrets.is_empty() {
        spec["imagePullSecrets"] = p.pull_secrets_json();
    }
    if !master {
        // the API deprecates these in a distributed workload's master spec
        spec["autoDeletionTimeAfterCompletionSeconds"] = p.ttl_after_finished.into();
        spec["backoffLimit"] = 0.into();
    }
    let mut security = json!({});
    // the host's network is for the pods of a GPU launch (and its launcher), not for scripts and sleeps
    if host_network && (gpus > 0 || master) {
        security["hostNetwork"] = true.into();
    }
    if gpus > 0 {
        if !p.shm_size.is_empty() {
            spec["compute"]["largeShmRequest"] = true.into();
        }
        if !p.extended_resources.is_empty() {
            spec["compute"]["extendedResources"] = p
                .extended_resources
                .iter()
                .map(|(k, q)| json!({"resource": k, "quantity": q}))
                .collect();
        }
        if p.host_ipc {
            security["hostIpc"] = true.into();
        }
        if !p.capabilities.is_empty() {
            security["capabilities"] = json!(p.capabilities);
        }
    }
    if security.as_object().is_some_and(|m| !m.is_empty()) {
        spec["security"] = security;
    }
}

fn toleration(i: usize, t: &Toleration) -> Value {
    // the API names each toleration, and says `Any` where Kubernetes leaves the effect out
    let mut v = t.to_json("seconds");
    v["name"] = t
        .key
        .as_deref()
        .map(|k| k8s_name(&[k]))
        .unwrap_or_else(|| format!("toleration-{i}"))
        .into();
    if t.effect.is_none() {
        v["effect"] = "Any".into();
    }
    v
}

/// The creation request of one step and whether it is a distributed workload: one node → a training running the
/// node's command (every rank under a local `mpirun`, or one process); several nodes of MPI ranks → a
/// distributed MPI workload (launcher + workers, slots per worker = ranks per node).
pub fn workload(
    run: &TestRun,
    launch: &Launch,
    who: &Names,
    sys: &RunAiConfig,
    envs: &[(String, String)],
) -> (Value, bool) {
    let per_node = sys.gpus_per_node;
    let img = launch
        .image
        .as_deref()
        .map(image)
        .unwrap_or_else(|| sys.job_image.clone());
    let host_network = sys.pods.host_network(envs);
    let pinned = pin(run);
    let meta = |v: &mut Value| {
        v["name"] = who.name.into();
        v["projectId"] = sys.project_id.as_str().into();
        v["clusterId"] = sys.cluster_id.as_str().into();
        v["useGivenNameAsPrefix"] = false.into();
        let pairs = |ours: (&str, &str), theirs: &indexmap::IndexMap<String, String>| -> Value {
            std::iter::once((ours.0.to_string(), ours.1.to_string()))
                .chain(
                    theirs
                        .iter()
                        .filter(|(k, _)| *k != ours.0)
                        .map(|(k, v)| (k.clone(), v.clone())),
                )
                .map(|(k, v)| json!({"name": k, "value": v}))
                .collect()
        };
        v["spec"]["annotations"] = pairs((IDENTITY, who.identity), &sys.pods.pod_annotations);
        v["spec"]["labels"] = pairs((RUN_LABEL, who.run_tag), &sys.pods.pod_labels);
        if let Some(p) = &pinned {
            v["spec"]["nodeAffinityRequired"] = p.clone();
        }
    };
    let gpus = launch.gpus_per_node(per_node);
    if !launch.across_nodes(run.num_nodes) {
        let bash = |line: &str| {
            (
                "/bin/bash".to_string(),
                format!("-c {}", crate::util::shell::quote(line)),
            )
        };
        let script = matches!(
            launch.procs,
            crate::workloads::Procs::Script | crate::workloads::Procs::PerNode
        );
        let line = if script {
            launch.program.clone()
        } else {
            launch.node_command(&run.test, per_node)
        };
        let (command, args) = match (&sys.preflight, gpus > 0) {
            (Some(pf), true) => (
                "/bin/bash".to_string(),
                format!(
                    "-c {}",
                    crate::util::shell::single_quote(&preflight::here(
                        pf,
                        pf.min_gpus.unwrap_or(gpus),
                        &line
                    ))
                ),
            ),
            _ if script => bash(&line),
            _ => split_line(&line),
        };
        let mut v = json!({"spec": {
            "command": command, "args": args, "image": img,
            "compute": {"gpuDevicesRequest": gpus},
            "environmentVariables": env(envs), "parallelism": 1, "completions": 1,
        }});
        fit(&mut v["spec"], sys, gpus, host_network, false);
        meta(&mut v);
        return (v, false);
    }
    let slots = launch.ranks_per_node(per_node);
    let cmd = crate::workloads::full_command(launch, &run.test);
    // the workers' sshd port on both sides (2222 with the host's network, where the node's sshd has 22)
    let port = sys.pods.ssh_port(host_network);
    let mpirun = ssh::mpirun(run.num_nodes * slots, slots, envs, &cmd, port);
    // with a pre-flight check, the launcher checks every worker first (one rank per node), then runs the test
    let master = match &sys.preflight {
        Some(pf) => {
            let one = ssh::mpirun(run.num_nodes, 1, &[], "", port);
            let script = preflight::across(
                pf,
                pf.min_gpus.unwrap_or(gpus),
                run.num_nodes,
                one.join(" ").trim_end(),
                &mpirun.join(" "),
            );
            (
                "/bin/bash".to_string(),
                format!("-c {}", crate::util::shell::single_quote(&script)),
            )
        }
        None => ("mpirun".to_string(), mpirun[1..].join(" ")),
    };
    let mut v = json!({
        "masterSpecSameAsWorker": false,
        "masterSpec": {
            "command": master.0, "args": master.1, "image": img,
            "compute": {"gpuDevicesRequest": 0}, "environmentVariables": env(envs),
        },
        "spec": {
            "distributedFramework": "MPI", "numWorkers": run.num_nodes, "slotsPerWorker": slots,
            "image": img, "compute": {"gpuDevicesRequest": gpus}, "environmentVariables": env(envs),
            "mpiLauncherCreationPolicy": "WaitForWorkersReady", "cleanPodPolicy": "Running",
            "sshAuthMountPath": sys.ssh_auth_mount_path,
        },
    });
    fit(&mut v["masterSpec"], sys, 0, host_network, true);
    fit(&mut v["spec"], sys, gpus, host_network, false);
    // workers only serve the launcher's ssh: sshd in the foreground, unless the image's entrypoint does it
    if let Some(argv) = ssh::worker_command(&sys.mpi_worker_command, port, &img, who.identity) {
        v["spec"]["command"] = argv[0].as_str().into();
        // one literal word each: the worker's script keeps its `$S`
        let rest: Vec<String> = argv[1..]
            .iter()
            .map(|a| {
                if crate::util::shell::is_safe(a) {
                    a.clone()
                } else {
                    crate::util::shell::single_quote(a)
                }
            })
            .collect();
        if !rest.is_empty() {
            v["spec"]["args"] = rest.join(" ").into();
        }
    }
    v["spec"]["ports"] = json!([{"container": port, "serviceType": "ClusterIP", "name": "ssh"}]);
    meta(&mut v);
    (v, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images() {
        assert_eq!(
            image("nvcr.io#nvidia/pytorch:24.02-py3"),
            "nvcr.io/nvidia/pytorch:24.02-py3"
        );
        assert_eq!(image("ghcr.io/x/y:1"), "ghcr.io/x/y:1");
    }
}
