//! The job: CloudAI's `ai_dynamo.sh` on every node with the test's values as its flags (CloudAI's rendering of its
//! models), `aiperf.sh` with the AIPerf phases, the DCGM exporter around it when asked, as CloudAI writes them.

use indexmap::IndexMap;

use super::{
    int, text, workloads, AiDynamo, ACCURACY, AIPERF, DECODE, DYNAMO, GENAI_PERF, PREFILL,
    WORKER_ARGS,
};
use crate::config::args::{ArgSpec, ArgValue, CmdArgs};
use crate::config::test::TestDefinition;
use crate::util::shell::py_quote;
use crate::workloads::launch::{
    EnvFile, Procs, Step, Steps, HF_HOME, RUN_DIR, SRUN_ALL_NODES_LINES,
};
use crate::workloads::{Launch, Placement, Workload};

/// Where the job's container sees the iteration's directory and the install directory.
pub(super) const OUT: &str = "/cloudai_run_results";
const INSTALL: &str = "/cloudai_install";
const HF: &str = "/cloudai_install/huggingface";
const AIPERF_SCRIPT: &str = "aiperf.sh";
const HICACHE_FILE: &str = "hicache-config.toml";
const LMCACHE_FILE: &str = "lmcache-config.yaml";
const LMCACHE_BACKUP: &str = "lmcache-config.original.yaml";

/// A YAML scalar as PyYAML's `safe_dump` writes it: plain when it reads back as the same string, else single-quoted.
fn yaml_scalar(v: &ArgValue) -> String {
    match v {
        ArgValue::Bool(b) => b.to_string(),
        ArgValue::Int(_) | ArgValue::Float(_) => v.py_str(),
        other => {
            let s = other.py_str();
            let reserved = [
                "", "~", "null", "Null", "NULL", "true", "True", "TRUE", "false", "False", "FALSE",
                "yes", "Yes", "YES", "no", "No", "NO", "on", "On", "ON", "off", "Off", "OFF",
            ];
            let numeric = s.parse::<f64>().is_ok() || s.starts_with(['.', '+', '-']) && s.len() > 1;
            let plain = !reserved.contains(&s.as_str())
                && !numeric
                && s.chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || "_/".contains(c))
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_./-: ".contains(c))
                && !s.contains(": ")
                && !s.ends_with([' ', ':']);
            if plain {
                s
            } else {
                format!("'{}'", s.replace('\'', "''"))
            }
        }
    }
}

/// A table as PyYAML's block style (`safe_dump(sort_keys=False)`): `key: value`, nested tables indented two
/// blanks, lists as `- item` lines under their key.
fn yaml(t: &IndexMap<String, ArgValue>, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    for (k, v) in t {
        let key = yaml_scalar(&ArgValue::Str(k.clone()));
        match v {
            ArgValue::Table(sub) if sub.is_empty() => out.push_str(&format!("{pad}{key}: {{}}\n")),
            ArgValue::Table(sub) => {
                out.push_str(&format!("{pad}{key}:\n"));
                yaml(sub, indent + 2, out);
            }
            ArgValue::List(items) if items.is_empty() => out.push_str(&format!("{pad}{key}: []\n")),
            ArgValue::List(items) => {
                out.push_str(&format!("{pad}{key}:\n"));
                for it in items {
                    out.push_str(&format!("{pad}- {}\n", yaml_scalar(it)));
                }
            }
            other => out.push_str(&format!("{pad}{key}: {}\n", yaml_scalar(other))),
        }
    }
}

fn table_mut<'a>(
    values: &'a mut IndexMap<String, ArgValue>,
    path: &str,
) -> Option<&'a mut IndexMap<String, ArgValue>> {
    let mut t = values;
    for part in path.split('.') {
        match t.get_mut(part) {
            Some(ArgValue::Table(sub)) => t = sub,
            _ => return None,
        }
    }
    Some(t)
}

