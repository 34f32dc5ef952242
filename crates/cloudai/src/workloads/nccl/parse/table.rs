//! The lines of a result table: rows in every layout nccl-tests has printed (with or without a header line above
//! them), the header, rank and footer lines, and rows cut by or glued to another process's log line.

use super::*;

/// Parses a number as nccl-tests prints it (fixed, exponent, `nan`, `-nan`, `inf`).
pub(super) fn num(tok: &str) -> Option<f64> {
    match tok {
        "nan" | "-nan" | "NaN" | "-NaN" => Some(f64::NAN),
        _ => tok.parse::<f64>().ok(),
    }
}

pub(super) fn uint(tok: &str) -> Option<u64> {
    if tok.bytes().all(|b| b.is_ascii_digit()) && !tok.is_empty() {
        tok.parse().ok()
    } else {
        None
    }
}

/// Table layouts of other versions and flags, tried in order for rows with no header line above them (the
/// v2.13+ default is tried first): `-S` timestamps, `-I` per-iteration columns, and the ≤ v2.12 per-test layouts
/// (4- or 3-column preambles, a float `error` column).
pub(super) const HEADERLESS_LAYOUTS: &[&[&str]] = &[
    &[
        "size",
        "count",
        "type",
        "redop",
        "root",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "timestamp",
    ],
    &[
        "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "i_min",
        "i_max", "i_p99", "i_cv%", "time", "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99",
        "i_cv%",
    ],
    &[
        "size",
        "count",
        "type",
        "redop",
        "root",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "i_min",
        "i_max",
        "i_p99",
        "i_cv%",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "i_min",
        "i_max",
        "i_p99",
        "i_cv%",
        "timestamp",
    ],
    &[
        "size", "count", "type", "redop", "time", "algbw", "busbw", "error", "time", "algbw",
        "busbw", "error",
    ],
    &[
        "size", "count", "type", "root", "time", "algbw", "busbw", "error", "time", "algbw",
        "busbw", "error",
    ],
    &[
        "size", "count", "type", "time", "algbw", "busbw", "error", "time", "algbw", "busbw",
        "error",
    ],
    &[
        "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "error", "time",
        "algbw", "busbw", "error",
    ],
];

/// Tokens looked at on a line that may be a data row (longer lines are not rows).
pub(super) const MAX_TOKENS: usize = 48;

/// Default (v2.13+) columns, used when a table has no header line.
pub(super) const DEFAULT_COLUMNS: &[&str] = &[
    "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
    "busbw", "#wrong",
];

pub(super) fn is_header(tokens: &[&str]) -> bool {
    tokens.len() >= 6 && tokens[0] == "size" && tokens[1] == "count" && tokens.contains(&"algbw")
}

pub(super) fn side_from(tokens: &[&str], cols: &[String], start: usize) -> Option<(Side, usize)> {
    // start points at "time"/"cputime"; then algbw, busbw, and #wrong/error (which may be absent in v1 layouts)
    let time = num(tokens.get(start)?)?;
    let algbw = num(tokens.get(start + 1)?)?;
    let busbw = num(tokens.get(start + 2)?)?;
    let mut used = 3;
    let mut side = Side {
        time_us: time,
        algbw,
        busbw,
        ..Default::default()
    };
    if matches!(
        cols.get(start + 3).map(String::as_str),
        Some("#wrong") | Some("error")
    ) {
        let w = *tokens.get(start + 3)?;
        side.wrong_text = text(w);
        side.wrong = if w == "N/A" { None } else { Some(num(w)?) };
        used = 4;
    }
    Some((side, used))
}

/// Maps one line's tokens onto the table columns; `None` if it is not a data row.
pub(super) fn parse_row(tokens: &[&str], cols: &[String], line: usize) -> Option<Row> {
    let has_ts = cols.last().is_some_and(|c| c == "timestamp");
    let expected = cols.len() + usize::from(has_ts);
    // hypercube prints an empty redop: one token short, and the token after the type is the root (an integer)
    let mut owned;
    let mut toks = tokens;
    if toks.len() + 1 == expected {
        if let Some(ri) = cols.iter().position(|c| c == "redop") {
            if toks.get(ri).is_some_and(|t| t.parse::<i64>().is_ok())
                && cols.get(ri + 1).is_some_and(|c| c == "root")
            {
                owned = tokens.to_vec();
                owned.insert(ri, "");
                toks = &owned;
            }
        }
    }
    if toks.len() != expected {
        return None;
    }
    let mut row = Row {
        line,
        ..Default::default()
    };
    let mut i = 0;
    let mut sides: [Option<Side>; 2] = [None, None];
    while i < cols.len() {
        match cols[i].as_str() {
            "size" => row.size = uint(toks[i])?,
            "count" => row.count = uint(toks[i])?,
            "type" => {
                if !toks[i].bytes().next()?.is_ascii_alphabetic() {
                    return None;
                }
                row.dtype = text(toks[i]);
            }
            "redop" => row.redop = text(toks[i]),
            "root" => row.root = Some(toks[i].parse().ok()?),
            "time" | "cputime" => {
                let (side, used) = side_from(toks, cols, i)?;
                let slot = if sides[0].is_none() { 0 } else { 1 };
                sides[slot] = Some(side);
                i += used;
                continue;
            }
            "timestamp" => {
                row.timestamp = Some(format!("{} {}", toks[i], toks.get(i + 1)?));
            }
            _ => {
                // per-iteration columns (i_min …) and unknown extras: must be numbers or N/A
                if toks[i] != "N/A" {
                    num(toks[i])?;
                }
            }
        }
        i += 1;
    }
    let [oop, ip] = sides;
    row.out_of_place = oop?;
    row.in_place = ip;
    Some(row)
}

