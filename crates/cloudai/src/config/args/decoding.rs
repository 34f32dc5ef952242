//! Reading a template's `cmd_args` from its TOML table against the template's schema: each value coerced to its
//! declared type (sweep lists where allowed), defaults filled in, nested models and lists of tables decoded, extra
//! keys kept where the template takes them, every problem one error with its location.

use indexmap::IndexMap;

use super::{is_size, pure_path, ArgDefault, ArgSpec, ArgType, ArgValue, CmdArgs};
use crate::config::decode::{as_bool, as_float, as_int, as_str, join, Ctx};
use crate::config::error::did_you_mean;
use crate::config::node::{Kind, Node};

fn coerce_one(ctx: &mut Ctx, spec: &ArgSpec, node: &Node, field: &str) -> Option<ArgValue> {
    match spec.ty {
        ArgType::Str if spec.size => {
            let s = as_str(ctx, node, field)?;
            if is_size(s.trim()) {
                Some(ArgValue::Str(s))
            } else {
                ctx.err(
                    &node.loc,
                    field,
                    format!("\"{s}\" is not a size"),
                    Some(
                        "a whole number of bytes with an optional K, M or G: 4096, 32M, 8G, 1GB"
                            .into(),
                    ),
                );
                None
            }
        }
        ArgType::Str => as_str(ctx, node, field).map(ArgValue::Str),
        ArgType::Path => as_str(ctx, node, field).map(|s| {
            // a test-run.toml read back holds the repr
            let s = s
                .strip_prefix("PosixPath('")
                .and_then(|r| r.strip_suffix("')"))
                .map_or(s.clone(), str::to_string);
            ArgValue::Path(pure_path(&s))
        }),
        ArgType::Text => match node.kind {
            Kind::Int(i) => Some(ArgValue::Str(i.to_string())),
            _ => as_str(ctx, node, field).map(ArgValue::Str),
        },
        ArgType::StrOrDict => match &node.kind {
            Kind::Table(t) => {
                let mut out = IndexMap::new();
                for (k, e) in &t.entries {
                    out.insert(
                        k.clone(),
                        ArgValue::Str(as_str(ctx, &e.node, &join(field, k))?),
                    );
                }
                Some(ArgValue::Table(out))
            }
            _ => as_str(ctx, node, field).map(ArgValue::Str),
        },
        ArgType::Int => {
            let v = as_int(ctx, node, field)?;
            match spec.min {
                Some(min) if v < min => {
                    ctx.err(
                        &node.loc,
                        field,
                        format!("must be {min} or more, found {v}"),
                        None,
                    );
                    None
                }
                _ => Some(ArgValue::Int(v)),
            }
        }
        ArgType::Float => as_float(ctx, node, field).map(ArgValue::Float),
        ArgType::Bool => as_bool(ctx, node, field).map(ArgValue::Bool),
        ArgType::Num => match node.kind {
            Kind::Int(i) => Some(ArgValue::Int(i)),
            _ => as_float(ctx, node, field).map(ArgValue::Float),
        },
        ArgType::Dict => match &node.kind {
            Kind::Table(_) => ArgValue::from_node(node),
            _ => {
                ctx.type_err(node, field, "a table");
                None
            }
        },
        ArgType::Model(specs, extras) => match &node.kind {
            Kind::Table(_) => Some(ArgValue::Table(
                decode_table(ctx, Some(node), &node.loc, field, specs, extras, false).values,
            )),
            _ => {
                ctx.type_err(node, field, "a table");
                None
            }
        },
        ArgType::ModelList(specs, extras) => match &node.kind {
            Kind::Array(items) => items
                .iter()
                .enumerate()
                .map(|(i, it)| {
                    let f = join(field, &i.to_string());
                    match &it.kind {
                        Kind::Table(_) => Some(ArgValue::Table(
                            decode_table(ctx, Some(it), &it.loc, &f, specs, extras, false).values,
                        )),
                        _ => {
                            ctx.type_err(it, &f, "a table");
                            None
                        }
                    }
                })
                .collect::<Option<Vec<_>>>()
                .map(ArgValue::List),
            _ => {
                ctx.type_err(node, field, "a list of tables ([[...]])");
                None
            }
        },
        ArgType::StrList => match &node.kind {
            Kind::Array(items) => items
                .iter()
                .enumerate()
                .map(|(i, it)| as_str(ctx, it, &join(field, &i.to_string())).map(ArgValue::Str))
                .collect::<Option<Vec<_>>>()
                .map(ArgValue::List),
            _ => {
                ctx.type_err(node, field, "a list of strings");
                None
            }
        },
        ArgType::Enum(choices) => {
            let s = as_str(ctx, node, field)?;
            if choices.contains(&s.as_str()) {
                Some(ArgValue::Str(s))
            } else {
                let hint = match did_you_mean(&s, choices.iter().copied()) {
                    Some(c) => format!("did you mean \"{c}\"?"),
                    None => format!("one of: {}", choices.join(", ")),
                };
                ctx.err(
                    &node.loc,
                    field,
                    format!("{:?} is not an accepted value", s),
                    Some(hint),
                );
                None
            }
        }
    }
}

/// Decodes a `cmd_args` table. `extras` says whether undeclared keys are passed through (CloudAI accepts them);
/// a key that looks like a typo of a declared one is an error either way, since it would silently do nothing.
pub fn decode(
    ctx: &mut Ctx,
    node: Option<&Node>,
    parent_loc: &crate::config::node::Loc,
    path: &str,
    specs: &[ArgSpec],
    extras: bool,
) -> CmdArgs {
    decode_table(ctx, node, parent_loc, path, specs, extras, true)
}

