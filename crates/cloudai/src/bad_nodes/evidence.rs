//! The cheap tier before any NCCL pair (`--checks nvidia-smi,kernel-log,ib,dcgm`): each check runs once on every
//! node (the node-evidence templates, one job each), and a node that one of them fails is `bad` with that evidence
//! and spends no pair. Its results are a scenario tree of their own (`evidence/`).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::exit_codes::Failure;
use crate::info;
use crate::report::scenario::{generate, Options, Peaks};
use crate::results::Layout;
use crate::runner::Runner;
use crate::scenario::{self, Inputs};
use crate::workloads::node_health::template::{node_findings, NodeCheck};
use crate::workloads::node_health::{worst, Severity};

/// The checks `--checks` names: (name, template, its test definition's extra lines).
pub(crate) const CHECKS: &[(&str, &str, &str)] = &[
    ("nvidia-smi", "NvidiaSmi", ""),
    ("kernel-log", "KernelLog", ""),
    ("ib", "IbStat", ""),
    ("dcgm", "DcgmDiag", "[cmd_args]\nlevel = 1\n"),
];

/// The checks `--checks` asks, in order (one value to the argument parser).
#[derive(Clone, Debug, PartialEq)]
pub struct Checks(pub Vec<String>);

/// `--checks`: documented names, comma separated, each once.
pub fn parse(s: &str) -> Result<Checks, String> {
    let mut out: Vec<String> = Vec::new();
    for c in s.split(',').map(str::trim).filter(|c| !c.is_empty()) {
        if !CHECKS.iter().any(|(n, _, _)| *n == c) {
            let names: Vec<&str> = CHECKS.iter().map(|(n, _, _)| *n).collect();
            return Err(format!(
                "{c:?} is not a check: one or more of {}, separated by ','",
                names.join(", ")
            ));
        }
        if !out.iter().any(|x| x == c) {
            out.push(c.to_string());
        }
    }
    if out.is_empty() {
        return Err("name at least one check (nvidia-smi, kernel-log, ib, dcgm)".into());
    }
    Ok(Checks(out))
}

/// What the tier found: each condemned node with its evidence; and the findings of every node, by check.
#[derive(Debug, Default)]
pub struct Tier {
    pub condemned: BTreeMap<String, String>,
    /// (check, node) → the node's findings worth showing (warnings and failures), `healthy` when none.
    pub shown: BTreeMap<(String, String), String>,
}

