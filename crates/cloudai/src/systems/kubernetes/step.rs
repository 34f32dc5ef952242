//! The objects of one iteration in order (pre-test hooks, the test, post-test hooks), each with a name that is
//! unique per results tree and the same again when `resume` plans it, and what this system cannot run.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::manifest::{self, Command, Kind, Meta};
use crate::config::system::{KubernetesConfig, SystemConfig};
use crate::scenario::TestRun;
use crate::systems::runai::payload;

pub use crate::systems::hooks::StepKind;

#[derive(Clone, Debug)]
pub struct Step {
    pub kind_of: StepKind,
    pub kind: Kind,
    pub name: String,
    /// Written into the object (annotation): an object found under our name is ours only if it matches.
    pub identity: String,
    pub manifest: Value,
    pub dir: PathBuf,
    /// A hook passes only when its output shows the NCCL summary (CloudAI's hook check).
    pub check_output: bool,
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

fn is_nccl(run: &TestRun) -> bool {
    run.test.test_template_name == "NcclTest"
}

/// Ranks per worker of an MPIJob: the node's GPUs shared among processes of `ngpus` × `nthreads` GPUs each.
fn slots(run: &TestRun, k: &KubernetesConfig) -> u64 {
    let per_node = k.gpus_per_node.max(1);
    (per_node / payload::gpus_per_process(run).min(per_node)).max(1)
}

fn build(run: &TestRun, kind_of: StepKind, dir: &Path, ctx: &PlanCtx) -> Step {
    let tag = kind_of.tag();
    // the iteration directory names scenario, test, iteration and hook; the salt, this results tree
    let identity_src = format!("{}|{}", ctx.salt, dir.display());
    let name = payload::unique_name(&[&run.id, tag], &identity_src);
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
    let env = crate::systems::job_env(ctx.cfg, run);
    let cmd = run.workload.command(&run.test);
    let (kind, manifest) = if is_nccl(run) {
        let image = payload::image(run.test.cmd_args.str("docker_image_url").unwrap_or(""));
        if run.num_nodes > 1 {
            let c = Command {
                image,
                cmd,
                gpus: ctx.k.gpus_per_node,
                env: &env,
            };
            (
                Kind::MpiJob,
                manifest::mpijob(run, ctx.k, &meta, &c, slots(run, ctx.k)),
            )
        } else {
            let c = Command {
                image,
                cmd,
                gpus: payload::gpus_per_process(run),
                env: &env,
            };
            (Kind::Job, manifest::job(run, ctx.k, &meta, &c))
        }
    } else {
        let image = run
            .workload
            .container_image(&run.test)
            .map(|i| payload::image(&i))
            .unwrap_or_else(|| ctx.k.job_image.clone());
        let c = Command {
            image,
            cmd,
            gpus: 0,
            env: &env,
        };
        (Kind::Job, manifest::job(run, ctx.k, &meta, &c))
    };
    Step {
        kind_of,
        kind,
        name,
        identity,
        manifest,
        dir: dir.to_path_buf(),
        check_output: is_nccl(run),
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
pub fn check(run: &TestRun, k: &KubernetesConfig, system: &str) -> Vec<String> {
    let mut out = Vec::new();
    if !is_nccl(run) {
        return out;
    }
    let image = run.test.cmd_args.str("docker_image_url").unwrap_or("");
    if let Some(why) = crate::systems::runai::image_problem(image) {
        out.push(format!(
            "test '{}': cmd_args.docker_image_url {image:?} {why}; Kubernetes needs an image reference like \
             \"nvcr.io/nvidia/pytorch:25.01-py3\"",
            run.id
        ));
    }
    let asked = payload::gpus_per_process(run);
    if asked > k.gpus_per_node {
        out.push(format!(
            "test '{}': asks {asked} GPUs per process (ngpus x nthreads) but system '{system}' has gpus_per_node = \
             {}; lower ngpus/nthreads or set gpus_per_node in the system",
            run.id, k.gpus_per_node
        ));
    }
    let subtest = run
        .test
        .cmd_args
        .str("subtest_name")
        .unwrap_or("all_reduce_perf_mpi");
    if run.num_nodes > 1 && !subtest.ends_with("_mpi") {
        out.push(format!(
            "test '{}': subtest_name {subtest:?} is a single-process binary but the test asks {} nodes; use \
             {subtest}_mpi for an MPIJob across nodes",
            run.id, run.num_nodes
        ));
    }
    out
}
