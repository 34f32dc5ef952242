//! Every kind of bad input gets one clear error: file:line:col, field path, what was expected and a hint;
//! exit code 1; no results directory; no panic.

use crate::common;

use common::{stdout_of, Work};

const SLEEP_TEST: &str = r#"name = "sleep"
description = "d"
test_template_name = "Sleep"
[cmd_args]
seconds = 1
"#;

/// Runs `cloudai dry-run` on the given files and checks the failure; returns the console output.
fn fails(
    system: Option<&str>,
    tests: &[(&str, &str)],
    scenario: &str,
    expected: &[&str],
) -> String {
    let w = Work::new();
    let sys = match system {
        Some(text) => w.file("system.toml", text),
        None => w.standalone(),
    };
    w.file("tests/.keep", "");
    for (name, text) in tests {
        w.file(&format!("tests/{name}"), text);
    }
    let scen = w.file("scenario.toml", scenario);
    let out = w
        .cloudai()
        .args(["dry-run", "--system-config"])
        .arg(&sys)
        .arg("--tests-dir")
        .arg(w.path().join("tests"))
        .arg("--test-scenario")
        .arg(&scen)
        .arg("--output-dir")
        .arg(w.path().join("out"))
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    for e in expected {
        assert!(text.contains(e), "expected {e:?} in:\n{text}");
    }
    assert!(!text.contains("panicked"), "{text}");
    assert!(
        !w.path().join("out").exists(),
        "a results directory was created:\n{text}"
    );
    text
}

fn scenario_with(test: &str) -> String {
    format!(
        r#"name = "s"
[[Tests]]
id = "t"
{test}"#
    )
}

const OK_SCENARIO: &str = r#"name = "s"
[[Tests]]
id = "t"
test_name = "sleep"
"#;

#[test]
fn system_unknown_field_suggests_the_right_name() {
    let sys = r#"name = "x"
scheduler = "standalone"
install_path = "i"
output_path = "o"
monitor_intervall = 2
"#;
    fails(
        Some(sys),
        &[("sleep.toml", SLEEP_TEST)],
        OK_SCENARIO,
        &[
            "system.toml:5:1: field 'monitor_intervall': unknown field",
            "did you mean `monitor_interval`?",
        ],
    );
}

#[test]
fn system_wrong_type() {
    let sys = r#"name = "x"
scheduler = "standalone"
install_path = "i"
output_path = "o"
monitor_interval = "often"
"#;
    fails(
        Some(sys),
        &[("sleep.toml", SLEEP_TEST)],
        OK_SCENARIO,
        &[
            r#"system.toml:5:20: field 'monitor_interval': expected an integer, found a string "often""#,
        ],
    );
}

#[test]
fn system_missing_scheduler() {
    let sys = r#"name = "x"
install_path = "i"
output_path = "o"
"#;
    fails(
        Some(sys),
        &[("sleep.toml", SLEEP_TEST)],
        OK_SCENARIO,
        &[
            "field 'scheduler': required field is missing",
            "one of: standalone, slurm, runai, kubernetes",
        ],
    );
}

#[test]
fn system_unknown_scheduler() {
    let sys = r#"name = "x"
scheduler = "slrum"
install_path = "i"
output_path = "o"
"#;
    fails(
        Some(sys),
        &[("sleep.toml", SLEEP_TEST)],
        OK_SCENARIO,
        &[
            "system.toml:2:13: field 'scheduler': unsupported system type 'slrum'",
            r#"did you mean "slurm"?"#,
        ],
    );
}

#[test]
fn system_missing_required_slurm_partition() {
    let sys = r#"name = "x"
scheduler = "slurm"
install_path = "i"
output_path = "o"
default_partition = "p"
"#;
    fails(
        Some(sys),
        &[("sleep.toml", SLEEP_TEST)],
        OK_SCENARIO,
        &["field 'partitions': required field is missing"],
    );
}

#[test]
fn system_file_missing() {
    let w = Work::new();
    let out = w
        .cloudai()
        .args([
            "dry-run",
            "--system-config",
            "nope.toml",
            "--test-scenario",
            "nope2.toml",
        ])
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("nope.toml: cannot read system config"),
        "{text}"
    );
    assert!(
        text.contains("nope2.toml: cannot read test scenario"),
        "{text}"
    );
    assert!(text.contains("hint: check the path"), "{text}");
}

