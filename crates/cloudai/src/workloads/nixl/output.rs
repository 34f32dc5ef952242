//! nixlbench's output: its configuration block (`Start block size (--start_block_size=N)   : 4096`), then one
//! results table — `Block Size (B)  Batch Size  …` over a dashed line, a row per block size × batch size — in one of
//! three layouts (latency and MiB/GiB/GB per second before 0.5; GB/s, latency and the prepare/post/transfer times
//! since; aggregate bandwidth and network use added for pairwise runs of more than two processes). Columns are
//! found by their names, so each layout reads the same. UCX's protocol tables (`UCX_PROTO_INFO=y`) show which
//! transports carried the traffic between nodes.

use std::path::Path;

use crate::workloads::judge::{Check, CheckKind, Network, Shown};
use crate::workloads::kit::{self, TablePage};
use crate::workloads::{IterationReport, Verdict};

pub(crate) const CSV_FILE: &str = "nixlbench.csv";
const HTML_FILE: &str = "nixlbench.html";

/// One row: a block size × batch size, its bandwidth (GB/s) and mean latency (µs).
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub block: u64,
    pub batch: u64,
    pub gbps: f64,
    pub latency_us: f64,
}

/// One run's results table: the configuration printed before it and its rows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    /// The options nixlbench printed before the table that the grade reads, by name (`start_block_size` → `4096`).
    pub config: Vec<(String, String)>,
    pub rows: Vec<Row>,
}

