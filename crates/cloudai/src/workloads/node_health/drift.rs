//! Drift across the nodes of a run: the nodes whose driver, CUDA, VBIOS, NCCL or DCGM version differs from the one
//! most nodes have, warned about before anything fails.

/// The versions one node reports: (what, value).
pub(crate) type Versions = Vec<(&'static str, String)>;

/// The nodes whose value of a version differs from the one most nodes have (a strict majority; no majority, no
/// verdict), with what they differ in.
pub fn drift(nodes: &[(String, Versions)]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let keys: std::collections::BTreeSet<&str> = nodes
        .iter()
        .flat_map(|(_, v)| v.iter().map(|(k, _)| *k))
        .collect();
    for key in keys {
        let values: Vec<(&str, &str)> = nodes
            .iter()
            .filter_map(|(n, v)| {
                v.iter()
                    .find(|(k, val)| *k == key && !val.is_empty())
                    .map(|(_, val)| (n.as_str(), val.as_str()))
            })
            .collect();
        if values.len() < 2 {
            continue;
        }
        let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
        for (_, v) in &values {
            *counts.entry(v).or_default() += 1;
        }
        let Some((major, n)) = counts
            .iter()
            .max_by_key(|(_, c)| **c)
            .map(|(v, c)| (*v, *c))
        else {
            continue;
        };
        if n * 2 <= values.len() {
            continue;
        }
        for (node, v) in &values {
            if *v != major {
                out.push((
                    node.to_string(),
                    format!(
                        "{key} {v} differs from the {major} of {n} of {} node(s) (drift)",
                        values.len()
                    ),
                ));
            }
        }
    }
    out
}
