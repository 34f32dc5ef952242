//! The parser on output as launchers and log collectors deliver it, built from each launcher's rules applied to
//! every real sample: `srun --label` prefixes padded to the widest task, `mpirun --tag-output` tags written before
//! every forwarded chunk (so in the middle of rows, with other ranks' text between the pieces), `mpirun
//! --timestamp-output`, `kubectl logs --timestamps`, and excerpts that start at the column header. Every row of
//! the plain file must be found, and the verdict must not change.

use crate::common;

use std::path::Path;

use cloudai::workloads::nccl::grade::failure;
use cloudai::workloads::nccl::parse::{parse, Output, Row};
use common::data;

fn samples() -> Vec<(String, String)> {
    let dir = data().join("nccl-samples");
    let mut v: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect();
    v.sort();
    assert!(v.len() >= 5, "samples missing");
    v
}

/// Rows without their line numbers (launchers add lines).
fn rows(out: &Output) -> Vec<Row> {
    out.runs
        .iter()
        .flat_map(|r| r.rows.iter())
        .map(|r| Row {
            line: 0,
            ..r.clone()
        })
        .collect()
}

fn verdict(out: &Output) -> bool {
    failure(out, Path::new("stdout.txt"), None).is_none()
}

fn same(name: &str, plain: &str, transformed: &str, what: &str) {
    let (a, b) = (parse(plain), parse(transformed));
    assert!(
        !rows(&a).is_empty() || name.contains("failure"),
        "{name}: plain file has rows"
    );
    assert_eq!(
        rows(&b),
        rows(&a),
        "{name} ({what}): rows differ\n{transformed}"
    );
    assert_eq!(verdict(&b), verdict(&a), "{name} ({what}): verdict differs");
    let kinds = |o: &Output| o.errors.iter().map(|e| e.kind).collect::<Vec<_>>();
    assert_eq!(
        kinds(&b),
        kinds(&a),
        "{name} ({what}): failure lines differ"
    );
}

/// An NCCL INFO line as another rank would print it.
fn noise(rank: usize) -> String {
    format!(
        "gpu-node-{rank:02}:{}:{} [{}] NCCL INFO Channel 00/0 : {rank}[1] -> {}[2] via P2P/IPC",
        4000 + rank,
        4100 + rank,
        rank % 8,
        rank + 1
    )
}

#[test]
fn srun_label_prefixes_padded_to_the_widest_task() {
    for (name, text) in samples() {
        for ntasks in [1usize, 8, 16, 128] {
            let width = (ntasks - 1).to_string().len();
            let mut out = String::new();
            for (i, line) in text.lines().enumerate() {
                out.push_str(&format!("{:>width$}: {line}\n", 0));
                if ntasks > 1 && i % 7 == 3 {
                    let r = 1 + i % (ntasks - 1);
                    out.push_str(&format!("{r:>width$}: {}\n", noise(r)));
                }
            }
            same(&name, &text, &out, &format!("srun -l, {ntasks} tasks"));
        }
    }
}

/// Splits a row where nccl-tests' printf calls end: after the preamble (size … root) and after the out-of-place
/// part; other lines stay whole.
fn chunks(line: &str) -> Vec<&str> {
    let mut cuts = Vec::new();
    let toks: Vec<(usize, &str)> = line
        .split_ascii_whitespace()
        .map(|t| (t.as_ptr() as usize - line.as_ptr() as usize, t))
        .collect();
    let is_row = toks.len() >= 10
        && toks[0].1.bytes().all(|b| b.is_ascii_digit())
        && toks[1].1.bytes().all(|b| b.is_ascii_digit());
    if is_row {
        // preamble: size count type redop root (5 tokens; 4 when redop is empty), then 4 per side
        let pre = if toks[3].1.parse::<i64>().is_ok() {
            4
        } else {
            5
        };
        for k in [pre, pre + 4] {
            if let Some((off, _)) = toks.get(k) {
                // the cut is before the blanks that lead the next printf's text
                let mut at = *off;
                while at > 0 && line.as_bytes()[at - 1] == b' ' {
                    at -= 1;
                }
                cuts.push(at);
            }
        }
    }
    let mut parts = Vec::new();
    let mut from = 0;
    for c in cuts {
        parts.push(&line[from..c]);
        from = c;
    }
    parts.push(&line[from..]);
    parts
}

