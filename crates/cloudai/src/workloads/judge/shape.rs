//! The shape that ran against the shape asked: ranks, distinct hosts, ranks per host, one rank per GPU.

use std::collections::BTreeMap;

use super::{Asked, Check, CheckKind, SeenRank};

/// Ranks per host, hosts in order of their first rank.
pub fn hosts(ranks: &[SeenRank]) -> Vec<(&str, u64)> {
    let mut order: Vec<(&str, u64)> = Vec::new();
    for r in ranks {
        match order.iter_mut().find(|(h, _)| *h == r.host) {
            Some((_, n)) => *n += 1,
            None => order.push((&r.host, 1)),
        }
    }
    order
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `8 ranks on 1 host (dkh)`; a few host names at most.
pub fn describe(ranks: &[SeenRank]) -> String {
    let hs = hosts(ranks);
    let names: Vec<&str> = hs.iter().map(|(h, _)| *h).take(4).collect();
    let more = if hs.len() > 4 { ", …" } else { "" };
    format!(
        "{} on {} ({}{more})",
        plural(ranks.len() as u64, "rank", "ranks"),
        plural(hs.len() as u64, "host", "hosts"),
        names.join(", ")
    )
}

pub fn check(asked: &Asked, ranks: &[SeenRank]) -> Check {
    if ranks.is_empty() {
        return Check::not_shown(
            CheckKind::Shape,
            "the output does not list its ranks and hosts",
        );
    }
    let launched = match asked.gpus_per_node {
        Some(g) => format!(
            "launched {} × {} = {}",
            plural(asked.nodes, "node", "nodes"),
            plural(g, "GPU", "GPUs"),
            plural(asked.nodes * g, "rank", "ranks")
        ),
        None => format!("launched {}", plural(asked.nodes, "node", "nodes")),
    };
    let seen = describe(ranks);
    let hs = hosts(ranks);
    // two ranks on one GPU of one host
    let mut gpus: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for r in ranks {
        *gpus.entry((&r.host, &r.gpu)).or_default() += 1;
    }
    if let Some(((host, gpu), n)) = gpus.iter().find(|(_, n)| **n > 1) {
        return Check::fail(
            CheckKind::Shape,
            format!(
                "{launched}; the output shows {seen}, with {n} ranks on GPU {gpu} of {host}: ranks share a GPU \
                 (check CUDA_VISIBLE_DEVICES and the GPUs each task is given)"
            ),
        );
    }
    if hs.len() as u64 != asked.nodes {
        return Check::fail(
            CheckKind::Shape,
            format!("{launched}; the output shows {seen}"),
        );
    }
    if let Some(g) = asked.gpus_per_node {
        if let Some((host, n)) = hs.iter().find(|(_, n)| *n != g) {
            // on one host the count says it; on several, which host is short
            let which = if hs.len() > 1 {
                format!(", {} on {host}", plural(*n, "rank", "ranks"))
            } else {
                String::new()
            };
            return Check::fail(
                CheckKind::Shape,
                format!("{launched}; the output shows {seen}{which}"),
            );
        }
    }
    Check::pass(CheckKind::Shape, seen)
}
