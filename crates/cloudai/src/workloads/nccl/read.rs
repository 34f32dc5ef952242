//! Reading an output file as a stream: one line in memory at a time (capped, so a file without newlines cannot
//! grow it), invalid UTF-8 replaced per line. Memory is bounded by the parsed table, not by the file.

use std::io::{BufRead, Read};
use std::path::Path;

use super::parse::{Output, Parser};

/// Bytes of one line looked at; the rest of a longer line is skipped (no nccl-tests line comes near it).
pub(crate) const MAX_LINE: usize = 1 << 20;

/// Parses a file line by line.
pub fn parse_file(path: &Path) -> std::io::Result<Output> {
    let f = std::fs::File::open(path)?;
    parse_reader(std::io::BufReader::with_capacity(1 << 16, f))
}

pub(crate) fn parse_reader(r: impl BufRead) -> std::io::Result<Output> {
    read_lines(r, Parser::new(), |_| {})
}

/// Calls `each` with every row of the file in order, keeping none in memory; the parse of everything else
/// (header, footer, failures) is returned.
pub(crate) fn for_each_row(
    path: &Path,
    mut each: impl FnMut(&super::parse::Row),
) -> std::io::Result<Output> {
    parse_file_with(path, Parser::streaming(0), |p| p.drain_rows(&mut each))
}

/// One pass over the file with `parser`, `after_line` called after every line (a streaming parser's rows are
/// taken there).
pub(crate) fn parse_file_with(
    path: &Path,
    parser: Parser,
    after_line: impl FnMut(&mut Parser),
) -> std::io::Result<Output> {
    let f = std::fs::File::open(path)?;
    read_lines(
        std::io::BufReader::with_capacity(1 << 16, f),
        parser,
        after_line,
    )
}

fn read_lines(
    mut r: impl BufRead,
    mut p: Parser,
    mut after_line: impl FnMut(&mut Parser),
) -> std::io::Result<Output> {
    let mut buf = Vec::with_capacity(1024);
    let mut lineno = 0;
    loop {
        buf.clear();
        let n = (&mut r).take(MAX_LINE as u64).read_until(b'\n', &mut buf)?;
        if n == 0 {
            break;
        }
        if buf.last() == Some(&b'\n') {
            buf.pop();
        } else if buf.len() == MAX_LINE {
            skip_line(&mut r)?;
        }
        lineno += 1;
        match std::str::from_utf8(&buf) {
            Ok(s) => p.physical(lineno, s),
            Err(_) => p.physical(lineno, &String::from_utf8_lossy(&buf)),
        }
        after_line(&mut p);
    }
    // rows completed by the end of the file (tagged lines left open)
    p.flush_open();
    after_line(&mut p);
    Ok(p.finish())
}

/// Consumes the rest of an over-long line.
fn skip_line(r: &mut impl BufRead) -> std::io::Result<()> {
    loop {
        let avail = r.fill_buf()?;
        if avail.is_empty() {
            return Ok(());
        }
        match avail.iter().position(|&b| b == b'\n') {
            Some(i) => {
                r.consume(i + 1);
                return Ok(());
            }
            None => {
                let n = avail.len();
                r.consume(n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::nccl::parse::parse;

    #[test]
    fn a_stream_parses_as_the_whole_text() {
        let text = "# nccl-tests version 2.13.8\n# nThread 1 nGpus 1 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 1 iters: 1 agg iters: 1 validation: 1 graph: 0\n#\n#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n           8             2     float     sum      -1     9.1    0.00    0.00      0     8.9    0.00    0.00      0\n~ bad byte NCCL WARN x\n          16             4     float     sum      -1     9.1    0.00    0.00      0     8.9    0.00    0.00      0\n# Avg bus bandwidth    : 0.00 \n";
        // a byte that is not UTF-8 in a log line
        let with_bad = text
            .as_bytes()
            .to_vec()
            .into_iter()
            .map(|b| if b == b'~' { 0xff } else { b })
            .collect::<Vec<u8>>();
        let streamed = parse_reader(&with_bad[..]).unwrap();
        assert_eq!(streamed, parse(&String::from_utf8_lossy(&with_bad)));
        assert_eq!(streamed.runs[0].rows.len(), 2);
        // no final newline, CRLF and an over-long line
        let mut long = b"x".repeat(MAX_LINE + 10);
        long.extend_from_slice(b"\r\n           8             2     float     sum      -1     9.1    0.00    0.00      0     8.9    0.00    0.00      0");
        let out = parse_reader(&long[..]).unwrap();
        assert_eq!(out.runs[0].rows.len(), 1);
        assert_eq!(out.runs[0].rows[0].line, 2);
    }

    #[test]
    fn warnings_past_the_cap_are_counted_and_a_later_fatal_line_still_counts() {
        let mut text = String::new();
        for i in 0..(crate::workloads::nccl::parse::MAX_ERRORS + 50) {
            text.push_str(&format!("host:1:1 [0] NCCL WARN thing {i}\n"));
        }
        text.push_str("host: Test NCCL failure common.cu:1 'unhandled system error'\n");
        let out = parse_reader(text.as_bytes()).unwrap();
        assert_eq!(out.errors.len(), crate::workloads::nccl::parse::MAX_ERRORS);
        assert_eq!(out.errors_dropped, 51);
        assert!(out.errors.iter().any(|e| e.kind.is_fatal()));
    }
}