fn tagged(text: &str, stamp: &str, interleave: bool) -> String {
    let mut out = String::new();
    for (i, line) in text.lines().enumerate() {
        let parts = chunks(line);
        let mut rest7 = false;
        for (k, p) in parts.iter().enumerate() {
            out.push_str(&format!("{stamp}[1,0]<stdout>:{p}"));
            let more = k + 1 < parts.len();
            if more && interleave && (i + k) % 2 == 0 {
                // another rank's whole line lands between rank 0's pieces
                let r = 1 + (i % 15);
                out.push_str(&format!("{stamp}[1,{r}]<stdout>:{}\n", noise(r)));
            } else if more && interleave {
                // or another rank's unfinished piece, finished on the next physical line
                out.push_str(&format!("{stamp}[1,7]<stderr>:Warning: Permanently added"));
                rest7 = true;
            }
        }
        out.push('\n');
        if rest7 {
            out.push_str(&format!(
                "{stamp}[1,7]<stderr>: 'gpu-node-07' to the list of known hosts.\n"
            ));
        }
    }
    out
}

#[test]
fn mpirun_tag_output_inside_rows() {
    for (name, text) in samples() {
        same(
            &name,
            &text,
            &tagged(&text, "", false),
            "tags at every chunk",
        );
        same(
            &name,
            &text,
            &tagged(&text, "", true),
            "tags with other ranks between chunks",
        );
    }
}

#[test]
fn pmix_namespace_rank_tags() {
    // PMIx-based launchers (Open MPI 5, prterun) name the job by namespace and separate the rank with ':'
    for (name, text) in samples() {
        let pmix = tagged(&text, "", true).replace("[1,", "[prterun-gpu-node-01-4242@1:");
        same(&name, &text, &pmix, "PMIx namespace:rank tags");
    }
}

#[test]
fn mpirun_timestamp_output() {
    for (name, text) in samples() {
        let stamp = "Thu Dec  3 04:47:57 2026";
        same(
            &name,
            &text,
            &tagged(&text, stamp, true),
            "timestamps and tags",
        );
        let bare: String = text
            .lines()
            .map(|l| format!("{stamp}<stdout>:{l}\n"))
            .collect();
        same(&name, &text, &bare, "timestamps without tags");
    }
}

#[test]
fn log_collector_timestamps() {
    for (name, text) in samples() {
        let stamped: String = text
            .lines()
            .enumerate()
            .map(|(i, l)| format!("2026-12-03T04:47:{:02}.{:09}Z {l}\n", i % 60, i * 7919))
            .collect();
        same(&name, &text, &stamped, "kubectl logs --timestamps");
    }
}

