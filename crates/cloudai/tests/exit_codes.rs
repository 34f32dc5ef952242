//! Exit codes and JUnit for CI: `run` and `generate-report` exit 0 only when every iteration passed (or was stopped
//! on purpose), 3 when the scenario ran but an iteration failed, timed out or was skipped; `--junit FILE` writes
//! one testcase per iteration that JUnit consumers (GitLab, Jenkins) read.

use crate::common;

use common::{stdout_of, Work};

const TESTS: &str = r#"name = "bash"
description = "b"
test_template_name = "BashCmd"
[cmd_args]
cmd = "true"
"#;

fn run(w: &Work, scenario: &str, extra: &[&str]) -> std::process::Output {
    w.standalone();
    w.file("tests/bash.toml", TESTS);
    w.file("s.toml", scenario);
    w.cloudai()
        .args(common::RUN_S_TOML)
        .args(extra)
        .output()
        .unwrap()
}

fn case(name: &str, cmd: &str, extra: &str) -> String {
    format!(
        r#"[[Tests]]
id = "{name}"
test_name = "bash"
{extra}[Tests.cmd_args]
cmd = "{cmd}"
"#
    )
}

#[test]
fn all_passed_exits_0_and_any_failure_exits_3() {
    let w = Work::new();
    let ok = format!(
        r#"name = "ok"
{}{}"#,
        case("a", "true", ""),
        case("b", "sleep 1.2", "")
    );
    let out = run(&w, &ok, &[]);
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    // not a terminal: the status line is printed when what it says changes
    assert!(
        text.contains("[INFO] Status: 1/2 done, 0 pending, 1 running; 00:00:0"),
        "{text}"
    );

    for (scenario, what) in [
        (
            format!(
                r#"name = "f"
{}{}"#,
                case("a", "true", ""),
                case("b", "exit 4", "")
            ),
            "a failure",
        ),
        (
            format!(
                r#"name = "t"
{}"#,
                case(
                    "slow",
                    "sleep 30",
                    r#"time_limit = "1s"
"#
                )
            ),
            "a timeout",
        ),
    ] {
        let w = Work::new();
        let out = run(&w, &scenario, &[]);
        let text = stdout_of(&out);
        assert_eq!(out.status.code(), Some(3), "{what}: {text}");
        assert!(
            text.contains("did not pass") && text.contains("(exit code 3)"),
            "{text}"
        );
        // generate-report re-grades the same tree to the same verdict
        let root = w.results_root();
        let again = w
            .cloudai()
            .arg("generate-report")
            .arg("--result-dir")
            .arg(&root)
            .output()
            .unwrap();
        assert_eq!(
            again.status.code(),
            Some(3),
            "{what}: {}",
            stdout_of(&again)
        );
    }
}

