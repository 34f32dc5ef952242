//! LLM serving benchmarks on Slurm (CloudAI's `vllm` and `sglang`): one server on a node or on several (a Ray
//! cluster, a distributed launch), or a disaggregated pair — prefill and decode servers, each on its own GPUs or
//! nodes, behind a router —; the framework's benchmark client against it, then an optional semantic evaluation
//! (GSM8K). The job is one generated batch script ([`script`]) with a cleanup trap that stops every step it
//! started; graded from the client's result file ([`result`]).
//!
//! A flavour ([`Flavor`]) says what differs between frameworks: the serve, router and client commands, the
//! multi-node launch, extra environment and clean-up.

use indexmap::IndexMap;

use super::{Launch, Placement};
use crate::config::args::{ArgValue, CmdArgs};
use crate::config::decode::{join, Ctx, View};
use crate::config::test::TestDefinition;

mod grade;
pub(crate) mod result;
mod script;

pub(crate) use grade::{bench_args, bench_extras, Template};
pub(crate) use script::py_quote;

/// A role's table (`cmd_args.decode`, `cmd_args.prefill`): its declared fields and the server options.
pub(crate) type Args = IndexMap<String, ArgValue>;

/// What differs between serving frameworks; every method has the shared behaviour unless the framework changes it.
pub(crate) trait Flavor: Sync {
    /// As users read it (`vLLM`).
    fn name(&self) -> &'static str;
    /// Role table fields that are not server options.
    fn internal_fields(&self) -> &'static [&'static str];
    /// The server command of each role: one (aggregated) or two (prefill, decode).
    fn serve_commands(&self, s: &Serving) -> Vec<Vec<String>>;
    /// The router in front of a disaggregated pair.
    fn helper_command(&self, s: &Serving) -> Vec<String>;
    /// The benchmark client.
    fn bench_command(&self, s: &Serving) -> Vec<String>;
    /// The semantic evaluation's host as the client's URL wants it.
    fn eval_host(&self, s: &Serving) -> String {
        s.bench_host()
    }
    /// One server option: `--key value`, or `--key` alone for an empty value.
    fn serve_arg(&self, key: &str, value: &ArgValue) -> Vec<String> {
        let opt = format!("--{}", key.replace('_', "-"));
        match value {
            ArgValue::Str(s) if s.is_empty() => vec![opt],
            v => vec![opt, v.py_str()],
        }
    }
    /// A server's readiness endpoint: `serve_healthcheck`, else `/health` for a prefill or decode server and
    /// `healthcheck` for an aggregated one.
    fn serve_healthcheck(&self, s: &Serving, role: &str) -> String {
        match s.str("serve_healthcheck").filter(|h| !h.is_empty()) {
            Some(h) => h.to_string(),
            None if role != "serve" => "/health".into(),
            None => s.str_or("healthcheck", ""),
        }
    }
    fn router_healthcheck(&self, s: &Serving) -> String {
        s.str_or("healthcheck", "")
    }
    fn aggregated_preamble(&self, _s: &Serving) -> String {
        String::new()
    }
    fn disaggregated_preamble(&self, _s: &Serving) -> String {
        String::new()
    }
    fn aggregated_pid_vars(&self, _s: &Serving) -> Vec<String> {
        vec!["SERVE_PID".into()]
    }
    fn disaggregated_pid_vars(&self, _s: &Serving) -> Vec<String> {
        ["PREFILL_PID", "DECODE_PID", "HELPER_PID"]
            .map(String::from)
            .to_vec()
    }
    fn step_id_vars(&self, _s: &Serving, pid_vars: &[String]) -> Vec<String> {
        pid_vars
            .iter()
            .map(|p| format!("{}_STEP_IDS", p.strip_suffix("_PID").unwrap_or(p)))
            .collect()
    }
    fn cleanup_prelude(&self, _s: &Serving) -> String {
        String::new()
    }
    fn aggregated_env(&self, _s: &Serving) -> Vec<(String, String)> {
        Vec::new()
    }
    fn role_env(&self, _s: &Serving, _role: &str, gpus: &[i64]) -> Vec<(String, String)> {
        vec![("CUDA_VISIBLE_DEVICES".into(), ids(gpus))]
    }
    /// A server of `node_count` nodes; one node is the shared launch.
    fn serve_launch(&self, s: &Serving, l: &RoleLaunch) -> String {
        s.single_serve_launch(l)
    }
}

