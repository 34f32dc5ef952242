//! The iteration page's charts in a real headless Chromium: as wide as the window, round tick values (1-2-5 steps,
//! byte sizes), out-of-place and in-place told apart by marker and dash, the min_busbw reference line, algbw, the
//! export buttons; and a screenshot of the page at a known size.

use crate::common;

use std::path::Path;
use std::process::Command;

use cloudai::workloads::nccl::{grade, read};
use common::{data, Work};

fn browser(b: &str, profile: &Path, extra: &[String], page: &Path) -> std::process::Output {
    Command::new(b)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
            "--window-size=1400,1000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap()
}

/// The texts of `<text ... class="tick" text-anchor="end">…</text>` (y ticks) in the first chart.
fn y_ticks(svg: &str) -> Vec<f64> {
    svg.split("<text")
        .filter(|t| t.contains(r#"class="tick""#) && t.contains(r#"text-anchor="end""#))
        .filter_map(|t| t.split('>').nth(1)?.split('<').next()?.parse().ok())
        .collect()
}

#[test]
fn charts_engineers_can_trust() {
    let Some(b) = common::chromium() else { return };
    let w = Work::new();
    let out =
        read::parse_file(&data().join("nccl-samples/single-node-8gpu-a100-allreduce-v2.19.4.txt"))
            .unwrap();
    let m = grade::metrics(&out);
    let html = cloudai::workloads::nccl::report::html("t", &out, &m, "PASSED", true, Some(150.0));
    let page = w.file("page.html", &html);
    let run = browser(b, &w.path().join("p1"), &["--dump-dom".into()], &page);
    let dom = String::from_utf8_lossy(&run.stdout).into_owned();
    let charts: Vec<&str> = dom.split("<svg").skip(1).collect();
    assert_eq!(charts.len(), 3, "busbw, latency, algbw");
    let busbw = charts[0];
    // the full page width (1400 px less the body margins)
    let width: f64 = busbw
        .split(r#"width=""#)
        .nth(1)
        .and_then(|r| r.split('"').next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert!(width >= 1300.0, "chart width {width}");
    // round y ticks: evenly spaced, a step of 1, 2 or 5 times a power of ten, starting at 0
    let ticks = y_ticks(busbw);
    assert!(ticks.len() >= 4 && ticks[0] == 0.0, "{ticks:?}");
    let step = ticks[1] - ticks[0];
    let mant = step / 10f64.powf(step.log10().floor());
    assert!(
        [1.0, 2.0, 5.0].iter().any(|m| (mant - m).abs() < 1e-9),
        "step {step}"
    );
    assert!(
        ticks.windows(2).all(|p| (p[1] - p[0] - step).abs() < 1e-9),
        "{ticks:?}"
    );
    // byte sizes on x
    let xl: Vec<&str> = busbw
        .split(r#"text-anchor="middle">"#)
        .skip(1)
        .filter_map(|t| t.split('<').next())
        .collect();
    assert!(
        busbw.contains(">8 B<") && busbw.contains(">128 MiB<"),
        "x labels {xl:?}"
    );
    // two series told apart by dash and marker shape
    assert!(
        busbw.contains(r#"data-name="out-of-place""#) && busbw.contains(r#"data-name="in-place""#)
    );
    assert!(busbw.contains(r#"stroke-dasharray="6 4""#));
    assert_eq!(busbw.matches(r#"data-marker="circle""#).count(), 26);
    assert_eq!(busbw.matches(r#"data-marker="square""#).count(), 26);
    // the min_busbw reference line and its label
    assert!(busbw.contains(r#"data-ref="min_busbw""#) && busbw.contains(">min_busbw 150 GB/s<"));
    assert!(dom.contains(">Algorithm bandwidth<"));
    // export and zoom controls
    for b in [">PNG<", ">CSV<", ">Reset zoom<"] {
        assert_eq!(dom.matches(b).count(), 3, "{b}");
    }
    // hover carries every value of the row
    assert!(html.contains(r#""algbw":""#) && html.contains(r#""time":""#));

    // a screenshot of the laid-out page
    let shot = w.path().join("shot.png");
    let run = browser(
        b,
        &w.path().join("p2"),
        &[format!("--screenshot={}", shot.display())],
        &page,
    );
    let png = std::fs::read(&shot).unwrap_or_else(|e| {
        panic!(
            "no screenshot ({e}): {}",
            String::from_utf8_lossy(&run.stderr)
        )
    });
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let (pw, ph) = (
        u32::from_be_bytes(png[16..20].try_into().unwrap()),
        u32::from_be_bytes(png[20..24].try_into().unwrap()),
    );
    assert_eq!((pw, ph), (1400, 1000));
    assert!(png.len() > 20_000, "an empty page? {} bytes", png.len());
}

/// The NCCL page in Chromium: what ran at the top (collective, type, op, version, ranks, command), the table's
/// out-of-place / in-place groups, a size with wrong results highlighted in the table and marked on the busbw
/// chart, sizes in one format; a run without rows shows the output's error lines instead of zeros and charts.
#[test]
fn the_nccl_page_shows_what_ran_and_what_failed() {
    let Some(b) = common::chromium() else { return };
    let w = Work::new();
    let text: String = std::fs::read_to_string(
        data().join("nccl-samples/single-node-8gpu-a100-allreduce-v2.19.4.txt"),
    )
    .unwrap()
    .lines()
    .map(|l| {
        let mut t: Vec<&str> = l.split_whitespace().collect();
        if t.first() == Some(&"1048576") && t.len() == 13 {
            t[8] = "5";
            format!("  {}\n", t.join("  "))
        } else {
            format!("{l}\n")
        }
    })
    .collect();
    let out = cloudai::workloads::nccl::parse::parse(&text);
    let m = grade::metrics(&out);
    let cmd =
        "all_reduce_perf_mpi --nthreads 1 --ngpus 1 --minbytes 8 --maxbytes 8G --op sum --iters 20";
    let html = cloudai::workloads::nccl::report::html_with(
        "t",
        &out,
        &m,
        "FAILED",
        false,
        None,
        Some(cmd),
    );
    let page = w.file("page.html", &html);
    let dom = String::from_utf8_lossy(
        &browser(b, &w.path().join("p1"), &["--dump-dom".into()], &page).stdout,
    )
    .into_owned();
    assert!(
        dom.contains(r#"<th colspan="4" class="group">out-of-place</th>"#)
            && dom.contains(r#"<th colspan="4" class="group">in-place</th>"#),
        "no super-headers"
    );
    let flagged: Vec<&str> = dom.split(r#"<tr class="flag">"#).skip(1).collect();
    assert_eq!(flagged.len(), 1, "one flagged row");
    assert!(
        flagged[0].starts_with("<td>1 MiB</td>") && flagged[0].contains("wrong results"),
        "{}",
        &flagged[0][..200.min(flagged[0].len())]
    );
    assert!(
        dom.contains(r#"data-series="failing sizes""#),
        "the failing size is marked on the chart"
    );
    // with a marker of its own, apart from the in-place series' squares (issue 41, item 12)
    assert!(
        dom.contains(r#"data-marker="cross""#),
        "the failing size's marker"
    );
    for fact in [
        "all_reduce_perf",
        "float / sum",
        "2.19.4, NCCL 2.19.3",
        "<code>all_reduce_perf_mpi --nthreads 1",
    ] {
        assert!(dom.contains(fact), "{fact} missing from the facts");
    }
    assert!(
        !dom.contains("<td>1MB</td>") && dom.contains("<td>8 B</td>"),
        "one size format"
    );

    // nothing but an error: its words, no charts, no "0.00 GB/s at 0B"
    let broken = "# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n\
                  #\n# Using devices\nnode1: Test NCCL failure common.cu:1008 'unhandled cuda error (run with NCCL_DEBUG=INFO for details)'\n";
    let out = cloudai::workloads::nccl::parse::parse(broken);
    let m = grade::metrics(&out);
    let html = cloudai::workloads::nccl::report::html("t", &out, &m, "FAILED", false, None);
    let page = w.file("broken.html", &html);
    let dom = String::from_utf8_lossy(
        &browser(b, &w.path().join("p2"), &["--dump-dom".into()], &page).stdout,
    )
    .into_owned();
    assert!(
        dom.contains("No result rows") && dom.contains("unhandled cuda error"),
        "{dom}"
    );
    assert!(!dom.contains("<svg") && !dom.contains("0.00 GB/s"), "{dom}");
}
