//! `cloudai find-bad-nodes`: runs an NCCL test on disjoint node pairs, round by round (see [`plan`]), and names
//! the node or link to blame: `bad-nodes.json`, `bad-nodes.md` and `bad-nodes.html` in the results root, each
//! round a scenario results tree of its own (`round-<n>/`).
//!
//! A pair fails when its iteration fails (with `--baseline`, also by falling below it), when its peak busbw is
//! below `--min-busbw`, or, with neither, when it is more than `--tolerance` below the median of round 1's pairs.

pub mod act;
pub mod plan;
mod report;
pub mod sim;
pub mod topology;

use std::path::Path;
use std::sync::Arc;

use crate::baseline::Grading;
use crate::report::scenario::{generate, Options, Peaks};
use crate::results::{Layout, Status};
use crate::runner::Runner;
use crate::scenario::{self, Inputs};
use crate::systems::fleet;
use crate::{error, info, warn};
use plan::{Evidence, Plan, Verdict};

pub struct Request<'a> {
    pub system: Option<&'a Path>,
    pub tests_dir: &'a Path,
    pub test: &'a str,
    /// `--nodes` (`node[001-016]`); every node of the default partition when `None`.
    pub nodes: Option<&'a str>,
    pub output_dir: Option<&'a Path>,
    pub min_busbw: Option<f64>,
    pub baseline: Option<Grading>,
    pub tolerance: f64,
    /// Write the plan and round 1's job files; submit nothing.
    pub dry_run: bool,
    /// Drain / cordon / label the nodes judged bad.
    pub act: act::Wanted,
    /// Tries of each node of a failing pair with cleared partners (`--repeat`, at least 1).
    pub repeat: usize,
    /// Kubernetes: the node label that names a node's leaf switch (`--topology-label`).
    pub topology_label: Option<&'a str>,
}

/// The round's scenario: one test per pair, pinned to its two nodes.
fn round_scenario(round: usize, test: &str, pairs: &[[String; 2]]) -> String {
    let mut s = format!("name = \"find-bad-nodes-round-{round}\"\n");
    for [a, b] in pairs {
        s.push_str(&format!(
            "\n[[Tests]]\nid = \"{a}+{b}\"\ntest_name = {}\nnum_nodes = 2\nnodes = [\"{a}\", \"{b}\"]\n",
            serde_json::to_string(test).unwrap_or_default()
        ));
    }
    s
}

