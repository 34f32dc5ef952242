//! Node evidence parsers on real public outputs of each tool (tests/data/node-health, origin in ORIGIN.md):
//! healthy nodes pass, the faults they show are named, front-end adapters are never failed.

use crate::common;
use common::Work;

use cloudai::workloads::node_health::{ibstat, kernel_log, nvidia_smi, worst, Severity};

fn sample(name: &str) -> String {
    std::fs::read_to_string(common::data().join("node-health").join(name)).unwrap()
}

fn fails(f: &[cloudai::workloads::node_health::Finding]) -> Vec<&str> {
    f.iter()
        .filter(|x| x.severity == Severity::Fail)
        .map(|x| x.what.as_str())
        .collect()
}

#[test]
fn ibstat_of_healthy_h100_nodes_passes_whatever_their_front_end_does() {
    for name in [
        "ibstat-h100-all-active.txt",
        "ibstat-h100-frontend-down.txt",
    ] {
        let ports = ibstat::parse(&sample(name));
        assert!(ports.len() >= 9, "{name}: {}", ports.len());
        let f = ibstat::judge(&ports, &[], 0.0);
        assert!(fails(&f).is_empty(), "{name}: {f:?}");
    }
    // the front-end's down ports (ConnectX-6 Dx, 100 Gb/s Ethernet) are shown as such
    let f = ibstat::judge(
        &ibstat::parse(&sample("ibstat-h100-frontend-down.txt")),
        &[],
        0.0,
    );
    assert_eq!(f.len(), 3, "{f:?}");
    assert!(f
        .iter()
        .all(|x| x.severity == Severity::Show && x.what.contains("not a fabric adapter")));
    // declared 400 Gb/s: the compute ports have it
    let ports = ibstat::parse(&sample("ibstat-h100-all-active.txt"));
    assert!(fails(&ibstat::judge(&ports, &[], 400.0)).is_empty());
}

#[test]
fn ibstat_names_the_fabric_ports_that_are_down() {
    let ports = ibstat::parse(&sample("ibstat-h100-fabric-down-polling.txt"));
    let f = ibstat::judge(&ports, &[], 0.0);
    assert_eq!(
        fails(&f),
        [
            "mlx5_11 port 1: Down/Polling (no partner seen: cable, transceiver or far port)",
            "mlx5_5 port 1: Down/Disabled (port disabled (administratively, by firmware or by the subnet manager))",
        ]
    );
    // declaring the fabric adapters by name gives the same verdict
    let declared: Vec<String> = [
        "mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11",
    ]
    .map(String::from)
    .to_vec();
    assert_eq!(fails(&ibstat::judge(&ports, &declared, 400.0)).len(), 2);
}

#[test]
fn nvidia_smi_of_healthy_nodes_passes_and_shows_versions() {
    for (name, gpus, driver) in [
        ("nvidia-smi-q-535.183.01-h100x8.txt", 8, "535.183.01"),
        ("nvidia-smi-q-535.154.05-rtx4090x8.txt", 8, "535.154.05"),
        ("nvidia-smi-q-560.35.03.txt", 1, "560.35.03"),
    ] {
        let r = nvidia_smi::parse(&sample(name)).unwrap_or_else(|| panic!("{name}"));
        assert_eq!(r.gpus.len() as u64, gpus, "{name}");
        assert_eq!(r.driver, driver);
        let f = nvidia_smi::judge(&r, gpus);
        assert!(fails(&f).is_empty(), "{name}: {f:?}");
        assert!(
            !nvidia_smi::versions(&r)[2].1.is_empty(),
            "{name}: a VBIOS version"
        );
    }
    // the H100 node is judged against the GPUs it should have
    // under load one GPU flags a power brake without HW Slowdown, and SW thermal: warnings, not a failed node
    let r = nvidia_smi::parse(&sample("nvidia-smi-q-535.183.01-h100x8.txt")).unwrap();
    let f = nvidia_smi::judge(&r, 8);
    assert_eq!(worst(&f), Some(Severity::Warn), "{f:?}");
    assert_eq!(
        f.iter().map(|x| x.what.as_str()).collect::<Vec<_>>(),
        [
            "GPU 00000000:75:00.0: HW power brake slowdown active",
            "GPU 00000000:75:00.0: SW thermal slowdown (cooling) active"
        ]
    );
    assert!(
        fails(&nvidia_smi::judge(&r, 16))[0].starts_with("8 GPUs found, the node should have 16")
    );
}

