//! `find-bad-nodes --requalify`: the nodes cloudai quarantined, tested again with partners in service, inside a
//! maintenance window — Slurm: a maintenance reservation; Kubernetes: the node uncordoned with cloudai's NoSchedule
//! taint kept, which only the test's pods tolerate — so no user job lands on a node before its test. A node that
//! passes K times in a row is released; one that fails is taken out again with the new evidence (escalated after
//! too many failed requalifications). Only nodes whose drain is still cloudai's are touched.

use std::path::Path;

use super::hold as glue;
use super::{check_test, round, Request};
use crate::exit_codes::Failure;
use crate::quarantine::{Held, Outcome};
use crate::results::Status;
use crate::{info, warn};

/// How requalification judges and gives back.
#[derive(Clone, Copy, Debug)]
pub struct Rules {
    /// Passes in a row that release a node.
    pub passes: u32,
    /// Failed requalifications that escalate it.
    pub max_attempts: u32,
}

/// The bar without `--min-busbw` or `--baseline`: the median peak of this test's passed pairs in the ledger
/// (last 90 days), less the tolerance.
fn ledger_bar(test: &str, tolerance: f64) -> Option<f64> {
    let at = crate::ledger::location();
    if at == crate::ledger::Location::Off {
        return None;
    }
    let since = chrono::Utc::now().timestamp() - 90 * 86_400;
    let mut v: Vec<f64> = crate::ledger::off_runtime(|| {
        let mut l = crate::ledger::Ledger::open(&at).ok()?;
        let rows = l
            .db()
            .query(
                "SELECT p.busbw FROM pairs p JOIN names t ON t.id = p.test_id \
                 WHERE t.name = ? AND p.passed = 1 AND p.at >= ? AND p.busbw IS NOT NULL",
                &[test.into(), since.into()],
            )
            .ok()?;
        Some(rows.iter().filter_map(|r| r[0].real()).collect())
    })
    .unwrap_or_default();
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    Some(v[v.len() / 2] * (1.0 - tolerance))
}

pub fn run(req: &Request, rules: Rules) -> Result<(), Failure> {
    let Some(path) = req.system else {
        return Err(Failure::Error(
            "--requalify needs --system-config (a Slurm or Kubernetes system)".into(),
        ));
    };
    let sys = crate::config::system::load(path)?;
    check_test(req.tests_dir, req.test)?;
    crate::systems::fleet_of(&sys)
        .window_check()
        .map_err(Failure::Error)?;
    let wanted = req.nodes.map(crate::util::nodelist::parse).transpose()?;
    let held: Vec<_> = glue::held(&sys)
        .map_err(Failure::Error)?
        .into_iter()
        .filter(|r| wanted.as_ref().is_none_or(|w| w.contains(&r.node)))
        .collect();
    for r in held.iter().filter(|r| r.state == Held::Escalated) {
        warn!(
            "{}: escalated after {} failed requalifications ({}): not requalified; `cloudai quarantine release {}` \
             once it is repaired",
            r.node, r.attempts, r.evidence, r.node
        );
    }
    let held: Vec<_> = held
        .into_iter()
        .filter(|r| matches!(r.state, Held::Quarantined | Held::Requalifying))
        .collect();
    if held.is_empty() {
        info!("No node held by cloudai to requalify on {}", sys.name);
        return Ok(());
    }
    let rt = crate::runner::runtime()?;
    // partners among the nodes named (--nodes), else the default partition's / the cluster's usable GPU nodes
    let (usable, _) = crate::systems::fleet_of(&sys).nodes_to_test(req.nodes, &rt)?;
    let partners: Vec<String> = usable
        .into_iter()
        .filter(|n| !held.iter().any(|h| &h.node == n))
        .take(held.len())
        .collect();
    if partners.is_empty() {
        return Err(Failure::Error(
            "no node in service to pair the quarantined nodes with: requalification needs a known-good partner"
                .into(),
        ));
    }
    let names: Vec<String> = held.iter().map(|h| h.node.clone()).collect();
    let reference = req
        .min_busbw
        .or_else(|| ledger_bar(req.test, req.tolerance));
    info!(
        "Requalifying {} node(s) ({}) with {} partner(s) in service ({}); a node passes with its iteration passing{}; \
         released after {} pass(es) in a row",
        names.len(),
        names.join(", "),
        partners.len(),
        partners.join(", "),
        reference.map_or(String::new(), |r| format!(" and peak busbw >= {r:.2} GB/s")),
        rules.passes
    );
    let mut nodes = names.clone();
    nodes.extend(partners.iter().cloned());
    if req.dry_run {
        // exactly what would run: the window, then each node back into it
        println!(
            "Would run:\n  {}",
            crate::systems::fleet_of(&sys).window_describe(&nodes)
        );
        let outs = glue::with(&sys, true, |q| {
            held.iter()
                .map(|h| q.put_back(&h.node, false, Held::Requalifying, ""))
                .collect::<Result<Vec<_>, crate::quarantine::QuarantineError>>()
        })
        .map_err(Failure::Error)?;
        for o in outs {
            println!("  {}  # {}: {}", o.command, o.node, o.what);
        }
        println!(
            "then a pair job per node ({}), and per node: released after {} pass(es) in a row, else taken out again",
            req.test, rules.passes
        );
        return Ok(());
    }
    let root = super::results_root(req, &sys, "requalify")?;
    // the window: no user job lands on a node between its return and its test
    let window = crate::systems::fleet_of(&sys)
        .window_open(&nodes)
        .map_err(Failure::Error)?;
    // into the window: resume each node whose drain is still ours
    let mut testing: Vec<String> = Vec::new();
    for h in &held {
        if h.state == Held::Requalifying {
            testing.push(h.node.clone());
            continue;
        }
        let o = match glue::with(&sys, false, |q| {
            q.put_back(&h.node, false, Held::Requalifying, "")
        }) {
            Ok(o) => o,
            Err(e) => {
                let e = Failure::Error(e);
                out_again(&sys, &testing, &[], &e, rules);
                return Err(e);
            }
        };
        o.say();
        if o.what == "requalifying" {
            testing.push(o.node);
        }
    }
    let mut outcomes = Vec::new();
    // the node-evidence tier first, where asked (`--checks`): a node it fails needs no pair
    if !req.checks.is_empty() && !testing.is_empty() {
        let tier = super::evidence::run(
            &root,
            req.system,
            &testing,
            &req.checks,
            false,
            Some(&window),
        );
        let tier = match tier {
            Ok(t) => t,
            Err(e) => {
                out_again(&sys, &testing, &[], &e, rules);
                return Err(e);
            }
        };
        for (node, why) in &tier.condemned {
            let evidence = format!("node evidence: {why} ({})", root.join("evidence").display());
            let o = glue::with(&sys, false, |q| {
                q.conclude(node, false, &evidence, rules.passes, rules.max_attempts)
            })
            .map_err(Failure::Error)?;
            o.say();
            outcomes.push(o);
        }
        testing.retain(|n| !tier.condemned.contains_key(n));
    }
    // one round per batch of partners: each node with a partner of its own
    let tested = test_all(
        req,
        &sys,
        &root,
        &testing,
        &partners,
        &window,
        reference,
        rules,
        &mut outcomes,
    );
    if let Err(e) = tested {
        out_again(&sys, &testing, &outcomes, &e, rules);
        return Err(e);
    }
    drop(window);
    let json = serde_json::to_vec_pretty(&outcomes).unwrap_or_default();
    crate::util::fsx::write_atomic(&root.join("requalify.json"), &json).map_err(|e| {
        format!(
            "Cannot write {}: {e}",
            root.join("requalify.json").display()
        )
    })?;
    let still_out = outcomes
        .iter()
        .filter(|o| matches!(o.what.as_str(), "quarantined" | "escalated" | "failed"))
        .count();
    info!(
        "Requalification: {} released, {} still held; results in {}",
        outcomes.iter().filter(|o| o.what == "released").count(),
        still_out,
        root.display()
    );
    if outcomes
        .iter()
        .any(|o| matches!(o.what.as_str(), "escalated" | "failed"))
        || outcomes
            .iter()
            .any(|o| o.what == "quarantined" && o.detail.starts_with("failed"))
    {
        return Err(Failure::Outcome(crate::exit_codes::TEST_FAILURES));
    }
    Ok(())
}

