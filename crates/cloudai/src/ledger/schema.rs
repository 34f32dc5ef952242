//! The ledger's schema, versioned: `meta.schema_version` says which migrations a ledger has; opening applies the
//! missing ones in one transaction (under a lock, so two cloudai's opening a new ledger at once do it once), and
//! refuses a ledger a newer cloudai wrote.
//!
//! Tables (one SQL for both databases; `{pk}` and `{rowid}` differ):
//! - `names`: every node, test and check name once (rows refer to them by id: a year of pair results stays small).
//! - `runs`: one per results tree (a scenario run or a find-bad-nodes sweep), by a key its contents give
//!   (re-recording the same tree replaces it).
//! - `iterations`: one per graded test iteration: status, reasons, versions, the key metric; `iteration_nodes` the
//!   nodes it ran on; `sizes` its numbers per message size.
//! - `pairs`: find-bad-nodes' pair results (v2); `node_checks`: a node's verdict per check (find-bad-nodes' verdicts,
//!   node evidence) (v2).
//! - `quarantine`, `quarantine_log`: the nodes cloudai holds out of service and every action on them (v3).
//! - v4: an iteration's `point_metric` names what its `sizes.value` measure (`busbw`, `bandwidth`, `latency`:
//!   `workloads::Metric`); rows before it were bus bandwidth (`sizes.busbw`, renamed).

use super::db::{Db, Dialect};
use super::error::LedgerError;

/// The period a per-node row is filed under (30 days, in seconds).
pub(crate) const BUCKET_SECS: i64 = 30 * 86_400;

pub(crate) fn bucket(at: i64) -> i64 {
    at.div_euclid(BUCKET_SECS)
}

/// The schema this cloudai writes.
pub const CURRENT: i64 = 4;

/// Each version's statements, in order.
const MIGRATIONS: [&str; 4] = [
    // v1: runs and their iterations
    "CREATE TABLE names (id {pk}, name TEXT NOT NULL UNIQUE);
     CREATE TABLE runs (id {pk}, uid TEXT NOT NULL UNIQUE, kind TEXT NOT NULL, scenario TEXT NOT NULL,
         results TEXT NOT NULL, at BIGINT NOT NULL, recorded_at BIGINT NOT NULL);
     CREATE TABLE iterations (id {pk}, run_id BIGINT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
         test_id BIGINT NOT NULL, template TEXT NOT NULL, iteration BIGINT NOT NULL, status TEXT NOT NULL,
         reasons TEXT NOT NULL, nodes TEXT NOT NULL, gpu TEXT, driver TEXT, nccl TEXT, nccl_tests TEXT,
         collective TEXT, dtype TEXT, nnodes BIGINT, gpus_per_node BIGINT,
         metric TEXT, value DOUBLE PRECISION, at BIGINT NOT NULL);
     CREATE INDEX iterations_run ON iterations (run_id);
     CREATE INDEX iterations_test ON iterations (test_id, at);
     CREATE TABLE iteration_nodes (node_id BIGINT NOT NULL,
         iteration_id BIGINT NOT NULL REFERENCES iterations(id) ON DELETE CASCADE,
         PRIMARY KEY (node_id, iteration_id)){rowid};
     CREATE INDEX iteration_nodes_iteration ON iteration_nodes (iteration_id);
     CREATE TABLE sizes (iteration_id BIGINT NOT NULL REFERENCES iterations(id) ON DELETE CASCADE,
         size BIGINT NOT NULL, busbw DOUBLE PRECISION, algbw DOUBLE PRECISION, time_us DOUBLE PRECISION,
         PRIMARY KEY (iteration_id, size)){rowid};",
    // v2: find-bad-nodes' pairs and per-node verdicts
    // find-bad-nodes' pairs and per-node verdicts. A row's `bucket` is its 30-day period (`at / 2592000`); the
    // per-node indexes lead with it, so a night's rows land in the current period's pages instead of touching every
    // page of a year (a node's history is one seek per period). No index by run: replacing a run (rare) scans.
    "CREATE TABLE pairs (run_id BIGINT NOT NULL REFERENCES runs(id) ON DELETE CASCADE, test_id BIGINT NOT NULL,
         a BIGINT NOT NULL, b BIGINT NOT NULL, round BIGINT NOT NULL, busbw DOUBLE PRECISION,
         passed BIGINT NOT NULL, at BIGINT NOT NULL, bucket BIGINT NOT NULL);
     CREATE INDEX pairs_a ON pairs (bucket, a, at);
     CREATE INDEX pairs_b ON pairs (bucket, b, at);
     CREATE TABLE node_checks (run_id BIGINT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
         node_id BIGINT NOT NULL, check_id BIGINT NOT NULL, status TEXT NOT NULL, detail TEXT NOT NULL,
         at BIGINT NOT NULL, bucket BIGINT NOT NULL);
     CREATE INDEX node_checks_node ON node_checks (bucket, node_id, at);",
    // v3: quarantine — each node cloudai holds, per system, and every action written before it is done
    "CREATE TABLE quarantine (system TEXT NOT NULL, node TEXT NOT NULL, state TEXT NOT NULL, tag TEXT NOT NULL,
         reason TEXT NOT NULL, run TEXT NOT NULL, since BIGINT NOT NULL, attempts BIGINT NOT NULL,
         passes BIGINT NOT NULL, evidence TEXT NOT NULL, updated BIGINT NOT NULL, PRIMARY KEY (system, node));
     CREATE TABLE quarantine_log (id {pk}, system TEXT NOT NULL, node TEXT NOT NULL, at BIGINT NOT NULL,
         action TEXT NOT NULL, tag TEXT NOT NULL, to_state TEXT NOT NULL, record TEXT NOT NULL, done BIGINT NOT NULL,
         outcome TEXT NOT NULL);
     CREATE INDEX quarantine_log_pending ON quarantine_log (system, done);",
    // v4: the metric an iteration's sizes measure; every size recorded before was a bus bandwidth
    "ALTER TABLE iterations ADD COLUMN point_metric TEXT;
     UPDATE iterations SET point_metric = 'busbw' WHERE EXISTS (SELECT 1 FROM sizes s WHERE s.iteration_id = iterations.id);
     ALTER TABLE sizes RENAME COLUMN busbw TO value;",
];

