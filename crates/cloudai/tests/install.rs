//! install / uninstall against a git repository made here and a stand-in enroot: what is missing is installed at
//! its pinned commit, a second install does nothing, run refuses while something is missing, scripts use the
//! cached image, and uninstall removes exactly what install made.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::{stdout_of, Work};

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

const IMAGE: &str = "nvcr.io#nvidia/pytorch:24.02-py3";

/// A bare repository with two commits (the test pins the first), a Slurm system caching images, and a test using both.
fn setup(w: &Work) -> String {
    let src = w.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    git(&src, &["init", "--quiet", "-b", "main"]);
    std::fs::write(src.join("VERSION"), "one\n").unwrap();
    git(&src, &["add", "."]);
    git(&src, &["commit", "--quiet", "-m", "one"]);
    let first = git(&src, &["rev-parse", "HEAD"]);
    std::fs::write(src.join("VERSION"), "two\n").unwrap();
    git(&src, &["commit", "--quiet", "-am", "two"]);
    // installs clone from a bare repository, as from a server
    git(w.path(), &["clone", "--quiet", "--bare", "src", "src.git"]);
    let src = w.path().join("src.git");
    w.file(
        "system.toml",
        r#"name = "c"
scheduler = "slurm"
install_path = "install"
output_path = "out"
default_partition = "p"
cache_docker_images_locally = true
[[partitions]]
name = "p"
"#,
    );
    w.file(
        "tests/nccl.toml",
        &format!(
            r#"name = "nccl"
description = "d"
test_template_name = "NcclTest"
[cmd_args]
docker_image_url = "{IMAGE}"
[[git_repos]]
url = "{}"
commit = "{first}"
"#,
            src.display()
        ),
    );
    w.file(
        "s.toml",
        r#"name = "s"
[[Tests]]
id = "a"
test_name = "nccl"
"#,
    );
    // enroot that writes the image file it is asked for and counts its calls
    let calls = w.path().join("enroot-calls");
    let e = w.file(
        "bin/enroot",
        &format!(
            r#"#!/bin/bash
echo "$@" >> {}
while [ $# -gt 0 ]; do [ "$1" = -o ] && out=$2; shift; done
echo sqsh > "$out"
"#,
            calls.display()
        ),
    );
    std::fs::set_permissions(&e, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    first
}

/// `cloudai <cmd>` on this work dir's files, with the stand-in enroot on PATH: (exit code, console).
fn cloudai(w: &Work, cmd: &str) -> (Option<i32>, String) {
    let out = w.cloudai_with_bin().arg(cmd).args(ARGS).output().unwrap();
    (out.status.code(), stdout_of(&out))
}

const ARGS: [&str; 6] = [
    "--system-config",
    "system.toml",
    "--tests-dir",
    "tests",
    "--test-scenario",
    "s.toml",
];

#[test]
fn install_is_idempotent_and_uninstall_removes_exactly_it() {
    let w = Work::new();
    let first = setup(&w);
    let install = w.path().join("install");
    let repo = install.join(format!("src__{first}"));
    let sqsh = install.join("nvcr.io_nvidia__pytorch__24.02-py3.sqsh");

    // run refuses while something is missing, naming it
    let out = w.cloudai().arg("run").args(ARGS).output().unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("2 installable(s) missing")
            && text.contains("Not installed: container image"),
        "{text}"
    );

    let (code, text) = cloudai(&w, "install");
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(
        std::fs::read_to_string(repo.join("VERSION")).unwrap(),
        "one\n",
        "not the pinned commit"
    );
    assert!(sqsh.is_file());
    let calls = || {
        std::fs::read_to_string(w.path().join("enroot-calls"))
            .unwrap()
            .lines()
            .count()
    };
    assert_eq!(calls(), 1);
    assert!(std::fs::read_to_string(w.path().join("enroot-calls"))
        .unwrap()
        .contains("docker://nvcr.io/nvidia/pytorch:24.02-py3"));

    // a second install does nothing
    let (code, text) = cloudai(&w, "install");
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(text.matches("is already installed").count(), 2, "{text}");
    assert_eq!(calls(), 1);

    // scripts run the cached image and mount the repository
    let mut dry = vec!["dry-run"];
    dry.extend(ARGS);
    let out = w.cloudai().args(&dry).output().unwrap();
    assert!(out.status.success(), "{}", stdout_of(&out));
    let script =
        std::fs::read_to_string(w.results_root().join("a/0/cloudai_sbatch_script.sh")).unwrap();
    let abs = std::path::absolute(&sqsh).unwrap();
    assert!(
        script.contains(&format!("--container-image='{}'", abs.display()))
            || script.contains(&format!("--container-image={}", abs.display())),
        "{script}"
    );
    assert!(
        script.contains(&format!("src__{first}:/git/src")),
        "{script}"
    );

    // uninstall removes what install made, and nothing else
    std::fs::write(install.join("mine.txt"), "keep").unwrap();
    let out = w.cloudai().arg("uninstall").args(ARGS).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    assert!(!repo.exists() && !sqsh.exists());
    assert!(install.join("mine.txt").is_file());
}

#[test]
fn without_enroot_images_are_skipped_with_a_message() {
    let w = Work::new();
    let first = setup(&w);
    std::fs::remove_file(w.path().join("bin/enroot")).unwrap();
    let out = w
        .cloudai()
        .arg("install")
        .args(ARGS)
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("enroot is not installed here"), "{text}");
    assert!(w
        .path()
        .join(format!("install/src__{first}/VERSION"))
        .is_file());
}