/// CloudAI's validators: the workers serve the test's model (vLLM's `model`; SGLang's `model_path` and
/// `served_model_name`), each worker's `args` in its model's order; GenAI-Perf's report is `<name>_report.csv`
/// unless named.
pub(super) fn derive(args: &mut CmdArgs) {
    let model = ArgValue::Str(text(args, "dynamo.model"));
    let vllm = text(args, "dynamo.backend") == "vllm";
    for role in ["prefill_worker", "decode_worker"] {
        let Some(a) = table_mut(&mut args.values, &format!("dynamo.{role}.args")) else {
            continue;
        };
        if vllm {
            a.insert("model".into(), model.clone());
        } else {
            a.insert("model_path".into(), model.clone());
            a.insert("served_model_name".into(), model.clone());
        }
        let mut ordered: IndexMap<String, ArgValue> = WORKER_ARGS
            .iter()
            .filter_map(|s| Some((s.name.to_string(), a.get(s.name)?.clone())))
            .collect();
        for (k, v) in a.iter() {
            ordered.entry(k.clone()).or_insert_with(|| v.clone());
        }
        *a = ordered;
    }
    if let Some(g) = table_mut(&mut args.values, "genai_perf") {
        if g.get("report_name").is_none_or(|r| r.py_str().is_empty()) {
            let name = g.get("name").map_or("genai_perf".into(), ArgValue::py_str);
            g.insert(
                "report_name".into(),
                ArgValue::Str(format!("{name}_report.csv")),
            );
        }
    }
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
    let mut out = Vec::new();
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
                    out.push(format!("{prefix}{name} \"{INSTALL}/{file}\""));
                }
            }
            ("repo", ArgValue::Table(r)) => {
                if r.contains_key("installed_path") {
                    let dir = crate::config::test::repo_dir(
                        std::path::Path::new(""),
                        &r.get("url").map(ArgValue::py_str).unwrap_or_default(),
                        &r.get("commit").map(ArgValue::py_str).unwrap_or_default(),
                    );
                    out.push(format!("{prefix}{name} \"{INSTALL}/{}\"", dir.display()));
                }
            }
            _ => out.push(flag(&format!("{prefix}{name}"), v)),
        }
    }
    out
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

