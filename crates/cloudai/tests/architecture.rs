//! The crate's top-level modules form layers (util → config → workloads → scenario → systems → runner → cli):
//! a module never reaches, directly or through others, back into one that depends on it. An import cycle is how
//! "touch one module and one registry line" quietly stops being true, so it fails here, with the path that closes it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The names a line's paths give right after `prefix` (`crate::` → `config` in `crate::config::node`).
fn names_after<'a>(line: &'a str, prefix: &'a str) -> impl Iterator<Item = String> + 'a {
    line.match_indices(prefix).map(move |(i, _)| {
        line[i + prefix.len()..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    })
}

/// Top-level module → the top-level modules its code names as `crate::<module>` (comments ignored).
fn module_graph() -> BTreeMap<String, BTreeSet<String>> {
    let root = src();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let top = |p: &Path| {
        let rel = p.strip_prefix(&root).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        first.trim_end_matches(".rs").to_string()
    };
    let modules: BTreeSet<String> = files
        .iter()
        .map(|p| top(p))
        .filter(|m| m != "lib" && m != "main")
        .collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let from = top(f);
        let text = std::fs::read_to_string(f).unwrap();
        for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for name in names_after(line, "crate::") {
                if name != from && modules.contains(&name) {
                    graph.entry(from.clone()).or_default().insert(name);
                }
            }
        }
    }
    graph
}

fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn walk(
        n: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == n) {
            let mut cycle = path[at..].to_vec();
            cycle.push(n.to_string());
            return Some(cycle);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_string());
        for m in graph.get(n).into_iter().flatten() {
            if let Some(c) = walk(m, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| walk(n, graph, &mut Vec::new(), &mut done))
}

#[test]
fn top_level_modules_have_no_import_cycle() {
    let graph = module_graph();
    assert!(
        graph.get("config").is_some_and(|d| d.contains("util")),
        "the scan found no crate:: paths: {graph:?}"
    );
    if let Some(cycle) = find_cycle(&graph) {
        panic!("import cycle: {}", cycle.join(" → "));
    }
}

#[test]
fn the_cycle_finder_finds_one() {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("c".into());
    assert_eq!(find_cycle(&g), None);
    g.entry("c".into()).or_default().insert("a".into());
    assert_eq!(
        find_cycle(&g),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
}

/// Run:ai and Kubernetes run on one step machine (`systems/objects/`): each keeps the same files for the same
/// concerns, and neither carries its own copy of the machine (job tables, step counters, deletion bookkeeping).
#[test]
fn object_schedulers_share_one_step_machine_and_one_layout() {
    let systems = src().join("systems");
    for side in ["runai", "kubernetes"] {
        for f in [
            "mod.rs",
            "plan.rs",
            "ops.rs",
            "observe.rs",
            "state.rs",
            "logs.rs",
            "client.rs",
        ] {
            assert!(
                systems.join(side).join(f).is_file(),
                "systems/{side}/{f} is missing: both object schedulers keep the same files"
            );
        }
        let mut files = Vec::new();
        rust_files(&systems.join(side), &mut files);
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            for machine_part in [
                "current += 1",
                "main_outcome",
                "unconfirmed",
                "impl System for",
            ] {
                assert!(
                    !text.contains(machine_part),
                    "{} has `{machine_part}`: the step machine lives in systems/objects/",
                    f.display()
                );
            }
        }
    }
    let machine = std::fs::read_to_string(systems.join("objects/machine.rs")).unwrap();
    assert!(machine.contains("current += 1") && machine.contains("fn await_gone"));
}

/// What names a scheduler in code: its `scheduler` value or commands as string literals, its config variant or
/// type, its systems module.
const SCHEDULER_NAMES: &[&str] = &[
    r#""standalone""#,
    r#""slurm""#,
    r#""runai""#,
    r#""kubernetes""#,
    r#""sbatch""#,
    r#""squeue""#,
    r#""scancel""#,
    r#""scontrol""#,
    r#""sinfo""#,
    r#""sacct""#,
    r#""kubectl""#,
    "SystemKind::",
    "StandaloneConfig",
    "SlurmConfig",
    "RunAiConfig",
    "KubernetesConfig",
    "systems::standalone",
    "systems::slurm",
    "systems::runai",
    "systems::kubernetes",
];

