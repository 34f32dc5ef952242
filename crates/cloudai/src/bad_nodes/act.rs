//! Acting on the verdict, on request: drain bad nodes on Slurm, cordon and taint (or label) them on Kubernetes.
//! Only nodes judged `bad` are touched; each change is recorded with the command that undoes it; nothing is done
//! when more than the allowed fraction of the checked nodes would be taken out (a broken test must not drain a
//! cluster).

use serde::Serialize;

/// What was asked on the command line.
#[derive(Clone, Copy, Debug, Default)]
pub struct Wanted {
    pub drain: bool,
    pub cordon: bool,
    pub label: bool,
    /// At most this fraction of the checked nodes may be acted on.
    pub max_fraction: f64,
}

impl Wanted {
    pub fn any(&self) -> bool {
        self.drain || self.cordon || self.label
    }
}

/// One change made (or refused) to one node.
#[derive(Clone, Debug, Serialize)]
pub struct Action {
    pub node: String,
    /// `drain`, `cordon`, `label`.
    pub action: &'static str,
    /// What was run, as an operator would type it.
    pub command: String,
    /// What undoes it.
    pub undo: String,
    pub ok: bool,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub error: String,
}

/// The taint (and label) key cloudai puts on a node it judged bad.
pub const TAINT_KEY: &str = "cloudai.io/bad-node";

/// A label value (≤ 63 characters of `[A-Za-z0-9._-]`, alphanumeric at both ends) that says why.
pub fn label_value(reason: &str) -> String {
    let mut v: String = reason
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    while v.contains("--") {
        v = v.replace("--", "-");
    }
    let v: String = v.chars().take(63).collect();
    let v = v.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    if v.is_empty() {
        "bad".into()
    } else {
        v.to_string()
    }
}

/// Why acting is refused: too many nodes would be taken out.
pub fn refusal(bad: usize, checked: usize, max_fraction: f64) -> Option<String> {
    let fraction = bad as f64 / checked.max(1) as f64;
    (fraction > max_fraction).then(|| {
        format!(
            "{bad} of {checked} checked nodes judged bad ({:.0}%), more than --max-act-fraction {:.0}%: nothing \
             changed (a broken test or fabric must not take a cluster out of service); check the evidence, then act \
             by hand or raise the fraction",
            fraction * 100.0,
            max_fraction * 100.0
        )
    })
}

/// Drains each node on Slurm with the reason `cloudai: <why>`.
pub fn slurm_drain(nodes: &[(String, String)]) -> Vec<Action> {
    nodes
        .iter()
        .map(|(node, why)| {
            let reason = format!("cloudai: {why}");
            let out = std::process::Command::new("scontrol")
                .args([
                    "update",
                    &format!("nodename={node}"),
                    "state=drain",
                    &format!("reason={reason}"),
                ])
                .output();
            let (ok, error) = match out {
                Ok(o) if o.status.success() => (true, String::new()),
                Ok(o) => (false, String::from_utf8_lossy(&o.stderr).trim().to_string()),
                Err(e) => (false, format!("cannot run scontrol: {e}")),
            };
            Action {
                node: node.clone(),
                action: "drain",
                command: format!(
                    "scontrol update nodename={node} state=drain reason={}",
                    crate::util::shell::quote(&reason)
                ),
                undo: format!("scontrol update nodename={node} state=resume"),
                ok,
                error,
            }
        })
        .collect()
}
