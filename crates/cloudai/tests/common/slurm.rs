//! The real local Slurm cluster of the tests (scripts/slurm-cluster.sh: node[001-016] on localhost, the default
//! partition node[001-004], fake GPUs): a scratch directory with a system for it, and `cloudai run` there.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::Work;

/// The one local cluster, shared by the tests that run jobs on it and held alone by those that change it (drain
/// nodes, fill it). A test holds its share for its whole life: the guard sits in its thread.
static CLUSTER: std::sync::RwLock<()> = std::sync::RwLock::new(());

enum Held {
    Shared(#[allow(dead_code)] std::sync::RwLockReadGuard<'static, ()>),
    Alone,
}

thread_local! {
    static HELD: std::cell::RefCell<Option<Held>> = const { std::cell::RefCell::new(None) };
}

/// This test's share of the cluster (taken once; kept until the test's thread ends).
fn share() {
    HELD.with(|h| {
        if h.borrow().is_none() {
            let g = CLUSTER.read().unwrap_or_else(|e| e.into_inner());
            *h.borrow_mut() = Some(Held::Shared(g));
        }
    });
}

/// The cluster to this test alone until the guard drops (no other test has a job on it meanwhile).
pub struct Alone(#[allow(dead_code)] std::sync::RwLockWriteGuard<'static, ()>);

pub fn alone() -> Alone {
    // a share this thread took earlier (tests run one after another on one thread) is given back first
    HELD.with(|h| *h.borrow_mut() = None);
    let g = CLUSTER.write().unwrap_or_else(|e| e.into_inner());
    HELD.with(|h| *h.borrow_mut() = Some(Held::Alone));
    Alone(g)
}

impl Drop for Alone {
    fn drop(&mut self) {
        HELD.with(|h| *h.borrow_mut() = None);
    }
}

/// Whether the cluster answers (a test skips without it, unless CLOUDAI_REQUIRE_SLURM is set); a test that asks
/// gets its share of it.
pub fn cluster_up() -> bool {
    share();
    let ping = || {
        Command::new("scontrol")
            .arg("ping")
            .output()
            .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).contains("UP"))
    };
    let mut up = ping();
    if !up && std::env::var("CLOUDAI_REQUIRE_SLURM").is_ok() {
        // Debian's slurmctld has been seen to crash (a core file, no error of ours) when a requeued job is started
        // again at once: start it again, from its saved state, so that one crash does not fail every later test
        // (the test that was running when it crashed still fails)
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/slurm-cluster.sh");
        eprintln!(
            "slurmctld does not answer: restarting the cluster with {}",
            script.display()
        );
        let _ = Command::new("bash").arg(&script).arg("start").output();
        up = ping();
    }
    if !up {
        assert!(
            std::env::var("CLOUDAI_REQUIRE_SLURM").is_err(),
            "no Slurm cluster reachable: start it with scripts/slurm-cluster.sh start"
        );
        crate::common::skip("no Slurm cluster (scripts/slurm-cluster.sh start)");
    }
    up
}

pub const SYSTEM: &str = r#"
name = "local-slurm"
scheduler = "slurm"
install_path = "install"
output_path = "out"
default_partition = "debug"
mpi = "pmix"
gpus_per_node = 8
ntasks_per_node = 2
monitor_interval = 1
[[partitions]]
name = "debug"
  [[partitions.groups]]
  name = "all"
  nodes = ["node[001-004]"]
"#;

pub const TESTS: &[(&str, &str)] = &[
    (
        "sleep.toml",
        r#"name = "sleep"
description = "sleep"
test_template_name = "Sleep"
[cmd_args]
seconds = 1
"#,
    ),
    (
        "bash.toml",
        r#"name = "bash"
description = "bash"
test_template_name = "BashCmd"
[cmd_args]
cmd = "true"
"#,
    ),
    (
        "nccl.toml",
        r#"name = "nccl"
description = "bare-metal nccl"
test_template_name = "NcclTest"
[cmd_args]
docker_image_url = ""
subtest_name = "all_reduce_perf_mpi"
"#,
    ),
];

