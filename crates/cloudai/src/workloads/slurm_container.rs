//! CloudAI's `SlurmContainer`: any command in a container image on Slurm, with the test's own `srun` arguments
//! (`extra_srun_args`, on every step of the job) and its `nsys` prefix in the command itself. Graded by its exit
//! status.

use std::path::Path;

use super::{JobOutcome, Launch, Success, Verdict, Workload};
use crate::config::args::{ArgDefault as D, ArgSpec, ArgType as T, ArgValue, CmdArgs};
use crate::config::decode::{Ctx, View};
use crate::config::test::{TemplateSchema, TestDefinition};

pub struct SlurmContainer;

static ARGS: &[ArgSpec] = &[
    ArgSpec::new("docker_image_url", T::Str, D::Required).single(),
    ArgSpec::new("cmd", T::Str, D::Required).single(),
];

static FIELDS: &[ArgSpec] = &[
    ArgSpec::new("extra_srun_args", T::StrList, D::List).single(),
    ArgSpec::new("scripts", T::StrList, D::List).single(),
];

impl TemplateSchema for SlurmContainer {
    fn template(&self) -> &'static str {
        "SlurmContainer"
    }
    fn args(&self) -> &'static [ArgSpec] {
        ARGS
    }
    fn fields(&self) -> &'static [ArgSpec] {
        FIELDS
    }
    /// CloudAI's `scripts` are files it installs; none of its configs use them and this version does not copy
    /// them, so a non-empty list is refused rather than ignored.
    fn validate(&self, ctx: &mut Ctx, v: &View, args: &CmdArgs) {
        // the command is one line of srun in the batch script (BashCmd's is the script itself)
        if args.str("cmd").is_some_and(|c| c.contains('\n')) {
            let loc = v.cmd_arg_loc("cmd");
            ctx.err(
                &loc,
                &crate::config::decode::join(&v.field("cmd_args"), "cmd"),
                "contains a newline: the command is one line of srun in the batch script, where a newline would \
                 split it",
                Some("write the command on one line, or put a multi-line script in a file and run that".into()),
            );
        }
        if let Some(n) = v.get("scripts") {
            if matches!(&n.kind, crate::config::node::Kind::Array(a) if !a.is_empty()) {
                ctx.err(
                    &n.loc,
                    &v.field("scripts"),
                    "files to install are not supported for SlurmContainer by this version",
                    Some("mount them instead: extra_container_mounts = [\"/host/path:/in/container\"]".into()),
                );
            }
        }
    }
}

impl Workload for SlurmContainer {
    /// Its command runs under srun with the test's own srun arguments.
    fn needs(&self) -> super::Needs {
        super::Needs::Srun
    }

    fn launch(&self, test: &TestDefinition, _at: &super::Placement) -> Launch {
        let cmd = test.cmd_args.str("cmd").unwrap_or_default().to_string();
        let mut args = Vec::new();
        super::push_extra_args(test, &mut args);
        let srun: Vec<String> = match test.template_fields.get("extra_srun_args") {
            Some(ArgValue::List(l)) => l.iter().map(ArgValue::py_str).collect(),
            _ => Vec::new(),
        };
        Launch {
            has_profiler: true,
            success: Success::ExitStatus,
            launcher_args: srun,
            ..Launch::process(super::with_nsys(test, cmd), args)
        }
        .in_test_image(test)
    }

    fn grade(&self, _test: &TestDefinition, _dir: &Path, outcome: &JobOutcome) -> Verdict {
        Verdict::from_exit(outcome)
    }
}
