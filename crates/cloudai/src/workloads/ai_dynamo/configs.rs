//! The cache configurations written beside the job: LMCache's YAML (PyYAML's block style) and HiCache's TOML.

use indexmap::IndexMap;

use crate::config::args::ArgValue;

/// A YAML scalar as PyYAML's `safe_dump` writes it: plain when it reads back as the same string, else single-quoted.
fn yaml_scalar(v: &ArgValue) -> String {
    match v {
        ArgValue::Bool(b) => b.to_string(),
        ArgValue::Int(_) | ArgValue::Float(_) => v.py_str(),
        other => {
            let s = other.py_str();
            let reserved = [
                "", "~", "null", "Null", "NULL", "true", "True", "TRUE", "false", "False", "FALSE",
                "yes", "Yes", "YES", "no", "No", "NO", "on", "On", "ON", "off", "Off", "OFF",
            ];
            let numeric = s.parse::<f64>().is_ok() || s.starts_with(['.', '+', '-']) && s.len() > 1;
            let plain = !reserved.contains(&s.as_str())
                && !numeric
                && s.chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || "_/".contains(c))
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_./-: ".contains(c))
                && !s.contains(": ")
                && !s.ends_with([' ', ':']);
            if plain {
                s
            } else {
                format!("'{}'", s.replace('\'', "''"))
            }
        }
    }
}

/// A table as PyYAML's block style (`safe_dump(sort_keys=False)`): `key: value`, nested tables indented two
/// blanks, lists as `- item` lines under their key.
pub(super) fn yaml(t: &IndexMap<String, ArgValue>, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    for (k, v) in t {
        let key = yaml_scalar(&ArgValue::Str(k.clone()));
        match v {
            ArgValue::Table(sub) if sub.is_empty() => out.push_str(&format!("{pad}{key}: {{}}\n")),
            ArgValue::Table(sub) => {
                out.push_str(&format!("{pad}{key}:\n"));
                yaml(sub, indent + 2, out);
            }
            ArgValue::List(items) if items.is_empty() => out.push_str(&format!("{pad}{key}: []\n")),
            ArgValue::List(items) => {
                out.push_str(&format!("{pad}{key}:\n"));
                for it in items {
                    out.push_str(&format!("{pad}- {}\n", yaml_scalar(it)));
                }
            }
            other => out.push_str(&format!("{pad}{key}: {}\n", yaml_scalar(other))),
        }
    }
}

/// A table's values as CloudAI's `toml.dumps` writes them (the HiCache configuration).
pub(super) fn py(v: &ArgValue) -> crate::util::pytoml::PyVal {
    use crate::util::pytoml::PyVal;
    match v {
        ArgValue::Str(s) | ArgValue::Path(s) => PyVal::str(s.clone()),
        ArgValue::Int(i) => PyVal::Int(*i),
        ArgValue::Float(f) => PyVal::Float(*f),
        ArgValue::Bool(b) => PyVal::Bool(*b),
        ArgValue::List(l) => PyVal::List(l.iter().map(py).collect()),
        ArgValue::Table(t) => PyVal::Table(t.iter().map(|(k, v)| (k.clone(), py(v))).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_quotes_what_would_read_back_as_something_else() {
        let s = |v: &str| yaml_scalar(&ArgValue::Str(v.into()));
        assert_eq!(s("cpu"), "cpu");
        assert_eq!(s("POSIX"), "POSIX");
        assert_eq!(s("{frontend_node}:8300"), "'{frontend_node}:8300'");
        for v in ["true", "no", "null", "", "1.5", "-3", "a: b", "it's"] {
            assert!(s(v).starts_with('\''), "{v}: {}", s(v));
        }
        assert_eq!(s("it's"), "'it''s'");
        let mut t = IndexMap::new();
        t.insert("n".to_string(), ArgValue::Int(2));
        t.insert(
            "ports".to_string(),
            ArgValue::List(vec![ArgValue::Int(1), ArgValue::Int(2)]),
        );
        let mut sub = IndexMap::new();
        sub.insert("on".to_string(), ArgValue::Bool(false));
        t.insert("x".to_string(), ArgValue::Table(sub));
        let mut out = String::new();
        yaml(&t, 0, &mut out);
        assert_eq!(out, "n: 2\nports:\n- 1\n- 2\nx:\n  'on': false\n");
    }
}
