//! NIXL, NVIDIA's inference transfer library, and CloudAI's three benchmarks of it: `NIXLBench` (nixlbench, one
//! process per node meeting through etcd), `NIXLKVBench` (kvbench's `profile`, which drives nixlbench) and
//! `NixlPerftest` (kvbench's sequential custom-traffic perftest on matrices it generates first). Each job starts an
//! etcd server on the first node, waits for it to answer, runs the benchmark and stops the server: several job
//! steps, so Slurm only (as CloudAI).

mod bench;
mod ep;
mod ep_log;
mod ep_plan;
mod kvbench;
pub mod output;
mod perftest;

pub(crate) use ep::NixlEp;
pub(crate) use perftest::NixlPerftest;

use std::path::Path;

use super::launch::{EnvFile, Mount, Step, Steps, RUN_DIR};
use super::{IterationReport, JobOutcome, Launch, Placement, Verdict, Workload};
use crate::config::args::{ArgDefault as D, ArgSpec, ArgType as T, ArgValue, CmdArgs};
use crate::config::decode::{join, Ctx, View};
use crate::config::test::{TemplateSchema, TestDefinition};
use crate::util::shell::{in_double_quotes, single_quote};

/// A NIXL benchmark that prints nixlbench's results tables (`NIXLBench`, `NIXLKVBench`): its processes on each
/// node around etcd, graded by [`output`].
pub(crate) struct NixlTables {
    template: &'static str,
    args: &'static [ArgSpec],
    /// The benchmark's command line and the backend it uses.
    command: fn(&TestDefinition) -> (String, String),
    /// The job's rank map and node metadata run in the image (else on the hosts).
    setup_in_image: bool,
}

pub(crate) static NIXL_BENCH: NixlTables = NixlTables {
    template: "NIXLBench",
    args: bench::ARGS,
    command: bench::command,
    setup_in_image: false,
};

pub(crate) static NIXL_KVBENCH: NixlTables = NixlTables {
    template: "NIXLKVBench",
    args: kvbench::ARGS,
    command: kvbench::command,
    setup_in_image: true,
};

impl TemplateSchema for NixlTables {
    fn template(&self) -> &'static str {
        self.template
    }
    fn args(&self) -> &'static [ArgSpec] {
        self.args
    }
    /// Other keys are options of the benchmark (`backend`, `op_type`, …), passed on.
    fn extra_args(&self) -> bool {
        true
    }
    fn validate(&self, ctx: &mut Ctx, v: &View, args: &CmdArgs) {
        validate_storage(ctx, v, args);
    }
}

impl Workload for NixlTables {
    fn needs(&self) -> super::Needs {
        super::Needs::Srun
    }

    fn derive(&self, test: &mut TestDefinition, _tasks_per_node: Option<u64>) {
        derive_storage(test);
    }

    /// CloudAI's job, but for one fix: it waits `wait_etcd_for` seconds for etcd (CloudAI's NIXLBench always waits
    /// 60, whatever the test says).
    fn launch(&self, test: &TestDefinition, at: &Placement) -> Launch {
        let (cmd, backend) = (self.command)(test);
        let tasks = per_node(&cmd, &backend, at.nodes);
        let wait = int(test, "wait_etcd_for").unwrap_or(60);
        let mut steps = with_etcd(test, tasks, wait);
        steps.setup_in_image = self.setup_in_image;
        steps.mounts = storage_mounts(&test.cmd_args);
        Launch {
            steps: Some(steps),
            ..Launch::process("", Vec::new()).in_test_image(test)
        }
    }

    fn grade(&self, _test: &TestDefinition, dir: &Path, _outcome: &JobOutcome) -> Verdict {
        output::grade(dir)
    }

    fn report(&self, _test: &TestDefinition, dir: &Path, title: &str) -> Option<IterationReport> {
        output::report(dir, title)
    }

    fn metric(&self, _test: &TestDefinition, dir: &Path, name: &str) -> Option<f64> {
        output::metric(dir, name)
    }
}

/// The fields every NIXL benchmark has (CloudAI's `NIXLBaseCmdArgs`).
const DOCKER_IMAGE: ArgSpec = ArgSpec::new("docker_image_url", T::Str, D::Required).single();
const ETCD_PATH: ArgSpec = ArgSpec::new("etcd_path", T::Str, D::Str("etcd")).single();
const WAIT_ETCD_FOR: ArgSpec = ArgSpec::new("wait_etcd_for", T::Int, D::Int(60))
    .single()
    .at_least(1);
