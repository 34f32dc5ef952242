//! `baseline.toml`: written by `cloudai baseline create`, read with the config loader (so a hand-edited file gets
//! the usual file:line:col errors).
//!
//! ```toml
//! created_at = "2026-12-03T05:00:00+00:00"
//! sources = ["results/known-good_2026-11-01_09-00-00"]
//! [[entry]]
//! template = "NcclTest"
//! collective = "all_reduce_perf"
//! dtype = "float"
//! metric = "busbw"       # busbw, bandwidth or latency (workloads::Metric)
//! unit = "GB/s"          # the metric's; written for the reader, checked when read
//! nodes = 2
//! gpus_per_node = 8
//! size = 1048576
//! value = 45.1
//! in_place = 44.9        # absent when the test has no in-place side
//! time_us = 40.2         # absent when the output gives no time
//! time_ip_us = 40.6
//! iterations = 3
//! from = ["results/known-good_2026-11-01_09-00-00/ar"]
//! ```
//!
//! A file written before points named their metric (`busbw_oop`, `busbw_ip`, `time_oop_us`, `time_ip_us`) is
//! read as bus bandwidth.

use std::fmt::Write as _;
use std::path::Path;

use super::{Baseline, Entry, Key};
use crate::config::decode::{as_float, Ctx, View};
use crate::config::node::{self, Kind};
use crate::config::ConfigErrors;
use crate::workloads::Metric;

