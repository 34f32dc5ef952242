//! Where a workload's launcher file of CloudAI's is (NeMo-Run's `cloudai_nemorun.py`). It is CloudAI's code, so this
//! build does not carry it: the file is taken from the user's CloudAI, in this order — the environment variable the
//! workload names; the CloudAI checkout the configs come from (`<root>/conf/…` beside `<root>/src/cloudai/…`);
//! the file itself next to the tests or the scenario. When none has it, the checkout's path is recorded (as
//! CloudAI's own dry-run records it) and `cloudai install` says where it looked.

use std::path::{Path, PathBuf};

use crate::workloads::Script;

/// The CloudAI checkout around `start`: the parent of its nearest ancestor named `conf`.
fn checkout(start: &Path) -> Option<PathBuf> {
    let abs = std::path::absolute(start).ok()?;
    abs.ancestors()
        .find(|a| a.file_name().is_some_and(|n| n == "conf"))
        .and_then(Path::parent)
        .map(Path::to_path_buf)
}

/// Every place looked at, in order (the first that exists is used).
pub(crate) fn candidates(script: &Script, origins: &[&Path]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(p) = std::env::var_os(script.env).filter(|p| !p.is_empty()) {
        out.push(PathBuf::from(p));
    }
    out.extend(
        origins
            .iter()
            .filter_map(|o| checkout(o))
            .map(|root| root.join(script.in_cloudai)),
    );
    for o in origins {
        let dir = if o.is_dir() { Some(*o) } else { o.parent() };
        if let Some(d) = dir {
            out.push(
                std::path::absolute(d)
                    .unwrap_or_else(|_| d.to_path_buf())
                    .join(script.name),
            );
        }
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|p| seen.insert(p.clone()));
    out
}

/// The file to install: the first candidate that exists, else the checkout's path (or the first candidate).
pub(crate) fn locate(script: &Script, origins: &[&Path]) -> PathBuf {
    let all = candidates(script, origins);
    if let Some(found) = all.iter().find(|p| p.is_file()) {
        return found.clone();
    }
    origins
        .iter()
        .find_map(|o| checkout(o))
        .map(|root| root.join(script.in_cloudai))
        .or_else(|| all.first().cloned())
        .unwrap_or_else(|| PathBuf::from(script.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Script = Script {
        name: "launcher.py",
        in_cloudai: "src/cloudai/workloads/x/launcher.py",
        env: "CLOUDAI_TEST_SCRIPT_THAT_IS_NEVER_SET",
        in_place: false,
    };

    #[test]
    fn checkout_first_then_beside_the_configs() {
        let d = tempfile::tempdir().unwrap();
        let tests = d.path().join("conf/common/test");
        std::fs::create_dir_all(&tests).unwrap();
        // nothing anywhere: the checkout's path, as CloudAI records it
        assert_eq!(
            locate(&S, &[&tests]),
            d.path().join("src/cloudai/workloads/x/launcher.py")
        );
        // next to the tests
        std::fs::write(tests.join("launcher.py"), "x").unwrap();
        assert_eq!(locate(&S, &[&tests]), tests.join("launcher.py"));
        // the checkout's copy wins
        let inside = d.path().join("src/cloudai/workloads/x");
        std::fs::create_dir_all(&inside).unwrap();
        std::fs::write(inside.join("launcher.py"), "y").unwrap();
        assert_eq!(locate(&S, &[&tests]), inside.join("launcher.py"));
        // no conf ancestor: beside the scenario
        let other = tempfile::tempdir().unwrap();
        let scenario = other.path().join("s.toml");
        assert_eq!(locate(&S, &[&scenario]), other.path().join("launcher.py"));
    }
}