const ETCD_IMAGE: ArgSpec = ArgSpec::new("etcd_image_url", T::Str, D::Unset).single();
/// Storage options of nixlbench and kvbench (`NIXLExtendedCmdArgs`), which pydantic lists first.
const FILEPATH: ArgSpec = ArgSpec::new("filepath", T::Str, D::Unset).single();
const TOTAL_BUFFER_SIZE: ArgSpec = ArgSpec::new("total_buffer_size", T::Text, D::Unset);
const DEVICE_LIST: ArgSpec = ArgSpec::new("device_list", T::Str, D::Unset);

/// The fields that configure the job, not the benchmark's command line.
const JOB_FIELDS: [&str; 4] = [
    "docker_image_url",
    "etcd_path",
    "wait_etcd_for",
    "etcd_image_url",
];

/// What nixlbench allocates for file devices when the test does not say (8 GiB).
const DEFAULT_TOTAL_BUFFER_SIZE: u64 = 8 << 30;

/// `total_buffer_size`: bytes, or a number with `b`, `kb`, `mb` or `gb` (powers of 1024; lower case, as CloudAI).
fn buffer_bytes(s: &str) -> Option<u64> {
    let unit_at = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(unit_at);
    let mult: u64 = match unit {
        "" | "b" => 1,
        "kb" => 1 << 10,
        "mb" => 1 << 20,
        "gb" => 1 << 30,
        _ => return None,
    };
    num.parse::<u64>().ok()?.checked_mul(mult)
}

