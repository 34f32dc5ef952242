//! Why a scheduler call failed, in the kinds the engine acts on: a refusal fails the iteration, a transient failure
//! is retried, a job that is gone needs no cancelling. The message is for people; the engine reads only the kind.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The scheduler said no (a bad request, a quota, a spec it cannot meet): asking again will not help.
    Refused,
    /// It could not be asked (its controller or API unreachable, overloaded, timing out) and nothing was done:
    /// asking again later may work.
    Transient,
    /// The job is not there any more (it ended, or was deleted).
    Gone,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SystemError {
    pub kind: ErrorKind,
    pub message: String,
}

impl SystemError {
    pub fn refused(message: impl Into<String>) -> Self {
        Self {
            kind: ErrorKind::Refused,
            message: message.into(),
        }
    }

    pub fn transient(message: impl Into<String>) -> Self {
        Self {
            kind: ErrorKind::Transient,
            message: message.into(),
        }
    }

    pub fn gone(message: impl Into<String>) -> Self {
        Self {
            kind: ErrorKind::Gone,
            message: message.into(),
        }
    }
}

impl fmt::Display for SystemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// An error that does not say its kind is a refusal: nothing is retried that was not known to be safe to retry.
impl From<String> for SystemError {
    fn from(message: String) -> Self {
        Self::refused(message)
    }
}

impl From<&str> for SystemError {
    fn from(message: &str) -> Self {
        Self::refused(message)
    }
}

impl From<SystemError> for String {
    fn from(e: SystemError) -> Self {
        e.message
    }
}
