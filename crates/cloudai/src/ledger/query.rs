//! Asking the ledger: a node's or a test's history (`history show`), the series drift and the trend page judge,
//! and the latest values the metrics export.

use std::collections::BTreeMap;

use serde::Serialize;

use super::db::Val;
use super::{Ledger, LedgerError};

/// What `history show` selects.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    pub node: Option<String>,
    pub test: Option<String>,
    /// Unix seconds.
    pub since: Option<i64>,
    /// The newest rows kept (0: all).
    pub limit: usize,
}

/// One line of a history.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct HistoryRow {
    /// Unix seconds.
    pub at: i64,
    /// RFC 3339, local time.
    pub time: String,
    /// `iteration`, `pair` (find-bad-nodes) or `check` (a node's verdict).
    pub kind: &'static str,
    /// The test (or, for a check, the check).
    pub test: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iteration: Option<i64>,
    pub status: String,
    pub nodes: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    pub reasons: String,
    pub results: String,
}

fn time_of(at: i64) -> String {
    chrono::DateTime::from_timestamp(at, 0)
        .map(|t| {
            t.with_timezone(&chrono::Local)
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, false)
        })
        .unwrap_or_default()
}

impl Ledger {
    /// The 30-day periods rows may be filed under since `since`, newest first.
    pub(crate) fn buckets(&mut self, since: i64) -> Result<Vec<i64>, LedgerError> {
        let r = self.db().query("SELECT MIN(at), MAX(at) FROM runs", &[])?;
        let (Some(lo), Some(hi)) = (
            r.first().and_then(|r| r[0].int()),
            r.first().and_then(|r| r[1].int()),
        ) else {
            return Ok(Vec::new());
        };
        let lo = super::schema::bucket(lo.max(since));
        let hi = super::schema::bucket(hi);
        Ok((lo..=hi).rev().collect())
    }

    /// The id of a name, if the ledger has it.
    pub(crate) fn find_name(&mut self, name: &str) -> Result<Option<i64>, LedgerError> {
        Ok(self
            .db()
            .query("SELECT id FROM names WHERE name = ?", &[name.into()])?
            .first()
            .and_then(|r| r[0].int()))
    }

