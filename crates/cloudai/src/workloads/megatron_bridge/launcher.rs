//! The launcher's command line and CloudAI's wrapper around it, byte for byte. The wrapper (in the iteration's
//! directory) sets `NEMORUN_HOME` to it, mirrors its own output to files, exports the container runtime's device
//! variables for the launcher's `sbatch`, installs the launcher's runtime packages into NeMo-Run's environment,
//! runs `setup_experiment.py` with its output into the launcher log, and prints the last job id the log shows as
//! `Submitted batch job N`. `cloudai_generated_command.sh` and `test-run.toml` record `bash <wrapper>`.
//!
//! Flags follow the test's values, as CloudAI writes them once a test has been read back from its dump (every
//! field counts as set): an unset optional field is left out, `-vb` and `--moe_a2a_overlap` are always written
//! (`false` when unset), defaults (`--max_retries 1`, `-ms 10`) are written. Values are written as one shell word
//! each (unchanged when plain, as in CloudAI's); `export K=V` commands, the Slurm parameters and the Hydra overrides
//! are quoted as a whole, as CloudAI quotes them, so `$VAR` in them expands in the job's shell.

use std::path::Path;

use super::{bridge_repo, Image, TestDefinition, HF_TOKEN_ENV};
use crate::config::args::ArgValue;
use crate::util::shell::{py_quote, quote};
use crate::workloads::submit::{slurm_params, Login, PythonLauncher, Submission, SubmitAt};

pub(super) const WRAPPER: &str = "cloudai_megatron_bridge_submit_and_parse_jobid.sh";
/// The launcher's output: its own lines, then the job's log while it stays with the job.
pub(super) const LOG: &str = "cloudai_megatron_bridge_launcher.log";
const COMMAND_FILE: &str = "cloudai_generated_command.sh";
/// Variables the container runtime reads when `srun` creates the job's container: the launcher's `sbatch` must
/// inherit them, so the wrapper exports them before it runs (they reach the job's shell through `-cb` too).
const RUNTIME_VARS: &[&str] = &[
    "MELLANOX_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "NVIDIA_VISIBLE_DEVICES",
];

/// A comma list written as the launcher reads it: items without quotes or brackets, joined by commas.
fn comma_list(v: &ArgValue) -> String {
    super::comma_items(v).join(",")
}

struct Flags<'a> {
    test: &'a TestDefinition,
    parts: Vec<String>,
}

impl Flags<'_> {
    fn push(&mut self, flag: &str, value: &str) {
        if !value.is_empty() {
            self.parts.push(flag.into());
            self.parts.push(quote(value).into_owned());
        }
    }
    fn get(&self, key: &str) -> Option<&ArgValue> {
        self.test.cmd_args.get(key)
    }
    /// `flag value` when the field has a value (a boolean as `true` / `false`).
    fn field(&mut self, key: &str, flag: &str) {
        let text = match self.get(key) {
            None => return,
            Some(ArgValue::Bool(b)) => b.to_string(),
            Some(v) => v.py_str(),
        };
        self.push(flag, &text);
    }
    /// `flag true|false`, written whether set or not.
    fn boolean(&mut self, key: &str, flag: &str) {
        let on = self.get(key) == Some(&ArgValue::Bool(true));
        self.push(flag, if on { "true" } else { "false" });
    }
    /// A bare flag when the field is true.
    fn switch(&mut self, key: &str, flag: &str) {
        if self.get(key) == Some(&ArgValue::Bool(true)) {
            self.parts.push(flag.into());
        }
    }
}

/// The launcher's `-i`: a local image file as its absolute path, else the image as the job runs it (its cached
/// `.sqsh`, or its URL — CloudAI writes `$PWD/<url>` there, a path that does not exist; documented).
fn image(test: &TestDefinition, at: &SubmitAt) -> Option<String> {
    match super::image(test)? {
        Image::File(f) => {
            Some(std::path::absolute(f).map_or_else(|_| f.to_string(), |p| p.display().to_string()))
        }
        Image::Url(url) => at.image.clone().or_else(|| Some(url.to_string())),
    }
}

