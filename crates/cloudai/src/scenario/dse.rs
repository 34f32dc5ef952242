//! Design-space exploration: a test whose `cmd_args` or `extra_env_vars` hold lists, or whose `num_nodes` is a
//! list, is a grid. CloudAI's grid agent visits every combination — cmd_args in the definition's field order,
//! then `extra_env_vars.<NAME>`, then `NUM_NODES`, the last varying fastest — one step each.

use crate::config::args::ArgValue;
use crate::scenario::TestRun;

/// One parameter of the grid and its values, named as CloudAI names it in actions.
pub(crate) type Space = Vec<(String, Vec<ArgValue>)>;
/// One step's choice of a value per parameter.
pub type Action = Vec<(String, ArgValue)>;

pub use crate::config::test::AGENTS;
/// The observation of a metric that could not be measured (CloudAI's default `metric_failure`).
pub(crate) const METRIC_FAILURE: f64 = -1.0;

pub fn space(run: &TestRun) -> Space {
    let t = &run.test;
    let mut out = Vec::new();
    out.extend(t.cmd_args.sweeps(&t.dse_excluded_args));
    for (k, v) in &t.extra_env_vars {
        if let ArgValue::List(l) = v {
            out.push((format!("extra_env_vars.{k}"), l.clone()));
        }
    }
    if !run.num_nodes_sweep.is_empty() {
        let n = run
            .num_nodes_sweep
            .iter()
            .map(|n| ArgValue::Int(*n as i64))
            .collect();
        out.push(("NUM_NODES".into(), n));
    }
    out
}

/// Puts `v` at the dotted `path` of a `cmd_args` tree.
pub(crate) fn set_path(t: &mut indexmap::IndexMap<String, ArgValue>, path: &str, v: ArgValue) {
    match path.split_once('.') {
        Some((head, rest)) if matches!(t.get(head), Some(ArgValue::Table(_))) => {
            if let Some(ArgValue::Table(sub)) = t.get_mut(head) {
                set_path(sub, rest, v);
            }
        }
        _ => {
            t.insert(path.to_string(), v);
        }
    }
}

/// Every combination, the last parameter varying fastest (`itertools.product` order).
pub fn grid(space: &Space) -> Vec<Action> {
    let mut out: Vec<Action> = vec![Vec::new()];
    for (k, values) in space {
        out = out
            .into_iter()
            .flat_map(|a| {
                values.iter().map(move |v| {
                    let mut a = a.clone();
                    a.push((k.clone(), v.clone()));
                    a
                })
            })
            .collect();
    }
    out
}

/// The number of steps of a grid, without building it.
pub fn size(space: &Space) -> u64 {
    space
        .iter()
        .fold(1u64, |n, (_, v)| n.saturating_mul(v.len().max(1) as u64))
}

/// The test run of one step: the action's values in place. Like CloudAI, a node-count choice also lands in
/// `cmd_args` as `NUM_NODES` (so it shows in the command line and in test-run.toml).
pub fn apply(run: &TestRun, action: &Action, step: u64) -> TestRun {
    let mut r = run.clone();
    for (k, v) in action {
        if k == "NUM_NODES" {
            if let Some(n) = v.as_int() {
                r.num_nodes = n.max(1) as u64;
            }
            r.test.cmd_args.values.insert(k.clone(), v.clone());
        } else if let Some(name) = k.strip_prefix("extra_env_vars.") {
            r.test.extra_env_vars.insert(name.to_string(), v.clone());
        } else {
            set_path(&mut r.test.cmd_args.values, k, v.clone());
        }
    }
    r.workload.derive(&mut r.test, r.tasks_per_node);
    r.apply_nodes_needed();
    r.num_nodes_sweep.clear();
    r.step = step;
    r
}

/// `{'iters': 10, 'extra_env_vars.NCCL_ALGO': 'Ring', 'NUM_NODES': 1}`: Python's repr of the action dict, as in
/// CloudAI's log and trajectory.csv.
pub(crate) fn action_repr(a: &Action) -> String {
    let inner: Vec<String> = a
        .iter()
        .map(|(k, v)| format!("'{k}': {}", v.py_repr()))
        .collect();
    format!("{{{}}}", inner.join(", "))
}

