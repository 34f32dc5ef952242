//! Field trials, round 2: no secret at rest, every ending signal cancels what we started, one owner per results
//! tree, and `cmd_args` keys that cannot reach a shell as code.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::runai::{mock, setup, SECRET};
use common::{stdout_of, Work};
use runai_mock::Timing;

const RUN: [&str; 7] = common::RUN_S_TOML;

/// Every file below `dir` (tarballs unpacked with `tar`) that contains `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<String> {
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let bytes = std::fs::read(&p).unwrap_or_default();
            if String::from_utf8_lossy(&bytes).contains(needle) {
                hits.push(p.display().to_string());
            }
            if p.extension().is_some_and(|x| x == "tgz") {
                let out = std::process::Command::new("tar")
                    .arg("-xzOf")
                    .arg(&p)
                    .output()
                    .unwrap();
                assert!(out.status.success(), "{} does not unpack", p.display());
                if String::from_utf8_lossy(&out.stdout).contains(needle) {
                    hits.push(format!("{} (inside)", p.display()));
                }
            }
        }
    }
    hits
}

/// A failed Run:ai run whose secret is only in the system file: neither the tree, the tarball nor the log keeps it;
/// the tree's copy of the system is private; `status` and `resume` take the secret from the original file, and
/// say where to put it when neither the file nor the environment has it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_at_rest_after_a_failed_runai_run() {
    let m = mock(0.5, None).await;
    m.set_timing(Timing {
        outcome: "failed".into(),
        ..common::runai::timing(0.5)
    });
    let w = Work::new();
    setup(
        &w,
        &m.url(),
        r#"name = "runai"
[[Tests]]
id = "bad"
test_name = "nccl"
"#,
    );
    let sys = w.path().join("system.toml");
    let text = std::fs::read_to_string(&sys)
        .unwrap()
        .replace("wrong-in-file", SECRET);
    std::fs::write(&sys, &text).unwrap();
    let cloudai = || {
        let mut c = w.cloudai();
        c.env_remove("RUNAI_APP_SECRET");
        c
    };
    let out = tokio::task::spawn_blocking({
        let mut c = cloudai();
        c.args(RUN);
        move || c.output().unwrap()
    })
    .await
    .unwrap();
    let console = stdout_of(&out);
    assert_eq!(out.status.code(), Some(3), "{console}");
    assert!(!console.contains(SECRET));
    let root = w.results_root();
    let tgz = root.with_extension("tgz");
    assert!(tgz.is_file(), "a failed run writes its tarball");
    // the work dir holds the results tree, its tarball and debug.log; only the user's own system file has it
    let hits = files_containing(w.path(), SECRET);
    assert_eq!(hits, [sys.display().to_string()], "secret at rest");
    let copy = root.join(".cloudai/inputs/system.toml");
    let mode = std::fs::metadata(&copy).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the copy of the system is private");
    let copied = std::fs::read_to_string(&copy).unwrap();
    assert!(
        copied.contains("# app_secret: not kept with the results")
            && copied.contains(r#"app_id = "my-app""#),
        "{copied}"
    );

    // status reads the secret from the original file (no warning about an edited system either)
    let st = cloudai().arg("status").arg(&root).output().unwrap();
    assert_eq!(st.status.code(), Some(0), "{}", stdout_of(&st));
    // resume without the original's secret and without the variable: refused, naming both places
    std::fs::write(
        &sys,
        text.replace(
            &format!(
                r#"app_secret = "{SECRET}"
"#
            ),
            "",
        ),
    )
    .unwrap();
    let r = cloudai().arg("resume").arg(&root).output().unwrap();
    let said = stdout_of(&r);
    assert_eq!(r.status.code(), Some(1), "{said}");
    assert!(
        said.contains("no Run:ai secret to resume with")
            && said.contains("set RUNAI_APP_SECRET or restore app_secret in")
            && said.contains("system.toml"),
        "{said}"
    );
}

/// A system file without `app_secret` runs with `RUNAI_APP_SECRET`, as documented; without either, the run
/// stops before anything exists, saying where the secret goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_secret_may_come_only_from_the_environment() {
    let m = mock(0.5, None).await;
    let w = Work::new();
    setup(
        &w,
        &m.url(),
        r#"name = "runai"
[[Tests]]
id = "ok"
test_name = "nccl"
"#,
    );
    let sys = w.path().join("system.toml");
    let text = std::fs::read_to_string(&sys).unwrap().replace(
        r#"app_secret = "wrong-in-file"
"#,
        "",
    );
    std::fs::write(&sys, text).unwrap();
    let none = tokio::task::spawn_blocking({
        let mut c = w.cloudai();
        c.args(RUN).env_remove("RUNAI_APP_SECRET");
        move || c.output().unwrap()
    })
    .await
    .unwrap();
    let said = stdout_of(&none);
    assert_eq!(none.status.code(), Some(1), "{said}");
    assert!(
        said.contains("no Run:ai secret for app_id my-app: set RUNAI_APP_SECRET, or app_secret in"),
        "{said}"
    );
    assert!(!w.path().join("out").exists());
    let out = common::runai::run(&w, &RUN, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
}

