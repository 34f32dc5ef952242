//! The job: CloudAI's `ai_dynamo.sh` on every node with the test's values as its flags (CloudAI's rendering of its
//! models), `aiperf.sh` with the AIPerf phases, the DCGM exporter around it when asked, as CloudAI writes them.

use indexmap::IndexMap;

use super::{
    marker, workloads, AiDynamo, ACCURACY, AIPERF, DECODE, DYNAMO, GENAI_PERF, OUT, PREFILL,
    WORKER_ARGS,
};
use crate::config::args::{ArgSpec, ArgValue, CmdArgs};
use crate::config::test::TestDefinition;
use crate::util::shell::py_quote;
use crate::workloads::launch::{
    quoted, srun_lines_in, EnvFile, Procs, Step, Steps, HF_HOME, NODELIST_LINE, NODELIST_WORD,
    NODES_ARRAY_END, NODES_ARRAY_START, RUN_DIR, RUN_DIR_RAW, SRUN_ALL_NODES_LINES,
    SRUN_HOST_LINES,
};
use crate::workloads::{Launch, Placement, Workload};

use super::aiperf::{aiperf_script, get, phases};
use super::configs::{py, yaml};

/// Where the job's container sees the install directory.
const INSTALL: &str = "/cloudai_install";
const HF: &str = "/cloudai_install/huggingface";
const AIPERF_SCRIPT: &str = "aiperf.sh";
const HICACHE_FILE: &str = "hicache-config.toml";
const LMCACHE_FILE: &str = "lmcache-config.yaml";
const LMCACHE_BACKUP: &str = "lmcache-config.original.yaml";

/// CloudAI's validators: the workers serve the test's model (vLLM's `model`; SGLang's `model_path` and
/// `served_model_name`), each worker's `args` in its model's order; GenAI-Perf's report is `<name>_report.csv`
/// unless named.
pub(super) fn derive(args: &mut CmdArgs) {
    let model = ArgValue::Str(args.text_at("dynamo.model"));
    let vllm = args.text_at("dynamo.backend") == "vllm";
    each_worker(args, |a| {
        if vllm {
            a.insert("model".into(), model.clone());
        } else {
            a.insert("model_path".into(), model.clone());
            a.insert("served_model_name".into(), model.clone());
        }
        *a = model_order(a, Vec::new());
    });
    if let Some(g) = args.table_at_mut("genai_perf") {
        if g.get("report_name").is_none_or(|r| r.py_str().is_empty()) {
            let name = g.get("name").map_or("genai_perf".into(), ArgValue::py_str);
            g.insert(
                "report_name".into(),
                ArgValue::Str(format!("{name}_report.csv")),
            );
        }
    }
}

/// CloudAI reads a test a scenario entry names back from its dump by alias, and two aliases of a worker's `args`
/// are written but not read (`model_path` as `model-path`, `served_model_name` as `served-model-name`): they come
/// back as undeclared keys with the declared fields' values, after the declared fields and ahead of the worker's
/// own undeclared keys (a value the test gave them itself is kept).
pub(super) fn reread(args: &mut CmdArgs) {
    each_worker(args, |a| {
        let back = [
            ("model_path", "model-path"),
            ("served_model_name", "served-model-name"),
        ]
        .into_iter()
        .filter_map(|(field, alias)| {
            let v = a.get(alias).or_else(|| a.get(field))?;
            Some((alias.to_string(), v.clone()))
        })
        .collect();
        *a = model_order(a, back);
    });
}

/// Calls `f` with each worker's `args` (prefill's, then decode's) that the test has.
fn each_worker(args: &mut CmdArgs, mut f: impl FnMut(&mut IndexMap<String, ArgValue>)) {
    for role in ["prefill_worker", "decode_worker"] {
        if let Some(a) = args.table_at_mut(&format!("dynamo.{role}.args")) {
            f(a);
        }
    }
}

