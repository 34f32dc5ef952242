//! Config errors found all at once and named precisely: independent problems of one scenario in one pass (run
//! and verify-configs alike), a directory given as a file, a test name that would leave the results tree, a
//! Kubernetes image that is no image reference.

use crate::common;

use common::{stdout_of, Work};

/// A test's name names its hook output directory (`pre_test/<name>/`): it must be one path component too.
#[test]
fn a_test_name_that_would_escape_is_rejected() {
    let w = Work::new();
    w.standalone();
    w.file(
        "tests/s.toml",
        r#"name = "../../ESCAPED"
description = "s"
test_template_name = "Sleep"
"#,
    );
    w.file(
        "s.toml",
        r#"name = "x"
[[Tests]]
id = "a"
test_name = "../../ESCAPED"
"#,
    );
    let out = w.cloudai().args(common::RUN_S_TOML).output().unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(r#"tests/s.toml:1:8: field 'name': "../../ESCAPED" contains '/'"#),
        "{text}"
    );
}

/// Independent problems of one scenario are all reported in one pass, by run and by verify-configs alike.
#[test]
fn three_independent_errors_are_reported_together() {
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
        r#"name = "s"
[[Tests]]
id = "a"
test_name = "slep"
[[Tests]]
id = "b"
test_name = "sleep"
foo = 1
[[Tests.dependencies]]
type = "start_post_completion"
id = "a"
"#,
    );
    let want = [
        r#"field 'Tests.1.dependencies.0.type': unknown dependency type "start_post_completion""#,
        "field 'Tests.1.foo': unknown field",
        "field 'Tests.0.test_name': test 'slep' is not defined",
    ];
    for args in [
        common::RUN_S_TOML.to_vec(),
        vec!["verify-configs", "--tests-dir", "tests", "s.toml"],
    ] {
        let out = w.cloudai().args(&args).output().unwrap();
        let text = stdout_of(&out);
        assert_eq!(out.status.code(), Some(1), "{text}");
        for e in want {
            assert!(text.contains(e), "{:?}: missing {e:?} in\n{text}", args[0]);
        }
    }
    // a directory where a file is expected
    let out = w
        .cloudai()
        .args(["run", "--tests-dir", "tests", "--test-scenario", "tests"])
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("tests: test scenario: is a directory; expected a TOML file"),
        "{text}"
    );
}

/// A Kubernetes `job_image` that no registry could resolve is refused where it is written, before any cluster.
#[test]
fn a_kubernetes_job_image_with_spaces_is_refused() {
    let w = Work::new();
    w.file(
        "system.toml",
        r#"name = "k"
scheduler = "kubernetes"
kube_config_path = ""
install_path = "i"
output_path = "out"
default_namespace = "d"
job_image = "ubuntu 24.04"
"#,
    );
    let out = w
        .cloudai()
        .args(["verify-configs", "system.toml"])
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(
            r#"system.toml:7:13: field 'job_image': "ubuntu 24.04" is not an image reference"#
        ),
        "{text}"
    );
}

/// A reward function that is not one of CloudAI's names is refused where it is written, the names listed.
#[test]
fn an_unknown_reward_function_is_refused_with_the_names() {
    let w = Work::new();
    w.standalone();
    w.file(
        "tests/s.toml",
        "name = \"s\"\ndescription = \"s\"\ntest_template_name = \"Sleep\"\nagent_reward_function = \"log_scale\"\n",
    );
    w.file(
        "s.toml",
        "name = \"x\"\n[[Tests]]\nid = \"a\"\ntest_name = \"s\"\n",
    );
    let out = w.cloudai().args(common::DRY_RUN_S_TOML).output().unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("tests/s.toml:4:25: field 'agent_reward_function': Reward function 'log_scale' not found")
            && text.contains("ai_dynamo_log_scale"),
        "{text}"
    );
    assert!(!w.path().join("out").exists());
}
