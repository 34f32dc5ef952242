use super::*;

fn ranks(spec: &[(&str, u32)], device: &str) -> Vec<SeenRank> {
    spec.iter()
        .flat_map(|(h, n)| {
            (0..*n).map(move |d| SeenRank {
                host: h.to_string(),
                gpu: format!("device {d}"),
                device: device.to_string(),
            })
        })
        .collect()
}

fn shown(r: Vec<SeenRank>, peak: f64) -> Shown {
    Shown {
        ranks: r,
        network: None,
        peaks: vec![Peak {
            collective: "all_reduce".into(),
            busbw_gbps: peak,
            at_size: 128 << 20,
            max_size: 128 << 20,
        }],
        own_floor: false,
    }
}

fn asked(nodes: u64, gpus: Option<u64>) -> Asked {
    Asked {
        nodes,
        gpus_per_node: gpus,
        fabric: Fabric::default(),
    }
}

fn verdict(s: Shown) -> Verdict {
    Verdict {
        passed: true,
        shown: Some(s),
        ..Default::default()
    }
}

fn status(v: &Verdict, k: CheckKind) -> CheckStatus {
    v.checks
        .iter()
        .find(|c| c.check == k)
        .map(|c| c.status)
        .unwrap()
}

const A100: &str = "NVIDIA A100-SXM4-80GB";

#[test]
fn eight_ranks_on_one_host_when_two_nodes_were_launched_fail_with_the_numbers() {
    let v = judge(
        verdict(shown(ranks(&[("dkh", 8)], A100), 182.0)),
        Some(&asked(2, Some(8))),
    );
    assert!(!v.passed);
    assert_eq!(
        v.message,
        "launched 2 nodes × 8 GPUs = 16 ranks; the output shows 8 ranks on 1 host (dkh)"
    );
    assert_eq!(status(&v, CheckKind::Shape), CheckStatus::Fail);
}

#[test]
fn the_asked_shape_passes_and_says_what_it_checked() {
    let v = judge(
        verdict(shown(ranks(&[("a", 8), ("b", 8)], A100), 182.0)),
        Some(&asked(2, Some(8))),
    );
    assert_eq!(status(&v, CheckKind::Shape), CheckStatus::Pass);
    let c = v
        .checks
        .iter()
        .find(|c| c.check == CheckKind::Shape)
        .unwrap();
    assert_eq!(c.detail, "16 ranks on 2 hosts (a, b)");
    // two nodes, nothing said of the network: not shown, not a failure
    assert_eq!(status(&v, CheckKind::Transport), CheckStatus::NotShown);
    assert!(v.passed, "{v:?}");
}

#[test]
fn uneven_hosts_and_shared_gpus_fail() {
    let v = judge(
        verdict(shown(ranks(&[("a", 10), ("b", 6)], A100), 182.0)),
        Some(&asked(2, Some(8))),
    );
    assert!(!v.passed);
    assert!(v.message.contains("10 ranks on a"), "{}", v.message);
    let mut r = ranks(&[("a", 8)], A100);
    r[1].gpu = r[0].gpu.clone();
    let v = judge(verdict(shown(r, 182.0)), Some(&asked(1, Some(8))));
    assert!(!v.passed);
    assert!(
        v.message.contains("2 ranks on GPU device 0 of a"),
        "{}",
        v.message
    );
}

#[test]
fn sockets_between_nodes_fail_unless_the_system_declares_tcp() {
    let mut s = shown(ranks(&[("a", 1), ("b", 1)], "Tesla T4"), 10.0);
    s.network = Some(Network {
        library: "NCCL",
        name: "Socket".into(),
        socket: true,
        detail: "NET/Socket on eth0".into(),
        no_ib_device: true,
    });
    let v = judge(verdict(s.clone()), Some(&asked(2, Some(1))));
    assert!(!v.passed);
    assert!(
        v.message
            .starts_with("NCCL used TCP sockets between nodes (NET/Socket on eth0, after NET/IB : No device found)"),
        "{}",
        v.message
    );
    let mut tcp = asked(2, Some(1));
    tcp.fabric.tcp = true;
    assert!(judge(verdict(s.clone()), Some(&tcp)).passed);
    // one node: sockets are never used between ranks
    let mut one = s;
    one.ranks = ranks(&[("a", 2)], "Tesla T4");
    assert!(judge(verdict(one), Some(&asked(1, Some(2)))).passed);
}

