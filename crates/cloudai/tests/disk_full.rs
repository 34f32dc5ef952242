//! A results disk that fills up mid-run: one clear error and exit 1, no temporary files left, and every file that
//! was written before still whole. Needs a small tmpfs (root); skipped with a visible line where mounting is not
//! allowed, unless CLOUDAI_REQUIRE_TMPFS=1 (CI) makes that a failure.

use crate::common;

use std::path::{Path, PathBuf};

use common::{data, stdout_of, Work};

struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

fn tmpfs(at: &Path, size: &str) -> Result<Mounted, String> {
    std::fs::create_dir_all(at).map_err(|e| e.to_string())?;
    let out = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(at)
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(Mounted(at.to_path_buf()))
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

fn walk(p: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(p).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, out);
        } else {
            out.push(p);
        }
    }
}

#[test]
fn a_full_disk_is_one_error_and_leaves_a_consistent_tree() {
    let w = Work::new();
    let disk = w.path().join("disk");
    let _m = match tmpfs(&disk, "64k") {
        Ok(m) => m,
        Err(e) if std::env::var_os("CLOUDAI_REQUIRE_TMPFS").is_none() => {
            common::skip(&format!("cannot mount a tmpfs here: {e}"));
            return;
        }
        Err(e) => panic!("CLOUDAI_REQUIRE_TMPFS is set but a tmpfs cannot be mounted: {e}"),
    };
    // each iteration prints the sample four times (~18 kB): the third one fills the disk
    let sample = std::fs::read_to_string(
        data().join("nccl-samples/single-node-8gpu-a100-allreduce-v2.19.4.txt"),
    )
    .unwrap();
    let out = common::nccl_standalone(
        &w,
        &sample.repeat(4),
        4,
        &["--output-dir", disk.to_str().unwrap()],
    );
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("[ERROR] ")
            && text.contains("could not be written")
            && text.contains("No space left on device")
            && text.contains("are incomplete"),
        "{text}"
    );
    let mut files = Vec::new();
    walk(&disk, &mut files);
    let tmp: Vec<_> = files
        .iter()
        .filter(|p| p.file_name().unwrap().to_string_lossy().contains(".tmp"))
        .collect();
    assert!(tmp.is_empty(), "temporary files left: {tmp:?}");
    // whatever was written is whole: every record and summary parses
    let mut records = 0;
    for f in files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
    {
        let bytes = std::fs::read(f).unwrap();
        serde_json::from_slice::<serde_json::Value>(&bytes)
            .unwrap_or_else(|e| panic!("{} is cut: {e}", f.display()));
        records += 1;
    }
    assert!(records >= 1, "nothing was kept: {files:?}");
    // an iteration that ended says so: its final record took the journal's reserved place, full disk or not
    for f in files
        .iter()
        .filter(|p| p.file_name().is_some_and(|n| n == "cloudai-run.json"))
    {
        let rec: serde_json::Value = serde_json::from_slice(&std::fs::read(f).unwrap()).unwrap();
        assert_ne!(
            rec["status"],
            "INTERRUPTED",
            "{} was left unfinished",
            f.display()
        );
    }
}
