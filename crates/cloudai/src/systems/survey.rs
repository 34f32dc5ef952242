//! Before a scenario is planned: what the cluster offers, read once (Kubernetes: one list of nodes and one read
//! of the namespace; Run:ai: one list of nodes) and folded into the system config — `gpus_per_node` when the file
//! leaves it out, the RDMA device NCCL workers need — or refused with the field to change. A dry-run reaches no
//! cluster: it says what it could not check.

use crate::config::error::{ConfigError, ConfigErrors, Loc};
use crate::config::system::{SystemConfig, SystemKind};
use crate::info;

/// Surveys the cluster of `cfg` (a run) or says what a dry-run leaves unchecked; the config is completed in
/// place. Refusals come back as config errors at the system file's field.
pub fn survey(cfg: &mut SystemConfig, dry_run: bool) -> Result<(), ConfigErrors> {
    if dry_run {
        unsurveyed(cfg);
        return Ok(());
    }
    let env: Vec<(String, String)> = cfg
        .global_env_vars
        .iter()
        .map(|(k, v)| (k.clone(), v.py_str()))
        .collect();
    let file = cfg.file.clone();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(_) => return Ok(()),
    };
    let findings = match &mut cfg.kind {
        SystemKind::Kubernetes(k) => {
            let reads = rt.block_on(super::kubernetes::nodes::survey_reads(k));
            match reads {
                // the connection is tried again, and its trouble told, before anything is created
                Err(e) => {
                    crate::debug!("cluster survey skipped: {e}");
                    return Ok(());
                }
                Ok((nodes, ns)) => {
                    super::kubernetes::survey::survey(k, &env, nodes.as_deref(), ns.as_ref())
                }
            }
        }
        SystemKind::RunAi(_) => {
            let given = matches!(&cfg.kind, SystemKind::RunAi(r) if r.gpus_per_node_given);
            if given {
                return Ok(());
            }
            let nodes = rt.block_on(super::runai::nodes::list(cfg));
            let SystemKind::RunAi(r) = &mut cfg.kind else {
                return Ok(());
            };
            let mut f = super::kubernetes::survey::Findings::default();
            let counts = nodes.as_deref().map(|ns| {
                super::container::most_common(
                    ns.iter()
                        .map(|n| n["gpuInfo"]["gpuCount"].as_u64().unwrap_or(0)),
                )
                .map(|c| (c.value, c.nodes, c.of))
            });
            match counts {
                Ok(Some((g, on, of))) => {
                    r.gpus_per_node = g;
                    f.notes.push(format!(
                        "gpus_per_node taken from the cluster's nodes: {g} (gpuCount of {on} of {of} GPU node(s))"
                    ));
                }
                Ok(None) => f.notes.push(format!(
                    "the cluster lists no GPU node: gpus_per_node = {} assumed (set it in the system)",
                    r.gpus_per_node
                )),
                Err(e) => f.notes.push(format!(
                    "gpus_per_node is not set and the nodes could not be read ({e}): {} assumed (set it in the \
                     system)",
                    r.gpus_per_node
                )),
            }
            f
        }
        _ => return Ok(()),
    };
    for n in &findings.notes {
        info!("System {}: {n}", cfg.name);
    }
    if findings.refused.is_empty() {
        return Ok(());
    }
    let root = crate::config::node::load(&file, "system config").ok();
    Err(ConfigErrors(
        findings
            .refused
            .into_iter()
            .map(|r| {
                let loc = root
                    .as_ref()
                    .and_then(|n| field_loc(n, &r.field))
                    .unwrap_or(Loc {
                        file: file.as_path().into(),
                        line: 1,
                        col: 1,
                    });
                ConfigError::new(loc, r.field, r.message).with_hint(r.hint)
            })
            .collect(),
    ))
}

/// Where a dotted field is written in the file (its key), or None.
fn field_loc(root: &crate::config::node::Node, field: &str) -> Option<Loc> {
    use crate::config::node::Kind;
    let mut node = root;
    let mut at = None;
    for part in field.split('.') {
        let Kind::Table(t) = &node.kind else {
            break;
        };
        let Some(e) = t.entries.get(part) else {
            break;
        };
        at = Some(e.key_loc.clone());
        node = &e.node;
    }
    at
}

/// What a dry-run could not check of a cluster it does not reach.
fn unsurveyed(cfg: &SystemConfig) {
    let gpus = match &cfg.kind {
        SystemKind::Kubernetes(k) => (!k.gpus_per_node_given).then_some(k.gpus_per_node),
        SystemKind::RunAi(r) => (!r.gpus_per_node_given).then_some(r.gpus_per_node),
        _ => return,
    };
    let mut what = vec![];
    if let Some(g) = gpus {
        what.push(format!(
            "gpus_per_node is not set: {g} assumed here (a run takes it from the nodes)"
        ));
    }
    if matches!(cfg.kind, SystemKind::Kubernetes(_)) {
        what.push(
            "no RDMA device was looked for, nor the node selector, the extended resources and the namespace's \
             PodSecurity level checked against the cluster"
                .into(),
        );
    }
    if !what.is_empty() {
        info!(
            "Dry-run: the cluster of system {} was not read: {}.",
            cfg.name,
            what.join("; ")
        );
    }
}
