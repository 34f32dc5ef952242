//! Reading fio's output: its text summary (every unit it prints) and its JSON (`--output-format=json`), into one row
//! per job and operation.

use super::*;

/// One operation of one job as fio summarized it.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The job's name and which of its reports this is (several tasks print the same job).
    pub job: String,
    pub instance: usize,
    pub operation: String,
    pub iops: f64,
    pub bw: f64,
    pub bw_unit: String,
    /// Total latency (`lat`) when fio printed it, else completion latency (`clat`), in `latency_unit`.
    pub latency_avg: Option<f64>,
    pub latency_unit: Option<String>,
    /// Completion-latency percentiles p50, p99, p99.9 in microseconds.
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub p999_us: Option<f64>,
}

impl Row {
    pub fn bw_mib(&self) -> f64 {
        self.bw * bw_to_mib(&self.bw_unit).unwrap_or(f64::NAN)
    }
    pub fn latency_us(&self) -> Option<f64> {
        Some(self.latency_avg? * to_us(self.latency_unit.as_deref()?)?)
    }
}

/// Bandwidth units fio prints (binary with `i`, decimal without), as a factor to MiB/s.
pub(super) fn bw_to_mib(unit: &str) -> Option<f64> {
    const MIB: f64 = 1024.0 * 1024.0;
    Some(match unit {
        "B/s" => 1.0 / MIB,
        "KiB/s" => 1.0 / 1024.0,
        "MiB/s" => 1.0,
        "GiB/s" => 1024.0,
        "TiB/s" => MIB,
        "kB/s" | "KB/s" => 1e3 / MIB,
        "MB/s" => 1e6 / MIB,
        "GB/s" => 1e9 / MIB,
        "TB/s" => 1e12 / MIB,
        _ => return None,
    })
}

pub(super) fn to_us(unit: &str) -> Option<f64> {
    Some(match unit {
        "nsec" => 0.001,
        "usec" => 1.0,
        "msec" => 1000.0,
        "sec" => 1_000_000.0,
        _ => return None,
    })
}

/// `12.3k`, `4801`: fio's scaled counts.
pub(super) fn scaled(s: &str) -> Option<f64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last()?.to_ascii_lowercase() {
        'k' => (&s[..s.len() - 1], 1e3),
        'm' => (&s[..s.len() - 1], 1e6),
        'g' => (&s[..s.len() - 1], 1e9),
        _ => (s, 1.0),
    };
    num.trim().parse::<f64>().ok().map(|n| n * mult)
}

/// `1538MiB/s (1613MB/s)(80.0MiB/52msec)` → (1538, "MiB/s").
pub(super) fn number_and_unit(s: &str) -> Option<(f64, String)> {
    let s = s.trim_start();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let num = s[..end].parse::<f64>().ok()?;
    // `269100 B/s`: a blank may stand between the number and its unit
    let unit: String = s[end..]
        .trim_start_matches(' ')
        .chars()
        .take_while(|c| c.is_ascii_alphabetic() || *c == '/')
        .collect();
    Some((num, unit))
}

/// What one fio output file says.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Output {
    pub rows: Vec<Row>,
    /// fio's own error lines (`fio: …`, a job header with `err=` other than 0, a JSON job's `error`), with line numbers.
    pub errors: Vec<(usize, String)>,
    pub version: Option<String>,
}

impl Output {
    /// Each operation's bandwidth (MiB/s) and IOPS summed over every job: (operation, MiB/s, IOPS), read, write,
    /// trim, those that ran.
    pub(crate) fn totals(&self) -> Vec<(&'static str, f64, f64)> {
        ["read", "write", "trim"]
            .into_iter()
            .filter_map(|op| {
                let rows: Vec<&Row> = self.rows.iter().filter(|r| r.operation == op).collect();
                (!rows.is_empty()).then(|| {
                    (
                        op,
                        rows.iter().map(|r| r.bw_mib()).sum(),
                        rows.iter().map(|r| r.iops).sum(),
                    )
                })
            })
            .collect()
    }
}

/// Reads fio output in either format (JSON documents where they start a line, the text format elsewhere).
pub fn parse(text: &str) -> Output {
    let mut out = parse_text(text);
    parse_json(text, &mut out);
    out
}

/// The operation and its numbers from a summary line: `write: IOPS=12.3k, BW=1538MiB/s (…)` (fio 3) or
/// `write: io=1024.0KB, bw=2039.9KB/s, iops=509, runt=…` (fio 2).
pub(super) fn op_line(line: &str) -> Option<(String, f64, f64, String)> {
    let t = line.trim_start();
    let (op, rest) = t.split_once(':')?;
    let op = op.trim();
    if !["read", "write", "trim"].contains(&op) || line.len() == t.len() {
        return None;
    }
    let field = |key: &str| {
        rest.split(',')
            .map(str::trim)
            .find_map(|p| p.strip_prefix(key))
    };
    if let (Some(iops), Some(bw)) = (field("IOPS="), field("BW=")) {
        let (bw, unit) = number_and_unit(bw)?;
        return Some((op.to_string(), scaled(iops)?, bw, unit));
    }
    if let (Some(iops), Some(bw)) = (field("iops="), field("bw=")) {
        let (bw, unit) = number_and_unit(bw)?;
        // fio 2 prints KB/s for KiB/s
        let unit = match unit.as_str() {
            "B/s" => unit,
            u => u.replace("B/s", "iB/s"),
        };
        return Some((op.to_string(), scaled(iops)?, bw, unit));
    }
    None
}