/// The defaults of a model's fields, as a table (a missing sub-model with a `default_factory`).
fn defaults(specs: &[ArgSpec]) -> IndexMap<String, ArgValue> {
    specs
        .iter()
        .filter_map(|s| Some((s.name.to_string(), default_of(s)?)))
        .collect()
}

fn default_of(spec: &ArgSpec) -> Option<ArgValue> {
    Some(match spec.default {
        ArgDefault::Required | ArgDefault::Unset => return None,
        ArgDefault::Str(s) => ArgValue::Str(s.to_string()),
        ArgDefault::Int(i) => ArgValue::Int(i),
        ArgDefault::Float(f) => ArgValue::Float(f),
        ArgDefault::Bool(b) => ArgValue::Bool(b),
        ArgDefault::List => ArgValue::List(Vec::new()),
        ArgDefault::Table => ArgValue::Table(match spec.ty {
            ArgType::Model(specs, _) => defaults(specs),
            _ => IndexMap::new(),
        }),
    })
}

/// The declared fields of `table`: coerced, or their defaults, or an error when required.
pub fn declared(
    ctx: &mut Ctx,
    table: &crate::config::node::Table,
    missing_loc: &crate::config::node::Loc,
    path: &str,
    specs: &[ArgSpec],
) -> IndexMap<String, ArgValue> {
    let mut values = IndexMap::new();
    for spec in specs {
        let field = join(path, spec.name);
        let aliased = spec.alias.and_then(|a| table.get(a).map(|n| (a, n)));
        if let (Some(_), Some((a, n))) = (table.get(spec.name), aliased) {
            ctx.err(
                &n.loc,
                &join(path, a),
                format!("`{a}` and `{}` are the same field, given twice", spec.name),
                Some("keep one of the two".into()),
            );
        }
        match table.get(spec.name).or(aliased.map(|(_, n)| n)) {
            Some(n) => {
                let v = match (&n.kind, spec.sweep) {
                    (Kind::Array(items), true) => {
                        let vals: Vec<_> = items
                            .iter()
                            .enumerate()
                            .map(|(i, it)| coerce_one(ctx, spec, it, &join(&field, &i.to_string())))
                            .collect();
                        vals.into_iter()
                            .collect::<Option<Vec<_>>>()
                            .map(ArgValue::List)
                    }
                    _ => coerce_one(ctx, spec, n, &field),
                };
                if let Some(v) = v {
                    values.insert(spec.name.to_string(), v);
                }
            }
            None => {
                if let ArgDefault::Required = spec.default {
                    ctx.err(
                        missing_loc,
                        &field,
                        "required field is missing",
                        Some(format!("add `{} = ...` under [{path}]", spec.name)),
                    );
                }
                if let Some(v) = default_of(spec) {
                    values.insert(spec.name.to_string(), v);
                }
            }
        }
    }
    values
}

/// `flags`: undeclared keys become command-line flags (top-level `cmd_args`), so they must be flag names.
fn decode_table(
    ctx: &mut Ctx,
    node: Option<&Node>,
    parent_loc: &crate::config::node::Loc,
    path: &str,
    specs: &[ArgSpec],
    extras: bool,
    flags: bool,
) -> CmdArgs {
    let empty = crate::config::node::Table::default();
    let table = match node {
        None => &empty,
        Some(n) => match &n.kind {
            Kind::Table(t) => t,
            _ => {
                ctx.type_err(n, path, "a table");
                &empty
            }
        },
    };
    let missing_loc = node.map_or(parent_loc, |n| &n.loc);
    let mut values = declared(ctx, table, missing_loc, path, specs);
    let names: Vec<&str> = specs.iter().map(|s| s.name).collect();
    for (k, e) in &table.entries {
        if names.contains(&k.as_str()) || specs.iter().any(|s| s.alias == Some(k.as_str())) {
            continue;
        }
        let typo = crate::config::error::misspelling_of(k, names.iter().copied());
        if !extras || typo.is_some() {
            let hint = crate::config::decode::unknown_hint(k, &names);
            ctx.err(&e.key_loc, &join(path, k), "unknown field", hint);
            continue;
        }
        // an extra key becomes a command-line word (`--<key> <value>`, `trainer.<key>=<value>`): a name, never shell
        if k.is_empty()
            || !k
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            let hint = if flags {
                "write the flag's name without dashes, e.g. `stepfactor = 2` for --stepfactor 2"
            } else {
                "keys of this table become command-line arguments: use letters, digits, `_` and `-`"
            };
            ctx.err(
                &e.key_loc,
                &join(path, k),
                "not a flag name: extra keys become command-line flags and may only hold [A-Za-z0-9_-]",
                Some(hint.into()),
            );
            continue;
        }
        if let Some(v) = ArgValue::from_node(&e.node) {
            values.insert(k.clone(), v);
        }
    }
    let fixed_lists = specs
        .iter()
        .filter(|s| matches!(s.ty, ArgType::StrList | ArgType::ModelList(..)))
        .map(|s| s.name.to_string())
        .collect();
    CmdArgs {
        values,
        fixed_lists,
    }
}

/// Every leaf of a table as `a.b.c` → value, depth first in field order (CloudAI's `flatten_dict`).
pub(crate) fn leaves(t: &IndexMap<String, ArgValue>) -> Vec<(String, ArgValue)> {
    fn walk(t: &IndexMap<String, ArgValue>, prefix: &str, out: &mut Vec<(String, ArgValue)>) {
        for (k, v) in t {
            let key = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            match v {
                ArgValue::Table(sub) => walk(sub, &key, out),
                v => out.push((key, v.clone())),
            }
        }
    }
    let mut out = Vec::new();
    walk(t, "", &mut out);
    out
}
