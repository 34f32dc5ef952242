//! Resolves a scenario file against the test definitions and hooks into runnable `TestRun`s.

pub mod dse;
pub mod dump;
mod library;
pub mod limits;
pub mod script;
mod test_run;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::node::{Kind, Node};
use crate::config::scenario::{DepKind, ScenarioFile, TestEntry};
use crate::config::system::SystemConfig;
use crate::config::test;
use crate::config::{ConfigError, ConfigErrors};
use crate::workloads;

pub use library::{toml_files, HookLibrary, TestLibrary};
pub use test_run::TestRun;

/// `*.toml` directly inside `dir` (empty when it cannot be read).
pub(crate) fn library_files(dir: &Path) -> Vec<PathBuf> {
    toml_files(dir).unwrap_or_default()
}

#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: String,
    pub file: PathBuf,
    pub job_status_check: bool,
    pub test_runs: Vec<Arc<TestRun>>,
    pub pre_test: Option<Arc<HookScenario>>,
    pub post_test: Option<Arc<HookScenario>>,
    /// The scenario's `[reports.<name>]` tables (checked against the registry at load).
    pub reports: Option<crate::config::node::Node>,
}

impl Scenario {
    /// Whether report `name` is enabled: the scenario's `[reports.<name>] enable`, else the (Slurm) system's, else
    /// on (CloudAI's precedence and default).
    pub(crate) fn report_enabled(
        &self,
        system: &crate::config::system::SystemConfig,
        name: &str,
    ) -> bool {
        let from = |n: Option<&crate::config::node::Node>| {
            let t = n?.as_table()?.get(name)?.as_table()?.get("enable")?;
            match t.kind {
                crate::config::node::Kind::Bool(b) => Some(b),
                _ => None,
            }
        };
        from(self.reports.as_ref())
            .or_else(|| from(system.kind.reports()))
            .unwrap_or(true)
    }
}

#[derive(Debug)]
pub struct HookScenario {
    pub name: String,
    pub test_runs: Vec<Arc<TestRun>>,
}

/// Resolves every `[[Tests]]` entry. `system` is `None` when verifying configs without a system.
pub fn resolve(
    file: &ScenarioFile,
    tests: &TestLibrary,
    hooks: Option<&HookLibrary>,
    system: Option<&SystemConfig>,
) -> Result<Scenario, ConfigErrors> {
    let mut errors = ConfigErrors::default();
    let pre_test = hook(file.pre_test.as_ref(), hooks, "pre_test", &mut errors);
    let post_test = hook(file.post_test.as_ref(), hooks, "post_test", &mut errors);
    let mut runs = Vec::new();
    // each entry's start_post_comp dependency, by id (the first entry of an id, as a lookup by id finds it): one
    // pass, so following the chains stays linear in the entries
    let mut post_comp_of: std::collections::HashMap<&str, Option<&str>> = Default::default();
    for t in &file.tests {
        post_comp_of.entry(t.id.as_str()).or_insert_with(|| {
            t.dependencies
                .iter()
                .find(|d| d.kind == DepKind::StartPostComp)
                .map(|d| d.id.as_str())
        });
    }
    let post_comp = |id: &str| post_comp_of.get(id).copied().flatten().map(str::to_string);
    for entry in &file.tests {
        let mut origins: Vec<&Path> = tests.dir().into_iter().collect();
        origins.push(&file.file);
        match resolve_entry(entry, tests, system, &origins) {
            Ok(mut r) => {
                r.pre_test = pre_test.clone();
                r.post_test = post_test.clone();
                let mut next = post_comp(&r.id);
                while let Some(id) =
                    next.filter(|id| !r.post_comp_chain.contains(id) && *id != r.id)
                {
                    next = post_comp(&id);
                    r.post_comp_chain.push(id);
                }
                if let Some(why) = r.workload.needs_post_comp(&r.test) {
                    if r.post_comp_chain.is_empty() {
                        errors.push(
                            ConfigError::new(entry.loc.clone(), format!("Tests.{}", entry.index), why)
                                .with_hint("add [[Tests.dependencies]] type = \"start_post_comp\", id = \"<the benchmark's id>\""),
                        );
                    }
                }
                runs.push(Arc::new(r));
            }
            Err(e) => errors.0.extend(e.0),
        }
    }
    let dse: Vec<&Arc<TestRun>> = runs.iter().filter(|r| r.is_dse()).collect();
    if !dse.is_empty() && dse.len() != runs.len() {
        let first = file.tests.iter().find(|t| t.id == dse[0].id).unwrap();
        errors.push(
            ConfigError::new(first.loc.clone(), format!("Tests.{}", first.index), "mixing DSE and non-DSE jobs is not allowed")
                .with_hint("a list in cmd_args or extra_env_vars makes a test a sweep; put sweeps in their own scenario"),
        );
    }
    for r in &dse {
        if !r.dependencies.is_empty() {
            let e = file.tests.iter().find(|t| t.id == r.id).unwrap();
            errors.push(ConfigError::new(
                e.loc.clone(),
                format!("Tests.{}.dependencies", e.index),
                "dependencies are not supported for DSE jobs: all cases run one after another",
            ));
        }
    }
    if !errors.0.is_empty() {
        // "Unsupported template" is only a warning when verifying; a run cannot skip a test.
        if system.is_some() {
            errors.0.iter_mut().for_each(|e| e.warning = false);
        }
        return Err(errors);
    }
    Ok(Scenario {
        name: file.name.clone(),
        file: file.file.clone(),
        job_status_check: file.job_status_check,
        test_runs: runs,
        pre_test,
        post_test,
        reports: file.reports.clone(),
    })
}

