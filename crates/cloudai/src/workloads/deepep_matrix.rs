//! The traffic matrix a MoE benchmark (DeepEP) exports, handed to the UCC or NCCL test that starts after it
//! (`use_deepep_matrix`, CloudAI's rule): the benchmark's directory is the first along the test's `start_post_comp`
//! chain that holds a `ucc_matrix.txt` (at any depth) or whose `stdout.txt` starts with DeepEP's results banner;
//! the matrix is the file of that name in it, else the newest one below it.

use std::path::{Path, PathBuf};

use crate::config::args::ArgValue;
use crate::config::test::TestDefinition;

/// Where the benchmark's directory is mounted, read-only, in the test's container.
const PREV_MOUNT: &str = "/cloudai_moe_benchmark_prev";
/// How far into a dependency's `stdout.txt` the banner is looked for (CloudAI's bound).
const BANNER_WITHIN: usize = 250_000;

/// The MoE benchmark's iteration directory along `chain` (the directories of the tests this one starts after,
/// nearest first).
fn benchmark_root(chain: &[PathBuf]) -> Option<&Path> {
    chain.iter().map(PathBuf::as_path).find(|root| {
        if newest(root, "ucc_matrix.txt").is_some() {
            return true;
        }
        std::fs::read(root.join("stdout.txt")).is_ok_and(|b| {
            let head = &b[..b.len().min(BANNER_WITHIN)];
            String::from_utf8_lossy(head).contains("BENCHMARK: DeepEP Results")
        })
    })
}

/// `name` directly in `root`, else the most recently written one below it.
fn newest(root: &Path, name: &str) -> Option<PathBuf> {
    let direct = root.join(name);
    if direct.is_file() {
        return Some(direct);
    }
    let mut best: Option<(std::time::SystemTime, PathBuf)> = None;
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(ft) = e.file_type() else { continue };
            let p = e.path();
            if ft.is_dir() {
                dirs.push(p);
            } else if ft.is_file() && e.file_name() == name {
                let t = e.metadata().and_then(|m| m.modified()).ok();
                let t = t.unwrap_or(std::time::UNIX_EPOCH);
                if best.as_ref().is_none_or(|(bt, _)| t > *bt) {
                    best = Some((t, p));
                }
            }
        }
    }
    best.map(|(_, p)| p)
}

/// The absolute text of a host path for a container mount.
fn host(p: &Path) -> String {
    std::fs::canonicalize(p)
        .unwrap_or_else(|_| p.to_path_buf())
        .display()
        .to_string()
}

/// Why a test with `use_deepep_matrix` set needs the benchmark it starts after.
pub(crate) const NEEDS_DEPENDENCY: &str =
    "cmd_args.use_deepep_matrix takes the traffic matrix the MoE benchmark this test starts after exports: give it \
     a start_post_comp dependency on that benchmark";

/// Where ucc_perftest's file generator reads a handed matrix.
const UCC_GEN_MATRIX: &str = "/opt/hpcx/ucc/tools/perf/generator/input_matrices.txt";

const NO_BENCHMARK: &str =
    "cmd_args.use_deepep_matrix: no MoE benchmark output (a ucc_matrix.txt, or DeepEP's \
                            results in stdout.txt) along the tests this one starts after";

/// Whether the test takes the traffic matrix of the MoE benchmark it starts after (`use_deepep_matrix`).
pub(crate) fn requested(test: &TestDefinition) -> bool {
    test.cmd_args.get("use_deepep_matrix") == Some(&ArgValue::Bool(true))
}

/// NCCL: the benchmark's `nccl_matrix.txt` mounted at `alltoallv_matrix_container_path` and named by
/// `ALLTOALLV_MATRIX_FILE`, the benchmark's directory mounted read-only beside it (CloudAI's handoff); `Ok(None)`
/// when the test does not ask for it.
pub(crate) fn to_nccl(
    test: &TestDefinition,
    chain: &[PathBuf],
) -> Result<Option<TestDefinition>, String> {
    if !requested(test) {
        return Ok(None);
    }
    let root = benchmark_root(chain).ok_or(NO_BENCHMARK)?;
    let matrix = newest(root, "nccl_matrix.txt").ok_or_else(|| {
        format!(
            "cmd_args.use_deepep_matrix: the MoE benchmark's output {} has no nccl_matrix.txt",
            root.display()
        )
    })?;
    let dest = test
        .cmd_args
        .str("alltoallv_matrix_container_path")
        .unwrap_or("/tmp/traffic_matrix.txt")
        .to_string();
    let mut t = test.clone();
    t.extra_container_mounts
        .push(format!("{}:{dest}", host(&matrix)));
    t.extra_container_mounts
        .push(format!("{}:{PREV_MOUNT}:ro", host(root)));
    t.extra_env_vars
        .insert("ALLTOALLV_MATRIX_FILE".into(), ArgValue::Str(dest));
    Ok(Some(t))
}

