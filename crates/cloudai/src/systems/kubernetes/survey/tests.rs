use super::*;
use serde_json::json;

fn k8s(extra: &str) -> KubernetesConfig {
    let text = format!(
        "name = \"k\"\nscheduler = \"kubernetes\"\nkube_config_path = \"/nonexistent\"\ninstall_path = \"i\"\n\
         output_path = \"o\"\ndefault_namespace = \"team\"\n{extra}\n"
    );
    let path = std::path::Path::new("system.toml");
    let node = crate::config::node::parse(path, &text, "system config").unwrap();
    match crate::config::system::decode(&node, path).unwrap().kind {
        crate::config::system::SystemKind::Kubernetes(k) => k,
        _ => unreachable!(),
    }
}

fn node(name: &str, allocatable: Value, labels: Value) -> Value {
    let mut l = json!({"kubernetes.io/hostname": name});
    if let Some(o) = labels.as_object() {
        for (a, b) in o {
            l[a] = b.clone();
        }
    }
    json!({"metadata": {"name": name, "labels": l}, "status": {"allocatable": allocatable}})
}

fn ns(level: Option<&str>) -> Value {
    match level {
        Some(l) => json!({"metadata": {"name": "team", "labels": {ENFORCE: l}}}),
        None => json!({"metadata": {"name": "team"}}),
    }
}

#[test]
fn nodes_with_rdma_get_their_device_requested_and_gpus_per_node_is_read() {
    let mut k = k8s("");
    let nodes = [
        node(
            "a",
            json!({"nvidia.com/gpu": "8", "rdma/ib": "1k", "cpu": "64"}),
            json!({}),
        ),
        node(
            "b",
            json!({"nvidia.com/gpu": "8", "rdma/ib": "1k"}),
            json!({}),
        ),
        node("cpu", json!({"cpu": "16"}), json!({})),
    ];
    let f = survey(&mut k, &[], Some(&nodes), Some(&ns(None)));
    assert!(f.refused.is_empty(), "{f:?}");
    assert_eq!(k.gpus_per_node, 8);
    assert_eq!(
        k.pods.extended_resources.get("rdma/ib").map(String::as_str),
        Some("1")
    );
    assert!(k.pods.capabilities.contains(&"IPC_LOCK".to_string()));
    assert!(
        f.notes
            .iter()
            .any(|n| n.starts_with("gpus_per_node taken from the nodes: 8")),
        "{f:?}"
    );
    assert!(
        f.notes
            .iter()
            .any(|n| n.contains("request rdma/ib = 1 and IPC_LOCK")),
        "{f:?}"
    );
}

#[test]
fn without_rdma_the_pods_are_unchanged() {
    let mut k = k8s("gpus_per_node = 4");
    let before = k.pods.clone();
    let nodes = [node("a", json!({"nvidia.com/gpu": "8"}), json!({}))];
    let f = survey(&mut k, &[], Some(&nodes), Some(&ns(None)));
    assert_eq!(f, Findings::default());
    assert_eq!(k.gpus_per_node, 4);
    assert_eq!(k.pods.extended_resources, before.extended_resources);
    assert_eq!(k.pods.capabilities, before.capabilities);
}

#[test]
fn efa_takes_every_interface_and_rdma_false_keeps_pods_unchanged() {
    let nodes = [
        node("a", json!({"nvidia.com/gpu": "8", EFA: "32"}), json!({})),
        node("b", json!({"nvidia.com/gpu": "8", EFA: "32"}), json!({})),
    ];
    let mut k = k8s("");
    survey(&mut k, &[], Some(&nodes), None);
    assert_eq!(
        k.pods.extended_resources.get(EFA).map(String::as_str),
        Some("32")
    );
    let mut off = k8s("rdma = false");
    let f = survey(&mut off, &[], Some(&nodes), Some(&ns(None)));
    assert!(off.pods.extended_resources.is_empty(), "{f:?}");
}

