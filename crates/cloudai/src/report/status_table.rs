//! The final "Scenario results" table: one row per test iteration with its status and details, boxed like
//! CloudAI's (rich's double-line box). On a terminal it fits the terminal's width (long test ids and details wrap);
//! elsewhere (a pipe, a file, CI's log) nothing wraps. Paths below the working directory are shown relative to it.

use crate::results::IterationRecord;

/// The width of the terminal on stdout, when stdout is one.
pub(crate) fn terminal_width() -> Option<usize> {
    // SAFETY: isatty and the TIOCGWINSZ ioctl only read the descriptor's state into `ws`
    unsafe {
        if libc::isatty(1) != 1 {
            return None;
        }
        let mut ws: libc::winsize = std::mem::zeroed();
        if libc::ioctl(1, libc::TIOCGWINSZ, &mut ws) == 0 && ws.ws_col > 0 {
            return Some(ws.ws_col as usize);
        }
    }
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse().ok())
        .or(Some(80))
}

/// `path` relative to the working directory when below it.
fn shown_path(path: &str) -> String {
    let p = std::path::Path::new(path);
    std::env::current_dir()
        .ok()
        .and_then(|cwd| p.strip_prefix(&cwd).ok().map(|r| r.display().to_string()))
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| path.to_string())
}

pub(crate) fn render(records: &[IterationRecord]) -> String {
    render_at(records, terminal_width())
}

/// The table for a terminal of `width` columns, or unwrapped when `None`.
pub(crate) fn render_at(records: &[IterationRecord], width: Option<usize>) -> String {
    let rows: Vec<(String, &str, String)> = records
        .iter()
        .map(|r| {
            let mut details = shown_path(&r.output_path);
            if !r.message.is_empty() {
                details.push('\n');
                details.push_str(&r.message);
            }
            // a PASS says what it rests on
            if r.status == crate::results::Status::Passed {
                let brief = crate::workloads::judge::brief(&r.checks);
                if !brief.is_empty() {
                    details.push('\n');
                    details.push_str(&brief);
                }
            }
            let case = if r.iterations > 1 {
                format!("{} #{}", r.test_id, r.iteration)
            } else {
                r.test_id.clone()
            };
            (case, r.status.as_str(), details)
        })
        .collect();
    let mut w_case = rows
        .iter()
        .map(|r| r.0.chars().count())
        .chain([4])
        .max()
        .unwrap();
    let w_status = rows.iter().map(|r| r.1.len()).chain([6]).max().unwrap();
    let longest_detail = rows
        .iter()
        .flat_map(|r| r.2.split('\n'))
        .map(|l| l.chars().count())
        .chain([7])
        .max()
        .unwrap();
    // the borders and padding take 10 columns; the details get what is left, the case column gives way first
    let w_details = match width {
        None => longest_detail,
        Some(cols) => {
            let room = cols.saturating_sub(w_status + 10);
            // a long test id takes at most half of what is left
            w_case = w_case.min((room / 2).max(4));
            room.saturating_sub(w_case).max(8)
        }
    };

    let line = |l: char, fill: char, mid: char, r: char| {
        format!(
            "{l}{}{mid}{}{mid}{}{r}\n",
            fill.to_string().repeat(w_case + 2),
            fill.to_string().repeat(w_status + 2),
            fill.to_string().repeat(w_details + 2)
        )
    };
    let row = |a: &str, b: &str, c: &str| {
        // padded first, painted after: colour codes take no columns
        let b = format!("{b:<w_status$}");
        let b = match crate::util::color::status(&b) {
            Some(p) => b.replacen(b.trim_end(), &crate::util::color::paint(b.trim_end(), p), 1),
            None => b,
        };
        format!("║ {a:<w_case$} │ {b} │ {c:<w_details$} ║\n")
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
    use super::{render_at, wrap};
    use crate::results::{IterationRecord, Status};

    #[test]
    fn the_table_fits_its_terminal_and_does_not_wrap_elsewhere() {
        let long_id = "nccl.all_reduce_perf_mpi.16_nodes.ib_sharp_enabled.ring_tree_x";
        assert!(long_id.len() > 60);
        let rec = IterationRecord {
            test_id: long_id.into(),
            iterations: 1,
            status: Status::Failed,
            output_path: format!("/scratch/results/scenario_2026-12-05_07-00-00/{long_id}/0"),
            message: "the command exited with status 127; see stderr.txt; stderr.txt ends: bash: line 3: \
                      all_reduce_perf_mpi: command not found"
                .into(),
            ..Default::default()
        };
        for cols in [80, 100, 200] {
            let t = render_at(std::slice::from_ref(&rec), Some(cols));
            for line in t.lines() {
                assert!(line.chars().count() <= cols, "{cols}: {line}");
            }
            assert!(t.contains("FAILED"));
        }
        // not a terminal: one line per detail, whatever its length
        let t = render_at(std::slice::from_ref(&rec), None);
        assert!(t.lines().any(|l| l.contains(&rec.message)), "{t}");
        assert!(t.lines().any(|l| l.contains(long_id)), "{t}");
    }

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
