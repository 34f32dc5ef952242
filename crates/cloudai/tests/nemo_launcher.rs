//! The NeMo launcher (`NeMoLauncher`): the launcher's command (CloudAI's job is compat_dry_run.rs), refusals found
//! before anything runs, the grade from the training log, and on the real Slurm cluster a launcher that submits its
//! own job, watched to its end (or refused when it prints no job id).

use crate::common;

use std::path::Path;

use common::slurm::{cloudai_run, slurm_work};
use common::{data, record, stdout_of, Work};
use serde_json::Value;

const SYSTEM: &str =
    "name = \"s\"\nscheduler = \"slurm\"\ninstall_path = \"install\"\noutput_path = \"out\"\n\
default_partition = \"p\"\ngpus_per_node = 8\n[[partitions]]\nname = \"p\"\n";
const SCENARIO: &str = "name = \"n\"\n[[Tests]]\nid = \"t\"\ntest_name = \"nl\"\nnum_nodes = 2\n";
const TEST: &str = "name = \"nl\"\ndescription = \"d\"\ntest_template_name = \"NeMoLauncher\"\n";
const LOG: &str = "log-20261130_101155:run_4711";

fn sample(ext: &str) -> String {
    std::fs::read_to_string(data().join(format!("nemo-launcher-samples/{LOG}.{ext}"))).unwrap()
}

fn summary_says(root: &Path) -> String {
    let summary: Value =
        serde_json::from_slice(&std::fs::read(root.join("summary.json")).unwrap()).unwrap();
    let t = &summary["tests"][0];
    format!("{} {}", t["message"], t["checks"])
}

#[test]
fn graded_from_the_training_log() {
    let w = Work::new();
    w.file("system.toml", SYSTEM);
    w.file(
        "tests/t.toml",
        &format!("{TEST}[cmd_args]\ndocker_image_url = \"nemo\"\n"),
    );
    w.file("s.toml", SCENARIO);
    let out = w.cloudai().args(common::DRY_RUN_S_TOML).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let root = w.results_root();
    let it = root.join("t/0");
    // no batch script of ours: the launcher's command
    assert!(!it.join("cloudai_sbatch_script.sh").exists());
    let cmd = std::fs::read_to_string(it.join("generated_command.sh")).unwrap();
    assert!(
        cmd.contains(
            " cluster.partition=p \\\n training.trainer.num_nodes=2 \\\n container=nemo \\\n"
        ),
        "{cmd}"
    );
    let run = it.join("run");
    std::fs::create_dir_all(&run).unwrap();
    // a dry-run's iteration is graded once it has output of its own
    std::fs::write(it.join("stdout.txt"), "").unwrap();
    let (out_log, err_log) = (sample("out"), sample("err"));
    let world8 = out_log.replace("/16", "/8");
    let unfinished: String = out_log
        .lines()
        .filter(|l| !l.contains("train_step_timing"))
        .map(|l| format!("{l}\n"))
        .collect();
    let crashed = format!("{unfinished}torch.OutOfMemoryError: CUDA out of memory.\n");
    let zero = out_log.replace("[11.85,", "[0.0,");
    for (text, err, code, says) in [
        (
            out_log.as_str(),
            err_log.as_str(),
            0,
            "20 step times, median 2.140 s",
        ),
        (
            out_log.as_str(),
            err_log.as_str(),
            0,
            "16 ranks = 2 node(s) × 8 GPUs",
        ),
        (
            out_log.as_str(),
            err_log.as_str(),
            0,
            "max_steps=20 reached",
        ),
        (
            world8.as_str(),
            err_log.as_str(),
            3,
            "the training ran 8 ranks, but 2 node(s) × 8 GPUs = 16 were asked",
        ),
        (
            out_log.as_str(),
            "`Trainer.fit` stopped: `max_steps=5` reached.\n",
            3,
            "stopped at max_steps=5, but 20 steps were asked",
        ),
        (
            unfinished.as_str(),
            "",
            3,
            "the training did not run to its end",
        ),
        (
            crashed.as_str(),
            "",
            3,
            "last error: torch.OutOfMemoryError",
        ),
        (zero.as_str(), err_log.as_str(), 3, "a step time of 0 s"),
    ] {
        std::fs::write(run.join(format!("{LOG}.out")), text).unwrap();
        std::fs::write(run.join(format!("{LOG}.err")), err).unwrap();
        let rep = w.generate_report(&root);
        assert_eq!(rep.status.code(), Some(code), "{says}: {}", stdout_of(&rep));
        let said = summary_says(&root);
        assert!(said.contains(says), "{says}: {said}");
    }
    // no log at all
    std::fs::remove_dir_all(&run).unwrap();
    let rep = w.generate_report(&root);
    assert_eq!(rep.status.code(), Some(3), "{}", stdout_of(&rep));
    assert!(summary_says(&root).contains("no training log (log-*.out)"));
    // CloudAI's summary and our CSV and page, from the passing log
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(run.join(format!("{LOG}.out")), &out_log).unwrap();
    std::fs::write(run.join(format!("{LOG}.err")), &err_log).unwrap();
    let rep = w.generate_report(&root);
    assert_eq!(rep.status.code(), Some(0), "{}", stdout_of(&rep));
    let summary = std::fs::read_to_string(it.join("train_step_timing_report.txt")).unwrap();
    assert_eq!(
        summary,
        "Avg: 3.2415\nMedian: 2.1400\nMin: 2.1000\nMax: 11.8500\n"
    );
    let csv = std::fs::read_to_string(it.join("cloudai_nemo_launcher_step_timing.csv")).unwrap();
    assert_eq!(csv.lines().count(), 21, "{csv}");
    assert!(
        csv.starts_with("step,train_step_timing_s\n1,11.85\n"),
        "{csv}"
    );
    let page = std::fs::read_to_string(it.join("cloudai_nemo_launcher_bokeh_report.html")).unwrap();
    assert!(page.contains("2.140 s") && page.contains("<td>11.85</td>"));
}

