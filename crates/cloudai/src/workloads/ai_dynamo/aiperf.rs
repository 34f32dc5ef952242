//! CloudAI's `aiperf.sh`: the AIPerf phases over the base AIPerf values (its deep merge), each run with its
//! artifacts cleared first and its report copied out, the frontend probed between phases.

use indexmap::IndexMap;

use super::{marker, OUT};
use crate::config::args::{ArgValue, CmdArgs};
use crate::config::test::TestDefinition;
use crate::util::shell::py_quote;

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

pub(super) fn get(t: &IndexMap<String, ArgValue>, k: &str) -> Option<String> {
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
pub(super) fn aiperf_script(test: &TestDefinition) -> String {
    let a = &test.cmd_args;
    let model = a.text_at("dynamo.model");
    let mut blocks = vec![format!(
        "#!/usr/bin/env bash\nset -Eeuo pipefail\n\nlog() {{ echo \"[$(date +%F\\ %T) $(hostname)]: $*\"; }}\n\n\
         : \"${{FRONTEND_URL:?FRONTEND_URL is not set}}\"\n: \"${{AIPERF_MODEL:={model}}}\"\n\
         : \"${{AIPERF_ENDPOINT:={}}}\"\n: \"${{AIPERF_FAILURE_MARKER:={OUT}/{}}}\"",
        a.text_at("dynamo.endpoint"),
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
