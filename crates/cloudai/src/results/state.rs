//! `<results root>/.cloudai/`: what a run needs to be resumed by another process. A copy of its configs (so a
//! later edit of the user's files cannot change a running scenario), how it was started (`run.json`), and a lock
//! naming the process that owns the tree.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::util::fsx::write_durable;

pub(crate) const STATE_DIR: &str = ".cloudai";

/// How the run was started: the copies to resume from, and the user's files they came from.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct RunInfo {
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

pub(crate) fn state_dir(root: &Path) -> PathBuf {
    root.join(STATE_DIR)
}

/// The journal's second copy: every iteration record as it was written, one JSON line each, appended and synced.
/// An iteration's `cloudai-run.json` deleted or damaged is repaired from it by `resume`.
pub(crate) fn journal_path(root: &Path) -> PathBuf {
    state_dir(root).join("journal.jsonl")
}

/// Appends one record to the journal (synced: it outlives a kill -9 or a power cut as the record file does).
pub(crate) fn append_journal(
    root: &Path,
    rec: &crate::results::IterationRecord,
) -> std::io::Result<()> {
    use std::io::Write;
    let mut line = serde_json::to_vec(rec).map_err(std::io::Error::other)?;
    line.push(b'\n');
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(journal_path(root))?;
    f.write_all(&line)?;
    f.sync_data()
}

/// The last record the journal holds for a test's iteration; a line cut short by a crash is passed over.
pub(crate) fn journal_entry(
    root: &Path,
    test_id: &str,
    iteration: u64,
) -> Option<crate::results::IterationRecord> {
    use std::io::BufRead;
    let f = crate::util::fsx::open_regular(&journal_path(root)).ok()?;
    let mut last = None;
    for line in std::io::BufReader::new(f).lines().map_while(Result::ok) {
        if let Ok(r) = serde_json::from_str::<crate::results::IterationRecord>(&line) {
            if r.test_id == test_id && r.iteration == iteration {
                last = Some(r);
            }
        }
    }
    last
}

