//! `find-bad-nodes`: pairwise NCCL sweeps that isolate slow or broken nodes.

use std::path::PathBuf;

use clap::Args;

use crate::bad_nodes::{self, Request};

#[derive(Args, Debug)]
pub struct FindArgs {
    /// System TOML (Slurm; Run:ai or Kubernetes with node affinity)
    #[arg(long, env = "CLOUDAI_SYSTEM_CONFIG")]
    system_config: Option<PathBuf>,
    /// Directory of test TOMLs
    #[arg(long)]
    tests_dir: PathBuf,
    /// Name of the NCCL test to run on each pair (its `name` in the tests directory)
    #[arg(long)]
    test: String,
    /// Nodes to check [default: the Slurm default partition's nodes; Kubernetes: every usable GPU node]
    #[arg(long)]
    nodes: Option<String>,
    /// A pair fails below this peak busbw (GB/s) [default: more than --tolerance below the median pair]
    #[arg(long, value_name = "GBPS", conflicts_with = "baseline")]
    min_busbw: Option<f64>,
    /// Where the results go [default: the system's output_path]
    #[arg(long)]
    output_dir: Option<PathBuf>,
    #[command(flatten)]
    grading: super::BaselineArgs,
}

pub fn find(args: &FindArgs) -> i32 {
    let baseline = match args.grading.load() {
        Ok(b) => b,
        Err(e) => {
            e.report();
            return 1;
        }
    };
    bad_nodes::run(&Request {
        system: args.system_config.as_deref(),
        tests_dir: &args.tests_dir,
        test: &args.test,
        nodes: args.nodes.as_deref(),
        output_dir: args.output_dir.as_deref(),
        min_busbw: args.min_busbw,
        baseline,
        tolerance: args.grading.tolerance / 100.0,
    })
}
