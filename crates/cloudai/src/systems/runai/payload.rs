//! NCCL tests as Run:ai workloads: one node → a training; several → a distributed MPI workload (launcher +
//! workers, slots per worker = GPUs per node) running the `_mpi` binary under mpirun.

use serde_json::{json, Value};

use crate::config::args::ArgValue;
use crate::config::system::RunAiConfig;
use crate::scenario::TestRun;

/// Run:ai names become Kubernetes object names: lower-case alphanumerics and '-', at most 63 characters.
pub fn k8s_name(parts: &[&str]) -> String {
    let raw = parts.join("-").to_ascii_lowercase();
    let mut s: String = raw
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    while s.contains("--") {
        s = s.replace("--", "-");
    }
    let s = s.trim_matches('-');
    let mut s: String = s.chars().take(63).collect();
    while s.ends_with('-') {
        s.pop();
    }
    if s.is_empty() {
        "cloudai".into()
    } else {
        s
    }
}

/// A stable 40-bit hash in hex (FNV-1a), the unique part of a workload name.
pub fn short_hash(s: &str) -> String {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in s.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x100000001b3);
    }
    format!("{:010x}", h >> 24)
}

/// A workload name that stays unique however long the test id: the readable part is cut so that `-<hash of
/// identity>` always fits in 63 characters.
pub fn unique_name(readable: &[&str], identity: &str) -> String {
    let hash = short_hash(identity);
    let mut head = k8s_name(readable);
    head.truncate(63 - 1 - hash.len());
    // k8s_name never returns an empty name ("cloudai" stands in)
    format!("{}-{hash}", head.trim_end_matches('-'))
}

/// The annotation that ties a workload to the iteration (and hook) that created it: a workload with our name but
/// another identity is never adopted as ours.
pub const IDENTITY: &str = "cloudai-identity";
/// The label shared by every workload of one results tree.
pub const RUN_LABEL: &str = "cloudai-run";

/// The identity a workload was created with, from its GET answer (`spec.annotations`).
pub fn identity_of(workload: &Value) -> Option<&str> {
    workload["spec"]["annotations"]
        .as_array()?
        .iter()
        .find(|a| a["name"] == IDENTITY)?["value"]
        .as_str()
}

/// `nvcr.io#nvidia/pytorch:tag` (enroot syntax) → `nvcr.io/nvidia/pytorch:tag`.
pub fn image(url: &str) -> String {
    url.replacen('#', "/", 1)
}

/// nccl-tests flags from the fields that are set, in CloudAI's order, without CloudAI-internal fields.
fn flags(run: &TestRun) -> Vec<String> {
    let cmd = run.workload.command(&run.test);
    cmd.split_whitespace().skip(1).map(str::to_string).collect()
}

fn env(env: &[(String, String)]) -> Value {
    Value::Array(
        env.iter()
            .map(|(k, v)| json!({"name": k, "value": v}))
            .collect(),
    )
}

fn int_arg(run: &TestRun, k: &str, default: i64) -> i64 {
    run.test
        .cmd_args
        .get(k)
        .and_then(ArgValue::as_int)
        .unwrap_or(default)
}

/// `nodes = [...]` of a test: the workload's pods may only run on those hosts (`nodeAffinityRequired` on the
/// Kubernetes hostname label, which the Run:ai API takes for training and distributed workloads). Group specs
/// (`partition:group:N`) are Slurm's and are not pinned here.
pub fn pin(run: &TestRun) -> Option<Value> {
    let hosts: Vec<String> = run
        .nodes
        .iter()
        .filter(|n| !n.contains(':'))
        .filter_map(|n| crate::util::nodelist::expand(n))
        .flatten()
        .collect();
    (!hosts.is_empty()).then(|| {
        json!({"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": hosts}
        ]}]})
    })
}

/// GPUs one process of the test drives (`ngpus` × `nthreads`): on one node, what the training requests.
pub fn gpus_per_process(run: &TestRun) -> u64 {
    (int_arg(run, "ngpus", 1) * int_arg(run, "nthreads", 1)).max(1) as u64
}

/// Who a workload is: its name and the identity/run tag written into it.
pub struct Names<'a> {
    pub name: &'a str,
    pub identity: &'a str,
    pub run_tag: &'a str,
}