fn hook(
    name: Option<&(String, crate::config::node::Loc)>,
    hooks: Option<&HookLibrary>,
    field: &str,
    errors: &mut ConfigErrors,
) -> Option<Arc<HookScenario>> {
    let (name, loc) = name?;
    let found = hooks.and_then(|h| h.get(name));
    if found.is_none() {
        let known = hooks.map(|h| h.names()).unwrap_or_default();
        let hint = match crate::config::error::did_you_mean(name, known.iter().map(String::as_str))
        {
            Some(s) => format!("did you mean '{s}'?"),
            None => {
                "hooks are read from --hook-dir (default conf/hook under the working directory): \
                     <hook-dir>/*.toml are hook scenarios, <hook-dir>/test/*.toml their tests"
                    .to_string()
            }
        };
        errors.push(
            ConfigError::new(loc.clone(), field, format!("hook '{name}' not found"))
                .with_hint(hint),
        );
    }
    found
}

/// `origins`: where the configs come from (tests directory, scenario file), to find a workload's launcher file.
fn resolve_entry(
    entry: &TestEntry,
    tests: &TestLibrary,
    system: Option<&SystemConfig>,
    origins: &[&Path],
) -> Result<TestRun, ConfigErrors> {
    let field = format!("Tests.{}", entry.index);
    let merged: Node = match &entry.test_name {
        Some((name, loc)) => {
            let Some(raw) = tests.get(name) else {
                let hint = match crate::config::error::did_you_mean(name, tests.names()) {
                    Some(s) => format!("did you mean '{s}'? (names come from the `name` field inside each test file)"),
                    None => format!(
                        "check --tests-dir ({}) and that a test file there has name = \"{name}\"",
                        tests.dir_display()
                    ),
                };
                return Err(ConfigError::new(
                    loc.clone(),
                    format!("{field}.test_name"),
                    format!("test '{name}' is not defined"),
                )
                .with_hint(hint)
                .into());
            };
            let mut base = raw.node.clone();
            base.merge(&overrides_to_merge(&entry.overrides));
            base
        }
        None => entry.overrides.clone(),
    };
    let def = crate::workloads::decode_test(&merged, "").map_err(|mut e| {
        if test::is_unsupported(&e) {
            // Point at the scenario entry, not at the test file that names the template.
            let loc = entry
                .test_name
                .as_ref()
                .map_or(entry.loc.clone(), |(_, l)| l.clone());
            for err in &mut e.0 {
                err.loc = loc.clone();
                err.field = field.clone();
                err.message = format!("test '{}' uses an {}", entry.id, err.message);
            }
        }
        e
    })?;
    let workload = workloads::find(&def.test_template_name).expect("decode checked the template");
    let mut def = def;
    workload.derive(&mut def, system.and_then(|s| s.kind.tasks_per_node()));
    if entry.test_name.is_some() {
        workload.reread(&mut def);
    }
    if let Some(spec) = workload.script() {
        let src = script::locate(&spec, origins);
        let installed = match system {
            _ if spec.in_place => src.clone(),
            Some(s) => s.install_path.join(spec.name),
            None => PathBuf::from(spec.name),
        };
        def.script = Some(test::ScriptFile { src, installed });
    }
    for (path, spec) in workload.scripts(&def) {
        let src = script::locate(&spec, origins);
        let installed = system.map_or_else(
            || PathBuf::from(spec.name),
            |s| s.install_path.join(spec.name),
        );
        let file = [("src", src), ("_installed_path", installed)]
            .into_iter()
            .map(|(k, p)| {
                let p = crate::config::args::pure_path(&p.display().to_string());
                (k.to_string(), crate::config::args::ArgValue::Path(p))
            })
            .collect();
        dse::set_path(
            &mut def.cmd_args.values,
            path,
            crate::config::args::ArgValue::Table(file),
        );
    }
    if let Some(sys) = system {
        for g in &mut def.git_repos {
            g.installed = Some(crate::config::test::repo_dir(
                &sys.install_path,
                &g.url,
                &g.commit,
            ));
        }
        workload.record_installed(&mut def, &sys.install_path);
        let sched = sys.kind.scheduler();
        if !workload.schedulers().contains(&sched) {
            return Err(ConfigError::new(
                entry.loc.clone(),
                field,
                format!(
                    "test template {} cannot run on a {sched} system",
                    def.test_template_name
                ),
            )
            .with_hint(format!(
                "{} runs on: {}",
                def.test_template_name,
                workload.schedulers().join(", ")
            ))
            .into());
        }
    }
    let mut problems = ConfigErrors::default();
    limits::check(entry, &def, system, &mut problems);
    if problems.has_errors() {
        return Err(problems);
    }
    let num_nodes = if entry.nodes.is_empty() {
        entry.num_nodes.first().copied().unwrap_or(1)
    } else {
        count_nodes(&entry.nodes).unwrap_or(entry.num_nodes[0])
    };
    let run = TestRun {
        id: entry.id.clone(),
        test: def,
        workload,
        num_nodes,
        nodes: entry.nodes.clone(),
        exclude_nodes: entry.exclude_nodes.clone(),
        iterations: entry.iterations,
        time_limit: entry.time_limit,
        max_pending_time: entry.max_pending_time,
        dependencies: entry.dependencies.clone(),
        extra_srun_args: entry.extra_srun_args.clone(),
        weight: entry.weight,
        sol: entry.sol,
        ideal_perf: entry.ideal_perf,
        pre_test: None,
        post_test: None,
        num_nodes_sweep: if entry.num_nodes_list {
            entry.num_nodes.clone()
        } else {
            Vec::new()
        },
        step: 0,
        gpus_per_node: system.and_then(|s| s.kind.gpus_per_node()),
        tasks_per_node: system.and_then(|s| s.kind.tasks_per_node()),
        ranks_are_tasks: system.is_some_and(|s| s.kind.ranks_are_tasks()),
        fabric: system.map(|s| s.fabric.clone()).unwrap_or_default(),
        nodes_given: entry.num_nodes_set || !entry.nodes.is_empty(),
        scheduler: system.map_or("", |s| s.kind.scheduler()),
        post_comp_chain: Vec::new(),
    };
    let mut run = run;
    run.apply_nodes_needed();
    // a sweep's values are checked per step, when they are single values
    if system.is_some() && !run.is_dse() {
        let mut errs = ConfigErrors::default();
        for p in run.workload.check(&run.test, &run.placement()) {
            errs.push(ConfigError::new(entry.loc.clone(), field.clone(), p));
        }
        if errs.has_errors() {
            return Err(errs);
        }
    }
    Ok(run)
}