#[test]
fn junit_has_one_testcase_per_iteration_with_reasons_and_timings() {
    let w = Work::new();
    let scenario = format!(
        r#"name = "ci"
{}{}{}"#,
        case("good", "sleep 0.3", "iterations = 2\n"),
        case("bad", "echo broken >&2; exit 4", ""),
        case(
            "slow",
            "sleep 30",
            r#"time_limit = "1s"
"#
        ),
    );
    let junit = w.path().join("reports/junit.xml");
    let out = run(&w, &scenario, &["--junit", junit.to_str().unwrap()]);
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    let xml = std::fs::read_to_string(&junit).unwrap();
    let doc = roxmltree::Document::parse(&xml).unwrap_or_else(|e| panic!("{e}\n{xml}"));
    let suites = doc.root_element();
    assert_eq!(suites.tag_name().name(), "testsuites");
    assert_eq!(
        (suites.attribute("tests"), suites.attribute("failures")),
        (Some("4"), Some("2"))
    );
    let suite = suites
        .children()
        .find(|n| n.has_tag_name("testsuite"))
        .unwrap();
    assert_eq!(suite.attribute("name"), Some("ci"));
    assert!(suite.attribute("timestamp").is_some());
    let cases: Vec<_> = suite
        .children()
        .filter(|n| n.has_tag_name("testcase"))
        .collect();
    let names: Vec<_> = cases.iter().map(|c| c.attribute("name").unwrap()).collect();
    assert_eq!(names, ["good #0", "good #1", "bad", "slow"]);
    assert!(cases
        .iter()
        .all(|c| c.attribute("classname").unwrap().starts_with("ci.")));
    let time = |i: usize| cases[i].attribute("time").unwrap().parse::<f64>().unwrap();
    assert!(time(0) >= 0.25 && time(0) < 10.0, "{xml}");
    assert!(time(3) >= 0.9, "{xml}");
    let failure = |i: usize| cases[i].children().find(|n| n.has_tag_name("failure"));
    assert!(failure(0).is_none() && failure(1).is_none());
    let bad = failure(2).expect("bad has a failure");
    assert_eq!(bad.attribute("type"), Some("FAILED"));
    assert!(
        bad.attribute("message")
            .unwrap()
            .contains("exited with status 4"),
        "{xml}"
    );
    assert!(bad.text().unwrap().contains("end reason: exited"), "{xml}");
    let slow = failure(3).expect("slow has a failure");
    assert_eq!(slow.attribute("type"), Some("TIMEOUT"));
    assert!(
        slow.text().unwrap().contains("end reason: time_limit"),
        "{xml}"
    );
    let out_of = |i: usize| {
        cases[i]
            .children()
            .find(|n| n.has_tag_name("system-out"))
            .unwrap()
            .text()
            .unwrap()
            .to_string()
    };
    let root = w.results_root();
    assert!(
        out_of(2).contains(&format!(
            "[[ATTACHMENT|{}]]",
            root.join("bad/0/stdout.txt").display()
        )),
        "{xml}"
    );

    // generate-report writes the same cases from the tree on disk
    let again = w.path().join("again.xml");
    let o = w
        .cloudai()
        .arg("generate-report")
        .arg("--result-dir")
        .arg(&root)
        .arg("--junit")
        .arg(&again)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", stdout_of(&o));
    let doc2 = std::fs::read_to_string(&again).unwrap();
    let d2 = roxmltree::Document::parse(&doc2).unwrap();
    let names2: Vec<_> = d2
        .descendants()
        .filter(|n| n.has_tag_name("testcase"))
        .map(|c| c.attribute("name").unwrap().to_string())
        .collect();
    // a tree on disk lists its tests in directory order
    let (mut a, mut b) = (
        names2,
        names.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
    );
    a.sort();
    b.sort();
    assert_eq!(a, b);
}

#[test]
fn junit_escapes_what_xml_cannot_hold() {
    let w = Work::new();
    let scenario = format!(
        r#"name = "esc"
{}"#,
        case("amp", "printf '\\\\033[31m<&>\\\\n' >&2; exit 2", "")
    );
    let junit = w.path().join("j.xml");
    let out = run(&w, &scenario, &["--junit", junit.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "{}", stdout_of(&out));
    let xml = std::fs::read_to_string(&junit).unwrap();
    roxmltree::Document::parse(&xml).unwrap_or_else(|e| panic!("{e}\n{xml}"));
}

#[test]
fn an_unwritable_junit_path_is_an_error() {
    let w = Work::new();
    w.file("blocker", "a file, not a directory");
    let out = run(
        &w,
        &format!(
            r#"name = "x"
{}"#,
            case("a", "true", "")
        ),
        &["--junit", "blocker/j.xml"],
    );
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("Cannot write the JUnit report blocker/j.xml"),
        "{text}"
    );
}

