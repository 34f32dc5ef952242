//! Aiconfigurator on Standalone: CloudAI's predictor run from its own tree with the Python of its environment,
//! graded on the prediction (not out of memory, every number above 0, the configuration asked); the environment
//! made with `uv` by `cloudai install`; the job is compat_dry_run.rs.

use crate::common;

use common::{stdout_of, Work};

const VENV: &str = "install/aiconfigurator-py3.10-f5c92280eed1";

const TEST: &str = r#"name = "aic"
description = "d"
test_template_name = "Aiconfigurator"
agent_metrics = ["tokens_per_s_per_gpu"]
[cmd_args]
model_name = "LLAMA3.1_70B"
system = "h200_sxm"
isl = 4000
osl = 500
[cmd_args.disagg]
p_tp = 2
p_pp = 1
p_dp = 1
p_bs = 1
p_workers = 1
d_tp = 4
d_pp = 1
d_dp = 1
d_bs = 8
d_workers = 2
kvcache_quant_mode = "fp8"
"#;

/// The environment's Python, a stand-in for the predictor and aiconfigurator's SDK: it writes the prediction
/// `$AIC_PREDICTION` names (with `@DW@` replaced by the decode workers it was asked for) to `--output`, prints it,
/// and keeps its arguments; `$AIC_FAIL` makes it fail as the predictor does.
fn stand_in(w: &Work) {
    w.script(
        &format!("{VENV}/bin/python"),
        r#"#!/bin/bash
echo "$@" > "$(dirname "$0")/../args.txt"
shift
while [ $# -gt 0 ]; do
  case "$1" in
    --output) out="$2"; shift 2;;
    --d-workers) dw="$2"; shift 2;;
    *) shift;;
  esac
done
if [ -n "$AIC_FAIL" ]; then echo "Prediction failed: $AIC_FAIL" >&2; exit 2; fi
echo "${AIC_PREDICTION//@DW@/$dw}" > "$out"
echo "${AIC_PREDICTION//@DW@/$dw}" | tr -d '\n'; echo
"#,
    );
    w.file("cloudai/simple_predictor.py", "# CloudAI's predictor\n");
    w.standalone();
    w.file("tests/aic.toml", TEST);
    w.file(
        "s.toml",
        "name = \"a\"\n[[Tests]]\nid = \"aic\"\ntest_name = \"aic\"\n",
    );
}

const GOOD: &str = r#"{"ttft_ms": 231.5, "tpot_ms": 18.25, "tokens_per_s_per_gpu": 512.0, "tokens_per_s_per_user": 54.8, "num_total_gpus": @GPUS@, "prefill_workers": 1, "decode_workers": @DW@, "prefill_bs": 1, "decode_bs": 8, "oom": false}"#;

fn run(
    w: &Work,
    prediction: &str,
    fail: Option<&str>,
) -> (std::process::Output, std::path::PathBuf) {
    let _ = std::fs::remove_dir_all(w.path().join("out"));
    let mut c = w.cloudai();
    c.args(common::RUN_S_TOML)
        .env(
            "CLOUDAI_AICONFIG_PREDICTOR",
            w.path().join("cloudai/simple_predictor.py"),
        )
        .env("AIC_PREDICTION", prediction);
    match fail {
        Some(f) => c.env("AIC_FAIL", f),
        None => c.env_remove("AIC_FAIL"),
    };
    let out = c.output().unwrap();
    let root = w.results_root();
    (out, root.join("aic/0"))
}

#[test]
fn a_prediction_of_the_configuration_asked_passes_and_others_fail_with_their_reason() {
    let w = Work::new();
    stand_in(&w);
    // 2 prefill GPUs + 2 decode workers × 4 GPUs
    let (out, dir) = run(&w, &GOOD.replace("@GPUS@", "10"), None);
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("PASSED"), "{text}");
    let args = std::fs::read_to_string(w.path().join(VENV).join("args.txt")).unwrap();
    assert!(
        args.contains("/cloudai/simple_predictor.py --model-name LLAMA3.1_70B --system h200_sxm --backend trtllm")
            && args.contains("--d-workers 2 --prefill-correction-scale 1.0 --decode-correction-scale 1.0 --kvcache-quant-mode fp8 --output "),
        "{args}"
    );
    let toml = std::fs::read_to_string(dir.join("test-run.toml")).unwrap();
    assert!(
        toml.contains("test_cmd = \"\"\nfull_cmd = \"n/a\""),
        "{toml}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("summary.txt")).unwrap(),
        "ttft_ms: 231.5\ntpot_ms: 18.25\ntokens_per_s_per_gpu: 512.0\ntokens_per_s_per_user: 54.8\noom: False\n"
    );
    let csv = std::fs::read_to_string(dir.join("aiconfigurator_report.csv")).unwrap();
    assert!(
        csv.lines().nth(1).unwrap().contains("disagg,4000,500"),
        "{csv}"
    );
    let rec = common::record(&w.results_root(), "aic", 0);
    let checks = serde_json::to_string(&rec.checks).unwrap();
    assert!(
        checks.contains("num_total_gpus 10") && checks.contains("512.0 tokens/s/GPU"),
        "{checks}"
    );

    // another configuration priced (8 GPUs in all: one decode worker)
    let (out, _) = run(&w, &GOOD.replace("@GPUS@", "6").replace("@DW@", "1"), None);
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(
        text.contains("decode_workers 1 for 2 asked")
            && text.contains("num_total_gpus 6 for 10 asked"),
        "{text}"
    );
    // out of memory
    let (out, _) = run(&w, r#"{"oom": true}"#, None);
    assert!(
        stdout_of(&out).contains("out of memory"),
        "{}",
        stdout_of(&out)
    );
    assert_eq!(out.status.code(), Some(3));
    // the predictor's own failure, quoted
    let (out, _) = run(&w, GOOD, Some("No perf database found for system=h200_sxm"));
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(
        text.contains("status 2") && text.contains("No perf database found"),
        "{text}"
    );
}

