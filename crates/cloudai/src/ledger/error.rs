//! What went wrong with the ledger, by what is done about it: a lock another writer holds is tried again, an object
//! another cloudai created at the same moment is taken as made, a ledger a newer cloudai wrote is refused with both
//! versions; everything else is reported with the database's own words.

use std::fmt;

#[derive(Clone, Debug, PartialEq)]
pub enum LedgerError {
    /// The ledger cannot be opened here: its directory cannot be made, the file is not a database, the URL is not
    /// one.
    Open(String),
    /// The PostgreSQL server does not answer, or the connection broke.
    Connection(String),
    /// Another writer holds the lock past the wait (SQLite's busy or locked, PostgreSQL's lock and serialization
    /// failures): a later try gets past it.
    Busy(String),
    /// What is created exists already (two cloudai's creating the same table or row at once).
    Exists(String),
    /// A newer cloudai wrote it: its schema version and this cloudai's.
    Newer { found: i64, known: i64 },
    /// A statement the database refused (its own message).
    Sql(String),
    /// An answer without what it must hold (an insert that returned no id).
    Missing(&'static str),
    /// What was being done when `cause` happened (`migrating to schema version 2`, `ledger /path`).
    Context {
        what: String,
        cause: Box<LedgerError>,
    },
}

impl LedgerError {
    /// `cause`, saying what was being done.
    pub fn context(self, what: impl Into<String>) -> Self {
        LedgerError::Context {
            what: what.into(),
            cause: Box::new(self),
        }
    }

    /// The error under every context.
    pub fn root(&self) -> &LedgerError {
        match self {
            LedgerError::Context { cause, .. } => cause.root(),
            e => e,
        }
    }

    /// Whether trying again later can get past it.
    pub fn is_busy(&self) -> bool {
        matches!(self.root(), LedgerError::Busy(_))
    }
}

impl fmt::Display for LedgerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LedgerError::Open(m)
            | LedgerError::Connection(m)
            | LedgerError::Busy(m)
            | LedgerError::Exists(m)
            | LedgerError::Sql(m) => f.write_str(m),
            LedgerError::Newer { found, known } => write!(
                f,
                "its schema is version {found}, newer than this cloudai's ({known}): a newer cloudai wrote it; use \
                 that one, or another ledger (--ledger)"
            ),
            LedgerError::Missing(what) => write!(f, "the database answered without {what}"),
            LedgerError::Context { what, cause } => write!(f, "{what}: {cause}"),
        }
    }
}

impl std::error::Error for LedgerError {}

/// Messages stay what the command line prints.
impl From<LedgerError> for String {
    fn from(e: LedgerError) -> Self {
        e.to_string()
    }
}

/// The command line's one funnel: a ledger error is an error (exit 1) with its message.
impl From<LedgerError> for crate::exit_codes::Failure {
    fn from(e: LedgerError) -> Self {
        crate::exit_codes::Failure::Error(e.to_string())
    }
}

impl From<rusqlite::Error> for LedgerError {
    fn from(e: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode as C;
        let m = e.to_string();
        match e.sqlite_error_code() {
            Some(C::DatabaseBusy | C::DatabaseLocked) => LedgerError::Busy(m),
            Some(C::NotADatabase | C::CannotOpen | C::ReadOnly | C::PermissionDenied) => {
                LedgerError::Open(m)
            }
            Some(C::ConstraintViolation) if m.contains("UNIQUE") => LedgerError::Exists(m),
            _ if m.contains("already exists") => LedgerError::Exists(m),
            _ => LedgerError::Sql(m),
        }
    }
}

impl From<postgres::Error> for LedgerError {
    fn from(e: postgres::Error) -> Self {
        use postgres::error::SqlState as S;
        use std::error::Error as _;
        let Some(db) = e.as_db_error() else {
            // no answer from the server: the connection itself
            return LedgerError::Connection(match e.source() {
                Some(s) => format!("{e}: {s}"),
                None => e.to_string(),
            });
        };
        // the server's own message (`duplicate key …`), not the client's `db error`
        let m = db.message().to_string();
        let code = db.code();
        if [S::UNIQUE_VIOLATION, S::DUPLICATE_TABLE, S::DUPLICATE_OBJECT].contains(code) {
            LedgerError::Exists(m)
        } else if [
            S::LOCK_NOT_AVAILABLE,
            S::T_R_SERIALIZATION_FAILURE,
            S::T_R_DEADLOCK_DETECTED,
        ]
        .contains(code)
        {
            LedgerError::Busy(m)
        } else if code.code().starts_with("08")
            || code.code().starts_with("28")
            || code.code() == "3D000"
        {
            // connection exceptions, failed logins, a database that does not exist
            LedgerError::Connection(m)
        } else {
            LedgerError::Sql(m)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_is_seen_through_every_context_and_nothing_else_is_busy() {
        let e = LedgerError::Busy("database is locked".into())
            .context("migrating to schema version 2")
            .context("ledger /x");
        assert!(e.is_busy());
        assert_eq!(
            e.to_string(),
            "ledger /x: migrating to schema version 2: database is locked"
        );
        assert!(!LedgerError::Sql("no such table: runs".into()).is_busy());
        assert!(!LedgerError::Newer { found: 9, known: 4 }.is_busy());
    }

    #[test]
    fn sqlite_errors_are_classified_by_code() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("l.sqlite");
        let a = rusqlite::Connection::open(&path).unwrap();
        a.execute_batch(
            "CREATE TABLE t (k TEXT PRIMARY KEY); BEGIN IMMEDIATE; INSERT INTO t VALUES ('x')",
        )
        .unwrap();
        // a second writer while the first holds the write lock, without a busy wait
        let b = rusqlite::Connection::open(&path).unwrap();
        b.busy_timeout(std::time::Duration::ZERO).unwrap();
        let e = LedgerError::from(b.execute_batch("BEGIN IMMEDIATE").unwrap_err());
        assert!(e.is_busy(), "{e:?}");
        a.execute_batch("COMMIT").unwrap();
        let e = LedgerError::from(a.execute("INSERT INTO t VALUES ('x')", []).unwrap_err());
        assert!(matches!(e, LedgerError::Exists(_)), "{e:?}");
        let e = LedgerError::from(a.execute_batch("CREATE TABLE t (k TEXT)").unwrap_err());
        assert!(matches!(e, LedgerError::Exists(_)), "{e:?}");
        let e = LedgerError::from(a.execute_batch("SELECT * FROM absent").unwrap_err());
        assert!(
            matches!(e, LedgerError::Sql(ref m) if m.contains("no such table")),
            "{e:?}"
        );
        std::fs::write(d.path().join("not.sqlite"), vec![7u8; 4096]).unwrap();
        let c = rusqlite::Connection::open(d.path().join("not.sqlite")).unwrap();
        let e = LedgerError::from(c.execute_batch("SELECT * FROM sqlite_master").unwrap_err());
        assert!(matches!(e, LedgerError::Open(_)), "{e:?}");
    }
}
