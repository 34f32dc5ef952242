//! The four node-evidence templates (`DcgmDiag`, `NvidiaSmi`, `KernelLog`, `IbStat`): each runs its tool once on
//! every node of the allocation ([`Procs::PerNode`]) inside a small wrapper that names the node and the time and
//! records the tool's exit status, and grades each node's output by the tool's rules; the iteration's verdict is
//! the worst node's, every node's findings are its checks.

use std::path::{Path, PathBuf};

use super::drift::{drift, Versions};
use super::report::{csv, html, CSV_FILE, HTML_FILE};
use super::{dcgm, ibstat, kernel_log, nvidia_smi, worst, Finding, Severity};
use crate::config::args::{ArgDefault as D, ArgSpec, ArgType as T};
use crate::config::test::{TemplateSchema, TestDefinition};
use crate::results::checks::{Check, CheckKind, CheckStatus};
use crate::workloads::launch::NODES_DIR;
use crate::workloads::{
    IterationReport, JobOutcome, Launch, Placement, Procs, Success, Verdict, Workload,
};

/// Which tool a template runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tool {
    DcgmDiag,
    NvidiaSmi,
    KernelLog,
    IbStat,
}

pub(crate) struct NodeCheck(pub Tool);

pub(crate) static DCGM_DIAG: NodeCheck = NodeCheck(Tool::DcgmDiag);
pub(crate) static NVIDIA_SMI: NodeCheck = NodeCheck(Tool::NvidiaSmi);
pub(crate) static KERNEL_LOG: NodeCheck = NodeCheck(Tool::KernelLog);
pub(crate) static IB_STAT: NodeCheck = NodeCheck(Tool::IbStat);

static DCGM_ARGS: &[ArgSpec] = &[
    ArgSpec::new("level", T::Int, D::Int(1))
        .single()
        .at_least(1),
    ArgSpec::new("json", T::Bool, D::Bool(true)).single(),
];
static SMI_ARGS: &[ArgSpec] = &[ArgSpec::new("xml", T::Bool, D::Bool(false)).single()];
static KLOG_ARGS: &[ArgSpec] = &[
    ArgSpec::new("command", T::Str, D::Str("dmesg -T")).single(),
    ArgSpec::new("since", T::Str, D::Str("24h")).single(),
];
static IB_ARGS: &[ArgSpec] = &[
    ArgSpec::new("adapters", T::Str, D::Str("")).single(),
    ArgSpec::new("rate", T::Int, D::Int(0)).single().at_least(0),
    ArgSpec::new("counters", T::Bool, D::Bool(true)).single(),
];

/// The largest node output read (a kernel log of a busy node is a few MiB).
const MAX_OUTPUT: u64 = 256 << 20;

/// The wrapper's own lines, around the tool's output.
pub const MARK: &str = "cloudai-node-check:";

impl TemplateSchema for NodeCheck {
    fn template(&self) -> &'static str {
        match self.0 {
            Tool::DcgmDiag => "DcgmDiag",
            Tool::NvidiaSmi => "NvidiaSmi",
            Tool::KernelLog => "KernelLog",
            Tool::IbStat => "IbStat",
        }
    }
    fn args(&self) -> &'static [ArgSpec] {
        match self.0 {
            Tool::DcgmDiag => DCGM_ARGS,
            Tool::NvidiaSmi => SMI_ARGS,
            Tool::KernelLog => KLOG_ARGS,
            Tool::IbStat => IB_ARGS,
        }
    }
}

fn int(test: &TestDefinition, key: &str, default: i64) -> i64 {
    test.cmd_args
        .get(key)
        .and_then(|v| v.as_int())
        .unwrap_or(default)
}

fn flag(test: &TestDefinition, key: &str, default: bool) -> bool {
    match test.cmd_args.get(key) {
        Some(crate::config::args::ArgValue::Bool(b)) => *b,
        _ => default,
    }
}

fn text<'a>(test: &'a TestDefinition, key: &str, default: &'a str) -> &'a str {
    test.cmd_args.str(key).unwrap_or(default)
}