/// CloudAI merges `extra_env_vars` only when the entry sets a non-empty table.
fn overrides_to_merge(overrides: &Node) -> Node {
    let mut o = overrides.clone();
    if let Kind::Table(t) = &mut o.kind {
        t.entries.retain(|k, e| {
            !(k == "extra_env_vars"
                && matches!(&e.node.kind, Kind::Table(x) if x.entries.is_empty()))
        });
    }
    o
}

/// Node count of a `nodes` list: host names and ranges count one each, `partition:group:N` counts N.
fn count_nodes(nodes: &[String]) -> Option<u64> {
    let mut n = 0;
    for spec in nodes {
        let parts: Vec<&str> = spec.split(':').collect();
        n += match parts.as_slice() {
            [_, _, count] => count.parse::<u64>().ok()?,
            _ => crate::util::nodelist::expand(spec)?.len() as u64,
        };
    }
    Some(n)
}

/// What resolving a scenario's entries finds (unknown test names, templates the system cannot run, limits),
/// for a scenario that already has other errors: every problem is reported in one pass.
pub(crate) fn entry_errors(
    file: crate::config::scenario::ScenarioFile,
    tests: &TestLibrary,
    system: Option<&SystemConfig>,
) -> Vec<ConfigError> {
    let entries_only = crate::config::scenario::ScenarioFile {
        pre_test: None,
        post_test: None,
        ..file
    };
    match resolve(&entries_only, tests, None, system) {
        Ok(_) => Vec::new(),
        Err(more) => more.0.into_iter().filter(|e| !e.warning).collect(),
    }
}

/// Loads the system, test library, hooks (only when the scenario uses them) and scenario, and resolves them.
/// What completes a system from its cluster before a scenario is resolved against it.
pub(crate) type Survey<'a> = dyn Fn(&mut SystemConfig) -> Result<(), ConfigErrors> + 'a;

