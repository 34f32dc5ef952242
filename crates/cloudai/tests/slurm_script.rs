//! Slurm batch scripts for the features the reference cases do not cover (dry-run, no cluster needed).

use crate::common;

use std::path::PathBuf;

use common::{stdout_of, Work};

const BASE: &str = r#"
name = "cluster"
scheduler = "slurm"
install_path = "install"
output_path = "out"
default_partition = "batch"
gpus_per_node = 4
supports_gpu_directives_cache = true
[[partitions]]
name = "batch"
  [[partitions.groups]]
  name = "g1"
  nodes = ["gpu-[01-08]"]
"#;

const TESTS: &[(&str, &str)] = &[
    (
        "sleep.toml",
        r#"name = "sleep"
description = "s"
test_template_name = "Sleep"
[cmd_args]
seconds = 3
"#,
    ),
    (
        "bash.toml",
        r#"name = "bash"
description = "b"
test_template_name = "BashCmd"
[cmd_args]
cmd = "hostname"
"#,
    ),
    (
        "nccl.toml",
        r#"name = "nccl"
description = "n"
test_template_name = "NcclTest"
[cmd_args]
docker_image_url = "img:1"
"#,
    ),
];

fn dry_run(w: &Work) -> std::process::Output {
    w.cloudai().args(common::DRY_RUN_S_TOML).output().unwrap()
}

/// Dry-runs one test entry and returns (its scratch dir, iteration dir, batch script).
fn script(system_extra: &str, entry: &str) -> (Work, PathBuf, String) {
    let w = Work::new();
    // top-level keys must come before the [[partitions]] tables, tables after them
    let sys = if system_extra.starts_with('[') {
        format!("{BASE}{system_extra}")
    } else {
        format!("{system_extra}{BASE}")
    };
    w.file("system.toml", &sys);
    for (n, t) in TESTS {
        w.file(&format!("tests/{n}"), t);
    }
    w.file(
        "s.toml",
        &format!(
            r#"name = "s"
[[Tests]]
id = "t"
{entry}"#
        ),
    );
    let out = dry_run(&w);
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let dir = w.results_root().join("t/0");
    let text = std::fs::read_to_string(dir.join("cloudai_sbatch_script.sh")).unwrap();
    (w, dir, text)
}

fn lines(s: &str) -> Vec<&str> {
    s.lines().collect()
}

