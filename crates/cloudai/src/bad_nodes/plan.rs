//! Which node pairs to test, round by round, and what the results say about each node.
//!
//! Round 1 pairs the nodes in ring order, disjoint: (n0,n1), (n2,n3), … — every node once, ⌊N/2⌋ jobs at once.
//! A pair that passes clears both nodes. Each node of a failing pair (and an odd node left over) is then paired
//! with a different cleared node: passing clears it (its first partner was to blame), failing condemns it, since
//! its partner is known good. So one bad node does not condemn its partner.
//!
//! Jobs: ⌊N/2⌋ + (nodes of failing pairs, ≤ 2K for K bad nodes) + 1 for an odd node: O(N), e.g. 16 nodes with one
//! bad node take 8 + 2 = 10 jobs. When no pair passes in round 1 (everything slow: a fabric-wide problem, or more
//! than half the nodes bad), up to two rounds of new disjoint pairs (⌊N/2⌋ jobs each) look for a good node; when
//! they find none either, every node stays `suspect`. The bound with K bad nodes, K < N/2: ⌊N/2⌋ + 2K + N mod 2,
//! plus 2·⌊N/2⌋ when the bad nodes happen to sit in every round-1 pair (possible only for K ≥ ⌊N/2⌋, odd N).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Failed with a partner known to be good.
    Bad,
    /// Failed only with partners of unknown health: cannot be told apart from them.
    Suspect,
    Good,
}

/// The result of one pair's job.
#[derive(Clone, Debug, Serialize)]
pub struct Evidence {
    pub round: usize,
    pub pair: [String; 2],
    pub job_id: Option<String>,
    /// Peak busbw, GB/s.
    pub busbw: Option<f64>,
    pub threshold: Option<f64>,
    pub passed: bool,
    /// Why it failed (status and reason), empty when it passed.
    pub reason: String,
}

#[derive(Debug, Default)]
pub struct Plan {
    nodes: Vec<String>,
    pub rounds: usize,
    pub evidence: Vec<Evidence>,
    good: BTreeSet<String>,
    bad: BTreeSet<String>,
    /// Rounds run while no node was known good.
    fallbacks: usize,
}

/// Re-pairing rounds tried while no pair has passed, before every node is left `suspect`.
const MAX_FALLBACKS: usize = 2;

impl Plan {
    pub fn new(mut nodes: Vec<String>) -> Self {
        nodes.dedup();
        Plan {
            nodes,
            ..Default::default()
        }
    }

    /// The most jobs the search can take with `k` bad nodes (the bound documented above).
    pub fn bound(n: usize, k: usize) -> usize {
        // re-pairing rounds happen only when every round-1 pair holds a bad node
        let shift = if k >= n / 2 {
            MAX_FALLBACKS * (n / 2)
        } else {
            0
        };
        n / 2 + (2 * k).min(n) + n % 2 + shift
    }

    /// The pairs of the next round; empty when the search is over.
    pub fn next_round(&self) -> Vec<[String; 2]> {
        if self.rounds == 0 {
            return self
                .nodes
                .chunks(2)
                .filter(|c| c.len() == 2)
                .map(|c| [c[0].clone(), c[1].clone()])
                .collect();
        }
        let undecided: Vec<&String> = self
            .nodes
            .iter()
            .filter(|n| !self.good.contains(*n) && !self.bad.contains(*n))
            .collect();
        if undecided.is_empty() {
            return Vec::new();
        }
        if self.good.is_empty() {
            // nothing cleared yet: new disjoint pairs not tried before, nearest in ring order first, at most twice
            let n = self.nodes.len();
            if self.fallbacks >= MAX_FALLBACKS || n < 3 {
                return Vec::new();
            }
            let tried: BTreeSet<[&str; 2]> = self
                .evidence
                .iter()
                .map(|e| {
                    let mut p = [e.pair[0].as_str(), e.pair[1].as_str()];
                    p.sort_unstable();
                    p
                })
                .collect();
            let mut used = vec![false; n];
            let mut pairs = Vec::new();
            for d in 1..n {
                for i in 0..n {
                    let j = (i + d) % n;
                    let mut key = [self.nodes[i].as_str(), self.nodes[j].as_str()];
                    key.sort_unstable();
                    if used[i] || used[j] || tried.contains(&key) {
                        continue;
                    }
                    used[i] = true;
                    used[j] = true;
                    pairs.push([self.nodes[i].clone(), self.nodes[j].clone()]);
                }
            }
            return pairs;
        }
        // each undecided node with a distinct cleared node, as many as there are cleared nodes
        let good: Vec<&String> = self.good.iter().collect();
        undecided
            .iter()
            .zip(good.iter())
            .map(|(u, g)| [(*u).clone(), (*g).clone()])
            .collect()
    }

