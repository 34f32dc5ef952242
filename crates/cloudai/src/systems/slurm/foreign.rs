//! CloudAI's own Slurm trees: what its `slurm-job.toml` says of a job, for `generate-report` on them.

use std::path::Path;

/// What CloudAI's `slurm-job.toml` says of a job: its id (0: none, as a dry-run writes it), state, times and
/// exit code.
pub fn foreign_job(dir: &Path, r: &mut crate::results::IterationRecord) {
    let Ok(root) = crate::config::node::load(&dir.join("slurm-job.toml"), "slurm-job.toml") else {
        return;
    };
    let Some(t) = root.as_table() else { return };
    let text = |k: &str| match t.get(k).map(|n| &n.kind) {
        Some(crate::config::node::Kind::Str(s))
            if !s.is_empty() && s != "UNKNOWN" && s != "unknown" =>
        {
            Some(s.clone())
        }
        _ => None,
    };
    if let Some(crate::config::node::Kind::Int(id)) = t.get("job_id").map(|n| &n.kind) {
        if *id > 0 {
            r.job_id = Some(id.to_string());
        }
    }
    r.scheduler_state = text("state");
    r.started_at = text("start_time");
    r.ended_at = text("end_time");
    // Slurm's `exit:signal` ("0:0", "1:0", "0:9")
    if let Some(code) = text("exit_code") {
        let (e, sig) = code.split_once(':').unwrap_or((&code, "0"));
        r.exit_code = e.trim().parse().ok();
        r.signal = sig.trim().parse().ok().filter(|s: &i32| *s != 0);
    }
    if r.job_id.is_some() {
        r.scheduler = "slurm".into();
    }
}
