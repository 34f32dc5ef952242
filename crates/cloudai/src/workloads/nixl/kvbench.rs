//! CloudAI's `NIXLKVBench`: kvbench's `profile` (`python main.py profile --<key> <value> …`), which runs nixlbench
//! for a model's KV-cache transfers; one process per node under UCX.

use super::{word, ArgSpec, D, T};
use crate::config::test::TestDefinition;

pub(super) static ARGS: &[ArgSpec] = &[
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

/// Fields of the launcher, not kvbench options.
const NOT_OPTIONS: [&str; 3] = ["command", "kvbench_script", "python_executable"];

/// kvbench's command line and the backend it uses.
pub(super) fn command(test: &TestDefinition) -> (String, String) {
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
    (cmd.join(" "), backend)
}
