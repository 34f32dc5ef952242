//! The results tree: `<output>/<scenario>_<timestamp>/<test id>/<iteration>/`, with CloudAI's files and our typed
//! per-iteration record.

pub mod checks;
pub mod record;
pub mod state;

use std::path::{Path, PathBuf};

pub use record::{EndReason, IterationRecord, Status};

/// Paths of one scenario's results.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    pub root: PathBuf,
    /// A design-space exploration step: its iterations live one level deeper, `<test>/<iteration>/<step>/`.
    pub step: Option<u64>,
}

impl Layout {
    /// `<output>/<scenario>_<YYYY-MM-DD_HH-MM-SS>`, local time like CloudAI.
    pub fn new(output: &Path, scenario: &str, now: chrono::DateTime<chrono::Local>) -> Self {
        Self {
            root: output.join(format!("{scenario}_{}", now.format("%Y-%m-%d_%H-%M-%S"))),
            step: None,
        }
    }

    /// Creates the results root exclusively, and its parents: a second run of the same scenario started in the
    /// same second into the same output directory gets `<scenario>_<timestamp>_2` (then `_3`, …) instead of
    /// writing over the first.
    pub fn create(
        output: &Path,
        scenario: &str,
        now: chrono::DateTime<chrono::Local>,
    ) -> std::io::Result<Self> {
        std::fs::create_dir_all(output)?;
        let base = Self::new(output, scenario, now).root;
        for n in 1..=1000 {
            let root = if n == 1 {
                base.clone()
            } else {
                PathBuf::from(format!("{}_{n}", base.display()))
            };
            match std::fs::create_dir(&root) {
                Ok(()) => return Ok(Self { root, step: None }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other(format!(
            "{} and 999 numbered variants already exist",
            base.display()
        )))
    }

    pub(crate) fn iteration_dir(&self, test_id: &str, iteration: u64) -> PathBuf {
        let dir = self.root.join(test_id).join(iteration.to_string());
        match self.step {
            Some(s) => dir.join(s.to_string()),
            None => dir,
        }
    }
}
