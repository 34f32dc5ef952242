//! The two databases behind one small interface: SQLite (embedded, the default) and PostgreSQL (a `postgres://`
//! URL, for a team on several login nodes). SQL is written once, with `?` placeholders; PostgreSQL's `$n` are made
//! from them. Values are four kinds ([`Val`]); each side converts them to the column's own type.

use std::collections::HashMap;
use std::time::Duration;

use super::error::LedgerError;

/// One SQL value.
#[derive(Clone, Debug, PartialEq)]
pub enum Val {
    Int(i64),
    Real(f64),
    Text(String),
    Null,
}

impl Val {
    pub fn int(&self) -> Option<i64> {
        match self {
            Val::Int(i) => Some(*i),
            Val::Real(f) => Some(*f as i64),
            _ => None,
        }
    }
    pub fn real(&self) -> Option<f64> {
        match self {
            Val::Real(f) => Some(*f),
            Val::Int(i) => Some(*i as f64),
            _ => None,
        }
    }
    pub fn text(&self) -> &str {
        match self {
            Val::Text(s) => s,
            _ => "",
        }
    }
}

impl From<i64> for Val {
    fn from(v: i64) -> Self {
        Val::Int(v)
    }
}
impl From<&str> for Val {
    fn from(v: &str) -> Self {
        Val::Text(v.to_string())
    }
}
impl From<String> for Val {
    fn from(v: String) -> Self {
        Val::Text(v)
    }
}
impl From<Option<f64>> for Val {
    fn from(v: Option<f64>) -> Self {
        v.filter(|f| f.is_finite()).map_or(Val::Null, Val::Real)
    }
}
impl From<Option<String>> for Val {
    fn from(v: Option<String>) -> Self {
        v.map_or(Val::Null, Val::Text)
    }
}

pub type Row = Vec<Val>;

/// Which SQL the schema is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

/// What the ledger needs of a database.
pub trait Db {
    fn dialect(&self) -> Dialect;
    /// Statements without parameters, `;`-separated (the schema).
    fn batch(&mut self, sql: &str) -> Result<(), LedgerError>;
    fn exec(&mut self, sql: &str, params: &[Val]) -> Result<u64, LedgerError>;
    fn query(&mut self, sql: &str, params: &[Val]) -> Result<Vec<Row>, LedgerError>;
    /// A write transaction: SQLite takes the write lock at once (so two writers queue instead of deadlocking),
    /// PostgreSQL a plain one.
    fn begin(&mut self) -> Result<(), LedgerError>;
    fn commit(&mut self) -> Result<(), LedgerError>;
    fn rollback(&mut self);
}

/// The embedded ledger: one file, WAL, a writer waits up to 60 s for another.
pub struct Sqlite {
    conn: rusqlite::Connection,
}

impl Sqlite {
    pub fn open(path: &std::path::Path) -> Result<Self, LedgerError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| LedgerError::Open(format!("cannot create {}: {e}", dir.display())))?;
        }
        let conn =
            rusqlite::Connection::open(path).map_err(|e| LedgerError::Open(e.to_string()))?;
        conn.busy_timeout(Duration::from_secs(60))?;
        // WAL: readers never wait for a writer, a kill -9 mid-write loses the unfinished transaction only. WAL
        // needs shared memory between the processes, which a network file system (an NFS home on a login node)
        // does not give: there the rollback journal, which SQLite supports over such file systems
        let mode = if on_network_fs(path) { "DELETE" } else { "WAL" };
        conn.pragma_update(None, "journal_mode", mode)?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        // index pages of a year of nightly sweeps stay in memory while a sweep is written (64 MiB at most)
        conn.pragma_update(None, "cache_size", -65536)?;
        conn.set_prepared_statement_cache_capacity(64);
        Ok(Sqlite { conn })
    }
}

/// Whether the file's directory is on a network or cluster file system (NFS, SMB/CIFS, Lustre, GPFS, BeeGFS over
/// FUSE, …), from `statfs`'s magic number.
fn on_network_fs(path: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C string and a zeroed statfs the call fills
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return false;
    }
    const NETWORK: [i64; 8] = [
        0x6969,      // NFS
        0x517B,      // SMB
        0xFF53_4D42, // CIFS
        0xFE53_4D42, // SMB2
        0x0BD0_0BD0, // Lustre
        0x4750_4653, // GPFS
        0x6573_5546, // FUSE (BeeGFS, sshfs, …)
        0x0102_1997, // 9p (v9fs)
    ];
    NETWORK.contains(&(st.f_type as i64))
}

