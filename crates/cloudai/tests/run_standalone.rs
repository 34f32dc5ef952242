//! `cloudai run` on the Standalone system: dependencies, iterations, time limits, failures and Ctrl-C.

use crate::common;

use std::time::{Duration, Instant};

use cloudai::results::{EndReason, Status};
use common::{check_dependencies, record, stdout_of, t, Work, DEPENDENCY_SCENARIO};

use common::scratch::{fixtures, Ran, Scratch};

/// The scenario run on the Standalone system with the fixtures' sleep and bash tests.
fn run(scenario: &str) -> Ran {
    Scratch::standalone()
        .test("sleep", fixtures::SLEEP)
        .test("bash", fixtures::BASH)
        .scenario(scenario)
        .run()
}

#[test]
fn dependencies_and_iterations_are_honoured() {
    let ran = run(DEPENDENCY_SCENARIO);
    ran.exits(0)
        .says("[INFO] Job completed: first (iteration 2 of 2)")
        .says("STOPPED");
    check_dependencies(&ran.root(), |r| &r.started_at);
}

#[test]
fn output_exit_status_and_environment_are_captured() {
    let ran = run(r#"
name = "outputs"
[[Tests]]
id = "ok"
test_name = "bash"
  [Tests.cmd_args]
  cmd = "echo to-out $MY_VAR; echo to-err >&2"
  [Tests.extra_env_vars]
  MY_VAR = "from-config"
[[Tests]]
id = "bad"
test_name = "bash"
  [Tests.cmd_args]
  cmd = "exit 3"
"#);
    ran.exits(3)
        .iteration("ok", 0, Status::Passed)
        .iteration("bad", 0, Status::Failed)
        .says("FAILED")
        .says("exited with status 3");
    assert_eq!(ran.file("ok", 0, "stdout.txt"), "to-out from-config\n");
    assert_eq!(ran.file("ok", 0, "stderr.txt"), "to-err\n");
    let bad = ran.record("bad", 0);
    assert_eq!(bad.exit_code, Some(3));
    assert!(
        bad.message.contains("exited with status 3"),
        "{}",
        bad.message
    );
    assert!(ran.work.path().join("debug.log").is_file());
}

#[test]
fn time_limit_kills_the_job() {
    let started = Instant::now();
    let ran = run(r#"
name = "limits"
[[Tests]]
id = "slow"
test_name = "bash"
time_limit = "2s"
  [Tests.cmd_args]
  cmd = "sleep 60"
"#);
    ran.exits(3).iteration("slow", 0, Status::Timeout);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the job was not killed at its limit"
    );
    let r = ran.record("slow", 0);
    assert_eq!(r.end_reason, EndReason::TimeLimit);
    assert!(r.message.contains("00:00:02"), "{}", r.message);
    let took = t(&r.ended_at) - t(&r.started_at);
    assert!(
        took >= chrono::Duration::seconds(2),
        "killed too early: {took}"
    );
}

fn alive(pid: i32) -> bool {
    // A zombie has exited; only a running or sleeping process counts.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

#[test]
fn sigint_cancels_every_job_and_leaves_no_process() {
    let w = Work::new();
    let sys = w.standalone();
    w.file("tests/bash.toml", fixtures::BASH);
    let scen = w.file(
        "scenario.toml",
        r#"
name = "interrupt"
[[Tests]]
id = "long"
test_name = "bash"
  [Tests.cmd_args]
  cmd = "sleep 300 & echo $! > $CLOUDAI_OUTPUT_DIR/child.pid; wait"
[[Tests]]
id = "later"
test_name = "bash"
  [[Tests.dependencies]]
  type = "start_post_comp"
  id = "long"
"#,
    );
    let bin = assert_cmd::cargo::cargo_bin("cloudai");
    let child = std::process::Command::new(bin)
        .current_dir(w.path())
        .args(["run", "--system-config"])
        .arg(&sys)
        .args(["--tests-dir", "tests", "--test-scenario"])
        .arg(&scen)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let pid_file = loop {
        let found = std::fs::read_dir(w.path().join("out"))
            .ok()
            .and_then(|mut d| d.next())
            .map(|e| e.unwrap().path().join("long/0/child.pid"))
            .filter(|p| std::fs::read_to_string(p).is_ok_and(|s| s.ends_with('\n')));
        if let Some(p) = found {
            break p;
        }
        assert!(Instant::now() < deadline, "the job never started");
        std::thread::sleep(Duration::from_millis(50));
    };
    let grandchild: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(grandchild));
    common::signal(child.id() as i32, libc::SIGINT);
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(130), "{text}");
    let gone = Instant::now() + Duration::from_secs(5);
    while alive(grandchild) && Instant::now() < gone {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !alive(grandchild),
        "process {grandchild} survived the cancel"
    );
    let root = w.results_root();
    let r = record(&root, "long", 0);
    assert_eq!(
        (r.status, r.end_reason),
        (Status::Cancelled, EndReason::Cancelled)
    );
    assert!(
        !root.join("later").exists(),
        "a test started after the interrupt"
    );
    assert!(
        text.contains("CANCELLED") && text.contains("SKIPPED"),
        "{text}"
    );
    // the way on is named: resume runs what never started
    assert!(
        text.contains("`cloudai resume ") && text.contains("runs what never started"),
        "{text}"
    );
}

