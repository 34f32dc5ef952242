//! The one status line shown while a scenario waits on its jobs: iterations done of all, how many are pending and
//! running, the time since the start, the running job closest to its time limit and the job that has waited longest
//! in the queue, so a user watching a long scenario sees that it is alive and what it waits for.

use super::{Phase, Slot};

/// Shows the status line for the current slots (redrawn on a terminal, a line per change otherwise).
pub(super) fn show(slots: &[Slot], began: tokio::time::Instant) {
    let (mut waiting, mut pending, mut running, mut done) = (0, 0, 0, 0);
    let total: u64 = slots.iter().map(|s| s.run.iterations.max(1)).sum();
    let mut longest: Option<(std::time::Duration, String)> = None;
    // the running job with the least time left before its limit
    let mut closest: Option<(u64, String)> = None;
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
                _ => {
                    running += 1;
                    if let (Some((_, at)), Some(limit)) = (a.started, s.run.effective_time_limit())
                    {
                        let left = limit.saturating_sub(at.elapsed().as_secs());
                        if closest.as_ref().is_none_or(|(l, _)| left < *l) {
                            closest = Some((left, format!("job {} ({})", a.id, s.run.id)));
                        }
                    }
                }
            },
        }
    }
    let mut key = format!("{done}/{total} done, {pending} pending, {running} running");
    if waiting > 0 {
        key.push_str(&format!(", {waiting} waiting for dependencies"));
    }
    // most important first: a terminal's width cuts the line from its end
    let mut text = key.clone();
    if let Some((left, what)) = &closest {
        key.push_str(&format!("; closest to its time limit: {what}"));
        text.push_str(&format!(
            "; closest to its time limit: {what}, {} left",
            crate::config::time_limit::format(*left)
        ));
    }
    text.push_str(&format!(
        "; {} elapsed",
        crate::config::time_limit::format(began.elapsed().as_secs())
    ));
    if let Some((waited, what)) = longest {
        key.push_str(&format!("; longest pending: {what}"));
        text.push_str(&format!(
            "; longest pending: {what} for {}",
            crate::config::time_limit::format(waited.as_secs())
        ));
    }
    crate::log::status(&format!("Status: {text}"), &key);
}
