//! The release tarball (`scripts/dist.sh`) runs on old login nodes: its binaries import no glibc symbol newer than
//! 2.17, and it carries the man page and completions. `.ci/run` builds it first (CLOUDAI_REQUIRE_DIST=1 makes a
//! missing tarball a failure); elsewhere the test skips visibly without one.

use crate::common;

use std::path::{Path, PathBuf};

/// The highest `GLIBC_x.y[.z]` version named in an ELF file (its `.gnu.version_r` names live in `.dynstr`).
fn max_glibc(bin: &Path) -> Option<Vec<u32>> {
    let bytes = std::fs::read(bin).unwrap();
    let pat = b"GLIBC_";
    let mut best: Option<Vec<u32>> = None;
    let mut i = 0;
    while let Some(off) = bytes[i..].windows(pat.len()).position(|w| w == pat) {
        let start = i + off + pat.len();
        let end = bytes[start..]
            .iter()
            .position(|b| !(b.is_ascii_digit() || *b == b'.'))
            .map_or(bytes.len(), |n| start + n);
        let v: Option<Vec<u32>> = std::str::from_utf8(&bytes[start..end])
            .ok()
            .filter(|s| s.starts_with("2."))
            .and_then(|s| s.split('.').map(|p| p.parse().ok()).collect());
        if let Some(v) = v {
            if best.as_ref().is_none_or(|b| v > *b) {
                best = Some(v);
            }
        }
        i = start;
    }
    best
}

fn tarball() -> Option<PathBuf> {
    let dir = common::repo().join("dist");
    std::fs::read_dir(&dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("cloudai-") && n.ends_with("-x86_64-linux.tar.gz"))
        })
        .max_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
}

#[test]
fn the_scanner_sees_this_machines_glibc() {
    // the test binary itself is linked against the build machine's glibc: the scanner must find a version
    let me = std::env::current_exe().unwrap();
    let v = max_glibc(&me).expect("no GLIBC_ version found in a glibc-linked binary");
    assert!(v >= vec![2, 2, 5], "{v:?}");
}

#[test]
fn dist_binaries_need_glibc_2_17_at_most() {
    let Some(tgz) = tarball() else {
        assert!(
            std::env::var("CLOUDAI_REQUIRE_DIST").is_err(),
            "no dist/cloudai-*-x86_64-linux.tar.gz: run scripts/dist.sh"
        );
        common::skip("no dist tarball (scripts/dist.sh builds it)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let f = std::fs::File::open(&tgz).unwrap();
    tar::Archive::new(flate2::read::GzDecoder::new(f))
        .unpack(dir.path())
        .unwrap();
    let version = env!("CARGO_PKG_VERSION");
    let root = dir.path().join(format!("cloudai-{version}-x86_64-linux"));
    for bin in ["bin/cloudai", "bin/runai-mock"] {
        let p = root.join(bin);
        let v = max_glibc(&p).unwrap_or_default();
        assert!(
            v <= vec![2, 17],
            "{bin} imports GLIBC_{} (newer than 2.17): it would not start on RHEL/Rocky 7",
            v.iter().map(u32::to_string).collect::<Vec<_>>().join(".")
        );
    }
    let out = std::process::Command::new(root.join("bin/cloudai"))
        .arg("--version")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with(&format!("cloudai {version} (")), "{text}");
    let man = std::fs::read_to_string(root.join("share/man/man1/cloudai.1")).unwrap();
    assert!(man.contains(".TH cloudai"), "{man}");
    for sh in ["bash", "zsh", "fish"] {
        let c =
            std::fs::read_to_string(root.join(format!("share/completions/cloudai.{sh}"))).unwrap();
        assert!(
            c.contains("find-bad-nodes"),
            "{sh} completion lacks find-bad-nodes"
        );
    }
}
