//! DeepEP (CloudAI's `DeepEP`): each test's output read by what it prints (correctness cases, tuned bests, every
//! rank's bandwidth), graded on what ran; the job's placement checks; CloudAI's job is compat_dry_run.rs.

use crate::common;

use cloudai::workloads::deepep::{parse, verdict};
use common::{data, stdout_of, Work};
use serde_json::Value;

fn sample(name: &str) -> String {
    std::fs::read_to_string(data().join("deepep-samples").join(name)).unwrap()
}

const SLURM: &str = r#"name = "s"
scheduler = "slurm"
install_path = "install"
output_path = "out"
default_partition = "p"
gpus_per_node = 8
[[partitions]]
name = "p"
"#;

fn test_file(subtest: &str, extra: &str) -> String {
    format!(
        "name = \"dp\"\ndescription = \"d\"\ntest_template_name = \"DeepEP\"\n[cmd_args]\ndocker_image_url = \"deepep\"\n\
         subtest_name = \"{subtest}\"\n{extra}"
    )
}

fn dry_run(w: &Work, test: &str, nodes: u64) -> std::process::Output {
    w.file("system.toml", SLURM);
    w.file("tests/t.toml", test);
    w.file(
        "s.toml",
        &format!("name = \"n\"\n[[Tests]]\nid = \"t\"\ntest_name = \"dp\"\nnum_nodes = {nodes}\n"),
    );
    w.cloudai().args(common::DRY_RUN_S_TOML).output().unwrap()
}

#[test]
fn each_test_is_read_by_what_it_prints() {
    let intra = parse(&sample("intranode-p5en.txt"));
    assert_eq!((intra.cases, intra.passed), (24, 24));
    let kinds: Vec<&str> = intra.results.iter().map(|r| r.kernel.as_str()).collect();
    assert_eq!(kinds, ["dispatch (FP8)", "dispatch (BF16)", "combine"]);
    assert_eq!(
        (intra.results[1].rdma, intra.results[1].nvl),
        (None, Some(331.77))
    );
    let inter = parse(&sample("internode-b200-gke.txt"));
    assert_eq!((inter.cases, inter.passed), (32, 32));
    let combine = &inter.results[2];
    assert_eq!(
        (combine.kernel.as_str(), combine.rdma, combine.nvl),
        ("combine", Some(43.63), Some(142.49))
    );
    let ll = parse(&sample("low-latency-8-ranks.txt"));
    assert_eq!(
        ll.results.len(),
        24,
        "8 combined and 8 × (dispatch, combine)"
    );
    assert_eq!(
        ll.results
            .iter()
            .filter(|r| r.kernel == "dispatch + combine")
            .count(),
        8
    );
    // two ranks' prints on one line are both read
    let glued = parse(
        "[rank 2] Dispatch + combine bandwidth: 65.53 GB/s, avg_t=336.46 us[rank 1] Dispatch + combine bandwidth: \
         65.61 GB/s, avg_t=336.04 us\n",
    );
    assert_eq!(
        glued.results.iter().map(|r| r.rank).collect::<Vec<_>>(),
        [Some(2), Some(1)]
    );
    // the elastic test's per-rank lines state the world size
    let ep = parse(
        "   * EP:   0/2 | dispatch: 40 GB/s (SO), 120 GB/s (SU), 250.000 us, 1000 bytes | copy: 10 GB/s, 1.000 us\n\
         \x20  * EP:   1/2 | dispatch: 41 GB/s (SO), 121 GB/s (SU), 250.000 us, 1000 bytes | copy: 10 GB/s, 1.000 us\n",
    );
    assert_eq!(ep.world, Some(2));
    assert_eq!(
        (ep.results[1].rank, ep.results[1].rdma, ep.results[1].nvl),
        (Some(1), Some(41.0), Some(121.0))
    );
}

