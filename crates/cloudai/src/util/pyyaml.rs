//! YAML as PyYAML's `safe_dump` writes it with its defaults (block style, keys sorted, sequences in a mapping not
//! indented, lines folded at 80 columns, ASCII only), so a file CloudAI writes with it can be written byte for
//! byte: its AI Dynamo `deployment.yaml`. The rules are PyYAML's emitter (scalar analysis, style choice, folding)
//! and its YAML 1.1 implicit resolvers (a string that would read back as a bool, number, null or date is quoted).

use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

const WIDTH: usize = 80;
const INDENT: usize = 2;

/// A document as PyYAML sees it: mappings in the order given (what `sort_keys=False` writes).
#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    /// A scalar written as it is (a number, `true`, `null`).
    Raw(String),
    Str(String),
    Seq(Vec<Node>),
    Map(Vec<(String, Node)>),
}

impl Node {
    /// A JSON value with its mappings' keys sorted, as `safe_dump`'s default `sort_keys=True` sorts them.
    pub fn sorted(v: &Value) -> Node {
        match v {
            Value::Null => Node::Raw("null".into()),
            Value::Bool(b) => Node::Raw(b.to_string()),
            Value::Number(n) => Node::Raw(match n.as_f64() {
                Some(f) if !(n.is_i64() || n.is_u64()) => float(f),
                _ => n.to_string(),
            }),
            Value::String(s) => Node::Str(s.clone()),
            Value::Array(a) => Node::Seq(a.iter().map(Node::sorted).collect()),
            Value::Object(m) => {
                let mut entries: Vec<(String, Node)> = m
                    .iter()
                    .map(|(k, v)| (k.clone(), Node::sorted(v)))
                    .collect();
                entries.sort_by(|a, b| a.0.cmp(&b.0));
                Node::Map(entries)
            }
        }
    }

    /// A Python float as PyYAML's representer writes it (`.inf`, `1.0e+20`).
    pub fn float(f: f64) -> Node {
        Node::Raw(float(f))
    }
}

/// `v` as `yaml.safe_dump(v)` writes it (keys sorted, as its default `sort_keys=True` sorts them).
pub fn dump(v: &Value) -> String {
    dump_node(&Node::sorted(v))
}

/// `n` as `yaml.safe_dump(n, sort_keys=False)` writes it.
pub fn dump_node(n: &Node) -> String {
    let mut e = Emitter {
        out: String::new(),
        column: 0,
    };
    match n {
        Node::Map(m) if !m.is_empty() => e.mapping(m, 0, false),
        Node::Seq(a) if !a.is_empty() => e.sequence(a, 0, false),
        other => {
            // a lone scalar is a document of its own: PyYAML ends it with `...`
            e.scalar(other, 0, false);
            if !matches!(other, Node::Map(_) | Node::Seq(_)) {
                e.out.push_str("\n...");
            }
        }
    }
    e.out.push('\n');
    e.out
}

struct Emitter {
    out: String,
    column: usize,
}

impl Emitter {
    fn write(&mut self, s: &str) {
        self.out.push_str(s);
        self.column += s.chars().count();
    }

    fn newline(&mut self, indent: usize) {
        self.out.push('\n');
        self.out.push_str(&" ".repeat(indent));
        self.column = indent;
    }

    /// Starts an entry of a collection at `indent`: on a line of its own unless it follows a `- ` (`inline`).
    fn entry(&mut self, indent: usize, inline: bool) {
        if inline {
            return;
        }
        if self.out.is_empty() {
            self.write(&" ".repeat(indent));
        } else {
            self.newline(indent);
        }
    }

    /// A block mapping whose keys stand at `indent`; `inline`: its first key follows a `- ` already written.
    fn mapping(&mut self, m: &[(String, Node)], indent: usize, inline: bool) {
        for (i, (k, val)) in m.iter().enumerate() {
            self.entry(indent, inline && i == 0);
            self.scalar(&Node::Str(k.clone()), indent, true);
            self.write(":");
            match val {
                Node::Map(sub) if !sub.is_empty() => self.mapping(sub, indent + INDENT, false),
                // a sequence in a mapping is not indented (PyYAML's indentless sequence)
                Node::Seq(items) if !items.is_empty() => self.sequence(items, indent, false),
                other => {
                    self.write(" ");
                    self.scalar(other, indent, false);
                }
            }
        }
    }

