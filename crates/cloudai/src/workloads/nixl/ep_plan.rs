//! NIXL EP's plan: its phases (a JSON list of rank lists) and the worker launches that start each phase's new ranks
//! on the nodes, shared by the job ([`super::ep`]) and its grade ([`super::ep_log`]).

use crate::config::args::ArgValue;
use crate::config::test::TestDefinition;

/// The plan's file beside the job's script.
pub(crate) const PLAN: &str = "nixl-ep-plan.json";

/// A plan's phases, or why it is not one.
pub(crate) fn parse_plan(text: &str) -> Result<Vec<Vec<i64>>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("the plan is empty".into());
    }
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("the plan is not JSON: {e}"))?;
    let phases = v
        .as_array()
        .filter(|a| !a.is_empty())
        .ok_or("the plan is not a non-empty list of phases")?;
    phases
        .iter()
        .map(|phase| {
            let ranks = phase
                .as_array()
                .filter(|a| !a.is_empty())
                .ok_or("each phase must be a non-empty list of ranks")?;
            ranks
                .iter()
                .map(|r| r.as_i64().ok_or("each rank must be an integer"))
                .collect::<Result<Vec<i64>, _>>()
        })
        .collect::<Result<_, &str>>()
        .map_err(str::to_string)
}

/// One launch of workers on one node.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct WorkerLaunch {
    pub node: usize,
    pub processes: u64,
    /// Joins through the first node's rank store (every launch but the first node's initial one).
    pub tcp_server: bool,
    /// Appends to the node's log (launches of later phases).
    pub append: bool,
}

/// The launches that start each phase's new ranks: a phase's new (non-negative) ranks packed onto the nodes in
/// order, each node taking at most `per_node` workers over the whole plan.
pub(crate) fn stages(
    plan: &[Vec<i64>],
    nodes: u64,
    per_node: u64,
) -> Result<Vec<(usize, Vec<WorkerLaunch>)>, String> {
    let mut previous = std::collections::BTreeSet::new();
    let mut counts = Vec::new();
    for phase in plan {
        let ranks: std::collections::BTreeSet<i64> =
            phase.iter().copied().filter(|r| *r >= 0).collect();
        counts.push(ranks.difference(&previous).count() as u64);
        previous = ranks;
    }
    let total: u64 = counts.iter().sum();
    if nodes == 1 && per_node != total {
        return Err(format!(
            "on one node num_processes_per_node must equal the workers the plan starts ({total}), found {per_node}"
        ));
    }
    if nodes > 1 && total > per_node * nodes {
        return Err(format!(
            "the plan starts {total} workers but {nodes} nodes of num_processes_per_node = {per_node} hold {}",
            per_node * nodes
        ));
    }
    let mut room = vec![per_node; nodes as usize];
    let mut out = Vec::new();
    for (idx, count) in counts.into_iter().enumerate() {
        let mut left = count;
        let mut launches = Vec::new();
        for (node, free) in room.iter_mut().enumerate() {
            if left == 0 {
                break;
            }
            let take = (*free).min(left);
            if take == 0 {
                continue;
            }
            *free -= take;
            left -= take;
            launches.push(WorkerLaunch {
                node,
                processes: take,
                tcp_server: idx != 0 || node != 0,
                append: idx != 0,
            });
        }
        if left != 0 {
            return Err(format!(
                "phase {idx}'s workers do not fit on {nodes} nodes of num_processes_per_node = {per_node} ({left} left over)"
            ));
        }
        out.push((idx, launches));
    }
    if out.iter().all(|(_, l)| l.is_empty()) {
        return Err("the plan starts no worker (no rank of 0 or more)".into());
    }
    Ok(out)
}

pub(crate) fn plan_of(test: &TestDefinition) -> Vec<Vec<i64>> {
    test.cmd_args
        .str("plan")
        .and_then(|p| parse_plan(p).ok())
        .unwrap_or_default()
}

pub(crate) fn int(test: &TestDefinition, k: &str) -> Option<i64> {
    test.cmd_args.get(k).and_then(ArgValue::as_int)
}

/// Nodes whose log the job writes: those a launch runs on.
pub(crate) fn launched_nodes(test: &TestDefinition, nodes: u64) -> Vec<usize> {
    let per_node = int(test, "num_processes_per_node").unwrap_or(1).max(1) as u64;
    let mut out: Vec<usize> = stages(&plan_of(test), nodes.max(1), per_node)
        .unwrap_or_default()
        .iter()
        .flat_map(|(_, l)| l.iter().map(|w| w.node))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}
