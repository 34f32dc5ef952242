//! Slurm under faults, on the real local cluster: jobs that can never start, jobs that wait too long, a node that
//! fails under a running job (Slurm requeues it), and a job cancelled by someone else. Tests here change node
//! states, so they run one at a time.

use crate::common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cloudai::results::{EndReason, Status};
use common::slurm::{cloudai_run, slurm_work};
use common::{record, stdout_of, t, Work};

/// These tests change node states and fill the cluster: each has it alone.
pub(crate) fn lock() -> common::slurm::Alone {
    common::slurm::alone()
}

fn scontrol(args: &[&str]) {
    let _ = Command::new("scontrol").args(args).output();
}

/// Puts a node back in service whatever happened to the test, and waits until it answers again (the next test
/// must find all four nodes usable).
pub(crate) struct Resume(pub(crate) &'static str);
impl Drop for Resume {
    fn drop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            scontrol(&["update", &format!("nodename={}", self.0), "state=resume"]);
            let o = Command::new("sinfo")
                .args(["-h", "-N", "-n", self.0, "-o", "%t"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                .unwrap_or_default();
            if matches!(o.as_str(), "idle" | "mix" | "alloc") || Instant::now() > deadline {
                return;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

/// Drains a node with that reason; it is put back in service when the guard drops.
fn drain(node: &'static str, reason: &str) -> Resume {
    let guard = Resume(node);
    scontrol(&[
        "update",
        &format!("nodename={node}"),
        "state=drain",
        &format!("reason={reason}"),
    ]);
    guard
}

/// `squeue` state, reason and nodes of a job (`None` once it left the queue).
fn job(id: &str) -> Option<(String, String, String)> {
    let o = Command::new("squeue")
        .args(["-h", "-j", id, "-o", "%T|%r|%N"])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let mut it = text.splitn(3, '|');
    Some((
        it.next()?.to_string(),
        it.next()?.to_string(),
        it.next().unwrap_or("").to_string(),
    ))
}

fn wait_for<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `cloudai run` in the background, its console going to `console.txt`.
fn spawn(w: &Work) -> Child {
    let log = std::fs::File::create(w.path().join("console.txt")).unwrap();
    Command::new(assert_cmd::cargo::cargo_bin("cloudai"))
        .current_dir(w.path())
        .args(common::slurm::RUN_ARGS)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// The job id cloudai submitted, from its debug log.
fn submitted(w: &Work) -> String {
    wait_for("the submission", Duration::from_secs(60), || {
        let log = std::fs::read_to_string(w.path().join("debug.log")).unwrap_or_default();
        log.lines()
            .filter_map(|l| l.split("Submitted slurm job: ").nth(1))
            .map(|id| id.trim().to_string())
            .next()
    })
}

fn finish(w: &Work, mut child: Child) -> (i32, String) {
    let deadline = Instant::now() + Duration::from_secs(120);
    let code = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code().unwrap_or(-1);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("cloudai did not finish");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    (
        code,
        std::fs::read_to_string(w.path().join("console.txt")).unwrap(),
    )
}

#[test]
fn a_job_asking_more_nodes_than_exist_ends_unschedulable() {
    let _g = lock();
    let scenario = r#"name = "big"
[[Tests]]
id = "big"
test_name = "sleep"
num_nodes = 8
iterations = 2
"#;
    let Some(w) = slurm_work("", scenario) else {
        return;
    };
    let out = cloudai_run(&w, None);
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    let root = w.results_root();
    let r = record(&root, "big", 0);
    assert_eq!(
        (r.status, r.end_reason),
        (Status::Failed, EndReason::Unschedulable),
        "{text}"
    );
    // Slurm says PartitionNodeLimit or PartitionConfig (with GPUs per node asked), in its own words
    let reason = r
        .queue_states
        .iter()
        .find(|q| q.state == "PENDING" && q.reason.starts_with("Partition"))
        .map(|q| q.reason.clone())
        .unwrap_or_else(|| panic!("no pending reason kept: {r:?}"));
    assert!(
        r.message.contains(&format!("(Slurm: {reason})")),
        "{}",
        r.message
    );
    // monitor_interval = 1: judged and cancelled within two intervals of the submission (debug.log's clock)
    let log = std::fs::read_to_string(w.path().join("debug.log")).unwrap();
    let at = |needle: &str| {
        let line = log
            .lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("{needle}: {log}"));
        chrono::NaiveDateTime::parse_from_str(&line[..23], "%Y-%m-%d %H:%M:%S,%3f").unwrap()
    };
    let decided = at("cancelling it") - at("Submitted slurm job");
    assert!(
        decided <= chrono::Duration::milliseconds(2200),
        "decided after {decided}"
    );
    assert!(t(&r.ended_at) > t(&r.submitted_at));
    assert!(
        text.contains(&format!(
            "job {} (big) pending: {reason}",
            r.job_id.as_ref().unwrap()
        )),
        "{text}"
    );
    assert!(
        job(r.job_id.as_ref().unwrap()).is_none(),
        "the job is still queued"
    );
    // the second iteration asks for the same 8 nodes: not submitted
    assert!(!root.join("big/1").exists(), "{text}");
    let summary = std::fs::read_to_string(root.join("summary.json")).unwrap();
    assert!(
        summary.contains(r#""end_reason": "unschedulable""#),
        "{summary}"
    );
}

#[test]
fn a_job_waiting_for_a_drained_node_ends_unschedulable() {
    let _g = lock();
    let scenario = r#"name = "pinned"
[[Tests]]
id = "pinned"
test_name = "sleep"
nodes = ["node004"]
"#;
    let Some(w) = slurm_work("", scenario) else {
        return;
    };
    let _resume = drain("node004", "bad-gpu-cloudai-test");
    let out = cloudai_run(&w, None);
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    let r = record(&w.results_root(), "pinned", 0);
    assert_eq!(
        (r.status, r.end_reason),
        (Status::Failed, EndReason::Unschedulable),
        "{text}"
    );
    assert!(
        r.message.contains("node004 is drain") && r.message.contains("bad-gpu-cloudai-test"),
        "{}",
        r.message
    );
}

#[test]
fn a_job_pending_past_max_pending_time_is_cancelled() {
    let _g = lock();
    // a begin time an hour away: Slurm keeps it PENDING (BeginTime), a reason that waiting does resolve
    let scenario = r#"name = "later"
[[Tests]]
id = "later"
test_name = "sleep"
max_pending_time = "3s"
"#;
    let Some(w) = slurm_work("", scenario) else {
        return;
    };
    w.file(
        "system.toml",
        &format!(
            r#"extra_sbatch_args = ["--begin=now+3600"]
{}"#,
            common::slurm::SYSTEM
        ),
    );
    let started = Instant::now();
    let out = cloudai_run(&w, None);
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
    let r = record(&w.results_root(), "later", 0);
    assert_eq!(
        (r.status, r.end_reason),
        (Status::Failed, EndReason::PendingTooLong),
        "{text}"
    );
    assert!(
        r.message.contains("max_pending_time (00:00:03)") && r.message.contains("BeginTime"),
        "{}",
        r.message
    );
    assert!(
        job(r.job_id.as_ref().unwrap()).is_none(),
        "the job is still queued"
    );
}

#[test]
fn a_node_failing_under_a_running_job_is_recorded_as_an_attempt() {
    let _g = lock();
    let scenario = r#"name = "requeue"
[[Tests]]
id = "long"
test_name = "sleep"
[Tests.cmd_args]
seconds = 5
"#;
    let Some(w) = slurm_work("", scenario) else {
        return;
    };
    let child = spawn(&w);
    let id = submitted(&w);
    let node = wait_for("the job to run", Duration::from_secs(60), || {
        job(&id)
            .filter(|(st, _, n)| st == "RUNNING" && !n.is_empty())
            .map(|(_, _, n)| n)
    });
    let node: &'static str = Box::leak(node.into_boxed_str());
    // cloudai has seen it running too
    wait_for(
        "cloudai to see the job run",
        Duration::from_secs(30),
        || {
            let console = std::fs::read_to_string(w.path().join("console.txt")).unwrap_or_default();
            console
                .contains(&format!("job {id} (long) running"))
                .then_some(())
        },
    );
    let _resume = Resume(node);
    scontrol(&[
        "update",
        &format!("nodename={node}"),
        "state=down",
        "reason=cloudai-test-node-failure",
    ]);
    // Slurm requeues the job with a begin time two minutes away; let it start again now
    wait_for("the requeue", Duration::from_secs(60), || {
        job(&id).filter(|(st, _, _)| st == "PENDING").map(|_| ())
    });
    scontrol(&["update", &format!("nodename={node}"), "state=resume"]);
    // long enough for two polls (monitor_interval = 1) to see it pending
    std::thread::sleep(Duration::from_millis(2500));
    // a busy machine can take a while to see the node answer again: keep resuming it and moving the start up, every
    // 2 s (ten updates a second while the old run's step was still completing once crashed slurmctld)
    let mut polls = 0u32;
    wait_for("the job to run again", Duration::from_secs(240), || {
        if polls.is_multiple_of(20) {
            scontrol(&["update", &format!("nodename={node}"), "state=resume"]);
            scontrol(&["update", &format!("jobid={id}"), "starttime=now"]);
        }
        polls += 1;
        job(&id).filter(|(st, _, _)| st == "RUNNING").map(|_| ())
    });
    let (code, text) = finish(&w, child);
    assert_eq!(code, 0, "{text}");
    let root = w.results_root();
    let r = record(&root, "long", 0);
    assert_eq!(r.status, Status::Passed, "{text}");
    assert!(
        text.contains(&format!(
            "Slurm job {id} was requeued: its run on {node} ended NODE_FAIL"
        )),
        "{text}"
    );
    assert_eq!(r.attempts.len(), 2, "{:?}", r.attempts);
    assert_eq!(
        (r.attempts[0].state.as_str(), r.attempts[0].nodes.as_slice()),
        ("NODE_FAIL", [node.to_string()].as_slice())
    );
    assert_eq!(r.attempts[1].state, "COMPLETED");
    // states in order (a state is listed again when only its reason changes)
    let mut states: Vec<&str> = r.queue_states.iter().map(|q| q.state.as_str()).collect();
    states.dedup();
    assert!(
        states
            .windows(3)
            .any(|w| w == ["RUNNING", "PENDING", "RUNNING"]),
        "{states:?}\n{text}"
    );
    let html = std::fs::read_to_string(root.join("requeue.html")).unwrap();
    assert!(
        html.contains("requeued, 2 runs") && html.contains(&format!("#1 NODE_FAIL on {node}")),
        "{html}"
    );
}

#[test]
fn a_job_cancelled_outside_cloudai_ends_cancelled_by_scheduler() {
    let _g = lock();
    let scenario = r#"name = "ext"
[[Tests]]
id = "victim"
test_name = "sleep"
[Tests.cmd_args]
seconds = 300
"#;
    let Some(w) = slurm_work("", scenario) else {
        return;
    };
    let child = spawn(&w);
    let id = submitted(&w);
    wait_for("the job to run", Duration::from_secs(60), || {
        job(&id).filter(|(st, _, _)| st == "RUNNING").map(|_| ())
    });
    let o = Command::new("scancel").arg(&id).output().unwrap();
    assert!(o.status.success());
    let (code, text) = finish(&w, child);
    assert_eq!(code, 3, "{text}");
    let r = record(&w.results_root(), "victim", 0);
    assert_eq!(
        (r.status, r.end_reason),
        (Status::Cancelled, EndReason::CancelledByScheduler),
        "{text}"
    );
    assert!(r.message.contains("CANCELLED by 0"), "{}", r.message);
    assert_eq!(
        r.scheduler_state
            .as_deref()
            .map(|s| s.starts_with("CANCELLED")),
        Some(true)
    );
}

#[test]
fn a_node_failing_the_preflight_check_stops_the_test_before_it_runs() {
    let _g = lock();
    let scenario = r#"name = "pre"
[[Tests]]
id = "nccl"
test_name = "nccl"
nodes = ["node[001-002]"]
"#;
    let Some(w) = slurm_work("", scenario) else {
        return;
    };
    let sys = std::fs::read_to_string(w.path().join("system.toml")).unwrap();
    w.file(
        "system.toml",
        &sys.replacen(
            "[[partitions]]",
            "[preflight]\nenable = true\n\n[[partitions]]",
            1,
        ),
    );
    let marker = w.path().join("main-command-ran");
    // node002 shows 7 of its 8 GPUs
    let smi = w.file(
        "bin/nvidia-smi",
        r#"#!/bin/bash
n=8; [ "$SLURMD_NODENAME" = node002 ] && n=7
for i in $(seq 0 $((n-1))); do echo "$i, NVIDIA H100 80GB HBM3"; done
"#,
    );
    let nccl = w.file(
        "bin/all_reduce_perf_mpi",
        &format!("#!/bin/bash\ntouch {}\n", marker.display()),
    );
    for p in [&smi, &nccl] {
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let out = cloudai_run(&w, Some(&w.path().join("bin")));
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    let root = w.results_root();
    let r = record(&root, "nccl", 0);
    assert_eq!(
        (r.status, r.end_reason),
        (Status::Failed, EndReason::PreflightFailed),
        "{text}"
    );
    assert!(
        r.message.contains("node002 (7 of 8 GPUs)") && !r.message.contains("node001"),
        "{}",
        r.message
    );
    assert!(
        !marker.exists(),
        "the main command ran after a failed pre-flight"
    );
    let kept = std::fs::read_to_string(root.join("nccl/0/preflight/node002.out")).unwrap();
    assert_eq!(kept.lines().count(), 7);
    assert!(root.join("nccl/0/preflight/node001.out").is_file());
}

/// `find-bad-nodes` on node[001-004] with a stand-in NCCL binary whose busbw is cut 5x whenever its allocation
/// holds `slow` (rank 0 prints, like nccl-tests under MPI).
fn find_bad_nodes(slow: Option<&str>) -> (i32, String, serde_json::Value, Work) {
    let check = slow.map_or("false".to_string(), |n| {
        format!(r#"scontrol show hostnames "$SLURM_JOB_NODELIST" | grep -qx {n}"#)
    });
    find_bad_nodes_where(&check)
}

/// As [`find_bad_nodes`], slow whenever the shell condition `check` holds in the job.
fn find_bad_nodes_where(check: &str) -> (i32, String, serde_json::Value, Work) {
    find_bad_nodes_with(check, &[])
}

/// As [`find_bad_nodes_where`], with more arguments.
pub(crate) fn find_bad_nodes_with(
    check: &str,
    extra: &[&str],
) -> (i32, String, serde_json::Value, Work) {
    find_bad_nodes_on(common::slurm::SYSTEM, "node[001-004]", check, extra)
}

/// As [`find_bad_nodes_with`], on another system and other nodes.
fn find_bad_nodes_on(
    system: &str,
    nodes: &str,
    check: &str,
    extra: &[&str],
) -> (i32, String, serde_json::Value, Work) {
    find_bad_nodes_full(system, nodes, check, extra, &[])
}

/// As [`find_bad_nodes_on`], with more stand-in programs in the work directory's `bin/` (name, script).
pub(crate) fn find_bad_nodes_full(
    system: &str,
    nodes: &str,
    check: &str,
    extra: &[&str],
    bins: &[(&str, String)],
) -> (i32, String, serde_json::Value, Work) {
    let w = slurm_work(
        "",
        r#"name = "unused"
"#,
    )
    .expect("cluster checked by the caller");
    w.file("system.toml", system);
    let sample = std::fs::read_to_string(
        common::data().join("nccl-samples/single-node-8gpu-a100-allreduce-v2.19.4.txt"),
    )
    .unwrap();
    let good = w.file("good.txt", &sample);
    let bad = w.file("bad.txt", &common::scaled(&sample, 0, 0.2));
    let bin = w.file(
        "bin/all_reduce_perf_mpi",
        &format!(
            r#"#!/bin/bash
[ "${{SLURM_PROCID:-0}}" = 0 ] || exit 0
if {check}; then {}; else {}; fi
"#,
            common::slurm::print_as_this_job(&bad),
            common::slurm::print_as_this_job(&good)
        ),
    );
    std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    for (name, script) in bins {
        let p = w.file(&format!("bin/{name}"), script);
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let out = w
        .cloudai_with_bin()
        .args(common::FIND_BAD_NODES_NCCL)
        .args(["--nodes", nodes, "--output-dir", "out"])
        .args(extra)
        .timeout(Duration::from_secs(300))
        .output()
        .unwrap();
    let text = stdout_of(&out);
    let root = w.results_root();
    // a requalification writes requalify.json instead
    let file = ["bad-nodes.json", "requalify.json"]
        .iter()
        .map(|f| root.join(f))
        .find(|f| f.exists());
    // (none when cloudai was killed before writing it: the caller looks at what it needs)
    let report: serde_json::Value = file
        .map(|f| serde_json::from_slice(&std::fs::read(f).unwrap()).unwrap())
        .unwrap_or_default();
    (out.status.code().unwrap_or(-1), text, report, w)
}

#[test]
fn find_bad_nodes_names_the_slow_node_and_clears_its_partner() {
    let _g = lock();
    if !common::slurm::cluster_up() {
        return;
    }
    let (code, text, report, w) = find_bad_nodes(Some("node003"));
    let root = w.results_root();
    assert_eq!(code, 3, "{text}");
    assert_eq!(report["bad"], serde_json::json!(["node003"]), "{report}");
    assert_eq!(report["suspect"], serde_json::json!([]), "{report}");
    for v in report["verdicts"].as_array().unwrap() {
        let want = if v["node"] == "node003" {
            "bad"
        } else {
            "good"
        };
        assert_eq!(v["verdict"], want, "{v}");
        assert!(!v["evidence"].as_array().unwrap().is_empty());
    }
    // 4 nodes, one bad: 2 pairs, then node003 and node004 each with a good node
    let jobs = report["jobs"].as_u64().unwrap();
    assert!(
        jobs <= cloudai::bad_nodes::plan::Plan::bound(4, 1) as u64,
        "{jobs} jobs"
    );
    assert_eq!(jobs, 4);
    let node003 = report["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["node"] == "node003")
        .unwrap();
    let ev = node003["evidence"].as_array().unwrap();
    assert!(
        ev.iter().all(|e| e["passed"] == false
            && e["job_id"].is_string()
            && e["busbw"].as_f64().unwrap() < 40.0),
        "{node003}"
    );
    assert!(text.contains("round 1 runs 2 pair job(s)"), "{text}");
    let md = std::fs::read_to_string(root.join("bad-nodes.md")).unwrap();
    assert!(md.contains("| node003 | bad |"), "{md}");
    assert!(std::fs::read_to_string(root.join("bad-nodes.html"))
        .unwrap()
        .contains("bad: node003"));
}

#[test]
fn find_bad_nodes_without_a_bad_node_names_none() {
    let _g = lock();
    if !common::slurm::cluster_up() {
        return;
    }
    let (code, text, report, _) = find_bad_nodes(None);
    assert_eq!(code, 0, "{text}");
    assert_eq!(
        (
            report["bad"].as_array().unwrap().len(),
            report["suspect"].as_array().unwrap().len()
        ),
        (0, 0),
        "{report}"
    );
    assert_eq!(report["jobs"], 2);
}

#[test]
fn find_bad_nodes_names_a_slow_link_between_two_good_nodes() {
    let _g = lock();
    if !common::slurm::cluster_up() {
        return;
    }
    // slow only when node001 and node002 run together: each passes with another partner
    let both = r#"h=$(scontrol show hostnames "$SLURM_JOB_NODELIST"); echo "$h" | grep -qx node001 && echo "$h" | grep -qx node002"#;
    let (code, text, report, w) = find_bad_nodes_where(both);
    assert_eq!(code, 3, "{text}");
    assert_eq!(report["bad"], serde_json::json!([]), "{report}");
    assert_eq!(report["suspect"], serde_json::json!([]), "{report}");
    let links = report["bad_links"].as_array().unwrap();
    assert_eq!(links.len(), 1, "{report}");
    assert_eq!(links[0]["pair"], serde_json::json!(["node001", "node002"]));
    assert!(links[0]["busbw"].as_f64().unwrap() < links[0]["threshold"].as_f64().unwrap());
    for n in ["node001", "node002"] {
        assert!(
            !links[0]["cleared_by"][n].as_array().unwrap().is_empty(),
            "{report}"
        );
    }
    assert!(text.contains("bad links: node001↔node002"), "{text}");
    // the CI cluster's topology.conf puts node[001-002] under leaf1: the link's path is that one switch
    assert_eq!(links[0]["path"], serde_json::json!(["leaf1"]), "{report}");
    assert_eq!(
        report["topology"],
        "Slurm topology (scontrol show topology)"
    );
    let md = std::fs::read_to_string(w.results_root().join("bad-nodes.md")).unwrap();
    assert!(
        md.contains("## Bad links") && md.contains("node001↔node002 (both under switch leaf1)"),
        "{md}"
    );
}

#[test]
fn find_bad_nodes_repeat_calls_a_node_failing_some_tries_flaky() {
    let _g = lock();
    if !common::slurm::cluster_up() {
        return;
    }
    // node003 is slow in every other job it runs (its 1st, 3rd, …): round 1 fails with node004, then with
    // --repeat 3 it passes, fails, passes with cleared partners
    let count = std::env::temp_dir().join(format!("cloudai-flaky-{}", std::process::id()));
    let _ = std::fs::remove_file(&count);
    let check = format!(
        r#"if scontrol show hostnames "$SLURM_JOB_NODELIST" | grep -qx node003; then n=$(( $(cat {c} 2>/dev/null || echo 0) + 1 )); echo $n > {c}; [ $((n % 2)) = 1 ]; else false; fi"#,
        c = count.display()
    );
    let (code, text, report, _w) = find_bad_nodes_with(&check, &["--repeat", "3"]);
    let _ = std::fs::remove_file(&count);
    assert_eq!(code, 3, "{text}");
    assert_eq!(report["bad"], serde_json::json!([]), "{report}");
    assert_eq!(
        report["suspect"],
        serde_json::json!(["node003"]),
        "{report}"
    );
    assert_eq!(
        report["flaky"]["node003"],
        serde_json::json!({"passed": 2, "failed": 1}),
        "{report}"
    );
    // node004, round 1's partner, passes all three tries
    let v = report["verdicts"].as_array().unwrap();
    let node4 = v.iter().find(|n| n["node"] == "node004").unwrap();
    assert_eq!(node4["verdict"], "good", "{report}");
    assert_eq!(
        node4["trials"],
        serde_json::json!({"passed": 3, "failed": 0})
    );
    assert_eq!(report["jobs"], 2 + 2 * 3, "{report}");
    assert_eq!(report["bad_links"], serde_json::json!([]), "{report}");
}

#[test]
fn find_bad_nodes_names_a_drained_node_unavailable_and_pairs_the_rest() {
    let _g = lock();
    if !common::slurm::cluster_up() {
        return;
    }
    let _resume = drain("node004", "gpu-fell-off-the-bus");
    let (code, text, report, w) = find_bad_nodes(None);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("Leaving out node node004: Slurm state drain"),
        "{text}"
    );
    assert_eq!(
        report["unavailable"],
        serde_json::json!(["node004"]),
        "{report}"
    );
    let v = report["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["node"] == "node004")
        .cloned()
        .unwrap();
    assert_eq!(v["verdict"], "unavailable", "{v}");
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .contains("gpu-fell-off-the-bus"),
        "{v}"
    );
    assert!(v["evidence"].as_array().unwrap().is_empty(), "{v}");
    // no job was pinned to it
    let root = w.results_root();
    for round in std::fs::read_dir(&root).unwrap().flatten() {
        for t in std::fs::read_dir(round.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            assert!(
                !t.file_name().to_string_lossy().contains("node004"),
                "{}",
                t.path().display()
            );
        }
    }
}

#[test]
fn find_bad_nodes_dry_run_writes_the_plan_and_round_one_scripts_and_submits_nothing() {
    let _g = lock();
    if !common::slurm::cluster_up() {
        return;
    }
    let Some(w) = slurm_work(
        "",
        r#"name = "unused"
"#,
    ) else {
        return;
    };
    let before = Command::new("squeue")
        .args(["-h", "-o", "%i"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).lines().count())
        .unwrap_or(0);
    let out = w
        .cloudai_with_bin()
        .args(common::FIND_BAD_NODES_NCCL)
        .args([
            "--nodes",
            "node[001-004]",
            "--output-dir",
            "out",
            "--dry-run",
        ])
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("round 1 runs 2 pair job(s) at once: node001+node002, node003+node004"),
        "{text}"
    );
    let root = w.results_root();
    let plan: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("plan.json")).unwrap()).unwrap();
    assert_eq!(plan["jobs_bound"]["one_bad_node"], 4, "{plan}");
    for pair in ["node001+node002", "node003+node004"] {
        let script = root
            .join("round-1")
            .join(pair)
            .join("0/cloudai_sbatch_script.sh");
        let text = std::fs::read_to_string(&script)
            .unwrap_or_else(|e| panic!("{}: {e}", script.display()));
        assert!(
            text.contains(&format!("--nodelist={}", pair.replace('+', ","))),
            "{text}"
        );
    }
    assert!(!root.join("bad-nodes.json").exists());
    let after = Command::new("squeue")
        .args(["-h", "-o", "%i"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).lines().count())
        .unwrap_or(0);
    assert_eq!(before, after, "a job was submitted");
}

pub(crate) fn node_state(node: &str) -> (String, String) {
    let o = Command::new("sinfo")
        .args(["-h", "-N", "-n", node, "-o", "%t|%E"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let (st, reason) = o.split_once('|').unwrap_or((&o, ""));
    (st.to_string(), reason.to_string())
}

#[test]
fn find_bad_nodes_drains_only_the_bad_node_and_the_undo_works() {
    let _g = lock();
    if !common::slurm::cluster_up() {
        return;
    }
    let _resume = Resume("node003");
    let slow = r#"scontrol show hostnames "$SLURM_JOB_NODELIST" | grep -qx node003"#;
    let (code, text, report, _w) = find_bad_nodes_with(slow, &["--drain"]);
    assert_eq!(code, 3, "{text}");
    let actions = report["actions"].as_array().unwrap();
    assert_eq!(actions.len(), 1, "{report}");
    assert_eq!(actions[0]["node"], "node003");
    assert_eq!(actions[0]["ok"], true, "{report}");
    let (st, reason) = node_state("node003");
    assert!(st.starts_with("drain") || st.starts_with("drng"), "{st}");
    // our mark: the run that drained it, then the evidence
    assert!(reason.starts_with("cloudai:find-bad-nodes_"), "{reason}");
    assert!(reason.contains("find-bad-nodes: node003"), "{reason}");
    for other in ["node001", "node002", "node004"] {
        let (st, _) = node_state(other);
        assert!(!st.starts_with("dr"), "{other} is {st}");
    }
    assert!(text.contains("Changed node node003"), "{text}");
    // the recorded undo puts it back
    let undo = actions[0]["undo"].as_str().unwrap();
    let ok = Command::new("sh").args(["-c", undo]).status().unwrap();
    assert!(ok.success(), "{undo}");
    let (st, _) = node_state("node003");
    assert!(!st.starts_with("dr"), "still {st} after {undo}");
}

#[test]
fn find_bad_nodes_refuses_to_drain_more_than_the_allowed_fraction() {
    let _g = lock();
    if !common::slurm::cluster_up() {
        return;
    }
    let _resume = Resume("node003");
    let slow = r#"scontrol show hostnames "$SLURM_JOB_NODELIST" | grep -qx node003"#;
    let (code, text, report, _w) =
        find_bad_nodes_with(slow, &["--drain", "--max-act-fraction", "10"]);
    assert_eq!(code, 3, "{text}");
    assert!(report["actions"].is_null(), "{report}");
    assert!(
        report["actions_refused"]
            .as_str()
            .unwrap()
            .contains("1 of 4 checked nodes judged bad (25%)"),
        "{report}"
    );
    let (st, _) = node_state("node003");
    assert!(!st.starts_with("dr"), "node003 is {st}");
}

/// Every node slow (a slow majority of 4 of 4): round 1's pairs cannot tell, but the hardware's expectation (the
/// adapters the system declares) can: every pair fails, the finding is cluster-wide, all four are named, exit 3, and
/// `--drain` changes nothing.
#[test]
fn find_bad_nodes_names_a_cluster_wide_slowness_and_refuses_to_drain() {
    let _g = lock();
    if !common::slurm::cluster_up() {
        return;
    }
    // top-level fields go before the system's tables
    let system = format!(
        "nics_per_node = 8\nnic_gbps = 200\n{}",
        common::slurm::SYSTEM
    );
    let (code, text, report, _w) = find_bad_nodes_on(
        &system,
        "node[001-004]",
        "true",
        &["--drain", "--max-act-fraction", "100"],
    );
    assert_eq!(code, 3, "{text}");
    let wide = report["cluster_wide"]
        .as_str()
        .unwrap_or_else(|| panic!("{report}"));
    assert!(
        wide.starts_with("cluster-wide: 2 of 2 pairs failed"),
        "{wide}"
    );
    let mut named: Vec<String> = ["bad", "suspect"]
        .iter()
        .flat_map(|k| report[k].as_array().cloned().unwrap_or_default())
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    named.sort();
    assert_eq!(
        named,
        ["node001", "node002", "node003", "node004"],
        "{report}"
    );
    assert!(
        report["actions_refused"]
            .as_str()
            .unwrap()
            .contains("cluster-wide"),
        "{report}"
    );
    assert!(report["actions"].is_null(), "{report}");
    // each pair failed against the hardware, in the pair's own words
    let first = &report["verdicts"][0]["evidence"][0];
    assert!(
        first["reason"]
            .as_str()
            .unwrap()
            .contains("of the 180 GB/s expected for 8 × 200 Gb/s adapters per node"),
        "{first}"
    );
    for n in ["node001", "node002", "node003", "node004"] {
        let (st, _) = node_state(n);
        assert!(!st.starts_with("dr"), "{n} is {st}");
    }
}

/// A slow majority on sixteen nodes (partition `wide`): twelve run at a fifth of the speed. Round 1's median pair is
/// a slow one; judged against the fastest pair instead, the twelve are named bad, the finding is cluster-wide, exit
/// 3, and `--drain` changes nothing.
#[test]
fn find_bad_nodes_names_twelve_slow_nodes_of_sixteen_and_refuses_to_drain() {
    let _g = lock();
    if !common::slurm::cluster_up() {
        return;
    }
    let system = common::slurm::SYSTEM
        .replace(
            r#"default_partition = "debug""#,
            r#"default_partition = "wide""#,
        )
        .replace(r#"name = "debug""#, r#"name = "wide""#)
        .replace(
            r#"nodes = ["node[001-004]"]"#,
            r#"nodes = ["node[001-016]"]"#,
        );
    // slow whenever the job holds a node other than node001 … node004
    let slow = r#"scontrol show hostnames "$SLURM_JOB_NODELIST" | grep -qvx -e node001 -e node002 -e node003 -e node004"#;
    let (code, text, report, _w) = find_bad_nodes_on(&system, "node[001-016]", slow, &["--drain"]);
    assert_eq!(code, 3, "{text}");
    let bad: Vec<&str> = report["bad"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let want: Vec<String> = (5..=16).map(|i| format!("node{i:03}")).collect();
    assert_eq!(bad, want, "{report}");
    assert!(
        report["cluster_wide"]
            .as_str()
            .unwrap_or_default()
            .starts_with("cluster-wide: 6 of 8 pairs failed or ran slower than"),
        "{report}"
    );
    assert!(
        report["actions_refused"]
            .as_str()
            .unwrap_or_default()
            .contains("cluster-wide"),
        "{report}"
    );
    assert!(
        text.contains("Round 1's fastest pair: 182.90 GB/s"),
        "{text}"
    );
    for n in &want {
        let (st, _) = node_state(n);
        assert!(!st.starts_with("dr"), "{n} is {st}");
    }
}

/// `--checks kernel-log`: the evidence tier runs on every node before any pair; node003's kernel log shows a fresh
/// Xid 79, so it is bad with that evidence and spends no pair; the others carry their check's result beside their
/// pairs' results.
#[test]
fn find_bad_nodes_with_evidence_first_spends_no_pair_on_a_condemned_node() {
    let _g = lock();
    if !common::slurm::cluster_up() {
        return;
    }
    let when = chrono::Local::now() - chrono::Duration::minutes(10);
    let line = format!(
        "[{}] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus.",
        when.format("%a %b %e %H:%M:%S %Y")
    );
    // a stand-in dmesg, found first on every node (srun passes PATH)
    let dmesg = format!(
        "#!/bin/bash\necho '[Mon Jan  1 00:00:00 2024] Linux version 6.1'\n\
         [ \"$SLURMD_NODENAME\" = node003 ] && echo '{line}'\nexit 0\n"
    );
    let (code, text, report, w) = find_bad_nodes_full(
        common::slurm::SYSTEM,
        "node[001-004]",
        "false",
        &["--checks", "kernel-log"],
        &[("dmesg", dmesg)],
    );
    assert_eq!(code, 3, "{text}");
    assert_eq!(report["bad"], serde_json::json!(["node003"]), "{report}");
    let v = |n: &str| {
        report["verdicts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["node"] == n)
            .cloned()
            .unwrap()
    };
    let n3 = v("node003");
    assert!(
        n3["evidence"].as_array().unwrap().is_empty(),
        "no pair: {n3}"
    );
    assert!(
        n3["condemned"]
            .as_str()
            .unwrap()
            .contains("kernel-log: Xid 79 on GPU 0000:3b:00"),
        "{n3}"
    );
    assert_eq!(v("node001")["checks"]["kernel-log"], "healthy");
    assert_eq!(v("node001")["verdict"], "good");
    let root = w.results_root();
    let round1 = std::fs::read_to_string(root.join("round-1.toml")).unwrap();
    assert!(!round1.contains("node003"), "{round1}");
    assert!(root
        .join("evidence/kernel-log/0/nodes/node003/stdout.txt")
        .is_file());
    let md = std::fs::read_to_string(root.join("bad-nodes.md")).unwrap();
    assert!(
        md.contains("bad by evidence, no pair spent: kernel-log: Xid 79"),
        "{md}"
    );
}