/// A real A10 with 4 uncorrectable errors remapped and the remap waiting for a reset: the pre-test that lets it
/// pass (DCGM's "skipping this check" on a blank value) is exactly what this check must not do.
#[test]
fn a_real_pending_row_remap_fails_the_node() {
    let r = nvidia_smi::parse(&sample("nvidia-smi-q-535.129.03-a10.txt")).unwrap();
    assert_eq!((r.gpus.len(), r.driver.as_str()), (1, "535.129.03"));
    assert_eq!(
        fails(&nvidia_smi::judge(&r, 1)),
        ["GPU 00000000:07:00.0: a row remap waits for a GPU reset (pending)"]
    );
}

#[test]
fn a_real_xid_119_fails_the_node_and_segfaults_are_not_evidence() {
    let now = chrono::Utc::now();
    let ev = kernel_log::events(&sample("dmesg-T-xid-119.txt"), None, now);
    let f = kernel_log::judge(&ev);
    assert_eq!(
        fails(&f),
        ["Xid 119 on GPU 0000:9b:00: GSP RPC timeout; reset the GPU (5 times)"]
    );
    assert!(kernel_log::events(&sample("dmesg-decode-iso-segfaults.txt"), None, now).is_empty());
    // a window that starts after the sample's day leaves it out
    let s = chrono::NaiveDate::from_ymd_opt(2025, 3, 1)
        .unwrap()
        .and_hms_opt(0, 0, 0)
        .unwrap();
    assert!(kernel_log::events(&sample("dmesg-T-xid-119.txt"), Some(s), now).is_empty());
}

/// A kernel-log line as `dmesg -T` prints it, `ago` before now (local time).
fn dmesg_t(ago: chrono::Duration, msg: &str) -> String {
    let t = chrono::Local::now() - ago;
    format!("[{}] {msg}\n", t.format("%a %b %e %H:%M:%S %Y"))
}

