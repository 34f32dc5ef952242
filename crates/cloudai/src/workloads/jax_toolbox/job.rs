//! The job: `run.sh` (both stages, each with its XLA flags) and the batch script's body (the container loaded once
//! by name, then one task per node runs `run.sh` in it), as CloudAI's reference files show them.

use super::Model;
use crate::config::args::ArgValue;
use crate::config::test::TestDefinition;
use crate::workloads::launch::{
    EnvFile, Mount, Procs, Step, Steps, IMAGE, MOUNTS, RUN_DIR, SYSTEM_SRUN_ARGS,
};
use crate::workloads::{Launch, Placement};

/// `COMBINE_THRESHOLD` of the test's environment (bytes), which the job divides among the GPUs.
pub(super) fn combine_threshold(test: &TestDefinition) -> Result<u64, String> {
    let v = test
        .extra_env_vars
        .get("COMBINE_THRESHOLD")
        .map(ArgValue::py_str)
        .ok_or_else(|| {
            "COMBINE_THRESHOLD is not set: a JAX toolbox test needs it in extra_env_vars (the collectives' combine \
             threshold in bytes, e.g. COMBINE_THRESHOLD = \"1073741824\")"
                .to_string()
        })?;
    v.trim().parse().map_err(|_| {
        format!("COMBINE_THRESHOLD = \"{v}\" is not a whole number of bytes (extra_env_vars)")
    })
}

fn at<'a>(test: &'a TestDefinition, path: &str) -> Option<&'a ArgValue> {
    test.cmd_args.at(path)
}

/// The container's workspace (`setup_flags.docker_workspace_dir`) without its trailing slash.
fn workspace(test: &TestDefinition) -> String {
    let ws = test.cmd_args.text_at("setup_flags.docker_workspace_dir");
    match ws.trim_end_matches('/') {
        "" => "/".into(),
        w => w.to_string(),
    }
}

/// A stage's `XLA_FLAGS`: the three combine thresholds, then the stage's `xla_*` values (booleans in lower case),
/// sorted as text. GPT's stages have no flags of their own in CloudAI's reading (its `xla_flags` table is not one).
/// Without PGLE the measured stage reads no profile (`xla_gpu_pgle_profile_file_or_directory_path=""`).
fn xla_flags(test: &TestDefinition, model: Model, stage: &str, pgle: bool) -> String {
    let mut flags = vec![
        "--xla_gpu_all_reduce_combine_threshold_bytes=$COMBINE_THRESHOLD".to_string(),
        "--xla_gpu_all_gather_combine_threshold_bytes=$COMBINE_THRESHOLD".into(),
        "--xla_gpu_reduce_scatter_combine_threshold_bytes=$PER_GPU_COMBINE_THRESHOLD".into(),
    ];
    if model == Model::Grok {
        if let Some(ArgValue::Table(t)) = at(test, stage) {
            for (k, v) in t.iter().filter(|(k, _)| k.starts_with("xla_")) {
                let v = match v {
                    _ if !pgle && k == "xla_gpu_pgle_profile_file_or_directory_path" => {
                        "\"\"".into()
                    }
                    ArgValue::Bool(b) => b.to_string(),
                    other => other.py_str(),
                };
                flags.push(format!("--{}={v}", k.to_lowercase()));
            }
        }
    }
    flags.sort();
    flags.join(" ")
}

/// `--fdl.<KEY>=<value>` for every `fdl` value, by key: the dtype and the checkpoint policy between escaped double
/// quotes, as Paxml's command line takes them (CloudAI's serializers).
fn fdl_flags(test: &TestDefinition) -> Vec<String> {
    let Some(ArgValue::Table(t)) = at(test, "fdl") else {
        return Vec::new();
    };
    let mut keys: Vec<&String> = t.keys().collect();
    keys.sort();
    keys.into_iter()
        .map(|k| {
            let v = t[k].py_str();
            let escaped = v.starts_with("\\\"") && v.ends_with("\\\"");
            let v = match k.as_str() {
                "fprop_dtype" | "checkpoint_policy" if escaped => v,
                "checkpoint_policy" if v.len() > 1 && v.starts_with('"') && v.ends_with('"') => {
                    v.replace('"', "\\\"")
                }
                "fprop_dtype" | "checkpoint_policy" => format!("\\\"{v}\\\""),
                _ => v,
            };
            format!("--fdl.{}={v}", k.to_uppercase())
        })
        .collect()
}

/// Paxml's command for a stage, under `nsys` on the first task.
fn python(test: &TestDefinition, stage: &str, ws: &str) -> String {
    let mut parts = vec![
        "python3 -u -m paxml.main".to_string(),
        "--num_hosts=$SLURM_NTASKS".into(),
        "--server_addr=$SLURM_JOB_MASTER_NODE:12345".into(),
        "--host_idx=$SLURM_PROCID".into(),
        format!(
            "--job_log_dir={}",
            test.cmd_args.text_at("setup_flags.docker_workspace_dir")
        ),
        format!(
            "--tfds_data_dir={}",
            test.cmd_args.text_at("setup_flags.tfds_data_dir")
        ),
        format!(
            "--enable_checkpoint_saving={}",
            test.cmd_args
                .text_at("setup_flags.enable_checkpoint_saving")
        ),
        "--multiprocess_gpu".into(),
        "--alsologtostderr".into(),
        format!("--fdl_config=\"{}\"", test.cmd_args.text_at("fdl_config")),
    ];
    parts.extend(fdl_flags(test));
    parts.extend(crate::workloads::extra_args_str(test));
    let mut cmd = parts.join(" \\\n    ");
    if stage == "profile" {
        cmd.push_str(&format!(
            " >> {ws}/profile_stderr_${{SLURM_PROCID}}.txt 2>&1"
        ));
    }
    let nsys = format!(
        "nsys profile \\\n    -s none \\\n    -o {ws}/nsys_profile_{stage} \\\n    --force-overwrite true \\\n    \
         --capture-range=cudaProfilerApi \\\n    --capture-range-end=stop \\\n    --cuda-graph-trace=node \\\n"
    );
    format!(
        "if [ \"$SLURM_NODEID\" -eq 0 ] && [ \"$SLURM_PROCID\" -eq 0 ]; then\n    {nsys}    {cmd}\nelse\n    {cmd}\nfi"
    )
}