    /// A block sequence whose `- ` stand at `indent`; `inline`: its first item follows a `- ` already written.
    fn sequence(&mut self, items: &[Node], indent: usize, inline: bool) {
        for (i, it) in items.iter().enumerate() {
            self.entry(indent, inline && i == 0);
            self.write("- ");
            match it {
                Node::Map(m) if !m.is_empty() => self.mapping(m, indent + INDENT, true),
                Node::Seq(a) if !a.is_empty() => self.sequence(a, indent + INDENT, true),
                other => self.scalar(other, indent, false),
            }
        }
    }

    /// A scalar in a collection standing at `indent` (folded lines continue at `indent + 2`); `key`: a simple key
    /// (never folded).
    fn scalar(&mut self, n: &Node, indent: usize, key: bool) {
        let text = match n {
            Node::Raw(r) => return self.write(r),
            Node::Map(_) => return self.write("{}"),
            Node::Seq(_) => return self.write("[]"),
            Node::Str(s) => s,
        };
        let a = analyze(text);
        let cont = indent + INDENT;
        if !resolves_to_other(text) && a.allow_block_plain && !(key && a.multiline) {
            self.plain(text, cont, !key);
        } else if a.allow_single_quoted && !(key && a.multiline) {
            self.single_quoted(text, cont, !key);
        } else {
            self.double_quoted(text);
        }
    }

    fn plain(&mut self, text: &str, cont: usize, split: bool) {
        let chars: Vec<char> = text.chars().collect();
        let (mut start, mut end, mut spaces) = (0, 0, false);
        while end <= chars.len() {
            let ch = chars.get(end).copied();
            if spaces {
                if ch != Some(' ') {
                    if start + 1 == end && self.column > WIDTH && split {
                        self.newline(cont);
                    } else {
                        self.write(&chars[start..end].iter().collect::<String>());
                    }
                    start = end;
                }
            } else if ch.is_none() || ch == Some(' ') {
                self.write(&chars[start..end].iter().collect::<String>());
                start = end;
            }
            if let Some(c) = ch {
                spaces = c == ' ';
            }
            end += 1;
        }
    }

    fn single_quoted(&mut self, text: &str, cont: usize, split: bool) {
        self.write("'");
        let chars: Vec<char> = text.chars().collect();
        let (mut start, mut end, mut spaces, mut breaks) = (0, 0, false, false);
        while end <= chars.len() {
            let ch = chars.get(end).copied();
            if spaces {
                if ch != Some(' ') {
                    if start + 1 == end
                        && self.column > WIDTH
                        && split
                        && start != 0
                        && end != chars.len()
                    {
                        self.newline(cont);
                    } else {
                        self.write(&chars[start..end].iter().collect::<String>());
                    }
                    start = end;
                }
            } else if breaks {
                if !ch.is_some_and(is_break) {
                    // a line break is written doubled (a single one would fold into a space)
                    if chars[start] == '\n' {
                        self.out.push('\n');
                    }
                    self.out.extend(&chars[start..end]);
                    self.out.push_str(&" ".repeat(cont));
                    self.column = cont;
                    start = end;
                }
            } else if (ch.is_none() || ch.is_some_and(|c| c == '\'' || c == ' ' || is_break(c)))
                && start < end
            {
                self.write(&chars[start..end].iter().collect::<String>());
                start = end;
            }
            if ch == Some('\'') {
                self.write("''");
                start = end + 1;
            }
            if let Some(c) = ch {
                spaces = c == ' ';
                breaks = is_break(c);
            }
            end += 1;
        }
        self.write("'");
    }