#[test]
fn a_failed_install_is_named_and_leaves_nothing_that_looks_installed() {
    let w = Work::new();
    setup(&w);
    let t = std::fs::read_to_string(w.path().join("tests/nccl.toml")).unwrap();
    w.file(
        "tests/nccl.toml",
        &t.replace(r#"commit = ""#, r#"commit = "0000000"#),
    );
    let (code, text) = cloudai(&w, "install");
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("git repository") && text.contains("failed"),
        "{text}"
    );
    let left: Vec<String> = std::fs::read_dir(w.path().join("install"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("src__"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A launcher run from its own Python environment (the NeMo launcher's `launcher_repo`): install clones it and
/// makes `<repo>__<commit>-venv` from its requirements (an empty list here: no package index needed); a failed
/// environment leaves nothing that looks installed; uninstall removes both.
#[test]
fn a_launchers_python_environment_is_made_beside_its_clone() {
    let w = Work::new();
    let first = setup(&w);
    let src = w.path().join("src");
    std::fs::write(src.join("requirements.txt"), "# nothing to install\n").unwrap();
    git(&src, &["add", "."]);
    git(&src, &["commit", "--quiet", "-m", "requirements"]);
    let with_reqs = git(&src, &["rev-parse", "HEAD"]);
    git(
        w.path(),
        &[
            "--git-dir",
            "src.git",
            "fetch",
            "--quiet",
            &src.display().to_string(),
            "main:main",
        ],
    );
    for (commit, fails) in [
        // the first commit has neither pyproject.toml nor requirements.txt
        (
            first.as_str(),
            Some("has neither pyproject.toml nor requirements.txt"),
        ),
        // no such commit: the clone fails, and the environment says why it cannot be made
        (
            "0123456789abcdef0123456789abcdef01234567",
            Some("its repository"),
        ),
        (with_reqs.as_str(), None),
    ] {
        w.file(
            "tests/nccl.toml",
            &format!(
                "name = \"nccl\"\ndescription = \"d\"\ntest_template_name = \"NeMoLauncher\"\n\
                 [cmd_args]\ndocker_image_url = \"{IMAGE}\"\n[launcher_repo]\nurl = \"{}\"\ncommit = \"{commit}\"\n",
                w.path().join("src.git").display()
            ),
        );
        let venv = w.path().join(format!("install/src__{commit}-venv"));
        let (code, text) = cloudai(&w, "install");
        if let Some(says) = fails {
            assert_ne!(code, Some(0), "{text}");
            assert!(text.contains(says), "{says}: {text}");
            assert!(!venv.exists(), "a failed environment is removed");
            continue;
        }
        assert_eq!(code, Some(0), "{text}");
        assert!(venv.join("bin/python").exists(), "{text}");
        assert!(!venv.join(".cloudai-partial").exists());
        let (code, text) = cloudai(&w, "install");
        assert_eq!(code, Some(0), "{text}");
        assert!(text.contains("is already installed"), "{text}");
        let (code, text) = cloudai(&w, "uninstall");
        assert_eq!(code, Some(0), "{text}");
        assert!(!venv.exists() && !w.path().join(format!("install/src__{commit}")).exists());
    }
}