impl rusqlite::ToSql for Val {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(ToSqlOutput::Borrowed(match self {
            Val::Int(i) => ValueRef::Integer(*i),
            Val::Real(f) => ValueRef::Real(*f),
            Val::Text(s) => ValueRef::Text(s.as_bytes()),
            Val::Null => ValueRef::Null,
        }))
    }
}

impl Db for Sqlite {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }
    fn batch(&mut self, sql: &str) -> Result<(), LedgerError> {
        Ok(self.conn.execute_batch(sql)?)
    }
    fn exec(&mut self, sql: &str, params: &[Val]) -> Result<u64, LedgerError> {
        let mut st = self.conn.prepare_cached(sql)?;
        Ok(st.execute(rusqlite::params_from_iter(params))? as u64)
    }
    fn query(&mut self, sql: &str, params: &[Val]) -> Result<Vec<Row>, LedgerError> {
        let mut st = self.conn.prepare_cached(sql)?;
        let n = st.column_count();
        let rows = st.query_map(rusqlite::params_from_iter(params), |r| {
            (0..n)
                .map(|i| {
                    use rusqlite::types::ValueRef;
                    Ok(match r.get_ref(i)? {
                        ValueRef::Integer(i) => Val::Int(i),
                        ValueRef::Real(f) => Val::Real(f),
                        ValueRef::Text(t) => Val::Text(String::from_utf8_lossy(t).into_owned()),
                        ValueRef::Blob(_) | ValueRef::Null => Val::Null,
                    })
                })
                .collect::<rusqlite::Result<Row>>()
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<Row>>>()?)
    }
    fn begin(&mut self) -> Result<(), LedgerError> {
        self.batch("BEGIN IMMEDIATE")
    }
    fn commit(&mut self) -> Result<(), LedgerError> {
        self.batch("COMMIT")
    }
    fn rollback(&mut self) {
        let _ = self.batch("ROLLBACK");
    }
}

/// A PostgreSQL server. The client runs its own runtime: every call is made off the caller's (see
/// [`super::off_runtime`]).
pub struct Postgres {
    client: postgres::Client,
    statements: HashMap<String, postgres::Statement>,
}

impl Postgres {
    /// Connects to a `postgres://` URL; a password may come from `PGPASSWORD` rather than the URL, so none needs
    /// to be written anywhere. TLS is not offered: use a local server, a socket or a tunnel.
    pub fn connect(url: &str) -> Result<Self, LedgerError> {
        let mut config: postgres::Config = url
            .parse()
            .map_err(|e| LedgerError::Open(format!("not a PostgreSQL URL ({e})")))?;
        if config.get_password().is_none() {
            if let Ok(p) = std::env::var("PGPASSWORD") {
                config.password(p);
            }
        }
        config.connect_timeout(Duration::from_secs(10));
        config.application_name("cloudai");
        let client = config.connect(postgres::NoTls)?;
        Ok(Postgres {
            client,
            statements: HashMap::new(),
        })
    }

    fn statement(&mut self, sql: &str) -> Result<postgres::Statement, LedgerError> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        let st = self.client.prepare(&numbered(sql))?;
        self.statements.insert(sql.to_string(), st.clone());
        Ok(st)
    }
}

/// `?` → `$1`, `$2`, … (the SQL is ours: no `?` inside a literal).
fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut n = 0;
    for c in sql.chars() {
        if c == '?' {
            n += 1;
            out.push_str(&format!("${n}"));
        } else {
            out.push(c);
        }
    }
    out
}

