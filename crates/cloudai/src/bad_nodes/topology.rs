//! Where the checked nodes sit in the fabric, when the scheduler knows it (Slurm's `topology.conf` leaf switches,
//! a Kubernetes node label): each bad link gets its path (one leaf switch, or two), and a switch that several slow
//! pairs or bad nodes share is named as the likelier culprit.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::plan::BadLink;

/// Node → its leaf (the lowest switch, block or label value it hangs off), and where that came from.
#[derive(Clone, Debug, Default)]
pub(crate) struct Topology {
    pub leaf: BTreeMap<String, String>,
    /// "Slurm topology (scontrol show topology)", "node label topology.kubernetes.io/zone", …
    pub source: String,
}

/// A leaf that two or more findings (slow pairs crossing it, bad nodes under it) have in common.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub(crate) struct SwitchFinding {
    pub switch: String,
    /// Slow pairs whose path runs through this leaf (`a↔b`).
    pub bad_links: Vec<String>,
    pub bad_nodes: Vec<String>,
    /// Checked nodes under this leaf.
    pub nodes_checked: usize,
}

impl Topology {
    pub fn is_empty(&self) -> bool {
        self.leaf.is_empty()
    }

    /// The leaf switches between two nodes: one when they share it, two when the path crosses the spine, none
    /// when either node's place is unknown.
    pub fn path(&self, pair: &[String; 2]) -> Vec<String> {
        match (self.leaf.get(&pair[0]), self.leaf.get(&pair[1])) {
            (Some(a), Some(b)) if a == b => vec![a.clone()],
            (Some(a), Some(b)) => vec![a.clone(), b.clone()],
            _ => Vec::new(),
        }
    }

    /// Leaves that at least two slow pairs or bad nodes share, most findings first. Linear in the links, bad
    /// nodes and checked nodes.
    pub(crate) fn findings(
        &self,
        links: &[BadLink],
        bad: &[&str],
        checked: &[String],
    ) -> Vec<SwitchFinding> {
        let mut by: BTreeMap<String, (BTreeSet<String>, BTreeSet<String>)> = BTreeMap::new();
        for l in links {
            for sw in self.path(&l.pair) {
                by.entry(sw)
                    .or_default()
                    .0
                    .insert(format!("{}↔{}", l.pair[0], l.pair[1]));
            }
        }
        for n in bad {
            if let Some(sw) = self.leaf.get(*n) {
                by.entry(sw.clone()).or_default().1.insert(n.to_string());
            }
        }
        let mut under: BTreeMap<&str, usize> = BTreeMap::new();
        for n in checked {
            if let Some(sw) = self.leaf.get(n) {
                *under.entry(sw.as_str()).or_default() += 1;
            }
        }
        let mut out: Vec<SwitchFinding> = by
            .into_iter()
            .filter(|(_, (l, b))| l.len() + b.len() >= 2)
            .map(|(sw, (l, b))| SwitchFinding {
                nodes_checked: under.get(sw.as_str()).copied().unwrap_or(0),
                switch: sw,
                bad_links: l.into_iter().collect(),
                bad_nodes: b.into_iter().collect(),
            })
            .collect();
        out.sort_by_key(|f| std::cmp::Reverse(f.bad_links.len() + f.bad_nodes.len()));
        out
    }
}

impl SwitchFinding {
    /// One line for the console and the reports.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.bad_links.is_empty() {
            parts.push(format!(
                "{} slow pair(s) through it ({})",
                self.bad_links.len(),
                self.bad_links.join(", ")
            ));
        }
        if !self.bad_nodes.is_empty() {
            parts.push(format!(
                "{} of its {} checked node(s) bad ({})",
                self.bad_nodes.len(),
                self.nodes_checked,
                self.bad_nodes.join(", ")
            ));
        }
        format!("switch {}: {}", self.switch, parts.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(a: &str, b: &str) -> BadLink {
        BadLink {
            pair: [a.into(), b.into()],
            round: 1,
            job_id: None,
            busbw: Some(40.0),
            threshold: Some(150.0),
            reason: String::new(),
            cleared_by: BTreeMap::new(),
            path: Vec::new(),
        }
    }

    fn topo() -> Topology {
        let leaf = [
            ("n1", "leafA"),
            ("n2", "leafA"),
            ("n3", "leafB"),
            ("n4", "leafB"),
            ("n5", "leafB"),
            ("n6", "leafB"),
            ("n7", "leafC"),
        ]
        .into_iter()
        .map(|(n, s)| (n.to_string(), s.to_string()))
        .collect();
        Topology {
            leaf,
            source: "test".into(),
        }
    }

    #[test]
    fn a_path_is_one_leaf_or_two() {
        let t = topo();
        assert_eq!(t.path(&["n3".into(), "n4".into()]), ["leafB"]);
        assert_eq!(t.path(&["n1".into(), "n3".into()]), ["leafA", "leafB"]);
        assert!(t.path(&["n1".into(), "n9".into()]).is_empty());
    }

    #[test]
    fn slow_pairs_sharing_a_leaf_name_it() {
        let t = topo();
        let checked: Vec<String> = (1..=7).map(|i| format!("n{i}")).collect();
        let f = t.findings(&[link("n3", "n4"), link("n5", "n6")], &[], &checked);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].switch, "leafB");
        assert_eq!(f[0].bad_links, ["n3↔n4", "n5↔n6"]);
        assert_eq!(f[0].nodes_checked, 4);
        assert!(
            f[0].describe().contains("switch leafB: 2 slow pair(s)"),
            "{}",
            f[0].describe()
        );
        // one slow pair alone, or pairs on different leaves, name no switch
        assert!(t.findings(&[link("n3", "n4")], &[], &checked).is_empty());
        assert!(t
            .findings(&[link("n1", "n2")], &["n7"], &checked)
            .is_empty());
    }

    #[test]
    fn bad_nodes_under_one_leaf_name_it() {
        let t = topo();
        let checked: Vec<String> = (1..=7).map(|i| format!("n{i}")).collect();
        let f = t.findings(&[], &["n1", "n2", "n7"], &checked);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].switch, "leafA");
        assert_eq!(f[0].bad_nodes, ["n1", "n2"]);
        assert!(f[0].describe().contains("2 of its 2 checked node(s) bad"));
        // a slow pair across leaves counts for both
        let f = t.findings(&[link("n2", "n3")], &["n1"], &checked);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].switch, "leafA");
    }
}