/// `clat (usec): min=…, avg= 75.30, …` → ("clat", "usec", 75.3); `lat` likewise.
pub(super) fn latency_line(line: &str) -> Option<(&'static str, String, f64)> {
    let t = line.trim_start();
    if t.len() == line.len() {
        return None;
    }
    let kind = if t.starts_with("clat (") {
        "clat"
    } else if t.starts_with("lat (") && !t.contains("percentiles") {
        "lat"
    } else {
        return None;
    };
    let unit = t.split_once('(')?.1.split_once(')')?.0.trim().to_string();
    to_us(&unit)?;
    let avg = t.split_once("avg=")?.1.trim_start();
    let end = avg
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(avg.len());
    Some((kind, unit, avg[..end].parse().ok()?))
}

pub(super) fn parse_text(text: &str) -> Output {
    let mut out = Output::default();
    let mut job = String::new();
    let mut seen: std::collections::HashMap<String, usize> = Default::default();
    let mut instance = 0;
    // the row being read: its latency kind so far, and the percentiles block's unit while inside one
    let mut lat_kind: Option<&str> = None;
    let mut pct_unit: Option<f64> = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.starts_with('{') {
            // a JSON document: read by parse_json
            break;
        }
        if let Some(v) = t
            .strip_prefix("fio-")
            .filter(|v| v.chars().next().is_some_and(|c| c.is_ascii_digit()) && !v.contains(' '))
        {
            out.version = Some(v.to_string());
        }
        if let Some((name, rest)) = t.split_once(": (groupid=") {
            job = name.to_string();
            let n = seen.entry(job.clone()).or_default();
            *n += 1;
            instance = *n;
            if let Some(err) = rest.split_once("err=").map(|(_, e)| e.trim_start()) {
                if !err.starts_with("0:") && !err.starts_with("0 ") && err != "0" {
                    out.errors.push((i + 1, t.to_string()));
                }
            }
            pct_unit = None;
            continue;
        }
        if t.starts_with("fio: ") || t.starts_with("fio:") && t.contains("error") {
            out.errors.push((i + 1, t.to_string()));
            continue;
        }
        if let Some((op, iops, bw, unit)) = op_line(line) {
            out.rows.push(Row {
                job: job.clone(),
                instance,
                operation: op,
                iops,
                bw,
                bw_unit: unit,
                latency_avg: None,
                latency_unit: None,
                p50_us: None,
                p99_us: None,
                p999_us: None,
            });
            lat_kind = None;
            pct_unit = None;
            continue;
        }
        let Some(row) = out.rows.last_mut() else {
            continue;
        };
        if let Some((kind, unit, avg)) = latency_line(line) {
            // the total latency wins over the completion latency
            if lat_kind.is_none() || kind == "lat" {
                row.latency_avg = Some(avg);
                row.latency_unit = Some(unit);
                lat_kind = Some(kind);
            }
            continue;
        }
        if t.contains("percentiles (") && (t.starts_with("clat ") || t.starts_with("lat ")) {
            pct_unit = t
                .split_once('(')
                .and_then(|(_, r)| r.split_once(')'))
                .and_then(|(u, _)| to_us(u.trim()));
            continue;
        }
        match (pct_unit, t.strip_prefix('|')) {
            (Some(unit), Some(rest)) => {
                for p in rest.split("],") {
                    let Some((pct, v)) = p.split_once("th=[") else {
                        continue;
                    };
                    let v = v.trim().trim_end_matches(']').trim().parse::<f64>().ok();
                    let v = v.map(|v| v * unit);
                    match pct.trim() {
                        "50.00" => row.p50_us = v,
                        "99.00" => row.p99_us = v,
                        "99.90" => row.p999_us = v,
                        _ => {}
                    }
                }
            }
            (Some(_), None) => pct_unit = None,
            _ => {}
        }
    }
    out
}

/// JSON documents (`--output-format=json`), one per task, possibly behind notes fio printed first.
pub(super) fn parse_json(text: &str, out: &mut Output) {
    let mut offset = 0;
    let mut seen: std::collections::HashMap<String, usize> = Default::default();
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let start = offset;
        offset += line.len();
        if !line.starts_with('{') {
            continue;
        }
        let mut docs = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
        let Some(Ok(doc)) = docs.next() else {
            continue;
        };
        if let Some(v) = doc["fio version"].as_str() {
            out.version = Some(v.trim_start_matches("fio-").to_string());
        }
        for job in doc["jobs"].as_array().into_iter().flatten() {
            let name = job["jobname"].as_str().unwrap_or("").to_string();
            let n = seen.entry(name.clone()).or_default();
            *n += 1;
            if job["error"].as_i64().is_some_and(|e| e != 0) {
                out.errors.push((
                    i + 1,
                    format!(
                        "job {name}: fio error {}",
                        job["error"].as_i64().unwrap_or(0)
                    ),
                ));
            }
            for op in ["read", "write", "trim"] {
                let o = &job[op];
                if o["io_bytes"].as_f64().unwrap_or(0.0) <= 0.0 {
                    continue;
                }
                let ns = |k: &str, p: &str| o[k]["percentile"][p].as_f64().map(|v| v / 1000.0);
                let pct = |p: &str| ns("clat_ns", p).or_else(|| ns("lat_ns", p));
                out.rows.push(Row {
                    job: name.clone(),
                    instance: *n,
                    operation: op.into(),
                    iops: o["iops"].as_f64().unwrap_or(0.0),
                    bw: o["bw"].as_f64().unwrap_or(0.0),
                    bw_unit: "KiB/s".into(),
                    latency_avg: o["lat_ns"]["mean"].as_f64().map(|v| v / 1000.0),
                    latency_unit: o["lat_ns"]["mean"].as_f64().map(|_| "usec".into()),
                    p50_us: pct("50.000000"),
                    p99_us: pct("99.000000"),
                    p999_us: pct("99.900000"),
                });
            }
        }
    }
}
