//! The config model: CloudAI's example files load with the right values and defaults; overrides merge; hooks
//! resolve; commands are built in CloudAI's order.

use crate::common;

use std::path::Path;

use cloudai::config::args::ArgValue;
use cloudai::config::system::{self, SystemKind};
use cloudai::scenario::{self, Inputs};
use common::{data, repo, stdout_of, Work};

fn compat(rel: &str) -> std::path::PathBuf {
    data().join("compat/conf").join(rel)
}

#[test]
fn loads_all_four_example_systems() {
    let s = system::load(&compat("common/system/example_slurm_cluster.toml")).unwrap();
    let SystemKind::Slurm(sl) = &s.kind else {
        panic!("not slurm")
    };
    assert_eq!(
        (
            s.name.as_str(),
            sl.default_partition.as_str(),
            sl.mpi.as_str()
        ),
        ("example-cluster", "partition_1", "pmix")
    );
    assert_eq!(
        (sl.gpus_per_node, sl.ntasks_per_node, s.monitor_interval),
        (Some(8), Some(8), 60)
    );
    assert_eq!(sl.partitions.len(), 2);
    assert_eq!(sl.partitions[0].groups[3].nodes, vec!["node-[076-100]"]);
    assert!(sl.partitions[1].groups.is_empty());
    assert!(!sl.data_repository.as_ref().unwrap().verify_certs);
    assert_eq!(
        s.global_env_vars["MELLANOX_VISIBLE_DEVICES"],
        ArgValue::Str("0,3,4,5,6,9,10,11".into())
    );

    let r = system::load(&compat("common/system/example_runai_cluster.toml")).unwrap();
    let SystemKind::RunAi(ra) = &r.kind else {
        panic!("not runai")
    };
    assert_eq!(
        (
            ra.base_url.as_str(),
            ra.app_secret.as_ref().map(|s| s.expose()),
            r.monitor_interval
        ),
        ("http://runai.example.com", Some("your_app_secret"), 1)
    );
    assert_eq!(
        format!("{ra:?}").matches("your_app_secret").count(),
        0,
        "secret leaked through Debug"
    );

    let k = system::load(&compat("common/system/kubernetes_cluster.toml")).unwrap();
    let SystemKind::Kubernetes(kc) = &k.kind else {
        panic!("not k8s")
    };
    assert_eq!(
        (
            kc.default_namespace.as_str(),
            kc.gpus_per_node,
            k.monitor_interval
        ),
        ("default", 1, 1)
    );

    let st = system::load(&compat("common/system/standalone_system.toml")).unwrap();
    assert!(matches!(st.kind, SystemKind::Standalone(_)));
    assert_eq!(
        (st.monitor_interval, st.hf_home_path.as_path()),
        (1, Path::new("./install/huggingface"))
    );
}

#[test]
fn nccl_scenario_resolves_with_overrides_hooks_and_cloudai_command_order() {
    let sys = compat("common/system/example_slurm_cluster.toml");
    let tests = compat("common/test");
    let scen = compat("common/test_scenario/nccl_test.toml");
    let hooks = compat("hook");
    let inputs = Inputs {
        system: Some(&sys),
        tests_dir: Some(&tests),
        scenario: &scen,
        hook_dir: Some(&hooks),
        survey: None,
    };
    let (_, s) = scenario::load_all(&inputs).unwrap();
    let ids: Vec<&str> = s.test_runs.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "Tests.all_reduce",
            "Tests.all_gather",
            "Tests.reduce_scatter",
            "Tests.alltoall",
            "nccl.scatter_perf"
        ]
    );
    let ag = &s.test_runs[1];
    // "ngpus" = "1" in the file is coerced to an integer, like pydantic does
    assert_eq!(ag.test.cmd_args.get("ngpus"), Some(&ArgValue::Int(1)));
    assert_eq!(
        ag.launch().command_line(),
        "all_gather_perf_mpi --nthreads 1 --ngpus 1 --minbytes 128 --maxbytes 4G --stepbytes 1M --op sum \
         --datatype float --root 0 --iters 100 --warmup_iters 50 --agg_iters 1 --average 1 --parallel_init 0 \
         --check 1 --blocking 0 --cudagraph 0 --stepfactor 2"
    );
    // the override of subtest_name merges over the referenced test's cmd_args
    assert_eq!(
        s.test_runs[0].test.cmd_args.str("subtest_name"),
        Some("all_reduce_perf_mpi")
    );
    assert_eq!(
        s.test_runs[3].test.cmd_args.str("subtest_name"),
        Some("alltoall_perf_mpi")
    );
    assert_eq!(
        s.test_runs[3].test.cmd_args.get("iters"),
        Some(&ArgValue::Int(100))
    );
    // the inline definition
    assert_eq!(s.test_runs[4].test.name, "nccl-scatter_perf");
    // hooks: their time limits add up to CloudAI's --time=00:50:00 and 01:00:00
    let pre = ag.pre_test.as_ref().unwrap();
    assert_eq!(pre.test_runs[0].test.extra_cmd_args["--stepfactor"], "2");
    assert_eq!(
        pre.test_runs[0].test.extra_env_vars["NCCL_TESTS_SPLIT_MASK"],
        ArgValue::Str("0x7".into())
    );
    assert_eq!(ag.effective_time_limit(), Some(3000));
    assert_eq!(s.test_runs[4].effective_time_limit(), Some(3600));
    assert_eq!((ag.num_nodes, ag.iterations), (2, 1));
}

