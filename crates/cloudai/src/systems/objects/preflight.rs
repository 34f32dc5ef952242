//! The pre-flight check on container schedulers (`[preflight]` of a Kubernetes or Run:ai system), as on Slurm:
//! before a GPU test's command, the check runs once on every node the test got — in the test's own image, so a
//! node that cannot pull or start it already failed — and a node where it fails, or that lists fewer lines (GPUs)
//! than `min_gpus`, stops the test before it spends GPU hours: `cloudai: pre-flight failed on: <node> (<why>)`,
//! exit 86, and the iteration ends `preflight_failed`.

use std::io::BufRead;
use std::path::Path;

use crate::config::system::Preflight;
use crate::util::shell::single_quote;

/// What the launcher or the pod prints first when the check failed on a node; the rest of the line names them.
pub const MARK: &str = "cloudai: pre-flight failed on:";
/// The exit status of a test stopped by its pre-flight check (as on Slurm).
pub const EXIT: u8 = 86;

/// The check on the one node a pod runs on, before `then` (a shell line).
pub fn here(pf: &Preflight, min_gpus: u64, then: &str) -> String {
    format!(
        "pf_out=$( {{ {cmd} ; }} 2>&1 ); pf_rc=$?; pf_gpus=$(printf '%s\\n' \"$pf_out\" | grep -c .); \
         if [ $pf_rc -ne 0 ]; then echo \"{MARK} $(hostname) (check exit status $pf_rc)\"; \
         printf '%s\\n' \"$pf_out\" | tail -n 20; exit {EXIT}; \
         elif [ $pf_gpus -lt {min_gpus} ]; then echo \"{MARK} $(hostname) ($pf_gpus of {min_gpus} GPUs)\"; \
         printf '%s\\n' \"$pf_out\" | tail -n 20; exit {EXIT}; fi\n{then}",
        cmd = pf.command,
    )
}

/// The check on every one of `nodes` workers through the launcher's `mpirun` (`mpirun_one_per_node`: the words of
/// an mpirun with one rank per node, the command left out), then `then`. Each worker prints its lines tagged with
/// its host name; the launcher judges them all and names every node that failed, or that never answered.
pub fn across(
    pf: &Preflight,
    min_gpus: u64,
    nodes: u64,
    mpirun_one_per_node: &str,
    then: &str,
) -> String {
    let inner = format!(
        "h=$(hostname); out=$( {{ {cmd} ; }} 2>&1 ); rc=$?; printf '%s\\n' \"$out\" | grep . | sed \"s|^|cloudai-pf $h line |\"; \
         echo \"cloudai-pf $h rc $rc\"",
        cmd = pf.command,
    );
    let judge = format!(
        "$1==\"cloudai-pf\"{{seen[$2]=1; if($3==\"line\")g[$2]++; if($3==\"rc\")r[$2]=$4}} \
         END{{c=0; for(x in seen){{c++; if(r[x]!=\"0\") printf \" %s (check exit status %s)\", x, r[x]; \
         else if(g[x]+0<{min_gpus}) printf \" %s (%d of {min_gpus} GPUs)\", x, g[x]}}; \
         if(c<{nodes}) printf \" %d of {nodes} nodes did not answer\", {nodes}-c}}"
    );
    format!(
        "pf_out=$({mpirun} /bin/bash -c {inner} 2>&1); pf_bad=$(printf '%s\\n' \"$pf_out\" | awk {judge}); \
         if [ -n \"$pf_bad\" ]; then echo \"{MARK}$pf_bad\"; printf '%s\\n' \"$pf_out\" | grep -v '^cloudai-pf ' | \
         tail -n 20; exit {EXIT}; fi; {then}",
        mpirun = mpirun_one_per_node,
        inner = single_quote(&inner),
        judge = single_quote(&judge),
    )
}

/// The pre-flight failure a step's output reports (its first line from [`MARK`]), if any.
pub(crate) fn failure_in(stdout: &Path) -> Option<String> {
    let f = std::fs::File::open(stdout).ok()?;
    std::io::BufReader::new(f)
        .lines()
        .map_while(Result::ok)
        .find(|l| l.starts_with(MARK))
        .map(|l| l.trim_start_matches("cloudai: ").to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn pf(cmd: &str) -> Preflight {
        Preflight {
            command: cmd.into(),
            min_gpus: None,
        }
    }

    fn sh(script: &str) -> (i32, String) {
        let out = Command::new("bash").arg("-c").arg(script).output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    #[test]
    fn on_one_node_a_short_gpu_list_or_a_failed_check_stops_the_test() {
        let (rc, out) = sh(&here(&pf("printf 'GPU 0\\nGPU 1\\n'"), 2, "echo ran"));
        assert_eq!((rc, out.trim()), (0, "ran"));
        let (rc, out) = sh(&here(&pf("printf 'GPU 0\\n'"), 2, "echo ran"));
        assert_eq!(rc, i32::from(EXIT));
        assert!(
            out.starts_with(MARK) && out.contains("(1 of 2 GPUs)"),
            "{out}"
        );
        assert!(!out.contains("ran"));
        let (rc, out) = sh(&here(&pf("echo broken; exit 3"), 0, "echo ran"));
        assert_eq!(rc, i32::from(EXIT));
        assert!(
            out.contains("(check exit status 3)") && out.contains("broken"),
            "{out}"
        );
    }

    #[test]
    fn across_nodes_every_bad_node_and_every_silent_one_is_named() {
        // a stand-in mpirun: two "nodes" (A, B) run the check, as mpirun runs one rank per node
        let fake = "fake_mpirun() { for h in A B; do HOSTNAME_OVERRIDE=$h \"$@\"; done; }; hostname() { echo $HOSTNAME_OVERRIDE; }; export -f hostname;";
        let check = "if [ $(hostname) = B ]; then echo 'GPU 0'; else printf 'GPU 0\\nGPU 1\\n'; fi";
        let s = format!(
            "{fake} {}",
            across(&pf(check), 2, 2, "fake_mpirun", "echo ran")
        );
        let (rc, out) = sh(&s);
        assert_eq!(rc, i32::from(EXIT), "{out}\n{s}");
        assert!(
            out.starts_with(&format!("{MARK} B (1 of 2 GPUs)")),
            "{out}\n{s}"
        );
        let s = format!(
            "{fake} {}",
            across(&pf("printf 'a\\nb\\n'"), 2, 3, "fake_mpirun", "echo ran")
        );
        let (rc, out) = sh(&s);
        assert_eq!(rc, i32::from(EXIT));
        assert!(out.contains("1 of 3 nodes did not answer"), "{out}");
        let s = format!(
            "{fake} {}",
            across(&pf("printf 'a\\nb\\n'"), 2, 2, "fake_mpirun", "echo ran")
        );
        assert_eq!(sh(&s), (0, "ran\n".to_string()));
    }

    #[test]
    fn the_failure_is_read_back_from_the_output() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("stdout.txt");
        std::fs::write(&p, format!("x\n{MARK} B (1 of 2 GPUs)\nmore\n")).unwrap();
        assert_eq!(
            failure_in(&p).as_deref(),
            Some("pre-flight failed on: B (1 of 2 GPUs)")
        );
        std::fs::write(&p, "fine\n").unwrap();
        assert!(failure_in(&p).is_none());
    }
}
