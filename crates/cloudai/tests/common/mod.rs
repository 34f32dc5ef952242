//! Helpers for the integration tests: a scratch directory with config files and a `cloudai` command in it.
#![allow(dead_code)]

pub mod kube;
pub mod runai;
pub mod scratch;
pub mod slurm;

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use chrono::{DateTime, FixedOffset};
use cloudai::results::{EndReason, IterationRecord, Status};

/// Says that a test skips, visibly: written to the process's stderr directly, which the test harness does not
/// capture (unlike `eprintln!`), so the line shows in a normal `cargo test` run.
pub fn skip(reason: &str) {
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "skipped: {} ({reason})",
        std::thread::current().name().unwrap_or("a test")
    );
}

pub struct Work {
    pub dir: tempfile::TempDir,
}

impl Work {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `text` to `rel` (creating parent directories) and returns the full path.
    pub fn file(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        p
    }

    /// Writes an executable script (a stand-in for a tool) to `rel` and returns its full path.
    pub fn script(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.file(rel, text);
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        p
    }

    /// `cloudai` with its working directory here (so debug.log lands here).
    pub fn cloudai(&self) -> Command {
        let mut c = Command::cargo_bin("cloudai").unwrap();
        c.current_dir(self.path());
        c
    }

    /// `cloudai` with this directory's `bin/` (stand-in binaries) first on PATH.
    pub fn cloudai_with_bin(&self) -> Command {
        let mut c = self.cloudai();
        c.env(
            "PATH",
            format!(
                "{}:{}",
                self.path().join("bin").display(),
                std::env::var("PATH").unwrap()
            ),
        );
        c
    }

    /// A standalone system that writes results under `out/`.
    pub fn standalone(&self) -> PathBuf {
        self.file(
            "system.toml",
            r#"name = "local"
scheduler = "standalone"
install_path = "install"
output_path = "out"
"#,
        )
    }

    /// `cloudai generate-report --result-dir <root>`, run to its end.
    pub fn generate_report(&self, root: &Path) -> std::process::Output {
        self.cloudai()
            .args(["generate-report", "--result-dir"])
            .arg(root)
            .output()
            .unwrap()
    }