pub(super) fn marker(test: &TestDefinition, key: &str, default: &str) -> String {
    test.template_fields
        .get(key)
        .map_or(default.to_string(), ArgValue::py_str)
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
    let cache = text(a, "storage_cache_dir");
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
            text(a, "dynamo.dcgm_exporter.port")
        ));
    }
    out.extend(nested(
        a,
        "dynamo.prefill_worker",
        PREFILL,
        "--prefill-",
        &["nodes"],
    ));
    out.extend(nested(
        a,
        "dynamo.decode_worker",
        DECODE,
        "--decode-",
        &["nodes"],
    ));
    out.extend(nested(a, "genai_perf", GENAI_PERF, "--genai_perf-", &[]));
    if workloads(a).iter().any(|w| w == AIPERF_SCRIPT) {
        out.push(format!("--aiperf-name \"{}\"", text(a, "aiperf.name")));
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
        format!("--nodes={nodes}"),
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

/// AIPerf's arguments as its command line takes them: `--key value` (quoted for the shell), `--key` alone for
/// true, nothing for false.
fn aiperf_args(args: &IndexMap<String, ArgValue>) -> String {
    let mut parts = Vec::new();
    for (k, v) in args {
        if *v == ArgValue::Bool(false) {
            continue;
        }
        parts.push(format!("--{k}"));
        if *v != ArgValue::Bool(true) {
            parts.push(py_quote(&v.py_str()));
        }
    }
    parts.join(" ")
}

/// A phase with the base AIPerf values under it (CloudAI's deep merge: a table merged key by key, any other value
/// replaced).
fn merged(
    base: &IndexMap<String, ArgValue>,
    phase: &IndexMap<String, ArgValue>,
) -> IndexMap<String, ArgValue> {
    let mut out = base.clone();
    for (k, v) in phase {
        match (out.get_mut(k), v) {
            (Some(ArgValue::Table(b)), ArgValue::Table(p)) => *b = merged(b, p),
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    out
}

fn get(t: &IndexMap<String, ArgValue>, k: &str) -> Option<String> {
    t.get(k).map(ArgValue::py_str)
}

/// A path the job writes: relative ones under the results mount.
fn runtime(path: &str) -> String {
    if path.starts_with('/') {
        path.to_string()
    } else {
        format!("{OUT}/{path}")
    }
}

fn parent(path: &str) -> &str {
    match path.rsplit_once('/') {
        Some(("", _)) => "/",
        Some((p, _)) => p,
        None => ".",
    }
}

/// `shlex.join(["bash", "-lc", cmd])`.
fn bash_lc(cmd: &str) -> String {
    format!("bash -lc {}", py_quote(cmd))
}

/// The AIPerf phases as CloudAI resolves them: each over the base AIPerf values; with several, each its own
/// artifact directory and report (`aiperf_<name>_report.csv`).
pub(super) fn phases(
    args: &CmdArgs,
) -> Vec<(IndexMap<String, ArgValue>, IndexMap<String, ArgValue>)> {
    let Some(ArgValue::Table(base)) = args.get("aiperf") else {
        return Vec::new();
    };
    let given: Vec<IndexMap<String, ArgValue>> = match args.get("aiperf_phases") {
        Some(ArgValue::List(l)) => l
            .iter()
            .filter_map(|p| match p {
                ArgValue::Table(t) => Some(t.clone()),
                _ => None,
            })
            .collect(),
        _ => vec![IndexMap::from([(
            "name".to_string(),
            ArgValue::Str("aiperf".into()),
        )])],
    };
    let single = given.len() == 1;
    given
        .into_iter()
        .map(|phase| {
            let name = get(&phase, "name").unwrap_or_default();
            let mut p = phase.clone();
            if !single {
                let base_dir = get(base, "artifact_dir_name").unwrap_or_default();
                p.entry("artifact_dir_name".into())
                    .or_insert_with(|| ArgValue::Str(format!("{base_dir}/{name}")));
                p.entry("report_name".into())
                    .or_insert_with(|| ArgValue::Str(format!("aiperf_{name}_report.csv")));
            }
            let mut resolved = merged(base, &p);
            resolved.shift_remove("name");
            (phase, resolved)
        })
        .collect()
}

/// CloudAI's `aiperf.sh`: each phase's AIPerf run (its artifacts cleared first), its report copied out, the
/// frontend probed between phases; the last report also as `aiperf_report.csv`.
fn aiperf_script(test: &TestDefinition) -> String {
    let a = &test.cmd_args;
    let model = text(a, "dynamo.model");
    let mut blocks = vec![format!(
        "#!/usr/bin/env bash\nset -Eeuo pipefail\n\nlog() {{ echo \"[$(date +%F\\ %T) $(hostname)]: $*\"; }}\n\n\
         : \"${{FRONTEND_URL:?FRONTEND_URL is not set}}\"\n: \"${{AIPERF_MODEL:={model}}}\"\n\
         : \"${{AIPERF_ENDPOINT:={}}}\"\n: \"${{AIPERF_FAILURE_MARKER:={OUT}/{}}}\"",
        text(a, "dynamo.endpoint"),
        marker(test, "failure_marker", "failure-marker.txt")
    )];
    if let Some(setup) = a.at("aiperf.setup_cmd").map(ArgValue::py_str) {
        blocks.push(format!(
            "log {}\n{}",
            py_quote(&format!("Running aiperf setup: {}", bash_lc(&setup))),
            bash_lc(&setup)
        ));
    }
    let all = phases(a);
    let single = all.len() == 1;
    for (idx, (phase, r)) in all.iter().enumerate() {
        let name = get(phase, "name").unwrap_or_default();
        let artifacts = runtime(&get(r, "artifact_dir_name").unwrap_or_default());
        let source = format!("{artifacts}/profile_export_aiperf.csv");
        let report = runtime(&get(r, "report_name").unwrap_or_default());
        let mut args: IndexMap<String, ArgValue> = IndexMap::new();
        args.insert("model".into(), ArgValue::Str(model.clone()));
        args.insert("endpoint-type".into(), ArgValue::Str("chat".into()));
        args.insert("streaming".into(), ArgValue::Bool(true));
        if let Some(ArgValue::Table(t)) = r.get("args") {
            for (k, v) in t {
                args.insert(k.clone(), v.clone());
            }
        }
        args.insert("artifact-dir".into(), ArgValue::Str(artifacts.clone()));
        if !args.contains_key("server-metrics") && !args.contains_key("no-server-metrics") {
            args.insert("no-server-metrics".into(), ArgValue::Bool(true));
        }
        let url = args.shift_remove("url");
        let metrics_auto = args
            .get("server-metrics")
            .is_some_and(|v| v.py_str() == "auto");
        if metrics_auto {
            args.shift_remove("server-metrics");
        }
        let mut parts = Vec::new();
        for k in ["model", "endpoint-type", "streaming"] {
            if let Some(v) = args.shift_remove(k) {
                parts.push(aiperf_args(&IndexMap::from([(k.to_string(), v)])));
            }
        }
        parts.push(match url {
            None => "--url \"$FRONTEND_URL\"".into(),
            Some(u) => aiperf_args(&IndexMap::from([("url".to_string(), u)])),
        });
        parts.push(aiperf_args(&args));
        if metrics_auto {
            parts.push("--server-metrics \"$AIPERF_SERVER_METRICS_URLS\"".into());
        }
        let raw = get(r, "cmd").unwrap_or_default();
        let cmd_words = crate::util::shell::split_words(&raw).unwrap_or_else(|_| vec![raw]);
        let mut cmd_parts = vec![cmd_words
            .iter()
            .map(|w| py_quote(w))
            .collect::<Vec<_>>()
            .join(" ")];
        cmd_parts.extend(parts.into_iter().filter(|p| !p.is_empty()));
        cmd_parts.extend(get(r, "extra_args").filter(|e| !e.is_empty()));
        let cmd = cmd_parts
            .into_iter()
            .filter(|p| !p.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        let run = if single {
            cmd.clone()
        } else {
            format!(
                "{cmd} > {} 2>&1",
                py_quote(&runtime(&format!("aiperf_{name}.log")))
            )
        };
        let mut lines: Vec<String> = Vec::new();
        if let Some(setup) = get(phase, "setup_cmd") {
            lines.push(format!(
                "log {}\n{}",
                py_quote(&format!(
                    "Running AIPerf phase setup for {name}: {}",
                    bash_lc(&setup)
                )),
                bash_lc(&setup)
            ));
        }
        let mut body = vec![
            format!("rm -rf {}", py_quote(&artifacts)),
            format!("mkdir -p {}", py_quote(&artifacts)),
            format!("log {}", py_quote(&format!("Running {name}: {cmd}"))),
            "phase_status=0".into(),
            "set +e".into(),
            run,
            "phase_status=$?".into(),
            "set -e".into(),
            "if [[ \"$phase_status\" -ne 0 ]]; then".into(),
            format!("  log {}", py_quote(&format!("AIPerf phase {name} failed"))),
        ];
        if get(r, "continue_on_phase_failure").as_deref() != Some("True") {
            body.push("  exit \"$phase_status\"".into());
        }
        body.push("fi".into());
        body.push("if [[ \"$phase_status\" -eq 0 ]]; then".into());
        body.push(format!("  mkdir -p {}", py_quote(parent(&report))));
        if source != report {
            body.push(format!("  cp {} {}", py_quote(&source), py_quote(&report)));
        }
        body.push(format!(
            "  log {}",
            py_quote(&format!("AIPerf report saved to {report}"))
        ));
        let last = idx + 1 == all.len();
        if !single && last {
            let fin = runtime("aiperf_report.csv");
            body.push(format!("  mkdir -p {}", py_quote(parent(&fin))));
            if report != fin {
                body.push(format!("  cp {} {}", py_quote(&report), py_quote(&fin)));
            }
            body.push(format!(
                "  log {}",
                py_quote(&format!("Final AIPerf report saved to {fin}"))
            ));
        }
        if !single && !last {
            if let Some(between) = get(r, "between_phase_cmd").filter(|c| !c.is_empty()) {
                body.push(format!(
                    "  log {}",
                    py_quote(&format!(
                        "Running AIPerf between-phase command after {name}: {}",
                        bash_lc(&between)
                    ))
                ));
                body.push(format!("  {}", bash_lc(&between)));
            }
            if get(r, "health_check_between_phases").as_deref() != Some("False") {
                body.extend(
                    [
                        "  if [[ -f \"$AIPERF_FAILURE_MARKER\" ]]; then",
                        "    log 'FATAL: failure marker found between AIPerf phases'",
                        "    exit 1",
                        "  fi",
                        "  if ! curl -fsS -X POST \"${FRONTEND_URL}/${AIPERF_ENDPOINT}\" -H 'Content-Type: application/json' \
                         -d \"{\\\"model\\\":\\\"${AIPERF_MODEL}\\\",\\\"messages\\\":[{\\\"role\\\":\\\"user\\\",\
                         \\\"content\\\":\\\"ping\\\"}],\\\"stream\\\":false,\\\"max_tokens\\\":1}\" >/dev/null; then",
                        "    log 'FATAL: frontend health probe failed between AIPerf phases'",
                        "    exit 1",
                        "  fi",
                    ]
                    .map(str::to_string),
                );
            }
        }
        body.push("fi".into());
        lines.push(body.join("\n"));
        blocks.push(lines.join("\n"));
    }
    blocks.join("\n\n") + "\n"
}

/// The DCGM exporter on every node, started before the job and checked reachable (CloudAI's block).
fn dcgm_steps(test: &TestDefinition, nodes: u64) -> (Vec<Step>, Step) {
    let port = text(&test.cmd_args, "dynamo.dcgm_exporter.port");
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
            format!("-N{nodes}"),
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
        "mapfile -t dcgm_nodes < <(scontrol show hostnames \"$SLURM_JOB_NODELIST\")",
    ]
    .map(str::to_string)
    .into_iter()
    .chain([
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

/// A table's values as CloudAI's `toml.dumps` writes them (the HiCache configuration).
fn py(v: &ArgValue) -> crate::util::pytoml::PyVal {
    use crate::util::pytoml::PyVal;
    match v {
        ArgValue::Str(s) | ArgValue::Path(s) => PyVal::str(s.clone()),
        ArgValue::Int(i) => PyVal::Int(*i),
        ArgValue::Float(f) => PyVal::Float(*f),
        ArgValue::Bool(b) => PyVal::Bool(*b),
        ArgValue::List(l) => PyVal::List(l.iter().map(py).collect()),
        ArgValue::Table(t) => PyVal::Table(t.iter().map(|(k, v)| (k.clone(), py(v))).collect()),
    }
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
    steps.push(Step::Shell(main_srun(test, nodes)));
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
        let mut body = String::new();
        yaml(l, 0, &mut body);
        files.push((LMCACHE_FILE.to_string(), body.clone()));
        files.push((LMCACHE_BACKUP.to_string(), body));
        env.push((
            "LMCACHE_CONFIG_FILE".to_string(),
            format!("{OUT}/{LMCACHE_FILE}"),
        ));
    }
    let mut host_mounts = vec![format!("{HF_HOME}:{HF}")];
    let cache = text(a, "storage_cache_dir");
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
            other_image: dcgm.then(|| text(a, "dynamo.dcgm_exporter.docker_image_url")),
            record: Some(record),
            ..Default::default()
        }),
        ..Launch::process("", Vec::new()).in_test_image(test)
    }
}

/// What cannot run as asked, found before anything runs: the roles' node counts against the job's (CloudAI's
/// rules), AIPerf arguments that are not single values.
pub(super) fn check(test: &TestDefinition, at: &Placement) -> Vec<String> {
    let a = &test.cmd_args;
    let mut out = Vec::new();
    let n = |role: &str| int(a, &format!("dynamo.{role}.num_nodes"));
    if let (Some(p), Some(d)) = (n("prefill_worker"), n("decode_worker")) {
        let (p, d, got) = (p as u64, d as u64, at.nodes);
        let shared = got < p + d;
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
        int(
            &test.cmd_args,
            &format!("dynamo.{role}.args.tensor_parallel_size"),
        )
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
