//! The end of a requalification: released after K passes in a row, out again (or escalated) after a fail.

use super::{now, tag, Action, Held, Intent, Outcome, Quarantine, QuarantineError, Seen};

impl Quarantine<'_> {
    /// Concludes a requalification of a node cloudai put back into a maintenance window (`Requalifying`): a pass
    /// counts toward `k` in a row (then the node is released: it stays in service); a fail resets the count and
    /// takes it out again with the new evidence, escalated after `max_attempts` failed requalifications. A node
    /// someone else took meanwhile is theirs.
    pub(crate) fn conclude(
        &mut self,
        node: &str,
        passed: bool,
        evidence: &str,
        k: u32,
        max_attempts: u32,
    ) -> Result<Outcome, QuarantineError> {
        self.reconcile()?;
        let Some(mut record) = self.store.records()?.into_iter().find(|r| r.node == node) else {
            return Err(QuarantineError::NotHeld { node: node.into() });
        };
        let seen = self
            .sched
            .seen(&[node.to_string()])?
            .remove(node)
            .unwrap_or(Seen::InService);
        record.updated = now();
        record.evidence = evidence.to_string();
        if let Seen::Others(r) = &seen {
            // taken by someone else during the test: theirs now
            record.state = Held::Released;
            record.evidence =
                format!("taken out of service by {r} during requalification; {evidence}");
            self.record_only(&record, "not ours")?;
            return Ok(Outcome {
                node: node.into(),
                what: "not ours".into(),
                detail: format!("out of service by {r} now, not ours: left as it is"),
                command: String::new(),
            });
        }
        if passed {
            record.passes += 1;
            if record.passes >= k {
                record.state = Held::Released;
                let already_out = matches!(seen, Seen::Ours(_));
                if !already_out {
                    self.record_only(&record, "released")?;
                    return Ok(Outcome {
                        node: node.into(),
                        what: "released".into(),
                        detail: format!("passed {} requalification(s) in a row", record.passes),
                        command: String::new(),
                    });
                }
                // still out (a window that did not put it back): put it back now
                return self.put_back(node, false, Held::Released, evidence);
            }
        } else {
            record.passes = 0;
            record.attempts += 1;
        }
        // not yet released: out again until the next requalification
        let escalate = !passed && record.attempts >= max_attempts;
        record.state = if escalate {
            Held::Escalated
        } else {
            Held::Quarantined
        };
        let why = if passed {
            format!("passed {} of {k} requalifications", record.passes)
        } else if escalate {
            format!(
                "escalated after {} failed requalifications: {evidence}",
                record.attempts
            )
        } else {
            format!("failed requalification {}: {evidence}", record.attempts)
        };
        let t = tag(&record.run, &why);
        let keep_tag = matches!(&seen, Seen::Ours(x) if *x == record.tag);
        if keep_tag {
            // the window kept our mark on it: close it, and the record changes
            self.record_only(&record, "kept out")?;
            self.sched.close_window(node, &record.tag)?;
        } else {
            record.tag = t.clone();
            let id = self.store.intend(&Intent {
                id: 0,
                node: node.into(),
                action: Action::TakeOut,
                tag: t.clone(),
                to: record.state,
                record: record.clone(),
            })?;
            if let Err(e) = self.sched.take_out(node, &t) {
                self.store.done(id, None, &format!("failed: {e}"))?;
                return Ok(Outcome {
                    node: node.into(),
                    what: "failed".into(),
                    detail: format!("could not take it out again: {e}"),
                    command: self.sched.command(Action::TakeOut, node, &t),
                });
            }
            self.store.done(id, Some(&record), "done")?;
        }
        Ok(Outcome {
            node: node.into(),
            what: record.state.as_str().into(),
            detail: why,
            command: self.sched.command(Action::TakeOut, node, &record.tag),
        })
    }
}
