//! Test definition TOML (one file = one test): template, typed `cmd_args`, env, mounts, repos, nsys, DSE knobs.

use std::path::{Path, PathBuf};

use indexmap::IndexMap;

use super::args::{self, ArgSpec, ArgValue, CmdArgs};
use super::decode::{as_str, Ctx, View};
use super::error::{did_you_mean, ConfigError, ConfigErrors};
use super::node::{Kind, Node};

/// Every template CloudAI registers, so that a config using one we lack is "unsupported", not "unknown".
pub(crate) const CLOUDAI_TEMPLATES: &[&str] = &[
    "UCCTest",
    "NcclTest",
    "DDLBTest",
    "ChakraReplay",
    "DeepEP",
    "MoEBenchmark",
    "Sleep",
    "NeMoLauncher",
    "NeMoRun",
    "JaxToolboxGPT",
    "JaxToolboxGrok",
    "JaxToolboxNemotron",
    "SlurmContainer",
    "MegatronRun",
    "MegatronBridge",
    "TritonInference",
    "NIXLBench",
    "NixlEP",
    "AIDynamo",
    "BashCmd",
    "NixlPerftest",
    "NIXLKVBench",
    "Aiconfigurator",
    "DynamoMocker",
    "OSUBench",
    "Fio",
    "sglang",
    "vllm",
];

/// Design-space exploration agents (`agent` of a test), with CloudAI's class name and what each does.
pub const AGENTS: &[&str] = &["grid_search"];
/// The reward functions a sweep's agent may score its steps with (CloudAI's registered names).
pub const REWARDS: &[&str] = &[
    "inverse",
    "negative",
    "identity",
    "ai_dynamo_weighted_normalized",
    "ai_dynamo_ratio_normalized",
    "ai_dynamo_log_scale",
];
pub(crate) const AGENT_CLASSES: &[(&str, &str)] = &[(
    "GridSearchAgent",
    "Visits every combination of the swept values, in the order CloudAI's grid search does.",
)];

#[derive(Clone, Debug, PartialEq)]
pub struct TestDefinition {
    pub name: String,
    pub description: String,
    pub test_template_name: String,
    pub cmd_args: CmdArgs,
    /// Values are strings, or lists of strings (a DSE sweep).
    pub extra_env_vars: IndexMap<String, ArgValue>,
    pub extra_cmd_args: IndexMap<String, String>,
    pub extra_container_mounts: Vec<String>,
    pub git_repos: Vec<GitRepo>,
    pub nsys: Option<Nsys>,
    pub predictor: Option<ArgValue>,
    pub training_report: Option<(u64, u64)>,
    pub dse_excluded_args: Vec<String>,
    pub agent: String,
    pub agent_steps: u64,
    pub agent_metrics: Vec<String>,
    pub agent_reward_function: String,
    pub agent_config: Option<ArgValue>,
    pub env_params: IndexMap<String, ArgValue>,
    /// A launcher file the workload runs from the install directory (NeMo-Run's `cloudai_nemorun.py`), once
    /// resolved against the configs' location.
    pub script: Option<ScriptFile>,
    /// The template's own fields ([`TemplateSchema::fields`]), in its order.
    pub template_fields: IndexMap<String, ArgValue>,
}

/// The environment variable that names CloudAI's NeMo-Run launcher (`cloudai_nemorun.py`) when it is not in the
/// CloudAI checkout the configs come from.
pub(crate) const NEMORUN_SCRIPT_ENV: &str = "CLOUDAI_NEMORUN_SCRIPT";

/// A file copied into the install directory before a run: where it comes from and where it lands (`install_path`
/// as the system's config writes it, joined with the file's name, as CloudAI records it).
#[derive(Clone, Debug, PartialEq)]
pub struct ScriptFile {
    pub src: PathBuf,
    pub installed: PathBuf,
}