/// `cloudai <args>` started in the work directory, its console piped.
fn spawn(w: &Work, args: &[&str]) -> std::process::Child {
    std::process::Command::new(assert_cmd::cargo::cargo_bin("cloudai"))
        .current_dir(w.path())
        .args(args)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// cloudai running a sleep scenario in the background.
fn start_sleep(w: &Work) -> std::process::Child {
    w.file(
        "tests/sleep.toml",
        r#"name = "sleep"
description = "d"
test_template_name = "Sleep"
[cmd_args]
seconds = 300
"#,
    );
    w.file(
        "s.toml",
        r#"name = "nap"
[[Tests]]
id = "a"
test_name = "sleep"
[[Tests]]
id = "b"
test_name = "sleep"
"#,
    );
    w.standalone();
    spawn(w, &RUN)
}

/// The pids of the test's sleep jobs (their process groups), once both run.
fn wait_for_jobs(w: &Work) -> Vec<i32> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let pids: Vec<i32> = ["a", "b"]
            .iter()
            .filter_map(|id| {
                let root = std::fs::read_dir(w.path().join("out")).ok()?;
                let dir = root.flatten().find(|e| e.path().is_dir())?.path();
                std::fs::read_to_string(dir.join(id).join("0/.cloudai-job"))
                    .ok()?
                    .trim()
                    .parse()
                    .ok()
            })
            .collect();
        if pids.len() == 2 {
            return pids;
        }
        assert!(Instant::now() < deadline, "jobs did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether a process of the group still runs (zombies, exited but not yet reaped, do not count).
fn alive(pgid: i32) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            return false;
        };
        // pid (comm) state ppid pgrp ...
        let rest: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        rest.len() > 2 && rest[0] != "Z" && rest[2] == pgid.to_string()
    })
}

/// Waits up to 5 s for the group to end.
fn ends(pgid: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(pgid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    !alive(pgid)
}

/// SIGHUP (a closed ssh session) and SIGQUIT end a run like SIGTERM: every job is cancelled, exit 130.
#[test]
fn hangup_and_quit_cancel_every_job() {
    for sig in [libc::SIGHUP, libc::SIGQUIT] {
        let w = Work::new();
        let mut child = start_sleep(&w);
        let jobs = wait_for_jobs(&w);
        common::signal(child.id() as i32, sig);
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(130), "signal {sig}");
        for pg in jobs {
            assert!(ends(pg), "signal {sig}: job {pg} left running");
        }
        let root = w.results_root();
        assert!(!root.join("leftovers.json").exists());
    }
}

/// A second Ctrl-C while jobs are being cancelled stops waiting at once: what is not confirmed gone is written to
/// leftovers.json and the exit code says so (4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_interrupt_stops_waiting_and_names_the_leftovers() {
    // workloads that run long and take a minute to go once deleted
    let m = mock(300.0, None).await;
    m.set_timing(Timing {
        delete_s: 60.0,
        ..common::runai::timing(300.0)
    });
    let w = Work::new();
    setup(
        &w,
        &m.url(),
        r#"name = "runai"
[[Tests]]
id = "a"
test_name = "nccl"
[[Tests]]
id = "b"
test_name = "nccl"
"#,
    );
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("cloudai"))
        .current_dir(w.path())
        .args(RUN)
        .env("RUNAI_APP_SECRET", SECRET)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while common::runai::workload_names(&m).len() < 2 {
        assert!(Instant::now() < deadline, "workloads were not created");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pid = child.id() as i32;
    common::signal(pid, libc::SIGINT);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let t = Instant::now();
    common::signal(pid, libc::SIGINT);
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let text = stdout_of(&out);
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "the second interrupt did not stop the wait: {:?}\n{text}",
        t.elapsed()
    );
    assert!(text.contains("A second interrupt"), "{text}");
    let left = std::fs::read_to_string(w.results_root().join("leftovers.json")).unwrap();
    assert_eq!(out.status.code(), Some(4), "{text}\n{left}");
    for name in common::runai::workload_names(&m) {
        assert!(left.contains(&name), "{name} not named in {left}");
    }
}

