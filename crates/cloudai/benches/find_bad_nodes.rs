//! `cargo bench --bench find_bad_nodes`: the find-bad-nodes search simulated on 64, 1,024 and 4,096 nodes with
//! K bad nodes and L bad links drawn from a seed, judged against the truth: jobs, rounds, wall time and whether
//! every verdict was right.

use std::time::Instant;

use cloudai::bad_nodes::plan::Plan;
use cloudai::bad_nodes::sim;

fn main() {
    println!(
        "{:>6} {:>3} {:>3} {:>7} {:>7} {:>7} {:>10}  correct",
        "nodes", "K", "L", "jobs", "bound", "rounds", "ms"
    );
    for n in [64usize, 1024, 4096] {
        for k in [0usize, 1, 8] {
            for l in [0usize, 4] {
                let t = Instant::now();
                let o = sim::run(n, k, l, 42);
                let ms = t.elapsed().as_secs_f64() * 1000.0;
                println!(
                    "{:>6} {:>3} {:>3} {:>7} {:>7} {:>7} {:>10.2}  {}",
                    o.nodes,
                    o.bad,
                    o.links,
                    o.jobs,
                    Plan::bound(n, k + l),
                    o.rounds,
                    ms,
                    if o.correct {
                        "yes".to_string()
                    } else {
                        format!("NO: {:?}", o.wrong)
                    }
                );
            }
        }
    }
}
