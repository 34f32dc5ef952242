//! The fleet ledger against real databases: SQLite (the embedded default) and a real PostgreSQL server
//! (`scripts/pg-cluster.sh`; CLOUDAI_REQUIRE_POSTGRES=1 in CI makes its absence a failure). Results trees are made
//! from a real nccl-tests output (CloudAI's tree layout, graded again on import); the metrics are checked by
//! Prometheus' own `promtool`.

use std::path::{Path, PathBuf};
use std::process::Command;

use cloudai::ledger::{drift, query, Ledger, Location};

use crate::common::skip;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");
const CONF: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../conf/common");
/// Two hosts × 8 H100, all_reduce 512 MiB … 8 GiB.
const SAMPLE: &str = "nccl-samples/multinode-2x8-h100-allreduce-kubeflow-mpijob.txt";

fn cloudai(ledger: &str) -> Command {
    let mut c = Command::new(assert_cmd::cargo::cargo_bin("cloudai"));
    c.args(["--ledger", ledger]);
    c
}

fn ok(c: &mut Command) -> String {
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{:?}: {}\n{}",
        c,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The output with every row at 64 MiB or more scaled by `f` (bandwidths times f, times divided by f).
fn scaled(text: &str, f: f64) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let t: Vec<&str> = line.split_whitespace().collect();
        let big = t.len() >= 13 && t[0].parse::<u64>().is_ok_and(|s| s >= 64 << 20);
        if !big {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let mut v: Vec<String> = t.iter().map(|s| s.to_string()).collect();
        for (i, mult) in [(5, 1.0 / f), (6, f), (7, f), (9, 1.0 / f), (10, f), (11, f)] {
            if let Ok(x) = v[i].parse::<f64>() {
                v[i] = format!("{:.2}", x * mult);
            }
        }
        out.push_str(&format!("  {}\n", v.join("  ")));
    }
    out
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

/// One CloudAI-layout results tree per factor, a day apart (the newest yesterday), each holding the sample with
/// its large sizes scaled by that factor. Returns the trees, oldest first.
fn nccl_trees(dir: &Path, factors: &[f64]) -> Vec<PathBuf> {
    let sample = std::fs::read_to_string(Path::new(DATA).join(SAMPLE)).unwrap();
    let now = chrono::Local::now() - chrono::Duration::days(1);
    factors
        .iter()
        .enumerate()
        .map(|(k, f)| {
            let when = now - chrono::Duration::days((factors.len() - 1 - k) as i64);
            let root = dir.join(format!("nccl_{}", when.format("%Y-%m-%d_%H-%M-%S")));
            let test = root.join("Tests.all_reduce");
            copy_dir(
                &Path::new(DATA).join("compat/cloudai-dry-run/slurm-nccl/tree/Tests.all_reduce"),
                &test,
            );
            std::fs::write(test.join("0/stdout.txt"), scaled(&sample, *f)).unwrap();
            root
        })
        .collect()
}

/// A fresh PostgreSQL database on the test server, or None (skipped) without one.
fn postgres() -> Option<String> {
    let admin = std::env::var("CLOUDAI_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:55432/postgres".into());
    let mut db = match cloudai::ledger::db::Postgres::connect(&admin) {
        Ok(db) => db,
        Err(e) => {
            assert!(
                std::env::var("CLOUDAI_REQUIRE_POSTGRES").is_err(),
                "no PostgreSQL server at {admin}: {e} (scripts/pg-cluster.sh start)"
            );
            skip(&format!("no PostgreSQL server at {admin}: {e}"));
            return None;
        }
    };
    use cloudai::ledger::db::Db;
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let name = format!(
        "cloudai_test_{}_{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    );
    db.batch(&format!("DROP DATABASE IF EXISTS {name}"))
        .unwrap();
    db.batch(&format!("CREATE DATABASE {name}")).unwrap();
    let (base, _) = admin.rsplit_once('/').unwrap();
    Some(format!("{base}/{name}"))
}

fn location(ledger: &str) -> Location {
    Location::resolve(Some(ledger), false)
}

fn promtool_accepts(text: &str) {
    let Ok(mut child) = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    else {
        assert!(
            std::env::var("CLOUDAI_REQUIRE_POSTGRES").is_err(),
            "promtool is not installed (scripts/pg-cluster.sh install: Debian's prometheus package)"
        );
        skip("promtool is not installed");
        return;
    };
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics refused it:\n{}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Record, import (idempotent), show, drift, page, metrics and `--baseline ledger` against one ledger.
fn end_to_end(ledger: &str) {
    let d = tempfile::tempdir().unwrap();
    // every results tree of tests/data, twice: the second import adds nothing
    ok(cloudai(ledger).args(["history", "import", DATA]));
    let counts = |l: &str| Ledger::open(&location(l)).unwrap().counts().unwrap();
    let first = counts(ledger);
    assert!(first["runs"] >= 7, "{first:?}");
    ok(cloudai(ledger).args(["history", "import", DATA]));
    // the rows, not their time stamps: a tree that records no time is stamped when it is imported, and a second
    // import in the next second replaces it with that second
    let rows = |c: &std::collections::BTreeMap<&'static str, i64>| {
        c.iter()
            .filter(|(k, _)| !k.ends_with("_at"))
            .map(|(k, v)| (k.to_string(), *v))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        rows(&counts(ledger)),
        rows(&first),
        "importing again added rows"
    );

    // a week of nights, the large sizes 1 % slower each night
    let factors: Vec<f64> = (0..7).map(|k| 0.99f64.powi(k)).collect();
    let trees = nccl_trees(d.path(), &factors);
    ok(cloudai(ledger).args(["history", "import"]).arg(d.path()));
    let c = counts(ledger);
    assert_eq!(c["runs"], first["runs"] + 7);
    assert_eq!(c["iterations"], first["iterations"] + 7);
    // re-grading a tree replaces its rows
    ok(cloudai(ledger)
        .args(["generate-report", "--result-dir"])
        .arg(&trees[6]));
    assert_eq!(
        rows(&counts(ledger)),
        rows(&c),
        "re-grading the same inputs changed the rows"
    );

    // the host's history names every night, with the versions and GPU the output shows
    let host = "nccl-tests-h100-worker-0";
    let shown: serde_json::Value = serde_json::from_str(&ok(
        cloudai(ledger).args(["history", "show", "--node", host, "--json"])
    ))
    .unwrap();
    let rows = shown.as_array().unwrap();
    assert_eq!(rows.len(), 7, "{shown}");
    assert!(rows
        .iter()
        .all(|r| r["status"] == "PASSED" && r["test"] == "Tests.all_reduce"));
    let peaks: Vec<f64> = rows.iter().map(|r| r["value"].as_f64().unwrap()).collect();
    assert!(peaks.windows(2).all(|w| w[1] < w[0]), "{peaks:?}");
    {
        let mut l = Ledger::open(&location(ledger)).unwrap();
        let v = l
            .db()
            .query("SELECT gpu, nccl, nccl_tests, nnodes, gpus_per_node FROM iterations WHERE gpu IS NOT NULL", &[])
            .unwrap();
        assert!(!v.is_empty());
        assert!(v[0][0].text().contains("H100"), "{v:?}");
        assert_eq!(v[0][3].int(), Some(2));
        assert_eq!(v[0][4].int(), Some(8));
        // the drift rule flags the slide within five nights of it
        let series = l.series(None, Some(host)).unwrap();
        let large = series
            .iter()
            .find(|(k, _)| k.band == "large" && k.test == "Tests.all_reduce")
            .map(|(_, s)| s.iter().map(|p| p.value).collect::<Vec<f64>>())
            .unwrap();
        assert_eq!(large.len(), 7);
        let first_flag = (1..=large.len())
            .find(|n| drift::judge(&large[..*n], true).flagged)
            .unwrap();
        assert!(first_flag <= 5, "flagged only after {first_flag} runs");
    }
    let drifted: serde_json::Value =
        serde_json::from_str(&ok(cloudai(ledger).args(["history", "drift", "--json"]))).unwrap();
    let flagged: Vec<&serde_json::Value> = drifted.as_array().unwrap().iter().collect();
    assert_eq!(flagged.len(), 1, "{drifted}");
    assert_eq!(flagged[0]["band"], "large");
    assert_eq!(flagged[0]["flagged"], true);

    // the trend page and the metrics
    let page = d.path().join("trends.html");
    ok(cloudai(ledger)
        .args(["history", "page", "--output"])
        .arg(&page));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("drifting") && html.contains("data-chart"));
    let metrics = ok(cloudai(ledger).args(["history", "metrics"]));
    assert!(metrics.ends_with("# EOF\n"));
    assert!(metrics.contains(&format!(
        "cloudai_drift{{node=\"{host}+nccl-tests-h100-worker-1\",test=\"Tests.all_reduce\",band=\"large\"}} 1"
    )));
    assert!(metrics.contains("cloudai_busbw_gbytes{"));
    promtool_accepts(&metrics);

    // the newest night against the same hosts' own history: ~3 % below their median
    let graded = cloudai(ledger)
        .args([
            "generate-report",
            "--baseline",
            "ledger",
            "--tolerance",
            "2",
            "--result-dir",
        ])
        .arg(&trees[6])
        .output()
        .unwrap();
    assert_eq!(
        graded.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&graded.stderr)
    );
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(trees[6].join("summary.json")).unwrap()).unwrap();
    let t = &summary["tests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["test_id"] == "Tests.all_reduce")
        .unwrap();
    assert_eq!(t["status"], "FAILED", "{t}");
    ok(cloudai(ledger)
        .args([
            "generate-report",
            "--baseline",
            "ledger",
            "--tolerance",
            "5",
            "--result-dir",
        ])
        .arg(&trees[6]));
}

