//! Config errors: where (file:line:col), which field, what was expected, and what to do about it.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

/// A place in a config file (1-based line and column).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loc {
    pub file: Arc<Path>,
    pub line: u32,
    pub col: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub loc: Loc,
    /// Dotted field path like `Tests.0.cmd_args.minbytes`; empty for file-level errors.
    pub field: String,
    pub message: String,
    pub hint: Option<String>,
    /// Line/column are meaningless for file-level problems (missing file).
    pub has_position: bool,
    /// A warning is reported but does not fail the load (unsupported templates in verify-configs).
    pub warning: bool,
}

impl ConfigError {
    pub fn new(loc: Loc, field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            loc,
            field: field.into(),
            message: message.into(),
            hint: None,
            has_position: true,
            warning: false,
        }
    }

    pub fn file(path: &Path, message: impl Into<String>) -> Self {
        let loc = Loc {
            file: Arc::from(path),
            line: 1,
            col: 1,
        };
        Self {
            has_position: false,
            ..Self::new(loc, "", message)
        }
    }

    pub(crate) fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    pub(crate) fn with_hint_opt(mut self, hint: Option<String>) -> Self {
        self.hint = hint;
        self
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.loc.file.display())?;
        if self.has_position {
            write!(f, ":{}:{}", self.loc.line, self.loc.col)?;
        }
        if !self.field.is_empty() {
            write!(f, ": field '{}'", self.field)?;
        }
        write!(f, ": {}", self.message)?;
        if let Some(h) = &self.hint {
            write!(f, "\n  hint: {h}")?;
        }
        Ok(())
    }
}

/// All problems found while loading one set of configs; loading reports every error, not only the first.
#[derive(Debug, Default)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    /// Prints every error (and warning) once, in order.
    /// Each problem as JSON (`file`, `line`, `column`, `field`, `message`, `hint`, `warning`), once each.
    pub fn to_json(&self) -> Vec<serde_json::Value> {
        let mut seen = std::collections::HashSet::new();
        self.0
            .iter()
            .filter(|e| seen.insert((e.loc.file.clone(), e.loc.line, e.loc.col, e.message.clone())))
            .map(|e| {
                serde_json::json!({
                    "file": e.loc.file.display().to_string(),
                    "line": e.has_position.then_some(e.loc.line),
                    "column": e.has_position.then_some(e.loc.col),
                    "field": e.field,
                    "message": e.message,
                    "hint": e.hint,
                    "warning": e.warning,
                })
            })
            .collect()
    }

    pub fn report(&self) {
        // a value checked both where it is written and in the merged test it lands in is reported once
        let mut seen = std::collections::HashSet::new();
        let key = |e: &ConfigError| {
            format!(
                "{}:{}:{}:{}",
                e.loc.file.display(),
                e.loc.line,
                e.loc.col,
                e.message
            )
        };
        for e in self.0.iter().filter(|e| seen.insert(key(e))) {
            if e.warning {
                crate::warn!("{e}");
            } else {
                crate::error!("{e}");
            }
        }
    }

    pub fn push(&mut self, e: ConfigError) {
        self.0.push(e);
    }
    pub(crate) fn has_errors(&self) -> bool {
        self.0.iter().any(|e| !e.warning)
    }
    pub(crate) fn into_result<T>(self, value: T) -> Result<T, ConfigErrors> {
        if self.has_errors() {
            Err(self)
        } else {
            Ok(value)
        }
    }
}

impl From<ConfigError> for ConfigErrors {
    fn from(e: ConfigError) -> Self {
        ConfigErrors(vec![e])
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// The closest candidate, for "did you mean" hints: a small edit distance (a swap of two letters counts once), or
/// one name being the start of the other (`start_post_completion` → `start_post_comp`).
pub(crate) fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    closest(word, candidates, true)
}

/// A candidate a few edits from `word` (a misspelling), prefixes aside: a key that extends a declared name
/// (`output_tokens_stddev` beside `output_tokens`) is a name of its own.
pub(crate) fn misspelling_of<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    closest(word, candidates, false)
}

fn closest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
    prefixes: bool,
) -> Option<&'a str> {
    let w = word.to_ascii_lowercase();
    let limit = (w.chars().count() / 3).clamp(1, 3);
    candidates
        .into_iter()
        .filter_map(|c| {
            let lc = c.to_ascii_lowercase();
            let d = distance(&w, &lc);
            let prefix = prefixes
                && lc.len() >= 4
                && w.len() >= 4
                && (w.starts_with(&lc) || lc.starts_with(&w));
            (d <= limit || prefix).then_some((d, c))
        })
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Optimal string alignment distance (Levenshtein plus adjacent transpositions).
fn distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            d[i][j] = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_names_only() {
        let names = ["minbytes", "maxbytes", "stepbytes", "iters"];
        assert_eq!(did_you_mean("minbyte", names), Some("minbytes"));
        assert_eq!(did_you_mean("itres", names), Some("iters"));
        assert_eq!(did_you_mean("completely_else", names), None);
        assert_eq!(
            did_you_mean("slrum", ["standalone", "slurm"]),
            Some("slurm")
        );
        assert_eq!(
            did_you_mean(
                "start_post_completion",
                ["start_post_init", "start_post_comp"]
            ),
            Some("start_post_comp")
        );
    }
}
