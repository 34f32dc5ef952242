//! Object names that Kubernetes accepts (DNS labels), unique per results tree and the same again when `resume`
//! plans them: a readable part cut to fit, then a hash of the step's identity.

/// Run:ai names become Kubernetes object names: lower-case alphanumerics and '-', at most 63 characters.
pub(crate) fn k8s_name(parts: &[&str]) -> String {
    let raw = parts.join("-").to_ascii_lowercase();
    let mut s: String = raw
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    while s.contains("--") {
        s = s.replace("--", "-");
    }
    let s = s.trim_matches('-');
    let mut s: String = s.chars().take(63).collect();
    while s.ends_with('-') {
        s.pop();
    }
    if s.is_empty() {
        "cloudai".into()
    } else {
        s
    }
}

/// A stable 40-bit hash in hex (FNV-1a), the unique part of a workload name.
pub(crate) fn short_hash(s: &str) -> String {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in s.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x100000001b3);
    }
    format!("{:010x}", h >> 24)
}

/// A workload name that stays unique however long the test id: the readable part is cut so that `-<hash of
/// identity>` always fits in 63 characters.
pub(crate) fn unique_name(readable: &[&str], identity: &str) -> String {
    unique_name_within(readable, identity, 63, false)
}

/// As [`unique_name`], at most `max` characters, starting with a letter when `letter_first`.
fn unique_name_within(readable: &[&str], identity: &str, max: usize, letter_first: bool) -> String {
    let hash = short_hash(identity);
    let mut head = k8s_name(readable);
    if letter_first && head.starts_with(|c: char| c.is_ascii_digit()) {
        head.insert(0, 't');
    }
    head.truncate(max - 1 - hash.len());
    // k8s_name never returns an empty name ("cloudai" stands in)
    format!("{}-{hash}", head.trim_end_matches('-'))
}

/// The name of an MPI job of `workers` workers: the MPI operator names its pods `<name>-worker-<i>` and
/// `<name>-launcher`, which must be DNS-1035 labels (at most 63 characters, a letter first), or it refuses the
/// job with no more than a warning event. So the name leaves room for the longest suffix (at most
/// [`MPI_NAME_MAX`] characters) and starts with a letter.
pub(crate) fn mpi_job_name(readable: &[&str], identity: &str, workers: u64) -> String {
    let worker = "-worker-".len() + workers.saturating_sub(1).to_string().len();
    let room = 63 - worker.max("-launcher".len());
    unique_name_within(readable, identity, room.min(MPI_NAME_MAX), true)
}

/// The name of a workload's own object (AI Dynamo's DynamoGraphDeployment): its operator names Services and pods
/// after it and the service (`<name>-frontend`, `<name>-decode-<i>-…`), which must be DNS-1035 labels; so at most
/// [`OBJECT_NAME_MAX`] characters, a letter first.
pub(crate) fn object_name(readable: &[&str], identity: &str) -> String {
    unique_name_within(readable, identity, OBJECT_NAME_MAX, true)
}

/// The longest name of a workload's own object: room for its operator's suffixes.
pub(crate) const OBJECT_NAME_MAX: usize = 40;

/// The longest MPI job name: room for `-worker-<i>` up to 100 workers whatever the count, so a name never changes
/// length with the number of nodes.
pub(crate) const MPI_NAME_MAX: usize = 53;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(
            k8s_name(&["Tests.all_reduce", "0", "a1b2c3"]),
            "tests-all-reduce-0-a1b2c3"
        );
        assert_eq!(k8s_name(&["__"]), "cloudai");
        assert!(k8s_name(&[&"x".repeat(100)]).len() <= 63);
        // the unique part survives any length, and differs per identity
        let long = "t".repeat(80);
        let a = unique_name(&[&long], "run|t|0");
        let b = unique_name(&[&long], "run|t|1");
        assert!(a.len() <= 63 && b.len() <= 63, "{a}");
        assert_ne!(a, b);
        assert!(a.starts_with("tttt") && a.ends_with(&short_hash("run|t|0")));
        assert_eq!(
            unique_name(&["__"], "x"),
            format!("cloudai-{}", short_hash("x"))
        );
        // MPI jobs: room for the operator's pod suffixes, a letter first
        for workers in [2, 10, 128, 1000] {
            let n = mpi_job_name(&[&long], "run|t|0", workers);
            assert!(
                n.len() + format!("-worker-{}", workers - 1).len() <= 63,
                "{n}"
            );
            assert!(n.len() + "-launcher".len() <= 63, "{n}");
            assert!(n.len() <= MPI_NAME_MAX, "{n}");
        }
        assert!(mpi_job_name(&["8node"], "x", 2).starts_with("t8node-"));
        let n = object_name(&[&long], "run|t|0");
        assert!(
            n.len() <= OBJECT_NAME_MAX && n.ends_with(&short_hash("run|t|0")),
            "{n}"
        );
        assert!(object_name(&["1x"], "x").starts_with("t1x-"));
    }
}
