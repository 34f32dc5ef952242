//! The NeMo launcher's command line as CloudAI writes it: the environment as `K="V"` prefixes, the launcher's
//! Python and `main.py`, then Hydra overrides — the test's `cmd_args` flattened and sorted, then what the cluster
//! says (partition, reservation, node count, account, image, job name prefix, GPUs per node, results and scripts
//! directories, the topology file's mount), the node list, the environment again as `+env_vars.K=…` — its
//! `extra_cmd_args`, and the tokenizer's mount. Also written to `generated_command.sh`.

use indexmap::IndexMap;

use super::{tokenizer, TestDefinition};
use crate::config::args::ArgValue;
use crate::workloads::submit::{Login, PythonLauncher, Submission, SubmitAt};

/// The file the command is written to, in the iteration's directory.
pub(super) const COMMAND_FILE: &str = "generated_command.sh";

/// A value as Python's `str` writes it into an override; a list as its items joined by commas.
fn text(v: &ArgValue) -> String {
    match v {
        ArgValue::List(items) => items
            .iter()
            .map(ArgValue::py_str)
            .collect::<Vec<_>>()
            .join(","),
        v => v.py_str(),
    }
}

pub(super) fn submission(
    test: &TestDefinition,
    at: &SubmitAt,
    launcher: &PythonLauncher,
) -> Submission {
    let mut flat = crate::config::args::leaves(&test.cmd_args.values);
    flat.sort_by(|a, b| a.0.cmp(&b.0));
    let mut args: IndexMap<String, String> = flat
        .into_iter()
        .filter(|(k, _)| k != "launcher_script")
        .map(|(k, v)| {
            let mut s = text(&v);
            if k == "training.model.data.data_prefix" {
                s = s.replace('\\', "");
            }
            (k, s)
        })
        .collect();
    for (k, v) in at.env {
        args.insert(format!("env_vars.{k}"), v.clone());
    }
    if let Some(v) = args.shift_remove("training.values") {
        args.insert("training".into(), v);
    }
    args.insert("cluster.partition".into(), at.partition.to_string());
    if let Some(r) = at.reservation {
        args.insert("+cluster.reservation".into(), r.to_string());
    }
    let nodes = if at.nodes.is_empty() {
        at.num_nodes
    } else {
        at.nodes.len() as u64
    };
    args.insert("training.trainer.num_nodes".into(), nodes.to_string());
    if let Some(acc) = at.account {
        args.insert("cluster.account".into(), acc.to_string());
    }
    args.insert("container".into(), at.image.clone().unwrap_or_default());
    args.shift_remove("docker_image_url");
    let prefix = match at.account {
        Some(acc) => format!("{acc}-cloudai.nemo_{}", at.timestamp),
        None => at.timestamp.to_string(),
    };
    args.insert("cluster.job_name_prefix".into(), format!("{prefix}:"));
    args.insert(
        "cluster.gpus_per_node".into(),
        at.gpus_per_node
            .filter(|g| *g > 0)
            .map_or("null".to_string(), |g| g.to_string()),
    );
    let repo = launcher.repo(at.install);
    let script = repo.join(
        test.cmd_args
            .str("launcher_script")
            .unwrap_or("launcher_scripts/main.py"),
    );
    args.insert("base_results_dir".into(), at.dir.display().to_string());
    args.insert(
        "launcher_scripts_path".into(),
        script.parent().unwrap_or(&repo).display().to_string(),
    );
    if let Some((_, topo)) = at.env.iter().find(|(k, _)| k == "NCCL_TOPO_FILE") {
        args.insert("container_mounts".into(), format!("[\"{topo}:{topo}\"]"));
    }

    let mut overrides = Vec::new();
    let mut env_overrides = Vec::new();
    for (k, v) in &args {
        if k.starts_with("env_vars.") {
            env_overrides.push(if v.contains(',') {
                format!("+{k}=\\'{v}\\'")
            } else {
                format!("+{k}=\"{v}\"")
            });
        } else {
            overrides.push(format!("{k}={v}"));
        }
    }
    if !at.nodes.is_empty() {
        overrides.push(format!("+cluster.nodelist=\\'{}\\'", at.nodes.join(",")));
    }
    overrides.extend(env_overrides);
    let python = launcher.python(at.install);
    let mut cmd = format!(
        "{} \\\n {} \\\n {}",
        python.display(),
        script.display(),
        overrides.join(" \\\n ")
    );
    if let Some(extra) = crate::workloads::extra_args_str(test) {
        cmd.push(' ');
        cmd.push_str(&extra);
    }
    if let Some(t) = tokenizer(test) {
        let mount = format!("\"{t}:{t}\"");
        if cmd.contains("container_mounts=") {
            cmd = cmd.replace(
                "container_mounts=[",
                &format!("container_mounts=[{mount}, "),
            );
        } else {
            cmd.push_str(&format!(" container_mounts=[{mount}]"));
        }
    }
    let env: String = at
        .env
        .iter()
        .map(|(k, v)| format!("{k}=\"{v}\" \\\n"))
        .collect();
    let cmd = format!("{env}{cmd}");
    Submission {
        files: vec![(COMMAND_FILE.into(), format!("{cmd}\n\n"))],
        login: Login {
            command: cmd.trim().to_string(),
            ids_in: Vec::new(),
        },
        recorded: None,
    }
}
