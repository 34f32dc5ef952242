//! Node evidence parsers on real public outputs of each tool (tests/data/node-health, origin in ORIGIN.md):
//! healthy nodes pass, the faults they show are named, front-end adapters are never failed.

use crate::common;

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