#[test]
fn sqlite_ledger_records_imports_shows_drift_and_metrics() {
    let d = tempfile::tempdir().unwrap();
    end_to_end(d.path().join("ledger.sqlite").to_str().unwrap());
}

#[test]
fn postgres_ledger_records_imports_shows_drift_and_metrics() {
    let Some(url) = postgres() else { return };
    end_to_end(&url);
}

/// A small deterministic generator for the noise.
struct Lcg(u64);
impl Lcg {
    fn noise(&mut self, amp: f64) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let u = ((self.0 >> 11) as f64) / ((1u64 << 53) as f64);
        1.0 + (u * 2.0 - 1.0) * amp
    }
}

#[test]
fn noise_of_two_percent_is_never_flagged_over_a_hundred_runs() {
    let d = tempfile::tempdir().unwrap();
    let ledger = d.path().join("l.sqlite");
    let mut r = Lcg(2026);
    let factors: Vec<f64> = (0..100).map(|_| r.noise(0.02)).collect();
    nccl_trees(&d.path().join("trees"), &factors);
    ok(cloudai(ledger.to_str().unwrap())
        .args(["history", "import"])
        .arg(d.path().join("trees")));
    let mut l = Ledger::open(&Location::Sqlite(ledger)).unwrap();
    let series = l.series(None, None).unwrap();
    let large: Vec<f64> = series
        .iter()
        .find(|(k, _)| k.band == "large")
        .map(|(_, s)| s.iter().map(|p| p.value).collect())
        .unwrap();
    assert_eq!(large.len(), 100);
    for n in 1..=large.len() {
        let f = drift::judge(&large[..n], true);
        assert!(!f.flagged, "flagged at run {n}: {f:?}");
    }
    // and none of the other series either
    for (k, s) in &series {
        let v: Vec<f64> = s.iter().map(|p| p.value).collect();
        assert!(
            !drift::judge(&v, query::higher_is_better(&k.band)).flagged,
            "{k:?}"
        );
    }
}

