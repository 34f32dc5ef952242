//! A NIM/Triton inference server across all nodes but the last, and genai-perf on the last (CloudAI's
//! `TritonInference`): the server starts through a wrapper script that sets each node's NIM role, the client waits
//! `sleep_seconds` and then profiles the server. Graded from genai-perf's export ([`super::serving`]): every
//! request completed without error, the token lengths asked; CloudAI passes every run.

use std::path::Path;

use super::launch::{EnvFile, Mount, Step, Steps};
use super::{serving, IterationReport, JobOutcome, Launch, Placement, Verdict, Workload};
use crate::config::args::{ArgDefault as D, ArgSpec, ArgType as T, ArgValue};
use crate::config::test::{TemplateSchema, TestDefinition};
use crate::util::shell::single_quote;

pub(crate) struct TritonInference;

static ARGS: &[ArgSpec] = &[
    ArgSpec::new("server_docker_image_url", T::Str, D::Required).single(),
    ArgSpec::new("client_docker_image_url", T::Str, D::Required).single(),
    ArgSpec::new("served_model_name", T::Str, D::Required),
    ArgSpec::new("endpoint_type", T::Enum(&["chat"]), D::Str("chat")),
    ArgSpec::new("service_kind", T::Enum(&["openai"]), D::Str("openai")),
    ArgSpec::new("streaming", T::Bool, D::Bool(true)),
    ArgSpec::new("port", T::Int, D::Int(8000)).at_least(1),
    ArgSpec::new("num_prompts", T::Int, D::Int(20)).at_least(1),
    ArgSpec::new("input_sequence_length", T::Int, D::Int(128)).at_least(1),
    ArgSpec::new("output_sequence_length", T::Int, D::Int(128)).at_least(1),
    ArgSpec::new("concurrency", T::Int, D::Int(1)).at_least(1),
    ArgSpec::new("tokenizer", T::Str, D::Required),
    ArgSpec::new("sleep_seconds", T::Int, D::Int(3300)).at_least(0),
];

const WRAPPER: &str = "start_server_wrapper.sh";
const WRAPPER_IN_CONTAINER: &str = "/opt/nim/start_server_wrapper.sh";
/// Environment variables naming the model and cache directories on the hosts (mounted at the same paths).
const DIRS: [(&str, &str); 2] = [("NIM_MODEL_NAME", "ro"), ("NIM_CACHE_PATH", "rw")];

impl TemplateSchema for TritonInference {
    fn template(&self) -> &'static str {
        "TritonInference"
    }
    fn args(&self) -> &'static [ArgSpec] {
        ARGS
    }
}

fn env_str<'a>(test: &'a TestDefinition, k: &str) -> Option<&'a str> {
    test.extra_env_vars
        .get(k)
        .and_then(ArgValue::as_str)
        .filter(|s| !s.trim().is_empty())
}

fn int(test: &TestDefinition, k: &str) -> i64 {
    test.cmd_args.get(k).and_then(ArgValue::as_int).unwrap_or(0)
}

impl Workload for TritonInference {
    fn needs(&self) -> super::Needs {
        super::Needs::Srun
    }

    /// The server needs two nodes and the client one; the model and cache directories must exist here.
    fn check(&self, test: &TestDefinition, at: &Placement) -> Vec<String> {
        let mut out = Vec::new();
        if at.nodes < 3 {
            out.push(format!(
                "TritonInference runs its server on 2 or more nodes and genai-perf on one more: 3 nodes at least, {} asked",
                at.nodes
            ));
        }
        for (k, _) in DIRS {
            match env_str(test, k) {
                None => out.push(format!("extra_env_vars.{k} is not set: the server's directory (mounted at the same path)")),
                Some(p) if !Path::new(p).is_dir() => out.push(format!("extra_env_vars.{k} = {p}: no such directory here")),
                Some(_) => {}
            }
        }
        out
    }

