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

impl ErrorKind {
    /// What an HTTP error status says of a request: 404 and 410 the object is not there; 408, 425, 429 and every
    /// 5xx the server could not take it now (asking again later may work); any other status refuses it.
    pub(crate) fn of_http(code: u16) -> Self {
        match code {
            404 | 410 => ErrorKind::Gone,
            408 | 425 | 429 | 500..=599 => ErrorKind::Transient,
            _ => ErrorKind::Refused,
        }
    }

    /// The kind of a failed creation: a missing path or parent (a 404) means what was asked cannot be made — a
    /// refusal —, not that a job is gone.
    pub fn creating(self) -> Self {
        match self {
            ErrorKind::Gone => ErrorKind::Refused,
            k => k,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SystemError {
    pub kind: ErrorKind,
    pub message: String,
}

impl SystemError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    pub fn refused(message: impl Into<String>) -> Self {
        Self {
            kind: ErrorKind::Refused,
            message: message.into(),
        }
    }

    pub(crate) fn transient(message: impl Into<String>) -> Self {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_statuses_say_whether_asking_again_may_help() {
        for code in [408, 425, 429, 500, 502, 503, 504, 599] {
            assert_eq!(ErrorKind::of_http(code), ErrorKind::Transient, "{code}");
        }
        for code in [400, 401, 403, 405, 409, 413, 422] {
            assert_eq!(ErrorKind::of_http(code), ErrorKind::Refused, "{code}");
        }
        assert_eq!(ErrorKind::of_http(404), ErrorKind::Gone);
        assert_eq!(ErrorKind::of_http(410), ErrorKind::Gone);
        // creating under a path that is not there is refused, not gone
        assert_eq!(ErrorKind::of_http(404).creating(), ErrorKind::Refused);
        assert_eq!(ErrorKind::of_http(503).creating(), ErrorKind::Transient);
    }
}
