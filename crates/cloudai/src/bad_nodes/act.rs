//! Acting on the verdict, on request: drain bad nodes on Slurm, cordon and taint (or label) them on Kubernetes.
//! Only nodes judged `bad` are touched; each change is recorded with the command that undoes it; nothing is done
//! when more than the allowed fraction of the checked nodes would be taken out (a broken test must not drain a
//! cluster).

pub use crate::systems::fleet::{label_value, Action, Wanted, TAINT_KEY};

/// Why acting is refused: too many nodes would be taken out.
pub fn refusal(bad: usize, checked: usize, max_fraction: f64) -> Option<String> {
    let fraction = bad as f64 / checked.max(1) as f64;
    (fraction > max_fraction).then(|| {
        format!(
            "{bad} of {checked} checked nodes judged bad ({:.0}%), more than --max-act-fraction {:.0}%: nothing \
             changed (a broken test or fabric must not take a cluster out of service); check the evidence, then act \
             by hand or raise the fraction",
            fraction * 100.0,
            max_fraction * 100.0
        )
    })
}
