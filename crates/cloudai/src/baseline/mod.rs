//! Baselines: what known-good runs measured, per (test template, collective, data type, metric, nodes × GPUs
//! shape, message size), and the check of a new run against them, in the direction of its metric (less bandwidth,
//! more latency). `cloudai baseline create` writes one from results trees; `run`
//! and `generate-report` grade against it with `--baseline`.

mod file;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::workloads::{Metric, Point};

pub use file::{load, write};

/// What a baseline value is known by.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Key {
    pub template: String,
    pub collective: String,
    pub dtype: String,
    /// What the values measure (`busbw`, `bandwidth`, `latency`).
    pub metric: Metric,
    pub nodes: u64,
    pub gpus_per_node: u64,
    pub size: u64,
}

impl Key {
    fn of(template: &str, p: &Point) -> Self {
        Key {
            template: template.to_string(),
            collective: p.collective.clone(),
            dtype: p.dtype.clone(),
            metric: p.metric,
            nodes: p.nodes,
            gpus_per_node: p.gpus_per_node,
            size: p.size,
        }
    }

    /// `all_reduce_perf float 2x8` (the shape without the size).
    pub fn shape(&self) -> String {
        format!(
            "{} {} {}x{}",
            self.collective, self.dtype, self.nodes, self.gpus_per_node
        )
    }
}

/// Medians of the known-good measurements of one key.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Entry {
    #[serde(flatten)]
    pub key: Key,
    /// The metric's value (out of place) and, where measured, in place.
    pub value: f64,
    pub in_place: Option<f64>,
    /// Time of one operation, microseconds, where the outputs gave it.
    pub time_us: Option<f64>,
    pub time_ip_us: Option<f64>,
    /// How many iterations measured it, and where they are (test directories: `<results tree>/<test id>`).
    pub iterations: usize,
    pub from: Vec<String>,
}

#[derive(Clone, Debug, Default)]
pub struct Baseline {
    pub file: PathBuf,
    pub created_at: String,
    pub sources: Vec<String>,
    pub entries: Vec<Entry>,
    /// template → collective → dtype → (metric, nodes, GPUs per node, size) → entry: looked up with borrowed
    /// strings, so checking a thousand iterations allocates nothing per point.
    index: Index,
}

