//! The quarantine's words: where a node is held, its durable record, what the scheduler shows of it, the actions and
//! their write-ahead intents, and the two seams (Scheduler, Store).

use super::*;

/// Where cloudai holds a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Held {
    /// Taken out of service by cloudai.
    Quarantined,
    /// Given back into a maintenance window to be tested.
    Requalifying,
    /// Given back to service (passed its requalification, or by hand).
    Released,
    /// Failed too many requalifications: stays out, for a person.
    Escalated,
}

impl Held {
    pub fn as_str(self) -> &'static str {
        match self {
            Held::Quarantined => "quarantined",
            Held::Requalifying => "requalifying",
            Held::Released => "released",
            Held::Escalated => "escalated",
        }
    }
    pub fn parse(s: &str) -> Option<Held> {
        Some(match s {
            "quarantined" => Held::Quarantined,
            "requalifying" => Held::Requalifying,
            "released" => Held::Released,
            "escalated" => Held::Escalated,
            _ => return None,
        })
    }
    /// Out of service by our hand.
    pub(crate) fn is_out(self) -> bool {
        !matches!(self, Held::Released)
    }
}

/// What cloudai knows of a node it holds (or held).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub node: String,
    pub state: Held,
    /// The exact mark we put on the node (the Slurm reason, the annotation's value): ours while it is still there.
    pub tag: String,
    /// Why (the verdict's evidence).
    pub reason: String,
    /// The run that took it out (a results directory name).
    pub run: String,
    /// Unix seconds it was taken out.
    pub since: i64,
    /// Requalifications tried, and passed in a row.
    pub attempts: u32,
    pub passes: u32,
    /// The latest requalification's evidence (or the results tree that holds it).
    pub evidence: String,
    pub updated: i64,
}

/// What the scheduler shows of a node now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    /// Running jobs (or free to).
    InService,
    /// Out of service with this mark of ours.
    Ours(String),
    /// Out of service by someone else, with their reason.
    Others(String),
}

/// The actions cloudai takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Drain / cordon and taint, with our mark.
    TakeOut,
    /// Resume / uncordon, only while our mark is still there.
    PutBack,
    /// No change to the node: the record alone (a count, a conclusion).
    Note,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::TakeOut => "take_out",
            Action::PutBack => "put_back",
            Action::Note => "note",
        }
    }
    pub fn parse(s: &str) -> Option<Action> {
        match s {
            "take_out" => Some(Action::TakeOut),
            "put_back" => Some(Action::PutBack),
            "note" => Some(Action::Note),
            _ => None,
        }
    }
}

/// An action written before it is done.
#[derive(Clone, Debug, PartialEq)]
pub struct Intent {
    pub id: i64,
    pub node: String,
    pub action: Action,
    /// The mark the action puts (take out) or requires (put back).
    pub tag: String,
    /// The state the node is in once the action is done.
    pub to: Held,
    /// The record as it will be once done.
    pub record: Record,
}

/// What a scheduler must do for quarantine.
pub trait Scheduler {
    fn seen(&mut self, nodes: &[String]) -> Result<BTreeMap<String, Seen>, QuarantineError>;
    /// Takes the node out of service with this mark; refuses (Err) a node out of service by someone else.
    fn take_out(&mut self, node: &str, tag: &str) -> Result<(), QuarantineError>;
    /// Puts the node back, only while `tag` is still its mark (else Err, nothing changed); `force` overrides.
    fn put_back(&mut self, node: &str, tag: &str, force: bool) -> Result<(), QuarantineError>;
    /// Opens a maintenance window on a held node so cloudai's test can run there and no one else's: Slurm resumes
    /// it (a maintenance reservation keeps users off); Kubernetes uncordons it but keeps our NoSchedule taint (the
    /// test's pods tolerate it). Only while `tag` is still its mark.
    fn open_window(&mut self, node: &str, tag: &str) -> Result<(), QuarantineError> {
        self.put_back(node, tag, false)
    }
    /// Closes a window opened by [`Scheduler::open_window`] on a node that stays out (Kubernetes: cordoned again;
    /// Slurm's window was the resume itself, undone by a new drain).
    fn close_window(&mut self, _node: &str, _tag: &str) -> Result<(), QuarantineError> {
        Ok(())
    }
    /// How an operator would type an action (for dry runs and reports).
    fn command(&self, action: Action, node: &str, tag: &str) -> String;
}

/// Where quarantine state lives.
pub trait Store {
    fn records(&mut self) -> Result<Vec<Record>, QuarantineError>;
    fn pending(&mut self) -> Result<Vec<Intent>, QuarantineError>;
    /// Writes the intent (durably) and returns its id.
    fn intend(&mut self, i: &Intent) -> Result<i64, QuarantineError>;
    /// Records the intent done (or given up, with why) and the node's record, in one transaction.
    fn done(
        &mut self,
        id: i64,
        record: Option<&Record>,
        outcome: &str,
    ) -> Result<(), QuarantineError>;
}

/// What one operation did to one node, for the console and reports.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Outcome {
    pub node: String,
    /// `quarantined`, `released`, `kept`, `not ours`, `failed`, …
    pub what: String,
    pub detail: String,
    /// The command as an operator would type it (empty when nothing was run).
    pub command: String,
}

impl Seen {
    /// Whether a put back of the node marked `tag` may go ahead: `Ok(true)` ours, `Ok(false)` back in service
    /// already (nothing to do), `Err` someone else's mark (unless `force`).
    pub(crate) fn may_put_back(&self, tag: &str, force: bool) -> Result<bool, QuarantineError> {
        match self {
            Seen::Ours(t) if t == tag => Ok(true),
            Seen::InService => Ok(false),
            other if !force => Err(QuarantineError::MarkGone {
                now: format!("{other:?}"),
            }),
            _ => Ok(true),
        }
    }
}

impl Outcome {
    /// Whether it is a refusal or a failure (a warning, and a non-zero exit).
    pub fn refused(&self) -> bool {
        matches!(self.what.as_str(), "not ours" | "failed" | "escalated")
    }

    /// Says what a new cloudai finished of an earlier one's actions.
    pub(crate) fn say_finished(finished: &[Outcome]) {
        for o in finished {
            crate::warn!(
                "Finished what an earlier cloudai left on {}: {} ({})",
                o.node,
                o.what,
                o.detail
            );
        }
    }

    /// `node003: released (why): the command`, said as a warning when refused.
    pub fn say(&self) {
        let line = format!(
            "{}: {}{}{}",
            self.node,
            self.what,
            if self.detail.is_empty() {
                String::new()
            } else {
                format!(" ({})", self.detail)
            },
            if self.command.is_empty() {
                String::new()
            } else {
                format!(": {}", self.command)
            }
        );
        if self.refused() {
            crate::warn!("{line}");
        } else {
            crate::info!("{line}");
        }
    }
}
