//! SGLang serving (CloudAI's `sglang`): `sglang.launch_server` on one node, across several (its own distributed
//! launch: one task per node, `--dist-init-addr` on the first), or as a prefill/decode pair behind
//! `sglang_router`; `sglang.bench_serving` against it; optionally its GSM8K evaluation. Graded from the client's
//! JSON-lines result ([`super::llm_serving::result`]): every request asked completed, none failed, the concurrency
//! asked, request throughput above 0; CloudAI passes on one completed request.

use super::llm_serving::{self, bench_args, Flavor, RoleLaunch, Serving, Template};
use crate::config::args::{ArgDefault as D, ArgSpec, ArgType as T, ArgValue};
use crate::workloads::launch::RUN_DIR;

static ROLE: &[ArgSpec] = &[
    ArgSpec::new("gpu_ids", T::Text, D::Unset),
    ArgSpec::new("num_nodes", T::Int, D::Unset).at_least(1),
    ArgSpec::new("disaggregation_transfer_backend", T::Str, D::Str("nixl")),
];

static ARGS: &[ArgSpec] = &[
    ArgSpec::new("docker_image_url", T::Str, D::Required).single(),
    ArgSpec::new("model", T::Str, D::Str("Qwen/Qwen3-8B")).single(),
    ArgSpec::new("port", T::Int, D::Int(8300))
        .at_least(1)
        .single(),
    ArgSpec::new("host", T::Str, D::Str("0.0.0.0")).single(),
    ArgSpec::new("bench_host", T::Str, D::Unset).single(),
    ArgSpec::new("healthcheck", T::Str, D::Str("/v1/models")).single(),
    ArgSpec::new("serve_healthcheck", T::Str, D::Unset).single(),
    ArgSpec::new("serve_wait_seconds", T::Int, D::Int(300))
        .at_least(1)
        .single(),
    ArgSpec::new("prefill", T::Model(ROLE, true), D::Unset),
    ArgSpec::new("decode", T::Model(ROLE, true), D::Table),
    ArgSpec::new("serve_module", T::Str, D::Str("sglang.launch_server")).single(),
    ArgSpec::new(
        "router_module",
        T::Str,
        D::Str("sglang_router.launch_router"),
    )
    .single(),
    ArgSpec::new("bench_module", T::Str, D::Str("sglang.bench_serving")).single(),
];

static BENCH: &[ArgSpec] = &[
    ArgSpec::new("backend", T::Str, D::Str("sglang")).single(),
    ArgSpec::new("dataset_name", T::Str, D::Str("random")).single(),
    ArgSpec::new("num_prompts", T::Int, D::Int(30))
        .at_least(1)
        .single(),
    ArgSpec::new("max_concurrency", T::Int, D::Int(16))
        .at_least(1)
        .single(),
    ArgSpec::new("random_input", T::Int, D::Int(16))
        .at_least(1)
        .single(),
    ArgSpec::new("random_output", T::Int, D::Int(128))
        .at_least(1)
        .single(),
    ArgSpec::new("warmup_requests", T::Int, D::Int(2))
        .at_least(0)
        .single(),
    ArgSpec::new("random_range_ratio", T::Float, D::Float(1.0)).single(),
    ArgSpec::new("output_details", T::Bool, D::Bool(true)).single(),
];

static EVAL: &[ArgSpec] = &[
    ArgSpec::new("entrypoint", T::Str, D::Str("python3 -m sglang.test.run_eval")).single(),
    ArgSpec::new(
        "cli",
        T::Str,
        D::Str("--host {host} --port {port} --eval-name gsm8k --num-examples 200 --num-threads 128 --model {model}"),
    )
    .single(),
];

static FIELDS: &[ArgSpec] = &[
    ArgSpec::new("bench_cmd_args", T::Model(BENCH, true), D::Table),
    ArgSpec::new("custom_bash", T::StrOrDict, D::Unset),
    ArgSpec::new("semantic_eval_cmd_args", T::Model(EVAL, false), D::Unset),
];

const BENCH_JSONL: &str = "sglang-bench.jsonl";

pub(crate) static SGLANG: Template = Template {
    name: "sglang",
    args: ARGS,
    fields: FIELDS,
    check: |_| Vec::new(),
    flavor: &SglangFlavor,
    slug: "sglang",
    result: BENCH_JSONL,
    eval_json: None,
    eval_score_too: true,
    throughput_key: "request_throughput",
    client: "sglang.bench_serving",
};

struct SglangFlavor;

impl SglangFlavor {
    fn distributed(&self, s: &Serving, role: &str) -> bool {
        s.role_node_count(role) > 1
    }
}

