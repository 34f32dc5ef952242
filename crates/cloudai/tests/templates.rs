//! CloudAI's workloads beyond NCCL and UCC, each the whole way: fio, NeMo-Run, SlurmContainer and the OSU
//! micro-benchmarks (their Slurm scripts against CloudAI's trees are in compat_dry_run.rs).

use crate::common;

use common::{data, stdout_of, Work};
use serde_json::Value;

fn fio_sample(name: &str) -> String {
    std::fs::read_to_string(data().join("fio-samples").join(name)).unwrap()
}

/// Real fio outputs of three generations and formats, read by the format's rules.
#[test]
fn fio_outputs_of_real_runs() {
    use cloudai::workloads::fio::parse;
    let w = parse(&fio_sample("fio-3.1-libaio-write.txt"));
    assert_eq!(w.version.as_deref(), Some("3.1"));
    assert_eq!(w.rows.len(), 1);
    let r = &w.rows[0];
    assert_eq!((r.job.as_str(), r.operation.as_str()), ("myjob", "write"));
    assert_eq!((r.iops, r.bw_mib()), (28800.0, 112.0));
    // the total latency (lat) wins over the completion latency (clat)
    assert_eq!(r.latency_us(), Some(136.97));
    assert_eq!(
        (r.p50_us, r.p99_us, r.p999_us),
        (Some(103.0), Some(408.0), Some(676.0))
    );

    let rd = parse(&fio_sample("fio-3.1-libaio-read.txt"));
    assert_eq!(
        (rd.rows[0].operation.as_str(), rd.rows[0].iops),
        ("read", 3846.0)
    );
    assert_eq!(rd.rows[0].bw_mib(), 15.0);

    // nanosecond latencies; the sync percentiles block is not the completion latency's
    let s = parse(&fio_sample("fio-3.25-sync-fdatasync.txt"));
    let r = &s.rows[0];
    assert!((r.latency_us().unwrap() - 13.73186).abs() < 1e-9, "{r:?}");
    assert_eq!((r.p50_us, r.p99_us), (Some(12.608), Some(23.168)));

    // fio 2: `io=…, bw=…KB/s, iops=…`, KB meaning KiB; cut inside the percentiles
    let old = parse(&fio_sample("fio-2.2.10-old-format.txt"));
    let r = &old.rows[0];
    assert_eq!((r.iops, r.bw, r.bw_unit.as_str()), (509.0, 2039.9, "KiB/s"));
    assert_eq!((r.p50_us, r.p99_us), (Some(1896.0), None));

    // four tasks printing one after another (srun --ntasks=4): four rows of one job
    let four = fio_sample("fio-3.1-libaio-write.txt").repeat(4);
    let out = parse(&four);
    assert_eq!(out.rows.len(), 4);
    assert_eq!(out.rows[3].instance, 4);
}

fn fio_stand_in(w: &Work, sample: &str, exit: i32) -> std::path::PathBuf {
    let out = w.file("fio-output.txt", &fio_sample(sample));
    let bin = w.script(
        "bin/fio",
        &format!(
            r#"#!/bin/sh
echo "$@" > "$(dirname "$0")/../fio-args.txt"
echo "FIO_ENV=$FIO_ENV" >&2
cat {}
exit {exit}
"#,
            out.display()
        ),
    );
    bin
}

