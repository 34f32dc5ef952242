//! The iteration's CSV (CloudAI's columns): written in the same pass that grades the output, one buffer and no
//! allocation per field, floats as Python writes them.

use super::*;

pub(super) const CSV_HEADER: &str = "Size (B),Count,Type,Redop,Root,Time (us) Out-of-place,Algbw (GB/s) Out-of-place,Busbw (GB/s) Out-of-place,#Wrong Out-of-place,Time (us) In-place,Algbw (GB/s) In-place,Busbw (GB/s) In-place,#Wrong In-place,GPU Type,Devices per Node,Ranks,Size Human-readable";

/// GPU type (text after `NVIDIA `, as CloudAI reads it, else the whole name), devices per node (largest device
/// index + 1), rank count.
pub(crate) fn device_facts(out: &Output) -> (String, u32, usize) {
    facts_of(out.runs.iter().find(|r| !r.ranks.is_empty()))
}

/// The device facts of the run that lists its ranks.
pub(super) fn facts_of(run: Option<&super::super::parse::Run>) -> (String, u32, usize) {
    let Some(run) = run else {
        return (String::new(), 0, 0);
    };
    let name = &run.ranks[0].device_name;
    let gpu = name
        .split_once("NVIDIA ")
        .map_or(name.as_str(), |(_, rest)| rest)
        .to_string();
    let per_node = run.ranks.iter().map(|r| r.device + 1).max().unwrap_or(0);
    (gpu, per_node, run.ranks.len())
}

/// The CSV's rows (header excluded), as [`parse_with_csv`] wrote them while it read the output.
pub(crate) type CsvRows = crate::util::spill::Spilled;

/// One pass over an output: parsed (the first rows kept, every row tallied) and its CSV rows written as they are
/// read, in memory while small, else to an anonymous temporary file. `None` for the rows when they could not be
/// written so (no room for the temporary file) or when the device facts of the rows written first were not yet
/// the file's (rows above the rank lines): the caller then writes the CSV from a second read.
pub(crate) fn parse_with_csv(path: &std::path::Path) -> std::io::Result<(Output, Option<CsvRows>)> {
    // made at the first rows, with the device facts known by then
    let mut rows: Option<RowWriter<crate::util::spill::Spill>> = None;
    let out = super::super::read::parse_file_with(
        path,
        super::super::parse::Parser::streaming(super::super::model::ROW_CAP),
        |p| {
            if !p.has_pending_rows() {
                return;
            }
            let w = rows.get_or_insert_with(|| {
                RowWriter::new(
                    facts_of(p.ranks_run()),
                    crate::util::spill::Spill::default(),
                )
            });
            p.drain_rows(|r| w.row(r));
        },
    )?;
    let Some(rows) = rows else {
        return Ok((out, Some(CsvRows::Memory(Vec::new()))));
    };
    if rows.facts != device_facts(&out) {
        return Ok((out, None));
    }
    Ok((out, rows.finish().and_then(|s| s.finish()).ok()))
}

/// The CSV's first line.
pub(crate) fn csv_header() -> String {
    format!("{CSV_HEADER}\n")
}

