//! File descriptors: each running job holds some (Standalone: a process handle; the others: connections), so a
//! scenario of hundreds of tests must not start more than the process may open. The soft limit is raised to the
//! hard one at start; the engine then starts a job only while some descriptors are left, and queues the rest.

/// Descriptors kept free for what a job's start needs (its output files, a pipe, a connection) and for the
/// engine's own files (records, the journal, reports).
pub(crate) const RESERVE: u64 = 48;

/// The limits on open files (soft, hard).
fn rlimit() -> Option<libc::rlimit> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct given
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0).then_some(lim)
}

/// Raises the soft limit on open files to the hard one: (before, after).
pub(crate) fn raise_limit() -> Option<(u64, u64)> {
    let mut lim = rlimit()?;
    let before = lim.rlim_cur;
    if lim.rlim_cur < lim.rlim_max {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: setrlimit only reads the struct given
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
            return Some((before, before));
        }
    }
    Some((before, lim.rlim_cur))
}

/// The soft limit on open files.
pub fn limit() -> Option<u64> {
    rlimit().map(|l| l.rlim_cur)
}

/// Descriptors open now (the entries of /proc/self/fd).
pub(crate) fn open_count() -> Option<u64> {
    std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|d| d.count() as u64)
}

/// Whether another job may start: more than [`RESERVE`] descriptors are left, or no more are open than `base`
/// (what was open before any job: waiting would free nothing); true when either number is unknown.
pub(crate) fn room_for_a_job(base: u64) -> bool {
    match (open_count(), limit()) {
        (Some(open), Some(limit)) => open + RESERVE < limit || open <= base + 2,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_limit_is_raised_to_the_hard_one_and_room_is_counted() {
        let (before, after) = super::raise_limit().unwrap();
        assert!(after >= before);
        assert_eq!(super::limit(), Some(after));
        assert!(super::open_count().unwrap() >= 3);
        assert!(super::room_for_a_job(0) || super::room_for_a_job(u64::MAX));
    }
}