/// A Standalone fio run: the command CloudAI writes (environment exported on the line, output redirected), a
/// stand-in `fio` that prints a real output, graded PASSED, CSV and page written, the DSE metric read.
#[test]
fn fio_runs_standalone_and_is_reported() {
    let w = Work::new();
    w.standalone();
    let bin = fio_stand_in(&w, "fio-3.1-libaio-write.txt", 0);
    w.file(
        "tests/fio.toml",
        &format!(
            r#"name = "fio"
description = "d"
test_template_name = "Fio"
[cmd_args]
fio_binary = "{}"
[cmd_args.args]
name = "myjob"
rw = "write"
bs = "4k"
direct = true
end_fsync = false
[extra_env_vars]
FIO_ENV = "from-the-test"
"#,
            bin.display()
        ),
    );
    w.file(
        "s.toml",
        r#"name = "f"
[[Tests]]
id = "fio"
test_name = "fio"
"#,
    );
    let out = w.cloudai().args(common::RUN_S_TOML).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let root = w.results_root();
    let args = std::fs::read_to_string(w.path().join("fio-args.txt")).unwrap();
    assert_eq!(args.trim(), "--name=myjob --rw=write --bs=4k --direct");
    let it = root.join("fio/0");
    let stderr = std::fs::read_to_string(it.join("stderr.txt")).unwrap();
    assert!(stderr.contains("FIO_ENV=from-the-test"), "{stderr}");
    let trt = std::fs::read_to_string(it.join("test-run.toml")).unwrap();
    assert!(
        trt.contains(&format!(
            r#"test_cmd = "export FIO_ENV=\"from-the-test\"; {} --name=myjob"#,
            bin.display()
        )),
        "{trt}"
    );
    let csv = std::fs::read_to_string(it.join("fio_summary.csv")).unwrap();
    let mut lines = csv.lines();
    assert!(lines
        .next()
        .unwrap()
        .starts_with("operation,iops,bw,bw_unit,bw_mib,latency_avg,latency_unit,latency_usec,"));
    assert_eq!(
        lines.next().unwrap(),
        "write,28800.0,112.0,MiB/s,112.0,136.97,usec,136.97,myjob,1,103.0,408.0,676.0"
    );
    let page = std::fs::read_to_string(it.join("fio_report.html")).unwrap();
    assert!(
        page.contains("112.0 MiB/s") && page.contains("28.8k IOPS"),
        "{page}"
    );
    let summary: Value =
        serde_json::from_slice(&std::fs::read(root.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["tests"][0]["status"], "PASSED", "{summary}");
    assert_eq!(summary["tests"][0]["metrics"]["write_bw_mib"], 112.0);
}

/// fio that printed its error and exited 1: FAILED with fio's words, not "no metrics".
#[test]
fn fio_errors_fail_with_fios_words() {
    let w = Work::new();
    w.standalone();
    let out = w.file(
        "fio-output.txt",
        "fio-smoke: (groupid=0, jobs=1): err= 2 (file:filesetup.c:174, func=open, error=No such file or directory): pid=7\n",
    );
    let bin = w.script(
        "bin/fio",
        &format!("#!/bin/sh\ncat {}\nexit 1\n", out.display()),
    );
    w.file(
        "tests/fio.toml",
        &format!(
            r#"name = "fio"
description = "d"
test_template_name = "Fio"
[cmd_args]
fio_binary = "{}"
"#,
            bin.display()
        ),
    );
    w.file(
        "s.toml",
        r#"name = "f"
[[Tests]]
id = "fio"
test_name = "fio"
"#,
    );
    let run = w.cloudai().args(common::RUN_S_TOML).output().unwrap();
    assert_eq!(run.status.code(), Some(3), "{}", stdout_of(&run));
    let summary: Value =
        serde_json::from_slice(&std::fs::read(w.results_root().join("summary.json")).unwrap())
            .unwrap();
    let msg = summary["tests"][0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        msg.contains("No such file or directory") && msg.contains("stdout.txt:1"),
        "{summary}"
    );
}

/// A key of `cmd_args.args` that is not an option name is refused before anything runs (it would go unquoted
/// onto the command line).
#[test]
fn fio_option_names_are_checked() {
    let w = Work::new();
    w.standalone();
    w.file(
        "tests/fio.toml",
        r#"name = "fio"
description = "d"
test_template_name = "Fio"
[cmd_args.args]
"rw; rm -rf /" = "x"
"#,
    );
    w.file(
        "s.toml",
        r#"name = "f"
[[Tests]]
id = "fio"
test_name = "fio"
"#,
    );
    let out = w.cloudai().args(common::DRY_RUN_S_TOML).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stdout_of(&out));
    let text = stdout_of(&out);
    assert!(
        text.contains(
            "tests/fio.toml:5:1: field 'cmd_args.args.rw; rm -rf /': not a fio option name"
        ),
        "{text}"
    );
    assert!(!w.path().join("out").exists());
}