/// A worker's `args` in the order CloudAI's model holds them: its declared fields in the model's order, then
/// `then` (keys that came back undeclared), then the other keys in their order.
fn model_order(
    a: &IndexMap<String, ArgValue>,
    then: Vec<(String, ArgValue)>,
) -> IndexMap<String, ArgValue> {
    let mut ordered: IndexMap<String, ArgValue> = WORKER_ARGS
        .iter()
        .filter_map(|s| Some((s.name.to_string(), a.get(s.name)?.clone())))
        .collect();
    ordered.extend(then);
    for (k, v) in a {
        ordered.entry(k.clone()).or_insert_with(|| v.clone());
    }
    ordered
}

/// CloudAI's `_get_toml_args` for one value: `<flag> "<value>"`; a value in braces between single quotes; one
/// holding a quote or a newline quoted for the shell.
fn flag(flag: &str, v: &ArgValue) -> String {
    let s = v.py_str();
    if s.starts_with('{') && s.ends_with('}') {
        format!("{flag} '{s}'")
    } else if s.contains(['"', '\'', '\n']) {
        format!("{flag} {}", py_quote(&s))
    } else {
        format!("{flag} \"{s}\"")
    }
}

/// A model's values as flags, by their serialization names (a declared field's alias, an undeclared key as
/// written): a CloudAI file as its path in the install mount, `args` and `exclude` left out.
fn fields(
    args: &CmdArgs,
    path: &str,
    spec: &[ArgSpec],
    prefix: &str,
    exclude: &[&str],
) -> Vec<String> {
    let Some(ArgValue::Table(t)) = args.at(path) else {
        return Vec::new();
    };
    // by serialization name, as a dict: a later value of a name takes the place of the first
    let mut out: IndexMap<String, String> = IndexMap::new();
    for (k, v) in t {
        if k == "args" || exclude.contains(&k.as_str()) {
            continue;
        }
        let name = spec
            .iter()
            .find(|s| s.name == k)
            .and_then(|s| s.alias)
            .unwrap_or(k);
        match (k.as_str(), v) {
            ("script", ArgValue::Table(f)) => {
                if let Some(src) = f.get("src") {
                    let file = src.py_str();
                    let file = file.rsplit('/').next().unwrap_or_default();
                    out.insert(name.into(), format!("{prefix}{name} \"{INSTALL}/{file}\""));
                }
            }
            ("repo", ArgValue::Table(r)) => {
                if r.contains_key("installed_path") {
                    let dir = crate::config::test::repo_dir(
                        std::path::Path::new(""),
                        &r.get("url").map(ArgValue::py_str).unwrap_or_default(),
                        &r.get("commit").map(ArgValue::py_str).unwrap_or_default(),
                    );
                    out.insert(
                        name.into(),
                        format!("{prefix}{name} \"{INSTALL}/{}\"", dir.display()),
                    );
                }
            }
            _ => {
                out.insert(name.into(), flag(&format!("{prefix}{name}"), v));
            }
        }
    }
    out.into_values().collect()
}

/// A model's values, then its `args` (`<prefix>args-<name>`).
fn nested(
    args: &CmdArgs,
    path: &str,
    spec: &[ArgSpec],
    prefix: &str,
    exclude: &[&str],
) -> Vec<String> {
    let mut out = fields(args, path, spec, prefix, exclude);
    out.extend(fields(
        args,
        &format!("{path}.args"),
        WORKER_ARGS,
        &format!("{prefix}args-"),
        &[],
    ));
    out
}

fn enabled(args: &CmdArgs, path: &str) -> bool {
    args.at(path) == Some(&ArgValue::Bool(true))
}

