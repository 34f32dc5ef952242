//! `cloudai find-bad-nodes`: runs an NCCL test on disjoint node pairs, round by round (see [`plan`]), and names
//! the node or link to blame: `bad-nodes.json`, `bad-nodes.md` and `bad-nodes.html` in the results root, each
//! round a scenario results tree of its own (`round-<n>/`).
//!
//! A pair fails when its iteration fails (with `--baseline`, also by falling below it; without, below the
//! hardware's expectation when the system's GPUs or adapters are known), when its peak busbw is below
//! `--min-busbw`, or, with neither, when it is more than `--tolerance` below the fastest of round 1's pairs: a slow
//! majority must not set the bar. When more than half of round 1's pairs fail, the finding is cluster-wide: it is
//! said so, the slow nodes are named, and nothing is drained.
//!
//! The pairs' jobs ask NCCL to say which network it chose (`NCCL_DEBUG=INFO`, `NCCL_DEBUG_SUBSYS=INIT,NET`), so a
//! pair that fell back to TCP sockets fails as such.

pub mod act;
pub mod evidence;
pub mod hold;
pub mod plan;
mod report;
pub mod requalify;
mod round;
pub mod sim;
pub mod topology;

use std::path::Path;

use crate::baseline::Grading;
use crate::exit_codes::Failure;
use crate::results::{Layout, Status};
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
    /// `--checks`: the node-evidence checks run on every node before any pair (names of [`evidence::CHECKS`]).
    pub checks: Vec<String>,
}

/// The round's scenario: one test per pair, pinned to its two nodes.
fn round_scenario(round: usize, test: &str, pairs: &[[String; 2]]) -> String {
    let mut s = format!("name = \"find-bad-nodes-round-{round}\"\n");
    for [a, b] in pairs {
        s.push_str(&format!(
            "\n[[Tests]]\nid = \"{a}+{b}\"\ntest_name = {}\nnum_nodes = 2\nnodes = [\"{a}\", \"{b}\"]\n\
             [Tests.extra_env_vars]\nNCCL_DEBUG = \"INFO\"\nNCCL_DEBUG_SUBSYS = \"INIT,NET\"\n",
            serde_json::to_string(test).unwrap_or_default()
        ));
    }
    s
}

/// A new results tree `<output>/<name>_<timestamp>` (`--output-dir`, else the system's output path).
fn results_root(
    req: &Request,
    sys: &crate::config::system::SystemConfig,
    name: &str,
) -> Result<std::path::PathBuf, Failure> {
    let output = req
        .output_dir
        .map(Path::to_path_buf)
        .unwrap_or(sys.output_path.clone());
    Ok(std::path::absolute(&output)
        .and_then(|o| Layout::create(&o, name, chrono::Local::now()))
        .map_err(|e| {
            format!(
                "Cannot create a results directory in {}: {e}",
                output.display()
            )
        })?
        .root)
}

/// The test the pairs run: it must exist in the tests directory and be an NcclTest.
fn check_test(tests_dir: &Path, test: &str) -> Result<(), String> {
    let lib = crate::scenario::TestLibrary::load_dir(tests_dir).map_err(|e| {
        e.report();
        format!(
            "find-bad-nodes cannot read the tests in {}",
            tests_dir.display()
        )
    })?;
    let Some(raw) = lib.get(test) else {
        let names: Vec<&str> = lib.names().collect();
        let hint = match crate::config::error::did_you_mean(test, names.iter().copied()) {
            Some(n) => format!("did you mean \"{n}\"?"),
            None => format!("the tests there: {}", names.join(", ")),
        };
        return Err(format!(
            "--test {test:?}: no test of that name in {} ({hint})",
            tests_dir.display()
        ));
    };
    let template = raw
        .node
        .as_table()
        .and_then(|t| t.get("test_template_name"))
        .and_then(|n| match &n.kind {
            crate::config::node::Kind::Str(s) => Some(s.as_str()),
            _ => None,
        });
    match template {
        Some("NcclTest") => Ok(()),
        other => Err(format!(
            "find-bad-nodes grades bus bandwidth: test '{test}' is a {} test, not NcclTest",
            other.unwrap_or("?")
        )),
    }
}