    fn launch(&self, test: &TestDefinition, at: &Placement) -> Launch {
        let a = &test.cmd_args;
        let s = |k: &str| a.get(k).map(ArgValue::py_str).unwrap_or_default();
        let servers = at.nodes.saturating_sub(1).max(1);
        let nsys = super::nsys_prefix(test)
            .map(|p| format!("{p} "))
            .unwrap_or_default();
        let server = Step::Task {
            all_nodes: false,
            own_image: false,
            opts: vec![
                format!("--nodes={servers}"),
                format!("--ntasks={servers}"),
                "--ntasks-per-node=1".into(),
            ],
            cmd: format!("{nsys}{WRAPPER_IN_CONTAINER} &"),
        };
        let mut client = vec![
            "genai-perf".to_string(),
            "profile".into(),
            "-m".into(),
            s("served_model_name"),
            format!("--endpoint-type {}", s("endpoint_type")),
            format!("--service-kind {}", s("service_kind")),
        ];
        if a.get("streaming") == Some(&ArgValue::Bool(true)) {
            client.push("--streaming".into());
        }
        let (osl, n, c) = (
            s("output_sequence_length"),
            s("num_prompts"),
            s("concurrency"),
        );
        client.extend([
            "-u".into(),
            format!("$SLURM_JOB_MASTER_NODE:{}", s("port")),
            "--num-prompts".into(),
            n.clone(),
            "--synthetic-input-tokens-mean".into(),
            s("input_sequence_length"),
            "--synthetic-input-tokens-stddev".into(),
            "0".into(),
            "--concurrency".into(),
            c.clone(),
            "--output-tokens-mean".into(),
            osl.clone(),
            "--extra-inputs".into(),
            format!("max_tokens:{osl}"),
            "--extra-inputs".into(),
            format!("min_tokens:{osl}"),
            "--extra-inputs".into(),
            "ignore_eos:true".into(),
            "--artifact-dir".into(),
            "/cloudai_run_results".into(),
            "--tokenizer".into(),
            s("tokenizer"),
            "--".into(),
            "-v".into(),
            format!("--max-threads {c}"),
            format!("--request-count {n}"),
        ]);
        let client = Step::Task {
            all_nodes: false,
            own_image: true,
            opts: vec!["--nodes=1".into(), "--ntasks=1".into()],
            cmd: client.join(" "),
        };
        let mut wrapper = vec![
            "#!/bin/bash".to_string(),
            String::new(),
            "export NIM_LEADER_IP_ADDRESS=${SLURM_JOB_MASTER_NODE}".into(),
            "export NIM_NODE_RANK=${SLURM_NODEID}".into(),
            String::new(),
        ];
        for (k, v) in &test.extra_env_vars {
            if let (ArgValue::Str(v), false) = (
                v,
                ["NIM_LEADER_IP_ADDRESS", "NIM_NODE_RANK"].contains(&k.as_str()),
            ) {
                wrapper.push(format!("export {k}={}", single_quote(v)));
            }
        }
        wrapper.extend(
            [
                "",
                "if [ \"$NIM_NODE_RANK\" -eq 0 ]; then",
                "  export NIM_LEADER_ROLE=1",
                "else",
                "  export NIM_LEADER_ROLE=0",
                "fi",
                "",
                "echo \"Starting NIM server on node rank ${NIM_NODE_RANK} with leader role ${NIM_LEADER_ROLE}\"",
                "exec /opt/nim/start_server.sh",
            ]
            .map(str::to_string),
        );
        let mut launch = Launch {
            steps: Some(Steps {
                steps: vec![
                    server,
                    Step::Shell(String::new()),
                    Step::Shell(format!("sleep {}", int(test, "sleep_seconds"))),
                    Step::Shell(String::new()),
                    client,
                ],
                setup_in_image: false,
                env_file: EnvFile::None,
                prologue: vec![
                    "export HEAD_NODE=$SLURM_JOB_MASTER_NODE".into(),
                    "export NIM_LEADER_IP_ADDRESS=$SLURM_JOB_MASTER_NODE".into(),
                    format!(
                        "export NIM_NUM_COMPUTE_NODES={}",
                        at.nodes.saturating_sub(1)
                    ),
                    // CloudAI's fixed value, whatever the test's tokenizer
                    "export NIM_MODEL_TOKENIZER='deepseek-ai/DeepSeek-R1'".into(),
                ],
                files: vec![(WRAPPER.into(), wrapper.join("\n"))],
                // written beside the script (not made as a mount source), read-only in the container
                mounts: vec![Mount {
                    source: WRAPPER.into(),
                    target: format!("{WRAPPER_IN_CONTAINER}:ro"),
                    file_size: Some(0),
                }],
                other_image: a.str("client_docker_image_url").map(str::to_string),
                ..Default::default()
            }),
            image: a.str("server_docker_image_url").map(str::to_string),
            image_field: Some("cmd_args.server_docker_image_url"),
            ..Launch::process("", Vec::new())
        };
        for (k, mode) in DIRS {
            if let Some(p) = env_str(test, k) {
                launch.host_mounts.push(format!("{p}:{p}:{mode}"));
            }
        }
        launch
    }

    fn grade(&self, test: &TestDefinition, dir: &Path, _outcome: &JobOutcome) -> Verdict {
        verdict(test, dir, serving::find(dir).as_ref())
    }

    fn report(&self, test: &TestDefinition, dir: &Path, title: &str) -> Option<IterationReport> {
        if !dir.join("stdout.txt").exists() {
            return None;
        }
        let e = serving::find(dir);
        let v = verdict(test, dir, e.as_ref());
        let table = serving::table(e.as_ref());
        let page = super::kit::TablePage {
            title,
            verdict: &v.status_line(),
            passed: v.passed,
            cards: vec![("metrics".into(), table.rows.len().to_string())],
            charts: serde_json::json!({}),
            show: Vec::new(),
            sections: vec![table.section("genai-perf")],
        }
        .render();
        Some(IterationReport {
            files: vec![
                ("triton_inference.csv".into(), table.csv()),
                ("triton_inference.html".into(), page),
            ],
            verdict: Some(v),
            ..Default::default()
        })
    }
}

/// The grade of the client's export (`None`: it wrote none).
fn verdict(test: &TestDefinition, dir: &Path, export: Option<&serving::Export>) -> Verdict {
    match export {
        Some(e) => serving::verdict(e, &asked(test)),
        None => Verdict::fail(format!(
            "genai-perf wrote no {} under {}: the client did not finish (was the server up after sleep_seconds = {}?)",
            serving::EXPORTS[0],
            dir.display(),
            int(test, "sleep_seconds")
        )),
    }
}

fn asked(test: &TestDefinition) -> serving::Asked {
    let n = |k: &str| Some(int(test, k) as u64).filter(|x| *x > 0);
    serving::Asked {
        requests: n("num_prompts"),
        input_tokens: n("input_sequence_length"),
        output_tokens: n("output_sequence_length"),
    }
}
