//! An iteration whose workload's own launcher submits the job from the login node (NeMo launcher, Megatron-Bridge):
//! no batch script of ours; `env_vars.sh`, the job's `srun` line as CloudAI records it (`slurm-job.toml`, and
//! `test-run.toml` unless the workload records its own command there), and what the workload writes beside it.

use super::*;
use crate::workloads::submit::SubmitAt;

impl Ctx<'_> {
    pub(super) fn submitted(&self, t: Target, mut files: Vec<(String, String)>) -> Generated {
        // the launcher names the image itself: the recorded srun line runs on the hosts (CloudAI's has no image)
        let image = self.image(&t);
        let t = Target {
            launch: Launch {
                image: None,
                ..t.launch
            },
            ..t
        };
        let srun = self.srun_command(&t, &mut files);
        let test_cmd = Self::test_cmd(&t);
        let env: Vec<(String, String)> = self.env(t.run).into_iter().collect();
        let srun_args: Vec<String> = self
            .slurm
            .extra_srun_args
            .iter()
            .chain(&t.run.extra_srun_args)
            .filter(|a| !a.trim().is_empty())
            .cloned()
            .collect();
        let pre_hook = match &t.run.pre_test {
            Some(hooks) if t.run.workload.pre_test_job() => {
                Some(self.pre_hook(&t, hooks, &mut files))
            }
            _ => None,
        };
        let at = SubmitAt {
            partition: &self.slurm.default_partition,
            account: self.slurm.account.as_deref(),
            gpus_per_node: self.slurm.gpus_per_node,
            reservation: self.slurm.extra_srun_args.as_deref().and_then(reservation),
            nodes: t.nodes,
            num_nodes: t.num_nodes(),
            install: self.install,
            image,
            dir: t.dir,
            env: &env,
            timestamp: self.timestamp,
            time_limit: t.run.effective_time_limit().map(time_limit::format),
            exclude: if t.nodes.is_empty() {
                &t.run.exclude_nodes
            } else {
                &[]
            },
            srun_args,
            gpu_directives: self.gpu_directives,
            pre_hook,
        };
        let sub = t
            .run
            .workload
            .submission(&t.run.test, &at)
            .unwrap_or_default();
        files.extend(sub.files);
        files.push((
            JOB_FILE.into(),
            job_toml(&JobFacts::default(), &srun, &test_cmd, t.dir),
        ));
        let (test_cmd, full_cmd) = match sub.recorded {
            Some(cmd) => (cmd.clone(), cmd),
            None => (test_cmd, srun),
        };
        Generated {
            test_cmd,
            full_cmd,
            files,
            steps: None,
            submit: Some(sub.login),
        }
    }
}