pub fn csv(out: &Output) -> String {
    let facts = device_facts(out);
    let mut s = Vec::with_capacity(
        CSV_HEADER.len() + 160 * out.runs.iter().map(|r| r.rows.len()).sum::<usize>(),
    );
    s.extend_from_slice(CSV_HEADER.as_bytes());
    s.push(b'\n');
    for r in out.runs.iter().flat_map(|r| r.rows.iter()) {
        csv_row(&mut s, r, &facts);
    }
    // every piece written is UTF-8 (the output's text is a &str)
    String::from_utf8(s).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// The CSV of an output whose rows are not all in memory: the file is read again and each row written as it
/// comes, so memory stays bounded however long the output.
pub(crate) fn write_csv_streaming(
    stdout: &std::path::Path,
    facts: &(String, u32, usize),
    w: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    w.write_all(CSV_HEADER.as_bytes())?;
    w.write_all(b"\n")?;
    let mut rows = RowWriter::new(facts.clone(), w);
    super::super::read::for_each_row(stdout, |r| rows.row(r))?;
    rows.finish().map(drop)
}

/// Writes CSV rows to a writer in 64 KiB pieces (one buffer, no allocation per row); the first write error is
/// kept and given by `finish`, which hands the writer back.
pub(crate) struct RowWriter<W: std::io::Write> {
    /// GPU type, devices per node and ranks, written on every row.
    facts: (String, u32, usize),
    out: W,
    buf: Vec<u8>,
    err: Option<std::io::Error>,
}

impl<W: std::io::Write> RowWriter<W> {
    pub fn new(facts: (String, u32, usize), out: W) -> Self {
        RowWriter {
            facts,
            out,
            buf: Vec::with_capacity(1 << 16),
            err: None,
        }
    }

    pub fn row(&mut self, r: &Row) {
        if self.err.is_some() {
            return;
        }
        csv_row(&mut self.buf, r, &self.facts);
        if self.buf.len() >= 1 << 16 {
            self.spill();
        }
    }

    fn spill(&mut self) {
        if let Err(e) = self.out.write_all(&self.buf) {
            self.err = Some(e);
        }
        self.buf.clear();
    }

    pub fn finish(mut self) -> std::io::Result<W> {
        if self.err.is_none() && !self.buf.is_empty() {
            self.spill();
        }
        match self.err {
            Some(e) => Err(e),
            None => Ok(self.out),
        }
    }
}

/// One text field, quoted when it holds a comma, quote or newline (as Python's csv module writes it).
pub(super) fn csv_field(s: &mut Vec<u8>, f: &str) {
    if f.contains([',', '"', '\n']) {
        s.push(b'"');
        s.extend_from_slice(f.replace('"', "\"\"").as_bytes());
        s.push(b'"');
    } else {
        s.extend_from_slice(f.as_bytes());
    }
}

/// A float as Python's `repr` writes it (`10.0`, `0.5`, `1e-05`), without an allocation in the common case.
pub(super) fn csv_float(s: &mut Vec<u8>, f: f64) {
    if !push_decimal(s, f) {
        s.extend_from_slice(py_float(f).as_bytes());
    }
}

/// Writes `f` as the shortest decimal with at most 6 places that reads back as exactly `f`, when there is one
/// (every number nccl-tests prints: it prints 2 to 6 places), as Python's `repr` would. `n / 10^d` with `n` and
/// `10^d` exact doubles is correctly rounded, so it equals `f` exactly when the text `n` with `d` places parses
/// to `f`; the fewest places give the fewest digits, and below 10^15 no other text of as many digits reads as
/// `f`. Zero (its sign), very small or large numbers and the rest go the general way.
pub(super) fn push_decimal(s: &mut Vec<u8>, f: f64) -> bool {
    const P10: [f64; 7] = [1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6];
    let a = f.abs();
    if !(1e-4..1e15).contains(&a) {
        return false;
    }
    for (d, p) in P10.iter().enumerate() {
        let n = (f * p).round();
        if n.abs() >= 1e15 {
            return false;
        }
        if n / p == f {
            let u = n.abs() as u64;
            let scale = 10u64.pow(d as u32);
            if n < 0.0 {
                s.push(b'-');
            }
            push_u64(s, u / scale);
            s.push(b'.');
            if d == 0 {
                s.push(b'0');
            } else {
                let frac = u % scale;
                let at = s.len();
                push_u64(s, frac);
                let digits = s.len() - at;
                // leading zeros of the fraction
                s.splice(at..at, std::iter::repeat_n(b'0', d - digits));
            }
            return true;
        }
    }
    false
}

/// A whole number in decimal, without the formatting machinery.
pub(super) fn push_u64(s: &mut Vec<u8>, mut n: u64) {
    let mut tmp = [0u8; 20];
    let mut i = tmp.len();
    loop {
        i -= 1;
        tmp[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    s.extend_from_slice(&tmp[i..]);
}

pub(super) fn csv_uint(s: &mut Vec<u8>, n: u64) {
    push_u64(s, n);
}

pub(super) fn csv_row(s: &mut Vec<u8>, r: &Row, (gpu, per_node, ranks): &(String, u32, usize)) {
    csv_uint(s, r.size);
    s.push(b',');
    csv_uint(s, r.count);
    s.push(b',');
    csv_field(s, &r.dtype);
    s.push(b',');
    csv_field(s, &r.redop);
    s.push(b',');
    if let Some(root) = r.root {
        if root < 0 {
            s.push(b'-');
        }
        push_u64(s, root.unsigned_abs());
    }
    for side in [Some(&r.out_of_place), r.in_place.as_ref()] {
        match side {
            Some(x) => {
                s.push(b',');
                csv_float(s, x.time_us);
                s.push(b',');
                csv_float(s, x.algbw);
                s.push(b',');
                csv_float(s, x.busbw);
                s.push(b',');
                csv_field(s, &x.wrong_text);
            }
            None => s.extend_from_slice(b",,,,"),
        }
    }
    s.push(b',');
    csv_field(s, gpu);
    s.push(b',');
    csv_uint(s, u64::from(*per_node));
    s.push(b',');
    csv_uint(s, *ranks as u64);
    s.push(b',');
    csv_field(s, &human_size(r.size));
    s.push(b'\n');
}
#[cfg(test)]
mod float_tests {
    use super::{csv_float, py_float};

    fn text(f: f64) -> String {
        let mut s = Vec::new();
        csv_float(&mut s, f);
        String::from_utf8(s).unwrap()
    }

    #[test]
    fn floats_are_written_as_python_writes_them() {
        // every way a table number can look: places 0-6, signs, zero, tiny, huge, special
        for tok in [
            "10.00",
            "0.00",
            "-0.00",
            "0.05",
            "1234.56",
            "0.000123",
            "0.0001",
            "0.00009",
            "9.999999",
            "123456789012.5",
            "1e15",
            "2e16",
            "-3.25",
            "nan",
            "inf",
            "-inf",
            "5e-07",
            "0.1",
            "0.3",
            "4503599627370497",
            "17.470001",
        ] {
            let f: f64 = tok.parse().unwrap();
            assert_eq!(text(f), py_float(f), "{tok}");
        }
        // and a sweep of values with 1-6 places against the general formatter
        let mut x = 0.0001f64;
        while x < 1e7 {
            for d in 0..7 {
                let p = 10f64.powi(d);
                let f = (x * p).round() / p;
                assert_eq!(text(f), py_float(f), "{f:?}");
                assert_eq!(text(-f), py_float(-f), "{f:?}");
            }
            x = x * 1.37 + 0.0013;
        }
    }
}
