//! CloudAI's `NIXLBench`: nixlbench with the test's options (`--<key>=<value>` each, extra keys too), one process
//! per node under UCX; its rank map and node metadata run on the hosts, as CloudAI writes them.

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
    ArgSpec::new("path_to_benchmark", T::Str, D::Required).single(),
    ArgSpec::new(
        "etcd_endpoints",
        T::Str,
        D::Str("http://$NIXL_ETCD_ENDPOINTS"),
    )
    .single(),
];

/// nixlbench's command line and the backend it uses.
pub(super) fn command(test: &TestDefinition) -> (String, String) {
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
    (cmd.join(" "), backend)
}
