//! Workloads whose own launcher submits their batch job from the login node (NeMo launcher, Megatron-Bridge): the
//! scheduler tells the workload what it knows of the cluster ([`SubmitAt`]), the workload answers with the command
//! to run there ([`Submission`]); the scheduler runs it, reads the job id it prints and watches that job like its
//! own — and, for a launcher that stays with its job and submits it again after a failure, the job it runs now.

use std::path::{Path, PathBuf};

/// What the scheduler knows that a launcher's command states (its partition, account, nodes, paths).
#[derive(Clone, Debug)]
pub struct SubmitAt<'a> {
    pub partition: &'a str,
    pub account: Option<&'a str>,
    /// The system's GPUs per node, when it states them.
    pub gpus_per_node: Option<u64>,
    /// A reservation the system's task-launcher arguments name (`--reservation X`).
    pub reservation: Option<&'a str>,
    /// The explicit node list, empty when only a count was asked for.
    pub nodes: &'a [String],
    /// Nodes of the run (the node list's length when one is given).
    pub num_nodes: u64,
    /// Absolute install path (repositories, their Python environments, cached images).
    pub install: &'a Path,
    /// The test's image as the job runs it: its cached `.sqsh` or its URL.
    pub image: Option<String>,
    /// The iteration's directory (absolute): the launcher writes its job's output under it.
    pub dir: &'a Path,
    /// The job's environment: the system's variables, then the test's.
    pub env: &'a [(String, String)],
    /// `%Y%m%d_%H%M%S` at preparation: part of the job's name.
    pub timestamp: &'a str,
    /// The run's time limit as a batch script states it (`01:30:00`), when it has one.
    pub time_limit: Option<String>,
    /// Nodes the run must not use (the scenario's `exclude_nodes`), when no node list is given.
    pub exclude: &'a [String],
    /// The task launcher's extra arguments as written: the system's, then the test's (`--reservation r --exclusive`).
    pub srun_args: Vec<String>,
    /// Whether the cluster takes `--gpus-per-node` / `--gres=gpu:N` directives.
    pub gpu_directives: bool,
    /// The batch script of the test's pre-test hooks (absolute), when the scheduler wrote one for a workload that
    /// runs them as a job of their own ([`crate::workloads::Workload::pre_test_job`]): the launcher submits it
    /// first and makes the test's job depend on it.
    pub pre_hook: Option<PathBuf>,
}

/// The login-node command of one iteration and what it leaves beside its output.
#[derive(Clone, Debug, Default)]
pub struct Submission {
    pub login: Login,
    /// Files written into the iteration's directory before it runs (name, text).
    pub files: Vec<(String, String)>,
    /// The command `test-run.toml` records as the test's (`test_cmd`, `full_cmd`), when not the job's `srun` line.
    pub recorded: Option<String>,
}

/// What runs on the login node, and where the job ids it submits show.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Login {
    /// Shell text run by `bash -c` in the iteration's directory; it prints the id of the job it submitted.
    pub command: String,
    /// Files of the iteration's directory where the launcher's own output goes (its log), read for job ids while
    /// it runs, beside what the command prints.
    pub ids_in: Vec<String>,
}

/// What the pre-hook job finds in a node's output of a hook that passed (CloudAI's rule, whatever the hook: NCCL's
/// average bus bandwidth line).
pub(crate) const PRE_HOOK_RESULT: &str = "Avg bus bandwidth";

/// The pre-hook job's check of one node's output of a hook, as a shell condition on `file` (a path expression):
/// the result line, its last field at least the hook's `min_busbw` when it sets one.
pub(crate) fn pre_hook_check(test: &crate::config::test::TestDefinition, file: &str) -> String {
    match test
        .cmd_args
        .get("min_busbw")
        .and_then(crate::config::args::ArgValue::as_float)
    {
        Some(min) => format!(
            "awk '/{PRE_HOOK_RESULT}/ {{ if ($NF+0 >= {}) found=1 }} END {{ exit !found }}' {file} 2>/dev/null",
            crate::util::pytoml::py_float(min)
        ),
        None => format!("grep -q \"{PRE_HOOK_RESULT}\" {file} 2>/dev/null"),
    }
}

/// Whether a node's output of a hook has a result at all (its value against a threshold is the check's).
pub(crate) fn pre_hook_has_result(output: &str) -> bool {
    output.contains(PRE_HOOK_RESULT)
}

