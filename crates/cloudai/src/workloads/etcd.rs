//! The per-test etcd server some workloads rendezvous through (NIXL, the MoE benchmark's hybrid EP), as CloudAI
//! writes its lifecycle inside the test's own block: started on the first node in the background, waited for,
//! stopped after the test (so it works the same in one job per test and in a single job).

use super::launch::{Step, RUN_DIR};

/// `etcd` on the first node, its log in the iteration's `etcd.log`, in the background (`own_image`: in the image
/// given for it, when one is).
pub(crate) fn start(etcd: &str, own_image: bool) -> Step {
    Step::Task {
        all_nodes: false,
        own_image,
        opts: [
            &format!("--output={RUN_DIR}/etcd.log"),
            "--overlap",
            "--ntasks-per-node=1",
            "--ntasks=1",
            "--nodelist=$SLURM_JOB_MASTER_NODE",
            "-N1",
        ]
        .map(str::to_string)
        .to_vec(),
        cmd: format!(
            "{etcd} --listen-client-urls=http://0.0.0.0:2379 \
             --advertise-client-urls=http://$SLURM_JOB_MASTER_NODE:2379 --listen-peer-urls=http://0.0.0.0:2380 \
             --initial-advertise-peer-urls=http://$SLURM_JOB_MASTER_NODE:2380 \
             --initial-cluster=\"default=http://$SLURM_JOB_MASTER_NODE:2380\" --initial-cluster-state=new  &"
        ),
    }
}

/// Its pid kept, then a wait of up to `wait` seconds for it to answer (the job ends if it does not).
pub(crate) fn wait(wait: i64) -> [Step; 2] {
    [
        Step::Shell("etcd_pid=$!".into()),
        Step::Shell(format!(
            "timeout {wait} bash -c \"until curl -s $NIXL_ETCD_ENDPOINTS/health > /dev/null 2>&1; do sleep 1; \
             done\" || {{\n   echo \"ETCD ($NIXL_ETCD_ENDPOINTS) was unreachable after {wait} seconds\";\n   exit \
             1\n }}"
        )),
    ]
}

/// The server stopped and waited for (60 s).
pub(crate) fn stop() -> Step {
    Step::Shell(
        "kill -TERM $etcd_pid\n timeout 60 bash -c \"while kill -0 $etcd_pid 2>/dev/null; do sleep 1; done\" || {\n   \
         echo \"Failed to kill ETCD (pid=$etcd_pid) within 60 seconds\";\n   exit 1\n }"
            .into(),
    )
}