/// One device of `device_list`: `id:type:path`, a numeric id, one upper-case type letter, an absolute path of
/// `[A-Za-z0-9._/-]`.
fn is_device(d: &str) -> bool {
    let mut parts = d.splitn(3, ':');
    let (Some(id), Some(ty), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    !id.is_empty()
        && id.bytes().all(|b| b.is_ascii_digit())
        && ty.len() == 1
        && ty.bytes().all(|b| b.is_ascii_uppercase())
        && path.len() > 1
        && path.starts_with('/')
        && path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-".contains(&b))
}

/// The storage options' grammar, each value of a sweep too.
fn validate_storage(ctx: &mut Ctx, v: &View, args: &CmdArgs) {
    let values = |name: &str| -> Vec<String> {
        match args.get(name) {
            Some(ArgValue::List(l)) => l.iter().map(ArgValue::py_str).collect(),
            Some(x) => vec![x.py_str()],
            None => Vec::new(),
        }
    };
    let field = |name: &str| join(&v.field("cmd_args"), name);
    for s in values("total_buffer_size") {
        if buffer_bytes(&s).is_none() {
            ctx.err(
                &v.cmd_arg_loc("total_buffer_size"),
                &field("total_buffer_size"),
                format!("\"{s}\" is not a buffer size"),
                Some("bytes, or a number with b, kb, mb or gb: 1048576, 64mb, 8gb".into()),
            );
        }
    }
    for s in values("device_list") {
        if let Some(bad) = s.split(',').find(|d| !is_device(d)) {
            ctx.err(
                &v.cmd_arg_loc("device_list"),
                &field("device_list"),
                format!("\"{bad}\" is not a device spec"),
                Some("id:type:path, comma-separated: 11:F:/store0.bin,27:K:/dev/nvme0n1".into()),
            );
        }
    }
}

/// CloudAI's normalization of the storage options: the buffer size in bytes, the container path made absolute.
fn derive_storage(test: &mut TestDefinition) {
    let values = &mut test.cmd_args.values;
    if let Some(v) = values.get_mut("total_buffer_size") {
        let bytes = |x: &ArgValue| {
            let s = x.py_str();
            ArgValue::Str(buffer_bytes(&s).map_or(s, |b| b.to_string()))
        };
        let new = match &*v {
            ArgValue::List(l) => ArgValue::List(l.iter().map(bytes).collect()),
            x => bytes(x),
        };
        *v = new;
    }
    if let Some(ArgValue::Str(p)) = values.get_mut("filepath") {
        if !p.starts_with('/') {
            p.insert(0, '/');
        }
    }
}

/// The storage options' mounts: a directory for `filepath`, and for each file device of `device_list` (type `F`) a
/// sparse file of the buffer size, named after the device's file (`_1`, `_2` when names repeat).
fn storage_mounts(args: &CmdArgs) -> Vec<Mount> {
    let mut mounts = Vec::new();
    if let Some(p) = args.str("filepath") {
        let name = p.trim_end_matches('/').rsplit('/').next().unwrap_or("");
        mounts.push(Mount {
            source: format!("filepath_mount/{name}"),
            target: p.to_string(),
            file_size: None,
        });
    }
    let size = args
        .str("total_buffer_size")
        .and_then(buffer_bytes)
        .unwrap_or(DEFAULT_TOTAL_BUFFER_SIZE);
    let mut used: Vec<String> = Vec::new();
    for dev in args.str("device_list").unwrap_or("").split(',') {
        let mut parts = dev.splitn(3, ':');
        let (Some(_), Some("F"), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let file = path.rsplit('/').next().unwrap_or(path);
        let mut name = file.to_string();
        let (stem, ext) = match file.rfind('.').filter(|&i| i > 0) {
            Some(i) => file.split_at(i),
            None => (file, ""),
        };
        let mut n = 1;
        while used.contains(&name) {
            name = format!("{stem}_{n}{ext}");
            n += 1;
        }
        used.push(name.clone());
        mounts.push(Mount {
            source: format!("device_list_mounts/{name}"),
            target: path.to_string(),
            file_size: Some(size),
        });
    }
    mounts
}

/// A value on the benchmark's command line, which runs inside `bash -c "…"`: as written when it is plain text or
/// a variable reference (`http://$NIXL_ETCD_ENDPOINTS`, as CloudAI writes it), else single-quoted for the inner
/// shell and escaped for the outer one.
fn word(v: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_./:=,@%+-".contains(c);
    let reference = v
        .split('$')
        .skip(1)
        .all(|r| r.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_'));
    if !v.is_empty() && v.chars().all(|c| plain(c) || c == '$') && reference {
        v.to_string()
    } else {
        in_double_quotes(&single_quote(v)).into_owned()
    }
}

/// `bash -c "source <run>/env_vars.sh; <cmd>"`.
fn in_job_env(cmd: &str) -> String {
    format!("bash -c \"source {RUN_DIR}/env_vars.sh; {cmd}\"")
}

/// The job around a benchmark: etcd started on the first node in the background, waited for (`wait` seconds),
/// the benchmark's steps, etcd stopped.
fn with_etcd(test: &TestDefinition, middle: Vec<Step>, wait: i64) -> Steps {
    let etcd = word(test.cmd_args.str("etcd_path").unwrap_or("etcd"));
    let mut steps = vec![super::etcd::start(&etcd, true)];
    steps.extend(super::etcd::wait(wait));
    steps.extend(middle);
    steps.push(super::etcd::stop());
    Steps {
        steps,
        setup_in_image: true,
        job_env: [
            ("NIXL_ETCD_NAMESPACE", "/nixl/kvbench/$(uuidgen)"),
            ("NIXL_ETCD_ENDPOINTS", "\"$SLURM_JOB_MASTER_NODE:2379\""),
            (
                "SLURM_JOB_MASTER_NODE",
                "$(scontrol show hostname $SLURM_JOB_NODELIST | head -n 1)",
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
        env_file: EnvFile::Bare,
        other_image: test.cmd_args.str("etcd_image_url").map(str::to_string),
        ..Default::default()
    }
}

/// The benchmark's processes (nixlbench, kvbench's profile): with UCX, one on each node, each started 15 s after
/// the one before (two on the first node when the job has one); with other backends one on the first node.
fn per_node(cmd: &str, backend: &str, nodes: u64) -> Vec<Step> {
    let on = |node: String| Step::Task {
        all_nodes: false,
        own_image: false,
        opts: vec![
            "--overlap".into(),
            node,
            "--ntasks-per-node=1".into(),
            "--ntasks=1".into(),
            "-N1".into(),
        ],
        cmd: in_job_env(cmd),
    };
    let master = || "--nodelist=$SLURM_JOB_MASTER_NODE".to_string();
    let mut tasks: Vec<Step> = if !backend.eq_ignore_ascii_case("UCX") {
        vec![on(master())]
    } else if nodes > 1 {
        (1..=nodes)
            .map(|i| {
                on(format!(
                    "--nodelist=$(scontrol show hostname $SLURM_JOB_NODELIST | sed -n '{i}p')"
                ))
            })
            .collect()
    } else {
        vec![on(master()), on(master())]
    };
    let last = tasks.len() - 1;
    for t in &mut tasks[..last] {
        if let Step::Task { cmd, .. } = t {
            cmd.push_str(" &\nsleep 15");
        }
    }
    tasks
}

/// The test's integer field.
fn int(test: &TestDefinition, name: &str) -> Option<i64> {
    test.cmd_args.get(name).and_then(ArgValue::as_int)
}
