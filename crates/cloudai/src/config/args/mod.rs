//! `cmd_args` of a test template: a declarative schema per template drives validation, defaults, the order in
//! which fields are dumped to `test-run.toml`, and the order of command-line flags.

use indexmap::IndexMap;

use super::node::{Kind, Node};
use crate::util::pytoml::py_float;

#[derive(Clone, Debug, PartialEq)]
pub enum ArgValue {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    List(Vec<ArgValue>),
    Table(IndexMap<String, ArgValue>),
    /// A path (pydantic's `Path` field): its text on command lines, `PosixPath('…')` in `test-run.toml`.
    Path(String),
}

impl ArgValue {
    /// The value as Python's `str()` prints it, which is what CloudAI puts on command lines.
    pub(crate) fn py_str(&self) -> String {
        match self {
            ArgValue::Str(s) | ArgValue::Path(s) => s.clone(),
            ArgValue::Int(i) => i.to_string(),
            ArgValue::Float(f) => py_float(*f),
            ArgValue::Bool(b) => if *b { "True" } else { "False" }.to_string(),
            ArgValue::List(l) => {
                let inner: Vec<String> = l.iter().map(ArgValue::py_repr).collect();
                format!("[{}]", inner.join(", "))
            }
            ArgValue::Table(t) => {
                let inner: Vec<String> = t
                    .iter()
                    .map(|(k, v)| format!("'{k}': {}", v.py_repr()))
                    .collect();
                format!("{{{}}}", inner.join(", "))
            }
        }
    }

    pub(crate) fn py_repr(&self) -> String {
        match self {
            ArgValue::Str(s) => format!("'{s}'"),
            ArgValue::Path(p) => format!("PosixPath('{p}')"),
            other => other.py_str(),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            ArgValue::Str(s) | ArgValue::Path(s) => Some(s),
            _ => None,
        }
    }

    pub(crate) fn as_int(&self) -> Option<i64> {
        match self {
            ArgValue::Int(i) => Some(*i),
            _ => None,
        }
    }

    pub(crate) fn as_float(&self) -> Option<f64> {
        match self {
            ArgValue::Float(f) => Some(*f),
            ArgValue::Int(i) => Some(*i as f64),
            _ => None,
        }
    }

    /// A list anywhere makes the test a design-space-exploration sweep.
    pub(crate) fn is_sweep(&self) -> bool {
        match self {
            ArgValue::List(_) => true,
            ArgValue::Table(t) => t.values().any(ArgValue::is_sweep),
            _ => false,
        }
    }

    /// Untyped conversion, for cmd_args keys that no schema declares.
    pub(crate) fn from_node(node: &Node) -> Option<ArgValue> {
        Some(match &node.kind {
            Kind::Str(s) | Kind::Datetime(s) => ArgValue::Str(s.clone()),
            Kind::Int(i) => ArgValue::Int(*i),
            Kind::Float(f) => ArgValue::Float(*f),
            Kind::Bool(b) => ArgValue::Bool(*b),
            Kind::Array(a) => ArgValue::List(a.iter().filter_map(ArgValue::from_node).collect()),
            Kind::Table(t) => ArgValue::Table(
                t.entries
                    .iter()
                    .filter_map(|(k, e)| Some((k.clone(), ArgValue::from_node(&e.node)?)))
                    .collect(),
            ),
        })
    }
}