/// Two `resume`s of one tree at the same time: one owns it, the other is refused before reading anything.
#[test]
fn two_resumes_at_once_one_is_refused() {
    let w = Work::new();
    let mut child = start_sleep(&w);
    let _ = wait_for_jobs(&w);
    // kill -9: the tree is left for resume, its lock naming a dead process
    child.kill().unwrap();
    child.wait().unwrap();
    let root = w.results_root();
    let root_s = root.display().to_string();
    let resume = || spawn(&w, &["resume", &root_s]);
    let (mut a, mut b) = (resume(), resume());
    // whichever took the tree keeps it: the other ends at once with the owner's pid
    let deadline = Instant::now() + Duration::from_secs(20);
    let (refused, owner) = loop {
        if let Some(s) = a.try_wait().unwrap() {
            break ((a, s), b);
        }
        if let Some(s) = b.try_wait().unwrap() {
            break ((b, s), a);
        }
        assert!(Instant::now() < deadline, "neither resume was refused");
        std::thread::sleep(Duration::from_millis(50));
    };
    let (loser, status) = refused;
    let text = stdout_of(&loser.wait_with_output().unwrap());
    assert_eq!(status.code(), Some(1), "{text}");
    assert!(text.contains("is owned by cloudai pid"), "{text}");
    let mut owner = owner;
    common::signal(owner.id() as i32, libc::SIGTERM);
    assert_eq!(owner.wait().unwrap().code(), Some(130));
}

/// `cloudai run` on the built-in-like Standalone system of one test file (`tests/<name>.toml`) and a scenario.
fn run_standalone(test: (&str, &str), scenario: &str) -> (Work, std::process::Output) {
    let w = Work::new();
    w.standalone();
    w.file(&format!("tests/{}.toml", test.0), test.1);
    w.file("s.toml", scenario);
    let out = w.cloudai().args(RUN).output().unwrap();
    (w, out)
}

/// `cmd_args` keys become command-line flags: only `[A-Za-z0-9_-]` is accepted, with the place it was written.
#[test]
fn cmd_args_keys_cannot_inject_shell() {
    let (w, out) = run_standalone(
        (
            "nccl",
            r#"name = "nccl"
description = "d"
test_template_name = "NcclTest"
[cmd_args]
docker_image_url = ""
"x;touch pwned" = 1
"#,
        ),
        r#"name = "s"
[[Tests]]
id = "t"
test_name = "nccl"
"#,
    );
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("nccl.toml:6:1: field 'cmd_args.x;touch pwned'")
            && text.contains("[A-Za-z0-9_-]"),
        "{text}"
    );
    assert!(!w.path().join("pwned").exists());
    assert!(!w.path().join("out").exists());
}

/// `cloudai status` (any read-only command) beside a live run writes no log file: the run's `debug.log` grows on,
/// and the run keeps its own log in its tree.
#[test]
fn status_beside_a_live_run_leaves_its_log_alone() {
    let w = Work::new();
    let mut child = start_sleep(&w);
    let _ = wait_for_jobs(&w);
    let log = w.path().join("debug.log");
    let before = std::fs::read_to_string(&log).unwrap();
    assert!(before.contains("Starting test"), "{before}");
    let root = w.results_root();
    for args in [
        vec!["status".to_string(), root.display().to_string()],
        vec!["verify-configs".into(), "tests".into()],
    ] {
        let out = w.cloudai().args(&args).output().unwrap();
        assert!(out.status.code().is_some(), "{args:?}");
    }
    let after = std::fs::read_to_string(&log).unwrap();
    assert!(
        after.starts_with(&before),
        "debug.log was rewritten by a read-only command"
    );
    common::signal(child.id() as i32, libc::SIGTERM);
    assert_eq!(child.wait().unwrap().code(), Some(130));
    let own = std::fs::read_to_string(root.join(".cloudai/run.log")).unwrap();
    assert!(
        own.contains("Starting test") && own.contains("Interrupted (SIGTERM)"),
        "{own}"
    );
}

