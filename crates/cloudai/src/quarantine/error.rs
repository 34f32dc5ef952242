//! What keeps a quarantine action from being done, by who stands in the way: someone else's mark (theirs stands),
//! a change between our read and our write, a node the scheduler no longer has, the scheduler itself, or the
//! quarantine's own records.

use std::fmt;
use std::sync::Arc;

#[derive(Clone, Debug)]
pub enum QuarantineError {
    /// Out of service by someone else (an admin's drain, another tool): not ours to change.
    NotOurs { by: String },
    /// Our mark is no longer on the node (someone acted since): left as it is.
    MarkGone { now: String },
    /// The node changed between our read and our write (someone else acted): theirs stands, ours was not made.
    Raced { node: String },
    /// The scheduler has no such node (removed since).
    Gone { node: String },
    /// cloudai holds no record of the node.
    NotHeld { node: String },
    /// The scheduler could not be asked, or refused (its own words).
    Scheduler(String),
    /// The quarantine's records could not be read or written: the store's own error (the ledger's `LedgerError`,
    /// which converts into this where the ledger implements the store).
    Store(Arc<dyn std::error::Error + Send + Sync>),
    /// A record in the store that cannot be read back.
    Corrupt(String),
}

impl fmt::Display for QuarantineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuarantineError::NotOurs { by } => write!(f, "out of service by {by}: not ours to change"),
            QuarantineError::MarkGone { now } => {
                write!(f, "its mark is no longer ours ({now}): left as it is")
            }
            QuarantineError::Raced { node } => write!(
                f,
                "node {node} changed between our read and our write (someone else acted): their change stands, \
                 ours was not made"
            ),
            QuarantineError::Gone { node } => write!(f, "node {node} is not in the cluster"),
            QuarantineError::NotHeld { node } => write!(f, "{node}: cloudai holds no record of it"),
            QuarantineError::Scheduler(m) | QuarantineError::Corrupt(m) => f.write_str(m),
            QuarantineError::Store(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for QuarantineError {}

/// Messages stay what the command line prints.
impl From<QuarantineError> for String {
    fn from(e: QuarantineError) -> Self {
        e.to_string()
    }
}

impl From<QuarantineError> for crate::exit_codes::Failure {
    fn from(e: QuarantineError) -> Self {
        crate::exit_codes::Failure::Error(e.to_string())
    }
}
