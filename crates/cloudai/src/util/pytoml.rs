//! A TOML writer that reproduces the Python `toml` package's `dumps` byte for byte, because CloudAI writes
//! `test-run.toml` and `slurm-job.toml` with it and users diff those files between tools.
//!
//! Its quirks: scalars of a table come before its sub-tables, sub-tables are emitted breadth first, lists print as
//! `[ "a", "b",]`, `None` values are dropped, and a table with neither scalars nor sub-tables still gets a header.

#[derive(Clone, Debug, PartialEq)]
pub enum PyVal {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    List(Vec<PyVal>),
    Table(Vec<(String, PyVal)>),
    None,
}

impl PyVal {
    pub fn str(s: impl Into<String>) -> Self {
        PyVal::Str(s.into())
    }
    pub(crate) fn str_list<S: AsRef<str>>(items: &[S]) -> Self {
        PyVal::List(items.iter().map(|s| PyVal::str(s.as_ref())).collect())
    }
    pub(crate) fn opt_str(s: &Option<String>) -> Self {
        s.as_ref().map_or(PyVal::None, |s| PyVal::str(s.clone()))
    }
}

fn dump_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\u{:04x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn dump_key(k: &str) -> String {
    if !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        k.to_string()
    } else {
        dump_str(k)
    }
}

fn dump_value(v: &PyVal) -> String {
    match v {
        PyVal::Str(s) => dump_str(s),
        PyVal::Int(i) => i.to_string(),
        PyVal::Float(f) => py_float(*f),
        PyVal::Bool(b) => b.to_string(),
        PyVal::List(items) => {
            let mut s = String::from("[");
            for it in items {
                s.push(' ');
                s.push_str(&dump_value(it));
                s.push(',');
            }
            s.push(']');
            s
        }
        PyVal::Table(t) => {
            let inner: Vec<String> = t
                .iter()
                .filter(|(_, v)| *v != PyVal::None)
                .map(|(k, v)| format!("{} = {}", dump_key(k), dump_value(v)))
                .collect();
            format!("{{ {} }}", inner.join(", "))
        }
        PyVal::None => String::new(),
    }
}

fn is_table_list(v: &PyVal) -> bool {
    matches!(v, PyVal::List(items) if items.iter().any(|i| matches!(i, PyVal::Table(_))))
}

/// Sub-tables waiting to be emitted: (dotted name, entries).
type Sections<'a> = Vec<(String, &'a [(String, PyVal)])>;

/// Scalars (and arrays of tables) of one table, plus its sub-tables to be emitted later.
fn dump_sections<'a>(entries: &'a [(String, PyVal)], sup: &str) -> (String, Sections<'a>) {
    let sup = if sup.is_empty() {
        String::new()
    } else {
        format!("{sup}.")
    };
    let mut ret = String::new();
    let mut arrays = String::new();
    let mut subs = Vec::new();
    for (k, v) in entries {
        let qk = dump_key(k);
        match v {
            PyVal::Table(t) => subs.push((qk, t.as_slice())),
            PyVal::None => {}
            _ if is_table_list(v) => {
                let PyVal::List(items) = v else {
                    unreachable!()
                };
                for it in items {
                    let PyVal::Table(t) = it else { continue };
                    arrays.push_str(&format!("[[{sup}{qk}]]\n"));
                    let (s, nested) = dump_sections(t, &format!("{sup}{qk}"));
                    arrays.push_str(&s);
                    let mut tail = String::from("\n");
                    let mut level: Sections = nested;
                    while !level.is_empty() {
                        let mut next = Vec::new();
                        for (name, t2) in level {
                            let (s1, d1) = dump_sections(t2, &format!("{sup}{qk}.{name}"));
                            if !s1.is_empty() {
                                tail.push_str(&format!("[{sup}{qk}.{name}]\n{s1}"));
                            }
                            next.extend(d1.into_iter().map(|(n, t)| (format!("{name}.{n}"), t)));
                        }
                        level = next;
                    }
                    arrays.push_str(&tail);
                }
            }
            _ => ret.push_str(&format!("{qk} = {}\n", dump_value(v))),
        }
    }
    ret.push_str(&arrays);
    (ret, subs)
}

/// `toml.dumps(o)` for an ordered dict `o`.
pub(crate) fn dumps(root: &[(String, PyVal)]) -> String {
    let (mut out, mut sections) = dump_sections(root, "");
    while !sections.is_empty() {
        let mut next = Vec::new();
        for (name, t) in sections {
            let (s, subs) = dump_sections(t, &name);
            if !s.is_empty() || subs.is_empty() {
                if !out.is_empty() && !out.ends_with("\n\n") {
                    out.push('\n');
                }
                out.push_str(&format!("[{name}]\n"));
                out.push_str(&s);
            }
            next.extend(subs.into_iter().map(|(n, t)| (format!("{name}.{n}"), t)));
        }
        sections = next;
    }
    out
}

/// Python's float repr: `1.0`, `0.5`, `1e-05`, `1e+16`.
pub(crate) fn py_float(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.into();
    }
    let a = f.abs();
    if a != 0.0 && !(1e-4..1e16).contains(&a) {
        let s = format!("{f:e}");
        let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
        let exp: i32 = e.parse().unwrap_or(0);
        return format!("{m}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
    let s = format!("{f}");
    if s.contains('.') {
        s
    } else {
        format!("{s}.0")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_float_repr() {
        assert_eq!(py_float(1.0), "1.0");
        assert_eq!(py_float(0.5), "0.5");
        assert_eq!(py_float(1e-5), "1e-05");
        assert_eq!(py_float(2e16), "2e+16");
        assert_eq!(py_float(123.25), "123.25");
    }

    fn kv(k: &str, v: PyVal) -> (String, PyVal) {
        (k.to_string(), v)
    }

    #[test]
    fn matches_python_toml_layout() {
        let doc = vec![
            kv("name", PyVal::str("a\"b")),
            kv("n", PyVal::Int(2)),
            kv("skip", PyVal::None),
            kv(
                "def",
                PyVal::Table(vec![
                    kv("m", PyVal::str_list(&["default"])),
                    kv("e", PyVal::List(vec![])),
                    kv("sub", PyVal::Table(vec![kv("x", PyVal::Bool(true))])),
                    kv("empty", PyVal::Table(vec![])),
                ]),
            ),
        ];
        let expected = "name = \"a\\\"b\"\nn = 2\n\n[def]\nm = [ \"default\",]\ne = []\n\n[def.sub]\nx = true\n\n[def.empty]\n";
        assert_eq!(dumps(&doc), expected);
    }

    #[test]
    fn quotes_keys_that_need_it() {
        let doc = vec![kv(
            "t",
            PyVal::Table(vec![
                kv("--stepfactor", PyVal::str("2")),
                kv("a.b", PyVal::Int(1)),
            ]),
        )];
        assert_eq!(dumps(&doc), "[t]\n--stepfactor = \"2\"\n\"a.b\" = 1\n");
    }
}