/// A CloudAI-like checkout in the work directory: `conf/common/{system,test,test_scenario}` with the example
/// Slurm system (install_path `./install_dir`) and the NeMo-Run test and scenario of CloudAI's conf.
fn nemo_checkout(w: &Work) {
    let conf = data().join("compat/conf/common");
    for (from, to) in [
        (
            "system/example_slurm_cluster.toml",
            "conf/common/system/slurm.toml",
        ),
        ("test/nemo_run_llama3_8b.toml", "conf/common/test/nemo.toml"),
        (
            "test_scenario/nemo_run_llama3_8b.toml",
            "conf/common/test_scenario/nemo.toml",
        ),
    ] {
        w.file(to, &std::fs::read_to_string(conf.join(from)).unwrap());
    }
}

const NEMO_ARGS: [&str; 6] = [
    "--system-config",
    "conf/common/system/slurm.toml",
    "--tests-dir",
    "conf/common/test",
    "--test-scenario",
    "conf/common/test_scenario/nemo.toml",
];

/// NeMo-Run runs CloudAI's launcher script, which this tool does not carry: `install` takes it from the CloudAI
/// checkout the configs come from (or CLOUDAI_NEMORUN_SCRIPT), says where it looked when it is nowhere, and `run`
/// refuses before submitting anything until it is installed.
#[test]
fn nemo_run_launcher_comes_from_the_users_cloudai() {
    let w = Work::new();
    nemo_checkout(&w);
    let run = w
        .cloudai()
        .arg("run")
        .args(NEMO_ARGS)
        .env_remove("CLOUDAI_NEMORUN_SCRIPT")
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(1), "{}", stdout_of(&run));
    assert!(
        stdout_of(&run).contains("Not installed: CloudAI's launcher cloudai_nemorun.py"),
        "{}",
        stdout_of(&run)
    );
    assert!(!w.path().join("results").exists(), "nothing was submitted");

    let install = w
        .cloudai()
        .arg("install")
        .args(NEMO_ARGS)
        .env_remove("CLOUDAI_NEMORUN_SCRIPT")
        .output()
        .unwrap();
    let text = stdout_of(&install);
    assert_eq!(install.status.code(), Some(1), "{text}");
    assert!(
        text.contains("src/cloudai/workloads/nemo_run/cloudai_nemorun.py does not exist")
            && text.contains("CLOUDAI_NEMORUN_SCRIPT"),
        "{text}"
    );

    // in the checkout: installed by copy
    w.file(
        "src/cloudai/workloads/nemo_run/cloudai_nemorun.py",
        "# CloudAI's launcher\n",
    );
    let install = w
        .cloudai()
        .arg("install")
        .args(NEMO_ARGS)
        .env_remove("CLOUDAI_NEMORUN_SCRIPT")
        .output()
        .unwrap();
    assert_eq!(install.status.code(), Some(0), "{}", stdout_of(&install));
    assert_eq!(
        std::fs::read_to_string(w.path().join("install_dir/cloudai_nemorun.py")).unwrap(),
        "# CloudAI's launcher\n"
    );

    // the variable wins; a changed source is a new install
    let other = w.file("elsewhere/cloudai_nemorun.py", "# newer\n");
    let install = w
        .cloudai()
        .arg("install")
        .args(NEMO_ARGS)
        .env("CLOUDAI_NEMORUN_SCRIPT", &other)
        .output()
        .unwrap();
    assert_eq!(install.status.code(), Some(0), "{}", stdout_of(&install));
    assert_eq!(
        std::fs::read_to_string(w.path().join("install_dir/cloudai_nemorun.py")).unwrap(),
        "# newer\n"
    );
}

fn nemo_step(g: u64, t: f64) -> String {
    format!(
        "Training epoch 0, iteration {g}/99 | lr: 2.699e-06 | global_batch_size: 128 | global_step: {g} | \
         reduced_train_loss: 11.03 | train_step_timing in s: {t} | consumed_samples: 2304\n"
    )
}