#[test]
fn a_run_records_itself_no_ledger_records_nothing_and_a_broken_ledger_is_a_warning() {
    let d = tempfile::tempdir().unwrap();
    let ledger = d.path().join("l.sqlite");
    let metrics = d.path().join("textfile/cloudai.prom");
    std::fs::create_dir_all(metrics.parent().unwrap()).unwrap();
    let run = |extra: &[&str], ledger: &str| {
        let mut c = cloudai(ledger);
        c.arg("run")
            .args(extra)
            .arg("--tests-dir")
            .arg(format!("{CONF}/test"))
            .arg("--test-scenario")
            .arg(format!("{CONF}/test_scenario/sleep.toml"))
            .arg("--output-dir")
            .arg(d.path().join("out"))
            .current_dir(d.path());
        c.output().unwrap()
    };
    let out = run(
        &["--metrics-file", metrics.to_str().unwrap()],
        ledger.to_str().unwrap(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let c = Ledger::open(&Location::Sqlite(ledger.clone()))
        .unwrap()
        .counts()
        .unwrap();
    assert_eq!((c["runs"], c["iterations"]), (1, 5), "{c:?}");
    let m = std::fs::read_to_string(&metrics).unwrap();
    assert!(
        m.contains("# TYPE cloudai_node_verdict gauge") && m.ends_with("# EOF\n"),
        "{m}"
    );
    promtool_accepts(&m);

    // --no-ledger wins over --ledger and CLOUDAI_LEDGER
    let off = d.path().join("off.sqlite");
    let out = run(&["--no-ledger"], off.to_str().unwrap());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!off.exists(), "--no-ledger created a ledger");

    // a ledger that cannot be written: the run passes, with a warning that says how to record later
    let blocker = d.path().join("a-file");
    std::fs::write(&blocker, "").unwrap();
    let out = run(&[], blocker.join("l.sqlite").to_str().unwrap());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains("Cannot record the results in the ledger") && said.contains("history import"),
        "{said}"
    );
}

