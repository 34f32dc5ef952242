//! A TOML document as a tree of values that remember where they came from.
//!
//! Every config error must name file, line and column, and overrides merged from a scenario keep pointing at the
//! scenario file while inherited values keep pointing at the test file. So we convert `toml_edit`'s document once
//! into this small owned tree, with a location on every key and value.

use std::path::Path;
use std::sync::Arc;

use indexmap::IndexMap;
use toml_edit::{Item, Value};

use super::error::ConfigError;
pub use super::error::Loc;

#[derive(Clone, Debug)]
pub struct Node {
    pub kind: Kind,
    pub loc: Loc,
}

#[derive(Clone, Debug)]
pub enum Kind {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    Datetime(String),
    Array(Vec<Node>),
    Table(Table),
}

#[derive(Clone, Debug, Default)]
pub struct Table {
    pub entries: IndexMap<String, Entry>,
}

#[derive(Clone, Debug)]
pub struct Entry {
    pub key_loc: Loc,
    pub node: Node,
}

impl Table {
    pub fn get(&self, key: &str) -> Option<&Node> {
        self.entries.get(key).map(|e| &e.node)
    }
}

impl Kind {
    /// How a value is named in "expected X, found Y" messages.
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Kind::Str(_) => "a string",
            Kind::Int(_) => "an integer",
            Kind::Float(_) => "a float",
            Kind::Bool(_) => "a boolean",
            Kind::Datetime(_) => "a datetime",
            Kind::Array(_) => "an array",
            Kind::Table(_) => "a table",
        }
    }
}

impl Node {
    pub(crate) fn as_table(&self) -> Option<&Table> {
        match &self.kind {
            Kind::Table(t) => Some(t),
            _ => None,
        }
    }

    /// Short rendering of the value for error messages.
    pub fn show(&self) -> String {
        match &self.kind {
            Kind::Str(s) => format!("{s:?}"),
            Kind::Int(i) => i.to_string(),
            Kind::Float(f) => f.to_string(),
            Kind::Bool(b) => b.to_string(),
            Kind::Datetime(d) => d.clone(),
            Kind::Array(a) => {
                let inner: Vec<String> = a.iter().map(Node::show).collect();
                format!("[{}]", inner.join(", "))
            }
            Kind::Table(_) => "{...}".to_string(),
        }
    }

    /// Deep merge: tables merge key by key, everything else is replaced by `over`.
    pub fn merge(&mut self, over: &Node) {
        match (&mut self.kind, &over.kind) {
            (Kind::Table(base), Kind::Table(top)) => {
                for (k, e) in &top.entries {
                    match base.entries.get_mut(k) {
                        Some(b) => b.node.merge(&e.node),
                        None => {
                            base.entries.insert(k.clone(), e.clone());
                        }
                    }
                }
            }
            _ => *self = over.clone(),
        }
    }
}

/// Maps byte offsets to 1-based line and column (in characters).
struct LineIndex<'a> {
    text: &'a str,
    starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    fn new(text: &'a str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Self { text, starts }
    }

    fn line_col(&self, offset: usize) -> (u32, u32) {
        let offset = offset.min(self.text.len());
        let line = self.starts.partition_point(|&s| s <= offset) - 1;
        let start = self.starts[line];
        let col = self
            .text
            .get(start..offset)
            .map_or(offset - start, |s| s.chars().count());
        (line as u32 + 1, col as u32 + 1)
    }
}

struct Converter<'a> {
    file: Arc<Path>,
    index: LineIndex<'a>,
}