/// The bar of a sweep without a baseline or `--min-busbw`: the fastest pair of round 1 that passed (and whose
/// busbw is physically plausible), less the tolerance. The median would let a slow majority set it.
fn fast_end(summary: &crate::report::scenario::Summary, tolerance: f64) -> Option<(f64, f64)> {
    fastest(
        summary
            .tests
            .iter()
            .filter(|e| e.record.status == Status::Passed && e.suspect.is_none())
            .filter_map(|e| e.metrics.get("peak_busbw_gbps").and_then(|v| v.as_f64())),
        tolerance,
    )
}

/// The fastest of `peaks` and the bar below it: (fastest, fastest × (1 − tolerance)).
fn fastest(peaks: impl Iterator<Item = f64>, tolerance: f64) -> Option<(f64, f64)> {
    peaks
        .filter(|b| b.is_finite() && *b > 0.0)
        .max_by(|a, b| a.total_cmp(b))
        .map(|fast| (fast, fast * (1.0 - tolerance)))
}

/// `cluster-wide: 6 of 8 pairs failed or ran slower than 172.84 GB/s` when more than half of round 1's pairs did
/// (two at least: on four nodes one bad node fails one pair of two, and stays each node's own finding).
fn cluster_wide(round1: &[Evidence], threshold: Option<f64>) -> Option<String> {
    let failed = round1.iter().filter(|e| !e.passed).count();
    (failed >= 2 && failed * 2 > round1.len()).then(|| {
        format!(
            "cluster-wide: {failed} of {} pairs failed or ran slower than {}; the slow nodes are named, but a fault \
             this wide is the fabric's, the image's or the test's as likely as each node's: nothing is drained",
            round1.len(),
            threshold.map_or("the criterion".into(), |t| format!("{t:.2} GB/s"))
        )
    })
}

/// The sweep, under the one failure funnel: prepared (system, nodes, results tree, evidence tier), its rounds, then
/// the verdicts written and acted on.
pub fn run(req: &Request) -> Result<(), Failure> {
    let mut s = prepare(req)?;
    match rounds(req, &mut s)? {
        Next::Conclude(wide) => conclude(req, &s, wide),
        Next::Planned => Ok(()),
    }
}

/// Where the rounds leave the sweep.
enum Next {
    /// Every round ran: the verdicts follow (with round 1's cluster-wide finding, if any).
    Conclude(Option<String>),
    /// A dry run wrote its plan and round 1's job files: nothing more.
    Planned,
}

/// What the sweep holds between its phases.
struct Sweep {
    system: crate::config::system::SystemConfig,
    rt: tokio::runtime::Runtime,
    root: std::path::PathBuf,
    plan: Plan,
    /// `--checks`: what each check showed of each node.
    checks: std::collections::BTreeMap<(String, String), String>,
}

