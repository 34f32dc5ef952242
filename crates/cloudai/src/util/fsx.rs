//! Atomic file writes: results are never seen half-written, even if we are killed mid-write (write to a
//! temporary file, then rename over the target). A failed write leaves no temporary file behind and is
//! remembered, so the command can end with one clear error (a full disk) instead of a quiet partial tree.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Writes that failed in this process: (path, error), first ones first (bounded).
static FAILED: Mutex<Vec<(PathBuf, String)>> = Mutex::new(Vec::new());

pub fn write_atomic(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    write(path, contents, false)
}

/// As `write_atomic`, and on disk before it returns (file and directory synced): for the run's journal, which a
/// `resume` after a crash or power loss must find as it was.
pub fn write_durable(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    write(path, contents, true)
}

fn write(path: &Path, contents: &[u8], durable: bool) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(format!(".{name}.tmp{}", std::process::id()));
    let r = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        // No fsync: the rename makes the write atomic for readers, and a sync per file made a 1,000-iteration
        // dry-run ten times slower.
        f.write_all(contents)?;
        f.flush()?;
        if durable {
            f.sync_all()?;
        }
        drop(f);
        std::fs::rename(&tmp, path)?;
        if durable {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    if let Err(e) = &r {
        let _ = std::fs::remove_file(&tmp);
        note_failure(path, e);
    }
    r
}

/// Remembers a results file that could not be written.
pub fn note_failure(path: &Path, e: &std::io::Error) {
    let mut f = FAILED.lock().unwrap_or_else(|p| p.into_inner());
    if f.len() < 100 {
        f.push((path.to_path_buf(), e.to_string()));
    }
}

/// The results files that could not be written so far.
pub fn failures() -> Vec<(PathBuf, String)> {
    FAILED.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Whether the file system holding `p` has no space left for us (a job's output written there may be cut).
pub fn is_full(p: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else {
        return false;
    };
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C string and a zeroed struct for the kernel to fill
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut s) };
    rc == 0 && (s.f_bavail as u128) * (s.f_frsize as u128) < 4096
}

/// One error line for the end of a command when results could not be written, or None.
pub fn failure_summary(root: &Path) -> Option<String> {
    let f = failures();
    let (path, e) = f.first()?;
    Some(format!(
        "{} results file(s) could not be written (first: {}: {e}); the results in {} are incomplete. Free space \
         (or fix permissions), then rebuild the reports with `cloudai generate-report --result-dir {}`",
        f.len(),
        path.display(),
        root.display(),
        root.display()
    ))
}
