//! Atomic file writes: results are never seen half-written, even if we are killed mid-write (write to a
//! temporary file, then rename over the target). A failed write leaves no temporary file behind and is
//! remembered, so the command can end with one clear error (a full disk) instead of a quiet partial tree.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Writes that failed in this process: (path, error), first ones first (bounded).
static FAILED: Mutex<Vec<(PathBuf, String)>> = Mutex::new(Vec::new());

pub fn write_atomic(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    write(path, contents, false, true)
}

/// As `write_atomic`, and on disk before it returns (file and directory synced): for the run's journal, which a
/// `resume` after a crash or power loss must find as it was.
pub(crate) fn write_durable(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    write(path, contents, true, true)
}

/// A new temporary file beside `path` (`.<name>.<random>.tmp`): created exclusively (never an existing file, never
/// through a symlink someone planted under a predictable name), with an unpredictable name.
pub fn create_temp(path: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    for _ in 0..16 {
        let tmp = dir.join(format!(".{name}.{:016x}.tmp", random_u64()));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
        {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other(format!(
        "cannot create a temporary file beside {}",
        path.display()
    )))
}

/// 64 random bits from the kernel (a clock-based fallback when it refuses).
fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: getrandom fills the buffer it is given, at most its length
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n == 8 {
        u64::from_ne_bytes(b)
    } else {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        t ^ (u64::from(std::process::id()) << 32)
    }
}

fn write(path: &Path, contents: &[u8], durable: bool, note: bool) -> std::io::Result<()> {
    write_file_with(path, durable, note, |f| {
        f.write_all(contents)?;
        f.flush()
    })
}

