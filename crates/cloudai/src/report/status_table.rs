//! The final "Scenario results" table: one row per test iteration with its status and details, boxed like
//! CloudAI's (rich's double-line box) and wrapped to the terminal width.

use crate::results::{IterationRecord, Status};

const WIDTH: usize = 80;

pub fn render(records: &[IterationRecord]) -> String {
    let rows: Vec<(String, &str, String)> = records
        .iter()
        .map(|r| {
            let mut details = r.output_path.clone();
            if !r.message.is_empty() && r.status != Status::Passed {
                details.push('\n');
                details.push_str(&r.message);
            }
            let case = if r.iterations > 1 {
                format!("{} #{}", r.test_id, r.iteration)
            } else {
                r.test_id.clone()
            };
            (case, r.status.as_str(), details)
        })
        .collect();
    let w_case = rows
        .iter()
        .map(|r| r.0.chars().count())
        .chain([4])
        .max()
        .unwrap();
    let w_status = rows.iter().map(|r| r.1.len()).chain([6]).max().unwrap();
    let w_details = WIDTH.saturating_sub(w_case + w_status + 10).max(20);

    let line = |l: char, fill: char, mid: char, r: char| {
        format!(
            "{l}{}{mid}{}{mid}{}{r}\n",
            fill.to_string().repeat(w_case + 2),
            fill.to_string().repeat(w_status + 2),
            fill.to_string().repeat(w_details + 2)
        )
    };
    let row = |a: &str, b: &str, c: &str| {
        format!("║ {a:<w_case$} │ {b:<w_status$} │ {c:<w_details$} ║\n")
    };

    let mut out = line('╔', '═', '╤', '╗');
    out.push_str(&row("Case", "Status", "Details"));
    out.push_str(&line('╟', '─', '┼', '╢'));
    for (i, (case, status, details)) in rows.iter().enumerate() {
        if i > 0 {
            out.push_str(&line('╟', '─', '┼', '╢'));
        }
        let left = wrap(case, w_case);
        let right = wrap(details, w_details);
        for k in 0..left.len().max(right.len()) {
            let a = left.get(k).map_or("", String::as_str);
            let b = if k == 0 { status } else { "" };
            let c = right.get(k).map_or("", String::as_str);
            out.push_str(&row(a, b, c));
        }
    }
    out.push_str(&line('╚', '═', '╧', '╝'));
    out
}

/// Word wrap that also breaks words longer than the width (paths).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    for para in text.split('\n') {
        let mut cur = String::new();
        for word in para.split(' ') {
            let wlen = word.chars().count();
            let clen = cur.chars().count();
            if clen > 0 && clen + 1 + wlen <= width {
                cur.push(' ');
                cur.push_str(word);
                continue;
            }
            if clen > 0 {
                lines.push(std::mem::take(&mut cur));
            }
            let chars: Vec<char> = word.chars().collect();
            let mut chunks = chars.chunks(width.max(1)).peekable();
            while let Some(ch) = chunks.next() {
                let s: String = ch.iter().collect();
                if chunks.peek().is_some() {
                    lines.push(s);
                } else {
                    cur = s;
                }
            }
        }
        lines.push(cur);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::wrap;

    #[test]
    fn wraps_words_and_breaks_long_ones() {
        assert_eq!(wrap("aaa bbb ccc", 7), vec!["aaa bbb", "ccc"]);
        assert_eq!(
            wrap("/a/very/long/path", 6),
            vec!["/a/ver", "y/long", "/path"]
        );
        assert_eq!(wrap("x\ny", 5), vec!["x", "y"]);
    }
}
