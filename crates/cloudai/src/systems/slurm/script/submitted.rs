//! An iteration whose workload's own launcher submits the job from the login node (NeMo launcher): no batch script
//! of ours; `env_vars.sh`, the job's `srun` line as CloudAI records it (`test-run.toml`, `slurm-job.toml`), and what
//! the workload writes beside its command.

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
        Generated {
            test_cmd,
            full_cmd: srun,
            files,
            steps: None,
            submit_cmd: Some(sub.command),
        }
    }
}
