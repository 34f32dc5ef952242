//! The builder every run test starts from: a scratch directory given a system, tests and a scenario, `cloudai run`
//! there, then expectations on the exit code and on each iteration's record — each failure message carries the
//! run's output.
//!
//! ```ignore
//! let ran = Scratch::standalone().test("sleep", fixtures::SLEEP).scenario(SCENARIO).run();
//! ran.exits(0).iteration("first", 1, Status::Passed);
//! ```

use std::path::PathBuf;

use cloudai::results::{IterationRecord, Status};

use super::{record, stdout_of, Work};

/// Test inputs kept as files under tests/data/fixtures/ (not escaped strings).
pub mod fixtures {
    pub const STANDALONE: &str = include_str!("../data/fixtures/standalone.toml");
    pub const SLEEP: &str = include_str!("../data/fixtures/sleep.toml");
    pub const BASH: &str = include_str!("../data/fixtures/bash.toml");
    /// NCCL without a container (the binary from PATH).
    pub const NCCL: &str = include_str!("../data/fixtures/nccl.toml");
}

pub struct Scratch {
    pub work: Work,
}

impl Scratch {
    /// A scratch directory with the Standalone system of the fixtures (results under `out/`).
    pub fn standalone() -> Self {
        Self { work: Work::new() }.system(fixtures::STANDALONE)
    }

    pub fn system(self, toml: &str) -> Self {
        self.work.file("system.toml", toml);
        self
    }

    /// A test definition, `tests/<name>.toml`.
    pub fn test(self, name: &str, toml: &str) -> Self {
        self.work.file(&format!("tests/{name}.toml"), toml);
        self
    }

    pub fn scenario(self, toml: &str) -> Self {
        self.work.file("scenario.toml", toml);
        self
    }

    /// `cloudai run` on system.toml, tests/ and scenario.toml, with `extra` arguments.
    pub fn run_with(self, extra: &[&str]) -> Ran {
        let out = self
            .work
            .cloudai()
            .args([
                "run",
                "--system-config",
                "system.toml",
                "--tests-dir",
                "tests",
                "--test-scenario",
                "scenario.toml",
            ])
            .args(extra)
            .output()
            .unwrap();
        Ran {
            text: stdout_of(&out),
            out,
            work: self.work,
        }
    }

    pub fn run(self) -> Ran {
        self.run_with(&[])
    }
}

/// A finished `cloudai run`.
pub struct Ran {
    pub work: Work,
    pub out: std::process::Output,
    /// Its standard output and error.
    pub text: String,
}

impl Ran {
    pub fn exits(&self, code: i32) -> &Self {
        assert_eq!(self.out.status.code(), Some(code), "{}", self.text);
        self
    }

    /// The one results tree under `out/`.
    pub fn root(&self) -> PathBuf {
        self.work.results_root()
    }

    pub fn record(&self, test: &str, iteration: u64) -> IterationRecord {
        record(&self.root(), test, iteration)
    }

    /// The iteration's record has this status.
    pub fn iteration(&self, test: &str, iteration: u64, status: Status) -> &Self {
        let r = self.record(test, iteration);
        assert_eq!(
            r.status,
            status,
            "{test} #{iteration}: {} ({})\n{}",
            r.status.as_str(),
            r.message,
            self.text
        );
        self
    }

    /// The run's output says this.
    pub fn says(&self, text: &str) -> &Self {
        assert!(self.text.contains(text), "no {text:?} in:\n{}", self.text);
        self
    }

    /// A file of an iteration, as text.
    pub fn file(&self, test: &str, iteration: u64, name: &str) -> String {
        let p = self
            .root()
            .join(test)
            .join(iteration.to_string())
            .join(name);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }
}
