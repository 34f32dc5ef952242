//! A dry-run is the same engine on a system that hands it no effects ([`crate::systems::Effects::NONE`]): no wait
//! between polls, no records of its own, every iteration ending DRY-RUN — even one a dependency stopped.

use super::*;
use crate::systems::dry_run::DryRun;

#[tokio::test(start_paused = true)]
async fn a_dry_run_waits_for_nothing_records_nothing_and_every_iteration_ends_dry_run() {
    let fake = Fake::new(&[("server", Behave { run: None, ..QUICK })]);
    // the server would run until the client is done: a dry-run stops it, and it still ends DRY-RUN
    let tests = test(
        "server",
        &format!("iterations = 4\n{}", dep("end_post_comp", "client")),
    ) + &test("client", "");
    let (dir, s) = scenario(&tests);
    let root = dir.path().join("results");
    let layout = Layout {
        root: root.clone(),
        step: None,
    };
    let t0 = Instant::now();
    let runner = Runner::builder(DryRun::wrap(fake.clone()), s, layout).build();
    let outcome = tokio::time::timeout(Duration::from_secs(3600), runner.run())
        .await
        .expect("the dry-run did not finish within an hour");
    // the fake's interval is a second: a dry-run polls back to back
    assert_eq!(t0.elapsed(), Duration::ZERO);
    // nothing reached the scheduler
    assert_eq!(fake.events(), Vec::new());
    let rows: Vec<_> = outcome
        .records
        .iter()
        .map(|r| (r.test_id.as_str(), r.iteration, r.status, r.end_reason))
        .collect();
    let dry = |t, i| (t, i, Status::DryRun, EndReason::DryRun);
    assert_eq!(
        rows,
        vec![
            dry("server", 0),
            dry("server", 1),
            dry("server", 2),
            dry("server", 3),
            dry("client", 0)
        ]
    );
    // no journal, no run records: only what the system prepared (here nothing but test-run.toml)
    let mut files: Vec<String> = walk(&root);
    files.retain(|f| !f.ends_with("test-run.toml"));
    assert_eq!(files, Vec::<String>::new());
}

/// Every file under `root`, relative.
fn walk(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                out.push(p.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}