#[test]
fn what_the_nodes_cannot_give_is_refused_with_the_field() {
    let nodes = [
        node(
            "a",
            json!({"nvidia.com/gpu": "4", "rdma/ib_a": "1"}),
            json!({"pool": "h100"}),
        ),
        node(
            "b",
            json!({"nvidia.com/gpu": "4", "rdma/ib_b": "1"}),
            json!({"pool": "h100"}),
        ),
    ];
    let fields = |extra: &str| {
        let mut k = k8s(extra);
        survey(&mut k, &[], Some(&nodes), Some(&ns(None)))
            .refused
            .into_iter()
            .map(|r| r.field)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        fields("node_selector = { pool = \"a100\" }"),
        ["node_selector"]
    );
    assert_eq!(
        fields("extended_resources = { \"rdma/roce\" = 1 }"),
        ["extended_resources.rdma/roce"]
    );
    assert_eq!(fields("gpus_per_node = 8"), ["gpus_per_node"]);
    // a device on some nodes only: said, not requested (the pods would fit only there)
    assert!(fields("").is_empty());
    assert_eq!(fields("rdma = true"), ["rdma"]);
    // two devices on every node: which one cannot be guessed
    let both = [node(
        "a",
        json!({"nvidia.com/gpu": "4", "rdma/ib": "1", "rdma/roce": "1"}),
        json!({}),
    )];
    let mut k = k8s("");
    let f = survey(&mut k, &[], Some(&both), None);
    assert_eq!(f.refused[0].field, "extended_resources", "{f:?}");
    assert!(fields("rdma = false").is_empty());
    assert!(fields(
        "extended_resources = { \"rdma/ib_a\" = 1 }\nnode_selector = { pool = \"h100\" }"
    )
    .is_empty());
    let none = [node("a", json!({"nvidia.com/gpu": "4"}), json!({}))];
    let mut k = k8s("rdma = true");
    let f = survey(&mut k, &[], Some(&none), None);
    assert_eq!(f.refused[0].field, "rdma");
}

#[test]
fn pod_security_is_checked_against_what_the_pods_need() {
    let nodes = [node("a", json!({"nvidia.com/gpu": "8"}), json!({}))];
    let refused = |extra: &str, level: &str, env: &[(String, String)]| {
        let mut k = k8s(extra);
        survey(&mut k, env, Some(&nodes), Some(&ns(Some(level))))
            .refused
            .into_iter()
            .map(|r| r.field)
            .collect::<Vec<_>>()
    };
    // IPC_LOCK (the default) is beyond baseline
    assert_eq!(refused("", "baseline", &[]), ["capabilities"]);
    // a baseline namespace with RDMA offered: the device is requested, no capability is added back
    let rdma_nodes = [node(
        "a",
        json!({"nvidia.com/gpu": "8", "rdma/ib": "1"}),
        json!({}),
    )];
    let mut k = k8s("capabilities = []");
    let f = survey(&mut k, &[], Some(&rdma_nodes), Some(&ns(Some("baseline"))));
    assert!(f.refused.is_empty(), "{f:?}");
    assert!(k.pods.capabilities.is_empty());
    assert_eq!(
        k.pods.extended_resources.get("rdma/ib").map(String::as_str),
        Some("1")
    );
    assert!(refused("capabilities = []", "baseline", &[]).is_empty());
    let nic = [("NCCL_SOCKET_IFNAME".to_string(), "ib0".to_string())];
    assert_eq!(
        refused("capabilities = []", "baseline", &nic),
        ["use_host_network"]
    );
    assert_eq!(
        refused("privileged = true", "baseline", &[]),
        ["privileged"]
    );
    assert_eq!(
        refused("capabilities = []", "restricted", &[]),
        ["default_namespace"]
    );
    assert!(refused("", "privileged", &nic).is_empty());
    let mut k = k8s("");
    let f = survey(&mut k, &[], None, None);
    assert_eq!(f.notes.len(), 2, "{f:?}");
    assert!(
        f.notes[0].contains("gpus_per_node is not set: 1 assumed"),
        "{f:?}"
    );
}
