use clap::{Args, ValueEnum};

use crate::config::system::scheduler_names;
use crate::workloads;

#[derive(Args, Debug)]
pub(crate) struct ListArgs {
    /// What to list
    #[arg(value_enum, ignore_case = true)]
    what: What,
    /// Show details
    #[arg(short, long)]
    verbose: bool,
    /// Print the list as JSON (every detail) instead of text
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum What {
    /// Scenario reports this build writes
    Reports,
    /// DSE agents
    Agents,
    /// Test templates and the schedulers each runs on
    Templates,
    /// Schedulers whose configs are understood
    Schedulers,
}

/// Reports this build writes after a run.
const REPORTS: &[(&str, &str)] = &[
    ("per_test", "per iteration: cloudai_nccl_test_csv_report.csv and cloudai_nccl_test_bokeh_report.html (NCCL)"),
    ("scenario", "<scenario>.html and summary.json in the results root, with busbw comparisons"),
    ("status", "console table of every test iteration's status, reason and results path"),
];

/// The list as JSON: every item with all it has to say.
fn json(what: What) -> serde_json::Value {
    use serde_json::json;
    match what {
        What::Reports => REPORTS
            .iter()
            .map(|(name, what)| json!({ "name": name, "description": what }))
            .collect(),
        What::Agents => crate::config::test::AGENTS
            .iter()
            .zip(crate::config::test::AGENT_CLASSES)
            .map(|(name, (class, doc))| json!({ "name": name, "class": class, "description": doc }))
            .collect(),
        What::Templates => workloads::all()
            .iter()
            .map(|w| {
                json!({
                    "name": w.template(),
                    "schedulers": w.schedulers(),
                    "cmd_args": w.args().iter().map(|a| a.name).collect::<Vec<_>>(),
                })
            })
            .collect(),
        // every scheduler a system TOML can name runs (`systems::build` covers them all)
        What::Schedulers => scheduler_names()
            .iter()
            .map(|s| json!({ "name": s, "runnable": true }))
            .collect(),
    }
}

pub fn list(args: &ListArgs) -> i32 {
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json(args.what)).unwrap_or_default()
        );
        return 0;
    }
    match args.what {
        What::Reports => {
            println!("Available scenario reports:");
            for (i, (name, what)) in REPORTS.iter().enumerate() {
                if args.verbose {
                    println!("{}. \"{name}\" ({what})", i + 1);
                } else {
                    println!("{}. \"{name}\"", i + 1);
                }
            }
        }
        What::Agents => {
            println!("Available agents:");
            let agents = crate::config::test::AGENTS
                .iter()
                .zip(crate::config::test::AGENT_CLASSES);
            for (i, (name, (class, doc))) in agents.enumerate() {
                if args.verbose {
                    println!("{}. \"{name}\" class={class} ({doc})", i + 1);
                } else {
                    println!("{}. \"{name}\" class={class}", i + 1);
                }
            }
        }
        What::Templates => {
            println!("Available test templates:");
            let runs_on = |w: &&dyn crate::workloads::Workload| w.schedulers().join(",");
            for (i, w) in workloads::all().iter().enumerate() {
                if args.verbose {
                    let args: Vec<&str> = w.args().iter().map(|a| a.name).collect();
                    println!(
                        "{}. \"{}\" schedulers={} cmd_args={}",
                        i + 1,
                        w.template(),
                        runs_on(w),
                        args.join(",")
                    );
                } else {
                    println!("{}. \"{}\" schedulers={}", i + 1, w.template(), runs_on(w));
                }
            }
        }
        What::Schedulers => {
            println!("Available schedulers:");
            for (i, s) in scheduler_names().iter().enumerate() {
                println!("{}. \"{s}\"", i + 1);
            }
        }
    }
    0
}
