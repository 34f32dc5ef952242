//! Node evidence: what a node's own tools say of it (kernel log, InfiniBand ports, GPU state), read by the rules
//! of each tool's format into findings, each with what it means for the node: fail (needs a reset, a reboot, a
//! repair), warn (shown, worth a look), show (context). A node fails when one finding fails.

pub mod dcgm;
pub mod drift;
pub mod ibstat;
pub mod kernel_log;
pub mod nvidia_smi;
pub mod report;
pub mod template;

/// What a finding means for the node (ordered: the worst is the greatest).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// Context (an application's error, a corrected event).
    Show,
    /// Shown as a warning: worth a look, the node still passes.
    Warn,
    /// The node needs a reset, a reboot or a repair before it takes work.
    Fail,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Show => "info",
            Severity::Warn => "warn",
            Severity::Fail => "fail",
        }
    }
}

/// One thing the evidence shows.
#[derive(Clone, Debug, PartialEq)]
pub struct Finding {
    pub severity: Severity,
    pub what: String,
}

impl Finding {
    pub fn new(severity: Severity, what: impl Into<String>) -> Self {
        Self {
            severity,
            what: what.into(),
        }
    }
}

/// The worst severity of `findings` (None when there are none).
pub fn worst(findings: &[Finding]) -> Option<Severity> {
    findings.iter().map(|f| f.severity).max()
}