    /// A node's or a test's history, oldest first.
    pub fn history(&mut self, f: &Filter) -> Result<Vec<HistoryRow>, LedgerError> {
        let since = f.since.unwrap_or(i64::MIN);
        let node = match &f.node {
            Some(n) => match self.find_name(n)? {
                Some(id) => Some(id),
                None => return Ok(Vec::new()),
            },
            None => None,
        };
        let test = match &f.test {
            Some(t) => match self.find_name(t)? {
                Some(id) => Some(id),
                None if node.is_none() => return Ok(Vec::new()),
                None => Some(-1),
            },
            None => None,
        };
        let limit = if f.limit == 0 {
            i64::MAX
        } else {
            f.limit as i64
        };
        let mut out = Vec::new();
        // iterations
        let cols =
            "i.at, t.name, i.iteration, i.status, i.nodes, i.metric, i.value, i.reasons, r.results";
        let (sql, params): (String, Vec<Val>) = match (node, test) {
            (Some(n), t) => (
                format!(
                    "SELECT {cols} FROM iteration_nodes x JOIN iterations i ON i.id = x.iteration_id \
                     JOIN names t ON t.id = i.test_id JOIN runs r ON r.id = i.run_id \
                     WHERE x.node_id = ? AND i.at >= ?{} ORDER BY i.at DESC, i.id DESC LIMIT ?",
                    if t.is_some() { " AND i.test_id = ?" } else { "" }
                ),
                [Val::Int(n), Val::Int(since)]
                    .into_iter()
                    .chain(t.map(Val::Int))
                    .chain([Val::Int(limit)])
                    .collect(),
            ),
            (None, t) => (
                format!(
                    "SELECT {cols} FROM iterations i JOIN names t ON t.id = i.test_id JOIN runs r ON r.id = i.run_id \
                     WHERE i.at >= ?{} ORDER BY i.at DESC, i.id DESC LIMIT ?",
                    if t.is_some() { " AND i.test_id = ?" } else { "" }
                ),
                [Val::Int(since)]
                    .into_iter()
                    .chain(t.map(Val::Int))
                    .chain([Val::Int(limit)])
                    .collect(),
            ),
        };
        for r in self.db().query(&sql, &params)? {
            out.push(HistoryRow {
                at: r[0].int().unwrap_or(0),
                time: time_of(r[0].int().unwrap_or(0)),
                kind: "iteration",
                test: r[1].text().into(),
                iteration: r[2].int(),
                status: r[3].text().into(),
                nodes: r[4].text().into(),
                metric: Some(r[5].text().to_string()).filter(|s| !s.is_empty()),
                value: r[6].real(),
                reasons: r[7].text().into(),
                results: r[8].text().into(),
            });
        }
        // find-bad-nodes' pairs: a node's both sides, each through its own index
        let pair_cols = "p.at, t.name, p.round, p.passed, na.name, nb.name, p.busbw, r.results";
        let pair_from =
            "FROM pairs p JOIN names t ON t.id = p.test_id JOIN names na ON na.id = p.a \
                         JOIN names nb ON nb.id = p.b JOIN runs r ON r.id = p.run_id";
        let tcond = if test.is_some() {
            " AND p.test_id = ?"
        } else {
            ""
        };
        let mut pair_queries: Vec<(String, Vec<Val>)> = Vec::new();
        let with_test = |mut v: Vec<Val>| {
            v.extend(test.map(Val::Int));
            v.push(Val::Int(limit));
            v
        };
        match node {
            // one seek per 30-day period and side, newest first
            Some(n) => {
                for b in self.buckets(since)? {
                    for side in ["a", "b"] {
                        pair_queries.push((
                            format!(
                                "SELECT {pair_cols} {pair_from} WHERE p.bucket = ? AND p.{side} = ? AND p.at >= ?{tcond} \
                                 ORDER BY p.at DESC LIMIT ?"
                            ),
                            with_test(vec![Val::Int(b), Val::Int(n), Val::Int(since)]),
                        ));
                    }
                }
            }
            None => pair_queries.push((
                format!("SELECT {pair_cols} {pair_from} WHERE p.at >= ?{tcond} ORDER BY p.at DESC LIMIT ?"),
                with_test(vec![Val::Int(since)]),
            )),
        }
        let mut pairs_seen = 0usize;
        for (sql, params) in pair_queries {
            if node.is_some() && f.limit > 0 && pairs_seen >= f.limit {
                break;
            }
            for r in self.db().query(&sql, &params)? {
                pairs_seen += 1;
                let passed = r[3].int() == Some(1);
                out.push(HistoryRow {
                    at: r[0].int().unwrap_or(0),
                    time: time_of(r[0].int().unwrap_or(0)),
                    kind: "pair",
                    test: r[1].text().into(),
                    iteration: r[2].int(),
                    status: if passed { "PASSED" } else { "FAILED" }.into(),
                    nodes: format!("{}+{}", r[4].text(), r[5].text()),
                    metric: Some("peak_busbw_gbps".into()),
                    value: r[6].real(),
                    reasons: format!("find-bad-nodes round {}", r[2].int().unwrap_or(0)),
                    results: r[7].text().into(),
                });
            }
        }
        // a node's verdicts
        if let (Some(n), None) = (node, test) {
            let mut seen = 0usize;
            for b in self.buckets(since)? {
                if f.limit > 0 && seen >= f.limit {
                    break;
                }
                for r in self.db().query(
                    "SELECT c.at, k.name, c.status, c.detail, r.results FROM node_checks c \
                     JOIN names k ON k.id = c.check_id JOIN runs r ON r.id = c.run_id \
                     WHERE c.bucket = ? AND c.node_id = ? AND c.at >= ? ORDER BY c.at DESC LIMIT ?",
                    &[Val::Int(b), Val::Int(n), Val::Int(since), Val::Int(limit)],
                )? {
                    seen += 1;
                    out.push(HistoryRow {
                        at: r[0].int().unwrap_or(0),
                        time: time_of(r[0].int().unwrap_or(0)),
                        kind: "check",
                        test: r[1].text().into(),
                        iteration: None,
                        status: r[2].text().to_string(),
                        nodes: f.node.clone().unwrap_or_default(),
                        metric: None,
                        value: None,
                        reasons: r[3].text().into(),
                        results: r[4].text().into(),
                    });
                }
            }
        }
        out.sort_by(|a, b| a.at.cmp(&b.at).then(a.kind.cmp(b.kind)));
        if f.limit > 0 && out.len() > f.limit {
            out.drain(..out.len() - f.limit);
        }
        Ok(out)
    }
}

/// A node's newest verdict of a check: (node, check, status, detail, at).
pub type Verdict = (String, String, String, String, i64);

/// Size bands a busbw series is kept per (each run's value is the busbw at the largest size it measured in the
/// band): latency-bound, middle, bandwidth-bound.
pub(crate) const BANDS: [(&str, u64, u64); 3] = [
    ("small", 0, 64 << 10),
    ("medium", 64 << 10, 64 << 20),
    ("large", 64 << 20, u64::MAX),
];