/// The system, the nodes to check (and those out of service), the test, the results tree, and the evidence tier:
/// everything that can refuse the sweep is checked before anything runs.
fn prepare(req: &Request) -> Result<Sweep, Failure> {
    let system = match req.system.map(crate::config::system::load) {
        Some(Ok(s)) => s,
        Some(Err(e)) => return Err(e.into()),
        None => {
            return Err(Failure::Error(
                "find-bad-nodes pins jobs to nodes: give --system-config (a Slurm, Run:ai or Kubernetes system)"
                    .into(),
            ))
        }
    };
    if let Some(e) = crate::systems::fleet_of(&system).unpinnable() {
        return Err(Failure::Error(e));
    }
    if let Some(e) = crate::systems::fleet_of(&system).refused(req.act) {
        return Err(Failure::Error(e));
    }
    let rt = crate::runner::runtime()?;
    let (mut nodes, unavailable) =
        crate::systems::fleet_of(&system).nodes_to_test(req.nodes, &rt)?;
    for (n, why) in &unavailable {
        warn!("Leaving out node {n}: {why}");
    }
    nodes.sort();
    nodes.dedup();
    if nodes.len() < 2 {
        return Err(Failure::Error(format!(
            "find-bad-nodes needs at least 2 nodes, got {}: give --nodes node[001-016]",
            nodes.len()
        )));
    }
    // the test is checked before anything is created: a typo must not leave an empty results tree behind
    check_test(req.tests_dir, req.test)?;
    let root = results_root(req, &system, "find-bad-nodes")?;
    // evidence first: nodes a check condemns spend no pair
    let mut condemned = std::collections::BTreeMap::new();
    let mut checks = std::collections::BTreeMap::new();
    if !req.checks.is_empty() {
        let t = evidence::run(&root, req.system, &nodes, &req.checks, req.dry_run, None)?;
        condemned = t.condemned;
        checks = t.shown;
        nodes.retain(|n| !condemned.contains_key(n));
    }
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
    plan.condemned = condemned;
    Ok(Sweep {
        system,
        rt,
        root,
        plan,
        checks,
    })
}

