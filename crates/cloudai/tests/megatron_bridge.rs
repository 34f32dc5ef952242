//! Megatron-Bridge (`MegatronBridge`): refusals found before anything runs, the token kept out of every file, a
//! sweep skipping the steps that break a rule, the grade from the launcher log, and on the real Slurm cluster a
//! launcher that stays with its job — followed to its end, its retry followed in its place, interrupted, resumed.
//! CloudAI's job is compat_dry_run.rs.

use crate::common;

use std::path::Path;

use common::slurm::slurm_work;
use common::{data, record, stdout_of, Work};
use serde_json::Value;

const SYSTEM: &str =
    "name = \"s\"\nscheduler = \"slurm\"\ninstall_path = \"install\"\noutput_path = \"out\"\n\
default_partition = \"p\"\ngpus_per_node = 8\n[[partitions]]\nname = \"p\"\n";
const SCENARIO: &str = "name = \"n\"\n[[Tests]]\nid = \"t\"\ntest_name = \"mb\"\nnum_nodes = 2\n";
const TEST: &str = "name = \"mb\"\ndescription = \"d\"\ntest_template_name = \"MegatronBridge\"\n\
[[git_repos]]\nurl = \"https://github.com/NVIDIA-NeMo/Megatron-Bridge.git\"\ncommit = \"v0.3.0\"\n";
const ARGS: &str =
    "[cmd_args]\ngpu_type = \"h100\"\ncontainer_image = \"nvcr.io#nvidia/nemo:26.02.00\"\n\
model_family_name = \"qwen\"\nmodel_recipe_name = \"qwen3_30b_a3b\"\nnum_gpus = 16\n";
const LOG: &str = "cloudai_megatron_bridge_launcher.log";

fn sample() -> String {
    std::fs::read_to_string(data().join("megatron-bridge-samples").join(LOG)).unwrap()
}

fn summary_says(root: &Path) -> String {
    let summary: Value =
        serde_json::from_slice(&std::fs::read(root.join("summary.json")).unwrap()).unwrap();
    let t = &summary["tests"][0];
    format!("{} {}", t["message"], t["checks"])
}

fn dry_run(w: &Work) -> std::process::Output {
    w.cloudai()
        .env("HF_TOKEN", "hf_secret_for_tests")
        .args(common::DRY_RUN_S_TOML)
        .output()
        .unwrap()
}

