//! Values placed in generated shell scripts. A value that is shell-safe is written unchanged, so our scripts stay
//! byte-identical to CloudAI's on ordinary configs; anything else is single-quoted, so it arrives as one literal
//! word and cannot run a command. `$NAME` / `${NAME}` references count as safe: configs use them on purpose
//! (`$PWD/...` mounts, `$LD_LIBRARY_PATH`) and a plain reference cannot execute anything.
//! Control characters never get here: the config loader rejects them.

use std::borrow::Cow;

fn plain(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_@%+=:,./-#^".contains(c)
}

/// Splits `s` into literal text and `$NAME` / `${NAME}` references: (text, is_reference).
fn segments(s: &str) -> Vec<(&str, bool)> {
    let mut out = Vec::new();
    let mut lit = 0;
    let mut i = 0;
    let b = s.as_bytes();
    while i < b.len() {
        if b[i] == b'$' {
            if let Some(len) = reference_len(&s[i..]) {
                if lit < i {
                    out.push((&s[lit..i], false));
                }
                out.push((&s[i..i + len], true));
                i += len;
                lit = i;
                continue;
            }
        }
        i += 1;
    }
    if lit < s.len() {
        out.push((&s[lit..], false));
    }
    out
}

/// Length of a `$NAME` or `${NAME}` reference at the start of `s`.
fn reference_len(s: &str) -> Option<usize> {
    let rest = s.strip_prefix('$')?;
    if let Some(r) = rest.strip_prefix('{') {
        let end = r.find('}')?;
        return is_env_name(&r[..end]).then_some(end + 3);
    }
    let n = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    is_env_name(&rest[..n]).then_some(n + 1)
}

/// Whether `s` holds a `$NAME` / `${NAME}` reference (expanded by the shell on purpose).
pub fn has_reference(s: &str) -> bool {
    segments(s).iter().any(|(_, r)| *r)
}

/// Whether `s` is one word the shell takes literally (bar variable references): no quoting needed.
pub(crate) fn is_safe(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('#')
        && segments(s).iter().all(|(t, r)| *r || t.chars().all(plain))
}

/// Whether `s` may be written between double quotes unchanged, as CloudAI writes env values (`export K="v"`):
/// no `"`, `\` or `` ` ``, and every `$` a plain variable reference.
pub(crate) fn dq_safe(s: &str) -> bool {
    segments(s)
        .iter()
        .all(|(t, r)| *r || !t.contains(['"', '\\', '`', '$']))
}

/// `s` as one shell word: unchanged when safe; else its literal text single-quoted (`'` written as `'\''`) and
/// its variable references double-quoted (`"$HOME"'/my dir'`), so references expand and nothing else does.
pub fn quote(s: &str) -> Cow<'_, str> {
    if is_safe(s) {
        return Cow::Borrowed(s);
    }
    if s.is_empty() {
        return Cow::Borrowed("''");
    }
    let mut out = String::with_capacity(s.len() + 4);
    for (t, reference) in segments(s) {
        if reference {
            out.push('"');
            out.push_str(t);
            out.push('"');
        } else {
            out.push('\'');
            out.push_str(&t.replace('\'', r"'\''"));
            out.push('\'');
        }
    }
    Cow::Owned(out)
}

/// Python's `shlex.quote`, for text CloudAI quotes with it: the word as is when it holds only safe characters,
/// else single-quoted whole (`$x` included: it is expanded later, by the shell that runs the text).
pub(crate) fn py_quote(s: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c);
    if s.is_empty() {
        "''".into()
    } else if s.chars().all(safe) {
        s.into()
    } else {
        format!("'{}'", s.replace('\'', r#"'"'"'"#))
    }
}

/// Shell words as a POSIX shell (and Python's `shlex.split`) splits them: blanks separate words; `'…'` keeps its
/// text as is; `"…"` too but for `\` before `\`, `"`, `$`, `` ` `` or a newline; `\` outside quotes takes the next
/// character as is. `Err` on an unclosed quote or a trailing `\`.
pub(crate) fn split_words(s: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => cur.push(c),
                        None => return Err(format!("no closing quotation in {s:?}")),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(n @ ('\\' | '"' | '$' | '`' | '\n')) => cur.push(n),
                            Some(n) => {
                                cur.push('\\');
                                cur.push(n);
                            }
                            None => return Err(format!("no closing quotation in {s:?}")),
                        },
                        Some(c) => cur.push(c),
                        None => return Err(format!("no closing quotation in {s:?}")),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(n) => cur.push(n),
                    None => return Err(format!("no escaped character at the end of {s:?}")),
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

/// `s` as one single-quoted word, whatever it holds: nothing in it is expanded (`$x` stays `$x`), for a script
/// that another shell runs (`bash -c <script>`).
pub(crate) fn single_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// A path as one shell word (see `quote`).
pub(crate) fn quote_path(p: &std::path::Path) -> String {
    quote(&p.display().to_string()).into_owned()
}

/// Text to place between double quotes (`bash -c "…"`): `\`, `"`, `$` and `` ` `` escaped, so the outer shell
/// hands it to the inner one unchanged. Text without them (every ordinary command) is unchanged.
pub(crate) fn in_double_quotes(s: &str) -> Cow<'_, str> {
    if !s.contains(['\\', '"', '$', '`']) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if matches!(c, '\\' | '"' | '$' | '`') {
            out.push('\\');
        }
        out.push(c);
    }
    Cow::Owned(out)
}

