//! Values with shell metacharacters never run as commands and arrive intact: a property test generates them,
//! puts them in an env value, a cmd_args value, the image and the test id, and runs what cloudai generated —
//! the Slurm batch script (with stand-in `srun`/`scontrol`) and a Standalone run — with a stand-in NCCL binary
//! that records what it received. A newline anywhere, raw pass-through fields included, is a config error.

use crate::common;

use std::path::Path;

use common::{stdout_of, Work};
use proptest::prelude::*;

/// Pieces that would run `touch MARK` or change a word if a value were pasted into a script unquoted.
fn nasty() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            Just("$(touch MARK)".to_string()),
            Just("`touch MARK`".to_string()),
            Just("; touch MARK".to_string()),
            Just("&& touch MARK #".to_string()),
            Just("| touch MARK".to_string()),
            Just("'".to_string()),
            Just(r#"""#.to_string()),
            Just("\\".to_string()),
            Just(" ".to_string()),
            Just("*".to_string()),
            Just("~".to_string()),
            Just("${x:-y}".to_string()),
            Just("$HOME".to_string()),
            Just("#".to_string()),
            Just("!".to_string()),
            "[a-z0-9=,.:/_-]{1,4}",
        ],
        1..6,
    )
    .prop_map(|v| v.concat())
}