#[test]
fn what_cannot_work_is_refused_before_anything_is_written() {
    let w = Work::new();
    w.file("system.toml", SYSTEM);
    w.file("s.toml", SCENARIO);
    for (args, says) in [
        (
            "[cmd_args.training.model.tokenizer]\nmodel = \"/nonexistent/tokenizer.model\"\n",
            "the tokenizer file \"/nonexistent/tokenizer.model\" (training.model.tokenizer.model) does not exist",
        ),
        (
            "stages = '[\"data_preparation\", \"training\"]'\n",
            "cmd_args.stages': must name exactly one stage, found 2",
        ),
        (
            "[cmd_args.training.model.data]\ndata_impl = \"mmap\"\n",
            "cmd_args.training.model.data.data_prefix': is empty while training.model.data.data_impl is not \"mock\"",
        ),
        (
            "[cmd_args.training.trainer]\nmax_steps = 0\n",
            "must be 1 or more, found 0",
        ),
        (
            "[cmd_args.training.trainer]\nlog_every_n_steps = \"3\"\n",
            "\"3\" is not an accepted value",
        ),
    ] {
        w.file("tests/t.toml", &format!("{TEST}[cmd_args]\n{args}"));
        let _ = std::fs::remove_dir_all(w.path().join("out"));
        let out = w.cloudai().args(common::DRY_RUN_S_TOML).output().unwrap();
        let text = stdout_of(&out);
        assert_eq!(out.status.code(), Some(1), "{says}: {text}");
        assert!(text.contains(says), "{says}: {text}");
        assert!(!w.path().join("out").exists(), "{says}: something was written");
    }
}

