//! A run whose test is the workload's own object on this scheduler ([`crate::workloads::Workload::own_object`]): its
//! file is written as the test's job, a dry-run says what it would create, and what only a real run cannot do is
//! said before anything is created. No step of the machine is planned for it.

use super::{Backend, Stepped};
use crate::info;
use crate::scenario::TestRun;
use crate::systems::{JobId, Prepared};

impl<B: Backend> Stepped<B> {
    /// The prepared job: the object's file, its command the workload's own (CloudAI records none).
    pub(super) fn prepare_own(&self, run: &TestRun) -> Option<Prepared> {
        let o = self.backend.own_object(run)?;
        Some(Prepared {
            test_cmd: String::new(),
            full_cmd: "n/a".into(),
            files: vec![(o.file.to_string(), o.text)],
            env: crate::systems::job_env(self.backend.config(), run),
            submit: None,
            runs: None,
        })
    }

    /// What a dry-run would create: the object's kind and name.
    pub(super) fn would_create_own(&self, run: &TestRun) -> Option<JobId> {
        let o = self.backend.own_object(run)?;
        let kind = o.manifest["kind"].as_str().unwrap_or("object");
        let name = o.manifest["metadata"]["name"].as_str().unwrap_or_default();
        info!("Would create {kind} {name} ({})", o.file);
        Some(name.to_string())
    }

    /// What a real run of the object cannot do, one sentence each.
    pub(super) fn own_problems(&self, run: &TestRun) -> Vec<String> {
        self.backend
            .own_object(run)
            .map(|o| {
                o.problems
                    .into_iter()
                    .map(|p| format!("test '{}': {p}", run.id))
                    .collect()
            })
            .unwrap_or_default()
    }
}
