//! `find-bad-nodes`: pairwise NCCL sweeps that isolate slow or broken nodes.

use crate::exit_codes::Failure;
use std::path::PathBuf;

use clap::Args;

use crate::bad_nodes::{self, Request};

#[derive(Args, Debug)]
pub(crate) struct FindArgs {
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
    #[arg(long, value_parser = parse_nodes)]
    nodes: Option<String>,
    /// A pair fails below this peak busbw (GB/s) [default: more than --tolerance below the fastest pair of round 1]
    #[arg(long, value_name = "GBPS", conflicts_with = "baseline", value_parser = parse_gbps)]
    min_busbw: Option<f64>,
    /// Where the results go [default: the system's output_path]
    #[arg(long)]
    output_dir: Option<PathBuf>,
    /// Print and write the plan (pairs, job bound, nodes left out and why) and round 1's job files; submit nothing
    #[arg(long)]
    dry_run: bool,
    /// Slurm: drain each node judged bad (reason "cloudai: <evidence>"); the undo command is recorded
    #[arg(long)]
    drain: bool,
    /// Kubernetes: cordon each node judged bad and taint it cloudai.io/bad-node=<evidence>:NoSchedule
    #[arg(long)]
    cordon: bool,
    /// Kubernetes: label each node judged bad cloudai.io/bad-node=<evidence>
    #[arg(long)]
    label: bool,
    /// Try each node of a failing pair this many times with cleared partners: a node that fails some tries but
    /// not all is `suspect` (flaky), with the counts
    #[arg(long, value_name = "K", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
    repeat: u32,
    /// Kubernetes: the node label naming each node's leaf switch, to group slow links by switch [default: the
    /// first known one the nodes carry, e.g. topology.kubernetes.io/network-level-1, topology.kubernetes.io/zone]
    #[arg(long, value_name = "KEY")]
    topology_label: Option<String>,
    /// Node evidence first, on every node before any pair: a node a check fails is bad, with that evidence, and
    /// spends no pair (comma separated: nvidia-smi, kernel-log, ib, dcgm)
    #[arg(long, value_name = "CHECKS", value_parser = crate::bad_nodes::evidence::parse)]
    checks: Option<crate::bad_nodes::evidence::Checks>,
    /// Act on no node when more than this percentage of the checked nodes is judged bad
    #[arg(long, value_name = "PERCENT", default_value_t = 25.0, value_parser = parse_percent)]
    max_act_fraction: f64,
    /// Re-test the nodes cloudai quarantined (Slurm: inside a maintenance reservation, each with a partner in
    /// service): K passes in a row release a node, a fail drains it again with the new evidence
    #[arg(long, conflicts_with_all = ["drain", "cordon", "label"])]
    requalify: bool,
    /// --requalify: passes in a row that release a node
    #[arg(long, value_name = "K", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=20))]
    passes: u32,
    /// --requalify: failed requalifications after which a node is escalated (kept out for a person)
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    max_attempts: u32,
    /// After the sweep, write the ledger's metrics here atomically (OpenMetrics text, for node_exporter's textfile
    /// collector)
    #[arg(long, value_name = "PATH")]
    metrics_file: Option<std::path::PathBuf>,
    #[command(flatten)]
    grading: super::BaselineArgs,
}

pub fn find(args: &FindArgs) -> Result<(), Failure> {
    let baseline = args.grading.load()?;
    let req = Request {
        system: args.system_config.as_deref(),
        tests_dir: &args.tests_dir,
        test: &args.test,
        nodes: args.nodes.as_deref(),
        output_dir: args.output_dir.as_deref(),
        min_busbw: args.min_busbw,
        baseline,
        tolerance: args.grading.tolerance / 100.0,
        dry_run: args.dry_run,
        act: bad_nodes::act::Wanted {
            drain: args.drain,
            cordon: args.cordon,
            label: args.label,
            max_fraction: args.max_act_fraction / 100.0,
        },
        repeat: args.repeat as usize,
        topology_label: args.topology_label.as_deref(),
        checks: args.checks.clone().map(|c| c.0).unwrap_or_default(),
    };
    let swept = if args.requalify {
        bad_nodes::requalify::run(
            &req,
            bad_nodes::requalify::Rules {
                passes: args.passes,
                max_attempts: args.max_attempts,
            },
        )
    } else {
        bad_nodes::run(&req)
    };
    if !args.dry_run {
        crate::ending::outputs::write_metrics_file(args.metrics_file.as_deref());
    }
    swept
}

/// A bandwidth in GB/s: a finite number above 0.
fn parse_gbps(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 1e6 => Ok(v),
        _ => Err(format!(
            "{s} is not a bandwidth in GB/s (a number above 0, such as 150)"
        )),
    }
}

/// A percentage from 0 to 100 (`25`, `25%`).
fn parse_percent(s: &str) -> Result<f64, String> {
    match s.trim().trim_end_matches('%').parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=100.0).contains(&v) => Ok(v),
        _ => Err(format!("{s} is not a percentage from 0 to 100")),
    }
}

/// Node names as the schedulers write them, alone or as a host list: letters, digits, `.`, `_`, `-`, and `[`, `]`,
/// `,` for ranges (`node[001-016],gpu7`). Anything else (a blank, `;`, a quote) would reach a job script.
fn parse_nodes(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'[' | b']' | b',')
        })
        && s.bytes().filter(|b| *b == b'[').count() == s.bytes().filter(|b| *b == b']').count();
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?} is not a node list: names of letters, digits, '.', '_' and '-', with ranges as node[001-016], \
             separated by ','"
        ))
    }
}