#[test]
fn graded_from_the_launcher_log() {
    let w = Work::new();
    w.file("system.toml", SYSTEM);
    w.file("tests/t.toml", &format!("{TEST}{ARGS}"));
    w.file("s.toml", SCENARIO);
    let out = dry_run(&w);
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let root = w.results_root();
    let it = root.join("t/0");
    // a dry-run's iteration is graded once it has output of its own
    std::fs::write(it.join("stdout.txt"), "").unwrap();
    let log = sample();
    let cut = |upto: &str| -> String {
        let end = log.find(upto).unwrap();
        log[..log[..end].rfind('\n').unwrap() + 1].to_string()
    };
    let first_run_failed = format!(
        "{}RuntimeError: NCCL error in: ProcessGroupNCCL.cpp, unhandled system error\n\
         INFO:nemo_run.core.execution.slurm:Job id: 4712\n{}",
        cut("iteration        4/"),
        log.split_once("Job id: 4711\n").unwrap().1
    );
    let nan = log.replacen(
        "iteration        7/      10 | consumed samples:         3584 | elapsed time per iteration (ms): 3370.0 | learning rate: 3.000000E-05 | global batch size:   512 | lm loss: 9.800000E+00 | loss scale: 1.0 | grad norm: 0.47 | number of skipped iterations:   0 | number of nan iterations:   0 |",
        "iteration        7/      10 | consumed samples:         3584 | elapsed time per iteration (ms): 3370.0 | learning rate: 3.000000E-05 | global batch size:   512 | lm loss: nan | loss scale: 1.0 | grad norm: nan | number of skipped iterations:   1 | number of nan iterations:   1 |",
        1,
    );
    assert_ne!(nan, log, "the sample's iteration 7 line changed");
    let stopped = format!(
        "{}torch.OutOfMemoryError: CUDA out of memory.\n",
        cut("iteration        7/")
    );
    let no_tflops: String = log
        .lines()
        .map(|l| match l.split_once("GPU utilization: ") {
            Some((a, _)) => format!("{a}GPU utilization: 0.0MODEL_TFLOP/s/GPU\n"),
            None => format!("{l}\n"),
        })
        .collect();
    let no_steps: String = log
        .lines()
        .filter(|l| !l.contains("Step Time"))
        .map(|l| format!("{l}\n"))
        .collect();
    for (text, code, says) in [
        (log.clone(), 0, "10 step(s); last 10: mean 4.519 s"),
        (log.clone(), 0, "iteration 10 of 10 reached, no NaN loss"),
        (log.clone(), 0, "16 ranks = num_gpus"),
        (
            log.replace("using world size: 16", "using world size: 8"),
            3,
            "the training ran 8 ranks, but num_gpus = 16 was asked",
        ),
        (
            nan,
            3,
            "1 iteration(s) of the training had a NaN loss",
        ),
        (
            stopped,
            3,
            "stopped at iteration 6 of 10 (cloudai_megatron_bridge_launcher.log); last error: torch.OutOfMemoryError",
        ),
        (
            log.replace("/      10 |", "/      20 |"),
            3,
            "ran toward 20 iterations, but max_steps = 10 was asked",
        ),
        (no_steps, 3, "the training reported no step"),
        (
            log.replace("Step Time : 3.39s", "Step Time : 0.00s"),
            3,
            "has a step of 0 s",
        ),
        // the launcher's retry: its second run is the one graded
        (first_run_failed, 0, "10 step(s); last 10: mean 4.519 s"),
        (no_tflops, 0, "throughput not measured"),
    ] {
        std::fs::write(it.join(LOG), &text).unwrap();
        let rep = w.generate_report(&root);
        assert_eq!(rep.status.code(), Some(code), "{says}: {}", stdout_of(&rep));
        let said = summary_says(&root);
        assert!(said.contains(says), "{says}: {said}");
    }
    std::fs::remove_file(it.join(LOG)).unwrap();
    let rep = w.generate_report(&root);
    assert_eq!(rep.status.code(), Some(3), "{}", stdout_of(&rep));
    assert!(summary_says(&root).contains("Megatron-Bridge launcher log not found in"));
    // CloudAI's report.txt, our CSV and page, from the passing log
    std::fs::write(it.join(LOG), &log).unwrap();
    let rep = w.generate_report(&root);
    assert_eq!(rep.status.code(), Some(0), "{}", stdout_of(&rep));
    let report = std::fs::read_to_string(it.join("report.txt")).unwrap();
    assert!(
        report.starts_with(&format!("Source log: {}\n\nStep Time (s)\n  avg: 4.519\n  median: 3.4\n  min: 3.37\n  max: 14.62\n  std: 3.", it.join(LOG).display())),
        "{report}"
    );
    assert!(report.contains("\nTFLOP/s per GPU\n  avg: "), "{report}");
    let csv = std::fs::read_to_string(it.join("cloudai_megatron_bridge_steps.csv")).unwrap();
    assert_eq!(csv.lines().count(), 11, "{csv}");
    assert!(
        csv.starts_with("step_line,step_time_s,tflops_per_gpu\n1,14.62,279.1\n"),
        "{csv}"
    );
    let page = std::fs::read_to_string(it.join("cloudai_megatron_bridge_report.html")).unwrap();
    assert!(page.contains("4.519 s") && page.contains("<td>14.62</td>"));
}

