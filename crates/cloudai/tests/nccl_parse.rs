//! The nccl-tests parser and grading on every real sample (values written by hand from the files), on random
//! tables printed in nccl-tests' layout, and on arbitrary bytes.

use crate::common;

use std::path::Path;

use cloudai::workloads::nccl::grade::{failure, metrics};
use cloudai::workloads::nccl::parse::{parse, ErrorKind, Output};
use common::data;
use proptest::prelude::*;

fn sample(name: &str) -> (Output, std::path::PathBuf) {
    let p = data().join("nccl-samples").join(name);
    (parse(&std::fs::read_to_string(&p).unwrap()), p)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn a100_8gpu_v2_19_4() {
    let (out, p) = sample("single-node-8gpu-a100-allreduce-v2.19.4.txt");
    assert_eq!(out.runs.len(), 1);
    let r = &out.runs[0];
    assert_eq!(
        (r.version.as_deref(), r.test.as_deref()),
        (Some("2.19.4, NCCL 2.19.3"), Some("all_reduce_perf"))
    );
    assert_eq!(
        (
            r.n_thread,
            r.n_gpus,
            r.min_bytes,
            r.max_bytes,
            r.iters,
            r.warmup_iters
        ),
        (
            Some(1),
            Some(8),
            Some(8),
            Some(134217728),
            Some(20),
            Some(1)
        )
    );
    assert_eq!((r.rows.len(), r.ranks.len()), (25, 8));
    assert_eq!(r.ranks[7].device_name, "NVIDIA A100-SXM4-80GB");
    assert_eq!(
        (r.ranks[0].host.as_str(), r.ranks[0].bus_id.as_str()),
        ("dkh", "0000:14:00")
    );
    let f = &r.rows[0];
    assert_eq!(
        (f.size, f.count, &*f.dtype, &*f.redop, f.root),
        (8, 2, "float", "sum", Some(-1))
    );
    assert!(
        close(f.out_of_place.time_us, 34.84) && close(f.in_place.as_ref().unwrap().time_us, 36.18)
    );
    let l = r.rows.last().unwrap();
    assert_eq!((l.size, l.count), (134217728, 33554432));
    assert!(
        close(l.out_of_place.time_us, 1295.41)
            && close(l.out_of_place.algbw, 103.61)
            && close(l.out_of_place.busbw, 181.32)
    );
    let ip = l.in_place.as_ref().unwrap();
    assert!(close(ip.time_us, 1284.21) && close(ip.algbw, 104.51) && close(ip.busbw, 182.90));
    assert_eq!(
        (r.out_of_bounds, r.avg_busbw, r.concluded),
        (Some((0, true)), Some(34.9024), true)
    );
    assert!(out.errors.is_empty());
    assert_eq!(failure(&out, &p, None), None);
    let m = metrics(&out);
    assert_eq!((m.peak_size, m.ranks, m.nodes), (134217728, 8, 1));
    assert!(close(m.peak_busbw, 182.90));
    // the mean of every busbw is the footer's average
    let mean: f64 = r
        .rows
        .iter()
        .map(|x| x.out_of_place.busbw + x.in_place.as_ref().unwrap().busbw)
        .sum::<f64>()
        / 50.0;
    assert!((mean - 34.9024).abs() < 1e-3, "{mean}");
    // a min_busbw above the peak fails the run as slow
    let slow = failure(&out, &p, Some(200.0)).unwrap();
    assert!(
        slow.contains("peak bus bandwidth 182.90 GB/s") && slow.contains("min_busbw = 200"),
        "{slow}"
    );
}

#[test]
fn gh200_wrong_values_v2_17_8() {
    let (out, p) = sample("multinode-2x1-gh200-wrong-values-failed-v2.17.8.txt");
    let r = &out.runs[0];
    assert_eq!(
        (r.rows.len(), r.ranks.len(), r.out_of_bounds, r.avg_busbw),
        (25, 2, Some((4, false)), Some(4.79995))
    );
    assert_eq!(r.ranks[1].pid, Some(2448661));
    let first = &r.rows[0];
    assert_eq!(first.size, 8);
    assert!(close(first.out_of_place.time_us, 17.49));
    let last = r.rows.last().unwrap();
    assert!(
        close(last.out_of_place.time_us, 5869.38)
            && close(last.in_place.as_ref().unwrap().busbw, 22.80)
    );
    let bad = r.rows.iter().find(|x| x.size == 1048576).unwrap();
    assert_eq!(
        (
            bad.out_of_place.wrong,
            bad.in_place.as_ref().unwrap().wrong,
            bad.line
        ),
        (Some(96.0), Some(32.0), 29)
    );
    assert_eq!(
        out.errors
            .iter()
            .filter(|e| e.kind == ErrorKind::TestFailure)
            .map(|e| e.line)
            .collect::<Vec<_>>(),
        [43, 44]
    );
    let why = failure(&out, &p, None).unwrap();
    assert!(
        why.contains("wrong-values-failed-v2.17.8.txt:29: 96 wrong elements at size 1 MiB"),
        "{why}"
    );
    assert_eq!(metrics(&out).nodes, 2);
}

#[test]
fn h100_2x8_kubeflow_with_launcher_noise() {
    let (out, p) = sample("multinode-2x8-h100-allreduce-kubeflow-mpijob.txt");
    assert_eq!(out.runs.len(), 1);
    let r = &out.runs[0];
    assert_eq!(
        (
            r.line,
            r.rows.len(),
            r.ranks.len(),
            r.avg_busbw,
            r.version.as_ref()
        ),
        (8, 5, 16, Some(194.675), None)
    );
    let f = &r.rows[0];
    assert_eq!(f.size, 536870912);
    assert!(
        close(f.out_of_place.time_us, 5202.3)
            && close(f.out_of_place.algbw, 103.20)
            && close(f.out_of_place.busbw, 193.50)
    );
    let l = r.rows.last().unwrap();
    assert_eq!((l.size, l.out_of_place.time_us), (8589934592, 81958.0));
    assert!(
        close(l.out_of_place.busbw, 196.52) && close(l.in_place.as_ref().unwrap().busbw, 196.51)
    );
    assert_eq!(failure(&out, &p, None), None);
    assert_eq!(metrics(&out).nodes, 2);
}

#[test]
fn t4_3x1_pre_2_13_without_check() {
    let (out, p) = sample("multinode-3x1-t4-check-disabled-stepbytes-pre2.13.txt");
    let r = &out.runs[0];
    assert_eq!(
        r.columns,
        [
            "size", "count", "type", "redop", "time", "algbw", "busbw", "error", "time", "algbw",
            "busbw", "error"
        ]
    );
    assert_eq!(
        (r.rows.len(), r.ranks.len(), r.validation, r.avg_busbw),
        (11, 3, Some(0), Some(0.58536))
    );
    assert_eq!(
        (
            r.ranks[2].host.as_str(),
            r.ranks[2].device_name.as_str(),
            r.ranks[2].group
        ),
        ("gpu03", "Tesla T4", None)
    );
    let f = &r.rows[0];
    assert_eq!(
        (
            f.size,
            f.root,
            f.out_of_place.wrong,
            &*f.out_of_place.wrong_text
        ),
        (104857600, None, None, "N/A")
    );
    assert!(close(f.out_of_place.time_us, 202872.0) && close(f.out_of_place.busbw, 0.69));
    let l = r.rows.last().unwrap();
    assert_eq!(l.size, 115343360);
    assert!(
        close(l.in_place.as_ref().unwrap().time_us, 307126.0)
            && close(l.in_place.as_ref().unwrap().busbw, 0.50)
    );
    assert_eq!(failure(&out, &p, None), None);
}

#[test]
fn h100_single_rank_runai() {
    let (out, p) = sample("seed-h100-1gpu-allreduce-runai.txt");
    let r = &out.runs[0];
    assert_eq!(
        (r.rows.len(), r.ranks.len(), r.avg_busbw),
        (28, 1, Some(0.0))
    );
    assert_eq!(r.ranks[0].host, "nccl-test-20250403104500-1-0");
    let l = r.rows.last().unwrap();
    assert_eq!(l.size, 17179869184);
    // overflowing widths
    assert!(
        close(l.in_place.as_ref().unwrap().algbw, 179705744.60)
            && close(l.out_of_place.algbw, 1331.10)
    );
    assert_eq!(failure(&out, &p, None), None);
    assert!(close(metrics(&out).peak_busbw, 0.0));
}

#[test]
fn rtx5090_nccl_failure_with_debug_lines() {
    let (out, p) = sample("single-node-2gpu-nccl-failure-with-debug-info.txt");
    assert_eq!(out.runs.len(), 1);
    assert_eq!(
        (
            out.runs[0].rows.len(),
            out.runs[0].ranks.len(),
            out.runs[0].out_of_bounds
        ),
        (0, 2, None)
    );
    assert_eq!(
        out.errors
            .iter()
            .filter(|e| e.kind == ErrorKind::NcclWarn)
            .count(),
        5
    );
    let e = out
        .errors
        .iter()
        .find(|e| e.kind == ErrorKind::NcclFailure)
        .unwrap();
    assert_eq!(e.line, 71);
    let why = failure(&out, &p, None).unwrap();
    assert!(
        why.contains("debug-info.txt:71: GENOA-06: Test NCCL failure common.cu:392"),
        "{why}"
    );
    assert!(why.contains("NCCL_DEBUG=INFO"), "{why}");
}

#[test]
fn format_variants() {
    // launcher prefixes, CRLF, markdown-mangled footer, hypercube's empty redop, -S timestamps, exponent numbers
    let text = "[1,0]<stdout>:# nThread 1 nGpus 1 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 1 iters: 20 agg iters: 1 validation: 1 graph: 0\r\n\
        [1,0]<stdout>:#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong timestamp\r\n\
        [1,0]<stdout>:           8             2     float                -1    17.49    0.00    0.00       0    16.41    0.00    0.00       0  2025-10-28 12:34:56\r\n\
        [1,1]<stderr>:host:1:2 [0] NCCL INFO something 1 2 3 4 5 6 7 8 9 10 11 12\r\n\
        [1,0]<stdout>:          16             4     float     sum      -1  1.2e+07   2e+06    -nan  1.04858e+06   0.10    0.00    0.00    N/A  2025-10-28 12:34:57\r\n\
        Out of bounds values : 1 FAILED\r\n\
        Avg bus bandwidth    : 0 FAILED\r\n";
    let out = parse(text);
    let r = &out.runs[0];
    assert_eq!(r.rows.len(), 2, "{out:?}");
    assert_eq!(
        (&*r.rows[0].redop, r.rows[0].timestamp.as_deref()),
        ("", Some("2025-10-28 12:34:56"))
    );
    let s = &r.rows[1].out_of_place;
    assert!(
        close(s.time_us, 1.2e7)
            && close(s.algbw, 2e6)
            && s.busbw.is_nan()
            && s.wrong == Some(1048580.0)
    );
    assert_eq!(r.rows[1].in_place.as_ref().unwrap().wrong, None); // N/A: not checked
    assert_eq!((r.out_of_bounds, r.avg_ok), (Some((1, false)), Some(false)));
    // a truncated run: rows and no footer
    let cut = "# nThread 1 nGpus 1 minBytes 8 maxBytes 16\n           8             2     float     sum      -1    17.49    0.00    0.00       0    16.41    0.00    0.00       0\n";
    let why = failure(&parse(cut), Path::new("x.txt"), None).unwrap();
    assert!(
        why.contains("x.txt:2: the output stops after the row for size 8 B"),
        "{why}"
    );
    // two tests in one file
    let two = format!("{cut}# Out of bounds values : 0 OK\n# Avg bus bandwidth : 0\n{cut}# Out of bounds values : 0 OK\n");
    assert_eq!(parse(&two).runs.len(), 2);
    // -I per-iteration columns and -C cputime
    let per_iter = "#       size         count      type   redop    root  cputime   algbw   busbw  #wrong   i_min   i_max   i_p99   i_cv%  cputime   algbw   busbw  #wrong   i_min   i_max   i_p99   i_cv%\n\
                    \x20 1048576        262144     float     sum      -1    67.31   15.58   27.26       0   60.1    70.2    69.9    2.1    65.27   16.07   28.11       0   61.0    71.0    70.5    N/A\n";
    let r = &parse(per_iter).runs[0];
    assert_eq!(r.rows.len(), 1);
    assert!(
        close(r.rows[0].out_of_place.busbw, 27.26)
            && close(r.rows[0].in_place.as_ref().unwrap().busbw, 28.11)
    );
    // nothing at all
    assert!(failure(
        &parse("bash: all_reduce_perf_mpi: command not found\n"),
        Path::new("o"),
        None
    )
    .unwrap()
    .contains("no nccl-tests output"));
}

/// One side of a row: time, algbw, busbw, #wrong.
type SideVals = (f64, f64, f64, u32);

/// Prints a row the way nccl-tests v2.17.3+ does: size, count, type, redop, root, then both sides.
fn render_row(
    (size, count, ty, op, root): (u64, u64, &str, &str, i64),
    sides: [SideVals; 2],
) -> String {
    let f = |v: f64| format!("{v:.2}");
    let [(t0, a0, b0, w0), (t1, a1, b1, w1)] = sides;
    format!(
        "{size:>12}  {count:>12}  {ty:>8}  {op:>6}  {root:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}",
        f(t0), f(a0), f(b0), w0, f(t1), f(a1), f(b1), w1
    )
}

proptest! {
    // no regressions file: tests write nothing into the source tree
    #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, .. ProptestConfig::default() })]

    #[test]
    fn random_tables_parse_back(rows in prop::collection::vec((0u64..1u64 << 40, 0u64..1u64 << 38, 0.0f64..1e6, 0.0f64..1e5, 0.0f64..1e5, 0u32..1000), 1..40),
                                ty in prop::sample::select(vec!["float", "half", "bfloat16", "int8", "double"]),
                                op in prop::sample::select(vec!["sum", "prod", "min", "max", "avg", "none"]),
                                prefix in prop::sample::select(vec!["", "[1,0]<stdout>:", "0: "])) {
        let mut text = String::from("# nThread 1 nGpus 8 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 1 iters: 20 agg iters: 1 validation: 1 graph: 0\n");
        text.push_str("#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong \n");
        for (s, c, t, a, b, w) in &rows {
            text.push_str(prefix);
            text.push_str(&render_row((*s, *c, ty, op, -1), [(*t, *a, *b, *w), (*t + 1.0, *a, *b / 2.0, 0)]));
            text.push('\n');
        }
        text.push_str("# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 1.5 \n");
        let out = parse(&text);
        prop_assert_eq!(out.runs.len(), 1);
        let r = &out.runs[0];
        prop_assert_eq!(r.rows.len(), rows.len());
        for (row, (s, c, t, a, b, w)) in r.rows.iter().zip(&rows) {
            prop_assert_eq!((row.size, row.count), (*s, *c));
            prop_assert_eq!((&*row.dtype, &*row.redop, row.root), (ty, op, Some(-1)));
            prop_assert!((row.out_of_place.time_us - t).abs() <= 0.005 + 1e-9);
            prop_assert!((row.out_of_place.algbw - a).abs() <= 0.005 + 1e-9);
            prop_assert!((row.out_of_place.busbw - b).abs() <= 0.005 + 1e-9);
            prop_assert_eq!(row.out_of_place.wrong, Some(*w as f64));
        }
        prop_assert_eq!(r.avg_busbw, Some(1.5));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        let text = String::from_utf8_lossy(&bytes);
        let out = parse(&text);
        let _ = failure(&out, Path::new("f"), Some(1.0));
        let _ = metrics(&out);
    }

    #[test]
    fn mutated_real_output_never_panics(cut in 0usize..4435, junk in "[ -~\n#\\[\\]:]{0,80}") {
        let text = std::fs::read_to_string(data().join("nccl-samples/single-node-8gpu-a100-allreduce-v2.19.4.txt")).unwrap();
        let cut = cut.min(text.len());
        let cut = (0..=cut).rev().find(|i| text.is_char_boundary(*i)).unwrap();
        let mangled = format!("{}{}{}", &text[..cut], junk, &text[cut..]);
        let out = parse(&mangled);
        let _ = failure(&out, Path::new("f"), None);
    }
}

/// Rows cut by NCCL's own log lines (every process writes to one stream): a row written after a log line's text,
/// a row whose first part, a whole log line and its rest stand on three lines, a row with a log line glued to its
/// end — every row is read, none twice, and the log lines still say which network NCCL used.
#[test]
fn rows_split_by_interleaved_nccl_info_lines_are_read() {
    let text = std::fs::read_to_string(
        data().join("nccl-samples/single-node-8gpu-a100-allreduce-v2.19.4.txt"),
    )
    .unwrap();
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .collect();
    assert_eq!(rows.len(), 25);
    let info = "dkh:584419:584500 [3] NCCL INFO Channel 02/0 : 3[3] -> 4[4] via P2P/CUMEM/read";
    let mut mangled = String::new();
    for l in text.lines() {
        if l == rows[20] {
            // after a log line's text, before its newline
            mangled.push_str(&format!("{info}{l}\n"));
        } else if l == rows[21] {
            // first part / whole log line / rest
            let (head, tail) = l.split_at(l.find("float").unwrap() + 28);
            mangled.push_str(&format!("{head}\n{info}\n{tail}\n"));
        } else if l == rows[22] {
            // a log line glued to the row's end
            mangled.push_str(&format!(
                "{l}dkh:584419:584500 [3] NCCL INFO Using network IB\n"
            ));
        } else {
            mangled.push_str(l);
            mangled.push('\n');
        }
    }
    let out = parse(&mangled);
    let read: Vec<u64> = out.runs[0].rows.iter().map(|r| r.size).collect();
    let want: Vec<u64> = rows
        .iter()
        .map(|l| l.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(read, want, "{mangled}");
    assert_eq!(out.runs[0].tally.peak_busbw, 182.9);
    assert_eq!(out.network.as_ref().map(|n| n.name.as_str()), Some("IB"));
}
