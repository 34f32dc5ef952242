//! The batch script of a serving test, as CloudAI writes it: a cleanup trap that stops every step the job started
//! (by Slurm step id, else by PID), a readiness wait, the servers (and router), the client, the evaluation.
//! [`SRUN`]/[`SRUN_ALL_NODES`] stand for the job's task-launcher prefix, [`RUN_DIR`] for the iteration's
//! directory, [`RUN_TAG`] for the run's name; the Slurm writer puts them in.

use super::{RoleLaunch, Serving};
use crate::workloads::launch::{RUN_DIR, RUN_TAG, SRUN, SRUN_ALL_NODES};

/// Seconds the cleanup waits for a step to end before it kills it.
const CLEANUP_TIMEOUT: u32 = 60;

pub(crate) use crate::util::shell::py_quote;

impl Serving<'_> {
    pub(crate) fn step_name(&self, role: &str) -> String {
        format!("cloudai-{}-{}", self.slug, role.replace('_', "-"))
    }

    pub(crate) fn log(&self, file: &str) -> String {
        format!("{RUN_DIR}/{file}")
    }

    /// A launch of `tasks` tasks on the nodes `nodelist` names, beside the job's other steps.
    pub(crate) fn role_prefix(&self, nodelist: &str, nodes: u64, tasks: u64) -> String {
        format!(
            "{SRUN} --overlap --nodelist=\"{nodelist}\" --nodes={nodes} --ntasks={tasks} --ntasks-per-node=1"
        )
    }

    /// One task on the node a variable names.
    pub(crate) fn single_role_prefix(&self, node_var: &str) -> String {
        self.role_prefix(&format!("${{{node_var}}}"), 1, 1)
    }

    /// The command, or `bash -c` running the user's `custom_bash` first.
    pub(crate) fn with_custom_bash(&self, command: &str) -> String {
        match self.custom_bash_for(command) {
            Some(bash) => format!("bash -c {}", py_quote(&format!("{bash}; exec {command}"))),
            None => command.to_string(),
        }
    }

    /// Waits until the steps named after `role` are listed, keeping their ids in `var` for the cleanup.
    pub(crate) fn step_discovery(&self, role: &str, var: &str, expected: u64) -> String {
        let name = self.step_name(role);
        format!(
            "{var}=\nfor _ in {{1..10}}; do\n    {var}=$(squeue --noheader --steps --job \"$SLURM_JOB_ID\" \
             --format=\"%i %j\" 2>/dev/null | awk '$2 == \"{name}\" {{ print $1 }}')\n    \
             CLOUDAI_STEP_COUNT=$(printf '%s\\n' \"${{{var}}}\" | wc -w | tr -d ' ')\n    \
             if [ \"$CLOUDAI_STEP_COUNT\" -ge {expected} ]; then break; fi\n    sleep 1\ndone\n\
             echo \"Slurm step IDs for {role}: ${{{var}:-unknown}}\"\n"
        )
    }

    /// The shared one-node server launch.
    pub(crate) fn single_serve_launch(&self, l: &RoleLaunch) -> String {
        let prefix = self.single_role_prefix(l.head_node_var);
        let var = step_id_var(l.role);
        format!(
            "{prefix} --job-name={} \\\n    --output={} \\\n    {} &\n{}=$!\n{}",
            self.step_name(l.role),
            self.log(&l.log_file),
            self.with_custom_bash(&l.command),
            l.pid_var,
            self.step_discovery(l.role, &var, 1)
        )
    }

    fn file(&self, kind: &str) -> String {
        format!("{}-{kind}.log", self.slug)
    }
}

pub(crate) fn step_id_var(role: &str) -> String {
    format!("{}_STEP_IDS", role.replace('-', "_").to_uppercase())
}

/// `env K="V" … command`, or the command alone.
pub(crate) fn with_env(command: &[String], env: &[(String, String)]) -> String {
    if env.is_empty() {
        return command.join(" ");
    }
    let mut parts: Vec<String> = vec!["env".into()];
    parts.extend(env.iter().map(|(k, v)| format!("{k}=\"{v}\"")));
    parts.extend(command.iter().cloned());
    parts.join(" ")
}