impl Table {
    fn option(&self, name: &str) -> Option<&str> {
        self.config
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn size(&self, name: &str) -> Option<u64> {
        self.option(name)?.parse().ok()
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Output {
    /// Every results table, in order (a job may run nixlbench more than once: kvbench's profile does).
    pub tables: Vec<Table>,
    /// Lines saying the run failed, with their line numbers (stdout.txt, then stderr.txt after it).
    pub errors: Vec<(usize, String)>,
    /// Transports of UCX's inter-node protocol tables (`rc_mlx5`, `tcp`, …), once each.
    pub transports: Vec<String>,
    /// The interfaces behind them, as printed (`tcp/enP6p3s0f1np1`).
    pub lanes: Vec<String>,
}

/// Options nixlbench prints that the grade reads; nothing else of the block is kept (it prints storage keys too).
const READ_OPTIONS: [&str; 6] = [
    "backend",
    "start_block_size",
    "max_block_size",
    "start_batch_size",
    "max_batch_size",
    "op_type",
];

impl Output {
    /// Every table's rows, in order.
    pub fn rows(&self) -> impl Iterator<Item = &Row> {
        self.tables.iter().flat_map(|t| t.rows.iter())
    }

    /// The row with the highest bandwidth.
    pub fn peak(&self) -> Option<&Row> {
        self.rows()
            .filter(|r| r.gbps.is_finite())
            .max_by(|a, b| a.gbps.total_cmp(&b.gbps))
    }
}

/// Reads one output (stdout.txt's text; `stderr` is read for errors only).
pub fn parse(text: &str, stderr: &str) -> Output {
    let mut out = Output::default();
    // the columns of the table being read: block, batch, GB/s, latency
    let mut cols: Option<(usize, [usize; 4])> = None;
    let mut inter_node = false;
    // options printed since the last table
    let mut config: Vec<(String, String)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.contains("Block Size (B)") && line.contains("Batch Size") {
            cols = header(line);
            out.tables.push(Table {
                config: std::mem::take(&mut config),
                rows: Vec::new(),
            });
            continue;
        }
        if let Some((desc, value)) = line.split_once(" : ").or_else(|| line.split_once(": ")) {
            if let Some(name) = desc
                .split_once("(--")
                .and_then(|(_, r)| r.split(['=', ')']).next())
                .filter(|name| READ_OPTIONS.contains(name))
            {
                config.push((name.to_string(), value.trim().to_string()));
                continue;
            }
        }
        if line.contains('|') && line.contains("ucp_context") {
            inter_node = line.contains("inter-node");
            continue;
        }
        if inter_node && line.trim_end().ends_with('|') {
            lanes(line, &mut out);
            continue;
        }
        if failure(line) {
            out.errors.push((n, line.trim().to_string()));
            continue;
        }
        if let Some((width, at)) = cols {
            let t: Vec<&str> = line.split_whitespace().collect();
            if t.len() != width {
                continue;
            }
            let num = |i: usize| t[i].parse::<f64>().ok();
            if let (Ok(block), Ok(batch), Some(gbps), Some(latency_us)) = (
                t[at[0]].parse::<u64>(),
                t[at[1]].parse::<u64>(),
                num(at[2]),
                num(at[3]),
            ) {
                let table = out.tables.last_mut().expect("a header came first");
                table.rows.push(Row {
                    block,
                    batch,
                    gbps,
                    latency_us,
                });
            }
        }
    }
    let base = text.lines().count();
    for (i, line) in stderr.lines().enumerate() {
        if own_failure(line) {
            out.errors
                .push((base + i + 1, format!("stderr: {}", line.trim())));
        }
    }
    out
}

/// The columns of a header line (names apart by two spaces or more): its width and where block size, batch size,
/// GB/s and mean latency are.
fn header(line: &str) -> Option<(usize, [usize; 4])> {
    let names: Vec<&str> = line
        .split("  ")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let at = |name: &str| names.iter().position(|n| *n == name);
    Some((
        names.len(),
        [
            at("Block Size (B)")?,
            at("Batch Size")?,
            at("B/W (GB/Sec)")?,
            at("Avg Lat. (us)")?,
        ],
    ))
}

/// A line by which nixlbench, UCX or the launcher says the run failed.
fn failure(line: &str) -> bool {
    own_failure(line) || crate::workloads::launcher_failure(line)
}

/// A line by which nixlbench or the job's etcd wait says the run failed (its data check, its rendezvous); on
/// stderr only these count, since UCX and Slurm warn there too (the etcd step ends by a signal).
fn own_failure(line: &str) -> bool {
    line.contains("Consistency check failed")
        || line.contains("Failed to synchronize")
        || line.contains("Failed to setup ETCD")
        || line.contains("Failed to create runtime")
        || line.contains("was unreachable after")
}

/// The transports of a protocol table's row (`|  8185..inf | multi-frag copy-in | tcp/eth0, rc_mlx5/mlx5_0:1 |`).
fn lanes(line: &str, out: &mut Output) {
    let last = line
        .trim_end()
        .trim_end_matches('|')
        .rsplit('|')
        .next()
        .unwrap_or("");
    for lane in last.split([',', ' ']).filter(|l| l.contains('/')) {
        let transport = lane.split('/').next().unwrap_or(lane).to_string();
        if !out.transports.contains(&transport) {
            out.transports.push(transport);
        }
        if !out.lanes.iter().any(|l| l == lane) {
            out.lanes.push(lane.to_string());
        }
    }
}

fn read(dir: &Path) -> Option<Output> {
    let text = std::fs::read_to_string(dir.join("stdout.txt")).ok()?;
    let stderr = std::fs::read_to_string(dir.join("stderr.txt")).unwrap_or_default();
    Some(parse(&text, &stderr))
}

pub(crate) fn grade(dir: &Path) -> Verdict {
    match read(dir) {
        Some(out) => verdict(&out),
        None => Verdict::fail(format!(
            "{} was not created: the job wrote no output",
            dir.join("stdout.txt").display()
        )),
    }
}

/// The doubling sequence nixlbench walks from `start` to `max` (both included when `max` is on it).
fn doubling(start: u64, max: u64) -> Vec<u64> {
    let mut v = Vec::new();
    let mut x = start.max(1);
    while x <= max {
        v.push(x);
        x = match x.checked_mul(2) {
            Some(y) => y,
            None => break,
        };
    }
    v
}

pub fn verdict(out: &Output) -> Verdict {
    if let Some((n, l)) = out.errors.first() {
        return Verdict::fail(format!("nixlbench failed (line {n}): {l}"));
    }
    if out.tables.is_empty() {
        return Verdict::fail(
            "no nixlbench results table (Block Size (B) … Avg Lat. (us)) in stdout.txt: the benchmark did not reach \
             its transfers",
        );
    }
    let mut checks = Vec::new();
    let mut unchecked = 0;
    for (i, t) in out.tables.iter().enumerate() {
        let which = if out.tables.len() > 1 {
            format!("table {} of {}", i + 1, out.tables.len())
        } else {
            "the results table".to_string()
        };
        if t.rows.is_empty() {
            return Verdict::fail(format!(
                "{which} has no row: the run stopped before its first transfer"
            ));
        }
        if let Some(missing) = missing(t) {
            let why = format!("{which}: {missing}: the run stopped early");
            let mut v = Verdict::fail(why.clone());
            v.checks.push(Check::fail(CheckKind::Table, why));
            return v;
        }
        if t.size("max_block_size").is_none() {
            unchecked += 1;
        }
        if let Some(r) = t.rows.iter().find(|r| {
            [r.gbps, r.latency_us]
                .iter()
                .any(|x| x.is_nan() || *x <= 0.0)
        }) {
            let why = format!(
                "{which}: block {} B × {}: {} GB/s, {} µs — a transfer that moved nothing",
                r.block, r.batch, r.gbps, r.latency_us
            );
            let mut v = Verdict::fail(why.clone());
            v.checks.push(Check::fail(CheckKind::Table, why));
            return v;
        }
    }
    let rows = out.rows().count();
    if unchecked == 0 {
        checks.push(Check::pass(
            CheckKind::Table,
            format!(
                "{rows} rows in {} table(s), every configured block × batch size",
                out.tables.len()
            ),
        ));
    } else {
        checks.push(Check::not_shown(
            CheckKind::Table,
            format!(
                "{unchecked} of {} table(s) without nixlbench's configuration: their rows cannot be checked for \
                 completeness",
                out.tables.len()
            ),
        ));
    }
    let peak = out.peak().expect("every table has rows");
    let mut v = Verdict::pass_with(format!(
        "peak {:.2} GB/s at {} B × {}",
        peak.gbps, peak.block, peak.batch
    ));
    v.checks.extend(checks);
    if !out.transports.is_empty() {
        let socket = out.transports.iter().all(|t| t == "tcp");
        v.shown = Some(Shown {
            network: Some(Network {
                library: "UCX",
                name: "UCX".into(),
                socket,
                detail: format!("UCX {}", out.lanes.join(", ")),
                no_ib_device: false,
            }),
            own_floor: true,
            ..Default::default()
        });
    }
    v
}

/// What a table lacks of the block × batch sizes its configuration walks (none when it printed none).
fn missing(t: &Table) -> Option<String> {
    let (b0, b1) = (t.size("start_block_size")?, t.size("max_block_size")?);
    let n0 = t.size("start_batch_size").unwrap_or(1);
    let n1 = t.size("max_batch_size").unwrap_or(n0);
    let want: Vec<(u64, u64)> = doubling(b0, b1)
        .into_iter()
        .flat_map(|b| doubling(n0, n1).into_iter().map(move |n| (b, n)))
        .collect();
    let gone: Vec<&(u64, u64)> = want
        .iter()
        .filter(|(b, n)| !t.rows.iter().any(|r| r.block == *b && r.batch == *n))
        .collect();
    let (b, n) = gone.first()?;
    Some(format!(
        "{} of the {} block × batch sizes nixlbench was configured for have no row, first {b} B × {n}",
        gone.len(),
        want.len()
    ))
}

pub(crate) fn metric(dir: &Path, name: &str) -> Option<f64> {
    let out = read(dir)?;
    let n = out.rows().count();
    if n == 0 {
        return None;
    }
    let mean = |f: fn(&Row) -> f64| out.rows().map(f).sum::<f64>() / n as f64;
    match name {
        // CloudAI's: the mean latency over the rows
        "default" | "latency" => Some(mean(|r| r.latency_us)),
        "bandwidth" => out.peak().map(|r| r.gbps),
        _ => None,
    }
}

pub(crate) fn report(dir: &Path, title: &str) -> Option<IterationReport> {
    let out = read(dir)?;
    let v = verdict(&out);
    let table = kit::Table {
        header: vec!["block_size", "batch_size", "avg_lat", "bw_gb_sec"],
        rows: out
            .rows()
            .map(|r| {
                vec![
                    r.block.to_string(),
                    r.batch.to_string(),
                    kit::csv_num(Some(r.latency_us)),
                    kit::csv_num(Some(r.gbps)),
                ]
            })
            .collect(),
    };
    let mut metrics = serde_json::Map::new();
    if let Some(p) = out.peak() {
        metrics.insert("peak_gbps".into(), p.gbps.into());
        metrics.insert("peak_block_size".into(), p.block.into());
    }
    let rows = out.rows().count();
    metrics.insert("rows".into(), rows.into());
    let peak = out
        .peak()
        .map_or("none".into(), |p| format!("{:.2} GB/s", p.gbps));
    let page = TablePage {
        title,
        verdict: &v.status_line(),
        passed: v.passed,
        cards: vec![
            ("peak".into(), peak),
            ("rows".into(), rows.to_string()),
            (
                "backend".into(),
                out.tables
                    .iter()
                    .find_map(|t| t.option("backend"))
                    .unwrap_or("?")
                    .to_string(),
            ),
        ],
        charts: serde_json::json!({}),
        show: Vec::new(),
        sections: vec![table.section("Results")],
    }
    .render();
    Some(IterationReport {
        files: vec![(CSV_FILE.into(), table.csv()), (HTML_FILE.into(), page)],
        metrics,
        curve: crate::workloads::Curve::new(
            crate::workloads::Metric::BANDWIDTH,
            out.rows().map(|r| (r.block, r.gbps)).collect(),
        ),
        verdict: Some(v),
        ..Default::default()
    })
}