/// The words after a footer label's colon: `: 0 OK` → ["0", "OK"].
pub(super) fn footer_values(rest: &str) -> Vec<&str> {
    rest.trim_start_matches([' ', ':'])
        .split_whitespace()
        .collect()
}

pub(super) fn parse_header_params(run: &mut Run, body: &str) {
    let t: Vec<&str> = body.split_whitespace().collect();
    let after = |key: &str| {
        t.iter()
            .position(|x| *x == key)
            .and_then(|i| t.get(i + 1))
            .copied()
    };
    run.n_thread = after("nThread").and_then(uint);
    run.n_gpus = after("nGpus").and_then(uint);
    run.min_bytes = after("minBytes").and_then(uint);
    run.max_bytes = after("maxBytes").and_then(uint);
    run.validation = after("validation:").and_then(|v| v.parse().ok());
    // "warmup iters: 1 iters: 20": the word "iters:" appears twice
    for (i, w) in t.iter().enumerate() {
        if *w == "iters:" {
            let v = t.get(i + 1).and_then(|x| uint(x));
            match t.get(i.wrapping_sub(1)) {
                Some(&"warmup") => run.warmup_iters = v,
                Some(&"agg") => {}
                _ => run.iters = v,
            }
        }
    }
}

pub(super) fn parse_rank(body: &str) -> Option<Rank> {
    // "Rank  0 Group  0 Pid 584419 on        dkh device  0 [0000:14:00] NVIDIA A100-SXM4-80GB"
    let t: Vec<&str> = body.split_whitespace().collect();
    let after = |key: &str| {
        t.iter()
            .position(|x| *x == key)
            .and_then(|i| t.get(i + 1))
            .copied()
    };
    let rank = after("Rank")?.parse().ok()?;
    let host = after("on")?.to_string();
    let device = after("device")?.parse().ok()?;
    let dev_idx = t.iter().position(|x| *x == "device")?;
    let (bus_id, name_from) = match t.get(dev_idx + 2) {
        Some(b) if b.starts_with('[') => (
            b.trim_matches(|c| c == '[' || c == ']').to_string(),
            dev_idx + 3,
        ),
        _ => (String::new(), dev_idx + 2),
    };
    Some(Rank {
        rank,
        group: after("Group").and_then(|g| g.parse().ok()),
        pid: after("Pid").and_then(uint),
        host,
        device,
        bus_id,
        device_name: t.get(name_from..).map(|r| r.join(" ")).unwrap_or_default(),
    })
}

/// Adds a row to its run: counted in the run's tally, kept while the file's cap allows, handed to a streaming
/// caller.
pub(super) fn add_row(
    run: &mut Run,
    row: Row,
    kept: &mut usize,
    cap: usize,
    pending: &mut Option<Vec<Row>>,
) {
    let keep = *kept < cap;
    run.tally.add(&row, keep);
    if keep {
        *kept += 1;
        if let Some(p) = pending {
            p.push(row.clone());
        }
        run.rows.push(row);
    } else if let Some(p) = pending {
        p.push(row);
    }
}

/// The first part of a row whose writer's output was cut (at any byte: another process's log line was written
/// into it), waiting for the rest on a later line.
pub(super) struct Partial {
    pub(super) line: usize,
    /// The row's whole tokens before the cut.
    pub(super) head: Vec<String>,
    /// The token the log line was glued to (`-1host:12:34` when the cut came right after a root of `-1`, or in the
    /// middle of a number): some prefix of it belongs to the row.
    pub(super) glued: String,
}

