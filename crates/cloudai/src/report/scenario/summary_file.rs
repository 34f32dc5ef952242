//! summary.json: how a tree's summary is written (one test at a time) and read back (its mode, its time stamp).

use super::*;

/// Whether a tree's summary.json says a dry-run made it.
pub(crate) fn is_dry_run_tree(root: &Path) -> bool {
    std::fs::read(root.join(SUMMARY_FILE))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .is_some_and(|v| v["mode"] == "dry-run")
}

/// summary.json: `results_root` absolute, every other path relative to it (however the tree was named on the
/// command line, and whether the records were written by a run or rebuilt from the tree).
pub(super) fn summary_json_to(
    w: &mut dyn std::io::Write,
    summary: &mut Summary,
    abs_root: &Path,
) -> std::io::Result<()> {
    use serde::ser::{SerializeMap, SerializeSeq};
    // the tests are turned into JSON one at a time (a tree of 10,000 iterations as one JSON value was most of a
    // run's peak memory); the keys stay in the order they always had (sorted, as serde_json's map keeps them)
    struct Tests<'a>(&'a [Entry], &'a Path);
    impl serde::Serialize for Tests<'_> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut seq = s.serialize_seq(Some(self.0.len()))?;
            for e in self.0 {
                let mut t = serde_json::to_value(e).map_err(serde::ser::Error::custom)?;
                if let Some(p) = t["output_path"].as_str() {
                    let abs = std::path::absolute(p).unwrap_or_else(|_| PathBuf::from(p));
                    let rel = abs.strip_prefix(self.1).unwrap_or(&abs);
                    t["output_path"] = rel.display().to_string().into();
                }
                seq.serialize_element(&t)?;
            }
            seq.end()
        }
    }
    struct Whole<'a>(serde_json::Map<String, serde_json::Value>, Tests<'a>);
    impl serde::Serialize for Whole<'_> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut map = s.serialize_map(Some(self.0.len()))?;
            for (k, v) in &self.0 {
                if k == "tests" {
                    map.serialize_entry(k, &self.1)?;
                } else {
                    map.serialize_entry(k, v)?;
                }
            }
            map.end()
        }
    }
    let tests = std::mem::take(&mut summary.tests);
    let top = serde_json::to_value(&*summary);
    summary.tests = tests;
    let serde_json::Value::Object(top) = top.map_err(std::io::Error::other)? else {
        return Err(std::io::Error::other("a summary is a JSON object"));
    };
    // through a buffer: serde_json writes a few bytes at a time
    let mut w = std::io::BufWriter::with_capacity(1 << 16, w);
    serde_json::to_writer_pretty(&mut w, &Whole(top, Tests(&summary.tests, abs_root)))
        .map_err(std::io::Error::other)?;
    std::io::Write::flush(&mut w)
}

/// Writes summary.json as it is serialized (a tree of 10,000 iterations held as one 10 MB buffer, twice, was most of
/// a run's peak memory). A tree whose summary did not change keeps the file as it is, time stamp included: the
/// summary is compared with the file under the file's own stamp first, and written with the new one only if it
/// differs.
pub(super) fn write_summary(
    path: &Path,
    summary: &mut Summary,
    abs_root: &Path,
) -> std::io::Result<()> {
    if let Some(stamp) = stamp_of(path) {
        let now = std::mem::replace(&mut summary.generated_at, stamp);
        if crate::util::fsx::same_as(path, |w| summary_json_to(w, summary, abs_root))? {
            return Ok(());
        }
        summary.generated_at = now;
    }
    crate::util::fsx::write_changed_with(path, |w| summary_json_to(w, summary, abs_root))
        .map(|_| ())
}

/// The `generated_at` of the summary.json at `path`, read from its head (where the top-level keys before the tests
/// are).
fn stamp_of(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut head = Vec::with_capacity(4096);
    std::fs::File::open(path)
        .ok()?
        .take(4096)
        .read_to_end(&mut head)
        .ok()?;
    generated_at(&head)
}

/// The `generated_at` of a summary.json we wrote (a top-level key, before the tests).
fn generated_at(summary: &[u8]) -> Option<String> {
    const KEY: &[u8] = b"\n  \"generated_at\": \"";
    let at = summary.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let len = summary[at..].iter().position(|b| *b == b'"')?;
    String::from_utf8(summary[at..at + len].to_vec()).ok()
}

pub(crate) const SUMMARY_FILE: &str = "summary.json";