/// One server launch of the script.
pub(crate) struct RoleLaunch<'a> {
    pub role: &'a str,
    pub command: String,
    pub pid_var: &'a str,
    pub log_file: String,
    pub node_count: u64,
    pub head_node_var: &'a str,
    /// The variable holding the role's node list (`PREFILL_NODELIST`).
    pub nodelist_var: &'a str,
}

/// A serving test where it is placed.
pub(crate) struct Serving<'a> {
    pub flavor: &'a dyn Flavor,
    pub slug: &'a str,
    pub test: &'a TestDefinition,
    pub nodes: u64,
    pub gpus_per_node: Option<u64>,
}

static EMPTY: std::sync::LazyLock<Args> = std::sync::LazyLock::new(Args::new);

/// GPU ids as CUDA_VISIBLE_DEVICES lists them.
pub(crate) fn ids(gpus: &[i64]) -> String {
    gpus.iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// A comma-separated list of GPU ids (or a list of them); `None` when one is not an integer.
fn parse_ids(v: Option<&ArgValue>) -> Option<Vec<i64>> {
    let parts: Vec<String> = match v {
        None => return Some(Vec::new()),
        Some(ArgValue::List(l)) => l.iter().map(ArgValue::py_str).collect(),
        Some(v) => {
            let s = v.py_str();
            if s.is_empty() {
                return Some(Vec::new());
            }
            s.split(',').map(str::to_string).collect()
        }
    };
    parts.iter().map(|p| p.trim().parse().ok()).collect()
}

impl<'a> Serving<'a> {
    pub(crate) fn new(
        flavor: &'a dyn Flavor,
        slug: &'a str,
        test: &'a TestDefinition,
        at: &Placement,
    ) -> Self {
        Self {
            flavor,
            slug,
            test,
            nodes: at.nodes.max(1),
            gpus_per_node: at.gpus_per_node,
        }
    }

    pub(crate) fn get(&self, key: &str) -> Option<&ArgValue> {
        self.test.cmd_args.get(key)
    }
    pub(crate) fn str(&self, key: &str) -> Option<&str> {
        self.test.cmd_args.str(key)
    }
    pub(crate) fn str_or(&self, key: &str, default: &str) -> String {
        self.get(key).map_or(default.into(), ArgValue::py_str)
    }
    pub(crate) fn model(&self) -> String {
        self.str_or("model", "")
    }
    pub(crate) fn port(&self) -> i64 {
        self.get("port").and_then(ArgValue::as_int).unwrap_or(8300)
    }
    pub(crate) fn prefill_port(&self) -> i64 {
        self.port() + 100
    }
    pub(crate) fn decode_port(&self) -> i64 {
        self.port() + 200
    }
    pub(crate) fn bind_host(&self) -> String {
        self.str_or("host", "0.0.0.0")
    }
    pub(crate) fn serve_wait_seconds(&self) -> i64 {
        self.get("serve_wait_seconds")
            .and_then(ArgValue::as_int)
            .unwrap_or(300)
    }

    pub(crate) fn prefill(&self) -> Option<&Args> {
        match self.get("prefill") {
            Some(ArgValue::Table(t)) => Some(t),
            _ => None,
        }
    }
    pub(crate) fn decode(&self) -> &Args {
        match self.get("decode") {
            Some(ArgValue::Table(t)) => t,
            _ => &EMPTY,
        }
    }
    /// The role's table (`serve` is the decode table of an aggregated server).
    pub(crate) fn role_args(&self, role: &str) -> &Args {
        match role {
            "prefill" => self.prefill().unwrap_or(&EMPTY),
            _ => self.decode(),
        }
    }
    pub(crate) fn is_disaggregated(&self) -> bool {
        self.prefill().is_some()
    }

    /// The role's server options, in their table's order.
    pub(crate) fn serve_args(&self, role: &str) -> Vec<String> {
        let internal = self.flavor.internal_fields();
        self.role_args(role)
            .iter()
            .filter(|(k, _)| !internal.contains(&k.as_str()))
            .flat_map(|(k, v)| self.flavor.serve_arg(k, v))
            .collect()
    }

    fn role_gpu_ids(&self, args: &Args) -> Vec<i64> {
        parse_ids(args.get("gpu_ids")).unwrap_or_default()
    }
    fn cuda_devices(&self) -> Vec<i64> {
        parse_ids(self.test.extra_env_vars.get("CUDA_VISIBLE_DEVICES")).unwrap_or_default()
    }

    /// Every GPU the servers use on a node: both roles' own lists, else CUDA_VISIBLE_DEVICES, else the node's.
    pub(crate) fn gpu_ids(&self) -> Vec<i64> {
        let cuda = self.cuda_devices();
        match self.prefill() {
            Some(p) => {
                let (p, d) = (self.role_gpu_ids(p), self.role_gpu_ids(self.decode()));
                if !p.is_empty() && !d.is_empty() {
                    return [p, d].concat();
                }
            }
            None => {
                if !cuda.is_empty() {
                    return cuda;
                }
                let d = self.role_gpu_ids(self.decode());
                if !d.is_empty() {
                    return d;
                }
            }
        }
        if !cuda.is_empty() {
            return cuda;
        }
        (0..self.gpus_per_node.unwrap_or(1).max(1) as i64).collect()
    }

    /// A role's GPUs: its own list, else all of them on a node of its own, else its half of a shared node.
    pub(crate) fn role_gpus(&self, role: &str) -> Vec<i64> {
        let Some(prefill) = self.prefill() else {
            return if role == "prefill" {
                Vec::new()
            } else {
                self.gpu_ids()
            };
        };
        let args = if role == "prefill" {
            prefill
        } else {
            self.decode()
        };
        let own = self.role_gpu_ids(args);
        if !own.is_empty() {
            return own;
        }
        let all = self.gpu_ids();
        if self.nodes > 1 || args.contains_key("num_nodes") {
            return all;
        }
        let mid = all.len() / 2;
        if role == "prefill" {
            all[..mid].to_vec()
        } else {
            all[mid..].to_vec()
        }
    }

    /// Nodes of the prefill and decode servers: as given (summing to the job's), or one each on one or two nodes.
    pub(crate) fn role_nodes(&self) -> Result<(u64, u64), String> {
        if !self.is_disaggregated() {
            return Ok((0, 0));
        }
        let count = |args: &Args| match args.get("num_nodes") {
            None => Ok(None),
            Some(ArgValue::Int(n)) => Ok(Some(*n)),
            Some(v) => Err(format!(
                "num_nodes = {} is not one integer (a sweep is resolved before the job is written)",
                v.py_repr()
            )),
        };
        let p = count(self.role_args("prefill"))?;
        let d = count(self.decode())?;
        let name = self.flavor.name();
        match (p, d) {
            (None, None) if self.nodes <= 2 => Ok((1, 1)),
            (None, None) => Err(format!(
                "disaggregated {name} over more than 2 nodes needs both cmd_args.prefill.num_nodes and cmd_args.decode.num_nodes ({} nodes asked)",
                self.nodes
            )),
            (Some(_), None) | (None, Some(_)) => Err(
                "cmd_args.prefill.num_nodes and cmd_args.decode.num_nodes must both be set or both be omitted".into(),
            ),
            (Some(p), Some(d)) if p <= 0 || d <= 0 => Err(format!(
                "cmd_args.prefill.num_nodes and cmd_args.decode.num_nodes must be positive, found {p} and {d}"
            )),
            (Some(1), Some(1)) if self.nodes == 1 => Ok((1, 1)),
            (Some(p), Some(d)) if (p + d) as u64 != self.nodes => Err(format!(
                "cmd_args.prefill.num_nodes + cmd_args.decode.num_nodes = {p} + {d} must equal the test's {} node(s)",
                self.nodes
            )),
            (Some(p), Some(d)) => Ok((p as u64, d as u64)),
        }
    }

    /// Nodes of a role's server (`serve`: the whole job).
    pub(crate) fn role_node_count(&self, role: &str) -> u64 {
        match role {
            "serve" => self.nodes,
            "prefill" => self.role_nodes().map_or(1, |r| r.0),
            _ => self.role_nodes().map_or(1, |r| r.1),
        }
    }

    /// Where the client reaches the server (the router in front of a disaggregated pair).
    pub(crate) fn bench_host(&self) -> String {
        match self.str("bench_host").filter(|h| !h.is_empty()) {
            Some(h) => h.to_string(),
            None if self.is_disaggregated() => "${PREFILL_NODE}".into(),
            None => "${NODE}".into(),
        }
    }

    /// The user's shell text run before a command (`custom_bash`: one for all, or the first whose regex matches).
    pub(crate) fn custom_bash_for(&self, command: &str) -> Option<String> {
        match self.test.template_fields.get("custom_bash")? {
            ArgValue::Str(s) => Some(s.clone()).filter(|s| !s.is_empty()),
            ArgValue::Table(t) => t.iter().find_map(|(pattern, bash)| {
                let re = regex::Regex::new(pattern).ok()?;
                re.is_match(command)
                    .then(|| bash.py_str())
                    .filter(|b| !b.is_empty())
            }),
            _ => None,
        }
    }

    /// What a role cannot do where it is placed (one sentence each).
    pub(crate) fn check(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (field, v) in [
            (
                "extra_env_vars.CUDA_VISIBLE_DEVICES",
                self.test.extra_env_vars.get("CUDA_VISIBLE_DEVICES"),
            ),
            ("cmd_args.decode.gpu_ids", self.decode().get("gpu_ids")),
            (
                "cmd_args.prefill.gpu_ids",
                self.role_args("prefill").get("gpu_ids"),
            ),
        ] {
            if parse_ids(v).is_none() {
                out.push(format!(
                    "{field} = {}: not a comma-separated list of GPU numbers",
                    v.map_or(String::new(), ArgValue::py_repr)
                ));
            }
        }
        if let Err(e) = self.role_nodes() {
            out.push(e);
        }
        out
    }
}

/// Schema rules every serving template shares: the port range, with room for the prefill/decode ports; GPU lists
/// of both roles or of neither; `custom_bash` regexes that compile.
pub(crate) fn validate(ctx: &mut Ctx, v: &View, args: &CmdArgs) {
    let field = |k: &str| join(&v.field("cmd_args"), k);
    let port = args.get("port").and_then(ArgValue::as_int);
    let prefill = match args.get("prefill") {
        Some(ArgValue::Table(t)) => Some(t),
        _ => None,
    };
    if let Some(p) = port {
        let max = if prefill.is_some() { 65335 } else { 65535 };
        if p > max {
            let why = if prefill.is_some() {
                " (disaggregated: the prefill and decode servers listen on port + 100 and port + 200)"
            } else {
                ""
            };
            ctx.err(
                &v.cmd_arg_loc("port"),
                &field("port"),
                format!("must be {max} or less{why}, found {p}"),
                None,
            );
        }
    }
    if let Some(p) = prefill {
        let d = match args.get("decode") {
            Some(ArgValue::Table(t)) => t.contains_key("gpu_ids"),
            _ => false,
        };
        if p.contains_key("gpu_ids") != d {
            ctx.err(
                &v.cmd_arg_loc("prefill"),
                &field("prefill.gpu_ids"),
                "prefill and decode gpu_ids must both be set or both be omitted",
                Some("each server of a pair runs on the GPUs its own list names".into()),
            );
        }
    }
    if let Some(crate::config::node::Kind::Table(t)) = v.get("custom_bash").map(|n| &n.kind) {
        for (pattern, e) in &t.entries {
            if let Err(err) = regex::Regex::new(pattern) {
                ctx.err(
                    &e.key_loc,
                    &join(&v.field("custom_bash"), pattern),
                    format!("invalid regular expression: {err}"),
                    Some(
                        "each key is a regular expression matched against a command of the job"
                            .into(),
                    ),
                );
            }
        }
    }
}

/// The job: one generated script in the test's image, the Hugging Face cache mounted, no MPI plugin.
pub(crate) fn launch(s: &Serving) -> Launch {
    use super::launch::{EnvFile, Step, Steps};
    Launch {
        steps: Some(Steps {
            steps: vec![Step::Shell(script::render(s))],
            setup_in_image: true,
            env_file: EnvFile::None,
            mpi: Some("none"),
            hf_cache: true,
            ..Default::default()
        }),
        image: s.str("docker_image_url").map(str::to_string),
        image_field: Some("cmd_args.docker_image_url"),
        ..Launch::process("", Vec::new())
    }
}
