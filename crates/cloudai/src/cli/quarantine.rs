//! `cloudai quarantine`: the nodes cloudai holds out of service (and those others hold), and giving ours back.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::bad_nodes::hold as glue;
use crate::exit_codes::Failure;
use crate::quarantine::Held;

#[derive(Args, Debug)]
pub(crate) struct QuarantineCmd {
    #[command(subcommand)]
    what: What,
}

#[derive(Subcommand, Debug)]
enum What {
    /// Every node cloudai holds: since when, why, its requalifications; and the nodes out of service by others
    List {
        /// System TOML (Slurm)
        #[arg(long, env = "CLOUDAI_SYSTEM_CONFIG")]
        system_config: PathBuf,
        /// Nodes to look at for others' drains [default: the default partition's]
        #[arg(long)]
        nodes: Option<String>,
        /// Released nodes too
        #[arg(long)]
        all: bool,
        #[arg(long)]
        json: bool,
    },
    /// Give a node cloudai holds back to service (only while its mark is still cloudai's)
    Release {
        /// System TOML (Slurm)
        #[arg(long, env = "CLOUDAI_SYSTEM_CONFIG")]
        system_config: PathBuf,
        #[arg(required = true, value_name = "NODE")]
        nodes: Vec<String>,
        /// Release even when someone else's drain (or another run's) is on it now: says what it overrides
        #[arg(long)]
        force: bool,
        /// Say what would run; change nothing
        #[arg(long)]
        dry_run: bool,
    },
}

fn load(p: &std::path::Path) -> Result<crate::config::system::SystemConfig, Failure> {
    crate::config::system::load(p).map_err(Failure::from)
}

pub fn quarantine(cmd: &QuarantineCmd) -> Result<(), Failure> {
    match &cmd.what {
        What::List {
            system_config,
            nodes,
            all,
            json,
        } => {
            let sys = load(system_config)?;
            let rt = crate::runner::runtime()?;
            let (_, others) =
                crate::systems::fleet_of(&sys).nodes_to_test(nodes.as_deref(), &rt)?;
            let (records, finished) =
                glue::with_report(&sys, false, |q| q.store.records()).map_err(Failure::Error)?;
            if !*json {
                crate::quarantine::Outcome::say_finished(&finished);
            }
            let held: Vec<_> = records
                .into_iter()
                .filter(|r| *all || r.state.is_out())
                .collect();
            let theirs: Vec<(String, String)> = others
                .into_iter()
                .filter(|(n, why)| !why.contains("cloudai:") && !held.iter().any(|r| &r.node == n))
                .collect();
            if *json {
                let v = serde_json::json!({
                    "held": held,
                    "finished": finished,
                    "out_of_service_by_others": theirs
                        .iter()
                        .map(|(n, w)| serde_json::json!({"node": n, "reason": w}))
                        .collect::<Vec<_>>(),
                });
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
                return Ok(());
            }
            let when = |t: i64| {
                chrono::DateTime::from_timestamp(t, 0)
                    .map(|t| {
                        t.with_timezone(&chrono::Local)
                            .format("%Y-%m-%d %H:%M")
                            .to_string()
                    })
                    .unwrap_or_default()
            };
            println!("{} node(s) held by cloudai on {}", held.len(), sys.name);
            for r in &held {
                println!(
                    "  {:<16} {:<12} since {}  requalifications {} (passed in a row {})  run {}\n    why: {}{}",
                    r.node,
                    r.state.as_str(),
                    when(r.since),
                    r.attempts,
                    r.passes,
                    r.run,
                    r.reason,
                    if r.evidence.is_empty() {
                        String::new()
                    } else {
                        format!("\n    latest: {}", r.evidence)
                    }
                );
            }
            println!(
                "{} node(s) out of service by others (not ours, never touched)",
                theirs.len()
            );
            for (n, why) in &theirs {
                println!("  {n:<16} {why}");
            }
            Ok(())
        }
        What::Release {
            system_config,
            nodes,
            force,
            dry_run,
        } => {
            let sys = load(system_config)?;
            let outs = glue::with(&sys, *dry_run, |q| {
                nodes
                    .iter()
                    .map(|n| q.put_back(n, *force, Held::Released, "released by hand"))
                    .collect::<Result<Vec<_>, crate::quarantine::QuarantineError>>()
            })
            .map_err(Failure::Error)?;
            for o in &outs {
                o.say();
            }
            let refused = outs.iter().filter(|o| o.refused()).count();
            if refused > 0 {
                return Err(Failure::Outcome(1));
            }
            Ok(())
        }
    }
}
