//! `cloudai history`: the fleet ledger — import results trees, show a node's or a test's history, the trend page,
//! drift, and the metrics export.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};

use crate::exit_codes::Failure;
use crate::ledger::{self, query::Filter, Ledger, Location};

#[derive(Args, Debug)]
pub(crate) struct HistoryCmd {
    #[command(subcommand)]
    what: Option<What>,
}

#[derive(Subcommand, Debug)]
enum What {
    /// Record existing results trees (ours and CloudAI's; a directory holding trees is searched); importing again
    /// adds nothing
    Import {
        #[arg(required = true, value_name = "DIR")]
        dirs: Vec<PathBuf>,
    },
    /// The runs, verdicts and key metric of a node or a test over time
    Show(ShowArgs),
    /// Write a self-contained HTML page of trends (busbw over runs with each series' noise band)
    Page {
        /// The page [default: cloudai-history.html]
        #[arg(long, short, default_value = "cloudai-history.html")]
        output: PathBuf,
        /// Only series of this node
        #[arg(long, value_parser = parse_name)]
        node: Option<String>,
        /// Only runs since (YYYY-MM-DD, RFC 3339, or an age: 30d, 12h)
        #[arg(long, value_parser = parse_since)]
        since: Option<i64>,
    },
    /// Series (node or link, test, size band) sliding beyond their own noise over recent runs
    Drift {
        #[arg(long)]
        json: bool,
        /// Only series of this node
        #[arg(long, value_parser = parse_name)]
        node: Option<String>,
        /// Only runs since (YYYY-MM-DD, RFC 3339, or an age: 30d, 12h)
        #[arg(long, value_parser = parse_since)]
        since: Option<i64>,
        /// Every series, not only the drifting ones
        #[arg(long)]
        all: bool,
    },
    /// Print the latest values in the OpenMetrics text format (for Prometheus, node_exporter's textfile collector)
    Metrics {
        /// Write it here atomically instead of printing it
        #[arg(long, value_name = "PATH")]
        output: Option<PathBuf>,
    },
}

#[derive(Args, Debug)]
struct ShowArgs {
    /// This node's history
    #[arg(long, value_parser = parse_name)]
    node: Option<String>,
    /// This test's history (a test id of a scenario, or find-bad-nodes' test name)
    #[arg(long, value_parser = parse_name)]
    test: Option<String>,
    /// Only runs since (YYYY-MM-DD, RFC 3339, or an age: 30d, 12h)
    #[arg(long, value_parser = parse_since)]
    since: Option<i64>,
    /// The newest rows shown (0: all)
    #[arg(long, default_value_t = 200)]
    limit: usize,
    #[arg(long)]
    json: bool,
}

/// Node and test names: printable, no spaces or quotes, at most 256 characters.
fn parse_name(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 256
        && s.chars()
            .all(|c| c.is_ascii_graphic() && c != '"' && c != '\'' && c != '\\');
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?} is not a node or test name (printable characters without spaces or quotes, at most 256)"
        ))
    }
}

/// `2026-11-01`, an RFC 3339 time, or an age (`30d`, `12h`, `90m`) → Unix seconds.
pub(crate) fn parse_since(s: &str) -> Result<i64, String> {
    let t = s.trim();
    if let Ok(d) = chrono::NaiveDate::parse_from_str(t, "%Y-%m-%d") {
        if let Some(t) = d
            .and_hms_opt(0, 0, 0)
            .and_then(|d| d.and_local_timezone(chrono::Local).earliest())
        {
            return Ok(t.timestamp());
        }
    }
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(t) {
        return Ok(t.timestamp());
    }
    let (num, unit) = t.split_at(t.len().saturating_sub(1));
    let mult = match unit {
        "d" => 86_400,
        "h" => 3_600,
        "m" => 60,
        _ => 0,
    };
    match num.parse::<i64>() {
        Ok(n) if mult > 0 && (0..=36_500 * 86_400 / mult).contains(&n) => {
            Ok(chrono::Utc::now().timestamp() - n * mult)
        }
        _ => Err(format!(
            "{s:?} is not a date (2026-11-01), an RFC 3339 time, or an age (30d, 12h, 90m)"
        )),
    }
}