#[test]
fn toml_syntax_error_has_position() {
    fails(
        None,
        &[("sleep.toml", SLEEP_TEST)],
        r#"name = "s"
[[Tests]]
id = "t
test_name = "sleep"
"#,
        &["scenario.toml:3:", "not valid TOML (test scenario)"],
    );
}

#[test]
fn toml_duplicate_key() {
    fails(
        None,
        &[("sleep.toml", SLEEP_TEST)],
        r#"name = "s"
name = "t"
[[Tests]]
id = "t"
test_name = "sleep"
"#,
        &[
            "scenario.toml:2:1: not valid TOML (test scenario): duplicate key",
            "no key is written twice",
        ],
    );
}

#[test]
fn test_cmd_args_typo_suggests_field() {
    let t = r#"name = "nccl"
description = "d"
test_template_name = "NcclTest"
[cmd_args]
docker_image_url = "x"
minbyte = "1M"
"#;
    let s = r#"name = "s"
[[Tests]]
id = "t"
test_name = "nccl"
"#;
    let sys = r#"name = "x"
scheduler = "kubernetes"
install_path = "i"
output_path = "o"
kube_config_path = ""
default_namespace = "d"
"#;
    fails(
        Some(sys),
        &[("nccl.toml", t)],
        s,
        &[
            "nccl.toml:6:1: field 'cmd_args.minbyte': unknown field",
            "did you mean `minbytes`?",
        ],
    );
}

#[test]
fn test_cmd_args_wrong_type() {
    let t = r#"name = "sleep"
description = "d"
test_template_name = "Sleep"
[cmd_args]
seconds = "soon"
"#;
    fails(
        None,
        &[("sleep.toml", t)],
        OK_SCENARIO,
        &[
            r#"sleep.toml:5:11: field 'cmd_args.seconds': expected an integer, found a string "soon""#,
            "write a whole number",
        ],
    );
}

#[test]
fn test_unknown_template_suggests_name() {
    let t = r#"name = "sleep"
description = "d"
test_template_name = "Slep"
"#;
    fails(
        None,
        &[("sleep.toml", t)],
        OK_SCENARIO,
        &[
            "sleep.toml:3:22: field 'test_template_name': unknown test template 'Slep'",
            r#"did you mean "Sleep"?"#,
        ],
    );
}

#[test]
fn a_template_without_its_required_fields_cannot_run() {
    let t = r#"name = "mr"
description = "d"
test_template_name = "AIDynamo"
"#;
    let s = r#"name = "s"
[[Tests]]
id = "t"
test_name = "mr"
"#;
    fails(
        None,
        &[("mr.toml", t)],
        s,
        &[
            "mr.toml:1:1: field 'cmd_args.docker_image_url': required field is missing",
            "[ERROR]",
        ],
    );
}

#[test]
fn test_missing_required_field() {
    let t = r#"name = "sleep"
test_template_name = "Sleep"
"#;
    fails(
        None,
        &[("sleep.toml", t)],
        OK_SCENARIO,
        &["sleep.toml:1:1: field 'description': required field is missing"],
    );
}

#[test]
fn test_bad_enum_value() {
    let t = r#"name = "n"
description = "d"
test_template_name = "NcclTest"
[cmd_args]
docker_image_url = "x"
subtest_name = "all_reduce_perf_mp"
"#;
    let s = r#"name = "s"
[[Tests]]
id = "t"
test_name = "n"
"#;
    let sys = r#"name = "x"
scheduler = "kubernetes"
install_path = "i"
output_path = "o"
kube_config_path = ""
default_namespace = "d"
"#;
    fails(
        Some(sys),
        &[("n.toml", t)],
        s,
        &[
            r#"n.toml:6:16: field 'cmd_args.subtest_name': "all_reduce_perf_mp" is not an accepted value"#,
            r#"did you mean "all_reduce_perf_mpi"?"#,
        ],
    );
}