/// A dry-run's iterations are DRY-RUN (exit 0) in its own table, and stay DRY-RUN when generate-report reads the
/// tree later; an iteration that has output since is graded.
#[test]
fn dry_run_and_generate_report_agree() {
    let w = Work::new();
    w.standalone();
    w.file("tests/nccl.toml", common::scratch::fixtures::NCCL);
    w.file(
        "s.toml",
        r#"name = "d"
[[Tests]]
id = "ar"
test_name = "nccl"
iterations = 2
"#,
    );
    let mut args = common::RUN_S_TOML.to_vec();
    args[0] = "dry-run";
    let out = w.cloudai().args(&args).output().unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert_eq!(text.matches("│ DRY-RUN │").count(), 2, "{text}");
    let root = w.results_root();
    // iteration directories hold exactly CloudAI's files; the tree's summary says it was a dry-run
    assert!(!root.join("ar/0/cloudai-run.json").exists());
    let summary = std::fs::read_to_string(root.join("summary.json")).unwrap();
    assert!(summary.contains(r#""mode": "dry-run""#), "{summary}");

    // output appears for iteration 1 only: it is graded, iteration 0 stays a dry-run
    let sample = std::fs::read_to_string(
        common::data().join("nccl-samples/single-node-8gpu-a100-allreduce-v2.19.4.txt"),
    )
    .unwrap();
    std::fs::write(root.join("ar/1/stdout.txt"), sample).unwrap();
    let out = w.generate_report(&root);
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("summary.json")).unwrap()).unwrap();
    let statuses: Vec<&str> = summary["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["DRY-RUN", "PASSED"], "{text}");
    assert_eq!(summary["mode"], "dry-run");
}

/// A run with a failed test leaves `<results dir>.tgz` beside the tree (as CloudAI does): the whole tree under its
/// own name, with nothing half-written; `--no-tarball` opts out, and a run that passes writes none.
#[test]
fn a_failing_run_leaves_a_tarball_of_its_tree() {
    let w = Work::new();
    w.standalone();
    w.file(
        "tests/bad.toml",
        r#"name = "bad"
description = "d"
test_template_name = "BashCmd"
[cmd_args]
cmd = "echo out; false"
"#,
    );
    w.file(
        "tests/good.toml",
        r#"name = "good"
description = "d"
test_template_name = "BashCmd"
[cmd_args]
cmd = "true"
"#,
    );
    w.file(
        "s.toml",
        r#"name = "t"
[[Tests]]
id = "a"
test_name = "bad"
"#,
    );
    let out = w.cloudai().args(common::RUN_S_TOML).output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", stdout_of(&out));
    let root = w.results_root();
    let tgz = root.with_file_name(format!(
        "{}.tgz",
        root.file_name().unwrap().to_string_lossy()
    ));
    assert!(
        stdout_of(&out).contains("Created tarball at"),
        "{}",
        stdout_of(&out)
    );
    let list = std::process::Command::new("tar")
        .arg("tzf")
        .arg(&tgz)
        .output()
        .unwrap();
    assert!(list.status.success());
    let names = String::from_utf8_lossy(&list.stdout).into_owned();
    let top = root.file_name().unwrap().to_string_lossy().into_owned();
    for f in [
        "a/0/stdout.txt",
        "a/0/cloudai-run.json",
        "summary.json",
        "t.html",
    ] {
        assert!(
            names.contains(&format!("{top}/{f}")),
            "{f} missing:\n{names}"
        );
    }
    let leftovers: Vec<_> = std::fs::read_dir(root.parent().unwrap())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty());

    for (scenario, extra) in [("a", "--no-tarball"), ("b", "")] {
        let w = Work::new();
        w.standalone();
        w.file(
            "tests/bad.toml",
            r#"name = "bad"
description = "d"
test_template_name = "BashCmd"
[cmd_args]
cmd = "false"
"#,
        );
        w.file(
            "tests/good.toml",
            r#"name = "good"
description = "d"
test_template_name = "BashCmd"
[cmd_args]
cmd = "true"
"#,
        );
        let test = if scenario == "a" { "bad" } else { "good" };
        w.file(
            "s.toml",
            &format!(
                r#"name = "t"
[[Tests]]
id = "a"
test_name = "{test}"
"#
            ),
        );
        let mut c = w.cloudai();
        c.args(common::RUN_S_TOML);
        if !extra.is_empty() {
            c.arg(extra);
        }
        c.output().unwrap();
        let tgzs: Vec<_> = std::fs::read_dir(w.path().join("out"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tgz"))
            .collect();
        assert!(tgzs.is_empty(), "{test} {extra}: a tarball was written");
    }
}

#[test]
fn help_lists_every_exit_code_and_variable_the_readme_documents() {
    let w = Work::new();
    let out = w.cloudai().arg("--help").output().unwrap();
    let help = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{help}");
    let readme = std::fs::read_to_string(common::repo().join("docs/usage.md")).unwrap();
    for (code, what) in cloudai::exit_codes::ALL {
        assert!(
            help.contains(&format!("{code:>3}  {what}")),
            "--help lacks exit code {code}: {help}"
        );
        assert!(
            readme.contains(&format!("| `{code}` |")),
            "the exit-code table of docs/usage.md lacks {code}"
        );
    }
    for (var, _) in cloudai::exit_codes::ENVIRONMENT {
        assert!(help.contains(var), "--help lacks {var}: {help}");
    }
    // the short help stays short
    let short = stdout_of(&w.cloudai().arg("-h").output().unwrap());
    assert!(!short.contains("Exit codes:"), "{short}");
}

/// The conventions of the tools operators know: completions and a man page generated from the CLI itself, the
/// commit in `--version`, JSON where scripts read lists.
#[test]
fn completions_man_page_version_and_json() {
    let w = Work::new();
    for sh in ["bash", "zsh", "fish"] {
        let out = w.cloudai().args(["completions", sh]).output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        let text = String::from_utf8_lossy(&out.stdout);
        for word in ["find-bad-nodes", "generate-report", "test-scenario"] {
            assert!(text.contains(word), "{sh} completion lacks {word}");
        }
    }
    let man = w.cloudai().arg("man").output().unwrap();
    let man = String::from_utf8_lossy(&man.stdout);
    assert!(
        man.starts_with(".ie") || man.contains(".TH cloudai"),
        "{man}"
    );
    assert!(
        man.contains("find\\-bad\\-nodes") || man.contains("find-bad-nodes"),
        "{man}"
    );
    // the one page describes its subcommands: no reference to a page that does not exist (issue 41, item 12)
    assert!(
        !man.contains("cloudai\\-run(1)") && !man.contains("(1)\n"),
        "{man}"
    );
    assert!(man.contains(".SH SUBCOMMANDS"), "{man}");
    let v = w.cloudai().arg("--version").output().unwrap();
    let v = String::from_utf8_lossy(&v.stdout);
    // `cloudai 0.1.0 (<12 hex>[-modified] <date>)` in a checkout
    let inner = v
        .trim()
        .strip_prefix(&format!("cloudai {} (", env!("CARGO_PKG_VERSION")))
        .and_then(|r| r.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{v}"));
    let hash = inner.split([' ', '-']).next().unwrap();
    assert!(
        inner == "unknown commit"
            || hash.len() == 12 && hash.bytes().all(|b| b.is_ascii_hexdigit()),
        "{v}"
    );

    let list = w
        .cloudai()
        .args(["list", "templates", "--json"])
        .output()
        .unwrap();
    let list: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    let nccl = list
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "NcclTest")
        .unwrap();
    assert!(nccl["cmd_args"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a == "subtest_name"));
    assert_eq!(nccl["schedulers"].as_array().unwrap().len(), 4);

    // verify-configs --json: stdout is the JSON alone; a broken file names line, column and field
    w.file(
        "conf/ok.toml",
        r#"name = "s"
description = "d"
test_template_name = "Sleep"
"#,
    );
    w.file(
        "conf/bad.toml",
        r#"name = "s2"
description = "d"
test_template_name = "Sleep"
[cmd_args]
seconds = "ten"
"#,
    );
    let out = w
        .cloudai()
        .args(["verify-configs", "conf", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(
        (doc["checked"].as_u64(), doc["failed"].as_u64()),
        (Some(2), Some(1)),
        "{doc}"
    );
    let bad = doc["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["status"] == "error")
        .unwrap();
    let p = &bad["problems"][0];
    assert_eq!(
        (p["line"].as_u64(), p["field"].as_str()),
        (Some(5), Some("cmd_args.seconds")),
        "{bad}"
    );
}

/// `--log-level WARNING` leaves the result: no INFO lines, no scenario outline, the final table and the verdict.
#[test]
fn warning_level_keeps_only_the_result() {
    let w = Work::new();
    let ok = format!(
        r#"name = "quiet"
{}"#,
        case("a", "true", "")
    );
    let out = run(&w, &ok, &["--log-level", "WARNING"]);
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        !text.contains("[INFO]") && !text.contains("Section Name"),
        "{text}"
    );
    assert!(text.contains("║ a    │ PASSED"), "{text}");
}

/// Under a pseudo-terminal of 80 columns the final table never exceeds 80 columns, even for a 60-character test
/// id, and shows the results path relative to the working directory.
#[test]
fn the_final_table_fits_an_80_column_terminal() {
    let w = Work::new();
    let id = "nccl_all_reduce_perf_mpi_sixteen_nodes_sharp_enabled_ring_01";
    assert_eq!(id.len(), 60);
    let scenario = format!(
        r#"name = "narrow"
{}"#,
        case(id, "echo no such thing >&2; exit 4", "")
    );
    w.standalone();
    w.file("tests/bash.toml", TESTS);
    w.file("s.toml", &scenario);
    let bin = assert_cmd::cargo::cargo_bin("cloudai");
    let cmd = format!(
        "stty cols 80 rows 50; {} run --system-config system.toml --tests-dir tests --test-scenario s.toml",
        bin.display()
    );
    let out = std::process::Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .current_dir(w.path())
        .output()
        .unwrap();
    let coloured = String::from_utf8_lossy(&out.stdout).replace('\r', "");
    assert_eq!(out.status.code(), Some(3), "{coloured}");
    // a terminal gets colour: the status word in red
    assert!(coloured.contains("\x1b[31mFAILED\x1b[0m"), "{coloured}");
    let text = strip_ansi(&coloured);
    let table: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.starts_with('║') || l.starts_with('╔') || l.starts_with('╚') || l.starts_with('╟')
        })
        .collect();
    assert!(table.len() > 4, "{text}");
    for l in &table {
        assert!(l.chars().count() <= 80, "wider than 80: {l}\n{text}");
    }
    assert!(
        table.iter().any(|l| l.contains("│ out/narrow_")),
        "the path is relative to the working directory:\n{text}"
    );
    let root = w.path().display().to_string();
    assert!(table.iter().all(|l| !l.contains(&root)), "{text}");

    // NO_COLOR and --color never turn it off on a terminal; --color always turns it on in a pipe
    for (env, flag) in [(Some("1"), ""), (None, " --color never")] {
        let mut c = std::process::Command::new("script");
        c.args(["-qec", &format!("{cmd}{flag}"), "/dev/null"])
            .current_dir(w.path());
        if let Some(v) = env {
            c.env("NO_COLOR", v);
        }
        let out = c.output().unwrap();
        let t = String::from_utf8_lossy(&out.stdout);
        assert!(!t.contains("\x1b[31m"), "{env:?}{flag}: {t}");
    }
    let piped = w
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
        .args(["--color", "always"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&piped.stdout).contains("\x1b[31mFAILED"));
}

/// Text without its ANSI escape sequences (`ESC [ … letter`).
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\x1b' && chars.peek() == Some(&'[') {
            chars.next();
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// A command that cannot start says why exactly once (the one error funnel prints it), exits 1 and creates
/// nothing.
#[test]
fn a_command_that_cannot_start_says_why_once_and_exits_1() {
    let w = Work::new();
    let missing = w.path().join("no-such-tree");
    for args in [
        vec!["status".to_string(), missing.display().to_string()],
        vec!["resume".to_string(), missing.display().to_string()],
        vec![
            "generate-report".to_string(),
            "--result-dir".to_string(),
            missing.display().to_string(),
        ],
        vec![
            "baseline".to_string(),
            "create".to_string(),
            "--result-dir".to_string(),
            missing.display().to_string(),
            "--output".to_string(),
            w.path().join("b.toml").display().to_string(),
        ],
    ] {
        let out = w.cloudai().args(&args).output().unwrap();
        let text = stdout_of(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {text}");
        assert_eq!(
            text.matches("not a directory").count(),
            1,
            "{args:?} said it more or less than once: {text}"
        );
        assert!(!missing.exists());
    }
}

/// `run --help` ends with examples whose files exist in the repository (issue 41, item 12).
#[test]
fn run_help_has_examples_that_name_real_files() {
    let w = Work::new();
    let out = w.cloudai().args(["run", "--help"]).output().unwrap();
    let help = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{help}");
    let examples = help.split("Examples:").nth(1).expect("no examples");
    for word in examples
        .split_whitespace()
        .filter(|w| w.starts_with("conf/"))
    {
        assert!(common::repo().join(word).exists(), "{word} does not exist");
    }
    assert!(examples.contains("cloudai resume"), "{examples}");
}

/// The README's `cloudai verify-configs conf/` on the repository's own configs: exit 0 and no WARNING (issue 41,
/// item 11).
#[test]
fn the_readme_s_verify_configs_is_clean() {
    let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("cloudai"))
        .current_dir(common::repo())
        .args(["verify-configs", "conf/"])
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(!text.contains("WARNING"), "{text}");
}
