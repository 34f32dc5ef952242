//! NIXL (`NIXLBench`, `NIXLKVBench`, `NixlPerftest`): nixlbench's results tables read by their column names in each
//! layout it has printed, graded on completeness against the configuration it printed and on its own data check,
//! the UCX transport held against the fabric; the job's etcd steps and storage mounts; perftest's results.json.
//! CloudAI's jobs are compat_dry_run.rs.

use crate::common;

use cloudai::workloads::judge::{self, Asked};
use cloudai::workloads::nixl::output::{parse, verdict};
use common::{data, stdout_of, Work};
use serde_json::Value;

fn sample(name: &str) -> String {
    std::fs::read_to_string(data().join("nixl-samples").join(name)).unwrap()
}

#[test]
fn every_layout_is_read_by_its_column_names() {
    // before 0.5: latency first, GB/s last of three bandwidths
    let legacy = parse(&sample("nixlbench-legacy-rocm-readme.txt"), "");
    assert_eq!(legacy.tables.len(), 1);
    let rows: Vec<_> = legacy.rows().collect();
    assert_eq!(rows.len(), 15);
    assert_eq!(
        (
            rows[0].block,
            rows[0].batch,
            rows[0].latency_us,
            rows[0].gbps
        ),
        (4096, 1, 8.3631, 0.489771)
    );
    let peak = legacy.peak().unwrap();
    assert_eq!((peak.block, peak.gbps), (67108864, 5.10826));
    let v = verdict(&legacy);
    assert!(v.passed, "{v:?}");
    assert!(
        judge::brief(&v.checks)
            .contains("15 rows in 1 table(s), every configured block × batch size"),
        "{:?}",
        v.checks
    );
    // current: GB/s first, then latency and the prepare/post/transfer times; two runs in one output
    let two = parse(&sample("nixlbench-two-runs-write-read.txt"), "");
    assert_eq!(two.tables.len(), 2);
    assert_eq!(two.rows().count(), 24);
    let first = &two.tables[1].rows[0];
    assert_eq!((first.gbps, first.latency_us), (0.195834, 20.9));
    assert!(verdict(&two).passed);
    // rows among UCX's protocol table, no configuration printed: read, completeness not shown
    let noisy = parse(&sample("nixlbench-ucx-proto-noise.txt"), "");
    assert_eq!(noisy.rows().count(), 15);
    assert!(
        noisy.transports.is_empty(),
        "an intra-node table is not the network"
    );
    let v = verdict(&noisy);
    assert!(v.passed);
    assert!(
        judge::brief(&v.checks).contains("not shown: table"),
        "{:?}",
        v.checks
    );
    // pairwise runs of more than two processes add aggregate bandwidth and network use before the latency
    let wide = [
        "Block Size (B)      Batch Size     B/W (GB/Sec)   Aggregate B/W (GB/Sec)   Network Util (%)    Avg Lat. (us)  \
         Avg Prep (us)  P99 Prep (us)  Avg Post (us)  P99 Post (us)  Avg Tx (us)    P99 Tx (us)",
        "4096                1              0.958841       3.835364                 0.191768            4.3            \
         11.0           11.0           0.8            1.0            3.5            4.0",
    ]
    .join("\n");
    let wide = wide.as_str();
    let out = parse(wide, "");
    let r: Vec<_> = out.rows().collect();
    assert_eq!((r.len(), r[0].gbps, r[0].latency_us), (1, 0.958841, 4.3));
}