/// What CloudAI runs, we run: a BashCmd script over several lines; `[reports.X] enable = false` turns that report
/// off; `generate-report --hook-dir` is accepted.
#[test]
fn cloudai_parity_slips() {
    let (w, out) = run_standalone(
        (
            "bash",
            r#"name = "bash"
description = "d"
test_template_name = "BashCmd"
[cmd_args]
cmd = """
echo one
echo two
exit 3
"""
"#,
        ),
        r#"name = "s"
[[Tests]]
id = "t"
test_name = "bash"
[reports.tarball]
enable = false
"#,
    );
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    let root = w.results_root();
    assert_eq!(
        std::fs::read_to_string(root.join("t/0/stdout.txt")).unwrap(),
        "one\ntwo\n"
    );
    assert!(
        !root.with_extension("tgz").exists(),
        "the tarball report is disabled"
    );
    let out = w
        .cloudai()
        .args(["generate-report", "--result-dir"])
        .arg(&root)
        .args(["--hook-dir", "conf/hook"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", stdout_of(&out));
}

/// Bad input that used to get through is a load-time error, before any directory exists.
#[test]
fn inputs_that_cannot_become_files_or_numbers_are_refused() {
    let cases: [(&str, &str, &str); 6] = [
        (
            r#"id = "summary.json"
test_name = "nccl"
"#,
            "",
            "is a name the results tree itself uses",
        ),
        (
            r#"id = "a\u200fb"
test_name = "nccl"
"#,
            "",
            "invisible or text-direction character",
        ),
        (
            &format!(
                r#"id = "{}"
test_name = "nccl"
"#,
                "x".repeat(300)
            ),
            "",
            "is 300 bytes long",
        ),
        (
            r#"id = "t"
test_name = "nccl"
time_limit = "00:00:00"
"#,
            "",
            "a time limit of zero ends the test before it starts",
        ),
        (
            r#"id = "t"
test_name = "nccl"
[Tests.cmd_args]
ngpus = -1
"#,
            "",
            "s.toml:6:9: field 'cmd_args.ngpus': must be 1 or more, found -1",
        ),
        (
            r#"id = "t"
test_name = "bash"
"#,
            "big",
            "the kernel refuses a command-line argument over 128 KiB",
        ),
    ];
    for (entry, big, expected) in cases {
        let w = Work::new();
        w.standalone();
        w.file("tests/nccl.toml", common::scratch::fixtures::NCCL);
        let cmd = if big.is_empty() {
            "true".to_string()
        } else {
            "x".repeat(3 << 20)
        };
        w.file(
            "tests/bash.toml",
            &format!(
                r#"name = "bash"
description = "d"
test_template_name = "BashCmd"
[cmd_args]
cmd = "{cmd}"
"#
            ),
        );
        w.file(
            "s.toml",
            &format!(
                r#"name = "s"
[[Tests]]
{entry}"#
            ),
        );
        let out = w.cloudai().args(RUN).output().unwrap();
        let text = stdout_of(&out);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{entry}: {}",
            &text[..text.len().min(3000)]
        );
        assert!(
            text.contains(expected),
            "{entry}: expected {expected:?} in\n{}",
            &text[..text.len().min(3000)]
        );
        assert!(!w.path().join("out").exists());
    }
    // a config path that is not a regular file is refused at once (it used to read /dev/zero until memory ran out)
    let w = Work::new();
    w.standalone();
    w.file("tests/.keep", "");
    let out = w
        .cloudai()
        .args([
            "run",
            "--system-config",
            "system.toml",
            "--tests-dir",
            "tests",
            "--test-scenario",
            "/dev/zero",
        ])
        .timeout(Duration::from_secs(20))
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("not a regular file"), "{text}");
}

/// A temporary file never follows a symlink planted where it will be created, nor overwrites what it points at.
#[test]
fn temporary_files_are_created_exclusively_and_never_follow_symlinks() {
    let w = Work::new();
    let victim = w.file("victim.txt", "keep me\n");
    let target = w.path().join("report.xml");
    // the names a predictable scheme would use
    for name in [
        format!(".report.xml.tmp{}", std::process::id()),
        ".report.xml.tmp".into(),
    ] {
        std::os::unix::fs::symlink(&victim, w.path().join(name)).unwrap();
    }
    cloudai::util::fsx::write_atomic(&target, b"<testsuites/>").unwrap();
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "<testsuites/>");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me\n");
    // the target itself a symlink: replaced by a file, the file it pointed to untouched
    std::fs::remove_file(&target).unwrap();
    std::os::unix::fs::symlink(&victim, &target).unwrap();
    cloudai::util::fsx::write_atomic(&target, b"new").unwrap();
    assert!(!std::fs::symlink_metadata(&target)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me\n");
    let (tmp, _f) = cloudai::util::fsx::create_temp(&target).unwrap();
    let (tmp2, _g) = cloudai::util::fsx::create_temp(&target).unwrap();
    assert_ne!(tmp, tmp2, "names are unpredictable and unique");
}

