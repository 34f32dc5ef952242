//! Test scenario TOML: `[[Tests]]` entries, their overrides, dependencies and hooks (not yet resolved against
//! test definitions; see `crate::scenario`).

use std::path::{Path, PathBuf};

use super::decode::{as_int, Ctx, View};
use super::error::{did_you_mean, ConfigErrors};
use super::node::{self, Kind, Loc, Node, Table};

#[derive(Clone, Debug)]
pub struct ScenarioFile {
    pub file: PathBuf,
    pub name: String,
    pub sol_path: Option<String>,
    pub job_status_check: bool,
    pub tests: Vec<TestEntry>,
    pub pre_test: Option<(String, Loc)>,
    pub post_test: Option<(String, Loc)>,
    pub reports: Option<Node>,
}

#[derive(Clone, Debug)]
pub struct TestEntry {
    pub index: usize,
    pub id: String,
    pub loc: Loc,
    pub test_name: Option<(String, Loc)>,
    /// A list makes it a DSE sweep over node counts.
    pub num_nodes: Vec<u64>,
    /// `num_nodes` was written as a list (even of one value).
    pub num_nodes_list: bool,
    pub nodes: Vec<String>,
    pub exclude_nodes: Vec<String>,
    pub weight: i64,
    pub iterations: u64,
    pub sol: Option<f64>,
    pub ideal_perf: f64,
    pub time_limit: Option<u64>,
    /// `time_limit` as written (for the out-of-range warning).
    pub time_limit_text: Option<String>,
    /// Whether `num_nodes` was written (it is ignored when `nodes` is set).
    pub num_nodes_set: bool,
    /// Seconds a job of this test may wait in the queue (our field; the system's value otherwise).
    pub max_pending_time: Option<u64>,
    pub dependencies: Vec<Dependency>,
    pub extra_srun_args: Option<String>,
    /// Test-definition fields set in this entry, to merge over the referenced test (or the whole inline test).
    pub overrides: Node,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DepKind {
    StartPostInit,
    StartPostComp,
    EndPostComp,
}

impl DepKind {
    pub(crate) const NAMES: [&'static str; 3] =
        ["start_post_init", "start_post_comp", "end_post_comp"];

    pub fn label(self) -> &'static str {
        match self {
            DepKind::StartPostInit => "Start Post Init",
            DepKind::StartPostComp => "Start Post Comp",
            DepKind::EndPostComp => "End Post Comp",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Dependency {
    pub kind: DepKind,
    pub id: String,
    pub loc: Loc,
}

/// `[[Tests]]` entries in one scenario: more would exhaust memory before the scheduler says no.
pub(crate) const MAX_TESTS: usize = 10_000;

const SCENARIO_FIELDS: &[&str] = &[
    "name",
    "sol_path",
    "job_status_check",
    "Tests",
    "pre_test",
    "post_test",
    "reports",
];

const RUN_FIELDS: &[&str] = &[
    "id",
    "test_name",
    "num_nodes",
    "nodes",
    "exclude_nodes",
    "weight",
    "iterations",
    "sol",
    "ideal_perf",
    "time_limit",
    "max_pending_time",
    "dependencies",
    "extra_srun_args",
];

/// Fields of `[[Tests]]` that override (or inline) the test definition.
pub(crate) const OVERRIDE_FIELDS: &[&str] = &[
    "name",
    "description",
    "test_template_name",
    "cmd_args",
    "dse_excluded_args",
    "extra_env_vars",
    "extra_container_mounts",
    "git_repos",
    "nsys",
    "agent",
    "agent_steps",
    "agent_metrics",
    "agent_reward_function",
    "agent_config",
];

pub fn load(path: &Path) -> Result<ScenarioFile, ConfigErrors> {
    let root = node::load(path, "test scenario")?;
    decode(&root, path)
}

/// As `load`, keeping what could be read beside the errors (see `decode_lenient`).
pub(crate) fn load_lenient(path: &Path) -> (Option<ScenarioFile>, ConfigErrors) {
    match node::load(path, "test scenario") {
        Ok(root) => decode_lenient(&root, path),
        Err(e) => (None, e.into()),
    }
}

pub fn decode(root: &Node, path: &Path) -> Result<ScenarioFile, ConfigErrors> {
    match decode_lenient(root, path) {
        (Some(f), e) if !e.has_errors() => Ok(f),
        (_, e) => Err(e),
    }
}

/// Reads a scenario as far as it can be read: the file (when its name and entries could be read) and every
/// problem found, so resolving it can report more problems (an unknown test name) in the same pass.
pub(crate) fn decode_lenient(root: &Node, path: &Path) -> (Option<ScenarioFile>, ConfigErrors) {
    let mut ctx = Ctx::new();
    let Some(v) = ctx.table(root, "") else {
        return (None, ctx.errors);
    };
    super::decode::reject_control_chars(&mut ctx, root, "");
    let name = v.req_str(&mut ctx, "name");
    if let (Some(n), Some(node)) = (&name, v.get("name")) {
        path_component(&mut ctx, node, "name", n);
    }
    let sol_path = v.opt_str(&mut ctx, "sol_path");
    let job_status_check = v.opt_bool(&mut ctx, "job_status_check").unwrap_or(true);
    let pre_test = v
        .opt_str(&mut ctx, "pre_test")
        .map(|s| (s, v.get("pre_test").unwrap().loc.clone()));
    let post_test = v
        .opt_str(&mut ctx, "post_test")
        .map(|s| (s, v.get("post_test").unwrap().loc.clone()));
    let reports = v.get("reports").cloned();
    if let Some(r) = &reports {
        super::system::check_reports(&mut ctx, r, "reports");
    }
    let mut tests = Vec::new();
    match v.get("Tests") {
        None => ctx.err(
            &v.loc,
            "Tests",
            "a scenario needs at least one [[Tests]] entry",
            Some("add [[Tests]] with `id` and `test_name`".into()),
        ),
        Some(n) => match &n.kind {
            Kind::Array(items) if items.len() > MAX_TESTS => ctx.err(
                &n.loc,
                "Tests",
                format!(
                    "{} [[Tests]] entries is more than the limit of {}",
                    items.len(),
                    MAX_TESTS
                ),
                Some("split the campaign into several scenarios".into()),
            ),
            Kind::Array(items) if !items.is_empty() => {
                for (i, it) in items.iter().enumerate() {
                    if let Some(tv) = ctx.table(it, &format!("Tests.{i}")) {
                        if let Some(e) = decode_entry(&mut ctx, &tv, i) {
                            tests.push(e);
                        }
                    }
                }
            }
            _ => ctx.type_err(n, "Tests", "a non-empty array of [[Tests]] tables"),
        },
    }
    v.done(&mut ctx, SCENARIO_FIELDS);
    check_ids(&mut ctx, &tests);
    let Some(name) = name else {
        return (None, ctx.errors);
    };
    let file = ScenarioFile {
        file: path.to_path_buf(),
        name,
        sol_path,
        job_status_check,
        tests,
        pre_test,
        post_test,
        reports,
    };
    (Some(file), ctx.errors)
}

/// A scenario name, test id or test name (hooks' output directories) names a directory of the results tree: it
/// must be one safe path component, or a crafted config could write outside the output directory.
pub(crate) fn path_component(ctx: &mut Ctx, node: &Node, field: &str, value: &str) {
    // names the tree itself uses beside the test directories
    const RESERVED: &[&str] = &[".cloudai", "summary.json", "leftovers.json", "debug.log"];
    let invisible = |c: char| {
        matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{2069}' | '\u{feff}' | '\u{00ad}')
    };
    let why = if value == "." || value == ".." {
        Some("is a relative directory name".to_string())
    } else if value.contains('/') {
        Some("contains '/'".into())
    } else if value.contains('\0') {
        Some("contains a NUL byte".into())
    } else if value.chars().any(char::is_control) {
        Some("contains a control character".into())
    } else if value.chars().any(invisible) {
        Some("contains an invisible or text-direction character (zero-width, bidi)".into())
    } else if value.len() > 200 {
        Some(format!(
            "is {} bytes long (a directory name may have 255, and cloudai adds to it)",
            value.len()
        ))
    } else if RESERVED.contains(&value) || value.ends_with(".tgz") || value.ends_with(".html") {
        Some("is a name the results tree itself uses".into())
    } else {
        None
    };
    if let Some(why) = why {
        ctx.err(
            &node.loc,
            field,
            format!("{value:?} {why}; it names a directory of the results tree"),
            Some("use letters, digits, '.', '_' and '-' (no path separators)".into()),
        );
    }
}

fn decode_entry(ctx: &mut Ctx, v: &View, index: usize) -> Option<TestEntry> {
    let id = v.req_str(ctx, "id");
    if let (Some(id), Some(n)) = (&id, v.get("id")) {
        if id.is_empty() {
            ctx.err(&n.loc, &v.field("id"), "must not be empty", None);
        } else {
            path_component(ctx, n, &v.field("id"), id);
        }
    }
    let test_name = v
        .opt_str(ctx, "test_name")
        .map(|s| (s, v.get("test_name").unwrap().loc.clone()));
    let inline_missing: Vec<&str> = ["test_template_name", "name", "description"]
        .into_iter()
        .filter(|k| !v.has(k))
        .collect();
    if test_name.is_none() && !inline_missing.is_empty() {
        ctx.err(
            &v.loc,
            &v.path,
            format!(
                "without 'test_name', these fields must be set: {}",
                inline_missing.join(", ")
            ),
            Some(
                "reference a test definition with `test_name = \"...\"`, or define the test inline"
                    .into(),
            ),
        );
    }
    if test_name.is_some() && v.has("test_template_name") {
        let loc = v.get("test_template_name").unwrap().loc.clone();
        ctx.err(
            &loc,
            &v.field("test_template_name"),
            "'test_template_name' must not be set if 'test_name' is set",
            Some("the template comes from the referenced test definition; remove this line".into()),
        );
    }
    let num_nodes = match v.get("num_nodes") {
        None => vec![1],
        Some(n) => match &n.kind {
            Kind::Array(items) => items
                .iter()
                .enumerate()
                .filter_map(|(i, it)| as_int(ctx, it, &format!("{}.{i}", v.field("num_nodes"))))
                .map(|x| x.max(0) as u64)
                .collect(),
            _ => match as_int(ctx, n, &v.field("num_nodes")) {
                Some(x) if x >= 1 => vec![x as u64],
                Some(x) => {
                    ctx.err(
                        &n.loc,
                        &v.field("num_nodes"),
                        format!("must be 1 or more, found {x}"),
                        None,
                    );
                    vec![1]
                }
                None => vec![1],
            },
        },
    };
    let time_limit = v.duration(ctx, "time_limit");
    if let (Some(0), Some(n)) = (time_limit, v.get("time_limit")) {
        ctx.err(
            &n.loc,
            &v.field("time_limit"),
            "a time limit of zero ends the test before it starts",
            Some(
                "give a positive duration like \"00:30:00\" or \"30m\", or leave time_limit out"
                    .into(),
            ),
        );
    }
    let max_pending_time = v.duration(ctx, "max_pending_time");
    let iterations = v.count(ctx, "iterations", 1);
    if iterations == 0 {
        let loc = v.get("iterations").unwrap().loc.clone();
        ctx.err(&loc, &v.field("iterations"), "must be 1 or more", None);
    }
    let dependencies = dependencies(ctx, v);
    let mut overrides = Table::default();
    for k in OVERRIDE_FIELDS {
        if let Some(e) = v.table.entries.get(*k) {
            overrides.entries.insert(k.to_string(), e.clone());
        }
    }
    let known: Vec<&str> = RUN_FIELDS.iter().chain(OVERRIDE_FIELDS).copied().collect();
    v.done(ctx, &known);
    Some(TestEntry {
        index,
        id: id?,
        loc: v.loc.clone(),
        test_name,
        num_nodes,
        nodes: v.str_list(ctx, "nodes"),
        exclude_nodes: v.str_list(ctx, "exclude_nodes"),
        weight: v.opt_int(ctx, "weight").unwrap_or(0),
        iterations: iterations.max(1),
        sol: v.opt_float(ctx, "sol"),
        ideal_perf: v.opt_float(ctx, "ideal_perf").unwrap_or(1.0),
        time_limit,
        time_limit_text: v.get("time_limit").and_then(|n| match &n.kind {
            Kind::Str(t) => Some(t.clone()),
            _ => None,
        }),
        num_nodes_set: v.has("num_nodes"),
        num_nodes_list: v
            .get("num_nodes")
            .is_some_and(|n| matches!(n.kind, Kind::Array(_))),
        max_pending_time,
        dependencies,
        extra_srun_args: v.opt_str(ctx, "extra_srun_args"),
        overrides: Node {
            kind: Kind::Table(overrides),
            loc: v.loc.clone(),
        },
    })
}

fn dependencies(ctx: &mut Ctx, v: &View) -> Vec<Dependency> {
    let mut out = Vec::new();
    let Some(n) = v.get("dependencies") else {
        return out;
    };
    let Kind::Array(items) = &n.kind else {
        ctx.type_err(
            n,
            &v.field("dependencies"),
            "an array of [[Tests.dependencies]] tables",
        );
        return out;
    };
    for (i, it) in items.iter().enumerate() {
        let Some(d) = ctx.table(it, &format!("{}.{i}", v.field("dependencies"))) else {
            continue;
        };
        let kind = d.req_str(ctx, "type").and_then(|t| {
            let k = match t.as_str() {
                "start_post_init" => DepKind::StartPostInit,
                "start_post_comp" => DepKind::StartPostComp,
                "end_post_comp" => DepKind::EndPostComp,
                other => {
                    let hint = match did_you_mean(other, DepKind::NAMES) {
                        Some(s) => format!("did you mean \"{s}\"?"),
                        None => format!("one of: {}", DepKind::NAMES.join(", ")),
                    };
                    let loc = d.get("type").unwrap().loc.clone();
                    ctx.err(
                        &loc,
                        &d.field("type"),
                        format!("unknown dependency type {other:?}"),
                        Some(hint),
                    );
                    return None;
                }
            };
            Some(k)
        });
        let id = d.req_str(ctx, "id");
        d.done(ctx, &["type", "id"]);
        if let (Some(kind), Some(id)) = (kind, id) {
            let loc = d.get("id").map_or(d.loc.clone(), |n| n.loc.clone());
            out.push(Dependency { kind, id, loc });
        }
    }
    out
}

/// Unique ids, dependencies that exist and are not the test itself, and no cycle among start dependencies
/// (CloudAI would wait forever on one).
fn check_ids(ctx: &mut Ctx, tests: &[TestEntry]) {
    let mut seen: Vec<&str> = Vec::new();
    for t in tests {
        if seen.contains(&t.id.as_str()) {
            ctx.err(
                &t.loc,
                &format!("Tests.{}.id", t.index),
                format!("duplicate test id '{}' in the test scenario", t.id),
                Some("every [[Tests]] entry needs its own id".into()),
            );
        }
        seen.push(&t.id);
    }
    let mut ids: Vec<&str> = tests.iter().map(|t| t.id.as_str()).collect();
    ids.dedup();
    for t in tests {
        for (j, d) in t.dependencies.iter().enumerate() {
            let field = format!("Tests.{}.dependencies.{j}.id", t.index);
            if d.id == t.id {
                ctx.err(
                    &d.loc,
                    &field,
                    format!("test '{}' must not depend on itself", t.id),
                    None,
                );
            } else if !ids.contains(&d.id.as_str()) {
                let hint = match did_you_mean(&d.id, ids.iter().copied()) {
                    Some(s) => format!("did you mean '{s}'?"),
                    None => format!("ids in this scenario: {}", ids.join(", ")),
                };
                ctx.err(
                    &d.loc,
                    &field,
                    format!("dependency '{}' not found for test '{}'", d.id, t.id),
                    Some(hint),
                );
            }
        }
    }
    if let Some(cycle) = find_cycle(tests) {
        let first = tests.iter().find(|t| t.id == cycle[0]).unwrap();
        ctx.err(
            &first.loc,
            &format!("Tests.{}.dependencies", first.index),
            format!("dependency cycle: {}", cycle.join(" -> ")),
            Some("start_post_init/start_post_comp dependencies must not form a loop: no test could ever start".into()),
        );
    }
}

fn find_cycle(tests: &[TestEntry]) -> Option<Vec<String>> {
    fn visit(
        i: usize,
        tests: &[TestEntry],
        state: &mut [u8],
        stack: &mut Vec<usize>,
    ) -> Option<Vec<String>> {
        state[i] = 1;
        stack.push(i);
        for d in tests[i]
            .dependencies
            .iter()
            .filter(|d| d.kind != DepKind::EndPostComp)
        {
            let Some(j) = tests.iter().position(|t| t.id == d.id) else {
                continue;
            };
            if j == i {
                continue;
            }
            if state[j] == 1 {
                let start = stack.iter().position(|&s| s == j).unwrap();
                let mut c: Vec<String> = stack[start..]
                    .iter()
                    .map(|&s| tests[s].id.clone())
                    .collect();
                c.push(tests[j].id.clone());
                return Some(c);
            }
            if state[j] == 0 {
                if let Some(c) = visit(j, tests, state, stack) {
                    return Some(c);
                }
            }
        }
        stack.pop();
        state[i] = 2;
        None
    }
    let mut state = vec![0u8; tests.len()];
    (0..tests.len()).find_map(|i| {
        if state[i] == 0 {
            visit(i, tests, &mut state, &mut Vec::new())
        } else {
            None
        }
    })
}
