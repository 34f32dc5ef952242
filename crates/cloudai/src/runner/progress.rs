//! The one status line shown while a scenario waits on its jobs: how many are pending, running and done, and
//! which job has waited longest in the queue, so a user watching a long scenario sees that it is alive.

use super::{Phase, Slot};

/// Shows the status line for the current slots (redrawn on a terminal, a line per change otherwise).
pub(super) fn show(slots: &[Slot]) {
    let (mut waiting, mut pending, mut running, mut done) = (0, 0, 0, 0);
    let mut longest: Option<(std::time::Duration, String)> = None;
    for s in slots {
        // iterations that ended: those before the current one, and the current one once the test is done
        done += s.iteration as usize + usize::from(matches!(s.phase, Phase::Done));
        match &s.phase {
            Phase::Waiting => waiting += 1,
            Phase::Done => {}
            Phase::Active(a) => match a.pending_since {
                Some(since) if a.kill.is_none() => {
                    pending += 1;
                    let waited = since.elapsed();
                    if longest.as_ref().is_none_or(|(w, _)| waited > *w) {
                        let reason = a
                            .queue
                            .last()
                            .map(|q| q.reason.as_str())
                            .filter(|r| !r.is_empty() && *r != "None")
                            .unwrap_or("waiting");
                        longest = Some((waited, format!("job {} ({}) {reason}", a.id, s.run.id)));
                    }
                }
                _ => running += 1,
            },
        }
    }
    let mut key = format!("{pending} pending, {running} running, {done} done");
    if waiting > 0 {
        key.push_str(&format!(", {waiting} waiting for dependencies"));
    }
    let mut text = key.clone();
    if let Some((waited, what)) = longest {
        key.push_str(&format!("; longest pending: {what}"));
        text.push_str(&format!(
            "; longest pending: {what} for {}",
            crate::config::time_limit::format(waited.as_secs())
        ));
    }
    crate::log::status(&format!("Status: {text}"), &key);
}
