//! Reports: per-iteration CSV/HTML, the scenario page and summary.json after a run; generate-report re-grading and
//! comparing without re-running; the HTML rendered by a real headless Chromium.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{assert_verdict_exit, data, stdout_of, Work};

/// A standalone NCCL scenario whose stand-in binary prints `sample` (a file of tests/data/nccl-samples).
fn nccl_run(w: &Work, sample: &str, iterations: u32) -> PathBuf {
    let text = std::fs::read_to_string(data().join("nccl-samples").join(sample)).unwrap();
    let out = common::nccl_standalone(w, &text, iterations, &[]);
    let root = w.results_root();
    assert_verdict_exit(&out, &root);
    root
}

fn summary(root: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(root.join("summary.json")).unwrap()).unwrap()
}

#[test]
fn run_writes_cloudai_csv_html_and_summary() {
    let w = Work::new();
    let root = nccl_run(&w, "single-node-8gpu-a100-allreduce-v2.19.4.txt", 1);
    let csv = std::fs::read_to_string(root.join("ar/0/cloudai_nccl_test_csv_report.csv")).unwrap();
    let reference = std::fs::read_to_string(
        data().join("compat/cloudai-reports/single-node-8gpu-a100-allreduce-v2.19.4.csv"),
    )
    .unwrap();
    assert_eq!(csv, reference);
    let html =
        std::fs::read_to_string(root.join("ar/0/cloudai_nccl_test_bokeh_report.html")).unwrap();
    // offline: nothing is loaded from anywhere (the only URL is the SVG namespace name)
    assert!(
        !html.contains("src=") && !html.contains("<link") && !html.contains("https://"),
        "the page must work offline"
    );
    assert!(
        html.contains("182.90 GB/s at 128 MiB"),
        "peak busbw summary"
    );
    let s = summary(&root);
    assert_eq!(s["scenario"], "nccl-local");
    assert_eq!(s["counts"]["PASSED"], 1);
    let t = &s["tests"][0];
    assert_eq!(
        (t["test_id"].as_str(), t["status"].as_str()),
        (Some("ar"), Some("PASSED"))
    );
    assert_eq!(t["metrics"]["peak_busbw_gbps"], 182.9);
    assert_eq!(t["metrics"]["avg_busbw_gbps"], 34.9024);
    assert_eq!(t["reports"][0], "ar/0/cloudai_nccl_test_csv_report.csv");
    let page = std::fs::read_to_string(root.join("nccl-local.html")).unwrap();
    assert!(
        page.contains(r#"href="ar/0/cloudai_nccl_test_bokeh_report.html""#),
        "links to the iteration report"
    );
}

#[test]
fn failing_output_is_graded_with_the_reason() {
    let w = Work::new();
    let root = nccl_run(&w, "multinode-2x1-gh200-wrong-values-failed-v2.17.8.txt", 1);
    let t = &summary(&root)["tests"][0];
    assert_eq!(t["status"], "FAILED");
    let msg = t["message"].as_str().unwrap();
    assert!(
        msg.contains("stdout.txt:29: 96 wrong elements at size 1 MiB"),
        "{msg}"
    );
}

#[test]
fn generate_report_regrades_and_compares_without_rerunning() {
    let w = Work::new();
    let root = nccl_run(&w, "single-node-8gpu-a100-allreduce-v2.19.4.txt", 2);
    // a known-good baseline tree with higher bandwidth at 128 MB
    let base = w.path().join("baseline");
    copy_dir(&root, &base);
    for it in ["0", "1"] {
        let p = base.join("ar").join(it).join("stdout.txt");
        let t = std::fs::read_to_string(&p)
            .unwrap()
            .replace("  181.32 ", "  200.00 ")
            .replace("  182.90 ", "  201.00 ");
        std::fs::write(p, t).unwrap();
    }
    // iteration 1 got slower at 64 MB, and iteration 0's output is now a failure
    let p1 = root.join("ar/1/stdout.txt");
    std::fs::write(
        &p1,
        std::fs::read_to_string(&p1)
            .unwrap()
            .replace("174.83", "150.00")
            .replace("174.62", "150.00"),
    )
    .unwrap();
    std::fs::copy(
        data().join("nccl-samples/single-node-2gpu-nccl-failure-with-debug-info.txt"),
        root.join("ar/0/stdout.txt"),
    )
    .unwrap();

    let out = w
        .cloudai()
        .arg("generate-report")
        .arg("--result-dir")
        .arg(&root)
        .arg("--compare")
        .arg(&base)
        .args(["--tolerance", "5"])
        .output()
        .unwrap();
    let text = stdout_of(&out);
    // re-graded as failed: generate-report's exit code says so too
    assert_eq!(out.status.code(), Some(3), "{text}");
    let s = summary(&root);
    assert_eq!(s["tests"][0]["status"], "FAILED", "{s}");
    assert!(s["tests"][0]["message"]
        .as_str()
        .unwrap()
        .contains("Test NCCL failure"));
    // the record on disk was re-graded too
    let rec = cloudai::results::IterationRecord::read(&root.join("ar/0")).unwrap();
    assert_eq!(rec.status, cloudai::results::Status::Failed);
    let drops = s["drops"].as_array().unwrap();
    let has = |label: &str, size: u64| {
        drops
            .iter()
            .any(|d| d["label"] == label && d["size"] == size)
    };
    assert!(has("this run", 134217728), "{drops:?}");
    assert!(!has("iteration 1", 134217728), "{drops:?}");
    assert!(text.contains("busbw at 128 MiB dropped"), "{text}");
    assert!(!root.join("ar/2").exists(), "nothing was re-run");
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let dest = to.join(p.file_name().unwrap());
        if p.is_dir() {
            copy_dir(&p, &dest);
        } else {
            std::fs::copy(&p, &dest).unwrap();
        }
    }
}

