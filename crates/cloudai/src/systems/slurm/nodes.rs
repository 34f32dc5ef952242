//! Turning a test run's `nodes` list into host names: explicit names and ranges, or `partition:group:N` picked
//! from the group by node state (idle first, then completing), like CloudAI.

use std::collections::{BTreeMap, HashMap};

use crate::config::system::SlurmConfig;
use crate::util::nodelist;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeState {
    Idle,
    Completing,
    Mixed,
    Allocated,
    Unavailable,
}

/// Parses `sinfo -h -N -o '%N|%t'` output.
pub(crate) fn parse_sinfo(text: &str) -> HashMap<String, NodeState> {
    let mut out = HashMap::new();
    for line in text.lines() {
        let Some((node, state)) = line.trim().split_once('|') else {
            continue;
        };
        let st = if state.ends_with('*') {
            NodeState::Unavailable
        } else {
            match state
                .trim_end_matches(|c: char| "+~#!%$@^-".contains(c))
                .to_ascii_lowercase()
                .as_str()
            {
                "idle" => NodeState::Idle,
                "comp" | "completing" => NodeState::Completing,
                "mix" | "mixed" => NodeState::Mixed,
                "alloc" | "allocated" => NodeState::Allocated,
                _ => NodeState::Unavailable,
            }
        };
        out.insert(node.trim().to_string(), st);
    }
    out
}

/// Nodes that cannot run jobs until someone acts (down, drained or draining, failed), from
/// `sinfo -h -N -o '%N|%t|%E'`: (node, state, Slurm's reason).
pub(crate) fn broken_nodes(text: &str) -> Vec<(String, String, String)> {
    let mut out: Vec<(String, String, String)> = Vec::new();
    for line in text.lines() {
        let mut it = line.trim().splitn(3, '|');
        let (Some(node), Some(state)) = (it.next(), it.next()) else {
            continue;
        };
        let reason = it.next().unwrap_or("").trim();
        let base = state.trim_end_matches(|c: char| "+~#!%$@^-*".contains(c));
        // a node only "not responding" (`idle*`) may come back by itself: not counted here
        let broken = matches!(
            base.to_ascii_lowercase().as_str(),
            "down"
                | "drain"
                | "drng"
                | "draining"
                | "drained"
                | "fail"
                | "failg"
                | "failing"
                | "inval"
        );
        if broken && !out.iter().any(|(n, _, _)| n == node) {
            let reason = if reason == "none" { "" } else { reason };
            out.push((node.to_string(), state.to_string(), reason.to_string()));
        }
    }
    out
}

/// Each node's leaf from `scontrol show topology`: the lowest-level switch (`SwitchName=s1 Level=0 … Nodes=…`,
/// topology/tree) or the block (`BlockName=b1 … Nodes=…`, topology/block) that lists it. Empty without a topology
/// plugin (Slurm then prints nothing, or a line without switches).
pub(crate) fn leaf_switches(text: &str) -> BTreeMap<String, String> {
    let mut best: BTreeMap<String, (u32, String)> = BTreeMap::new();
    for line in text.lines() {
        let (mut name, mut level, mut nodes) = (None, 0u32, None);
        for tok in line.split_whitespace() {
            let Some((k, v)) = tok.split_once('=') else {
                continue;
            };
            match k.to_ascii_lowercase().as_str() {
                "switchname" | "blockname" => name = Some(v),
                "level" => level = v.parse().unwrap_or(0),
                "nodes" => nodes = Some(v),
                _ => {}
            }
        }
        let (Some(name), Some(list)) = (name, nodes.and_then(nodelist::expand)) else {
            continue;
        };
        for n in list {
            if !matches!(best.get(&n), Some((l, _)) if *l <= level) {
                best.insert(n, (level, name.to_string()));
            }
        }
    }
    best.into_iter().map(|(n, (_, s))| (n, s)).collect()
}

/// Resolves node specs to host names, without duplicates. `states` is `None` in dry-run: then a group request takes
/// the group's first nodes.
pub fn resolve(
    cfg: &SlurmConfig,
    specs: &[String],
    exclude: &[String],
    states: Option<&HashMap<String, NodeState>>,
) -> Result<Vec<String>, String> {
    // sets: explicit lists of 100k names must stay linear
    let mut excluded = std::collections::HashSet::new();
    for e in exclude {
        excluded.extend(
            nodelist::expand(e).ok_or_else(|| format!("cannot parse exclude_nodes entry '{e}'"))?,
        );
    }
    let mut out: Vec<String> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for spec in specs {
        let picked = if spec.contains(':') {
            from_group(cfg, spec, &excluded, states)?
        } else {
            nodelist::parse(spec)?
        };
        for n in picked {
            if !excluded.contains(&n) && seen.insert(n.clone()) {
                out.push(n);
            }
        }
    }
    Ok(out)
}

