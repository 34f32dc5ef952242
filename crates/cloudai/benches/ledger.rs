//! `cargo bench --bench ledger`: the fleet ledger at a year's scale. Nightly find-bad-nodes sweeps of a 4,096-node
//! fleet (2,048 pairs and 4,096 node verdicts a night) are recorded into a fresh SQLite ledger until 10⁶ pair
//! results are in; then a node's history (`history show --node`) is asked for. Targets (issue #38): ingest ≥ 100,000
//! rows/s, a node's history < 50 ms, < 150 MB on disk for a year (365 nights).

use std::time::Instant;

use cloudai::ledger::rows::{NodeCheckRow, PairRow, RunRows};
use cloudai::ledger::{query::Filter, Ledger, Location};

const NODES: usize = 4096;
const PAIRS: usize = 1_000_000;

fn night(k: usize) -> RunRows {
    let name = |i: usize| format!("node{:04}", i);
    // partners rotate nightly, as a sweep of a changing node list would pair them
    let shift = k % 7;
    let pairs = (0..NODES / 2)
        .map(|i| {
            let a = (2 * i + shift) % NODES;
            let b = (2 * i + 1 + shift) % NODES;
            PairRow {
                test: "nccl_all_reduce".into(),
                a: name(a),
                b: name(b),
                round: 1,
                busbw: Some(180.0 + ((i * 31 + k * 17) % 100) as f64 / 50.0),
                passed: !(i + k).is_multiple_of(997),
            }
        })
        .collect();
    let node_checks = (0..NODES)
        .map(|i| NodeCheckRow {
            node: name(i),
            check: "find-bad-nodes".into(),
            status: if (i + k).is_multiple_of(997) {
                "suspect"
            } else {
                "good"
            }
            .into(),
            detail: String::new(),
        })
        .collect();
    RunRows {
        uid: format!("find-bad-nodes:bench:{k}"),
        kind: "find-bad-nodes",
        scenario: "find-bad-nodes nccl_all_reduce".into(),
        results: format!("/results/find-bad-nodes_{k}"),
        at: 1_700_000_000 + k as i64 * 86_400,
        pairs,
        node_checks,
        ..Default::default()
    }
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let at = Location::Sqlite(path.clone());
    let mut l = Ledger::open(&at).unwrap();
    let nights = PAIRS.div_ceil(NODES / 2);
    let (mut rows, mut pairs) = (0usize, 0usize);
    let mut size_at_year = 0u64;
    let mut secs = 0.0;
    for k in 0..nights {
        let r = night(k);
        rows += r.len();
        pairs += r.pairs.len();
        let t = Instant::now();
        l.write(&r).unwrap();
        secs += t.elapsed().as_secs_f64();
        if k + 1 == 365 {
            drop(l);
            size_at_year = disk(&path);
            l = Ledger::open(&at).unwrap();
        }
    }
    drop(l);
    let size = disk(&path);
    let mut l = Ledger::open(&at).unwrap();
    let mut best = f64::MAX;
    let mut shown = 0;
    for n in ["node0000", "node2047", "node4095"] {
        let t = Instant::now();
        let h = l
            .history(&Filter {
                node: Some(n.into()),
                limit: 0,
                ..Default::default()
            })
            .unwrap();
        best = best.min(t.elapsed().as_secs_f64() * 1000.0);
        shown = h.len();
    }
    println!(
        "ledger (SQLite, cargo bench --bench ledger): {nights} nightly sweeps of {NODES} nodes: {pairs} pair results + \
         {} node verdicts = {rows} rows in {secs:.1} s = {:.0} rows/s (target >= 100000); {:.1} MB on disk after \
         365 nights (target < 150 MB), {:.1} MB after all; `history show --node` ({shown} rows of one node): \
         {best:.1} ms (target < 50 ms)",
        rows - pairs,
        rows as f64 / secs,
        size_at_year as f64 / 1e6,
        size as f64 / 1e6,
    );
}

/// The ledger's bytes on disk, its WAL checkpointed (closed).
fn disk(path: &std::path::Path) -> u64 {
    ["", "-wal", "-shm"]
        .iter()
        .filter_map(|s| std::fs::metadata(format!("{}{s}", path.display())).ok())
        .map(|m| m.len())
        .sum()
}
