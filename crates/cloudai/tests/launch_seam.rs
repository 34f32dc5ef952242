//! The launch seam: what a workload runs is data (`Launch`), and each scheduler renders it. Checked here without
//! any cluster: the Kubernetes objects and Run:ai payloads of the NCCL scenario are fit for a real GPU cluster
//! (shared memory, networks, RDMA, GPUs per rank, server-side limits), Run:ai payloads conform to the official
//! OpenAPI schemas with every option set, shapes a system cannot honour are refused before anything exists,
//! and no scheduler module knows a workload. Objects read back from a real API server: tests/kubernetes.rs.

use crate::common;

use std::path::Path;
use std::sync::Arc;

use cloudai::config::system::SystemConfig;
use cloudai::scenario::{self, Inputs, Scenario};
use common::{stdout_of, Work};
use serde_json::{json, Value};

const NCCL: &str = r#"name = "nccl"
description = "d"
test_template_name = "NcclTest"
[cmd_args]
docker_image_url = "nvcr.io#nvidia/pytorch:25.12-py3"
subtest_name = "all_reduce_perf_mpi"
"#;
const SLEEP: &str = r#"name = "sleep"
description = "d"
test_template_name = "Sleep"
"#;
const BASH: &str = r#"name = "bash"
description = "d"
test_template_name = "BashCmd"
[cmd_args]
cmd = "echo 'a b'"
"#;

const SCENARIO: &str = r#"name = "seam"
[[Tests]]
id = "one"
test_name = "nccl"
num_nodes = 1
time_limit = "00:10:00"
[[Tests]]
id = "two"
test_name = "nccl"
num_nodes = 2
time_limit = "00:10:00"
"#;

fn load(w: &Work, system: &str, scenario: &str) -> (Arc<SystemConfig>, Scenario) {
    let sys = w.file("system.toml", system);
    for (name, text) in [("nccl", NCCL), ("sleep", SLEEP), ("bash", BASH)] {
        w.file(&format!("tests/{name}.toml"), text);
    }
    let scen = w.file("scenario.toml", scenario);
    let tests = w.path().join("tests");
    let inputs = Inputs {
        system: Some(&sys),
        tests_dir: Some(&tests),
        scenario: &scen,
        hook_dir: None,
        survey: None,
    };
    let (cfg, s) = scenario::load_all(&inputs).unwrap_or_else(|e| panic!("{e}"));
    (Arc::new(cfg), s)
}

fn k8s_objects(w: &Work, system: &str, scenario: &str) -> Vec<Value> {
    let (cfg, s) = load(w, system, scenario);
    s.test_runs
        .iter()
        .map(|r| {
            let dir = w.path().join("out/seam_x").join(&r.id).join("0");
            let mut m = cloudai::systems::kubernetes::manifests(&cfg, r, &dir);
            assert_eq!(m.len(), 1);
            m.remove(0)
        })
        .collect()
}

fn example(name: &str) -> String {
    std::fs::read_to_string(common::repo().join("conf/common/system").join(name)).unwrap()
}

fn container(pod_template: &Value) -> &Value {
    &pod_template["spec"]["containers"][0]
}

