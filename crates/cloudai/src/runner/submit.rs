//! Submitting: an iteration's files written, its job handed to the system; a refusal recorded as failed (the
//! next iteration tried), a scheduler that cannot take it for now tried again a turn later.

use super::*;

/// What became of a submission.
pub(super) enum Submitted {
    Yes,
    /// Refused (or its files could not be written): recorded as failed.
    Failed,
    /// The scheduler could not take it for now: the slot waits and tries again next turn.
    Later,
}

impl Runner {
    pub(super) async fn start_ready(&self, slots: &mut [Slot], books: &mut Books) {
        for i in 0..slots.len() {
            let ready =
                matches!(slots[i].phase, Phase::Waiting) && self.deps_met(slots, &slots[i].run);
            if ready {
                self.submit(&mut slots[i], books).await;
            }
        }
    }

    /// Submits the slot's iteration; one that cannot be submitted is recorded as failed and the next iteration is
    /// tried (a refused submission never drops the iterations after it).
    pub(super) async fn submit(&self, slot: &mut Slot, books: &mut Books) {
        // near the open-files limit a job waits for another to end, rather than fail for want of a descriptor
        if self.effects.local && !crate::util::fds::room_for_a_job(self.fd_base) {
            if !std::mem::replace(&mut books.fd_said, true) {
                info!(
                    "Near the limit of open files ({}): further tests start as running ones end",
                    crate::util::fds::limit().unwrap_or(0)
                );
            }
            slot.phase = Phase::Waiting;
            return;
        }
        loop {
            match self.submit_one(slot, books).await {
                Submitted::Yes | Submitted::Later => return,
                Submitted::Failed => {}
            }
            slot.retries = 0;
            if slot.iteration + 1 >= slot.run.iterations || self.stop.requested() {
                slot.phase = Phase::Done;
                return;
            }
            slot.iteration += 1;
        }
    }

    /// Submits the slot's iteration; a failure is recorded, unless it is transient and retries are left.
    pub(super) async fn submit_one(&self, slot: &mut Slot, books: &mut Books) -> Submitted {
        let run = slot.run.clone();
        let dir = self.layout.iteration_dir(&run.id, slot.iteration);
        info!("Starting test: {} (results at: {})", run.id, dir.display());
        let prepared = match self.system.prepare(&run, slot.iteration, &dir) {
            Ok(p) => p,
            Err(e) => {
                let _ = std::fs::create_dir_all(&dir);
                self.fail_submit(slot, books, &dir, &Prepared::default(), e.message);
                return Submitted::Failed;
            }
        };
        if let Err(e) = write_inputs(&run, slot.iteration, &dir, &prepared) {
            self.fail_submit(
                slot,
                books,
                &dir,
                &prepared,
                format!("cannot write {}: {e}", dir.display()),
            );
            return Submitted::Failed;
        }
        info!("Running test: {}", run.id);
        let submitted_at = Local::now();
        self.journal
            .submitted(&run, slot.iteration, &dir, &prepared, None, submitted_at);
        match self.system.submit(&run, &dir, &prepared).await {
            Ok(id) => {
                books.submissions += 1;
                slot.retries = 0;
                self.journal.submitted(
                    &run,
                    slot.iteration,
                    &dir,
                    &prepared,
                    Some(&id),
                    submitted_at,
                );
                slot.phase = Phase::Active(Box::new(Active {
                    id,
                    dir,
                    prepared,
                    submitted_at,
                    started: None,
                    kill: None,
                    kill_msg: None,
                    pending_since: Some(Instant::now()),
                    queue: Vec::new(),
                }));
                Submitted::Yes
            }
            Err(e) if e.kind == ErrorKind::Transient && slot.retries < SUBMIT_RETRIES => {
                slot.retries += 1;
                warn!(
                    "Cannot submit {} #{} for now ({e}); trying again in {:?} ({} of {SUBMIT_RETRIES})",
                    run.id, slot.iteration, self.interval, slot.retries
                );
                Submitted::Later
            }
            Err(e) => {
                self.fail_submit(slot, books, &dir, &prepared, e.message);
                Submitted::Failed
            }
        }
    }

    /// An iteration that could not be submitted: recorded as failed.
    pub(super) fn fail_submit(
        &self,
        slot: &mut Slot,
        books: &mut Books,
        dir: &Path,
        p: &Prepared,
        msg: String,
    ) {
        error!("Failed to submit test {}: {msg}", slot.run.id);
        let mut rec = self.journal.record(&slot.run, slot.iteration, dir, p);
        rec.end_reason = EndReason::SubmitFailed;
        rec.status = crate::results::Status::Failed;
        rec.message = msg;
        self.journal.save(&rec, dir);
        books.records.push(rec);
    }
}

/// An iteration's files before its job is submitted: test-run.toml and what `prepare` made.
pub fn write_inputs(
    run: &TestRun,
    iteration: u64,
    dir: &Path,
    p: &Prepared,
) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let toml = crate::scenario::dump::render(run, iteration, dir, &p.test_cmd, &p.full_cmd);
    write_atomic(&dir.join("test-run.toml"), toml.as_bytes())?;
    for (name, contents) in &p.files {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        write_atomic(&path, contents.as_bytes())?;
        // a script the job runs by its path (`#!` first) must be executable
        #[cfg(unix)]
        if contents.starts_with("#!") {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    Ok(())
}
