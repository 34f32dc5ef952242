//! `cloudai find-bad-nodes`: runs an NCCL test on disjoint node pairs, round by round (see [`plan`]), and names
//! the node or link to blame: `bad-nodes.json`, `bad-nodes.md` and `bad-nodes.html` in the results root, each
//! round a scenario results tree of its own (`round-<n>/`).
//!
//! A pair fails when its iteration fails (with `--baseline`, also by falling below it), when its peak busbw is
//! below `--min-busbw`, or, with neither, when it is more than `--tolerance` below the median of round 1's pairs.

pub mod plan;

use std::path::Path;
use std::sync::Arc;

use serde::Serialize;

use crate::baseline::Grading;
use crate::html::{esc, page};
use crate::report::scenario::{generate, Options, Peaks};
use crate::results::{Layout, Status};
use crate::runner::Runner;
use crate::scenario::{self, Inputs};
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
}

#[derive(Serialize)]
struct NodeReport<'a> {
    node: &'a str,
    verdict: Verdict,
    evidence: Vec<&'a Evidence>,
}

#[derive(Serialize)]
struct Report<'a> {
    test: &'a str,
    nodes: usize,
    jobs: usize,
    rounds: usize,
    /// How a pair was judged.
    criterion: String,
    bad: Vec<&'a str>,
    suspect: Vec<&'a str>,
    verdicts: Vec<NodeReport<'a>>,
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
    if !matches!(system.kind.scheduler(), "slurm" | "runai" | "kubernetes") {
        error!(
            "find-bad-nodes runs on Slurm (jobs pinned with --nodelist), Run:ai and Kubernetes (node affinity); {} cannot pin a job to nodes",
            system.kind.scheduler()
        );
        return 1;
    }
    let rt = match crate::runner::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            error!("{e}");
            return 1;
        }
    };
    let mut nodes = match nodes_of(req.nodes, &system, &rt) {
        Ok(n) => n,
        Err(e) => {
            error!("{e}");
            return 1;
        }
    };
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
        "find-bad-nodes: {n} nodes, test {}: round 1 runs {} pair job(s) at once; then one job per node of a failing pair \
         (at most {} jobs in all with one bad node, {} with two). Results in {}",
        req.test,
        n / 2,
        Plan::bound(n, 1),
        Plan::bound(n, 2),
        root.display()
    );
    let mut plan = Plan::new(nodes);
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
        let sys = match crate::systems::build(&sys_cfg, false) {
            Ok(s) => s,
            Err(e) => {
                error!("{e}");
                return 1;
            }
        };
        let layout = Layout {
            root: root.join(format!("round-{round}")),
            step: None,
        };
        let runner = Runner::new(sys, &sys_cfg, scenario, layout, false);
        let outcome = rt.block_on(runner.run());
        if !outcome.leftovers.is_empty() {
            return crate::results::record::report_leftovers(&root, &outcome.leftovers);
        }
        if outcome.interrupted {
            warn!(
                "Interrupted: every submitted job was cancelled; partial results in {}",
                root.display()
            );
            return 130;
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
    write_reports(&root, req.test, &plan, criterion)
}