/// Runs the checks on `nodes` into `root/evidence`; an exit code when it cannot go on.
pub fn run(
    root: &Path,
    system: Option<&Path>,
    nodes: &[String],
    checks: &[String],
    dry_run: bool,
    window: Option<&crate::systems::fleet::Window>,
) -> Result<Tier, Failure> {
    let dir = root.join("evidence-tests");
    let fail = Failure::Error;
    std::fs::create_dir_all(&dir)
        .map_err(|e| fail(format!("Cannot create {}: {e}", dir.display())))?;
    let mut scen = String::from("name = \"find-bad-nodes-evidence\"\n");
    let list = nodes
        .iter()
        .map(|n| format!("\"{n}\""))
        .collect::<Vec<_>>()
        .join(", ");
    for c in checks {
        let (_, template, extra) = CHECKS
            .iter()
            .find(|(n, _, _)| n == c)
            .expect("parse checked the names");
        let def = format!(
            "name = \"{c}\"\ndescription = \"find-bad-nodes evidence: {c}\"\ntest_template_name = \"{template}\"\n{extra}"
        );
        crate::util::fsx::write_atomic(&dir.join(format!("{c}.toml")), def.as_bytes())
            .map_err(|e| fail(format!("Cannot write {}: {e}", dir.display())))?;
        scen.push_str(&format!(
            "\n[[Tests]]\nid = \"{c}\"\ntest_name = \"{c}\"\nnum_nodes = {}\nnodes = [{list}]\n",
            nodes.len()
        ));
    }
    let scen_path = root.join("evidence.toml");
    crate::util::fsx::write_atomic(&scen_path, scen.as_bytes())
        .map_err(|e| fail(format!("Cannot write {}: {e}", scen_path.display())))?;
    let survey = |s: &mut crate::config::system::SystemConfig| {
        if let Some(w) = window {
            w.fit(s);
        }
        crate::systems::survey::survey(s, dry_run)
    };
    let inputs = Inputs {
        system,
        tests_dir: Some(&dir),
        scenario: &scen_path,
        hook_dir: None,
        survey: Some(&survey),
    };
    let (cfg, scenario) = scenario::load_all(&inputs)?;
    let runs = scenario.test_runs.clone();
    let cfg = Arc::new(cfg);
    let started = crate::runner::start::start(&cfg, &scenario, dry_run)?;
    let layout = Layout {
        root: root.join("evidence"),
        step: None,
    };
    info!(
        "Evidence first: {} on {} node(s), before any pair",
        checks.join(", "),
        nodes.len()
    );
    let runner = Runner::new(started.system, scenario, layout);
    let outcome = started.rt.block_on(runner.run());
    if dry_run {
        return Ok(Tier::default());
    }
    if !outcome.leftovers.is_empty() {
        return Err(Failure::Outcome(crate::results::record::report_leftovers(
            root,
            &outcome.leftovers,
        )));
    }
    if outcome.interrupted {
        return Err(Failure::Outcome(crate::exit_codes::INTERRUPTED));
    }
    let opts = Options {
        compare: Vec::new(),
        tolerance: 0.0,
        regrade: false,
        summary: true,
        dry_run: false,
        baseline: None,
        peaks: Peaks::of(&cfg),
        per_test: true,
        fabric: None,
    };
    if let Err(e) = generate(&runner.layout().root, Some(&outcome.records), &opts) {
        crate::warn!("Cannot write the evidence report: {e}");
    }
    let mut tier = Tier::default();
    for run in &runs {
        let Some(check) = node_check(&run.test.test_template_name) else {
            continue;
        };
        let it = runner.layout().root.join(&run.id).join("0");
        for (node, f) in node_findings(check, &run.test, &it) {
            let fails: Vec<&str> = f
                .iter()
                .filter(|x| x.severity == Severity::Fail)
                .map(|x| x.what.as_str())
                .collect();
            let shown: Vec<String> = f
                .iter()
                .filter(|x| x.severity >= Severity::Warn)
                .map(|x| format!("{}: {}", x.severity.as_str(), x.what))
                .collect();
            tier.shown.insert(
                (run.id.clone(), node.clone()),
                if shown.is_empty() {
                    "healthy".into()
                } else {
                    shown.join("; ")
                },
            );
            if worst(&f) == Some(Severity::Fail) {
                let why = format!("{}: {}", run.id, fails.join("; "));
                info!("  {node}: bad by evidence ({why}): it spends no pair");
                tier.condemned
                    .entry(node)
                    .and_modify(|w| {
                        w.push_str("; ");
                        w.push_str(&why)
                    })
                    .or_insert(why);
            }
        }
    }
    Ok(tier)
}

fn node_check(template: &str) -> Option<&'static NodeCheck> {
    use crate::workloads::node_health::template::{DCGM_DIAG, IB_STAT, KERNEL_LOG, NVIDIA_SMI};
    [&DCGM_DIAG, &NVIDIA_SMI, &KERNEL_LOG, &IB_STAT]
        .into_iter()
        .find(|c| crate::config::test::TemplateSchema::template(*c) == template)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_names_have_a_grammar() {
        assert_eq!(parse("nvidia-smi, ib,ib").unwrap().0, ["nvidia-smi", "ib"]);
        assert!(parse("smi")
            .unwrap_err()
            .contains("\"smi\" is not a check: one or more of nvidia-smi"));
        assert!(parse(",").is_err());
    }
}