/// `--key value` / `--key=value` / `--flag` task-launcher arguments as Slurm parameters (`key=value`, `flag`), as
/// a launcher's `--additional_slurm_params` and a batch script's directives take them; other words are dropped.
pub(crate) fn slurm_params(args: &str) -> Vec<String> {
    let words = crate::util::shell::split_words(args)
        .unwrap_or_else(|_| args.split_whitespace().map(str::to_string).collect());
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() {
        if let Some(key) = words[i].strip_prefix("--") {
            match key.split_once('=') {
                Some((k, v)) => out.push(format!("{k}={v}")),
                None => match words.get(i + 1).filter(|n| !n.starts_with("--")) {
                    Some(v) => {
                        out.push(format!("{key}={v}"));
                        i += 1;
                    }
                    None => out.push(key.to_string()),
                },
            }
        }
        i += 1;
    }
    out
}

/// The job ids `text` announces, in order, each once: after `Submitted batch job` or `Job id` (either case, then
/// blanks or a colon).
pub(crate) fn job_ids(text: &str) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for line in text.lines() {
        let lower = line.to_ascii_lowercase();
        let mut found: Vec<(usize, String)> = Vec::new();
        for (mark, seps) in [("submitted batch job", " "), ("job id", ": ")] {
            for (at, _) in lower.match_indices(mark) {
                let rest = lower[at + mark.len()..].trim_start_matches(|c| seps.contains(c));
                if rest.len() == lower.len() - at - mark.len() {
                    continue; // no separator: `job ids`, `Submitted batch job123`
                }
                let id: String = rest.chars().take_while(char::is_ascii_digit).collect();
                if !id.is_empty() {
                    found.push((at, id));
                }
            }
        }
        found.sort();
        for (_, id) in found {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
    }
    ids
}

/// A launcher that runs from a Python environment of its own, made from a git repository at install time:
/// `<install>/<name>__<commit>` and `<install>/<name>__<commit>-venv`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PythonLauncher {
    pub url: String,
    pub commit: String,
}

impl PythonLauncher {
    /// The launcher a template field names (`[launcher_repo]`, `[nemo_run_repo]`: url, commit), else the default.
    pub fn from_field(
        test: &crate::config::test::TestDefinition,
        field: &str,
        url: &str,
        commit: &str,
    ) -> Self {
        use crate::config::args::ArgValue;
        let get = |k: &str, default: &str| match test.template_fields.get(field) {
            Some(ArgValue::Table(t)) => t.get(k).map_or(default.to_string(), ArgValue::py_str),
            _ => default.to_string(),
        };
        Self {
            url: get("url", url),
            commit: get("commit", commit),
        }
    }

    /// The repository's clone.
    pub fn repo(&self, install: &Path) -> PathBuf {
        crate::config::test::repo_dir(install, &self.url, &self.commit)
    }
    /// The Python of its environment.
    pub fn python(&self, install: &Path) -> PathBuf {
        self.venv(install).join("bin").join("python")
    }
    /// Its Python environment, beside the clone (CloudAI's `<repo name>-venv`).
    pub fn venv(&self, install: &Path) -> PathBuf {
        let repo = self.repo(install);
        let mut name = repo.file_name().unwrap_or_default().to_os_string();
        name.push("-venv");
        repo.with_file_name(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_launcher_arguments_become_slurm_parameters() {
        assert_eq!(
            slurm_params("--reservation my_reserv --constraint=gpu"),
            ["reservation=my_reserv", "constraint=gpu"]
        );
        assert_eq!(
            slurm_params("--exclusive --reservation my_reserv --overcommit"),
            ["exclusive", "reservation=my_reserv", "overcommit"]
        );
        assert_eq!(slurm_params("--comment 'a b' -x"), ["comment=a b"]);
    }

    #[test]
    fn job_ids_from_sbatch_nemo_run_and_the_nemo_launcher() {
        assert_eq!(job_ids("- Job id: 694112\n"), vec!["694112"]);
        assert_eq!(job_ids("Launched: Job ID 7 and job id:8"), vec!["7", "8"]);
        assert!(job_ids("job ids 5\nSubmitted batch job42").is_empty());
        assert_eq!(job_ids("Submitted batch job 4711\n"), vec!["4711"]);
        assert_eq!(
            job_ids(
                "[NeMo I] Job nemo-megatron-run submitted with Job ID 12\nSubmitted batch job 12\n"
            ),
            vec!["12"]
        );
        assert_eq!(
            job_ids("Submitted batch job 3\nSubmitted batch job 4\n"),
            vec!["3", "4"]
        );
        assert!(
            job_ids("Submitted batch job \nsbatch: error: Batch job submission failed").is_empty()
        );
    }
}
