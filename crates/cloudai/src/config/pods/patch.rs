//! The operator's pod-spec patches (`pod_spec_patch`, `gpu_pod_spec_patch`), merged as `kubectl` merges a pod
//! spec: objects key by key, `null` removes, and lists of named items (containers, init containers, volumes,
//! env, volume mounts, ports) item by item on `name`, so a sidecar is added beside the test's container instead
//! of replacing it. Any other list is replaced whole.

use serde_json::Value;

use crate::config::decode::Ctx;
use crate::config::node::{Kind, Node};

/// Merges `patch` into `target`. Lists whose items are all objects with a `name`, in both, merge by name (an
/// item of the patch updates the item of that name, or is appended); a patch item `{name = "x", "$patch" =
/// "delete"}` removes item x.
pub fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (Value::Array(t), Value::Array(p)) if named(t) && named(p) => {
            for item in p {
                let name = &item["name"];
                let pos = t.iter().position(|x| &x["name"] == name);
                let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
                match (pos, delete) {
                    (Some(i), true) => {
                        t.remove(i);
                    }
                    (None, true) => {}
                    (Some(i), false) => merge(&mut t[i], item),
                    (None, false) => t.push(item.clone()),
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

/// The patch as it applies to a pod whose test container is `role`: a `containers` item named after a test
/// container addresses that container where the pod has it — `worker` and `main` both name the container that
/// runs the GPU ranks (an MPIJob's workers, a one-node Job) — and is left out of the pods that do not.
pub(crate) fn for_pod(patch: &Value, role: &str) -> Value {
    let mut p = patch.clone();
    if let Some(items) = p.get_mut("containers").and_then(Value::as_array_mut) {
        let gpu = |n: &str| n == "worker" || n == "main";
        items.retain_mut(|it| {
            let Some(name) = it["name"].as_str().map(str::to_string) else {
                return true;
            };
            if !TEST_CONTAINERS.contains(&name.as_str()) || name == role {
                return true;
            }
            if gpu(&name) && gpu(role) {
                it["name"] = role.into();
                return true;
            }
            false
        });
    }
    p
}

/// Every item an object with a string `name` (an empty list qualifies).
fn named(items: &[Value]) -> bool {
    items.iter().all(|i| i["name"].is_string())
}

/// Lists of a pod spec that merge by name, and what a patch must not do to the test's container.
const CONTAINER_LISTS: &[&str] = &["containers", "initContainers"];

/// Checks a patch (a TOML table, at `field`) before it is used: its container lists must be lists of named
/// tables, and it must not remove the test's containers (`main`, `launcher`, `worker`).
pub fn check(ctx: &mut Ctx, n: &Node, field: &str) {
    let Kind::Table(t) = &n.kind else { return };
    for (k, e) in &t.entries {
        let at = format!("{field}.{k}");
        if !CONTAINER_LISTS.contains(&k.as_str()) {
            continue;
        }
        let Kind::Array(items) = &e.node.kind else {
            ctx.err(
                &e.node.loc,
                &at,
                format!("{k} must be a list of containers, each with a name"),
                Some(format!(
                    "write `{k} = [{{ name = \"sidecar\", image = \"...\" }}]`: items merge by name with the \
                     test's containers"
                )),
            );
            continue;
        };
        for (i, it) in items.iter().enumerate() {
            let Kind::Table(c) = &it.kind else {
                ctx.type_err(
                    it,
                    &format!("{at}.{i}"),
                    "a table (a container with a name)",
                );
                continue;
            };
            let name = c.entries.get("name").and_then(|e| match &e.node.kind {
                Kind::Str(s) => Some(s.as_str()),
                _ => None,
            });
            let Some(name) = name else {
                ctx.err(
                    &it.loc,
                    &format!("{at}.{i}.name"),
                    "a container of a pod-spec patch needs a name",
                    Some(
                        "items merge by name: name the test's container (main, launcher, worker) to change it, \
                         any other name to add one"
                            .into(),
                    ),
                );
                continue;
            };
            let deletes = c
                .entries
                .get("$patch")
                .is_some_and(|e| matches!(&e.node.kind, Kind::Str(s) if s == "delete"));
            if deletes && k == "containers" && TEST_CONTAINERS.contains(&name) {
                ctx.err(
                    &it.loc,
                    &format!("{at}.{i}"),
                    format!("this patch would remove the test's container {name:?}: the test would never run"),
                    Some("remove the `$patch = \"delete\"` item".into()),
                );
            }
        }
    }
}

/// The containers cloudai puts in its pods: the test's own (`main`) or an MPIJob's launcher and workers.
pub(crate) const TEST_CONTAINERS: &[&str] = &["main", "launcher", "worker"];

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn named_lists_merge_by_name_and_the_rest_is_replaced() {
        let mut spec = json!({
            "containers": [{"name": "worker", "image": "a", "env": [{"name": "X", "value": "1"}]}],
            "volumes": [{"name": "dev-shm", "emptyDir": {}}],
            "tolerations": [{"operator": "Exists"}],
            "dnsPolicy": "ClusterFirst",
        });
        merge(
            &mut spec,
            &json!({
                "containers": [
                    {"name": "tcpxo-daemon", "image": "d"},
                    {"name": "worker", "env": [{"name": "Y", "value": "2"}, {"name": "X", "value": "3"}]},
                ],
                "volumes": [{"name": "libraries", "hostPath": {"path": "/home/kubernetes/bin/nvidia/lib64"}}],
                "tolerations": [{"key": "k", "operator": "Exists"}],
                "dnsPolicy": null,
            }),
        );
        assert_eq!(
            spec,
            json!({
                "containers": [
                    {"name": "worker", "image": "a", "env": [{"name": "X", "value": "3"}, {"name": "Y", "value": "2"}]},
                    {"name": "tcpxo-daemon", "image": "d"},
                ],
                "volumes": [{"name": "dev-shm", "emptyDir": {}},
                            {"name": "libraries", "hostPath": {"path": "/home/kubernetes/bin/nvidia/lib64"}}],
                "tolerations": [{"key": "k", "operator": "Exists"}],
            })
        );
        merge(
            &mut spec,
            &json!({"volumes": [{"name": "libraries", "$patch": "delete"}]}),
        );
        // an item for the GPU container reaches a one-node Job's `main`, and no launcher
        let p = json!({"containers": [{"name": "worker", "env": []}, {"name": "launcher", "env": []}, {"name": "s"}]});
        assert_eq!(
            for_pod(&p, "main")["containers"],
            json!([{"name": "main", "env": []}, {"name": "s"}])
        );
        assert_eq!(
            for_pod(&p, "launcher")["containers"],
            json!([{"name": "launcher", "env": []}, {"name": "s"}])
        );
        assert_eq!(
            spec["volumes"],
            json!([{"name": "dev-shm", "emptyDir": {}}])
        );
    }
}
