//! What a tree says after `cloudai run` is killed outright, and smaller input edges: summary.json paths relative
//! to the results root, a missing --hook-dir, a symlink loop among the tests, a config file that is not UTF-8.

use crate::common;

use std::time::{Duration, Instant};

use cloudai::results::{EndReason, IterationRecord, Status};
use common::{stdout_of, Work};

const SLEEP: &str = r#"name = "sleep"
description = "s"
test_template_name = "Sleep"
[cmd_args]
seconds = 30
"#;

#[test]
fn kill_9_then_generate_report_says_interrupted() {
    let w = Work::new();
    w.standalone();
    w.file("tests/sleep.toml", SLEEP);
    w.file(
        "s.toml",
        r#"name = "k"
[[Tests]]
id = "long"
test_name = "sleep"
"#,
    );
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("cloudai"))
        .current_dir(w.path())
        .args(common::RUN_S_TOML)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // the iteration's record appears once its job is submitted
    let deadline = Instant::now() + Duration::from_secs(20);
    let dir = loop {
        let found = std::fs::read_dir(w.path().join("out"))
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| e.ok())
            .map(|e| e.path().join("long/0"))
            .filter(|d| d.join("cloudai-run.json").is_file());
        if let Some(d) = found {
            break d;
        }
        assert!(Instant::now() < deadline, "no record was written");
        std::thread::sleep(Duration::from_millis(50));
    };
    child.kill().unwrap(); // SIGKILL: no cleanup at all
    child.wait().unwrap();
    let rec = IterationRecord::read(&dir).unwrap();
    // the orphaned job (its own process group) is ours to clean up
    if let Some(pid) = rec.job_id.as_deref().and_then(|j| j.parse::<i32>().ok()) {
        common::signal(-pid, libc::SIGKILL);
    }
    assert_eq!(
        (rec.status, rec.end_reason),
        (Status::Interrupted, EndReason::Interrupted)
    );

    let root = dir.parent().unwrap().parent().unwrap().to_path_buf();
    let out = w.generate_report(root.strip_prefix(w.path()).unwrap());
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(text.contains("INTERRUPTED"), "{text}");
    assert!(!text.contains("SKIPPED"), "{text}");
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["tests"][0]["status"], "INTERRUPTED");
    // paths relative to the results root, which is absolute
    assert_eq!(summary["tests"][0]["output_path"], "long/0");
    assert!(summary["results_root"]
        .as_str()
        .is_some_and(|r| std::path::Path::new(r).is_absolute()));
}

#[test]
fn summary_paths_are_relative_to_the_root_after_a_run_too() {
    let w = Work::new();
    w.standalone();
    w.file(
        "tests/sleep.toml",
        &SLEEP.replace("seconds = 30", "seconds = 0"),
    );
    w.file(
        "s.toml",
        r#"name = "r"
[[Tests]]
id = "a"
test_name = "sleep"
"#,
    );
    let out = w.cloudai().args(common::RUN_S_TOML).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(w.results_root().join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(summary["tests"][0]["output_path"], "a/0");
}

#[test]
fn edges_of_input() {
    // a --hook-dir that does not exist
    let w = Work::new();
    w.standalone();
    w.file("tests/sleep.toml", SLEEP);
    w.file(
        "s.toml",
        r#"name = "r"
[[Tests]]
id = "a"
test_name = "sleep"
"#,
    );
    let out = w
        .cloudai()
        .args(common::RUN_S_TOML)
        .args(["--hook-dir", "no/such/dir"])
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("no/such/dir: --hook-dir does not exist"),
        "{text}"
    );

    // a symlink loop among the tests: a warning, the rest loads
    std::os::unix::fs::symlink("loop.toml", w.path().join("tests/loop.toml")).unwrap();
    let out = w.cloudai().args(common::DRY_RUN_S_TOML).output().unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("[WARNING] tests/loop.toml: skipped, it cannot be read"),
        "{text}"
    );

    // not UTF-8: the byte offset and its line and column
    let mut bytes = br#"name = "sleep"
description = "caf"#
        .to_vec();
    bytes.push(0xe9);
    bytes.extend_from_slice(
        br#""
test_template_name = "Sleep"
"#,
    );
    std::fs::remove_file(w.path().join("tests/loop.toml")).unwrap();
    std::fs::write(w.path().join("tests/sleep.toml"), &bytes).unwrap();
    let out = w.cloudai().args(common::DRY_RUN_S_TOML).output().unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("tests/sleep.toml:2:19: not valid UTF-8 (test spec): byte 33 (0xe9)"),
        "{text}"
    );
}