/// The stage's profile turned into a PGLE file by JAX's converter, on the first task.
fn pgo(stage: &str, ws: &str) -> String {
    format!(
        "\nif [ \"$SLURM_NODEID\" -eq 0 ] && [ \"$SLURM_PROCID\" -eq 0 ]; then\n    \
         python /opt/jax/jax/tools/pgo_nsys_converter.py \\\n    --profile_path {ws}/nsys_profile_{stage}.nsys-rep \\\n    \
         --post_process \\\n    --pgle_output_path {ws}/pgle_output_{stage}.pbtxt > /dev/null 2>&1\nfi"
    )
}

/// `run.sh`: the profiling stage (unless `enable_pgle = false`), then the measured one, each with the test's
/// environment and its own `XLA_FLAGS`; no newline at its end, as CloudAI writes it.
fn run_sh(test: &TestDefinition, model: Model, env: &[(String, String)], pgle: bool) -> String {
    let ws = workspace(test);
    let mut lines: Vec<String> = Vec::new();
    let stages: &[&str] = if pgle {
        &["profile", "perf"]
    } else {
        &["perf"]
    };
    for (i, stage) in stages.iter().enumerate() {
        let flags = xla_flags(test, model, stage, pgle);
        let exports: Vec<String> = env
            .iter()
            .map(|(k, v)| format!("export {k}={v}"))
            .chain([format!("export XLA_FLAGS=\"{flags}\"")])
            .collect();
        lines.extend([
            if i == 0 {
                "#!/bin/bash".into()
            } else {
                String::new()
            },
            String::new(),
            exports.join("\n"),
            String::new(),
            python(test, stage, &ws),
            pgo(stage, &ws),
        ]);
    }
    lines.join("\n")
}

/// The batch script's body: the container loaded by name, then one task per node runs `run.sh` in it (`-o`/`-e`
/// one file per task, or per job when `UNIFIED_STDOUT_STDERR=1`).
fn body(test: &TestDefinition, ws: &str) -> String {
    let unified = test
        .extra_env_vars
        .get("UNIFIED_STDOUT_STDERR")
        .is_some_and(|v| v.py_str() == "1");
    let suffix = if unified { "-%j.txt" } else { "-%j-%n-%t.txt" };
    let mut lines = Vec::new();
    if at(test, "load_container") != Some(&ArgValue::Bool(false)) {
        lines.push("    echo \"Loading container with srun command\"".to_string());
        lines.push(format!(
            "    srun --mpi=none --container-image={IMAGE} --container-name=cont true"
        ));
    }
    lines.extend([
        "    echo \"Running srun command\"".to_string(),
        "    srun \\".into(),
        "    --mpi=none \\".into(),
        format!("    {SYSTEM_SRUN_ARGS} \\"),
        "    --export=ALL \\".into(),
        format!("    -o {RUN_DIR}/output{suffix} \\"),
        format!("    -e {RUN_DIR}/error{suffix} \\"),
        "    --container-name=cont \\".into(),
        format!("    --container-mounts={MOUNTS} \\"),
        format!("    {ws}/run.sh"),
    ]);
    lines.join("\n")
}

pub(super) fn launch(test: &TestDefinition, at_: &Placement, model: Model) -> Launch {
    let ws = workspace(test);
    let threshold = combine_threshold(test).unwrap_or(0);
    let gpus: u64 = at(test, "setup_flags.gpus_per_node")
        .and_then(ArgValue::as_int)
        .map_or(8, |g| g.max(1) as u64);
    let per_gpu = threshold / (gpus * at_.nodes.max(1));
    let pgle = model == Model::Gpt || at(test, "enable_pgle") != Some(&ArgValue::Bool(false));
    // the test's variables, then the two the job derives (a name the test sets keeps its place)
    let mut env: indexmap::IndexMap<String, String> = test
        .extra_env_vars
        .iter()
        .map(|(k, v)| (k.clone(), v.py_str()))
        .collect();
    env.insert("PER_GPU_COMBINE_THRESHOLD".into(), per_gpu.to_string());
    env.shift_remove("XLA_FLAGS");
    let env: Vec<(String, String)> = env.into_iter().collect();
    let perf = xla_flags(test, model, "perf", pgle);
    Launch {
        procs: Procs::Mpi,
        has_profiler: true,
        steps: Some(Steps {
            steps: vec![Step::Shell(body(test, &ws))],
            setup_in_image: true,
            job_env: vec![
                ("PER_GPU_COMBINE_THRESHOLD".into(), per_gpu.to_string()),
                ("XLA_FLAGS".into(), format!("\"{perf}\"")),
            ],
            env_file: EnvFile::None,
            mounts: vec![Mount {
                source: String::new(),
                target: test.cmd_args.text_at("setup_flags.docker_workspace_dir"),
                file_size: None,
            }],
            files: vec![("run.sh".into(), run_sh(test, model, &env, pgle))],
            ..Default::default()
        }),
        ..Launch::process(format!("{ws}/run.sh"), Vec::new()).in_test_image(test)
    }
}