impl Flavor for SglangFlavor {
    fn name(&self) -> &'static str {
        "SGLang"
    }
    fn internal_fields(&self) -> &'static [&'static str] {
        &["gpu_ids", "num_nodes", "disaggregation_transfer_backend"]
    }

    fn serve_commands(&self, s: &Serving) -> Vec<Vec<String>> {
        let base = vec![
            "python3".to_string(),
            "-m".into(),
            s.str_or("serve_module", ""),
            "--model-path".into(),
            s.model(),
        ];
        if !s.is_disaggregated() {
            let mut cmd = base;
            cmd.extend([
                "--host".into(),
                s.bind_host(),
                "--port".into(),
                s.port().to_string(),
            ]);
            cmd.extend(s.serve_args("serve"));
            return vec![cmd];
        }
        [(s.prefill_port(), "prefill"), (s.decode_port(), "decode")]
            .into_iter()
            .map(|(port, mode)| {
                let backend = s
                    .role_args(mode)
                    .get("disaggregation_transfer_backend")
                    .map_or("None".into(), ArgValue::py_str);
                let mut cmd = base.clone();
                cmd.extend([
                    "--host".into(),
                    s.bind_host(),
                    "--port".into(),
                    port.to_string(),
                    "--disaggregation-mode".into(),
                    mode.into(),
                    "--disaggregation-transfer-backend".into(),
                    backend,
                ]);
                cmd.extend(s.serve_args(mode));
                cmd
            })
            .collect()
    }

    fn helper_command(&self, s: &Serving) -> Vec<String> {
        vec![
            "python3".into(),
            "-m".into(),
            s.str_or("router_module", ""),
            "--pd-disaggregation".into(),
            "--prefill".into(),
            format!("http://${{PREFILL_NODE}}:{}", s.prefill_port()),
            "--decode".into(),
            format!("http://${{DECODE_NODE}}:{}", s.decode_port()),
            "--host".into(),
            s.bind_host(),
            "--port".into(),
            s.port().to_string(),
        ]
    }

    fn bench_command(&self, s: &Serving) -> Vec<String> {
        let b = bench_args(s.test);
        let v = |k: &str| b.get(k).map(ArgValue::py_str).unwrap_or_default();
        let mut cmd = vec![
            "python3".to_string(),
            "-m".into(),
            s.str_or("bench_module", ""),
            format!("--backend {}", v("backend")),
            format!("--base-url http://{}:{}", s.bench_host(), s.port()),
            format!("--model {}", s.model()),
            format!("--dataset-name {}", v("dataset_name")),
            format!("--num-prompts {}", v("num_prompts")),
            format!("--max-concurrency {}", v("max_concurrency")),
            format!("--random-input {}", v("random_input")),
            format!("--random-output {}", v("random_output")),
            format!("--warmup-requests {}", v("warmup_requests")),
            format!("--random-range-ratio {}", v("random_range_ratio")),
            format!("--output-file {RUN_DIR}/{BENCH_JSONL}"),
        ];
        cmd.extend(llm_serving::bench_extras(s.test, BENCH));
        if b.get("output_details") == Some(&ArgValue::Bool(true)) {
            cmd.push("--output-details".into());
        }
        if s.is_disaggregated() {
            cmd.push("--pd-separated".into());
        }
        cmd
    }

    fn aggregated_env(&self, s: &Serving) -> Vec<(String, String)> {
        vec![(
            "CUDA_VISIBLE_DEVICES".into(),
            llm_serving::ids(&s.gpu_ids()),
        )]
    }

    fn aggregated_preamble(&self, s: &Serving) -> String {
        if !self.distributed(s, "serve") {
            return String::new();
        }
        "export PORT_OFFSET=$((SLURM_JOB_ID % 1000))\nexport SERVE_DIST_INIT_PORT=$((20000 + PORT_OFFSET))\n\n".into()
    }

    fn disaggregated_preamble(&self, s: &Serving) -> String {
        if !(self.distributed(s, "prefill") || self.distributed(s, "decode")) {
            return String::new();
        }
        "export PORT_OFFSET=$((SLURM_JOB_ID % 1000))\nexport PREFILL_DIST_INIT_PORT=$((20000 + PORT_OFFSET))\n\
         export DECODE_DIST_INIT_PORT=$((21000 + PORT_OFFSET))\n\n"
            .into()
    }

    /// A server of several nodes: one task per node, each told the first node's address, the node count and its
    /// rank; each node's log apart (`<log>-<node>`).
    fn serve_launch(&self, s: &Serving, l: &RoleLaunch) -> String {
        if l.node_count <= 1 {
            return s.single_serve_launch(l);
        }
        let port = format!("{}_DIST_INIT_PORT", l.role.to_uppercase());
        let custom = s
            .custom_bash_for(&l.command)
            .map(|b| format!("{b}; "))
            .unwrap_or_default();
        let dist = format!(
            "{} --dist-init-addr \"${{{}}}:${{{port}}}\" --nnodes {} --node-rank \"$SLURM_PROCID\"",
            l.command, l.head_node_var, l.node_count
        );
        format!(
            "{} \\\n    --output={}-%N \\\n    bash -c {} &\n{}=$!",
            s.role_prefix(
                &format!("${{{}}}", l.nodelist_var),
                l.node_count,
                l.node_count
            ),
            s.log(&l.log_file),
            llm_serving::py_quote(&format!("{custom}exec {dist}")),
            l.pid_var
        )
    }
}
