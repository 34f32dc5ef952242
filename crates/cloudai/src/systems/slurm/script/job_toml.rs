//! `slurm-job.toml`: what sacct says of a finished job and its steps, as CloudAI writes it.

use super::*;

/// What sacct tells about a finished job, for `slurm-job.toml`.
#[derive(Clone, Debug, Default)]
pub(crate) struct JobFacts {
    pub job_id: i64,
    pub name: Option<String>,
    pub state: Option<String>,
    pub start_time: String,
    pub end_time: String,
    pub elapsed_time_sec: i64,
    pub exit_code: Option<String>,
    pub steps: Vec<StepFacts>,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct StepFacts {
    pub job_id: String,
    pub name: String,
    pub state: String,
    pub exit_code: String,
    pub start_time: String,
    pub end_time: String,
    pub elapsed_time_sec: i64,
}

pub(crate) fn job_toml(f: &JobFacts, srun_cmd: &str, test_cmd: &str, dir: &Path) -> String {
    let kv = |k: &str, v: PyVal| (k.to_string(), v);
    let steps = f
        .steps
        .iter()
        .map(|s| {
            PyVal::Table(vec![
                kv("job_id", PyVal::str(s.job_id.clone())),
                kv("name", PyVal::str(s.name.clone())),
                kv("state", PyVal::str(s.state.clone())),
                kv("exit_code", PyVal::str(s.exit_code.clone())),
                kv("start_time", PyVal::str(s.start_time.clone())),
                kv("end_time", PyVal::str(s.end_time.clone())),
                kv("elapsed_time_sec", PyVal::Int(s.elapsed_time_sec)),
            ])
        })
        .collect();
    dumps(&[
        kv("job_id", PyVal::Int(f.job_id)),
        kv(
            "name",
            PyVal::str(f.name.clone().unwrap_or_else(|| "unknown".into())),
        ),
        kv(
            "state",
            PyVal::str(f.state.clone().unwrap_or_else(|| "UNKNOWN".into())),
        ),
        kv("start_time", PyVal::str(f.start_time.clone())),
        kv("end_time", PyVal::str(f.end_time.clone())),
        kv("elapsed_time_sec", PyVal::Int(f.elapsed_time_sec)),
        kv(
            "exit_code",
            PyVal::str(f.exit_code.clone().unwrap_or_else(|| "0".into())),
        ),
        kv("srun_cmd", PyVal::str(srun_cmd)),
        kv("test_cmd", PyVal::str(test_cmd)),
        kv("is_single_sbatch", PyVal::Bool(false)),
        kv("job_root", PyVal::str(dir.display().to_string())),
        kv("job_steps", PyVal::List(steps)),
    ])
}
