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
            for (i, _) in line.match_indices("crate::") {
                let name: String = line[i + 7..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
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