type At = (&'static str, u64, u64, u64);
type Index = HashMap<String, HashMap<String, HashMap<String, HashMap<At, usize>>>>;

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

impl Baseline {
    pub fn new(created_at: String, sources: Vec<String>, entries: Vec<Entry>) -> Self {
        let mut index: Index = HashMap::new();
        for (i, e) in entries.iter().enumerate() {
            let k = &e.key;
            index
                .entry(k.template.clone())
                .or_default()
                .entry(k.collective.clone())
                .or_default()
                .entry(k.dtype.clone())
                .or_default()
                .insert((k.metric.name, k.nodes, k.gpus_per_node, k.size), i);
        }
        Baseline {
            file: PathBuf::new(),
            created_at,
            sources,
            entries,
            index,
        }
    }

    /// From passed iterations: (template, iteration directory, its points).
    pub(crate) fn from_iterations<'a>(
        sources: Vec<String>,
        iterations: impl IntoIterator<Item = (&'a str, String, &'a [Point])>,
    ) -> Self {
        #[derive(Default)]
        struct Acc {
            value: Vec<f64>,
            ip: Vec<f64>,
            t: Vec<f64>,
            t_ip: Vec<f64>,
            iterations: std::collections::BTreeSet<String>,
        }
        let mut acc: BTreeMap<Key, Acc> = BTreeMap::new();
        for (template, dir, points) in iterations {
            for p in points {
                let a = acc.entry(Key::of(template, p)).or_default();
                a.value.push(p.value);
                a.ip.extend(p.in_place);
                a.t.extend(p.time_us);
                a.t_ip.extend(p.time_ip_us);
                a.iterations.insert(dir.clone());
            }
        }
        let entries = acc
            .into_iter()
            .filter_map(|(key, a)| {
                Some(Entry {
                    key,
                    value: median(a.value)?,
                    in_place: median(a.ip),
                    time_us: median(a.t),
                    time_ip_us: median(a.t_ip),
                    iterations: a.iterations.len(),
                    from: {
                        let mut tests: Vec<String> = a
                            .iterations
                            .iter()
                            .map(|d| {
                                Path::new(d)
                                    .parent()
                                    .map_or(d.clone(), |p| p.display().to_string())
                            })
                            .collect();
                        tests.dedup();
                        tests
                    },
                })
            })
            .collect();
        Self::new(chrono::Local::now().to_rfc3339(), sources, entries)
    }

    fn find(&self, template: &str, collective: &str, dtype: &str, at: At) -> Option<&Entry> {
        let i = self
            .index
            .get(template)?
            .get(collective)?
            .get(dtype)?
            .get(&at)?;
        Some(&self.entries[*i])
    }

    /// Checks an iteration's points. Sizes below `min_size` are shown but cannot fail it.
    pub fn check(&self, template: &str, points: &[Point], tolerance: f64, min_size: u64) -> Check {
        let mut rows = Vec::new();
        let mut missing: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        // points of one run share their shape: format it once per change
        let mut shape = (String::new(), ("", "", 0u64, 0u64));
        for p in points {
            let id = (
                p.collective.as_str(),
                p.dtype.as_str(),
                p.nodes,
                p.gpus_per_node,
            );
            if shape.1 != id || shape.0.is_empty() {
                shape = (Key::of(template, p).shape(), id);
            }
            let Some(b) = self.find(
                template,
                &p.collective,
                &p.dtype,
                (p.metric.name, p.nodes, p.gpus_per_node, p.size),
            ) else {
                missing.entry(shape.0.clone()).or_default().push(p.size);
                continue;
            };
            for (side, cur) in p.sides() {
                let base = if side == "in-place" {
                    b.in_place
                } else {
                    Some(b.value)
                };
                let Some((base, drop)) = base.and_then(|v| Some((v, p.metric.loss(v, cur)?)))
                else {
                    continue;
                };
                let status = if p.size < min_size {
                    "below min size"
                } else if drop > tolerance {
                    "drop"
                } else {
                    "ok"
                };
                rows.push(CheckRow {
                    shape: shape.0.clone(),
                    size: p.size,
                    side,
                    metric: p.metric,
                    value: cur,
                    baseline: base,
                    drop_pct: (drop * 1000.0).round() / 10.0,
                    status,
                });
            }
        }
        let not_in_baseline: Vec<String> = missing
            .into_iter()
            .map(|(shape, sizes)| {
                let (lo, hi) = (
                    sizes.iter().min().copied().unwrap_or(0),
                    sizes.iter().max().copied().unwrap_or(0),
                );
                format!(
                    "{shape} at {} size(s) ({}..{})",
                    sizes.len(),
                    crate::html::size_iec(lo),
                    crate::html::size_iec(hi)
                )
            })
            .collect();
        let drops: Vec<&CheckRow> = rows.iter().filter(|r| r.status == "drop").collect();
        let failed = !drops.is_empty();
        let message = if failed {
            let shown: Vec<String> = drops
                .iter()
                .take(6)
                .map(|r| {
                    format!(
                        "{} {}: {:.2} {} vs baseline {:.2} ({}{}%)",
                        crate::html::size_iec(r.size),
                        r.side,
                        r.value,
                        r.metric.unit,
                        r.baseline,
                        if r.metric.higher_is_better { "-" } else { "+" },
                        r.drop_pct
                    )
                })
                .collect();
            let m = drops[0].metric;
            format!(
                "{} more than {}% {} the baseline at {} size(s) >= {}: {}{} (baseline {})",
                m.name,
                tolerance * 100.0,
                if m.higher_is_better { "below" } else { "above" },
                drops.len(),
                crate::html::size_iec(min_size),
                shown.join("; "),
                if drops.len() > shown.len() {
                    "; …"
                } else {
                    ""
                },
                self.file.display()
            )
        } else {
            String::new()
        };
        Check {
            compared: rows.len(),
            rows,
            not_in_baseline,
            failed,
            message,
        }
    }
}

/// One iteration against the baseline.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Check {
    /// Values compared (sizes × sides).
    pub compared: usize,
    pub failed: bool,
    pub message: String,
    /// Shapes and sizes measured here that the baseline has no value for (never passed silently).
    pub not_in_baseline: Vec<String>,
    /// Every value compared; summary.json keeps only the drops (the per-size table per test is in the summary's
    /// `baseline.sizes`), so a thousand iterations do not bloat it.
    #[serde(serialize_with = "only_drops")]
    pub rows: Vec<CheckRow>,
}

fn only_drops<S: serde::Serializer>(rows: &[CheckRow], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(rows.iter().filter(|r| r.status == "drop"))
}

#[derive(Clone, Debug, Serialize)]
pub struct CheckRow {
    pub shape: String,
    pub size: u64,
    pub side: &'static str,
    pub metric: Metric,
    pub value: f64,
    pub baseline: f64,
    /// Positive: worse than the baseline (below it for a bandwidth, above it for a latency).
    pub drop_pct: f64,
    /// `ok`, `drop` or `below min size`.
    pub status: &'static str,
}

/// The baseline a command was given, with how it grades.
#[derive(Clone, Debug)]
pub struct Grading {
    pub baseline: std::sync::Arc<Baseline>,
    pub tolerance: f64,
    pub min_size: u64,
    /// `--baseline ledger`: each node set's own history (nodes sorted, joined by `,`), instead of one file.
    pub by_nodes: Option<std::sync::Arc<HashMap<String, Baseline>>>,
}

