//! AI Dynamo on Kubernetes: one DynamoGraphDeployment (the Dynamo operator's custom resource) with a frontend, a
//! decode and a prefill service, written to `deployment.yaml` as CloudAI writes it (PyYAML's `safe_dump`, keys
//! sorted): workers run the role's `cmd` split into words, with `--model`, the role flag, each of the role's
//! `args` as `--name value` (`_` written `-`) and its `extra_args` as one word; each worker pod asks for the
//! system's GPUs per node; `num-nodes` above 1 makes the service multinode; every pod gets what the system asks of
//! every pod (tolerations, node selector, image pull secrets, service account). With secondary networks the workers
//! carry Multus' annotation and ask for one `nvidia.com/<network>` each; pods use the host's network as the
//! system says (by default when it names no secondary network).
//!
//! A real run goes as CloudAI's: once every pod is ready, its `genai_perf.sh` runs in the frontend pod against
//! the frontend (`http://localhost`), the results directory comes back into the iteration's, the success marker
//! is written when the report did, and each role's pod log is kept as `<role>_pod.log`.

use std::path::PathBuf;

use serde_json::{json, Value};

use super::super::object::{ObjectAt, ObjectBench, ObjectRun, OwnKind, OwnObject, PodRole};
use crate::config::args::ArgValue;
use crate::config::test::TestDefinition;

pub(super) const FILE: &str = "deployment.yaml";
/// The Dynamo operator's resource.
pub(crate) const KIND: OwnKind = OwnKind {
    group: "nvidia.com",
    version: "v1alpha1",
    kind: "DynamoGraphDeployment",
    plural: "dynamographdeployments",
};
/// The services, in the order CloudAI writes their pod logs.
const SERVICES: [(&str, &str); 3] = [
    ("decode", "decode_worker"),
    ("prefill", "prefill_worker"),
    ("frontend", ""),
];
/// Where the benchmark writes in the frontend pod (CloudAI's path).
const RESULTS_IN_POD: &str = "/tmp/cloudai/genai-perf";

/// The deployment and what a real run of it could not do.
pub(super) fn object(test: &TestDefinition, at: &ObjectAt) -> OwnObject {
    let manifest = deployment(test, at);
    OwnObject {
        file: FILE,
        text: crate::util::pyyaml::dump(&manifest),
        problems: problems(test, at),
        run: run(test, at, &manifest),
        manifest,
    }
}

/// How a real run drives the deployment: its pods by service, then CloudAI's benchmark in the frontend pod.
fn run(test: &TestDefinition, at: &ObjectAt, manifest: &Value) -> ObjectRun {
    let a = &test.cmd_args;
    let roles = SERVICES
        .iter()
        .map(|(svc, _)| {
            let s = &manifest["spec"]["services"][svc];
            let replicas = s["replicas"].as_u64().unwrap_or(1);
            let nodes = s["multinode"]["nodeCount"].as_u64().unwrap_or(1).max(1);
            PodRole {
                name: svc.to_string(),
                labels_at: format!("/spec/services/{svc}/extraPodMetadata/labels"),
                pods: replicas * nodes,
            }
        })
        .collect();
    let report = a.text_at("genai_perf.report_name");
    let mut args: Vec<String> = [
        "--result-dir",
        RESULTS_IN_POD,
        "--gpus-per-node",
        &at.gpus_per_node.to_string(),
        "--model",
        &a.text_at("dynamo.model"),
        "--url",
        "http://localhost",
        "--port",
        &a.text_at("dynamo.port"),
        "--endpoint",
        &a.text_at("dynamo.endpoint"),
        "--cmd",
        &a.text_at("genai_perf.cmd"),
        "--report-name",
        &report,
    ]
    .map(String::from)
    .into();
    let extra = match a.at("genai_perf.extra_args") {
        Some(ArgValue::List(l)) => l.iter().map(ArgValue::py_str).collect::<Vec<_>>().join(" "),
        Some(v) => v.py_str(),
        None => String::new(),
    };
    if !extra.is_empty() {
        args.extend(["--extra-args".to_string(), extra]);
    }
    args.push("--".into());
    if let Some(ArgValue::Table(t)) = a.at("genai_perf.args") {
        for (k, v) in t {
            args.extend([format!("--{k}"), v.py_str()]);
        }
    }
    ObjectRun {
        kind: KIND,
        roles,
        bench: ObjectBench {
            role: "frontend".into(),
            script: PathBuf::from(a.text_at("genai_perf.script._installed_path")),
            args,
            log: "genai_perf.log",
            fetch: RESULTS_IN_POD.into(),
            done: Some((
                report,
                super::marker(test, "success_marker", "success-marker.txt"),
            )),
        },
    }
}

