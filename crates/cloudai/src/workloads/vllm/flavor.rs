//! vLLM's commands: `vllm serve` for each role (NIXL's KV connector between a prefill/decode pair, Ray's executor
//! over several nodes), vLLM's toy proxy as the router, `vllm bench serve`, and a server of several nodes started as
//! a Ray cluster (workers first, then the head, which starts the server once every node joined).

use super::{BENCH, BENCH_JSON, HEALTHCHECK};
use crate::config::args::ArgValue;
use crate::workloads::launch::RUN_DIR;
use crate::workloads::llm_serving::{self, bench_args, Flavor, RoleLaunch, Serving};

pub(super) struct VllmFlavor;

/// A table or value as Python's `json.dumps(…, separators=(",", ":"))` writes it.
fn compact_json(v: &ArgValue) -> String {
    fn value(v: &ArgValue) -> serde_json::Value {
        match v {
            ArgValue::Str(s) | ArgValue::Path(s) => s.clone().into(),
            ArgValue::Int(i) => (*i).into(),
            ArgValue::Float(f) => (*f).into(),
            ArgValue::Bool(b) => (*b).into(),
            ArgValue::List(l) => l.iter().map(value).collect(),
            ArgValue::Table(t) => t.iter().map(|(k, v)| (k.clone(), value(v))).collect(),
        }
    }
    value(v).to_string()
}