#[test]
fn a_known_node_far_below_its_expectation_fails_and_unknown_hardware_gets_no_floor() {
    let slow = judge(
        verdict(shown(ranks(&[("dkh", 8)], A100), 18.3)),
        Some(&asked(1, Some(8))),
    );
    assert!(!slow.passed);
    assert!(
        slow.message.starts_with("peak busbw 18.30 GB/s (all_reduce at 128 MiB) is 8% of the 230 GB/s expected for 8 × A100 SXM over NVLink 3"),
        "{}",
        slow.message
    );
    let healthy = judge(
        verdict(shown(ranks(&[("dkh", 8)], A100), 182.9)),
        Some(&asked(1, Some(8))),
    );
    assert!(healthy.passed);
    let unknown = judge(
        verdict(shown(ranks(&[("x", 2)], "NVIDIA GeForce RTX 5090"), 1.0)),
        Some(&asked(1, Some(2))),
    );
    assert!(unknown.passed);
    let c = unknown
        .checks
        .iter()
        .find(|c| c.check == CheckKind::Expectation)
        .unwrap();
    assert_eq!(c.status, CheckStatus::NotShown);
    assert!(c.detail.contains("expected_busbw_gbps"), "{}", c.detail);
}

#[test]
fn small_messages_and_other_collectives_are_not_judged_against_the_hardware() {
    let mut s = shown(ranks(&[("dkh", 8)], A100), 5.0);
    s.peaks[0].max_size = 32 << 20;
    let v = judge(verdict(s.clone()), Some(&asked(1, Some(8))));
    assert!(v.passed, "{v:?}");
    s.peaks[0].max_size = 1 << 30;
    s.peaks[0].collective = "alltoall".into();
    assert!(judge(verdict(s), Some(&asked(1, Some(8)))).passed);
}

#[test]
fn between_nodes_the_declared_adapters_set_the_expectation() {
    let s = shown(ranks(&[("a", 8), ("b", 8)], A100), 40.0);
    let mut a = asked(2, Some(8));
    // no adapters declared: no floor
    assert!(judge(verdict(s.clone()), Some(&a)).passed);
    a.fabric.nics_per_node = Some(8);
    a.fabric.nic_gbps = Some(200.0);
    let v = judge(verdict(s), Some(&a));
    assert!(!v.passed);
    assert!(
        v.message.contains("8 × 200 Gb/s adapters per node"),
        "{}",
        v.message
    );
}

#[test]
fn a_test_s_own_floor_replaces_the_expectation_and_a_baseline_removes_it() {
    let mut s = shown(ranks(&[("dkh", 8)], A100), 18.0);
    s.own_floor = true;
    let v = judge(verdict(s.clone()), Some(&asked(1, Some(8))));
    assert!(v.passed);
    assert!(!v.checks.iter().any(|c| c.check == CheckKind::Expectation));
    s.own_floor = false;
    let mut v = judge(verdict(s), Some(&asked(1, Some(8))));
    assert!(!v.passed);
    assert_eq!(without_expectation(&mut v.checks), None);
}

#[test]
fn a_failing_workload_keeps_its_reason_as_the_output_check() {
    let v = judge(Verdict::fail("the command exited with status 2"), None);
    assert_eq!(v.checks[0].check, CheckKind::Output);
    assert_eq!(v.checks[0].status, CheckStatus::Fail);
    assert_eq!(v.checks[0].detail, "the command exited with status 2");
    assert_eq!(v.checks.len(), 1, "{:?}", v.checks);
}