pub fn run(req: &Request) -> i32 {
    let system = match req.system.map(crate::config::system::load) {
        Some(Ok(s)) => s,
        Some(Err(e)) => {
            e.report();
            return 1;
        }
        None => {
            error!("find-bad-nodes pins jobs to nodes: give --system-config (a Slurm, Run:ai or Kubernetes system)");
            return 1;
        }
    };
    if let Some(e) = fleet::unpinnable(&system) {
        error!("{e}");
        return 1;
    }
    if let Some(e) = fleet::refused(req.act, &system) {
        error!("{e}");
        return 1;
    }
    let rt = match crate::runner::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            error!("{e}");
            return 1;
        }
    };
    let (mut nodes, unavailable) = match fleet::nodes(req.nodes, &system, &rt) {
        Ok(n) => n,
        Err(e) => {
            error!("{e}");
            return 1;
        }
    };
    for (n, why) in &unavailable {
        warn!("Leaving out node {n}: {why}");
    }
    nodes.sort();
    nodes.dedup();
    if nodes.len() < 2 {
        error!(
            "find-bad-nodes needs at least 2 nodes, got {}: give --nodes node[001-016]",
            nodes.len()
        );
        return 1;
    }
    let output = req
        .output_dir
        .map(Path::to_path_buf)
        .unwrap_or(system.output_path.clone());
    let root = match std::path::absolute(&output)
        .and_then(|o| Layout::create(&o, "find-bad-nodes", chrono::Local::now()))
    {
        Ok(l) => l.root,
        Err(e) => {
            error!(
                "Cannot create a results directory in {}: {e}",
                output.display()
            );
            return 1;
        }
    };
    let n = nodes.len();
    info!(
        "find-bad-nodes: {n} nodes, test {}: round 1 runs {} pair job(s) at once; then {} job(s) per node of a failing \
         pair (at most {} jobs in all with one bad node, {} with two). Results in {}",
        req.test,
        n / 2,
        req.repeat,
        Plan::bound_repeated(n, 1, req.repeat),
        Plan::bound_repeated(n, 2, req.repeat),
        root.display()
    );
    let mut plan = Plan::new(nodes).with_repeat(req.repeat);
    plan.unavailable = unavailable.into_iter().collect();
    let mut reference: Option<f64> = req.min_busbw;
    loop {
        let pairs = plan.next_round();
        if pairs.is_empty() {
            break;
        }
        let round = plan.rounds + 1;
        info!(
            "Round {round}: {} pair(s): {}",
            pairs.len(),
            pairs
                .iter()
                .map(|p| p.join("+"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let scen = root.join(format!("round-{round}.toml"));
        if let Err(e) = crate::util::fsx::write_atomic(
            &scen,
            round_scenario(round, req.test, &pairs).as_bytes(),
        ) {
            error!("Cannot write {}: {e}", scen.display());
            return 1;
        }
        let inputs = Inputs {
            system: req.system,
            tests_dir: Some(req.tests_dir),
            scenario: &scen,
            hook_dir: None,
        };
        let (sys_cfg, scenario) = match scenario::load_all(&inputs) {
            Ok(x) => x,
            Err(e) => {
                e.report();
                return 1;
            }
        };
        if let Some(r) = scenario
            .test_runs
            .iter()
            .find(|r| r.test.test_template_name != "NcclTest")
        {
            error!(
                "find-bad-nodes grades bus bandwidth: test '{}' is a {} test, not NcclTest",
                req.test, r.test.test_template_name
            );
            return 1;
        }
        let sys_cfg = Arc::new(sys_cfg);
        // each round's engine starts as `run`'s does: built, checked, connected (on its own runtime)
        let started = match crate::runner::start::start(&sys_cfg, &scenario, req.dry_run) {
            Ok(s) => s,
            Err(f) => return f.report(),
        };
        let layout = Layout {
            root: root.join(format!("round-{round}")),
            step: None,
        };
        let runner = Runner::new(started.system, scenario, layout);
        let outcome = started.rt.block_on(runner.run());
        if req.dry_run {
            return report::write_plan(&root, req.test, &plan, &pairs);
        }
        if !outcome.leftovers.is_empty() {
            return crate::results::record::report_leftovers(&root, &outcome.leftovers);
        }
        if outcome.interrupted {
            warn!(
                "Interrupted: every submitted job was cancelled; partial results in {}",
                root.display()
            );
            return crate::exit_codes::INTERRUPTED;
        }
        let opts = Options {
            compare: Vec::new(),
            tolerance: req.tolerance,
            regrade: false,
            summary: true,
            dry_run: false,
            baseline: req.baseline.clone(),
            peaks: Peaks::of(&sys_cfg),
            per_test: true,
        };
        let summary = match generate(&runner.layout.root, Some(&outcome.records), &opts) {
            Ok(s) => s,
            Err(e) => {
                error!(
                    "Cannot write the round's report in {}: {e}",
                    runner.layout.root.display()
                );
                return 1;
            }
        };
        let peak = |e: &crate::report::scenario::Entry| {
            e.metrics.get("peak_busbw_gbps").and_then(|v| v.as_f64())
        };
        if reference.is_none() && req.baseline.is_none() {
            // the median of round 1's pairs: slow pairs stand out against the rest
            let mut v: Vec<f64> = summary.tests.iter().filter_map(peak).collect();
            v.sort_by(|a, b| a.total_cmp(b));
            reference = v.get(v.len() / 2).map(|m| m * (1.0 - req.tolerance));
        }
        let results: Vec<Evidence> = pairs
            .iter()
            .filter_map(|pair| {
                let id = format!("{}+{}", pair[0], pair[1]);
                let e = summary.tests.iter().find(|e| e.record.test_id == id);
                let busbw = e.and_then(peak);
                let mut ran_on = e.map(|e| e.record.nodes.clone()).unwrap_or_default();
                ran_on.sort();
                ran_on.dedup();
                let mut wanted = pair.to_vec();
                wanted.sort();
                let (passed, reason) = match e {
                    None => (false, "no result".to_string()),
                    // the scheduler placed it elsewhere: it says nothing about this pair
                    Some(_) if !ran_on.is_empty() && ran_on != wanted => {
                        warn!(
                            "  {}+{}: ran on {} instead; its result is not evidence about this pair",
                            pair[0],
                            pair[1],
                            ran_on.join(", ")
                        );
                        return None;
                    }
                    Some(e) if e.record.status != Status::Passed => (
                        false,
                        format!("{}: {}", e.record.status.as_str(), e.record.message),
                    ),
                    Some(_) => match (busbw, reference) {
                        (Some(b), Some(t)) if b < t => {
                            (false, format!("peak busbw {b:.2} GB/s below {t:.2} GB/s"))
                        }
                        (None, _) => (false, "no busbw measured".to_string()),
                        _ => (true, String::new()),
                    },
                };
                Some(Evidence {
                    round,
                    pair: pair.clone(),
                    job_id: e.and_then(|e| e.record.job_id.clone()),
                    busbw,
                    threshold: reference,
                    passed,
                    reason,
                })
            })
            .collect();
        if results.is_empty() {
            error!(
                "No job of round {round} ran on the nodes it was pinned to: the scheduler does not honour node \
                 pinning here, so no node can be judged (see {})",
                root.join(format!("round-{round}")).display()
            );
            return 1;
        }
        for r in &results {
            info!(
                "  {}+{}: {} ({})",
                r.pair[0],
                r.pair[1],
                if r.passed { "ok" } else { "FAILED" },
                r.busbw
                    .map_or("no busbw".into(), |b| format!("{b:.2} GB/s"))
            );
        }
        plan.record(results);
    }
    let criterion = match (&req.baseline, req.min_busbw) {
        (Some(g), _) => format!(
            "baseline {} (tolerance {}%)",
            g.baseline.file.display(),
            g.tolerance * 100.0
        ),
        (None, Some(m)) => format!("peak busbw >= {m} GB/s"),
        (None, None) => format!(
            "peak busbw within {}% of round 1's median",
            req.tolerance * 100.0
        ),
    };
    let acted = act_on(req.act, &system, &plan, &rt);
    let topology = fleet::topology(&system, req.topology_label, &rt)
        .map(|(source, leaf)| topology::Topology { leaf, source })
        .unwrap_or_default();
    report::write_reports(
        &root,
        report::Findings {
            test: req.test,
            plan: &plan,
            criterion,
            acted,
            topology,
        },
    )
}

/// Acts on the nodes judged bad, as asked: each with the evidence as its reason; nothing when too many are bad.
fn act_on(
    w: act::Wanted,
    sys: &crate::config::system::SystemConfig,
    plan: &Plan,
    rt: &tokio::runtime::Runtime,
) -> (Vec<act::Action>, Option<String>) {
    if !w.any() {
        return (Vec::new(), None);
    }
    let bad: Vec<(String, String)> = plan
        .verdicts()
        .into_iter()
        .filter(|(_, v)| *v == Verdict::Bad)
        .map(|(n, _)| {
            let why = plan
                .evidence
                .iter()
                .find(|e| !e.passed && e.pair.contains(&n))
                .map(|e| {
                    format!(
                        "find-bad-nodes: {} {}",
                        e.pair.join("+"),
                        e.busbw
                            .map_or("no busbw".into(), |b| format!("{b:.1} GB/s"))
                    )
                })
                .unwrap_or_else(|| "find-bad-nodes".into());
            (n, why)
        })
        .collect();
    if bad.is_empty() {
        return (Vec::new(), None);
    }
    if let Some(r) = act::refusal(bad.len(), plan.nodes().len(), w.max_fraction) {
        error!("{r}");
        return (Vec::new(), Some(r));
    }
    (crate::systems::fleet::take_out(w, sys, &bad, rt), None)
}
