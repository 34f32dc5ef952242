//! nccl-tests stdout parser: no I/O, every version's layout.
//!
//! Columns are mapped from the table header (pre-2.13 layouts, `error` vs `#wrong`, `cputime`, `-S` timestamps,
//! `-I` per-iteration columns), rows are recognised by their numeric pattern rather than by position (NCCL log
//! lines can start with a digit), launcher prefixes are stripped, and every failure line is kept with its line
//! number. Several tests in one file become several runs.

use super::model::text;
pub use super::model::*;
mod table;
use table::*;

fn classify_error(line: &str) -> Option<ErrorKind> {
    let has = |s: &str| line.contains(s);
    // older nccl-tests print `NCCL failure common.cu:393 'unhandled system error'` (no `Test ` prefix)
    let at_file_line = |what: &str| {
        line.find(what).is_some_and(|i| {
            let rest = &line[i + what.len()..];
            rest.split_whitespace().next().is_some_and(|loc| {
                loc.contains(':')
                    && loc
                        .rsplit(':')
                        .next()
                        .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()) && !n.is_empty())
            })
        })
    };
    Some(
        if has("Test NCCL failure") || at_file_line("NCCL failure ") {
            ErrorKind::NcclFailure
        } else if has("Test CUDA failure") || at_file_line("CUDA failure ") {
            ErrorKind::CudaFailure
        } else if has("Test timeout") {
            ErrorKind::Timeout
        } else if has("Test failure") {
            ErrorKind::TestFailure
        } else if has("NCCL WARN") {
            ErrorKind::NcclWarn
        } else if has("DUE TO TIME LIMIT")
        || has("CANCELLED AT")
        || has("exited on signal")
        || has("Segmentation fault")
        || has("core dumped")
        || has("Aborted")
        || has("mpirun detected that one or more processes exited")
        || has("mpirun noticed that process")
        // Open MPI 5 launches with PRRTE: its banners name prterun
        || has("prterun detected that one or more processes exited")
        || has("prterun noticed that process")
        || has("prterun has exited due to process")
        // Open MPI's fatal-error banner
        || has("*** An error occurred in")
        || has("MPI_ERRORS_ARE_FATAL")
        || (has("srun: error:") && has("Exited with exit code"))
        {
            ErrorKind::Killed
        } else if has("invalid option")
            || has("unrecognized option")
            || has("Invalid number of GPUs")
            || has("invalid size specified")
            || has("invalid sizes for")
        {
            ErrorKind::Usage
        } else {
            return None;
        },
    )
}

/// Parses a whole stdout file.
pub fn parse(text: &str) -> Output {
    let mut p = Parser::new();
    for (idx, raw) in text.split('\n').enumerate() {
        p.physical(idx + 1, raw);
    }
    p.finish()
}

/// The parser's state between lines: it reads one physical line at a time, so a caller may feed a file as a
/// stream.
pub struct Parser {
    out: Output,
    run: Option<Run>,
    pending_version: Option<String>,
    pending_test: Option<String>,
    /// A row cut in two by a log line written into the middle of it.
    partial: Option<Partial>,
    /// Rows kept so far, and how many may be.
    kept: usize,
    cap: usize,
    /// Rows read since the caller last took them, when it streams them (the CSV is written this way).
    pending: Option<Vec<Row>>,
    default_cols: Vec<String>,
    last_line: usize,
    /// Unfinished lines of tagged streams (`mpirun --tag-output` writes a tag before every chunk it forwards,
    /// so a line printed in several writes carries the tag again in its middle, possibly after another rank's
    /// text): (tag, first line number, text so far).
    open: Vec<(String, usize, String)>,
}

impl Default for Parser {
    fn default() -> Self {
        Self::new()
    }
}

impl Parser {
    pub fn new() -> Self {
        Parser {
            out: Output::default(),
            run: None,
            pending_version: None,
            pending_test: None,
            partial: None,
            kept: 0,
            cap: ROW_CAP,
            pending: None,
            default_cols: DEFAULT_COLUMNS.iter().map(|s| s.to_string()).collect(),
            last_line: 0,
            open: Vec::new(),
        }
    }

    /// A parser that keeps the first `cap` rows and also hands every row to its caller as it is read
    /// ([`Parser::drain_rows`]).
    pub(crate) fn streaming(cap: usize) -> Self {
        Parser {
            pending: Some(Vec::new()),
            cap,
            ..Self::new()
        }
    }

    /// Whether rows wait to be taken ([`Parser::drain_rows`]).
    pub(crate) fn has_pending_rows(&self) -> bool {
        self.pending.as_ref().is_some_and(|p| !p.is_empty())
    }