#[test]
fn explicit_nodes_use_a_nodelist_and_hostfile() {
    let (_w, dir, s) = script(
        "ntasks_per_node = 2\n",
        r#"test_name = "sleep"
nodes = ["gpu-[02-03]"]
"#,
    );
    let l = lines(&s);
    assert!(l.contains(&"#SBATCH --distribution=arbitrary"), "{s}");
    assert!(l.contains(&"#SBATCH --nodelist=gpu-02,gpu-03"), "{s}");
    assert!(!s.contains("#SBATCH -N"), "{s}");
    assert!(
        s.contains(&format!(
            "export SLURM_HOSTFILE={}",
            dir.join("hostfile.txt").display()
        )),
        "{s}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("hostfile.txt")).unwrap(),
        "gpu-02\ngpu-02\ngpu-03\ngpu-03\n"
    );
    // srun takes its nodes from the allocation: no -N
    assert!(
        s.contains(r#"srun --export=ALL --mpi=pmix bash -c "source"#),
        "{s}"
    );
    assert!(s.contains("--ntasks=2 --ntasks-per-node=1"), "{s}");
    let trt = std::fs::read_to_string(dir.join("test-run.toml")).unwrap();
    assert!(
        trt.contains(
            r#"nnodes = 2
nodes = [ "gpu-[02-03]",]"#
        ),
        "{trt}"
    );
}

#[test]
fn group_spec_takes_nodes_from_the_group() {
    let (_w, _, s) = script(
        "",
        r#"test_name = "sleep"
nodes = ["batch:g1:3"]
exclude_nodes = ["gpu-01"]
"#,
    );
    assert!(s.contains("#SBATCH --nodelist=gpu-02,gpu-03,gpu-04"), "{s}");
}

#[test]
fn account_distribution_reservation_and_extra_args() {
    let extra = r#"account = "acct"
distribution = "block"
extra_srun_args = "--reservation r1 --exclusive"
extra_sbatch_args = ["--mem=0", "--exclusive"]
"#;
    let (_w, _, s) = script(
        extra,
        r#"test_name = "sleep"
num_nodes = 3
extra_srun_args = "--cpu-bind=none"
"#,
    );
    let l = lines(&s);
    assert!(
        l[2].starts_with("#SBATCH --job-name=acct-sleep.")
            && l[2].len() == "#SBATCH --job-name=acct-sleep.".len() + 15,
        "{s}"
    );
    assert_eq!(l[3], "#SBATCH --reservation=r1");
    let i = l
        .iter()
        .position(|x| *x == "#SBATCH --account=acct")
        .expect("account");
    assert_eq!(
        &l[i + 1..i + 5],
        [
            "#SBATCH -N 3",
            "#SBATCH --distribution=block",
            "#SBATCH --gpus-per-node=4",
            "#SBATCH --gres=gpu:4"
        ]
    );
    assert!(
        l.contains(&"#SBATCH --mem=0") && l.contains(&"#SBATCH --exclusive"),
        "{s}"
    );
    assert!(
        s.contains(
            "srun --export=ALL --mpi=pmix -N3 --reservation r1 --exclusive --cpu-bind=none bash -c"
        ),
        "{s}"
    );
}

#[test]
fn bash_cmd_runs_in_the_batch_script() {
    let (_w, dir, s) = script(
        "",
        r#"test_name = "bash"
num_nodes = 2
"#,
    );
    let last = s.lines().last().unwrap();
    assert_eq!(
        last,
        format!(
            r#"bash -c "source {}; hostname""#,
            dir.join("env_vars.sh").display()
        )
    );
    let trt = std::fs::read_to_string(dir.join("test-run.toml")).unwrap();
    assert!(trt.contains(r#"test_cmd = "hostname""#), "{trt}");
}

#[test]
fn container_mounts_env_and_nsys() {
    let extra = r#"[global_env_vars]
A = "1"
NCCL_TOPO_FILE = "/etc/topo.xml"
"#;
    let entry = r#"test_name = "nccl"
extra_container_mounts = ["/data:/data"]
[Tests.extra_env_vars]
B = "two"
[Tests.nsys]
output = "/cloudai_run_results/prof"
[Tests.cmd_args]
subtest_name = "all_gather_perf"
"#;
    let (_w, dir, s) = script(extra, entry);
    let out = dir.display();
    assert!(s.contains(&format!(
        "--container-image=img:1 --container-mounts={out}:/cloudai_run_results,{}:/cloudai_install,{out},/data:/data,/etc/topo.xml:/etc/topo.xml --no-container-mount-home",
        dir.ancestors().nth(4).unwrap().join("install").display()
    )), "{s}");
    assert!(
        s.contains("export A=1\nexport NCCL_TOPO_FILE=/etc/topo.xml\nexport B=two\n"),
        "{s}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("env_vars.sh")).unwrap(),
        r#"export A="1"
export NCCL_TOPO_FILE="/etc/topo.xml"
export B="two"
"#
    );
    // single-process subtest: one task instead of MPI, -g for the GPU count, nsys in front of the binary
    assert!(
        s.contains("srun --export=ALL --ntasks=1 -N1 --container-image"),
        "{s}"
    );
    assert!(s.contains("; nsys profile -o /cloudai_run_results/prof all_gather_perf --nthreads 1 -g 1 --minbytes"), "{s}");
}

#[test]
fn no_gpu_directives_when_the_cluster_has_no_gpu_gres() {
    let (_w, _, s) = script(
        "",
        r#"test_name = "sleep"
"#,
    );
    assert!(s.contains("--gres=gpu:4"));
    let w_base = BASE.replace(
        "supports_gpu_directives_cache = true",
        "supports_gpu_directives_cache = false",
    );
    let w = Work::new();
    w.file("system.toml", &w_base);
    w.file("tests/sleep.toml", TESTS[0].1);
    w.file(
        "s.toml",
        r#"name = "s"
[[Tests]]
id = "t"
test_name = "sleep"
"#,
    );
    let out = dry_run(&w);
    assert_eq!(out.status.code(), Some(0));
    let s = std::fs::read_to_string(w.results_root().join("t/0/cloudai_sbatch_script.sh")).unwrap();
    assert!(!s.contains("gpu"), "{s}");
}

/// A group request the system file shows cannot be met is a config error before anything is created.
#[test]
fn unmeetable_group_request_is_refused_up_front() {
    let w = Work::new();
    w.file("system.toml", BASE);
    w.file("tests/sleep.toml", TESTS[0].1);
    w.file(
        "s.toml",
        r#"name = "s"
[[Tests]]
id = "t"
test_name = "sleep"
nodes = ["batch:g1:9"]
"#,
    );
    let out = dry_run(&w);
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(
            r#"s.toml:2:1: field 'Tests.0.nodes.0': "batch:g1:9" asks 9 nodes; group "g1" has 8"#
        ),
        "{text}"
    );
    assert!(!w.path().join("out").exists());
}

/// A dry-run contacts no controller: with Slurm commands on PATH that hang for 30 s and leave a mark, a dry-run of
/// 100 NCCL entries on the example Slurm system (GPUs per node set, no gres cache) finishes at once, untouched.
#[test]
fn dry_run_never_calls_slurm_commands() {
    let w = Work::new();
    let marker = w.path().join("called");
    for cmd in ["scontrol", "sinfo", "squeue", "sbatch", "sacct", "scancel"] {
        let p = w.file(
            &format!("bin/{cmd}"),
            &format!("#!/bin/sh\necho {cmd} >> {}\nsleep 30\n", marker.display()),
        );
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let repo = common::repo();
    let mut scenario = String::from(
        r#"name = "many"
"#,
    );
    for i in 0..100 {
        scenario.push_str(&format!(
            r#"[[Tests]]
id = "t{i}"
test_name = "nccl_test_all_reduce"
num_nodes = 2
"#
        ));
    }
    w.file("many.toml", &scenario);
    let started = std::time::Instant::now();
    let out = w
        .cloudai()
        .env(
            "PATH",
            format!(
                "{}:{}",
                w.path().join("bin").display(),
                std::env::var("PATH").unwrap()
            ),
        )
        .arg("dry-run")
        .arg("--system-config")
        .arg(repo.join("conf/common/system/example_slurm_cluster.toml"))
        .arg("--tests-dir")
        .arg(repo.join("conf/common/test"))
        .args(["--test-scenario", "many.toml", "--output-dir", "out"])
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        !marker.exists(),
        "a dry-run called {} (after {:?})",
        std::fs::read_to_string(&marker).unwrap_or_default(),
        started.elapsed()
    );
    let root = w.results_root();
    let script = std::fs::read_to_string(root.join("t99/0/cloudai_sbatch_script.sh")).unwrap();
    // no controller to ask: GPU directives as when the controller is unreachable (CloudAI's default)
    assert!(script.contains("#SBATCH --gpus-per-node="), "{script}");
}
