//! The process's exit codes and the environment it reads, each defined once: the code returns these constants,
//! `cloudai --help` lists them (generated from [`ALL`] and [`ENVIRONMENT`]), and docs/usage.md's table says the same
//! (a test holds the two together).

/// Everything asked was done and every iteration passed (or was stopped on purpose; a dry run's `DRY-RUN`).
pub const OK: i32 = 0;
/// Bad input or an environment that cannot run it; nothing was run. Or results that could not be written.
pub const ERROR: i32 = 1;
/// A command-line usage error (clap's own code).
pub(crate) const USAGE: i32 = 2;
/// The scenario ran, but an iteration failed, timed out, was cancelled by the scheduler, was skipped or lost its
/// watcher; find-bad-nodes: a node bad or suspect, or a bad link.
pub const TEST_FAILURES: i32 = 3;
/// Something submitted could not be confirmed stopped or deleted: it may still hold nodes (`leftovers.json`).
/// Wins over 3 and 130.
pub const LEFTOVERS: i32 = 4;
/// Interrupted (Ctrl-C, SIGTERM, SIGHUP, SIGQUIT): every submitted job was cancelled.
pub const INTERRUPTED: i32 = 130;

/// Every exit code with its one-line meaning, in the order `--help` prints them.
pub const ALL: [(i32, &str); 6] = [
    (OK, "every iteration PASSED (or STOPPED on purpose; a dry run's DRY-RUN)"),
    (ERROR, "bad input, nothing run; or results that could not be written"),
    (USAGE, "command-line usage error"),
    (
        TEST_FAILURES,
        "an iteration FAILED, TIMEOUT, CANCELLED, SKIPPED or INTERRUPTED; find-bad-nodes found a bad node or link",
    ),
    (
        LEFTOVERS,
        "something submitted could not be confirmed gone (leftovers.json); wins over 3 and 130",
    ),
    (
        INTERRUPTED,
        "interrupted (Ctrl-C, SIGTERM, SIGHUP): every submitted job was cancelled",
    ),
];

/// Every environment variable cloudai reads, with what it does.
pub const ENVIRONMENT: [(&str, &str); 16] = [
    (
        "CLOUDAI_SYSTEM_CONFIG",
        "the system TOML when --system-config is not given",
    ),
    (
        "CLOUDAI_LEDGER",
        "the fleet ledger (a SQLite file or postgres:// URL) when --ledger is not given",
    ),
    (
        "XDG_DATA_HOME",
        "where the default ledger lives (cloudai/ledger.sqlite under it)",
    ),
    (
        "PGPASSWORD",
        "the PostgreSQL ledger's password when its URL has none",
    ),
    (
        crate::config::system::SECRET_ENV,
        "the Run:ai application secret (never written anywhere)",
    ),
    ("KUBECONFIG", "the kubeconfig when the system names none"),
    (
        "SSL_CERT_FILE",
        "extra CA certificates for the Run:ai control plane",
    ),
    (
        "HTTPS_PROXY, HTTP_PROXY, NO_PROXY",
        "proxies for Run:ai's REST calls and log WebSocket",
    ),
    (
        "CLOUDAI_RUNAI_TIMEOUT_S",
        "the timeout of one Run:ai request",
    ),
    (
        "CLOUDAI_RUNAI_DEGRADED_GRACE_S",
        "how long a Degraded Run:ai workload may recover",
    ),
    (
        "CLOUDAI_RUNAI_GONE_WAIT_S",
        "how long a deleted Run:ai workload is waited for",
    ),
    (
        "CLOUDAI_K8S_OPERATOR_WAIT_S",
        "how long an MPIJob may wait for the MPI operator to act",
    ),
    (
        "CLOUDAI_K8S_GONE_WAIT_S",
        "how long a deleted Kubernetes object is waited for",
    ),
    (
        crate::config::test::NEMORUN_SCRIPT_ENV,
        "CloudAI's cloudai_nemorun.py, which `install` copies for NeMoRun tests",
    ),
    (
        "NO_COLOR",
        "no colour on the console when set (as --color never)",
    ),
    (
        "PATH",
        "where scheduler commands (sbatch, squeue, …) and tools are found",
    ),
];

/// The text after `cloudai --help`: exit codes and environment.
pub(crate) fn long_help() -> String {
    let mut s = String::from("Exit codes:\n");
    for (code, what) in ALL {
        s.push_str(&format!("  {code:>3}  {what}\n"));
    }
    s.push_str("\nEnvironment:\n");
    for (var, what) in ENVIRONMENT {
        s.push_str(&format!("  {var}\n          {what}\n"));
    }
    s
}

/// How a command ended short of [`OK`]: every command returns `Result<(), Failure>` and `cli::main` turns it into
/// the process's exit code, printing what was not yet said exactly once.
#[derive(Debug, PartialEq)]
pub enum Failure {
    /// Bad input or an environment that cannot run it: the one message to print (exit code 1).
    Error(String),
    /// Already reported where it was found (a config error with its file and line, a list of problems): exit
    /// code 1, nothing more to say.
    Reported,
    /// The command ran and its outcome has this code ([`TEST_FAILURES`], [`LEFTOVERS`], [`INTERRUPTED`], or
    /// [`ERROR`] for results that could not be written), already explained.
    Outcome(i32),
}

impl Failure {
    pub fn exit_code(&self) -> i32 {
        match self {
            Failure::Error(_) | Failure::Reported => ERROR,
            Failure::Outcome(c) => *c,
        }
    }

    /// Prints what was not yet said (once) and gives the exit code: where a failure ends a command.
    pub fn report(self) -> i32 {
        if let Failure::Error(m) = &self {
            crate::error!("{m}");
        }
        self.exit_code()
    }

    /// A command's exit code as a result (0 is success).
    pub(crate) fn of_code(code: i32) -> Result<(), Failure> {
        match code {
            OK => Ok(()),
            c => Err(Failure::Outcome(c)),
        }
    }
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Failure::Error(message)
    }
}

impl From<crate::config::ConfigErrors> for Failure {
    /// Config errors are reported with their locations as they are turned into a failure.
    fn from(e: crate::config::ConfigErrors) -> Self {
        e.report();
        Failure::Reported
    }
}
