//! The search in a simulation: N nodes, K bad nodes and L bad links (pairs of good nodes that are slow together)
//! drawn at random from a seed, an oracle in place of the jobs, and the verdicts checked against the truth. Used by
//! a unit test at small N and by `cargo bench --bench find_bad_nodes` at thousands of nodes.

use std::collections::BTreeSet;

use super::plan::{Evidence, Plan, Verdict};

/// What one simulated sweep did and whether it judged right.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub nodes: usize,
    pub bad: usize,
    pub links: usize,
    pub jobs: usize,
    pub rounds: usize,
    /// Every bad node `bad`, every other node `good`, exactly the bad links named.
    pub correct: bool,
    /// What was judged wrong, when it was.
    pub wrong: Vec<String>,
}

/// xorshift64*: small, seeded, good enough to draw nodes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn name(i: usize) -> String {
    format!("node{i:05}")
}

/// Runs the search to its end (or to `max_rounds`), each pair judged by `passes` in place of a job: 180 GB/s when
/// it passes, 40 when not, against a 150 GB/s threshold.
pub(crate) fn drive(
    mut plan: Plan,
    max_rounds: usize,
    mut passes: impl FnMut(&[String; 2]) -> bool,
) -> Plan {
    while plan.rounds < max_rounds {
        let pairs = plan.next_round();
        if pairs.is_empty() {
            break;
        }
        let round = plan.rounds + 1;
        let results = pairs
            .into_iter()
            .map(|pair| {
                let passed = passes(&pair);
                Evidence {
                    round,
                    passed,
                    busbw: Some(if passed { 180.0 } else { 40.0 }),
                    pair,
                    job_id: None,
                    threshold: Some(150.0),
                    reason: String::new(),
                }
            })
            .collect();
        plan.record(results);
    }
    plan
}

/// Sweeps `n` nodes of which `k` are bad and `l` round-1 pairs of good nodes are bad links (a link is only seen
/// when its two nodes run together; round 1 is where the search pairs neighbours).
pub fn run(n: usize, k: usize, l: usize, seed: u64) -> Outcome {
    let mut rng = Rng(seed.max(1));
    let mut bad = BTreeSet::new();
    while bad.len() < k.min(n) {
        bad.insert(name(rng.below(n)));
    }
    // round 1 pairs (0,1), (2,3), …: links among pairs of two good nodes
    let candidates: Vec<[String; 2]> = (0..n / 2)
        .map(|i| [name(2 * i), name(2 * i + 1)])
        .filter(|p| !bad.contains(&p[0]) && !bad.contains(&p[1]))
        .collect();
    let mut links: BTreeSet<[String; 2]> = BTreeSet::new();
    while links.len() < l.min(candidates.len()) {
        links.insert(candidates[rng.below(candidates.len())].clone());
    }
    let passes = |p: &[String; 2]| {
        let mut key = p.clone();
        key.sort();
        !bad.contains(&p[0]) && !bad.contains(&p[1]) && !links.contains(&key)
    };
    let plan = drive(Plan::new((0..n).map(name).collect()), usize::MAX, passes);
    let mut wrong = Vec::new();
    for (node, v) in plan.verdicts() {
        let want = if bad.contains(&node) {
            Verdict::Bad
        } else {
            Verdict::Good
        };
        if v != want {
            wrong.push(format!("{node}: {v:?}, truly {want:?}"));
        }
    }
    let named: BTreeSet<[String; 2]> = plan
        .bad_links()
        .into_iter()
        .map(|b| {
            let mut p = b.pair;
            p.sort();
            p
        })
        .collect();
    if named != links {
        wrong.push(format!("links named {named:?}, truly {links:?}"));
    }
    Outcome {
        nodes: n,
        bad: bad.len(),
        links: links.len(),
        jobs: plan.jobs(),
        rounds: plan.rounds,
        correct: wrong.is_empty(),
        wrong,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_sweeps_judge_every_node_and_link_right_within_the_bound() {
        for n in [8usize, 16, 64] {
            for (k, l) in [(0, 0), (1, 0), (0, 2), (2, 1), (3, 2)] {
                for seed in 1..=20 {
                    let o = run(n, k, l, seed);
                    assert!(o.correct, "n={n} k={k} l={l} seed={seed}: {:?}", o.wrong);
                    // a bad link costs what a bad node costs: its two nodes are re-paired
                    assert!(
                        o.jobs <= Plan::bound(n, k + l),
                        "n={n} k={k} l={l} seed={seed}: {} jobs",
                        o.jobs
                    );
                    // few bad nodes and links: round 1, then one round re-pairing their nodes with cleared ones
                    // (more only when the failing nodes outnumber the cleared ones)
                    if 4 * (k + l) <= n {
                        assert!(
                            o.rounds <= 2,
                            "n={n} k={k} l={l} seed={seed}: {} rounds",
                            o.rounds
                        );
                    }
                }
            }
        }
    }
}
