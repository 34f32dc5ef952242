//! The grammar of single pod fields: Kubernetes quantities, label and annotation keys, extended-resource names,
//! tolerations, the capabilities Run:ai's API takes, and TOML tables passed through as JSON.

use indexmap::IndexMap;
use serde_json::Value;

use super::Toleration;
use crate::config::decode::{Ctx, View};
use crate::config::node::{Kind, Node};

/// Capabilities Run:ai's API takes (`security.capabilities` enum); Kubernetes takes any name.
pub const RUNAI_CAPABILITIES: &[&str] = &[
    "AUDIT_CONTROL",
    "AUDIT_READ",
    "AUDIT_WRITE",
    "BLOCK_SUSPEND",
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "IPC_LOCK",
    "IPC_OWNER",
    "KILL",
    "LEASE",
    "LINUX_IMMUTABLE",
    "MAC_ADMIN",
    "MAC_OVERRIDE",
    "MKNOD",
    "NET_ADMIN",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_RAW",
    "SETGID",
    "SETFCAP",
    "SETPCAP",
    "SETUID",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_CHROOT",
    "SYS_MODULE",
    "SYS_NICE",
    "SYS_PACCT",
    "SYS_PTRACE",
    "SYS_RAWIO",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "SYSLOG",
    "WAKE_ALARM",
];

/// Annotations or labels of pods: keys `[prefix/]name` (name: at most 63 of `[A-Za-z0-9._-]`, alphanumeric at
/// both ends; prefix a DNS subdomain); label values as label values are.
pub(super) fn meta_map(
    ctx: &mut Ctx,
    v: &View,
    key: &str,
    labels: bool,
) -> IndexMap<String, String> {
    let out = v.str_map(ctx, key);
    let Some(n) = v.get(key) else { return out };
    let name_ok = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
            && s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    for (k, val) in &out {
        let (prefix, name) = k
            .rsplit_once('/')
            .map_or((None, k.as_str()), |(p, n)| (Some(p), n));
        let prefix_ok = prefix.is_none_or(|p| {
            !p.is_empty()
                && p.len() <= 253
                && p.split('.').all(|l| {
                    !l.is_empty()
                        && l.chars()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                })
        });
        if !name_ok(name) || !prefix_ok {
            ctx.err(
                &n.loc,
                &format!("{key}.{k}"),
                format!(
                    "{k:?} is not a Kubernetes {} key",
                    if labels { "label" } else { "annotation" }
                ),
                Some("keys look like \"team\" or \"example.com/team\"".into()),
            );
        } else if labels && !val.is_empty() && !name_ok(val) {
            ctx.err(
                &n.loc,
                &format!("{key}.{k}"),
                format!("{val:?} is not a label value"),
                Some("at most 63 letters, digits, '.', '_' or '-', starting and ending with a letter or digit".into()),
            );
        }
    }
    out
}

/// `12`, `1.5`, `16Gi`, `512M`, `100m`: a Kubernetes resource quantity.
pub fn is_quantity(s: &str) -> bool {
    let num_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(num_end);
    !num.is_empty()
        && num.parse::<f64>().is_ok()
        && matches!(
            suffix,
            "" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" | "k" | "M" | "G" | "T" | "P" | "E" | "m"
        )
}

pub(super) fn resources(ctx: &mut Ctx, v: &View) -> IndexMap<String, String> {
    let mut out = IndexMap::new();
    let Some(n) = v.get("extended_resources") else {
        return out;
    };
    let Some(t) = ctx.table(n, "extended_resources") else {
        return out;
    };
    for (k, e) in &t.table.entries {
        let q = match &e.node.kind {
            Kind::Int(i) if *i > 0 => i.to_string(),
            Kind::Str(s) if is_quantity(s) => s.clone(),
            _ => {
                ctx.type_err(
                    &e.node,
                    &t.field(k),
                    "a positive count or quantity (1, \"32\", \"5120Mi\")",
                );
                continue;
            }
        };
        if !k.contains('/') && !k.starts_with("hugepages-") {
            ctx.err(
                &e.key_loc,
                &t.field(k),
                format!("{k:?} is not an extended resource name"),
                Some(
                    "names look like \"rdma/rdma_shared_device_a\" or \"vpc.amazonaws.com/efa\""
                        .into(),
                ),
            );
            continue;
        }
        out.insert(k.clone(), q);
    }
    out
}

pub(super) fn tolerations(ctx: &mut Ctx, n: &Node) -> Vec<Toleration> {
    let Kind::Array(items) = &n.kind else {
        ctx.type_err(
            n,
            "tolerations",
            "an array of tables ({key, operator, value, effect})",
        );
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, it) in items.iter().enumerate() {
        let path = format!("tolerations.{i}");
        let Some(tv) = ctx.table(it, &path) else {
            continue;
        };
        let operator = tv
            .opt_str(ctx, "operator")
            .unwrap_or_else(|| "Equal".into());
        let effect = tv.opt_str(ctx, "effect");
        let key = tv.opt_str(ctx, "key");
        let value = tv.opt_str(ctx, "value");
        let seconds = tv
            .get("toleration_seconds")
            .map(|_| tv.count(ctx, "toleration_seconds", 0));
        tv.done(
            ctx,
            &["key", "operator", "value", "effect", "toleration_seconds"],
        );
        let at = |k: &str| tv.get(k).map_or(tv.loc.clone(), |n| n.loc.clone());
        if !matches!(operator.as_str(), "Equal" | "Exists") {
            ctx.err(
                &at("operator"),
                &tv.field("operator"),
                format!("{operator:?} is not a toleration operator"),
                Some("one of: Equal, Exists".into()),
            );
        }
        if let Some(e) = &effect {
            if !matches!(e.as_str(), "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
                ctx.err(
                    &at("effect"),
                    &tv.field("effect"),
                    format!("{e:?} is not a taint effect"),
                    Some("one of: NoSchedule, PreferNoSchedule, NoExecute".into()),
                );
            }
        }
        if operator == "Exists" && value.is_some() {
            ctx.err(
                &at("value"),
                &tv.field("value"),
                "a toleration with operator Exists takes no value",
                None,
            );
        }
        if key.is_none() && operator == "Equal" {
            ctx.err(
                &tv.loc,
                &tv.field("key"),
                "a toleration with operator Equal needs a key",
                None,
            );
        }
        out.push(Toleration {
            key,
            operator,
            value,
            effect,
            seconds,
        });
    }
    out
}

/// A TOML value as JSON (for pass-through fragments).
pub fn to_json(n: &Node) -> Value {
    match &n.kind {
        Kind::Str(s) | Kind::Datetime(s) => Value::String(s.clone()),
        Kind::Int(i) => Value::from(*i),
        Kind::Float(f) => Value::from(*f),
        Kind::Bool(b) => Value::Bool(*b),
        Kind::Array(a) => Value::Array(a.iter().map(to_json).collect()),
        Kind::Table(t) => Value::Object(
            t.entries
                .iter()
                .map(|(k, e)| (k.clone(), to_json(&e.node)))
                .collect(),
        ),
    }
}
