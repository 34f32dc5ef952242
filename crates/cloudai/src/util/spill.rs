//! A byte sink that stays in memory while small and moves to an anonymous temporary file when it grows (the
//! CSV of a long output, written while the output is graded and copied into the tree afterwards): memory stays
//! bounded, and the output is read once.

use std::io::Write;

/// Bytes held in memory before they move to a file.
pub(crate) const IN_MEMORY: usize = 16 << 20;

pub(crate) enum Spill {
    Memory(Vec<u8>),
    File(std::io::BufWriter<std::fs::File>),
}

impl Default for Spill {
    fn default() -> Self {
        Spill::Memory(Vec::new())
    }
}

impl Write for Spill {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Spill::Memory(v) if v.len() + buf.len() <= IN_MEMORY => {
                v.extend_from_slice(buf);
                Ok(buf.len())
            }
            Spill::Memory(v) => {
                let mut f = std::io::BufWriter::with_capacity(1 << 16, anonymous_file()?);
                f.write_all(v)?;
                f.write_all(buf)?;
                *self = Spill::File(f);
                Ok(buf.len())
            }
            Spill::File(f) => f.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Spill::Memory(_) => Ok(()),
            Spill::File(f) => f.flush(),
        }
    }
}

/// What was written, to be read back any number of times.
pub(crate) enum Spilled {
    Memory(Vec<u8>),
    File(std::fs::File),
}

impl Spill {
    pub fn finish(self) -> std::io::Result<Spilled> {
        Ok(match self {
            Spill::Memory(v) => Spilled::Memory(v),
            Spill::File(f) => Spilled::File(f.into_inner().map_err(|e| e.into_error())?),
        })
    }
}

impl Spilled {
    /// Copies everything written to `w`, from the start.
    pub(crate) fn copy_to(&self, w: &mut dyn Write) -> std::io::Result<()> {
        match self {
            Spilled::Memory(v) => w.write_all(v),
            Spilled::File(f) => {
                use std::os::unix::fs::FileExt;
                let mut buf = vec![0u8; 1 << 16];
                let mut at = 0u64;
                loop {
                    let n = match f.read_at(&mut buf, at) {
                        Ok(0) => return Ok(()),
                        Ok(n) => n,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        Err(e) => return Err(e),
                    };
                    w.write_all(&buf[..n])?;
                    at += n as u64;
                }
            }
        }
    }
}

/// A file with no name in the temporary directory: gone when closed, whatever way the process ends.
pub(crate) fn anonymous_file() -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = std::env::temp_dir();
    let tmpfile = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
        .open(&dir);
    match tmpfile {
        Ok(f) => Ok(f),
        // a file system without O_TMPFILE: a named file, unlinked at once
        Err(_) => {
            let (path, f) = crate::util::fsx::create_temp(&dir.join("cloudai-spill"))?;
            std::fs::remove_file(&path)?;
            Ok(f)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_stays_in_memory_large_moves_to_a_file_and_both_read_back_whole() {
        let mut s = Spill::default();
        s.write_all(b"abc").unwrap();
        let small = s.finish().unwrap();
        assert!(matches!(small, Spilled::Memory(_)));
        let mut back = Vec::new();
        small.copy_to(&mut back).unwrap();
        assert_eq!(back, b"abc");

        let piece: Vec<u8> = (0..=255u8).cycle().take(1 << 20).collect();
        let mut s = Spill::default();
        for _ in 0..(IN_MEMORY >> 20) + 3 {
            s.write_all(&piece).unwrap();
        }
        let big = s.finish().unwrap();
        assert!(matches!(big, Spilled::File(_)));
        // read twice: the same bytes each time
        for _ in 0..2 {
            let mut back = Vec::new();
            big.copy_to(&mut back).unwrap();
            assert_eq!(back.len(), IN_MEMORY + (3 << 20));
            assert!(back.chunks(1 << 20).all(|c| c == &piece[..]));
        }
    }
}