pub(crate) fn band_of(size: u64) -> &'static str {
    BANDS
        .iter()
        .find(|(_, lo, hi)| size >= *lo && size < *hi)
        .map_or("large", |b| b.0)
}

/// One value of a series.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SeriesPoint {
    pub at: i64,
    pub value: f64,
    /// The size the value was measured at (bytes; 0 for a key metric or a pair's peak).
    pub size: u64,
    pub passed: bool,
}

/// What is measured over time: a subject (a node, a link `a+b`, or the node set of a larger run), a test, a band
/// (`small`/`medium`/`large` busbw, `peak` for find-bad-nodes pairs, or a key metric's name).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct SeriesKey {
    pub subject: String,
    pub test: String,
    pub band: String,
}

/// The point metric a band names by its suffix (`large_latency` → latency; bus bandwidth's own bands name none).
pub(crate) fn band_metric(band: &str) -> Option<crate::workloads::Metric> {
    band.rsplit('_')
        .next()
        .and_then(crate::workloads::Metric::named)
}

/// Whether more is better for a series' metric: a point metric's band says it (`large_latency`), a key metric's
/// name by its unit or what it measures.
pub fn higher_is_better(band: &str) -> bool {
    if let Some(m) = band_metric(band) {
        return m.higher_is_better;
    }
    !(band.ends_with("_s")
        || band.ends_with("_us")
        || band.contains("latency")
        || band.contains("time"))
}

/// A key metric that says nothing over time.
fn uninformative(metric: &str) -> bool {
    matches!(metric, "rows" | "failed_nodes" | "peak_busbw_gbps")
}

impl Ledger {
    /// Every series since `since`, each oldest first; with `node`, those whose subject includes it.
    pub fn series(
        &mut self,
        since: Option<i64>,
        node: Option<&str>,
    ) -> Result<BTreeMap<SeriesKey, Vec<SeriesPoint>>, LedgerError> {
        let since = since.unwrap_or(i64::MIN);
        let mut out: BTreeMap<SeriesKey, Vec<SeriesPoint>> = BTreeMap::new();
        let holds = |subject: &str| node.is_none_or(|n| subject.split('+').any(|s| s == n));
        // each point metric per size band: the value at the band's largest measured size (bus bandwidth's bands
        // are `small`, `medium`, `large`; another metric's `large_latency`, …)
        let rows = self.db().query(
            "SELECT i.id, i.at, t.name, i.nodes, i.status, s.size, s.value, i.point_metric FROM iterations i \
             JOIN names t ON t.id = i.test_id JOIN sizes s ON s.iteration_id = i.id \
             WHERE i.at >= ? AND s.value IS NOT NULL ORDER BY i.at, i.id, s.size",
            &[Val::Int(since)],
        )?;
        let mut last: Option<(i64, SeriesKey)> = None;
        for r in rows {
            let subject = r[3].text().replace(',', "+");
            if subject.is_empty() || !holds(&subject) {
                continue;
            }
            let size = r[5].int().unwrap_or(0).max(0) as u64;
            let band = match r[7].text() {
                "" | "busbw" => band_of(size).to_string(),
                metric => format!("{}_{metric}", band_of(size)),
            };
            let key = SeriesKey {
                subject,
                test: r[2].text().into(),
                band,
            };
            let p = SeriesPoint {
                at: r[1].int().unwrap_or(0),
                value: r[6].real().unwrap_or(f64::NAN),
                size,
                passed: r[4].text() == "PASSED",
            };
            let id = r[0].int().unwrap_or(0);
            let s = out.entry(key.clone()).or_default();
            // sizes come in order: a larger size of the same iteration and band replaces the smaller one
            if last.as_ref() == Some(&(id, key.clone())) {
                if let Some(l) = s.last_mut() {
                    *l = p;
                }
            } else {
                s.push(p);
            }
            last = Some((id, key));
        }
        // other workloads' key metric
        for r in self.db().query(
            "SELECT i.at, t.name, i.nodes, i.status, i.metric, i.value FROM iterations i \
             JOIN names t ON t.id = i.test_id WHERE i.at >= ? AND i.value IS NOT NULL ORDER BY i.at, i.id",
            &[Val::Int(since)],
        )? {
            let subject = r[2].text().replace(',', "+");
            let metric = r[4].text();
            if subject.is_empty() || uninformative(metric) || !holds(&subject) {
                continue;
            }
            out.entry(SeriesKey {
                subject,
                test: r[1].text().into(),
                band: metric.into(),
            })
            .or_default()
            .push(SeriesPoint {
                at: r[0].int().unwrap_or(0),
                value: r[5].real().unwrap_or(f64::NAN),
                size: 0,
                passed: r[3].text() == "PASSED",
            });
        }
        // find-bad-nodes: each link, and each node whatever its partner
        let node_id = match node {
            Some(n) => match self.find_name(n)? {
                Some(id) => Some(id),
                None => return Ok(out),
            },
            None => None,
        };
        let pair_sql = "SELECT p.at, t.name, na.name, nb.name, p.busbw, p.passed FROM pairs p \
                        JOIN names t ON t.id = p.test_id JOIN names na ON na.id = p.a JOIN names nb ON nb.id = p.b";
        let queries: Vec<(String, Vec<Val>)> = match node_id {
            Some(id) => self
                .buckets(since)?
                .into_iter()
                .flat_map(|b| {
                    ["a", "b"].map(|side| {
                        (
                            format!(
                                "{pair_sql} WHERE p.bucket = ? AND p.{side} = ? AND p.at >= ? AND p.busbw IS NOT NULL"
                            ),
                            vec![Val::Int(b), Val::Int(id), Val::Int(since)],
                        )
                    })
                })
                .collect(),
            None => vec![(
                format!("{pair_sql} WHERE p.at >= ? AND p.busbw IS NOT NULL ORDER BY p.at"),
                vec![Val::Int(since)],
            )],
        };
        for (sql, params) in queries {
            for r in self.db().query(&sql, &params)? {
                let (a, b) = (r[2].text(), r[3].text());
                let p = SeriesPoint {
                    at: r[0].int().unwrap_or(0),
                    value: r[4].real().unwrap_or(f64::NAN),
                    size: 0,
                    passed: r[5].int() == Some(1),
                };
                let test = r[1].text().to_string();
                for subject in [format!("{a}+{b}"), a.to_string(), b.to_string()] {
                    if !holds(&subject) {
                        continue;
                    }
                    out.entry(SeriesKey {
                        subject,
                        test: test.clone(),
                        band: "peak".into(),
                    })
                    .or_default()
                    .push(p.clone());
                }
            }
        }
        for s in out.values_mut() {
            s.sort_by_key(|p| p.at);
        }
        Ok(out)
    }

