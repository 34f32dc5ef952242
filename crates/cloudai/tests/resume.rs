//! Surviving the CLI dying: `kill -9` of `cloudai run`, then `cloudai resume` re-attaches to what runs, collects
//! what ended unwatched, submits what never started, and nothing runs twice — on Standalone, the real Slurm
//! cluster and the Run:ai mock. `status` reads the journal while the run goes on; the lock keeps one owner.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cloudai::results::Status;
use common::{record, stdout_of, Work};

fn spawn(w: &Work, args: &[&str], envs: &[(&str, &str)]) -> Child {
    let mut c = Command::new(assert_cmd::cargo::cargo_bin("cloudai"));
    c.current_dir(w.path())
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (k, v) in envs {
        c.env(k, v);
    }
    c.spawn().unwrap()
}

fn root_of(w: &Work) -> Option<PathBuf> {
    std::fs::read_dir(w.path().join("out"))
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.is_dir())
}

fn wait_until(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn status_json(w: &Work, root: &Path) -> serde_json::Value {
    let out = w
        .cloudai()
        .arg("status")
        .arg(root)
        .arg("--json")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stdout_of(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn resume(w: &Work, root: &Path, envs: &[(&str, &str)]) -> std::process::Output {
    let mut c = w.cloudai();
    c.arg("resume").arg(root);
    for (k, v) in envs {
        c.env(k, v);
    }
    c.timeout(Duration::from_secs(180)).output().unwrap()
}

/// Standalone: three tests, one depending on another; each command appends its directory to runs.log, so a
/// second run of any iteration would show.
#[test]
fn standalone_kill_9_then_resume_ends_every_iteration_once() {
    let w = Work::new();
    w.standalone();
    let log = w.path().join("runs.log");
    w.file(
        "tests/step.toml",
        &format!(
            r#"name = "step"
description = "s"
test_template_name = "BashCmd"
[cmd_args]
cmd = "echo $CLOUDAI_OUTPUT_DIR >> {}; sleep 2"
"#,
            log.display()
        ),
    );
    w.file(
        "s.toml",
        r#"name = "three"
[[Tests]]
id = "a"
test_name = "step"
[[Tests]]
id = "b"
test_name = "step"
iterations = 2
[[Tests.dependencies]]
type = "start_post_comp"
id = "a"
[[Tests]]
id = "c"
test_name = "step"
"#,
    );
    let mut child = spawn(&w, &common::RUN_S_TOML, &[]);
    wait_until("the first jobs", 20, || {
        root_of(&w).is_some_and(|r| {
            r.join("a/0/cloudai-run.json").is_file() && r.join("c/0/cloudai-run.json").is_file()
        })
    });
    let root = root_of(&w).unwrap();
    // status while the owner runs: a and c are under way
    let s = status_json(&w, &root);
    assert_eq!(s["owner_alive"], true, "{s}");
    let state_of = |test: &str| -> Vec<&str> {
        s["iterations"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["test_id"] == test)
            .map(|r| r["state"].as_str().unwrap())
            .collect()
    };
    let states: Vec<&str> = ["a", "c"].iter().flat_map(|t| state_of(t)).collect();
    assert!(
        states.len() == 2
            && states
                .iter()
                .all(|s| ["submitting", "queued", "running"].contains(s)),
        "{states:?}"
    );
    // b waits for a: its two iterations are listed, not started (issue 41, item 7)
    assert_eq!(state_of("b"), ["not started", "not started"], "{s}");
    // a second owner is refused while the first lives
    let out = resume(&w, &root, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout_of(&out));
    assert!(
        stdout_of(&out).contains("is owned by cloudai pid"),
        "{}",
        stdout_of(&out)
    );

    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    // an edit of the user's scenario after the start does not change the running one, and is reported
    let edited = std::fs::read_to_string(w.path().join("s.toml")).unwrap()
        + r#"[[Tests]]
id = "late"
test_name = "step"
"#;
    w.file("s.toml", &edited);
    let out = resume(&w, &root, &[]);
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("re-attached to job"), "{text}");
    assert!(
        text.contains("s.toml changed since the run started"),
        "{text}"
    );
    assert!(
        !root.join("late").exists(),
        "the edit changed the running scenario"
    );
    for (id, it) in [("a", 0), ("b", 0), ("b", 1), ("c", 0)] {
        assert_eq!(
            record(&root, id, it).status,
            Status::Passed,
            "{id} #{it}: {text}"
        );
    }
    let runs = std::fs::read_to_string(&log).unwrap();
    let mut lines: Vec<&str> = runs.lines().collect();
    lines.sort();
    let n = lines.len();
    lines.dedup();
    assert_eq!(
        (n, lines.len()),
        (4, 4),
        "every iteration runs exactly once:\n{runs}"
    );
    assert!(root.join("three.html").is_file() && root.join("summary.json").is_file());
    // after: every iteration ended, nobody owns the tree, resuming again has nothing to do
    let s = status_json(&w, &root);
    assert_eq!(s["owner_alive"], false);
    assert!(
        s["iterations"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["state"] == "PASSED"),
        "{s}"
    );
    let out = resume(&w, &root, &[]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        stdout_of(&out).contains("Nothing to resume"),
        "{}",
        stdout_of(&out)
    );
}

#[test]
fn detach_submits_and_exits_then_resume_finishes() {
    let w = Work::new();
    w.standalone();
    w.file(
        "tests/sleep.toml",
        r#"name = "sleep"
description = "s"
test_template_name = "Sleep"
[cmd_args]
seconds = 2
"#,
    );
    w.file(
        "s.toml",
        r#"name = "d"
[[Tests]]
id = "a"
test_name = "sleep"
[[Tests]]
id = "b"
test_name = "sleep"
[[Tests.dependencies]]
type = "start_post_comp"
id = "a"
"#,
    );
    let started = Instant::now();
    let out = w
        .cloudai()
        .args(common::RUN_S_TOML)
        .arg("--detach")
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(started.elapsed() < Duration::from_secs(2), "detach waited");
    assert!(text.contains("Detached: 1 job(s) submitted"), "{text}");
    // nothing has ended: no empty results table (issue 41, item 11)
    assert!(!text.contains("║ Case"), "{text}");
    let root = root_of(&w).unwrap();
    assert!(!root.join("b/0").exists(), "b waits for a");
    let out = resume(&w, &root, &[]);
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert_eq!(record(&root, "a", 0).status, Status::Passed);
    assert_eq!(record(&root, "b", 0).status, Status::Passed);
}

#[test]
fn dry_run_trees_are_not_resumed() {
    let w = Work::new();
    w.standalone();
    w.file(
        "tests/sleep.toml",
        r#"name = "sleep"
description = "s"
test_template_name = "Sleep"
"#,
    );
    w.file(
        "s.toml",
        r#"name = "d"
[[Tests]]
id = "a"
test_name = "sleep"
"#,
    );
    let out = w.cloudai().args(common::DRY_RUN_S_TOML).output().unwrap();
    assert!(out.status.success());
    let out = resume(&w, &root_of(&w).unwrap(), &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout_of(&out).contains("is a dry-run tree"),
        "{}",
        stdout_of(&out)
    );
}

/// The real cluster: one job runs (all four nodes), the other waits for them; after a kill -9, resume takes both
/// over: same job ids, no new sbatch.
#[test]
fn slurm_kill_9_then_resume_reattaches_without_resubmitting() {
    let scenario = r#"name = "two"
[[Tests]]
id = "first"
test_name = "sleep"
num_nodes = 4
[Tests.cmd_args]
seconds = 6
[[Tests]]
id = "second"
test_name = "sleep"
num_nodes = 4
[Tests.cmd_args]
seconds = 1
"#;
    let Some(w) = common::slurm::slurm_work("", scenario) else {
        return;
    };
    let (count, path) = common::slurm::counting_sbatch(&w);
    let mut child = spawn(&w, &common::slurm::RUN_ARGS, &[("PATH", &path)]);
    wait_until("one job running and one pending", 60, || {
        let Some(root) = root_of(&w) else {
            return false;
        };
        let s = status_json(&w, &root);
        let st: Vec<String> = s["iterations"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|r| r["state"].as_str().unwrap_or("").to_string())
                    .collect()
            })
            .unwrap_or_default();
        st.len() == 2 && st.contains(&"running".to_string()) && st.contains(&"pending".to_string())
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let root = root_of(&w).unwrap();
    let ids: Vec<String> = ["first", "second"]
        .iter()
        .map(|t| record(&root, t, 0).job_id.unwrap())
        .collect();
    let out = resume(&w, &root, &[("PATH", &path)]);
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    for (t, id) in ["first", "second"].iter().zip(&ids) {
        let r = record(&root, t, 0);
        assert_eq!(
            (r.status, r.job_id.as_deref()),
            (Status::Passed, Some(id.as_str())),
            "{t}: {text}"
        );
    }
    let calls = std::fs::read_to_string(&count).unwrap().lines().count();
    assert_eq!(calls, 2, "sbatch was called again: {text}");
}

/// `cloudai run` (with the Run:ai secret) killed with SIGKILL once the mock holds a workload of it and it has run a
/// moment.
async fn kill_9_once_a_workload_exists(m: &runai_mock::MockServer, w: &Work, args: &[&str]) {
    let mut child = spawn(w, args, &[("RUNAI_APP_SECRET", common::runai::SECRET)]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while m.shared.data.lock().unwrap().workloads.is_empty() {
        assert!(Instant::now() < deadline, "nothing was created");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    child.kill().unwrap();
    child.wait().unwrap();
}

/// `cloudai resume TREE` from `cwd`, with the Run:ai secret, off the test's runtime (the mock serves on it).
async fn resume_runai(cwd: PathBuf, tree: String) -> std::process::Output {
    tokio::task::spawn_blocking(move || {
        Command::new(assert_cmd::cargo::cargo_bin("cloudai"))
            .current_dir(cwd)
            .arg("resume")
            .arg(tree)
            .env("RUNAI_APP_SECRET", common::runai::SECRET)
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

/// The Run:ai mock keeps its state; resume finds the workload by its name and identity, creates nothing twice and
/// collects the log and events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runai_kill_9_then_resume_creates_nothing_twice() {
    use common::runai::{mock, requests, sample, setup, RUN, SECRET};
    let m = mock(6.0, None).await;
    let w = Work::new();
    setup(
        &w,
        &m.url(),
        r#"name = "runai"
[[Tests]]
id = "a"
test_name = "nccl"
"#,
    );
    kill_9_once_a_workload_exists(&m, &w, RUN).await;
    let root = root_of(&w).unwrap();
    // status asks the control plane once for what the journal says is unfinished
    let (dir, r) = (w.path().to_path_buf(), root.clone());
    let st = tokio::task::spawn_blocking(move || {
        Command::new(assert_cmd::cargo::cargo_bin("cloudai"))
            .current_dir(dir)
            .args(["status", "--json"])
            .arg(r)
            .env("RUNAI_APP_SECRET", SECRET)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let st: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    assert_eq!(st["iterations"][0]["state"], "running", "{st}");
    let out = resume_runai(w.path().to_path_buf(), root.display().to_string()).await;
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert_eq!(
        requests(&m.journal(), "POST", "/api/v1/workloads/trainings").len(),
        1,
        "{text}"
    );
    assert_eq!(record(&root, "a", 0).status, Status::Passed, "{text}");
    assert_eq!(
        std::fs::read_to_string(root.join("a/0/stdout.txt")).unwrap(),
        sample("single-node-8gpu-a100-allreduce-v2.19.4.txt")
    );
    assert!(std::fs::read_to_string(root.join("a/0/events.txt"))
        .unwrap()
        .contains("reason=Started"));
}

/// The default `./results`, a relative output directory: after kill -9, `resume` given the tree by another spelling
/// of its path (relative to another directory) computes the same workload names as the run did, re-attaches, and the
/// workload ends deleted — nothing is left holding GPUs (issue 41, item 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runai_kill_9_with_a_relative_output_dir_then_resume_re_attaches_and_deletes() {
    use common::runai::{mock, requests, setup, RUN};
    let m = mock(6.0, None).await;
    let w = Work::new();
    setup(
        &w,
        &m.url(),
        r#"name = "runai"
[[Tests]]
id = "a"
test_name = "nccl"
"#,
    );
    let mut args = RUN.to_vec();
    args.extend(["--output-dir", "./results"]);
    kill_9_once_a_workload_exists(&m, &w, &args).await;
    let results = w.path().join("results");
    let name = std::fs::read_dir(&results)
        .unwrap()
        .flatten()
        .find(|e| e.path().is_dir())
        .unwrap()
        .file_name();
    let out = resume_runai(results.clone(), format!("./{}", name.to_string_lossy())).await;
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(!text.contains("cannot re-attach"), "{text}");
    assert_eq!(
        requests(&m.journal(), "POST", "/api/v1/workloads/trainings").len(),
        1,
        "{text}"
    );
    let root = results.join(name);
    assert_eq!(record(&root, "a", 0).status, Status::Passed, "{text}");
    let data = m.shared.data.lock().unwrap();
    assert!(
        data.workloads.iter().all(|wl| wl.deleted_at.is_some()),
        "a workload was left: {:?}",
        data.workloads
            .iter()
            .map(|wl| (&wl.name, wl.deleted_at))
            .collect::<Vec<_>>()
    );
}

/// A finished tree with a second iteration still to run (the first run was killed after one): its records are lost
/// or damaged in every way a disk or a person can; `resume` runs only what never ran (issue 41, item 3).
#[test]
fn a_lost_or_damaged_record_is_repaired_from_the_journal_and_nothing_that_ran_runs_again() {
    let w = Work::new();
    w.standalone();
    let log = w.path().join("runs.log");
    w.file(
        "tests/step.toml",
        &format!(
            r#"name = "step"
description = "s"
test_template_name = "BashCmd"
[cmd_args]
cmd = "echo $CLOUDAI_OUTPUT_DIR >> {}"
"#,
            log.display()
        ),
    );
    w.file(
        "s.toml",
        r#"name = "four"
[[Tests]]
id = "a"
test_name = "step"
iterations = 4
"#,
    );
    let out = w.cloudai().args(common::RUN_S_TOML).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let root = root_of(&w).unwrap();
    let runs = || std::fs::read_to_string(&log).unwrap().lines().count();
    assert_eq!(runs(), 4);
    // #3 never ran (as if cloudai was killed before it): no directory, no journal entry
    std::fs::remove_dir_all(root.join("a/3")).unwrap();
    let journal = root.join(".cloudai/journal.jsonl");
    let kept: String = std::fs::read_to_string(&journal)
        .unwrap()
        .lines()
        .filter(|l| !l.contains("\"iteration\":3"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&journal, kept).unwrap();
    // #0 deleted, #1 damaged, #2 emptied
    std::fs::remove_file(root.join("a/0/cloudai-run.json")).unwrap();
    std::fs::write(
        root.join("a/1/cloudai-run.json"),
        "{\"test_id\": \"a\", \"itera",
    )
    .unwrap();
    std::fs::write(root.join("a/2/cloudai-run.json"), "").unwrap();
    let out = resume(&w, &root, &[]);
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert_eq!(runs(), 5, "only #3 ran again: {text}");
    for i in 0..3 {
        assert!(
            text.contains(&format!("a #{i}: its cloudai-run.json was")),
            "{i}: {text}"
        );
        assert_eq!(record(&root, "a", i).status, Status::Passed, "{i}: {text}");
    }
    assert_eq!(record(&root, "a", 3).status, Status::Passed);
    // without the journal, an iteration that left output is named, never run over
    std::fs::remove_file(root.join(".cloudai/journal.jsonl")).unwrap();
    std::fs::remove_file(root.join("a/1/cloudai-run.json")).unwrap();
    std::fs::write(root.join("a/1/stdout.txt"), "kept\n").unwrap();
    let out = resume(&w, &root, &[]);
    let text = stdout_of(&out);
    assert_eq!(runs(), 5, "{text}");
    assert!(text.contains("a #1: its cloudai-run.json is missing and the journal has no copy, but it left output: it is not run again"), "{text}");
    assert_eq!(
        std::fs::read_to_string(root.join("a/1/stdout.txt")).unwrap(),
        "kept\n"
    );
}

/// `.cloudai/run.json` that is not a file of ours: a FIFO (a reader would block for ever, holding the tree's lock)
/// or `/dev/zero` (a reader would grow without end): one clear error at once (issue 41, item 4).
#[test]
fn a_run_json_that_is_a_fifo_or_a_device_is_refused_at_once() {
    let w = Work::new();
    w.standalone();
    w.file("tests/sleep.toml", common::scratch::fixtures::SLEEP);
    w.file(
        "s.toml",
        r#"name = "one"
[[Tests]]
id = "a"
test_name = "sleep"
"#,
    );
    let out = w.cloudai().args(common::RUN_S_TOML).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let root = root_of(&w).unwrap();
    let run_json = root.join(".cloudai/run.json");
    for how in ["fifo", "device"] {
        std::fs::remove_file(&run_json).ok();
        if how == "fifo" {
            assert!(Command::new("mkfifo")
                .arg(&run_json)
                .status()
                .unwrap()
                .success());
        } else {
            std::os::unix::fs::symlink("/dev/zero", &run_json).unwrap();
        }
        let started = Instant::now();
        let out = resume(&w, &root, &[]);
        let text = stdout_of(&out);
        assert_eq!(out.status.code(), Some(1), "{how}: {text}");
        assert!(text.contains("not a regular file"), "{how}: {text}");
        assert!(started.elapsed() < Duration::from_secs(10), "{how}");
        // the lock was given back: the next resume is not told another process owns the tree
        assert!(!text.contains("owned by"), "{text}");
    }
}

/// A tree cloudai was killed in before it recorded anything (its directory, perhaps `.cloudai/` half written): resume
/// says what happened and what to do, instead of calling it a tree of another version (issue 41, item 7).
#[test]
fn a_tree_killed_before_it_started_anything_is_named_as_such() {
    let w = Work::new();
    for stub in [
        "a_2026-12-06_01-00-00",
        "b_2026-12-06_01-00-00/.cloudai/inputs",
    ] {
        let dir = w.path().join("out").join(stub);
        std::fs::create_dir_all(&dir).unwrap();
        let root = w.path().join("out").join(stub.split('/').next().unwrap());
        let out = resume(&w, &root, &[]);
        let text = stdout_of(&out);
        assert_eq!(out.status.code(), Some(1), "{text}");
        assert!(
            text.contains("cloudai was stopped before this run started anything"),
            "{text}"
        );
    }
}