/// The creation request and whether it is a distributed workload.
pub fn nccl(
    run: &TestRun,
    who: &Names,
    sys: &RunAiConfig,
    envs: &[(String, String)],
) -> (Value, bool) {
    let (name, project_id, cluster_id, gpus_per_node) = (
        who.name,
        sys.project_id.as_str(),
        sys.cluster_id.as_str(),
        sys.gpus_per_node,
    );
    let subtest = run
        .test
        .cmd_args
        .str("subtest_name")
        .unwrap_or("all_reduce_perf_mpi");
    let img = image(run.test.cmd_args.str("docker_image_url").unwrap_or(""));
    let args = flags(run);
    let gpus_per_proc = gpus_per_process(run);
    let pinned = pin(run);
    let meta = |v: &mut Value| {
        v["name"] = name.into();
        v["projectId"] = project_id.into();
        v["clusterId"] = cluster_id.into();
        v["useGivenNameAsPrefix"] = false.into();
        v["spec"]["annotations"] = json!([{"name": IDENTITY, "value": who.identity}]);
        v["spec"]["labels"] = json!([{"name": RUN_LABEL, "value": who.run_tag}]);
        if let Some(p) = &pinned {
            v["spec"]["nodeAffinityRequired"] = p.clone();
        }
    };
    if run.num_nodes <= 1 {
        // one process drives the node's GPUs: the non-MPI binary
        let binary = subtest.trim_end_matches("_mpi");
        let mut v = json!({"spec": {
            "command": binary, "args": args.join(" "), "image": img,
            "compute": {"gpuDevicesRequest": gpus_per_proc},
            "environmentVariables": env(envs), "parallelism": 1, "completions": 1,
        }});
        meta(&mut v);
        return (v, false);
    }
    let binary = if subtest.ends_with("_mpi") {
        subtest.to_string()
    } else {
        format!("{subtest}_mpi")
    };
    let slots = gpus_per_node.max(1);
    let ranks = run.num_nodes * slots / gpus_per_proc.min(slots);
    let mut mpirun = vec![
        "--allow-run-as-root".to_string(),
        "-np".into(),
        ranks.to_string(),
        "-bind-to".into(),
        "none".into(),
        "-map-by".into(),
        format!("ppr:{}:node", slots / gpus_per_proc.min(slots)),
    ];
    for (k, _) in envs {
        mpirun.push("-x".into());
        mpirun.push(k.clone());
    }
    mpirun.push(binary);
    mpirun.extend(args);
    let mut v = json!({
        "masterSpecSameAsWorker": false,
        "masterSpec": {
            "command": "mpirun", "args": mpirun.join(" "), "image": img,
            "compute": {"gpuDevicesRequest": 0}, "environmentVariables": env(envs),
        },
        "spec": {
            "distributedFramework": "MPI", "numWorkers": run.num_nodes, "slotsPerWorker": slots,
            "image": img, "compute": {"gpuDevicesRequest": slots}, "environmentVariables": env(envs),
            "mpiLauncherCreationPolicy": "WaitForWorkersReady", "cleanPodPolicy": "Running",
            "sshAuthMountPath": sys.ssh_auth_mount_path,
        },
    });
    // workers only serve the launcher's ssh: keep sshd in the foreground unless the image's entrypoint does it
    let mut worker = sys.mpi_worker_command.split_whitespace();
    if let Some(cmd) = worker.next() {
        v["spec"]["command"] = cmd.into();
        let rest: Vec<&str> = worker.collect();
        if !rest.is_empty() {
            v["spec"]["args"] = rest.join(" ").into();
        }
    }
    meta(&mut v);
    (v, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_images() {
        assert_eq!(
            k8s_name(&["Tests.all_reduce", "0", "a1b2c3"]),
            "tests-all-reduce-0-a1b2c3"
        );
        assert_eq!(k8s_name(&["__"]), "cloudai");
        assert!(k8s_name(&[&"x".repeat(100)]).len() <= 63);
        // the unique part survives any length, and differs per identity
        let long = "t".repeat(80);
        let a = unique_name(&[&long], "run|t|0");
        let b = unique_name(&[&long], "run|t|1");
        assert!(a.len() <= 63 && b.len() <= 63, "{a}");
        assert_ne!(a, b);
        assert!(a.starts_with("tttt") && a.ends_with(&short_hash("run|t|0")));
        assert_eq!(
            unique_name(&["__"], "x"),
            format!("cloudai-{}", short_hash("x"))
        );
        assert_eq!(
            image("nvcr.io#nvidia/pytorch:24.02-py3"),
            "nvcr.io/nvidia/pytorch:24.02-py3"
        );
        assert_eq!(image("ghcr.io/x/y:1"), "ghcr.io/x/y:1");
    }
}
