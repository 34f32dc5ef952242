//! Counts and node requests are checked when the scenario loads, before any results directory exists: bounds on
//! iterations, tests and sweep steps; node specs that cannot be read or met; time limits that look like typos and
//! `num_nodes` next to `nodes` are warnings.

use crate::common;

use common::{stdout_of, Work};

const SYSTEM: &str = r#"
name = "cluster"
scheduler = "slurm"
install_path = "install"
output_path = "out"
default_partition = "batch"
[[partitions]]
name = "batch"
  [[partitions.groups]]
  name = "g1"
  nodes = ["gpu-[01-08]"]
"#;

const SLEEP: &str = r#"name = "sleep"
description = "s"
test_template_name = "Sleep"
[cmd_args]
seconds = 1
"#;

fn dry_run(scenario: &str, test: &str) -> (Option<i32>, String, bool) {
    let w = Work::new();
    w.file("system.toml", SYSTEM);
    w.file("tests/sleep.toml", test);
    w.file("s.toml", scenario);
    let out = w.cloudai().args(common::DRY_RUN_S_TOML).output().unwrap();
    (
        out.status.code(),
        stdout_of(&out),
        w.path().join("out").exists(),
    )
}

fn entry(extra: &str) -> String {
    format!(
        r#"name = "s"
[[Tests]]
id = "t"
test_name = "sleep"
{extra}"#
    )
}

#[track_caller]
fn refused(scenario: &str, test: &str, want: &[&str]) {
    let (code, text, made) = dry_run(scenario, test);
    assert_eq!(code, Some(1), "{text}");
    for w in want {
        assert!(text.contains(w), "missing {w:?} in:\n{text}");
    }
    assert!(!made, "a results directory was created:\n{text}");
}

#[test]
fn counts_have_bounds() {
    refused(
        &entry("iterations = 10001\n"),
        SLEEP,
        &["field 'Tests.0.iterations': 10001 iterations is more than the limit of 10000"],
    );
    let many: String = (0..10_001)
        .map(|i| {
            format!(
                r#"[[Tests]]
id = "t{i}"
test_name = "sleep"
"#
            )
        })
        .collect();
    refused(
        &format!(
            r#"name = "s"
{many}"#
        ),
        SLEEP,
        &["10001 [[Tests]] entries is more than the limit of 10000"],
    );
    // a sweep of 101 x 101 x 2 steps
    let list = |n: usize| {
        (0..n)
            .map(|i| format!(r#""{i}""#))
            .collect::<Vec<_>>()
            .join(",")
    };
    refused(
        &entry(&format!(
            "num_nodes = [1, 2]\n[Tests.extra_env_vars]\nA = [{}]\nB = [{}]\n",
            list(101),
            list(101)
        )),
        SLEEP,
        &["has 20402 steps, more than the limit of 10000"],
    );
}

#[test]
fn node_requests_the_system_cannot_meet_are_refused_at_load() {
    refused(
        &entry(
            r#"nodes = ["node[005-001]"]
"#,
        ),
        SLEEP,
        &[r#"field 'Tests.0.nodes.0': "node[005-001]" is not a node list"#],
    );
    refused(
        &entry(
            r#"nodes = ["gpu[0-99999999]"]
"#,
        ),
        SLEEP,
        &["is not a node list"],
    );
    refused(
        &entry(
            r#"nodes = ["debug:g1:2"]
"#,
        ),
        SLEEP,
        &[
            r#""debug:g1:2": the system has no partition "debug""#,
            "partitions: batch",
        ],
    );
    refused(
        &entry(
            r#"nodes = ["batch:g9:2"]
"#,
        ),
        SLEEP,
        &[r#"partition "batch" has no group "g9""#],
    );
}

#[test]
fn likely_typos_are_warned_about_and_run() {
    let (code, text, _) = dry_run(
        &format!(
            r#"{}[[Tests]]
id = "wide"
test_name = "sleep"
num_nodes = 9
"#,
            entry(
                r#"time_limit = "00:99:99"
nodes = ["gpu-[01-02]"]
num_nodes = 4
"#
            )
        ),
        SLEEP,
    );
    // more nodes than the system file lists: the file may list a subset of the partition, Slurm decides
    assert!(
        text.contains(r#"field 'Tests.1.num_nodes': test 'wide' asks 9 nodes; the system file lists 8 in partition "batch""#),
        "{text}"
    );
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("[WARNING] ")
            && text
                .contains(r#""00:99:99" has minutes or seconds of 60 or more; read as 01:40:39"#),
        "{text}"
    );
    assert!(
        text.contains("num_nodes = 4 is ignored: nodes names 2 node(s)"),
        "{text}"
    );
}
