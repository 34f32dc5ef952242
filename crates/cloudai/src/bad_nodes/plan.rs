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
//!
//! With `--repeat R` (flaky nodes), each node of a failing pair is tried R times, each time with a cleared partner
//! (a different one while there are enough): failing all R condemns it, passing all R clears it, and a mix leaves it
//! `suspect` with the counts ([`Trials`]). The bound becomes ⌊N/2⌋ + 2K·R + N mod 2 (+ the re-pairing rounds).

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
    /// Out of service before the sweep (down, drained, NotReady, tainted): not tested.
    Unavailable,
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

/// How a node of a failing pair fared with partners known to be good.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Trials {
    pub passed: usize,
    pub failed: usize,
}

impl Trials {
    fn total(self) -> usize {
        self.passed + self.failed
    }
}

/// A pair that failed although each of its nodes passed with another partner: the path between the two (a cable,
/// a switch port, a route through the fabric) is slow, not either node.
#[derive(Clone, Debug, Serialize)]
pub struct BadLink {
    pub pair: [String; 2],
    pub round: usize,
    pub job_id: Option<String>,
    pub busbw: Option<f64>,
    pub threshold: Option<f64>,
    pub reason: String,
    /// Each node's passing pairs: the evidence that the node itself is fine.
    pub cleared_by: BTreeMap<String, Vec<String>>,
    /// The leaf switches between the two nodes (one when they share it), when the topology is known.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub path: Vec<String>,
}

#[derive(Debug, Default)]
pub struct Plan {
    nodes: Vec<String>,
    pub rounds: usize,
    pub evidence: Vec<Evidence>,
    good: BTreeSet<String>,
    bad: BTreeSet<String>,
    /// Nodes left out before the sweep, with the scheduler's reason.
    pub unavailable: BTreeMap<String, String>,
    /// Nodes the evidence tier found bad (`--checks`), with that evidence: they spend no pair.
    pub condemned: BTreeMap<String, String>,
    /// Rounds run while no node was known good.
    fallbacks: usize,
    /// How often each node of a failing pair is tried with a cleared partner (`--repeat`, at least 1).
    repeat: usize,
    /// Each tried node's results with cleared partners.
    pub trials: BTreeMap<String, Trials>,
    /// Nodes that passed some of their trials and failed others: `suspect`, with the counts.
    flaky: BTreeSet<String>,
}

/// Re-pairing rounds tried while no pair has passed, before every node is left `suspect`.
const MAX_FALLBACKS: usize = 2;

impl Plan {
    pub fn new(mut nodes: Vec<String>) -> Self {
        nodes.dedup();
        Plan {
            nodes,
            repeat: 1,
            ..Default::default()
        }
    }

    /// Tries each node of a failing pair `repeat` times (at least once).
    pub(crate) fn with_repeat(mut self, repeat: usize) -> Self {
        self.repeat = repeat.max(1);
        self
    }

    /// The most jobs the search can take with `k` bad nodes (the bound documented above), each failing node tried
    /// once.
    pub fn bound(n: usize, k: usize) -> usize {
        Self::bound_repeated(n, k, 1)
    }

    /// [`Plan::bound`] with every node of a failing pair tried `repeat` times.
    pub(crate) fn bound_repeated(n: usize, k: usize, repeat: usize) -> usize {
        // re-pairing rounds happen only when every round-1 pair holds a bad node
        let shift = if k >= n / 2 {
            MAX_FALLBACKS * (n / 2)
        } else {
            0
        };
        n / 2 + (2 * k).min(n) * repeat.max(1) + n % 2 + shift
    }

    /// How often each node of a failing pair is tried.
    pub fn repeat(&self) -> usize {
        self.repeat
    }

    fn decided(&self, node: &str) -> bool {
        self.good.contains(node) || self.bad.contains(node) || self.flaky.contains(node)
    }

