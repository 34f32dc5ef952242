//! CloudAI's `NIXLBench`: nixlbench with the test's options (`--<key>=<value>` each, extra keys too), one process
//! per node under UCX. Graded from nixlbench's results table ([`super::output`]).

use std::path::Path;

use super::{output, word, ArgSpec, D, T};
use crate::config::args::CmdArgs;
use crate::config::decode::{Ctx, View};
use crate::config::test::{TemplateSchema, TestDefinition};
use crate::workloads::{IterationReport, JobOutcome, Launch, Placement, Verdict, Workload};

pub(crate) struct NixlBench;

static ARGS: &[ArgSpec] = &[
    super::FILEPATH,
    super::TOTAL_BUFFER_SIZE,
    super::DEVICE_LIST,
    super::DOCKER_IMAGE,
    super::ETCD_PATH,
    super::WAIT_ETCD_FOR,
    super::ETCD_IMAGE,
    ArgSpec::new("path_to_benchmark", T::Str, D::Required).single(),
    ArgSpec::new(
        "etcd_endpoints",
        T::Str,
        D::Str("http://$NIXL_ETCD_ENDPOINTS"),
    )
    .single(),
];

impl TemplateSchema for NixlBench {
    fn template(&self) -> &'static str {
        "NIXLBench"
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

impl Workload for NixlBench {
    fn needs(&self) -> crate::workloads::Needs {
        crate::workloads::Needs::Srun
    }

    fn derive(&self, test: &mut TestDefinition, _tasks_per_node: Option<u64>) {
        super::derive_storage(test);
    }

    /// CloudAI's job, but for one fix: it waits `wait_etcd_for` seconds for etcd (CloudAI's NIXLBench always waits
    /// 60, whatever the test says).
    fn launch(&self, test: &TestDefinition, at: &Placement) -> Launch {
        let mut cmd = vec![word(test.cmd_args.str("path_to_benchmark").unwrap_or(""))];
        for (k, v) in &test.cmd_args.values {
            if super::JOB_FIELDS.contains(&k.as_str()) || k == "path_to_benchmark" {
                continue;
            }
            let key = if k == "etcd_endpoints" {
                "etcd-endpoints"
            } else {
                k
            };
            cmd.push(format!("--{key}={}", word(&v.py_str())));
        }
        let backend = test
            .cmd_args
            .get("backend")
            .map_or("unset".into(), |b| b.py_str());
        let tasks = super::per_node(&cmd.join(" "), &backend, at.nodes);
        let wait = super::int(test, "wait_etcd_for").unwrap_or(60);
        let mut steps = super::with_etcd(test, tasks, wait);
        // the rank map and node metadata run on the hosts, as CloudAI writes them
        steps.setup_in_image = false;
        steps.mounts = super::storage_mounts(&test.cmd_args);
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
