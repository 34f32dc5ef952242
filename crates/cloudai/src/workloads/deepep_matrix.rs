//! The traffic matrix a MoE benchmark (DeepEP) exports, handed to the UCC or NCCL test that starts after it
//! (`use_deepep_matrix`, CloudAI's rule): the benchmark's directory is the first along the test's `start_post_comp`
//! chain that holds a `ucc_matrix.txt` (at any depth) or whose `stdout.txt` starts with DeepEP's results banner;
//! the matrix is the file of that name in it, else the newest one below it.

use std::path::{Path, PathBuf};

/// Where the benchmark's directory is mounted, read-only, in the test's container.
pub(crate) const PREV_MOUNT: &str = "/cloudai_moe_benchmark_prev";
/// How far into a dependency's `stdout.txt` the banner is looked for (CloudAI's bound).
const BANNER_WITHIN: usize = 250_000;

/// The MoE benchmark's iteration directory along `chain` (the directories of the tests this one starts after,
/// nearest first).
pub(crate) fn benchmark_root(chain: &[PathBuf]) -> Option<&Path> {
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
pub(crate) fn newest(root: &Path, name: &str) -> Option<PathBuf> {
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
pub(crate) fn host(p: &Path) -> String {
    std::fs::canonicalize(p)
        .unwrap_or_else(|_| p.to_path_buf())
        .display()
        .to_string()
}

/// Why a test with `use_deepep_matrix` set needs the benchmark it starts after.
pub(crate) const NEEDS_DEPENDENCY: &str =
    "cmd_args.use_deepep_matrix takes the traffic matrix the MoE benchmark this test starts after exports: give it \
     a start_post_comp dependency on that benchmark";

/// The handoff reads the benchmark's files on this machine and mounts them into the job's container: only a
/// scheduler whose jobs see this machine's file system as a task launch does (Slurm).
pub(crate) fn check(uses: bool, at: &super::Placement) -> Vec<String> {
    use crate::config::system::{gives, Needs};
    if uses && !at.scheduler.is_empty() && !gives(at.scheduler, Needs::Srun) {
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
