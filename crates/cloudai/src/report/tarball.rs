//! `<results root>.tgz` beside the tree, as CloudAI writes it when a test did not pass: the whole tree (configs,
//! records, outputs, reports) under its own directory name, written to a temporary name and renamed, so a reader
//! never sees half an archive.

use std::io::Write;
use std::path::{Path, PathBuf};

pub fn write(root: &Path) -> std::io::Result<PathBuf> {
    let name = root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "results".into());
    let out = root.with_file_name(format!("{name}.tgz"));
    crate::util::fsx::write_file_with(&out, true, true, |f| {
        let gz = flate2::write::GzEncoder::new(
            std::io::BufWriter::new(f),
            flate2::Compression::default(),
        );
        let mut tar = tar::Builder::new(gz);
        tar.follow_symlinks(false);
        tar.append_dir_all(&name, root)?;
        tar.into_inner()?.finish()?.flush()
    })?;
    Ok(out)
}
