//! Every runnable command of the README and of docs/*.md works from a plain clone: each ```sh block runs in a fresh
//! clone of HEAD
//! with the binaries under test on PATH (`cargo run [--release] -p X --` stands for X; `cargo install` and
//! `cargo test` lines are the build and this very run). ```sh slurm blocks need the local Slurm cluster.
//! ```text blocks are synopses with placeholders; ```console ones need root (CI's .ci/run runs them).

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::stdout_of;

/// (info string, first line number, commands) of each fenced block.
fn blocks(readme: &str) -> Vec<(String, usize, Vec<String>)> {
    let mut out = Vec::new();
    let mut cur: Option<(String, usize, Vec<String>)> = None;
    for (i, line) in readme.lines().enumerate() {
        if let Some(info) = line.strip_prefix("```") {
            match cur.take() {
                Some(b) => out.push(b),
                None => cur = Some((info.trim().to_string(), i + 2, Vec::new())),
            }
            continue;
        }
        if let Some((_, _, lines)) = cur.as_mut() {
            lines.push(line.to_string());
        }
    }
    out
}

/// The block as a script for a clone with the built binaries on PATH.
fn script(lines: &[String]) -> String {
    let mut joined = Vec::new();
    let mut acc = String::new();
    for l in lines {
        match l.strip_suffix('\\') {
            Some(head) => acc.push_str(head),
            None => {
                acc.push_str(l);
                joined.push(std::mem::take(&mut acc));
            }
        }
    }
    let mut out =
        String::from("set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n");
    for l in joined {
        let t = l.trim();
        if t.is_empty() || t.starts_with('#') || t.starts_with("cargo test") {
            continue;
        }
        if let Some(rest) = t.strip_prefix("cargo install --path ") {
            // the install's result is the binary under test: check that the path it names is a crate
            let path = rest.split_whitespace().next().unwrap();
            out.push_str(&format!("test -f {path}/Cargo.toml\n"));
            continue;
        }
        let t = t
            .replace("cargo run --release -p cloudai --", "cloudai")
            .replace("cargo run -p cloudai --", "cloudai")
            .replace("cargo run --release -p runai-mock --", "runai-mock")
            .replace("cargo run -p runai-mock --", "runai-mock");
        assert!(
            !t.contains("cargo "),
            "a cargo command the doc test cannot stand in for: {t}"
        );
        out.push_str(&t);
        out.push('\n');
    }
    out
}

fn link(bin: &Path, name: &str, target: &Path) {
    assert!(target.is_file(), "{} is not built", target.display());
    std::os::unix::fs::symlink(target, bin.join(name)).unwrap();
}

#[test]
fn every_readme_command_works_from_a_plain_clone() {
    let Some((tmp, clone)) = common::clone_head() else {
        return;
    };
    let bin = tmp.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let cloudai = assert_cmd::cargo::cargo_bin("cloudai");
    link(&bin, "cloudai", &cloudai);
    link(&bin, "runai-mock", &cloudai.with_file_name("runai-mock"));
    let mut pages = vec![clone.join("README.md")];
    let mut docs: Vec<_> = std::fs::read_dir(clone.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    let mut ran = 0;
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        let name = page.strip_prefix(&clone).unwrap().display().to_string();
        for (info, line, lines) in blocks(&text) {
            let runs = match info.as_str() {
                "sh" => true,
                "sh slurm" => common::slurm::cluster_up(),
                _ => false,
            };
            if !runs {
                continue;
            }
            let s = script(&lines);
            let out = std::process::Command::new("timeout")
                .arg(Duration::from_secs(240).as_secs().to_string())
                .args(["bash", "-c", &s])
                .current_dir(&clone)
                .env(
                    "PATH",
                    format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
                )
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{name}:{line} ({info}) failed:\n{s}\n---\n{}",
                stdout_of(&out)
            );
            ran += 1;
        }
    }
    assert!(ran >= 3, "only {ran} README and docs blocks ran");
}