    /// The newest verdict of every node per check: (node, check, status, detail, at).
    pub(crate) fn latest_verdicts(&mut self) -> Result<Vec<Verdict>, LedgerError> {
        let rows = self.db().query(
            "SELECT n.name, k.name, c.status, c.detail, c.at FROM node_checks c \
             JOIN names n ON n.id = c.node_id JOIN names k ON k.id = c.check_id \
             JOIN (SELECT node_id, check_id, MAX(at) AS at FROM node_checks GROUP BY node_id, check_id) m \
               ON m.node_id = c.node_id AND m.check_id = c.check_id AND m.at = c.at \
             ORDER BY n.name, k.name",
            &[],
        )?;
        let mut out: Vec<Verdict> = rows
            .into_iter()
            .map(|r| {
                (
                    r[0].text().to_string(),
                    r[1].text().to_string(),
                    r[2].text().to_string(),
                    r[3].text().to_string(),
                    r[4].int().unwrap_or(0),
                )
            })
            .collect();
        out.dedup_by(|a, b| a.0 == b.0 && a.1 == b.1);
        Ok(out)
    }

    /// Counts for `history` without arguments: runs, iterations, pairs, node verdicts, nodes, and the time span.
    pub fn counts(&mut self) -> Result<BTreeMap<&'static str, i64>, LedgerError> {
        let mut out = BTreeMap::new();
        for (k, sql) in [
            ("runs", "SELECT COUNT(*) FROM runs"),
            ("iterations", "SELECT COUNT(*) FROM iterations"),
            ("pairs", "SELECT COUNT(*) FROM pairs"),
            ("node_checks", "SELECT COUNT(*) FROM node_checks"),
            ("first_at", "SELECT MIN(at) FROM runs"),
            ("last_at", "SELECT MAX(at) FROM runs"),
        ] {
            let v = self.db().query(sql, &[])?;
            out.insert(k, v.first().and_then(|r| r[0].int()).unwrap_or(0));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::higher_is_better;

    #[test]
    fn a_series_direction_follows_its_metric() {
        // bus bandwidth bands, a point metric's band, key metrics named by unit or kind
        for (band, higher) in [
            ("large", true),
            ("small_bandwidth", true),
            ("large_latency", false),
            ("peak", true),
            ("ttft_ms_s", false),
            ("avg_latency_us", false),
            ("tokens_per_second", true),
        ] {
            assert_eq!(higher_is_better(band), higher, "{band}");
        }
    }
}
