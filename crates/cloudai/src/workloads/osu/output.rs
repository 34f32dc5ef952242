//! Reading OSU micro-benchmark tables: every layout the benchmarks print (latency, bandwidth, multi-pair,
//! collectives, validation columns) into typed rows.

/// What the table measures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Kind {
    #[default]
    Latency,
    Bandwidth,
    /// `MB/s` and `Messages/s` (osu_mbw_mr).
    MultiBandwidth,
}

/// One row; a size-less test (barrier) has size 0.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Row {
    pub line: usize,
    pub size: u64,
    pub avg_lat_us: Option<f64>,
    pub min_lat_us: Option<f64>,
    pub max_lat_us: Option<f64>,
    pub iterations: Option<u64>,
    pub mb_s: Option<f64>,
    pub messages_s: Option<f64>,
    /// The row's `Validation` column (`-c`): `Some(false)` for `Fail`.
    pub valid: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Output {
    /// `OSU MPI Allreduce Latency Test v7.5`.
    pub title: Option<String>,
    pub datatype: Option<String>,
    pub columns: Vec<String>,
    pub kind: Kind,
    pub rows: Vec<Row>,
    pub errors: Vec<(usize, String)>,
}

impl Output {
    pub fn peak_mb_s(&self) -> Option<f64> {
        self.rows
            .iter()
            .filter_map(|r| r.mb_s)
            .max_by(f64::total_cmp)
    }
    pub fn full(&self) -> bool {
        self.rows.iter().any(|r| r.min_lat_us.is_some())
    }
}

/// What a column holds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Col {
    Size,
    AvgLat,
    MinLat,
    MaxLat,
    Iterations,
    MbS,
    MessagesS,
    /// `Validation` (`-c`): `Pass` or `Fail` per row.
    Validation,
    Other,
}

pub(super) fn column(name: &str) -> Col {
    let n = name.to_ascii_lowercase();
    if n == "size" {
        Col::Size
    } else if n.contains("min") && n.contains("lat") {
        Col::MinLat
    } else if n.contains("max") && n.contains("lat") {
        Col::MaxLat
    } else if (n.starts_with("avg") || n.starts_with("latency")) && n.contains("lat") {
        Col::AvgLat
    } else if n.starts_with("iterations") {
        Col::Iterations
    } else if n.contains("messages/s") {
        Col::MessagesS
    } else if n.contains("bandwidth") || n == "mb/s" {
        Col::MbS
    } else if n.starts_with("overall") {
        // non-blocking collectives: `Overall(us) Compute(us) Pure Comm.(us) Overlap(%)`; overall is the latency
        Col::AvgLat
    } else if n == "validation" {
        Col::Validation
    } else {
        Col::Other
    }
}

/// `# Size       Avg Latency(us)   Min Latency(us)` → its column names (blocks of text two blanks apart; an old
/// single-spaced `# Size Bandwidth (MB/s)` too).
pub(super) fn header(line: &str) -> Option<Vec<String>> {
    let rest = line.trim().strip_prefix('#')?.trim();
    if !(rest.starts_with("Size")
        || rest.starts_with("Avg Latency")
        || rest.starts_with("Latency")
        || rest.starts_with("Overall"))
    {
        return None;
    }
    let mut cols: Vec<String> = rest
        .split("  ")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    if let Some(tail) = cols[0].strip_prefix("Size ").map(str::to_string) {
        cols[0] = "Size".into();
        cols.insert(1, tail.trim().to_string());
    }
    let kinds: Vec<Col> = cols.iter().map(|c| column(c)).collect();
    kinds
        .iter()
        .any(|k| matches!(k, Col::AvgLat | Col::MbS))
        .then_some(cols)
}

pub(super) fn is_error(line: &str) -> bool {
    line.contains("requires exactly")
        || line.contains("This test requires")
        || line.trim_start().starts_with("Error")
        || super::super::launcher_failure(line)
}

pub fn parse(text: &str) -> Output {
    let mut out = Output::default();
    let mut cols: Vec<Col> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        // an error written into the middle of another line (a UCX error glued to the header) is the cause
        let (raw, glued) = super::super::split_glued_error(raw);
        if let Some(e) = glued {
            out.errors.push((i + 1, e.trim().to_string()));
        }
        let line = raw.trim();
        if let Some(t) = line.strip_prefix("# OSU") {
            out.title.get_or_insert_with(|| format!("OSU{t}"));
            continue;
        }
        if let Some(d) = line.strip_prefix("# Datatype:") {
            out.datatype = Some(d.trim().trim_end_matches('.').to_string());
            continue;
        }
        if let Some(names) = header(line) {
            cols = names.iter().map(|c| column(c)).collect();
            out.kind = if cols.contains(&Col::MessagesS) {
                Kind::MultiBandwidth
            } else if cols.contains(&Col::MbS) {
                Kind::Bandwidth
            } else {
                Kind::Latency
            };
            out.columns = names;
            continue;
        }
        if !cols.is_empty() {
            let t: Vec<&str> = line.split_whitespace().collect();
            if t.len() == cols.len() && !t.is_empty() {
                let mut row = Row {
                    line: i + 1,
                    ..Row::default()
                };
                let ok = t.iter().zip(&cols).all(|(v, c)| match c {
                    Col::Size => v.parse().map(|s| row.size = s).is_ok(),
                    Col::Iterations => v.parse().map(|n| row.iterations = Some(n)).is_ok(),
                    Col::Validation => match *v {
                        "Pass" | "PASS" | "pass" => {
                            row.valid = Some(true);
                            true
                        }
                        "Fail" | "FAIL" | "fail" => {
                            row.valid = Some(false);
                            true
                        }
                        _ => false,
                    },
                    c => v.parse::<f64>().is_ok_and(|x| {
                        match c {
                            Col::AvgLat => row.avg_lat_us = Some(x),
                            Col::MinLat => row.min_lat_us = Some(x),
                            Col::MaxLat => row.max_lat_us = Some(x),
                            Col::MbS => row.mb_s = Some(x),
                            Col::MessagesS => row.messages_s = Some(x),
                            _ => {}
                        }
                        x.is_finite()
                    }),
                });
                if ok {
                    out.rows.push(row);
                    continue;
                }
            }
        }
        if is_error(line) {
            out.errors.push((i + 1, line.to_string()));
        }
    }
    out
}