impl Converter<'_> {
    fn loc(&self, span: Option<std::ops::Range<usize>>, fallback: &Loc) -> Loc {
        match span {
            Some(r) => {
                let (line, col) = self.index.line_col(r.start);
                Loc {
                    file: self.file.clone(),
                    line,
                    col,
                }
            }
            None => fallback.clone(),
        }
    }

    fn table<'t>(
        &self,
        iter: impl Iterator<Item = (&'t toml_edit::Key, &'t Item)>,
        loc: Loc,
    ) -> Node {
        let mut t = Table::default();
        for (key, item) in iter {
            let key_loc = self.loc(key.span(), &loc);
            if let Some(node) = self.item(item, &key_loc) {
                t.entries
                    .insert(key.get().to_string(), Entry { key_loc, node });
            }
        }
        Node {
            kind: Kind::Table(t),
            loc,
        }
    }

    fn item(&self, item: &Item, fallback: &Loc) -> Option<Node> {
        match item {
            Item::None => None,
            Item::Value(v) => Some(self.value(v, fallback)),
            Item::Table(t) => {
                let loc = self.loc(t.span(), fallback);
                Some(self.table(t.iter().map(|(k, _)| t.get_key_value(k).unwrap()), loc))
            }
            Item::ArrayOfTables(a) => {
                let loc = self.loc(a.span(), fallback);
                let items = a
                    .iter()
                    .map(|t| {
                        let l = self.loc(t.span(), &loc);
                        self.table(t.iter().map(|(k, _)| t.get_key_value(k).unwrap()), l)
                    })
                    .collect();
                Some(Node {
                    kind: Kind::Array(items),
                    loc,
                })
            }
        }
    }

    fn value(&self, v: &Value, fallback: &Loc) -> Node {
        let loc = self.loc(v.span(), fallback);
        let kind = match v {
            Value::String(s) => Kind::Str(s.value().clone()),
            Value::Integer(i) => Kind::Int(*i.value()),
            Value::Float(f) => Kind::Float(*f.value()),
            Value::Boolean(b) => Kind::Bool(*b.value()),
            Value::Datetime(d) => Kind::Datetime(d.value().to_string()),
            Value::Array(a) => Kind::Array(a.iter().map(|x| self.value(x, &loc)).collect()),
            Value::InlineTable(t) => {
                return self.table(t.iter().map(|(k, _)| t.get_key_value(k).unwrap()), loc)
            }
        };
        Node { kind, loc }
    }
}

/// Parses TOML text into a located tree. `what` names the schema for the error ("system config", "test spec" …).
pub fn parse(path: &Path, text: &str, what: &str) -> Result<Node, ConfigError> {
    let file: Arc<Path> = Arc::from(path);
    let index = LineIndex::new(text);
    let doc = toml_edit::Document::parse(text).map_err(|e| {
        let (line, col) = e.span().map_or((1, 1), |r| index.line_col(r.start));
        ConfigError::new(
            Loc {
                file: file.clone(),
                line,
                col,
            },
            "",
            format!("not valid TOML ({what}): {}", first_line(e.message())),
        )
        .with_hint("check quoting, brackets and that no key is written twice")
    })?;
    let conv = Converter {
        file: file.clone(),
        index,
    };
    let root_loc = Loc {
        file,
        line: 1,
        col: 1,
    };
    let t = doc.as_table();
    Ok(conv.table(t.iter().map(|(k, _)| t.get_key_value(k).unwrap()), root_loc))
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s).trim()
}

/// The largest config file read (CloudAI's are a few kB; a device or a runaway file must not be slurped).
pub(crate) const MAX_CONFIG_BYTES: u64 = 4 << 20;

/// Reads and parses a file; a missing or unreadable file is a config error too, and so is anything that is not
/// a regular file (a FIFO, `/dev/zero`) or is larger than [`MAX_CONFIG_BYTES`].
pub fn load(path: &Path, what: &str) -> Result<Node, ConfigError> {
    if let Ok(m) = std::fs::metadata(path) {
        if !m.is_file() && !m.is_dir() {
            return Err(ConfigError::file(
                path,
                format!("{what}: not a regular file (a device, FIFO or socket)"),
            )
            .with_hint("give the path of a .toml file"));
        }
        if m.len() > MAX_CONFIG_BYTES {
            return Err(ConfigError::file(
                path,
                format!(
                    "{what}: {} bytes, more than the {} MiB a config file may have",
                    m.len(),
                    MAX_CONFIG_BYTES >> 20
                ),
            )
            .with_hint("is this the right file?"));
        }
    }
    let bytes = std::fs::read(path).map_err(|e| {
        let (msg, hint) = if path.is_dir() {
            (
                format!("{what}: is a directory; expected a TOML file"),
                "give the path of a .toml file inside it",
            )
        } else {
            (
                format!("cannot read {what}: {e}"),
                "check the path and its permissions",
            )
        };
        ConfigError::file(path, msg).with_hint(hint)
    })?;
    let text = String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let before = &e.as_bytes()[..at];
        let line = before.iter().filter(|b| **b == b'\n').count() + 1;
        let col = at - before.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1) + 1;
        ConfigError::new(
            Loc {
                file: Arc::from(path),
                line: line as u32,
                col: col as u32,
            },
            "",
            format!(
                "not valid UTF-8 ({what}): byte {at} (0x{:02x}) cannot start or continue a character",
                e.as_bytes()[at]
            ),
        )
        .with_hint("save the file as UTF-8")
    })?;
    parse(path, &text, what)
}