fn signal_block(pid: &str, step: &str, signal: &str) -> String {
    let pid_signal = if signal == "KILL" { "KILL" } else { "TERM" };
    format!(
        "    if [ -n \"${{{step}:-}}\" ]; then\n        for step_id in ${{{step}}}; do\n            \
         scancel --signal={signal} \"$step_id\" 2>/dev/null || true\n        done\n    \
         elif [ -n \"${{{pid}:-}}\" ]; then\n        kill -{pid_signal} \"${{{pid}}}\" 2>/dev/null || true\n    fi"
    )
}

fn wait_block(pid: &str, step: &str) -> String {
    let force: Vec<String> = signal_block(pid, step, "KILL")
        .lines()
        .map(|l| format!("            {l}"))
        .collect();
    format!(
        "    if [ -n \"${{{pid}:-}}\" ]; then\n        i=0\n        while kill -0 \"${{{pid}}}\" 2>/dev/null; do\n            \
         if [ \"$i\" -ge {CLEANUP_TIMEOUT} ]; then\n                echo \"PID ${{{pid}}} did not exit in time\"\n                \
         cleanup_status=1\n{}\n                break\n            fi\n            sleep 1\n            i=$((i+1))\n        done\n    fi",
        force.join("\n")
    )
}

fn cleanup_function(s: &Serving, pid_vars: &[String]) -> String {
    let step_vars = s.flavor.step_id_vars(s, pid_vars);
    let guard = format!("CLOUDAI_{RUN_TAG}_CLEANUP_DONE");
    let values = |vars: &[String]| {
        vars.iter()
            .map(|v| format!("{v}=${v}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut prelude = s.flavor.cleanup_prelude(s);
    if !prelude.is_empty() {
        prelude.push('\n');
    }
    let pairs = || pid_vars.iter().zip(&step_vars);
    let term: Vec<String> = pairs().map(|(p, st)| signal_block(p, st, "TERM")).collect();
    let wait: Vec<String> = pairs().map(|(p, st)| wait_block(p, st)).collect();
    format!(
        "cleanup() {{\n    if [ \"${{{guard}:-0}}\" = \"1\" ]; then\n        return 0\n    fi\n    {guard}=1\n    \
         cleanup_status=0\n{prelude}    echo \"Cleaning up PIDs: {}\"\n    echo \"Cleaning up Slurm step IDs: {}\"\n\n\
         {}\n\n{}\n    return \"$cleanup_status\"\n}}\ntrap cleanup EXIT",
        values(pid_vars),
        values(&step_vars),
        term.join("\n"),
        wait.join("\n")
    )
}

fn health_function(s: &Serving) -> String {
    format!(
        "wait_for_health() {{\n    local endpoint=\"$1\"\n    local timeout={}\n    local interval=5\n    \
         local end_time=$(($(date +%s) + timeout))\n\n    while [ \"$(date +%s)\" -lt \"$end_time\" ]; do\n        \
         if curl -sf \"$endpoint\" > /dev/null 2>&1; then\n            echo \"Health check passed: $endpoint\"\n            \
         return 0\n        fi\n        sleep \"$interval\"\n    done\n\n    echo \"Timeout waiting for: $endpoint\"\n    \
         return 1\n}}",
        s.serve_wait_seconds()
    )
}

fn health_wait(s: &Serving, endpoints: &[String], host_setup: &str, display: &str) -> String {
    let waits: Vec<String> = endpoints
        .iter()
        .map(|e| format!("wait_for_health \"{e}\" || exit 1"))
        .collect();
    format!(
        "{host_setup}echo \"Waiting for {} on {display} to be ready...\"\n{}",
        s.flavor.name(),
        waits.join("\n")
    )
}

/// `{host}`, `{port}`, `{model}`, `{url}`, `{output_path}`, `{result_dir}` in the evaluation's command line.
fn expand_eval_cli(s: &Serving, cli: &str, host: &str) -> String {
    let port = s.port().to_string();
    let mut out = cli.to_string();
    for (k, v) in [
        ("{model}", s.model()),
        ("{host}", host.to_string()),
        ("{port}", port.clone()),
        ("{url}", format!("{host}:{port}")),
        ("{output_path}", RUN_DIR.to_string()),
        ("{result_dir}", RUN_DIR.to_string()),
    ] {
        out = out.replace(k, &v);
    }
    out
}

fn semantic_eval(s: &Serving, prefix: &str) -> String {
    let Some(crate::config::args::ArgValue::Table(eval)) =
        s.test.template_fields.get("semantic_eval_cmd_args")
    else {
        return String::new();
    };
    let get = |k: &str| eval.get(k).map(|v| v.py_str()).unwrap_or_default();
    let cli = expand_eval_cli(s, &get("cli"), &s.flavor.eval_host(s));
    let mut cmd = get("entrypoint");
    if !cli.is_empty() {
        cmd = format!("{cmd} {cli}");
    }
    format!(
        "\necho \"Running semantic validation...\"\n{prefix} \\\n    --output={} \\\n    {}",
        s.log(&s.file("semantic-eval")),
        s.with_custom_bash(&cmd)
    )
}

fn aggregated(s: &Serving, serve: &[String], bench: &str) -> String {
    let nodes = s.role_node_count("serve");
    let single = nodes == 1;
    let command = with_env(serve, &s.flavor.aggregated_env(s));
    let health = format!(
        "http://${{NODE}}:{}{}",
        s.port(),
        s.flavor.serve_healthcheck(s, "serve")
    );
    let host_setup = if single {
        "NODE=$(scontrol show hostname $SLURM_JOB_NODELIST | head -n 1)\n"
    } else {
        ""
    };
    let wait = health_wait(s, &[health], host_setup, "$NODE");
    let (launch, prefix) = if single {
        let prefix = format!("{SRUN_ALL_NODES} --overlap --ntasks-per-node=1 --ntasks=1");
        let launch = format!(
            "{prefix} --job-name={} \\\n    --output={} \\\n    {} &\nSERVE_PID=$!\n{}",
            s.step_name("serve"),
            s.log(&s.file("serve")),
            s.with_custom_bash(&command),
            s.step_discovery("serve", &step_id_var("serve"), 1)
        );
        (launch, prefix)
    } else {
        let launch = s.flavor.serve_launch(
            s,
            &RoleLaunch {
                role: "serve",
                command,
                pid_var: "SERVE_PID",
                log_file: s.file("serve"),
                node_count: nodes,
                head_node_var: "SERVE_NODE",
                nodelist_var: "SERVE_NODELIST",
            },
        );
        (launch, s.single_role_prefix("SERVE_NODE"))
    };
    let node_setup = if single {
        String::new()
    } else {
        format!(
            "NODES=( $(scontrol show hostname $SLURM_JOB_NODELIST) )\nSERVE_NODES=( \"${{NODES[@]:0:{nodes}}}\" )\n\
             if [ \"${{#SERVE_NODES[@]}}\" -ne {nodes} ]; then\n    echo \"Expected {nodes} allocated nodes for {}, got: ${{NODES[*]}}\"\n    \
             exit 1\nfi\nexport SERVE_NODE=${{SERVE_NODES[0]}}\nexport NODE=$SERVE_NODE\n\
             SERVE_NODELIST=$(IFS=,; echo \"${{SERVE_NODES[*]}}\")\necho \"Node roles: serve=${{SERVE_NODES[*]}}\"\n\n",
            s.flavor.name()
        )
    };
    format!(
        "{}\n\n{}\n\n{}{node_setup}echo \"Starting {} instances...\"\n{launch}\n\n{wait}\n\n\
         echo \"Running benchmark...\"\n{prefix} \\\n    --output={} \\\n    {}\n\n{}",
        cleanup_function(s, &s.flavor.aggregated_pid_vars(s)),
        health_function(s),
        s.flavor.aggregated_preamble(s),
        s.flavor.name(),
        s.log(&s.file("bench")),
        s.with_custom_bash(bench),
        semantic_eval(s, &prefix)
    )
}

fn disaggregated(s: &Serving, serve: &[Vec<String>], bench: &str) -> String {
    let name = s.flavor.name();
    let (p_nodes, d_nodes) = s.role_nodes().unwrap_or((1, 1));
    let role = |role: &'static str,
                cmd: &[String],
                pid_var: &'static str,
                nodes: u64,
                head: &'static str,
                list: &'static str| {
        let env = s.flavor.role_env(s, role, &s.role_gpus(role));
        s.flavor.serve_launch(
            s,
            &RoleLaunch {
                role,
                command: with_env(cmd, &env),
                pid_var,
                log_file: s.file(role),
                node_count: nodes,
                head_node_var: head,
                nodelist_var: list,
            },
        )
    };
    let prefill = role(
        "prefill",
        &serve[0],
        "PREFILL_PID",
        p_nodes,
        "PREFILL_NODE",
        "PREFILL_NODELIST",
    );
    let decode = role(
        "decode",
        &serve[1],
        "DECODE_PID",
        d_nodes,
        "DECODE_NODE",
        "DECODE_NODELIST",
    );
    let decode_start = if s.nodes == 1 && p_nodes == 1 && d_nodes == 1 {
        0
    } else {
        p_nodes
    };
    let node_setup = format!(
        "NODES=( $(scontrol show hostname $SLURM_JOB_NODELIST) )\nPREFILL_NODES=( \"${{NODES[@]:0:{p_nodes}}}\" )\n\
         DECODE_NODES=( \"${{NODES[@]:{decode_start}:{d_nodes}}}\" )\n\
         if [ \"${{#PREFILL_NODES[@]}}\" -ne {p_nodes} ] || [ \"${{#DECODE_NODES[@]}}\" -ne {d_nodes} ]; then\n    \
         echo \"Expected {p_nodes} prefill and {d_nodes} decode nodes for disaggregated {name}, got: ${{NODES[*]}}\"\n    \
         exit 1\nfi\nexport PREFILL_NODE=${{PREFILL_NODES[0]}}\nexport DECODE_NODE=${{DECODE_NODES[0]}}\n\
         PREFILL_NODELIST=$(IFS=,; echo \"${{PREFILL_NODES[*]}}\")\nDECODE_NODELIST=$(IFS=,; echo \"${{DECODE_NODES[*]}}\")\n\
         if [ -z \"$PREFILL_NODE\" ] || [ -z \"$DECODE_NODE\" ]; then\n    \
         echo \"Failed to resolve allocated nodes for disaggregated {name}\"\n    exit 1\nfi\n\
         echo \"Node roles: prefill=${{PREFILL_NODES[*]}} decode=${{DECODE_NODES[*]}}\"\n\n"
    );
    let wait = health_wait(
        s,
        &[
            format!(
                "http://${{PREFILL_NODE}}:{}{}",
                s.prefill_port(),
                s.flavor.serve_healthcheck(s, "prefill")
            ),
            format!(
                "http://${{DECODE_NODE}}:{}{}",
                s.decode_port(),
                s.flavor.serve_healthcheck(s, "decode")
            ),
        ],
        "",
        "$PREFILL_NODE and $DECODE_NODE",
    );
    let wait_router = health_wait(
        s,
        &[format!(
            "http://${{PREFILL_NODE}}:{}{}",
            s.port(),
            s.flavor.router_healthcheck(s)
        )],
        "",
        "$PREFILL_NODE server",
    );
    let prefix = s.single_role_prefix("PREFILL_NODE");
    format!(
        "{}\n\n{}\n\n{}{node_setup}echo \"Starting {name} instances...\"\n{prefill}\n\n{decode}\n\n{wait}\n\n\
         echo \"Starting router...\"\n{prefix} --job-name={} \\\n    --output={} \\\n    {} &\nHELPER_PID=$!\n{}\n\n\
         {wait_router}\n\necho \"Running benchmark...\"\n{prefix} \\\n    --output={} \\\n    {}\n\n{}",
        cleanup_function(s, &s.flavor.disaggregated_pid_vars(s)),
        health_function(s),
        s.flavor.disaggregated_preamble(s),
        s.step_name("helper"),
        s.log(&s.file("router")),
        s.with_custom_bash(&s.flavor.helper_command(s).join(" ")),
        s.step_discovery("helper", &step_id_var("helper"), 1),
        s.log(&s.file("bench")),
        s.with_custom_bash(bench),
        semantic_eval(s, &prefix)
    )
}

/// The whole job after its set-up steps; `cleanup` runs at its end as well as on exit.
pub(crate) fn render(s: &Serving) -> String {
    let serve = s.flavor.serve_commands(s);
    let bench = s.flavor.bench_command(s).join(" ");
    let body = if serve.len() == 1 {
        aggregated(s, &serve[0], &bench)
    } else {
        disaggregated(s, &serve, &bench)
    };
    format!("{}\n\ncleanup\n", body.trim())
}
