//! Megatron-Run (`MegatronRun`): Megatron's iteration lines read, graded on reaching the last iteration without a
//! NaN; save/load checked against the mounts as the test is read; CloudAI's job is compat_dry_run.rs.

use crate::common;

use cloudai::workloads::megatron_run::{parse, verdict};
use common::{data, stdout_of, Work};

fn sample() -> String {
    std::fs::read_to_string(data().join("megatron-samples").join("gpt3-7b-2-nodes.txt")).unwrap()
}

#[test]
fn iterations_are_read_and_a_training_cut_short_fails() {
    let out = parse(&sample());
    assert_eq!(out.iterations.len(), 10);
    assert_eq!(out.total, Some(500000));
    let first = &out.iterations[0];
    assert_eq!(
        (first.number, first.time_ms, first.tflops, first.loss),
        (10, 15210.6, Some(748.3), None)
    );
    assert_eq!(out.iterations[9].loss, Some(5.806238));
    // the author stopped it at iteration 100 of 500000
    let v = verdict(&out);
    assert!(
        !v.passed && v.message.contains("stopped at iteration 100 of 500000"),
        "{}",
        v.message
    );
    // the same log had the training been 100 iterations long, or stopped by Megatron's own exit
    let done = sample().replace("/  500000 |", "/     100 |");
    let v = verdict(&parse(&done));
    assert!(v.passed, "{}", v.message);
    assert!(
        cloudai::workloads::judge::brief(&v.checks)
            .contains("10 iterations logged; 14299.0 ms per iteration, 796.4 TFLOP/s per GPU"),
        "{:?}",
        v.checks
    );
    let exited = format!("{}exiting program at iteration 100\n", sample());
    assert!(verdict(&parse(&exited)).passed);
    // a NaN iteration fails whatever else
    let nan = done.replacen(
        "number of nan iterations:   0 |",
        "number of nan iterations:   1 |",
        3,
    );
    assert!(verdict(&parse(&nan)).message.contains("NaN"));
    let nan_loss = done.replacen("lm loss: 8.151863E+00", "lm loss: nan", 1);
    assert!(verdict(&parse(&nan_loss))
        .message
        .contains("iteration 50: NaN"));
    // Primus prints `current/average`
    let primus = "[20251202 06:56:28][rank-7/8][INFO ] : iteration 4408/ 4408 | consumed samples: 564224 | elapsed time per iteration (ms): 13100.0/13240.9 | throughput per GPU (TFLOP/s/GPU): 579.4/573.6 | lm loss: 4.142716E-03 | number of nan iterations: 0 |\n";
    let p = parse(primus);
    assert_eq!(
        (p.iterations[0].time_ms, p.iterations[0].tflops),
        (13100.0, Some(579.4))
    );
    assert!(verdict(&p).passed);
    assert!(verdict(&parse("Traceback (most recent call last):\n  File \"x\"\ntorch.OutOfMemoryError: CUDA out of memory\n")).message.contains("OutOfMemoryError"));
}

#[test]
fn save_and_load_must_be_mounted_and_keys_use_underscores() {
    let sys = "name = \"s\"\nscheduler = \"slurm\"\ninstall_path = \"install\"\noutput_path = \"out\"\ndefault_partition = \"p\"\n[[partitions]]\nname = \"p\"\n";
    let w = Work::new();
    let ckpt = w.path().join("ckpt");
    std::fs::create_dir_all(&ckpt).unwrap();
    let base = "name = \"mr\"\ndescription = \"d\"\ntest_template_name = \"MegatronRun\"\n";
    for (extra_mounts, args, code, says) in [
        (
            format!("[\"{}:/ckpt\"]", ckpt.display()),
            "save = \"/ckpt\"\n",
            0,
            "",
        ),
        (
            "[]".to_string(),
            "save = \"/ckpt\"\n",
            1,
            "cmd_args.save': /ckpt is not mounted in the container",
        ),
        (
            "[\"/nonexistent/dir:/ckpt\"]".to_string(),
            "load = \"/ckpt\"\n",
            1,
            "the mount's source /nonexistent/dir does not exist",
        ),
        ("[]".to_string(), "train-iters = 10\n", 1, "a dashed key"),
    ] {
        w.file("system.toml", sys);
        w.file(
            "tests/t.toml",
            &format!("{base}extra_container_mounts = {extra_mounts}\n[cmd_args]\ndocker_image_url = \"mg\"\nrun_script = \"/workspace/pretrain_gpt.py\"\n{args}train_iters = 10\n"),
        );
        w.file(
            "s.toml",
            "name = \"n\"\n[[Tests]]\nid = \"t\"\ntest_name = \"mr\"\nnum_nodes = 1\n",
        );
        let _ = std::fs::remove_dir_all(w.path().join("out"));
        let out = w.cloudai().args(common::DRY_RUN_S_TOML).output().unwrap();
        let text = stdout_of(&out);
        assert_eq!(out.status.code(), Some(code), "{says}: {text}");
        assert!(text.contains(says), "{says}: {text}");
        if code == 0 {
            let script =
                std::fs::read_to_string(w.results_root().join("t/0/cloudai_sbatch_script.sh"))
                    .unwrap();
            assert!(
                script.contains("python /workspace/pretrain_gpt.py --global-batch-size 16"),
                "{script}"
            );
            assert!(
                script.contains("--save /ckpt --tensorboard-dir"),
                "{script}"
            );
            assert!(
                script.contains("--log-interval 1 --train-iters 10\""),
                "{script}"
            );
        }
    }
}
