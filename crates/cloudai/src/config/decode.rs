//! Typed reading of a located TOML tree with pydantic-compatible coercion ("8" is an int, "yes" a bool) and
//! errors that carry file, line:column and the dotted field path. Errors are collected, not returned early, so one
//! run of `verify-configs` shows every problem in a file.

use indexmap::IndexMap;

use super::error::{did_you_mean, ConfigError, ConfigErrors};
use super::node::{Kind, Loc, Node, Table};

pub struct Ctx {
    pub errors: ConfigErrors,
}

impl Default for Ctx {
    fn default() -> Self {
        Self::new()
    }
}

impl Ctx {
    pub fn new() -> Self {
        Self {
            errors: ConfigErrors::default(),
        }
    }

    pub fn err(&mut self, loc: &Loc, field: &str, msg: impl Into<String>, hint: Option<String>) {
        self.errors
            .push(ConfigError::new(loc.clone(), field, msg).with_hint_opt(hint));
    }

    pub(crate) fn type_err(&mut self, node: &Node, field: &str, expected: &str) {
        let hint = match (&node.kind, expected) {
            (Kind::Int(_) | Kind::Float(_) | Kind::Bool(_), "a string") => {
                Some(format!("quote the value: \"{}\"", node.show()))
            }
            (Kind::Str(_), "an integer") => Some("write a whole number, like 8".to_string()),
            _ => None,
        };
        self.err(
            &node.loc,
            field,
            format!(
                "expected {expected}, found {} {}",
                node.kind.type_name(),
                node.show()
            ),
            hint,
        );
    }

    /// A secret field (Run:ai `app_secret`): a wrong type is reported without echoing what was written.
    pub fn secret(&mut self, v: &View, key: &str) -> Option<String> {
        let node = v.required(self, key)?;
        match &node.kind {
            Kind::Str(s) => Some(s.clone()),
            other => {
                self.err(
                    &node.loc,
                    &v.field(key),
                    format!(
                        "expected a string, found {} (value not shown: it is a secret)",
                        other.type_name()
                    ),
                    Some("quote the value (RUNAI_APP_SECRET, when set, is used instead)".into()),
                );
                None
            }
        }
    }

    pub fn table<'a>(&mut self, node: &'a Node, path: &str) -> Option<View<'a>> {
        match &node.kind {
            Kind::Table(t) => Some(View {
                table: t,
                loc: node.loc.clone(),
                path: path.to_string(),
            }),
            _ => {
                self.type_err(node, path, "a table");
                None
            }
        }
    }

    pub fn finish<T>(self, value: T) -> Result<T, ConfigErrors> {
        self.errors.into_result(value)
    }
}

pub fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// The longest string value: values become command-line arguments, and Linux refuses one over 128 KiB
/// (MAX_ARG_STRLEN).
pub(crate) const MAX_VALUE_BYTES: usize = 128 << 10;

/// Values end up in generated shell scripts (ids, names, env values, images, arguments, raw pass-through fields
/// like `extra_srun_args`): a newline or another control character there would split or hide a command, so it
/// is an error anywhere in a config file (tab excepted; `description` is free text; BashCmd's `cmd` is a script
/// and may span lines, as CloudAI runs it).
/// Fields whose value may span lines: the job writes them whole, quoted.
const MULTILINE: [&str; 2] = ["cmd_args.cmd", "cmd_args.aiperf_accuracy.cli"];

pub(crate) fn reject_control_chars(ctx: &mut Ctx, node: &Node, path: &str) {
    match &node.kind {
        Kind::Str(s) if s.len() > MAX_VALUE_BYTES => ctx.err(
            &node.loc,
            path,
            format!(
                "is {} bytes long; the kernel refuses a command-line argument over {} KiB",
                s.len(),
                MAX_VALUE_BYTES >> 10
            ),
            Some("put long scripts or data in a file and name the file here".into()),
        ),
        Kind::Str(s) => {
            // values the job writes whole, quoted (BashCmd's script, AI Dynamo's accuracy command line)
            let script = MULTILINE
                .iter()
                .any(|m| path == *m || path.ends_with(&format!(".{m}")));
            if let Some(c) = s
                .chars()
                .find(|c| c.is_control() && *c != '\t' && !(script && *c == '\n'))
            {
                ctx.err(
                    &node.loc,
                    path,
                    format!(
                        "contains the control character {:?}; values are written into shell scripts, where it \
                         would split or hide a command",
                        c
                    ),
                    Some("write the value on one line without control characters (use a file or a script \
                          for multi-line commands)"
                        .into()),
                );
            }
        }
        Kind::Array(items) => {
            for (i, n) in items.iter().enumerate() {
                reject_control_chars(ctx, n, &join(path, &i.to_string()));
            }
        }
        Kind::Table(t) => {
            for (k, e) in &t.entries {
                let p = join(path, k);
                if k.chars().any(char::is_control) {
                    ctx.err(&e.key_loc, &p, "the key contains a control character", None);
                }
                if k != "description" {
                    reject_control_chars(ctx, &e.node, &p);
                }
            }
        }
        _ => {}
    }
}