fn toml_str(s: &str) -> String {
    let mut out = String::from(r#"""#);
    for c in s.chars() {
        match c {
            '"' => out.push_str(r#"\""#),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn exe(w: &Work, rel: &str, text: &str) {
    let p = w.file(rel, text);
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

/// The stand-in NCCL binary writes its arguments (one per line, NUL-free values) and $INJ_ENV.
fn stand_ins(w: &Work) {
    let rec = w.path().join("received");
    exe(
        w,
        "bin/all_reduce_perf_mpi",
        &format!(
            r#"#!/bin/bash
{{ for a in "$@"; do printf 'ARG %s\n' "$a"; done; printf 'ENV %s\n' "$INJ_ENV"; }} > {}
"#,
            rec.display()
        ),
    );
    // srun: options up to the command, the image recorded, then the command run as srun would
    exe(
        w,
        "bin/srun",
        &format!(
            r#"#!/bin/bash
while [ $# -gt 0 ]; do case "$1" in --container-image=*) printf '%s\n' "${{1#--container-image=}}" > {}/image;; -*) ;; *) break;; esac; shift; done
exec "$@"
"#,
            w.path().display()
        ),
    );
    exe(w, "bin/scontrol", "#!/bin/bash\necho node001\n");
}

fn tests_and_scenario(w: &Work, value: &str, id: &str, image: &str) {
    w.file(
        "tests/nccl.toml",
        &format!(
            r#"name = "nccl"
description = "d"
test_template_name = "NcclTest"
[cmd_args]
docker_image_url = {}
inj = {}
[extra_env_vars]
INJ_ENV = {}
"#,
            toml_str(image),
            toml_str(value),
            toml_str(value)
        ),
    );
    w.file(
        "s.toml",
        &format!(
            r#"name = "inj"
[[Tests]]
id = {}
test_name = "nccl"
"#,
            toml_str(id)
        ),
    );
}

fn received(w: &Work) -> (Vec<String>, String) {
    let text = std::fs::read_to_string(w.path().join("received")).unwrap_or_default();
    let args = text
        .lines()
        .filter_map(|l| l.strip_prefix("ARG "))
        .map(str::to_string)
        .collect();
    let env = text
        .lines()
        .find_map(|l| l.strip_prefix("ENV "))
        .unwrap_or("<none>")
        .to_string();
    (args, env)
}

fn check_arrived(w: &Work, value: &str, mark: &Path, what: &str) {
    assert!(!mark.exists(), "{what}: a value ran a command: {value:?}");
    let (args, env) = received(w);
    // an extra cmd_arg (nccl-tests' own size fields are sizes now): `--inj <value>`
    let i = args.iter().position(|a| a == "--inj");
    assert_eq!(
        i.and_then(|i| args.get(i + 1)).map(String::as_str),
        Some(value),
        "{what}: argument changed; got {args:?}"
    );
    assert_eq!(env, value, "{what}: env value changed");
}

/// A value the shell expands on purpose, so not expected to arrive literally: one with a `$NAME` reference
/// (`quote` keeps such references live and everything else literal; its unit tests cover them), or an env value
/// that is one whole command substitution, `$(...)`, which CloudAI's configs use as shell text by design
/// (`DYNAMO_NODELIST = "$(scontrol show hostname …)"`; `util::shell::env_value`'s unit test covers it).
fn expands(v: &str) -> bool {
    cloudai::util::shell::has_reference(v) || cloudai::util::shell::is_command_substitution(v)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn slurm_scripts_keep_values_literal(raw in nasty(), id_raw in nasty()) {
        let w = Work::new();
        let mark = w.path().join("MARK");
        let value = raw.replace("MARK", &mark.display().to_string());
        prop_assume!(!expands(&value));
        // ids are one path component: no '/', no leading '.'
        let id = format!("t{}", id_raw.replace("MARK", "mark").replace('/', "_"));
        let image = format!("reg.io/x:{}", value.replace(['/', ' '], ""));
        stand_ins(&w);
        w.file("system.toml", common::slurm::SYSTEM);
        tests_and_scenario(&w, &value, &id, &image);
        let out = w
            .cloudai()
            .args(common::DRY_RUN_S_TOML)
            .output()
            .unwrap();
        prop_assert!(out.status.success(), "{}", stdout_of(&out));
        let script = w.results_root().join(&id).join("0/cloudai_sbatch_script.sh");
        prop_assert!(script.is_file(), "{}", script.display());
        let run = std::process::Command::new("bash")
            .arg(&script)
            .current_dir(w.path())
            .env("PATH", format!("{}:{}", w.path().join("bin").display(), std::env::var("PATH").unwrap()))
            .output()
            .unwrap();
        let _ = run;
        check_arrived(&w, &value, &mark, "slurm");
        let img = std::fs::read_to_string(w.path().join("image")).unwrap_or_default();
        prop_assert_eq!(img.trim_end_matches('\n'), image.as_str());
    }

    #[test]
    fn standalone_runs_keep_values_literal(raw in nasty()) {
        let w = Work::new();
        let mark = w.path().join("MARK");
        let value = raw.replace("MARK", &mark.display().to_string());
        prop_assume!(!expands(&value));
        stand_ins(&w);
        w.standalone();
        tests_and_scenario(&w, &value, "t", "");
        let out = w.cloudai_with_bin().args(common::RUN_S_TOML).output().unwrap();
        let _ = out;
        check_arrived(&w, &value, &mark, "standalone");
    }
}

#[test]
fn a_newline_in_any_value_is_a_config_error() {
    let cases = [
        (
            "system",
            r#"extra_srun_args = "--x\ntouch /tmp/m"
"#,
        ),
        (
            "test",
            r#"[cmd_args]
docker_image_url = ""
minbytes = "1\n2"
"#,
        ),
    ];
    for (what, extra) in cases {
        let w = Work::new();
        let sys = common::slurm::SYSTEM.replacen(
            r#"name = "local-slurm""#,
            &format!(
                r#"name = "local-slurm"
{}"#,
                if what == "system" { extra } else { "" }
            ),
            1,
        );
        w.file("system.toml", &sys);
        let test = match what {
            "test" => format!(
                r#"name = "nccl"
description = "d"
test_template_name = "NcclTest"
{extra}"#
            ),
            _ => r#"name = "nccl"
description = "a\nmulti-line description is fine"
test_template_name = "NcclTest"
[cmd_args]
docker_image_url = ""
"#
            .to_string(),
        };
        w.file("tests/nccl.toml", &test);
        w.file(
            "s.toml",
            r#"name = "s"
[[Tests]]
id = "a"
test_name = "nccl"
"#,
        );
        let out = w.cloudai().args(common::DRY_RUN_S_TOML).output().unwrap();
        let text = stdout_of(&out);
        assert_eq!(out.status.code(), Some(1), "{what}: {text}");
        assert!(text.contains("control character '\\n'"), "{what}: {text}");
        assert!(!w.path().join("out").exists(), "{what}");
    }
    // BashCmd's cmd is a script: it may span lines, as CloudAI runs it (the batch script carries it whole)
    let w = Work::new();
    w.file("system.toml", common::slurm::SYSTEM);
    w.file(
        "tests/nccl.toml",
        r#"name = "nccl"
description = "d"
test_template_name = "BashCmd"
[cmd_args]
cmd = "echo a\necho b"
"#,
    );
    w.file(
        "s.toml",
        r#"name = "s"
[[Tests]]
id = "a"
test_name = "nccl"
"#,
    );
    let out = w.cloudai().args(common::DRY_RUN_S_TOML).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let script =
        std::fs::read_to_string(w.results_root().join("a/0/cloudai_sbatch_script.sh")).unwrap();
    assert!(script.contains("echo a\necho b"), "{script}");
    // env names are written as `export NAME=…`
    let w = Work::new();
    w.standalone();
    w.file(
        "tests/nccl.toml",
        r#"name = "nccl"
description = "d"
test_template_name = "NcclTest"
[cmd_args]
docker_image_url = ""
[extra_env_vars]
"A;touch x" = "1"
"#,
    );
    w.file(
        "s.toml",
        r#"name = "s"
[[Tests]]
id = "a"
test_name = "nccl"
"#,
    );
    let out = w
        .cloudai()
        .args(common::RUN_S_TOML)
        .arg("--output-dir")
        .arg("o")
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("is not an environment variable name"),
        "{text}"
    );
}
