//! `verify-configs`: find TOMLs, tell which schema each is, and validate each against it.

use std::path::{Path, PathBuf};

use clap::Args;

use crate::config::node::{self, Kind};
use crate::config::{scenario as scen, system, test, ConfigErrors};
use crate::scenario::{HookLibrary, TestLibrary};
use crate::{error, info, warn};

#[derive(Args, Debug)]
pub(crate) struct VerifyArgs {
    /// A TOML file, or a directory searched recursively for *.toml
    configs: PathBuf,
    /// Test TOMLs to resolve scenarios against (default: the tests found under CONFIGS)
    #[arg(long)]
    tests_dir: Option<PathBuf>,
    /// Hook directory [default: a `hook` directory under CONFIGS, else conf/hook under the working directory]
    #[arg(long)]
    hook_dir: Option<PathBuf>,
    /// Print the result as JSON on stdout (one entry per file: kind, status, problems) instead of log lines
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    System,
    Test,
    Scenario,
    Hook,
    HookTest,
    Unknown,
}

fn find_tomls(p: &Path, out: &mut Vec<PathBuf>) {
    if p.is_file() {
        out.push(p.to_path_buf());
        return;
    }
    let Ok(rd) = std::fs::read_dir(p) else { return };
    let mut entries: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for e in entries {
        if e.is_dir() {
            find_tomls(&e, out);
        } else if e.extension().is_some_and(|x| x == "toml") {
            out.push(e);
        }
    }
}

fn classify(path: &Path, hook_root: Option<&Path>) -> Class {
    if let Some(root) = hook_root {
        if let Ok(rel) = path.strip_prefix(root) {
            return if rel.components().any(|c| c.as_os_str() == "test") {
                Class::HookTest
            } else {
                Class::Hook
            };
        }
    }
    let Ok(text) = std::fs::read_to_string(path) else {
        return Class::Unknown;
    };
    let Ok(n) = node::parse(path, &text, "config") else {
        return Class::Unknown;
    };
    let Kind::Table(t) = &n.kind else {
        return Class::Unknown;
    };
    if t.entries.contains_key("scheduler") {
        Class::System
    } else if text.contains("test_template_name =") && !text.contains("[[Tests]]") {
        Class::Test
    } else if text.contains("[[Tests]]") {
        Class::Scenario
    } else {
        Class::Unknown
    }
}

