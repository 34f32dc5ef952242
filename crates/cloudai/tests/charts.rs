//! The iteration page's charts in a real headless Chromium: as wide as the window, round tick values (1-2-5 steps,
//! byte sizes), out-of-place and in-place told apart by marker and dash, the min_busbw reference line, algbw, the
//! export buttons; and a screenshot of the page at a known size.

mod common;

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
        .filter(|t| t.contains("class=\"tick\"") && t.contains("text-anchor=\"end\""))
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
        .split("width=\"")
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
        .split("text-anchor=\"middle\">")
        .skip(1)
        .filter_map(|t| t.split('<').next())
        .collect();
    assert!(
        busbw.contains(">8 B<") && busbw.contains(">128 MiB<"),
        "x labels {xl:?}"
    );
    // two series told apart by dash and marker shape
    assert!(
        busbw.contains("data-name=\"out-of-place\"") && busbw.contains("data-name=\"in-place\"")
    );
    assert!(busbw.contains("stroke-dasharray=\"6 4\""));
    assert_eq!(busbw.matches("data-marker=\"circle\"").count(), 26);
    assert_eq!(busbw.matches("data-marker=\"square\"").count(), 26);
    // the min_busbw reference line and its label
    assert!(busbw.contains("data-ref=\"min_busbw\"") && busbw.contains(">min_busbw 150 GB/s<"));
    assert!(dom.contains(">Algorithm bandwidth<"));
    // export and zoom controls
    for b in [">PNG<", ">CSV<", ">Reset zoom<"] {
        assert_eq!(dom.matches(b).count(), 3, "{b}");
    }
    // hover carries every value of the row
    assert!(html.contains("\"algbw\":\"") && html.contains("\"time\":\""));

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
