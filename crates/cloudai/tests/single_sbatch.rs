//! `--single-sbatch` on the real cluster: one sbatch for the whole scenario, every iteration graded from its own
//! directory (the same files as a normal run), one job id on every record.

use crate::common;

use cloudai::results::Status;
use common::{record, stdout_of};

#[test]
fn the_whole_scenario_runs_in_one_allocation() {
    let scenario = r#"name = "one"
[[Tests]]
id = "first"
test_name = "sleep"
[[Tests]]
id = "second"
test_name = "bash"
num_nodes = 2
iterations = 2
[[Tests.dependencies]]
type = "start_post_comp"
id = "first"
"#;
    let Some(w) = common::slurm::slurm_work("", scenario) else {
        return;
    };
    let (count, path) = common::slurm::counting_sbatch(&w);
    let out = w
        .cloudai()
        .args(common::slurm::RUN_ARGS)
        .arg("--single-sbatch")
        .env("PATH", &path)
        .timeout(std::time::Duration::from_secs(180))
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert_eq!(
        std::fs::read_to_string(&count).unwrap().lines().count(),
        1,
        "{text}"
    );
    let root = w.results_root();
    let script = std::fs::read_to_string(root.join("cloudai_sbatch_script.sh")).unwrap();
    assert!(script.contains("#SBATCH -N 2"), "{script}");
    // the allocation has the GPUs and tasks per node each iteration's own script asks (CloudAI's PR #613)
    for d in [
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --gres=gpu:8",
        "#SBATCH --ntasks-per-node=2",
    ] {
        assert!(script.contains(d), "{d} missing:\n{script}");
    }
    // dependencies first, iterations in order
    let first = script.find("first/0/cloudai_sbatch_script.sh").unwrap();
    let s0 = script.find("second/0/cloudai_sbatch_script.sh").unwrap();
    let s1 = script.find("second/1/cloudai_sbatch_script.sh").unwrap();
    assert!(first < s0 && s0 < s1, "{script}");
    let ids: Vec<String> = [("first", 0), ("second", 0), ("second", 1)]
        .iter()
        .map(|(t, i)| {
            let r = record(&root, t, *i);
            assert_eq!(r.status, Status::Passed, "{t} #{i}: {}", r.message);
            assert!(root.join(format!("{t}/{i}/test-run.toml")).is_file());
            r.job_id.unwrap()
        })
        .collect();
    assert!(ids.iter().all(|i| *i == ids[0]), "{ids:?}");
}
