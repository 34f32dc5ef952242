//! The results tree: `<output>/<scenario>_<timestamp>/<test id>/<iteration>/`, with CloudAI's files and our typed
//! per-iteration record.

pub mod record;
pub mod test_run;

use std::path::{Path, PathBuf};

pub use record::{EndReason, IterationRecord, Status};

/// Paths of one scenario's results.
#[derive(Clone, Debug)]
pub struct Layout {
    pub root: PathBuf,
}

impl Layout {
    /// `<output>/<scenario>_<YYYY-MM-DD_HH-MM-SS>`, local time like CloudAI.
    pub fn new(output: &Path, scenario: &str, now: chrono::DateTime<chrono::Local>) -> Self {
        Self {
            root: output.join(format!("{scenario}_{}", now.format("%Y-%m-%d_%H-%M-%S"))),
        }
    }

    pub fn iteration_dir(&self, test_id: &str, iteration: u64) -> PathBuf {
        self.root.join(test_id).join(iteration.to_string())
    }
}