fn q(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

fn list(items: &[String]) -> String {
    let v: Vec<String> = items.iter().map(|s| q(s)).collect();
    format!("[{}]", v.join(", "))
}

/// Writes the baseline atomically.
pub fn write(path: &Path, b: &Baseline) -> std::io::Result<()> {
    let mut o = String::from(
        "# cloudai baseline: medians of known-good runs per (template, collective, dtype, metric, nodes x GPUs, size)\n",
    );
    let _ = writeln!(o, "created_at = {}", q(&b.created_at));
    let _ = writeln!(o, "sources = {}", list(&b.sources));
    for e in &b.entries {
        let k = &e.key;
        let _ = write!(
            o,
            "\n[[entry]]\ntemplate = {}\ncollective = {}\ndtype = {}\nmetric = {}\nunit = {}\nnodes = {}\ngpus_per_node = {}\nsize = {}\nvalue = {:?}\n",
            q(&k.template),
            q(&k.collective),
            q(&k.dtype),
            q(k.metric.name),
            q(k.metric.unit),
            k.nodes,
            k.gpus_per_node,
            k.size,
            e.value
        );
        if let Some(v) = e.in_place {
            let _ = writeln!(o, "in_place = {v:?}");
        }
        if let Some(v) = e.time_us {
            let _ = writeln!(o, "time_us = {v:?}");
        }
        if let Some(v) = e.time_ip_us {
            let _ = writeln!(o, "time_ip_us = {v:?}");
        }
        let _ = writeln!(o, "iterations = {}\nfrom = {}", e.iterations, list(&e.from));
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    crate::util::fsx::write_atomic(path, o.as_bytes())
}

const ENTRY_FIELDS: &[&str] = &[
    "template",
    "collective",
    "dtype",
    "metric",
    "unit",
    "nodes",
    "gpus_per_node",
    "size",
    "value",
    "in_place",
    "time_us",
    "time_ip_us",
    "iterations",
    "from",
];

/// The fields of a file written before points named their metric (bus bandwidth).
const OLD_ENTRY_FIELDS: &[&str] = &[
    "template",
    "collective",
    "dtype",
    "nodes",
    "gpus_per_node",
    "size",
    "busbw_oop",
    "busbw_ip",
    "time_oop_us",
    "time_ip_us",
    "iterations",
    "from",
];

/// The entry's metric: named by `metric` (and `unit`, when given, the metric's), or bus bandwidth in a file
/// written before (`busbw_oop`).
fn metric(ctx: &mut Ctx, e: &View) -> Option<Metric> {
    if e.has("busbw_oop") && !e.has("metric") {
        return Some(Metric::BUSBW);
    }
    let name = e.req_str(ctx, "metric")?;
    let Some(m) = Metric::named(&name) else {
        let loc = e.get("metric").map_or(e.loc.clone(), |n| n.loc.clone());
        ctx.err(
            &loc,
            &e.field("metric"),
            format!(
                "unknown metric {name:?}: expected one of {}",
                Metric::names()
            ),
            Some("recreate the file with `cloudai baseline create`".into()),
        );
        return None;
    };
    if let Some(unit) = e.opt_str(ctx, "unit").filter(|u| u != m.unit) {
        let loc = e.get("unit").map_or(e.loc.clone(), |n| n.loc.clone());
        ctx.err(
            &loc,
            &e.field("unit"),
            format!("{name} is measured in {}, not {unit:?}", m.unit),
            Some(format!("write unit = \"{}\" (values in that unit)", m.unit)),
        );
        return None;
    }
    Some(m)
}

fn float(ctx: &mut Ctx, v: &View, key: &str) -> Option<f64> {
    v.get(key).and_then(|n| as_float(ctx, n, &v.field(key)))
}

fn req_float(ctx: &mut Ctx, v: &View, key: &str) -> Option<f64> {
    v.required(ctx, key)?;
    float(ctx, v, key)
}

fn req_count(ctx: &mut Ctx, v: &View, key: &str) -> Option<u64> {
    v.required(ctx, key)?;
    Some(v.count(ctx, key, 0))
}

/// Reads a baseline file; every problem is reported with its place.
pub fn load(path: &Path) -> Result<Baseline, ConfigErrors> {
    let root = node::load(path, "baseline")?;
    let mut ctx = Ctx::new();
    let Some(v) = ctx.table(&root, "") else {
        return Err(ctx.errors);
    };
    let created_at = v.opt_str(&mut ctx, "created_at").unwrap_or_default();
    let sources = v.str_list(&mut ctx, "sources");
    let mut entries = Vec::new();
    if let Some(n) = v.required(&mut ctx, "entry") {
        match &n.kind {
            Kind::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let path = format!("entry.{i}");
                    let Some(e) = ctx.table(item, &path) else {
                        continue;
                    };
                    let old = e.has("busbw_oop") && !e.has("metric");
                    let key = (|| {
                        Some(Key {
                            template: e.req_str(&mut ctx, "template")?,
                            collective: e.req_str(&mut ctx, "collective")?,
                            dtype: e.req_str(&mut ctx, "dtype")?,
                            metric: metric(&mut ctx, &e)?,
                            nodes: req_count(&mut ctx, &e, "nodes")?,
                            gpus_per_node: req_count(&mut ctx, &e, "gpus_per_node")?,
                            size: req_count(&mut ctx, &e, "size")?,
                        })
                    })();
                    let [value, in_place, time, time_ip] = if old {
                        ["busbw_oop", "busbw_ip", "time_oop_us", "time_ip_us"]
                    } else {
                        ["value", "in_place", "time_us", "time_ip_us"]
                    };
                    let value = req_float(&mut ctx, &e, value);
                    let entry = Entry {
                        key: key.unwrap_or_else(|| Key {
                            template: String::new(),
                            collective: String::new(),
                            dtype: String::new(),
                            metric: Metric::BUSBW,
                            nodes: 0,
                            gpus_per_node: 0,
                            size: 0,
                        }),
                        value: value.unwrap_or(0.0),
                        in_place: float(&mut ctx, &e, in_place),
                        time_us: float(&mut ctx, &e, time),
                        time_ip_us: float(&mut ctx, &e, time_ip),
                        iterations: e.count(&mut ctx, "iterations", 0) as usize,
                        from: e.str_list(&mut ctx, "from"),
                    };
                    e.done(&mut ctx, if old { OLD_ENTRY_FIELDS } else { ENTRY_FIELDS });
                    entries.push(entry);
                }
            }
            _ => ctx.type_err(n, "entry", "an array of tables ([[entry]])"),
        }
    }
    v.done(&mut ctx, &["created_at", "sources", "entry"]);
    if ctx.errors.has_errors() {
        return Err(ctx.errors);
    }
    let mut b = Baseline::new(created_at, sources, entries);
    b.file = path.to_path_buf();
    Ok(b)
}
