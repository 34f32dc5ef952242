//! Test definitions of a directory and hook scenarios, indexed by name.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use indexmap::IndexMap;

use super::{resolve, HookScenario};
use crate::config::test::{self, RawTest};
use crate::config::{ConfigError, ConfigErrors};

#[derive(Default)]
pub struct TestLibrary {
    dir: Option<PathBuf>,
    tests: IndexMap<String, RawTest>,
}

/// `*.toml` directly inside `dir`, sorted for a stable order.
pub fn toml_files(dir: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let rd = std::fs::read_dir(dir).map_err(|e| {
        ConfigError::file(dir, format!("cannot read directory: {e}"))
            .with_hint("check --tests-dir / --hook-dir")
    })?;
    let mut files: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .filter(|p| match std::fs::metadata(p) {
            Ok(m) => m.is_file(),
            Err(e) => {
                // a symlink loop or a dangling link: say so instead of silently missing a test
                crate::warn!("{}: skipped, it cannot be read: {e}", p.display());
                false
            }
        })
        .collect();
    files.sort();
    Ok(files)
}

impl TestLibrary {
    /// Reads every test of `dir` (not recursive, like CloudAI). Files whose template we do not implement are kept
    /// out quietly: a scenario that uses one gets the error.
    pub(crate) fn load_dir(dir: &Path) -> Result<Self, ConfigErrors> {
        let mut lib = TestLibrary {
            dir: Some(dir.to_path_buf()),
            tests: IndexMap::new(),
        };
        let mut errors = ConfigErrors::default();
        for f in toml_files(dir)? {
            match test::load_raw(&f) {
                Ok(raw) => {
                    if let Err(e) = crate::workloads::decode_test(&raw.node, "") {
                        if !test::is_unsupported(&e) {
                            errors.0.extend(e.0);
                            continue;
                        }
                    }
                    lib.add(raw, &mut errors);
                }
                Err(e) => errors.0.extend(e.0),
            }
        }
        errors.into_result(lib)
    }

    /// Adds a test; a second test with the same name is an error naming both files.
    pub fn add(&mut self, raw: RawTest, errors: &mut ConfigErrors) {
        if let Some(first) = self.tests.get(&raw.name) {
            let loc = raw
                .node
                .as_table()
                .and_then(|t| t.entries.get("name"))
                .map_or(raw.node.loc.clone(), |e| e.node.loc.clone());
            errors.push(
                ConfigError::new(loc, "name", format!("duplicate test name '{}'", raw.name))
                    .with_hint(format!(
                        "{} defines it too; test names must be unique",
                        first.file.display()
                    )),
            );
            return;
        }
        self.tests.insert(raw.name.clone(), raw);
    }

    pub fn get(&self, name: &str) -> Option<&RawTest> {
        self.tests.get(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tests.keys().map(String::as_str)
    }

    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    pub(crate) fn dir_display(&self) -> String {
        self.dir
            .as_ref()
            .map_or("not given".into(), |d| d.display().to_string())
    }
}

pub struct HookLibrary {
    hooks: IndexMap<String, Arc<HookScenario>>,
}

impl HookLibrary {
    /// Hook scenarios are `<dir>/*.toml`, resolved against the hook tests in `<dir>/test/*.toml` only.
    pub fn load(dir: &Path) -> Result<Self, ConfigErrors> {
        let mut hooks = IndexMap::new();
        if !dir.is_dir() {
            return Ok(Self { hooks });
        }
        let test_dir = dir.join("test");
        let tests = if test_dir.is_dir() {
            TestLibrary::load_dir(&test_dir)?
        } else {
            TestLibrary::default()
        };
        let mut errors = ConfigErrors::default();
        for f in toml_files(dir)? {
            let file = match crate::config::scenario::load(&f) {
                Ok(s) => s,
                Err(e) => {
                    errors.0.extend(e.0);
                    continue;
                }
            };
            match resolve(&file, &tests, None, None) {
                Ok(s) => {
                    hooks.insert(
                        s.name.clone(),
                        Arc::new(HookScenario {
                            name: s.name,
                            test_runs: s.test_runs,
                        }),
                    );
                }
                Err(e) => errors.0.extend(e.0),
            }
        }
        errors.into_result(Self { hooks })
    }

    pub fn get(&self, name: &str) -> Option<Arc<HookScenario>> {
        self.hooks.get(name).cloned()
    }

    pub fn names(&self) -> Vec<String> {
        self.hooks.keys().cloned().collect()
    }
}