fn open() -> Result<Ledger, Failure> {
    let at = ledger::location();
    if at == Location::Off {
        return Err(Failure::Error(
            "the ledger is off (--no-ledger): give --ledger PATH|URL to read one".into(),
        ));
    }
    if let Location::Sqlite(p) = &at {
        // reading must not create an empty ledger where none was
        if !p.exists() {
            return Err(Failure::Error(format!(
                "no ledger at {}: runs record into it as they end; `cloudai history import DIR` records existing \
                 results trees (--ledger PATH|URL names another)",
                p.display()
            )));
        }
    }
    Ledger::open(&at).map_err(|e| Failure::Error(format!("Cannot open the ledger: {e}")))
}

pub fn history(cmd: &HistoryCmd) -> Result<(), Failure> {
    // the PostgreSQL client runs its own runtime: everything here runs on a thread of its own
    ledger::off_runtime(|| match &cmd.what {
        None => summary(),
        Some(What::Import { dirs }) => import(dirs),
        Some(What::Show(a)) => show(a),
        Some(What::Page {
            output,
            node,
            since,
        }) => {
            let mut l = open()?;
            let series = l.series(*since, node.as_deref())?;
            let html = ledger::page::render("cloudai history", &series);
            crate::util::fsx::write_atomic(output, html.as_bytes())
                .map_err(|e| Failure::Error(format!("Cannot write {}: {e}", output.display())))?;
            crate::info!(
                "History page written to {} ({} series)",
                output.display(),
                series.len()
            );
            Ok(())
        }
        Some(What::Drift {
            json,
            node,
            since,
            all,
        }) => drift(*json, node.as_deref(), *since, *all),
        Some(What::Metrics { output }) => {
            let mut l = open()?;
            let text = ledger::metrics::render(&mut l)?;
            match output {
                Some(p) => ledger::metrics::write_file(p, &text)
                    .map_err(|e| Failure::Error(format!("Cannot write {}: {e}", p.display()))),
                None => {
                    print!("{text}");
                    Ok(())
                }
            }
        }
    })
}

fn summary() -> Result<(), Failure> {
    let mut l = open()?;
    let c = l.counts()?;
    let v = l.schema_version()?;
    let when = |k: &str| {
        chrono::DateTime::from_timestamp(c[k], 0)
            .map(|t| {
                t.with_timezone(&chrono::Local)
                    .format("%Y-%m-%d %H:%M")
                    .to_string()
            })
            .unwrap_or_default()
    };
    println!(
        "ledger {} (schema {v}): {} runs, {} iterations, {} find-bad-nodes pairs, {} node verdicts{}",
        l.location.display(),
        c["runs"],
        c["iterations"],
        c["pairs"],
        c["node_checks"],
        if c["runs"] > 0 {
            format!(", {} … {}", when("first_at"), when("last_at"))
        } else {
            String::new()
        }
    );
    Ok(())
}

/// The results trees under a directory: itself when it is one, else its subdirectories.
fn trees(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    let is_tree = dir.join("bad-nodes.json").is_file()
        || !crate::report::scenario::iteration_dirs(dir).is_empty();
    if is_tree {
        out.push(dir.to_path_buf());
        return;
    }
    if depth == 0 {
        return;
    }
    let mut subs: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    subs.sort();
    for s in subs {
        trees(&s, depth - 1, out);
    }
}