fn canonical(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

pub fn verify(args: &VerifyArgs) -> i32 {
    if args.json {
        crate::log::console_off();
    }
    if !args.configs.exists() {
        error!("{}: no such file or directory", args.configs.display());
        if args.json {
            crate::log::print(
                &serde_json::json!({ "error": format!("{}: no such file or directory", args.configs.display()) })
                    .to_string(),
            );
        }
        return 1;
    }
    let hook_root = args
        .hook_dir
        .clone()
        .or_else(|| Some(args.configs.join("hook")).filter(|p| p.is_dir()))
        .unwrap_or_else(|| PathBuf::from("conf/hook"));
    let hook_root = hook_root.is_dir().then(|| canonical(&hook_root));

    let mut files = Vec::new();
    find_tomls(&args.configs, &mut files);
    if files.is_empty() {
        error!("No TOMLs found in {}", args.configs.display());
        return 1;
    }
    let mut files: Vec<PathBuf> = files.iter().map(|f| canonical(f)).collect();
    if let Some(root) = &hook_root {
        let mut hooks = Vec::new();
        find_tomls(root, &mut hooks);
        info!("Found {} hook TOMLs (always verified)", hooks.len());
        for h in hooks.iter().map(|h| canonical(h)) {
            if !files.contains(&h) {
                files.push(h);
            }
        }
    }
    let classes: Vec<(PathBuf, Class)> = files
        .iter()
        .map(|f| (f.clone(), classify(f, hook_root.as_deref())))
        .collect();
    let of = |c: Class| -> Vec<&PathBuf> {
        classes
            .iter()
            .filter(|(_, k)| *k == c)
            .map(|(p, _)| p)
            .collect()
    };

    let mut total = 0usize;
    let mut failed = 0usize;
    let mut results: Vec<serde_json::Value> = Vec::new();
    // files using a template this version does not run: one line per template at the end, not one per file
    let mut unsupported: indexmap::IndexMap<String, Vec<PathBuf>> = Default::default();
    let mut check = |label: &str,
                     what: &str,
                     items: &[&PathBuf],
                     f: &mut dyn FnMut(&Path) -> Result<(), ConfigErrors>| {
        if items.is_empty() {
            return;
        }
        let mut bad = 0;
        for p in items {
            let (status, problems) = match f(p) {
                Ok(()) => ("ok", Vec::new()),
                Err(e) if test::is_unsupported(&e) => {
                    let t = test::unsupported_template(&e).unwrap_or_else(|| "?".into());
                    unsupported.entry(t).or_default().push(p.to_path_buf());
                    ("unsupported", e.to_json())
                }
                Err(e) => {
                    e.report();
                    bad += 1;
                    ("error", e.to_json())
                }
            };
            results.push(serde_json::json!({
                "file": p.display().to_string(),
                "kind": label,
                "status": status,
                "problems": problems,
            }));
        }
        total += items.len();
        failed += bad;
        if bad == 0 {
            info!("Checked {label}: {}, all passed", items.len());
        } else {
            error!("{bad} out of {} {what} have issues.", items.len());
        }
    };

    check(
        "systems",
        "system configurations",
        &of(Class::System),
        &mut |p| system::load(p).map(|_| ()),
    );

    let test_files: Vec<PathBuf> = match &args.tests_dir {
        Some(d) => crate::scenario::library_files(d),
        None => {
            if !of(Class::Scenario).is_empty() {
                // what the README's own `verify-configs conf/` does: said, not warned of
                crate::info!(
                    "No --tests-dir given: scenarios are checked against every test TOML found in the directory"
                );
            }
            of(Class::Test).into_iter().cloned().collect()
        }
    };
    let test_refs: Vec<&PathBuf> = test_files.iter().collect();
    // one library per directory: a name given twice in one tests directory is an error (as a run would say)
    let mut libraries: std::collections::HashMap<PathBuf, TestLibrary> = Default::default();
    check("tests", "test configurations", &test_refs, &mut |p| {
        let raw = test::load_raw(p)?;
        crate::workloads::decode_test(&raw.node, "").map(|_| ())?;
        let mut dup = ConfigErrors::default();
        libraries
            .entry(p.parent().map(Path::to_path_buf).unwrap_or_default())
            .or_default()
            .add(raw, &mut dup);
        dup.into_result(())
    });

    let library = build_library(&test_files);
    // without --tests-dir, a scenario's own tests (`<dir>/test/` beside its `<dir>/test_scenario/`) come first: two
    // suites may name a test alike (CloudAI's `sglang` of the SGLang template and of AI Dynamo)
    let mut own_libraries: std::collections::HashMap<PathBuf, TestLibrary> = Default::default();
    let hooks = hook_root.as_deref().map(HookLibrary::load);
    check(
        "scenarios",
        "test scenarios",
        &of(Class::Scenario),
        &mut |p| {
            let file = match scen::load_lenient(p) {
                (Some(f), e) if !e.has_errors() => f,
                (Some(f), mut e) => {
                    e.0.extend(crate::scenario::entry_errors(f, &library, None));
                    return Err(e);
                }
                (None, e) => return Err(e),
            };
            let hooks = match &hooks {
                Some(Ok(h)) => Some(h),
                Some(Err(e)) if file.pre_test.is_some() || file.post_test.is_some() => {
                    return Err(ConfigErrors(e.0.clone()));
                }
                _ => None,
            };
            let own = p
                .parent()
                .and_then(Path::parent)
                .map(|d| d.join("test"))
                .filter(|d| args.tests_dir.is_none() && d.is_dir());
            let library = match own {
                Some(d) => own_libraries.entry(d.clone()).or_insert_with(|| {
                    let (mut files, others): (Vec<PathBuf>, Vec<PathBuf>) =
                        test_files.iter().cloned().partition(|f| f.starts_with(&d));
                    files.extend(others);
                    build_library(&files)
                }),
                None => &library,
            };
            crate::scenario::resolve(&file, library, hooks, None).map(|_| ())
        },
    );

    let hook_tests: Vec<&PathBuf> = of(Class::HookTest);
    check(
        "hook tests",
        "hook test configurations",
        &hook_tests,
        &mut |p| {
            let raw = test::load_raw(p)?;
            crate::workloads::decode_test(&raw.node, "").map(|_| ())
        },
    );
    check("hooks", "hook scenarios", &of(Class::Hook), &mut |p| {
        let file = scen::load(p)?;
        let dir = hook_root.as_deref().map(|r| r.join("test"));
        let lib = dir
            .filter(|d| d.is_dir())
            .map(|d| build_library(&crate::scenario::library_files(&d)))
            .unwrap_or_default();
        crate::scenario::resolve(&file, &lib, None, None).map(|_| ())
    });

    for p in of(Class::Unknown) {
        total += 1;
        failed += 1;
        error!("Unknown configuration file '{}': could not classify as system, test, scenario, or hook.", p.display());
        results.push(serde_json::json!({
            "file": p.display().to_string(),
            "kind": "unknown",
            "status": "error",
            "problems": [{"file": p.display().to_string(), "message":
                "could not classify as system, test, scenario, or hook"}],
        }));
    }
    for (t, files) in &unsupported {
        let mut uniq = files.clone();
        uniq.dedup();
        warn!(
            "unsupported test template {t}: {} file(s) use it (first: {}); they are checked but cannot run with this \
             version, which runs {}",
            uniq.len(),
            uniq[0].display(),
            crate::workloads::names().join(", ")
        );
    }
    if args.json {
        let doc = serde_json::json!({ "checked": total, "failed": failed, "files": results });
        crate::log::print(&serde_json::to_string_pretty(&doc).unwrap_or_default());
    }
    if failed == 0 {
        info!("Checked {total} configuration files, all passed");
        0
    } else {
        error!("{failed} out of {total} configuration files have issues.");
        1
    }
}

/// A test library from files, skipping those that fail (they are reported by the tests check).
fn build_library(files: &[PathBuf]) -> TestLibrary {
    let mut lib = TestLibrary::default();
    let mut ignored = ConfigErrors::default();
    for f in files {
        if let Ok(raw) = test::load_raw(f) {
            lib.add(raw, &mut ignored);
        }
    }
    lib
}
