//! The ssh contract of MPI launchers and workers on container schedulers (Kubernetes MPIJobs, Run:ai distributed
//! workloads), kept by cloudai rather than left to the image, as the MPI operator documents it: the workers' sshd
//! gets host keys when the image has none, its privilege-separation directory, `StrictModes no` (the operator's
//! keys are mounted group-readable) and the chosen port; the launcher connects to that port without a known-hosts
//! file; and it waits for each worker's own sshd (its banner carries the job's identity), never for whatever
//! answers on the port (the node's own sshd, with host networking).

use crate::util::shell::quote;

/// Options of every ssh the launcher's mpirun starts: the workers' port, no host-key prompt nor known-hosts file
/// (each worker's keys are new), the operator's connection retries, no "Permanently added" noise in the log.
pub(crate) fn rsh_args(port: u64) -> String {
    format!(
        "-p {port} -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o ConnectionAttempts=10 \
         -o LogLevel=ERROR"
    )
}

/// The launcher's `mpirun` over the operator's host file: `ranks` ranks, `per_node` on each worker, `env` forwarded,
/// its ssh on the workers' `port` with [`rsh_args`] (replacing the operator's `OMPI_MCA_plm_rsh_args`, whose
/// ConnectionAttempts it keeps); `cmd` last (empty: the caller appends the program).
pub fn mpirun(
    ranks: u64,
    per_node: u64,
    env: &[(String, String)],
    cmd: &str,
    port: u64,
) -> Vec<String> {
    let mut args = crate::workloads::launch::mpirun(
        ranks,
        per_node,
        Some(crate::workloads::launch::MPI_HOSTFILE),
        env,
        cmd,
    );
    args.splice(
        2..2,
        [
            "--mca".to_string(),
            "plm_rsh_args".into(),
            format!("\"{}\"", rsh_args(port)),
        ],
    );
    args
}

/// The word sshd puts in its banner for this job (`SSH-2.0-OpenSSH_9.6 cloudai-<identity>`).
pub(crate) fn banner_tag(identity: &str) -> String {
    format!("cloudai-{identity}")
}

/// What a worker runs: for an sshd command (`/usr/sbin/sshd -De`, the default), a script that names a missing
/// sshd (in the container's termination message too), makes `/run/sshd` and absent host keys, and execs sshd in
/// the foreground on `port` with `StrictModes no` and the job's banner tag; any other command as written; None
/// (the image's entrypoint) for an empty one.
pub(crate) fn worker_command(
    configured: &str,
    port: u64,
    image: &str,
    identity: &str,
) -> Option<Vec<String>> {
    let mut words = configured.split_whitespace();
    let first = words.next()?;
    let rest: Vec<&str> = words.collect();
    if !(first.ends_with("/sshd") || first == "sshd") {
        return Some(configured.split_whitespace().map(str::to_string).collect());
    }
    let mut flags: Vec<String> = rest.iter().map(|s| s.to_string()).collect();
    if !flags.iter().any(|f| f == "-D" || f.starts_with("-D")) {
        flags.push("-D".into());
    }
    if !flags.iter().any(|f| f == "-p") {
        flags.extend(["-p".into(), port.to_string()]);
    }
    flags.extend([
        "-o".into(),
        "StrictModes=no".into(),
        "-o".into(),
        format!("VersionAddendum={}", banner_tag(identity)),
    ]);
    let missing = format!(
        "cloudai: the image {image} has no sshd ({first}, nor sshd on PATH): MPI workers need an SSH server \
         (install openssh-server in the image, or set mpi_worker_command to what starts one)"
    );
    let script = format!(
        "S={first}; [ -x \"$S\" ] || S=$(command -v sshd) || {{ echo {msg} | tee /dev/termination-log >&2; \
         exit 127; }}; mkdir -p /run/sshd && chmod 0755 /run/sshd; \
         ls /etc/ssh/ssh_host_*_key >/dev/null 2>&1 || ssh-keygen -A >/dev/null; exec \"$S\" {flags}",
        first = quote(first),
        msg = quote(&missing),
        flags = flags.iter().map(|f| quote(f)).collect::<Vec<_>>().join(" "),
    );
    Some(vec!["/bin/bash".into(), "-c".into(), script])
}

