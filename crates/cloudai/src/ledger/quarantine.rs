//! Quarantine state in the ledger (schema v3): `quarantine` holds each node's record per system, `quarantine_log`
//! every action, written as an intent before it is done and marked done (with the record) after, in one
//! transaction.

use crate::ledger::db::Val;
use crate::ledger::Ledger;
use crate::ledger::LedgerError;
use crate::quarantine::{Action, Held, Intent, QuarantineError, Record, Store};

impl From<LedgerError> for QuarantineError {
    fn from(e: LedgerError) -> Self {
        QuarantineError::Store(std::sync::Arc::new(e))
    }
}

/// The ledger's quarantine tables for one system (its `name`).
pub(crate) struct LedgerStore<'a> {
    pub ledger: &'a mut Ledger,
    pub system: String,
}

fn record_of(r: &[Val]) -> Record {
    Record {
        node: r[0].text().into(),
        state: Held::parse(r[1].text()).unwrap_or(Held::Quarantined),
        tag: r[2].text().into(),
        reason: r[3].text().into(),
        run: r[4].text().into(),
        since: r[5].int().unwrap_or(0),
        attempts: r[6].int().unwrap_or(0).max(0) as u32,
        passes: r[7].int().unwrap_or(0).max(0) as u32,
        evidence: r[8].text().into(),
        updated: r[9].int().unwrap_or(0),
    }
}

impl Store for LedgerStore<'_> {
    fn records(&mut self) -> Result<Vec<Record>, QuarantineError> {
        let rows = self.ledger.db().query(
            "SELECT node, state, tag, reason, run, since, attempts, passes, evidence, updated FROM quarantine \
             WHERE system = ? ORDER BY node",
            &[self.system.as_str().into()],
        )?;
        Ok(rows.iter().map(|r| record_of(r)).collect())
    }

    fn pending(&mut self) -> Result<Vec<Intent>, QuarantineError> {
        let rows = self.ledger.db().query(
            "SELECT id, node, action, tag, to_state, record FROM quarantine_log WHERE system = ? AND done = 0 \
             ORDER BY id",
            &[self.system.as_str().into()],
        )?;
        rows.iter()
            .map(|r| {
                let record: Record = serde_json::from_str(r[5].text()).map_err(|e| {
                    QuarantineError::Corrupt(format!(
                        "quarantine log entry {}: {e}",
                        r[0].int().unwrap_or(0)
                    ))
                })?;
                Ok(Intent {
                    id: r[0].int().unwrap_or(0),
                    node: r[1].text().into(),
                    action: Action::parse(r[2].text()).ok_or_else(|| {
                        QuarantineError::Corrupt(format!(
                            "quarantine log entry {}: unknown action {:?}",
                            r[0].int().unwrap_or(0),
                            r[2].text()
                        ))
                    })?,
                    tag: r[3].text().into(),
                    to: Held::parse(r[4].text()).unwrap_or(Held::Quarantined),
                    record,
                })
            })
            .collect()
    }

    fn intend(&mut self, i: &Intent) -> Result<i64, QuarantineError> {
        let json = serde_json::to_string(&i.record)
            .map_err(|e| QuarantineError::Corrupt(e.to_string()))?;
        let db = self.ledger.db();
        db.begin()?;
        let r = db.query(
            "INSERT INTO quarantine_log (system, node, at, action, tag, to_state, record, done, outcome) \
             VALUES (?, ?, ?, ?, ?, ?, ?, 0, '') RETURNING id",
            &[
                self.system.as_str().into(),
                i.node.as_str().into(),
                chrono::Utc::now().timestamp().into(),
                i.action.as_str().into(),
                i.tag.as_str().into(),
                i.to.as_str().into(),
                json.into(),
            ],
        );
        match r {
            Ok(rows) => {
                db.commit()?;
                rows.first().and_then(|r| r[0].int()).ok_or_else(|| {
                    LedgerError::Missing("the id of the quarantine log entry").into()
                })
            }
            Err(e) => {
                db.rollback();
                Err(e.into())
            }
        }
    }

    fn done(
        &mut self,
        id: i64,
        record: Option<&Record>,
        outcome: &str,
    ) -> Result<(), QuarantineError> {
        let system = self.system.clone();
        let db = self.ledger.db();
        db.begin()?;
        let r = (|| {
            db.exec(
                "UPDATE quarantine_log SET done = 1, outcome = ? WHERE id = ?",
                &[outcome.into(), id.into()],
            )?;
            if let Some(r) = record {
                db.exec(
                    "INSERT INTO quarantine (system, node, state, tag, reason, run, since, attempts, passes, evidence, \
                     updated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (system, node) DO UPDATE SET \
                     state = excluded.state, tag = excluded.tag, reason = excluded.reason, run = excluded.run, \
                     since = excluded.since, attempts = excluded.attempts, passes = excluded.passes, \
                     evidence = excluded.evidence, updated = excluded.updated",
                    &[
                        system.as_str().into(),
                        r.node.as_str().into(),
                        r.state.as_str().into(),
                        r.tag.as_str().into(),
                        r.reason.as_str().into(),
                        r.run.as_str().into(),
                        r.since.into(),
                        (r.attempts as i64).into(),
                        (r.passes as i64).into(),
                        r.evidence.as_str().into(),
                        r.updated.into(),
                    ],
                )?;
            }
            Ok::<(), LedgerError>(())
        })();
        match r {
            Ok(()) => Ok(db.commit()?),
            Err(e) => {
                db.rollback();
                Err(e.into())
            }
        }
    }
}