pub(super) fn deployment(test: &TestDefinition, at: &ObjectAt) -> Value {
    let a = &test.cmd_args;
    let image = a.text_at("docker_image_url");
    let mut frontend = json!({
        "dynamoNamespace": at.namespace,
        "componentType": "frontend",
        "replicas": 1,
        "extraPodSpec": {"mainContainer": {"image": image}},
    });
    if at.host_network {
        frontend["extraPodSpec"]["hostNetwork"] = json!(true);
    }
    for_every_pod(&mut frontend, at);
    json!({
        "apiVersion": format!("{}/{}", KIND.group, KIND.version),
        "kind": KIND.kind,
        "metadata": {"name": at.namespace},
        "spec": {"services": {
            "frontend": frontend,
            "decode": worker(test, at, "decode_worker", "--is-decode-worker", "decode-worker"),
            "prefill": worker(test, at, "prefill_worker", "--is-prefill-worker", "prefill"),
        }},
    })
}

fn worker(test: &TestDefinition, at: &ObjectAt, role: &str, flag: &str, sub: &str) -> Value {
    let a = &test.cmd_args;
    let path = |k: &str| format!("dynamo.{role}.{k}");
    let mut args = vec![
        "--model".into(),
        a.text_at("dynamo.model"),
        flag.to_string(),
    ];
    if let Some(ArgValue::Table(t)) = a.at(&path("args")) {
        for (k, v) in t {
            args.push(format!("--{}", k.replace('_', "-")));
            args.push(v.py_str());
        }
    }
    let extra = a.text_at(&path("extra_args"));
    if !extra.is_empty() {
        args.push(extra);
    }
    let command: Vec<String> = a
        .text_at(&path("cmd"))
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let mut cfg = json!({
        "dynamoNamespace": at.namespace,
        "componentType": "worker",
        "subComponentType": sub,
        "replicas": 1,
        "resources": {"limits": {"gpu": at.gpus_per_node.to_string()}},
        "extraPodSpec": {"mainContainer": {
            "image": a.text_at("docker_image_url"),
            "workingDir": a.text_at("dynamo.workspace_path"),
            "command": command,
            "args": args,
        }},
    });
    if !at.networks.is_empty() {
        let nics: serde_json::Map<String, Value> = at
            .networks
            .iter()
            .map(|n| {
                let name = n.split_once('/').map_or(n.as_str(), |(_, name)| name);
                (format!("nvidia.com/{name}"), json!("1"))
            })
            .collect();
        cfg["extraPodMetadata"] =
            json!({"annotations": {"k8s.v1.cni.cncf.io/networks": at.networks.join(",")}});
        cfg["resources"]["requests"] = json!({ "custom": nics });
        cfg["resources"]["limits"]["custom"] = Value::Object(nics);
    }
    if at.host_network {
        cfg["extraPodSpec"]["hostNetwork"] = json!(true);
    }
    for_every_pod(&mut cfg, at);
    if let Some(n) = a.int_at(&path("num_nodes")).filter(|n| *n > 1) {
        cfg["multinode"] = json!({ "nodeCount": n });
    }
    cfg
}

/// What the system asks of every pod, into the service's pod spec (nothing when it asks nothing, as CloudAI).
fn for_every_pod(service: &mut Value, at: &ObjectAt) {
    for (k, v) in &at.pod_spec {
        service["extraPodSpec"][k] = v.clone();
    }
}

/// What a real run of the deployment could not do: a worker whose parallel sizes need more GPUs than its pod asks
/// for (vLLM and SGLang stop at start-up); a benchmark other than GenAI-Perf (the only one CloudAI runs there).
fn problems(test: &TestDefinition, at: &ObjectAt) -> Vec<String> {
    let a = &test.cmd_args;
    let mut out = Vec::new();
    for role in ["prefill_worker", "decode_worker"] {
        let size = |k: &str| {
            a.int_at(&format!("dynamo.{role}.args.{k}"))
                .unwrap_or(1)
                .max(1) as u64
        };
        let need = size("tensor_parallel_size") * size("pipeline_parallel_size");
        if need > at.gpus_per_node {
            out.push(format!(
                "the {} needs {need} GPUs per pod (tensor × pipeline parallel size), its pods ask for {} \
                 (the system's gpus_per_node)",
                role.replace('_', " "),
                at.gpus_per_node
            ));
        }
    }
    let others: Vec<String> = super::workloads(a)
        .into_iter()
        .filter(|w| w != "genai_perf.sh")
        .collect();
    if !others.is_empty() {
        out.push(format!(
            "workloads = \"{}\": on Kubernetes the deployment is benchmarked with genai_perf.sh only (as CloudAI \
             does); run {} on Slurm",
            a.text_at("workloads"),
            others.join(", ")
        ));
    }
    out
}
