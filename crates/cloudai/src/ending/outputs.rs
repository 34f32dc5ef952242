//! The report registry: every scenario-level output beside the scenario page, one module-sized entry each and one
//! line in [`OUTPUTS`]. The scenario report (`report::scenario::generate`: each iteration's workload files, the
//! scenario page, `summary.json`) comes first, since every entry here reads its summary; then each entry writes
//! itself when asked. A new output is one `impl Output` and one line.

use std::path::{Path, PathBuf};

use crate::ledger::{self, Ledger};
use crate::report::scenario::Summary;
use crate::results::IterationRecord;
use crate::{error, info};

/// What the user asked for beyond the results tree (`--junit`, `--no-tarball`, `--metrics-file`: the flags
/// `run`, `resume` and `generate-report` share).
#[derive(Clone, Debug, Default)]
pub struct Asked {
    pub junit: Option<PathBuf>,
    /// `<root>.tgz` when an iteration did not pass (CloudAI's habit; `--no-tarball` stops it).
    pub tarball: bool,
    pub metrics_file: Option<PathBuf>,
}

/// A scenario that ended (ran, resumed or re-graded), as every output sees it.
pub struct Ended<'a> {
    pub root: &'a Path,
    pub scenario: &'a str,
    /// The final word on every iteration.
    pub records: &'a [IterationRecord],
    /// The scenario report's summary, when it could be written.
    pub summary: Option<&'a Summary>,
    /// Nothing ran (a dry-run): nothing is recorded or packed.
    pub dry_run: bool,
    /// Jobs run on (`run --detach`): nothing has ended to pack.
    pub detached: bool,
    /// The system's `[reports]` table leaves the tarball on.
    pub tarball_allowed: bool,
}

/// One output of an ended scenario.
pub trait Output: Sync {
    /// Its name in messages and docs.
    fn name(&self) -> &'static str;
    /// Writes it when asked and due; says what it did or why it could not. `false` when it was asked for and could
    /// not be written and that must fail the command (a CI system waiting for the file).
    fn write(&self, asked: &Asked, ended: &Ended) -> bool;
}

/// Every output, in the order they are written.
pub(crate) static OUTPUTS: &[&dyn Output] = &[&LedgerRecord, &MetricsFile, &Junit, &Tarball];

/// Writes every output; false when one that must not fail did.
pub fn write_all(asked: &Asked, ended: &Ended) -> bool {
    // every output is written, whichever failed before it
    let mut ok = true;
    for o in OUTPUTS {
        ok &= o.write(asked, ended);
    }
    ok
}

/// The run in the fleet ledger (`--ledger`, on by default): every graded iteration.
struct LedgerRecord;

impl Output for LedgerRecord {
    fn name(&self) -> &'static str {
        "ledger"
    }
    fn write(&self, _asked: &Asked, ended: &Ended) -> bool {
        if let (Some(s), false) = (ended.summary, ended.dry_run) {
            ledger::record_scenario(ended.root, s);
        }
        true
    }
}

/// `--metrics-file`: the ledger's metrics (OpenMetrics), after the run is recorded. A failure is a warning.
struct MetricsFile;

impl Output for MetricsFile {
    fn name(&self) -> &'static str {
        "--metrics-file"
    }
    fn write(&self, asked: &Asked, ended: &Ended) -> bool {
        if !ended.dry_run {
            write_metrics_file(asked.metrics_file.as_deref());
        }
        true
    }
}

/// `--metrics-file` of a run or a sweep: the ledger's metrics written atomically (a failure is a warning).
pub(crate) fn write_metrics_file(path: Option<&Path>) {
    let Some(path) = path else { return };
    let res = ledger::off_runtime(|| {
        let mut l = Ledger::open(&ledger::location())?;
        let text = ledger::metrics::render(&mut l)?;
        ledger::metrics::write_file(path, &text).map_err(|e| e.to_string())
    });
    match res {
        Ok(()) => info!("Metrics written to {}", path.display()),
        Err(e) => crate::warn!("Cannot write the metrics file {}: {e}", path.display()),
    }
}

/// `--junit FILE`: one testcase per iteration. Not written is an error (exit 1): a CI system waits for it.
struct Junit;

impl Output for Junit {
    fn name(&self) -> &'static str {
        "--junit"
    }
    fn write(&self, asked: &Asked, ended: &Ended) -> bool {
        let Some(path) = &asked.junit else {
            return true;
        };
        match crate::report::junit::write(path, ended.scenario, ended.records) {
            Ok(()) => {
                info!("JUnit report written to {}", path.display());
                true
            }
            Err(e) => {
                error!("Cannot write the JUnit report {}: {e}", path.display());
                false
            }
        }
    }
}

/// `<root>.tgz` of a tree where an iteration did not pass.
struct Tarball;

impl Output for Tarball {
    fn name(&self) -> &'static str {
        "tarball"
    }
    fn write(&self, asked: &Asked, ended: &Ended) -> bool {
        let failed = ended.records.iter().any(|r| !r.status.is_success());
        if asked.tarball && ended.tarball_allowed && failed && !ended.dry_run && !ended.detached {
            match crate::report::tarball::write(ended.root) {
                Ok(p) => info!("Created tarball at {}", p.display()),
                Err(e) => error!("Cannot write the results tarball: {e}"),
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_output_has_its_own_name_and_junit_failing_fails_the_command() {
        let names: std::collections::BTreeSet<_> = OUTPUTS.iter().map(|o| o.name()).collect();
        assert_eq!(names.len(), OUTPUTS.len());
        let dir = std::env::temp_dir().join(format!("cloudai-outputs-{}", std::process::id()));
        let ended = Ended {
            root: &dir,
            scenario: "s",
            records: &[],
            summary: None,
            dry_run: true,
            detached: false,
            tarball_allowed: true,
        };
        // nothing asked: every output stands aside
        assert!(write_all(&Asked::default(), &ended));
        // a JUnit file that cannot be written (under a file, not a directory) fails the command
        let asked = Asked {
            junit: Some(PathBuf::from("/dev/null/junit.xml")),
            ..Asked::default()
        };
        assert!(!write_all(&asked, &ended));
    }
}
