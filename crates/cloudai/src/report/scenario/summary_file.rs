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
pub(super) fn summary_json(summary: &mut Summary, abs_root: &Path) -> std::io::Result<Vec<u8>> {
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
    serde_json::to_vec_pretty(&Whole(top, Tests(&summary.tests, abs_root)))
        .map_err(std::io::Error::other)
}

/// The `generated_at` of a summary.json we wrote (a top-level key, before the tests).
pub(super) fn generated_at(summary: &[u8]) -> Option<String> {
    const KEY: &[u8] = b"\n  \"generated_at\": \"";
    let at = summary.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let len = summary[at..].iter().position(|b| *b == b'"')?;
    String::from_utf8(summary[at..at + len].to_vec()).ok()
}

pub(crate) const SUMMARY_FILE: &str = "summary.json";