fn dialected(sql: &str, d: Dialect) -> String {
    let (pk, rowid) = match d {
        Dialect::Sqlite => ("INTEGER PRIMARY KEY", " WITHOUT ROWID"),
        Dialect::Postgres => ("BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY", ""),
    };
    sql.replace("{pk}", pk).replace("{rowid}", rowid)
}

/// The version a ledger is at (0: empty).
fn version(db: &mut dyn Db) -> Result<i64, LedgerError> {
    let rows = db.query("SELECT value FROM meta WHERE key = 'schema_version'", &[])?;
    Ok(rows
        .first()
        .and_then(|r| r[0].text().parse().ok())
        .unwrap_or(0))
}

/// Brings the ledger to [`CURRENT`] (or to `upto`, for tests of migration), refusing a newer one.
pub(crate) fn migrate(db: &mut dyn Db, upto: i64) -> Result<(), LedgerError> {
    db.batch("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        .or_else(|e| match e {
            // two PostgreSQL clients creating it at once: the loser sees the winner's table
            LedgerError::Exists(_) => Ok(()),
            e => Err(e),
        })?;
    db.begin()?;
    let r = (|| {
        if db.dialect() == Dialect::Postgres {
            // one migrator at a time; released at commit
            db.batch("SELECT pg_advisory_xact_lock(7312019)")?;
        }
        let at = version(db)?;
        if at > CURRENT {
            return Err(LedgerError::Newer {
                found: at,
                known: CURRENT,
            });
        }
        for (i, m) in MIGRATIONS.iter().enumerate() {
            let v = i as i64 + 1;
            if v > at && v <= upto {
                db.batch(&dialected(m, db.dialect()))
                    .map_err(|e| e.context(format!("migrating to schema version {v}")))?;
            }
        }
        if upto > at {
            db.exec(
                "INSERT INTO meta (key, value) VALUES ('schema_version', ?) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                &[upto.to_string().into()],
            )?;
        }
        Ok(())
    })();
    match r {
        Ok(()) => db.commit(),
        Err(e) => {
            db.rollback();
            Err(e)
        }
    }
}

/// The version a ledger says it has (for `history` and the tests).
pub(crate) fn current_version(db: &mut dyn Db) -> Result<i64, LedgerError> {
    version(db)
}
