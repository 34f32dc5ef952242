//! What find-bad-nodes writes: the plan of a dry run (`plan.json`, `plan.md`) and the verdicts
//! (`bad-nodes.json`, `bad-nodes.md`, `bad-nodes.html`), with the console's summary.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use super::act;
use super::plan::{self, Evidence, Plan, Trials, Verdict};
use super::topology::{SwitchFinding, Topology};
use crate::exit_codes::Failure;
use crate::html::{esc, page};
use crate::{error, info, warn};

#[derive(Serialize)]
pub(super) struct NodeReport<'a> {
    node: &'a str,
    verdict: Verdict,
    /// Why the scheduler holds it out of service (`unavailable`).
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
    /// With `--repeat`: how the node fared with partners known to be good.
    #[serde(skip_serializing_if = "Option::is_none")]
    trials: Option<Trials>,
    /// `--checks`: what each check showed of the node (`healthy`, or its warnings and failures), by check.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    checks: BTreeMap<&'a str, &'a str>,
    /// The node was found bad by those checks, before any pair: why.
    #[serde(skip_serializing_if = "Option::is_none")]
    condemned: Option<&'a str>,
    evidence: Vec<&'a Evidence>,
}

#[derive(Serialize)]
pub(super) struct Report<'a> {
    test: &'a str,
    nodes: usize,
    jobs: usize,
    rounds: usize,
    /// How a pair was judged.
    criterion: String,
    bad: Vec<&'a str>,
    suspect: Vec<&'a str>,
    /// Nodes out of service before the sweep (not tested).
    unavailable: Vec<&'a str>,
    /// Pairs that failed although both nodes passed with other partners.
    bad_links: Vec<plan::BadLink>,
    /// Each node of a failing pair was tried this many times with cleared partners (`--repeat`).
    repeat: usize,
    /// Nodes that passed some of those tries and failed others (`suspect`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    flaky: BTreeMap<&'a str, Trials>,
    /// Where the leaf switches came from, when the scheduler knows them.
    #[serde(skip_serializing_if = "Option::is_none")]
    topology: Option<&'a str>,
    /// Leaf switches that several slow pairs or bad nodes share.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    switches: Vec<SwitchFinding>,
    /// What was changed on the nodes judged bad (`--drain`, `--cordon`, `--label`), with the undo commands.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    actions: Vec<act::Action>,
    /// Why nothing was changed although it was asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    actions_refused: Option<String>,
    /// More than half of round 1's pairs failed: a fault this wide is not each node's alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    cluster_wide: Option<String>,
    verdicts: Vec<NodeReport<'a>>,
}

/// `--dry-run`: what the sweep would do, as far as it is known before round 1's results: `plan.json`, `plan.md`.
/// One report file, or the failure that says it could not be written.
fn write_file(root: &Path, name: &str, data: &[u8]) -> Result<(), Failure> {
    crate::util::fsx::write_atomic(&root.join(name), data)
        .map_err(|e| Failure::Error(format!("Cannot write {}: {e}", root.join(name).display())))
}

pub(super) fn write_plan(
    root: &Path,
    test: &str,
    plan: &Plan,
    pairs: &[[String; 2]],
) -> Result<(), Failure> {
    let n = plan.nodes().len();
    let bound = |k| Plan::bound_repeated(n, k, plan.repeat());
    let json = serde_json::json!({
        "test": test,
        "nodes": plan.nodes(),
        "unavailable": plan.unavailable,
        "round_1": pairs,
        "repeat": plan.repeat(),
        "jobs_bound": {"no_bad_node": bound(0), "one_bad_node": bound(1), "two_bad_nodes": bound(2)},
        "later_rounds": "each node of a failing pair (and an odd node) with a node cleared in round 1",
        "job_files": "round-1/<pair>/0/ (the scripts, manifests or payloads round 1 would submit)",
    });
    let mut md = format!(
        "# find-bad-nodes plan: {test}\n\n{} nodes; round 1 runs {} pair job(s) at once: {}.\n\nAt most {} jobs with no \
         bad node, {} with one, {} with two: later rounds pair each node of a failing pair (and an odd node) with a \
         node round 1 cleared.\n\nJob files: `round-1/<pair>/0/`.\n",
        plan.nodes().len(),
        pairs.len(),
        pairs.iter().map(|p| p.join("+")).collect::<Vec<_>>().join(", "),
        bound(0),
        bound(1),
        bound(2),
    );
    if !plan.unavailable.is_empty() {
        md.push_str("\n## Not tested (out of service)\n\n");
        for (node, why) in &plan.unavailable {
            md.push_str(&format!("- {node}: {why}\n"));
        }
    }
    for (name, data) in [
        (
            "plan.json",
            serde_json::to_vec_pretty(&json).unwrap_or_default(),
        ),
        ("plan.md", md.clone().into_bytes()),
    ] {
        write_file(root, name, &data)?;
    }
    print!("{md}");
    info!(
        "Dry run: nothing submitted; the plan is in {}",
        root.join("plan.md").display()
    );
    Ok(())
}