impl Partial {
    /// The row completed by `rest` (a later line's tokens; `continues` when that line starts in the middle of a
    /// token, i.e. without a blank), trying the longest prefix of the glued token first; the column count decides.
    pub(super) fn join(&self, rest: &[&str], continues: bool, cols: &[String]) -> Option<Row> {
        let cuts = (0..=self.glued.len())
            .rev()
            .filter(|&k| self.glued.is_char_boundary(k));
        for k in cuts {
            let prefix = &self.glued[..k];
            if prefix.is_empty() && self.head.is_empty() {
                continue; // nothing of this part would be in the row
            }
            // what follows the row's part must be where a log line starts (`host:pid:tid`)
            if !self.glued.is_empty() && !log_start(&self.glued[k..]) {
                continue;
            }
            let mut toks: Vec<String> = self.head.clone();
            match (prefix.is_empty(), continues, rest.split_first()) {
                // the first part ended inside a token (a newline written into it): its last token and the rest's
                // first are one, when the column count says so
                (true, true, Some((first, more))) if self.glued.is_empty() => {
                    let mut merged = toks.clone();
                    if let Some(last) = merged.last_mut() {
                        last.push_str(first);
                    }
                    merged.extend(more.iter().map(|t| t.to_string()));
                    let refs: Vec<&str> = merged.iter().map(String::as_str).collect();
                    if let Some(row) = plausible_row(&refs, cols, self.line) {
                        return Some(row);
                    }
                    toks.extend(rest.iter().map(|t| t.to_string()));
                }
                (true, _, _) => toks.extend(rest.iter().map(|t| t.to_string())),
                (false, true, Some((first, more))) => {
                    toks.push(format!("{prefix}{first}"));
                    toks.extend(more.iter().map(|t| t.to_string()));
                }
                (false, _, _) => {
                    toks.push(prefix.to_string());
                    toks.extend(rest.iter().map(|t| t.to_string()));
                }
            }
            let refs: Vec<&str> = toks.iter().map(String::as_str).collect();
            if let Some(row) = plausible_row(&refs, cols, self.line) {
                return Some(row);
            }
        }
        None
    }
}

/// A row of the table whose type and operation are ones nccl-tests prints (a row put together from pieces — a cut
/// inside a word leaves letters of a host name that would otherwise pass as a type).
pub(super) fn plausible_row(tokens: &[&str], cols: &[String], line: usize) -> Option<Row> {
    parse_row(tokens, cols, line).filter(|r| TYPES.contains(&&*r.dtype) && OPS.contains(&&*r.redop))
}

/// The tokens of a row up to where a log line was written into it: those before the first token no row has, and
/// that token's part before a `host:pid:tid` start inside it; `None` when every token is a row's. The flag says
/// whether such a start was found.
pub(super) fn before_log_line<'a>(tokens: &[&'a str]) -> Option<(Vec<&'a str>, bool)> {
    let i = tokens.iter().position(|t| !row_token(t))?;
    let t = tokens[i];
    let cut = (1..t.len())
        .filter(|&k| t.is_char_boundary(k))
        .find(|&k| log_start(&t[k..]));
    let mut kept = tokens[..i].to_vec();
    if let Some(k) = cut {
        kept.push(&t[..k]);
    }
    Some((kept, cut.is_some()))
}

/// Data types and operations nccl-tests prints in its rows.
pub(super) const TYPES: &[&str] = &[
    "int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16",
    "fp8_e4m3", "fp8_e5m2", "char",
];
pub(super) const OPS: &[&str] = &["", "sum", "prod", "max", "min", "avg", "mulsum", "none"];

/// Whether `s` is how an NCCL log line starts: `host:pid:tid` (a host name starts with a letter or digit).
pub(super) fn log_start(s: &str) -> bool {
    let mut parts = s.split(':');
    let (Some(host), Some(pid), Some(tid), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let digits = |x: &str| !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit());
    host.bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphanumeric())
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && digits(pid)
        && digits(tid)
}

/// Whether a token can be part of a data row (numbers, type and op names, `N/A`).
pub(super) fn row_token(t: &str) -> bool {
    t.bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'+' | b'/' | b'%'))
}

/// A row written right after a log line's text, before its newline: the line's last tokens, when they make a whole
/// row of the table; or the first part of one (a size, then row tokens), to be completed by a later line.
pub(super) fn glued_row(
    line: &str,
    run: &mut Option<Run>,
    partial: &mut Option<Partial>,
    default_cols: &[String],
    lineno: usize,
    (kept, cap, pending): (&mut usize, usize, &mut Option<Vec<Row>>),
) {
    // a row ends with a number (`#wrong`, a time stamp) or `N/A`: most log lines end otherwise, and cost nothing more
    if !(line.ends_with(|c: char| c.is_ascii_digit()) || line.ends_with("N/A")) {
        return;
    }
    let tail = line
        .split_ascii_whitespace()
        .rev()
        .take_while(|t| row_token(t))
        .take(MAX_TOKENS)
        .count();
    if tail < 5 {
        return;
    }
    let tokens: Vec<&str> = line.split_ascii_whitespace().collect();
    let cols: &[String] = match run {
        Some(r) if !r.columns.is_empty() => &r.columns,
        _ => default_cols,
    };
    let has_ts = cols.last().is_some_and(|c| c == "timestamp");
    let expected = cols.len() + usize::from(has_ts);
    let start = tokens.len() - tail;
    for from in start..tokens.len() {
        let part = &tokens[from..];
        if uint(part[0]).is_none() {
            continue;
        }
        if part.len() == expected {
            if let Some(row) = plausible_row(part, cols, lineno) {
                let r = run.get_or_insert_with(|| Run::at(lineno));
                add_row(r, row, kept, cap, pending);
                return;
            }
        } else if part.len() < expected
            && part.len() >= 5
            && part.get(2).is_some_and(|t| TYPES.contains(t))
        {
            *partial = Some(Partial {
                line: lineno,
                head: part.iter().map(|s| s.to_string()).collect(),
                glued: String::new(),
            });
            return;
        }
    }
}