#[test]
fn what_cannot_work_is_refused_before_anything_is_written() {
    let w = Work::new();
    w.file("system.toml", SYSTEM);
    w.file("s.toml", SCENARIO);
    let head = "name = \"mb\"\ndescription = \"d\"\ntest_template_name = \"MegatronBridge\"\n";
    for (test, token, says) in [
        (
            format!("{head}{ARGS}"),
            Some("t"),
            "MegatronBridge needs the Megatron-Bridge repository pinned in [[git_repos]]",
        ),
        (
            format!("{head}[[git_repos]]\nurl = \"https://github.com/NVIDIA-NeMo/Run.git\"\ncommit = \"main\"\n{ARGS}"),
            Some("t"),
            "names no Megatron-Bridge repository",
        ),
        (
            format!("{TEST}{}", ARGS.replace("model_family_name = \"qwen\"", "model_family_name = \" \"")),
            Some("t"),
            "cmd_args.model_family_name': cannot be empty",
        ),
        (
            format!("{TEST}{}", ARGS.replace("num_gpus = 16", "num_gpus = \"many\"")),
            Some("t"),
            "cmd_args.num_gpus'",
        ),
        (
            format!("{TEST}{ARGS}tp = 0\n"),
            Some("t"),
            "must be 1 or more, found 0",
        ),
        (
            format!("{TEST}{}tp = 8\n", ARGS.replace("num_gpus = 16", "num_gpus = 12")),
            Some("t"),
            "num_gpus = 12 is not a multiple of tp × pp × cp = 8 × 1 × 1",
        ),
        (
            format!("{TEST}{ARGS}cuda_graph_impl = \"local\"\nmoe_a2a_overlap = true\n"),
            Some("t"),
            "moe_a2a_overlap must be false with cuda_graph_impl = \"local\"",
        ),
        (
            format!("{TEST}{ARGS}list_config_variants = true\n"),
            Some("t"),
            "asks the launcher to choose a config variant interactively",
        ),
        (
            format!("{TEST}{ARGS}"),
            None,
            "neither cmd_args.hf_token nor HF_TOKEN gives one",
        ),
        (
            format!("{TEST}{}", ARGS.replace("nvcr.io#nvidia/nemo:26.02.00", "/nonexistent/nemo.sqsh")),
            Some("t"),
            "the image file \"/nonexistent/nemo.sqsh\" (cmd_args.container_image) does not exist",
        ),
    ] {
        w.file("tests/t.toml", &test);
        let _ = std::fs::remove_dir_all(w.path().join("out"));
        let mut c = w.cloudai();
        match token {
            Some(t) => c.env("HF_TOKEN", t),
            None => c.env_remove("HF_TOKEN"),
        };
        let out = c.args(common::DRY_RUN_S_TOML).output().unwrap();
        let text = stdout_of(&out);
        assert_eq!(out.status.code(), Some(1), "{says}: {text}");
        assert!(text.contains(says), "{says}: {text}");
        assert!(!w.path().join("out").exists(), "{says}: something was written");
    }
}

/// One batch script for the whole scenario cannot hold a job the test's own launcher submits.
#[test]
fn single_sbatch_refuses_a_launcher_that_submits_its_own_job() {
    let w = Work::new();
    w.file("system.toml", SYSTEM);
    w.file("tests/t.toml", &format!("{TEST}{ARGS}"));
    w.file("s.toml", SCENARIO);
    let out = w
        .cloudai()
        .env("HF_TOKEN", "t")
        .args(common::DRY_RUN_S_TOML)
        .arg("--single-sbatch")
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("--single-sbatch cannot run test 't' (MegatronBridge): its own launcher submits its job"),
        "{text}"
    );
    assert!(!w.path().join("out").exists());
}

/// Post-test hooks: CloudAI's wrapper leaves them out, so a dry-run writes the job without them, and a real run
/// refuses them before anything is created.
#[test]
fn post_test_hooks_are_written_as_cloudai_does_and_refused_for_a_real_run() {
    let w = Work::new();
    w.file("system.toml", SYSTEM);
    w.file("tests/t.toml", &format!("{TEST}{ARGS}"));
    w.file(
        "s.toml",
        &format!("name = \"n\"\npost_test = \"hk\"\n{}", &SCENARIO[11..]),
    );
    w.file(
        "conf/hook/hk.toml",
        "name = \"hk\"\n[[Tests]]\nid = \"h\"\ntest_name = \"b\"\n",
    );
    w.file(
        "conf/hook/test/b.toml",
        "name = \"b\"\ndescription = \"d\"\ntest_template_name = \"BashCmd\"\n[cmd_args]\ncmd = \"true\"\n",
    );
    // installed: what is refused is the hooks
    w.file(
        "install/Megatron-Bridge__v0.3.0/scripts/performance/setup_experiment.py",
        FAKE_SETUP,
    );
    w.file("install/Run__main/pyproject.toml", "# NeMo-Run's clone\n");
    w.file("install/Run__main-venv/bin/python", FAKE_PYTHON);
    let out = w
        .cloudai()
        .env("HF_TOKEN", "t")
        .args(common::RUN_S_TOML)
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("test 't': its own launcher submits the job, so there is no batch script of ours to run post_test hooks in"),
        "{text}"
    );
    assert!(!w.path().join("out").exists(), "{text}");
    let out = dry_run(&w);
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let root = w.results_root();
    assert!(root
        .join("t/0")
        .join(LOG)
        .parent()
        .unwrap()
        .join("cloudai_megatron_bridge_submit_and_parse_jobid.sh")
        .exists());
    assert!(
        !root.join("t/0/post_test").exists()
            && !root.join("t/0/pre_hook_sbatch_script.sh").exists()
    );
}