    /// The first run so far that lists its ranks (the device facts of a CSV row come from it).
    pub(crate) fn ranks_run(&self) -> Option<&Run> {
        self.out
            .runs
            .iter()
            .chain(self.run.iter())
            .find(|r| !r.ranks.is_empty())
    }

    /// Hands the rows read since the last call to `each` (streaming parsers only), keeping the buffer.
    pub(crate) fn drain_rows(&mut self, mut each: impl FnMut(&Row)) {
        if let Some(p) = self.pending.as_mut() {
            for r in p.drain(..) {
                each(&r);
            }
        }
    }

    /// One line of the file as written (without its `\n`), with its 1-based number.
    pub fn physical(&mut self, lineno: usize, raw: &str) {
        if !raw.is_empty() {
            self.last_line = lineno;
        }
        let raw = raw.trim_end_matches('\r');
        // most lines carry no launcher tag: one byte scan decides
        if self.open.is_empty() && !raw.as_bytes().contains(&b'<') {
            self.line(lineno, super::prefix::leading_untagged(raw));
            return;
        }
        let (mut tag, mut rest) = super::prefix::leading(raw);
        if self.open.is_empty() && super::prefix::find_tag(rest).is_none() {
            self.line(lineno, rest);
            return;
        }
        // a tagged stream: text up to the next tag belongs to the current tag's unfinished line
        while let Some((start, end, next)) = super::prefix::find_tag(rest) {
            if start > 0 || tag.is_some() {
                let key = tag.unwrap_or("");
                match self.open.iter_mut().find(|(t, _, _)| t == key) {
                    Some((_, _, text)) => text.push_str(&rest[..start]),
                    None => self
                        .open
                        .push((key.to_string(), lineno, rest[..start].to_string())),
                }
            }
            tag = Some(next);
            rest = &rest[end..];
        }
        let key = tag.unwrap_or("");
        match self.open.iter().position(|(t, _, _)| t == key) {
            Some(i) => {
                let (_, first, mut text) = self.open.swap_remove(i);
                text.push_str(rest);
                self.line(first, &text);
            }
            None => self.line(lineno, rest),
        }
    }

    /// Ends the file: unfinished tagged lines count as written, the last run is closed.
    /// Unfinished tagged lines count as written (at the end of the file).
    pub(crate) fn flush_open(&mut self) {
        for (_, first, text) in std::mem::take(&mut self.open) {
            self.line(first, &text);
        }
    }

    pub fn finish(mut self) -> Output {
        self.flush_open();
        self.out.lines = self.last_line;
        Self::close_run(&mut self.out, &mut self.run);
        self.out
    }

    fn close_run(out: &mut Output, run: &mut Option<Run>) {
        if let Some(r) = run.take() {
            out.runs.push(r);
        }
    }

