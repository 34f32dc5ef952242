//! UCC's `ucc_perftest` (`UCCTest`) through the launch seam: graded and reported from a real output, rendered for
//! Kubernetes and Run:ai like any MPI workload (the Slurm script is CloudAI's: compat_dry_run.rs).

use crate::common;

use std::sync::Arc;

use cloudai::scenario::{self, Inputs};
use common::{data, stdout_of, Work};
use serde_json::Value;

const UCC: &str = r#"name = "ucc"
description = "d"
test_template_name = "UCCTest"
[cmd_args]
docker_image_url = "nvcr.io#nvidia/pytorch:25.12-py3"
"#;

fn sample() -> String {
    std::fs::read_to_string(data().join("ucc-samples/alltoall-cuda-float32-full.txt")).unwrap()
}

#[test]
fn a_real_output_is_graded_and_reported() {
    let out = cloudai::workloads::ucc::parse(&sample());
    assert_eq!(out.collective.as_deref(), Some("Alltoall"));
    assert_eq!(out.rows.len(), 24);
    let peak = out.peak().unwrap();
    assert_eq!((peak.size, peak.bw_avg), (33554432, 44.70));

    // a tree whose iteration printed it: report files, metrics, PASSED
    let w = Work::new();
    w.standalone();
    w.file("tests/ucc.toml", UCC);
    w.file(
        "s.toml",
        r#"name = "u"
[[Tests]]
id = "a2a"
test_name = "ucc"
"#,
    );
    let dry = w.cloudai().args(common::DRY_RUN_S_TOML).output().unwrap();
    assert_eq!(dry.status.code(), Some(0), "{}", stdout_of(&dry));
    let root = w.results_root();
    let trt = std::fs::read_to_string(root.join("a2a/0/test-run.toml")).unwrap();
    assert!(
        trt.contains(
            r#"test_cmd = "/opt/hpcx/ucc/bin/ucc_perftest -c alltoall -b 1 -e 8M -m cuda -F""#
        ),
        "{trt}"
    );
    std::fs::write(root.join("a2a/0/stdout.txt"), sample()).unwrap();
    let rep = w.generate_report(&root);
    assert_eq!(rep.status.code(), Some(0), "{}", stdout_of(&rep));
    let csv = std::fs::read_to_string(root.join("a2a/0/cloudai_ucc_test_csv_report.csv")).unwrap();
    assert_eq!(csv.lines().count(), 25);
    assert!(
        csv.lines()
            .last()
            .unwrap()
            .starts_with("8388608,33554432,47292.49,"),
        "{csv}"
    );
    let page =
        std::fs::read_to_string(root.join("a2a/0/cloudai_ucc_test_bokeh_report.html")).unwrap();
    assert!(
        page.contains("44.70 GB/s at 32 MiB") && page.contains("Alltoall"),
        "peak card"
    );
    let summary: Value =
        serde_json::from_slice(&std::fs::read(root.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["tests"][0]["metrics"]["peak_busbw_gbps"], 44.7);

    // the same output cut after the header: failed, saying where
    std::fs::write(
        root.join("a2a/0/stdout.txt"),
        sample().lines().take(14).collect::<Vec<_>>().join("\n"),
    )
    .unwrap();
    let rep = w.generate_report(&root);
    assert_eq!(rep.status.code(), Some(3), "{}", stdout_of(&rep));
    let summary: Value =
        serde_json::from_slice(&std::fs::read(root.join("summary.json")).unwrap()).unwrap();
    assert!(
        summary["tests"][0]["message"]
            .as_str()
            .unwrap()
            .contains("printed no result row"),
        "{summary}"
    );
}

/// The seam: no scheduler knows UCC, yet Kubernetes and Run:ai run it as they run any MPI workload.
#[test]
fn container_schedulers_render_ucc_from_its_launch() {
    let w = Work::new();
    let k8s = w.file(
        "k8s.toml",
        r#"name = "k"
scheduler = "kubernetes"
kube_config_path = ""
install_path = "i"
output_path = "o"
default_namespace = "bench"
gpus_per_node = 8
"#,
    );
    let runai = w.file(
        "runai.toml",
        r#"name = "r"
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
"#,
    );
    w.file("tests/ucc.toml", UCC);
    let scen = w.file(
        "s.toml",
        r#"name = "u"
[[Tests]]
id = "one"
test_name = "ucc"
num_nodes = 1
[[Tests]]
id = "two"
test_name = "ucc"
num_nodes = 2
[Tests.cmd_args]
collective = "allreduce"
"#,
    );
    let tests = w.path().join("tests");
    let load = |sys: &std::path::Path| {
        let (cfg, s) = scenario::load_all(&Inputs {
            system: Some(sys),
            tests_dir: Some(&tests),
            scenario: &scen,
            hook_dir: None,
            survey: None,
        })
        .unwrap();
        (Arc::new(cfg), s)
    };
    let (cfg, s) = load(&k8s);
    let dir = |id: &str| w.path().join("o/u_x").join(id).join("0");
    let one = &cloudai::systems::kubernetes::manifests(&cfg, &s.test_runs[0], &dir("one"))[0];
    let c = &one["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(one["kind"], "Job");
    assert_eq!(c["resources"]["limits"]["nvidia.com/gpu"], 8);
    assert!(c["command"][2]
        .as_str()
        .unwrap()
        .starts_with("mpirun --allow-run-as-root -np 8 -bind-to none -map-by ppr:8:node /opt/hpcx/ucc/bin/ucc_perftest -c alltoall"));
    let two = &cloudai::systems::kubernetes::manifests(&cfg, &s.test_runs[1], &dir("two"))[0];
    assert_eq!(two["kind"], "MPIJob");
    assert_eq!(two["spec"]["slotsPerWorker"], 8);
    let launcher = two["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
        ["command"][2]
        .as_str()
        .unwrap();
    assert!(
        launcher.contains("--hostfile /etc/mpi/hostfile -np 16 ")
            && launcher
                .contains("/opt/hpcx/ucc/bin/ucc_perftest -c allreduce -b 1 -e 8M -m cuda -F"),
        "{launcher}"
    );

    let (cfg, s) = load(&runai);
    let schemas = runai_mock::schema::Schemas::default();
    let (one, dist) =
        cloudai::systems::runai::payloads(&cfg, &s.test_runs[0], &dir("one")).remove(0);
    assert!(!dist);
    assert_eq!(schemas.validate(&one, "TrainingCreationRequest"), vec![]);
    assert_eq!(one["spec"]["compute"]["gpuDevicesRequest"], 8);
    let (two, dist) =
        cloudai::systems::runai::payloads(&cfg, &s.test_runs[1], &dir("two")).remove(0);
    assert!(dist);
    assert_eq!(schemas.validate(&two, "DistributedCreationRequest"), vec![]);
    assert!(two["masterSpec"]["args"]
        .as_str()
        .unwrap()
        .ends_with("/opt/hpcx/ucc/bin/ucc_perftest -c allreduce -b 1 -e 8M -m cuda -F"));
}

/// UCC's generator mode as CloudAI's `ucc_generator_test.toml` runs it: the matrix file mounted from `$PWD`, its
/// `--gen file:name=…` on the command line; a team size the run's ranks do not match is refused before anything
/// is written, and a container scheduler refuses the host mount instead of dropping it.
#[test]
fn generator_mode_checks_its_matrix() {
    let w = Work::new();
    let conf = data().join("compat/conf/common");
    w.file(
        "conf/common/test_scenario/ucc_generator_file.txt",
        &std::fs::read_to_string(conf.join("test_scenario/ucc_generator_file.txt")).unwrap(),
    );
    w.file(
        "system.toml",
        &std::fs::read_to_string(conf.join("system/example_slurm_cluster.toml")).unwrap(),
    );
    let scenario =
        std::fs::read_to_string(conf.join("test_scenario/ucc_generator_test.toml")).unwrap();
    w.file("s.toml", &scenario);
    std::fs::create_dir_all(w.path().join("tests")).unwrap();
    let dry = |out: &str| {
        w.cloudai()
            .env("PWD", w.path())
            .args(common::DRY_RUN_S_TOML)
            .args(["--output-dir", out])
            .output()
            .unwrap()
    };
    let ok = dry("out");
    assert_eq!(ok.status.code(), Some(0), "{}", stdout_of(&ok));
    let script = std::fs::read_to_string(
        w.results_root()
            .join("Tests.alltoallv/0/cloudai_sbatch_script.sh"),
    )
    .unwrap();
    assert!(
        script.contains(",$PWD/conf/common/test_scenario/ucc_generator_file.txt:/opt/hpcx/ucc/tools/perf/generator/input_matrices.txt ")
            && script.contains("-c alltoallv -b 1 -e 8M --gen file:name=/opt/hpcx/ucc/tools/perf/generator/input_matrices.txt -m cuda -F"),
        "{script}"
    );
    // 16 ranks in the matrix, 4 nodes x 8 tasks in the run
    w.file(
        "s.toml",
        &scenario.replace("num_nodes = 2", "num_nodes = 4"),
    );
    let bad = dry("out-bad");
    let text = stdout_of(&bad);
    assert_eq!(bad.status.code(), Some(1), "{text}");
    assert!(
        text.contains(
            "is for a team of 16 ranks, but 4 node(s) x 8 tasks run 32; use num_nodes = 2"
        ),
        "{text}"
    );
    assert!(!w.path().join("out-bad").exists());
    // Kubernetes cannot mount the login node's file
    w.file("s.toml", &scenario);
    w.file(
        "system.toml",
        r#"name = "k"
scheduler = "kubernetes"
kube_config_path = ""
install_path = "i"
output_path = "o"
default_namespace = "bench"
gpus_per_node = 8
"#,
    );
    let k = dry("out-k8s");
    assert_eq!(k.status.code(), Some(1), "{}", stdout_of(&k));
    assert!(
        stdout_of(&k).contains("extra_container_mounts"),
        "{}",
        stdout_of(&k)
    );
}

/// `use_deepep_matrix` (CloudAI's handoff): once the MoE benchmark a test starts after has ended, its traffic
/// matrix is mounted into the UCC job (`--gen file:name=…`) and the NCCL alltoallv job (`ALLTOALLV_MATRIX_FILE`),
/// the benchmark's directory read-only beside it, from its last iteration, also two steps down the chain; without a
/// matrix the job is not written, without a dependency (or off Slurm) the test is refused.
#[test]
fn the_deepep_matrix_is_handed_to_the_tests_that_start_after_the_benchmark() {
    let w = Work::new();
    w.file(
        "system.toml",
        "name = \"s\"\nscheduler = \"slurm\"\ninstall_path = \"install\"\noutput_path = \"o\"\n\
         default_partition = \"p\"\n[[partitions]]\nname = \"p\"\n",
    );
    w.file(
        "tests/ucc.toml",
        &format!("{UCC}use_deepep_matrix = true\n"),
    );
    w.file(
        "tests/a2av.toml",
        "name = \"a2av\"\ndescription = \"d\"\ntest_template_name = \"NcclTest\"\n[cmd_args]\n\
         docker_image_url = \"nvcr.io#nvidia/pytorch:25.12-py3\"\nsubtest_name = \"alltoallv_perf_mpi\"\n\
         use_deepep_matrix = true\n",
    );
    w.file(
        "tests/moe.toml",
        "name = \"moe\"\ndescription = \"d\"\ntest_template_name = \"Sleep\"\n",
    );
    let scen = w.file(
        "s.toml",
        r#"name = "h"
[[Tests]]
id = "moe"
test_name = "moe"
[[Tests]]
id = "ucc"
test_name = "ucc"
  [[Tests.dependencies]]
  type = "start_post_comp"
  id = "moe"
[[Tests]]
id = "nccl"
test_name = "a2av"
  [[Tests.dependencies]]
  type = "start_post_comp"
  id = "ucc"
"#,
    );
    let tests = w.path().join("tests");
    let load = |sys: &str, scen: &std::path::Path| {
        let sys = w.file("sys.toml", sys);
        scenario::load_all(&Inputs {
            system: Some(&sys),
            tests_dir: Some(&tests),
            scenario: scen,
            hook_dir: None,
            survey: None,
        })
    };
    let slurm = std::fs::read_to_string(w.path().join("system.toml")).unwrap();
    let (cfg, s) = load(&slurm, &scen).unwrap_or_else(|e| panic!("{e}"));
    let cfg = Arc::new(cfg);
    let sys = cloudai::systems::build(&cfg);
    // the benchmark ran twice; its last iteration exported the matrices below a timestamped directory
    let root = w.path().join("o/h_x");
    let moe = root.join("moe/1");
    std::fs::create_dir_all(root.join("moe/0")).unwrap();
    std::fs::create_dir_all(moe.join("results/benchmark_8_ranks_x")).unwrap();
    std::fs::write(moe.join("stdout.txt"), "BENCHMARK: DeepEP Results\n").unwrap();
    let script = |i: usize| {
        let dir = root.join(&s.test_runs[i].id).join("0");
        std::fs::create_dir_all(&dir).unwrap();
        sys.prepare(&s.test_runs[i], 0, &dir).map(|p| {
            p.files
                .into_iter()
                .find(|(n, _)| n == "cloudai_sbatch_script.sh")
                .unwrap()
                .1
        })
    };
    let err = script(1).unwrap_err().to_string();
    assert!(err.contains("has no ucc_matrix.txt"), "{err}");
    let bench = moe.join("results/benchmark_8_ranks_x");
    std::fs::write(bench.join("ucc_matrix.txt"), "m").unwrap();
    std::fs::write(bench.join("nccl_matrix.txt"), "m").unwrap();
    let real = |p: std::path::PathBuf| std::fs::canonicalize(p).unwrap().display().to_string();
    let ucc = script(1).unwrap();
    let matrix = "/opt/hpcx/ucc/tools/perf/generator/input_matrices.txt";
    for want in [
        format!("--gen file:name={matrix} -m cuda"),
        format!("{}:{matrix}", real(bench.join("ucc_matrix.txt"))),
        format!("{}:/cloudai_moe_benchmark_prev:ro", real(moe.clone())),
    ] {
        assert!(ucc.contains(&want), "{want} not in\n{ucc}");
    }
    // two steps down the chain (nccl → ucc → moe)
    let nccl = script(2).unwrap();
    for want in [
        format!(
            "{}:/tmp/traffic_matrix.txt",
            real(bench.join("nccl_matrix.txt"))
        ),
        "ALLTOALLV_MATRIX_FILE".to_string(),
    ] {
        assert!(nccl.contains(&want), "{want} not in\n{nccl}");
    }
    // what cannot work is refused before anything runs
    let alone = w.file(
        "alone.toml",
        "name = \"h\"\n[[Tests]]\nid = \"ucc\"\ntest_name = \"ucc\"\n",
    );
    let e = load(&slurm, &alone).unwrap_err().to_string();
    assert!(e.contains("a start_post_comp dependency"), "{e}");
    let k8s =
        "name = \"k\"\nscheduler = \"kubernetes\"\nkube_config_path = \"\"\ninstall_path = \"i\"\n\
               output_path = \"o\"\ndefault_namespace = \"d\"\n";
    let e = load(k8s, &scen).unwrap_err().to_string();
    assert!(e.contains("not possible on kubernetes"), "{e}");
}