/// `[1.5, -1.0]`: Python's repr of a list of floats.
pub(crate) fn floats_repr(v: &[f64]) -> String {
    let inner: Vec<String> = v.iter().map(|x| ArgValue::Float(*x).py_repr()).collect();
    format!("[{}]", inner.join(", "))
}

/// CloudAI's reward functions of an observation.
pub fn reward(function: &str, obs: &[f64]) -> f64 {
    let first = obs.first().copied();
    // AI Dynamo's: the observation is time to first token, inter-token latency, throughput (in that order)
    let dynamo = match obs {
        [ttft, itl, tput, ..] => Some((*ttft, *itl, *tput)),
        _ => None,
    };
    let positive = |(a, b, c): (f64, f64, f64)| a > 0.0 && b > 0.0 && c > 0.0;
    match function {
        "negative" => first.map_or(0.0, |x| -x),
        "identity" => first.unwrap_or(0.0),
        "ai_dynamo_weighted_normalized" => match dynamo {
            None => -1.0,
            Some((ttft, itl, tput)) => {
                0.45 * (0.3 / ttft) + 0.1 * (0.02 / itl) + 0.45 * (tput / 50.0)
            }
        },
        "ai_dynamo_ratio_normalized" => match dynamo {
            Some(m @ (ttft, itl, tput)) if positive(m) => {
                (tput / 1000.0) / ((ttft / 1.0) * (itl / 0.03))
            }
            _ => 0.0,
        },
        "ai_dynamo_log_scale" => match dynamo {
            None => 0.0,
            Some(m) if !positive(m) => -1e-3,
            Some((ttft, itl, tput)) => {
                (tput + 1.0).ln() - 0.7 * (ttft + 1.0).ln() - 0.1 * (itl + 1.0).ln()
            }
        },
        // inverse, the default
        _ => match first {
            Some(x) if x != 0.0 => 1.0 / x,
            _ => 0.0,
        },
    }
}

pub use crate::util::csv_field;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reprs_and_rewards() {
        let a: Action = vec![
            ("iters".into(), ArgValue::Int(10)),
            (
                "extra_env_vars.NCCL_ALGO".into(),
                ArgValue::Str("Ring".into()),
            ),
            ("NUM_NODES".into(), ArgValue::Int(1)),
        ];
        assert_eq!(
            action_repr(&a),
            "{'iters': 10, 'extra_env_vars.NCCL_ALGO': 'Ring', 'NUM_NODES': 1}"
        );
        assert_eq!(floats_repr(&[-1.0]), "[-1.0]");
        assert_eq!(reward("inverse", &[-1.0]), -1.0);
        assert_eq!(reward("inverse", &[4.0]), 0.25);
        assert_eq!(reward("inverse", &[0.0]), 0.0);
        // AI Dynamo's three, with CloudAI's values for failed metrics and short observations
        assert_eq!(reward("ai_dynamo_log_scale", &[-1.0; 4]), -1e-3);
        assert_eq!(reward("ai_dynamo_log_scale", &[1.0, 1.0]), 0.0);
        let r = reward("ai_dynamo_log_scale", &[0.5, 0.02, 120.0]);
        let want = 121f64.ln() - 0.7 * 1.5f64.ln() - 0.1 * 1.02f64.ln();
        assert!((r - want).abs() < 1e-12, "{r}");
        assert_eq!(reward("ai_dynamo_ratio_normalized", &[-1.0; 4]), 0.0);
        let r = reward("ai_dynamo_ratio_normalized", &[0.5, 0.015, 2000.0]);
        assert!((r - 8.0).abs() < 1e-12, "{r}");
        assert_eq!(reward("ai_dynamo_weighted_normalized", &[1.0]), -1.0);
        let r = reward("ai_dynamo_weighted_normalized", &[0.3, 0.02, 50.0]);
        assert!((r - 1.0).abs() < 1e-12, "{r}");
        let space: Space = vec![
            ("a".into(), vec![ArgValue::Int(1), ArgValue::Int(2)]),
            ("b".into(), vec![ArgValue::Int(3), ArgValue::Int(4)]),
        ];
        let g = grid(&space);
        assert_eq!(g.len(), 4);
        assert_eq!(
            g[1],
            vec![
                ("a".into(), ArgValue::Int(1)),
                ("b".into(), ArgValue::Int(4))
            ]
        );
        assert_eq!(csv_field(&action_repr(&a)).chars().next(), Some('"'));
    }
}