/// `#SBATCH --output=` / `--error=` paths with blanks are quoted (sbatch would split them); ordinary paths stay as
/// CloudAI writes them.
#[test]
fn sbatch_output_paths_with_blanks_are_quoted() {
    let w = Work::new();
    w.file("system.toml", common::slurm::SYSTEM);
    w.file(
        "tests/sleep.toml",
        r#"name = "sleep"
description = "d"
test_template_name = "Sleep"
"#,
    );
    w.file(
        "s.toml",
        r#"name = "s"
[[Tests]]
id = "t"
test_name = "sleep"
"#,
    );
    let out = w
        .cloudai()
        .args(common::DRY_RUN_S_TOML)
        .args(["--output-dir", "my results"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let root = std::fs::read_dir(w.path().join("my results"))
        .unwrap()
        .flatten()
        .find(|e| e.path().is_dir())
        .unwrap()
        .path();
    let script = std::fs::read_to_string(root.join("t/0/cloudai_sbatch_script.sh")).unwrap();
    let out_line = script
        .lines()
        .find(|l| l.starts_with("#SBATCH --output="))
        .unwrap();
    assert_eq!(
        out_line,
        format!(
            r#"#SBATCH --output="{}""#,
            root.join("t/0/stdout.txt").display()
        )
    );
}

/// `verify-configs` reports a test name defined twice in one tests directory, naming both files.
#[test]
fn verify_configs_reports_duplicate_test_names() {
    let w = Work::new();
    for f in ["a", "b"] {
        w.file(
            &format!("tests/{f}.toml"),
            r#"name = "same"
description = "d"
test_template_name = "Sleep"
"#,
        );
    }
    let out = w
        .cloudai()
        .args(["verify-configs", "tests"])
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("duplicate test name 'same'") && text.contains("a.toml defines it too"),
        "{text}"
    );
}

/// Node states from a `sinfo` answer far above a pipe's 64 KiB (thousands of nodes) are read as it runs: the
/// group spec is resolved and the job runs, instead of the query stalling until its timeout.
#[test]
fn a_huge_sinfo_answer_does_not_stall_node_selection() {
    let Some(w) = common::slurm::slurm_work(
        "",
        r#"name = "big"
[[Tests]]
id = "a"
test_name = "sleep"
nodes = ["debug:all:2"]
"#,
    ) else {
        return;
    };
    // 20,000 extra node lines (~400 KiB) before the real answer
    w.file(
        "bin/sinfo",
        r#"#!/bin/bash
for i in $(seq 1 20000); do echo "spare$i|idle"; done
exec /usr/bin/sinfo "$@"
"#,
    );
    std::fs::set_permissions(
        w.path().join("bin/sinfo"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let t = Instant::now();
    let out = w
        .cloudai_with_bin()
        .args(common::slurm::RUN_ARGS)
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let rec = common::record(&w.results_root(), "a", 0);
    assert_eq!(rec.nodes.len(), 2, "{:?}", rec.nodes);
    assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());
}

/// A double Ctrl-C on Standalone and on the Slurm cluster: cloudai exits at once, and nothing it started is
/// left (Standalone kills its process groups on the way out; Slurm's cancels went out with the first signal).
#[test]
fn a_double_interrupt_leaves_no_job_on_standalone_or_slurm() {
    // Standalone
    let w = Work::new();
    let mut child = start_sleep(&w);
    let jobs = wait_for_jobs(&w);
    let pid = child.id() as i32;
    common::signal(pid, libc::SIGINT);
    std::thread::sleep(Duration::from_millis(200));
    common::signal(pid, libc::SIGINT);
    let code = child.wait().unwrap().code();
    assert!(matches!(code, Some(130) | Some(4)), "{code:?}");
    for pg in jobs {
        assert!(ends(pg), "job {pg} left running");
    }

    // Slurm
    let Some(w) = common::slurm::slurm_work("", common::slurm::TWO_LONG_SLEEPS) else {
        return;
    };
    let child = spawn(&w, &common::slurm::RUN_ARGS);
    let ids = common::slurm::queued_jobs(&w, 2);
    let pid = child.id() as i32;
    common::signal(pid, libc::SIGINT);
    std::thread::sleep(Duration::from_millis(100));
    common::signal(pid, libc::SIGINT);
    let out = child.wait_with_output().unwrap();
    let text = stdout_of(&out);
    assert!(matches!(out.status.code(), Some(130) | Some(4)), "{text}");
    if out.status.code() == Some(4) {
        assert!(w.results_root().join("leftovers.json").is_file(), "{text}");
    }
    // the cancels went out with the first signal: the queue empties by itself
    let deadline = Instant::now() + Duration::from_secs(30);
    while ids.iter().any(|i| common::slurm::squeue_ids().contains(i)) {
        assert!(Instant::now() < deadline, "jobs {ids:?} left in the queue");
        std::thread::sleep(Duration::from_millis(200));
    }
}