impl Grading {
    pub fn load(
        path: &Path,
        tolerance: f64,
        min_size: u64,
    ) -> Result<Self, crate::config::ConfigErrors> {
        Ok(Grading {
            baseline: std::sync::Arc::new(load(path)?),
            tolerance,
            min_size,
            by_nodes: None,
        })
    }

    /// The baseline an iteration on these nodes is graded against: the file's, or (from the ledger) the history of
    /// the same nodes — an empty one when they have none, so every size is "not in baseline".
    pub(crate) fn for_nodes(&self, nodes: &[String]) -> &Baseline {
        match &self.by_nodes {
            None => &self.baseline,
            Some(m) => {
                let mut n: Vec<&str> = nodes.iter().map(String::as_str).collect();
                n.sort_unstable();
                n.dedup();
                m.get(&n.join(",")).unwrap_or(&self.baseline)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(size: u64, oop: f64, ip: f64) -> Point {
        Point {
            collective: "all_reduce_perf".into(),
            dtype: "float".into(),
            nodes: 1,
            gpus_per_node: 8,
            size,
            metric: Metric::BUSBW,
            value: oop,
            in_place: Some(ip),
            time_us: Some(10.0),
            time_ip_us: Some(11.0),
        }
    }

    #[test]
    fn medians_per_key_and_checks() {
        let a = [pt(1 << 20, 100.0, 90.0), pt(1 << 30, 200.0, 190.0)];
        let b = [pt(1 << 20, 110.0, 95.0), pt(1 << 30, 180.0, 170.0)];
        let c = [pt(1 << 20, 90.0, 85.0), pt(1 << 30, 220.0, 200.0)];
        let base = Baseline::from_iterations(
            vec!["x".into()],
            [
                ("NcclTest", "a".to_string(), &a[..]),
                ("NcclTest", "b".to_string(), &b[..]),
                ("NcclTest", "c".to_string(), &c[..]),
            ],
        );
        assert_eq!(base.entries.len(), 2);
        assert_eq!(
            (
                base.entries[0].value,
                base.entries[0].in_place,
                base.entries[0].iterations
            ),
            (100.0, Some(90.0), 3)
        );
        let ok = base.check("NcclTest", &a, 0.05, 1 << 20);
        assert!(!ok.failed && ok.not_in_baseline.is_empty(), "{ok:?}");
        let slow = [
            pt(1 << 20, 100.0, 90.0),
            pt(1 << 30, 150.0, 190.0),
            pt(1 << 31, 1.0, 1.0),
        ];
        let c = base.check("NcclTest", &slow, 0.05, 1 << 20);
        assert!(c.failed, "{c:?}");
        assert!(
            c.message
                .contains("1 GiB out-of-place: 150.00 GB/s vs baseline 200.00 (-25%)"),
            "{}",
            c.message
        );
        assert_eq!(c.not_in_baseline.len(), 1, "{c:?}");
        // below the minimum size a drop is shown, not failed
        let small = [pt(1 << 20, 10.0, 9.0)];
        let c = base.check("NcclTest", &small, 0.05, 1 << 21);
        assert!(!c.failed && c.rows[0].status == "below min size");
    }

    #[test]
    fn a_latency_fails_when_it_rises_and_never_matches_another_metric() {
        let lat = |size: u64, us: f64| {
            Point::new(
                "osu_latency".into(),
                String::new(),
                size,
                Metric::LATENCY,
                us,
            )
        };
        let base = Baseline::from_iterations(
            vec!["x".into()],
            [(
                "OSUBench",
                "a".to_string(),
                &[lat(8, 2.0), lat(1 << 20, 100.0)][..],
            )],
        );
        // faster is never a loss; 30% slower at 1 MiB is
        let c = base.check("OSUBench", &[lat(8, 1.0), lat(1 << 20, 130.0)], 0.05, 0);
        assert!(c.failed, "{c:?}");
        assert_eq!(c.rows.iter().filter(|r| r.status == "drop").count(), 1);
        assert!(
            c.message
                .starts_with("latency more than 5% above the baseline at 1 size(s)")
                && c.message
                    .contains("1 MiB out-of-place: 130.00 us vs baseline 100.00 (+30%)"),
            "{}",
            c.message
        );
        // the same sizes measured as bandwidth are not in this baseline, not compared with a latency
        let bw = [Point::new(
            "osu_latency".into(),
            String::new(),
            8,
            Metric::BANDWIDTH,
            1.0,
        )];
        let c = base.check("OSUBench", &bw, 0.05, 0);
        assert!(
            !c.failed && c.compared == 0 && c.not_in_baseline.len() == 1,
            "{c:?}"
        );
    }
}