#[test]
fn an_older_ledger_is_migrated_and_a_newer_one_refused() {
    let d = tempfile::tempdir().unwrap();
    let at = Location::Sqlite(d.path().join("l.sqlite"));
    {
        let mut old = Ledger::open_at_version(&at, 1).unwrap();
        assert_eq!(old.schema_version().unwrap(), 1);
        let tables = old
            .db()
            .query("SELECT name FROM sqlite_master WHERE name = 'pairs'", &[])
            .unwrap();
        assert!(tables.is_empty(), "v1 has no pairs table");
    }
    // a v1 ledger's rows, as v1 wrote them: sizes as busbw
    {
        let mut old = Ledger::open_at_version(&at, 1).unwrap();
        for sql in [
            "INSERT INTO names (id, name) VALUES (1, 'Tests.all_reduce')",
            "INSERT INTO runs (id, uid, kind, scenario, results, at, recorded_at) \
             VALUES (1, 'run:t:1', 'run', 's', '/r', 100, 100)",
            "INSERT INTO iterations (id, run_id, test_id, template, iteration, status, reasons, nodes, collective, \
             dtype, nnodes, gpus_per_node, at) \
             VALUES (1, 1, 1, 'NcclTest', 0, 'PASSED', '', 'n1', 'all_reduce_perf', 'float', 1, 8, 100)",
            "INSERT INTO iterations (id, run_id, test_id, template, iteration, status, reasons, nodes, metric, value, \
             at) VALUES (2, 1, 1, 'Sleep', 0, 'PASSED', '', 'n1', 'seconds', 1.0, 100)",
            "INSERT INTO sizes (iteration_id, size, busbw, algbw, time_us) VALUES (1, 1048576, 181.3, 90.6, 11.5)",
        ] {
            old.db().exec(sql, &[]).unwrap();
        }
    }
    let mut l = Ledger::open(&at).unwrap();
    assert_eq!(
        l.schema_version().unwrap(),
        cloudai::ledger::schema::CURRENT
    );
    assert_eq!(l.counts().unwrap()["iterations"], 2, "rows kept");
    // the sizes were bus bandwidth: v4 names it, on the iteration that has sizes only
    let migrated = l
        .db()
        .query(
            "SELECT i.id, i.point_metric, s.value FROM iterations i LEFT JOIN sizes s ON s.iteration_id = i.id \
             ORDER BY i.id",
            &[],
        )
        .unwrap();
    assert_eq!(migrated[0][1].text(), "busbw");
    assert_eq!(migrated[0][2].real(), Some(181.3));
    assert!(migrated[1][1].text().is_empty(), "{:?}", migrated[1]);
    // and what this cloudai writes lands beside them
    let trees = nccl_trees(&d.path().join("t"), &[1.0]);
    let rows = cloudai::ledger::rows::of_tree(&trees[0]).unwrap().unwrap();
    l.write(&rows).unwrap();
    assert_eq!(l.counts().unwrap()["iterations"], 3);
    l.db()
        .exec(
            "UPDATE meta SET value = '99' WHERE key = 'schema_version'",
            &[],
        )
        .unwrap();
    drop(l);
    let err = Ledger::open(&at).err().unwrap();
    assert!(
        matches!(
            err.root(),
            cloudai::ledger::LedgerError::Newer { found: 99, known } if *known == cloudai::ledger::schema::CURRENT
        ),
        "{err:?}"
    );
    let err = err.to_string();
    assert!(err.contains("version 99") && err.contains("newer"), "{err}");
    // and the command line says so once, non-zero
    let out = cloudai(d.path().join("l.sqlite").to_str().unwrap())
        .arg("history")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("newer than this cloudai"), "{said}");
}