    /// One logical line of nccl-tests output, launcher prefixes removed.
    #[inline]
    fn line(&mut self, lineno: usize, text: &str) {
        let line = text.trim();
        if line.is_empty() {
            return;
        }
        if let Some(p) = &self.partial {
            let cols: &[String] = match &self.run {
                Some(r) if !r.columns.is_empty() => &r.columns,
                _ => &self.default_cols,
            };
            let mut rest: Vec<&str> = line.split_ascii_whitespace().take(MAX_TOKENS).collect();
            let continues = !text.starts_with(|c: char| c.is_whitespace());
            // the rest of the row may have a log line glued after it: the row ends where the log line starts
            if let Some((kept, _)) = before_log_line(&rest) {
                rest = kept;
            }
            if let Some(row) = p.join(&rest, continues, cols) {
                self.partial = None;
                let run = self.run.get_or_insert_with(|| Run::at(lineno));
                add_row(run, row, &mut self.kept, self.cap, &mut self.pending);
                return;
            }
            // log lines may come between the two parts; anything else ends the wait
            if !line.contains(" NCCL ") && !line.starts_with('#') {
                self.partial = None;
            }
        }
        let out = &mut self.out;
        let run = &mut self.run;
        let partial = &mut self.partial;
        let (kept, cap, pending) = (&mut self.kept, self.cap, &mut self.pending);
        let pending_version = &mut self.pending_version;
        let pending_test = &mut self.pending_test;
        let default_cols = &self.default_cols;
        let finish = Self::close_run;
        let first = line.as_bytes()[0];
        // Data rows are most lines: try them first (cheap to reject, never error text).
        if first.is_ascii_digit() {
            // on the stack: a row has at most ~25 tokens, and millions of rows must not allocate
            let mut buf: [&str; MAX_TOKENS] = [""; MAX_TOKENS];
            let mut n = 0;
            for t in line.split_ascii_whitespace() {
                if n == MAX_TOKENS {
                    break;
                }
                buf[n] = t;
                n += 1;
            }
            let tokens = &buf[..n];
            let cols: &[String] = match &run {
                Some(r) if !r.columns.is_empty() => &r.columns,
                _ => default_cols,
            };
            let ncols = cols.len();
            if let Some(row) = parse_row(tokens, cols, lineno) {
                *partial = None;
                let r = run.get_or_insert_with(|| Run::at(lineno));
                add_row(r, row, kept, cap, pending);
                return;
            }
            // no header seen (an excerpt that starts below it): another version's layout may fit the row
            if run.as_ref().is_none_or(|r| r.columns.is_empty()) {
                for layout in HEADERLESS_LAYOUTS {
                    let cols: Vec<String> = layout.iter().map(|s| s.to_string()).collect();
                    if let Some(row) = parse_row(tokens, &cols, lineno) {
                        *partial = None;
                        let r = run.get_or_insert_with(|| Run::at(lineno));
                        r.columns = cols;
                        add_row(r, row, kept, cap, pending);
                        return;
                    }
                }
            }
            // a whole row with a log line glued to its end (written before the row's newline)
            if let Some((whole, true)) = before_log_line(tokens) {
                if let Some(row) = plausible_row(&whole, cols, lineno) {
                    *partial = None;
                    let r = run.get_or_insert_with(|| Run::at(lineno));
                    add_row(r, row, kept, cap, pending);
                    if let Some(j) = line.find("NCCL INFO") {
                        net_info(out, &line[j + "NCCL INFO".len()..]);
                    }
                    return;
                }
            }
            // the first part of a row: a size, then row tokens up to a log line written into the row (glued to
            // the token it cut, or starting the line's remainder); the rest comes later
            if tokens.len() >= 2 {
                let n = tokens.iter().take_while(|t| row_token(t)).count();
                if n < ncols {
                    *partial = Some(Partial {
                        line: lineno,
                        head: tokens[..n].iter().map(|s| s.to_string()).collect(),
                        glued: tokens.get(n).map(|s| s.to_string()).unwrap_or_default(),
                    });
                }
            }
        }
        let hashed = first == b'#';
        let body = if hashed {
            line.trim_start_matches('#').trim()
        } else {
            line
        };
        // Keywords, with or without the leading '#' (copies through Markdown lose it).
        if hashed || matches!(first, b'n' | b'O' | b'A' | b'C' | b's') {
            if let Some(v) = body.strip_prefix("nccl-tests version ") {
                finish(out, run);
                *pending_version = Some(version_text(v));
                return;
            }
            if let Some(t) = body.strip_prefix("Collective test starting:") {
                if run
                    .as_ref()
                    .is_some_and(|r| r.n_thread.is_some() || r.tally.rows > 0)
                {
                    finish(out, run);
                }
                *pending_test = Some(t.trim().to_string());
                return;
            }
            if body.starts_with("nThread ") {
                if run
                    .as_ref()
                    .is_some_and(|r| r.n_thread.is_some() || r.tally.rows > 0)
                {
                    finish(out, run);
                }
                let r = run.get_or_insert_with(|| Run::at(lineno));
                r.line = lineno;
                r.version = pending_version.take().or(r.version.take());
                r.test = pending_test.take().or(r.test.take());
                parse_header_params(r, body);
                return;
            }
            if let Some(rest) = body.strip_prefix("Out of bounds values") {
                let t = footer_values(rest);
                let r = run.get_or_insert_with(|| Run::at(lineno));
                let n = t.first().and_then(|x| uint(x)).unwrap_or(0);
                r.out_of_bounds = Some((n, t.get(1).is_none_or(|s| *s == "OK") && n == 0));
                return;
            }
            if let Some(rest) = body.strip_prefix("Avg bus bandwidth") {
                let t = footer_values(rest);
                let r = run.get_or_insert_with(|| Run::at(lineno));
                r.avg_busbw = t.first().and_then(|x| num(x));
                r.avg_ok = t.get(1).map(|s| *s == "OK");
                return;
            }
            if body.starts_with("Collective test concluded") {
                if let Some(r) = run.as_mut() {
                    r.concluded = true;
                }
                return;
            }
            if body.starts_with("size") {
                let tokens: Vec<&str> = body.split_ascii_whitespace().collect();
                if is_header(&tokens) {
                    run.get_or_insert_with(|| Run::at(lineno)).columns =
                        tokens.iter().map(|s| s.to_string()).collect();
                    return;
                }
            }
        }
        if hashed {
            if body.starts_with("Rank ") {
                if let Some(rank) = parse_rank(body) {
                    run.get_or_insert_with(|| Run::at(lineno)).ranks.push(rank);
                }
            } else if let Some(msg) = body.strip_prefix("error:") {
                out.push_error(lineno, ErrorKind::Other, msg.trim());
            }
            return; // other comment lines: "Using devices", units, GPU memory usage …
        }
        if let Some(i) = line.find("NCCL INFO") {
            net_info(out, &line[i + "NCCL INFO".len()..]);
            // a row glued after the log line (written into it before its newline)
            glued_row(
                line,
                run,
                partial,
                default_cols,
                lineno,
                (kept, cap, pending),
            );
            return;
        }
        // a banner wrapped after "exited on": the signal is on the next line, and belongs to the same message
        if line.starts_with("signal ") {
            if let Some(last) = out.errors.last_mut() {
                if last.kind == ErrorKind::Killed
                    && last.line + 1 == lineno
                    && last.text.trim_end().ends_with("exited on")
                {
                    last.text = format!("{} {line}", last.text.trim_end());
                    return;
                }
            }
        }
        if let Some(kind) = classify_error(line) {
            out.push_error(lineno, kind, line);
        } else if line.ends_with("exited on") {
            // `... on node x exited on` + `signal 9 (Killed).`: kept so the next line can complete it
            out.push_error(lineno, ErrorKind::Killed, line);
        }
    }
}