/// The per-node shape on the real Slurm cluster: one task on each of 4 nodes, each node's output apart
/// (`nodes/<node>/stdout.txt`), each graded; a node whose kernel log shows a fresh Xid 79 is named, an
/// application Xid and an Xid older than the window are not evidence.
#[test]
fn kernel_log_runs_once_per_node_on_slurm_and_names_the_bad_one() {
    let _g = common::slurm::alone();
    let scenario = r#"name = "evidence"
[[Tests]]
id = "klog"
test_name = "klog"
num_nodes = 4
"#;
    let Some(w) = common::slurm::slurm_work("", scenario) else {
        return;
    };
    let logs = w.path().join("klog");
    std::fs::create_dir_all(&logs).unwrap();
    let xid =
        |code: u32| format!("NVRM: Xid (PCI:0000:3b:00): {code}, pid=4242, name=python, test");
    for n in 1..=4 {
        let mut text = dmesg_t(
            chrono::Duration::hours(2),
            "mlx5_core 0000:0c:00.0: firmware version 28.39.1002",
        );
        match n {
            2 => text += &dmesg_t(chrono::Duration::minutes(30), &xid(79)),
            3 => {
                text += &dmesg_t(chrono::Duration::hours(1), &xid(13));
                text += &dmesg_t(chrono::Duration::days(3), &xid(79));
            }
            _ => {}
        }
        std::fs::write(logs.join(format!("node00{n}.txt")), text).unwrap();
    }
    w.file(
        "tests/klog.toml",
        &format!(
            r#"name = "klog"
description = "kernel log"
test_template_name = "KernelLog"
[cmd_args]
command = "cat {}/$SLURMD_NODENAME.txt"
since = "24h"
"#,
            logs.display()
        ),
    );
    let out = common::slurm::cloudai_run(&w, None);
    let text = common::stdout_of(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    let root = w.results_root();
    for n in 1..=4 {
        let f = root.join(format!("klog/0/nodes/node00{n}/stdout.txt"));
        let body = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert!(body.contains("cloudai-node-check: exit 0"), "{body}");
    }
    let r = common::record(&root, "klog", 0);
    assert_eq!(r.status, cloudai::results::Status::Failed, "{}", r.message);
    assert!(
        r.message.contains(
            "1 of 4 node(s) failed KernelLog: node002: Xid 79 on GPU 0000:3b:00: GPU has fallen off the bus; reboot \
             the node"
        ),
        "{}",
        r.message
    );
    let nodes: Vec<&cloudai::results::checks::Check> = r
        .checks
        .iter()
        .filter(|c| c.check == cloudai::results::checks::CheckKind::Node)
        .collect();
    assert_eq!(nodes.len(), 4, "{:?}", r.checks);
    assert!(nodes.iter().any(|c| c.detail == "node001: healthy"));
    assert!(
        nodes.iter().any(|c| c.detail == "node003: healthy"),
        "{nodes:?}"
    );
}

/// Standalone runs the check on its own node: the iteration's own `stdout.txt`, graded the same way; a real
/// `nvidia-smi -q` with a pending row remap fails it, and `generate-report` re-grades the tree the same.
#[test]
fn nvidia_smi_on_the_local_node_fails_a_pending_remap() {
    let w = Work::new();
    let smi = w.file(
        "bin/nvidia-smi",
        &format!(
            "#!/bin/bash\ncat {}\n",
            common::data()
                .join("node-health/nvidia-smi-q-535.129.03-a10.txt")
                .display()
        ),
    );
    std::fs::set_permissions(&smi, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    w.file(
        "tests/smi.toml",
        "name = \"smi\"\ndescription = \"gpu state\"\ntest_template_name = \"NvidiaSmi\"\n",
    );
    w.file(
        "s.toml",
        "name = \"local\"\n[[Tests]]\nid = \"smi\"\ntest_name = \"smi\"\n",
    );
    let out = w
        .cloudai()
        .args([
            "run",
            "--tests-dir",
            "tests",
            "--test-scenario",
            "s.toml",
            "--output-dir",
            "out",
        ])
        .env(
            "PATH",
            format!(
                "{}:{}",
                w.path().join("bin").display(),
                std::env::var("PATH").unwrap()
            ),
        )
        .output()
        .unwrap();
    let text = common::stdout_of(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    let root = w.results_root();
    assert!(!root.join("smi/0/nodes").exists());
    let r = common::record(&root, "smi", 0);
    assert!(
        r.message.contains("node(s) failed NvidiaSmi")
            && r.message
                .contains("a row remap waits for a GPU reset (pending)"),
        "{}",
        r.message
    );
    let again = w.generate_report(&root);
    assert_eq!(
        again.status.code(),
        Some(3),
        "{}",
        common::stdout_of(&again)
    );
    let r2 = common::record(&root, "smi", 0);
    assert_eq!((r2.status, r2.message), (r.status, r.message));
}

/// Bad input: a DCGM level outside 1–4, a window that is not one, and a per-node check on several nodes of a
/// container scheduler are each one clear error before anything is created.
#[test]
fn bad_levels_windows_and_shapes_are_refused_before_anything_runs() {
    for (test, words) in [
        (
            "name = \"d\"\ndescription = \"d\"\ntest_template_name = \"DcgmDiag\"\n[cmd_args]\nlevel = 7\n",
            "cmd_args.level = 7: dcgmi diag runs levels 1 to 4",
        ),
        (
            "name = \"d\"\ndescription = \"d\"\ntest_template_name = \"KernelLog\"\n[cmd_args]\nsince = \"forever\"\n",
            "cmd_args.since = \"forever\" is not a window",
        ),
    ] {
        let w = Work::new();
        w.file("tests/d.toml", test);
        w.file("s.toml", "name = \"x\"\n[[Tests]]\nid = \"d\"\ntest_name = \"d\"\n");
        let out = w
            .cloudai()
            .args(["dry-run", "--tests-dir", "tests", "--test-scenario", "s.toml", "--output-dir", "out"])
            .output()
            .unwrap();
        let text = common::stdout_of(&out);
        assert_eq!(out.status.code(), Some(1), "{text}");
        assert!(text.contains(words), "{words}: {text}");
        assert!(!w.path().join("out").exists(), "nothing created: {text}");
    }
    // Run:ai has no one-pod-per-node workload here: said, before anything is sent
    let w = Work::new();
    w.file(
        "system.toml",
        "name = \"r\"\nscheduler = \"runai\"\ninstall_path = \"i\"\noutput_path = \"out\"\n\
         base_url = \"https://runai.example.com\"\nuser_email = \"u@example.com\"\napp_id = \"a\"\n\
         app_secret = \"s\"\nproject_id = \"1\"\ncluster_id = \"71f69d83-ba66-4822-adf5-55ce55efd210\"\n\
         gpus_per_node = 8\n",
    );
    w.file(
        "tests/ib.toml",
        "name = \"ib\"\ndescription = \"ports\"\ntest_template_name = \"IbStat\"\n",
    );
    w.file(
        "s.toml",
        "name = \"x\"\n[[Tests]]\nid = \"ib\"\ntest_name = \"ib\"\nnum_nodes = 4\n",
    );
    let out = w.cloudai().args(common::DRY_RUN_S_TOML).output().unwrap();
    let text = common::stdout_of(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("test 'ib': IbStat checks each node"),
        "{text}"
    );
    // Kubernetes: one pod on each of the 4 nodes
    w.file("system.toml", common::kube::DRY_SYSTEM);
    let out = w.cloudai().args(common::DRY_RUN_S_TOML).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", common::stdout_of(&out));
    let m = std::fs::read_to_string(w.results_root().join("ib/0/k8s-manifest.yaml")).unwrap();
    assert!(m.contains("parallelism: 4"), "{m}");
}

/// Drift across nodes on the real Slurm cluster: four nodes run `nvidia-smi -q` (a real H100 node's output), one
/// of them with another driver: it is named (a warning: nothing fails yet), the others are not.
#[test]
fn nvidia_smi_on_slurm_names_the_node_whose_driver_drifted() {
    let _g = common::slurm::alone();
    let scenario =
        "name = \"drift\"\n[[Tests]]\nid = \"smi\"\ntest_name = \"smi\"\nnum_nodes = 4\n";
    let Some(w) = common::slurm::slurm_work("", scenario) else {
        return;
    };
    let sample = common::data().join("node-health/nvidia-smi-q-535.183.01-h100x8.txt");
    let smi = w.file(
        "bin/nvidia-smi",
        &format!(
            "#!/bin/bash\nif [ \"$SLURMD_NODENAME\" = node004 ]; then sed 's/535.183.01/550.54.15/' {0}; else cat {0}; fi\n",
            sample.display()
        ),
    );
    std::fs::set_permissions(&smi, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    w.file(
        "tests/smi.toml",
        "name = \"smi\"\ndescription = \"gpu state\"\ntest_template_name = \"NvidiaSmi\"\n",
    );
    let out = common::slurm::cloudai_run(&w, Some(&w.path().join("bin")));
    let text = common::stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let r = common::record(&w.results_root(), "smi", 0);
    let drifted: Vec<&str> = r
        .checks
        .iter()
        .filter(|c| c.detail.contains("(drift)"))
        .map(|c| c.detail.as_str())
        .collect();
    assert_eq!(drifted.len(), 1, "{:?}", r.checks);
    assert!(
        drifted[0].starts_with("node004: ")
            && drifted[0].contains(
                "warn: driver 550.54.15 differs from the 535.183.01 of 3 of 4 node(s) (drift)"
            ),
        "{}",
        drifted[0]
    );
}

/// The per-node shape on the test kube-apiserver: one Job whose pods keep apart (one per node), each pod's log into
/// `nodes/<node>/stdout.txt`, each node graded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernel_log_runs_one_pod_per_node_on_kubernetes() {
    let Some(c) = common::kube::cluster_of("k8s-pernode", common::kube::Act::Succeed, 3).await
    else {
        return;
    };
    let at = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ");
    for (i, n) in c.nodes.iter().enumerate() {
        let mut log = format!("cloudai-node-check: host {n} at {at} expect-gpus 0\n");
        if i == 1 {
            log += &dmesg_t(
                chrono::Duration::minutes(5),
                "NVRM: Xid (PCI:0000:1b:00): 95, pid=7, name=x, Uncontained",
            );
        }
        log += "cloudai-node-check: exit 0\n";
        c.logs.lock().unwrap().insert(format!("main@{n}"), log);
    }
    let w = common::kube::setup(
        &c,
        "",
        "name = \"k\"\n[[Tests]]\nid = \"klog\"\ntest_name = \"klog\"\nnum_nodes = 3\n",
    );
    w.file(
        "tests/klog.toml",
        "name = \"klog\"\ndescription = \"kernel log\"\ntest_template_name = \"KernelLog\"\n",
    );
    let out = common::kube::run(&w).await;
    let text = common::stdout_of(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    let root = w.results_root();
    for n in &c.nodes {
        assert!(
            root.join(format!("klog/0/nodes/{n}/stdout.txt")).is_file(),
            "{n}"
        );
    }
    let r = common::record(&root, "klog", 0);
    assert!(
        r.message.contains(&format!(
            "1 of 3 node(s) failed KernelLog: {}: Xid 95 on GPU 0000:1b:00",
            c.nodes[1]
        )),
        "{}",
        r.message
    );
    let m = std::fs::read_to_string(root.join("klog/0/k8s-manifest.yaml")).unwrap();
    assert!(
        m.contains("parallelism: 3")
            && m.contains("completions: 3")
            && m.contains("podAntiAffinity"),
        "{m}"
    );
    assert!(c.objects().await.is_empty(), "{:?}", c.objects().await);
}

/// Run:ai has no one-pod-per-node workload: a per-node check on named nodes runs as one training per node, pinned
/// to it (one after the other), each node's log in `nodes/<node>/stdout.txt`, every payload valid for the API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_node_check_runs_one_pinned_workload_per_node_on_runai() {
    let cfg = runai_mock::Config {
        timing: common::runai::timing(0.3),
        stdout: format!(
            "cloudai-node-check: host gpu-a at {} expect-gpus 0\n[  1.0] Linux version 6.1\ncloudai-node-check: exit 0\n",
            chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ")
        ),
        credentials: vec![("my-app".into(), common::runai::SECRET.into())],
        ..runai_mock::Config::default()
    };
    let m = runai_mock::MockServer::start("127.0.0.1:0".parse().unwrap(), cfg, None)
        .await
        .unwrap();
    let w = Work::new();
    common::runai::setup(
        &w,
        &m.url(),
        "name = \"k\"\n[[Tests]]\nid = \"klog\"\ntest_name = \"klog\"\nnum_nodes = 2\nnodes = [\"gpu-a\", \"gpu-b\"]\n",
    );
    w.file(
        "tests/klog.toml",
        "name = \"klog\"\ndescription = \"kernel log\"\ntest_template_name = \"KernelLog\"\n",
    );
    let out = common::runai::run(&w, common::runai::RUN, &[]).await;
    let text = common::stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let root = w.results_root();
    for n in ["gpu-a", "gpu-b"] {
        let f = root.join(format!("klog/0/nodes/{n}/stdout.txt"));
        assert!(f.is_file(), "{}: {text}", f.display());
        let body =
            std::fs::read_to_string(root.join(format!("klog/0/nodes/{n}/runai-workload.json")))
                .unwrap();
        assert!(
            body.contains(&format!("\"values\":[\"{n}\"]")) || body.contains(&format!("\"{n}\"")),
            "{body}"
        );
    }
    let r = common::record(&root, "klog", 0);
    let nodes = r
        .checks
        .iter()
        .filter(|c| c.check == cloudai::results::checks::CheckKind::Node)
        .count();
    assert_eq!(nodes, 2, "{:?}", r.checks);
    assert_eq!(common::runai::workload_names(&m).len(), 2);
}

/// Real `dcgmi diag` tables of both DCGM generations (3.3.3 on eight A100s, 4.4.2 on one GPU): healthy, every test
/// read, the versions kept; the same table with one GPU's memory test failed (as DCGM 4 prints it) fails it.
#[test]
fn real_dcgmi_tables_pass_and_a_failed_gpu_is_named() {
    use cloudai::workloads::node_health::dcgm;
    let r3 = dcgm::parse(&sample("dcgmi-diag-r2-3.3.3-a100x8.txt")).unwrap();
    assert_eq!(
        (r3.version.as_str(), r3.driver.as_str()),
        ("3.3.3", "535.104.12")
    );
    assert_eq!(r3.results.len(), 11, "{:?}", r3.results);
    assert!(dcgm::judge(&r3).is_empty());
    let text4 = sample("dcgmi-diag-r2-4.4.2.txt");
    let r4 = dcgm::parse(&text4).unwrap();
    assert_eq!(
        (r4.version.as_str(), r4.driver.as_str()),
        ("4.4.2", "580.105.08")
    );
    assert_eq!(
        r4.results
            .iter()
            .map(|x| (x.test.as_str(), x.entity.as_str()))
            .collect::<Vec<_>>(),
        [("software", "GPU0"), ("memory", "GPU0"), ("pcie", "GPU0")]
    );
    assert!(dcgm::judge(&r4).is_empty());
    let failed = text4
        .replace(
            "| memory                    | Pass                                           |\n|                           | GPU0: Pass ",
            "| memory                    | Fail                                           |\n|                           | GPU0: Fail ",
        )
        .replace(
            "+-----  Integration",
            "| Warning: GPU0             | A DBE occurred on GPU 0 in the memory test    |\n+-----  Integration",
        );
    assert_ne!(failed, text4);
    let f = dcgm::judge(&dcgm::parse(&failed).unwrap());
    assert_eq!(
        fails(&f),
        ["memory failed on GPU0: A DBE occurred on GPU 0 in the memory test"]
    );
}
