//! Quarantine for a system: its scheduler's side (`fleet::Fleet::quarantine`) and the ledger's state, opened
//! together; what find-bad-nodes' `--drain` / `--cordon` / `--requalify` and `cloudai quarantine` call.

use crate::config::system::SystemConfig;
use crate::ledger::quarantine::LedgerStore;
use crate::ledger::{self, Ledger, Location};
use crate::quarantine::{Outcome, Quarantine, Record};

/// Runs `f` over the system's quarantine (the ledger opened off the runtime, the scheduler's commands blocking),
/// after finishing what an earlier cloudai left undone; says what was finished.
pub fn with<T: Send>(
    sys: &SystemConfig,
    dry_run: bool,
    f: impl FnOnce(&mut Quarantine) -> Result<T, crate::quarantine::QuarantineError> + Send,
) -> Result<T, String> {
    let (v, finished) = with_report(sys, dry_run, f)?;
    Outcome::say_finished(&finished);
    Ok(v)
}

/// As [`with`], returning what was finished instead of saying it (for `--json`).
pub(crate) fn with_report<T: Send>(
    sys: &SystemConfig,
    dry_run: bool,
    f: impl FnOnce(&mut Quarantine) -> Result<T, crate::quarantine::QuarantineError> + Send,
) -> Result<(T, Vec<Outcome>), String> {
    let at = ledger::location();
    if at == Location::Off {
        return Err("quarantine state lives in the ledger, which is off (--no-ledger)".into());
    }
    let name = sys.name.clone();
    let mut sched = crate::systems::fleet_of(sys).quarantine()?;
    ledger::off_runtime(move || {
        let mut l = Ledger::open(&at).map_err(|e| format!("cannot open the ledger: {e}"))?;
        let mut store = LedgerStore {
            ledger: &mut l,
            system: name,
        };
        let mut q = Quarantine {
            sched: sched.as_mut(),
            store: &mut store,
            dry_run,
        };
        let mut done = q.reconcile()?;
        done.extend(q.refresh()?);
        Ok((f(&mut q)?, done))
    })
}

/// The nodes held out of service now.
pub fn held(sys: &SystemConfig) -> Result<Vec<Record>, String> {
    // (not a dry run: records of nodes no longer ours are brought up to date; nothing is done to any node)
    with(sys, false, |q| {
        Ok(q.store
            .records()?
            .into_iter()
            .filter(|r| r.state.is_out())
            .collect())
    })
}

/// How to undo a quarantine by hand: this binary's `quarantine release`.
pub(crate) fn undo_command(sys: &SystemConfig, node: &str) -> String {
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "cloudai".into());
    let mut c = format!(
        "{} quarantine release {node} --system-config {}",
        crate::util::shell::single_quote(&exe),
        crate::util::shell::single_quote(
            &std::path::absolute(&sys.file)
                .unwrap_or(sys.file.clone())
                .display()
                .to_string()
        )
    );
    match ledger::location() {
        Location::Sqlite(p) if p != ledger::default_path() => c.push_str(&format!(
            " --ledger {}",
            crate::util::shell::single_quote(&p.display().to_string())
        )),
        // the URL without its password: give it in PGPASSWORD
        Location::Postgres(_) => c.push_str(&format!(
            " --ledger {}",
            crate::util::shell::single_quote(&ledger::location().display())
        )),
        _ => {}
    }
    c
}

/// Outcomes as find-bad-nodes reports its actions.
/// `verb`: `drain`, `cordon`.
pub(crate) fn as_actions(
    sys: &SystemConfig,
    verb: &'static str,
    outs: Vec<Outcome>,
) -> Vec<crate::systems::fleet::Action> {
    outs.into_iter()
        .map(|o| crate::systems::fleet::Action {
            undo: if o.what == "quarantined" {
                undo_command(sys, &o.node)
            } else {
                String::new()
            },
            ok: o.what == "quarantined" || o.what == "already held",
            error: if o.what == "quarantined" {
                String::new()
            } else {
                format!("{}: {}", o.what, o.detail)
            },
            node: o.node,
            action: verb,
            command: o.command,
        })
        .collect()
}
