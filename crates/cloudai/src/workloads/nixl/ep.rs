//! NIXL's elastic expert-parallel benchmark (CloudAI's `NixlEP`): NIXL's `elastic.py` runs a plan of phases — the
//! ranks of each phase, a negative rank one killed in it — adding ranks as phases begin. The job is a launcher
//! script beside the batch script: the first node's workers start (and serve the rank store), later phases' workers
//! start on the nodes with room left once the phase before has ended (each node's log `nixl-ep-node-<i>.log`), and
//! the launcher waits for all of them. Graded from the node logs ([`log`]).

use std::path::Path;

use super::super::launch::{EnvFile, Step, Steps, RUN_DIR, SRUN};
use super::super::{IterationReport, JobOutcome, Launch, Placement, Verdict, Workload};
use crate::config::args::{ArgDefault as D, ArgSpec, ArgType as T, ArgValue, CmdArgs};
use crate::config::decode::{join, Ctx, View};
use crate::config::test::{TemplateSchema, TestDefinition};

use super::ep_log as log;
use super::ep_plan::{int, parse_plan, plan_of, stages, WorkerLaunch, PLAN};

pub(crate) struct NixlEp;

static ARGS: &[ArgSpec] = &[
    ArgSpec::new("docker_image_url", T::Str, D::Required).single(),
    ArgSpec::new(
        "elastic_script",
        T::Str,
        D::Str("/workspace/nixl/examples/device/ep/tests/elastic/elastic.py"),
    )
    .single(),
    ArgSpec::new("python_executable", T::Str, D::Str("python3")).single(),
    ArgSpec::new("plan", T::Str, D::Required),
    ArgSpec::new("num_processes_per_node", T::Int, D::Required).at_least(1),
    ArgSpec::new("service_startup_timeout_seconds", T::Int, D::Int(60))
        .at_least(1)
        .single(),
    ArgSpec::new("store_port", T::Int, D::Int(9999))
        .at_least(1)
        .single(),
];

const LAUNCHER: &str = "nixl-ep-launch.sh";

impl TemplateSchema for NixlEp {
    fn template(&self) -> &'static str {
        "NixlEP"
    }
    fn args(&self) -> &'static [ArgSpec] {
        ARGS
    }
    /// Other keys are options of `elastic.py` (`num_tokens`, `hidden_dim`, …), passed on in name order.
    fn extra_args(&self) -> bool {
        true
    }
    /// Each plan (one, or a sweep of them) is JSON: a non-empty list of phases, each a non-empty list of integer
    /// ranks; the store port is a port.
    fn validate(&self, ctx: &mut Ctx, v: &View, args: &CmdArgs) {
        let field = |k: &str| join(&v.field("cmd_args"), k);
        let plans: Vec<&ArgValue> = match args.get("plan") {
            Some(ArgValue::List(l)) if l.is_empty() => {
                ctx.err(
                    &v.cmd_arg_loc("plan"),
                    &field("plan"),
                    "an empty list of plans",
                    Some("give one plan, or a list of plans to sweep over".into()),
                );
                Vec::new()
            }
            Some(ArgValue::List(l)) => l.iter().collect(),
            Some(p) => vec![p],
            None => Vec::new(),
        };
        for p in plans {
            if let Err(e) = parse_plan(&p.py_str()) {
                ctx.err(
                    &v.cmd_arg_loc("plan"),
                    &field("plan"),
                    e,
                    Some(
                        "a JSON list of phases, each a list of ranks: \"[[0, 1], [0, 1, 2, 3]]\""
                            .into(),
                    ),
                );
            }
        }
        if let Some(port) = args.get("store_port").and_then(ArgValue::as_int) {
            if port > 65535 {
                ctx.err(
                    &v.cmd_arg_loc("store_port"),
                    &field("store_port"),
                    format!("must be 65535 or less, found {port}"),
                    None,
                );
            }
        }
    }
}

fn node_log(node: usize) -> String {
    format!("{RUN_DIR}/nixl-ep-node-{node}.log")
}