/// UCC: the benchmark's `ucc_matrix.txt` mounted where ucc_perftest's file generator reads it (`--gen file:name=…`
/// unless the test gives its own `gen`), the benchmark's directory mounted read-only beside it (CloudAI's
/// handoff); no matrix is an error only without a `gen` of the test's own (then `Ok(None)`: as it is, as when the
/// test does not ask for it).
pub(crate) fn to_ucc(
    test: &TestDefinition,
    chain: &[PathBuf],
) -> Result<Option<TestDefinition>, String> {
    if !requested(test) {
        return Ok(None);
    }
    let root = benchmark_root(chain);
    let Some((root, matrix)) = root.and_then(|r| Some((r, newest(r, "ucc_matrix.txt")?))) else {
        if test.cmd_args.get("gen").is_some() {
            return Ok(None);
        }
        return Err(match root {
            None => format!("{NO_BENCHMARK}; or give a generator spec in cmd_args.gen"),
            Some(r) => format!(
                "cmd_args.use_deepep_matrix: the MoE benchmark's output {} has no ucc_matrix.txt",
                r.display()
            ),
        });
    };
    let mut t = test.clone();
    t.extra_container_mounts
        .push(format!("{}:{UCC_GEN_MATRIX}", host(&matrix)));
    t.extra_container_mounts
        .push(format!("{}:{PREV_MOUNT}:ro", host(root)));
    if t.cmd_args.get("gen").is_none() {
        t.cmd_args.values.insert(
            "gen".into(),
            ArgValue::Str(format!("file:name={UCC_GEN_MATRIX}")),
        );
    }
    Ok(Some(t))
}

/// The handoff reads the benchmark's files on this machine and mounts them into the job's container: only a
/// scheduler whose jobs see this machine's file system as a task launch does (Slurm).
pub(crate) fn check(test: &TestDefinition, at: &super::Placement) -> Vec<String> {
    use crate::config::system::{gives, Needs};
    if requested(test) && !at.scheduler.is_empty() && !gives(at.scheduler, Needs::Srun) {
        return vec![format!(
            "cmd_args.use_deepep_matrix mounts the MoE benchmark's traffic matrix from the cluster's shared file \
             system: not possible on {}; give the generator spec or traffic yourself",
            at.scheduler
        )];
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_benchmark_is_found_by_its_matrix_or_its_banner_and_the_newest_matrix_wins() {
        let t = tempfile::tempdir().unwrap();
        let (a, b, c) = (t.path().join("a"), t.path().join("b"), t.path().join("c"));
        for d in [&a, &b, &c] {
            std::fs::create_dir_all(d.join("results/run1")).unwrap();
        }
        std::fs::write(a.join("stdout.txt"), "no banner").unwrap();
        std::fs::write(b.join("stdout.txt"), "x\nBENCHMARK: DeepEP Results\n").unwrap();
        std::fs::write(c.join("results/run1/ucc_matrix.txt"), "1").unwrap();
        let chain = [a.clone(), b.clone(), c.clone()];
        assert_eq!(benchmark_root(&chain), Some(b.as_path()));
        assert_eq!(benchmark_root(&chain[2..]), Some(c.as_path()));
        assert_eq!(benchmark_root(&chain[..1]), None);
        std::fs::create_dir_all(c.join("results/run2")).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(c.join("results/run2/ucc_matrix.txt"), "2").unwrap();
        assert_eq!(
            newest(&c, "ucc_matrix.txt"),
            Some(c.join("results/run2/ucc_matrix.txt"))
        );
        std::fs::write(c.join("ucc_matrix.txt"), "0").unwrap();
        assert_eq!(newest(&c, "ucc_matrix.txt"), Some(c.join("ucc_matrix.txt")));
    }
}
