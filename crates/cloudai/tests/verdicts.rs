//! Verdicts that cannot lie (issue 35): a fault matrix made from healthy public outputs by the rules of their
//! formats — missing ranks, fewer hosts, two ranks on one GPU, TCP sockets between nodes, a known 8-GPU system far
//! below its expectation, unknown hardware — each re-graded from a results tree with what was launched, with its
//! verdict, reason and checks; the healthy originals still pass.

use crate::common;

use std::path::{Path, PathBuf};

use common::{data, nccl_standalone, scaled, stdout_of, Work};

const A100: &str = "single-node-8gpu-a100-allreduce-v2.19.4.txt";
const H100X2: &str = "multinode-2x8-h100-allreduce-kubeflow-mpijob.txt";

fn sample(name: &str) -> String {
    std::fs::read_to_string(data().join("nccl-samples").join(name)).unwrap()
}

/// A results tree of one NCCL iteration (run on Standalone), for re-grading other outputs in it.
fn tree(w: &Work) -> PathBuf {
    let out = nccl_standalone(w, &sample(A100), 1, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    w.results_root()
}

/// `stdout` graded as the output of a run that launched `nodes` × `gpus`: generate-report's verdict (status,
/// message) and checks (`name` → `status: detail`), with the system's declared fields when given.
fn graded(
    w: &Work,
    root: &Path,
    stdout: &str,
    nodes: u64,
    gpus: u64,
    system_extra: Option<&str>,
) -> (String, String, Vec<(String, String, String)>) {
    let dir = root.join("ar/0");
    std::fs::write(dir.join("stdout.txt"), stdout).unwrap();
    let rec_path = dir.join("cloudai-run.json");
    let mut rec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&rec_path).unwrap()).unwrap();
    rec["launched"] = serde_json::json!({"nodes": nodes, "gpus_per_node": gpus});
    std::fs::write(&rec_path, serde_json::to_vec(&rec).unwrap()).unwrap();
    let mut cmd = w.cloudai();
    cmd.args(["generate-report", "--result-dir"]).arg(root);
    if let Some(extra) = system_extra {
        let sys = w.file(
            "declared.toml",
            &format!(
                "name = \"d\"\nscheduler = \"standalone\"\ninstall_path = \"i\"\noutput_path = \"o\"\n{extra}\n"
            ),
        );
        cmd.arg("--system-config").arg(sys);
    }
    let out = cmd.output().unwrap();
    let text = stdout_of(&out);
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("summary.json")).unwrap())
            .unwrap_or_else(|e| panic!("{e}: {text}"));
    let t = &summary["tests"][0];
    let checks = t["checks"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|c| {
            (
                c["check"].as_str().unwrap().to_string(),
                c["status"].as_str().unwrap().to_string(),
                c["detail"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    (
        t["status"].as_str().unwrap().to_string(),
        t["message"].as_str().unwrap_or("").to_string(),
        checks,
    )
}

fn check<'a>(checks: &'a [(String, String, String)], name: &str) -> (&'a str, &'a str) {
    checks
        .iter()
        .find(|c| c.0 == name)
        .map(|c| (c.1.as_str(), c.2.as_str()))
        .unwrap_or_else(|| panic!("no {name} check in {checks:?}"))
}

/// The Rank lines of `text` without those of the ranks named.
fn without_ranks(text: &str, ranks: &[u32]) -> String {
    text.lines()
        .filter(|l| !ranks.iter().any(|r| l.contains(&format!("Rank {r:2} "))))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// NCCL's network lines as a run with NCCL_DEBUG=INFO prints them, written after the Rank lines.
fn with_net_lines(text: &str, lines: &[&str]) -> String {
    let mut out = String::new();
    let mut done = false;
    for l in text.lines() {
        if !done && l.starts_with("#       size") {
            for n in lines {
                out.push_str(n);
                out.push('\n');
            }
            done = true;
        }
        out.push_str(l);
        out.push('\n');
    }
    out
}

#[test]
fn the_fault_matrix_fails_each_fault_with_its_reason_and_the_originals_pass() {
    let w = Work::new();
    let root = tree(&w);
    let a100 = sample(A100);

    // the healthy original, as launched: 1 node × 8 GPUs
    let (st, msg, checks) = graded(&w, &root, &a100, 1, 8, None);
    assert_eq!(st, "PASSED", "{msg} {checks:?}");
    assert_eq!(check(&checks, "shape"), ("pass", "8 ranks on 1 host (dkh)"));
    assert_eq!(check(&checks, "transport").0, "pass");
    let (s, d) = check(&checks, "expectation");
    assert_eq!(s, "pass", "{d}");
    assert!(d.starts_with("182.90 GB/s ≥ 138.0 GB/s"), "{d}");
    assert_eq!(check(&checks, "table").0, "pass");
    assert_eq!(check(&checks, "wrong"), ("pass", "0 wrong elements"));

    // fewer hosts than launched: the issue's own case
    let (st, msg, _) = graded(&w, &root, &a100, 2, 8, None);
    assert_eq!(st, "FAILED");
    assert_eq!(
        msg,
        "launched 2 nodes × 8 GPUs = 16 ranks; the output shows 8 ranks on 1 host (dkh)"
    );

    // missing ranks
    let (st, msg, _) = graded(&w, &root, &without_ranks(&a100, &[6, 7]), 1, 8, None);
    assert_eq!(st, "FAILED");
    assert_eq!(
        msg,
        "launched 1 node × 8 GPUs = 8 ranks; the output shows 6 ranks on 1 host (dkh)"
    );

    // two ranks on one GPU: rank 1 prints rank 0's bus id
    let shared = a100.replacen("device  1 [0000:19:00]", "device  0 [0000:14:00]", 1);
    let (st, msg, _) = graded(&w, &root, &shared, 1, 8, None);
    assert_eq!(st, "FAILED");
    assert!(
        msg.contains("with 2 ranks on GPU 0000:14:00 of dkh: ranks share a GPU"),
        "{msg}"
    );

    // a known 8-GPU system at a tenth of its expectation
    let (st, msg, checks) = graded(&w, &root, &scaled(&a100, 0, 0.1), 1, 8, None);
    assert_eq!(st, "FAILED");
    assert!(
        msg.starts_with("peak busbw 18.29 GB/s (all_reduce at 128 MiB) is 8% of the 230 GB/s expected for 8 × A100 SXM over NVLink 3"),
        "{msg}"
    );
    assert_eq!(check(&checks, "expectation").0, "fail");
    // the system may set its own expectation and fraction
    let (st, _, _) = graded(
        &w,
        &root,
        &scaled(&a100, 0, 0.1),
        1,
        8,
        Some("expected_busbw_gbps = 20\nexpectation_fraction = 0.5"),
    );
    assert_eq!(st, "PASSED");

    // unknown hardware: no floor, and a note saying how to give one
    let unknown = scaled(&a100, 0, 0.1).replace("NVIDIA A100-SXM4-80GB", "NVIDIA GeForce RTX 4090");
    let (st, msg, checks) = graded(&w, &root, &unknown, 1, 8, None);
    assert_eq!(st, "PASSED", "{msg}");
    let (s, d) = check(&checks, "expectation");
    assert_eq!(s, "not_shown");
    assert!(
        d.contains("NVIDIA GeForce RTX 4090") && d.contains("expected_busbw_gbps"),
        "{d}"
    );

    // two nodes: the real 2 × 8 H100 output passes as launched; no network lines: transport not shown
    let h100 = sample(H100X2);
    let (st, msg, checks) = graded(&w, &root, &h100, 2, 8, None);
    assert_eq!(st, "PASSED", "{msg}");
    assert_eq!(check(&checks, "shape").0, "pass");
    assert_eq!(check(&checks, "transport").0, "not_shown");

    // socket fallback between the nodes
    let sockets = with_net_lines(
        &h100,
        &[
            "nccl-tests-h100-worker-0:16:16 [0] NCCL INFO NET/IB : No device found.",
            "nccl-tests-h100-worker-0:16:16 [0] NCCL INFO NET/Socket : Using [0]eth0:10.233.86.110<0>",
            "nccl-tests-h100-worker-0:16:16 [0] NCCL INFO Using network Socket",
            "nccl-tests-h100-worker-0:16:40 [0] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/Socket/0",
        ],
    );
    let (st, msg, _) = graded(&w, &root, &sockets, 2, 8, None);
    assert_eq!(st, "FAILED");
    assert!(
        msg.starts_with("NCCL used TCP sockets between nodes (NET/Socket/0 on eth0, after NET/IB : No device found)"),
        "{msg}"
    );
    // … unless the system declares a TCP-only fabric
    let (st, msg, _) = graded(&w, &root, &sockets, 2, 8, Some("fabric = \"tcp\""));
    assert_eq!(st, "PASSED", "{msg}");
    // RDMA: the channel says so
    let ib = with_net_lines(
        &h100,
        &[
            "nccl-tests-h100-worker-0:16:16 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.233.86.110<0>",
            "nccl-tests-h100-worker-0:16:16 [0] NCCL INFO Using network IB",
            "nccl-tests-h100-worker-0:16:40 [0] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/0/GDRDMA",
        ],
    );
    let (st, msg, checks) = graded(&w, &root, &ib, 2, 8, None);
    assert_eq!(st, "PASSED", "{msg}");
    assert_eq!(check(&checks, "transport"), ("pass", "NET/IB/0/GDRDMA"));
    // between nodes, the declared adapters set the expectation: 8 × 200 Gb/s → 180 GB/s
    let (st, _, checks) = graded(
        &w,
        &root,
        &ib,
        2,
        8,
        Some("nics_per_node = 8\nnic_gbps = 200"),
    );
    assert_eq!(st, "PASSED");
    assert!(check(&checks, "expectation")
        .1
        .contains("8 × 200 Gb/s adapters per node"));
    let (st, msg, _) = graded(
        &w,
        &root,
        &scaled(&ib, 0, 0.3),
        2,
        8,
        Some("nics_per_node = 8\nnic_gbps = 200"),
    );
    assert_eq!(st, "FAILED");
    assert!(
        msg.contains("of the 180 GB/s expected for 8 × 200 Gb/s adapters per node"),
        "{msg}"
    );

    // the other public outputs keep their verdicts
    let (st, _, _) = graded(
        &w,
        &root,
        &sample("multinode-2x1-gh200-wrong-values-failed-v2.17.8.txt"),
        2,
        1,
        None,
    );
    assert_eq!(st, "FAILED");
    let (st, msg, _) = graded(
        &w,
        &root,
        &sample("multinode-3x1-t4-check-disabled-stepbytes-pre2.13.txt"),
        3,
        1,
        None,
    );
    assert_eq!(st, "PASSED", "{msg}");
    let (st, msg, _) = graded(
        &w,
        &root,
        &sample("seed-h100-1gpu-allreduce-runai.txt"),
        1,
        1,
        None,
    );
    assert_eq!(st, "PASSED", "{msg}");
    let (st, _, _) = graded(
        &w,
        &root,
        &sample("single-node-2gpu-nccl-failure-with-debug-info.txt"),
        1,
        2,
        None,
    );
    assert_eq!(st, "FAILED");
}

#[test]
fn a_run_shows_its_checks_in_the_table_the_summary_and_junit() {
    let w = Work::new();
    let junit = w.path().join("junit.xml");
    let out = nccl_standalone(&w, &sample(A100), 1, &["--junit", junit.to_str().unwrap()]);
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("checked: table 25 rows, 8 B – 128 MiB, peak busbw 182.90 GB/s at 128 MiB, summary present; wrong 0 wrong elements; shape 8 ranks on 1 host (dkh)"),
        "{text}"
    );
    let rec: serde_json::Value = serde_json::from_slice(
        &std::fs::read(w.results_root().join("ar/0/cloudai-run.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(rec["launched"]["nodes"], 1, "{rec}");
    assert!(rec["checks"].as_array().unwrap().len() >= 4, "{rec}");
    let x = std::fs::read_to_string(&junit).unwrap();
    assert!(
        x.contains("check shape: pass: 8 ranks on 1 host (dkh)"),
        "{x}"
    );
    let page = std::fs::read_to_string(w.results_root().join("nccl-local.html")).unwrap();
    assert!(page.contains("<ul class=\"checks\">"), "{page}");
}

#[test]
fn baseline_create_refuses_a_run_whose_shape_was_not_the_one_asked() {
    let w = Work::new();
    let root = tree(&w);
    let _ = graded(&w, &root, &sample(A100), 2, 8, None);
    let file = w.path().join("b.toml");
    let out = w
        .cloudai()
        .args(["baseline", "create", "--output"])
        .arg(&file)
        .arg("--result-dir")
        .arg(&root)
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert_ne!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("launched 2 nodes × 8 GPUs = 16 ranks"),
        "{text}"
    );
    assert!(!file.exists());
}
