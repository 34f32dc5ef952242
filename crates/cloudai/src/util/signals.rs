//! Every signal that ends a run — Ctrl-C (SIGINT), SIGTERM, SIGHUP (the ssh session closed: the most common way a
//! login-node run dies) and SIGQUIT — is counted process-wide from [`install`] to the process's end, whatever the
//! code is doing at that moment (waiting for jobs, writing reports, between sweep steps, cancelling). The first
//! one asks for an orderly stop (cancel everything we started); a second one stops waiting for cancellations (what
//! is unconfirmed is named as a leftover). Commands that start no jobs do not install the handlers, so the signals
//! keep their default effect there.

use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// The signals that end a run.
pub(crate) const ENDING: [i32; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

static COUNT: AtomicU32 = AtomicU32::new(0);
static LAST: AtomicI32 = AtomicI32::new(0);
static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();

/// Counts every ending signal from now on (idempotent; the handlers stay for the process's life).
pub fn install() -> Result<(), String> {
    INSTALLED
        .get_or_init(|| {
            for sig in ENDING {
                // SAFETY: the action only touches atomics (async-signal-safe)
                let r = unsafe {
                    signal_hook_registry::register(sig, move || {
                        LAST.store(sig, Ordering::SeqCst);
                        COUNT.fetch_add(1, Ordering::SeqCst);
                    })
                };
                r.map_err(|e| format!("cannot install a handler for {}: {e}", name(sig)))?;
            }
            Ok(())
        })
        .clone()
}

/// How many ending signals arrived so far.
pub fn count() -> u32 {
    COUNT.load(Ordering::SeqCst)
}

/// Whether an ending signal arrived.
pub fn interrupted() -> bool {
    count() > 0
}

/// The name of the last ending signal (`SIGINT`, …), for messages.
pub fn last() -> &'static str {
    name(LAST.load(Ordering::SeqCst))
}

pub fn name(sig: i32) -> &'static str {
    match sig {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        libc::SIGQUIT => "SIGQUIT",
        _ => "a signal",
    }
}

/// Resolves once more than `seen` ending signals arrived (checked every 20 ms: the handlers only count).
pub async fn after(seen: u32) {
    while count() <= seen {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Where an engine learns that it must stop: the process's ending signals, plus its own requests (a test's, or
/// a caller stopping one engine without signalling the process). Clones share the requests.
#[derive(Clone, Debug, Default)]
pub(crate) struct Stop(std::sync::Arc<AtomicU32>);

impl Stop {
    /// Counts as one more ending signal, for this engine only (the engine's tests stop it so).
    #[cfg(test)]
    pub fn request(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }

    /// Ending signals and requests so far.
    pub fn count(&self) -> u32 {
        count() + self.0.load(Ordering::SeqCst)
    }

    pub fn requested(&self) -> bool {
        self.count() > 0
    }

    /// Resolves once more than `seen` signals or requests arrived.
    pub async fn after(&self, seen: u32) {
        while self.count() <= seen {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
