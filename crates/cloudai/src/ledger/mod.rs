//! The fleet ledger: every graded iteration and every find-bad-nodes verdict remembered in one database, so a node's
//! history, its drift and its latest numbers can be asked for (`cloudai history`). SQLite by default
//! (`$XDG_DATA_HOME/cloudai/ledger.sqlite`), PostgreSQL when the ledger is a `postgres://` URL.
//!
//! Recording never fails a run: the run's own files stay the source of truth, and a ledger that cannot be written
//! is a warning. The same tree recorded again (a re-grade, an import) replaces its rows.

pub mod baseline;
pub mod db;
pub mod drift;
pub mod error;
pub mod metrics;
pub mod page;
pub mod quarantine;
pub mod query;
pub mod rows;
pub mod schema;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use db::{Db, Val};
pub use error::LedgerError;
pub use rows::RunRows;

/// Where the ledger is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// `--no-ledger`.
    Off,
    Sqlite(PathBuf),
    /// A `postgres://` or `postgresql://` URL (its password, if any, is never printed).
    Postgres(String),
}

impl Location {
    /// `--ledger` / `CLOUDAI_LEDGER`, or the default under the user's data directory.
    pub fn resolve(given: Option<&str>, off: bool) -> Location {
        if off {
            return Location::Off;
        }
        match given.map(str::trim).filter(|s| !s.is_empty()) {
            Some(u) if u.starts_with("postgres://") || u.starts_with("postgresql://") => {
                Location::Postgres(u.to_string())
            }
            Some(p) => Location::Sqlite(PathBuf::from(p)),
            None => Location::Sqlite(default_path()),
        }
    }

    /// For messages: a PostgreSQL URL without its password.
    pub fn display(&self) -> String {
        match self {
            Location::Off => "off".into(),
            Location::Sqlite(p) => p.display().to_string(),
            Location::Postgres(u) => redact(u),
        }
    }
}

/// `$XDG_DATA_HOME/cloudai/ledger.sqlite`, else `~/.local/share/cloudai/ledger.sqlite`.
pub(crate) fn default_path() -> PathBuf {
    let base = std::env::var_os("XDG_DATA_HOME")
        .filter(|v| Path::new(v).is_absolute())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("."));
    base.join("cloudai").join("ledger.sqlite")
}

/// `postgres://user:secret@host/db` → `postgres://user:***@host/db`.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (auth, tail) = match rest.find(['/', '?']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    match auth.rsplit_once('@') {
        Some((cred, host)) => {
            let user = cred.split_once(':').map_or(cred, |(u, _)| u);
            let masked = if cred.contains(':') {
                format!("{user}:***")
            } else {
                user.to_string()
            };
            format!("{scheme}://{masked}@{host}{tail}")
        }
        None => url.to_string(),
    }
}

static LOCATION: OnceLock<Location> = OnceLock::new();

/// Set once by the command line (`--ledger`, `--no-ledger`).
pub(crate) fn set_location(l: Location) {
    let _ = LOCATION.set(l);
}

/// The ledger this process records into.
pub fn location() -> Location {
    LOCATION.get().cloned().unwrap_or_else(|| {
        Location::resolve(std::env::var("CLOUDAI_LEDGER").ok().as_deref(), false)
    })
}

/// Runs `f` on a thread of its own: the PostgreSQL client drives its own runtime, which cannot start on a thread
/// already inside ours.
pub(crate) fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| match s.spawn(f).join() {
        Ok(v) => v,
        Err(p) => std::panic::resume_unwind(p),
    })
}

/// An open ledger.
pub struct Ledger {
    db: Box<dyn Db>,
    names: HashMap<String, i64>,
    pub location: Location,
}

impl Ledger {
    /// Opens (creating and migrating) the ledger; call off the runtime ([`off_runtime`]).
    pub fn open(at: &Location) -> Result<Ledger, LedgerError> {
        Self::open_at_version(at, schema::CURRENT)
    }

    /// Opens at an older schema version (tests of migration).
    pub fn open_at_version(at: &Location, version: i64) -> Result<Ledger, LedgerError> {
        let db: Box<dyn Db> = match at {
            Location::Off => {
                return Err(LedgerError::Open("the ledger is off (--no-ledger)".into()))
            }
            Location::Sqlite(p) => Box::new(db::Sqlite::open(p)?),
            Location::Postgres(u) => Box::new(db::Postgres::connect(u)?),
        };
        let mut l = Ledger {
            db,
            names: HashMap::new(),
            location: at.clone(),
        };
        schema::migrate(l.db.as_mut(), version)
            .map_err(|e| e.context(format!("ledger {}", at.display())))?;
        Ok(l)
    }

