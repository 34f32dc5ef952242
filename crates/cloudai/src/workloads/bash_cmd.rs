use std::path::Path;

use super::{JobOutcome, Verdict, Workload};
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
    fn schedulers(&self) -> &'static [&'static str] {
        &["standalone", "slurm", "kubernetes"]
    }
    fn command(&self, test: &TestDefinition) -> String {
        super::with_nsys(
            test,
            test.cmd_args.str("cmd").unwrap_or_default().to_string(),
        )
    }
    fn in_batch_script(&self) -> bool {
        true
    }
    fn hook_check(&self, _dir: &Path) -> String {
        "[ $? -eq 0 ] && echo 1 || echo 0".into()
    }
    fn grade(&self, _test: &TestDefinition, _dir: &Path, outcome: &JobOutcome) -> Verdict {
        Verdict::from_exit(outcome)
    }
}
