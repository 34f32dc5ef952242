//! Bounds and consistency checked when a scenario is resolved, before any results directory exists: counts
//! that would exhaust memory or the scheduler, node specs the system cannot meet, time limits that are probably
//! typos. Errors stop the run; warnings are printed and the run goes on.

use crate::config::args::ArgValue;
use crate::config::scenario::TestEntry;
use crate::config::system::{GroupSpec, SystemConfig};
use crate::config::test::TestDefinition;
use crate::config::{ConfigError, ConfigErrors};
use crate::util::nodelist;

/// Iterations of one test.
pub(crate) const MAX_ITERATIONS: u64 = 10_000;
/// Steps of one design-space sweep (the product of its list lengths).
pub(crate) const MAX_DSE_STEPS: u64 = 10_000;

fn err(entry: &TestEntry, field: &str, msg: String, hint: &str) -> ConfigError {
    ConfigError::new(
        entry.loc.clone(),
        format!("Tests.{}{field}", entry.index),
        msg,
    )
    .with_hint(hint)
}

fn warn_at(entry: &TestEntry, field: &str, msg: String) {
    let mut e = ConfigError::new(
        entry.loc.clone(),
        format!("Tests.{}{field}", entry.index),
        msg,
    );
    e.warning = true;
    crate::warn!("{e}");
}

/// Errors of one resolved entry; warnings are printed here.
pub fn check(
    entry: &TestEntry,
    def: &TestDefinition,
    system: Option<&SystemConfig>,
    errors: &mut ConfigErrors,
) {
    if entry.iterations > MAX_ITERATIONS {
        errors.push(err(
            entry,
            ".iterations",
            format!(
                "{} iterations is more than the limit of {MAX_ITERATIONS}",
                entry.iterations
            ),
            "split the campaign into several scenarios",
        ));
    }
    let steps = def
        .cmd_args
        .values
        .values()
        .chain(def.extra_env_vars.values())
        .map(|v| match v {
            ArgValue::List(l) => l.len().max(1) as u64,
            _ => 1,
        })
        .chain(std::iter::once(entry.num_nodes.len().max(1) as u64))
        .fold(1u64, |a, n| a.saturating_mul(n));
    if steps > MAX_DSE_STEPS {
        errors.push(err(
            entry,
            "",
            format!(
                "the sweep of test '{}' has {steps} steps, more than the limit of {MAX_DSE_STEPS}",
                entry.id
            ),
            "shorten the lists in cmd_args / extra_env_vars / num_nodes",
        ));
    }
    if let Some(t) = &entry.time_limit_text {
        let fields: Vec<&str> = t.rsplit('-').next().unwrap_or("").split(':').collect();
        if fields.len() >= 2
            && fields[1..]
                .iter()
                .any(|f| f.parse::<u64>().is_ok_and(|n| n >= 60))
        {
            let secs = entry.time_limit.unwrap_or(0);
            warn_at(
                entry,
                ".time_limit",
                format!(
                    "{t:?} has minutes or seconds of 60 or more; read as {} (write it that way to silence this)",
                    crate::config::time_limit::format(secs)
                ),
            );
        }
    }
    let mut listed = 0u64;
    let mut known = true;
    for (i, spec) in entry.nodes.iter().enumerate() {
        let field = format!(".nodes.{i}");
        let parts: Vec<&str> = spec.split(':').collect();
        if let [part, group, count] = parts.as_slice() {
            let Ok(n) = count.parse::<u64>() else {
                errors.push(err(
                    entry,
                    &field,
                    format!("{spec:?}: the count {count:?} is not a number"),
                    "write partition:group:count, like \"batch:rack1:4\"",
                ));
                continue;
            };
            listed += n;
            match system.map_or(GroupSpec::Fits, |s| s.kind.group_spec(spec, part, group, n)) {
                GroupSpec::Fits => {}
                GroupSpec::Unknown => known = false,
                GroupSpec::Problem { msg, hint } => errors.push(err(entry, &field, msg, &hint)),
            }
        } else {
            match nodelist::expand(spec) {
                Some(v) if !v.is_empty() => listed += v.len() as u64,
                _ => errors.push(err(
                    entry,
                    &field,
                    format!("{spec:?} is not a node list (ranges go low to high, like node[001-004])"),
                    "write host names, Slurm ranges like \"node[001-004,007]\" or partition:group:count",
                )),
            }
        }
    }
    if !entry.nodes.is_empty()
        && entry.num_nodes_set
        && known
        && entry.num_nodes.first() != Some(&listed)
    {
        warn_at(
            entry,
            ".num_nodes",
            format!(
                "num_nodes = {} is ignored: nodes names {listed} node(s), which is what runs",
                entry.num_nodes.first().copied().unwrap_or(1)
            ),
        );
    }
    // the system's own size, when its file lists nodes
    if let Some((size, partition)) = system.and_then(|s| s.kind.listed_size()) {
        let want = if entry.nodes.is_empty() {
            entry.num_nodes.iter().copied().max().unwrap_or(1)
        } else {
            listed
        };
        if size > 0 && want > size && entry.nodes.iter().all(|n| !n.contains(':')) {
            // the file's list may be a subset of the real partition (Slurm knows): a warning, not an error
            warn_at(
                entry,
                if entry.nodes.is_empty() { ".num_nodes" } else { ".nodes" },
                format!(
                    "test '{}' asks {want} nodes; the system file lists {size} in partition {:?} (Slurm decides; \
                     a job it can never start ends `unschedulable`)",
                    entry.id, partition
                ),
            );
        }
    }
}