/// The rounds until the plan has no pair left to try; whether the finding is cluster-wide (round 1).
fn rounds(req: &Request, s: &mut Sweep) -> Result<Next, Failure> {
    let root = s.root.clone();
    let plan = &mut s.plan;
    let mut reference: Option<f64> = req.min_busbw;
    let mut wide: Option<String> = None;
    loop {
        let pairs = plan.next_round();
        if pairs.is_empty() {
            return Ok(Next::Conclude(wide));
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
        let Some(summary) = round::run(req, &root, &format!("round-{round}"), round, &pairs, None)?
        else {
            report::write_plan(&root, req.test, plan, &pairs)?;
            return Ok(Next::Planned);
        };
        if reference.is_none() && req.baseline.is_none() && round == 1 {
            // the fastest pair of round 1: slow pairs stand out against it, however many they are
            if let Some((fast, bar)) = fast_end(&summary, req.tolerance) {
                info!(
                    "Round 1's fastest pair: {fast:.2} GB/s; a pair fails below {bar:.2} GB/s ({}% less)",
                    req.tolerance * 100.0
                );
                reference = Some(bar);
            }
        }
        let results = judge_round(round, &pairs, &summary, reference);
        if results.is_empty() {
            return Err(Failure::Error(format!(
                "No job of round {round} ran on the nodes it was pinned to: the scheduler does not honour node \
                 pinning here, so no node can be judged (see {})",
                root.join(format!("round-{round}")).display()
            )));
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
        if round == 1 {
            wide = cluster_wide(&results, reference);
            if let Some(w) = &wide {
                warn!("{w}");
            }
        }
        plan.record(results);
    }
}

/// Each pair's evidence from its round's summary; pairs the scheduler placed elsewhere are left out (they say
/// nothing about their nodes).
fn judge_round(
    round: usize,
    pairs: &[[String; 2]],
    summary: &crate::report::scenario::Summary,
    reference: Option<f64>,
) -> Vec<Evidence> {
    let peak = |e: &crate::report::scenario::Entry| {
        e.metrics.get("peak_busbw_gbps").and_then(|v| v.as_f64())
    };
    pairs
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
        .collect()
}

/// The verdicts: acted on as asked, written (`bad-nodes.json/md/html`), their exit code.
fn conclude(req: &Request, s: &Sweep, wide: Option<String>) -> Result<(), Failure> {
    let criterion = match (&req.baseline, req.min_busbw) {
        (Some(g), _) => format!(
            "baseline {} (tolerance {}%)",
            g.baseline.file.display(),
            g.tolerance * 100.0
        ),
        (None, Some(m)) => format!("peak busbw >= {m} GB/s"),
        (None, None) => format!(
            "its iteration passing (the hardware's expectation where known) and peak busbw within {}% of round 1's \
             fastest pair",
            req.tolerance * 100.0
        ),
    };
    let acted = act_on(req.act, &s.system, &s.plan, wide.as_deref(), &s.rt, &s.root);
    let topology = crate::systems::fleet_of(&s.system)
        .fabric(req.topology_label, &s.rt)
        .map(|(source, leaf)| topology::Topology { leaf, source })
        .unwrap_or_default();
    let written = report::write_reports(
        &s.root,
        report::Findings {
            test: req.test,
            plan: &s.plan,
            criterion,
            acted,
            topology,
            cluster_wide: wide,
            checks: s.checks.clone(),
        },
    );
    // the verdicts as bad-nodes.json has them, whatever the exit code says of them
    if s.root.join("bad-nodes.json").is_file() {
        crate::ledger::record_sweep(&s.root);
    }
    written
}

/// Acts on the nodes judged bad, as asked: each with the evidence as its reason; nothing when too many are bad.
fn act_on(
    w: act::Wanted,
    sys: &crate::config::system::SystemConfig,
    plan: &Plan,
    wide: Option<&str>,
    rt: &tokio::runtime::Runtime,
    root: &Path,
) -> (Vec<act::Action>, Option<String>) {
    if !w.any() {
        return (Vec::new(), None);
    }
    if let Some(w) = wide {
        let r = format!("nothing changed: {w}");
        error!("{r}");
        return (Vec::new(), Some(r));
    }
    let bad: Vec<(String, String)> = plan
        .verdicts()
        .into_iter()
        .filter(|(_, v)| *v == Verdict::Bad)
        .map(|(n, _)| {
            if let Some(e) = plan.condemned.get(&n) {
                return (n, format!("find-bad-nodes evidence: {e}"));
            }
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
    // Slurm with the ledger: quarantine, owned and durable; the nodes already held count against the guard
    let kept = crate::ledger::location() != crate::ledger::Location::Off
        && crate::systems::fleet_of(sys).quarantines(w);
    let held: Vec<String> = if kept {
        match crate::bad_nodes::hold::held(sys) {
            Ok(h) => h
                .into_iter()
                .map(|r| r.node)
                .filter(|n| !bad.iter().any(|(b, _)| b == n))
                .collect(),
            Err(e) => {
                let r = format!("nothing drained: cannot read what cloudai already holds ({e})");
                error!("{r}");
                return (Vec::new(), Some(r));
            }
        }
    } else {
        Vec::new()
    };
    if let Some(r) = act::refusal(
        bad.len() + held.len(),
        plan.nodes().len() + held.len(),
        w.max_fraction,
    ) {
        let r = if held.is_empty() {
            r
        } else {
            format!(
                "{r} ({} already held by cloudai: {})",
                held.len(),
                held.join(", ")
            )
        };
        error!("{r}");
        return (Vec::new(), Some(r));
    }
    if kept {
        let run = root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        return match crate::bad_nodes::hold::with(sys, false, |q| q.take_out(&run, &bad)) {
            Ok(outs) => {
                let verb = if w.drain { "drain" } else { "cordon" };
                let mut actions = crate::bad_nodes::hold::as_actions(sys, verb, outs);
                if w.label {
                    let label_only = act::Wanted {
                        cordon: false,
                        drain: false,
                        ..w
                    };
                    actions.extend(crate::systems::fleet_of(sys).take_out(label_only, &bad, rt));
                }
                (actions, None)
            }
            Err(e) => {
                let r = format!("nothing drained: {e}");
                error!("{r}");
                (Vec::new(), Some(r))
            }
        };
    }
    if w.drain || w.cordon {
        warn!(
            "The ledger is off: the nodes are marked as cloudai's, but no quarantine state is kept (`cloudai \
             quarantine` cannot see them)"
        );
    }
    (crate::systems::fleet_of(sys).take_out(w, &bad, rt), None)
}

#[cfg(test)]
mod tests;