/// A stand-in for NeMo-Framework-Launcher's `main.py` (run by the "venv's" python): it reads the overrides it is
/// given, writes its own batch script under `base_results_dir` and submits it with the real sbatch, as the
/// launcher does; the job writes the training log in NeMo's and Lightning's formats.
const FAKE_LAUNCHER: &str = r#"#!/bin/bash
for a in "$@"; do
  case "$a" in
    base_results_dir=*) base="${a#*=}" ;;
    cluster.job_name_prefix=*) prefix="${a#*=}" ;;
    cluster.partition=*) part="${a#*=}" ;;
    cluster.gpus_per_node=*) gpn="${a#*=}" ;;
    training.trainer.num_nodes=*) nodes="${a#*=}" ;;
    training.trainer.max_steps=*) steps="${a#*=}" ;;
    training.run.name=*) run="${a#*=}" ;;
  esac
done
[ -n "$FAIL_LAUNCHER" ] && { echo "hydra.errors.ConfigCompositionException: Could not override 'training'" >&2; exit 1; }
mkdir -p "$base/$run"
world=$((nodes * gpn))
cat > "$base/$run/nemo-submission.sh" <<EOS
#!/bin/bash
#SBATCH --job-name=${prefix}${run}
#SBATCH --partition=$part
#SBATCH --nodes=$nodes
#SBATCH --output=$base/$run/log-%x_%j.out
#SBATCH --error=$base/$run/log-%x_%j.err
for r in \$(seq 0 $((world - 1))); do echo "Initializing distributed: GLOBAL_RANK: \$r, MEMBER: \$((r + 1))/$world"; done
sleep ${JOB_SECONDS:-1}
echo "[NeMo I 2026-12-07 10:15:02 perf_metrics_utils:56] train_step_timing in s: [3.5, 2.25, 2.0, 2.0]"
echo '\`Trainer.fit\` stopped: \`max_steps=$steps\` reached.' >&2
EOS
id=$(sbatch --parsable "$base/$run/nemo-submission.sh") || exit 1
sleep ${LAUNCHER_DELAY:-0}
echo "[NeMo I launcher] Job ${prefix}${run} submitted with Job ID ${id}"
"#;

fn launcher_work(scenario_env: &str) -> Option<Work> {
    let scenario = format!(
        "name = \"nl\"\n[[Tests]]\nid = \"t\"\ntest_name = \"nl\"\nnum_nodes = 2\n{scenario_env}"
    );
    let w = slurm_work("", &scenario)?;
    w.file("tests/nl.toml", &format!("{TEST}[cmd_args]\ndocker_image_url = \"nemo\"\n[cmd_args.training.trainer]\nmax_steps = 4\n"));
    let repo = "install/NeMo-Framework-Launcher__599ecfcbbd64fd2de02f2cc093b1610d73854022";
    w.file(
        &format!("{repo}/launcher_scripts/main.py"),
        "# the launcher's clone\n",
    );
    let py = w.file(&format!("{repo}-venv/bin/python"), FAKE_LAUNCHER);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    Some(w)
}

/// Waits (at most a minute) until the counting sbatch wrapper has been called: the launcher is submitting.
fn wait_for_sbatch(count: &Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::fs::read_to_string(count)
        .unwrap_or_default()
        .is_empty()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the launcher never called sbatch"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn the_launchers_own_job_is_watched_to_its_end_on_slurm() {
    let Some(w) = launcher_work("") else {
        return;
    };
    let out = cloudai_run(&w, None);
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let root = w.results_root();
    let r = record(&root, "t", 0);
    let id = r.job_id.expect("the launcher's job id is recorded");
    let said = std::fs::read_to_string(root.join("t/0/launcher-stdout.txt")).unwrap();
    assert!(
        said.contains(&format!("submitted with Job ID {id}")),
        "{said}"
    );
    // Slurm's facts about that job, and the training log it wrote, graded
    let job = std::fs::read_to_string(root.join("t/0/slurm-job.toml")).unwrap();
    assert!(
        job.contains("state = \"COMPLETED\"") && job.contains(&format!("job_id = {id}")),
        "{job}"
    );
    let says = summary_says(&root);
    assert!(
        says.contains("4 step times, median 2.125 s")
            && says.contains("16 ranks = 2 node(s) × 8 GPUs"),
        "{says}"
    );
    assert!(root.join("t/0/train_step_timing_report.txt").is_file());
}