/// A token from the environment reaches the launcher by name: no file cloudai writes holds it.
#[test]
fn the_hugging_face_token_from_the_environment_is_written_nowhere() {
    let w = Work::new();
    w.file("system.toml", SYSTEM);
    w.file("tests/t.toml", &format!("{TEST}{ARGS}"));
    w.file("s.toml", SCENARIO);
    let out = dry_run(&w);
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let root = w.results_root();
    let wrapper =
        std::fs::read_to_string(root.join("t/0/cloudai_megatron_bridge_submit_and_parse_jobid.sh"))
            .unwrap();
    assert!(wrapper.contains(" -hf \"${HF_TOKEN}\" "), "{wrapper}");
    let out = std::process::Command::new("grep")
        .args(["-rl", "hf_secret_for_tests"])
        .arg(w.path())
        .output()
        .unwrap();
    assert!(
        out.stdout.is_empty(),
        "the token is in {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// A sweep whose step breaks a rule skips that step, as CloudAI's agent does: nothing of it is written.
#[test]
fn a_sweep_skips_the_steps_that_break_a_rule() {
    let w = Work::new();
    w.file("system.toml", SYSTEM);
    w.file("tests/t.toml", &format!("{TEST}{ARGS}tp = [1, 3, 2]\n"));
    w.file("s.toml", SCENARIO);
    let out = dry_run(&w);
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("Constraint check failed. Skipping step 2: num_gpus = 16 is not a multiple of tp × pp × cp = 3 × 1 × 1"),
        "{text}"
    );
    let root = w.results_root();
    assert!(root.join("t/0/1").is_dir() && root.join("t/0/3").is_dir());
    assert!(!root.join("t/0/2").exists());
    let trajectory = std::fs::read_to_string(root.join("t/0/trajectory.csv")).unwrap();
    assert_eq!(trajectory.lines().count(), 3, "{trajectory}");
    let wrapper = std::fs::read_to_string(
        root.join("t/0/3/cloudai_megatron_bridge_submit_and_parse_jobid.sh"),
    )
    .unwrap();
    assert!(wrapper.contains(" -tp 2 "), "{wrapper}");
}

/// A stand-in for Megatron-Bridge's `setup_experiment.py` (run by NeMo-Run's "venv" python): it writes its own
/// batch script under `NEMORUN_HOME`, submits it with the real sbatch, prints NeMo-Run's `Job id: N`, stays with
/// the job until it ends and then prints the job's log (the training's step lines), as the launcher does with
/// `--detach false`; a failed job is submitted again while `--max_retries` allow. Of `--additional_slurm_params`
/// it keeps the dependency and the node list.
const FAKE_SETUP: &str = r#"#!/bin/bash
while [ $# -gt 0 ]; do
  case "$1" in
    -p) part="$2"; shift ;;
    -ng) ng="$2"; shift ;;
    -gn) gn="$2"; shift ;;
    -ms) steps="$2"; shift ;;
    --max_retries) retries="$2"; shift ;;
    --additional_slurm_params) params="$2"; shift ;;
  esac
  shift