/// A tree copied elsewhere (a tarball unpacked on a laptop): generate-report speaks of the copy, never of where the
/// run wrote it (issue 41, item 8).
#[test]
fn a_copied_tree_reports_its_own_paths() {
    let w = Work::new();
    w.standalone();
    w.file("tests/sleep.toml", common::scratch::fixtures::SLEEP);
    w.file(
        "s.toml",
        "name = \"c\"\n[[Tests]]\nid = \"a\"\ntest_name = \"sleep\"\n",
    );
    let out = w.cloudai().args(common::RUN_S_TOML).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let original = w.results_root();
    let copy = w
        .path()
        .join("elsewhere")
        .join(original.file_name().unwrap());
    std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
    assert!(std::process::Command::new("cp")
        .arg("-r")
        .arg(&original)
        .arg(&copy)
        .status()
        .unwrap()
        .success());
    let out = w.generate_report(&copy);
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let orig = original.display().to_string();
    assert!(!text.contains(&orig), "the original path is named: {text}");
    assert!(text.contains("elsewhere/"), "{text}");
    let summary = std::fs::read_to_string(copy.join("summary.json")).unwrap();
    assert!(summary.contains("\"output_path\": \"a/0\""), "{summary}");
    assert!(!summary.contains(&format!("{orig}/")), "{summary}");
    let rec = std::fs::read_to_string(copy.join("a/0/cloudai-run.json")).unwrap();
    assert!(!rec.contains(&orig), "{rec}");
}

/// `status` read by a pipe that closes early ends quietly; a directory that is not a results tree is said to be
/// none, exit 1 (issue 41, item 11).
#[test]
fn status_in_a_short_pipe_and_on_a_directory_that_is_no_tree() {
    let w = Work::new();
    w.standalone();
    w.file("tests/sleep.toml", common::scratch::fixtures::SLEEP);
    w.file(
        "s.toml",
        "name = \"c\"\n[[Tests]]\nid = \"a\"\ntest_name = \"sleep\"\niterations = 3\n",
    );
    let out = w.cloudai().args(common::RUN_S_TOML).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let bin = assert_cmd::cargo::cargo_bin("cloudai");
    let piped = std::process::Command::new("bash")
        .current_dir(w.path())
        .arg("-c")
        .arg(format!(
            "set -o pipefail; {} status --json {} | head -c 10 >/dev/null",
            bin.display(),
            w.results_root().display()
        ))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&piped.stderr);
    assert!(!err.contains("panicked"), "{err}");
    for dir in ["tests", "."] {
        let out = w.cloudai().args(["status", dir]).output().unwrap();
        let text = stdout_of(&out);
        assert_eq!(out.status.code(), Some(1), "{dir}: {text}");
        assert!(text.contains("not a results tree"), "{dir}: {text}");
    }
}

/// An iteration whose submission failed before its files could be written (a full disk): only its record is in the
/// tree, and generate-report still lists it with its reason (issue 41, item 7).
#[test]
fn an_iteration_with_only_its_record_is_reported() {
    let w = Work::new();
    w.standalone();
    w.file("tests/sleep.toml", common::scratch::fixtures::SLEEP);
    w.file(
        "s.toml",
        "name = \"c\"\n[[Tests]]\nid = \"a\"\ntest_name = \"sleep\"\niterations = 2\n",
    );
    let out = w.cloudai().args(common::RUN_S_TOML).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let root = w.results_root();
    // #1 as a full disk leaves it: the record (kept in its reserved space), nothing else
    let dir = root.join("a/1");
    let mut rec = IterationRecord::read(&dir).unwrap();
    rec.status = Status::Failed;
    rec.end_reason = EndReason::SubmitFailed;
    rec.message = "cannot write test-run.toml: No space left on device (os error 28)".into();
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        std::fs::remove_file(e.path()).unwrap();
    }
    rec.write(&dir).unwrap();
    let out = w.generate_report(&root);
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(text.contains("No space left on device"), "{text}");
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["tests"].as_array().unwrap().len(), 2, "{summary}");
    assert_eq!(
        summary["tests"][1]["end_reason"], "submit_failed",
        "{summary}"
    );
}
