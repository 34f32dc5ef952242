//! What a job leaves outside its process group (`setsid cmd &`, a daemon it starts): killing the group misses it, and
//! it would outlive the run. cloudai becomes a child subreaper when it starts local jobs, so such processes become
//! its own children once their parent ends; the run reaps those that exit and ends the rest when it ends. Only
//! descendants of what cloudai started can be reparented to it: nothing else is touched.

use std::collections::HashSet;

/// Makes this process the subreaper of its descendants (once).
pub(crate) fn become_subreaper() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: prctl with PR_SET_CHILD_SUBREAPER only sets a flag of this process
        unsafe {
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        }
    });
}

/// A child of this process that is none of `known` (the job wrappers, which their own waiters reap).
struct Stray {
    pid: i32,
    pgid: i32,
    exited: bool,
}

/// This process's children: each thread's `/proc/self/task/<tid>/children` (a few small reads), else, on a kernel
/// without those files, every process of `/proc` (whose parent is checked below).
fn children() -> Vec<i32> {
    let from_tasks: Option<Vec<i32>> =
        std::fs::read_dir("/proc/self/task").ok().and_then(|tasks| {
            let mut pids = Vec::new();
            for t in tasks.flatten() {
                let text = std::fs::read_to_string(t.path().join("children")).ok()?;
                pids.extend(
                    text.split_whitespace()
                        .filter_map(|p| p.parse::<i32>().ok()),
                );
            }
            Some(pids)
        });
    from_tasks.unwrap_or_else(|| {
        std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .collect()
    })
}

fn strays(known: &HashSet<i32>) -> Vec<Stray> {
    let me = std::process::id() as i32;
    children()
        .into_iter()
        .filter(|pid| !known.contains(pid))
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // `pid (comm) state ppid pgrp …`: comm may hold blanks and parentheses, so read after the last `)`
            let rest = &stat[stat.rfind(')')? + 1..];
            let mut f = rest.split_whitespace();
            let state = f.next()?;
            let ppid: i32 = f.next()?.parse().ok()?;
            let pgid: i32 = f.next()?.parse().ok()?;
            (ppid == me).then_some(Stray {
                pid,
                pgid,
                exited: state == "Z",
            })
        })
        .collect()
}

fn reap_one(pid: i32) {
    let mut status = 0;
    // SAFETY: waitpid on one child of ours that is not a job wrapper (those are waited for elsewhere)
    unsafe {
        libc::waitpid(pid, &mut status, libc::WNOHANG);
    }
}

/// Reaps the strays that have exited (no zombie is left behind by a long run).
pub(crate) fn reap(known: &HashSet<i32>) {
    for s in strays(known).into_iter().filter(|s| s.exited) {
        reap_one(s.pid);
    }
}

/// Ends every stray (and the process group it leads, if any) and reaps it: the run is over.
pub(crate) fn end_all(known: &HashSet<i32>) {
    let all = strays(known);
    for s in &all {
        // SAFETY: signals to processes that only our own jobs can have left us (see the module's doc)
        unsafe {
            if s.pgid == s.pid {
                libc::killpg(s.pgid, libc::SIGKILL);
            }
            libc::kill(s.pid, libc::SIGKILL);
        }
    }
    for s in &all {
        for _ in 0..50 {
            let mut status = 0;
            // SAFETY: as in reap_one
            let r = unsafe { libc::waitpid(s.pid, &mut status, libc::WNOHANG) };
            if r != 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}