impl TestDefinition {
    /// An empty definition of `template` (unit tests fill in its cmd_args).
    #[cfg(test)]
    pub(crate) fn for_tests(template: &str) -> Self {
        Self {
            name: "t".into(),
            description: "d".into(),
            test_template_name: template.into(),
            cmd_args: CmdArgs::default(),
            extra_env_vars: IndexMap::new(),
            extra_cmd_args: IndexMap::new(),
            extra_container_mounts: Vec::new(),
            git_repos: Vec::new(),
            nsys: None,
            predictor: None,
            training_report: None,
            dse_excluded_args: Vec::new(),
            agent: "grid_search".into(),
            agent_steps: 1,
            agent_metrics: vec!["default".into()],
            agent_reward_function: "inverse".into(),
            agent_config: None,
            env_params: IndexMap::new(),
            script: None,
            template_fields: IndexMap::new(),
        }
    }

    pub(crate) fn is_dse(&self) -> bool {
        !self.cmd_args.sweeps(&self.dse_excluded_args).is_empty()
            || self.extra_env_vars.values().any(ArgValue::is_sweep)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct GitRepo {
    pub url: String,
    pub commit: String,
    pub init_submodules: bool,
    /// Where it is cloned on the system the test runs on (`test-run.toml`'s `installed_path`); set when the test
    /// is resolved against a system.
    pub installed: Option<PathBuf>,
    pub mount_as: Option<String>,
}

/// The directory a repository is cloned into: `<install_path>/<repo name>__<commit>`.
pub(crate) fn repo_dir(install: &std::path::Path, url: &str, commit: &str) -> PathBuf {
    let name = url
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or("repo")
        .trim_end_matches(".git");
    install.join(format!("{name}__{commit}"))
}

#[derive(Clone, Debug, PartialEq)]
pub struct Nsys {
    pub enable: bool,
    pub nsys_binary: String,
    pub task: String,
    pub output: Option<String>,
    pub sample: Option<String>,
    pub trace: Option<String>,
    pub force_overwrite: Option<bool>,
    pub capture_range: Option<String>,
    pub capture_range_end: Option<String>,
    pub cuda_graph_trace: Option<String>,
    pub gpu_metrics_devices: Option<String>,
    pub extra_args: Vec<String>,
}

pub(crate) const TEST_FIELDS: &[&str] = &[
    "name",
    "description",
    "test_template_name",
    "cmd_args",
    "extra_env_vars",
    "extra_cmd_args",
    "extra_container_mounts",
    "git_repos",
    "nsys",
    "predictor",
    "training_report",
    "dse_excluded_args",
    "agent",
    "agent_steps",
    "agent_metrics",
    "agent_reward_function",
    "agent_config",
    "env_params",
    "script",
];

/// A test file as read from disk: its raw tree (scenarios merge their overrides into it) and its name.
#[derive(Clone, Debug)]
pub struct RawTest {
    pub file: PathBuf,
    pub name: String,
    pub node: Node,
}

pub(crate) fn load_raw(path: &Path) -> Result<RawTest, ConfigErrors> {
    let node = super::node::load(path, "test spec")?;
    let mut ctx = Ctx::new();
    let name = ctx
        .table(&node, "")
        .and_then(|v| v.req_str(&mut ctx, "name"));
    if let (Some(n), Some(at)) = (&name, node.as_table().and_then(|t| t.get("name"))) {
        super::scenario::path_component(&mut ctx, at, "name", n);
    }
    match name {
        Some(name) if !ctx.errors.has_errors() => Ok(RawTest {
            file: path.to_path_buf(),
            name,
            node,
        }),
        _ => Err(ctx.errors),
    }
}

/// Is this error only "we do not implement that template yet"?
pub(crate) fn is_unsupported(errs: &ConfigErrors) -> bool {
    !errs.0.is_empty() && errs.0.iter().all(|e| e.warning)
}

/// The template that this version does not run, when that is all these errors say.
pub(crate) fn unsupported_template(errs: &ConfigErrors) -> Option<String> {
    if !is_unsupported(errs) {
        return None;
    }
    errs.0.iter().find_map(|e| {
        e.message
            .split_once("unsupported test template ")
            .and_then(|(_, t)| t.split_whitespace().next())
            .map(str::to_string)
    })
}

/// What decoding a test needs to know of its template: the `cmd_args` schema and the template's own checks.
/// Workloads implement it and hand their registry to [`decode`], so config never depends on workloads.
pub trait TemplateSchema {
    fn template(&self) -> &'static str;
    fn args(&self) -> &'static [ArgSpec];
    /// Whether undeclared `cmd_args` keys mean something (NcclTest passes them on as flags). Where they would be
    /// silently ignored, they are rejected instead.
    fn extra_args(&self) -> bool {
        false
    }
    /// Fields of this template's test definition beside the common ones (SlurmContainer's `extra_srun_args`).
    fn fields(&self) -> &'static [ArgSpec] {
        &[]
    }
    /// Cross-field checks beyond the schema.
    fn validate(&self, _ctx: &mut Ctx, _v: &View, _args: &CmdArgs) {}
}

/// Validates a full test definition tree (a test file, an inline scenario entry, or a merge of both) against the
/// templates this build runs.
pub fn decode(
    node: &Node,
    path_prefix: &str,
    templates: &[&dyn TemplateSchema],
) -> Result<TestDefinition, ConfigErrors> {
    let names = || {
        templates
            .iter()
            .map(|t| t.template())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut ctx = Ctx::new();
    let Some(v) = ctx.table(node, path_prefix) else {
        return Err(ctx.errors);
    };
    super::decode::reject_control_chars(&mut ctx, node, path_prefix);
    let template = v.req_str(&mut ctx, "test_template_name");
    let Some(template) = template else {
        return Err(ctx.errors);
    };
    let Some(workload) = templates.iter().find(|t| t.template() == template) else {
        let loc = v
            .get("test_template_name")
            .map_or(node.loc.clone(), |n| n.loc.clone());
        let field = v.field("test_template_name");
        if CLOUDAI_TEMPLATES.contains(&template.as_str()) {
            let mut e =
                ConfigError::new(loc, field, format!("unsupported test template {template}"))
                    .with_hint(format!("this version of cloudai runs: {}", names()));
            e.warning = true;
            return Err(e.into());
        }
        let all: Vec<&str> = CLOUDAI_TEMPLATES.to_vec();
        let hint = match did_you_mean(&template, all) {
            Some(s) => format!("did you mean \"{s}\"?"),
            None => format!("supported templates: {}", names()),
        };
        return Err(
            ConfigError::new(loc, field, format!("unknown test template '{template}'"))
                .with_hint(hint)
                .into(),
        );
    };

    let name = v.req_str(&mut ctx, "name");
    let description = v.req_str(&mut ctx, "description");
    let cmd_args = args::decode(
        &mut ctx,
        v.get("cmd_args"),
        &v.loc,
        &v.field("cmd_args"),
        workload.args(),
        workload.extra_args(),
    );
    let extra_env_vars = env_vars(&mut ctx, &v, "extra_env_vars");
    let extra_cmd_args = v.str_map(&mut ctx, "extra_cmd_args");
    let extra_container_mounts = v.str_list(&mut ctx, "extra_container_mounts");
    let git_repos = git_repos(&mut ctx, &v);
    let nsys = v
        .get("nsys")
        .and_then(|n| nsys(&mut ctx, n, &v.field("nsys")));
    let predictor = v.get("predictor").and_then(ArgValue::from_node);
    let training_report = v.get("training_report").and_then(|n| {
        let t = ctx.table(n, &v.field("training_report"))?;
        let r = (
            t.count(&mut ctx, "exclude_start_steps", 5),
            t.count(&mut ctx, "exclude_post_profiling_steps", 2),
        );
        t.done(
            &mut ctx,
            &["exclude_start_steps", "exclude_post_profiling_steps"],
        );
        Some(r)
    });
    let dse_excluded_args = dse_excluded(&mut ctx, &v);
    let agent = v
        .opt_str(&mut ctx, "agent")
        .unwrap_or_else(|| "grid_search".into());
    if !AGENTS.contains(&agent.as_str()) {
        let loc = v.get("agent").map_or(v.loc.clone(), |n| n.loc.clone());
        ctx.err(
            &loc,
            &v.field("agent"),
            format!(
                "Agent {agent} is not registered. Available agents are: {}",
                AGENTS.join(", ")
            ),
            Some(
                "this version explores a sweep with the grid agent (every combination, in order)"
                    .into(),
            ),
        );
    }
    let agent_steps = v.count(&mut ctx, "agent_steps", 1);
    let agent_metrics = if v.has("agent_metrics") {
        v.str_list(&mut ctx, "agent_metrics")
    } else {
        vec!["default".into()]
    };
    let agent_reward_function = v
        .opt_str(&mut ctx, "agent_reward_function")
        .unwrap_or_else(|| "inverse".into());
    if !REWARDS.contains(&agent_reward_function.as_str()) {
        let loc = v
            .get("agent_reward_function")
            .map_or(v.loc.clone(), |n| n.loc.clone());
        ctx.err(
            &loc,
            &v.field("agent_reward_function"),
            format!(
                "Reward function '{agent_reward_function}' not found. Available functions: {}",
                REWARDS.join(", ")
            ),
            None,
        );
    }
    let agent_config = v.get("agent_config").and_then(ArgValue::from_node);
    let env_params = match v.get("env_params").and_then(ArgValue::from_node) {
        Some(ArgValue::Table(t)) => t,
        Some(_) => {
            ctx.type_err(
                v.get("env_params").unwrap(),
                &v.field("env_params"),
                "a table",
            );
            IndexMap::new()
        }
        None => IndexMap::new(),
    };
    // a launcher file as test-run.toml records it (`PosixPath('…')`); resolving a scenario finds it anew
    let script = v.get("script").and_then(|n| {
        let t = n.as_table()?;
        let path = |k: &str| match &t.get(k)?.kind {
            Kind::Str(s) => Some(PathBuf::from(
                s.strip_prefix("PosixPath(")
                    .and_then(|r| r.strip_suffix(')'))
                    .map_or(s.as_str(), |r| r.trim_matches(['\'', '"'])),
            )),
            _ => None,
        };
        Some(ScriptFile {
            src: path("src")?,
            installed: path("_installed_path")?,
        })
    });
    let template_fields = args::declared(&mut ctx, v.table, &v.loc, &v.path, workload.fields());
    let known: Vec<&str> = TEST_FIELDS
        .iter()
        .copied()
        .chain(workload.fields().iter().map(|f| f.name))
        .collect();
    v.done(&mut ctx, &known);
    workload.validate(&mut ctx, &v, &cmd_args);

    let (Some(name), Some(description)) = (name, description) else {
        return Err(ctx.errors);
    };
    ctx.finish(TestDefinition {
        name,
        description,
        test_template_name: template,
        cmd_args,
        extra_env_vars,
        extra_cmd_args,
        extra_container_mounts,
        git_repos,
        nsys,
        predictor,
        training_report,
        dse_excluded_args,
        agent,
        agent_steps,
        agent_metrics,
        agent_reward_function,
        agent_config,
        env_params,
        script,
        template_fields,
    })
}

fn env_vars(ctx: &mut Ctx, v: &View, key: &str) -> IndexMap<String, ArgValue> {
    let mut out = IndexMap::new();
    let Some(n) = v.get(key) else { return out };
    let Some(t) = ctx.table(n, &v.field(key)) else {
        return out;
    };
    for (k, e) in &t.table.entries {
        if !super::decode::env_name(ctx, &e.key_loc, &t.field(k), k) {
            continue;
        }
        let f = t.field(k);
        let val = match &e.node.kind {
            Kind::Array(items) => items
                .iter()
                .enumerate()
                .map(|(i, it)| as_str(ctx, it, &format!("{f}.{i}")).map(ArgValue::Str))
                .collect::<Option<Vec<_>>>()
                .map(ArgValue::List),
            _ => as_str(ctx, &e.node, &f).map(ArgValue::Str),
        };
        if let Some(val) = val {
            out.insert(k.clone(), val);
        }
    }
    out
}

fn git_repos(ctx: &mut Ctx, v: &View) -> Vec<GitRepo> {
    let mut out = Vec::new();
    let Some(n) = v.get("git_repos") else {
        return out;
    };
    let Kind::Array(items) = &n.kind else {
        ctx.type_err(n, &v.field("git_repos"), "an array of [[git_repos]] tables");
        return out;
    };
    for (i, it) in items.iter().enumerate() {
        let Some(g) = ctx.table(it, &format!("{}.{i}", v.field("git_repos"))) else {
            continue;
        };
        let url = g.req_str(ctx, "url");
        let commit = g.req_str(ctx, "commit");
        let init_submodules = g.opt_bool(ctx, "init_submodules").unwrap_or(false);
        let mount_as = g.opt_str(ctx, "mount_as");
        g.done(
            ctx,
            &[
                "url",
                "commit",
                "init_submodules",
                "mount_as",
                "installed_path",
            ],
        );
        if let (Some(url), Some(commit)) = (url, commit) {
            out.push(GitRepo {
                url,
                commit,
                init_submodules,
                installed: None,
                mount_as,
            });
        }
    }
    out
}

const NSYS_FIELDS: &[&str] = &[
    "enable",
    "nsys_binary",
    "task",
    "output",
    "sample",
    "trace",
    "force_overwrite",
    "capture_range",
    "capture_range_end",
    "cuda_graph_trace",
    "gpu_metrics_devices",
    "extra_args",
];

fn nsys(ctx: &mut Ctx, n: &Node, path: &str) -> Option<Nsys> {
    let t = ctx.table(n, path)?;
    let r = Nsys {
        enable: t.opt_bool(ctx, "enable").unwrap_or(true),
        nsys_binary: t
            .opt_str(ctx, "nsys_binary")
            .unwrap_or_else(|| "nsys".into()),
        task: t.opt_str(ctx, "task").unwrap_or_else(|| "profile".into()),
        output: t.opt_str(ctx, "output"),
        sample: t.opt_str(ctx, "sample"),
        trace: t.opt_str(ctx, "trace"),
        force_overwrite: t.opt_bool(ctx, "force_overwrite"),
        capture_range: t.opt_str(ctx, "capture_range"),
        capture_range_end: t.opt_str(ctx, "capture_range_end"),
        cuda_graph_trace: t.opt_str(ctx, "cuda_graph_trace"),
        gpu_metrics_devices: t.opt_str(ctx, "gpu_metrics_devices"),
        extra_args: t.str_list(ctx, "extra_args"),
    };
    t.done(ctx, NSYS_FIELDS);
    Some(r)
}

fn dse_excluded(ctx: &mut Ctx, v: &View) -> Vec<String> {
    let Some(n) = v.get("dse_excluded_args") else {
        return Vec::new();
    };
    let list = match &n.kind {
        Kind::Str(s) => vec![s.clone()],
        _ => super::decode::as_str_list(ctx, n, &v.field("dse_excluded_args")).unwrap_or_default(),
    };
    for p in &list {
        let bad = if !p.starts_with("cmd_args.") {
            Some(format!(
                "DSE excluded arg must start with 'cmd_args.': '{p}'"
            ))
        } else if p == "cmd_args." || p.ends_with('.') || p.contains("..") {
            Some(format!("invalid DSE excluded cmd_args prefix: '{p}'"))
        } else {
            None
        };
        if let Some(msg) = bad {
            ctx.err(&n.loc, &v.field("dse_excluded_args"), msg, None);
        }
    }
    list
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A template of CloudAI's that a build does not run is a warning ("unsupported"), not an error: verify-configs
    /// counts such files per template and a run refuses them; a name CloudAI does not know is an error.
    #[test]
    fn a_cloudai_template_this_build_lacks_is_unsupported_not_unknown() {
        let doc = "name = \"t\"\ndescription = \"d\"\ntest_template_name = \"Sleep\"\n";
        struct Nccl;
        impl TemplateSchema for Nccl {
            fn template(&self) -> &'static str {
                "NcclTest"
            }
            fn args(&self) -> &'static [ArgSpec] {
                &[]
            }
        }
        let nccl: &dyn TemplateSchema = &Nccl;
        let node = crate::config::node::parse(Path::new("t.toml"), doc, "test").unwrap();
        let e = decode(&node, "", &[nccl]).unwrap_err();
        assert!(is_unsupported(&e), "{e:?}");
        assert_eq!(unsupported_template(&e).as_deref(), Some("Sleep"));
        let doc = doc.replace("Sleep", "Slep");
        let node = crate::config::node::parse(Path::new("t.toml"), &doc, "test").unwrap();
        assert!(!is_unsupported(&decode(&node, "", &[nccl]).unwrap_err()));
    }
}