/// The Slurm parameters of the launcher's job: the GPU directives, the node list (else the nodes to avoid), both
/// task-launcher argument strings.
fn job_params(at: &SubmitAt) -> Vec<String> {
    let mut params = Vec::new();
    if let Some(g) = at.gpus_per_node.filter(|_| at.gpu_directives) {
        params.push(format!("gpus-per-node={g}"));
        params.push(format!("gres=gpu:{g}"));
    }
    if !at.nodes.is_empty() {
        params.push(format!("nodelist={}", at.nodes.join(",")));
    } else if !at.exclude.is_empty() {
        params.push(format!("exclude={}", at.exclude.join(",")));
    }
    for a in &at.srun_args {
        params.extend(slurm_params(a));
    }
    params
}

/// CloudAI's lines that submit the pre-hook job (`sbatch`), start the job parameters with the dependency on it and,
/// when no node list is asked, wait (at most an hour) for the pre-hook to run and take its nodes for the job.
fn pre_hook_lines(script: &Path, at: &SubmitAt) -> Vec<String> {
    let mut lines: Vec<String> = [
        &format!("PRE_HOOK_SBATCH=\"{}\"", script.display()),
        "PRE_HOOK_OUTPUT=$(sbatch \"$PRE_HOOK_SBATCH\" 2>&1)",
        "PRE_HOOK_JOB_ID=$(echo \"$PRE_HOOK_OUTPUT\" | grep -Eo \"Submitted batch job [0-9]+\" | grep -Eo \"[0-9]+\" | tail -n1 || true)",
        "if [ -z \"$PRE_HOOK_JOB_ID\" ]; then",
        "  echo \"Failed to submit pre-hook job: $PRE_HOOK_OUTPUT\" >&2",
        "  exit 1",
        "fi",
        "echo \"Submitted pre-hook batch job $PRE_HOOK_JOB_ID\"",
        &format!("ADDITIONAL_SLURM_PARAMS=\"{}\"", job_params(at).join(";")),
        "ADDITIONAL_SLURM_PARAMS=\"${ADDITIONAL_SLURM_PARAMS};dependency=afterok:${PRE_HOOK_JOB_ID}\"",
        "",
    ]
    .map(str::to_string)
    .to_vec();
    if at.nodes.is_empty() {
        lines.extend(
            [
                "# Wait for pre-hook to reach RUNNING; exit on terminal state or timeout (1 h)",
                "PRE_HOOK_NODES=''",
                "_NODELIST_WAIT=0",
                "_NODELIST_TIMEOUT=3600",
                "while true; do",
                "    _state=$(squeue -j \"$PRE_HOOK_JOB_ID\" -h -o \"%T\" 2>/dev/null || true)",
                "    if [ \"$_state\" = \"RUNNING\" ]; then",
                "        PRE_HOOK_NODES=$(squeue -j \"$PRE_HOOK_JOB_ID\" -h -o \"%N\" 2>/dev/null | head -1 || true)",
                "        break",
                "    elif [ -z \"$_state\" ] || [ \"$_state\" = \"FAILED\" ] || [ \"$_state\" = \"CANCELLED\" ] || [ \"$_state\" = \"COMPLETED\" ] || [ \"$_state\" = \"TIMEOUT\" ]; then",
                "        echo \"Pre-hook job $PRE_HOOK_JOB_ID ended in state '${_state:-gone}' before reaching RUNNING.\" >&2",
                "        exit 1",
                "    elif [ \"$_NODELIST_WAIT\" -ge \"$_NODELIST_TIMEOUT\" ]; then",
                "        echo \"Timed out after ${_NODELIST_TIMEOUT}s waiting for pre-hook job $PRE_HOOK_JOB_ID to reach RUNNING (last state: ${_state}).\" >&2",
                "        exit 1",
                "    fi",
                "    sleep 10",
                "    _NODELIST_WAIT=$((_NODELIST_WAIT + 10))",
                "done",
                "ADDITIONAL_SLURM_PARAMS=\"${ADDITIONAL_SLURM_PARAMS};nodelist=${PRE_HOOK_NODES}\"",
                "",
            ]
            .map(str::to_string),
        );
    }
    lines
}