fn write_reports(root: &Path, test: &str, plan: &Plan, criterion: String) -> i32 {
    let verdicts = plan.verdicts();
    let pick = |want: Verdict| -> Vec<&str> {
        verdicts
            .iter()
            .filter(|(_, v)| **v == want)
            .map(|(n, _)| n.as_str())
            .collect()
    };
    let report = Report {
        test,
        nodes: verdicts.len(),
        jobs: plan.jobs(),
        rounds: plan.rounds,
        criterion,
        bad: pick(Verdict::Bad),
        suspect: pick(Verdict::Suspect),
        verdicts: verdicts
            .iter()
            .map(|(n, v)| NodeReport {
                node: n,
                verdict: *v,
                evidence: plan
                    .evidence
                    .iter()
                    .filter(|e| e.pair.iter().any(|p| p == n))
                    .collect(),
            })
            .collect(),
    };
    let mut md = format!(
        "# find-bad-nodes: {test}\n\n{} nodes, {} jobs in {} rounds; a pair passes on {}.\n\n| node | verdict | evidence |\n|---|---|---|\n",
        report.nodes, report.jobs, report.rounds, report.criterion
    );
    let mut rows = String::new();
    for nr in &report.verdicts {
        let ev: Vec<String> = nr
            .evidence
            .iter()
            .map(|e| {
                format!(
                    "round {} {} job {}: {}{}",
                    e.round,
                    e.pair.join("+"),
                    e.job_id.as_deref().unwrap_or("-"),
                    e.busbw
                        .map_or("no busbw".into(), |b| format!("{b:.2} GB/s")),
                    if e.passed {
                        " ok".to_string()
                    } else {
                        format!(" FAILED ({})", e.reason)
                    }
                )
            })
            .collect();
        let v = serde_json::to_value(nr.verdict)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default();
        md.push_str(&format!(
            "| {} | {v} | {} |\n",
            nr.node,
            ev.join("<br>").replace('|', "\\|")
        ));
        rows.push_str(&format!(
            "<tr class=\"{}\"><td class=\"l\">{}</td><td class=\"l\">{v}</td><td class=\"l\">{}</td></tr>\n",
            if nr.verdict == Verdict::Good { "" } else { "flag" },
            esc(nr.node),
            ev.iter().map(|s| esc(s)).collect::<Vec<_>>().join("<br>")
        ));
    }
    let body = format!(
        "<h1>find-bad-nodes: {}</h1>\n<p>{} nodes, {} jobs in {} rounds; a pair passes on {}.</p>\n<p class=\"{}\">bad: {} &middot; suspect: {}</p>\n<table><tr><th class=\"l\">node</th><th class=\"l\">verdict</th><th class=\"l\">evidence (pair, job, peak busbw)</th></tr>\n{rows}</table>\n<p class=\"muted\">Each round is a results tree of its own: {}</p>\n",
        esc(test),
        report.nodes,
        report.jobs,
        report.rounds,
        esc(&report.criterion),
        if report.bad.is_empty() && report.suspect.is_empty() { "pass" } else { "fail" },
        esc(&none_or(&report.bad)),
        esc(&none_or(&report.suspect)),
        (1..=report.rounds).map(|r| format!("<a href=\"round-{r}/find-bad-nodes-round-{r}.html\">round {r}</a>")).collect::<Vec<_>>().join(" ")
    );
    let json = serde_json::to_vec_pretty(&report).unwrap_or_default();
    let files: [(&str, Vec<u8>); 3] = [
        ("bad-nodes.json", json),
        ("bad-nodes.md", md.into_bytes()),
        (
            "bad-nodes.html",
            page("find-bad-nodes", &body, &serde_json::json!({"charts": {}})).into_bytes(),
        ),
    ];
    for (name, data) in files {
        if let Err(e) = crate::util::fsx::write_atomic(&root.join(name), &data) {
            error!("Cannot write {}: {e}", root.join(name).display());
            return 1;
        }
    }
    info!(
        "find-bad-nodes: bad: {}; suspect: {}; {} jobs. Report: {}",
        none_or(&report.bad),
        none_or(&report.suspect),
        report.jobs,
        root.join("bad-nodes.html").display()
    );
    if report.bad.is_empty() && report.suspect.is_empty() {
        0
    } else {
        crate::results::record::EXIT_TEST_FAILURES
    }
}

fn none_or(v: &[&str]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

/// Nodes named on the command line (`node[001-016]`, comma lists); else every node of the Slurm system's default
/// partition, or every usable GPU node of the Kubernetes or Run:ai cluster.
fn nodes_of(
    spec: Option<&str>,
    sys: &crate::config::system::SystemConfig,
    rt: &tokio::runtime::Runtime,
) -> Result<Vec<String>, String> {
    use crate::config::system::SystemKind;
    if let Some(s) = spec {
        return crate::util::nodelist::expand(s)
            .ok_or_else(|| format!("cannot parse node list '{s}'"));
    }
    let listed = match &sys.kind {
        SystemKind::Kubernetes(k) => {
            Some(rt.block_on(crate::systems::kubernetes::nodes::gpu_nodes(k)))
        }
        SystemKind::RunAi(_) => Some(rt.block_on(crate::systems::runai::nodes::gpu_nodes(sys))),
        _ => None,
    };
    if let Some(listed) = listed {
        let (ok, skipped) = listed.map_err(|e| format!("{e}; give --nodes"))?;
        for (n, why) in &skipped {
            warn!("Leaving out node {n}: {why}");
        }
        info!("{} usable GPU node(s) in the cluster", ok.len());
        return Ok(ok);
    }
    let SystemKind::Slurm(s) = &sys.kind else {
        return Err("give --nodes (the system file lists no nodes)".into());
    };
    let mut out = Vec::new();
    for p in s
        .partitions
        .iter()
        .filter(|p| p.name == s.default_partition)
    {
        for g in &p.groups {
            for n in &g.nodes {
                out.extend(
                    crate::util::nodelist::expand(n)
                        .ok_or_else(|| format!("cannot parse node list '{n}'"))?,
                );
            }
        }
    }
    if out.is_empty() {
        return Err(format!(
            "partition '{}' has no node groups: give --nodes",
            s.default_partition
        ));
    }
    Ok(out)
}