/// An env map's key is written as `export NAME=…`: it must be a valid variable name.
pub(crate) fn env_name(ctx: &mut Ctx, loc: &Loc, field: &str, k: &str) -> bool {
    let ok = crate::util::shell::is_env_name(k);
    if !ok {
        ctx.err(
            loc,
            field,
            format!("{k:?} is not an environment variable name"),
            Some("use letters, digits and '_', not starting with a digit (it is written as `export NAME=…`)".into()),
        );
    }
    ok
}

// ---- scalar coercions (pydantic v2 lax mode) ----

pub fn as_str(ctx: &mut Ctx, node: &Node, field: &str) -> Option<String> {
    match &node.kind {
        Kind::Str(s) => Some(s.clone()),
        _ => {
            ctx.type_err(node, field, "a string");
            None
        }
    }
}

pub(crate) fn as_int(ctx: &mut Ctx, node: &Node, field: &str) -> Option<i64> {
    let v = match &node.kind {
        Kind::Int(i) => Some(*i),
        Kind::Bool(b) => Some(i64::from(*b)),
        Kind::Float(f) if f.fract() == 0.0 && f.is_finite() => Some(*f as i64),
        Kind::Str(s) => s.trim().parse::<i64>().ok(),
        _ => None,
    };
    if v.is_none() {
        ctx.type_err(node, field, "an integer");
    }
    v
}

pub(crate) fn as_float(ctx: &mut Ctx, node: &Node, field: &str) -> Option<f64> {
    let v = match &node.kind {
        Kind::Int(i) => Some(*i as f64),
        Kind::Float(f) => Some(*f),
        Kind::Str(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    if v.is_none() {
        ctx.type_err(node, field, "a number");
    }
    v
}

pub fn as_bool(ctx: &mut Ctx, node: &Node, field: &str) -> Option<bool> {
    let v = match &node.kind {
        Kind::Bool(b) => Some(*b),
        Kind::Int(0) => Some(false),
        Kind::Int(1) => Some(true),
        Kind::Str(s) => match s.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" | "on" | "y" | "t" | "1" => Some(true),
            "false" | "no" | "off" | "n" | "f" | "0" => Some(false),
            _ => None,
        },
        _ => None,
    };
    if v.is_none() {
        ctx.type_err(node, field, "a boolean");
    }
    v
}

pub(crate) fn as_str_list(ctx: &mut Ctx, node: &Node, field: &str) -> Option<Vec<String>> {
    match &node.kind {
        Kind::Array(items) => {
            let mut out = Vec::new();
            let mut ok = true;
            for (i, it) in items.iter().enumerate() {
                match as_str(ctx, it, &join(field, &i.to_string())) {
                    Some(s) => out.push(s),
                    None => ok = false,
                }
            }
            ok.then_some(out)
        }
        _ => {
            ctx.type_err(node, field, "an array of strings");
            None
        }
    }
}

/// One TOML table being read. Callers ask for each field, then `done` reports unknown keys.
pub struct View<'a> {
    pub table: &'a Table,
    pub loc: Loc,
    pub path: String,
}

impl<'a> View<'a> {
    pub fn field(&self, key: &str) -> String {
        join(&self.path, key)
    }