/// A scratch directory with the system, tests and scenario, or `None` (test skipped) without a cluster.
pub fn slurm_work(system_extra: &str, scenario: &str) -> Option<Work> {
    if !cluster_up() {
        return None;
    }
    let w = Work::new();
    setup(&w, system_extra, scenario);
    Some(w)
}

pub fn setup(w: &Work, system_extra: &str, scenario: &str) -> std::path::PathBuf {
    w.file("system.toml", &format!("{SYSTEM}{system_extra}"));
    for (name, text) in TESTS {
        w.file(&format!("tests/{name}"), text);
    }
    w.file("scenario.toml", scenario)
}

/// `cloudai run` on the files [`setup`] writes.
pub const RUN_ARGS: [&str; 7] = [
    "run",
    "--system-config",
    "system.toml",
    "--tests-dir",
    "tests",
    "--test-scenario",
    "scenario.toml",
];

pub fn cloudai_run(w: &Work, path_prefix: Option<&Path>) -> std::process::Output {
    let mut c = w.cloudai();
    c.args(RUN_ARGS);
    if let Some(p) = path_prefix {
        c.env(
            "PATH",
            format!("{}:{}", p.display(), std::env::var("PATH").unwrap()),
        );
    }
    c.timeout(Duration::from_secs(180)).output().unwrap()
}

pub fn squeue_ids() -> Vec<String> {
    let o = Command::new("squeue")
        .args(["-h", "-o", "%i"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .map(String::from)
        .collect()
}

/// `sbatch` through a wrapper in the work directory's bin/ that counts its calls: (the count file, a PATH with it
/// first).
pub fn counting_sbatch(w: &Work) -> (std::path::PathBuf, String) {
    let count = w.path().join("sbatch-calls");
    let real =
        String::from_utf8(Command::new("which").arg("sbatch").output().unwrap().stdout).unwrap();
    let wrapper = w.file(
        "bin/sbatch",
        &format!(
            r#"#!/bin/bash
echo x >> {}
exec {} "$@"
"#,
            count.display(),
            real.trim()
        ),
    );
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        w.path().join("bin").display(),
        std::env::var("PATH").unwrap()
    );
    (count, path)
}

/// Two sleeps of 300 s, one on two nodes: jobs that stay in the queue until something stops them.
pub const TWO_LONG_SLEEPS: &str = r#"name = "int"
[[Tests]]
id = "a"
test_name = "sleep"
[Tests.cmd_args]
seconds = 300
[[Tests]]
id = "b"
test_name = "sleep"
num_nodes = 2
[Tests.cmd_args]
seconds = 300
"#;

/// The ids of the `n` jobs a run in `w` submitted, once all of them are in the queue (read from its debug.log).
pub fn queued_jobs(w: &Work, n: usize) -> Vec<String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let log = std::fs::read_to_string(w.path().join("debug.log")).unwrap_or_default();
        let ids: Vec<String> = log
            .lines()
            .filter_map(|l| l.split("Submitted slurm job: ").nth(1))
            .map(|id| id.trim().to_string())
            .collect();
        if ids.len() == n && ids.iter().all(|i| squeue_ids().contains(i)) {
            return ids;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "jobs were not submitted: {ids:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A shell command that prints the nccl-tests output `file` as this job's rank 0 would: its Rank lines replaced by
/// the job's own, each host of `SLURM_JOB_NODELIST` with `SLURM_NTASKS_PER_NODE` ranks (one GPU each), so a
/// stand-in binary shows the shape that was launched.
pub fn print_as_this_job(file: &Path) -> String {
    format!(
        r##"awk -v hosts="$(scontrol show hostnames "$SLURM_JOB_NODELIST")" -v per="${{SLURM_NTASKS_PER_NODE:-1}}" '
BEGIN {{ n = split(hosts, h, "\n") }}
/^# +Rank / {{ if (!done) {{ r = 0; for (i = 1; i <= n; i++) for (d = 0; d < per; d++) {{ printf "#  Rank %2d Group  0 Pid %6d on %10s device %2d [0000:%02x:00] NVIDIA A100-SXM4-80GB\n", r, 1000 + r, h[i], d, 16 + d; r++ }} done = 1 }} next }}
{{ print }}' {}"##,
        file.display()
    )
}