impl NodeCheck {
    /// The tool's command line on one node.
    fn tool_command(&self, test: &TestDefinition) -> String {
        match self.0 {
            Tool::DcgmDiag => format!(
                "dcgmi diag -r {}{}",
                int(test, "level", 1),
                if flag(test, "json", true) { " -j" } else { "" }
            ),
            Tool::NvidiaSmi => {
                let q = if flag(test, "xml", false) {
                    "nvidia-smi -q -x"
                } else {
                    "nvidia-smi -q"
                };
                // and the NCCL the node's dynamic linker resolves (bare-metal jobs use it), for drift
                format!(
                    "{q}; rc=$?; l=$(ldconfig -p 2>/dev/null | awk '/libnccl\\.so\\.[0-9]+ /{{print $NF; exit}}'); \
                     [ -n \"$l\" ] && echo \"{MARK} nccl $(readlink -f \"$l\" | sed 's/.*libnccl\\.so\\.//')\"; \
                     exit $rc"
                )
            }
            Tool::KernelLog => text(test, "command", "dmesg -T").to_string(),
            Tool::IbStat => {
                if flag(test, "counters", true) {
                    // each port's counters after a line that names it, read back by the parser
                    "ibstat; for ca in $(ibstat -l); do n=$(ibstat \"$ca\" | awk '/Number of ports/{print $4}'); \
                     for p in $(seq 1 \"${n:-1}\"); do echo \"== perfquery $ca $p\"; perfquery -C \"$ca\" -P \"$p\"; \
                     done; done"
                        .into()
                } else {
                    "ibstat".into()
                }
            }
        }
    }
}

/// The wrapper: the node's name, the time (UTC) and the GPUs it should have, the tool's output (stderr too; in a
/// subshell, so an `exit` in the command ends only it), then its exit status. It exits 0 when the tool ran: the
/// verdict is the output's.
pub(crate) fn wrap(tool: &str, expect_gpus: u64) -> String {
    format!(
        "echo \"{MARK} host $(hostname -s 2>/dev/null || hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ) expect-gpus \
         {expect_gpus}\"; ( {tool} ) 2>&1; echo \"{MARK} exit $?\""
    )
}

/// What the wrapper said of one node's run.
#[derive(Debug, Default, PartialEq)]
pub struct Wrapped {
    pub host: String,
    pub at: Option<chrono::DateTime<chrono::Utc>>,
    pub expect_gpus: u64,
    pub exit: Option<i32>,
    /// The NCCL library version the node's dynamic linker resolves (NvidiaSmi), when it has one.
    pub nccl: Option<String>,
    /// The tool's own output.
    pub body: String,
}

/// Reads a node's output back into the wrapper's facts and the tool's output.
pub fn unwrap(text: &str) -> Wrapped {
    let mut w = Wrapped::default();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix(MARK) {
            let words: Vec<&str> = rest.split_whitespace().collect();
            match words.as_slice() {
                ["host", h, "at", t, "expect-gpus", g] => {
                    w.host = h.to_string();
                    w.at = chrono::DateTime::parse_from_rfc3339(t)
                        .ok()
                        .map(|t| t.with_timezone(&chrono::Utc));
                    w.expect_gpus = g.parse().unwrap_or(0);
                }
                ["exit", c] => w.exit = c.parse().ok(),
                ["nccl", v] => w.nccl = Some(v.to_string()),
                _ => {}
            }
            continue;
        }
        w.body.push_str(line);
        w.body.push('\n');
    }
    w
}

impl NodeCheck {
    /// The findings of one node's output, and the versions it reports (for drift across nodes).
    pub fn evidence(&self, test: &TestDefinition, output: &str) -> (Vec<Finding>, Versions) {
        let w = unwrap(output);
        let mut out = Vec::new();
        let mut versions = Vec::new();
        if w.host.is_empty() {
            out.push(Finding::new(
                Severity::Fail,
                "no output: the check did not start on this node",
            ));
            return (out, versions);
        }
        let Some(exit) = w.exit else {
            out.push(Finding::new(
                Severity::Fail,
                "the check did not finish (its output ends before the tool's exit status)",
            ));
            return (out, versions);
        };
        let tail = || {
            w.body
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .trim()
                .to_string()
        };
        match self.0 {
            Tool::DcgmDiag => match dcgm::parse(&w.body) {
                Some(r) => {
                    out.extend(dcgm::judge(&r));
                    versions = vec![("dcgm", r.version.clone()), ("driver", r.driver.clone())];
                }
                None => out.push(Finding::new(
                    Severity::Fail,
                    format!("dcgmi diag exited {exit} without results: {}", tail()),
                )),
            },
            Tool::NvidiaSmi => match nvidia_smi::parse(&w.body) {
                Some(r) => {
                    out.extend(nvidia_smi::judge(&r, w.expect_gpus));
                    versions = nvidia_smi::versions(&r);
                    if let Some(v) = &w.nccl {
                        versions.push(("nccl", v.clone()));
                    }
                }
                None => out.push(Finding::new(
                    Severity::Fail,
                    format!("nvidia-smi exited {exit} without a GPU report: {}", tail()),
                )),
            },
            Tool::KernelLog => {
                if exit != 0 && w.body.trim().is_empty() {
                    out.push(Finding::new(
                        Severity::Fail,
                        format!("the kernel log could not be read (exit {exit})"),
                    ));
                } else if exit != 0 && !w.body.contains(']') && !w.body.contains("kernel:") {
                    out.push(Finding::new(
                        Severity::Fail,
                        format!("the kernel log could not be read (exit {exit}): {}", tail()),
                    ));
                } else {
                    let since = kernel_log::window(text(test, "since", "24h"))
                        .zip(w.at)
                        .map(|(win, at)| {
                            // `dmesg -T` and syslog stamps are local time; ISO stamps carry their zone
                            kernel_log::since(
                                at,
                                win,
                                !text(test, "command", "dmesg -T").contains("iso"),
                            )
                        });
                    let now = w.at.unwrap_or_else(chrono::Utc::now);
                    out.extend(kernel_log::judge(&kernel_log::events(&w.body, since, now)));
                }
            }
            Tool::IbStat => {
                let declared: Vec<String> = text(test, "adapters", "")
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect();
                let ports = ibstat::parse(&w.body);
                if ports.is_empty() && exit != 0 {
                    out.push(Finding::new(
                        Severity::Fail,
                        format!("ibstat exited {exit}: {}", tail()),
                    ));
                } else {
                    out.extend(ibstat::judge(
                        &ports,
                        &declared,
                        int(test, "rate", 0) as f64,
                    ));
                }
            }
        }
        (out, versions)
    }
}