    /// The pairs of the next round; empty when the search is over.
    pub(crate) fn next_round(&self) -> Vec<[String; 2]> {
        if self.rounds == 0 {
            return self
                .nodes
                .chunks(2)
                .filter(|c| c.len() == 2)
                .map(|c| [c[0].clone(), c[1].clone()])
                .collect();
        }
        let undecided: Vec<&String> = self.nodes.iter().filter(|n| !self.decided(n)).collect();
        if undecided.is_empty() {
            return Vec::new();
        }
        if self.good.is_empty() {
            // nothing cleared yet: new disjoint pairs not tried before, nearest in ring order first, at most twice
            let n = self.nodes.len();
            if self.fallbacks >= MAX_FALLBACKS || n < 3 {
                return Vec::new();
            }
            let tried = self.pairs_tried(false);
            let mut used = vec![false; n];
            let mut pairs = Vec::new();
            'distance: for d in 1..n {
                for i in 0..n {
                    if pairs.len() == n / 2 {
                        break 'distance;
                    }
                    let j = (i + d) % n;
                    let key = Self::key(&self.nodes[i], &self.nodes[j]);
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
        // each undecided node with a distinct cleared node, as many as there are cleared nodes: one it has not run
        // with yet when there is one (a node tried again meets another partner), else one it passed with, never
        // one it failed with (that pair may be a slow link); a node left without a partner waits for the next round
        let tried = self.pairs_tried(false);
        let failed = self.pairs_tried(true);
        let good: Vec<&String> = self.good.iter().collect();
        let g = good.len();
        let mut used = vec![false; g];
        let mut cursor = self.rounds;
        let mut pairs = Vec::new();
        for u in undecided {
            if pairs.len() == g {
                break;
            }
            let (mut fresh, mut again) = (None, None);
            for step in 0..g {
                let j = (cursor + step) % g;
                if used[j] {
                    continue;
                }
                let key = Self::key(u, good[j]);
                if !tried.contains(&key) {
                    fresh = Some(j);
                    break;
                }
                if again.is_none() && !failed.contains(&key) {
                    again = Some(j);
                }
            }
            let Some(j) = fresh.or(again) else {
                continue;
            };
            used[j] = true;
            cursor = j + 1;
            pairs.push([u.clone(), good[j].clone()]);
        }
        pairs
    }

    fn key<'a>(a: &'a str, b: &'a str) -> [&'a str; 2] {
        if a <= b {
            [a, b]
        } else {
            [b, a]
        }
    }

    /// The pairs that ran so far (only those that failed, with `failed_only`), each sorted.
    fn pairs_tried(&self, failed_only: bool) -> BTreeSet<[&str; 2]> {
        self.evidence
            .iter()
            .filter(|e| !(failed_only && e.passed))
            .map(|e| Self::key(&e.pair[0], &e.pair[1]))
            .collect()
    }

    /// Records a round's results and what they prove.
    pub fn record(&mut self, results: Vec<Evidence>) {
        self.rounds += 1;
        if self.rounds > 1 && self.good.is_empty() {
            self.fallbacks += 1;
        }
        // partners trusted in this round: nodes cleared before it
        let trusted = self.good.clone();
        let mut tried_now = BTreeSet::new();
        for e in &results {
            let [a, b] = &e.pair;
            let mut trial = false;
            for (x, y) in [(a, b), (b, a)] {
                if trusted.contains(y) && !trusted.contains(x) {
                    // a pair with a cleared partner tries the other node
                    let t = self.trials.entry(x.clone()).or_default();
                    if e.passed {
                        t.passed += 1;
                    } else {
                        t.failed += 1;
                    }
                    tried_now.insert(x.clone());
                    trial = true;
                }
            }
            if e.passed && !trial {
                self.good.extend(e.pair.iter().cloned());
            }
        }
        for node in tried_now {
            let t = self.trials[&node];
            if t.total() < self.repeat {
                continue;
            }
            match (t.passed, t.failed) {
                (_, 0) => self.good.insert(node),
                (0, _) => self.bad.insert(node),
                _ => self.flaky.insert(node),
            };
        }
        self.evidence.extend(results);
        // a node not yet tried that failed with two partners since cleared and passed with none is to blame: it cannot be tried
        // with either again (each pair may be a slow link), and two slow links at one node are a slow node
        let mut against: BTreeMap<&String, BTreeSet<&String>> = BTreeMap::new();
        let mut passed: BTreeSet<&String> = BTreeSet::new();
        for e in &self.evidence {
            let [a, b] = &e.pair;
            for (x, y) in [(a, b), (b, a)] {
                if e.passed {
                    passed.insert(x);
                } else if self.good.contains(y) {
                    against.entry(x).or_default().insert(y);
                }
            }
        }
        let condemned: Vec<String> = against
            .into_iter()
            .filter(|(x, ys)| {
                ys.len() >= 2
                    && !passed.contains(x)
                    && !self.decided(x)
                    && !self.trials.contains_key(*x)
            })
            .map(|(x, _)| x.clone())
            .collect();
        self.bad.extend(condemned);
    }

    /// Nodes that passed some trials and failed others, with the counts.
    pub fn flaky(&self) -> BTreeMap<&str, Trials> {
        self.flaky
            .iter()
            .map(|n| (n.as_str(), self.trials[n]))
            .collect()
    }

    pub fn verdicts(&self) -> BTreeMap<String, Verdict> {
        let out_of_service = self
            .unavailable
            .keys()
            .map(|n| (n.clone(), Verdict::Unavailable));
        let condemned = self.condemned.keys().map(|n| (n.clone(), Verdict::Bad));
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
            .chain(out_of_service)
            .chain(condemned)
            .collect()
    }

    /// Failed pairs whose two nodes both ended `good`.
    pub fn bad_links(&self) -> Vec<BadLink> {
        let verdicts = self.verdicts();
        let good = |n: &String| verdicts.get(n) == Some(&Verdict::Good);
        self.evidence
            .iter()
            .filter(|e| !e.passed && e.pair.iter().all(good))
            .map(|e| BadLink {
                pair: e.pair.clone(),
                round: e.round,
                job_id: e.job_id.clone(),
                busbw: e.busbw,
                threshold: e.threshold,
                reason: e.reason.clone(),
                cleared_by: e
                    .pair
                    .iter()
                    .map(|n| {
                        let with: Vec<String> = self
                            .evidence
                            .iter()
                            .filter(|x| x.passed && x.pair.contains(n))
                            .map(|x| {
                                format!(
                                    "{} (round {}{})",
                                    x.pair.join("+"),
                                    x.round,
                                    x.busbw
                                        .map(|b| format!(", {b:.2} GB/s"))
                                        .unwrap_or_default()
                                )
                            })
                            .collect();
                        (n.clone(), with)
                    })
                    .collect(),
                path: Vec::new(),
            })
            .collect()
    }

    /// The nodes under test (those out of service are not among them).
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    pub fn jobs(&self) -> usize {
        self.evidence.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the search over `n` nodes against an oracle that says whether a pair passes (busbw 180 GB/s when it
    /// does, 40 when not, against a 150 GB/s threshold).
    fn sweep(n: usize, passes: impl FnMut(&[String; 2]) -> bool) -> Plan {
        sweep_repeated(n, 1, passes)
    }

    fn sweep_repeated(n: usize, repeat: usize, passes: impl FnMut(&[String; 2]) -> bool) -> Plan {
        let nodes: Vec<String> = (1..=n).map(|i| format!("node{i:03}")).collect();
        let plan = crate::bad_nodes::sim::drive(Plan::new(nodes).with_repeat(repeat), 10, passes);
        assert!(plan.rounds < 10, "the search does not end");
        plan
    }

    /// A pair passes when neither node is bad.
    fn search(n: usize, bad: &[usize]) -> (BTreeMap<String, Verdict>, usize) {
        let bad: BTreeSet<String> = bad.iter().map(|i| format!("node{i:03}")).collect();
        let plan = sweep(n, |pair| !pair.iter().any(|p| bad.contains(p)));
        (plan.verdicts(), plan.jobs())
    }

    #[test]
    fn a_slow_link_is_named_and_condemns_neither_node() {
        // node003 and node004 pass with anyone but each other
        let slow = ["node003".to_string(), "node004".to_string()];
        let plan = sweep(8, |pair| {
            !(slow.contains(&pair[0]) && slow.contains(&pair[1]))
        });
        assert!(plan.verdicts().values().all(|v| *v == Verdict::Good));
        let links = plan.bad_links();
        assert_eq!(links.len(), 1, "{links:?}");
        assert_eq!(links[0].pair, slow);
        assert_eq!(links[0].busbw, Some(40.0));
        for n in &slow {
            assert!(!links[0].cleared_by[n].is_empty(), "{links:?}");
        }
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
    fn repeat_tells_a_flaky_node_from_a_bad_one() {
        // node003 fails every other job it is in (its first among them), node006 every job
        let mut jobs_of_3 = 0;
        let mut partners_of_3 = Vec::new();
        let plan = sweep_repeated(8, 3, |pair| {
            let has = |n: &str| pair.iter().any(|p| p == n);
            if has("node006") {
                return false;
            }
            if has("node003") {
                jobs_of_3 += 1;
                partners_of_3.extend(pair.iter().filter(|p| *p != "node003").cloned());
                return jobs_of_3 % 2 == 0;
            }
            true
        });
        let v = plan.verdicts();
        assert_eq!(v["node006"], Verdict::Bad, "{v:?}");
        assert_eq!(v["node003"], Verdict::Suspect, "{v:?}");
        for good in [
            "node001", "node002", "node004", "node005", "node007", "node008",
        ] {
            assert_eq!(v[good], Verdict::Good, "{good}: {v:?}");
        }
        // three tries with cleared partners after failing round 1: passed the 1st and 3rd, failed the 2nd
        let flaky = plan.flaky();
        assert_eq!(flaky.len(), 1, "{flaky:?}");
        assert_eq!(
            flaky["node003"],
            Trials {
                passed: 2,
                failed: 1
            }
        );
        assert_eq!(
            plan.trials["node006"],
            Trials {
                passed: 0,
                failed: 3
            }
        );
        // round 1 and three tries of each node of the two failing pairs, each time with another partner
        assert_eq!(plan.jobs(), 4 + 4 * 3);
        assert!(plan.jobs() <= Plan::bound_repeated(8, 2, 3));
        let tries: BTreeSet<&String> = partners_of_3[1..].iter().collect();
        assert_eq!(tries.len(), 3, "node003 met {partners_of_3:?}");
        assert!(plan.bad_links().is_empty(), "{:?}", plan.bad_links());
    }

    #[test]
    fn repeat_one_is_the_plain_search() {
        let bad: BTreeSet<String> = ["node002".to_string()].into();
        let plain = sweep(16, |p| !p.iter().any(|n| bad.contains(n)));
        let once = sweep_repeated(16, 1, |p| !p.iter().any(|n| bad.contains(n)));
        assert_eq!(plain.verdicts(), once.verdicts());
        assert_eq!(plain.jobs(), once.jobs());
        assert_eq!(plain.jobs(), 8 + 2);
    }

    #[test]
    fn everything_failing_leaves_everyone_suspect() {
        let (v, jobs) = search(8, &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert!(v.values().all(|x| *x == Verdict::Suspect));
        assert_eq!(jobs, 12); // round 1 and two re-pairing rounds
    }
}