/// `ai_dynamo.sh`'s arguments, in CloudAI's order.
fn script_args(test: &TestDefinition) -> Vec<String> {
    let a = &test.cmd_args;
    let (url, commit) = AiDynamo.repo(test).unwrap_or_default();
    let repo = crate::config::test::repo_dir(std::path::Path::new(""), &url, &commit);
    let mut out = vec![
        "--user $USER".to_string(),
        format!("--install-dir {INSTALL}"),
        format!("--results-dir {OUT}"),
        format!("--dynamo-repo {INSTALL}/{}", repo.display()),
        format!("--hf-home {HF}"),
        format!("--workloads {}", workloads(a).join(",")),
        format!(
            "--failure-marker {OUT}/{}",
            marker(test, "failure_marker", "failure-marker.txt")
        ),
        format!(
            "--success-marker {OUT}/{}",
            marker(test, "success_marker", "success-marker.txt")
        ),
    ];
    let cache = a.text_at("storage_cache_dir");
    if !cache.is_empty() {
        out.push(format!("--storage-cache-dir {cache}"));
    }
    if let Some(cmd) = a.at("lmcache_controller.cmd") {
        out.push(format!(
            "--lmcache-controller-cmd {}",
            py_quote(&cmd.py_str())
        ));
    }
    out.extend(fields(
        a,
        "dynamo",
        DYNAMO,
        "--dynamo-",
        &["prefill_worker", "decode_worker", "dcgm_exporter"],
    ));
    if enabled(a, "dynamo.dcgm_exporter.enabled") {
        out.push("--dynamo-dcgm-exporter-enabled \"True\"".into());
        out.push(format!(
            "--dynamo-dcgm-exporter-port \"{}\"",
            a.text_at("dynamo.dcgm_exporter.port")
        ));
    }
    for (role, spec, prefix) in [
        ("prefill_worker", PREFILL, "--prefill-"),
        ("decode_worker", DECODE, "--decode-"),
    ] {
        out.extend(nested(
            a,
            &format!("dynamo.{role}"),
            spec,
            prefix,
            &["nodes"],
        ));
        let named = a.text_at(&format!("dynamo.{role}.nodes"));
        if !named.is_empty() {
            out.push(format!("{prefix}node-list {}", py_quote(&named)));
        }
    }
    out.extend(nested(a, "genai_perf", GENAI_PERF, "--genai_perf-", &[]));
    if workloads(a).iter().any(|w| w == AIPERF_SCRIPT) {
        out.push(format!("--aiperf-name \"{}\"", a.text_at("aiperf.name")));
        out.push(format!("--aiperf-script {OUT}/{AIPERF_SCRIPT}"));
    } else {
        out.extend(nested(a, "aiperf", AIPERF, "--aiperf-", &[]));
    }
    if a.get("aiperf_accuracy").is_some() {
        out.extend(nested(
            a,
            "aiperf_accuracy",
            ACCURACY,
            "--aiperf_accuracy-",
            &[],
        ));
    }
    out
}

/// The main task launch: one task per node runs `ai_dynamo.sh`; CloudAI writes it one word per line and records it
/// as the test's command.
fn main_srun(test: &TestDefinition, nodes: u64) -> String {
    let mut words = vec![
        SRUN_ALL_NODES_LINES.to_string(),
        format!("--nodes={nodes}{NODELIST_LINE}"),
        format!("--ntasks={nodes}"),
        "--ntasks-per-node=1".into(),
        format!("--output={RUN_DIR}/node-%n-stdout.txt"),
        format!("--error={RUN_DIR}/node-%n-stderr.txt"),
        "bash".into(),
        format!("{INSTALL}/ai_dynamo.sh"),
    ];
    words.extend(script_args(test));
    words.join(" \\\n  ") + "\n"
}

