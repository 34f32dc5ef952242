//! The Dynamo mocker on Standalone: CloudAI's script run from its own tree with the Python of its environment,
//! graded on its markers and its benchmark report (the three serving numbers, every request asked completed, none
//! failed); the job is compat_dry_run.rs.

use crate::common;

use common::{stdout_of, Work};

const VENV: &str = "install/dynamo-mocker-py3.12-73eeb678863b";

const TEST: &str = r#"name = "mock"
description = "d"
test_template_name = "DynamoMocker"
[cmd_args]
benchmark_tool = "aiperf"
[cmd_args.worker]
disaggregation_mode = "none"
num_workers = 2
[cmd_args.aiperf]
request_count = 50
warmup_request_count = 5
streaming = true
"#;

/// AIPerf's CSV layout (statistics, a blank line, totals), made-up numbers; `@N@` is the request count.
const REPORT: &str = "Metric,avg,min,max,p50,p90,p99,std\n\
Time to First Token (ms),49.87,17.15,99.91,49.87,60.10,92.31,9.20\n\
Inter Token Latency (ms),2.81,2.66,2.88,2.83,2.86,2.87,0.04\n\
\n\
Metric,Value\n\
Output Token Throughput (tokens/sec),598.78\n\
Request Throughput (requests/sec),1.20\n\
Request Count,@N@\n";

/// CloudAI's script, stood in for: it keeps its arguments and leaves in `--result-dir` what `$MOCK` says.
fn stand_in(w: &Work) {
    w.script(
        "cloudai/dynamo_mocker.sh",
        r#"#!/bin/bash
echo "$@" > "$(dirname "$0")/args.txt"
while [ $# -gt 0 ]; do
  case "$1" in --result-dir) dir="$2"; shift 2;; *) shift;; esac
done
case "$MOCK" in
  fail) echo "nats-server not found: 'nats-server'. Set nats_cmd" > "$dir/failure-marker.txt"; exit 1;;
  crash) echo "Traceback: dynamo.frontend died" >&2; exit 1;;
  *) printf '%s' "$REPORT" | sed "s/@N@/$MOCK/" > "$dir/benchmark_report.csv"; echo SUCCESS > "$dir/success-marker.txt";;
esac
"#,
    );
    w.file(&format!("{VENV}/bin/python"), "");
    w.standalone();
    w.file("tests/mock.toml", TEST);
    w.file(
        "s.toml",
        "name = \"m\"\n[[Tests]]\nid = \"mock\"\ntest_name = \"mock\"\n",
    );
}

fn run(w: &Work, mock: &str) -> (std::process::Output, String) {
    let _ = std::fs::remove_dir_all(w.path().join("out"));
    let out = w
        .cloudai()
        .args(common::RUN_S_TOML)
        .env(
            "CLOUDAI_DYNAMO_MOCKER_SCRIPT",
            w.path().join("cloudai/dynamo_mocker.sh"),
        )
        .env("MOCK", mock)
        .env("REPORT", REPORT)
        .output()
        .unwrap();
    let text = stdout_of(&out);
    (out, text)
}

#[test]
fn a_complete_benchmark_passes_and_every_way_it_falls_short_is_named() {
    let w = Work::new();
    stand_in(&w);
    let (out, text) = run(&w, "50.00");
    assert_eq!(out.status.code(), Some(0), "{text}");
    let args = std::fs::read_to_string(w.path().join("cloudai/args.txt")).unwrap();
    assert!(
        args.starts_with(&format!("--venv-python {VENV}/bin/python --result-dir "))
            && args
                .contains("--disaggregation-mode none --benchmark-tool aiperf --input-tokens 5000")
            && args.contains(
                "--request-count 50 --replay-concurrency 100 --replay-mode offline --num-workers 2"
            )
            && args.ends_with("--aiperf-warmup-request-count 5 --aiperf-streaming true\n"),
        "{args}"
    );
    let root = w.results_root();
    let dir = root.join("mock/0");
    assert!(std::fs::read_to_string(dir.join("test-run.toml"))
        .unwrap()
        .contains("full_cmd = \"bash \\\""));
    let rec = common::record(&root, "mock", 0);
    let checks = serde_json::to_string(&rec.checks).unwrap();
    assert!(
        checks.contains("time to first token 49.87") && checks.contains("50 requests completed"),
        "{checks}"
    );
    let csv = std::fs::read_to_string(dir.join("dynamo_mocker_report.csv")).unwrap();
    assert!(
        csv.contains("Time to First Token (ms),49.87,17.15,99.91,49.87,60.10,92.31,9.20,"),
        "{csv}"
    );

    for (mock, code, want) in [
        ("30.00", 3, "30 of the 50 requests asked completed"),
        ("fail", 3, "Failure marker found: nats-server not found"),
        ("crash", 3, "Success marker not found"),
    ] {
        let (out, text) = run(&w, mock);
        assert_eq!(out.status.code(), Some(code), "{mock}: {text}");
        assert!(text.contains(want), "{mock}: {text}");
    }
    // the crash's own words are quoted
    let (_, text) = run(&w, "crash");
    assert!(text.contains("dynamo.frontend died"), "{text}");
}

#[test]
fn each_bad_value_is_one_clear_error() {
    let w = Work::new();
    stand_in(&w);
    for (from, to, want) in [
        (
            "num_workers = 2",
            "num_workers = 0",
            "must be 1 or more, found 0",
        ),
        (
            "[cmd_args.worker]",
            "[cmd_args.frontend]\nhttp_port = 70000\n[cmd_args.worker]",
            "must be a TCP port",
        ),
        (
            "[cmd_args.worker]",
            "[cmd_args.engine]\nkv_transfer_bandwidth = [100.0, 0.0]\n[cmd_args.worker]",
            "must be above 0, found 0",
        ),
        ("\"none\"", "\"split\"", "prefill_decode"),
        (
            "request_count = 50",
            "request_count = 50\ninput_token = 10",
            "did you mean `input_tokens`?",
        ),
    ] {
        w.file("tests/mock.toml", &TEST.replace(from, to));
        let out = w.cloudai().args(common::DRY_RUN_S_TOML).output().unwrap();
        let t = stdout_of(&out);
        assert_eq!(out.status.code(), Some(1), "{to}: {t}");
        assert!(t.contains(want) && t.contains("mock.toml"), "{want}: {t}");
        assert!(!w.path().join("out").exists());
    }
}
