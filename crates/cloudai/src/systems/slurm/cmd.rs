//! The Slurm commands cloudai runs (each with a time limit, its pipes drained while it runs) and the read-only
//! questions asked with them: nodes out of service, leaf switches, what squeue says of recorded jobs.

use super::*;

/// Output of a finished command.
pub(super) struct Out {
    pub(super) ok: bool,
    pub(super) stdout: String,
    pub(super) stderr: String,
}

impl Out {
    pub(super) fn failed(stderr: String) -> Self {
        Out {
            ok: false,
            stdout: String::new(),
            stderr,
        }
    }
}

impl From<std::io::Result<std::process::Output>> for Out {
    fn from(r: std::io::Result<std::process::Output>) -> Self {
        match r {
            Ok(o) => Out {
                ok: o.status.success(),
                stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&o.stderr).trim().to_string(),
            },
            Err(e) => Out::failed(e.to_string()),
        }
    }
}

/// Which of `nodes` Slurm holds out of service (down, drained or draining, failed), with its state and reason:
/// one `sinfo` call (find-bad-nodes leaves them out).
pub(crate) async fn out_of_service(nodes: &[String]) -> Result<Vec<(String, String)>, String> {
    if nodes.is_empty() {
        return Ok(Vec::new());
    }
    let out = run_cmd(
        "sinfo",
        &["-h", "-N", "-n", &nodes.join(","), "-o", "%N|%t|%E"],
    )
    .await;
    if !out.ok {
        return Err(format!("sinfo failed: {}", out.stderr));
    }
    Ok(nodes::broken_nodes(&out.stdout)
        .into_iter()
        .map(|(n, state, reason)| {
            let why = if reason.is_empty() {
                format!("Slurm state {state}")
            } else {
                format!("Slurm state {state}: {reason}")
            };
            (n, why)
        })
        .collect())
}

/// Each node's leaf switch (or block) as Slurm's topology plugin knows it; empty when there is none.
pub(crate) async fn leaf_switches() -> Result<std::collections::BTreeMap<String, String>, String> {
    let out = run_cmd("scontrol", &["show", "topology"]).await;
    if !out.ok {
        return Err(format!("scontrol show topology failed: {}", out.stderr));
    }
    Ok(nodes::leaf_switches(&out.stdout))
}

pub(super) async fn run_cmd(program: &str, args: &[&str]) -> Out {
    debug!("Executing command: {program} {}", args.join(" "));
    let child = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn();
    let child = match child {
        Ok(c) => c,
        Err(e) => return Out::failed(format!("cannot run {program}: {e}")),
    };
    match tokio::time::timeout(CMD_TIMEOUT, child.wait_with_output()).await {
        Ok(r) => Out::from(r),
        Err(_) => Out::failed(format!("{program} timed out after {CMD_TIMEOUT:?}")),
    }
}

/// Blocking variant for preparation (node states, GPU support), with a short timeout.
pub(super) fn run_blocking(program: &str, args: &[&str], limit: Duration) -> Out {
    let mut child = match std::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => return Out::failed(format!("cannot run {program}: {e}")),
    };
    // both pipes are drained while the command runs: a large answer (sinfo of thousands of nodes) must never
    // fill a pipe and stall the command until its timeout
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    use std::io::Read;
    let out = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Out::failed(format!("{program} timed out"));
            }
        }
    };
    Out::from(Ok(std::process::Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }))
}

/// What squeue says now of recorded jobs (`cloudai status`), with one call; a job it no longer lists has ended
/// without anyone collecting it.
pub fn live(ids: &[&str]) -> HashMap<String, super::super::Live> {
    use super::super::Live;
    let mut out: HashMap<String, Live> = ids
        .iter()
        .map(|id| (id.to_string(), Live::Gone("ended (not collected)")))
        .collect();
    let o = std::process::Command::new("squeue")
        .args([
            "-h",
            "-o",
            "%i|%T|%r|%N",
            &format!("--jobs={}", ids.join(",")),
        ])
        .output();
    let Ok(o) = o else {
        return out;
    };
    for l in String::from_utf8_lossy(&o.stdout).lines() {
        let f: Vec<&str> = l.split('|').collect();
        if f.len() == 4 {
            out.insert(
                f[0].to_string(),
                Live::Seen {
                    state: f[1].to_lowercase(),
                    reason: f[2].to_string(),
                    nodes: crate::util::nodelist::expand(f[3]).unwrap_or_default(),
                },
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command whose answer is far above a pipe's 64 KiB (sinfo of thousands of nodes) is read as it runs, not
    /// left stalled until its timeout.
    #[test]
    fn large_answers_are_read_while_the_command_runs() {
        let t = std::time::Instant::now();
        let out = run_blocking(
            "sh",
            &["-c", "head -c 1000000 /dev/zero | tr '\\0' x; echo err >&2"],
            Duration::from_secs(20),
        );
        assert_eq!(out.stdout.len(), 1_000_000, "{}", out.stderr);
        assert_eq!(out.stderr.trim(), "err");
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    }
}