#[test]
fn sleep_defaults_and_dependencies() {
    let tests = compat("common/test");
    let scen = compat("common/test_scenario/sleep.toml");
    let inputs = Inputs {
        system: None,
        tests_dir: Some(&tests),
        scenario: &scen,
        hook_dir: None,
        survey: None,
    };
    let (sys, s) = scenario::load_all(&inputs).unwrap();
    assert_eq!(sys.name, "standalone_system");
    let r = &s.test_runs[0];
    assert_eq!(
        r.test.cmd_args.get("docker_image_url"),
        Some(&ArgValue::Str("ubuntu:22.04".into()))
    );
    assert_eq!(r.test.cmd_args.get("seconds"), Some(&ArgValue::Int(10)));
    assert_eq!(r.time_limit, Some(60));
    let deps: Vec<String> = s
        .test_runs
        .iter()
        .flat_map(|r| {
            r.dependencies
                .iter()
                .map(|d| format!("{}<-{}", r.id, d.kind.label()))
        })
        .collect();
    assert_eq!(
        deps,
        [
            "Tests.sleep5<-Start Post Init",
            "Tests.sleep5_2<-Start Post Comp",
            "Tests.sleep20<-End Post Comp"
        ]
    );
}

#[test]
fn verify_configs_passes_cloudai_examples() {
    let w = Work::new();
    let out = w
        .cloudai()
        .arg("verify-configs")
        .arg(data().join("compat/conf"))
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("[INFO] Checked systems: 5, all passed"),
        "{text}"
    );
    // every template of CloudAI's common suite runs now: its scenarios resolve without a warning
    for t in [
        "UCCTest",
        "Fio",
        "NeMoRun",
        "SlurmContainer",
        "Aiconfigurator",
        "DynamoMocker",
    ] {
        assert!(
            !text.contains(&format!("unsupported test template {t}")),
            "{text}"
        );
    }
    assert!(text.contains("configuration files, all passed"), "{text}");
}

#[test]
fn verify_configs_passes_our_conf_and_flags_a_broken_file() {
    let w = Work::new();
    let out = w
        .cloudai()
        .arg("verify-configs")
        .arg(repo().join("conf"))
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(!text.contains("WARNING] /"), "{text}");

    let bad = w.file(
        "cfg/test.toml",
        r#"name = "x"
description = "d"
test_template_name = "Sleep"
[cmd_args]
secs = 1
"#,
    );
    w.file("cfg/what.toml", "hello = 1\n");
    let out = w
        .cloudai()
        .arg("verify-configs")
        .arg(bad.parent().unwrap())
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("test.toml:5:1: field 'cmd_args.secs': unknown field"),
        "{text}"
    );
    assert!(text.contains("Unknown configuration file"), "{text}");
    assert!(
        text.contains("2 out of 2 configuration files have issues."),
        "{text}"
    );
}

#[test]
fn list_and_version() {
    let w = Work::new();
    let out = w.cloudai().args(["list", "templates"]).output().unwrap();
    let text = stdout_of(&out);
    // every scheduler renders every template's launch
    for t in ["NcclTest", "Sleep", "BashCmd"] {
        assert!(
            text.contains(&format!(
                r#""{t}" schedulers=standalone,slurm,runai,kubernetes
"#
            )),
            "{text}"
        );
    }
    let out = w.cloudai().args(["list", "agents"]).output().unwrap();
    assert_eq!(
        stdout_of(&out),
        r#"Available agents:
1. "grid_search" class=GridSearchAgent
"#
    );
    let out = w.cloudai().arg("--version").output().unwrap();
    assert!(stdout_of(&out).starts_with("cloudai "));
}