#[test]
fn hooks_run_around_the_test_and_a_failed_pre_test_skips_it() {
    let w = Work::new();
    w.file(
        "hooks/ok.toml",
        r#"name = "ok"
[[Tests]]
id = "h"
test_name = "hook_ok"
"#,
    );
    w.file(
        "hooks/bad.toml",
        r#"name = "bad"
[[Tests]]
id = "h"
test_name = "hook_bad"
"#,
    );
    w.file(
        "hooks/test/ok.toml",
        r#"name = "hook_ok"
description = "h"
test_template_name = "BashCmd"
[cmd_args]
cmd = "echo hook ran"
"#,
    );
    w.file(
        "hooks/test/bad.toml",
        r#"name = "hook_bad"
description = "h"
test_template_name = "BashCmd"
[cmd_args]
cmd = "exit 4"
"#,
    );
    for (hook, expect) in [("ok", Status::Passed), ("bad", Status::Failed)] {
        let sys = w.standalone();
        w.file("tests/bash.toml", fixtures::BASH);
        let scen = w.file(
            &format!("{hook}.toml"),
            &format!(
                r#"name = "{hook}"
pre_test = "{hook}"
post_test = "ok"
[[Tests]]
id = "main"
test_name = "bash"
[Tests.cmd_args]
cmd = "echo main ran"
"#
            ),
        );
        let out = w
            .cloudai()
            .args(["run", "--system-config"])
            .arg(&sys)
            .args([
                "--tests-dir",
                "tests",
                "--hook-dir",
                "hooks",
                "--test-scenario",
            ])
            .arg(&scen)
            .args(["--output-dir", &format!("out-{hook}")])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(if hook == "ok" { 0 } else { 3 }),
            "{}",
            stdout_of(&out)
        );
        // the results directory (a failed run also leaves its .tgz beside it)
        let root = std::fs::read_dir(w.path().join(format!("out-{hook}")))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.is_dir())
            .unwrap();
        let r = record(&root, "main", 0);
        assert_eq!(r.status, expect, "{hook}: {}", r.message);
        let main_out = std::fs::read_to_string(root.join("main/0/stdout.txt")).unwrap();
        let pre = root.join("main/0/pre_test").join(format!("hook_{hook}"));
        assert!(pre.join("stdout.txt").is_file(), "{hook}: pre-test output");
        if hook == "ok" {
            assert_eq!(main_out, "main ran\n");
            assert_eq!(
                std::fs::read_to_string(root.join("main/0/post_test/hook_ok/stdout.txt")).unwrap(),
                "hook ran\n"
            );
        } else {
            assert_eq!(main_out, "", "the test ran after a failed pre-test");
            assert!(std::fs::read_to_string(root.join("main/0/stderr.txt"))
                .unwrap()
                .contains("pre-test failed"));
        }
    }
}

