//! vLLM serving (CloudAI's `vllm`): `vllm serve` on one node, on a Ray cluster of several, or as a prefill/decode
//! pair joined by NIXL behind vLLM's toy proxy; `vllm bench serve` against it; optionally the GSM8K evaluation.
//! Graded from `vllm-bench.json` ([`super::llm_serving::result`]): every request asked completed, none failed,
//! the model, prompt count and concurrency asked, output throughput above 0; CloudAI passes on one successful
//! request.

use super::llm_serving::{Args, Serving, Template};
use crate::config::args::{ArgDefault as D, ArgSpec, ArgType as T, ArgValue};

mod flavor;

use flavor::VllmFlavor;

static RAY: &[ArgSpec] = &[
    ArgSpec::new("head", T::Bool, D::Unset),
    ArgSpec::new("port", T::Text, D::Unset),
    ArgSpec::new("address", T::Str, D::Unset),
    ArgSpec::new("block", T::Bool, D::Unset),
];

static ROLE: &[ArgSpec] = &[
    ArgSpec::new("gpu_ids", T::Text, D::Unset),
    ArgSpec::new("num_nodes", T::Int, D::Unset).at_least(1),
    ArgSpec::new("ray_head", T::Model(RAY, true), D::Unset),
    ArgSpec::new("ray_worker", T::Model(RAY, true), D::Unset),
    ArgSpec::new("nixl_threads", T::Int, D::Unset).at_least(1),
];

static ARGS: &[ArgSpec] = &[
    ArgSpec::new("docker_image_url", T::Str, D::Required).single(),
    ArgSpec::new("model", T::Str, D::Str("Qwen/Qwen3-0.6B")).single(),
    ArgSpec::new("port", T::Int, D::Int(8300))
        .at_least(1)
        .single(),
    ArgSpec::new("host", T::Str, D::Str("0.0.0.0")).single(),
    ArgSpec::new("bench_host", T::Str, D::Unset).single(),
    ArgSpec::new("healthcheck", T::Str, D::Str(HEALTHCHECK)).single(),
    ArgSpec::new("serve_healthcheck", T::Str, D::Unset).single(),
    ArgSpec::new("serve_wait_seconds", T::Int, D::Int(300))
        .at_least(1)
        .single(),
    ArgSpec::new("prefill", T::Model(ROLE, true), D::Unset),
    ArgSpec::new("decode", T::Model(ROLE, true), D::Table),
    ArgSpec::new(
        "proxy_script",
        T::Str,
        D::Str("/opt/vllm/tests/v1/kv_connector/nixl_integration/toy_proxy_server.py"),
    )
    .single(),
    ArgSpec::new("proxy_healthcheck", T::Str, D::Str(HEALTHCHECK)).single(),
];

static BENCH: &[ArgSpec] = &[
    ArgSpec::new("random_input_len", T::Int, D::Int(16))
        .at_least(1)
        .single(),
    ArgSpec::new("random_output_len", T::Int, D::Int(128))
        .at_least(1)
        .single(),
    ArgSpec::new("max_concurrency", T::Int, D::Int(16))
        .at_least(1)
        .single(),
    ArgSpec::new("num_prompts", T::Int, D::Int(30))
        .at_least(1)
        .single(),
];

static EVAL: &[ArgSpec] = &[
    ArgSpec::new(
        "entrypoint",
        T::Str,
        D::Str("python3 /opt/vllm/tests/evals/gsm8k/gsm8k_eval.py"),
    )
    .single(),
    ArgSpec::new(
        "cli",
        T::Str,
        D::Str("--host {host} --port {port} --num-questions 200 --save-results {output_path}/vllm-gsm8k.json"),
    )
    .single(),
];

static GIT_REPO: &[ArgSpec] = &[
    ArgSpec::new("url", T::Str, D::Required).single(),
    ArgSpec::new("commit", T::Str, D::Required).single(),
    ArgSpec::new("init_submodules", T::Bool, D::Unset).single(),
    ArgSpec::new("mount_as", T::Str, D::Unset).single(),
];

static FIELDS: &[ArgSpec] = &[
    ArgSpec::new("bench_cmd_args", T::Model(BENCH, true), D::Table),
    ArgSpec::new("semantic_eval_cmd_args", T::Model(EVAL, false), D::Unset),
    ArgSpec::new("proxy_script_repo", T::Model(GIT_REPO, false), D::Unset),
    ArgSpec::new("custom_bash", T::StrOrDict, D::Unset),
];
const HEALTHCHECK: &str = "/healthcheck";
const BENCH_JSON: &str = "vllm-bench.json";

pub(crate) static VLLM: Template = Template {
    name: "vllm",
    args: ARGS,
    fields: FIELDS,
    check,
    flavor: &VllmFlavor,
    slug: "vllm",
    result: BENCH_JSON,
    eval_json: Some("vllm-gsm8k.json"),
    eval_score_too: false,
    throughput_key: "output_throughput",
    client: "vllm bench serve",
};

fn int(v: Option<&ArgValue>, default: i64) -> i64 {
    v.and_then(ArgValue::as_int).unwrap_or(default)
}

/// Whether a server option is on as Python reads it (`""` is off, as CloudAI's check reads a flag).
fn truthy(v: Option<&ArgValue>) -> bool {
    match v {
        Some(ArgValue::Bool(b)) => *b,
        Some(ArgValue::Str(s)) => !s.is_empty(),
        Some(ArgValue::Int(i)) => *i != 0,
        _ => false,
    }
}

/// vLLM's parallelism limits for a role on `gpus` GPUs.
fn parallelism(role: &str, args: &Args, gpus: u64) -> Option<String> {
    let (tp, pp, dp) = (
        int(args.get("tensor_parallel_size"), 1),
        int(args.get("pipeline_parallel_size"), 1),
        int(args.get("data_parallel_size"), 1),
    );
    if tp * pp * dp > gpus as i64 {
        return Some(format!(
            "the {role} server needs tensor × pipeline × data parallel = {tp} × {pp} × {dp} = {} GPUs, it has {gpus}",
            tp * pp * dp
        ));
    }
    let backend = args
        .get("all2all_backend")
        .map(ArgValue::py_str)
        .unwrap_or_default();
    if backend == "flashinfer_all2allv" && dp > 1 && truthy(args.get("enable_expert_parallel")) {
        return Some(format!(
            "the {role} server's all2all_backend = flashinfer_all2allv works with data_parallel_size 1 or without expert parallelism (data_parallel_size = {dp})"
        ));
    }
    None
}
/// vLLM's own rules: its parallelism on each role's GPUs; `proxy_script_repo` is not installed by this version.
fn check(s: &Serving) -> Vec<String> {
    if s.test.template_fields.contains_key("proxy_script_repo") {
        return vec![
            "proxy_script_repo is not installed by this version: list the repository in git_repos with a \
             mount_as and point cmd_args.proxy_script into it"
                .into(),
        ];
    }
    let per_node = s.gpu_ids().len() as u64;
    let problem = match s.prefill() {
        None => parallelism("decode", s.decode(), per_node * s.nodes),
        Some(p) => {
            let (pn, dn) = s.role_nodes().unwrap_or((1, 1));
            parallelism("prefill", p, s.role_gpus("prefill").len() as u64 * pn).or_else(|| {
                parallelism(
                    "decode",
                    s.decode(),
                    s.role_gpus("decode").len() as u64 * dn,
                )
            })
        }
    };
    problem.into_iter().collect()
}