done
echo "INFO:__main__:Run script path: stand-in"
nodes=$(( (ng + gn - 1) / gn ))
job="$NEMORUN_HOME/job"
mkdir -p "$job"
# the job's dependency and node list, of the Slurm parameters the launcher is given (its GPU directives are not)
directives=""
IFS=';' read -ra kv <<< "$params"
for p in "${kv[@]}"; do
  case "$p" in dependency=*|nodelist=*) directives="$directives#SBATCH --$p"$'\n' ;; esac
done
cat > "$job/sbatch.sh" <<EOS
#!/bin/bash
$directives#SBATCH --job-name=mb_pretrain
#SBATCH --partition=$part
#SBATCH --nodes=$nodes
#SBATCH --output=$job/log-%j.out
echo "pretrain/0 using world size: $ng, data-parallel size: $ng"
sleep ${JOB_SECONDS:-1}
if [ -n "$FIRST_JOB_FAILS" ] && [ ! -e "$job/failed-once" ]; then
  touch "$job/failed-once"
  echo "RuntimeError: NCCL error: unhandled system error"
  echo 1 > "$job/rc-\$SLURM_JOB_ID"; exit 1
fi
for i in \$(seq 1 $steps); do
  echo "pretrain/0 Step Time : 2.5\${i}s GPU utilization: 600.\${i}MODEL_TFLOP/s/GPU"
  echo "pretrain/0  [2026-12-07 10:00:0\$i] iteration       \$i/      $steps | number of skipped iterations:   0 | number of nan iterations:   0 |"
done
echo 0 > "$job/rc-\$SLURM_JOB_ID"
EOS
attempt=0
while :; do
  id=$(sbatch --parsable "$job/sbatch.sh") || exit 1
  echo "INFO:nemo_run.core.execution.slurm:Job id: $id"
  while squeue -h -j "$id" 2>/dev/null | grep -q .; do sleep 0.5; done
  sleep 0.5
  cat "$job/log-$id.out"
  rc=$(cat "$job/rc-$id" 2>/dev/null || echo 1)
  [ "$rc" = 0 ] && exit 0
  attempt=$((attempt + 1))
  [ "$attempt" -gt "${retries:-0}" ] && { echo "Exception: Experiment failed with status: FAILED" >&2; exit 1; }
done
"#;

/// NeMo-Run's "venv" python: `-m pip …` does nothing (no network), a script is run by bash.
const FAKE_PYTHON: &str = "#!/bin/bash\n[ \"$1\" = -m ] && exit 0\nexec bash \"$@\"\n";

fn launcher_work() -> Option<Work> {
    launcher_work_with("name = \"mb\"\n[[Tests]]\nid = \"t\"\ntest_name = \"mb\"\nnum_nodes = 2\n")
}

fn launcher_work_with(scenario: &str) -> Option<Work> {
    let w = slurm_work("", scenario)?;
    w.file(
        "tests/mb.toml",
        &format!(
            "{TEST}{}max_steps = 4\n",
            ARGS.replace("container_image = \"nvcr.io#nvidia/nemo:26.02.00\"\n", "")
        ),
    );
    w.file(
        "install/Megatron-Bridge__v0.3.0/scripts/performance/setup_experiment.py",
        FAKE_SETUP,
    );
    w.file("install/Run__main/pyproject.toml", "# NeMo-Run's clone\n");
    let py = w.file("install/Run__main-venv/bin/python", FAKE_PYTHON);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o755)).unwrap();
    Some(w)
}

fn run(w: &Work, env: &[(&str, &str)]) -> std::process::Output {
    let mut c = w.cloudai();
    c.args(common::slurm::RUN_ARGS).env("HF_TOKEN", "t");
    for (k, v) in env {
        c.env(k, v);
    }
    c.timeout(std::time::Duration::from_secs(240))
        .output()
        .unwrap()
}