#[test]
fn a_table_cut_short_a_failed_data_check_or_an_unreachable_etcd_fail() {
    let full = sample("nixlbench-two-runs-write-read.txt");
    // the READ run lost its last block size
    let cut: String = full
        .lines()
        .filter(|l| !(l.starts_with("8388608 ") && l.contains("8238.7")))
        .map(|l| format!("{l}\n"))
        .collect();
    let v = verdict(&parse(&cut, ""));
    assert!(!v.passed);
    assert!(
        v.message.starts_with(
            "table 2 of 2: 1 of the 12 block × batch sizes nixlbench was configured for have no row, first 8388608 B × 1"
        ),
        "{}",
        v.message
    );
    let v = verdict(&parse(
        &full,
        "Consistency check failed for iov 0:3\nConsistency check failed\n",
    ));
    assert!(
        !v.passed && v.message.contains("stderr: Consistency check failed"),
        "{}",
        v.message
    );
    // UCX's warnings on stderr are not failures by themselves
    assert!(
        verdict(&parse(
            &full,
            "[1757492049.5] [n1:1:0] ucp_context.c:1 UCX  WARN  x\n"
        ))
        .passed
    );
    let v = verdict(&parse(
        "ETCD (n1:2379) was unreachable after 60 seconds\n",
        "",
    ));
    assert!(
        !v.passed && v.message.contains("unreachable after 60 seconds"),
        "{}",
        v.message
    );
    let v = verdict(&parse("Waiting for all processes to start...\n", ""));
    assert!(!v.passed && v.message.contains("no nixlbench results table"));
    // a row that moved nothing
    let zero = full.replacen("0.206109", "0.000000", 1);
    assert!(verdict(&parse(&zero, "")).message.contains("moved nothing"));
}

#[test]
fn tcp_between_nodes_fails_unless_the_system_says_tcp() {
    let inter = sample("nixlbench-ucx-proto-noise.txt").replace("intra-node", "inter-node");
    let out = parse(&inter, "");
    assert_eq!(out.transports, ["tcp"]);
    let asked = Asked {
        nodes: 2,
        gpus_per_node: None,
        fabric: Default::default(),
    };
    let v = judge::judge(verdict(&out), Some(&asked));
    assert!(!v.passed);
    assert!(
        v.message
            .starts_with("UCX used TCP sockets between nodes (UCX tcp/enP6p3s0f1np1"),
        "{}",
        v.message
    );
    let mut tcp = asked.clone();
    tcp.fabric.tcp = true;
    assert!(judge::judge(verdict(&out), Some(&tcp)).passed);
    let rdma = inter.replace("tcp/enP6p3s0f1np1", "rc_mlx5/mlx5_0:1");
    let v = judge::judge(verdict(&parse(&rdma, "")), Some(&asked));
    assert!(v.passed, "{}", v.message);
    assert!(
        judge::brief(&v.checks).contains("transport UCX rc_mlx5/mlx5_0:1"),
        "{:?}",
        v.checks
    );
}

const SLURM: &str = r#"name = "s"
scheduler = "slurm"
install_path = "install"
output_path = "out"
default_partition = "p"
ntasks_per_node = 4
[[partitions]]
name = "p"
"#;

const BENCH: &str = r#"name = "nb"
description = "d"
test_template_name = "NIXLBench"
[cmd_args]
docker_image_url = "nixl:0.4.0"
path_to_benchmark = "/workspace/nixlbench"
backend = "UCX"
wait_etcd_for = 30
filepath = "data"
total_buffer_size = "1mb"
device_list = "11:F:/store0.bin,12:F:/x/store0.bin,27:K:/dev/nvme0n1"
"#;

fn dry_run(w: &Work, test: &str, nodes: u64) -> std::process::Output {
    w.file("system.toml", SLURM);
    w.file("tests/t.toml", test);
    w.file(
        "s.toml",
        &format!(
            "name = \"n\"\n[[Tests]]\nid = \"t\"\ntest_name = \"{}\"\nnum_nodes = {nodes}\n",
            test.lines().next().unwrap().split('"').nth(1).unwrap()
        ),
    );
    w.cloudai().args(common::DRY_RUN_S_TOML).output().unwrap()
}

