//! A dry-run is a decorator around a real system: every iteration is prepared for real (its scripts and objects
//! written as a run would write them), and submitting, polling and cancelling are faked — each job says what it
//! would do, is seen running once, then ends as `dry_run`. The wrapped system is never connected, so it takes its
//! facts from its config alone and needs no credentials.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use super::{JobId, JobState, Prepared, Settings, System, SystemError};
use crate::results::EndReason;
use crate::scenario::TestRun;
use crate::workloads::JobOutcome;

pub(crate) struct DryRun {
    inner: Arc<dyn System>,
    /// Polls seen per fake id: the first says running, the next ends it. Jobs sharing a fake id (Slurm's `0`)
    /// share its state within one poll.
    polls: Mutex<HashMap<JobId, u8>>,
}

impl DryRun {
    pub(crate) fn wrap(inner: Arc<dyn System>) -> Arc<dyn System> {
        Arc::new(Self {
            inner,
            polls: Mutex::default(),
        })
    }
}

#[async_trait]
impl System for DryRun {
    fn runner_name(&self) -> &'static str {
        self.inner.runner_name()
    }

    /// The inner system's, with jobs polled back to back (they end at once) and none of the engine's effects.
    fn settings(&self) -> Settings {
        Settings {
            monitor_interval: Duration::ZERO,
            effects: super::Effects::NONE,
            ..self.inner.settings()
        }
    }

    fn check(&self, run: &TestRun) -> Vec<String> {
        self.inner.check(run)
    }

    async fn connect(&self) -> Result<(), SystemError> {
        Ok(())
    }

    fn prepare(&self, run: &TestRun, iteration: u64, dir: &Path) -> Result<Prepared, SystemError> {
        self.inner.prepare(run, iteration, dir)
    }

    async fn submit(
        &self,
        run: &TestRun,
        dir: &Path,
        job: &Prepared,
    ) -> Result<JobId, SystemError> {
        Ok(self.inner.would_submit(run, dir, job))
    }

    async fn poll(&self, ids: &[JobId]) -> Vec<JobState> {
        let mut polls = self.polls.lock().unwrap();
        let mut seen: HashMap<&JobId, u8> = HashMap::new();
        for id in ids {
            if !seen.contains_key(id) {
                let n = polls.entry(id.clone()).or_default();
                *n += 1;
                seen.insert(id, *n);
            }
        }
        for (id, n) in &seen {
            if *n > 1 {
                polls.remove(*id);
            }
        }
        ids.iter()
            .map(|id| match seen[id] {
                1 => JobState::Running,
                _ => JobState::Finished(JobOutcome {
                    exit_code: Some(0),
                    end: Some(EndReason::DryRun),
                    ..Default::default()
                }),
            })
            .collect()
    }

    async fn cancel(&self, _id: &JobId) -> Result<(), SystemError> {
        Ok(())
    }

    fn single_job(
        &self,
        scenario: &str,
        root: &Path,
        items: &[(&TestRun, u64, &Path, &Prepared)],
    ) -> Option<Prepared> {
        self.inner.single_job(scenario, root, items)
    }
}
