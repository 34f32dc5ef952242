//! `--baseline ledger`: each node set graded against its own history — the median, per size, of its passed runs
//! of the same test template, collective, data type and shape over the last [`WINDOW_DAYS`] days.

use std::collections::HashMap;

use super::db::Val;
use super::{location, off_runtime, Ledger, Location};
use crate::baseline::{Baseline, Grading};
use crate::workloads::{Metric, Point};

/// How far back the history reaches.
pub(crate) const WINDOW_DAYS: i64 = 90;

/// One passed iteration: (id, template, where it ran, its points).
type Passed = (i64, String, String, Vec<Point>);

/// The baselines of every node set the ledger knows (nodes sorted, joined by `,`).
pub(crate) fn by_nodes(
    l: &mut Ledger,
    since: i64,
) -> Result<HashMap<String, Baseline>, super::LedgerError> {
    let rows = l.db().query(
        "SELECT i.id, i.nodes, i.template, i.collective, i.dtype, i.nnodes, i.gpus_per_node, s.size, s.value, \
         s.time_us, r.results, t.name, i.iteration, i.point_metric FROM iterations i \
         JOIN sizes s ON s.iteration_id = i.id JOIN runs r ON r.id = i.run_id JOIN names t ON t.id = i.test_id \
         WHERE i.status = 'PASSED' AND i.at >= ? AND s.value IS NOT NULL AND i.collective IS NOT NULL \
         AND i.point_metric IS NOT NULL \
         ORDER BY i.nodes, i.id, s.size",
        &[Val::Int(since)],
    )?;
    // node set → its iterations, in order
    let mut sets: HashMap<String, Vec<Passed>> = HashMap::new();
    for r in rows {
        // a metric this cloudai does not know (a newer one wrote it) grades nothing
        let Some(metric) = Metric::named(r[13].text()) else {
            continue;
        };
        let id = r[0].int().unwrap_or(0);
        let list = sets.entry(r[1].text().to_string()).or_default();
        if list.last().is_none_or(|x| x.0 != id) {
            let dir = format!(
                "{}/{}/{}",
                r[10].text(),
                r[11].text(),
                r[12].int().unwrap_or(0)
            );
            list.push((id, r[2].text().to_string(), dir, Vec::new()));
        }
        if let Some(last) = list.last_mut() {
            last.3.push(Point {
                collective: r[3].text().into(),
                dtype: r[4].text().into(),
                nodes: r[5].int().unwrap_or(0).max(0) as u64,
                gpus_per_node: r[6].int().unwrap_or(0).max(0) as u64,
                size: r[7].int().unwrap_or(0).max(0) as u64,
                metric,
                value: r[8].real().unwrap_or(f64::NAN),
                in_place: None,
                time_us: r[9].real(),
                time_ip_us: None,
            });
        }
    }
    Ok(sets
        .into_iter()
        .map(|(nodes, its)| {
            let b = Baseline::from_iterations(
                vec![format!("ledger: {nodes}")],
                its.iter()
                    .map(|(_, t, d, p)| (t.as_str(), d.clone(), &p[..])),
            );
            (nodes, b)
        })
        .collect())
}

/// The grading `--baseline ledger` gives.
pub fn grading(tolerance: f64, min_size: u64) -> Result<Grading, String> {
    let at = location();
    if at == Location::Off {
        return Err("--baseline ledger: the ledger is off (--no-ledger)".into());
    }
    let since = chrono::Utc::now().timestamp() - WINDOW_DAYS * 86_400;
    let map = off_runtime(|| Ledger::open(&at).and_then(|mut l| by_nodes(&mut l, since))).map_err(
        |e| {
            format!(
                "--baseline ledger: cannot read the ledger {}: {e}",
                at.display()
            )
        },
    )?;
    crate::info!(
        "Grading against the ledger {}: {} node set(s) with passed runs in the last {WINDOW_DAYS} days",
        at.display(),
        map.len()
    );
    let mut empty = Baseline::new(chrono::Local::now().to_rfc3339(), Vec::new(), Vec::new());
    empty.file = std::path::PathBuf::from(format!("ledger {}", at.display()));
    Ok(Grading {
        baseline: std::sync::Arc::new(empty),
        tolerance,
        min_size,
        by_nodes: Some(std::sync::Arc::new(map)),
    })
}