fn launcher_gone(root: &Path) {
    assert!(
        !root.join("t/0/launcher.pid").exists(),
        "the launcher's pid file is left"
    );
    let out = std::process::Command::new("pgrep")
        .args(["-f", &root.display().to_string()])
        .output()
        .unwrap();
    assert!(
        out.stdout.is_empty(),
        "processes of the iteration still run: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn a_launcher_that_stays_with_its_job_is_followed_to_its_end_on_slurm() {
    let Some(w) = launcher_work() else {
        return;
    };
    let out = run(&w, &[]);
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let root = w.results_root();
    let r = record(&root, "t", 0);
    let id = r.job_id.clone().expect("the launcher's job id is recorded");
    let log = std::fs::read_to_string(root.join("t/0").join(LOG)).unwrap();
    assert!(log.contains(&format!("Job id: {id}")), "{log}");
    // the wrapper said the same, last
    let said = std::fs::read_to_string(root.join("t/0/launcher-stdout.txt")).unwrap();
    assert!(
        said.contains(&format!("Submitted batch job {id}")),
        "{said}"
    );
    let job = std::fs::read_to_string(root.join("t/0/slurm-job.toml")).unwrap();
    assert!(
        job.contains("state = \"COMPLETED\"") && job.contains(&format!("job_id = {id}")),
        "{job}"
    );
    let says = summary_says(&root);
    assert!(
        says.contains("4 step(s); last 4: mean 2.525 s")
            && says.contains("iteration 4 of 4 reached")
            && says.contains("16 ranks = num_gpus"),
        "{says}"
    );
    launcher_gone(&root);
}

/// The launcher's first job fails and it submits the job again (`--max_retries 1`): cloudai follows the second
/// job in its place, grades its run and keeps the first as an earlier attempt.
#[test]
fn the_launchers_retry_is_followed_in_place_of_the_failed_job() {
    let Some(w) = launcher_work() else {
        return;
    };
    let out = run(&w, &[("FIRST_JOB_FAILS", "1")]);
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let root = w.results_root();
    let log = std::fs::read_to_string(root.join("t/0").join(LOG)).unwrap();
    let ids: Vec<&str> = log
        .lines()
        .filter_map(|l| l.split("Job id: ").nth(1))
        .collect();
    assert_eq!(ids.len(), 2, "{log}");
    let r = record(&root, "t", 0);
    let job = std::fs::read_to_string(root.join("t/0/slurm-job.toml")).unwrap();
    assert!(
        job.contains(&format!("job_id = {}", ids[1])) && job.contains("state = \"COMPLETED\""),
        "{job}"
    );
    assert!(
        text.contains(&format!(
            "the test's launcher submitted job {} in its place",
            ids[1]
        )),
        "{text}"
    );
    assert!(
        r.attempts.iter().any(|a| a.state == "FAILED"),
        "{:?}",
        r.attempts
    );
    assert!(summary_says(&root).contains("4 step(s)"));
    launcher_gone(&root);
}

/// Waits (at most two minutes) until the launcher log names a job.
fn wait_for_job(w: &Work) -> (std::path::PathBuf, String) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        if let Ok(out) = std::fs::read_dir(w.path().join("out")) {
            for run in out.flatten() {
                let log = run.path().join("t/0").join(LOG);
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                if let Some(id) = text.split("Job id: ").nth(1) {
                    return (run.path(), id.trim().to_string());
                }
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the launcher never submitted"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Ctrl-C while the launcher stays with its running job: cloudai cancels the job; the launcher, seeing its job
/// end, ends too — nothing is left in the queue or running.
#[test]
fn ctrl_c_while_the_job_runs_leaves_nothing_behind() {
    use std::os::unix::process::CommandExt;
    let Some(w) = launcher_work() else {
        return;
    };
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("cloudai"))
        .current_dir(w.path())
        .args(common::slurm::RUN_ARGS)
        .env("HF_TOKEN", "t")
        .env("JOB_SECONDS", "120")
        .process_group(0)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (root, id) = wait_for_job(&w);
    std::thread::sleep(std::time::Duration::from_secs(2));
    common::signal(-(child.id() as i32), libc::SIGINT);
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(130), "{text}");
    assert!(
        !common::slurm::squeue_ids().contains(&id),
        "job {id} survived the interrupt: {text}"
    );
    launcher_gone(&root);
}

/// `cloudai run` killed with SIGKILL while the job runs: the launcher lives on with its job; `resume` takes the
/// job from the launcher log and follows it to its end — submitted once.
#[test]
fn kill_9_while_the_job_runs_then_resume_follows_it_to_its_end() {
    let Some(w) = launcher_work() else {
        return;
    };
    let (count, path) = common::slurm::counting_sbatch(&w);
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("cloudai"))
        .current_dir(w.path())
        .args(common::slurm::RUN_ARGS)
        .env("PATH", &path)
        .env("HF_TOKEN", "t")
        .env("JOB_SECONDS", "8")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let (root, id) = wait_for_job(&w);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(root.join("t/0/launcher.pid").exists());
    let out = w
        .cloudai()
        .arg("resume")
        .arg(&root)
        .env("PATH", &path)
        .env("HF_TOKEN", "t")
        .timeout(std::time::Duration::from_secs(180))
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let r = record(&root, "t", 0);
    assert_eq!(r.job_id.as_deref(), Some(id.as_str()), "{text}");
    assert_eq!(r.status, cloudai::results::Status::Passed, "{text}");
    let calls = std::fs::read_to_string(&count).unwrap_or_default();
    assert_eq!(calls.lines().count(), 1, "sbatch was called again: {text}");
    launcher_gone(&root);
}