    /// The single scenario results directory under `out/`.
    pub fn results_root(&self) -> PathBuf {
        let out = self.path().join("out");
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(&out)
            .unwrap_or_else(|e| panic!("{}: {e}", out.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_dir())
            .collect();
        assert_eq!(
            dirs.len(),
            1,
            "expected one results directory, found {dirs:?}"
        );
        dirs.pop().unwrap()
    }
}

/// Sends `sig` to a process this test started (a negative `pid`: its process group) — the one way the tests
/// interrupt a cloudai (Ctrl-C is SIGINT to it).
pub fn signal(pid: impl TryInto<i32>, sig: i32) {
    let pid: i32 = pid
        .try_into()
        .unwrap_or_else(|_| panic!("not a process id"));
    // SAFETY: kill(2) only sends a signal; the pid is a child (or group) this test started. One that already
    // ended (a second Ctrl-C after the first ended it) is not an error.
    unsafe { libc::kill(pid, sig) };
}

/// Reference material copied from CloudAI and real clusters (see tests/data/README.md): part of the repository, so
/// the tests pass from a plain clone.
pub fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// A fresh `git clone` of this repository's HEAD in a temporary directory (no ../shared beside it), or None with
/// a visible skip line when the source is not a git checkout (CI always runs from one).
pub fn clone_head() -> Option<(tempfile::TempDir, PathBuf)> {
    let repo = repo();
    let is_checkout = std::process::Command::new("git")
        .args([
            "-C",
            repo.to_str().unwrap(),
            "rev-parse",
            "--verify",
            "HEAD",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    if !is_checkout {
        assert!(std::env::var("CI").is_err(), "CI runs from a git clone");
        skip(&format!("{} is not a git checkout", repo.display()));
        return None;
    }
    let tmp = tempfile::tempdir().unwrap();
    let clone = tmp.path().join("work/cloudai-rs");
    let out = std::process::Command::new("git")
        .args(["clone", "--quiet", "--no-hardlinks"])
        .arg(&repo)
        .arg(&clone)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!tmp.path().join("work/shared").exists());
    Some((tmp, clone))
}

pub fn stdout_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

pub fn record(root: &Path, id: &str, iteration: u64) -> IterationRecord {
    IterationRecord::read(&root.join(id).join(iteration.to_string()))
        .unwrap_or_else(|e| panic!("record of {id}/{iteration}: {e}"))
}

pub fn t(s: &Option<String>) -> DateTime<FixedOffset> {
    DateTime::parse_from_rfc3339(s.as_deref().expect("timestamp recorded")).unwrap()
}

/// A scenario with each dependency type on a two-iteration `first` test of the `sleep` test (1 s).
pub const DEPENDENCY_SCENARIO: &str = r#"
name = "deps"
[[Tests]]
id = "first"
test_name = "sleep"
iterations = 2
[[Tests]]
id = "post_init"
test_name = "sleep"
  [[Tests.dependencies]]
  type = "start_post_init"
  id = "first"
[[Tests]]
id = "post_comp"
test_name = "sleep"
  [[Tests.dependencies]]
  type = "start_post_comp"
  id = "first"
[[Tests]]
id = "end_comp"
test_name = "sleep"
  [Tests.cmd_args]
  seconds = 120
  [[Tests.dependencies]]
  type = "end_post_comp"
  id = "first"
"#;

/// Checks from the recorded times that every dependency of DEPENDENCY_SCENARIO was honoured. `start` is the
/// moment a job counts as started: when it ran (Standalone) or was submitted (Slurm, where queueing adds delay).
pub fn check_dependencies(root: &Path, start: fn(&IterationRecord) -> &Option<String>) {
    let (f0, f1) = (record(root, "first", 0), record(root, "first", 1));
    let (init, comp, end) = (
        record(root, "post_init", 0),
        record(root, "post_comp", 0),
        record(root, "end_comp", 0),
    );
    assert!(
        root.join("first/0/test-run.toml").is_file()
            && root.join("first/1/test-run.toml").is_file()
    );
    assert!(!root.join("first/2").exists());
    for r in [&f0, &f1, &init, &comp] {
        assert_eq!(r.status, Status::Passed, "{r:?}");
    }
    // iterations run one after another
    assert!(t(start(&f1)) >= t(&f0.ended_at));
    // start_post_init: started while the dependency's first job was running
    assert!(t(start(&init)) >= t(&f0.started_at));
    assert!(
        t(start(&init)) < t(&f0.ended_at),
        "post_init should start while `first` runs"
    );
    // start_post_comp: only after the last iteration ended
    assert!(t(start(&comp)) >= t(&f1.ended_at));
    // end_post_comp: stopped soon after the dependency completed, long before its 120 s sleep
    assert_eq!(
        (end.status, end.end_reason),
        (Status::Stopped, EndReason::StoppedByDependency)
    );
    let delay = t(&end.ended_at) - t(&f1.ended_at);
    assert!(
        delay < chrono::Duration::seconds(10),
        "stopped {delay} after the dependency completed"
    );
}

/// The exit code promised for a scenario that ran to its end: 0 when every iteration in summary.json PASSED or was
/// STOPPED on purpose, 3 otherwise.
pub fn assert_verdict_exit(out: &std::process::Output, root: &Path) {
    let summary: serde_json::Value = serde_json::from_slice(
        &std::fs::read(root.join("summary.json")).expect("summary.json written"),
    )
    .unwrap();
    let ok = summary["tests"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t["status"] == "PASSED" || t["status"] == "STOPPED");
    assert_eq!(
        out.status.code(),
        Some(if ok { 0 } else { 3 }),
        "{}",
        stdout_of(out)
    );
}

/// `cloudai run` of an NCCL test on the built-in-like Standalone system (results under `out/`), whose stand-in
/// `all_reduce_perf_mpi` on PATH prints `stdout`.
pub fn nccl_standalone(
    w: &Work,
    stdout: &str,
    iterations: u32,
    extra: &[&str],
) -> std::process::Output {
    let printed = w.file("nccl-stdout.txt", stdout);
    let bin = w.file(
        "bin/all_reduce_perf_mpi",
        &format!("#!/bin/bash\ncat {}\n", printed.display()),
    );
    std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    w.standalone();
    w.file("tests/nccl.toml", scratch::fixtures::NCCL);
    w.file(
        "s.toml",
        &format!(
            r#"name = "nccl-local"
[[Tests]]
id = "ar"
test_name = "nccl"
iterations = {iterations}
"#
        ),
    );
    w.cloudai_with_bin()
        .args(RUN_S_TOML)
        .args(extra)
        .output()
        .unwrap()
}

/// `cloudai dry-run` of `system.toml`, `tests/` and `s.toml` in the work directory.
pub const DRY_RUN_S_TOML: [&str; 7] = [
    "dry-run",
    "--system-config",
    "system.toml",
    "--tests-dir",
    "tests",
    "--test-scenario",
    "s.toml",
];

/// Headless Chromium from Debian's package: None (with a visible skip) without it, unless CLOUDAI_REQUIRE_BROWSER=1
/// (CI) makes that a failure.
pub fn chromium() -> Option<&'static str> {
    let found = ["chromium", "chromium-browser"].into_iter().find(|b| {
        std::process::Command::new(b)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if found.is_none() {
        assert!(
            std::env::var("CLOUDAI_REQUIRE_BROWSER").is_err(),
            "chromium is not installed"
        );
        skip("chromium is not installed");
    }
    found
}

/// `cloudai run` of `system.toml`, `tests/` and `s.toml` in the work directory.
pub const RUN_S_TOML: [&str; 7] = [
    "run",
    "--system-config",
    "system.toml",
    "--tests-dir",
    "tests",
    "--test-scenario",
    "s.toml",
];

/// `cloudai find-bad-nodes` of `system.toml` with the test `nccl` of `tests/`.
pub const FIND_BAD_NODES_NCCL: [&str; 7] = [
    "find-bad-nodes",
    "--system-config",
    "system.toml",
    "--tests-dir",
    "tests",
    "--test",
    "nccl",
];

/// The nccl-tests output with both busbw columns scaled by `factor` on rows of at least `from` bytes, printed in
/// the same widths.
pub fn scaled(text: &str, from: u64, factor: f64) -> String {
    text.lines()
        .map(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            let size = t.first().and_then(|s| s.parse::<u64>().ok());
            match size {
                Some(s) if t.len() == 13 && s >= from => {
                    let mut t: Vec<String> = t.iter().map(|x| x.to_string()).collect();
                    for i in [7, 11] {
                        t[i] = format!("{:.2}", t[i].parse::<f64>().unwrap() * factor);
                    }
                    format!(
                        "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}",
                        t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9], t[10], t[11], t[12]
                    )
                }
                _ => l.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A TLS acceptor for `names` with a certificate signed by a private CA, and that CA (PEM) for clients to trust.
pub fn tls_acceptor(names: &[&str]) -> (tokio_rustls::TlsAcceptor, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "cloudai test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert =
        rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap()
            .signed_by(&key, &ca, &ca_key)
            .unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls_pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
    (
        tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(server)),
        ca.pem(),
    )
}