#[test]
fn excerpts_starting_at_the_column_header() {
    for (name, text) in samples() {
        let lines: Vec<&str> = text.lines().collect();
        let Some(h) = lines.iter().position(|l| {
            let t: Vec<&str> = l
                .trim_start_matches(['#', ' '])
                .split_whitespace()
                .collect();
            t.first() == Some(&"size") && t.get(1) == Some(&"count")
        }) else {
            continue;
        };
        let plain_rows = rows(&parse(&text));
        if plain_rows.is_empty() {
            continue; // a run that failed before its first row: nothing below the header to find
        }
        // from the header line, with and without its '#', and from the units line below it
        for (from, strip_hash) in [(h, false), (h, true), (h + 1, false)] {
            let mut excerpt: Vec<String> = lines[from..].iter().map(|l| l.to_string()).collect();
            if strip_hash {
                excerpt[0] = excerpt[0].replacen('#', " ", 1);
            }
            let excerpt = excerpt.join("\n");
            let out = parse(&excerpt);
            // a second test in the same file starts its own header further down: count the first run's rows
            let first_rows = out.runs.first().map_or(0, |r| r.rows.len());
            assert!(
                first_rows > 0,
                "{name} from line {from}: no rows\n{excerpt}"
            );
            assert_eq!(
                rows(&out),
                plain_rows[plain_rows.len() - rows(&out).len()..],
                "{name} from line {from}"
            );
            assert!(
                out.runs[0].line > 0,
                "{name}: the run has a line to point at"
            );
            let base = parse(&text);
            if base.errors.iter().all(|e| !e.kind.is_fatal())
                && base
                    .runs
                    .iter()
                    .all(|r| r.out_of_bounds.is_none_or(|(_, ok)| ok))
            {
                assert_eq!(
                    verdict(&out),
                    verdict(&base),
                    "{name} from line {from}: verdict"
                );
            }
        }
    }
}

/// Another process's log line written into a row (output cut at any byte), the row's rest on a later line after
/// more log lines: every row is found again and the verdict holds, for every cut position of the first, a middle
/// and the last row of every sample.
#[test]
fn rows_cut_by_log_lines_at_any_byte_are_rejoined() {
    for (name, text) in samples() {
        let plain = parse(&text);
        let all = rows(&plain);
        if all.is_empty() {
            continue;
        }
        let lines: Vec<&str> = text.split('\n').collect();
        let picks = [0, all.len() / 2, all.len() - 1];
        for &pick in &picks {
            let lineno = plain
                .runs
                .iter()
                .flat_map(|r| r.rows.iter())
                .nth(pick)
                .unwrap()
                .line;
            let row = lines[lineno - 1];
            for cut in 1..row.len() {
                if !row.is_char_boundary(cut) {
                    continue;
                }
                let mut out = String::new();
                for (i, l) in lines.iter().enumerate() {
                    if i + 1 == lineno {
                        out.push_str(&row[..cut]);
                        out.push_str(&noise(3));
                        out.push('\n');
                        out.push_str(&noise(5));
                        out.push('\n');
                        out.push_str(&row[cut..]);
                    } else {
                        out.push_str(l);
                    }
                    out.push('\n');
                }
                same(&name, &text, &out, &format!("row {pick} cut at byte {cut}"));
            }
        }
    }
}

/// Failure lines of other versions and launchers are quoted: old `NCCL failure file:line`, Open MPI 5's `prterun`
/// banners, and an `exited on` / `signal N` banner wrapped over two lines.
#[test]
fn failure_lines_of_other_versions_and_launchers_are_quoted() {
    let text = "# nThread 1 nGpus 1 minBytes 8 maxBytes 128 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n\
                node-1: NCCL failure common.cu:1015 'unhandled system error'\n";
    let out = parse(text);
    let msg = failure(&out, Path::new("stdout.txt"), None).unwrap();
    assert!(
        msg.contains("NCCL failure common.cu:1015 'unhandled system error'"),
        "{msg}"
    );
    let text = "prterun noticed that process rank 3 with PID 4471 on node gpu-02 exited on\nsignal 9 (Killed).\n";
    let out = parse(text);
    assert_eq!(out.errors.len(), 1, "{:?}", out.errors);
    assert_eq!(
        out.errors[0].text,
        "prterun noticed that process rank 3 with PID 4471 on node gpu-02 exited on signal 9 (Killed)."
    );
    let msg = failure(&out, Path::new("stdout.txt"), None).unwrap();
    assert!(msg.contains("exited on signal 9 (Killed)"), "{msg}");
    let out = parse(
        "prterun detected that one or more processes exited with non-zero status, thus causing\n",
    );
    assert!(failure(&out, Path::new("stdout.txt"), None)
        .unwrap()
        .contains("prterun detected"));
}
