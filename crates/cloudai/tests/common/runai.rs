//! Run:ai test helpers: a mock with a real nccl-tests log, a work dir with a system pointing at it, and
//! `cloudai` run in a thread while the mock serves on the test's runtime.

use std::path::Path;

use runai_mock::{Config, MockServer, Timing};
use serde_json::Value;

use super::{data, Work};

pub const SECRET: &str = "s3cr3t-do-not-log";

pub fn sample(name: &str) -> String {
    std::fs::read_to_string(data().join("nccl-samples").join(name)).unwrap()
}

pub fn timing(run_s: f64) -> Timing {
    Timing {
        create_s: 0.2,
        pending_s: 0.0,
        init_s: 0.2,
        run_s,
        delete_s: 0.3,
        outcome: "completed".into(),
        visible_deleted_s: 0.0,
        preempt_after_s: 0.0,
    }
}

pub async fn mock(run_s: f64, state: Option<std::path::PathBuf>) -> MockServer {
    let cfg = Config {
        timing: timing(run_s),
        stdout: sample("single-node-8gpu-a100-allreduce-v2.19.4.txt"),
        failure_stdout: sample("single-node-2gpu-nccl-failure-with-debug-info.txt"),
        credentials: vec![("my-app".into(), SECRET.into())],
        ..Config::default()
    };
    MockServer::start("127.0.0.1:0".parse().unwrap(), cfg, state)
        .await
        .unwrap()
}

pub fn setup(w: &Work, url: &str, scenario: &str) {
    w.file(
        "system.toml",
        &format!(
            r#"name = "mock-runai"
scheduler = "runai"
install_path = "install"
output_path = "out"
monitor_interval = 1
base_url = "{url}"
user_email = "me@example.com"
app_id = "my-app"
app_secret = "wrong-in-file"
project_id = "4501"
cluster_id = "71f69d83-ba66-4822-adf5-55ce55efd210"
gpus_per_node = 8
[global_env_vars]
NCCL_IB_GID_INDEX = "3"
"#
        ),
    );
    w.file(
        "tests/nccl.toml",
        r#"name = "nccl"
description = "d"
test_template_name = "NcclTest"
[cmd_args]
docker_image_url = "nvcr.io#nvidia/pytorch:25.12-py3"
subtest_name = "all_reduce_perf_mpi"
[extra_env_vars]
NCCL_DEBUG = "INFO"
"#,
    );
    w.file("s.toml", scenario);
}

/// Runs cloudai in a thread (the mock serves on this test's runtime meanwhile).
pub async fn run(w: &Work, args: &[&str], envs: &[(&str, &str)]) -> std::process::Output {
    let mut c = std::process::Command::new(assert_cmd::cargo::cargo_bin("cloudai"));
    c.current_dir(w.path())
        .args(args)
        .env("RUNAI_APP_SECRET", SECRET);
    for (k, v) in envs {
        c.env(k, v);
    }
    tokio::task::spawn_blocking(move || c.output().unwrap())
        .await
        .unwrap()
}

pub const RUN: &[&str] = &[
    "run",
    "--system-config",
    "system.toml",
    "--tests-dir",
    "tests",
    "--test-scenario",
    "s.toml",
];

pub fn requests<'a>(j: &'a [Value], method: &str, path_prefix: &str) -> Vec<&'a Value> {
    j.iter()
        .filter(|r| {
            r["method"] == method && r["path"].as_str().unwrap_or("").starts_with(path_prefix)
        })
        .collect()
}

pub fn no_secret_anywhere(dir: &Path, console: &str) {
    assert!(!console.contains(SECRET));
    fn walk(p: &Path) {
        for e in std::fs::read_dir(p).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p);
            } else if let Ok(t) = std::fs::read_to_string(&p) {
                assert!(!t.contains(SECRET), "secret leaked into {}", p.display());
            }
        }
    }
    walk(dir);
}

/// Names of every workload the mock holds, in creation order.
pub fn workload_names(m: &MockServer) -> Vec<String> {
    m.shared
        .data
        .lock()
        .unwrap()
        .workloads
        .iter()
        .map(|w| w.name.clone())
        .collect()
}

/// A forward HTTP proxy on localhost, as sites run them: `CONNECT host:port` tunnels, absolute-form requests
/// forwarded. Counts both, by target.
pub struct ForwardProxy {
    pub url: String,
    pub tunnels: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    pub forwarded: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

pub async fn forward_proxy() -> ForwardProxy {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let tunnels = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let forwarded = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (t, f) = (tunnels.clone(), forwarded.clone());
    tokio::spawn(async move {
        loop {
            let Ok((mut down, _)) = listener.accept().await else {
                return;
            };
            let (t, f) = (t.clone(), f.clone());
            tokio::spawn(async move {
                let mut head = Vec::new();
                while !head.ends_with(b"\r\n\r\n") {
                    let Ok(b) = down.read_u8().await else { return };
                    head.push(b);
                }
                let text = String::from_utf8_lossy(&head).into_owned();
                let line = text.lines().next().unwrap_or("").to_string();
                let mut parts = line.split_whitespace();
                let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
                if method == "CONNECT" {
                    t.lock().unwrap().push(target.to_string());
                    let Ok(mut up) = tokio::net::TcpStream::connect(target).await else {
                        let _ = down.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
                        return;
                    };
                    let _ = down
                        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                        .await;
                    let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
                } else {
                    // absolute-form: http://host:port/path
                    let authority = target
                        .strip_prefix("http://")
                        .and_then(|r| r.split('/').next())
                        .unwrap_or("")
                        .to_string();
                    f.lock().unwrap().push(target.to_string());
                    let Ok(mut up) = tokio::net::TcpStream::connect(&authority).await else {
                        return;
                    };
                    if up.write_all(&head).await.is_err() {
                        return;
                    }
                    let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
                }
            });
        }
    });
    ForwardProxy {
        url,
        tunnels,
        forwarded,
    }
}

/// A private CA, a certificate for localhost signed by it, and a TLS proxy in front of the mock with it.
pub struct Tls {
    pub ca_pem: String,
    pub addr: std::net::SocketAddr,
}

pub async fn tls_proxy(backend: std::net::SocketAddr) -> Tls {
    let (acceptor, ca_pem) = super::tls_acceptor(&["localhost"]);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(s).await else {
                    return;
                };
                let Ok(mut b) = tokio::net::TcpStream::connect(backend).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut b).await;
            });
        }
    });
    Tls { ca_pem, addr }
}