#[test]
fn two_runs_at_once_lose_nothing_and_kill_9_mid_write_leaves_a_ledger_that_opens() {
    let d = tempfile::tempdir().unwrap();
    let ledger = d.path().join("l.sqlite");
    let spawn_run = |out: &str| {
        Command::new(assert_cmd::cargo::cargo_bin("cloudai"))
            .args(["--ledger", ledger.to_str().unwrap(), "run", "--tests-dir"])
            .arg(format!("{CONF}/test"))
            .arg("--test-scenario")
            .arg(format!("{CONF}/test_scenario/sleep.toml"))
            .arg("--output-dir")
            .arg(d.path().join(out))
            .current_dir(d.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn_run("a"), spawn_run("b"));
    for c in [a, b] {
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let said = String::from_utf8_lossy(&o.stdout);
        assert!(!said.contains("Cannot record"), "{said}");
    }
    let c = Ledger::open(&Location::Sqlite(ledger.clone()))
        .unwrap()
        .counts()
        .unwrap();
    assert_eq!((c["runs"], c["iterations"]), (2, 10), "{c:?}");

    // an import of many trees killed at several moments: the ledger opens, each tree is all there or not at all
    let factors: Vec<f64> = (0..60).map(|k| 1.0 - k as f64 * 0.0001).collect();
    let trees = d.path().join("trees");
    nccl_trees(&trees, &factors);
    let killed = d.path().join("killed.sqlite");
    for ms in [30u64, 80, 150, 300, 600] {
        let mut child = cloudai(killed.to_str().unwrap())
            .args(["history", "import"])
            .arg(&trees)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(ms));
        let _ = child.kill();
        let _ = child.wait();
        if !killed.exists() {
            continue;
        }
        let mut l = Ledger::open(&Location::Sqlite(killed.clone())).unwrap();
        assert_eq!(l.integrity().unwrap(), "ok");
        let c = l.counts().unwrap();
        assert_eq!(c["runs"], c["iterations"], "a tree half written: {c:?}");
        let sizes = l.db().query("SELECT COUNT(*) FROM sizes", &[]).unwrap()[0][0]
            .int()
            .unwrap();
        assert_eq!(sizes, c["iterations"] * 5, "sizes of a tree half written");
    }
    ok(cloudai(killed.to_str().unwrap())
        .args(["history", "import"])
        .arg(&trees));
    let c = Ledger::open(&Location::Sqlite(killed))
        .unwrap()
        .counts()
        .unwrap();
    assert_eq!((c["runs"], c["iterations"]), (60, 60));
}