/// Ray's start options: `--key` for true, nothing for false, `--key=value` else (a table as compact JSON; a
/// string shell-quoted when `quote`).
fn ray_options(args: &[(String, ArgValue)], quote: bool) -> String {
    args.iter()
        .filter_map(|(k, v)| {
            let opt = format!("--{}", k.replace('_', "-"));
            match v {
                ArgValue::Bool(true) => Some(opt),
                ArgValue::Bool(false) => None,
                ArgValue::Table(_) => {
                    Some(format!("{opt}={}", llm_serving::py_quote(&compact_json(v))))
                }
                ArgValue::Str(s) if quote => Some(format!("{opt}={}", llm_serving::py_quote(s))),
                v => Some(format!("{opt}={}", v.py_str())),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

impl VllmFlavor {
    fn needs_ray(&self, s: &Serving, role: &str) -> bool {
        s.role_node_count(role) > 1
    }

    fn with_ray(&self, s: &Serving, role: &str, mut cmd: Vec<String>) -> Vec<String> {
        if self.needs_ray(s, role) && !cmd.iter().any(|w| w == "--distributed-executor-backend") {
            cmd.extend(["--distributed-executor-backend".into(), "ray".into()]);
        }
        cmd
    }

    /// The generated start options, those the user gave in `ray_head`/`ray_worker` replacing them (and quoted).
    fn ray_start_args(
        &self,
        s: &Serving,
        role: &str,
        kind: &str,
        generated: Vec<(String, ArgValue)>,
    ) -> String {
        let Some(ArgValue::Table(user)) = s.role_args(role).get(kind) else {
            return ray_options(&generated, false);
        };
        let generated: Vec<_> = generated
            .into_iter()
            .filter(|(k, _)| !user.contains_key(k))
            .collect();
        let user: Vec<_> = user.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        [ray_options(&generated, false), ray_options(&user, true)]
            .into_iter()
            .filter(|p| !p.is_empty())
            .collect::<Vec<_>>()
            .join(" ")
    }
}

impl Flavor for VllmFlavor {
    fn name(&self) -> &'static str {
        "vLLM"
    }
    fn internal_fields(&self) -> &'static [&'static str] {
        &[
            "gpu_ids",
            "num_nodes",
            "ray_head",
            "ray_worker",
            "nixl_threads",
        ]
    }
    fn serve_arg(&self, key: &str, value: &ArgValue) -> Vec<String> {
        let name = key.replace('_', "-");
        match value {
            ArgValue::Bool(true) => vec![format!("--{name}")],
            ArgValue::Bool(false) => vec![format!("--no-{name}")],
            ArgValue::Str(s) if s.is_empty() => vec![format!("--{name}")],
            v => vec![format!("--{name}"), v.py_str()],
        }
    }

    fn serve_commands(&self, s: &Serving) -> Vec<Vec<String>> {
        let base = vec![
            "vllm".to_string(),
            "serve".into(),
            s.model(),
            "--host".into(),
            s.bind_host(),
        ];
        if !s.is_disaggregated() {
            let mut cmd = base;
            cmd.extend(s.serve_args("serve"));
            cmd.extend(["--port".into(), s.port().to_string()]);
            return vec![self.with_ray(s, "serve", cmd)];
        }
        [
            (s.prefill_port(), "prefill", "kv_producer"),
            (s.decode_port(), "decode", "kv_consumer"),
        ]
        .into_iter()
        .map(|(port, role, kv_role)| {
            let mut kv = format!("{{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"{kv_role}\"");
            if let Some(n) = s.role_args(role).get("nixl_threads") {
                kv.push_str(&format!(
                    ",\"kv_connector_extra_config\":{{\"num_threads\":{}}}",
                    compact_json(n)
                ));
            }
            let mut cmd = base.clone();
            cmd.extend([
                "--port".into(),
                port.to_string(),
                "--kv-transfer-config".into(),
                format!("'{kv}}}'"),
            ]);
            cmd.extend(s.serve_args(role));
            self.with_ray(s, role, cmd)
        })
        .collect()
    }

    fn helper_command(&self, s: &Serving) -> Vec<String> {
        vec![
            "python3".into(),
            s.str_or("proxy_script", ""),
            "--host".into(),
            s.bind_host(),
            "--port".into(),
            s.port().to_string(),
            "--prefiller-hosts".into(),
            "${PREFILL_NODE}".into(),
            "--prefiller-ports".into(),
            s.prefill_port().to_string(),
            "--decoder-hosts".into(),
            "${DECODE_NODE}".into(),
            "--decoder-ports".into(),
            s.decode_port().to_string(),
        ]
    }

    fn bench_command(&self, s: &Serving) -> Vec<String> {
        let b = bench_args(s.test);
        let n = |k: &str| b.get(k).map(ArgValue::py_str).unwrap_or_default();
        let mut cmd = vec![
            "vllm".to_string(),
            "bench".into(),
            "serve".into(),
            format!("--model {}", s.model()),
            format!("--base-url http://{}:{}", s.bench_host(), s.port()),
            format!("--random-input-len {}", n("random_input_len")),
            format!("--random-output-len {}", n("random_output_len")),
            format!("--max-concurrency {}", n("max_concurrency")),
            format!("--num-prompts {}", n("num_prompts")),
            format!("--result-dir {RUN_DIR}"),
            format!("--result-filename {BENCH_JSON}"),
            "--save-result".into(),
        ];
        cmd.extend(llm_serving::bench_extras(s.test, BENCH));
        cmd
    }

    fn eval_host(&self, s: &Serving) -> String {
        let host = s.bench_host();
        if host.starts_with("http://") || host.starts_with("https://") {
            host
        } else {
            format!("http://{host}")
        }
    }

    /// The router's endpoint: `proxy_healthcheck`, or `healthcheck` when only that was changed (CloudAI tells the
    /// two apart by which the user set; a `proxy_healthcheck` set to its default value reads as not set here).
    fn router_healthcheck(&self, s: &Serving) -> String {
        let proxy = s.str_or("proxy_healthcheck", HEALTHCHECK);
        let health = s.str_or("healthcheck", HEALTHCHECK);
        if proxy == HEALTHCHECK && health != HEALTHCHECK {
            health
        } else {
            proxy
        }
    }

    fn aggregated_preamble(&self, s: &Serving) -> String {
        if !self.needs_ray(s, "serve") {
            return String::new();
        }
        "export PORT_OFFSET=$((SLURM_JOB_ID % 1000))\nexport SERVE_RAY_PORT=$((6379 + PORT_OFFSET))\n".into()
    }

    fn disaggregated_preamble(&self, s: &Serving) -> String {
        let ray = if self.needs_ray(s, "prefill") || self.needs_ray(s, "decode") {
            "export PREFILL_RAY_PORT=$((6379 + PORT_OFFSET))\nexport DECODE_RAY_PORT=$((7379 + PORT_OFFSET))\n"
        } else {
            ""
        };
        format!(
            "export PORT_OFFSET=$((SLURM_JOB_ID % 1000))\nexport PREFILL_NIXL_PORT=$((5557 + PORT_OFFSET))\n\
             export DECODE_NIXL_PORT=$((5557 + PORT_OFFSET + {}))\n\n{ray}",
            s.gpu_ids().len()
        )
    }

    fn aggregated_pid_vars(&self, s: &Serving) -> Vec<String> {
        if self.needs_ray(s, "serve") {
            vec!["SERVE_RAY_PID".into(), "SERVE_PID".into()]
        } else {
            vec!["SERVE_PID".into()]
        }
    }

    fn disaggregated_pid_vars(&self, s: &Serving) -> Vec<String> {
        let mut vars: Vec<String> = ["PREFILL_PID", "DECODE_PID", "HELPER_PID"]
            .map(String::from)
            .to_vec();
        let prefill = self.needs_ray(s, "prefill");
        if prefill {
            vars.insert(0, "PREFILL_RAY_PID".into());
        }
        if self.needs_ray(s, "decode") {
            vars.insert(usize::from(prefill), "DECODE_RAY_PID".into());
        }
        vars
    }

    fn step_id_vars(&self, s: &Serving, pid_vars: &[String]) -> Vec<String> {
        pid_vars
            .iter()
            .map(|p| {
                let base = p.strip_suffix("_PID").unwrap_or(p);
                let role = base.to_lowercase();
                if base.ends_with("_RAY") {
                    format!("{base}_WORKER_STEP_IDS")
                } else if ["serve", "prefill", "decode"].contains(&role.as_str())
                    && self.needs_ray(s, &role)
                {
                    format!("{base}_RAY_HEAD_STEP_IDS")
                } else {
                    format!("{base}_STEP_IDS")
                }
            })
            .collect()
    }

    /// `ray stop` on every node of each Ray cluster the job started.
    fn cleanup_prelude(&self, s: &Serving) -> String {
        let roles: Vec<(&str, &str)> = if s.is_disaggregated() {
            [
                ("PREFILL_NODELIST", "prefill"),
                ("DECODE_NODELIST", "decode"),
            ]
            .into_iter()
            .filter(|(_, r)| self.needs_ray(s, r))
            .collect()
        } else if self.needs_ray(s, "serve") {
            vec![("SERVE_NODELIST", "serve")]
        } else {
            Vec::new()
        };
        if roles.is_empty() {
            return String::new();
        }
        let mut lines = vec!["    echo \"Stopping Ray clusters...\"".to_string()];
        for (list, role) in roles {
            let n = s.role_node_count(role);
            let prefix = s.role_prefix(&format!("${{{list}}}"), n, n);
            lines.extend([
                format!("    if [ -n \"${{{list}:-}}\" ]; then"),
                format!("        {prefix} bash -lc 'ray stop --force >/dev/null 2>&1 || true' >/dev/null 2>&1 || true"),
                "    else".into(),
                format!("        echo \"Skipping Ray stop for {role}: node list is not set\""),
                "    fi".into(),
            ]);
        }
        lines.join("\n")
    }

    fn role_env(&self, _s: &Serving, role: &str, gpus: &[i64]) -> Vec<(String, String)> {
        let (host, port) = if role == "prefill" {
            ("${PREFILL_NODE}", "$PREFILL_NIXL_PORT")
        } else {
            ("${DECODE_NODE}", "$DECODE_NIXL_PORT")
        };
        vec![
            ("CUDA_VISIBLE_DEVICES".into(), llm_serving::ids(gpus)),
            ("VLLM_NIXL_SIDE_CHANNEL_HOST".into(), host.into()),
            ("VLLM_NIXL_SIDE_CHANNEL_PORT".into(), port.into()),
        ]
    }

    /// A server of several nodes: a Ray worker on each node but the first (in the background, retrying until the
    /// head answers), then the Ray head, which starts the server once every node has joined.
    fn serve_launch(&self, s: &Serving, l: &RoleLaunch) -> String {
        if l.node_count <= 1 {
            return s.single_serve_launch(l);
        }
        let up = l.role.to_uppercase();
        let port = format!("{up}_RAY_PORT");
        let head = format!("${{{}}}", l.head_node_var);
        let n = l.node_count;
        let wait = s.serve_wait_seconds();
        let (worker_role, head_role) = (
            format!("{}-ray-worker", l.role),
            format!("{}-ray-head", l.role),
        );
        let serve = s.with_custom_bash(&format!(
            "env RAY_ADDRESS=\"{head}:${{{port}}}\" {}",
            l.command
        ));
        let head_args = self.ray_start_args(
            s,
            l.role,
            "ray_head",
            vec![
                ("head".into(), ArgValue::Bool(true)),
                ("port".into(), ArgValue::Str(format!("\"${{{port}}}\""))),
            ],
        );
        let worker_args = self.ray_start_args(
            s,
            l.role,
            "ray_worker",
            vec![
                (
                    "address".into(),
                    ArgValue::Str(format!("{head}:${{{port}}}")),
                ),
                ("block".into(), ArgValue::Bool(true)),
            ],
        );
        let head_script = llm_serving::py_quote(&format!(
            "ray stop --force >/dev/null 2>&1 || true\nray start {head_args}\n\nactive_nodes=0\n\
             for (( i=0; i < {wait}; i+=5 )); do\n    \
             active_nodes=$(python3 -c 'import ray; ray.init(); print(sum(node[\"Alive\"] for node in ray.nodes()))')\n    \
             if [ \"$active_nodes\" -eq \"{n}\" ]; then\n        echo \"All Ray workers are active: $active_nodes/{n}\"\n        \
             ray status || true\n        exec {serve}\n    fi\n    echo \"Waiting for Ray workers: $active_nodes/{n} active\"\n    \
             sleep 5\ndone\n\necho \"Waiting for Ray workers timed out: $active_nodes/{n} active\"\nexit 1"
        ));
        let worker_script = llm_serving::py_quote(&format!(
            "ray stop --force >/dev/null 2>&1 || true\nfor (( i=0; i < {wait}; i+=5 )); do\n    \
             if ray start {worker_args}; then\n        echo \"Ray worker connected to {head}:${{{port}}}\"\n        exit 0\n    \
             fi\n    echo \"Waiting until the Ray worker can connect to {head}:${{{port}}}...\"\n    sleep 5\ndone\n\
             echo \"Ray worker startup timed out for {head}:${{{port}}}\"\nexit 1"
        ));
        format!(
            "(\n    trap 'kill -TERM $(jobs -pr) 2>/dev/null' TERM EXIT\n    for node in \"${{{up}_NODES[@]:1}}\"; do\n        \
             {} --job-name={} \\\n            --output={} \\\n            bash -lc {worker_script} &\n    done\n    wait\n) &\n\
             {up}_RAY_PID=$!\n{}\n{} --job-name={} \\\n    --output={} \\\n    --error={} \\\n    bash -lc {head_script} &\n{}=$!\n{}",
            s.role_prefix("$node", 1, 1),
            s.step_name(&worker_role),
            s.log(&format!("vllm-{}-ray-worker-%N.log", l.role)),
            s.step_discovery(&worker_role, &format!("{up}_RAY_WORKER_STEP_IDS"), n - 1),
            s.single_role_prefix(l.head_node_var),
            s.step_name(&head_role),
            s.log(&l.log_file),
            s.log(&format!("vllm-{}-ray-head.log", l.role)),
            l.pid_var,
            s.step_discovery(&head_role, &format!("{up}_RAY_HEAD_STEP_IDS"), 1),
        )
    }
}