pub struct Inputs<'a> {
    /// `None` selects the built-in standalone system.
    pub system: Option<&'a Path>,
    pub tests_dir: Option<&'a Path>,
    pub scenario: &'a Path,
    pub hook_dir: Option<&'a Path>,
    /// Completes the system from what its cluster offers before the scenario is resolved against it
    /// (`systems::survey`); None: the file as written.
    pub survey: Option<&'a Survey<'a>>,
}

/// Which of the three schemas a TOML file is, by the key only that schema has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FileKind {
    System,
    Scenario,
    Test,
}

impl FileKind {
    fn describe(self) -> (&'static str, &'static str, &'static str) {
        match self {
            FileKind::System => ("a system file", "`scheduler`", "--system-config"),
            FileKind::Scenario => ("a test scenario", "[[Tests]]", "--test-scenario"),
            FileKind::Test => (
                "a test definition",
                "`test_template_name`",
                "a file in --tests-dir",
            ),
        }
    }
}

/// An error when `path` is plainly another kind of file than the flag it was given to wants.
fn wrong_kind(path: &Path, want: FileKind) -> Option<ConfigError> {
    let node = crate::config::node::load(path, "config").ok()?;
    let t = node.as_table()?;
    let is = if t.get("scheduler").is_some() {
        FileKind::System
    } else if t.get("Tests").is_some() {
        FileKind::Scenario
    } else if t.get("test_template_name").is_some() {
        FileKind::Test
    } else {
        return None;
    };
    if is == want {
        return None;
    }
    let (what, key, flag) = is.describe();
    let (_, _, wanted_flag) = want.describe();
    Some(
        ConfigError::file(
            path,
            format!("this is {what} (it has {key}), but it was given as {wanted_flag}"),
        )
        .with_hint(format!("pass it as {flag}")),
    )
}

/// Whether the system config path came from CLOUDAI_SYSTEM_CONFIG rather than the command line.
fn system_from_env(p: &Path) -> bool {
    std::env::var_os("CLOUDAI_SYSTEM_CONFIG").is_some_and(|v| Path::new(&v) == p)
        && !std::env::args().any(|a| a == "--system-config" || a.starts_with("--system-config="))
}

pub fn load_all(inputs: &Inputs) -> Result<(SystemConfig, Scenario), ConfigErrors> {
    let mut errors = ConfigErrors::default();
    if let Some(d) = inputs.hook_dir.filter(|d| !d.is_dir()) {
        errors.push(
            ConfigError::file(
                d,
                if d.exists() {
                    "--hook-dir is not a directory"
                } else {
                    "--hook-dir does not exist"
                },
            )
            .with_hint("give the directory holding hook scenarios (and their tests in test/), like conf/hook"),
        );
    }
    // a file given in the other's place: one error that says so, instead of its every missing field
    let swapped: Vec<ConfigError> = [
        inputs.system.map(|p| (p, FileKind::System)),
        Some((inputs.scenario, FileKind::Scenario)),
    ]
    .into_iter()
    .flatten()
    .filter_map(|(p, want)| wrong_kind(p, want))
    .collect();
    if !swapped.is_empty() {
        return Err(ConfigErrors(swapped));
    }
    let system = match inputs.system {
        Some(p) => crate::config::system::load(p).map_err(|mut e| {
            if system_from_env(p) {
                for err in &mut e.0 {
                    err.hint = Some(format!(
                        "this path comes from the environment variable CLOUDAI_SYSTEM_CONFIG (no --system-config was \
                         given); fix or unset it{}",
                        err.hint.as_deref().map(|h| format!("; {h}")).unwrap_or_default()
                    ));
                }
            }
            e
        }),
        None => crate::config::system::builtin_standalone(),
    };
    let system = system.map_err(|e| errors.0.extend(e.0)).ok();
    let tests = match inputs.tests_dir {
        Some(d) => TestLibrary::load_dir(d)
            .map_err(|e| errors.0.extend(e.0))
            .ok(),
        None => Some(TestLibrary::default()),
    };
    let (file, file_errors) = crate::config::scenario::load_lenient(inputs.scenario);
    errors.0.extend(file_errors.0);
    let (Some(mut system), Some(tests), Some(file)) = (system, tests, file) else {
        return Err(errors);
    };
    if let (Some(survey), false) = (inputs.survey, errors.has_errors()) {
        survey(&mut system)?;
    }
    if errors.has_errors() {
        // the entries that could be read still name their tests: report those problems in the same pass
        errors.0.extend(entry_errors(file, &tests, Some(&system)));
        return Err(errors);
    }
    let hooks = if file.pre_test.is_some() || file.post_test.is_some() {
        let dir = inputs
            .hook_dir
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("conf/hook"));
        Some(HookLibrary::load(&dir)?)
    } else {
        None
    };
    let scenario = resolve(&file, &tests, hooks.as_ref(), Some(&system))?;
    Ok((system, scenario))
}
