//! Slurm host lists: `node-[001-004,007]`, `a[1,3-5]`, comma-separated lists; zero padding is kept.

/// Expands a host list expression into host names. Returns `None` for a malformed expression.
pub(crate) fn expand(expr: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    for item in split_top(expr) {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        expand_one(item, &mut out)?;
    }
    Some(out)
}

/// [`expand`], with the error said: "cannot parse node list '<expr>'".
pub(crate) fn parse(expr: &str) -> Result<Vec<String>, String> {
    expand(expr).ok_or_else(|| format!("cannot parse node list '{expr}'"))
}

/// The host names of a test's `nodes = [...]`: host lists expanded, Slurm's `partition:group:N` specs left out
/// (they name no host), malformed expressions skipped.
pub fn hosts(nodes: &[String]) -> Vec<String> {
    nodes
        .iter()
        .filter(|n| !n.contains(':'))
        .filter_map(|n| expand(n))
        .flatten()
        .collect()
}

/// Splits on commas that are not inside brackets.
fn split_top(s: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

/// Host names one expression may expand to.
pub(crate) const MAX_EXPANDED: usize = 100_000;

fn expand_one(item: &str, out: &mut Vec<String>) -> Option<()> {
    let Some(open) = item.find('[') else {
        out.push(item.to_string());
        return Some(());
    };
    let close = item[open..].find(']')? + open;
    let (prefix, ranges, suffix) = (&item[..open], &item[open + 1..close], &item[close + 1..]);
    let mut tails = Vec::new();
    expand_one(suffix, &mut tails)?;
    if suffix.is_empty() {
        tails = vec![String::new()];
    }
    for r in ranges.split(',') {
        let (a, b) = r.split_once('-').unwrap_or((r, r));
        let (lo, hi): (u64, u64) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
        // reversed ranges are typos; huge ones would exhaust memory (no cluster has a million nodes)
        if lo > hi || hi - lo >= MAX_EXPANDED as u64 || out.len() > MAX_EXPANDED {
            return None;
        }
        let width = b.trim().len();
        for n in lo..=hi {
            for t in &tails {
                out.push(format!("{prefix}{n:0width$}{t}"));
            }
        }
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::expand;

    #[test]
    fn expands_ranges_keeping_padding() {
        assert_eq!(
            expand("node[001-004,007]").unwrap(),
            vec!["node001", "node002", "node003", "node004", "node007"]
        );
        assert_eq!(
            expand("a[1,3-5],b").unwrap(),
            vec!["a1", "a3", "a4", "a5", "b"]
        );
        assert_eq!(
            expand("node-[098-101]").unwrap(),
            vec!["node-098", "node-099", "node-100", "node-101"]
        );
        assert!(expand("x[3-1]").is_none());
        assert!(expand("x[1-").is_none());
    }
}
