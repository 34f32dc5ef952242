use std::path::Path;

use super::{JobOutcome, Launch, Verdict, Workload};
use crate::config::args::{ArgDefault as D, ArgSpec, ArgType as T};
use crate::config::test::{TemplateSchema, TestDefinition};

pub struct Sleep;

static ARGS: &[ArgSpec] = &[
    ArgSpec::new("docker_image_url", T::Str, D::Str("ubuntu:22.04")).single(),
    ArgSpec::new("seconds", T::Int, D::Int(5)).at_least(0),
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
    fn launch(&self, test: &TestDefinition, _at: &super::Placement) -> Launch {
        let secs = test
            .cmd_args
            .get("seconds")
            .map(|v| v.py_str())
            .unwrap_or_else(|| "5".into());
        Launch::process("sleep", vec![crate::util::shell::quote(&secs).into_owned()])
    }
    fn grade(&self, _test: &TestDefinition, _dir: &Path, outcome: &JobOutcome) -> Verdict {
        Verdict::from_exit(outcome)
    }
}
