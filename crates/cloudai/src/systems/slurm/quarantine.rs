//! Quarantine on Slurm: a drain whose reason is our mark (`cloudai:<run> <why>`), a resume only while the reason is
//! still that mark. Slurm has no compare-and-set: the reason is read just before a resume (the window is one
//! `sinfo` call wide).

use std::collections::BTreeMap;
use std::process::Command;

use crate::quarantine::{Action, QuarantineError, Scheduler, Seen};

/// Slurm through its commands (`sinfo`, `scontrol`) on the login node.
#[derive(Default)]
pub struct Slurm;

fn run(program: &str, args: &[&str]) -> Result<String, QuarantineError> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| QuarantineError::Scheduler(format!("cannot run {program}: {e}")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(QuarantineError::Scheduler(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Each node's state from `sinfo -h -N -o '%N|%t|%E'`: in service, ours (the reason is our mark) or someone
/// else's (down, drained or failing with another reason).
pub(crate) fn parse_seen(text: &str, nodes: &[String]) -> BTreeMap<String, Seen> {
    let mut out: BTreeMap<String, Seen> =
        nodes.iter().map(|n| (n.clone(), Seen::InService)).collect();
    for (node, state, reason) in super::nodes::broken_nodes(text) {
        if !out.contains_key(&node) {
            continue;
        }
        let seen = if reason.starts_with("cloudai:") {
            Seen::Ours(reason)
        } else if reason.is_empty() {
            Seen::Others(format!("Slurm state {state}"))
        } else {
            Seen::Others(format!("Slurm state {state}: {reason}"))
        };
        out.insert(node, seen);
    }
    out
}

impl Slurm {
    fn seen_one(&mut self, node: &str) -> Result<Seen, QuarantineError> {
        Ok(self
            .seen(&[node.to_string()])?
            .remove(node)
            .unwrap_or(Seen::InService))
    }
}

impl Scheduler for Slurm {
    fn seen(&mut self, nodes: &[String]) -> Result<BTreeMap<String, Seen>, QuarantineError> {
        if nodes.is_empty() {
            return Ok(BTreeMap::new());
        }
        let text = run(
            "sinfo",
            &["-h", "-N", "-n", &nodes.join(","), "-o", "%N|%t|%E"],
        )?;
        Ok(parse_seen(&text, nodes))
    }

    fn take_out(&mut self, node: &str, tag: &str) -> Result<(), QuarantineError> {
        if let Seen::Others(r) = self.seen_one(node)? {
            return Err(QuarantineError::NotOurs { by: r });
        }
        run(
            "scontrol",
            &[
                "update",
                &format!("nodename={node}"),
                "state=drain",
                &format!("reason={tag}"),
            ],
        )
        .map(|_| ())
    }

    fn put_back(&mut self, node: &str, tag: &str, force: bool) -> Result<(), QuarantineError> {
        if !self.seen_one(node)?.may_put_back(tag, force)? {
            return Ok(());
        }
        run(
            "scontrol",
            &["update", &format!("nodename={node}"), "state=resume"],
        )
        .map(|_| ())
    }

    fn command(&self, action: Action, node: &str, tag: &str) -> String {
        match action {
            Action::TakeOut => format!(
                "scontrol update nodename={node} state=drain reason={}",
                crate::util::shell::single_quote(tag)
            ),
            Action::PutBack => format!("scontrol update nodename={node} state=resume"),
            Action::Note => String::new(),
        }
    }
}

/// A maintenance reservation cloudai holds while it requalifies nodes: no user job lands on them between their
/// resume and their test. Deleted when dropped (every way out but kill -9; [`clean_stale`] then removes it at the
/// next start on this host).
pub(crate) struct Reservation {
    pub name: String,
}

/// `cloudai-requalify-<host>-<pid>`: whose it is, so a later cloudai on the host can tell a dead one's.
fn reservation_prefix() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "host".into());
    let host: String = host
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!("cloudai-requalify-{host}-")
}

fn user() -> String {
    std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .or_else(|| run("id", &["-un"]).ok().map(|u| u.trim().to_string()))
        .unwrap_or_else(|| "root".into())
}

impl Reservation {
    fn args(name: &str, nodes: &[String]) -> Vec<String> {
        vec![
            "create".into(),
            "reservation".into(),
            format!("ReservationName={name}"),
            format!("Nodes={}", nodes.join(",")),
            "StartTime=now".into(),
            "Duration=UNLIMITED".into(),
            format!("Users={}", user()),
            "Flags=MAINT,IGNORE_JOBS".into(),
        ]
    }

    fn name() -> String {
        format!("{}{}", reservation_prefix(), std::process::id())
    }

    pub fn create(nodes: &[String]) -> Result<Reservation, String> {
        let name = Self::name();
        let args = Self::args(&name, nodes);
        run(
            "scontrol",
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
        )?;
        Ok(Reservation { name })
    }

    /// The command [`Reservation::create`] runs.
    pub fn command(nodes: &[String]) -> String {
        format!("scontrol {}", Self::args(&Self::name(), nodes).join(" "))
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        match run("scontrol", &["delete", &format!("ReservationName={}", self.name)]) {
            Ok(_) => crate::info!("Deleted the maintenance reservation {}", self.name),
            Err(e) => crate::warn!(
                "Cannot delete the maintenance reservation {} ({e}): `scontrol delete ReservationName={}`",
                self.name,
                self.name
            ),
        }
    }
}

/// Deletes the requalification reservations of cloudai processes of this host that are gone (killed).
pub(crate) fn clean_stale() {
    let Ok(text) = run("scontrol", &["show", "reservation", "-o"]) else {
        return;
    };
    let prefix = reservation_prefix();
    for name in text
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("ReservationName="))
        .filter(|n| n.starts_with(&prefix))
    {
        let pid = &name[prefix.len()..];
        let alive = pid
            .parse::<u32>()
            .is_ok_and(|p| std::path::Path::new(&format!("/proc/{p}")).exists());
        if !alive {
            match run("scontrol", &["delete", &format!("ReservationName={name}")]) {
                Ok(_) => crate::warn!("Deleted {name}, left by a cloudai that was killed"),
                Err(e) => {
                    crate::warn!("Cannot delete {name}, left by a cloudai that was killed: {e}")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drain_is_ours_only_with_our_mark() {
        let nodes: Vec<String> = ["n1", "n2", "n3", "n4"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let seen = parse_seen(
            "n1|idle|none\nn2|drain|cloudai:fbn_1 slow pair 12 GB/s\nn3|drain|admin: swap GPU\nn4|down*|Not responding\n",
            &nodes,
        );
        assert_eq!(seen["n1"], Seen::InService);
        assert_eq!(
            seen["n2"],
            Seen::Ours("cloudai:fbn_1 slow pair 12 GB/s".into())
        );
        assert_eq!(
            seen["n3"],
            Seen::Others("Slurm state drain: admin: swap GPU".into())
        );
        assert!(matches!(&seen["n4"], Seen::Others(r) if r.contains("Not responding")));
    }
}
