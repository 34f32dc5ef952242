//! `cloudai run` on a real Slurm cluster (scripts/slurm-cluster.sh: node[001-004] on localhost, fake GPUs).
//! Without a reachable cluster these tests are skipped, unless CLOUDAI_REQUIRE_SLURM=1 (as in CI) makes that a
//! failure.

use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

use cloudai::results::{EndReason, Status};
use common::slurm::{cloudai_run, cluster_up, setup, slurm_work, squeue_ids};
use common::{check_dependencies, data, record, stdout_of, Work, DEPENDENCY_SCENARIO};

#[test]
fn sleep_scenario_with_dependencies() {
    let Some(w) = slurm_work("", DEPENDENCY_SCENARIO) else {
        return;
    };
    let out = cloudai_run(&w, None);
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let root = w.results_root();
    check_dependencies(&root, |r| &r.submitted_at);
    let f0 = record(&root, "first", 0);
    assert_ne!(f0.job_id, record(&root, "first", 1).job_id);
    // the accounting facts land in slurm-job.toml
    let job = std::fs::read_to_string(root.join("first/0/slurm-job.toml")).unwrap();
    assert!(
        job.contains(r#"state = "COMPLETED""#)
            && job.contains(&format!("job_id = {}", f0.job_id.unwrap())),
        "{job}"
    );
    assert!(text.contains("Submitted slurm job: "), "{text}");
}

#[test]
fn two_node_bash_job_sees_its_nodes() {
    let Some(w) = slurm_work(
        "",
        r#"
name = "two-nodes"
[[Tests]]
id = "nodes"
test_name = "bash"
num_nodes = 2
  [Tests.cmd_args]
  cmd = "echo NODELIST=$SLURM_JOB_NODELIST NNODES=$SLURM_JOB_NUM_NODES"
"#,
    ) else {
        return;
    };
    let out = cloudai_run(&w, None);
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let root = w.results_root();
    let r = record(&root, "nodes", 0);
    assert_eq!(r.status, Status::Passed, "{text}");
    let log = std::fs::read_to_string(w.path().join("debug.log")).unwrap_or_default();
    assert_eq!(r.nodes.len(), 2, "{:?}\n{log}", r.nodes);
    let stdout = std::fs::read_to_string(root.join("nodes/0/stdout.txt")).unwrap();
    assert!(
        stdout.contains("NNODES=2") && stdout.contains("NODELIST=node[00"),
        "{stdout}"
    );
    let script = std::fs::read_to_string(root.join("nodes/0/cloudai_sbatch_script.sh")).unwrap();
    assert!(script.contains("#SBATCH -N 2"), "{script}");
}

#[test]
fn nccl_without_container_runs_the_binary_from_path() {
    if !cluster_up() {
        return;
    }
    let w = Work::new();
    let sample = data().join("nccl-samples/single-node-8gpu-a100-allreduce-v2.19.4.txt");
    // A stand-in for nccl-tests: rank 0 prints a real output, like the MPI binary does.
    let bin = w.file(
        "bin/all_reduce_perf_mpi",
        &format!(
            r#"#!/bin/bash
echo "args: $*" >&2
[ "${{SLURM_PROCID:-0}}" = 0 ] && {}
exit 0
"#,
            common::slurm::print_as_this_job(&sample)
        ),
    );
    std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    setup(
        &w,
        "",
        r#"name = "nccl"
[[Tests]]
id = "ar"
test_name = "nccl"
num_nodes = 2
"#,
    );
    let out = cloudai_run(&w, Some(&w.path().join("bin")));
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let root = w.results_root();
    let r = record(&root, "ar", 0);
    assert_eq!(r.status, Status::Passed, "{}\n{text}", r.message);
    let stdout = std::fs::read_to_string(root.join("ar/0/stdout.txt")).unwrap();
    assert_eq!(stdout.matches("# Avg bus bandwidth").count(), 1, "{stdout}");
    let script = std::fs::read_to_string(root.join("ar/0/cloudai_sbatch_script.sh")).unwrap();
    assert!(!script.contains("--container-image"), "{script}");
    assert!(
        script.contains("all_reduce_perf_mpi --nthreads 1 --ngpus 1 --minbytes 32M"),
        "{script}"
    );
}

#[test]
fn failing_job_and_rejected_submission_are_reported() {
    let Some(w) = slurm_work(
        "",
        r#"
name = "failures"
[[Tests]]
id = "fails"
test_name = "bash"
  [Tests.cmd_args]
  cmd = "echo about to fail; exit 3"
[[Tests]]
id = "after"
test_name = "sleep"
  [[Tests.dependencies]]
  type = "start_post_comp"
  id = "fails"
"#,
    ) else {
        return;
    };
    let out = cloudai_run(&w, None);
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    let root = w.results_root();
    let r = record(&root, "fails", 0);
    assert_eq!((r.status, r.exit_code), (Status::Failed, Some(3)), "{text}");
    assert!(r.message.contains("FAILED"), "{}", r.message);
    assert_eq!(record(&root, "after", 0).status, Status::Passed);

    // sbatch refuses an unknown partition: the error says why, the iteration fails, the run goes on.
    let w = Work::new();
    setup(
        &w,
        "",
        r#"name = "rejected"
[[Tests]]
id = "x"
test_name = "sleep"
"#,
    );
    let sys = std::fs::read_to_string(w.path().join("system.toml")).unwrap();
    w.file(
        "system.toml",
        &sys.replace(
            r#"default_partition = "debug""#,
            r#"default_partition = "nope""#,
        )
        .replace(r#"name = "debug""#, r#"name = "nope""#),
    );
    let out = cloudai_run(&w, None);
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    let r = record(&w.results_root(), "x", 0);
    assert_eq!(
        (r.status, r.end_reason),
        (Status::Failed, EndReason::SubmitFailed)
    );
    assert!(
        r.message.contains("sbatch rejected") && r.message.contains("invalid partition"),
        "{}",
        r.message
    );
    assert!(
        text.contains("[ERROR] Failed to submit test x: sbatch rejected"),
        "{text}"
    );
}

#[test]
fn time_limit_cancels_the_job() {
    let scenario = r#"name = "slow"
[[Tests]]
id = "slow"
test_name = "sleep"
time_limit = "2s"
[Tests.cmd_args]
seconds = 300
"#;
    let Some(w) = slurm_work("", scenario) else {
        return;
    };
    let started = Instant::now();
    let out = cloudai_run(&w, None);
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
    let r = record(&w.results_root(), "slow", 0);
    assert_eq!(
        (r.status, r.end_reason),
        (Status::Timeout, EndReason::TimeLimit),
        "{text}"
    );
    assert!(
        !squeue_ids().contains(r.job_id.as_ref().unwrap()),
        "job still queued"
    );
}

/// Ctrl-C, and SIGHUP (the ssh session to the login node closed) and SIGQUIT alike: every job is cancelled.
#[test]
fn sigint_leaves_no_job_in_the_queue() {
    for sig in [libc::SIGINT, libc::SIGHUP, libc::SIGQUIT] {
        interrupted_by(sig);
    }
}

fn interrupted_by(sig: i32) {
    let Some(w) = slurm_work("", common::slurm::TWO_LONG_SLEEPS) else {
        return;
    };
    let child = Command::new(assert_cmd::cargo::cargo_bin("cloudai"))
        .current_dir(w.path())
        .args(common::slurm::RUN_ARGS)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let ids = common::slurm::queued_jobs(&w, 2);
    common::signal(child.id() as i32, sig);
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(130), "signal {sig}: {text}");
    let queued = squeue_ids();
    for id in &ids {
        assert!(
            !queued.contains(id),
            "job {id} survived the interrupt: {queued:?}"
        );
    }
    let root = w.results_root();
    for id in ["a", "b"] {
        assert_eq!(record(&root, id, 0).status, Status::Cancelled, "{text}");
    }
}