#[test]
fn a_verdict_needs_every_case_passed_every_best_and_every_rank() {
    let v = verdict(
        &parse(&sample("intranode-p5en.txt")),
        "test_intranode",
        false,
        8,
    );
    assert!(v.passed, "{}", v.message);
    assert!(
        cloudai::workloads::judge::brief(&v.checks).contains(
            "24 cases passed; dispatch (FP8) 320.68 GB/s NVL; dispatch (BF16) 331.77 GB/s NVL; combine 321.89 GB/s NVL"
        ),
        "{:?}",
        v.checks
    );
    // a case that never printed `passed` (the run died inside it)
    let full = sample("intranode-p5en.txt");
    let died = full.replacen(
        "(async=True, previous=True) ... passed",
        "(async=True, previous=True) ...",
        1,
    );
    let v = verdict(&parse(&died), "test_intranode", false, 8);
    assert!(
        !v.passed && v.message.starts_with("23 of 24 correctness cases passed"),
        "{}",
        v.message
    );
    // no combine tuning: cut short
    let cut: String = full
        .lines()
        .filter(|l| !l.contains("Best combine"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(verdict(&parse(&cut), "test_intranode", false, 8)
        .message
        .contains("no tuned result for combine"));
    // a traceback is named by its exception
    let crashed = format!(
        "{}Traceback (most recent call last):\n  File \"tests/test_intranode.py\", line 1\nRuntimeError: DeepEP error: \
         timeout (dispatch CPU)\n",
        full.lines().take(10).map(|l| format!("{l}\n")).collect::<String>()
    );
    let v = verdict(&parse(&crashed), "test_intranode", false, 8);
    assert!(
        !v.passed && v.message.contains("RuntimeError: DeepEP error: timeout"),
        "{}",
        v.message
    );

    let text = sample("low-latency-8-ranks.txt");
    let v = verdict(&parse(&text), "test_low_latency", false, 8);
    assert!(v.passed, "{}", v.message);
    let lost: String = text
        .lines()
        .filter(|l| !l.starts_with("[rank 5]"))
        .map(|l| format!("{l}\n"))
        .collect();
    let v = verdict(&parse(&lost), "test_low_latency", false, 8);
    assert!(
        !v.passed && v.message.starts_with("rank 5 of 8 printed no bandwidth"),
        "{}",
        v.message
    );
    // the last rank's lines lost: the world is whole nodes of 8 processes
    let last: String = text
        .lines()
        .filter(|l| !l.starts_with("[rank 7]"))
        .map(|l| format!("{l}\n"))
        .collect();
    let v = verdict(&parse(&last), "test_low_latency", false, 8);
    assert!(
        v.message.starts_with("rank 7 of 8 printed no bandwidth"),
        "{}",
        v.message
    );
}

#[test]
fn the_job_and_its_placement_checks() {
    let w = Work::new();
    let out = dry_run(&w, &test_file("test_internode", "num_processes = 8\n"), 2);
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let script =
        std::fs::read_to_string(w.results_root().join("t/0/cloudai_sbatch_script.sh")).unwrap();
    assert!(
        script.contains("export MASTER_PORT=29500\n\nsrun")
            || script.contains("export MASTER_PORT=29500\n\n"),
        "{script}"
    );
    assert!(
        script.contains("--nodes=2 --ntasks=2 --ntasks-per-node=1 bash -c \"source ")
            && script
                .contains("/workspace/DeepEP/tests/legacy/test_internode.py --num-processes 8"),
        "{script}"
    );
    for (test, nodes, says) in [
        (
            test_file("test_internode", ""),
            1,
            "runs 8 processes on each of 2 or more nodes",
        ),
        (
            test_file("test_intranode", "num_processes = 16\n"),
            1,
            "num_processes = 16: one process per GPU",
        ),
    ] {
        let w = Work::new();
        let out = dry_run(&w, &test, nodes);
        let text = stdout_of(&out);
        assert_ne!(out.status.code(), Some(0), "{says}: {text}");
        assert!(text.contains(says), "{says}: {text}");
    }
    // one clear error for a bad value
    let w = Work::new();
    let out = dry_run(&w, &test_file("test_everything", ""), 2);
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("cmd_args.subtest_name") && text.contains("t.toml:"),
        "{text}"
    );
    assert!(std::fs::read_dir(w.path().join("out")).map_or(true, |mut d| d.next().is_none()));
}

#[test]
fn the_report_has_its_csv_page_and_metrics() {
    let w = Work::new();
    assert_eq!(
        dry_run(&w, &test_file("test_intranode", ""), 1)
            .status
            .code(),
        Some(0)
    );
    let root = w.results_root();
    std::fs::write(root.join("t/0/stdout.txt"), sample("intranode-p5en.txt")).unwrap();
    let rep = w.generate_report(&root);
    assert_eq!(rep.status.code(), Some(0), "{}", stdout_of(&rep));
    let csv = std::fs::read_to_string(root.join("t/0/deepep.csv")).unwrap();
    assert_eq!(csv, "kernel,rank,rdma_gbps,nvl_gbps\ndispatch (FP8),,,320.68\ndispatch (BF16),,,331.77\ncombine,,,321.89\n");
    let summary: Value =
        serde_json::from_slice(&std::fs::read(root.join("summary.json")).unwrap()).unwrap();
    assert!(
        summary["tests"][0]["checks"]
            .to_string()
            .contains("24 cases passed"),
        "{summary}"
    );
    assert!(std::fs::read_to_string(root.join("t/0/deepep.html"))
        .unwrap()
        .contains("24/24"));
}