/// Each file's code lines (comments dropped, and everything from its `#[cfg(test)]` module on): path, line
/// number, text.
fn code_lines(dir: &Path) -> Vec<(PathBuf, usize, String)> {
    let mut files = Vec::new();
    rust_files(dir, &mut files);
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for (i, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("#[cfg(test)]") {
                break;
            }
            if !line.trim_start().starts_with("//") {
                out.push((f.clone(), i + 1, line.to_string()));
            }
        }
    }
    out
}

/// "Where is Slurm?" has one answer: only `systems/` and `config/system/` name a scheduler; everything else asks
/// the `System` trait or the config's scheduler table.
#[test]
fn no_scheduler_is_named_outside_systems_and_their_configs() {
    let root = src();
    let allowed = [root.join("systems"), root.join("config").join("system")];
    let mut named_inside = 0;
    let mut offenders = Vec::new();
    for (file, n, line) in code_lines(&root) {
        let hits: Vec<&&str> = SCHEDULER_NAMES
            .iter()
            .filter(|s| line.contains(**s))
            .collect();
        if hits.is_empty() {
            continue;
        }
        if allowed.iter().any(|a| file.starts_with(a)) {
            named_inside += 1;
        } else {
            offenders.push(format!(
                "{}:{n}: {} ({})",
                file.strip_prefix(&root).unwrap().display(),
                line.trim(),
                hits.iter()
                    .map(|h| h.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    // the scan sees what it looks for where it belongs
    assert!(
        named_inside > 20,
        "only {named_inside} scheduler names found in systems/ and config/system/"
    );
    assert!(
        offenders.is_empty(),
        "scheduler knowledge outside systems/ and config/system/ (move it behind the System trait or the config's \
         scheduler table):\n{}",
        offenders.join("\n")
    );
}

/// docs/design/systems.md's list of what a new scheduler touches stays true: every source file it names exists,
/// for every scheduler (`<name>` in a path is each scheduler's name).
#[test]
fn the_new_scheduler_checklist_names_files_that_exist() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let doc = std::fs::read_to_string(repo.join("docs/design/systems.md")).unwrap();
    let paths: Vec<&str> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("| `")?.split('`').next())
        .filter(|p| p.starts_with("crates/"))
        .collect();
    assert!(paths.len() >= 5, "the checklist lost its table: {paths:?}");
    let names = cloudai::config::system::scheduler_names();
    for p in &paths {
        for name in &names {
            let path = repo.join(p.replace("<name>", name));
            let exists = path.exists() || path.with_extension("rs").is_file();
            assert!(
                exists,
                "docs/design/systems.md names {p}, but {} is missing",
                path.display()
            );
        }
    }
}

/// Within one folder, sibling files (`mod.rs` aside: it owns them) name each other in one direction only: a cycle
/// there (run ↔ resume, error ↔ node, scenario ↔ page) means one of them holds what both need.
#[test]
fn sibling_files_have_no_import_cycle() {
    let root = src();
    let mut dirs = vec![root.clone()];
    let mut cycles = Vec::new();
    while let Some(dir) = dirs.pop() {
        let mut siblings = BTreeSet::new();
        let mut files = Vec::new();
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p.clone());
                siblings.insert(p.file_name().unwrap().to_string_lossy().to_string());
            } else if p.extension().is_some_and(|x| x == "rs") {
                let stem = p.file_stem().unwrap().to_string_lossy().to_string();
                if stem != "mod" && stem != "lib" && stem != "main" {
                    siblings.insert(stem);
                    files.push(p);
                }
            }
        }
        // a path to this folder from the crate root: `crate::a::b::`
        let rel = dir.strip_prefix(&root).unwrap();
        let crate_path: String = rel
            .components()
            .map(|c| format!("{}::", c.as_os_str().to_string_lossy()))
            .collect();
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for f in &files {
            let from = f.file_stem().unwrap().to_string_lossy().to_string();
            let text = std::fs::read_to_string(f).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
                let prefixes = ["super::".to_string(), format!("crate::{crate_path}")];
                for prefix in prefixes.iter().filter(|p| p.as_str() != "crate::") {
                    for name in names_after(line, prefix) {
                        if name != from && siblings.contains(&name) {
                            graph.entry(from.clone()).or_default().insert(name);
                        }
                    }
                }
            }
        }
        if let Some(c) = find_cycle(&graph) {
            cycles.push(format!("{}: {}", rel.display(), c.join(" → ")));
        }
    }
    assert!(
        cycles.is_empty(),
        "import cycles between sibling files:\n{}",
        cycles.join("\n")
    );
}