/// CloudAI's start-up step (`startup_cmd`): one task per node before the job, on the hosts or in
/// `startup_cmd_docker_image`, told where to leave what it found (`CLOUDAI_RUNTIME_FILE`, one JSON file per node
/// under `runtime/`); its failure ends the job.
fn startup_srun(test: &TestDefinition, nodes: u64) -> Option<String> {
    let a = &test.cmd_args;
    let cmd = a.text_at("startup_cmd");
    if cmd.is_empty() {
        return None;
    }
    let image = a.text_at("startup_cmd_docker_image");
    let (prefix, runtime) = if image.is_empty() {
        (
            SRUN_HOST_LINES.to_string(),
            format!("{RUN_DIR_RAW}/runtime"),
        )
    } else {
        (srun_lines_in(&image), format!("{OUT}/runtime"))
    };
    let script = format!(
        "mkdir -p {}; export CLOUDAI_RUNTIME_FILE=\"{runtime}/${{SLURMD_NODENAME:-$(hostname)}}.json\"; {cmd}",
        quoted(&runtime)
    );
    let words = [
        prefix,
        format!("--nodes={nodes}{NODELIST_LINE}"),
        format!("--ntasks={nodes}"),
        "--ntasks-per-node=1".into(),
        format!("--output={RUN_DIR}/startup-node-%n-stdout.txt"),
        format!("--error={RUN_DIR}/startup-node-%n-stderr.txt"),
        "bash".into(),
        "-lc".into(),
        quoted(&script),
    ];
    Some(words.join(" \\\n  ") + " || exit 1")
}

/// The DCGM exporter on every node, started before the job and checked reachable (CloudAI's block).
fn dcgm_steps(test: &TestDefinition, nodes: u64) -> (Vec<Step>, Step) {
    let port = test.cmd_args.text_at("dynamo.dcgm_exporter.port");
    let endpoints = format!("{RUN_DIR}/dcgm_endpoints.txt");
    let head = Step::Shell(
        "# Start DCGM exporter on each node.\necho \"Starting DCGM exporter...\"".into(),
    );
    let task = Step::Task {
        all_nodes: false,
        own_image: true,
        opts: vec![
            "--overlap".into(),
            "--job-name=cloudai-dcgm-exporter".into(),
            format!("-N{nodes}{NODELIST_WORD}"),
            format!("--ntasks={nodes}"),
            "--ntasks-per-node=1".into(),
            format!("--output={RUN_DIR}/dcgm-node-%n-stdout.txt"),
            format!("--error={RUN_DIR}/dcgm-node-%n-stderr.txt"),
        ],
        cmd: format!(
            "bash -lc {} &",
            py_quote(&format!("DCGM_EXPORTER_LISTEN=:{port} dcgm-exporter"))
        ),
    };
    let rest = [
        "DCGM_EXPORTER_SRUN_PID=$!",
        "echo \"DCGM exporter srun PID: ${DCGM_EXPORTER_SRUN_PID}\"",
        "DCGM_EXPORTER_STEP_ID=",
        "for _ in {1..10}; do",
        "    DCGM_EXPORTER_STEP_ID=$(squeue --noheader --steps --job \"$SLURM_JOB_ID\" --format=\"%i %j\" | awk '$2 == \"cloudai-dcgm-exporter\" { print $1; exit }')",
        "    if [[ -n \"${DCGM_EXPORTER_STEP_ID}\" ]]; then break; fi",
        "    sleep 1",
        "done",
        "echo \"DCGM exporter step ID: ${DCGM_EXPORTER_STEP_ID:-unknown}\"",
        "function stop_dcgm_exporter()",
        "{",
        "    if [[ -n \"${DCGM_EXPORTER_STEP_ID:-}\" ]]; then",
        "        scancel --signal=TERM \"${DCGM_EXPORTER_STEP_ID}\" 2>/dev/null || true",
        "    fi",
        "    if [[ -n \"${DCGM_EXPORTER_SRUN_PID:-}\" ]]; then",
        "        wait \"${DCGM_EXPORTER_SRUN_PID}\" 2>/dev/null || true",
        "    fi",
        "}",
        "sleep 5",
        "echo \"Checking DCGM exporter metrics endpoints...\"",
        "DCGM_EXPORTER_STARTUP_TIMEOUT=${DCGM_EXPORTER_STARTUP_TIMEOUT:-60}",
    ]
    .map(str::to_string)
    .into_iter()
    .chain([
        format!("{NODES_ARRAY_START}dcgm_nodes{NODES_ARRAY_END}"),
        format!(": > {endpoints}"),
        "dcgm_failed=0".into(),
        "for node in \"${dcgm_nodes[@]}\"; do".into(),
        format!("    dcgm_url=\"http://${{node}}:{port}/metrics\""),
        format!("    echo \"  ${{dcgm_url}}\" >> {endpoints}"),
    ])
    .chain(
        [
            "    deadline=$((SECONDS + DCGM_EXPORTER_STARTUP_TIMEOUT))",
            "    until curl -fsS --max-time 2 \"${dcgm_url}\" >/dev/null; do",
            "        if (( SECONDS >= deadline )); then",
            "            echo \"FATAL: DCGM exporter metrics endpoint is unreachable: ${dcgm_url}\" >&2",
            "            dcgm_failed=1",
            "            break",
            "        fi",
            "        sleep 2",
            "    done",
            "    if (( dcgm_failed != 0 )); then break; fi",
            "    echo \"DCGM exporter reachable: ${dcgm_url}\"",
            "done",
            "if (( dcgm_failed != 0 )); then",
            "    stop_dcgm_exporter",
            "    exit 1",
            "fi",
            "",
        ]
        .map(str::to_string),
    )
    .collect::<Vec<_>>()
    .join("\n");
    let stop = Step::Shell("# Stop DCGM exporter when test finishes\nstop_dcgm_exporter".into());
    (vec![head, task, Step::Shell(rest)], stop)
}

