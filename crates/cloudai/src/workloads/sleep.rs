use std::path::Path;

use super::{JobOutcome, Verdict, Workload};
use crate::config::args::{ArgDefault as D, ArgSpec, ArgType as T};
use crate::config::test::{TemplateSchema, TestDefinition};

pub struct Sleep;

static ARGS: &[ArgSpec] = &[
    ArgSpec::new("docker_image_url", T::Str, D::Str("ubuntu:22.04")).single(),
    ArgSpec::new("seconds", T::Int, D::Int(5)),
];

impl TemplateSchema for Sleep {
    fn template(&self) -> &'static str {
        "Sleep"
    }
    fn args(&self) -> &'static [ArgSpec] {
        ARGS
    }
}

impl Workload for Sleep {
    fn schedulers(&self) -> &'static [&'static str] {
        &["standalone", "slurm", "kubernetes"]
    }
    fn command(&self, test: &TestDefinition) -> String {
        let secs = test
            .cmd_args
            .get("seconds")
            .map(|v| v.py_str())
            .unwrap_or_else(|| "5".into());
        format!("sleep {}", crate::util::shell::quote(&secs))
    }
    fn grade(&self, _test: &TestDefinition, _dir: &Path, outcome: &JobOutcome) -> Verdict {
        Verdict::from_exit(outcome)
    }
}