fn from_group(
    cfg: &SlurmConfig,
    spec: &str,
    excluded: &std::collections::HashSet<String>,
    states: Option<&HashMap<String, NodeState>>,
) -> Result<Vec<String>, String> {
    let parts: Vec<&str> = spec.split(':').collect();
    let [partition, group, count] = parts.as_slice() else {
        return Err(format!(
            "node spec '{spec}' should be partition:group:count"
        ));
    };
    let p = cfg
        .partitions
        .iter()
        .find(|p| p.name == *partition)
        .ok_or_else(|| {
            format!("partition '{partition}' of node spec '{spec}' is not in the system config")
        })?;
    let g = p.groups.iter().find(|g| g.name == *group).ok_or_else(|| {
        format!("group '{group}' of node spec '{spec}' is not in partition '{partition}'")
    })?;
    let mut members = Vec::new();
    for n in &g.nodes {
        members.extend(
            nodelist::expand(n)
                .ok_or_else(|| format!("cannot parse node list '{n}' of group '{group}'"))?,
        );
    }
    members.retain(|n| !excluded.contains(n));
    let candidates: Vec<String> = match states {
        None => members,
        Some(st) => [NodeState::Idle, NodeState::Completing]
            .iter()
            .flat_map(|want| {
                members
                    .iter()
                    .filter(|n| st.get(*n) == Some(want))
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .collect(),
    };
    if *count == "max_avail" {
        if candidates.is_empty() {
            return Err(format!(
                "no node of group '{group}' in partition '{partition}' is available"
            ));
        }
        return Ok(candidates);
    }
    let n: usize = count
        .parse()
        .map_err(|_| format!("node count '{count}' in '{spec}' is not a number or max_avail"))?;
    if candidates.len() < n {
        return Err(format!(
            "{n} nodes requested from group '{group}' in partition '{partition}', but only {} are available",
            candidates.len()
        ));
    }
    Ok(candidates.into_iter().take(n).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::system::{Group, Partition};

    #[test]
    fn leaf_switches_come_from_the_lowest_level_that_lists_a_node() {
        // topology/tree as `scontrol show topology` prints it: leaves at level 0, the spine lists every node again
        let tree = "SwitchName=s1 Level=0 LinkSpeed=1 Nodes=node[001-002]\n\
                    SwitchName=s2 Level=0 LinkSpeed=1 Nodes=node[003-004],gpu7\n\
                    SwitchName=s0 Level=1 LinkSpeed=1 Nodes=node[001-004],gpu7 Switches=s[1-2]\n";
        let l = leaf_switches(tree);
        assert_eq!(l["node001"], "s1");
        assert_eq!(l["node004"], "s2");
        assert_eq!(l["gpu7"], "s2");
        assert_eq!(l.len(), 5);
        // the spine printed first changes nothing
        let reordered: String = tree.lines().rev().map(|x| format!("{x}\n")).collect();
        assert_eq!(leaf_switches(&reordered), l);
        // topology/block
        let block = "BlockName=b1 BlockIndex=0 Nodes=node[01-04] BlockSize=4\nBlockName=b2 BlockIndex=1 Nodes=node[05-08] BlockSize=4\n";
        assert_eq!(leaf_switches(block)["node06"], "b2");
        // no topology plugin
        assert!(leaf_switches("").is_empty());
        assert!(leaf_switches("No topology information available\n").is_empty());
    }

    fn cfg() -> SlurmConfig {
        SlurmConfig {
            default_partition: "p".into(),
            partitions: vec![Partition {
                name: "p".into(),
                groups: vec![Group {
                    name: "g".into(),
                    nodes: vec!["node[001-004]".into()],
                }],
            }],
            account: None,
            distribution: None,
            mpi: "pmix".into(),
            gpus_per_node: None,
            ntasks_per_node: None,
            cache_docker_images_locally: false,
            extra_srun_args: None,
            extra_sbatch_args: vec![],
            extra_transient_status_errors: vec![],
            status_retry_pause_seconds: 10,
            container_mount_home: false,
            data_repository: None,
            reports: None,
            supports_gpu_directives_cache: None,
            preflight: None,
        }
    }

    #[test]
    fn broken_nodes_are_down_drained_failed_or_not_responding() {
        let b = broken_nodes(
            "node001|idle|none\nnode002|drain|bad gpu\nnode003|down*|Not responding\nnode004|alloc|none\nnode005|resv|none\nnode006|drng|x\nnode007|idle*|none\n",
        );
        let names: Vec<&str> = b.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(names, ["node002", "node003", "node006"]);
        assert_eq!(b[0].2, "bad gpu");
    }

    #[test]
    fn explicit_lists_and_groups() {
        let c = cfg();
        let specs = vec!["node[001-002]".to_string(), "node002".into(), "x7".into()];
        assert_eq!(
            resolve(&c, &specs, &[], None).unwrap(),
            vec!["node001", "node002", "x7"]
        );
        let ex = vec!["node001".to_string()];
        assert_eq!(
            resolve(&c, &["p:g:2".into()], &ex, None).unwrap(),
            vec!["node002", "node003"]
        );
        let st = parse_sinfo("node001|alloc\nnode002|idle\nnode003|down*\nnode004|comp\n");
        assert_eq!(
            resolve(&c, &["p:g:2".into()], &[], Some(&st)).unwrap(),
            vec!["node002", "node004"]
        );
        assert!(resolve(&c, &["p:g:3".into()], &[], Some(&st))
            .unwrap_err()
            .contains("only 2 are available"));
        assert_eq!(
            resolve(&c, &["p:g:max_avail".into()], &[], Some(&st)).unwrap(),
            vec!["node002", "node004"]
        );
        assert!(resolve(&c, &["p:h:1".into()], &[], None)
            .unwrap_err()
            .contains("group 'h'"));
    }
}