#[test]
fn kubernetes_pods_of_the_example_system_are_fit_for_nccl() {
    let w = Work::new();
    // the example names NCCL_SOCKET_IFNAME: the NIC exists on the host, so pods use the host's network
    let objs = k8s_objects(&w, &example("kubernetes_cluster.toml"), SCENARIO);
    let (job, mpi) = (&objs[0], &objs[1]);

    // one node: a Job whose pod holds every GPU of the node and runs one rank per GPU, as on Slurm
    assert_eq!(job["kind"], "Job");
    let pod = &job["spec"]["template"];
    let c = container(pod);
    assert_eq!(c["resources"]["limits"]["nvidia.com/gpu"], 8);
    let cmd = c["command"][2].as_str().unwrap();
    assert!(
        // local ranks inherit the pod's environment: nothing to forward
        cmd.starts_with(
            "mpirun --allow-run-as-root -np 8 -bind-to none -map-by ppr:8:node all_reduce_perf_mpi --nthreads 1 \
             --ngpus 1 "
        ),
        "{cmd}"
    );
    assert_eq!(
        pod["spec"]["volumes"],
        json!([{"name": "dev-shm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}])
    );
    assert_eq!(
        c["volumeMounts"],
        json!([{"name": "dev-shm", "mountPath": "/dev/shm"}])
    );
    assert_eq!(pod["spec"]["hostNetwork"], true);
    assert_eq!(pod["spec"]["dnsPolicy"], "ClusterFirstWithHostNet");
    assert_eq!(
        c["securityContext"],
        json!({"capabilities": {"add": ["IPC_LOCK"]}})
    );
    assert_eq!(
        pod["spec"]["tolerations"],
        json!([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])
    );
    // the server ends it even if cloudai is gone: time limit + pending allowance + margin, and cleans up
    assert_eq!(job["spec"]["activeDeadlineSeconds"], 600 + 600 + 900);
    assert_eq!(job["spec"]["ttlSecondsAfterFinished"], 86400);
    assert_eq!(job["spec"]["backoffLimit"], 0);

    // two nodes: an MPIJob, one worker per node with all its GPUs and one slot per GPU
    assert_eq!(mpi["kind"], "MPIJob");
    let spec = &mpi["spec"];
    assert_eq!(spec["slotsPerWorker"], 8);
    assert_eq!(spec["launcherCreationPolicy"], "AtStartup");
    assert_eq!(
        spec["runPolicy"],
        json!({"cleanPodPolicy": "Running", "backoffLimit": 0, "ttlSecondsAfterFinished": 86400,
               "activeDeadlineSeconds": 2100})
    );
    let worker = &spec["mpiReplicaSpecs"]["Worker"]["template"];
    let wc = container(worker);
    assert_eq!(spec["mpiReplicaSpecs"]["Worker"]["replicas"], 2);
    assert_eq!(wc["resources"]["limits"]["nvidia.com/gpu"], 8);
    assert_eq!(worker["spec"]["volumes"][0]["emptyDir"]["medium"], "Memory");
    // the node's sshd has port 22 under host networking: the workers' listens on 2222, and mpirun's ssh uses it
    // cloudai keeps the ssh contract: host keys, /run/sshd, StrictModes off, the port, the job's banner tag
    assert_eq!(
        (&wc["command"][0], &wc["command"][1]),
        (&json!("/bin/bash"), &json!("-c"))
    );
    let script = wc["command"][2].as_str().unwrap();
    for part in [
        "ssh-keygen -A",
        "mkdir -p /run/sshd",
        "exec \"$S\" -De -p 2222 -o StrictModes=no -o VersionAddendum=cloudai-",
    ] {
        assert!(script.contains(part), "{part}: {script}");
    }
    assert_eq!(
        wc["ports"],
        json!([{"name": "ssh", "containerPort": 2222, "protocol": "TCP"}])
    );
    // the launcher: the same port, no known-hosts prompt, and it waits for its own workers' sshd
    let launcher = container(&spec["mpiReplicaSpecs"]["Launcher"]["template"]);
    let ls = launcher["command"][2].as_str().unwrap();
    assert!(
        ls.contains(
            "--mca plm_rsh_args \"-p 2222 -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
             -o ConnectionAttempts=10 -o LogLevel=ERROR\""
        ),
        "{ls}"
    );
    assert!(ls.contains("[[ \"$b\" == SSH-*cloudai-"), "{ls}");
    // GPU pods are not BestEffort; the launcher asks little
    assert_eq!(
        wc["resources"]["requests"],
        json!({"cpu": "1", "memory": "4Gi"})
    );
    assert_eq!(
        launcher["resources"],
        json!({"requests": {"cpu": "250m", "memory": "512Mi"}})
    );
    assert_eq!(wc["readinessProbe"]["tcpSocket"]["port"], 2222);
    let launcher = &spec["mpiReplicaSpecs"]["Launcher"]["template"];
    let script = container(launcher)["command"][2].as_str().unwrap();
    assert!(
        script.contains(
            r#"mpirun --allow-run-as-root --mca plm_rsh_args "-p 2222 -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o ConnectionAttempts=10 -o LogLevel=ERROR" --hostfile /etc/mpi/hostfile -np 16 -bind-to none -map-by ppr:8:node -x NCCL_IB_GID_INDEX -x NCCL_SOCKET_IFNAME all_reduce_perf_mpi --nthreads 1 --ngpus 1"#
        ),
        "{script}"
    );
    // a worker that never listens is named in the launcher's log instead of a generic mpirun failure
    assert!(
        script.contains("must run an SSH server in every worker"),
        "{script}"
    );
    // the launcher holds no GPU and no NCCL shared memory, and asks a little CPU and memory
    assert_eq!(
        container(launcher)["resources"],
        json!({"requests": {"cpu": "250m", "memory": "512Mi"}})
    );
    assert!(launcher["spec"]["volumes"].is_null());
}

const K8S_OPTIONS: &str = r#"
name = "gpu-cluster"
scheduler = "kubernetes"
kube_config_path = ""
install_path = "i"
output_path = "o"
default_namespace = "bench"
gpus_per_node = 4
shm_size = "64Gi"
networks = ["net/ib-rail-0", "net/ib-rail-1"]
privileged = true
node_selector = { "node.kubernetes.io/instance-type" = "gb200" }
image_pull_secrets = ["ngc"]
service_account = "bench"
imex_channel_template = "imex-channel-0"
deadline_margin = "5m"
ttl_after_finished = 3600
tolerations = [{ key = "dedicated", operator = "Equal", value = "bench", effect = "NoSchedule" }]

[extended_resources]
"nvidia.com/mlnxnics" = 2
"rdma/rdma_shared_device_a" = "1"

[pod_spec_patch]
priorityClassName = "benchmarks"
terminationGracePeriodSeconds = 5

[global_env_vars]
NCCL_SOCKET_IFNAME = "eth0"
"#;

#[test]
fn kubernetes_options_reach_every_pod_that_needs_them() {
    let w = Work::new();
    let objs = k8s_objects(&w, K8S_OPTIONS, SCENARIO);
    let mpi = &objs[1];
    let worker = &mpi["spec"]["mpiReplicaSpecs"]["Worker"]["template"];
    let launcher = &mpi["spec"]["mpiReplicaSpecs"]["Launcher"]["template"];
    let wc = container(worker);
    assert_eq!(mpi["spec"]["slotsPerWorker"], 4);
    assert_eq!(
        wc["resources"]["limits"],
        json!({"nvidia.com/gpu": 4, "nvidia.com/mlnxnics": "2", "rdma/rdma_shared_device_a": "1"})
    );
    // secondary networks: attached by annotation, and the pod network (not the host's) carries the bootstrap
    assert_eq!(
        worker["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"],
        "net/ib-rail-0,net/ib-rail-1"
    );
    assert!(worker["spec"]["hostNetwork"].is_null());
    assert!(wc["command"][2]
        .as_str()
        .unwrap()
        .contains("exec \"$S\" -De -p 22 -o StrictModes=no"));
    assert_eq!(wc["securityContext"], json!({"privileged": true}));
    assert_eq!(
        worker["spec"]["volumes"][0]["emptyDir"]["sizeLimit"],
        "64Gi"
    );
    // GB200: each worker claims the IMEX channel and all workers share one NVLink clique
    assert_eq!(
        worker["spec"]["resourceClaims"],
        json!([{"name": "imex-channel", "resourceClaimTemplateName": "imex-channel-0"}])
    );
    assert_eq!(wc["resources"]["claims"], json!([{"name": "imex-channel"}]));
    assert_eq!(
        worker["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            [0]["topologyKey"],
        "nvidia.com/gpu.clique"
    );
    for t in [worker, launcher] {
        let s = &t["spec"];
        assert_eq!(s["imagePullSecrets"], json!([{"name": "ngc"}]));
        assert_eq!(s["serviceAccountName"], "bench");
        assert_eq!(
            s["nodeSelector"],
            json!({"node.kubernetes.io/instance-type": "gb200"})
        );
        assert_eq!(
            s["tolerations"],
            json!([{"key": "dedicated", "operator": "Equal", "value": "bench", "effect": "NoSchedule"}])
        );
        // the pass-through reaches every pod
        assert_eq!(s["priorityClassName"], "benchmarks");
        assert_eq!(s["terminationGracePeriodSeconds"], 5);
    }
    assert_eq!(
        mpi["spec"]["runPolicy"]["activeDeadlineSeconds"],
        600 + 600 + 300
    );
    assert_eq!(mpi["spec"]["runPolicy"]["ttlSecondsAfterFinished"], 3600);
    // one node of 4 GPUs: four ranks
    let c = container(&objs[0]["spec"]["template"]);
    assert_eq!(c["resources"]["limits"]["nvidia.com/gpu"], 4);
    assert!(c["command"][2]
        .as_str()
        .unwrap()
        .starts_with("mpirun --allow-run-as-root -np 4 "));
}

/// The MPI operator names its pods `<job>-worker-<i>` and `<job>-launcher`, DNS-1035 labels: an MPI job's name
/// leaves room for them and starts with a letter, however long (or digit-first) the test id; on Run:ai too.
#[test]
fn mpi_job_names_leave_room_for_the_operators_pod_names() {
    let w = Work::new();
    let long = format!("{}_{}", "8x".repeat(25), "all_reduce");
    let scen = format!(
        r#"name = "seam"
[[Tests]]
id = "{long}"
test_name = "nccl"
num_nodes = 16
"#
    );
    let objs = k8s_objects(&w, &example("kubernetes_cluster.toml"), &scen);
    let name = objs[0]["metadata"]["name"].as_str().unwrap();
    assert_eq!(objs[0]["kind"], "MPIJob");
    assert!(name.len() + "-worker-15".len() <= 63, "{name}");
    assert!(name.starts_with(|c: char| c.is_ascii_lowercase()), "{name}");
    let (cfg, s) = load(&Work::new(), RUNAI_OPTIONS, &scen);
    let dir = w.path().join("out/seam_x/x/0");
    let (body, distributed) =
        cloudai::systems::runai::payloads(&cfg, &s.test_runs[0], &dir).remove(0);
    assert!(distributed);
    let name = body["name"].as_str().unwrap();
    assert!(
        name.len() + "-worker-15".len() <= 63 && name.starts_with('t'),
        "{name}"
    );
    // and never longer than 53 characters, whatever the worker count
    assert!(name.len() <= 53, "{name}");
    let two = scen.replace("num_nodes = 16", "num_nodes = 2");
    let (cfg, s) = load(&Work::new(), RUNAI_OPTIONS, &two);
    let (body, _) = cloudai::systems::runai::payloads(&cfg, &s.test_runs[0], &dir).remove(0);
    let name = body["name"].as_str().unwrap();
    assert_eq!(name.len(), 53, "{name}");
}

/// Scripts and sleeps run on the pod network even where GPU launches use the host's.
#[test]
fn only_gpu_launches_use_the_host_network() {
    let w = Work::new();
    let scen = r#"name = "seam"
[[Tests]]
id = "s"
test_name = "sleep"
"#;
    let objs = k8s_objects(&w, &example("kubernetes_cluster.toml"), scen);
    let spec = &objs[0]["spec"]["template"]["spec"];
    assert!(
        spec["hostNetwork"].is_null() && spec["volumes"].is_null(),
        "{spec}"
    );
}

#[test]
fn a_process_of_several_gpus_gets_them_and_runs_alone() {
    let w = Work::new();
    let scen = r#"name = "seam"
[[Tests]]
id = "one"
test_name = "nccl"
num_nodes = 1
[Tests.cmd_args]
ngpus = 8
subtest_name = "all_reduce_perf"
"#;
    let objs = k8s_objects(&w, &example("kubernetes_cluster.toml"), scen);
    let c = container(&objs[0]["spec"]["template"]);
    assert_eq!(c["resources"]["limits"]["nvidia.com/gpu"], 8);
    let cmd = c["command"][2].as_str().unwrap();
    assert!(
        cmd.starts_with("all_reduce_perf --nthreads 1 -g 8 "),
        "{cmd}"
    );
    // no time limit, no server deadline
    assert!(objs[0]["spec"]["activeDeadlineSeconds"].is_null());
}

/// `dry-run` of one test on a system; returns (exit code, console).
fn dry_run(system: &str, test_entry: &str) -> (Option<i32>, String, Work) {
    let w = Work::new();
    w.file("system.toml", system);
    for (name, text) in [("nccl", NCCL), ("sleep", SLEEP), ("bash", BASH)] {
        w.file(&format!("tests/{name}.toml"), text);
    }
    w.file(
        "s.toml",
        &format!(
            r#"name = "seam"
[[Tests]]
id = "t"
{test_entry}"#
        ),
    );
    let out = w
        .cloudai()
        .args(common::DRY_RUN_S_TOML)
        .arg("--output-dir")
        .arg(w.path().join("out"))
        .output()
        .unwrap();
    (out.status.code(), stdout_of(&out), w)
}

#[test]
fn shapes_a_system_cannot_honour_are_refused_before_anything_exists() {
    let k8s = example("kubernetes_cluster.toml");
    for (entry, expected) in [
        (
            r#"test_name = "nccl"
num_nodes = 2
[Tests.cmd_args]
ngpus = 3
"#,
            "8 GPUs per node cannot be shared by processes of 3 GPUs each",
        ),
        (
            r#"test_name = "nccl"
num_nodes = 2
[Tests.cmd_args]
subtest_name = "all_reduce_perf"
"#,
            "all_reduce_perf runs as one process but the test asks 2 nodes",
        ),
        (
            r#"test_name = "nccl"
[Tests.cmd_args]
ngpus = 16
"#,
            "one process drives 16 GPUs but the system has gpus_per_node = 8",
        ),
        (
            r#"test_name = "sleep"
num_nodes = 2
"#,
            "asks 2 nodes but runs as one pod on Kubernetes",
        ),
        (
            r#"test_name = "nccl"
[Tests.cmd_args]
docker_image_url = ""
"#,
            r#"cmd_args.docker_image_url "" is empty"#,
        ),
    ] {
        let (code, text, w) = dry_run(&k8s, entry);
        assert_eq!(code, Some(1), "{entry}: {text}");
        assert!(
            text.contains(expected),
            "{entry}: expected {expected:?} in\n{text}"
        );
        assert!(!w.path().join("out").exists(), "{text}");
    }
}

#[test]
fn standalone_runs_one_rank_per_gpu_of_the_machine() {
    let sys = r#"name = "local"
scheduler = "standalone"
install_path = "i"
output_path = "o"
gpus_per_node = 4
"#;
    let (code, text, w) = dry_run(
        sys,
        r#"test_name = "nccl"
"#,
    );
    assert_eq!(code, Some(0), "{text}");
    let trt = find_file(&w.path().join("out"), "test-run.toml").expect("test-run.toml written");
    let toml = std::fs::read_to_string(trt).unwrap();
    assert!(
        toml.contains(
            r#"full_cmd = "mpirun --allow-run-as-root -np 4 -bind-to none -map-by ppr:4:node all_reduce_perf_mpi"#
        ),
        "{toml}"
    );
}

fn find_file(dir: &Path, name: &str) -> Option<std::path::PathBuf> {
    for e in std::fs::read_dir(dir).ok()? {
        let p = e.ok()?.path();
        if p.is_dir() {
            if let Some(found) = find_file(&p, name) {
                return Some(found);
            }
        } else if p.file_name().is_some_and(|n| n == name) {
            return Some(p);
        }
    }
    None
}

const RUNAI_OPTIONS: &str = r#"
name = "runai"
scheduler = "runai"
install_path = "i"
output_path = "o"
gpus_per_node = 8
base_url = "https://runai.example.com"
user_email = "u@example.com"
app_id = "a"
app_secret = "s"
project_id = "4501"
cluster_id = "71f69d83-ba66-4822-adf5-55ce55efd210"
host_ipc = true
use_host_network = true
capabilities = ["IPC_LOCK", "SYS_RESOURCE"]
node_pools = ["h100", "default"]
image_pull_secrets = ["ngc"]
tolerations = [{ key = "nvidia.com/gpu", operator = "Exists", effect = "NoSchedule" }, { operator = "Exists" }]

[extended_resources]
"rdma/rdma_shared_device_a" = 1
"hugepages-2Mi" = "5120Mi"

[global_env_vars]
NCCL_IB_HCA = "mlx5"
"#;

#[test]
fn runai_payloads_fit_for_nccl_and_conform_to_the_openapi_schemas() {
    let w = Work::new();
    let (cfg, s) = load(&w, RUNAI_OPTIONS, SCENARIO);
    let schemas = runai_mock::schema::Schemas::default();
    let mut bodies = Vec::new();
    for r in &s.test_runs {
        let dir = w.path().join("out/seam_x").join(&r.id).join("0");
        let p = cloudai::systems::runai::payloads(&cfg, r, &dir);
        assert_eq!(p.len(), 1);
        bodies.push(p.into_iter().next().unwrap());
    }
    let (one, distributed) = &bodies[0];
    assert!(!distributed);
    assert_eq!(schemas.validate(one, "TrainingCreationRequest"), vec![]);
    let spec = &one["spec"];
    // a one-node test runs gpus_per_node ranks, one per GPU, under a local mpirun
    assert_eq!(spec["compute"]["gpuDevicesRequest"], 8);
    assert_eq!(spec["command"], "mpirun");
    assert!(
        spec["args"]
            .as_str()
            .unwrap()
            .starts_with("--allow-run-as-root -np 8 -bind-to none -map-by ppr:8:node all_reduce_perf_mpi --nthreads 1 --ngpus 1"),
        "{}",
        spec["args"]
    );
    assert_eq!(spec["compute"]["largeShmRequest"], true);
    assert_eq!(
        spec["compute"]["extendedResources"],
        json!([{"resource": "rdma/rdma_shared_device_a", "quantity": "1"},
               {"resource": "hugepages-2Mi", "quantity": "5120Mi"}])
    );
    assert_eq!(
        spec["security"],
        json!({"hostNetwork": true, "hostIpc": true, "capabilities": ["IPC_LOCK", "SYS_RESOURCE"]})
    );
    assert_eq!(spec["nodePools"], json!(["h100", "default"]));
    assert_eq!(spec["imagePullSecrets"], json!([{"name": "ngc"}]));
    assert_eq!(spec["tolerations"][0]["key"], "nvidia.com/gpu");
    assert_eq!(spec["tolerations"][1]["effect"], "Any");
    assert_eq!(spec["autoDeletionTimeAfterCompletionSeconds"], 86400);

    let (two, distributed) = &bodies[1];
    assert!(distributed);
    assert_eq!(schemas.validate(two, "DistributedCreationRequest"), vec![]);
    assert_eq!(two["spec"]["slotsPerWorker"], 8);
    assert_eq!(two["spec"]["compute"]["gpuDevicesRequest"], 8);
    assert_eq!(two["spec"]["compute"]["largeShmRequest"], true);
    assert!(two["masterSpec"]["compute"]["largeShmRequest"].is_null());
    let args = two["masterSpec"]["args"].as_str().unwrap();
    assert!(
        args.starts_with(
            "--allow-run-as-root --mca plm_rsh_args \"-p 2222 -o StrictHostKeyChecking=no -o \
             UserKnownHostsFile=/dev/null -o ConnectionAttempts=10 -o LogLevel=ERROR\" --hostfile \
             /etc/mpi/hostfile -np 16 "
        ),
        "{args}"
    );
    // host networking: the node's sshd has 22, so the workers' sshd serves 2222, declared, and the launcher's ssh
    // uses it
    assert_eq!(
        two["spec"]["ports"],
        json!([{"container": 2222, "serviceType": "ClusterIP", "name": "ssh"}])
    );
    assert_eq!(two["spec"]["security"]["hostNetwork"], true);
    assert!(two["spec"]["args"]
        .as_str()
        .unwrap()
        .contains("-De -p 2222 -o StrictModes=no"));
    assert_eq!(two["spec"]["compute"]["cpuCoreRequest"], 1.0);
    assert_eq!(two["spec"]["compute"]["cpuMemoryRequest"], "4Gi");
}

#[test]
fn every_workload_runs_on_runai() {
    let w = Work::new();
    let scen = r#"name = "seam"
[[Tests]]
id = "s"
test_name = "sleep"
[[Tests]]
id = "b"
test_name = "bash"
"#;
    let (cfg, s) = load(&w, RUNAI_OPTIONS, scen);
    let schemas = runai_mock::schema::Schemas::default();
    let mut got = Vec::new();
    for r in &s.test_runs {
        let dir = w.path().join("out/seam_x").join(&r.id).join("0");
        let (body, distributed) = cloudai::systems::runai::payloads(&cfg, r, &dir).remove(0);
        assert!(!distributed);
        assert_eq!(schemas.validate(&body, "TrainingCreationRequest"), vec![]);
        // no GPU asked, so no GPU-pod extras, and not the host's network
        assert_eq!(
            body["spec"]["compute"],
            json!({"gpuDevicesRequest": 0, "cpuCoreRequest": 0.25, "cpuMemoryRequest": "512Mi"})
        );
        assert!(body["spec"]["security"].is_null(), "{body}");
        assert_eq!(body["spec"]["image"], "ubuntu:24.04");
        got.push((
            body["spec"]["command"].clone(),
            body["spec"]["args"].clone(),
        ));
    }
    assert_eq!(
        got,
        [
            (json!("sleep"), json!("5")),
            (json!("/bin/bash"), json!(r"-c 'echo '\''a b'\'''")),
        ]
    );
}

#[test]
fn pod_settings_are_checked_where_they_are_written() {
    let base = r#"name = "k"
scheduler = "kubernetes"
kube_config_path = ""
install_path = "i"
output_path = "o"
default_namespace = "d"
"#;
    for (extra, expected) in [
        (
            r#"shm_size = "16GB"
"#,
            r#"system.toml:7:12: field 'shm_size': "16GB" is not a Kubernetes quantity"#,
        ),
        (
            r#"tolerations = [{ key = "a", operator = "Exist" }]
"#,
            r#""Exist" is not a toleration operator"#,
        ),
        (
            "[extended_resources]\nrdma = 1\n",
            r#""rdma" is not an extended resource name"#,
        ),
        (
            r#"node_pools = ["a"]
"#,
            "field 'node_pools': only a Run:ai system has this field",
        ),
        (
            r#"capabilities = ["cap_ipc_lock"]
"#,
            r#""cap_ipc_lock" is not a Linux capability name"#,
        ),
    ] {
        let (code, text, _) = dry_run(
            &format!("{base}{extra}"),
            r#"test_name = "sleep"
"#,
        );
        assert_eq!(code, Some(1), "{extra}: {text}");
        assert!(
            text.contains(expected),
            "{extra}: expected {expected:?} in\n{text}"
        );
    }
    let (code, text, _) = dry_run(
        &RUNAI_OPTIONS.replace("host_ipc = true", "privileged = true"),
        r#"test_name = "sleep"
"#,
    );
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("field 'privileged': only a Kubernetes system has this field"),
        "{text}"
    );
}

/// The seam holds: no scheduler module names a workload, its config fields or its output.
#[test]
fn no_scheduler_knows_a_workload() {
    let mut words: Vec<String> = cloudai::workloads::names()
        .iter()
        .map(|s| s.to_string())
        .collect();
    words.extend(
        [
            "Avg bus bandwidth",
            "docker_image_url",
            "subtest_name",
            "_perf",
            "ngpus",
            "nthreads",
            "busbw",
        ]
        .map(String::from),
    );
    let mut hits = Vec::new();
    let root = common::repo().join("crates/cloudai/src/systems");
    let mut stack = vec![root];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            for (n, line) in text.lines().enumerate() {
                for word in &words {
                    if line.contains(word.as_str()) {
                        hits.push(format!("{}:{}: {word}", p.display(), n + 1));
                    }
                }
            }
        }
    }
    assert!(
        hits.is_empty(),
        "workload knowledge in systems/:\n{}",
        hits.join("\n")
    );
}

/// `[preflight]` on Run:ai: the launcher checks every worker (one rank per node) before the test and a one-node
/// training checks its node first; annotations, labels and CPU/memory requests reach the payloads, which still
/// conform to the API's schemas.
#[test]
fn runai_preflight_and_pod_metadata_conform_to_the_openapi_schemas() {
    let w = Work::new();
    let system = RUNAI_OPTIONS.replace(
        "[extended_resources]",
        "cpu = \"500m\"\nmemory_limit = \"64Gi\"\npod_labels = { team = \"perf\" }\n\
         pod_annotations = { \"example.com/owner\" = \"ops\" }\n[preflight]\nenable = true\n\n[extended_resources]",
    );
    let (cfg, s) = load(&w, &system, SCENARIO);
    let schemas = runai_mock::schema::Schemas::default();
    let bodies: Vec<(serde_json::Value, bool)> = s
        .test_runs
        .iter()
        .map(|r| {
            let dir = w.path().join("out/seam_x").join(&r.id).join("0");
            cloudai::systems::runai::payloads(&cfg, r, &dir).remove(0)
        })
        .collect();
    let (one, _) = &bodies[0];
    assert_eq!(schemas.validate(one, "TrainingCreationRequest"), vec![]);
    assert_eq!(one["spec"]["command"], "/bin/bash");
    let args = one["spec"]["args"].as_str().unwrap();
    assert!(
        args.contains("nvidia-smi --query-gpu=index,name --format=csv,noheader"),
        "{args}"
    );
    assert!(
        args.contains("-lt 8 ]"),
        "the node must list its 8 GPUs: {args}"
    );
    assert!(
        args.contains("mpirun --allow-run-as-root -np 8"),
        "then the test: {args}"
    );
    assert_eq!(one["spec"]["compute"]["cpuCoreRequest"], 0.5);
    assert_eq!(one["spec"]["compute"]["cpuMemoryLimit"], "64Gi");
    assert!(one["spec"]["labels"]
        .as_array()
        .unwrap()
        .contains(&json!({"name": "team", "value": "perf"})));
    assert!(one["spec"]["annotations"]
        .as_array()
        .unwrap()
        .contains(&json!({"name": "example.com/owner", "value": "ops"})));
    let (two, distributed) = &bodies[1];
    assert!(distributed);
    assert_eq!(schemas.validate(two, "DistributedCreationRequest"), vec![]);
    assert_eq!(two["masterSpec"]["command"], "/bin/bash");
    let master = two["masterSpec"]["args"].as_str().unwrap();
    let check = master
        .find("-np 2 -bind-to none -map-by ppr:1:node /bin/bash -c")
        .expect(master);
    let test = master.find("-np 16 ").expect(master);
    assert!(check < test, "{master}");
}