fn launcher_parts(
    test: &TestDefinition,
    at: &SubmitAt,
    launcher: &PythonLauncher,
    bridge: &Path,
) -> Vec<String> {
    let python = launcher.python(at.install);
    let script = bridge.join("scripts/performance/setup_experiment.py");
    let mut f = Flags {
        test,
        parts: vec![
            format!("NEMORUN_HOME=\"{}\"", at.dir.display()),
            python.display().to_string(),
            script.display().to_string(),
        ],
    };
    if let Some(a) = at.account {
        f.push("-a", a);
    }
    f.push("-p", at.partition);
    f.field("gpu_type", "-g");
    f.field("log_dir", "-l");
    if let Some(t) = &at.time_limit {
        f.push("-t", t);
    }
    if let Some(i) = image(test, at) {
        f.push("-i", &i);
    }
    f.field("compute_dtype", "-c");
    f.field("task", "--task");
    match test.cmd_args.str("hf_token").map(str::trim) {
        Some(t) if !t.is_empty() => f.push("-hf", t),
        // from the environment, by name: the token is written into no file
        _ => {
            f.parts.push("-hf".into());
            f.parts.push(format!("\"${{{HF_TOKEN_ENV}}}\""));
        }
    }
    for (k, flag) in [
        ("nemo_home", "-nh"),
        ("wandb_key", "-wdk"),
        ("wandb_project_name", "-wdp"),
        ("wandb_entity_name", "-wde"),
        ("wandb_experiment_name", "-wdj"),
        ("wandb_save_dir", "-wds"),
        ("max_retries", "--max_retries"),
    ] {
        f.field(k, flag);
    }
    f.switch("dryrun", "-d");
    f.field("num_gpus", "-ng");
    if let Some(g) = at.gpus_per_node {
        f.push("-gn", &g.to_string());
    }
    let mut mounts: Vec<String> = test
        .extra_container_mounts
        .iter()
        .map(|m| m.trim().to_string())
        .filter(|m| !m.is_empty())
        .collect();
    if let Some(target) = bridge_repo(test).and_then(|g| g.mount_as.as_deref()) {
        mounts.push(format!("{}:{target}", bridge.display()));
    }
    if !mounts.is_empty() {
        f.push("-cm", &mounts.join(","));
    }
    let mut env: Vec<&(String, String)> = at.env.iter().collect();
    env.sort_by(|a, b| a.0.cmp(&b.0));
    for (k, v) in env {
        f.parts.push("-cb".into());
        f.parts.push(py_quote(&format!("export {k}={v}")));
    }
    f.field("domain", "--domain");
    f.switch("use_recipes", "--use_recipes");
    f.boolean("enable_vboost", "-vb");
    for (k, flag) in [
        ("model_family_name", "-m"),
        ("model_recipe_name", "-mr"),
        ("hidden_size", "--hidden_size"),
        ("num_layers", "--num_layers"),
        (
            "pipeline_model_parallel_layout",
            "--pipeline_model_parallel_layout",
        ),
        ("first_k_dense_replace", "--first_k_dense_replace"),
    ] {
        f.field(k, flag);
    }
    f.switch("enable_nsys", "-en");
    for (k, flag) in [
        ("use_tokendrop", "--use_tokendrop"),
        ("use_megatron_fsdp", "--use_megatron_fsdp"),
        ("nccl_ub", "--nccl_ub"),
        ("cuda_graph_impl", "--cuda_graph_impl"),
    ] {
        f.field(k, flag);
    }
    if let Some(scope) = f.get("cuda_graph_scope").map(comma_list) {
        f.push("--cuda_graph_scope", &scope);
    }
    for (k, flag) in [("tp", "-tp"), ("pp", "-pp"), ("cp", "-cp")] {
        f.field(k, flag);
    }
    // a virtual pipeline of 1 is none
    match f.get("vp") {
        Some(ArgValue::Int(1)) => f.push("-vp", "None"),
        _ => f.field("vp", "-vp"),
    }
    for (k, flag) in [
        ("ep", "-ep"),
        ("et", "-et"),
        ("mb", "-mb"),
        ("gb", "-gb"),
        ("seq_length", "-sl"),
    ] {
        f.field(k, flag);
    }
    f.boolean("moe_a2a_overlap", "--moe_a2a_overlap");
    for (k, flag) in [
        ("max_steps", "-ms"),
        ("recompute_num_layers", "-rl"),
        ("activation_offload_layers", "-ol"),
    ] {
        f.field(k, flag);
    }
    if let Some(modules) = f.get("recompute_modules").map(comma_list) {
        if !modules.is_empty() {
            // double-quoted for the login shell, which takes the quotes off (CloudAI's form)
            f.parts.push("--recompute_modules".into());
            f.parts.push(format!("\"{modules}\""));
        }
    }
    // the launcher stays with its job: the job's log (and its step times) reach the launcher log
    f.parts.push("--detach".into());
    f.parts.push("false".into());
    for (k, flag) in [
        ("lr", "--lr"),
        ("min_lr", "--min_lr"),
        ("warmup_iters", "--warmup_iters"),
        ("pretrained_checkpoint", "--pretrained_checkpoint"),
        ("save_dir", "--save_dir"),
        ("load_dir", "--load_dir"),
        ("save_interval", "--save_interval"),
        ("most_recent_k", "--most_recent_k"),
        ("save_config_filepath", "--save_config_filepath"),
        ("data", "--data"),
        ("dataset_paths", "--dataset_paths"),
        ("dataset_root", "--dataset_root"),
        ("index_mapping_dir", "--index_mapping_dir"),
        ("dataset_name", "--dataset_name"),
    ] {
        f.field(k, flag);
    }
    f.switch("packed_sequence", "--packed_sequence");
    f.switch("head_only", "--head_only");
    for (k, flag) in [
        ("tokenizer_type", "--tokenizer_type"),
        ("tokenizer_model", "--tokenizer_model"),
        ("vocab_size", "--vocab_size"),
        ("pytorch_profiler", "-pyp"),
        ("profiling_start_step", "--profiling_start_step"),
        ("profiling_stop_step", "--profiling_stop_step"),
        ("record_memory_history", "-mh"),
    ] {
        f.field(k, flag);
    }
    f.switch("profiling_gpu_metrics", "--profiling_gpu_metrics");
    for (k, flag) in [
        ("profiling_ranks", "--profiling_ranks"),
        ("nsys_trace", "--nsys_trace"),
        ("nsys_extra_args", "--nsys_extra_args"),
    ] {
        f.field(k, flag);
    }
    // with a pre-hook job the wrapper passes them, the dependency on that job added
    let params = job_params(at);
    if at.pre_hook.is_none() && !params.is_empty() {
        f.parts.push("--additional_slurm_params".into());
        f.parts.push(py_quote(&params.join(";")));
    }
    f.field("config_variant", "-cv");
    f.switch("list_config_variants", "--list_config_variants");
    // Hydra overrides: the launcher's TensorBoard defaults, then the test's extra_cmd_args over them
    let mut overrides: indexmap::IndexMap<String, String> = [
        ("logger.tensorboard_dir", "/nemo_run/tb_logs"),
        ("logger.log_timers_to_tensorboard", "true"),
        ("logger.log_throughput_to_tensorboard", "true"),
        ("logger.log_memory_to_tensorboard", "true"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for (k, v) in &test.extra_cmd_args {
        overrides.insert(k.clone(), v.clone());
    }
    for (k, v) in overrides {
        f.parts
            .push(py_quote(&if v.is_empty() { k } else { format!("{k}={v}") }));
    }
    f.parts
}

pub(super) fn submission(
    test: &TestDefinition,
    at: &SubmitAt,
    launcher: &PythonLauncher,
) -> Submission {
    let bridge = bridge_repo(test).map_or_else(
        || at.install.join("Megatron-Bridge"),
        |g| crate::config::test::repo_dir(at.install, &g.url, &g.commit),
    );
    let launch = launcher_parts(test, at, launcher, &bridge).join(" ");
    let params = if at.pre_hook.is_some() {
        " --additional_slurm_params \"$ADDITIONAL_SLURM_PARAMS\""
    } else {
        ""
    };
    let python = launcher.python(at.install);
    let dir = at.dir.display();
    let mut runtime: Vec<&(String, String)> = at
        .env
        .iter()
        .filter(|(k, _)| RUNTIME_VARS.contains(&k.as_str()))
        .collect();
    runtime.sort_by(|a, b| a.0.cmp(&b.0));
    let mut lines: Vec<String> = vec![
        "#!/usr/bin/env bash".into(),
        "set -o pipefail".into(),
        String::new(),
        format!("export NEMORUN_HOME=\"{dir}\""),
        "mkdir -p \"$NEMORUN_HOME\"".into(),
        format!("LOG=\"{dir}/{LOG}\""),
        format!("WRAPPER_STDOUT=\"{dir}/cloudai_megatron_bridge_wrapper.stdout\""),
        format!("WRAPPER_STDERR=\"{dir}/cloudai_megatron_bridge_wrapper.stderr\""),
        "exec > >(tee -a \"$WRAPPER_STDOUT\") 2> >(tee -a \"$WRAPPER_STDERR\" >&2)".into(),
        String::new(),
    ];
    lines.extend(
        runtime
            .iter()
            .map(|(k, v)| format!("export {k}={}", py_quote(v))),
    );
    lines.push(String::new());
    if let Some(script) = &at.pre_hook {
        lines.extend(pre_hook_lines(script, at));
    }
    let python_word = py_quote(&python.display().to_string());
    lines.extend(
        [
            ": >\"$LOG\"",
            "WANDB_INSTALL_RC=0",
            &format!(
                "{python_word} -m pip install wandb numpy==1.26.4 >>\"$LOG\" 2>&1 || WANDB_INSTALL_RC=$?"
            ),
            "if [ \"${WANDB_INSTALL_RC}\" -ne 0 ]; then",
            "  echo \"Failed to install runtime deps (wandb, numpy==1.26.4) in launcher venv (exit ${WANDB_INSTALL_RC}).\" >&2",
            "  tail -n 40 \"$LOG\" >&2 || true",
            "  exit \"${WANDB_INSTALL_RC}\"",
            "fi",
            "",
            "LAUNCH_RC=0",
            &format!("{launch}{params} >>\"$LOG\" 2>&1 || LAUNCH_RC=$?"),
            "",
            "",
            "JOB_ID=\"\"",
            "JOB_ID=$(grep -Eio \"(Submitted batch job[ ]+[0-9]+|Job id[: ]+[0-9]+|-[ ]*Job id[: ]+[0-9]+|Job ID[: ]+[0-9]+)\" \"$LOG\" | tail -n1 | grep -Eo \"[0-9]+\" | tail -n1 || true)",
            "",
            "",
            "if [ -n \"${JOB_ID}\" ]; then",
            "  if [ \"${LAUNCH_RC}\" -ne 0 ]; then",
            "    echo \"Megatron-Bridge launcher exited non-zero (${LAUNCH_RC}) after submitting job ${JOB_ID}.\" >&2",
            "    tail -n 40 \"$LOG\" >&2 || true",
            "  fi",
            "  echo \"Submitted batch job ${JOB_ID}\"",
            "else",
            "  echo \"Failed to retrieve job ID.\" >&2",
            "  if [ \"${LAUNCH_RC}\" -ne 0 ]; then",
            "    echo \"Launcher exit code: ${LAUNCH_RC}\" >&2",
            "  fi",
            "  tail -n 40 \"$LOG\" >&2 || true",
            "  exit 1",
            "fi",
            "",
        ]
        .map(str::to_string),
    );
    let command = format!("bash {dir}/{WRAPPER}");
    Submission {
        login: Login {
            command: command.clone(),
            ids_in: vec![LOG.into()],
        },
        files: vec![
            (WRAPPER.into(), lines.join("\n")),
            (COMMAND_FILE.into(), format!("{command}\n")),
        ],
        recorded: Some(command),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comma_lists_are_written_bare() {
        let s = |t: &str| comma_list(&ArgValue::Str(t.into()));
        assert_eq!(
            s("[moe_router,moe_preprocess]"),
            "moe_router,moe_preprocess"
        );
        assert_eq!(s("\"[attn, 'mlp']\""), "attn,mlp");
        assert_eq!(s("core_attn"), "core_attn");
    }
}