/// The one atomic write: `fill` writes a new temporary file beside `path`, which then replaces `path` (synced,
/// file and directory, when `durable`; no fsync otherwise: the rename makes the write atomic for readers, and a
/// sync per file made a 1,000-iteration dry-run ten times slower). A failure removes the temporary file and, when
/// `note`, is remembered for the closing error.
pub(crate) fn write_file_with(
    path: &Path,
    durable: bool,
    note: bool,
    fill: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let r = create_temp(path).and_then(|(tmp, mut f)| {
        let done = (|| {
            fill(&mut f)?;
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
        if done.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        done
    });
    if let (true, Err(e)) = (note, &r) {
        note_failure(path, e);
    }
    r
}

/// As `write_durable`; when that fails (a full disk) and the file already holds at least as many bytes, the new
/// contents overwrite it in place (its blocks are already allocated), padded with blanks to its old length.
pub(crate) fn write_reserved(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let first = match write(path, contents, true, false) {
        Ok(()) => return Ok(()),
        Err(e) => e,
    };
    let in_place = (|| {
        use std::io::{Seek, Write};
        use std::os::unix::fs::OpenOptionsExt;
        let old = std::fs::symlink_metadata(path)?;
        if !old.is_file() || (old.len() as usize) < contents.len() {
            return Err(std::io::Error::other("no room reserved"));
        }
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)?;
        let mut padded = contents.to_vec();
        padded.resize(old.len() as usize, b' ');
        f.rewind()?;
        f.write_all(&padded)?;
        f.sync_all()
    })();
    if in_place.is_err() {
        note_failure(path, &first);
        return Err(first);
    }
    Ok(())
}

/// As `write_atomic`, for contents produced by `fill` into a buffered writer (too large to hold in memory).
pub(crate) fn write_atomic_with(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    write_file_with(path, false, true, |f| {
        let mut w = std::io::BufWriter::with_capacity(1 << 16, f);
        fill(&mut w)?;
        w.flush()
    })
}

/// As [`write_atomic_with`], except that a file which already holds exactly these bytes is left alone, time stamp
/// and all (`generate-report` over an unchanged tree rewrites nothing). The new contents are compared with the old
/// ones as they are produced, in one pass; only from the first difference on are they written to a temporary file
/// (the equal prefix copied from the old file first), which then replaces the old one. Returns whether it wrote.
pub(crate) fn write_changed_with(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<bool> {
    let Ok(old) = open_regular(path) else {
        return write_atomic_with(path, fill).map(|()| true);
    };
    let mut w = Changed {
        path,
        state: Compare {
            old: std::io::BufReader::with_capacity(1 << 16, old),
            same: 0,
            scratch: Vec::new(),
        },
    };
    let r = fill(&mut w).and_then(|()| w.finish());
    if let Err(e) = &r {
        if let Diverged { tmp, .. } = &w.state {
            let _ = std::fs::remove_file(tmp);
        }
        note_failure(path, e);
    }
    r
}

/// As [`write_changed_with`], for contents in memory.
pub(crate) fn write_changed(path: &Path, contents: &[u8]) -> std::io::Result<bool> {
    write_changed_with(path, |w| w.write_all(contents))
}

/// Whether `fill` produces exactly the bytes of the file at `path`, compared as they are produced (nothing held,
/// nothing written); false when there is no such file.
pub(crate) fn same_as(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<bool> {
    struct Same {
        old: std::io::BufReader<std::fs::File>,
        scratch: Vec<u8>,
        equal: bool,
    }
    impl Write for Same {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.equal {
                use std::io::Read;
                self.scratch.resize(buf.len(), 0);
                self.equal = self.old.read_exact(&mut self.scratch).is_ok() && self.scratch == buf;
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let Ok(old) = open_regular(path) else {
        return Ok(false);
    };
    let mut w = Same {
        old: std::io::BufReader::with_capacity(1 << 16, old),
        scratch: Vec::new(),
        equal: true,
    };
    fill(&mut w)?;
    use std::io::BufRead;
    Ok(w.equal && w.old.fill_buf()?.is_empty())
}

struct Changed<'a> {
    path: &'a Path,
    state: ChangedState,
}

enum ChangedState {
    /// every byte so far equals the old file's
    Compare {
        old: std::io::BufReader<std::fs::File>,
        same: u64,
        scratch: Vec<u8>,
    },
    /// a difference was seen: writing the new contents to `tmp`
    Diverged {
        tmp: PathBuf,
        out: std::io::BufWriter<std::fs::File>,
    },
    Done,
}
use ChangedState::{Compare, Diverged, Done};

impl Changed<'_> {
    /// From here on the contents differ: a temporary file holding the equal prefix, then `buf`.
    fn diverge(&mut self, buf: &[u8]) -> std::io::Result<()> {
        let same = match &self.state {
            Compare { same, .. } => *same,
            _ => return Ok(()),
        };
        let (tmp, f) = create_temp(self.path)?;
        self.state = Diverged {
            tmp,
            out: std::io::BufWriter::with_capacity(1 << 16, f),
        };
        let Diverged { out, .. } = &mut self.state else {
            unreachable!()
        };
        use std::io::Read;
        let copied = std::io::copy(&mut open_regular(self.path)?.take(same), out)?;
        if copied != same {
            return Err(std::io::Error::other(format!(
                "{} changed while it was rewritten",
                self.path.display()
            )));
        }
        out.write_all(buf)
    }

    /// Ends the write: nothing when the old file held exactly these bytes, else the temporary file in its place.
    fn finish(&mut self) -> std::io::Result<bool> {
        if let Compare { old, .. } = &mut self.state {
            use std::io::BufRead;
            if old.fill_buf()?.is_empty() {
                self.state = Done;
                return Ok(false);
            }
            self.diverge(&[])?;
        }
        match std::mem::replace(&mut self.state, Done) {
            Diverged { tmp, out } => {
                let done = out.into_inner().map_err(|e| e.into_error()).and_then(|f| {
                    drop(f);
                    std::fs::rename(&tmp, self.path)
                });
                if done.is_err() {
                    let _ = std::fs::remove_file(&tmp);
                }
                done.map(|()| true)
            }
            _ => Ok(true),
        }
    }
}

impl Write for Changed<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match &mut self.state {
            Compare { old, same, scratch } => {
                use std::io::Read;
                scratch.resize(buf.len(), 0);
                let mut n = 0;
                while n < buf.len() {
                    match old.read(&mut scratch[n..]) {
                        Ok(0) => break,
                        Ok(k) => n += k,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
                if n == buf.len() && scratch[..n] == *buf {
                    *same += n as u64;
                } else {
                    self.diverge(buf)?;
                }
                Ok(buf.len())
            }
            Diverged { out, .. } => out.write(buf),
            Done => Err(std::io::Error::other("write after the end")),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.state {
            Diverged { out, .. } => out.flush(),
            _ => Ok(()),
        }
    }
}

/// Remembers a results file that could not be written.
pub(crate) fn note_failure(path: &Path, e: &std::io::Error) {
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
pub(crate) fn is_full(p: &Path) -> bool {
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
pub(crate) fn failure_summary(root: &Path) -> Option<String> {
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

/// Opens a file to read only when it is a regular file: a FIFO would block the reader for ever (holding the
/// tree's lock), a device like `/dev/zero` never ends.
pub(crate) fn open_regular(path: &Path) -> std::io::Result<std::fs::File> {
    let m = std::fs::metadata(path)?;
    if !m.is_file() {
        return Err(std::io::Error::other(format!(
            "{}: not a regular file (a device, FIFO, socket or directory)",
            path.display()
        )));
    }
    std::fs::File::open(path)
}

/// Reads a regular file of at most `max` bytes (a state file of ours: a larger one is not what we wrote).
pub(crate) fn read_regular(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let f = open_regular(path)?;
    let mut buf = Vec::new();
    f.take(max + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > max {
        return Err(std::io::Error::other(format!(
            "{}: larger than the {} KiB this file can be",
            path.display(),
            max >> 10
        )));
    }
    Ok(buf)
}

/// Removes the temporary files [`write_atomic`] left in `dir` when its writer was killed mid-write
/// (`.<name>.<16 hex>.tmp`, older than a minute: nobody writes them any more): only names of that form, never a
/// file of the user's.
pub(crate) fn sweep_stale_temps(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let ours = |n: &str| {
        n.strip_prefix('.')
            .and_then(|r| r.strip_suffix(".tmp"))
            .and_then(|r| r.rsplit_once('.'))
            .is_some_and(|(name, hex)| {
                !name.is_empty() && hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit())
            })
    };
    let old = |p: &Path| {
        std::fs::symlink_metadata(p)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age.as_secs() >= 60)
    };
    let mut n = 0;
    for e in entries.flatten() {
        let p = e.path();
        let is_file = e.file_type().is_ok_and(|t| t.is_file());
        if is_file
            && e.file_name().to_str().is_some_and(ours)
            && old(&p)
            && std::fs::remove_file(&p).is_ok()
        {
            n += 1;
        }
    }
    n
}

#[cfg(test)]
mod changed_tests {
    use super::{write_changed, write_changed_with};

    fn dir(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("cloudai-changed-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn inode(p: &std::path::Path) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(p).unwrap().ino()
    }

    #[test]
    fn the_same_bytes_leave_the_file_alone_and_any_difference_replaces_it() {
        let d = dir("a");
        let p = d.join("f.csv");
        assert!(
            write_changed(&p, b"abc\ndef\n").unwrap(),
            "a new file is written"
        );
        let ino = inode(&p);
        // the same contents, produced in pieces of every size: untouched (same inode: no rename)
        let same = write_changed_with(&p, |w| {
            w.write_all(b"a")?;
            w.write_all(b"bc\nde")?;
            w.write_all(b"f\n")
        })
        .unwrap();
        assert!(!same);
        assert_eq!(inode(&p), ino);
        // longer, shorter, differing in the middle, empty: each replaces it, with exactly the new bytes
        for new in [&b"abc\ndef\nghi"[..], b"abc\n", b"abX\ndef\n", b""] {
            assert!(write_changed_with(&p, |w| {
                for c in new.chunks(2) {
                    w.write_all(c)?;
                }
                Ok(())
            })
            .unwrap());
            assert_eq!(std::fs::read(&p).unwrap(), new);
        }
        // no temporary file left behind
        let names: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_failing_producer_keeps_the_old_file_and_leaves_no_temporary() {
        let d = dir("b");
        let p = d.join("f");
        write_changed(&p, b"old contents").unwrap();
        let r = write_changed_with(&p, |w| {
            w.write_all(b"new")?;
            Err(std::io::Error::other("cut"))
        });
        assert!(r.is_err());
        assert_eq!(std::fs::read(&p).unwrap(), b"old contents");
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
        std::fs::remove_dir_all(&d).unwrap();
    }
}

#[cfg(test)]
mod sweep_tests {
    #[test]
    fn only_old_temporary_files_of_ours_are_swept() {
        let dir = std::env::temp_dir().join(format!("cloudai-sweep-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        let make = |name: &str, aged: bool| {
            let p = dir.join(name);
            let f = std::fs::File::create(&p).unwrap();
            if aged {
                f.set_modified(old).unwrap();
            }
            p
        };
        let stale = make(".cloudai-run.json.0123456789abcdef.tmp", true);
        let fresh = make(".summary.json.fedcba9876543210.tmp", false);
        let users = make("data.tmp", true);
        let other = make(".notes.123.tmp", true);
        assert_eq!(super::sweep_stale_temps(&dir), 1);
        assert!(!stale.exists());
        assert!(fresh.exists() && users.exists() && other.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_as_compares_what_is_produced_with_the_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        std::fs::write(&p, b"abcdef").unwrap();
        let same = |parts: &[&[u8]]| {
            same_as(&p, |w| parts.iter().try_for_each(|b| w.write_all(b))).unwrap()
        };
        assert!(same(&[b"abc", b"def"]));
        assert!(!same(&[b"abc", b"deX"]));
        assert!(!same(&[b"abc"]), "shorter");
        assert!(!same(&[b"abcdef", b"g"]), "longer");
        assert!(!same_as(&d.path().join("none"), |w| w.write_all(b"")).unwrap());
        assert_eq!(std::fs::read(&p).unwrap(), b"abcdef", "nothing written");
    }
}
