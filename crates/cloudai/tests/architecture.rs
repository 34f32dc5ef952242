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

/// The module path of a source file (`systems/slurm/mod.rs` → `systems::slurm`, `lib.rs` → ``).
fn module_of(rel: &str) -> String {
    let trimmed = rel.trim_end_matches(".rs");
    let trimmed = trimmed
        .strip_suffix("/mod")
        .unwrap_or(trimmed)
        .trim_end_matches("lib");
    trimmed.trim_end_matches('/').replace('/', "::")
}

/// The paths a text names from `crate::`, `super::` and `self::`, made absolute for a file of module `module`
/// (`super` is the module's parent: a `mod.rs`'s module is its folder), braces expanded one level
/// (`super::{a, b::c}`).
fn paths_named(text: &str, module: &str) -> Vec<Vec<String>> {
    let ident = |s: &str| -> usize {
        s.find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(s.len())
    };
    // `a::b::c` at the start of `s`, and what follows it
    fn segments(s: &str, ident: &dyn Fn(&str) -> usize) -> (Vec<String>, usize) {
        let mut out = Vec::new();
        let mut at = 0;
        loop {
            let n = ident(&s[at..]);
            if n == 0 {
                break;
            }
            out.push(s[at..at + n].to_string());
            at += n;
            if s[at..].starts_with("::") && ident(&s[at + 2..]) > 0 {
                at += 2;
            } else {
                break;
            }
        }
        (out, at)
    }
    let here: Vec<String> = module
        .split("::")
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    let mut found = Vec::new();
    for (i, _) in text.match_indices("::") {
        // the path's first word, right before this `::`
        let before = &text[..i];
        let start = before
            .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(0, |p| p + 1);
        // only a path's start: not the middle of `a::b::c`
        if text[..start].ends_with("::") {
            continue;
        }
        let mut base: Vec<String> = match &text[start..i] {
            "crate" => Vec::new(),
            "self" => here.clone(),
            "super" => {
                // each further `super::` climbs one more level
                let mut up = 1;
                let mut rest = &text[i + 2..];
                while let Some(r) = rest.strip_prefix("super::") {
                    up += 1;
                    rest = r;
                }
                here[..here.len().saturating_sub(up)].to_vec()
            }
            _ => continue,
        };
        let mut rest = &text[i + 2..];
        while let Some(r) = rest.strip_prefix("super::") {
            rest = r;
        }
        let (segs, used) = segments(rest, &ident);
        let after = &rest[used..];
        if segs.is_empty() || !after.starts_with("::{") {
            if let Some(inner) = after.strip_prefix('{').filter(|_| segs.is_empty()) {
                for item in inner.split('}').next().unwrap_or("").split(',') {
                    let (s, _) = segments(item.trim(), &ident);
                    let mut p = base.clone();
                    p.extend(s);
                    found.push(p);
                }
            } else {
                base.extend(segs);
                found.push(base);
            }
            continue;
        }
        base.extend(segs);
        for item in after[3..].split('}').next().unwrap_or("").split(',') {
            let (s, _) = segments(item.trim(), &ident);
            let mut p = base.clone();
            p.extend(s);
            found.push(p);
        }
    }
    found
}

/// File → the files whose items its code names (tests and comments aside). A module naming its own submodules
/// is not an edge: it owns them (it declares them and may re-export their items).
fn file_graph(files: &[(String, String)]) -> BTreeMap<String, BTreeSet<String>> {
    let modules: BTreeMap<String, &str> = files
        .iter()
        .map(|(rel, _)| (module_of(rel), rel.as_str()))
        .collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (rel, text) in files {
        let module = module_of(rel);
        let code: String = text
            .split("#[cfg(test)]")
            .next()
            .unwrap_or("")
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        for path in paths_named(&code, &module) {
            // the longest prefix of the path that is a file's module
            let target = (0..=path.len())
                .rev()
                .map(|n| path[..n].join("::"))
                .find_map(|m| modules.get(&m).map(|f| (m, *f)));
            let Some((target_mod, target_file)) = target else {
                continue;
            };
            // a module owns its submodules, whichever file layout holds them (`a/mod.rs` or `a.rs` + `a/`)
            let owned = module.is_empty() || target_mod.starts_with(&format!("{module}::"));
            if target_file != rel && !owned && target_mod != module {
                graph
                    .entry(rel.clone())
                    .or_default()
                    .insert(target_file.to_string());
            }
        }
    }
    graph
}

/// No two files reach each other through their imports, at any folder depth (`systems/live.rs` →
/// `systems/slurm/mod.rs` → `systems/live.rs` is a cycle the sibling rule cannot see).
#[test]
fn files_have_no_import_cycle_at_any_depth() {
    let root = src();
    let mut paths = Vec::new();
    rust_files(&root, &mut paths);
    let files: Vec<(String, String)> = paths
        .iter()
        .map(|p| {
            (
                p.strip_prefix(&root).unwrap().display().to_string(),
                std::fs::read_to_string(p).unwrap(),
            )
        })
        .filter(|(rel, _)| rel != "main.rs")
        .collect();
    let graph = file_graph(&files);
    assert!(
        graph
            .get("systems/slurm/mod.rs")
            .is_some_and(|d| d.contains("systems/mod.rs")),
        "the scan found no edges: {graph:?}"
    );
    if let Some(cycle) = find_cycle(&graph) {
        panic!("import cycle between files: {}", cycle.join(" → "));
    }
}

#[test]
fn a_planted_cycle_across_folder_levels_is_found() {
    let f = |rel: &str, text: &str| (rel.to_string(), text.to_string());
    let clean =
        vec![
        f("lib.rs", "pub mod systems;"),
        f(
            "systems/mod.rs",
            "pub mod live;\npub mod slurm;\npub use slurm::x;\npub enum Live {}",
        ),
        f("systems/live.rs", "pub use super::Live;\nfn g() { super::slurm::live(); }"),
        f(
            "systems/slurm/mod.rs",
            "use super::{Live, live_free};\nuse crate::systems::slurm::state::S;\npub mod state;",
        ),
        f("systems/slurm/state.rs", "use super::super::Live;"),
    ];
    let g = file_graph(&clean);
    assert!(
        g["systems/live.rs"].contains("systems/slurm/mod.rs"),
        "{g:?}"
    );
    assert!(
        g["systems/slurm/state.rs"].contains("systems/mod.rs"),
        "{g:?}"
    );
    assert_eq!(find_cycle(&g), None, "{g:?}");
    // the slurm module naming live.rs's type back (as it did) closes a cycle one folder level up
    let mut planted = clean.clone();
    planted[3]
        .1
        .push_str("\nfn h() -> super::live::Live { todo!() }");
    let g = file_graph(&planted);
    let cycle = find_cycle(&g).expect("a cycle");
    assert!(
        cycle.contains(&"systems/live.rs".to_string())
            && cycle.contains(&"systems/slurm/mod.rs".to_string()),
        "{cycle:?}"
    );
    // and two levels apart, through braces and `crate::`
    let mut planted = clean;
    planted[1].1.push_str("\nfn k() {}");
    planted[4].1 = "use crate::systems::{live::g};".into();
    planted[2]
        .1
        .push_str("\nuse crate::systems::slurm::state::T;");
    let g = file_graph(&planted);
    assert!(find_cycle(&g).is_some(), "{g:?}");
}