#[test]
fn the_job_mounts_the_storage_it_names_and_waits_as_asked() {
    let w = Work::new();
    let out = dry_run(&w, BENCH, 2);
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let dir = w.results_root().join("t/0");
    let script = std::fs::read_to_string(dir.join("cloudai_sbatch_script.sh")).unwrap();
    let d = dir.display();
    assert!(
        script.contains(&format!(
            "{d}/filepath_mount/data:/data,{d}/device_list_mounts/store0.bin:/store0.bin,\
             {d}/device_list_mounts/store0_1.bin:/x/store0.bin --no-container-mount-home"
        )),
        "{script}"
    );
    assert!(dir.join("filepath_mount/data").is_dir());
    for f in ["store0.bin", "store0_1.bin"] {
        assert_eq!(
            std::fs::metadata(dir.join("device_list_mounts").join(f))
                .unwrap()
                .len(),
            1 << 20
        );
    }
    // the buffer size in bytes, the path made absolute, as CloudAI's test-run.toml shows them
    let trt = std::fs::read_to_string(dir.join("test-run.toml")).unwrap();
    assert!(
        trt.contains("filepath = \"/data\"\ntotal_buffer_size = \"1048576\""),
        "{trt}"
    );
    assert!(
        script.contains("nixlbench --filepath=/data --total_buffer_size=1048576 --device_list=11:F:/store0.bin,12:F:/x/store0.bin,27:K:/dev/nvme0n1 --etcd-endpoints=http://$NIXL_ETCD_ENDPOINTS --backend=UCX\" &\nsleep 15\n"),
        "{script}"
    );
    assert!(
        script.contains("timeout 30 bash -c \"until curl"),
        "{script}"
    );
    // one node under UCX: two processes on it
    let w = Work::new();
    assert_eq!(dry_run(&w, BENCH, 1).status.code(), Some(0));
    let script =
        std::fs::read_to_string(w.results_root().join("t/0/cloudai_sbatch_script.sh")).unwrap();
    assert_eq!(
        script
            .matches("--nodelist=$SLURM_JOB_MASTER_NODE --ntasks-per-node=1")
            .count(),
        2,
        "{script}"
    );
}

#[test]
fn bad_fields_are_one_clear_error_each_and_nothing_is_created() {
    let perftest = "name = \"pt\"\ndescription = \"d\"\ntest_template_name = \"NixlPerftest\"\n[cmd_args]\n\
                    docker_image_url = \"nixl\"\nsubtest = \"sequential-ct-perftest\"\nnum_user_requests = 2\n\
                    batch_size = 1\nnum_prefill_nodes = 1\nnum_decode_nodes = 1\n";
    for (test, says) in [
        (
            BENCH.replace("\"1mb\"", "\"1GB\""),
            "cmd_args.total_buffer_size': \"1GB\" is not a buffer size",
        ),
        (
            BENCH.replace("27:K:/dev/nvme0n1", "27:k:/dev/nvme0n1"),
            "\"27:k:/dev/nvme0n1\" is not a device spec",
        ),
        (
            BENCH.replace("wait_etcd_for = 30", "wait_etcd_for = 0"),
            "cmd_args.wait_etcd_for': must be 1 or more",
        ),
        (
            format!("{perftest}model = \"deepseek-r1\"\nhidden_size = 4096\n"),
            "a model is named (model) and its shape given too",
        ),
        (
            perftest.to_string(),
            "no model: neither model nor its whole shape is given",
        ),
        (
            format!("{perftest}model = \"m\"\nbackend = \"UCX\"\n"),
            "cmd_args.backend': unknown field",
        ),
    ] {
        let w = Work::new();
        let out = dry_run(&w, &test, 2);
        let text = stdout_of(&out);
        assert_eq!(out.status.code(), Some(1), "{says}: {text}");
        assert!(
            text.contains(says) && text.contains("t.toml:"),
            "{says}: {text}"
        );
        assert_eq!(text.matches("[ERROR]").count(), 1, "{text}");
        assert!(std::fs::read_dir(w.path().join("out")).map_or(true, |mut d| d.next().is_none()));
    }
}

