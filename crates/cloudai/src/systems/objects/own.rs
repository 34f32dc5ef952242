//! A run whose test is the workload's own object on this scheduler ([`crate::workloads::Workload::own_object`]): its
//! file is written as the test's job, a dry-run says what it would create, and what only a real run cannot do is
//! said before anything is created. Its step is the object as the backend creates it (named and labelled as
//! ours).

use std::path::Path;

use super::{Backend, Step, StepKind, Stepped};
use crate::info;
use crate::scenario::TestRun;
use crate::systems::{JobId, Prepared};

impl<B: Backend> Stepped<B> {
    /// The prepared job: the object's file as CloudAI writes it and its hooks' objects as ours are (`steps`), its
    /// command the workload's own (CloudAI records none).
    pub(super) fn prepare_own(
        &self,
        run: &TestRun,
        dir: &Path,
        steps: &[Step<B::Spec>],
    ) -> Option<Prepared> {
        let o = self.backend.own_object(run)?;
        let mut files = vec![(o.file.to_string(), o.text)];
        files.extend(
            steps
                .iter()
                .filter(|st| st.part != StepKind::Main)
                .map(|st| self.step_file(dir, st)),
        );
        Some(Prepared {
            test_cmd: String::new(),
            full_cmd: "n/a".into(),
            files,
            env: crate::systems::job_env(self.backend.config(), run),
            submit: None,
            runs: None,
        })
    }

    /// What a dry-run would create: the object's kind and the name a run gives it (its step's, `name`).
    pub(super) fn would_create_own(&self, run: &TestRun, name: &str) -> Option<JobId> {
        let o = self.backend.own_object(run)?;
        let kind = o.manifest["kind"].as_str().unwrap_or("object");
        info!("Would create {kind} {name} (as {})", o.file);
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