#[test]
fn a_launcher_that_submits_nothing_fails_the_iteration_with_what_it_said() {
    let Some(w) = launcher_work("") else {
        return;
    };
    let out = w
        .cloudai()
        .env("FAIL_LAUNCHER", "1")
        .args(common::slurm::RUN_ARGS)
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert_ne!(out.status.code(), Some(0), "{text}");
    let root = w.results_root();
    let r = record(&root, "t", 0);
    assert_eq!(r.job_id, None);
    assert!(
        r.message
            .contains("exited with status 1 without printing a job id")
            && r.message.contains("Could not override 'training'"),
        "{}",
        r.message
    );
}

/// `cloudai run` killed with SIGKILL while the launcher is between its `sbatch` and the id it prints: the launcher
/// lives on (its output goes to files, not to the dead process), and `resume` waits for it, takes the job it
/// submitted and watches it — the job is submitted once.
#[test]
fn kill_9_while_the_launcher_submits_then_resume_takes_its_job_once() {
    let Some(w) = launcher_work("") else {
        return;
    };
    let (count, path) = common::slurm::counting_sbatch(&w);
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("cloudai"))
        .current_dir(w.path())
        .args(common::slurm::RUN_ARGS)
        .env("PATH", &path)
        .env("LAUNCHER_DELAY", "4")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let submitted = || {
        std::fs::read_to_string(&count)
            .unwrap_or_default()
            .lines()
            .count()
    };
    wait_for_sbatch(&count);
    child.kill().unwrap();
    child.wait().unwrap();
    let root = w.results_root();
    assert!(
        root.join("t/0/launcher.pid").exists(),
        "the launcher's pid is kept while it runs"
    );
    assert_eq!(
        record(&root, "t", 0).job_id,
        None,
        "killed before the id was printed"
    );
    let out = w
        .cloudai()
        .arg("resume")
        .arg(&root)
        .env("PATH", &path)
        .timeout(std::time::Duration::from_secs(180))
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let r = record(&root, "t", 0);
    let said = std::fs::read_to_string(root.join("t/0/launcher-stdout.txt")).unwrap();
    let id = r.job_id.clone().expect("the launcher's job is taken over");
    assert!(
        said.contains(&format!("submitted with Job ID {id}")),
        "{said}"
    );
    assert_eq!(r.status, cloudai::results::Status::Passed, "{text}");
    assert_eq!(submitted(), 1, "sbatch was called again: {text}");
    assert!(!root.join("t/0/launcher.pid").exists());
}

/// Ctrl-C at the terminal (SIGINT to the whole foreground process group) while the launcher is between its
/// `sbatch` and the id it prints: the launcher, in a process group of its own, finishes; cloudai then cancels the
/// job it submitted — nothing is left in the queue.
#[test]
fn ctrl_c_while_the_launcher_submits_leaves_no_job_behind() {
    use std::os::unix::process::CommandExt;
    let Some(w) = launcher_work("") else {
        return;
    };
    let (count, path) = common::slurm::counting_sbatch(&w);
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("cloudai"))
        .current_dir(w.path())
        .args(common::slurm::RUN_ARGS)
        .env("PATH", &path)
        .env("LAUNCHER_DELAY", "3")
        .env("JOB_SECONDS", "120")
        .process_group(0)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_sbatch(&count);
    common::signal(-(child.id() as i32), libc::SIGINT);
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(130), "{text}");
    let root = w.results_root();
    let said = std::fs::read_to_string(root.join("t/0/launcher-stdout.txt")).unwrap();
    let id = said
        .split("submitted with Job ID ")
        .nth(1)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| panic!("the launcher finished its submission: {said}"));
    assert!(
        !common::slurm::squeue_ids().contains(&id),
        "job {id} survived the interrupt: {text}"
    );
    assert_eq!(record(&root, "t", 0).job_id.as_deref(), Some(id.as_str()));
}