    /// SQLite's own integrity check (`ok`); a server checks itself.
    pub fn integrity(&mut self) -> Result<String, LedgerError> {
        match self.location {
            Location::Sqlite(_) => Ok(self
                .db
                .query("PRAGMA integrity_check", &[])?
                .iter()
                .map(|r| r[0].text().to_string())
                .collect::<Vec<_>>()
                .join("; ")),
            _ => Ok("ok".into()),
        }
    }

    pub fn schema_version(&mut self) -> Result<i64, LedgerError> {
        schema::current_version(self.db.as_mut())
    }

    pub fn db(&mut self) -> &mut dyn Db {
        self.db.as_mut()
    }

    /// The id of a node, test or check name, made on first use.
    fn name_id(&mut self, name: &str) -> Result<i64, LedgerError> {
        if let Some(id) = self.names.get(name) {
            return Ok(*id);
        }
        let sel = "SELECT id FROM names WHERE name = ?";
        let mut rows = self.db.query(sel, &[name.into()])?;
        if rows.is_empty() {
            self.db.exec(
                "INSERT INTO names (name) VALUES (?) ON CONFLICT (name) DO NOTHING",
                &[name.into()],
            )?;
            rows = self.db.query(sel, &[name.into()])?;
        }
        let id = rows
            .first()
            .and_then(|r| r[0].int())
            .ok_or(LedgerError::Missing("the id of a name"))?;
        self.names.insert(name.to_string(), id);
        Ok(id)
    }

    /// Writes one results tree's rows in one transaction, replacing what an earlier recording of it wrote.
    /// Returns whether it was new.
    pub fn write(&mut self, run: &RunRows) -> Result<bool, LedgerError> {
        self.db.begin()?;
        let r = self.write_in_tx(run);
        match r {
            Ok(new) => {
                self.db.commit()?;
                Ok(new)
            }
            Err(e) => {
                self.db.rollback();
                // names made in the failed transaction are gone with it
                self.names.clear();
                Err(e)
            }
        }
    }

    fn write_in_tx(&mut self, run: &RunRows) -> Result<bool, LedgerError> {
        let gone = self
            .db
            .exec("DELETE FROM runs WHERE uid = ?", &[run.uid.as_str().into()])?;
        let now = chrono::Utc::now().timestamp();
        let id = self
            .db
            .query(
                "INSERT INTO runs (uid, kind, scenario, results, at, recorded_at) VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
                &[
                    run.uid.as_str().into(),
                    run.kind.into(),
                    run.scenario.as_str().into(),
                    run.results.as_str().into(),
                    run.at.into(),
                    now.into(),
                ],
            )?
            .first()
            .and_then(|r| r[0].int())
            .ok_or(LedgerError::Missing("the id of the run"))?;
        for it in &run.iterations {
            let test = self.name_id(&it.test)?;
            let iid = self
                .db
                .query(
                    "INSERT INTO iterations (run_id, test_id, template, iteration, status, reasons, nodes, gpu, driver, \
                     nccl, nccl_tests, collective, dtype, nnodes, gpus_per_node, metric, value, at, point_metric) \
                     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                    &[
                        id.into(),
                        test.into(),
                        it.template.as_str().into(),
                        (it.iteration as i64).into(),
                        it.status.as_str().into(),
                        it.reasons.as_str().into(),
                        it.nodes.join(",").into(),
                        it.gpu.clone().into(),
                        it.driver.clone().into(),
                        it.nccl.clone().into(),
                        it.nccl_tests.clone().into(),
                        it.collective.clone().into(),
                        it.dtype.clone().into(),
                        it.shape.map_or(Val::Null, |s| Val::Int(s.0 as i64)),
                        it.shape.map_or(Val::Null, |s| Val::Int(s.1 as i64)),
                        it.metric.as_ref().map(|m| m.0.clone()).into(),
                        it.metric.as_ref().map(|m| m.1).into(),
                        it.at.into(),
                        it.point_metric.map(str::to_string).into(),
                    ],
                )?
                .first()
                .and_then(|r| r[0].int())
                .ok_or(LedgerError::Missing("the id of an iteration"))?;
            for n in &it.nodes {
                let nid = self.name_id(n)?;
                self.db.exec(
                    "INSERT INTO iteration_nodes (node_id, iteration_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
                    &[nid.into(), iid.into()],
                )?;
            }
            for s in &it.sizes {
                self.db.exec(
                    "INSERT INTO sizes (iteration_id, size, value, algbw, time_us) VALUES (?, ?, ?, ?, ?) \
                     ON CONFLICT DO NOTHING",
                    &[
                        iid.into(),
                        (s.size as i64).into(),
                        s.value.into(),
                        s.algbw.into(),
                        s.time_us.into(),
                    ],
                )?;
            }
            for (node, status, detail) in &it.node_checks {
                self.node_check(id, node, &it.template, status, detail, it.at)?;
            }
        }
        for p in &run.pairs {
            let (a, b, t) = (
                self.name_id(&p.a)?,
                self.name_id(&p.b)?,
                self.name_id(&p.test)?,
            );
            self.db.exec(
                "INSERT INTO pairs (run_id, test_id, a, b, round, busbw, passed, at, bucket) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                &[
                    id.into(),
                    t.into(),
                    a.into(),
                    b.into(),
                    (p.round as i64).into(),
                    p.busbw.into(),
                    (p.passed as i64).into(),
                    run.at.into(),
                    schema::bucket(run.at).into(),
                ],
            )?;
        }
        for c in &run.node_checks {
            self.node_check(id, &c.node, &c.check, &c.status, &c.detail, run.at)?;
        }
        Ok(gone == 0)
    }
}

