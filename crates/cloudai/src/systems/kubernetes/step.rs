//! The objects of one iteration in order (pre-test hooks, the test, post-test hooks), each with a name that is
//! unique per results tree and the same again when `resume` plans it, and what this system cannot run.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::manifest::{self, Fit, Kind, Limits, Meta, Mpi, Pod};
use crate::config::system::{KubernetesConfig, SystemConfig};
use crate::scenario::TestRun;
use crate::systems::runai::payload;

pub use crate::systems::hooks::StepKind;
use crate::workloads::Success;

#[derive(Clone, Debug)]
pub struct Step {
    pub kind_of: StepKind,
    pub kind: Kind,
    pub name: String,
    /// Written into the object (annotation): an object found under our name is ours only if it matches.
    pub identity: String,
    pub manifest: Value,
    pub dir: PathBuf,
    /// How the step's success is judged when it is a pre-test hook (the workload's rule).
    pub success: Success,
}

impl Step {
    /// The pod role whose log is the step's output, and its container.
    pub fn log_source(&self) -> (&'static str, &'static str) {
        match self.kind {
            Kind::Job => ("main", "main"),
            Kind::MpiJob => ("launcher", "launcher"),
        }
    }

    /// The command the step's output comes from, as a shell would read it.
    pub fn full_cmd(&self) -> String {
        let spec = match self.kind {
            Kind::Job => &self.manifest["spec"]["template"]["spec"],
            Kind::MpiJob => {
                &self.manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
            }
        };
        spec["containers"][0]["command"]
            .as_array()
            .and_then(|c| c.last())
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    }
}

fn build(run: &TestRun, kind_of: StepKind, dir: &Path, ctx: &PlanCtx) -> Step {
    let tag = kind_of.tag();
    // the iteration directory names scenario, test, iteration and hook; the salt, this results tree
    let identity_src = format!("{}|{}", ctx.salt, dir.display());
    let launch = run.launch();
    let per_node = ctx.k.gpus_per_node;
    let mpi_job = launch.across_nodes(run.num_nodes);
    let name = if mpi_job {
        payload::mpi_job_name(&[&run.id, tag], &identity_src, run.num_nodes)
    } else {
        payload::unique_name(&[&run.id, tag], &identity_src)
    };
    let identity = payload::short_hash(&identity_src);
    let dir_s = dir.display().to_string();
    let meta = Meta {
        name: &name,
        namespace: &ctx.k.default_namespace,
        run_tag: &ctx.salt,
        identity: &identity,
        scenario: &ctx.scenario,
        iteration: &ctx.iteration,
        results_dir: &dir_s,
    };
    let mut env = crate::systems::job_env(ctx.cfg, run);
    env.extend(launch.env.iter().cloned());
    let image = launch
        .image
        .as_deref()
        .map(payload::image)
        .unwrap_or_else(|| ctx.k.job_image.clone());
    let fit = Fit {
        sys: ctx.k,
        host_network: ctx.k.pods.host_network(&env),
    };
    let limits = Limits {
        deadline: ctx.k.pods.deadline(run.time_limit, run.max_pending_time),
        ttl: ctx.k.pods.ttl_after_finished,
    };
    let (kind, manifest) = if mpi_job {
        let cmd = crate::workloads::full_command(&launch, &run.test);
        let mpi = Mpi {
            image: &image,
            cmd: &cmd,
            env: &env,
            workers: run.num_nodes,
            slots: launch.ranks_per_node(per_node),
            gpus: launch.gpus_per_node(per_node),
            ssh_port: ctx.k.pods.ssh_port(fit.host_network),
            worker_wait: run.max_pending_time.unwrap_or(600),
        };
        (
            Kind::MpiJob,
            manifest::mpijob(run, &fit, &meta, &mpi, &limits),
        )
    } else {
        let cmd = launch.node_command(&run.test, per_node);
        let pod = Pod {
            role: "main",
            image: &image,
            command: Some(vec!["/bin/bash".into(), "-c".into(), cmd]),
            gpus: launch.gpus_per_node(per_node),
            env: &env,
            restart: "Never",
            pinned: true,
        };
        (Kind::Job, manifest::job(run, &fit, &meta, &pod, &limits))
    };
    Step {
        kind_of,
        kind,
        name,
        identity,
        manifest,
        dir: dir.to_path_buf(),
        success: launch.success,
    }
}

struct PlanCtx<'a> {
    k: &'a KubernetesConfig,
    cfg: &'a SystemConfig,
    salt: String,
    scenario: String,
    iteration: String,
}

/// The steps of one iteration whose results go to `dir` (`<results root>/<test id>/<iteration>`).
pub fn plan(run: &TestRun, k: &KubernetesConfig, cfg: &SystemConfig, dir: &Path) -> Vec<Step> {
    let root = dir.parent().and_then(Path::parent).unwrap_or(dir);
    let file_name = |p: &Path| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let ctx = PlanCtx {
        k,
        cfg,
        salt: payload::short_hash(&root.display().to_string()),
        scenario: file_name(root),
        iteration: file_name(dir),
    };
    let hooks = |h: &Option<std::sync::Arc<crate::scenario::HookScenario>>,
                 kind: StepKind,
                 sub: &str|
     -> Vec<Step> {
        h.iter()
            .flat_map(|h| h.test_runs.iter())
            .map(|tr| build(tr, kind.clone(), &dir.join(sub).join(&tr.test.name), &ctx))
            .collect()
    };
    let mut steps = hooks(&run.pre_test, StepKind::Pre, "pre_test");
    steps.push(build(run, StepKind::Main, dir, &ctx));
    steps.extend(hooks(&run.post_test, StepKind::Post, "post_test"));
    steps
}

/// What cannot run as configured, one sentence each, before anything is created.
pub fn check(run: &TestRun, k: &KubernetesConfig) -> Vec<String> {
    crate::systems::container_checks(run, "Kubernetes", "one pod", k.gpus_per_node)
}
