//! CloudAI's `NIXLKVBench`: kvbench's `profile` (`python main.py profile --<key> <value> …`), which runs nixlbench
//! for a model's KV-cache transfers; one process per node under UCX. Graded from nixlbench's results table.

use std::path::Path;

use super::{output, word, ArgSpec, D, T};
use crate::config::args::CmdArgs;
use crate::config::decode::{Ctx, View};
use crate::config::test::{TemplateSchema, TestDefinition};
use crate::workloads::{IterationReport, JobOutcome, Launch, Placement, Verdict, Workload};

pub(crate) struct NixlKvBench;

static ARGS: &[ArgSpec] = &[
    super::FILEPATH,
    super::TOTAL_BUFFER_SIZE,
    super::DEVICE_LIST,
    super::DOCKER_IMAGE,
    super::ETCD_PATH,
    super::WAIT_ETCD_FOR,
    super::ETCD_IMAGE,
    ArgSpec::new("command", T::Enum(&["profile"]), D::Str("profile")).single(),
    ArgSpec::new(
        "kvbench_script",
        T::Str,
        D::Str("/workspace/nixl/benchmark/kvbench/main.py"),
    )
    .single(),
    ArgSpec::new("python_executable", T::Str, D::Str("python")).single(),
    ArgSpec::new("model_cfg", T::Str, D::Unset),
    ArgSpec::new("backend", T::Str, D::Unset),
];

/// Fields of the job and the launcher, not kvbench options.
const NOT_OPTIONS: [&str; 3] = ["command", "kvbench_script", "python_executable"];

impl TemplateSchema for NixlKvBench {
    fn template(&self) -> &'static str {
        "NIXLKVBench"
    }
    fn args(&self) -> &'static [ArgSpec] {
        ARGS
    }
    /// Other keys are options of the benchmark (`backend`, `op_type`, …), passed on.
    fn extra_args(&self) -> bool {
        true
    }
    fn validate(&self, ctx: &mut Ctx, v: &View, args: &CmdArgs) {
        super::validate_storage(ctx, v, args);
    }
}

impl Workload for NixlKvBench {
    fn needs(&self) -> crate::workloads::Needs {
        crate::workloads::Needs::Srun
    }

    fn derive(&self, test: &mut TestDefinition, _tasks_per_node: Option<u64>) {
        super::derive_storage(test);
    }

    fn launch(&self, test: &TestDefinition, at: &Placement) -> Launch {
        let a = &test.cmd_args;
        let mut cmd = vec![
            word(a.str("python_executable").unwrap_or("python")),
            word(a.str("kvbench_script").unwrap_or("")),
            word(a.str("command").unwrap_or("profile")),
        ];
        for (k, v) in &a.values {
            if super::JOB_FIELDS.contains(&k.as_str()) || NOT_OPTIONS.contains(&k.as_str()) {
                continue;
            }
            let key = if k == "model_cfg" { "model_config" } else { k };
            cmd.push(format!("--{key} {}", word(&v.py_str())));
        }
        cmd.push("--etcd_endpoints http://$NIXL_ETCD_ENDPOINTS".into());
        let backend = a.get("backend").map_or("unset".into(), |b| b.py_str());
        let tasks = super::per_node(&cmd.join(" "), &backend, at.nodes);
        let wait = super::int(test, "wait_etcd_for").unwrap_or(60);
        let mut steps = super::with_etcd(test, tasks, wait);
        steps.mounts = super::storage_mounts(a);
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
