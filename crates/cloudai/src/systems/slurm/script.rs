//! The sbatch script, `env_vars.sh`, hook directories and `slurm-job.toml`, line for line as CloudAI writes them,
//! so users can diff our scripts against theirs.

use std::path::Path;

use indexmap::IndexMap;

use crate::config::system::{SlurmConfig, SystemConfig};
use crate::config::time_limit;
use crate::scenario::{HookScenario, TestRun};
use crate::util::pytoml::{dumps, PyVal};
use crate::util::shell::{in_double_quotes, py_quote, quote, quote_path};
use crate::workloads::launch::{
    fill_quoted, srun_lines_marks, EnvFile, Step, Steps, HF_HOME, IMAGE, MOUNTS, NODELIST_LINE,
    NODELIST_WORD, NODES_ARRAY_END, NODES_ARRAY_START, RUN_DIR, RUN_DIR_RAW, RUN_TAG, SRUN,
    SRUN_ALL_NODES, SRUN_ALL_NODES_LINES, SRUN_HOST_LINES, SYSTEM_SRUN_ARGS,
};
use crate::workloads::{Launch, Procs};

mod job_toml;
mod pre_hook;
mod preflight;
mod steps;
mod submitted;

pub(crate) use job_toml::{job_toml, JobFacts, StepFacts};
pub(crate) use pre_hook::{PRE_HOOK_DIR, PRE_HOOK_FAILED, PRE_HOOK_SCRIPT};
use preflight::preflight_lines;
pub(crate) use preflight::{PREFLIGHT_DIR, PREFLIGHT_FAILED};
pub(crate) use steps::make_mount_sources;

/// A path as an `#SBATCH` option value: as is (CloudAI's bytes) unless it has blanks or quotes, which sbatch would
/// split on; then double-quoted, the form sbatch's option-line parser takes.
pub(crate) fn sbatch_value(p: &Path) -> String {
    let s = p.display().to_string();
    if s.chars()
        .any(|c| c.is_whitespace() || c == '"' || c == '\'')
    {
        format!("\"{}\"", s.replace('"', "\\\""))
    } else {
        s
    }
}

/// A run's name and iteration as a fragment of a shell variable's name: every run of other characters one `_`,
/// none at either end, upper case (`serve.agg.1node`, 0: `SERVE_AGG_1NODE_0`).
fn run_tag(name: &str, iteration: u64) -> String {
    let mut out = String::new();
    let mut in_run = false;
    for c in format!("{name}_{iteration}").chars() {
        if c.is_alphanumeric() || c == '_' {
            out.extend(c.to_uppercase());
            in_run = false;
        } else if !in_run {
            out.push('_');
            in_run = true;
        }
    }
    out.trim_matches('_').to_string()
}

/// Everything about the system a script depends on.
pub struct Ctx<'a> {
    pub sys: &'a SystemConfig,
    pub slurm: &'a SlurmConfig,
    /// Absolute install path.
    pub install: &'a Path,
    /// Whether the cluster takes `--gpus-per-node` / `--gres` (it has a gpu GresType).
    pub gpu_directives: bool,
    /// `%Y%m%d_%H%M%S`, part of the job name.
    pub timestamp: &'a str,
}

/// The files of one iteration, relative to its directory, and its two command lines.
#[derive(Debug, Default)]
pub struct Generated {
    pub test_cmd: String,
    pub full_cmd: String,
    pub files: Vec<(String, String)>,
    /// The job's steps, when it is a job of several: what it mounts from the iteration directory is made before it
    /// is submitted ([`make_mount_sources`]).
    pub steps: Option<Steps>,
    /// The login-node command that submits the job, for a workload whose own launcher does (no batch script).
    pub submit: Option<crate::workloads::submit::Login>,
}

/// The image a task launch runs in.
#[derive(Clone, Copy)]
enum Image<'a> {
    /// The test's (its cached `.sqsh` or its URL), when it has one.
    Test,
    /// Another one (a step's own), when the test runs in an image at all.
    Other(&'a str),
    /// None: on the hosts.
    Host,
}

/// Where one test run's output goes and which nodes it asked for.
struct Target<'a> {
    run: &'a TestRun,
    /// What the run's workload runs (built once per target).
    launch: Launch,
    /// Absolute output directory.
    dir: &'a Path,
    /// File names are relative to the iteration directory (`pre_test/<name>/` for hooks).
    rel: String,
    /// Explicit node list; empty when only a count was asked for.
    nodes: &'a [String],
    /// The iteration it runs (a hook's: 0).
    iteration: u64,
}