#[test]
fn reports_and_perftest_results_are_graded() {
    let w = Work::new();
    assert_eq!(dry_run(&w, BENCH, 2).status.code(), Some(0));
    let root = w.results_root();
    std::fs::write(
        root.join("t/0/stdout.txt"),
        sample("nixlbench-legacy-rocm-readme.txt"),
    )
    .unwrap();
    let rep = w.generate_report(&root);
    assert_eq!(rep.status.code(), Some(0), "{}", stdout_of(&rep));
    let csv = std::fs::read_to_string(root.join("t/0/nixlbench.csv")).unwrap();
    assert_eq!(csv.lines().count(), 16);
    assert_eq!(csv.lines().nth(1), Some("4096,1,8.3631,0.489771"));
    let page = std::fs::read_to_string(root.join("t/0/nixlbench.html")).unwrap();
    assert!(page.contains("5.11 GB/s") && page.contains("<td>67108864</td>"));
    let summary: Value =
        serde_json::from_slice(&std::fs::read(root.join("summary.json")).unwrap()).unwrap();
    assert!(
        summary["tests"][0]["checks"]
            .to_string()
            .contains("peak 5.11 GB/s at 67108864 B × 1"),
        "{summary}"
    );

    let perftest = "name = \"pt\"\ndescription = \"d\"\ntest_template_name = \"NixlPerftest\"\n[cmd_args]\n\
                    docker_image_url = \"nixl\"\nsubtest = \"sequential-ct-perftest\"\nnum_user_requests = 2\n\
                    batch_size = 1\nnum_prefill_nodes = 1\nnum_decode_nodes = 1\nmodel = \"deepseek-r1\"\n";
    let w = Work::new();
    assert_eq!(dry_run(&w, perftest, 2).status.code(), Some(0));
    let root = w.results_root();
    let dir = root.join("t/0");
    assert!(
        dir.join("matrices").is_dir(),
        "the generator's directory is made before the job"
    );
    let trt = std::fs::read_to_string(dir.join("test-run.toml")).unwrap();
    assert!(
        trt.contains("[test_definition.cmd_args.matgen_args]\nppn = 4"),
        "{trt}"
    );
    // the job ran: its log, whatever it says
    std::fs::write(dir.join("stdout.txt"), "").unwrap();
    let r = |lat: f64| format!("{{\"size\": 0.5, \"latency\": {lat}, \"isolated_latency\": 1.0}}");
    let good = format!(
        "{{\"iterations_results\": [[{}, {}], [{}, {}]], \"metadata\": {{\"iters\": [{{}}, {{}}], \"finished_ts\": 1.0}}}}",
        r(2.0), r(3.0), r(2.5), r(3.5)
    );
    let short = good.replacen(&format!(", {}]]", r(3.5)), "]]", 1);
    let unfinished = good.replace(", \"finished_ts\": 1.0", "");
    let one_of_two = good.replacen(&format!(", [{}, {}]", r(2.5), r(3.5)), "", 1);
    for (text, code, says) in [
        (
            Some(good.as_str()),
            0,
            "2 iteration(s) × 2 traffic pattern(s); mean latency 2.750 ms",
        ),
        (
            Some(short.as_str()),
            3,
            "iteration 2 of results.json lacks traffic-pattern results",
        ),
        (
            Some(unfinished.as_str()),
            3,
            "does not record the run's end",
        ),
        (Some(one_of_two.as_str()), 3, "holds 1 of the 2 iterations"),
        (Some("{\"iterations_results\": [[{"), 3, "is not JSON"),
        (None, 3, "results.json was not written"),
    ] {
        match text {
            Some(t) => std::fs::write(dir.join("results.json"), t).unwrap(),
            None => {
                let _ = std::fs::remove_file(dir.join("results.json"));
            }
        }
        let rep = w.generate_report(&root);
        assert_eq!(rep.status.code(), Some(code), "{says}: {}", stdout_of(&rep));
        let summary: Value =
            serde_json::from_slice(&std::fs::read(root.join("summary.json")).unwrap()).unwrap();
        let t = &summary["tests"][0];
        let said = format!("{} {}", t["message"], t["checks"]);
        assert!(said.contains(says), "{says}: {said}");
    }
}