/// Whether the worker command is ours (an sshd we start, with the job's banner tag).
pub fn tagged(configured: &str) -> bool {
    configured
        .split_whitespace()
        .next()
        .is_some_and(|c| c.ends_with("/sshd") || c == "sshd")
}

/// The launcher's wait: bounded by `wait` seconds, until every host of `hostfile` answers on `port` with an SSH
/// banner — carrying `tag` when the workers run our sshd —, naming the worker and the image when one does not.
pub(crate) fn wait_for_workers(
    hostfile: &str,
    port: u64,
    wait: u64,
    image: &str,
    tag: Option<&str>,
) -> String {
    let want = match tag {
        Some(t) => format!("SSH-*{t}*"),
        None => "SSH-*".into(),
    };
    let whose = if tag.is_some() {
        "its own sshd"
    } else {
        "an SSH server"
    };
    format!(
        "deadline=$((SECONDS + {wait})); for h in $(cut -d' ' -f1 {hostfile}); do \
         until (exec 3<>/dev/tcp/$h/{port} && read -r -t 5 b <&3 && [[ \"$b\" == {want} ]]) 2>/dev/null; do \
         if [ $SECONDS -ge $deadline ]; then echo \"cloudai: MPI worker $h did not answer with {whose} on port \
         {port} within {wait} s: the image {image} must run an SSH server in every worker (MPIJob workers need \
         sshd; see mpi_worker_command)\" >&2; exit 1; fi; sleep 2; done; done"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_sshd_worker_gets_keys_its_directory_its_port_and_the_banner_tag() {
        let argv = worker_command("/usr/sbin/sshd -De", 2222, "img:1", "abc").unwrap();
        assert_eq!(argv[..2], ["/bin/bash", "-c"]);
        let s = &argv[2];
        for part in [
            "S=/usr/sbin/sshd;",
            "S=$(command -v sshd)",
            "tee /dev/termination-log",
            "mkdir -p /run/sshd",
            "ssh-keygen -A",
            "exec \"$S\" -De -p 2222 -o StrictModes=no -o VersionAddendum=cloudai-abc",
            "the image img:1 has no sshd",
        ] {
            assert!(s.contains(part), "{part} not in {s}");
        }
        // a port given by the operator is kept
        let argv = worker_command("/usr/sbin/sshd -D -p 2200", 2222, "i", "x").unwrap();
        assert!(
            argv[2].contains("exec \"$S\" -D -p 2200 -o StrictModes=no"),
            "{}",
            argv[2]
        );
        assert_eq!(
            worker_command("/opt/start.sh --port 22", 22, "i", "x").unwrap(),
            ["/opt/start.sh", "--port", "22"]
        );
        assert!(worker_command("", 22, "i", "x").is_none());
        assert!(tagged("/usr/sbin/sshd -De") && !tagged("/opt/start.sh"));
    }

    #[test]
    fn the_launcher_connects_without_known_hosts_and_waits_for_its_own_workers() {
        assert_eq!(
            rsh_args(2222),
            "-p 2222 -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o ConnectionAttempts=10 -o \
             LogLevel=ERROR"
        );
        let w = wait_for_workers("/etc/mpi/hostfile", 2222, 60, "img", Some("cloudai-abc"));
        assert!(w.contains(
            "exec 3<>/dev/tcp/$h/2222 && read -r -t 5 b <&3 && [[ \"$b\" == SSH-*cloudai-abc* ]]"
        ));
        assert!(w.contains("within 60 s"));
        let any = wait_for_workers("/etc/mpi/hostfile", 22, 60, "img", None);
        assert!(any.contains("== SSH-* ]]"));
    }
}