pub(super) fn launch(test: &TestDefinition, at: &Placement) -> Launch {
    let a = &test.cmd_args;
    let nodes = at.nodes.max(1);
    let mut steps = Vec::new();
    let mut stop = None;
    let dcgm = enabled(a, "dynamo.dcgm_exporter.enabled");
    if dcgm {
        let (start, s) = dcgm_steps(test, nodes);
        steps.extend(start);
        stop = Some(s);
    }
    let record = steps.len();
    let main = main_srun(test, nodes);
    steps.push(Step::Shell(match startup_srun(test, nodes) {
        // recorded together, as CloudAI records them
        Some(startup) => format!("{startup}\n{main}"),
        None => main,
    }));
    steps.extend(stop);
    let mut files = Vec::new();
    let mut env = Vec::new();
    if workloads(a).iter().any(|w| w == AIPERF_SCRIPT) {
        files.push((AIPERF_SCRIPT.to_string(), aiperf_script(test)));
    }
    if let Some(ArgValue::Table(h)) = a.get("hicache") {
        let body: Vec<(String, crate::util::pytoml::PyVal)> =
            h.iter().map(|(k, v)| (k.clone(), py(v))).collect();
        files.push((HICACHE_FILE.to_string(), crate::util::pytoml::dumps(&body)));
        env.push((
            "HICACHE_CONFIG_FILE".to_string(),
            format!("{OUT}/{HICACHE_FILE}"),
        ));
    }
    if let Some(ArgValue::Table(l)) = a.get("lmcache") {
        let body = yaml(l);
        files.push((LMCACHE_FILE.to_string(), body.clone()));
        files.push((LMCACHE_BACKUP.to_string(), body));
        env.push((
            "LMCACHE_CONFIG_FILE".to_string(),
            format!("{OUT}/{LMCACHE_FILE}"),
        ));
    }
    let mut host_mounts = vec![format!("{HF_HOME}:{HF}")];
    let cache = a.text_at("storage_cache_dir");
    if !cache.is_empty() {
        host_mounts.push(format!("{cache}:{cache}"));
    }
    Launch {
        procs: Procs::Mpi,
        has_profiler: true,
        env,
        host_mounts,
        steps: Some(Steps {
            steps,
            setup_in_image: true,
            env_file: EnvFile::None,
            files,
            other_image: dcgm.then(|| a.text_at("dynamo.dcgm_exporter.docker_image_url")),
            record: Some(record),
            ..Default::default()
        }),
        ..Launch::process("", Vec::new()).in_test_image(test)
    }
}