/// Out of the window again, counted as a failed try: a node back in service without its test is not requalified.
fn out_again(
    sys: &crate::config::system::SystemConfig,
    testing: &[String],
    concluded: &[Outcome],
    e: &Failure,
    rules: Rules,
) {
    let why = match e {
        Failure::Error(m) => format!("requalification interrupted: {m}"),
        _ => "requalification interrupted".to_string(),
    };
    for node in testing
        .iter()
        .filter(|n| !concluded.iter().any(|o| &o.node == *n))
    {
        match glue::with(sys, false, |q| {
            q.conclude(node, false, &why, rules.passes, rules.max_attempts)
        }) {
            Ok(o) => o.say(),
            Err(x) => warn!("{node}: cannot take it out again ({x}): take it out by hand"),
        }
    }
}

/// Each node tested with a partner inside the window, and concluded.
#[allow(clippy::too_many_arguments)]
fn test_all(
    req: &Request,
    sys: &crate::config::system::SystemConfig,
    root: &Path,
    testing: &[String],
    partners: &[String],
    window: &crate::systems::fleet::Window,
    reference: Option<f64>,
    rules: Rules,
    outcomes: &mut Vec<Outcome>,
) -> Result<(), Failure> {
    for (i, batch) in testing.chunks(partners.len()).enumerate() {
        let pairs: Vec<[String; 2]> = batch
            .iter()
            .zip(partners)
            .map(|(n, p)| [n.clone(), p.clone()])
            .collect();
        let label = format!("requalify-{}", i + 1);
        let summary = round::run(req, root, &label, i + 1, &pairs, Some(window))?
            .ok_or_else(|| Failure::Error("nothing ran".into()))?;
        for [node, partner] in &pairs {
            let id = format!("{node}+{partner}");
            let e = summary.tests.iter().find(|e| e.record.test_id == id);
            let busbw = e.and_then(|e| e.metrics.get("peak_busbw_gbps").and_then(|v| v.as_f64()));
            let (passed, evidence) = match e {
                None => (false, "no result".to_string()),
                Some(e) if e.record.status != Status::Passed => (
                    false,
                    format!(
                        "{} with {partner}: {}",
                        e.record.status.as_str(),
                        e.record.message
                    ),
                ),
                Some(_) => match (busbw, reference) {
                    (Some(b), Some(r)) if b < r => (
                        false,
                        format!("{b:.2} GB/s with {partner}, below {r:.2} GB/s"),
                    ),
                    (None, _) => (false, format!("no busbw measured with {partner}")),
                    (Some(b), _) => (true, format!("{b:.2} GB/s with {partner}")),
                },
            };
            let evidence = format!("{evidence} ({})", root.join(&label).display());
            let o = glue::with(sys, false, |q| {
                q.conclude(node, passed, &evidence, rules.passes, rules.max_attempts)
            })
            .map_err(Failure::Error)?;
            o.say();
            outcomes.push(o);
        }
    }
    Ok(())
}
