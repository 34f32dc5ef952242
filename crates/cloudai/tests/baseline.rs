//! Baselines: built from known-good trees, then grading: the same results pass, busbw lowered 20% at large sizes
//! fails naming those sizes, and a shape the baseline lacks is reported as such.

use crate::common;

use std::path::{Path, PathBuf};

use common::{data, nccl_standalone, scaled, stdout_of, Work};

const SAMPLE: &str = "single-node-8gpu-a100-allreduce-v2.19.4.txt";

fn sample(name: &str) -> String {
    std::fs::read_to_string(data().join("nccl-samples").join(name)).unwrap()
}

fn tree(w: &Work, stdout: &str, iterations: u32) -> PathBuf {
    let out = nccl_standalone(w, stdout, iterations, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    w.results_root()
}

fn create(w: &Work, trees: &[&Path]) -> PathBuf {
    let file = w.path().join("baseline.toml");
    let out = w
        .cloudai()
        .args(["baseline", "create", "--output"])
        .arg(&file)
        .arg("--result-dir")
        .args(trees)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    file
}

fn report(w: &Work, root: &Path, baseline: &Path) -> (i32, String, serde_json::Value) {
    let out = w
        .cloudai()
        .arg("generate-report")
        .arg("--result-dir")
        .arg(root)
        .arg("--baseline")
        .arg(baseline)
        .output()
        .unwrap();
    let summary =
        serde_json::from_slice(&std::fs::read(root.join("summary.json")).unwrap()).unwrap();
    (out.status.code().unwrap(), stdout_of(&out), summary)
}

#[test]
fn a_known_good_tree_passes_its_own_baseline() {
    let w = Work::new();
    let good = tree(&w, &sample(SAMPLE), 2);
    let b = create(&w, &[&good]);
    let text = std::fs::read_to_string(&b).unwrap();
    // one value per size of the 1x8 all_reduce float run, from both iterations
    assert!(
        text.contains(r#"collective = "all_reduce_perf""#) && text.contains("gpus_per_node = 8"),
        "{text}"
    );
    assert!(
        text.contains(
            "metric = \"busbw\"\nunit = \"GB/s\"\nnodes = 1\ngpus_per_node = 8\nsize = 134217728\nvalue = 181.32\nin_place = 182.9\ntime_us = "
        ),
        "{text}"
    );
    assert!(text.contains("iterations = 2"), "{text}");
    let (code, out, s) = report(&w, &good, &b);
    assert_eq!(code, 0, "{out}");
    let t = &s["tests"][0];
    assert_eq!(t["status"], "PASSED", "{t}");
    assert!(t["baseline"]["compared"].as_u64().unwrap() > 20, "{t}");
    assert_eq!(t["baseline"]["failed"], false);
    assert_eq!(s["baseline"]["tolerance_pct"], 5.0);
}

#[test]
fn busbw_lowered_at_large_sizes_fails_naming_them() {
    let w = Work::new();
    let good = tree(&w, &sample(SAMPLE), 1);
    let b = create(&w, &[&good]);
    let w2 = Work::new();
    let slow = tree(&w2, &scaled(&sample(SAMPLE), 32 << 20, 0.8), 1);
    let (code, out, s) = report(&w2, &slow, &b);
    assert_eq!(code, 3, "{out}");
    let t = &s["tests"][0];
    assert_eq!(t["status"], "FAILED", "{t}");
    let msg = t["message"].as_str().unwrap();
    // 32, 64 and 128 MiB, both sides
    assert!(msg.contains("at 6 size(s)"), "{msg}");
    assert!(
        msg.contains("128 MiB out-of-place: 145.06 GB/s vs baseline 181.32 (-20%)"),
        "{msg}"
    );
    assert!(
        msg.contains("32 MiB") && msg.contains("64 MiB") && !msg.contains("16 MiB"),
        "{msg}"
    );
    let rows = t["baseline"]["rows"].as_array().unwrap();
    let drops: Vec<u64> = rows
        .iter()
        .filter(|r| r["status"] == "drop")
        .map(|r| r["size"].as_u64().unwrap())
        .collect();
    assert_eq!(
        drops,
        [32 << 20, 32 << 20, 64 << 20, 64 << 20, 128 << 20, 128 << 20]
    );
    let html = std::fs::read_to_string(slow.join("nccl-local.html")).unwrap();
    assert!(
        html.contains("<h2>Baseline</h2>") && html.contains("out-of-place busbw vs baseline"),
        "no baseline section"
    );
    // the iteration's page highlights those sizes too, and marks them on its busbw chart
    let page =
        std::fs::read_to_string(slow.join("ar/0/cloudai_nccl_test_bokeh_report.html")).unwrap();
    let flagged: Vec<&str> = page
        .split(r#"<tr class="flag">"#)
        .skip(1)
        .map(|r| r.split("</td>").next().unwrap())
        .collect();
    assert_eq!(
        flagged,
        ["<td>32 MiB", "<td>64 MiB", "<td>128 MiB"],
        "{page}"
    );
    assert!(
        page.contains("below baseline (-20.0% out-of-place)") && page.contains("failing sizes")
    );
    // run --baseline grades the same way at the end of the run
    let w3 = Work::new();
    let out = nccl_standalone(
        &w3,
        &scaled(&sample(SAMPLE), 32 << 20, 0.8),
        1,
        &["--baseline", b.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(3), "{}", stdout_of(&out));
    let rec = common::record(&w3.results_root(), "ar", 0);
    assert!(
        rec.message.contains("below the baseline"),
        "{}",
        rec.message
    );
    // within the tolerance: a 3% drop passes
    let w4 = Work::new();
    let out = nccl_standalone(
        &w4,
        &scaled(&sample(SAMPLE), 1 << 20, 0.97),
        1,
        &["--baseline", b.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
}

#[test]
fn a_shape_missing_from_the_baseline_is_reported() {
    let w = Work::new();
    let good = tree(&w, &sample(SAMPLE), 1);
    let b = create(&w, &[&good]);
    let w2 = Work::new();
    // the same node with 4 of its GPUs: a shape the baseline has no entry for
    let four: String = sample(SAMPLE)
        .lines()
        .filter(|l| {
            !["Rank  4", "Rank  5", "Rank  6", "Rank  7"]
                .iter()
                .any(|r| l.contains(r))
        })
        .map(|l| format!("{l}\n"))
        .collect();
    let other = tree(&w2, &four, 1);
    let (code, out, s) = report(&w2, &other, &b);
    let t = &s["tests"][0];
    let msg = t["message"].as_str().unwrap();
    assert!(
        msg.contains("not in baseline: all_reduce_perf float 1x4"),
        "{msg}"
    );
    assert!(!t["baseline"]["not_in_baseline"]
        .as_array()
        .unwrap()
        .is_empty());
    assert_eq!(t["baseline"]["compared"], 0);
    assert_eq!(code, 0, "{out}");
    let html = std::fs::read_to_string(other.join("nccl-local.html")).unwrap();
    assert!(html.contains("not in baseline (not graded)"));
}

#[test]
fn a_broken_baseline_file_is_one_clear_error() {
    let w = Work::new();
    let good = tree(&w, &sample(SAMPLE), 1);
    let bad = w.file(
        "bad.toml",
        r#"sources = []
[[entry]]
template = "NcclTest"
collective = "all_reduce_perf"
dtype = "float"
nodes = 1
gpus_per_node = 8
size = "big"
busbw_oop = 1.0
time_oop_us = 1.0
"#,
    );
    let out = w
        .cloudai()
        .arg("generate-report")
        .arg("--result-dir")
        .arg(&good)
        .arg("--baseline")
        .arg(&bad)
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("bad.toml:8:8") && text.contains("entry.0.size"),
        "{text}"
    );
}

/// A baseline written before points named their metric (`busbw_oop`, …) still grades as bus bandwidth; a metric
/// or unit the file gets wrong is one clear error at its place.
#[test]
fn an_older_baseline_file_still_grades_and_a_wrong_unit_is_refused() {
    let w = Work::new();
    let good = tree(&w, &sample(SAMPLE), 1);
    let b = create(&w, &[&good]);
    let text = std::fs::read_to_string(&b).unwrap();
    let old = text
        .replace("metric = \"busbw\"\nunit = \"GB/s\"\n", "")
        .replace("\nvalue = ", "\nbusbw_oop = ")
        .replace("\nin_place = ", "\nbusbw_ip = ")
        .replace("\ntime_us = ", "\ntime_oop_us = ");
    assert!(
        !old.contains("metric =") && old.contains("busbw_ip = 182.9"),
        "{old}"
    );
    let old_file = w.file("old.toml", &old);
    let w2 = Work::new();
    let slow = tree(&w2, &scaled(&sample(SAMPLE), 32 << 20, 0.8), 1);
    let (code, out, s) = report(&w2, &slow, &old_file);
    assert_eq!(code, 3, "{out}");
    let msg = s["tests"][0]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("busbw more than 5% below the baseline at 6 size(s)")
            && msg.contains("128 MiB out-of-place: 145.06 GB/s vs baseline 181.32 (-20%)"),
        "{msg}"
    );
    for (from, to, place, said) in [
        (
            "unit = \"GB/s\"",
            "unit = \"MB/s\"",
            "entry.0.unit",
            "busbw is measured in GB/s",
        ),
        (
            "metric = \"busbw\"",
            "metric = \"speed\"",
            "entry.0.metric",
            "expected one of busbw, bandwidth, latency",
        ),
    ] {
        let bad = w.file("bad.toml", &text.replacen(from, to, 1));
        let out = w
            .cloudai()
            .args(["generate-report", "--result-dir"])
            .arg(&good)
            .arg("--baseline")
            .arg(&bad)
            .output()
            .unwrap();
        let shown = stdout_of(&out);
        assert_eq!(out.status.code(), Some(1), "{shown}");
        assert!(
            shown.contains("bad.toml:") && shown.contains(place) && shown.contains(said),
            "{shown}"
        );
    }
}

#[test]
fn busbw_above_the_physical_peak_is_flagged_as_suspect() {
    let w = Work::new();
    let root = tree(&w, &sample(SAMPLE), 1);
    for (peak, flagged) in [(150.0, true), (300.0, false)] {
        let sys = w.file(
            "peaks.toml",
            &format!(
                r#"name = "p"
scheduler = "standalone"
install_path = "i"
output_path = "o"
nvlink_peak_gbps = {peak}
net_peak_gbps = 50.0
"#
            ),
        );
        let out = w
            .cloudai()
            .arg("generate-report")
            .arg("--result-dir")
            .arg(&root)
            .arg("--system-config")
            .arg(&sys)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
        let s: serde_json::Value =
            serde_json::from_slice(&std::fs::read(root.join("summary.json")).unwrap()).unwrap();
        let suspect = s["tests"][0]["suspect"].as_str().unwrap_or("");
        assert_eq!(!suspect.is_empty(), flagged, "peak {peak}: {suspect}");
        if flagged {
            // a 1-node run is held to the NVLink peak, not the network's
            assert!(
                suspect.contains("above the physical peak: measurement suspect")
                    && suspect.contains("NVLink peak of 150"),
                "{suspect}"
            );
            let html = std::fs::read_to_string(root.join("nccl-local.html")).unwrap();
            assert!(html.contains("measurement suspect"));
        }
    }
}