/// What the sweep found, to be written.
pub(super) struct Findings<'a> {
    pub test: &'a str,
    pub plan: &'a Plan,
    pub criterion: String,
    pub acted: (Vec<act::Action>, Option<String>),
    pub topology: Topology,
    /// More than half of round 1's pairs failed: said so, and nothing was acted on.
    pub cluster_wide: Option<String>,
    /// `--checks`: (check, node) → what the check showed of the node.
    pub checks: BTreeMap<(String, String), String>,
}

pub(super) fn write_reports(root: &Path, f: Findings) -> Result<(), Failure> {
    let Findings {
        test,
        plan,
        criterion,
        acted,
        topology,
        cluster_wide,
        checks,
    } = f;
    let repeat = plan.repeat();
    let verdicts = plan.verdicts();
    let pick = |want: Verdict| -> Vec<&str> {
        verdicts
            .iter()
            .filter(|(_, v)| **v == want)
            .map(|(n, _)| n.as_str())
            .collect()
    };
    let bad_links: Vec<plan::BadLink> = plan
        .bad_links()
        .into_iter()
        .map(|mut l| {
            l.path = topology.path(&l.pair);
            l
        })
        .collect();
    let bad = pick(Verdict::Bad);
    let switches = topology.findings(&bad_links, &bad, plan.nodes());
    let report = Report {
        test,
        nodes: verdicts.len(),
        jobs: plan.jobs(),
        rounds: plan.rounds,
        criterion,
        bad,
        suspect: pick(Verdict::Suspect),
        unavailable: pick(Verdict::Unavailable),
        bad_links,
        repeat,
        flaky: plan.flaky(),
        topology: (!topology.is_empty()).then_some(topology.source.as_str()),
        switches,
        actions: acted.0,
        actions_refused: acted.1,
        cluster_wide,
        verdicts: verdicts
            .iter()
            .map(|(n, v)| NodeReport {
                node: n,
                verdict: *v,
                reason: plan.unavailable.get(n).map(String::as_str),
                trials: (repeat > 1).then(|| plan.trials.get(n).copied()).flatten(),
                checks: checks
                    .iter()
                    .filter(|((_, node), _)| node == n)
                    .map(|((c, _), v)| (c.as_str(), v.as_str()))
                    .collect(),
                condemned: plan.condemned.get(n).map(String::as_str),
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
    if let Some(w) = &report.cluster_wide {
        md.push_str(&format!("\n**{w}**\n\n"));
    }
    let mut rows = String::new();
    for nr in &report.verdicts {
        let ev: Vec<String> = nr
            .reason
            .map(|r| format!("not tested: {r}"))
            .into_iter()
            .chain(
                nr.condemned
                    .map(|c| format!("bad by evidence, no pair spent: {c}")),
            )
            .chain(
                nr.checks
                    .iter()
                    .filter(|_| nr.condemned.is_none())
                    .map(|(c, v)| format!("{c}: {v}")),
            )
            .chain(nr.trials.map(|t| {
                format!(
                    "with cleared partners: passed {} of {} tries, failed {}",
                    t.passed,
                    t.passed + t.failed,
                    t.failed
                )
            }))
            .chain(nr.evidence.iter().map(|e| {
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
            }))
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
            if matches!(nr.verdict, Verdict::Good | Verdict::Unavailable) { "" } else { "flag" },
            esc(nr.node),
            ev.iter().map(|s| esc(s)).collect::<Vec<_>>().join("<br>")
        ));
    }
    let links: Vec<String> = report
        .bad_links
        .iter()
        .map(|l| {
            format!(
                "{}↔{}{}: {} (threshold {}; round {}, job {}); each node passes elsewhere: {}",
                l.pair[0],
                l.pair[1],
                match l.path.as_slice() {
                    [] => String::new(),
                    [one] => format!(" (both under switch {one})"),
                    path => format!(" (through switches {})", path.join(", ")),
                },
                l.busbw
                    .map_or("no busbw".into(), |b| format!("{b:.2} GB/s")),
                l.threshold.map_or("-".into(), |t| format!("{t:.2} GB/s")),
                l.round,
                l.job_id.as_deref().unwrap_or("-"),
                l.cleared_by
                    .iter()
                    .map(|(n, with)| format!("{n} with {}", with.join(", ")))
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        })
        .collect();
    if !links.is_empty() {
        md.push_str("\n## Bad links\n\nPairs that failed although each node passed with another partner: the path between them is slow.\n\n");
        for l in &links {
            md.push_str(&format!("- {}\n", l.replace('|', "\\|")));
        }
    }
    let switch_lines: Vec<String> = report
        .switches
        .iter()
        .map(SwitchFinding::describe)
        .collect();
    if !switch_lines.is_empty() {
        md.push_str(&format!(
            "\n## Switches\n\nLeaf switches that several findings share ({}): look at the switch before the nodes.\n\n",
            report.topology.unwrap_or("topology")
        ));
        for l in &switch_lines {
            md.push_str(&format!("- {}\n", l.replace('|', "\\|")));
        }
    }
    let switches_html = if switch_lines.is_empty() {
        String::new()
    } else {
        format!(
            "<h2>Switches</h2>\n<p>Leaf switches that several findings share ({}): look at the switch before the nodes.</p>\n<ul>{}</ul>\n",
            esc(report.topology.unwrap_or("topology")),
            switch_lines
                .iter()
                .map(|l| format!("<li class=\"flag\">{}</li>", esc(l)))
                .collect::<String>()
        )
    };
    let links_html = if links.is_empty() {
        String::new()
    } else {
        format!(
            "<h2>Bad links</h2>\n<p>Pairs that failed although each node passed with another partner: the path between them is slow.</p>\n<ul>{}</ul>\n",
            links
                .iter()
                .map(|l| format!("<li class=\"flag\">{}</li>", esc(l)))
                .collect::<String>()
        )
    };
    let body = format!(
        "<h1>find-bad-nodes: {}</h1>\n<p>{} nodes, {} jobs in {} rounds; a pair passes on {}.</p>\n<p class=\"{}\">bad: {} &middot; suspect: {}</p>\n{}<table><tr><th class=\"l\">node</th><th class=\"l\">verdict</th><th class=\"l\">evidence (pair, job, peak busbw)</th></tr>\n{rows}</table>\n{links_html}{switches_html}<p class=\"muted\">Each round is a results tree of its own: {}</p>\n",
        esc(test),
        report.nodes,
        report.jobs,
        report.rounds,
        esc(&report.criterion),
        if report.bad.is_empty() && report.suspect.is_empty() && report.bad_links.is_empty() { "pass" } else { "fail" },
        esc(&none_or(&report.bad)),
        esc(&none_or(&report.suspect)),
        report
            .cluster_wide
            .as_ref()
            .map_or(String::new(), |w| format!("<p class=\"fail\">{}</p>\n", esc(w))),
        (1..=report.rounds).map(|r| format!("<a href=\"round-{r}/find-bad-nodes-round-{r}.html\">round {r}</a>")).collect::<Vec<_>>().join(" ")
    );
    if let Some(why) = &report.actions_refused {
        md.push_str(&format!("\n## Nothing changed\n\n{why}\n"));
    }
    if !report.actions.is_empty() {
        md.push_str("\n## Changed\n\n| node | action | command | undo |\n|---|---|---|---|\n");
        for a in &report.actions {
            md.push_str(&format!(
                "| {} | {}{} | `{}` | `{}` |\n",
                a.node,
                a.action,
                if a.ok {
                    String::new()
                } else {
                    format!(" FAILED: {}", a.error)
                },
                a.command,
                a.undo
            ));
        }
    }
    for a in &report.actions {
        if a.ok {
            warn!("Changed node {}: {} (undo: {})", a.node, a.command, a.undo);
        } else {
            error!(
                "Could not {} node {}: {} ({})",
                a.action, a.node, a.error, a.command
            );
        }
    }
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
        write_file(root, name, &data)?;
    }
    for l in &links {
        warn!("Bad link {l}");
    }
    for s in &switch_lines {
        warn!("Suspect {s}");
    }
    let link_names: Vec<String> = report
        .bad_links
        .iter()
        .map(|l| format!("{}↔{}", l.pair[0], l.pair[1]))
        .collect();
    let link_refs: Vec<&str> = link_names.iter().map(String::as_str).collect();
    info!(
        "find-bad-nodes: bad: {}; suspect: {}; bad links: {}; {} jobs. Report: {}",
        none_or(&report.bad),
        none_or(&report.suspect),
        none_or(&link_refs),
        report.jobs,
        root.join("bad-nodes.html").display()
    );
    if report.bad.is_empty() && report.suspect.is_empty() && report.bad_links.is_empty() {
        Ok(())
    } else {
        Err(Failure::Outcome(crate::results::record::EXIT_TEST_FAILURES))
    }
}

fn none_or(v: &[&str]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}
