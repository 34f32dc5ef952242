//! Parser throughput on a large log: `cargo run --release --example parse_bench -- [MB]`.
//! The log repeats a real 8-GPU output with NCCL INFO lines mixed in, like a long NCCL_DEBUG=INFO run.

use std::time::Instant;

fn main() {
    let mb: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100);
    let sample = include_str!("../tests/data/a100-8gpu.txt");
    let noise =
        "dkh:584419:584419 [0] NCCL INFO Channel 00/32 : 0 1 2 3 4 5 6 7 via P2P/IPC/read\n";
    let mut log = String::with_capacity(mb << 20);
    while log.len() < mb << 20 {
        log.push_str(sample);
        for _ in 0..20 {
            log.push_str(noise);
        }
    }
    // five passes: the machine is shared, so report the median and the best
    let mut secs = Vec::new();
    let mut out = Default::default();
    for _ in 0..5 {
        let t = Instant::now();
        out = cloudai::workloads::nccl::parse::parse(&log);
        secs.push(t.elapsed().as_secs_f64());
    }
    let out: cloudai::workloads::nccl::parse::Output = out;
    secs.sort_by(f64::total_cmp);
    let mb = log.len() as f64 / 1048576.0;
    let rows: usize = out.runs.iter().map(|r| r.rows.len()).sum();
    println!(
        "parsed {mb:.1} MB ({} lines, {} runs, {rows} rows): median {:.0} MB/s, best {:.0} MB/s",
        out.lines,
        out.runs.len(),
        mb / secs[2],
        mb / secs[0]
    );
}
