//! `cloudai --version` names the commit it was built from (`git rev-parse`; "unknown commit" outside a checkout).

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !s.is_empty()).then_some(s)
}

fn main() {
    let commit = match (
        git(&["rev-parse", "--short=12", "HEAD"]),
        git(&["log", "-1", "--format=%cs"]),
    ) {
        (Some(c), Some(d)) => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some();
            format!("{c}{} {d}", if dirty { "-modified" } else { "" })
        }
        _ => "unknown commit".to_string(),
    };
    println!("cargo:rustc-env=CLOUDAI_COMMIT={commit}");
    // a new commit, checkout or staged change rebuilds the version string: only files that exist are watched (a
    // missing one, such as packed-refs in a fresh clone, would make every build re-run this script)
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        let dir = Path::new(&dir);
        let mut watch = vec![dir.join("HEAD"), dir.join("index"), dir.join("packed-refs")];
        if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
            watch.push(dir.join(r));
        }
        for p in watch.iter().filter(|p| p.exists()) {
            println!("cargo:rerun-if-changed={}", p.display());
        }
    }
    println!("cargo:rerun-if-env-changed=CLOUDAI_COMMIT");
}