/// What an `NCCL INFO` line says of the network: `Using network <name>`, `NET/IB : No device found`,
/// `NET/Socket : Using [0]eth0:…`, and channels `… via NET/<name>/<dev>[/GDRDMA]`.
fn net_info(out: &mut Output, msg: &str) {
    let msg = msg.trim();
    if !(msg.starts_with("Using network") || msg.contains("NET/")) {
        return;
    }
    if let Some(name) = msg.strip_prefix("Using network") {
        let name = name.trim();
        if name.is_empty() {
            return;
        }
        set_network(out, name, format!("NET/{name}"));
        return;
    }
    if msg.starts_with("NET/IB") && msg.contains("No device found") {
        out.no_ib_device = true;
        return;
    }
    if let Some(rest) = msg.strip_prefix("NET/Socket : Using") {
        // `[0]eth0:10.0.0.1<0> [1]eth1:…` → `eth0, eth1`
        let ifs: Vec<&str> = rest
            .split_whitespace()
            .filter_map(|t| t.split(']').nth(1)?.split(':').next())
            .collect();
        if !ifs.is_empty() {
            out.socket_ifs = Some(ifs.join(", "));
        }
        return;
    }
    if let Some(i) = msg.find("via NET/") {
        let path = msg[i + 4..].split_whitespace().next().unwrap_or("");
        let name = path[4..].split('/').next().unwrap_or("");
        if !name.is_empty() {
            // a channel over sockets outweighs what another line said
            let known = out.network.as_ref();
            if known.is_none() || (name == "Socket" && !known.is_some_and(|n| n.socket)) {
                set_network(out, name, path.to_string());
            } else if let Some(n) = out
                .network
                .as_mut()
                .filter(|n| n.detail == format!("NET/{name}"))
            {
                n.detail = path.to_string(); // `NET/IB/0/GDRDMA` says more than `NET/IB`
            }
        }
    }
}

fn set_network(out: &mut Output, name: &str, detail: String) {
    let socket = name == "Socket";
    // any process over sockets decides: one node without RDMA drags every collective down
    if out.network.as_ref().is_some_and(|n| n.socket && !socket) {
        return;
    }
    out.network = Some(crate::workloads::judge::Network {
        library: "NCCL",
        name: name.to_string(),
        socket,
        detail,
        no_ib_device: false,
    });
}
/// `2.19.4 nccl-headers=21903 nccl-library=21903` → `2.19.4, NCCL 2.19.3`: nccl-tests' version and the NCCL
/// library's, decoded from its `major*10000 + minor*100 + patch` code (older codes: `major*1000 + minor*100 +
/// patch`).
fn version_text(v: &str) -> String {
    let mut words = v.split_whitespace();
    let tests = words.next().unwrap_or("").to_string();
    let lib = v
        .split_whitespace()
        .find_map(|w| w.strip_prefix("nccl-library="))
        .and_then(|c| c.parse::<u32>().ok())
        .map(|c| {
            if c >= 10000 {
                format!("{}.{}.{}", c / 10000, c % 10000 / 100, c % 100)
            } else {
                format!("{}.{}.{}", c / 1000, c % 1000 / 100, c % 100)
            }
        });
    match lib {
        Some(l) => format!("{tests}, NCCL {l}"),
        None => tests,
    }
}