/// Each node's output of an iteration: `nodes/<node>/stdout.txt`, or the iteration's own `stdout.txt` (one node),
/// named by the wrapper's host line.
pub(crate) fn node_outputs(dir: &Path) -> Vec<(String, PathBuf)> {
    let nodes = dir.join(NODES_DIR);
    if let Ok(rd) = std::fs::read_dir(&nodes) {
        let mut v: Vec<(String, PathBuf)> = rd
            .filter_map(Result::ok)
            .filter(|e| e.path().is_dir())
            .map(|e| {
                (
                    e.file_name().to_string_lossy().into_owned(),
                    e.path().join("stdout.txt"),
                )
            })
            .collect();
        v.sort();
        if !v.is_empty() {
            return v;
        }
    }
    let out = dir.join("stdout.txt");
    let host = crate::util::fsx::read_regular(&out, MAX_OUTPUT)
        .ok()
        .map(|t| unwrap(&String::from_utf8_lossy(&t)).host)
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "this node".into());
    vec![(host, out)]
}

/// Every node's findings: (node, findings), in node order; a node whose versions differ from the majority's
/// gets a warning for each (drift is seen before it fails anything).
pub(crate) fn node_findings(
    check: &NodeCheck,
    test: &TestDefinition,
    dir: &Path,
) -> Vec<(String, Vec<Finding>)> {
    let mut nodes: Vec<(String, Vec<Finding>, Versions)> = node_outputs(dir)
        .into_iter()
        .map(|(node, path)| {
            let text = crate::util::fsx::read_regular(&path, MAX_OUTPUT)
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            let (f, v) = check.evidence(test, &text);
            (node, f, v)
        })
        .collect();
    let drifted = drift(
        &nodes
            .iter()
            .map(|(n, _, v)| (n.clone(), v.clone()))
            .collect::<Vec<_>>(),
    );
    for (node, f, _) in &mut nodes {
        for (n, what) in &drifted {
            if n == node {
                f.push(Finding::new(Severity::Warn, what.clone()));
            }
        }
    }
    nodes.into_iter().map(|(n, f, _)| (n, f)).collect()
}

impl Workload for NodeCheck {
    fn launch(&self, test: &TestDefinition, at: &Placement) -> Launch {
        let expect = match self.0 {
            Tool::NvidiaSmi => at.gpus_per_node.unwrap_or(0),
            _ => 0,
        };
        Launch {
            procs: Procs::PerNode,
            success: Success::OutputContains("cloudai-node-check: exit"),
            has_profiler: true,
            ..Launch::process(wrap(&self.tool_command(test), expect), Vec::new())
        }
    }

    fn check(&self, test: &TestDefinition, _at: &Placement) -> Vec<String> {
        let mut out = Vec::new();
        if self.0 == Tool::DcgmDiag {
            let l = int(test, "level", 1);
            if !(1..=4).contains(&l) {
                out.push(format!(
                    "cmd_args.level = {l}: dcgmi diag runs levels 1 to 4 (1 quick, 2 medium, 3 long, 4 extended)"
                ));
            }
        }
        if self.0 == Tool::KernelLog && kernel_log::window(text(test, "since", "24h")).is_none() {
            out.push(format!(
                "cmd_args.since = {:?} is not a window: write it like \"24h\", \"90m\" or \"7d\"",
                text(test, "since", "24h")
            ));
        }
        out
    }