fn rendered_dom(browser: &str, page: &Path, profile: &Path) -> String {
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn charts_render_in_headless_chromium() {
    let Some(browser) = common::chromium() else {
        return;
    };
    let w = Work::new();
    let root = nccl_run(&w, "single-node-8gpu-a100-allreduce-v2.19.4.txt", 2);
    let dom = rendered_dom(
        browser,
        &root.join("ar/0/cloudai_nccl_test_bokeh_report.html"),
        &w.path().join("profile"),
    );
    // the script drew the three charts (busbw, latency, algbw): 2 series each, one marker per row (25 rows)
    // plus one per legend entry
    assert_eq!(dom.matches(r#"class="series""#).count(), 6, "{dom}");
    assert_eq!(dom.matches(r#"class="point""#).count(), 6 * 25 + 6);
    assert!(dom.contains(">128 MiB<"), "x axis labels");
    let dom = rendered_dom(
        browser,
        &root.join("nccl-local.html"),
        &w.path().join("profile"),
    );
    assert!(
        dom.contains(r#"data-name="iteration 0""#) && dom.contains(r#"data-name="iteration 1""#),
        "comparison overlay"
    );
}

/// `--compare` with a tree that holds nothing comparable says so on the console, the page and summary.json.
#[test]
fn a_comparison_that_matches_nothing_says_so() {
    let w = Work::new();
    let root = nccl_run(&w, "single-node-8gpu-a100-allreduce-v2.19.4.txt", 1);
    let empty = w.path().join("elsewhere");
    std::fs::create_dir_all(&empty).unwrap();
    let out = w
        .cloudai()
        .args(["generate-report", "--result-dir"])
        .arg(&root)
        .arg("--compare")
        .arg(&empty)
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("[WARNING] --compare ")
            && text.contains("no iteration there has NCCL results to compare with"),
        "{text}"
    );
    let s = summary(&root);
    assert_eq!(s["compare_notes"].as_array().map(Vec::len), Some(1));
    let page = std::fs::read_to_string(root.join("nccl-local.html")).unwrap();
    assert!(page.contains("no iteration there has NCCL results"));
}

/// Trees we did not write: CloudAI's dry-run tree with one iteration's output added is graded from it (the job's
/// facts from CloudAI's slurm-job.toml), the others say they have no stdout.txt and end `unknown`; a directory that
/// is not a results tree is refused, naming the tree below it, and nothing is written into it.
#[test]
fn trees_we_did_not_write() {
    let w = Work::new();
    let tree = w.path().join("cloudai-tree");
    let src = data().join("compat/cloudai-dry-run/slurm-nccl/tree");
    let copy = std::process::Command::new("cp")
        .arg("-r")
        .arg(&src)
        .arg(&tree)
        .status()
        .unwrap();
    assert!(copy.success());
    std::fs::write(
        tree.join("Tests.all_reduce/0/stdout.txt"),
        std::fs::read_to_string(
            data().join("nccl-samples/single-node-8gpu-a100-allreduce-v2.19.4.txt"),
        )
        .unwrap(),
    )
    .unwrap();
    // the sample ran on one node: so must the test whose output it is (CloudAI's `nnodes` is checked against it)
    let run_toml = tree.join("Tests.all_reduce/0/test-run.toml");
    let text = std::fs::read_to_string(&run_toml).unwrap();
    std::fs::write(&run_toml, text.replacen("nnodes = 2", "nnodes = 1", 1)).unwrap();
    std::fs::write(
        tree.join("Tests.all_reduce/0/slurm-job.toml"),
        r#"job_id = 4242
name = "nccl"
state = "COMPLETED"
start_time = "2026-12-01T10:00:00"
end_time = "2026-12-01T10:02:00"
elapsed_time_sec = 120
exit_code = "0:0"
"#,
    )
    .unwrap();
    let out = w.generate_report(&tree);
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(tree.join("summary.json")).unwrap()).unwrap();
    let tests = summary["tests"].as_array().unwrap();
    let ar = tests
        .iter()
        .find(|t| t["test_id"] == "Tests.all_reduce")
        .unwrap();
    assert_eq!(ar["status"], "PASSED", "{ar}");
    assert_eq!(
        (ar["job_id"].as_str(), ar["exit_code"].as_i64()),
        (Some("4242"), Some(0)),
        "{ar}"
    );
    assert_eq!(ar["started_at"], "2026-12-01T10:00:00");
    let ag = tests
        .iter()
        .find(|t| t["test_id"] == "Tests.all_gather")
        .unwrap();
    assert_eq!(ag["end_reason"], "unknown", "{ag}");
    assert!(
        ag["message"].as_str().unwrap().starts_with("no stdout.txt"),
        "{ag}"
    );
    assert!(ag["job_id"].is_null(), "a dry-run's job 0 is no job: {ag}");

    // the parent of a tree, and a conf directory: refused, nothing written
    let parent = w.generate_report(w.path());
    let text = stdout_of(&parent);
    assert_eq!(parent.status.code(), Some(1), "{text}");
    assert!(
        text.contains("is not a results tree")
            && text.contains("did you mean")
            && text.contains("cloudai-tree"),
        "{text}"
    );
    let conf = w.path().join("conf");
    std::fs::create_dir_all(conf.join("common/test")).unwrap();
    let out = w.generate_report(&conf);
    assert_eq!(out.status.code(), Some(1), "{}", stdout_of(&out));
    assert_eq!(
        std::fs::read_dir(&conf).unwrap().count(),
        1,
        "nothing written into conf/"
    );
}

/// A `--compare` drop beyond `--tolerance` shows in the test's row of the table (informational: exit 0), and with
/// `--compare-fail` fails the iteration (exit 3).
#[test]
fn compare_drops_show_in_the_table_and_can_fail() {
    let good_w = Work::new();
    let good = nccl_run(&good_w, "single-node-8gpu-a100-allreduce-v2.19.4.txt", 1);
    let slow_w = Work::new();
    let text = std::fs::read_to_string(
        data().join("nccl-samples/single-node-8gpu-a100-allreduce-v2.19.4.txt"),
    )
    .unwrap();
    let out = common::nccl_standalone(&slow_w, &common::scaled(&text, 1 << 27, 0.8), 1, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let slow = slow_w.results_root();
    let report = |extra: &[&str]| {
        slow_w
            .cloudai()
            .args(["generate-report", "--result-dir"])
            .arg(&slow)
            .arg("--compare")
            .arg(&good)
            .args(extra)
            .output()
            .unwrap()
    };
    let info = report(&[]);
    let text = stdout_of(&info);
    assert_eq!(info.status.code(), Some(0), "{text}");
    assert!(
        text.contains("│ PASSED │") && text.contains("--compare: "),
        "{text}"
    );
    assert!(text.contains("128 MiB -20.0%"), "{text}");
    let fail = report(&["--compare-fail"]);
    let text = stdout_of(&fail);
    assert_eq!(fail.status.code(), Some(3), "{text}");
    assert!(text.contains("│ FAILED │"), "{text}");
}

/// CloudAI's comparison report inside the scenario page: two tests of one collective side by side, latency and
/// bandwidth per size, out-of-place and in-place each, the difference from the first test (no `-0.0%`); the page
/// names its tree, not an absolute path, and its time to the second.
#[test]
fn the_scenario_page_compares_tests_of_one_collective() {
    let w = Work::new();
    let text = std::fs::read_to_string(
        data().join("nccl-samples/single-node-8gpu-a100-allreduce-v2.19.4.txt"),
    )
    .unwrap();
    let printed = w.file("nccl-stdout.txt", &text);
    w.script(
        "bin/all_reduce_perf_mpi",
        &format!("#!/bin/bash\ncat {}\n", printed.display()),
    );
    w.standalone();
    w.file("tests/nccl.toml", common::scratch::fixtures::NCCL);
    w.file(
        "s.toml",
        r#"name = "two"
[[Tests]]
id = "ring"
test_name = "nccl"
[[Tests]]
id = "tree"
test_name = "nccl"
"#,
    );
    let out = w
        .cloudai_with_bin()
        .args(common::RUN_S_TOML)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let root = w.results_root();
    let page = std::fs::read_to_string(root.join("two.html")).unwrap();
    assert!(
        page.contains("<h2>Comparison: NcclTest all_reduce_perf (float)</h2>"),
        "no comparison section"
    );
    assert!(page.contains("<h3>Latency</h3>") && page.contains("<h3>Bandwidth</h3>"));
    assert!(
        page.contains(
            r#"<th colspan="2" class="group">ring</th><th colspan="3" class="group">tree</th>"#
        ),
        "one column group per test"
    );
    assert!(page.contains("<td>128 MiB</td><td>1295.41</td><td>1284.21</td><td>1295.41</td><td>1284.21</td><td>0.0%</td>"));
    assert!(!page.contains("-0.0%"));
    assert!(
        !page.contains(&w.path().display().to_string()),
        "absolute paths on the page"
    );
    let stamp = page
        .split("generated ")
        .nth(1)
        .unwrap()
        .split('<')
        .next()
        .unwrap();
    assert_eq!(stamp.len(), "2026-12-05 08:00:00+00:00".len(), "{stamp}");
}

/// Every regular file under `root` with its inode and modification time (a rewrite by rename changes the inode).
fn stamps(root: &Path) -> std::collections::BTreeMap<PathBuf, (u64, std::time::SystemTime)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let m = e.metadata().unwrap();
            if m.is_dir() {
                stack.push(e.path());
            } else if m.is_file() {
                out.insert(e.path(), (m.ino(), m.modified().unwrap()));
            }
        }
    }
    out
}

#[test]
fn generate_report_over_an_unchanged_tree_rewrites_nothing() {
    let w = Work::new();
    let root = nccl_run(&w, "single-node-8gpu-a100-allreduce-v2.19.4.txt", 2);
    let regrade = || {
        let out = w.generate_report(&root);
        assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    };
    regrade();
    let before = stamps(&root);
    assert!(before
        .keys()
        .any(|p| p.ends_with("ar/1/cloudai_nccl_test_csv_report.csv")));
    // a second later: a page or summary that stamps the time it was made would differ
    std::thread::sleep(std::time::Duration::from_millis(1100));
    regrade();
    let after = stamps(&root);
    let changed: Vec<_> = after
        .iter()
        .filter(|(p, s)| before.get(*p) != Some(s))
        .map(|(p, _)| p.strip_prefix(&root).unwrap().display().to_string())
        .collect();
    // the tree's ledger-free outputs all stay: only the tool's own log of the command may be new
    assert!(
        changed.iter().all(|p| p.ends_with(".log")),
        "rewritten though unchanged: {changed:?}"
    );
    // and a report whose contents do change is rewritten: a damaged CSV is put right
    let csv = root.join("ar/0/cloudai_nccl_test_csv_report.csv");
    let good = std::fs::read(&csv).unwrap();
    std::fs::write(&csv, b"damaged").unwrap();
    regrade();
    assert_eq!(std::fs::read(&csv).unwrap(), good);
}

/// One set of output flags for run, resume and generate-report (the report registry): generate-report writes
/// `--metrics-file` and `--junit` as run does.
#[test]
fn generate_report_takes_the_same_output_flags_as_run() {
    let w = Work::new();
    let root = nccl_run(&w, "single-node-8gpu-a100-allreduce-v2.19.4.txt", 1);
    let metrics = w.path().join("cloudai.prom");
    let junit = w.path().join("junit.xml");
    let out = w
        .cloudai()
        .args(["generate-report", "--result-dir"])
        .arg(&root)
        .arg("--metrics-file")
        .arg(&metrics)
        .arg("--junit")
        .arg(&junit)
        .arg("--no-tarball")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let text = std::fs::read_to_string(&metrics).unwrap();
    assert!(text.trim_end().ends_with("# EOF"), "{text}");
    assert!(std::fs::read_to_string(&junit)
        .unwrap()
        .contains("<testcase"));
    // a tarball is never written by generate-report
    assert!(!root.with_extension("tgz").exists());
}