/// A NeMo-Run tree with the trainer's output: graded by stderr's "max_steps=… reached", step times reported
/// (CloudAI's window: every step but the first when steps 80-100 are fewer than 20); a crash quotes its error.
#[test]
fn nemo_run_is_graded_and_reported_from_its_logs() {
    let w = Work::new();
    nemo_checkout(&w);
    let dry = w
        .cloudai()
        .arg("dry-run")
        .args(NEMO_ARGS)
        .args(["--output-dir", "out"])
        .output()
        .unwrap();
    assert_eq!(dry.status.code(), Some(0), "{}", stdout_of(&dry));
    let root = w.results_root();
    let one = root.join("nemo_run_llama3_8b.single-node/0");
    let two = root.join("nemo_run_llama3_8b.2nodes/0");
    let steps: String = (0..10)
        .map(|g| nemo_step(g, if g == 0 { 40.0 } else { 12.5 }))
        .collect();
    std::fs::write(one.join("stdout.txt"), &steps).unwrap();
    std::fs::write(
        one.join("stderr.txt"),
        "`Trainer.fit` stopped: `max_steps=10` reached.\n",
    )
    .unwrap();
    std::fs::write(two.join("stdout.txt"), nemo_step(0, 40.0)).unwrap();
    std::fs::write(
        two.join("stderr.txt"),
        "Traceback (most recent call last):\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n",
    )
    .unwrap();
    let rep = w.generate_report(&root);
    // one of the two did not pass
    assert_eq!(rep.status.code(), Some(3), "{}", stdout_of(&rep));
    assert_eq!(
        std::fs::read_to_string(one.join("report.txt")).unwrap(),
        "Average: 12.5\nMedian: 12.5\nMin: 12.5\nMax: 12.5\n"
    );
    assert!(one.join("cloudai_nemorun_bokeh_report.html").is_file());
    let summary: Value =
        serde_json::from_slice(&std::fs::read(root.join("summary.json")).unwrap()).unwrap();
    let tests = summary["tests"].as_array().unwrap();
    let by_id = |id: &str| tests.iter().find(|t| t["test_id"] == id).unwrap().clone();
    let ok = by_id("nemo_run_llama3_8b.single-node");
    assert_eq!(ok["status"], "PASSED", "{ok}");
    assert_eq!(ok["metrics"]["step_time_avg_s"], 12.5);
    let bad = by_id("nemo_run_llama3_8b.2nodes");
    assert_eq!(bad["status"], "FAILED", "{bad}");
    let msg = bad["message"].as_str().unwrap();
    assert!(
        msg.contains("'max_steps='") && msg.contains("CUDA out of memory"),
        "{msg}"
    );
}

fn osu_sample(name: &str) -> String {
    std::fs::read_to_string(data().join("osu-samples").join(name)).unwrap()
}

/// Real OSU outputs (5.8 to 7.5; latency with and without `--full`, bandwidth, a size-less barrier), read by
/// the header's columns whatever noise surrounds them.
#[test]
fn osu_outputs_of_real_runs() {
    use cloudai::workloads::osu::{parse, Kind};
    let bw = parse(&osu_sample("osu-5.8-bw-flux.txt"));
    assert_eq!(bw.kind, Kind::Bandwidth);
    assert_eq!(bw.title.as_deref(), Some("OSU MPI Bandwidth Test v5.8"));
    assert_eq!(bw.rows.len(), 23);
    assert_eq!(bw.peak_mb_s(), Some(24617.71));
    assert!(
        bw.errors.is_empty(),
        "the kernel's QP message is noise: {:?}",
        bw.errors
    );
    let lat = parse(&osu_sample("osu-5.8-latency.txt"));
    assert_eq!(
        (lat.kind, lat.rows[0].size, lat.rows[0].avg_lat_us),
        (Kind::Latency, 0, Some(1.61))
    );
    let full = parse(&osu_sample("osu-7.0-allreduce-full.txt"));
    assert!(full.full());
    assert_eq!(full.rows[0].iterations, Some(1000));
    assert_eq!(
        (full.rows[6].size, full.rows[6].max_lat_us),
        (256, Some(124.69))
    );
    let int = parse(&osu_sample("osu-7.5-allreduce-int.txt"));
    assert_eq!(int.datatype.as_deref(), Some("MPI_INT"));
    assert_eq!(int.rows.last().unwrap().size, 268435456);
    let barrier = parse(&osu_sample("osu-5.8-barrier.txt"));
    assert_eq!(
        (barrier.rows.len(), barrier.rows[0].avg_lat_us),
        (1, Some(8.52))
    );
}