#[derive(Clone, Copy, Debug)]
pub enum ArgType {
    Str,
    Int,
    Float,
    Bool,
    Enum(&'static [&'static str]),
    /// An integer or a float, kept as written (pydantic's `Union[int, float]`).
    Num,
    /// A table of anything (pydantic's `dict[str, Any]`), passed through as written.
    Dict,
    /// A nested model: its own fields, and whether it takes undeclared keys (pydantic's `extra="allow"`).
    Model(&'static [ArgSpec], bool),
    /// A list of strings (never a sweep).
    StrList,
    /// A string, or an integer kept as its text (pydantic's `str` field that converts integers first).
    Text,
    /// A path, normalized as Python's `PurePosixPath` writes it (`a//b/./c/` is `a/b/c`).
    Path,
    /// A string, or a table of strings (pydantic's `str | dict[str, str]`).
    StrOrDict,
    /// A list of tables of one model (pydantic's `list[Model]`): never a sweep.
    ModelList(&'static [ArgSpec], bool),
}

#[derive(Clone, Copy, Debug)]
pub enum ArgDefault {
    Required,
    Unset,
    Str(&'static str),
    Int(i64),
    Float(f64),
    Bool(bool),
    /// An empty table, or for a [`ArgType::Model`] its fields' defaults (pydantic's `default_factory`).
    Table,
    /// An empty list.
    List,
}

#[derive(Clone, Copy, Debug)]
pub struct ArgSpec {
    pub name: &'static str,
    pub ty: ArgType,
    pub default: ArgDefault,
    /// Whether a list (a DSE sweep over values) is accepted.
    pub sweep: bool,
    /// The smallest integer accepted (each value of a sweep too).
    pub min: Option<i64>,
    /// A message size as the benchmarks read it: whole bytes with an optional K, M or G (`4096`, `32M`, `8G`).
    pub size: bool,
    /// Another name the field is read under (pydantic's validation alias: `num-nodes` for `num_nodes`); it is
    /// stored and dumped under its own name.
    pub alias: Option<&'static str>,
}

impl ArgSpec {
    pub const fn new(name: &'static str, ty: ArgType, default: ArgDefault) -> Self {
        Self {
            name,
            ty,
            default,
            sweep: true,
            min: None,
            size: false,
            alias: None,
        }
    }
    /// The field is read under `alias` too.
    pub const fn alias(mut self, alias: &'static str) -> Self {
        self.alias = Some(alias);
        self
    }
    pub const fn single(mut self) -> Self {
        self.sweep = false;
        self
    }
    /// Integers below `min` are refused.
    pub const fn at_least(mut self, min: i64) -> Self {
        self.min = Some(min);
        self
    }
    /// A message size (`32M`): other text is refused (nccl-tests reads `4X` as 4 bytes).
    pub const fn size(mut self) -> Self {
        self.size = true;
        self
    }
}

/// A path as Python's `PurePosixPath` writes it: repeated and trailing slashes and `.` parts dropped (`..` kept),
/// `.` for an empty path.
pub(crate) fn pure_path(s: &str) -> String {
    let parts: Vec<&str> = s
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    let root = if s.starts_with("//") && !s.starts_with("///") {
        "//"
    } else if s.starts_with('/') {
        "/"
    } else {
        ""
    };
    let body = parts.join("/");
    if root.is_empty() && body.is_empty() {
        ".".into()
    } else {
        format!("{root}{body}")
    }
}

/// Whether `s` is a size the benchmarks read whole: digits, then at most one of K, M, G (either case), then at
/// most a B (`32M`, `1GB`, `4096`).
pub(crate) fn is_size(s: &str) -> bool {
    let s = s.strip_suffix(['B', 'b']).unwrap_or(s);
    let digits = s.strip_suffix(['K', 'k', 'M', 'm', 'G', 'g']).unwrap_or(s);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// Validated `cmd_args`: declared fields in schema order (unset optional ones absent), then extra keys in TOML
/// order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CmdArgs {
    pub values: IndexMap<String, ArgValue>,
    /// Keys whose list is one value (a declared list of strings), never a sweep.
    pub fixed_lists: Vec<String>,
}

impl CmdArgs {
    pub fn get(&self, key: &str) -> Option<&ArgValue> {
        self.values.get(key)
    }
    pub fn str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(ArgValue::as_str)
    }

    /// The lists (DSE sweeps) under their dotted paths (`data.micro_batch_size`), in field order, leaving out those a
    /// `dse_excluded_args` entry covers (`cmd_args.<path>` itself or a table above it), as CloudAI flattens them.
    pub fn sweeps(&self, excluded: &[String]) -> Vec<(String, Vec<ArgValue>)> {
        leaves(&self.values)
            .into_iter()
            .filter_map(|(path, v)| match v {
                ArgValue::List(l) => Some((path, l)),
                _ => None,
            })
            .filter(|(path, _)| {
                let full = format!("cmd_args.{path}");
                !excluded
                    .iter()
                    .any(|e| full == *e || full.starts_with(&format!("{e}.")))
                    && !self.fixed_lists.contains(path)
            })
            .collect()
    }

    /// The value at a dotted path as CloudAI's command lines write it (Python's `str()`), empty when unset.
    pub(crate) fn text_at(&self, path: &str) -> String {
        self.at(path).map_or(String::new(), ArgValue::py_str)
    }

    /// The integer at a dotted path.
    pub(crate) fn int_at(&self, path: &str) -> Option<i64> {
        self.at(path).and_then(ArgValue::as_int)
    }

    /// A value by its dotted path (`trainer.strategy.tensor_model_parallel_size`).
    /// The table at a dotted path, to change in place (`dynamo.decode_worker.args`).
    pub(crate) fn table_at_mut(&mut self, path: &str) -> Option<&mut IndexMap<String, ArgValue>> {
        table_at_mut(&mut self.values, path)
    }

    pub fn at(&self, path: &str) -> Option<&ArgValue> {
        let mut parts = path.split('.');
        let mut v = self.values.get(parts.next()?)?;
        for p in parts {
            match v {
                ArgValue::Table(t) => v = t.get(p)?,
                _ => return None,
            }
        }
        Some(v)
    }
}

/// The table at a dotted path under `values`, to change in place.
pub(crate) fn table_at_mut<'a>(
    values: &'a mut IndexMap<String, ArgValue>,
    path: &str,
) -> Option<&'a mut IndexMap<String, ArgValue>> {
    let mut t = values;
    for part in path.split('.') {
        match t.get_mut(part) {
            Some(ArgValue::Table(sub)) => t = sub,
            _ => return None,
        }
    }
    Some(t)
}

mod decoding;
pub(crate) use decoding::leaves;
pub use decoding::{declared, decode};
