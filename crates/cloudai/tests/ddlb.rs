//! DDLB (`DDLBTest`): its pandas results table read by its layout rule, graded on what was asked (every shape ×
//! configuration has its row, DDLB's own validation passed), reported as CSV and a page; CloudAI's job is
//! compat_dry_run.rs.

use crate::common;

use common::{data, stdout_of, Work};
use serde_json::Value;

fn sample(name: &str) -> String {
    std::fs::read_to_string(data().join("ddlb-samples").join(name)).unwrap()
}

const DDLB: &str = r#"name = "ddlb"
description = "d"
test_template_name = "DDLBTest"
[cmd_args]
docker_image_url = "ddlb:latest"
primitive = "tp_columnwise"
m = 4096
dtype = "float16"
impl = "pytorch;backend=nccl;order=AG_before,AG_after"
"#;

#[test]
fn the_results_table_is_read_by_its_columns_whatever_the_widths() {
    let out = cloudai::workloads::ddlb::parse(&sample("ddlb-two-shapes-two-impls.txt"));
    assert!(out.finished);
    assert_eq!(out.world_size, Some(8));
    assert_eq!(out.rows.len(), 4);
    let r = &out.rows[1];
    assert_eq!(r.shape, (1024, 128, 1024));
    assert_eq!(
        r.config,
        "fuser (algorithm=p2p_pipeline, backend=cuda, order=AG_before)"
    );
    assert_eq!((r.tflops, r.tflops_std), (5.318559, 0.030210));
    assert_eq!(r.times, [0.050473, 0.000287, 0.050025, 0.050979]);
    let best = out.best().unwrap();
    assert_eq!((best.shape.0, best.tflops), (8192, 39.944184));
    assert!(out.errors.is_empty() && out.invalid.is_empty());
    let bad = cloudai::workloads::ddlb::parse(&sample("ddlb-validation-failed.txt"));
    assert_eq!(bad.rows.len(), 2);
    assert_eq!(bad.invalid.len(), 1);
    assert!(bad.invalid[0].1.contains("pytorch_1"), "{:?}", bad.invalid);
}

/// The dry-run's tree, then its output as each case leaves it: (stdout, exit code of generate-report, message).
#[test]
fn an_iteration_passes_only_with_every_asked_result_valid() {
    let w = Work::new();
    w.standalone();
    w.file("tests/ddlb.toml", DDLB);
    w.file(
        "s.toml",
        "name = \"d\"\n[[Tests]]\nid = \"tp\"\ntest_name = \"ddlb\"\n",
    );
    let dry = w.cloudai().args(common::DRY_RUN_S_TOML).output().unwrap();
    assert_eq!(dry.status.code(), Some(0), "{}", stdout_of(&dry));
    let root = w.results_root();
    let trt = std::fs::read_to_string(root.join("tp/0/test-run.toml")).unwrap();
    assert!(
        trt.contains(
            "test_cmd = \"python ddlb/cli/benchmark.py --primitive tp_columnwise -m 4096 -n 128 -k 1024 --dtype \
             float16 --num-iterations 50 --num-warmups 5 --impl 'pytorch;backend=nccl;order=AG_before,AG_after'\""
        ),
        "{trt}"
    );
    let invalid = sample("ddlb-validation-failed.txt");
    let valid: String = invalid
        .lines()
        .filter(|l| !l.starts_with("Warning: Validation failed"))
        .map(|l| format!("{l}\n"))
        .collect();
    let cut_table: String = valid
        .lines()
        .take(valid.lines().count() - 1)
        .map(|l| format!("{l}\n"))
        .collect();
    let unfinished: String = valid
        .lines()
        .take_while(|l| !l.starts_with("Benchmark Results"))
        .map(|l| format!("{l}\n"))
        .collect();
    let crashed = format!("{unfinished}Traceback (most recent call last):\nRuntimeError: NCCL error in: ProcessGroupNCCL.cpp\n");
    for (text, code, says) in [
        (
            valid.as_str(),
            0,
            "2 result(s); best 20.70 TFLOPS (pytorch (backend=nccl, order=AG_after))",
        ),
        (invalid.as_str(), 3, "DDLB's validation failed"),
        (
            cut_table.as_str(),
            3,
            "1 of the 2 results asked (shape 4096x128x1024)",
        ),
        (unfinished.as_str(), 3, "no 'Benchmark Results' table"),
        (crashed.as_str(), 3, "RuntimeError: NCCL error"),
    ] {
        std::fs::write(root.join("tp/0/stdout.txt"), text).unwrap();
        let rep = w.generate_report(&root);
        assert_eq!(rep.status.code(), Some(code), "{says}: {}", stdout_of(&rep));
        let summary: Value =
            serde_json::from_slice(&std::fs::read(root.join("summary.json")).unwrap()).unwrap();
        let t = &summary["tests"][0];
        let said = format!("{} {}", t["message"], t["checks"]);
        assert!(said.contains(says), "{says}: {said}");
    }
    // the passing output's CSV and page
    std::fs::write(root.join("tp/0/stdout.txt"), &valid).unwrap();
    let rep = w.generate_report(&root);
    assert_eq!(rep.status.code(), Some(0), "{}", stdout_of(&rep));
    let csv = std::fs::read_to_string(root.join("tp/0/ddlb_report.csv")).unwrap();
    assert_eq!(csv.lines().count(), 3, "{csv}");
    assert!(
        csv.lines().nth(2).unwrap().starts_with(
            "4096,128,1024,\"pytorch (backend=nccl, order=AG_after)\",20.701805,0.456432,0.051892,"
        ),
        "{csv}"
    );
    let page = std::fs::read_to_string(root.join("tp/0/ddlb_report.html")).unwrap();
    assert!(
        page.contains("20.70 TFLOPS")
            && page.contains("<td>pytorch (backend=nccl, order=AG_after)</td>")
    );
}

#[test]
fn bad_fields_are_one_clear_error_each() {
    for (field, value, says) in [
        ("m", "\"big\"", "cmd_args.m"),
        ("num_iterations", "0", "cmd_args.num_iterations"),
        ("dtype", "16", "cmd_args.dtype"),
    ] {
        let w = Work::new();
        w.standalone();
        let def = DDLB
            .replace("m = 4096\n", "")
            .replace("dtype = \"float16\"\n", "");
        let def = format!(
            "{def}{}{field} = {value}\n",
            if field == "dtype" {
                "m = 1\n"
            } else {
                "dtype = \"float16\"\n"
            }
        );
        w.file("tests/ddlb.toml", &def);
        w.file(
            "s.toml",
            "name = \"d\"\n[[Tests]]\nid = \"tp\"\ntest_name = \"ddlb\"\n",
        );
        let out = w.cloudai().args(common::DRY_RUN_S_TOML).output().unwrap();
        let text = stdout_of(&out);
        assert_eq!(out.status.code(), Some(1), "{field}: {text}");
        assert!(
            text.contains(says) && text.contains("ddlb.toml:"),
            "{field}: {text}"
        );
        // nothing created
        assert!(std::fs::read_dir(w.path().join("out")).map_or(true, |mut d| d.next().is_none()));
    }
}
