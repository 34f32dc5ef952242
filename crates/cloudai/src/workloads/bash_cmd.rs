use std::path::Path;

use super::{JobOutcome, Launch, Procs, Success, Verdict, Workload};
use crate::config::args::{ArgDefault as D, ArgSpec, ArgType as T};
use crate::config::test::{TemplateSchema, TestDefinition};

/// An arbitrary shell command, run as is.
pub struct BashCmd;

static ARGS: &[ArgSpec] = &[ArgSpec::new("cmd", T::Str, D::Required).single()];

impl TemplateSchema for BashCmd {
    fn template(&self) -> &'static str {
        "BashCmd"
    }
    fn args(&self) -> &'static [ArgSpec] {
        ARGS
    }
}

impl Workload for BashCmd {
    /// The script as written, with its `nsys` prefix (as CloudAI's `test_cmd`), run by the job itself.
    fn launch(&self, test: &TestDefinition, _at: &super::Placement) -> Launch {
        let script = super::with_nsys(
            test,
            test.cmd_args.str("cmd").unwrap_or_default().to_string(),
        );
        Launch {
            procs: Procs::Script,
            has_profiler: true,
            success: Success::ExitStatus,
            shell_env: false,
            install_mounts: Vec::new(),
            launcher_args: Vec::new(),
            ..Launch::process(script, Vec::new())
        }
    }
    fn grade(&self, _test: &TestDefinition, _dir: &Path, outcome: &JobOutcome) -> Verdict {
        Verdict::from_exit(outcome)
    }
}