impl Target<'_> {
    fn num_nodes(&self) -> u64 {
        if self.nodes.is_empty() {
            self.run.num_nodes
        } else {
            self.nodes.len() as u64
        }
    }
}

impl Ctx<'_> {
    fn env(&self, run: &TestRun) -> IndexMap<String, String> {
        crate::systems::job_env(self.sys, run).into_iter().collect()
    }

    /// The image to run: its cached `.sqsh` under install_path with `cache_docker_images_locally`, else the URL.
    fn image(&self, t: &Target) -> Option<String> {
        let url = t.launch.image.as_deref()?;
        Some(
            crate::install::cached_image_of(self.sys, url)
                .map_or_else(|| url.to_string(), |p| p.display().to_string()),
        )
    }

    fn mounts(&self, t: &Target) -> Vec<String> {
        let out = t.dir.display();
        let mut m = vec![
            format!("{out}:/cloudai_run_results"),
            format!("{}:/cloudai_install", self.install.display()),
            out.to_string(),
        ];
        m.extend(t.run.test.extra_container_mounts.iter().cloned());
        for g in &t.run.test.git_repos {
            let dir = crate::config::test::repo_dir(self.install, &g.url, &g.commit);
            let target = g.mount_as.clone().unwrap_or_else(|| {
                let name = dir.file_name().map(|n| n.to_string_lossy().into_owned());
                let name = name.unwrap_or_default();
                format!(
                    "/git/{}",
                    name.rsplit_once("__").map_or(name.as_str(), |(n, _)| n)
                )
            });
            m.push(format!("{}:{target}", dir.display()));
        }
        for target in &t.launch.install_mounts {
            m.push(format!("{}:{target}", self.install.display()));
        }
        m.extend(t.launch.host_mounts.iter().map(|h| self.fill(t, h)));
        if t.launch.steps.as_ref().is_some_and(|s| s.hf_cache) {
            let hf = &self.sys.hf_home_path;
            let hf = std::path::absolute(hf).unwrap_or_else(|_| hf.clone());
            m.push(format!("{}:/root/.cache/huggingface", hf.display()));
        }
        for mount in t.launch.steps.iter().flat_map(|s| s.mounts.iter()) {
            let source = if mount.source.is_empty() {
                t.dir.to_path_buf()
            } else {
                t.dir.join(&mount.source)
            };
            m.push(format!("{}:{}", source.display(), mount.target));
        }
        if let Some(topo) = self.env(t.run).get("NCCL_TOPO_FILE") {
            let p = std::path::absolute(topo).unwrap_or_else(|_| topo.into());
            m.push(format!("{0}:{0}", p.display()));
        }
        m
    }

    fn srun_prefix(&self, t: &Target) -> Vec<String> {
        self.srun_prefix_with(t, true, Image::Test)
    }

    /// The task launcher's prefix, with the job's node count (`-N`) unless `with_nodes` is false, in the image
    /// `image` says.
    fn srun_prefix_with(&self, t: &Target, with_nodes: bool, image: Image) -> Vec<String> {
        let run = t.run;
        let mut p = vec!["srun".to_string(), "--export=ALL".into()];
        match t.launch.procs {
            Procs::Script => return Vec::new(),
            // one process drives its GPUs itself
            Procs::Single => p.push("--ntasks=1".into()),
            Procs::PerTask | Procs::Mpi => {
                let mpi = t.launch.steps.as_ref().and_then(|s| s.mpi);
                p.push(format!("--mpi={}", mpi.unwrap_or(&self.slurm.mpi)));
            }
            // independent copies: no MPI plugin
            Procs::Tasks(_) | Procs::PerNode => {}
        }
        if t.nodes.is_empty() && with_nodes {
            p.push(format!("-N{}", t.num_nodes()));
        }
        let image = match image {
            Image::Test => self.image(t),
            // a second image only where the test runs in one
            Image::Other(other) => self.image(t).map(|_| other.to_string()),
            Image::Host => None,
        };
        if let Some(image) = image {
            p.push(format!("--container-image={}", quote(&image)));
            p.push(format!(
                "--container-mounts={}",
                quote(&self.mounts(t).join(","))
            ));
            if !self.slurm.container_mount_home {
                p.push("--no-container-mount-home".into());
            }
        }
        p.extend(self.slurm.extra_srun_args.clone());
        p.extend(run.extra_srun_args.clone());
        p.extend(t.launch.launcher_args.iter().cloned());
        p
    }

    /// The test's own command (`test_cmd`); a script launch includes its own nsys prefix, as in CloudAI.
    fn test_cmd(t: &Target) -> String {
        t.launch.command_line()
    }

    /// `srun ... bash -c "source env_vars.sh; <cmd>"`, writing `env_vars.sh` into `files`.
    fn srun_command(&self, t: &Target, files: &mut Vec<(String, String)>) -> String {
        let kind = t
            .launch
            .steps
            .as_ref()
            .map_or(EnvFile::Quoted, |s| s.env_file);
        let mut env: String = self
            .env(t.run)
            .iter()
            .map(|(k, v)| match kind {
                EnvFile::Bare => format!("export {k}={v}\n"),
                _ => format!("{}\n", crate::util::shell::export(k, v)),
            })
            .collect();
        if kind == EnvFile::WithJobEnv {
            for (k, v) in t.launch.steps.iter().flat_map(|s| s.job_env.iter()) {
                env.push_str(&format!("export {k}=\"{v}\"\n"));
            }
        }
        if kind != EnvFile::None {
            files.push((join_rel(&t.rel, "env_vars.sh"), env));
        }
        if let Some(steps) = &t.launch.steps {
            return self.steps_body(t, steps);
        }
        let mut cmd = Vec::new();
        if !t.launch.has_profiler {
            cmd.extend(crate::workloads::nsys_prefix(&t.run.test));
        }
        cmd.push(Self::test_cmd(t));
        let mut srun = self.srun_prefix(t);
        // the main step's own task count (the mapping and metadata steps keep theirs)
        if let Procs::Tasks(Some(n)) = t.launch.procs {
            srun.push(format!("--ntasks-per-node={n}"));
            srun.push(format!("--ntasks={}", t.num_nodes() * n));
        }
        let mut body = cmd.join(" ");
        if t.launch.procs == Procs::PerNode {
            // once per node; each task writes its node's output into a directory named by Slurm's node name (srun's
            // own `%N` is the host name, which several nodes may share)
            // one task on every node of the allocation, whatever the test's host file lays out (an arbitrary
            // distribution with SLURM_HOSTFILE repeats nodes for their tasks)
            if !srun.iter().any(|a| a.starts_with("-N")) {
                srun.push(format!("-N{}", t.num_nodes()));
            }
            srun.push("--distribution=block".into());
            srun.push("--ntasks-per-node=1".into());
            srun.push(format!("--ntasks={}", t.num_nodes()));
            let nodes = t.dir.join(crate::workloads::launch::NODES_DIR);
            body = format!(
                "d={}/\"${{SLURMD_NODENAME:-$(hostname -s)}}\"; mkdir -p \"$d\"; {{ {body} ; }} > \"$d/stdout.txt\" 2> \"$d/stderr.txt\"",
                quote(&nodes.display().to_string())
            );
        }
        let line = format!(
            "{} bash -c \"source {}; {}\"",
            srun.join(" "),
            in_double_quotes(&quote(&t.dir.join("env_vars.sh").display().to_string())),
            in_double_quotes(&body)
        );
        if t.launch.procs == Procs::PerNode {
            format!("(unset SLURM_HOSTFILE; {line})")
        } else {
            line
        }
    }

    fn hook_sruns(
        &self,
        hook: &HookScenario,
        kind: &str,
        base: &Path,
        files: &mut Vec<(String, String)>,
    ) -> Vec<(String, String)> {
        hook.test_runs
            .iter()
            .map(|tr| {
                let (srun, dir, launch) = self.hook_srun(tr, kind, base, files);
                let with_output = srun.replace(
                    "srun ",
                    &format!(
                        "srun --output={} --error={} ",
                        quote_path(&dir.join("stdout.txt")),
                        quote_path(&dir.join("stderr.txt"))
                    ),
                );
                (with_output, launch.shell_check(&dir.join("stdout.txt")))
            })
            .collect()
    }

    /// A hook's task launch (its `env_vars.sh` into `files`), its output directory `<base>/<kind>/<test name>`
    /// and what it runs.
    fn hook_srun(
        &self,
        run: &TestRun,
        kind: &str,
        base: &Path,
        files: &mut Vec<(String, String)>,
    ) -> (String, std::path::PathBuf, Launch) {
        let dir = base.join(kind).join(&run.test.name);
        let t = Target {
            run,
            launch: run.launch(),
            dir: &dir,
            rel: format!("{kind}/{}", run.test.name),
            nodes: &[],
            iteration: 0,
        };
        let srun = self.srun_command(&t, files);
        let Target { launch, .. } = t;
        (srun, dir, launch)
    }

    /// The host file of a node list: each node once per task of the system's `ntasks_per_node`.
    fn hostfile(&self, nodes: &[String]) -> String {
        let per = self.slurm.ntasks_per_node.unwrap_or(1).max(1);
        nodes
            .iter()
            .flat_map(|n| (0..per).map(move |_| format!("{n}\n")))
            .collect()
    }

    /// The directives every batch script of a run states after its nodes: GPUs, tasks per node, time limit, the
    /// system's own.
    fn job_directives(&self, run: &TestRun) -> Vec<String> {
        let mut lines = Vec::new();
        // gpus_per_node = 0: nodes without GPUs, and no GPU directive at all (as CloudAI)
        if let Some(g) = self
            .slurm
            .gpus_per_node
            .filter(|g| *g > 0 && self.gpu_directives)
        {
            lines.push(format!("#SBATCH --gpus-per-node={g}"));
            lines.push(format!("#SBATCH --gres=gpu:{g}"));
        }
        if let Some(n) = self.slurm.ntasks_per_node {
            lines.push(format!("#SBATCH --ntasks-per-node={n}"));
        }
        if let Some(tl) = run.effective_time_limit() {
            lines.push(format!("#SBATCH --time={}", time_limit::format(tl)));
        }
        lines.extend(
            self.slurm
                .extra_sbatch_args
                .iter()
                .map(|a| format!("#SBATCH {a}")),
        );
        lines
    }

    fn job_name(&self, run: &TestRun) -> String {
        match &self.slurm.account {
            Some(acc) => format!("{acc}-{}.{}", run.test.name, self.timestamp),
            None => format!("{}_{}", run.test.name, self.timestamp),
        }
    }

    /// The whole iteration: batch script, env files, hook dirs, hostfile, slurm-job.toml.
    pub fn generate(
        &self,
        run: &TestRun,
        iteration: u64,
        dir: &Path,
        nodes: &[String],
    ) -> Generated {
        let mut files = Vec::new();
        let t = Target {
            run,
            launch: run.launch(),
            dir,
            rel: String::new(),
            nodes,
            iteration,
        };
        if run.workload.needs() == crate::workloads::Needs::Submit {
            return self.submitted(t, files);
        }
        let srun = self.srun_command(&t, &mut files);
        let test_cmd = Self::test_cmd(&t);

        let mut body: Vec<String> = Vec::new();
        let mut indent = "";
        if let Some(pre) = &run.pre_test {
            let sruns = self.hook_sruns(pre, "pre_test", dir, &mut files);
            body.extend(crate::systems::pre_test_lines(sruns));
            body.push("if [ $PRE_TEST_SUCCESS -eq 1 ]; then".into());
            indent = "    ";
        }
        body.push(format!("{indent}{srun}"));
        if let Some(post) = &run.post_test {
            let sruns: Vec<String> = self
                .hook_sruns(post, "post_test", dir, &mut files)
                .into_iter()
                .map(|(c, _)| c)
                .collect();
            body.push(format!("{indent}{}", sruns.join("\n")));
        }
        if run.pre_test.is_some() {
            body.push("fi".into());
        }
        let exec = body.join("\n").trim().to_string();

        let mut lines = vec![
            "#!/bin/bash".to_string(),
            format!("# generated by cloudai-rs@{}", env!("CARGO_PKG_VERSION")),
            format!("#SBATCH --job-name={}", self.job_name(run)),
        ];
        if let Some(r) = self.slurm.extra_srun_args.as_deref().and_then(reservation) {
            lines.push(format!("#SBATCH --reservation={r}"));
        }
        lines.push(format!(
            "#SBATCH --output={}",
            sbatch_value(&dir.join("stdout.txt"))
        ));
        lines.push(format!(
            "#SBATCH --error={}",
            sbatch_value(&dir.join("stderr.txt"))
        ));
        lines.push(format!(
            "#SBATCH --partition={}",
            self.slurm.default_partition
        ));
        if let Some(acc) = &self.slurm.account {
            lines.push(format!("#SBATCH --account={acc}"));
        }
        let mut hostfile = None;
        if nodes.is_empty() {
            lines.push(format!("#SBATCH -N {}", t.num_nodes()));
            if let Some(d) = &self.slurm.distribution {
                lines.push(format!("#SBATCH --distribution={d}"));
            }
        } else {
            lines.push("#SBATCH --distribution=arbitrary".into());
            lines.push(format!("#SBATCH --nodelist={}", nodes.join(",")));
            files.push(("hostfile.txt".into(), self.hostfile(nodes)));
            hostfile = Some(dir.join("hostfile.txt"));
        }
        lines.extend(self.job_directives(run));
        if let Some(h) = hostfile {
            lines.push(format!("export SLURM_HOSTFILE={}", quote_path(&h)));
        }
        lines.push("\nexport SLURM_JOB_MASTER_NODE=$(scontrol show hostname $SLURM_JOB_NODELIST | head -n 1)".into());
        let env = self.env(run);
        let steps = t.launch.steps.as_ref();
        lines.extend(steps.into_iter().flat_map(|s| s.prologue.iter().cloned()));
        for (name, text) in steps.iter().flat_map(|s| s.files.iter()) {
            files.push((join_rel(&t.rel, name), self.fill(&t, text)));
        }
        lines.push(
            env.iter()
                .map(|(k, v)| format!("export {k}={}", crate::util::shell::env_value(v)))
                .chain(
                    steps
                        .into_iter()
                        .flat_map(|s| s.job_env.iter())
                        .map(|(k, v)| format!("export {k}={v}")),
                )
                .collect::<Vec<_>>()
                .join("\n"),
        );
        let setup_image = if steps.is_none_or(|s| s.setup_in_image) {
            Image::Test
        } else {
            Image::Host
        };
        let prefix = self.srun_prefix_with(&t, true, setup_image);
        if env.get("ENABLE_VBOOST").is_some_and(|v| v == "1") {
            lines.push(format!(
                "srun --ntasks={} --output={} --error={} bash -c \"sudo nvidia-smi boost-slider --vboost 1\"",
                t.num_nodes(),
                quote_path(&dir.join("vboost.out")),
                quote_path(&dir.join("vboost.err"))
            ));
            lines.push(String::new());
        }
        let mut mapping = prefix.clone();
        mapping.push(format!(
            "--output={}",
            quote_path(&dir.join("mapping-stdout.txt"))
        ));
        mapping.push(format!(
            "--error={}",
            quote_path(&dir.join("mapping-stderr.txt"))
        ));
        mapping.push(
            r#"bash -c "echo \$(date): \$(hostname):node \${SLURM_NODEID}:rank \${SLURM_PROCID}.""#
                .into(),
        );
        lines.push(mapping.join(" "));
        lines.push(String::new());
        let meta_dir = if self.image(&t).is_some() && steps.is_none_or(|s| s.setup_in_image) {
            "/cloudai_install".to_string()
        } else {
            self.install.display().to_string()
        };
        let mut meta = prefix;
        meta.push(format!("--ntasks={}", t.num_nodes()));
        meta.push("--ntasks-per-node=1".into());
        meta.push(format!(
            "--output={}",
            quote_path(&dir.join("metadata").join("node-%N.toml"))
        ));
        meta.push(format!(
            "--error={}",
            quote_path(&dir.join("metadata").join("nodes.err"))
        ));
        meta.push(format!(
            "bash {}",
            quote(&format!("{meta_dir}/slurm-metadata.sh"))
        ));
        lines.push(meta.join(" "));
        lines.push(String::new());
        if let Some(pf) = &self.slurm.preflight {
            lines.extend(preflight_lines(pf, dir, t.num_nodes(), &mut files));
        }
        lines.push(exec);
        files.push((SCRIPT.into(), lines.join("\n")));
        // the step a workload records as its command (AI Dynamo's main srun, not the exporter around it)
        let recorded = t
            .launch
            .steps
            .as_ref()
            .and_then(|s| match s.steps.get(s.record?) {
                Some(Step::Shell(text)) => Some(self.fill(&t, text)),
                _ => None,
            });
        let srun = recorded.unwrap_or(srun);
        files.push((
            JOB_FILE.into(),
            job_toml(&JobFacts::default(), &srun, &test_cmd, dir),
        ));
        Generated {
            test_cmd,
            full_cmd: srun,
            files,
            steps: t.launch.steps,
            submit: None,
        }
    }
}

pub(crate) const SCRIPT: &str = "cloudai_sbatch_script.sh";
pub(crate) const JOB_FILE: &str = "slurm-job.toml";

fn join_rel(rel: &str, name: &str) -> String {
    if rel.is_empty() {
        name.to_string()
    } else {
        format!("{rel}/{name}")
    }
}

/// `--reservation X` inside extra_srun_args becomes an sbatch directive too.
fn reservation(extra: &str) -> Option<&str> {
    let (_, rest) = extra.split_once("--reservation ")?;
    rest.split(' ').next().filter(|s| !s.is_empty())
}