fn import(dirs: &[PathBuf]) -> Result<(), Failure> {
    for d in dirs {
        if !d.is_dir() {
            return Err(Failure::Error(format!(
                "{}: not a directory (give results trees, or a directory holding them)",
                d.display()
            )));
        }
    }
    let mut found = Vec::new();
    for d in dirs {
        trees(d, 5, &mut found);
    }
    if found.is_empty() {
        return Err(Failure::Error(format!(
            "No results tree under {}: a tree holds <test>/<iteration>/ directories (or find-bad-nodes' \
             bad-nodes.json)",
            dirs.iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let mut l = Ledger::open(&ledger::location())
        .map_err(|e| Failure::Error(format!("Cannot open the ledger: {e}")))?;
    let (mut new, mut again, mut rows) = (0, 0, 0);
    for t in &found {
        let r = ledger::rows::of_tree(t).map_err(Failure::Error)?;
        let Some(r) = r else { continue };
        rows += r.len();
        match l.write(&r) {
            Ok(true) => new += 1,
            Ok(false) => again += 1,
            Err(e) => {
                return Err(Failure::Error(format!(
                    "Cannot record {} in the ledger: {e}",
                    t.display()
                )))
            }
        }
    }
    crate::info!(
        "Imported {} results tree(s) into {}: {new} new, {again} recorded again (replaced, not added); {rows} rows",
        new + again,
        l.location.display()
    );
    Ok(())
}

fn show(a: &ShowArgs) -> Result<(), Failure> {
    let mut l = open()?;
    let rows = l.history(&Filter {
        node: a.node.clone(),
        test: a.test.clone(),
        since: a.since,
        limit: a.limit,
    })?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).map_err(|e| Failure::Error(e.to_string()))?
        );
        return Ok(());
    }
    if rows.is_empty() {
        println!(
            "Nothing recorded{}{}.",
            a.node
                .as_ref()
                .map_or(String::new(), |n| format!(" for node {n}")),
            a.test
                .as_ref()
                .map_or(String::new(), |t| format!(" for test {t}"))
        );
        return Ok(());
    }
    println!(
        "{:<19}  {:<9}  {:<24}  {:>4}  {:<11}  {:>12}  {:<24}  reasons",
        "time", "kind", "test", "iter", "status", "value", "nodes"
    );
    for r in &rows {
        let value = r.value.map_or(String::new(), |v| format!("{v:.2}"));
        let mut nodes = r.nodes.clone();
        if nodes.len() > 24 {
            nodes.truncate(21);
            nodes.push_str("...");
        }
        let mut reasons = r.reasons.clone();
        if reasons.len() > 100 {
            let cut = (0..=97)
                .rev()
                .find(|i| reasons.is_char_boundary(*i))
                .unwrap_or(0);
            reasons.truncate(cut);
            reasons.push_str("...");
        }
        println!(
            "{:<19}  {:<9}  {:<24}  {:>4}  {:<11}  {:>12}  {:<24}  {}",
            r.time.get(..19).unwrap_or(&r.time).replace('T', " "),
            r.kind,
            r.test,
            r.iteration.map_or(String::new(), |i| i.to_string()),
            r.status,
            value,
            nodes,
            reasons
        );
    }
    Ok(())
}

fn drift(json: bool, node: Option<&str>, since: Option<i64>, all: bool) -> Result<(), Failure> {
    let mut l = open()?;
    let series = l.series(since, node)?;
    #[derive(serde::Serialize)]
    struct Row<'a> {
        #[serde(flatten)]
        key: &'a ledger::query::SeriesKey,
        #[serde(flatten)]
        finding: ledger::drift::Finding,
        last_at: i64,
    }
    let rows: Vec<Row> = series
        .iter()
        .map(|(k, s)| {
            let v: Vec<f64> = s.iter().map(|p| p.value).collect();
            Row {
                key: k,
                finding: ledger::drift::judge(&v, ledger::query::higher_is_better(&k.band)),
                last_at: s.last().map_or(0, |p| p.at),
            }
        })
        .filter(|r| all || r.finding.flagged)
        .collect();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).map_err(|e| Failure::Error(e.to_string()))?
        );
        return Ok(());
    }
    let flagged = rows.iter().filter(|r| r.finding.flagged).count();
    println!(
        "{flagged} of {} series drifting (slide beyond its own noise over its recent runs)",
        series.len()
    );
    for r in &rows {
        println!(
            "  {} {} · {} · {}: {} runs, median {:.2}, noise {:.1}%, slide {:.1}% over {} runs ({:.1} σ), latest {:+.1}%",
            if r.finding.flagged { "DRIFT " } else { "steady" },
            r.key.subject,
            r.key.test,
            r.key.band,
            r.finding.runs,
            r.finding.median,
            r.finding.noise * 100.0,
            r.finding.slide * 100.0,
            r.finding.window,
            r.finding.sigmas,
            r.finding.latest * 100.0
        );
    }
    Ok(())
}
