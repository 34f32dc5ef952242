//! Reading a results tree: the scenario it is of, its iteration directories in order, and what each iteration's
//! test-run.toml records of its test.

use super::*;

/// The scenario a tree is of, as the tree itself records it: its summary.json (ours), else the one scenario page
/// in its root (`<scenario>.html`, CloudAI's), else its directory's name. A renamed copy of a tree stays the
/// same scenario, and its one page is rewritten rather than a second one added.
pub(crate) fn tree_scenario_name(root: &Path) -> String {
    let from_summary = std::fs::read(root.join(SUMMARY_FILE))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v["scenario"].as_str().map(str::to_string))
        .filter(|s| !s.is_empty() && !s.contains(['/', '\\']));
    if let Some(n) = from_summary {
        return n;
    }
    let pages: Vec<String> = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let p = e.path();
            (p.is_file() && p.extension().is_some_and(|x| x == "html"))
                .then(|| p.file_stem()?.to_str().map(str::to_string))
                .flatten()
        })
        .collect();
    match pages.as_slice() {
        [one] => one.clone(),
        _ => scenario_name(root),
    }
}

/// `<scenario>_<YYYY-MM-DD_HH-MM-SS>` (or with `_<n>` after it, for a second run in the same second) →
/// `<scenario>`.
pub(crate) fn scenario_name(root: &Path) -> String {
    let name = root
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("scenario");
    let stamped = |n: &str| -> Option<String> {
        let i = n.len().checked_sub(20)?;
        (n.is_char_boundary(i)
            && n[i..].starts_with('_')
            && n[i + 1..].bytes().filter(u8::is_ascii_digit).count() == 14)
            .then(|| n[..i].to_string())
    };
    let unnumbered = name
        .rsplit_once('_')
        .filter(|(_, k)| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()) && k.len() <= 3)
        .map(|(head, _)| head);
    stamped(name)
        .or_else(|| unnumbered.and_then(stamped))
        .unwrap_or_else(|| name.to_string())
}

/// Iteration directories of a results tree: `<root>/<test id>/<n>/` holding a `test-run.toml` (or only its
/// record).
pub(crate) fn iteration_dirs(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(tests) = std::fs::read_dir(root) else {
        return out;
    };
    let mut tests: Vec<PathBuf> = tests
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    tests.sort();
    for t in tests {
        let Ok(iters) = std::fs::read_dir(&t) else {
            continue;
        };
        let mut its: Vec<(u64, PathBuf)> = iters
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter_map(|p| Some((p.file_name()?.to_str()?.parse().ok()?, p)))
            // a record without test-run.toml: an iteration whose files could not be written
            .filter(|(_, p): &(u64, PathBuf)| {
                p.join("test-run.toml").is_file()
                    || p.join(crate::results::record::RECORD_FILE).is_file()
            })
            .collect();
        its.sort();
        out.extend(its.into_iter().map(|(_, p)| p));
    }
    out
}

/// What an iteration's test-run.toml records of its test.
pub(super) struct Stored {
    pub(super) id: String,
    pub(super) iteration: u64,
    pub(super) iterations: u64,
    pub(super) def: tdef::TestDefinition,
    /// The node count (`nnodes`, CloudAI's field), when positive.
    pub(super) nodes: Option<u64>,
}

/// The test stored in an iteration's test-run.toml; `Err` says why it cannot be read.
pub(super) fn stored_test(dir: &Path) -> Result<Stored, String> {
    let path = dir.join("test-run.toml");
    let root = node::load(&path, "test-run.toml").map_err(|e| e.to_string())?;
    let t = root.as_table().ok_or("it is not a table")?;
    let id = match t.get("name").map(|n| &n.kind) {
        Some(node::Kind::Str(s)) => s.clone(),
        _ => return Err("it has no name".into()),
    };
    let int = |k: &str| match t.get(k).map(|n| &n.kind) {
        Some(node::Kind::Int(i)) => *i as u64,
        _ => 0,
    };
    let node = t
        .get("test_definition")
        .ok_or("it has no test_definition")?;
    let def = crate::workloads::decode_test(node, "test_definition").map_err(|e| e.to_string())?;
    Ok(Stored {
        id,
        iteration: int("current_iteration"),
        iterations: int("iterations").max(1),
        def,
        nodes: Some(int("nnodes")).filter(|n| *n > 0),
    })
}