/// A stand-in `osu_allreduce` printing `stdout`, run as an OSUBench test on Standalone.
fn osu_standalone(stdout: &str) -> (Work, std::process::Output) {
    let w = Work::new();
    w.standalone();
    let printed = w.file("osu-out.txt", stdout);
    w.script(
        "osu/osu_allreduce",
        &format!(
            r#"#!/bin/sh
echo "$@" > "$(dirname "$0")/args.txt"
cat {}
"#,
            printed.display()
        ),
    );
    w.file(
        "tests/osu.toml",
        &format!(
            r#"name = "osu"
description = "d"
test_template_name = "OSUBench"
[cmd_args]
docker_image_url = "img"
benchmarks_dir = "{}"
benchmark = "osu_allreduce"
iterations = 10
"#,
            w.path().join("osu").display()
        ),
    );
    w.file(
        "s.toml",
        r#"name = "o"
[[Tests]]
id = "ar"
test_name = "osu"
"#,
    );
    let out = w.cloudai().args(common::RUN_S_TOML).output().unwrap();
    (w, out)
}

/// An OSU collective on Standalone (a stand-in benchmark printing a real output): PASSED with CloudAI's CSV and a
/// page; a baseline made from it fails a run whose large sizes got 50% slower, naming them.
#[test]
fn osu_runs_and_is_held_to_a_baseline() {
    let run = osu_standalone;
    let good = osu_sample("osu-7.5-allreduce-int.txt");
    let (w, out) = run(&good);
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    assert_eq!(
        std::fs::read_to_string(w.path().join("osu/args.txt"))
            .unwrap()
            .trim(),
        "--iterations 10 --full"
    );
    let root = w.results_root();
    let csv = std::fs::read_to_string(root.join("ar/0/osu_bench.csv")).unwrap();
    assert_eq!(
        csv.lines().take(2).collect::<Vec<_>>(),
        ["size,avg_lat", "4,11.69"]
    );
    assert!(root.join("ar/0/osu_bench_report.html").is_file());
    let baseline = w.path().join("baseline.toml");
    let made = w
        .cloudai()
        .args(["baseline", "create", "--output"])
        .arg(&baseline)
        .arg("--result-dir")
        .arg(&root)
        .output()
        .unwrap();
    assert_eq!(made.status.code(), Some(0), "{}", stdout_of(&made));
    // a latency table is held to its latency, named with its unit
    let text = std::fs::read_to_string(&baseline).unwrap();
    assert!(
        text.contains("metric = \"latency\"\nunit = \"us\"")
            && text.contains("size = 4\nvalue = 11.69\n"),
        "{text}"
    );

    // 50% more latency from 1 MiB up
    let slower: String = good
        .lines()
        .map(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            match (t.len(), t.first().and_then(|s| s.parse::<u64>().ok())) {
                (2, Some(size)) if size >= 1 << 20 => {
                    format!("{size} {:.2}\n", t[1].parse::<f64>().unwrap() * 1.5)
                }
                _ => format!("{l}\n"),
            }
        })
        .collect();
    let (w2, out) = run(&slower);
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let root2 = w2.results_root();
    let rep = w2
        .cloudai()
        .args(["generate-report", "--result-dir"])
        .arg(&root2)
        .arg("--baseline")
        .arg(&baseline)
        .output()
        .unwrap();
    assert_eq!(rep.status.code(), Some(3), "{}", stdout_of(&rep));
    let summary: Value =
        serde_json::from_slice(&std::fs::read(root2.join("summary.json")).unwrap()).unwrap();
    let msg = summary["tests"][0]["message"].as_str().unwrap();
    assert!(
        msg.contains("latency more than 5% above the baseline")
            && msg.contains("1 MiB out-of-place: ")
            && msg.contains(" us vs baseline ")
            && msg.contains("(+50%)"),
        "{msg}"
    );
    assert!(!msg.contains("512 KiB"), "{msg}");
}