#[test]
fn env_var_must_be_a_string() {
    let t = r#"name = "sleep"
description = "d"
test_template_name = "Sleep"
[extra_env_vars]
NCCL_DEBUG = 3
"#;
    fails(None, &[("sleep.toml", t)], OK_SCENARIO, &[
        "sleep.toml:5:14: field 'extra_env_vars.NCCL_DEBUG': expected a string, found an integer 3",
        r#"quote the value: "3""#,
    ]);
}

#[test]
fn duplicate_test_names_in_tests_dir() {
    fails(
        None,
        &[("a.toml", SLEEP_TEST), ("b.toml", SLEEP_TEST)],
        OK_SCENARIO,
        &[
            "b.toml:1:8: field 'name': duplicate test name 'sleep'",
            "a.toml defines it too",
        ],
    );
}

#[test]
fn scenario_bad_time_limit() {
    fails(
        None,
        &[("sleep.toml", SLEEP_TEST)],
        &scenario_with(
            r#"test_name = "sleep"
time_limit = "10 minutes"
"#,
        ),
        &[
            r#"scenario.toml:5:14: field 'Tests.0.time_limit': invalid time limit format: "10 minutes""#,
            r#""HH:MM:SS""#,
        ],
    );
}

#[test]
fn scenario_unknown_test_name() {
    fails(
        None,
        &[("sleep.toml", SLEEP_TEST)],
        &scenario_with(
            r#"test_name = "slep"
"#,
        ),
        &[
            "scenario.toml:4:13: field 'Tests.0.test_name': test 'slep' is not defined",
            "did you mean 'sleep'?",
        ],
    );
}

#[test]
fn scenario_unknown_test_name_without_close_match() {
    fails(
        None,
        &[("sleep.toml", SLEEP_TEST)],
        &scenario_with(
            r#"test_name = "nccl_all_gather"
"#,
        ),
        &["test 'nccl_all_gather' is not defined", "check --tests-dir"],
    );
}

#[test]
fn scenario_duplicate_id() {
    let s = r#"name = "s"
[[Tests]]
id = "t"
test_name = "sleep"
[[Tests]]
id = "t"
test_name = "sleep"
"#;
    fails(
        None,
        &[("sleep.toml", SLEEP_TEST)],
        s,
        &["scenario.toml:5:1: field 'Tests.1.id': duplicate test id 't' in the test scenario"],
    );
}

#[test]
fn scenario_unknown_dependency() {
    let s = r#"name = "s"
[[Tests]]
id = "a"
test_name = "sleep"
[[Tests.dependencies]]
type = "start_post_comp"
id = "b"
"#;
    fails(None, &[("sleep.toml", SLEEP_TEST)], s, &[
        "scenario.toml:7:6: field 'Tests.0.dependencies.0.id': dependency 'b' not found for test 'a'",
    ]);
}

#[test]
fn scenario_self_dependency() {
    let s = r#"name = "s"
[[Tests]]
id = "a"
test_name = "sleep"
[[Tests.dependencies]]
type = "start_post_comp"
id = "a"
"#;
    fails(
        None,
        &[("sleep.toml", SLEEP_TEST)],
        s,
        &["test 'a' must not depend on itself"],
    );
}

#[test]
fn scenario_dependency_cycle() {
    let s = r#"name = "s"
[[Tests]]
id = "a"
test_name = "sleep"
[[Tests.dependencies]]
type = "start_post_comp"
id = "b"
[[Tests]]
id = "b"
test_name = "sleep"
[[Tests.dependencies]]
type = "start_post_init"
id = "a"
"#;
    fails(
        None,
        &[("sleep.toml", SLEEP_TEST)],
        s,
        &[
            "field 'Tests.0.dependencies': dependency cycle: a -> b -> a",
            "must not form a loop",
        ],
    );
}

#[test]
fn scenario_unknown_dependency_type() {
    let s = r#"name = "s"
[[Tests]]
id = "a"
test_name = "sleep"
[[Tests]]
id = "b"
test_name = "sleep"
[[Tests.dependencies]]
type = "start_post_completion"
id = "a"
"#;
    fails(
        None,
        &[("sleep.toml", SLEEP_TEST)],
        s,
        &[
            r#"scenario.toml:9:8: field 'Tests.1.dependencies.0.type': unknown dependency type "start_post_completion""#,
            r#"did you mean "start_post_comp"?"#,
        ],
    );
}

