//! What the nccl-tests parser finds in a file: runs with their ranks and rows, and failure lines.

/// Short texts of rows; the common ones are shared instead of allocated (a 100 MB log has millions of them).
pub type Text = std::borrow::Cow<'static, str>;

pub(super) fn text(tok: &str) -> Text {
    const COMMON: &[&str] = &[
        "0", "N/A", "float", "half", "bfloat16", "double", "int8", "uint8", "int32", "uint32",
        "int64", "uint64", "sum", "prod", "min", "max", "avg", "none", "mulsum", "",
    ];
    match COMMON.iter().find(|c| **c == tok) {
        Some(c) => Text::Borrowed(c),
        None => Text::Owned(tok.to_string()),
    }
}

/// One parsed file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Output {
    pub runs: Vec<Run>,
    /// Failure lines anywhere in the file (also outside any run), the first [`MAX_ERRORS`] of them.
    pub errors: Vec<ErrorLine>,
    /// Failure lines seen past [`MAX_ERRORS`] (counted, not kept: a log full of warnings stays small in memory).
    pub errors_dropped: usize,
    pub lines: usize,
    /// The network NCCL says it used (`Using network IB`, channels `via NET/Socket/0`), when it says.
    pub network: Option<crate::workloads::judge::Network>,
    /// `NET/IB : No device found`: NCCL looked for InfiniBand and found none.
    pub no_ib_device: bool,
    /// The interfaces of `NET/Socket : Using [0]eth0:…`.
    pub socket_ifs: Option<String>,
}

/// Failure lines kept per file; the first fatal one decides the verdict, the rest are for people.
pub(crate) const MAX_ERRORS: usize = 1000;
/// Characters kept of one failure line.
const MAX_ERROR_TEXT: usize = 2000;

impl Output {
    pub(super) fn push_error(&mut self, line: usize, kind: ErrorKind, text: &str) {
        // a fatal line after the cap still counts for the verdict: replace a kept warning with it
        if self.errors.len() >= MAX_ERRORS {
            self.errors_dropped += 1;
            if !kind.is_fatal() || self.errors.iter().any(|e| e.kind.is_fatal()) {
                return;
            }
            self.errors.pop();
        }
        let mut text = text.to_string();
        if text.len() > MAX_ERROR_TEXT {
            let mut cut = MAX_ERROR_TEXT;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
        }
        self.errors.push(ErrorLine { line, kind, text });
    }
}

/// One test (one `# nThread` header and its table).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Run {
    /// `# nccl-tests version 2.19.4 … nccl-library=21903` as `2.19.4, NCCL 2.19.3`
    pub version: Option<String>,
    /// `# Collective test starting: all_reduce_perf`
    pub test: Option<String>,
    /// 1-based line of the `nThread` header (or of the first row when the header is missing).
    pub line: usize,
    pub n_thread: Option<u64>,
    pub n_gpus: Option<u64>,
    pub min_bytes: Option<u64>,
    pub max_bytes: Option<u64>,
    pub iters: Option<u64>,
    pub warmup_iters: Option<u64>,
    pub validation: Option<i64>,
    pub ranks: Vec<Rank>,
    /// Column names of the table, as in the header (`size count type redop root time …`).
    pub columns: Vec<String>,
    /// The rows kept (the first [`ROW_CAP`] of the file); [`Tally`] sums up every row, kept or not.
    pub rows: Vec<Row>,
    pub tally: Tally,
    /// `# Out of bounds values : N OK|FAILED`
    pub out_of_bounds: Option<(u64, bool)>,
    /// `# Avg bus bandwidth : X [OK|FAILED]`
    pub avg_busbw: Option<f64>,
    pub avg_ok: Option<bool>,
    pub concluded: bool,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rank {
    pub rank: u32,
    pub group: Option<u32>,
    pub pid: Option<u64>,
    pub host: String,
    pub device: u32,
    pub bus_id: String,
    pub device_name: String,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Row {
    pub line: usize,
    pub size: u64,
    pub count: u64,
    pub dtype: Text,
    pub redop: Text,
    pub root: Option<i64>,
    pub out_of_place: Side,
    pub in_place: Option<Side>,
    pub timestamp: Option<String>,
}

impl Run {
    /// A run first seen at this line (an excerpt without its `# nThread` header starts at its table).
    pub(super) fn at(line: usize) -> Self {
        Run {
            line,
            ..Default::default()
        }
    }
}

/// Rows kept in memory per file: grading memory is bounded by this, not by the file (`-N 0` soak runs print rows
/// until killed). What needs every row — counts, peak, means, the last row, a wrong one — comes from [`Tally`];
/// the CSV is written by reading the file again.
pub const ROW_CAP: usize = 50_000;

/// What every row of a run adds up to, kept or not.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tally {
    pub rows: u64,
    /// Rows seen but not kept (past [`ROW_CAP`]).
    pub dropped: u64,
    pub peak_busbw: f64,
    pub peak_size: u64,
    /// The largest message size of any row.
    pub max_size: u64,
    pub small_size: Option<u64>,
    pub small_latency_us: Option<f64>,
    pub ip_time_sum: f64,
    pub ip_busbw_sum: f64,
    pub ip_rows: u64,
    pub oop_time_sum: f64,
    /// The last row seen.
    pub last: Option<Row>,
    /// The first row with wrong elements among those not kept.
    pub first_wrong_dropped: Option<Row>,
}