    pub fn get(&self, key: &str) -> Option<&'a Node> {
        self.table.get(key)
    }

    pub fn has(&self, key: &str) -> bool {
        self.table.entries.contains_key(key)
    }

    pub fn required(&self, ctx: &mut Ctx, key: &str) -> Option<&'a Node> {
        let n = self.get(key);
        if n.is_none() {
            ctx.err(
                &self.loc,
                &self.field(key),
                "required field is missing",
                Some(format!("add `{key} = ...` to this table")),
            );
        }
        n
    }

    pub(crate) fn req_str(&self, ctx: &mut Ctx, key: &str) -> Option<String> {
        self.required(ctx, key)
            .and_then(|n| as_str(ctx, n, &self.field(key)))
    }

    pub(crate) fn opt_str(&self, ctx: &mut Ctx, key: &str) -> Option<String> {
        self.get(key).and_then(|n| as_str(ctx, n, &self.field(key)))
    }

    pub(crate) fn opt_int(&self, ctx: &mut Ctx, key: &str) -> Option<i64> {
        self.get(key).and_then(|n| as_int(ctx, n, &self.field(key)))
    }

    pub(crate) fn opt_float(&self, ctx: &mut Ctx, key: &str) -> Option<f64> {
        self.get(key)
            .and_then(|n| as_float(ctx, n, &self.field(key)))
    }

    pub(crate) fn opt_bool(&self, ctx: &mut Ctx, key: &str) -> Option<bool> {
        self.get(key)
            .and_then(|n| as_bool(ctx, n, &self.field(key)))
    }

    /// A duration in CloudAI's time-limit syntax (`30m`, `2h`, `HH:MM:SS`, …), in seconds.
    pub(crate) fn duration(&self, ctx: &mut Ctx, key: &str) -> Option<u64> {
        let s = self.opt_str(ctx, key)?;
        match super::time_limit::parse(&s) {
            Ok(secs) => Some(secs),
            Err(msg) => {
                let loc = self.get(key)?.loc.clone();
                ctx.err(
                    &loc,
                    &self.field(key),
                    msg,
                    Some(super::time_limit::FORMS_HINT.into()),
                );
                None
            }
        }
    }

    /// A number in `lo..=hi` (a whole one when `whole`), or an error naming the range; `None` when absent.
    pub(crate) fn float_in(
        &self,
        ctx: &mut Ctx,
        key: &str,
        lo: f64,
        hi: f64,
        whole: bool,
    ) -> Option<f64> {
        let n = self.get(key)?;
        let x = if whole {
            as_int(ctx, n, &self.field(key))? as f64
        } else {
            as_float(ctx, n, &self.field(key))?
        };
        if x.is_finite() && x >= lo && x <= hi {
            return Some(x);
        }
        let range = if whole {
            format!("{lo} to {hi}")
        } else {
            format!("a number from {lo} to {hi}")
        };
        ctx.err(
            &n.loc,
            &self.field(key),
            format!("must be {range}, found {x}"),
            None,
        );
        None
    }

    /// Where `cmd_args.<key>` stands in the file, or the table's own place when it is not written there.
    pub(crate) fn cmd_arg_loc(&self, key: &str) -> Loc {
        self.get("cmd_args")
            .and_then(|n| n.as_table())
            .and_then(|t| t.entries.get(key))
            .map_or_else(|| self.loc.clone(), |e| e.node.loc.clone())
    }

    /// A non-negative integer with a default, at most `max`.
    pub(crate) fn count_max(&self, ctx: &mut Ctx, key: &str, default: u64, max: u64) -> u64 {
        let v = self.count(ctx, key, default);
        if v > max {
            if let Some(n) = self.get(key) {
                ctx.err(
                    &n.loc,
                    &self.field(key),
                    format!("must be 0 to {max}, found {v}"),
                    None,
                );
            }
            return default;
        }
        v
    }

    /// A non-negative integer with a default.
    pub fn count(&self, ctx: &mut Ctx, key: &str, default: u64) -> u64 {
        match self.get(key) {
            None => default,
            Some(n) => match as_int(ctx, n, &self.field(key)) {
                Some(v) if v >= 0 => v as u64,
                Some(v) => {
                    ctx.err(
                        &n.loc,
                        &self.field(key),
                        format!("must be 0 or more, found {v}"),
                        None,
                    );
                    default
                }
                None => default,
            },
        }
    }

    pub(crate) fn str_list(&self, ctx: &mut Ctx, key: &str) -> Vec<String> {
        self.get(key)
            .and_then(|n| as_str_list(ctx, n, &self.field(key)))
            .unwrap_or_default()
    }

    /// A table of string values (`extra_cmd_args`); ints and bools are taken as their text.
    pub(crate) fn str_map(&self, ctx: &mut Ctx, key: &str) -> IndexMap<String, String> {
        let mut out = IndexMap::new();
        let Some(n) = self.get(key) else { return out };
        let Some(v) = ctx.table(n, &self.field(key)) else {
            return out;
        };
        for (k, e) in &v.table.entries {
            let f = v.field(k);
            let s = match &e.node.kind {
                Kind::Str(s) => Some(s.clone()),
                Kind::Int(i) => Some(i.to_string()),
                Kind::Float(x) => Some(x.to_string()),
                Kind::Bool(b) => Some(if *b { "True" } else { "False" }.to_string()),
                _ => {
                    ctx.type_err(&e.node, &f, "a string");
                    None
                }
            };
            if let Some(s) = s {
                out.insert(k.clone(), s);
            }
        }
        out
    }

    /// Reports keys not in `known`, with a "did you mean" hint.
    pub fn done(&self, ctx: &mut Ctx, known: &[&str]) {
        for (k, e) in &self.table.entries {
            if known.contains(&k.as_str()) {
                continue;
            }
            ctx.err(
                &e.key_loc,
                &self.field(k),
                "unknown field",
                unknown_hint(k, known),
            );
        }
    }
}

pub(crate) fn unknown_hint(key: &str, known: &[&str]) -> Option<String> {
    Some(match did_you_mean(key, known.iter().copied()) {
        Some(s) => format!("did you mean `{s}`?"),
        None => format!("known fields here: {}", known.join(", ")),
    })
}
