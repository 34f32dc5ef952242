//! Helpers for the integration tests: a scratch directory with config files and a `cloudai` command in it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use assert_cmd::Command;

pub struct Work {
    pub dir: tempfile::TempDir,
}

impl Work {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `text` to `rel` (creating parent directories) and returns the full path.
    pub fn file(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        p
    }

    /// `cloudai` with its working directory here (so debug.log lands here).
    pub fn cloudai(&self) -> Command {
        let mut c = Command::cargo_bin("cloudai").unwrap();
        c.current_dir(self.path());
        c
    }

    /// A standalone system that writes results under `out/`.
    pub fn standalone(&self) -> PathBuf {
        self.file(
            "system.toml",
            "name = \"local\"\nscheduler = \"standalone\"\ninstall_path = \"install\"\noutput_path = \"out\"\n",
        )
    }

    /// The single scenario results directory under `out/`.
    pub fn results_root(&self) -> PathBuf {
        let out = self.path().join("out");
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(&out)
            .unwrap_or_else(|e| panic!("{}: {e}", out.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_dir())
            .collect();
        assert_eq!(
            dirs.len(),
            1,
            "expected one results directory, found {dirs:?}"
        );
        dirs.pop().unwrap()
    }
}

/// The shared folder with CloudAI's reference material (beside the repository checkout).
pub fn shared() -> PathBuf {
    if let Ok(p) = std::env::var("CLOUDAI_SHARED_DIR") {
        return PathBuf::from(p);
    }
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let p = here.join("../../../shared");
    assert!(
        p.is_dir(),
        "the shared reference folder is missing at {} (set CLOUDAI_SHARED_DIR)",
        p.display()
    );
    p.canonicalize().unwrap()
}

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

pub fn stdout_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}
