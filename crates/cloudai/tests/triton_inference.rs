//! Triton/NIM inference (`TritonInference`): genai-perf's export read by its metric objects, graded on what the
//! client was told to send; the job's placement and directories checked first; CloudAI's job is compat_dry_run.rs.

use crate::common;

use cloudai::workloads::serving::{self, Asked};
use common::{data, stdout_of, Work};
use serde_json::Value;

fn export() -> String {
    std::fs::read_to_string(
        data()
            .join("serving-samples")
            .join("profile_export_genai_perf.json"),
    )
    .unwrap()
}

#[test]
fn the_export_is_graded_on_what_was_asked() {
    let metrics = serving::parse(&export()).unwrap();
    assert_eq!(metrics.len(), 9, "input_config is not a metric");
    let ttft = metrics
        .iter()
        .find(|m| m.name == "time_to_first_token")
        .unwrap();
    assert_eq!(
        (ttft.unit.as_str(), ttft.p50, ttft.p99),
        ("ms", Some(175.05), Some(253.45))
    );
    let e = serving::Export {
        file: "x".into(),
        metrics,
    };
    let asked = Asked {
        requests: Some(20),
        input_tokens: Some(128),
        output_tokens: Some(128),
    };
    let v = serving::verdict(&e, &asked);
    assert!(v.passed, "{}", v.message);
    assert!(
        cloudai::workloads::judge::brief(&v.checks)
            .contains("20 requests; 52.69 output tokens/s; time_to_first_token p50 175.05 ms"),
        "{:?}",
        v.checks
    );
    let fewer = serving::verdict(
        &e,
        &Asked {
            requests: Some(50),
            ..asked
        },
    );
    assert!(
        fewer
            .message
            .starts_with("20 of the 50 requests asked completed"),
        "{}",
        fewer.message
    );
    let longer = serving::verdict(
        &e,
        &Asked {
            output_tokens: Some(512),
            ..asked
        },
    );
    assert!(
        longer
            .message
            .contains("128.0 output tokens on average, 512 asked"),
        "{}",
        longer.message
    );
    let with_errors = export().replacen(
        "\"request_count\"",
        "\"error_request_count\": {\"unit\": \"requests\", \"avg\": 3},\n  \"request_count\"",
        1,
    );
    let e2 = serving::Export {
        file: "x".into(),
        metrics: serving::parse(&with_errors).unwrap(),
    };
    assert!(serving::verdict(&e2, &asked)
        .message
        .starts_with("3 request(s) failed"));
    assert!(serving::parse("{\"request_count\": ").is_none());
}

const TEST: &str = "name = \"ti\"\ndescription = \"d\"\ntest_template_name = \"TritonInference\"\n[cmd_args]\n\
                    server_docker_image_url = \"nim\"\nclient_docker_image_url = \"sdk\"\nserved_model_name = \"m\"\n\
                    tokenizer = \"t\"\nsleep_seconds = 60\n[extra_env_vars]\nNIM_MODEL_NAME = \"model\"\nNIM_CACHE_PATH = \"cache\"\n";

fn dry_run(w: &Work, nodes: u64) -> std::process::Output {
    w.file(
        "system.toml",
        "name = \"s\"\nscheduler = \"slurm\"\ninstall_path = \"install\"\noutput_path = \"out\"\ndefault_partition = \"p\"\n[[partitions]]\nname = \"p\"\n",
    );
    w.file("tests/t.toml", TEST);
    w.file(
        "s.toml",
        &format!("name = \"n\"\n[[Tests]]\nid = \"t\"\ntest_name = \"ti\"\nnum_nodes = {nodes}\n"),
    );
    w.cloudai().args(common::DRY_RUN_S_TOML).output().unwrap()
}

#[test]
fn placement_and_directories_are_checked_and_the_wrapper_is_executable() {
    let w = Work::new();
    let out = dry_run(&w, 3);
    let text = stdout_of(&out);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        text.contains("extra_env_vars.NIM_MODEL_NAME = model: no such directory here"),
        "{text}"
    );
    std::fs::create_dir_all(w.path().join("model")).unwrap();
    std::fs::create_dir_all(w.path().join("cache")).unwrap();
    let out = dry_run(&w, 2);
    assert!(
        stdout_of(&out).contains("3 nodes at least, 2 asked"),
        "{}",
        stdout_of(&out)
    );
    let out = dry_run(&w, 4);
    assert_eq!(out.status.code(), Some(0), "{}", stdout_of(&out));
    let dir = w.results_root().join("t/0");
    let script = std::fs::read_to_string(dir.join("cloudai_sbatch_script.sh")).unwrap();
    assert!(
        script.contains("export NIM_NUM_COMPUTE_NODES=3"),
        "{script}"
    );
    assert!(script.contains("--nodes=3 --ntasks=3 --ntasks-per-node=1 /opt/nim/start_server_wrapper.sh &\n\nsleep 60\n\n"), "{script}");
    assert!(script.contains("--container-image=sdk"), "{script}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.join("start_server_wrapper.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(
            mode & 0o111,
            0o111,
            "the server runs the wrapper by its path"
        );
    }
    let wrapper = std::fs::read_to_string(dir.join("start_server_wrapper.sh")).unwrap();
    assert!(
        wrapper.contains("export NIM_MODEL_NAME='model'\nexport NIM_CACHE_PATH='cache'"),
        "{wrapper}"
    );
    // graded from the export, once the job ran
    std::fs::write(dir.join("stdout.txt"), "").unwrap();
    let root = w.results_root();
    let rep = w.generate_report(&root);
    assert_eq!(rep.status.code(), Some(3), "{}", stdout_of(&rep));
    let summary: Value =
        serde_json::from_slice(&std::fs::read(root.join("summary.json")).unwrap()).unwrap();
    assert!(
        summary["tests"][0]["message"]
            .as_str()
            .unwrap()
            .contains("genai-perf wrote no profile_export_genai_perf.json"),
        "{summary}"
    );
    std::fs::create_dir_all(dir.join("m-openai-chat-concurrency1")).unwrap();
    std::fs::write(
        dir.join("m-openai-chat-concurrency1/profile_export_genai_perf.json"),
        export(),
    )
    .unwrap();
    let rep = w.generate_report(&root);
    assert_eq!(rep.status.code(), Some(0), "{}", stdout_of(&rep));
    let csv = std::fs::read_to_string(dir.join("triton_inference.csv")).unwrap();
    assert!(
        csv.contains("\ntime_to_first_token,ms,195.84,175.05,251.45,253.45,126.76,253.67\n"),
        "{csv}"
    );
}
