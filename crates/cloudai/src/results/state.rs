//! `<results root>/.cloudai/`: what a run needs to be resumed by another process. A copy of its configs (so a
//! later edit of the user's files cannot change a running scenario), how it was started (`run.json`), and a lock
//! naming the process that owns the tree.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::util::fsx::write_durable;

pub const STATE_DIR: &str = ".cloudai";

/// How the run was started: the copies to resume from, and the user's files they came from.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RunInfo {
    pub dry_run: bool,
    /// `inputs/system.toml`, or None for the built-in Standalone system.
    pub system: Option<String>,
    pub system_from: Option<PathBuf>,
    pub scenario: String,
    pub scenario_from: PathBuf,
    /// `inputs/tests` (every *.toml of --tests-dir).
    pub tests_dir: Option<String>,
    pub tests_from: Option<PathBuf>,
    /// `inputs/hooks` (<hook-dir>/*.toml and test/*.toml), when the directory existed.
    pub hook_dir: Option<String>,
    pub hooks_from: Option<PathBuf>,
    pub started_at: String,
}

pub fn state_dir(root: &Path) -> PathBuf {
    root.join(STATE_DIR)
}

fn copy_tomls(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)?.flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "toml") && p.is_file() {
            std::fs::copy(&p, to.join(e.file_name()))?;
        }
    }
    Ok(())
}

/// Copies the inputs into the tree and writes `run.json`.
pub fn record_inputs(
    root: &Path,
    system: Option<&Path>,
    scenario: &Path,
    tests_dir: Option<&Path>,
    hook_dir: Option<&Path>,
    dry_run: bool,
) -> std::io::Result<RunInfo> {
    let inputs = state_dir(root).join("inputs");
    std::fs::create_dir_all(&inputs)?;
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let mut info = RunInfo {
        dry_run,
        scenario: "inputs/scenario.toml".into(),
        scenario_from: abs(scenario),
        started_at: chrono::Local::now().to_rfc3339(),
        ..Default::default()
    };
    std::fs::copy(scenario, inputs.join("scenario.toml"))?;
    if let Some(s) = system {
        std::fs::copy(s, inputs.join("system.toml"))?;
        info.system = Some("inputs/system.toml".into());
        info.system_from = Some(abs(s));
    }
    if let Some(t) = tests_dir {
        copy_tomls(t, &inputs.join("tests"))?;
        info.tests_dir = Some("inputs/tests".into());
        info.tests_from = Some(abs(t));
    }
    let hooks = hook_dir
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("conf/hook"));
    if hooks.is_dir() {
        copy_tomls(&hooks, &inputs.join("hooks"))?;
        if hooks.join("test").is_dir() {
            copy_tomls(&hooks.join("test"), &inputs.join("hooks/test"))?;
        }
        info.hook_dir = Some("inputs/hooks".into());
        info.hooks_from = Some(abs(&hooks));
    }
    let json = serde_json::to_vec_pretty(&info).map_err(std::io::Error::other)?;
    write_durable(&state_dir(root).join("run.json"), &json)?;
    Ok(info)
}

pub fn read_info(root: &Path) -> std::io::Result<RunInfo> {
    let b = std::fs::read(state_dir(root).join("run.json"))?;
    serde_json::from_slice(&b).map_err(std::io::Error::other)
}

/// The user's files that differ from the copies the run uses (edited since it started).
pub fn changed_inputs(root: &Path, info: &RunInfo) -> Vec<PathBuf> {
    let st = state_dir(root);
    let mut out = Vec::new();
    let mut same = |copy: PathBuf, orig: &Path| {
        if let (Ok(a), Ok(b)) = (std::fs::read(&copy), std::fs::read(orig)) {
            if a != b {
                out.push(orig.to_path_buf());
            }
        }
    };
    same(st.join(&info.scenario), &info.scenario_from);
    if let (Some(s), Some(f)) = (&info.system, &info.system_from) {
        same(st.join(s), f);
    }
    for (copy, from) in [
        (&info.tests_dir, &info.tests_from),
        (&info.hook_dir, &info.hooks_from),
    ] {
        if let (Some(c), Some(f)) = (copy, from) {
            for e in std::fs::read_dir(st.join(c))
                .into_iter()
                .flatten()
                .flatten()
            {
                same(e.path(), &f.join(e.file_name()));
            }
        }
    }
    out
}

/// Who owns a results tree: the process running or resuming it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Owner {
    pub pid: u32,
    pub host: String,
    pub since: String,
}

impl Owner {
    /// Whether the owner still runs (a process on another host is assumed alive).
    pub fn alive(&self) -> bool {
        if self.host != crate::util::hostname() {
            return true;
        }
        // SAFETY: signal 0 only checks that the process exists
        unsafe { libc::kill(self.pid as i32, 0) == 0 }
    }
}

pub fn owner(root: &Path) -> Option<Owner> {
    let b = std::fs::read(state_dir(root).join("lock")).ok()?;
    serde_json::from_slice(&b).ok()
}

/// Takes the tree for this process, unless a live process owns it (its description is the error).
pub fn lock(root: &Path) -> Result<(), String> {
    if let Some(o) = owner(root) {
        if o.pid != std::process::id() && o.alive() {
            return Err(format!(
                "{} is owned by cloudai pid {} on {} (since {}); wait for it to end, or stop it first",
                root.display(),
                o.pid,
                o.host,
                o.since
            ));
        }
    }
    let me = Owner {
        pid: std::process::id(),
        host: crate::util::hostname(),
        since: chrono::Local::now().to_rfc3339(),
    };
    std::fs::create_dir_all(state_dir(root)).map_err(|e| e.to_string())?;
    let json = serde_json::to_vec_pretty(&me).map_err(|e| e.to_string())?;
    write_durable(&state_dir(root).join("lock"), &json).map_err(|e| e.to_string())
}

/// Gives the tree up (only when this process holds it).
pub fn unlock(root: &Path) {
    if owner(root).is_some_and(|o| o.pid == std::process::id()) {
        let _ = std::fs::remove_file(state_dir(root).join("lock"));
    }
}