    /// Double quotes with escapes, for text single quotes cannot carry (line breaks, characters beyond ASCII's
    /// printable ones). Not folded.
    fn double_quoted(&mut self, text: &str) {
        let mut s = String::from("\"");
        for c in text.chars() {
            match c {
                '"' => s.push_str("\\\""),
                '\\' => s.push_str("\\\\"),
                '\0' => s.push_str("\\0"),
                '\x07' => s.push_str("\\a"),
                '\x08' => s.push_str("\\b"),
                '\t' => s.push_str("\\t"),
                '\n' => s.push_str("\\n"),
                '\x0b' => s.push_str("\\v"),
                '\x0c' => s.push_str("\\f"),
                '\r' => s.push_str("\\r"),
                '\x1b' => s.push_str("\\e"),
                '\u{85}' => s.push_str("\\N"),
                '\u{a0}' => s.push_str("\\_"),
                '\u{2028}' => s.push_str("\\L"),
                '\u{2029}' => s.push_str("\\P"),
                ' '..='~' => s.push(c),
                c if (c as u32) <= 0xff => s.push_str(&format!("\\x{:02X}", c as u32)),
                c if (c as u32) <= 0xffff => s.push_str(&format!("\\u{:04X}", c as u32)),
                c => s.push_str(&format!("\\U{:08X}", c as u32)),
            }
        }
        s.push('"');
        self.write(&s);
    }
}

/// A float as Python's `repr` and PyYAML's representer write it (`.inf`, `.nan`, `1.0e+20`).
fn float(f: f64) -> String {
    if f.is_nan() {
        return ".nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { ".inf" } else { "-.inf" }.into();
    }
    let r = crate::util::pytoml::py_float(f);
    match r.split_once('e') {
        Some((m, e)) if !m.contains('.') => format!("{m}.0e{e}"),
        _ => r,
    }
}