/// The run's own log (every line of `run` and each `resume` of the tree, appended).
pub(crate) fn log_path(root: &Path) -> PathBuf {
    state_dir(root).join("run.log")
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
pub(crate) fn record_inputs(
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
        // the copy never keeps a secret, and only its owner reads it
        let text = std::fs::read_to_string(s)?;
        write_private(
            &inputs.join("system.toml"),
            without_secrets(&text).as_bytes(),
        )?;
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

/// Top-level system fields that hold a secret.
const SECRET_FIELDS: &[&str] = &["app_secret"];

/// The system file without its secrets: each secret field is replaced by a comment saying where the secret comes
/// from instead. Text that does not parse is not copied (the run loaded it, so this does not happen).
pub(crate) fn without_secrets(text: &str) -> String {
    let Ok(doc) = toml_edit::Document::parse(text) else {
        return "# not copied: the system file did not parse\n".into();
    };
    let mut cuts: Vec<(usize, usize, &str)> = SECRET_FIELDS
        .iter()
        .filter_map(|k| {
            let (key, item) = doc.as_table().get_key_value(k)?;
            Some((key.span()?.start, item.span()?.end, *k))
        })
        .collect();
    cuts.sort_unstable();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (start, end, key) in cuts {
        out.push_str(&text[at..start]);
        out.push_str(&format!(
            "# {key}: not kept with the results; RUNAI_APP_SECRET or the original system file gives it"
        ));
        at = end;
    }
    out.push_str(&text[at..]);
    out
}

/// A file only its owner can read (0600), written durably.
fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    write_durable(path, data)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
}

/// Gives a Run:ai system loaded from a tree's copy (which keeps no secret) the secret of the original system
/// file the run was started with, when it still has one (`RUNAI_APP_SECRET` wins over both when set); the error
/// names both places when neither has it.
pub(crate) fn restore_secret(
    cfg: &mut crate::config::system::SystemConfig,
    info: &RunInfo,
) -> Result<(), String> {
    let Some(slot) = cfg.kind.app_secret_mut() else {
        return Ok(());
    };
    if slot.is_none() {
        let original = info
            .system_from
            .as_deref()
            .and_then(|p| crate::config::system::load(p).ok());
        if let Some(mut o) = original {
            *slot = o.kind.app_secret_mut().and_then(Option::take);
        }
    }
    if cfg.kind.app_secret().flatten().is_some() {
        return Ok(());
    }
    Err(format!(
        "no Run:ai secret to resume with: the results tree keeps none; set {} or restore app_secret in {}",
        crate::config::system::SECRET_ENV,
        info.system_from
            .as_deref()
            .map_or("the original system file".into(), |p| p.display().to_string())
    ))
}

pub(crate) fn read_info(root: &Path) -> std::io::Result<RunInfo> {
    let b = crate::util::fsx::read_regular(&state_dir(root).join("run.json"), 1 << 20)?;
    serde_json::from_slice(&b).map_err(std::io::Error::other)
}

/// The user's files that differ from the copies the run uses (edited since it started).
pub(crate) fn changed_inputs(root: &Path, info: &RunInfo) -> Vec<PathBuf> {
    let st = state_dir(root);
    let mut out = Vec::new();
    let mut same = |copy: PathBuf, orig: &Path| {
        if let (Ok(a), Ok(b)) = (std::fs::read(&copy), std::fs::read(orig)) {
            // the system's copy is the original without its secrets
            let b = if copy.ends_with("inputs/system.toml") {
                without_secrets(&String::from_utf8_lossy(&b)).into_bytes()
            } else {
                b
            };
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

/// Lock files this process holds, with their open descriptions (the `flock` lives as long as they do).
static HELD: std::sync::Mutex<Vec<(PathBuf, std::fs::File)>> = std::sync::Mutex::new(Vec::new());

/// Takes the tree for this process, atomically: an exclusive `flock` on `.cloudai/lock`, which the kernel drops
/// when the owner dies in any way (kill -9 included), so a lock is never stale and two processes can never both
/// hold it. Taken before anything of the tree is read. When another process holds it, its description (pid,
/// host, since) is the error.
pub fn lock(root: &Path) -> Result<(), String> {
    use std::io::{Read, Seek, Write};
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    let dir = state_dir(root);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join("lock");
    if HELD.lock().unwrap().iter().any(|(p, _)| *p == path) {
        return Ok(());
    }
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    // SAFETY: flock on a descriptor we own
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        // the owner may have just taken it and not yet written who it is: look again for a moment
        let mut text = String::new();
        for _ in 0..20 {
            text.clear();
            let _ = f.rewind();
            let _ = f.read_to_string(&mut text);
            if serde_json::from_str::<Owner>(&text).is_ok() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        return Err(match serde_json::from_str::<Owner>(&text) {
            Ok(o) => format!(
                "{} is owned by cloudai pid {} on {} (since {}); wait for it to end, or stop it first",
                root.display(),
                o.pid,
                o.host,
                o.since
            ),
            Err(_) => format!(
                "{} is owned by another cloudai process (it holds {}); wait for it to end, or stop it first",
                root.display(),
                path.display()
            ),
        });
    }
    let me = Owner {
        pid: std::process::id(),
        host: crate::util::hostname(),
        since: chrono::Local::now().to_rfc3339(),
    };
    let json = serde_json::to_vec_pretty(&me).map_err(|e| e.to_string())?;
    f.set_len(0)
        .and_then(|_| f.rewind())
        .and_then(|_| f.write_all(&json))
        .and_then(|_| f.sync_all())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    HELD.lock().unwrap().push((path, f));
    Ok(())
}

/// Gives the tree up (only when this process holds it). The lock file stays (removing it would let a process that
/// opened it just before lock a file nobody else sees); it says nobody owns the tree.
pub(crate) fn unlock(root: &Path) {
    let path = state_dir(root).join("lock");
    let mut held = HELD.lock().unwrap();
    if let Some(i) = held.iter().position(|(p, _)| *p == path) {
        let (_, f) = held.remove(i);
        let _ = f.set_len(0);
        drop(f);
    }
}
