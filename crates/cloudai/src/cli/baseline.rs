//! `cloudai baseline create --result-dir DIR... --output baseline.toml`: medians of the passed iterations of
//! known-good results trees.

use crate::exit_codes::Failure;
use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::baseline::Baseline;
use crate::report::scenario::read_tree;
use crate::results::Status;
use crate::{info, warn};

#[derive(Args, Debug)]
pub(crate) struct BaselineCmd {
    #[command(subcommand)]
    action: Action,
}

#[derive(Subcommand, Debug)]
enum Action {
    /// Build a baseline from known-good results trees (only their PASSED iterations count)
    Create {
        /// Scenario results directories (`<output>/<scenario>_<timestamp>`)
        #[arg(long, num_args = 1.., required = true)]
        result_dir: Vec<PathBuf>,
        /// Where to write the baseline TOML
        #[arg(long)]
        output: PathBuf,
    },
}

pub fn baseline(cmd: &BaselineCmd) -> Result<(), Failure> {
    let Action::Create { result_dir, output } = &cmd.action;
    let mut trees = Vec::new();
    for dir in result_dir {
        if !dir.is_dir() {
            return Err(Failure::Error(format!(
                "{}: not a directory (expected a scenario results directory)",
                dir.display()
            )));
        }
        let entries = read_tree(dir, true);
        let (passed, other): (Vec<_>, Vec<_>) = entries
            .into_iter()
            .partition(|e| e.record.status == Status::Passed);
        if !other.is_empty() {
            warn!(
                "{}: {} iteration(s) that did not pass are left out of the baseline",
                dir.display(),
                other.len()
            );
            // a run whose shape was not the one asked (or that failed any other check) is no reference
            for e in &other {
                warn!(
                    "  {} #{}: {}: {}",
                    e.record.test_id,
                    e.record.iteration,
                    e.record.status.as_str(),
                    e.record.message
                );
            }
        }
        trees.push((dir.display().to_string(), passed));
    }
    let sources = trees.iter().map(|(d, _)| d.clone()).collect();
    let b = Baseline::from_iterations(
        sources,
        trees.iter().flat_map(|(_, entries)| {
            entries.iter().map(|e| {
                (
                    e.record.template.as_str(),
                    e.record.output_path.clone(),
                    e.points.as_slice(),
                )
            })
        }),
    );
    if b.entries.is_empty() {
        return Err(Failure::Error(format!(
            "No passed iteration with measurements in {}: nothing to build a baseline from",
            result_dir
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    if let Err(e) = crate::baseline::write(output, &b) {
        return Err(Failure::Error(format!(
            "Cannot write {}: {e}",
            output.display()
        )));
    }
    let mut shapes: Vec<String> = b.entries.iter().map(|e| e.key.shape()).collect();
    shapes.dedup();
    info!(
        "Baseline written to {}: {} values for {} ({} tree(s))",
        output.display(),
        b.entries.len(),
        shapes.join(", "),
        result_dir.len()
    );
    Ok(())
}