#[test]
fn run_refuses_without_its_environment_and_install_makes_it_with_uv() {
    let w = Work::new();
    stand_in(&w);
    std::fs::remove_dir_all(w.path().join("install")).unwrap();
    let out = w
        .cloudai()
        .args(common::RUN_S_TOML)
        .env(
            "CLOUDAI_AICONFIG_PREDICTOR",
            w.path().join("cloudai/simple_predictor.py"),
        )
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("Python 3.10 environment aiconfigurator (aiconfigurator~=0.5.0)"),
        "{text}"
    );
    assert!(!w.path().join("out").exists());

    let install = |path: &str| {
        w.cloudai()
            .args([
                "install",
                "--system-config",
                "system.toml",
                "--tests-dir",
                "tests",
                "--test-scenario",
                "s.toml",
            ])
            .env(
                "CLOUDAI_AICONFIG_PREDICTOR",
                w.path().join("cloudai/simple_predictor.py"),
            )
            .env("PATH", path)
            .output()
            .unwrap()
    };
    // no uv: one clear failure, nothing made
    let out = install("/usr/bin:/bin");
    let text = stdout_of(&out);
    assert_ne!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("`uv` is not installed here"), "{text}");
    assert!(!w.path().join(VENV).exists());
    // a stand-in uv that logs its calls: the Python is found here, so none is fetched
    w.script(
        "bin/uv",
        r#"#!/bin/bash
echo "uv $*" >> "$(dirname "$0")/../uv.log"
case "$1 $2" in
  "python find") exit 0;;
  "venv --python") mkdir -p "$4/bin" && printf '#!/bin/sh\n' > "$4/bin/python" && chmod +x "$4/bin/python";;
  "pip install") exit 0;;
esac
"#,
    );
    let path = format!("{}:/usr/bin:/bin", w.path().join("bin").display());
    let out = install(&path);
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let log = std::fs::read_to_string(w.path().join("uv.log")).unwrap();
    let venv = std::path::absolute(w.path().join(VENV)).unwrap();
    assert_eq!(
        log,
        format!(
            "uv python find 3.10\nuv venv --python 3.10 {}\nuv pip install --python {}/bin/python aiconfigurator~=0.5.0\n",
            venv.display(),
            venv.display()
        )
    );
    assert!(w.path().join(VENV).join("bin/python").is_file());
    // done once; uninstall removes the environment, never CloudAI's predictor
    let out = install(&path);
    assert!(
        stdout_of(&out).contains("is already installed"),
        "{}",
        stdout_of(&out)
    );
    let out = w
        .cloudai()
        .args([
            "uninstall",
            "--system-config",
            "system.toml",
            "--tests-dir",
            "tests",
            "--test-scenario",
            "s.toml",
        ])
        .env(
            "CLOUDAI_AICONFIG_PREDICTOR",
            w.path().join("cloudai/simple_predictor.py"),
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    assert!(!w.path().join(VENV).exists());
    assert!(w.path().join("cloudai/simple_predictor.py").is_file());
}

#[test]
fn one_mode_per_test_and_only_on_this_machine() {
    let w = Work::new();
    stand_in(&w);
    let both = TEST.replace(
        "[cmd_args.disagg]",
        "[cmd_args.agg]\nbatch_size = 8\nctx_tokens = 4000\n[cmd_args.disagg]",
    );
    for (text, want) in [
        (
            both.as_str(),
            "both [cmd_args.agg] and [cmd_args.disagg] are given",
        ),
        (
            &TEST[..TEST.find("[cmd_args.disagg]").unwrap()],
            "neither [cmd_args.agg] nor [cmd_args.disagg]",
        ),
        (
            &TEST.replace("d_bs = 8", "d_bs = 0"),
            "must be 1 or more, found 0",
        ),
        (
            &TEST.replace(
                "kvcache_quant_mode",
                "decode_correction_scale = -1.0\nkvcache_quant_mode",
            ),
            "must be above 0, found -1",
        ),
    ] {
        w.file("tests/aic.toml", text);
        let out = w.cloudai().args(common::DRY_RUN_S_TOML).output().unwrap();
        let t = stdout_of(&out);
        assert_eq!(out.status.code(), Some(1), "{t}");
        assert!(t.contains(want) && t.contains("aic.toml"), "{want}: {t}");
        assert!(!w.path().join("out").exists());
    }
    w.file("tests/aic.toml", TEST);
    w.file(
        "system.toml",
        "name = \"c\"\nscheduler = \"slurm\"\ninstall_path = \"install\"\noutput_path = \"out\"\ndefault_partition = \"p\"\n[[partitions]]\nname = \"p\"\n",
    );
    let out = w.cloudai().args(common::DRY_RUN_S_TOML).output().unwrap();
    let t = stdout_of(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(
        t.contains("test template Aiconfigurator cannot run on a slurm system"),
        "{t}"
    );
}
