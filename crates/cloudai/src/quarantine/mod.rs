//! Quarantine → requalify → release: the nodes cloudai takes out of service, held as durable state, and given back
//! only while they are still ours.
//!
//! - **Ownership.** Every change carries cloudai's mark (Slurm: a drain reason starting `cloudai:<run>`;
//!   Kubernetes: the `cloudai.io/quarantined-by` annotation with our taint). A node out of service by anyone else
//!   is never touched, never released, and is reported as such.
//! - **Write-ahead.** Each action is first written as an intent, then done, then recorded as done, so a cloudai
//!   killed at any step finds the intent on its next start ([`Quarantine::reconcile`]), looks at what the scheduler
//!   shows, and either records what was done or does what was not — never twice, never lost.
//!
//! The scheduler ([`Scheduler`]) and the store ([`Store`]) are seams: the ledger and Slurm / Kubernetes in
//! production, fakes in the property test.

mod conclude;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
mod error;
mod state;
pub use error::QuarantineError;
pub use state::*;

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

/// Quarantine over a scheduler and a store.
pub struct Quarantine<'a> {
    pub sched: &'a mut dyn Scheduler,
    pub store: &'a mut dyn Store,
    /// Run nothing: say what would run.
    pub dry_run: bool,
}

/// The mark for a node taken out by `run`: `cloudai:<run> <why>` (Slurm shows it as the drain reason).
pub fn tag(run: &str, why: &str) -> String {
    let mut t = format!("cloudai:{run} {why}");
    // Slurm keeps reasons short and on one line
    t = t.replace(['\n', '\r'], " ");
    if t.len() > 200 {
        let cut = (0..=200)
            .rev()
            .find(|i| t.is_char_boundary(*i))
            .unwrap_or(0);
        t.truncate(cut);
    }
    t
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

impl Quarantine<'_> {
    /// Finishes what a killed cloudai left between intent and record: looks at each pending intent's node, records
    /// what was done, does what was not (when the node is still as it was), gives up what someone else changed.
    pub(crate) fn reconcile(&mut self) -> Result<Vec<Outcome>, QuarantineError> {
        let pending = self.store.pending()?;
        if pending.is_empty() {
            return Ok(Vec::new());
        }
        let nodes: Vec<String> = pending.iter().map(|i| i.node.clone()).collect();
        let seen = self.sched.seen(&nodes)?;
        let mut out = Vec::new();
        for i in pending {
            let now_seen = seen.get(&i.node).cloned().unwrap_or(Seen::InService);
            let (record, what, detail, command): (Option<Record>, &str, String, String) =
                match (i.action, now_seen) {
                    // nothing to do on the node: the record stands
                    (Action::Note, _) => (
                        Some(i.record.clone()),
                        "recorded",
                        "noted before cloudai stopped".into(),
                        String::new(),
                    ),
                    // the action was done before the kill: record it
                    (Action::TakeOut, Seen::Ours(t)) if t == i.tag => (
                        Some(i.record.clone()),
                        "recorded",
                        "taken out before cloudai stopped".into(),
                        String::new(),
                    ),
                    (Action::PutBack, Seen::InService) => (
                        Some(i.record.clone()),
                        "recorded",
                        "put back before cloudai stopped".into(),
                        String::new(),
                    ),
                    // not done: do it now
                    (Action::TakeOut, Seen::InService) => {
                        let c = self.sched.command(Action::TakeOut, &i.node, &i.tag);
                        self.sched.take_out(&i.node, &i.tag)?;
                        (
                            Some(i.record.clone()),
                            "completed",
                            "taken out (cloudai stopped before)".into(),
                            c,
                        )
                    }
                    (Action::PutBack, Seen::Ours(t)) if t == i.tag => {
                        let c = self.sched.command(Action::PutBack, &i.node, &i.tag);
                        // (opening a window again is harmless: the mark stays, a second uncordon changes nothing)
                        if i.to == Held::Requalifying {
                            self.sched.open_window(&i.node, &i.tag)?;
                        } else {
                            self.sched.put_back(&i.node, &i.tag, false)?;
                        }
                        (
                            Some(i.record.clone()),
                            "completed",
                            "put back (cloudai stopped before)".into(),
                            c,
                        )
                    }
                    // someone else acted in between: theirs wins
                    (_, Seen::Others(r)) => (
                        None,
                        "not ours",
                        format!("out of service by {r}: left as it is"),
                        String::new(),
                    ),
                    (_, Seen::Ours(t)) => (
                        None,
                        "not ours",
                        format!("marked {t:?} by another cloudai run: left as it is"),
                        String::new(),
                    ),
                };
            self.store
                .done(i.id, record.as_ref(), &format!("{what}: {detail}"))?;
            out.push(Outcome {
                node: i.node.clone(),
                what: what.into(),
                detail,
                command,
            });
        }
        Ok(out)
    }

    /// Takes each node out (node, why) for `run`, unless someone else holds it; nodes already ours stay as they are.
    pub(crate) fn take_out(
        &mut self,
        run: &str,
        bad: &[(String, String)],
    ) -> Result<Vec<Outcome>, QuarantineError> {
        self.reconcile()?;
        let nodes: Vec<String> = bad.iter().map(|(n, _)| n.clone()).collect();
        let seen = self.sched.seen(&nodes)?;
        let held: BTreeMap<String, Record> = self
            .store
            .records()?
            .into_iter()
            .map(|r| (r.node.clone(), r))
            .collect();
        let mut out = Vec::new();
        for (node, why) in bad {
            let t = tag(run, why);
            match seen.get(node).cloned().unwrap_or(Seen::InService) {
                Seen::Others(r) => {
                    out.push(Outcome {
                        node: node.clone(),
                        what: "not ours".into(),
                        detail: format!("out of service by {r}, not ours: left as it is"),
                        command: String::new(),
                    });
                    continue;
                }
                Seen::Ours(existing)
                    if held
                        .get(node)
                        .is_some_and(|r| r.tag == existing && r.state.is_out()) =>
                {
                    out.push(Outcome {
                        node: node.clone(),
                        what: "already held".into(),
                        detail: format!("held since run {}", held[node].run),
                        command: String::new(),
                    });
                    continue;
                }
                _ => {}
            }
            let command = self.sched.command(Action::TakeOut, node, &t);
            if self.dry_run {
                out.push(Outcome {
                    node: node.clone(),
                    what: "would quarantine".into(),
                    detail: why.clone(),
                    command,
                });
                continue;
            }
            let record = Record {
                node: node.clone(),
                state: Held::Quarantined,
                tag: t.clone(),
                reason: why.clone(),
                run: run.to_string(),
                since: now(),
                attempts: 0,
                passes: 0,
                evidence: String::new(),
                updated: now(),
            };
            let id = self.store.intend(&Intent {
                id: 0,
                node: node.clone(),
                action: Action::TakeOut,
                tag: t.clone(),
                to: Held::Quarantined,
                record: record.clone(),
            })?;
            match self.sched.take_out(node, &t) {
                Ok(()) => {
                    self.store.done(id, Some(&record), "done")?;
                    out.push(Outcome {
                        node: node.clone(),
                        what: "quarantined".into(),
                        detail: why.clone(),
                        command,
                    });
                }
                Err(e) => {
                    self.store.done(id, None, &format!("failed: {e}"))?;
                    out.push(Outcome {
                        node: node.clone(),
                        what: "failed".into(),
                        detail: e.to_string(),
                        command,
                    });
                }
            }
        }
        Ok(out)
    }

    /// Puts a held node back: only while our mark is still on it (unless `force`, which says what it overrides).
    /// `to` is the state it is in afterwards (`Released`, or `Requalifying` into a maintenance window).
    pub(crate) fn put_back(
        &mut self,
        node: &str,
        force: bool,
        to: Held,
        note: &str,
    ) -> Result<Outcome, QuarantineError> {
        self.reconcile()?;
        let Some(mut record) = self.store.records()?.into_iter().find(|r| r.node == node) else {
            return Ok(Outcome {
                node: node.into(),
                what: "not ours".into(),
                detail: "cloudai holds no record of this node: nothing done".into(),
                command: String::new(),
            });
        };
        let seen = self
            .sched
            .seen(&[node.to_string()])?
            .remove(node)
            .unwrap_or(Seen::InService);
        let overridden = match &seen {
            Seen::Ours(t) if *t == record.tag => None,
            Seen::InService => {
                // someone put it back already: record that, run nothing
                if !self.dry_run && record.state.is_out() {
                    record.state = Held::Released;
                    record.updated = now();
                    record.evidence = "put back by someone else".into();
                    self.record_only(&record, "in service already")?;
                }
                return Ok(Outcome {
                    node: node.into(),
                    what: "in service".into(),
                    detail: "already back in service (someone else): nothing done".into(),
                    command: String::new(),
                });
            }
            Seen::Ours(t) => Some(format!("another cloudai run's mark {t:?}")),
            Seen::Others(r) => Some(format!("someone else's {r:?}")),
        };
        if let (Some(o), false) = (&overridden, force) {
            return Ok(Outcome {
                node: node.into(),
                what: "not ours".into(),
                detail: format!(
                    "out of service by {o}, not ours: left as it is (--force overrides)"
                ),
                command: String::new(),
            });
        }
        let command = self.sched.command(Action::PutBack, node, &record.tag);
        if self.dry_run {
            return Ok(Outcome {
                node: node.into(),
                what: format!(
                    "would {}",
                    if to == Held::Released {
                        "release"
                    } else {
                        "requalify"
                    }
                ),
                detail: overridden.map_or(String::new(), |o| format!("overriding {o}")),
                command,
            });
        }
        record.state = to;
        record.updated = now();
        if !note.is_empty() {
            record.evidence = note.to_string();
        }
        let id = self.store.intend(&Intent {
            id: 0,
            node: node.into(),
            action: Action::PutBack,
            tag: record.tag.clone(),
            to,
            record: record.clone(),
        })?;
        let acted = if to == Held::Requalifying {
            self.sched.open_window(node, &record.tag)
        } else {
            self.sched.put_back(node, &record.tag, force)
        };
        match acted {
            Ok(()) => {
                self.store.done(id, Some(&record), "done")?;
                Ok(Outcome {
                    node: node.into(),
                    what: to.as_str().into(),
                    detail: overridden.map_or(String::new(), |o| format!("--force: overrode {o}")),
                    command,
                })
            }
            Err(e) => {
                self.store.done(id, None, &format!("failed: {e}"))?;
                Ok(Outcome {
                    node: node.into(),
                    what: "failed".into(),
                    detail: e.to_string(),
                    command,
                })
            }
        }
    }

    /// A record changed without any action on the node.
    pub(crate) fn record_only(
        &mut self,
        record: &Record,
        outcome: &str,
    ) -> Result<(), QuarantineError> {
        let id = self.store.intend(&Intent {
            id: 0,
            node: record.node.clone(),
            action: Action::Note,
            tag: record.tag.clone(),
            to: record.state,
            record: record.clone(),
        })?;
        self.store.done(id, Some(record), outcome)
    }

    /// Brings the records of held nodes up to what the scheduler shows: a node someone else put back, or took over
    /// with their own reason, is no longer ours (nothing is done to it; only the record changes).
    pub fn refresh(&mut self) -> Result<Vec<Outcome>, QuarantineError> {
        let held: Vec<Record> = self
            .store
            .records()?
            .into_iter()
            .filter(|r| r.state.is_out())
            .collect();
        if held.is_empty() {
            return Ok(Vec::new());
        }
        let nodes: Vec<String> = held.iter().map(|r| r.node.clone()).collect();
        let seen = self.sched.seen(&nodes)?;
        let mut out = Vec::new();
        for mut r in held {
            let why = match seen.get(&r.node) {
                Some(Seen::Ours(t)) if *t == r.tag => continue,
                // a window of ours may have it in service
                Some(Seen::InService) if r.state == Held::Requalifying => continue,
                Some(Seen::InService) => "put back in service by someone else".to_string(),
                None => "no longer listed by the scheduler (removed from the cluster)".to_string(),
                Some(Seen::Ours(t)) => format!("marked {t:?} by another cloudai run"),
                Some(Seen::Others(o)) => format!("taken over by {o}"),
            };
            r.state = Held::Released;
            r.evidence = why.clone();
            r.updated = now();
            if !self.dry_run {
                self.record_only(&r, "no longer ours")?;
            }
            out.push(Outcome {
                node: r.node.clone(),
                what: "no longer ours".into(),
                detail: why,
                command: String::new(),
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