impl Tally {
    pub(super) fn add(&mut self, r: &Row, kept: bool) {
        self.rows += 1;
        let b = r.busbw();
        if b.is_finite() && (b > self.peak_busbw || self.rows == 1) {
            self.peak_busbw = b;
            self.peak_size = r.size;
        }
        self.max_size = self.max_size.max(r.size);
        if self.small_size.is_none_or(|s| r.size < s) {
            self.small_size = Some(r.size);
            self.small_latency_us = Some(r.out_of_place.time_us);
        }
        self.oop_time_sum += r.out_of_place.time_us;
        if let Some(ip) = &r.in_place {
            self.ip_time_sum += ip.time_us;
            self.ip_busbw_sum += ip.busbw;
            self.ip_rows += 1;
        }
        if !kept {
            self.dropped += 1;
            if self.first_wrong_dropped.is_none() && r.wrong() > 0.0 {
                self.first_wrong_dropped = Some(r.clone());
            }
        }
        self.last = Some(r.clone());
    }
}

impl Row {
    /// The larger busbw of the two sides.
    pub fn busbw(&self) -> f64 {
        let ip = self.in_place.as_ref().map_or(f64::NAN, |s| s.busbw);
        self.out_of_place.busbw.max(ip)
    }
    pub fn wrong(&self) -> f64 {
        let w = |s: &Side| s.wrong.unwrap_or(0.0);
        w(&self.out_of_place).max(self.in_place.as_ref().map_or(0.0, w))
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Side {
    pub time_us: f64,
    pub algbw: f64,
    pub busbw: f64,
    /// `#wrong` as printed; `None` for `N/A`. Old versions print a max error (float) in an `error` column.
    pub wrong: Option<f64>,
    /// The `#wrong`/`error` token as printed (`0`, `N/A`, `2e-07`).
    pub wrong_text: Text,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// `Test failure file:line` (TESTCHECK traceback)
    TestFailure,
    /// `Test NCCL failure`
    NcclFailure,
    /// `Test CUDA failure`
    CudaFailure,
    /// `Test timeout`
    Timeout,
    /// `NCCL WARN` (not fatal by itself)
    NcclWarn,
    /// Killed by the launcher or scheduler (time limit, signal, abort).
    Killed,
    /// Bad command line: nccl-tests printed its usage and ran nothing.
    Usage,
    /// `# error: …` after the footer, or other error text.
    Other,
}

impl ErrorKind {
    pub fn is_fatal(self) -> bool {
        !matches!(self, ErrorKind::NcclWarn)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct ErrorLine {
    pub line: usize,
    pub kind: ErrorKind,
    pub text: String,
}