impl postgres::types::ToSql for Val {
    fn to_sql(
        &self,
        ty: &postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> Result<postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        use postgres::types::{IsNull, Type};
        match (self, ty) {
            (Val::Null, _) => Ok(IsNull::Yes),
            (Val::Int(i), &Type::INT8) => i.to_sql(ty, out),
            (Val::Int(i), &Type::INT4) => (*i as i32).to_sql(ty, out),
            (Val::Int(i), &Type::INT2) => (*i as i16).to_sql(ty, out),
            (Val::Int(i), &Type::FLOAT8) => (*i as f64).to_sql(ty, out),
            (Val::Real(f), &Type::FLOAT8) => f.to_sql(ty, out),
            (Val::Real(f), &Type::FLOAT4) => (*f as f32).to_sql(ty, out),
            (Val::Real(f), &Type::INT8) => (*f as i64).to_sql(ty, out),
            (Val::Text(s), _) => s.as_str().to_sql(ty, out),
            (v, t) => Err(format!("cannot store {v:?} in a {t} column").into()),
        }
    }
    fn accepts(_: &postgres::types::Type) -> bool {
        true
    }
    postgres::types::to_sql_checked!();
}

fn pg_value(row: &postgres::Row, i: usize) -> Val {
    use postgres::types::Type;
    let ty = row.columns()[i].type_().clone();
    let v = match ty {
        Type::INT8 => row.get::<_, Option<i64>>(i).map(Val::Int),
        Type::INT4 => row.get::<_, Option<i32>>(i).map(|v| Val::Int(v.into())),
        Type::INT2 => row.get::<_, Option<i16>>(i).map(|v| Val::Int(v.into())),
        Type::FLOAT8 => row.get::<_, Option<f64>>(i).map(Val::Real),
        Type::FLOAT4 => row.get::<_, Option<f32>>(i).map(|v| Val::Real(v.into())),
        Type::BOOL => row.get::<_, Option<bool>>(i).map(|v| Val::Int(v.into())),
        _ => row
            .try_get::<_, Option<String>>(i)
            .ok()
            .flatten()
            .map(Val::Text),
    };
    v.unwrap_or(Val::Null)
}

impl Db for Postgres {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }
    fn batch(&mut self, sql: &str) -> Result<(), LedgerError> {
        Ok(self.client.batch_execute(sql)?)
    }
    fn exec(&mut self, sql: &str, params: &[Val]) -> Result<u64, LedgerError> {
        let st = self.statement(sql)?;
        let p: Vec<&(dyn postgres::types::ToSql + Sync)> = params.iter().map(|v| v as _).collect();
        Ok(self.client.execute(&st, &p)?)
    }
    fn query(&mut self, sql: &str, params: &[Val]) -> Result<Vec<Row>, LedgerError> {
        let st = self.statement(sql)?;
        let p: Vec<&(dyn postgres::types::ToSql + Sync)> = params.iter().map(|v| v as _).collect();
        let rows = self.client.query(&st, &p)?;
        Ok(rows
            .iter()
            .map(|r| (0..r.len()).map(|i| pg_value(r, i)).collect())
            .collect())
    }
    fn begin(&mut self) -> Result<(), LedgerError> {
        self.batch("BEGIN")
    }
    fn commit(&mut self) -> Result<(), LedgerError> {
        self.batch("COMMIT")
    }
    fn rollback(&mut self) {
        let _ = self.batch("ROLLBACK");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_numbered_for_postgres() {
        assert_eq!(
            numbered("INSERT INTO t (a, b) VALUES (?, ?)"),
            "INSERT INTO t (a, b) VALUES ($1, $2)"
        );
        assert_eq!(numbered("SELECT 1"), "SELECT 1");
    }

    #[test]
    fn sqlite_round_trips_every_kind() {
        let d = tempfile::tempdir().unwrap();
        let mut db = Sqlite::open(&d.path().join("a/b.sqlite")).unwrap();
        db.batch("CREATE TABLE t (i BIGINT, r DOUBLE PRECISION, s TEXT, n TEXT)")
            .unwrap();
        db.exec(
            "INSERT INTO t VALUES (?, ?, ?, ?)",
            &[Val::Int(7), Val::Real(1.5), "x".into(), Val::Null],
        )
        .unwrap();
        let rows = db.query("SELECT i, r, s, n FROM t", &[]).unwrap();
        assert_eq!(
            rows,
            vec![vec![Val::Int(7), Val::Real(1.5), "x".into(), Val::Null]]
        );
    }
}