/// `elastic.py`'s command line for one launch; the test's other keys as flags in name order.
fn worker_command(test: &TestDefinition, w: &WorkerLaunch) -> String {
    let a = &test.cmd_args;
    let s = |k: &str| a.get(k).map(ArgValue::py_str).unwrap_or_default();
    let mut cmd = vec![
        s("python_executable"),
        s("elastic_script"),
        "--plan".into(),
        format!("{RUN_DIR}/{PLAN}"),
        "--num-processes".into(),
        w.processes.to_string(),
    ];
    if w.tcp_server {
        cmd.extend(["--tcp-server".into(), "$master_ip".into()]);
    }
    let declared: Vec<&str> = ARGS.iter().map(|a| a.name).collect();
    let mut extra: Vec<(&String, &ArgValue)> = a
        .values
        .iter()
        .filter(|(k, _)| !declared.contains(&k.as_str()))
        .collect();
    extra.sort_by(|x, y| x.0.cmp(y.0));
    for (k, v) in extra {
        let flag = format!("--{}", k.replace('_', "-"));
        match v {
            ArgValue::Bool(true) => cmd.push(flag),
            ArgValue::Bool(false) => {}
            v => cmd.extend([flag, v.py_str()]),
        }
    }
    cmd.join(" ")
}

fn render_launch(test: &TestDefinition, w: &WorkerLaunch) -> String {
    let script =
        format!("source {RUN_DIR}/env_vars.sh; {}", worker_command(test, w)).replace('"', "\\\"");
    let log = node_log(w.node);
    format!(
        "{SRUN} --overlap --nodelist=\"${{nodes_array[{}]}}\" --ntasks-per-node=1 --ntasks=1 -N1{} --output={log} --error={log} bash -c \"{script}\"",
        w.node,
        if w.append { " --open-mode=append" } else { "" }
    )
}

const FINISH: [&str; 5] = [
    "if [ \"$rc\" -eq 0 ]; then",
    "    echo \"All NIXL EP launches completed successfully\"",
    "fi",
    "",
    "exit $rc",
];