    /// Records a round's results and what they prove.
    pub fn record(&mut self, results: Vec<Evidence>) {
        self.rounds += 1;
        if self.rounds > 1 && self.good.is_empty() {
            self.fallbacks += 1;
        }
        for e in &results {
            if e.passed {
                self.good.extend(e.pair.iter().cloned());
            }
        }
        for e in &results {
            if e.passed {
                continue;
            }
            // a failure next to a node known good (from before this round) condemns the other node
            let [a, b] = &e.pair;
            for (x, y) in [(a, b), (b, a)] {
                if self.good.contains(y)
                    && !self.good.contains(x)
                    && self.known_good_before(y, e.round)
                {
                    self.bad.insert(x.clone());
                }
            }
        }
        self.evidence.extend(results);
    }

    /// Whether `node` passed in a round before `round` (so it was a trusted partner in `round`).
    fn known_good_before(&self, node: &str, round: usize) -> bool {
        self.evidence
            .iter()
            .any(|e| e.passed && e.round < round && e.pair.iter().any(|p| p == node))
    }

    pub fn verdicts(&self) -> BTreeMap<String, Verdict> {
        self.nodes
            .iter()
            .map(|n| {
                let v = if self.bad.contains(n) {
                    Verdict::Bad
                } else if self.good.contains(n) {
                    Verdict::Good
                } else {
                    Verdict::Suspect
                };
                (n.clone(), v)
            })
            .collect()
    }

    pub fn jobs(&self) -> usize {
        self.evidence.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the search against an oracle: a pair passes when neither node is bad.
    fn search(n: usize, bad: &[usize]) -> (BTreeMap<String, Verdict>, usize) {
        let nodes: Vec<String> = (1..=n).map(|i| format!("node{i:03}")).collect();
        let bad: BTreeSet<String> = bad.iter().map(|i| format!("node{i:03}")).collect();
        let mut plan = Plan::new(nodes);
        loop {
            let pairs = plan.next_round();
            if pairs.is_empty() {
                break;
            }
            let round = plan.rounds + 1;
            let results = pairs
                .into_iter()
                .map(|pair| Evidence {
                    round,
                    passed: !pair.iter().any(|p| bad.contains(p)),
                    pair,
                    job_id: None,
                    busbw: None,
                    threshold: None,
                    reason: String::new(),
                })
                .collect();
            plan.record(results);
            assert!(plan.rounds < 10, "the search does not end");
        }
        (plan.verdicts(), plan.jobs())
    }

    #[test]
    fn isolates_bad_nodes_within_the_bound() {
        for n in [2usize, 3, 4, 5, 8, 16, 17, 64] {
            for bad in [
                vec![],
                vec![1],
                vec![n],
                vec![1, 2],
                vec![2, n - 1],
                vec![1, 3, n],
            ] {
                let bad: Vec<usize> = bad
                    .into_iter()
                    .filter(|b| *b >= 1 && *b <= n)
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect();
                if 2 * bad.len() >= n {
                    continue;
                }
                let (v, jobs) = search(n, &bad);
                for (node, verdict) in &v {
                    let i: usize = node[4..].parse().unwrap();
                    let want = if bad.contains(&i) {
                        Verdict::Bad
                    } else {
                        Verdict::Good
                    };
                    // two nodes alone cannot be told apart when their one pair fails
                    if n == 2 && !bad.is_empty() {
                        assert_eq!(*verdict, Verdict::Suspect);
                        continue;
                    }
                    assert_eq!(*verdict, want, "n={n} bad={bad:?} node {node}: {v:?}");
                }
                assert!(
                    jobs <= Plan::bound(n, bad.len()),
                    "n={n} bad={bad:?}: {jobs} jobs > {}",
                    Plan::bound(n, bad.len())
                );
            }
        }
    }

    #[test]
    fn everything_failing_leaves_everyone_suspect() {
        let (v, jobs) = search(8, &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert!(v.values().all(|x| *x == Verdict::Suspect));
        assert_eq!(jobs, 12); // round 1 and two re-pairing rounds
    }
}
