//! Quarantine on the real Slurm test cluster: cloudai's drains carry its mark and are kept in the ledger; an
//! admin's drain is reported and never lifted; `quarantine release` gives back only ours; a kill -9 around the
//! resume ends released with one resume; the blast-radius guard counts the nodes already held.

use std::process::Command;

use crate::common;
use crate::slurm_faults::{find_bad_nodes_with, lock, node_state, Resume};

fn slow(node: &str) -> String {
    format!(r#"scontrol show hostnames "$SLURM_JOB_NODELIST" | grep -qx {node}"#)
}

fn cloudai(ledger: &std::path::Path, w: &common::Work) -> Command {
    let mut c = Command::new(assert_cmd::cargo::cargo_bin("cloudai"));
    c.current_dir(w.path())
        .arg("--ledger")
        .arg(ledger)
        .env_remove("CLOUDAI_SYSTEM_CONFIG");
    c
}

fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn drained(node: &str) -> bool {
    let (st, _) = node_state(node);
    st.starts_with("drain") || st.starts_with("drng")
}

#[test]
fn release_gives_back_only_ours_and_an_admins_drain_is_reported_never_lifted() {
    let _g = lock();
    if !common::slurm::cluster_up() {
        return;
    }
    let (_r2, _r3) = (Resume("node002"), Resume("node003"));
    let d = tempfile::tempdir().unwrap();
    let ledger = d.path().join("ledger.sqlite");
    let ok = Command::new("scontrol")
        .args([
            "update",
            "nodename=node002",
            "state=drain",
            "reason=admin: swap PSU",
        ])
        .status()
        .unwrap();
    assert!(ok.success());
    let (code, out, report, w) = find_bad_nodes_with(
        &slow("node003"),
        &[
            "--drain",
            "--max-act-fraction",
            "50",
            "--min-busbw",
            "100",
            "--ledger",
            ledger.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 3, "{out}");
    assert_eq!(report["bad"], serde_json::json!(["node003"]), "{report}");
    let (_, reason) = node_state("node003");
    assert!(reason.starts_with("cloudai:find-bad-nodes_"), "{reason}");
    let undo = report["actions"][0]["undo"].as_str().unwrap();
    assert!(undo.contains("quarantine release node003"), "{undo}");

    let list = cloudai(&ledger, &w)
        .args([
            "quarantine",
            "list",
            "--json",
            "--system-config",
            "system.toml",
            "--nodes",
            "node[001-004]",
        ])
        .output()
        .unwrap();
    assert!(list.status.success(), "{}", text(&list));
    let v: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(v["held"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["held"][0]["node"], "node003");
    assert_eq!(v["held"][0]["state"], "quarantined");
    let others = v["out_of_service_by_others"].as_array().unwrap();
    assert!(
        others
            .iter()
            .any(|o| o["node"] == "node002"
                && o["reason"].as_str().unwrap().contains("admin: swap PSU")),
        "{v}"
    );

    // release both: ours goes back, the admin's stays, and the refusal makes the exit code non-zero
    let rel = cloudai(&ledger, &w)
        .args([
            "quarantine",
            "release",
            "node002",
            "node003",
            "--system-config",
            "system.toml",
        ])
        .output()
        .unwrap();
    let said = text(&rel);
    assert_eq!(rel.status.code(), Some(1), "{said}");
    assert!(said.contains("node002: not ours"), "{said}");
    assert!(!drained("node003"), "{said}");
    assert!(drained("node002"));
    assert!(node_state("node002").1.contains("admin: swap PSU"));
    let all = cloudai(&ledger, &w)
        .args([
            "quarantine",
            "list",
            "--json",
            "--all",
            "--system-config",
            "system.toml",
            "--nodes",
            "node[001-004]",
        ])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&all.stdout).unwrap();
    assert_eq!(v["held"][0]["state"], "released", "{v}");
}

#[test]
fn a_kill_9_around_the_resume_ends_released_with_one_resume() {
    let _g = lock();
    if !common::slurm::cluster_up() {
        return;
    }
    let real = String::from_utf8(
        Command::new("sh")
            .args(["-c", "command -v scontrol"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .to_string();
    for mode in ["before", "after"] {
        let _r3 = Resume("node003");
        let d = tempfile::tempdir().unwrap();
        let ledger = d.path().join("ledger.sqlite");
        let (code, out, _, w) = find_bad_nodes_with(
            &slow("node003"),
            &["--drain", "--ledger", ledger.to_str().unwrap()],
        );
        assert_eq!(code, 3, "{out}");
        assert!(drained("node003"));
        // an scontrol that kills its cloudai just before or just after the resume reaches Slurm
        let bin = d.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let log = d.path().join("resumes.log");
        std::fs::write(d.path().join("mode"), mode).unwrap();
        let wrapper = bin.join("scontrol");
        std::fs::write(
            &wrapper,
            format!(
                r#"#!/bin/bash
mode=$(cat {dir}/mode)
case "$*" in *state=resume*)
  [ "$mode" = before ] && {{ kill -9 $PPID; exit 1; }}
  echo "$*" >> {log}
  {real} "$@"; rc=$?
  [ "$mode" = after ] && kill -9 $PPID
  exit $rc;;
esac
exec {real} "$@"
"#,
                dir = d.path().display(),
                log = log.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(
            &wrapper,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
        let killed = cloudai(&ledger, &w)
            .env("PATH", &path)
            .args([
                "quarantine",
                "release",
                "node003",
                "--system-config",
                "system.toml",
            ])
            .output()
            .unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&killed.status),
            Some(9),
            "{mode}: {}",
            text(&killed)
        );
        // the next cloudai finishes what the killed one left: the resume done once, the record released
        std::fs::write(d.path().join("mode"), "pass").unwrap();
        let list = cloudai(&ledger, &w)
            .env("PATH", &path)
            .args([
                "quarantine",
                "list",
                "--json",
                "--all",
                "--system-config",
                "system.toml",
                "--nodes",
                "node[001-004]",
            ])
            .output()
            .unwrap();
        assert!(list.status.success(), "{mode}: {}", text(&list));
        let v: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
        assert_eq!(v["held"][0]["state"], "released", "{mode}: {v}");
        assert!(!drained("node003"), "{mode}");
        let resumes = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .count();
        assert_eq!(resumes, 1, "{mode}: resumes run {resumes}");
    }
}

#[test]
fn the_blast_radius_guard_counts_the_nodes_already_held() {
    let _g = lock();
    if !common::slurm::cluster_up() {
        return;
    }
    let (_r2, _r3) = (Resume("node002"), Resume("node003"));
    let d = tempfile::tempdir().unwrap();
    let ledger = d.path().join("ledger.sqlite");
    let (code, out, _, _w) = find_bad_nodes_with(
        &slow("node003"),
        &["--drain", "--ledger", ledger.to_str().unwrap()],
    );
    assert_eq!(code, 3, "{out}");
    assert!(drained("node003"));
    // node003 is held (left out of the sweep); node002 slow now: 2 of 4 would be out, more than 25 %
    let (code, out, report, _w) = find_bad_nodes_with(
        &slow("node002"),
        &[
            "--drain",
            "--min-busbw",
            "100",
            "--ledger",
            ledger.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 3, "{out}");
    assert_eq!(report["bad"], serde_json::json!(["node002"]), "{report}");
    let refused = report["actions_refused"].as_str().unwrap_or_default();
    assert!(
        refused.contains("already held by cloudai: node003"),
        "{report}"
    );
    assert!(!drained("node002"));
}

fn reservations() -> String {
    String::from_utf8_lossy(
        &Command::new("scontrol")
            .args(["show", "reservation", "-o"])
            .output()
            .unwrap()
            .stdout,
    )
    .into_owned()
}

#[test]
fn requalify_releases_after_k_passes_keeps_a_slow_node_and_leaves_an_admins_drain() {
    let _g = lock();
    if !common::slurm::cluster_up() {
        return;
    }
    let (_r2, _r3) = (Resume("node002"), Resume("node003"));
    let d = tempfile::tempdir().unwrap();
    let ledger = d.path().join("ledger.sqlite");
    let l = ledger.to_str().unwrap();
    let (code, out, _, w) = find_bad_nodes_with(&slow("node003"), &["--drain", "--ledger", l]);
    assert_eq!(code, 3, "{out}");
    assert!(drained("node003"));
    // a dry run says exactly what would run, and runs none of it
    let dry = w
        .cloudai_with_bin()
        .args(common::FIND_BAD_NODES_NCCL)
        .args([
            "--nodes",
            "node[001-004]",
            "--requalify",
            "--dry-run",
            "--ledger",
            l,
        ])
        .output()
        .unwrap();
    let said = text(&dry);
    assert!(dry.status.success(), "{said}");
    assert!(
        said.contains("scontrol create reservation ReservationName=cloudai-requalify-"),
        "{said}"
    );
    assert!(
        said.contains("scontrol update nodename=node003 state=resume"),
        "{said}"
    );
    assert!(drained("node003"));
    assert!(
        !reservations().contains("cloudai-requalify"),
        "{}",
        reservations()
    );
    // an admin drains node002 meanwhile: requalification never touches it
    assert!(Command::new("scontrol")
        .args([
            "update",
            "nodename=node002",
            "state=drain",
            "reason=admin: firmware"
        ])
        .status()
        .unwrap()
        .success());

    // still slow: a failed requalification, counted; drained again with the new evidence
    let (code, out, report, _w) = find_bad_nodes_with(
        &slow("node003"),
        &["--requalify", "--ledger", l, "--min-busbw", "100"],
    );
    assert_eq!(code, 3, "{out}");
    assert_eq!(report[0]["node"], "node003", "{report}");
    assert_eq!(report[0]["what"], "quarantined", "{report}");
    assert!(
        report[0]["detail"]
            .as_str()
            .unwrap()
            .contains("failed requalification 1"),
        "{report}"
    );
    assert!(drained("node003"));
    assert!(
        node_state("node003").1.starts_with("cloudai:"),
        "{:?}",
        node_state("node003")
    );
    assert!(
        !reservations().contains("cloudai-requalify"),
        "{}",
        reservations()
    );

    // healthy now: the first pass keeps it out (K = 2), the second releases it
    for (k, want) in [(1, "quarantined"), (2, "released")] {
        let (code, out, report, _w) = find_bad_nodes_with(
            "false",
            &["--requalify", "--ledger", l, "--min-busbw", "100"],
        );
        assert_eq!(code, 0, "pass {k}: {out}");
        assert_eq!(report[0]["what"], want, "pass {k}: {report}");
        assert!(
            !reservations().contains("cloudai-requalify"),
            "{}",
            reservations()
        );
    }
    assert!(!drained("node003"), "{:?}", node_state("node003"));
    assert!(drained("node002"));
    assert!(node_state("node002").1.contains("admin: firmware"));
}

/// Kubernetes on the test API server: `--cordon` quarantines with our annotation and taint; an admin's cordon is
/// never lifted; a concurrent change between our read and our write makes our write fail (the resourceVersion
/// precondition) and theirs stands; `quarantine release` gives back ours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_quarantine_owns_its_cordon_and_loses_to_a_concurrent_change() {
    use common::kube::{cluster_of, sample, setup, Act};
    let Some(c) = cluster_of("k8s-quar", Act::Succeed, 4).await else {
        return;
    };
    let good = sample("multinode-2x8-h100-allreduce-kubeflow-mpijob.txt");
    let slow = c.nodes[2].clone();
    let admin = c.nodes[3].clone();
    {
        let mut logs = c.logs.lock().unwrap();
        logs.insert("launcher".into(), good.clone());
        logs.insert(format!("launcher@{slow}"), common::scaled(&good, 0, 0.2));
    }
    let api: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(c.client.clone());
    let merge = |v: serde_json::Value| kube::api::Patch::Merge(v);
    let pp = kube::api::PatchParams::default();
    api.patch(
        &admin,
        &pp,
        &merge(serde_json::json!({"spec": {"unschedulable": true}})),
    )
    .await
    .unwrap();
    let w = setup(&c, "", "name = \"unused\"\n");
    let ledger = w.path().join("ledger.sqlite");
    let l = ledger.clone();
    let dir = w.path().to_path_buf();
    let nodes = c.nodes.join(",");
    let run = move |args: Vec<String>| {
        let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("cloudai"));
        cmd.current_dir(&dir).arg("--ledger").arg(&l).args(args);
        cmd.output().unwrap()
    };
    let r = run.clone();
    let args: Vec<String> = common::FIND_BAD_NODES_NCCL
        .iter()
        .map(|s| s.to_string())
        .chain([
            "--nodes".into(),
            nodes.clone(),
            "--cordon".into(),
            "--max-act-fraction".into(),
            "50".into(),
        ])
        .collect();
    let out = tokio::task::spawn_blocking(move || r(args)).await.unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let v = serde_json::to_value(api.get(&slow).await.unwrap()).unwrap();
    let tag = v["metadata"]["annotations"]["cloudai.io/quarantined-by"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(tag.starts_with("cloudai:find-bad-nodes_"), "{v}");
    assert_eq!(v["spec"]["unschedulable"], true);

    // list: ours held, the admin's cordon reported
    let r = run.clone();
    let n = nodes.clone();
    let out = tokio::task::spawn_blocking(move || {
        r([
            "quarantine",
            "list",
            "--json",
            "--system-config",
            "system.toml",
            "--nodes",
            &n,
        ]
        .map(String::from)
        .to_vec())
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed["held"][0]["node"], slow.as_str(), "{listed}");
    assert!(
        listed["out_of_service_by_others"]
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["node"] == admin.as_str()),
        "{listed}"
    );

    // a concurrent uncordon between our read and our write: our write fails, theirs stands
    let sys = cloudai::config::system::load(&w.path().join("system.toml")).unwrap();
    let cloudai::config::system::SystemKind::Kubernetes(k) = sys.kind.clone() else {
        panic!("not a Kubernetes system")
    };
    let tag2 = tag.clone();
    let (api2, slow2) = (api.clone(), slow.clone());
    let err = tokio::task::spawn_blocking(move || {
        let kq = cloudai::systems::kubernetes::quarantine::Kube::new(k).unwrap();
        let (name, rv, seen, _) = kq.read(&slow2).unwrap();
        assert_eq!(seen, cloudai::quarantine::Seen::Ours(tag2));
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(api2.patch(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"spec": {"unschedulable": null}})),
        ))
        .unwrap();
        kq.patch_at(
            &name,
            &rv,
            serde_json::json!({"metadata": {"annotations": {"cloudai.io/quarantined-by": null}}}),
        )
        .unwrap_err()
    })
    .await
    .unwrap();
    assert!(
        matches!(&err, cloudai::quarantine::QuarantineError::Raced { node } if *node == slow),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("changed between our read and our write"),
        "{err}"
    );
    let v = serde_json::to_value(api.get(&slow).await.unwrap()).unwrap();
    assert_eq!(
        v["metadata"]["annotations"]["cloudai.io/quarantined-by"],
        tag.as_str(),
        "our write was made: {v}"
    );

    // release: ours (our taint still on it) goes back; the admin's cordon stays, and that is said
    let r = run.clone();
    let (s, a) = (slow.clone(), admin.clone());
    let out = tokio::task::spawn_blocking(move || {
        r([
            "quarantine",
            "release",
            &s,
            &a,
            "--system-config",
            "system.toml",
        ]
        .map(String::from)
        .to_vec())
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("{admin}: not ours")),
        "{}",
        text(&out)
    );
    let v = serde_json::to_value(api.get(&slow).await.unwrap()).unwrap();
    assert!(
        v["metadata"]["annotations"]["cloudai.io/quarantined-by"].is_null(),
        "{v}"
    );
    assert!(
        !v["spec"]["taints"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|t| t["key"] == "cloudai.io/bad-node"),
        "{v}"
    );
    let v = serde_json::to_value(api.get(&admin).await.unwrap()).unwrap();
    assert_eq!(
        v["spec"]["unschedulable"], true,
        "the admin's cordon was lifted: {v}"
    );
}

/// Kubernetes requalification: the held node is uncordoned with our taint kept, the test's pods tolerate it; still
/// slow → cordoned again and counted; healthy → released (uncordoned, our taint and annotation gone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_requalify_keeps_a_slow_node_and_releases_a_healthy_one() {
    use common::kube::{cluster_of, sample, setup, Act};
    let Some(c) = cluster_of("k8s-requal", Act::Succeed, 4).await else {
        return;
    };
    let good = sample("multinode-2x8-h100-allreduce-kubeflow-mpijob.txt");
    let slow = c.nodes[2].clone();
    {
        let mut logs = c.logs.lock().unwrap();
        logs.insert("launcher".into(), good.clone());
        logs.insert(format!("launcher@{slow}"), common::scaled(&good, 0, 0.2));
    }
    let api: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(c.client.clone());
    let w = setup(&c, "", "name = \"unused\"\n");
    let dir = w.path().to_path_buf();
    let ledger = dir.join("ledger.sqlite");
    let nodes = c.nodes.join(",");
    let run = move |extra: &[&str]| {
        let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("cloudai"));
        cmd.current_dir(&dir)
            .arg("--ledger")
            .arg(&ledger)
            .args(common::FIND_BAD_NODES_NCCL)
            .args(["--nodes", &nodes, "--output-dir", "out"])
            .args(extra);
        cmd.output().unwrap()
    };
    let r = run.clone();
    let out = tokio::task::spawn_blocking(move || r(&["--cordon"]))
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let state = |v: &serde_json::Value| {
        (
            v["spec"]["unschedulable"] == true,
            v["spec"]["taints"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|t| t["key"] == "cloudai.io/bad-node"),
            v["metadata"]["annotations"]["cloudai.io/quarantined-by"].is_string(),
        )
    };
    assert_eq!(
        state(&serde_json::to_value(api.get(&slow).await.unwrap()).unwrap()),
        (true, true, true)
    );

    // still slow: counted, out again
    let r = run.clone();
    let out = tokio::task::spawn_blocking(move || {
        r(&["--requalify", "--passes", "1", "--min-busbw", "100"])
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        text(&out).contains("failed requalification 1"),
        "{}",
        text(&out)
    );
    assert_eq!(
        state(&serde_json::to_value(api.get(&slow).await.unwrap()).unwrap()),
        (true, true, true)
    );
    // the requalification's pods tolerate our taint
    let manifests: Vec<String> = walk(w.path())
        .into_iter()
        .filter(|p| p.ends_with("k8s-manifest.yaml") && p.to_string_lossy().contains("requalify-1"))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    assert!(!manifests.is_empty());
    assert!(
        manifests.iter().all(|m| m.contains("cloudai.io/bad-node")),
        "{manifests:?}"
    );

    // healthy now: released
    c.logs
        .lock()
        .unwrap()
        .insert(format!("launcher@{slow}"), good.clone());
    let r = run.clone();
    let out = tokio::task::spawn_blocking(move || {
        r(&["--requalify", "--passes", "1", "--min-busbw", "100"])
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        state(&serde_json::to_value(api.get(&slow).await.unwrap()).unwrap()),
        (false, false, false)
    );
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// `--requalify --checks kernel-log`: the evidence tier runs first in the window; a held node whose kernel log
/// shows a fresh Xid fails its requalification with that evidence and spends no pair.
#[test]
fn requalify_with_evidence_first_fails_a_node_its_kernel_log_condemns() {
    let _g = lock();
    if !common::slurm::cluster_up() {
        return;
    }
    let _r3 = Resume("node003");
    let d = tempfile::tempdir().unwrap();
    let ledger = d.path().join("ledger.sqlite");
    let l = ledger.to_str().unwrap();
    let (code, out, _, _w) = find_bad_nodes_with(
        &slow("node003"),
        &["--drain", "--min-busbw", "100", "--ledger", l],
    );
    assert_eq!(code, 3, "{out}");
    let when = chrono::Local::now() - chrono::Duration::minutes(10);
    let line = format!(
        "[{}] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus.",
        when.format("%a %b %e %H:%M:%S %Y")
    );
    let dmesg = format!(
        "#!/bin/bash\necho '[Mon Jan  1 00:00:00 2024] Linux version 6.1'\n\
         [ \"$SLURMD_NODENAME\" = node003 ] && echo '{line}'\nexit 0\n"
    );
    let (code, out, report, w) = crate::slurm_faults::find_bad_nodes_full(
        common::slurm::SYSTEM,
        "node[001-004]",
        "false",
        &[
            "--requalify",
            "--checks",
            "kernel-log",
            "--min-busbw",
            "100",
            "--ledger",
            l,
        ],
        &[("dmesg", dmesg)],
    );
    assert_eq!(code, 3, "{out}");
    assert_eq!(report[0]["node"], "node003", "{report}");
    assert_eq!(report[0]["what"], "quarantined", "{report}");
    let detail = report[0]["detail"].as_str().unwrap();
    assert!(
        detail.contains("node evidence") && detail.contains("Xid 79"),
        "{detail}"
    );
    assert!(
        !w.results_root().join("requalify-1").exists(),
        "a pair ran for a condemned node"
    );
    assert!(drained("node003"));
    assert!(
        !reservations().contains("cloudai-requalify"),
        "{}",
        reservations()
    );
}

/// The requalification benchmark (bench/results.txt): `cargo test -p cloudai --test tests -- --ignored
/// quarantine::requalify_bench --nocapture` on the 16-node test cluster. N nodes quarantined by a sweep, then
/// requalified healthy with K = 1: jobs, rounds and wall time (target: one round of N pair jobs).
#[test]
#[ignore]
fn requalify_bench() {
    let _g = lock();
    if !common::slurm::cluster_up() {
        return;
    }
    let system = common::slurm::SYSTEM
        .replace(
            r#"default_partition = "debug""#,
            r#"default_partition = "wide""#,
        )
        .replace(r#"name = "debug""#, r#"name = "wide""#)
        .replace(
            r#"nodes = ["node[001-004]"]"#,
            r#"nodes = ["node[001-016]"]"#,
        );
    for n in [1usize, 4, 8] {
        let held: Vec<String> = (17 - n..=16).map(|i| format!("node{i:03}")).collect();
        let _guards: Vec<Resume> = held
            .iter()
            .map(|h| Resume(Box::leak(h.clone().into_boxed_str())))
            .collect();
        let d = tempfile::tempdir().unwrap();
        let l = d.path().join("l.sqlite");
        let l = l.to_str().unwrap();
        let slow = format!(
            r#"scontrol show hostnames "$SLURM_JOB_NODELIST" | grep -qx {}"#,
            held.iter()
                .map(|h| format!("-e {h}"))
                .collect::<Vec<_>>()
                .join(" ")
        );
        let (code, out, _, _w) = crate::slurm_faults::find_bad_nodes_full(
            &system,
            "node[001-016]",
            &slow,
            &[
                "--drain",
                "--max-act-fraction",
                "100",
                "--min-busbw",
                "100",
                "--ledger",
                l,
            ],
            &[],
        );
        assert_eq!(code, 3, "{out}");
        assert!(held.iter().all(|h| drained(h)), "{out}");
        let t = std::time::Instant::now();
        let (code, out, report, w) = crate::slurm_faults::find_bad_nodes_full(
            &system,
            "node[001-016]",
            "false",
            &[
                "--requalify",
                "--passes",
                "1",
                "--min-busbw",
                "100",
                "--ledger",
                l,
            ],
            &[],
        );
        let secs = t.elapsed().as_secs_f64();
        assert_eq!(code, 0, "{out}");
        let root = w.results_root();
        let rounds: Vec<_> = std::fs::read_dir(&root)
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name().to_string_lossy().starts_with("requalify-") && e.path().is_dir()
            })
            .collect();
        let jobs: usize = rounds
            .iter()
            .map(|r| {
                std::fs::read_dir(r.path())
                    .unwrap()
                    .flatten()
                    .filter(|e| e.path().is_dir())
                    .count()
            })
            .sum();
        let released = report
            .as_array()
            .unwrap()
            .iter()
            .filter(|o| o["what"] == "released")
            .count();
        println!(
            "requalify {n:>2} quarantined node(s) of 16: {jobs} pair job(s) in {} round(s), {released} released, \
             {secs:.1} s wall",
            rounds.len()
        );
    }
}

/// kill -9 of find-bad-nodes just before and just after its drain reaches Slurm: the next cloudai finishes the
/// quarantine (drained once, with our mark, recorded quarantined).
#[test]
fn a_kill_9_around_the_drain_ends_quarantined_with_one_drain() {
    let _g = lock();
    if !common::slurm::cluster_up() {
        return;
    }
    let real = String::from_utf8(
        Command::new("sh")
            .args(["-c", "command -v scontrol"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .to_string();
    for mode in ["before", "after"] {
        let _r3 = Resume("node003");
        let d = tempfile::tempdir().unwrap();
        let ledger = d.path().join("ledger.sqlite");
        let log = d.path().join("drains.log");
        // jobs call scontrol too (show hostnames): only the drain is intercepted
        let wrapper = format!(
            r#"#!/bin/bash
case "$*" in *state=drain*)
  [ "{mode}" = before ] && {{ kill -9 $PPID; exit 1; }}
  echo "$*" >> {log}
  {real} "$@"; rc=$?
  [ "{mode}" = after ] && kill -9 $PPID
  exit $rc;;
esac
exec {real} "$@"
"#,
            log = log.display()
        );
        let (code, out, _, w) = crate::slurm_faults::find_bad_nodes_full(
            common::slurm::SYSTEM,
            "node[001-004]",
            &slow("node003"),
            &[
                "--drain",
                "--min-busbw",
                "100",
                "--ledger",
                ledger.to_str().unwrap(),
            ],
            &[("scontrol", wrapper)],
        );
        assert_eq!(code, -1, "{mode}: not killed: {out}");
        assert_eq!(drained("node003"), mode == "after", "{mode}");
        // the next cloudai (any quarantine command) finishes it, with the real scontrol
        let list = cloudai(&ledger, &w)
            .args([
                "quarantine",
                "list",
                "--json",
                "--system-config",
                "system.toml",
                "--nodes",
                "node[001-004]",
            ])
            .output()
            .unwrap();
        assert!(list.status.success(), "{mode}: {}", text(&list));
        let v: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
        assert_eq!(v["held"][0]["node"], "node003", "{mode}: {v}");
        assert_eq!(v["held"][0]["state"], "quarantined", "{mode}: {v}");
        assert_eq!(v["finished"][0]["node"], "node003", "{mode}: {v}");
        assert!(drained("node003"), "{mode}");
        assert!(node_state("node003").1.starts_with("cloudai:"), "{mode}");
        let drains = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .count();
        // after: the killed one drained (logged); before: the next cloudai did (the real scontrol, not logged)
        assert_eq!(drains, usize::from(mode == "after"), "{mode}");
    }
}