/// A stand-in for NCCL's `all_reduce_perf_mpi` run on the hosts as a pre-test hook: the `Avg bus bandwidth` line
/// after `HOOK_SECONDS`; on `HOOK_FAILS_ON` a warning instead.
const HOOK_BINARY: &str = "#!/bin/bash\nsleep \"${HOOK_SECONDS:-0}\"\n\
[ \"$SLURMD_NODENAME\" = \"${HOOK_FAILS_ON:-none}\" ] && { echo 'NCCL WARN NET/IB : no device'; exit 0; }\n\
echo '# Avg bus bandwidth    : 181.25'\n";

/// Megatron-Bridge with an NCCL `pre_test` hook (bare metal, the stand-in binary on PATH) on the real cluster:
/// `nodes` a node list, or none.
fn pre_hook_work(nodes: &str) -> Option<Work> {
    let w = launcher_work_with(&format!(
        "name = \"mb\"\npre_test = \"hk\"\n[[Tests]]\nid = \"t\"\ntest_name = \"mb\"\nnum_nodes = 2\n{nodes}"
    ))?;
    let bin = w.file("bin/all_reduce_perf_mpi", HOOK_BINARY);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    w.file(
        "conf/hook/hk.toml",
        "name = \"hk\"\n[[Tests]]\nid = \"h\"\ntest_name = \"bw\"\n",
    );
    w.file(
        "conf/hook/test/bw.toml",
        "name = \"bw\"\ndescription = \"d\"\ntest_template_name = \"NcclTest\"\n[cmd_args]\n\
         docker_image_url = \"\"\nsubtest_name = \"all_reduce_perf_mpi\"\n",
    );
    Some(w)
}

/// cloudai's output with what the pre-hook job and the launcher said, for a failed assertion.
fn with_evidence(out: &std::process::Output, w: &Work) -> String {
    let mut text = stdout_of(out);
    if let Some(it) = std::fs::read_dir(w.path().join("out"))
        .ok()
        .and_then(|mut d| d.next())
        .and_then(Result::ok)
        .map(|e| e.path().join("t/0"))
    {
        for f in [
            "pre_hook/stdout.txt",
            "pre_hook/stderr.txt",
            "launcher-stderr.txt",
        ] {
            let said = std::fs::read_to_string(it.join(f)).unwrap_or_default();
            text.push_str(&format!("\n--- {f}:\n{said}"));
        }
    }
    text
}