/// 500 tests at once under `ulimit -n 256` (soft and hard): each running job holds descriptors, so the engine starts
/// jobs while some are left and queues the rest; every test passes (issue 41, item 6).
#[test]
fn five_hundred_tests_under_a_256_file_limit_all_pass() {
    let w = Work::new();
    w.standalone();
    w.file(
        "tests/nap.toml",
        r#"name = "nap"
description = "d"
test_template_name = "BashCmd"
[cmd_args]
cmd = "sleep 1"
"#,
    );
    let mut s = String::from("name = \"many\"\n");
    for i in 0..500 {
        s.push_str(&format!("[[Tests]]\nid = \"t{i}\"\ntest_name = \"nap\"\n"));
    }
    w.file("s.toml", &s);
    let bin = assert_cmd::cargo::cargo_bin("cloudai");
    let out = std::process::Command::new("bash")
        .current_dir(w.path())
        .arg("-c")
        .arg(format!(
            "ulimit -n 256 && exec {} {}",
            bin.display(),
            common::RUN_S_TOML.join(" ")
        ))
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        &text[text.len().saturating_sub(3000)..]
    );
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(w.results_root().join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(summary["counts"]["PASSED"], 500, "{}", summary["counts"]);
    assert!(
        text.contains("Near the limit of open files (256)"),
        "the limit was never reached"
    );
}

/// Our secrets are for the schedulers' APIs: a test's process on Standalone never sees RUNAI_APP_SECRET (issue 41,
/// item 7).
#[test]
fn the_run_ai_secret_does_not_reach_standalone_processes() {
    let w = Work::new();
    w.standalone();
    w.file(
        "tests/env.toml",
        r#"name = "env"
description = "d"
test_template_name = "BashCmd"
[cmd_args]
cmd = "env > $CLOUDAI_OUTPUT_DIR/env.txt"
"#,
    );
    w.file(
        "s.toml",
        "name = \"e\"\n[[Tests]]\nid = \"e\"\ntest_name = \"env\"\n",
    );
    let out = w
        .cloudai()
        .args(common::RUN_S_TOML)
        .env("RUNAI_APP_SECRET", "s3cr3t-do-not-pass")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let env = std::fs::read_to_string(w.results_root().join("e/0/env.txt")).unwrap();
    assert!(env.contains("CLOUDAI_OUTPUT_DIR="), "{env}");
    assert!(!env.contains("s3cr3t-do-not-pass"), "{env}");
}

/// A job that leaves a process outside its process group (`setsid … &`): it ends with the run, whether the run
/// ends by itself or by a signal (issue 41, item 7).
#[test]
fn what_a_job_leaves_outside_its_group_ends_with_the_run() {
    let alive = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.split_whitespace().nth(2).is_none_or(|st| st != "Z"))
    };
    // the job outlives the check that its stray runs, then ends by itself (or is ended by a signal)
    for (how, extra) in [("its end", "; sleep 5"), ("SIGTERM", "; sleep 60")] {
        let w = Work::new();
        w.standalone();
        w.file(
            "tests/stray.toml",
            &format!(
                r#"name = "stray"
description = "d"
test_template_name = "BashCmd"
[cmd_args]
cmd = "setsid sleep 300 < /dev/null > /dev/null 2>&1 & echo $! > $CLOUDAI_OUTPUT_DIR/stray.pid{extra}"
"#
            ),
        );
        w.file(
            "s.toml",
            "name = \"s\"\n[[Tests]]\nid = \"a\"\ntest_name = \"stray\"\n",
        );
        let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("cloudai"))
            .current_dir(w.path())
            .args(common::RUN_S_TOML)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let pid_file = || {
            std::fs::read_dir(w.path().join("out"))
                .ok()?
                .flatten()
                .map(|e| e.path().join("a/0/stray.pid"))
                .find(|p| p.is_file())
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        let file = loop {
            if let Some(f) = pid_file().filter(|f| std::fs::metadata(f).is_ok_and(|m| m.len() > 0))
            {
                break f;
            }
            assert!(Instant::now() < deadline, "{how}: the job never started");
            std::thread::sleep(Duration::from_millis(50));
        };
        let stray: i32 = std::fs::read_to_string(&file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(alive(stray), "{how}: the stray is not running");
        if how == "SIGTERM" {
            common::signal(child.id() as i32, libc::SIGTERM);
        }
        let status = child.wait().unwrap();
        assert!(
            !alive(stray),
            "{how}: the stray {stray} outlived the run ({status:?})"
        );
    }
}