/// A worker's own nodes (`nodes`, comma-separated; empty entries skipped).
pub(super) fn named_nodes(a: &CmdArgs, role: &str) -> Vec<String> {
    a.text_at(&format!("dynamo.{role}.nodes"))
        .split(',')
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect()
}

/// What cannot run as asked, found before anything runs: the roles' node counts against the job's (CloudAI's
/// rules), AIPerf arguments that are not single values.
pub(super) fn check(test: &TestDefinition, at: &Placement) -> Vec<String> {
    let a = &test.cmd_args;
    let mut out = Vec::new();
    let (pn, dn) = (
        named_nodes(a, "prefill_worker"),
        named_nodes(a, "decode_worker"),
    );
    for (role, named) in [("prefill_worker", &pn), ("decode_worker", &dn)] {
        for node in named {
            let ok = node
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
            if !ok {
                out.push(format!(
                    "dynamo.{role}.nodes: \"{node}\" is not a host name (write each node by its name, \
                     comma-separated, without ranges)"
                ));
            }
        }
    }
    // a role's named nodes count for it (CloudAI's rule); named lists that overlap share nodes
    let n = |role: &str, named: &[String]| match named.len() {
        0 => a.int_at(&format!("dynamo.{role}.num_nodes")),
        named => Some(named as i64),
    };
    if let (Some(p), Some(d)) = (n("prefill_worker", &pn), n("decode_worker", &dn)) {
        let (p, d, got) = (p as u64, d as u64, at.nodes);
        let shared = pn.iter().any(|x| dn.contains(x)) || got < p + d;
        if shared && got < p.max(d) {
            out.push(format!(
                "not enough nodes for a shared-node disaggregated run: {p} prefill and {d} decode node(s) need at \
                 least {} node(s), the job has {got}",
                p.max(d)
            ));
        }
    }
    let mut tables: Vec<(String, IndexMap<String, ArgValue>)> = Vec::new();
    if let Some(ArgValue::Table(t)) = a.at("aiperf.args") {
        tables.push(("aiperf.args".into(), t.clone()));
    }
    for (phase, r) in phases(a) {
        if let Some(ArgValue::Table(t)) = r.get("args") {
            tables.push((
                format!("phase {}", get(&phase, "name").unwrap_or_default()),
                t.clone(),
            ));
        }
    }
    for (what, t) in tables {
        for (k, v) in t {
            if matches!(v, ArgValue::List(_) | ArgValue::Table(_)) {
                out.push(format!(
                    "AIPerf argument '{k}' ({what}) must be a single value: write a multi-value argument as one \
                     string in AIPerf's command-line syntax"
                ));
            }
        }
    }
    out.dedup();
    out
}

/// CloudAI's rule between the roles' values (`constraints.prefill_tp_le_decode_tp`): a sweep skips the steps that
/// break it.
pub(super) fn constraints(test: &TestDefinition) -> Vec<String> {
    let on = |k: &str| {
        test.template_fields
            .get("constraints")
            .and_then(|c| match c {
                ArgValue::Table(t) => t.get(k).cloned(),
                _ => None,
            })
            != Some(ArgValue::Bool(false))
    };
    let tp = |role: &str| {
        test.cmd_args
            .int_at(&format!("dynamo.{role}.args.tensor_parallel_size"))
            .unwrap_or(1)
    };
    let (p, d) = (tp("prefill_worker"), tp("decode_worker"));
    if on("prefill_tp_le_decode_tp") && p > d {
        vec![format!(
            "prefill tensor-parallel-size {p} is above decode's {d} (constraints.prefill_tp_le_decode_tp)"
        )]
    } else {
        Vec::new()
    }
}