/// A valid environment variable name (`export NAME=…` with any other name is a syntax error or worse).
pub(crate) fn is_env_name(s: &str) -> bool {
    s.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_command_substitution_is_shell_text() {
        let v = "$(scontrol show hostname $SLURM_JOB_NODELIST | tr -s '\\n' ',')";
        assert!(is_command_substitution(v));
        assert_eq!(env_value(v), v);
        for v in ["$(a) $(b)", "$(a))(", "x$(a)", "$(a"] {
            assert!(!is_command_substitution(v), "{v}");
        }
        assert_eq!(env_value("a b"), "'a b'");
    }

    #[test]
    fn words_split_as_a_posix_shell_splits_them() {
        let w = |s: &str| split_words(s).unwrap();
        assert_eq!(
            w("--reservation r1  --exclusive"),
            ["--reservation", "r1", "--exclusive"]
        );
        assert_eq!(w("--comment 'a b' x\\ y"), ["--comment", "a b", "x y"]);
        assert_eq!(w(r#"--c="a \"q\" $x" ''"#), [r#"--c=a "q" $x"#, ""]);
        assert_eq!(w(r#""\n""#), ["\\n"]);
        assert!(split_words("--comment 'open").is_err());
        assert!(split_words("x\\").is_err());
        assert_eq!(py_quote("export A=1,2"), "'export A=1,2'");
        assert_eq!(
            py_quote("gpus-per-node=8;gres=gpu:8"),
            "'gpus-per-node=8;gres=gpu:8'"
        );
        assert_eq!(py_quote("it's"), r#"'it'"'"'s'"#);
        assert_eq!(py_quote("/a/b:c,d=e"), "/a/b:c,d=e");
    }

    #[test]
    fn safe_words_stay_and_others_are_quoted() {
        for s in [
            "nvcr.io#nvidia/pytorch:24.02-py3",
            "=mlx5_0,mlx5_1",
            "/a/b:/c",
            "$PWD/conf/x.txt:/opt/x.txt",
            "${HOME}/x",
            "sum",
            "1G",
        ] {
            assert_eq!(quote(s), s, "{s}");
        }
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote("$(touch x)"), "'$(touch x)'");
        assert_eq!(quote("${x:-y}"), "'${x:-y}'");
        assert_eq!(quote("$HOME*"), "\"$HOME\"'*'");
        assert_eq!(quote("a ${B}c"), "'a '\"${B}\"'c'");
        assert!(has_reference("x$HOME") && !has_reference("$(id) ${x:-y} $1"));
        assert_eq!(quote(""), "''");
        assert_eq!(quote("#x"), "'#x'");
        assert_eq!(
            in_double_quotes("a $b \"c\" `d` \\"),
            "a \\$b \\\"c\\\" \\`d\\` \\\\"
        );
        assert!(
            dq_safe("a b $HOME ${X}/y")
                && !dq_safe("$(id)")
                && !dq_safe("a\"b")
                && !dq_safe("${x:-y}")
        );
        assert!(is_env_name("NCCL_IB_HCA") && !is_env_name("A;B") && !is_env_name("1A"));
    }
}

/// `export K="V"` as CloudAI writes it (env_vars.sh, a command's prefix), or `export K='V…'` when the double
/// quotes would not keep the value as is.
pub fn export(k: &str, v: &str) -> String {
    if is_command_substitution(v) {
        format!("export {k}={v}")
    } else if dq_safe(v) {
        format!("export {k}=\"{v}\"")
    } else {
        format!("export {k}={}", quote(v))
    }
}

/// Whether an env value is one command substitution, `$(...)` with its parentheses balanced (CloudAI's AI Dynamo
/// config sets `DYNAMO_NODELIST = "$(scontrol show hostname …)"`): shell text by design, written as given, like
/// the raw pass-through fields.
pub fn is_command_substitution(v: &str) -> bool {
    let Some(inner) = v.strip_prefix("$(").and_then(|r| r.strip_suffix(')')) else {
        return false;
    };
    let mut depth = 0i32;
    for c in inner.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ => {}
        }
        if depth < 0 {
            return false;
        }
    }
    depth == 0
}

/// An env value in a batch script: a command substitution as given, anything else as one shell word.
pub(crate) fn env_value(v: &str) -> Cow<'_, str> {
    if is_command_substitution(v) {
        Cow::Borrowed(v)
    } else {
        quote(v)
    }
}

/// `$NAME` and `${NAME}` replaced by the environment's values (`$PWD` by the working directory when unset), as the
/// job's shell would expand them in a path.
pub(crate) fn expand_vars(s: &str) -> String {
    let var = |name: &str| {
        std::env::var(name).ok().or_else(|| {
            (name == "PWD")
                .then(|| {
                    std::env::current_dir()
                        .ok()
                        .map(|d| d.display().to_string())
                })
                .flatten()
        })
    };
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let (name, tail) = if let Some(inner) = after.strip_prefix('{') {
            match inner.find('}') {
                Some(j) => (&inner[..j], &inner[j + 1..]),
                None => ("", after),
            }
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        match (name.is_empty(), var(name)) {
            (false, Some(v)) => out.push_str(&v),
            _ => {
                out.push('$');
                rest = after;
                continue;
            }
        }
        rest = tail;
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod expand_tests {
    use super::expand_vars;

    #[test]
    fn variables_in_paths() {
        let cwd = std::env::current_dir().unwrap().display().to_string();
        let pwd = std::env::var("PWD").unwrap_or(cwd);
        assert_eq!(expand_vars("$PWD/conf/x.txt"), format!("{pwd}/conf/x.txt"));
        assert_eq!(expand_vars("${PWD}/a"), format!("{pwd}/a"));
        assert_eq!(
            expand_vars("/a/$CLOUDAI_SURELY_UNSET_VAR/b"),
            "/a/$CLOUDAI_SURELY_UNSET_VAR/b"
        );
        assert_eq!(expand_vars("cost $5"), "cost $5");
    }
}