#[test]
fn scenario_test_name_and_template_both_set() {
    fails(None, &[("sleep.toml", SLEEP_TEST)], &scenario_with(r#"test_name = "sleep"
test_template_name = "Sleep"
"#), &[
        "field 'Tests.0.test_template_name': 'test_template_name' must not be set if 'test_name' is set",
    ]);
}

#[test]
fn scenario_inline_test_incomplete() {
    fails(None, &[("sleep.toml", SLEEP_TEST)], &scenario_with(r#"name = "x"
"#), &[
        "field 'Tests.0': without 'test_name', these fields must be set: test_template_name, description",
    ]);
}

#[test]
fn scenario_unknown_entry_field() {
    fails(
        None,
        &[("sleep.toml", SLEEP_TEST)],
        &scenario_with(
            r#"test_name = "sleep"
iteration = 3
"#,
        ),
        &[
            "scenario.toml:5:1: field 'Tests.0.iteration': unknown field",
            "did you mean `iterations`?",
        ],
    );
}

#[test]
fn scenario_override_typo_points_at_scenario() {
    fails(
        None,
        &[("sleep.toml", SLEEP_TEST)],
        &scenario_with(
            r#"test_name = "sleep"
[Tests.cmd_args]
second = 3
"#,
        ),
        &[
            "scenario.toml:6:1: field 'cmd_args.second': unknown field",
            "did you mean `seconds`?",
        ],
    );
}

#[test]
fn scenario_without_tests() {
    fails(
        None,
        &[("sleep.toml", SLEEP_TEST)],
        r#"name = "s"
"#,
        &["field 'Tests': a scenario needs at least one [[Tests]] entry"],
    );
}

#[test]
fn scenario_missing_hook() {
    let s = r#"name = "s"
pre_test = "nccl_hook"
[[Tests]]
id = "t"
test_name = "sleep"
"#;
    fails(
        None,
        &[("sleep.toml", SLEEP_TEST)],
        s,
        &[
            "scenario.toml:2:12: field 'pre_test': hook 'nccl_hook' not found",
            "--hook-dir",
        ],
    );
}

#[test]
fn scenario_zero_iterations() {
    fails(
        None,
        &[("sleep.toml", SLEEP_TEST)],
        &scenario_with(
            r#"test_name = "sleep"
iterations = 0
"#,
        ),
        &["field 'Tests.0.iterations': must be 1 or more"],
    );
}

#[test]
fn scenario_errors_are_all_reported_at_once() {
    let s = r#"name = "s"
foo = 1
[[Tests]]
id = "a"
test_name = "sleep"
time_limit = "x"
"#;
    fails(
        None,
        &[("sleep.toml", SLEEP_TEST)],
        s,
        &["field 'foo': unknown field", "field 'Tests.0.time_limit'"],
    );
}