fn is_break(c: char) -> bool {
    matches!(c, '\n' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

/// What PyYAML's `analyze_scalar` finds, as far as block-style output needs it.
struct Analysis {
    multiline: bool,
    allow_block_plain: bool,
    allow_single_quoted: bool,
}

fn analyze(text: &str) -> Analysis {
    if text.is_empty() {
        return Analysis {
            multiline: false,
            allow_block_plain: false,
            allow_single_quoted: true,
        };
    }
    let chars: Vec<char> = text.chars().collect();
    let is_ws =
        |c: Option<char>| c.is_none_or(|c| matches!(c, '\0' | ' ' | '\t' | '\r') || is_break(c));
    let mut block_indicators = text.starts_with("---") || text.starts_with("...");
    let (mut line_breaks, mut special) = (false, false);
    let (mut leading_space, mut leading_break, mut trailing_space, mut trailing_break) =
        (false, false, false, false);
    let (mut break_space, mut space_break) = (false, false);
    let (mut previous_space, mut previous_break) = (false, false);
    let mut preceded_by_ws = true;
    for (i, &ch) in chars.iter().enumerate() {
        let followed_by_ws = is_ws(chars.get(i + 1).copied());
        if i == 0 {
            if "#,[]{}&*!|>'\"%@`".contains(ch) || ("?:-".contains(ch) && followed_by_ws) {
                block_indicators = true;
            }
        } else if (ch == ':' && followed_by_ws) || (ch == '#' && preceded_by_ws) {
            block_indicators = true;
        }
        if is_break(ch) {
            line_breaks = true;
        }
        if !(ch == '\n' || (' '..='~').contains(&ch)) {
            // safe_dump writes ASCII only: anything else is escaped in double quotes
            special = true;
        }
        if ch == ' ' {
            if i == 0 {
                leading_space = true;
            }
            if i == chars.len() - 1 {
                trailing_space = true;
            }
            if previous_break {
                break_space = true;
            }
            (previous_space, previous_break) = (true, false);
        } else if is_break(ch) {
            if i == 0 {
                leading_break = true;
            }
            if i == chars.len() - 1 {
                trailing_break = true;
            }
            if previous_space {
                space_break = true;
            }
            (previous_space, previous_break) = (false, true);
        } else {
            (previous_space, previous_break) = (false, false);
        }
        preceded_by_ws = is_ws(Some(ch));
    }
    let mut allow_block_plain = true;
    let mut allow_single_quoted = true;
    if leading_space || leading_break || trailing_space || trailing_break {
        allow_block_plain = false;
    }
    if break_space {
        allow_block_plain = false;
        allow_single_quoted = false;
    }
    if space_break || special {
        allow_block_plain = false;
        allow_single_quoted = false;
    }
    if line_breaks || block_indicators {
        allow_block_plain = false;
    }
    Analysis {
        multiline: line_breaks,
        allow_block_plain,
        allow_single_quoted,
    }
}

/// Whether PyYAML's YAML 1.1 implicit resolvers read `s`, written plain, as something other than a string.
fn resolves_to_other(s: &str) -> bool {
    static OTHER: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(concat!(
            r"^(?:",
            // bool
            r"yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF",
            // float
            r"|[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9_]+(?:[eE][-+][0-9]+)?",
            r"|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)",
            // int
            r"|[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+",
            r"|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+",
            // merge, null, value
            r"|<<|~|null|Null|NULL|=",
            // timestamp
            r"|[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]",
            r"|[0-9][0-9][0-9][0-9]-[0-9][0-9]?-[0-9][0-9]?(?:[Tt]|[ \t]+)[0-9][0-9]?:[0-9][0-9]:[0-9][0-9]",
            r"(?:\.[0-9]*)?(?:[ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9][0-9])?))?",
            r")$"
        ))
        .expect("the resolver pattern is valid")
    });
    s.is_empty() || OTHER.is_match(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn scalars_are_quoted_when_they_would_read_back_as_something_else() {
        let d = |s: &str| dump(&json!({ "k": s }));
        assert_eq!(d("plain/text"), "k: plain/text\n");
        assert_eq!(d("--model"), "k: --model\n");
        assert_eq!(d("0.8"), "k: '0.8'\n");
        assert_eq!(d("1"), "k: '1'\n");
        assert_eq!(d("on"), "k: 'on'\n");
        assert_eq!(d("2024-01-02"), "k: '2024-01-02'\n");
        assert_eq!(d(""), "k: ''\n");
        assert_eq!(d("- x"), "k: '- x'\n");
        assert_eq!(d("a: b"), "k: 'a: b'\n");
        assert_eq!(d("a #b"), "k: 'a #b'\n");
        assert_eq!(d("a#b"), "k: a#b\n");
        assert_eq!(d("{\"a\":1}"), "k: '{\"a\":1}'\n");
        assert_eq!(d("it's"), "k: it's\n");
        assert_eq!(d("'q'"), "k: '''q'''\n");
        assert_eq!(d(" lead"), "k: ' lead'\n");
        assert_eq!(d("a\nb"), "k: 'a\n\n  b'\n");
        assert_eq!(d("a\tb"), "k: \"a\\tb\"\n");
        assert_eq!(d("é"), "k: \"\\xE9\"\n");
    }

    #[test]
    fn layout_is_pyyamls_block_style() {
        let v = json!({
            "b": {"list": ["x", 1, true], "empty": {}, "none": null},
            "a": [{"k": "v", "j": 2.5}, ["p", "q"], []],
        });
        assert_eq!(
            dump(&v),
            "a:\n- j: 2.5\n  k: v\n- - p\n  - q\n- []\nb:\n  empty: {}\n  list:\n  - x\n  - 1\n  - true\n  none: null\n"
        );
        // sort_keys=False keeps the order given
        let n = Node::Map(vec![
            ("z".into(), Node::Raw("1".into())),
            ("a".into(), Node::Seq(vec![Node::Str("on".into())])),
        ]);
        assert_eq!(dump_node(&n), "z: 1\na:\n- 'on'\n");
    }

    #[test]
    fn long_values_fold_at_eighty_columns_as_pyyaml_folds_them() {
        let words = "word ".repeat(20);
        let v = json!({"key": {"args": [words.trim_end()]}});
        // PyYAML 6: the break comes at the first single space past column 80, continuing two columns in
        let out = dump(&v);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "key:");
        assert_eq!(lines[1], "  args:");
        assert!(lines[2].starts_with("  - word word"), "{out}");
        assert!(
            lines[2].len() > WIDTH && lines[2].len() <= WIDTH + 5,
            "{out}"
        );
        assert!(lines[3].starts_with("    word"), "{out}");
        let joined: String = lines[2][4..].to_string() + " " + lines[3].trim_start();
        assert_eq!(joined, words.trim_end());
    }

    #[test]
    fn floats_are_pythons() {
        assert_eq!(float(0.8), "0.8");
        assert_eq!(float(2.0), "2.0");
        assert_eq!(float(1e20), "1.0e+20");
        assert_eq!(float(f64::INFINITY), ".inf");
    }
}
