//! Pass/fail of an nccl-tests run, for the right reasons, with where it was found and what to check.

use std::path::Path;

use super::parse::{ErrorKind, Output, Row, Run};

/// Key numbers of a run, for summaries and comparisons.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Metrics {
    pub rows: usize,
    /// Highest busbw of any row (either side), GB/s, and the message size where it was reached.
    pub peak_busbw: f64,
    pub peak_size: u64,
    /// `# Avg bus bandwidth` of the first run.
    pub avg_busbw: Option<f64>,
    /// Out-of-place time of the smallest message, µs.
    pub small_latency_us: Option<f64>,
    pub small_size: Option<u64>,
    pub ranks: usize,
    pub nodes: usize,
}

pub fn metrics(out: &Output) -> Metrics {
    let mut m = Metrics::default();
    // from every row of every run, kept in memory or not
    for t in out.runs.iter().map(|r| &r.tally).filter(|t| t.rows > 0) {
        if m.rows == 0 || t.peak_busbw > m.peak_busbw {
            m.peak_busbw = t.peak_busbw;
            m.peak_size = t.peak_size;
        }
        m.rows += t.rows as usize;
        if let (Some(s), Some(lat)) = (t.small_size, t.small_latency_us) {
            if m.small_size.is_none_or(|ms| s < ms) {
                m.small_size = Some(s);
                m.small_latency_us = Some(lat);
            }
        }
    }
    if let Some(run) = out.runs.first() {
        m.avg_busbw = run.avg_busbw;
        m.ranks = run.ranks.len();
        let mut hosts: Vec<&str> = run.ranks.iter().map(|r| r.host.as_str()).collect();
        hosts.sort();
        hosts.dedup();
        m.nodes = hosts.len();
    }
    m
}

/// What a run's data check found wrong: a row with wrong elements (where its `#wrong` column counts them; the old
/// `error` column is a max error, not a count), or out-of-bounds values.
pub(crate) enum DataFault<'a> {
    Wrong(&'a Row),
    OutOfBounds(u64),
}

/// The first data fault of a run, kept row or not; `None` when its data check found nothing.
pub(crate) fn data_fault(run: &Run) -> Option<DataFault<'_>> {
    let counts_wrong = !run.columns.iter().any(|c| c == "error");
    let wrong = run
        .rows
        .iter()
        .find(|r| r.wrong() > 0.0)
        .or(run.tally.first_wrong_dropped.as_ref());
    if let Some(r) = wrong.filter(|_| counts_wrong) {
        return Some(DataFault::Wrong(r));
    }
    match run.out_of_bounds {
        Some((n, false)) => Some(DataFault::OutOfBounds(n)),
        _ => None,
    }
}

/// `None` when the run passed; otherwise why not: what was found, where, and what to check. The most specific
/// finding wins: a failed NCCL/CUDA call, then missing results, wrong data, and only then the generic traceback.
pub fn failure(out: &Output, file: &Path, min_busbw: Option<f64>) -> Option<String> {
    let at = |line: usize| format!("{}:{line}", file.display());
    if let Some(e) = out
        .errors
        .iter()
        .find(|e| e.kind.is_fatal() && !matches!(e.kind, ErrorKind::TestFailure | ErrorKind::Other))
    {
        let hint = match e.kind {
            ErrorKind::NcclFailure => {
                "an NCCL call failed; rerun with NCCL_DEBUG=INFO (or WARN) and check the NCCL WARN lines, the network (NCCL_SOCKET_IFNAME, NCCL_IB_HCA) and that every rank could reach the others"
            }
            ErrorKind::CudaFailure => "a CUDA call failed; check the GPUs with nvidia-smi, the driver version and Xid errors in the kernel log",
            ErrorKind::Timeout => "a collective did not finish within the -T timeout: a rank hung or the fabric stalled; check the slowest node and its links",
            ErrorKind::Killed => "the job was killed before the test finished (time limit, signal or launcher abort); raise time_limit or look at why it was slow",
            _ => "nccl-tests rejected its command line and ran nothing; check cmd_args and extra_cmd_args",
        };
        return Some(format!("{}: {}; {hint}", at(e.line), e.text));
    }
    let Some(first) = out.runs.iter().find(|r| r.tally.rows > 0) else {
        return Some(match out.runs.first() {
            // it finished (a summary) but no row could be read: say so rather than blame initialisation
            Some(r) if r.avg_busbw.is_some() || r.out_of_bounds.is_some() => format!(
                "{}: the test printed its summary (Avg bus bandwidth {}) but no result row could be read from the \
                 output; the rows may be garbled by other output written into them (check stdout.txt)",
                at(r.line),
                r.avg_busbw.map_or("unknown".to_string(), |b| format!("{b} GB/s"))
            ),
            Some(r) if r.n_thread.is_some() => format!(
                "{}: the test started but printed no result row; it failed or hung during initialisation, check stderr.txt and NCCL_DEBUG=INFO output",
                at(r.line)
            ),
            _ => format!(
                "{}: no nccl-tests output found; check that the binary exists on the nodes (or in the container) and stderr.txt",
                file.display()
            ),
        });
    };
    for run in &out.runs {
        match data_fault(run) {
            Some(DataFault::Wrong(r)) => {
                return Some(format!(
                    "{}: {} wrong elements at size {}: the data check failed (corrupted results); suspect a bad GPU, NVLink or network link on one of the nodes",
                    at(r.line),
                    r.wrong(),
                    crate::html::size_iec(r.size)
                ));
            }
            Some(DataFault::OutOfBounds(n)) => {
                return Some(format!(
                    "{}: {n} out-of-bounds values (FAILED): the data check failed; suspect a bad GPU or link",
                    at(run.line)
                ));
            }
            None => {}
        }
        if run.avg_ok == Some(false) {
            return Some(format!(
                "{}: average bus bandwidth {} GB/s is below NCCL_TESTS_MIN_BW (FAILED)",
                at(run.line),
                run.avg_busbw.unwrap_or(0.0)
            ));
        }
    }
    if let Some(e) = out.errors.iter().find(|e| e.kind.is_fatal()) {
        return Some(format!(
            "{}: {}; nccl-tests reported an error; see the lines before it",
            at(e.line),
            e.text
        ));
    }
    if let Some(run) = out
        .runs
        .iter()
        .find(|r| r.tally.rows > 0 && r.out_of_bounds.is_none())
    {
        let last = run
            .tally
            .last
            .as_ref()
            .expect("a run with rows has a last one");
        return Some(format!(
            "{}: the output stops after the row for size {} with no summary: the test hung or was killed; check stderr.txt and the scheduler's log",
            at(last.line),
            crate::html::size_iec(last.size)
        ));
    }
    if let Some(min) = min_busbw {
        let m = metrics(out);
        if m.peak_busbw < min {
            return Some(format!(
                "{}: peak bus bandwidth {:.2} GB/s (at {}) is below min_busbw = {min} GB/s: the run is slow; compare nodes and links",
                at(first.line),
                m.peak_busbw,
                crate::html::size_iec(m.peak_size)
            ));
        }
    }
    None
}