/// The pre-hook job's id, as the wrapper announced it in the iteration directory `it`.
fn pre_hook_job(it: &Path) -> String {
    let said = std::fs::read_to_string(it.join("launcher-stdout.txt")).unwrap();
    said.split("Submitted pre-hook batch job ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("{said}"))
        .to_string()
}

/// PATH with the stand-in hook binary first.
fn hook_path(w: &Work) -> String {
    format!(
        "{}:{}",
        w.path().join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// The pre-hook job runs the hook on each node at once and passes; the launcher waited for it to run, took its
/// nodes and made the training depend on it: the training runs after it, on its nodes, and passes.
#[test]
fn a_pre_hook_job_that_passes_lets_the_training_run_on_its_nodes() {
    let Some(w) = pre_hook_work("") else {
        return;
    };
    // long enough for the wrapper's 10-second poll to see it running
    let path = hook_path(&w);
    let out = run(&w, &[("HOOK_SECONDS", "14"), ("PATH", &path)]);
    let text = with_evidence(&out, &w);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let root = w.results_root();
    let it = root.join("t/0");
    let hook_id = pre_hook_job(&it);
    let job = std::fs::read_to_string(it.join("job/sbatch.sh")).unwrap();
    assert!(
        job.contains(&format!("#SBATCH --dependency=afterok:{hook_id}\n"))
            && job.contains("#SBATCH --nodelist=node"),
        "{job}"
    );
    // one output per node of the pre-hook job, each with the line
    let outputs: Vec<_> = std::fs::read_dir(it.join("pre_test/bw"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("stdout_node"))
        .collect();
    assert_eq!(outputs.len(), 2, "{outputs:?}");
    for o in outputs {
        let got = std::fs::read_to_string(o.path()).unwrap();
        assert!(got.contains("Avg bus bandwidth"), "{o:?}: {got}");
    }
    let r = record(&root, "t", 0);
    assert_eq!(r.status, cloudai::results::Status::Passed, "{text}");
    assert!(summary_says(&root).contains("4 step(s)"));
    assert!(!common::slurm::squeue_ids().contains(&hook_id));
    launcher_gone(&root);
}

/// A hook fails on one node: the pre-hook job fails, the training's dependency can never be satisfied — cloudai
/// cancels it at once and says which hook failed on which node, nothing left in the queue.
#[test]
fn a_pre_hook_job_that_fails_on_a_node_ends_the_test_naming_the_node() {
    let Some(w) = pre_hook_work("nodes = [\"node001\", \"node002\"]\n") else {
        return;
    };
    let path = hook_path(&w);
    let out = run(&w, &[("HOOK_FAILS_ON", "node002"), ("PATH", &path)]);
    let text = with_evidence(&out, &w);
    assert_ne!(out.status.code(), Some(0), "{text}");
    let root = w.results_root();
    let r = record(&root, "t", 0);
    assert_eq!(r.status, cloudai::results::Status::Failed, "{text}");
    assert_eq!(
        r.end_reason,
        cloudai::results::EndReason::PreflightFailed,
        "{text}"
    );
    let says = summary_says(&root);
    assert!(
        says.contains("pre-test hooks failed")
            && says.contains("bw on node002")
            && !says.contains("node001"),
        "{says}"
    );
    let job = std::fs::read_to_string(root.join("t/0/job/sbatch.sh")).unwrap();
    assert!(job.contains("#SBATCH --nodelist=node001,node002"), "{job}");
    let id = r.job_id.clone().unwrap_or_default();
    assert!(!common::slurm::squeue_ids().contains(&id), "{text}");
    launcher_gone(&root);
}

/// Ctrl-C while the pre-hook job runs and the training waits on it: both are cancelled, nothing is left in the
/// queue or running.
#[test]
fn ctrl_c_while_the_pre_hook_job_runs_cancels_it_with_the_training() {
    use std::os::unix::process::CommandExt;
    let Some(w) = pre_hook_work("nodes = [\"node001\", \"node002\"]\n") else {
        return;
    };
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("cloudai"))
        .current_dir(w.path())
        .args(common::slurm::RUN_ARGS)
        .env("HF_TOKEN", "t")
        .env("HOOK_SECONDS", "120")
        .env("PATH", hook_path(&w))
        .process_group(0)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (root, id) = wait_for_job(&w);
    let hook_id = pre_hook_job(&root.join("t/0"));
    assert!(common::slurm::squeue_ids().contains(&hook_id));
    std::thread::sleep(std::time::Duration::from_secs(2));
    common::signal(-(child.id() as i32), libc::SIGINT);
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(130), "{text}");
    let left = common::slurm::squeue_ids();
    assert!(
        !left.contains(&id) && !left.contains(&hook_id),
        "jobs {id} / {hook_id} survived the interrupt: {text}"
    );
    launcher_gone(&root);
}