/// SlurmContainer: the command as given with its nsys prefix, the test's own srun arguments on every step.
#[test]
fn slurm_container_script() {
    let w = Work::new();
    w.file(
        "system.toml",
        &std::fs::read_to_string(
            data().join("compat/conf/common/system/example_slurm_cluster.toml"),
        )
        .unwrap(),
    );
    w.file(
        "tests/sc.toml",
        r#"name = "sc"
description = "d"
test_template_name = "SlurmContainer"
extra_srun_args = ["--ntasks-per-node=1", "--cpus-per-task=4"]
[cmd_args]
docker_image_url = "nvcr.io#nvidia/pytorch:25.12-py3"
cmd = "python -c 'print(1)'"
[nsys]
enable = true
"#,
    );
    w.file(
        "s.toml",
        r#"name = "c"
[[Tests]]
id = "sc"
test_name = "sc"
num_nodes = 2
"#,
    );
    let out = w
        .cloudai()
        .args(common::DRY_RUN_S_TOML)
        .args(["--output-dir", "out"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let it = w.results_root().join("sc/0");
    let script = std::fs::read_to_string(it.join("cloudai_sbatch_script.sh")).unwrap();
    let sruns: Vec<&str> = script.lines().filter(|l| l.starts_with("srun ")).collect();
    assert_eq!(sruns.len(), 3, "{script}");
    assert!(
        sruns
            .iter()
            .all(|l| l.contains("--no-container-mount-home --ntasks-per-node=1 --cpus-per-task=4")),
        "{script}"
    );
    assert!(
        sruns[2].ends_with(r#"; nsys profile python -c 'print(1)'""#),
        "{}",
        sruns[2]
    );
    let trt = std::fs::read_to_string(it.join("test-run.toml")).unwrap();
    assert!(
        trt.contains(r#"extra_srun_args = [ "--ntasks-per-node=1", "--cpus-per-task=4",]"#),
        "{trt}"
    );
    // files to install are refused, not ignored
    w.file(
        "tests/sc.toml",
        r#"name = "sc"
description = "d"
test_template_name = "SlurmContainer"
scripts = ["a.py"]
[cmd_args]
docker_image_url = "x"
cmd = "true"
"#,
    );
    let out = w
        .cloudai()
        .args(common::DRY_RUN_S_TOML)
        .args(["--output-dir", "out2"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stdout_of(&out));
    assert!(
        stdout_of(&out).contains("tests/sc.toml:4:11: field 'scripts'"),
        "{}",
        stdout_of(&out)
    );
}

/// Each template names the schedulers it runs on; elsewhere it is refused before anything is written.
#[test]
fn templates_say_where_they_run() {
    let w = Work::new();
    let list = w.cloudai().args(["list", "templates"]).output().unwrap();
    let text = stdout_of(&list);
    for line in [
        r#""Fio" schedulers=standalone,slurm"#,
        r#""NeMoRun" schedulers=slurm"#,
        r#""SlurmContainer" schedulers=slurm"#,
        r#""OSUBench" schedulers=standalone,slurm,runai,kubernetes"#,
    ] {
        assert!(text.contains(line), "{line} missing:\n{text}");
    }
    w.standalone();
    nemo_checkout(&w);
    let out = w
        .cloudai()
        .args([
            "dry-run",
            "--system-config",
            "system.toml",
            "--tests-dir",
            "conf/common/test",
            "--test-scenario",
        ])
        .arg("conf/common/test_scenario/nemo.toml")
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("test template NeMoRun cannot run on a standalone system")
            && text.contains("NeMoRun runs on: slurm"),
        "{text}"
    );
    assert!(!w.path().join("out").exists());
}

/// A sweep inside NeMo-Run's nested models (CloudAI's `dse_nemo_run_llama3_8b.toml`): one step per value under
/// its dotted name, the derived `num_train_samples` following each step.
#[test]
fn nemo_run_sweeps_nested_values() {
    let w = Work::new();
    nemo_checkout(&w);
    w.file(
        "conf/common/test_scenario/dse.toml",
        &std::fs::read_to_string(
            data().join("compat/conf/common/test_scenario/dse_nemo_run_llama3_8b.toml"),
        )
        .unwrap()
        .replace("max_steps = 50", "max_steps = [50, 60]"),
    );
    let out = w
        .cloudai()
        .args([
            "dry-run",
            "--system-config",
            "conf/common/system/slurm.toml",
            "--tests-dir",
            "conf/common/test",
        ])
        .args([
            "--test-scenario",
            "conf/common/test_scenario/dse.toml",
            "--output-dir",
            "out",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let dir = w.results_root().join("dse_nemo_run_llama3_8b/0");
    let traj = std::fs::read_to_string(dir.join("trajectory.csv")).unwrap();
    assert!(
        traj.contains("{'data.micro_batch_size': 1, 'trainer.max_steps': 60}")
            || traj.contains("{'trainer.max_steps': 60, 'data.micro_batch_size': 1}"),
        "{traj}"
    );
    assert_eq!(traj.lines().count(), 5, "{traj}");
    let scripts: Vec<String> = (1..=4)
        .map(|s| {
            std::fs::read_to_string(dir.join(s.to_string()).join("cloudai_sbatch_script.sh"))
                .unwrap()
        })
        .collect();
    assert!(scripts
        .iter()
        .any(|s| s.contains("trainer.max_steps=60 ") && s.contains("data.num_train_samples=7680")));
    assert!(scripts
        .iter()
        .any(|s| s.contains("trainer.max_steps=50 ") && s.contains("data.num_train_samples=6400")));
    // the numa binding is evaluated by each task's shell, not by the batch script's
    assert!(
        scripts[0].contains("numactl --cpunodebind=\\$((SLURM_LOCALID/4))"),
        "{}",
        scripts[0]
    );
}

/// OSU's own data check (`-c`: a `Validation` column, `Pass` per row) is read, and a `Fail` row fails the run at its
/// size; non-blocking collectives' tables (`Overall(us) Compute(us) Pure Comm.(us) Overlap(%)`) are tables; an error
/// glued onto the header line (UCX's, Open MPI's fatal banner) is named as the cause.
#[test]
fn osu_validation_non_blocking_tables_and_glued_errors() {
    use cloudai::workloads::osu::parse;
    let validated = "# OSU MPI Allreduce Latency Test v7.3\n# Datatype: MPI_CHAR.\n# Size       Avg Latency(us)        Validation\n1                       1.83              Pass\n2                       1.80              Pass\n4                       1.90              Pass\n";
    let v = parse(validated);
    assert_eq!(v.rows.len(), 3);
    assert!(v.rows.iter().all(|r| r.valid == Some(true)));
    let (_, out) = osu_standalone(validated);
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    // a PASSED row says its key number (issue 41, item 10)
    assert!(
        text.contains("checked: table 3 rows, 1.83 us at 1 B"),
        "{text}"
    );
    let failing = validated.replacen("1.90              Pass", "1.90              Fail", 1);
    let (w, out) = osu_standalone(&failing);
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    let r = common::record(&w.results_root(), "ar", 0);
    assert!(
        r.message
            .contains(":6: the data check failed at size 4 B (Validation: Fail)"),
        "{}",
        r.message
    );
    let nbc = "# OSU MPI Non-blocking Allreduce Latency Test v7.3\n# Overall = Coll. Init + Compute + MPI_Test + MPI_Wait\n\n# Datatype: MPI_CHAR.\n# Size           Overall(us)       Compute(us)    Pure Comm.(us)        Overlap(%)\n1                       8.28              5.71              4.64              44.51\n2                       8.12              5.60              4.55              44.96\n";
    let n = parse(nbc);
    assert_eq!(n.rows.len(), 2);
    assert_eq!(n.rows[1].avg_lat_us, Some(8.12));
    let (_, out) = osu_standalone(nbc);
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let glued = "# OSU MPI Latency Test v7.3\n# Size          Latency (us)[1717000000.123456] [gpu01:4242:0]        ib_iface.c:1037 UCX  ERROR ibv_create_cq(cqe=4096) failed: Cannot allocate memory\n";
    let g = parse(glued);
    assert_eq!(g.errors.len(), 1, "{:?}", g.errors);
    assert!(
        g.errors[0]
            .1
            .starts_with("[1717000000.123456] [gpu01:4242:0]"),
        "{:?}",
        g.errors
    );
    assert_eq!(g.columns, ["Size", "Latency (us)"]);
    let (w, out) = osu_standalone(glued);
    assert_eq!(out.status.code(), Some(3), "{}", stdout_of(&out));
    let r = common::record(&w.results_root(), "ar", 0);
    assert!(
        r.message.contains("UCX  ERROR ibv_create_cq"),
        "{}",
        r.message
    );
    let banner = "*** An error occurred in MPI_Init\n*** on a NULL communicator\n*** MPI_ERRORS_ARE_FATAL (processes in this communicator will now abort,\n***    and potentially your MPI job)\n";
    let (w, out) = osu_standalone(banner);
    assert_eq!(out.status.code(), Some(3), "{}", stdout_of(&out));
    let r = common::record(&w.results_root(), "ar", 0);
    assert!(
        r.message.contains(":1: *** An error occurred in MPI_Init"),
        "{}",
        r.message
    );
}