    fn grade(&self, test: &TestDefinition, dir: &Path, outcome: &JobOutcome) -> Verdict {
        verdict(self, &node_findings(self, test, dir), outcome)
    }

    fn report(&self, test: &TestDefinition, dir: &Path, title: &str) -> Option<IterationReport> {
        let nodes = node_findings(self, test, dir);
        let v = verdict(self, &nodes, &JobOutcome::default());
        let mut metrics = serde_json::Map::new();
        metrics.insert("nodes".into(), nodes.len().into());
        metrics.insert(
            "failed_nodes".into(),
            nodes
                .iter()
                .filter(|(_, f)| worst(f) == Some(Severity::Fail))
                .count()
                .into(),
        );
        Some(IterationReport {
            files: vec![
                (CSV_FILE.into(), csv(&nodes)),
                (HTML_FILE.into(), html(title, self.template(), &nodes, &v)),
            ],
            metrics,
            verdict: Some(v),
            ..Default::default()
        })
    }
}

/// The iteration's verdict: the worst node's, every node a check.
fn verdict(check: &NodeCheck, nodes: &[(String, Vec<Finding>)], outcome: &JobOutcome) -> Verdict {
    let mut checks = Vec::new();
    let mut failed = Vec::new();
    for (node, f) in nodes {
        let bad = worst(f) == Some(Severity::Fail);
        let shown: Vec<String> = f
            .iter()
            .filter(|x| x.severity >= Severity::Warn)
            .map(|x| format!("{}: {}", x.severity.as_str(), x.what))
            .collect();
        let detail = if shown.is_empty() {
            format!("{node}: healthy")
        } else {
            format!("{node}: {}", shown.join("; "))
        };
        if bad {
            let fails: Vec<&str> = f
                .iter()
                .filter(|x| x.severity == Severity::Fail)
                .map(|x| x.what.as_str())
                .collect();
            failed.push(format!("{node}: {}", fails.join("; ")));
        }
        let status = if bad {
            CheckStatus::Fail
        } else {
            CheckStatus::Pass
        };
        checks.push(Check::new(CheckKind::Node, status, detail));
    }
    let mut v = if !failed.is_empty() {
        Verdict::fail(format!(
            "{} of {} node(s) failed {}: {}",
            failed.len(),
            nodes.len(),
            check.template(),
            failed.join(" | ")
        ))
    } else if let Some(c) = outcome.exit_code.filter(|c| *c != 0) {
        Verdict::fail(format!(
            "the check's job exited with status {c}; see stderr.txt"
        ))
    } else {
        Verdict::pass_with(format!("{} node(s) healthy", nodes.len()))
    };
    v.checks.extend(checks);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_names_the_nodes_that_differ_from_a_majority() {
        let n = |name: &str, driver: &str, vbios: &str| {
            (
                name.to_string(),
                vec![("driver", driver.to_string()), ("vbios", vbios.to_string())],
            )
        };
        let d = drift(&[
            n("a", "535.183.01", "96.00.74.00.01"),
            n("b", "535.183.01", "96.00.74.00.01"),
            n("c", "535.129.03", "96.00.74.00.01"),
        ]);
        assert_eq!(
            d,
            [(
                "c".to_string(),
                "driver 535.129.03 differs from the 535.183.01 of 2 of 3 node(s) (drift)"
                    .to_string()
            )]
        );
        // no majority: no verdict
        assert!(drift(&[n("a", "1", "x"), n("b", "2", "x")]).is_empty());
    }

    #[test]
    fn the_wrapper_is_read_back() {
        let w = unwrap(&format!(
            "{MARK} host node003 at 2026-12-06T03:00:00Z expect-gpus 8\nGPU 0\n{MARK} exit 3\n"
        ));
        assert_eq!(
            (w.host.as_str(), w.expect_gpus, w.exit),
            ("node003", 8, Some(3))
        );
        assert_eq!(w.body, "GPU 0\n");
        assert_eq!(w.at.unwrap().to_rfc3339(), "2026-12-06T03:00:00+00:00");
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(wrap("echo hi; exit 5", 4))
            .output()
            .unwrap();
        let w = unwrap(&String::from_utf8_lossy(&out.stdout));
        assert_eq!(
            (w.exit, w.expect_gpus, w.body.as_str()),
            (Some(5), 4, "hi\n")
        );
        assert!(!w.host.is_empty() && w.at.is_some());
        assert_eq!(out.status.code(), Some(0));
    }
}