impl Ledger {
    /// One node's verdict of one check.
    fn node_check(
        &mut self,
        run: i64,
        node: &str,
        check: &str,
        status: &str,
        detail: &str,
        at: i64,
    ) -> Result<(), LedgerError> {
        let (nid, cid) = (self.name_id(node)?, self.name_id(check)?);
        self.db
            .exec(
                "INSERT INTO node_checks (run_id, node_id, check_id, status, detail, at, bucket) \
                 VALUES (?, ?, ?, ?, ?, ?, ?)",
                &[
                    run.into(),
                    nid.into(),
                    cid.into(),
                    status.into(),
                    detail.into(),
                    at.into(),
                    schema::bucket(at).into(),
                ],
            )
            .map(|_| ())
    }
}

/// Records rows into the process's ledger; a failure is a warning (never the run's failure).
pub fn record(run: RunRows) {
    let at = location();
    if at == Location::Off || run.is_empty() {
        return;
    }
    let n = run.len();
    // SQLite answers `database is locked` at once in the few cases its busy wait does not cover (two processes
    // creating the file or upgrading a read to a write at the same moment): the whole write is tried again, a
    // run's rows replacing themselves (by its uid)
    let mut tries = 0;
    let res = loop {
        let r = off_runtime(|| Ledger::open(&at).and_then(|mut l| l.write(&run)));
        match r {
            Err(e) if tries < BUSY_TRIES && e.is_busy() => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(100 << tries));
            }
            r => break r,
        }
    };
    match res {
        Ok(_) => crate::debug!("Recorded {n} result(s) of {} in the ledger {}", run.results, at.display()),
        Err(e) => crate::warn!(
            "Cannot record the results in the ledger {} ({e}); the results tree keeps them: `cloudai history import {}` \
             records them later",
            at.display(),
            run.results
        ),
    }
}

/// Writes tried again after SQLite's `database is locked` (200 ms, 400 ms, … 3.2 s apart: 6.2 s at most in all).
const BUSY_TRIES: u32 = 5;

/// After a scenario's reports: its graded iterations.
pub(crate) fn record_scenario(root: &Path, summary: &crate::report::scenario::Summary) {
    if summary.mode == "dry-run" || location() == Location::Off {
        return;
    }
    record(rows::scenario(root, &summary.tests));
}

/// After a find-bad-nodes sweep: its pairs and verdicts, as `bad-nodes.json` has them.
pub(crate) fn record_sweep(root: &Path) {
    if location() == Location::Off {
        return;
    }
    match rows::sweep(root) {
        Ok(r) => record(r),
        Err(e) => crate::warn!("Cannot record the sweep in the ledger: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_and_redaction() {
        assert_eq!(Location::resolve(Some("x.sqlite"), true), Location::Off);
        assert_eq!(
            Location::resolve(Some("postgres://u:pw@h:5432/db"), false),
            Location::Postgres("postgres://u:pw@h:5432/db".into())
        );
        assert_eq!(
            Location::resolve(Some("/tmp/l.sqlite"), false),
            Location::Sqlite("/tmp/l.sqlite".into())
        );
        assert_eq!(
            redact("postgres://u:pw@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(
            redact("postgres://u@h/db?sslmode=disable"),
            "postgres://u@h/db?sslmode=disable"
        );
        assert_eq!(redact("postgresql://h/db"), "postgresql://h/db");
        assert!(default_path().ends_with("cloudai/ledger.sqlite"));
    }
}