const CLEANUP: &str = "cleanup_nixl_ep() {
    local pids
    pids=\"$(jobs -pr)\"
    if [ -z \"$pids\" ]; then
        return 0
    fi
    echo \"Cleaning up NIXL EP background launches...\"
    kill -TERM $pids >/dev/null 2>&1 || true
    sleep 2
    pids=\"$(jobs -pr)\"
    if [ -n \"$pids\" ]; then
        kill -KILL $pids >/dev/null 2>&1 || true
    fi
    wait >/dev/null 2>&1 || true
}

on_nixl_ep_signal() {
    local rc=\"$1\"
    cleanup_nixl_ep
    exit \"$rc\"
}

trap cleanup_nixl_ep EXIT
trap 'on_nixl_ep_signal 130' INT
trap 'on_nixl_ep_signal 143' TERM
";

/// The launcher script (its text with the job's placeholders; the scheduler fills them).
fn launcher(test: &TestDefinition, at: &Placement) -> Result<String, String> {
    let plan = plan_of(test);
    let per_node = int(test, "num_processes_per_node").unwrap_or(1).max(1) as u64;
    let stages: Vec<(usize, Vec<WorkerLaunch>)> = stages(&plan, at.nodes.max(1), per_node)?
        .into_iter()
        .filter(|(_, l)| !l.is_empty())
        .collect();
    let mut lines: Vec<String> = vec![
        "#!/bin/bash".into(),
        String::new(),
        "nodes=( $( scontrol show hostnames $SLURM_JOB_NODELIST ) )".into(),
        format!("nodes_array=(\"${{nodes[@]:0:{}}}\")", at.nodes.max(1)),
        "master_node=${nodes_array[0]}".into(),
        "export SLURM_JOB_MASTER_NODE=\"${SLURM_JOB_MASTER_NODE:-$master_node}\"".into(),
        format!(
            "srun --nodes=1 --ntasks=1 -N1 --nodelist=\"$master_node\" --output={RUN_DIR}/nixl-ep-master-ip.txt --error={RUN_DIR}/stderr.txt hostname --ip-address"
        ),
        format!("master_ip=$(awk '{{print $1}}' {RUN_DIR}/nixl-ep-master-ip.txt)"),
        String::new(),
        "echo \"Nodes: $SLURM_JOB_NODELIST\"".into(),
        "echo \"Num Nodes: ${#nodes_array[@]}\"".into(),
        "echo \"Master Node: $master_node\"".into(),
        "echo \"Master IP: $master_ip\"".into(),
        String::new(),
    ];
    lines.extend(CLEANUP.lines().map(str::to_string));
    lines.push(String::new());
    let first = &stages[0];
    if stages.len() == 1 && first.1.len() == 1 {
        lines.push("echo \"Starting NIXL EP on the master node...\"".into());
        lines.push(render_launch(test, &first.1[0]));
        lines.push("rc=$?".into());
        lines.extend(FINISH.map(str::to_string));
        return Ok(lines.join("\n") + "\n");
    }
    let followers = stages.iter().any(|(_, l)| l.iter().any(|w| w.node != 0));
    let node0 = node_log(0);
    if followers {
        let timeout = int(test, "service_startup_timeout_seconds").unwrap_or(60);
        let port = int(test, "store_port").unwrap_or(9999);
        lines.push(format!(
            "wait_for_master_services() {{
    local timeout={timeout}
    local interval=1
    local end_time=$(($(date +%s) + timeout))

    while [ \"$(date +%s)\" -lt \"$end_time\" ]; do
        if timeout 1 bash -c \": > /dev/tcp/$master_ip/{port}\" >/dev/null 2>&1; then
            echo \"NIXL EP master services are ready on $master_ip\"
            return 0
        fi
        sleep \"$interval\"
    done

    echo \"Timed out waiting for NIXL EP master services on $master_ip\"
    return 1
}}"
        ));
        lines.push(String::new());
    }
    if stages.len() > 1 {
        let budget = at.time_limit.map_or(600, |t| t.max(1));
        let timeout = (budget / plan.len().max(1) as u64).max(1);
        lines.push(format!(
            "wait_for_phase_completion() {{
    local phase=\"$1\"
    local log_file=\"$2\"
    local primary_pid=\"$3\"
    local timeout={timeout}
    local interval=1
    local end_time=$(($(date +%s) + timeout))

    while [ \"$(date +%s)\" -lt \"$end_time\" ]; do
        if [ -f \"$log_file\" ] && grep -Fq -- \"-> end phase $phase\" \"$log_file\"; then
            echo \"Detected completion of phase $phase in $log_file\"
            return 0
        fi
        if [ -f \"$log_file\" ] && grep -Fq -- \"no plan phases were found for rank\" \"$log_file\"; then
            echo \"Detected an early NIXL EP failure while waiting for phase $phase\"
            return 1
        fi
        if ! kill -0 \"$primary_pid\" >/dev/null 2>&1; then
            echo \"Primary NIXL EP launch exited before phase $phase completed\"
            return 1
        fi
        sleep \"$interval\"
    done

    echo \"Timed out waiting for phase $phase to complete\"
    return 1
}}"
        ));
        lines.push(String::new());
    }
    let background = |lines: &mut Vec<String>, launches: &[WorkerLaunch]| {
        for w in launches {
            lines.push(format!("{} &", render_launch(test, w)));
            lines.push("active_srun_count=$((active_srun_count + 1))".into());
        }
    };
    lines.extend([
        "active_srun_count=0".into(),
        String::new(),
        "echo \"Starting initial NIXL EP stage on the master node...\"".into(),
        format!("{} &", render_launch(test, &first.1[0])),
        "primary_pid=$!".into(),
        "active_srun_count=$((active_srun_count + 1))".into(),
    ]);
    if followers {
        lines.extend([
            String::new(),
            "echo \"Waiting for NIXL EP master services...\"".into(),
            "wait_for_master_services || exit 1".into(),
        ]);
    }
    if first.1.len() > 1 {
        lines.push(String::new());
        lines.push(format!(
            "echo \"Starting the rest of initial phase {}...\"",
            first.0
        ));
        background(&mut lines, &first.1[1..]);
    }
    for (idx, launches) in &stages[1..] {
        let before = idx - 1;
        lines.extend([
            String::new(),
            format!("echo \"Waiting for phase {before} before starting phase {idx}...\""),
            format!(
                "wait_for_phase_completion \"{before}\" \"{node0}\" \"$primary_pid\" || exit 1"
            ),
            String::new(),
            format!("echo \"Starting launches for phase {idx}...\""),
        ]);
        background(&mut lines, launches);
    }
    let removal = plan.iter().flatten().any(|r| *r < 0);
    lines.extend(
        [
            "",
            if removal {
                "allow_planned_removal_143=1"
            } else {
                "allow_planned_removal_143=0"
            },
            "ignored_planned_removal_143=0",
            "rc=0",
            "while [ \"$active_srun_count\" -gt 0 ]; do",
            "    wait -n",
            "    wait_rc=$?",
            "    active_srun_count=$((active_srun_count - 1))",
            "    if [ \"$allow_planned_removal_143\" -eq 1 ] && [ \"$wait_rc\" -eq 143 ]; then",
            "        echo \"Ignoring provisional NIXL EP planned-rank-removal exit 143\"",
            "        ignored_planned_removal_143=1",
            "    elif [ \"$wait_rc\" -ne 0 ] && [ \"$rc\" -eq 0 ]; then",
            "        rc=$wait_rc",
            "    fi",
            "done",
            "",
        ]
        .map(str::to_string),
    );
    if removal {
        lines.extend([
            "if [ \"$ignored_planned_removal_143\" -eq 1 ] && [ \"$rc\" -eq 0 ]; then".into(),
            format!(
                "    wait_for_phase_completion \"{}\" \"{node0}\" \"$primary_pid\" || rc=143",
                plan.len() - 1
            ),
            "fi".into(),
            String::new(),
        ]);
    }
    lines.extend(FINISH.map(str::to_string));
    Ok(lines.join("\n") + "\n")
}

/// The plan as Python's `json.dumps(…, indent=2)` writes it.
fn plan_file(plan: &[Vec<i64>]) -> String {
    serde_json::to_string_pretty(plan).unwrap_or_default() + "\n"
}

impl Workload for NixlEp {
    fn needs(&self) -> super::super::Needs {
        super::super::Needs::Srun
    }

    fn check(&self, test: &TestDefinition, at: &Placement) -> Vec<String> {
        let plan = match test.cmd_args.str("plan").map(parse_plan) {
            Some(Ok(p)) => p,
            Some(Err(e)) => return vec![format!("cmd_args.plan: {e}")],
            None => {
                return vec![
                    "cmd_args.plan is one plan when the job is written (a sweep is resolved first)"
                        .into(),
                ]
            }
        };
        let Some(per_node) = int(test, "num_processes_per_node") else {
            return vec![
                "cmd_args.num_processes_per_node is one integer when the job is written".into(),
            ];
        };
        match stages(&plan, at.nodes.max(1), per_node.max(1) as u64) {
            Ok(_) => Vec::new(),
            Err(e) => vec![format!("NixlEP: {e}")],
        }
    }

    /// CloudAI's job, with one difference: the launcher takes the allocation's nodes in Slurm's order even when the
    /// test names its nodes (CloudAI writes the list as given).
    fn launch(&self, test: &TestDefinition, at: &Placement) -> Launch {
        let mut files = vec![(PLAN.to_string(), plan_file(&plan_of(test)))];
        if let Ok(text) = launcher(test, at) {
            files.insert(0, (LAUNCHER.to_string(), text));
        }
        Launch {
            steps: Some(Steps {
                steps: vec![Step::Shell(format!("bash {RUN_DIR}/{LAUNCHER}"))],
                setup_in_image: true,
                env_file: EnvFile::Bare,
                files,
                ..Default::default()
            }),
            image: test.cmd_args.str("docker_image_url").map(str::to_string),
            image_field: Some("cmd_args.docker_image_url"),
            ..Launch::process("", Vec::new())
        }
    }

    fn grade(&self, test: &TestDefinition, dir: &Path, _outcome: &JobOutcome) -> Verdict {
        log::verdict(test, dir)
    }

    /// `default`: the mean dispatch + combine bandwidth of every sample (GB/s), as CloudAI.
    fn metric(&self, test: &TestDefinition, dir: &Path, name: &str) -> Option<f64> {
        (name == "default")
            .then(|| log::mean_bandwidth(test, dir))
            .flatten()
    }

    fn report(&self, test: &TestDefinition, dir: &Path, title: &str) -> Option<IterationReport> {
        log::report(test, dir, title)
    }
}