#[test]
fn bad_log_level_is_a_usage_error() {
    let w = Work::new();
    let out = w
        .cloudai()
        .args(["--log-level", "LOUD", "list", "reports"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stdout_of(&out).contains("invalid log level: LOUD"));
}

/// Test ids and scenario names name directories of the results tree: one that would step outside it is refused
/// at load, before anything is created.
#[test]
fn ids_and_names_that_escape_the_output_directory_are_rejected() {
    for (scenario, field) in [
        (
            r#"name = "x"
[[Tests]]
id = "../../ESCAPED"
test_name = "s"
"#,
            "Tests.0.id",
        ),
        (
            r#"name = "../../X"
[[Tests]]
id = "ok"
test_name = "s"
"#,
            "name",
        ),
        (
            r#"name = "x"
[[Tests]]
id = ".."
test_name = "s"
"#,
            "Tests.0.id",
        ),
        (
            r#"name = "x"
[[Tests]]
id = "a\u0007b"
test_name = "s"
"#,
            "Tests.0.id",
        ),
    ] {
        let w = Work::new();
        w.standalone();
        w.file(
            "tests/s.toml",
            r#"name = "s"
description = "s"
test_template_name = "Sleep"
"#,
        );
        w.file("s.toml", scenario);
        let out = w
            .cloudai()
            .args([
                "run",
                "--system-config",
                "system.toml",
                "--tests-dir",
                "tests",
                "--test-scenario",
                "s.toml",
            ])
            .output()
            .unwrap();
        let text = stdout_of(&out);
        assert_eq!(out.status.code(), Some(1), "{text}");
        assert!(
            text.contains("s.toml:") && text.contains(&format!("field '{field}'")),
            "{text}"
        );
        assert!(
            text.contains("names a directory of the results tree"),
            "{text}"
        );
        assert!(
            !w.path().join("out").exists(),
            "a results directory was created"
        );
        assert!(!w.path().parent().unwrap().join("ESCAPED").exists());
    }
}

/// Two runs of one scenario started in the same second into one output directory end with two complete trees.
#[test]
fn concurrent_runs_get_their_own_results_directories() {
    let w = Work::new();
    w.standalone();
    w.file(
        "tests/b.toml",
        r#"name = "b"
description = "b"
test_template_name = "BashCmd"
[cmd_args]
cmd = "echo $$"
"#,
    );
    w.file(
        "s.toml",
        r#"name = "same"
[[Tests]]
id = "t"
test_name = "b"
"#,
    );
    let spawn = || {
        std::process::Command::new(assert_cmd::cargo::cargo_bin("cloudai"))
            .current_dir(w.path())
            .args([
                "--log-file",
                "/dev/null",
                "run",
                "--system-config",
                "system.toml",
                "--tests-dir",
                "tests",
                "--test-scenario",
                "s.toml",
            ])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let (mut a, mut b) = (spawn(), spawn());
    assert!(a.wait().unwrap().success() && b.wait().unwrap().success());
    let mut roots: Vec<_> = std::fs::read_dir(w.path().join("out"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    roots.sort();
    assert_eq!(roots.len(), 2, "{roots:?}");
    let outputs: Vec<String> = roots
        .iter()
        .map(|r| {
            assert!(
                r.join("same.html").is_file() && r.join("summary.json").is_file(),
                "{r:?} incomplete"
            );
            std::fs::read_to_string(r.join("t/0/stdout.txt")).unwrap()
        })
        .collect();
    assert_ne!(outputs[0], outputs[1], "one run overwrote the other");
}

/// A secret written with the wrong type is reported without its value.
#[test]
fn a_secret_of_the_wrong_type_is_not_echoed() {
    for value in [
        "987654321",
        r#"["s3cr3t-value"]"#,
        r#"{ v = "s3cr3t-value" }"#,
        "98765.4321",
    ] {
        let w = Work::new();
        w.file(
            "sys.toml",
            &format!(
                r#"name = "r"
scheduler = "runai"
install_path = "i"
output_path = "o"
base_url = "http://x"
user_email = "a@b"
app_id = "id"
app_secret = {value}
project_id = "1"
cluster_id = "c"
"#
            ),
        );
        let out = w
            .cloudai()
            .args(["verify-configs", "sys.toml"])
            .output()
            .unwrap();
        let text = stdout_of(&out);
        assert_eq!(out.status.code(), Some(1), "{text}");
        assert!(
            text.contains("sys.toml:8:14: field 'app_secret'") && text.contains("value not shown"),
            "{text}"
        );
        let log = std::fs::read_to_string(w.path().join("debug.log")).unwrap_or_default();
        for secret in ["987654321", "s3cr3t", "98765"] {
            assert!(
                !text.contains(secret) && !log.contains(secret),
                "{value}: {text}"
            );
        }
    }
}

/// The mistakes people make at 3 a.m. get a diagnosis, not a page of missing fields: files given to each other's
/// flag, a stale CLOUDAI_SYSTEM_CONFIG, a conf tree full of templates this version does not run, a command that
/// is not there.
#[test]
fn common_mistakes_get_a_diagnosis() {
    let w = Work::new();
    w.standalone();
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
    let swapped = w
        .cloudai()
        .args([
            "dry-run",
            "--system-config",
            "s.toml",
            "--tests-dir",
            "tests",
            "--test-scenario",
            "system.toml",
        ])
        .output()
        .unwrap();
    let text = stdout_of(&swapped);
    assert_eq!(swapped.status.code(), Some(1), "{text}");
    assert!(
        text.contains("s.toml: this is a test scenario (it has [[Tests]]), but it was given as --system-config")
            && text.contains("system.toml: this is a system file (it has `scheduler`), but it was given as --test-scenario"),
        "{text}"
    );
    assert_eq!(text.matches("[ERROR]").count(), 2, "one line each:\n{text}");

    let env = w
        .cloudai()
        .env("CLOUDAI_SYSTEM_CONFIG", "/nonexistent/system.toml")
        .args([
            "dry-run",
            "--tests-dir",
            "tests",
            "--test-scenario",
            "s.toml",
        ])
        .output()
        .unwrap();
    let text = stdout_of(&env);
    assert_eq!(env.status.code(), Some(1), "{text}");
    assert!(
        text.contains("/nonexistent/system.toml") && text.contains("CLOUDAI_SYSTEM_CONFIG"),
        "{text}"
    );

    w.file(
        "tests/bash.toml",
        r#"name = "bash"
description = "d"
test_template_name = "BashCmd"
[cmd_args]
cmd = "echo starting; no_such_benchmark_binary --iters 5"
"#,
    );
    w.file(
        "s.toml",
        r#"name = "s"
[[Tests]]
id = "t"
test_name = "bash"
"#,
    );
    let run = w.cloudai().args(common::RUN_S_TOML).output().unwrap();
    let text = stdout_of(&run);
    assert_eq!(run.status.code(), Some(3), "{text}");
    let rec = common::record(&w.results_root(), "t", 0);
    assert!(
        rec.message.contains("status 127")
            && rec
                .message
                .contains("no_such_benchmark_binary: command not found"),
        "{}",
        rec.message
    );
}

/// Every number has its range, every size its grammar (issue 41, item 5): one table of bad values per template and
/// system field, each one clear error naming the field and nothing created.
#[test]
fn numbers_out_of_range_and_sizes_that_are_not_sizes_are_refused() {
    let cases: &[(&str, &str, &str)] = &[
        ("Sleep", "seconds = -5", "field 'cmd_args.seconds': must be 0 or more, found -5"),
        ("Fio", "num_tasks_per_node = 0", "field 'cmd_args.num_tasks_per_node'"),
        (
            "OSUBench",
            "docker_image_url = \"i\"\nbenchmarks_dir = \"/b\"\nbenchmark = \"osu_allreduce\"\niterations = 0",
            "field 'cmd_args.iterations': must be 1 or more, found 0",
        ),
        (
            "OSUBench",
            "docker_image_url = \"i\"\nbenchmarks_dir = \"/b\"\nbenchmark = \"osu_allreduce\"\nwarmup = -1",
            "field 'cmd_args.warmup': must be 0 or more, found -1",
        ),
        (
            "UCCTest",
            "docker_image_url = \"i\"\nb = 0",
            "field 'cmd_args.b': must be 1 or more, found 0",
        ),
        (
            "UCCTest",
            "docker_image_url = \"i\"\ne = \"8X\"",
            "\"8X\" is not a size",
        ),
        (
            "NcclTest",
            "docker_image_url = \"i\"\nmaxbytes = \"4X\"",
            "field 'cmd_args.maxbytes': \"4X\" is not a size",
        ),
        (
            "NcclTest",
            "docker_image_url = \"i\"\nminbytes = [\"8\", \"0.5G\"]",
            "\"0.5G\" is not a size",
        ),
        (
            "NeMoRun",
            "docker_image_url = \"i\"\ntask = \"pretrain\"\nrecipe_name = \"llama3_8b\"\n[cmd_args.trainer]\nmax_steps = 0",
            "field 'cmd_args.trainer.max_steps': must be 1 or more, found 0",
        ),
        (
            "NeMoRun",
            "docker_image_url = \"i\"\ntask = \"pretrain\"\nrecipe_name = \"llama3_8b\"\n[cmd_args.data]\nmicro_batch_size = -2",
            "field 'cmd_args.data.micro_batch_size': must be 1 or more, found -2",
        ),
    ];
    let more: &[(&str, &str, &str)] = &[
        (
            "SlurmContainer",
            "docker_image_url = \"i\"\ncmd = \"echo a\\necho b\"",
            "field 'cmd_args.cmd': contains a newline",
        ),
        (
            "OSUBench",
            "docker_image_url = \"i\"\nbenchmarks_dir = \"/b\"\nbenchmark = \"../../bin/sh\"",
            "\"../../bin/sh\" is not a benchmark name",
        ),
    ];
    for (template, args, expected) in cases.iter().chain(more) {
        let test = format!(
            "name = \"t\"\ndescription = \"d\"\ntest_template_name = \"{template}\"\n[cmd_args]\n{args}\n"
        );
        fails(
            None,
            &[("t.toml", &test)],
            &scenario_with("test_name = \"t\"\n"),
            &[expected],
        );
    }
    // system numbers: a node has at most 1024 GPUs; the fabric fields their ranges
    for (extra, expected) in [
        (
            "gpus_per_node = 9223372036854775807",
            "field 'gpus_per_node': must be 0 to 1024",
        ),
        (
            "nic_gbps = -1",
            "field 'nic_gbps': must be a number from 1 to 3200, found -1",
        ),
        (
            "expectation_fraction = 1.5",
            "field 'expectation_fraction': must be a number from 0.001 to 1",
        ),
        ("fabric = \"ethernet\"", "unknown fabric \"ethernet\""),
        (
            "nvlink_peak_gbps = nan",
            "field 'nvlink_peak_gbps': must be a number",
        ),
    ] {
        let sys = format!(
            "name = \"local\"\nscheduler = \"standalone\"\ninstall_path = \"i\"\noutput_path = \"o\"\n{extra}\n"
        );
        fails(
            Some(&sys),
            &[("sleep.toml", SLEEP_TEST)],
            OK_SCENARIO,
            &[expected],
        );
    }
}

/// find-bad-nodes' numbers and names, checked before anything is created (issue 41, item 5).
#[test]
fn find_bad_nodes_flags_are_checked_before_anything_is_created() {
    let w = Work::new();
    w.file("system.toml", "name = \"s\"\nscheduler = \"slurm\"\ninstall_path = \"i\"\noutput_path = \"out\"\ndefault_partition = \"p\"\n[[partitions]]\nname = \"p\"\n");
    w.file("tests/nccl.toml", common::scratch::fixtures::NCCL);
    w.file("tests/sleep.toml", SLEEP_TEST);
    let base = [
        "find-bad-nodes",
        "--system-config",
        "system.toml",
        "--tests-dir",
        "tests",
    ];
    for (args, expected) in [
        (
            vec!["--test", "nccl", "--max-act-fraction", "101"],
            "101 is not a percentage from 0 to 100",
        ),
        (
            vec!["--test", "nccl", "--max-act-fraction", "inf"],
            "inf is not a percentage from 0 to 100",
        ),
        (
            vec!["--test", "nccl", "--min-busbw", "nan"],
            "nan is not a bandwidth in GB/s",
        ),
        (
            vec!["--test", "nccl", "--min-busbw=-3"],
            "-3 is not a bandwidth in GB/s",
        ),
        (
            vec!["--test", "nccl", "--nodes", "node1;reboot"],
            "is not a node list",
        ),
        (
            vec!["--test", "nccl", "--nodes", "node1 node2"],
            "is not a node list",
        ),
        (
            vec!["--test", "ncc", "--nodes", "node[1-2]"],
            "--test \"ncc\": no test of that name",
        ),
        (
            vec!["--test", "sleep", "--nodes", "node[1-2]"],
            "test 'sleep' is a Sleep test, not NcclTest",
        ),
    ] {
        let out = w.cloudai().args(base).args(&args).output().unwrap();
        let text = stdout_of(&out);
        assert_ne!(out.status.code(), Some(0), "{args:?}: {text}");
        assert!(text.contains(expected), "{args:?}: {text}");
        assert!(
            !w.path().join("out").exists(),
            "{args:?} created out/: {text}"
        );
        assert!(!text.contains("panicked"), "{text}");
    }
}
