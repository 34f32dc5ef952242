//! `runai-mock --listen 127.0.0.1:18080 --stdout crates/cloudai/tests/data/nccl-samples/….txt`

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use runai_mock::{Config, MockServer, Timing};

#[derive(Parser, Debug)]
#[command(
    name = "runai-mock",
    version,
    about = "A Run:ai control-plane mock with fault injection"
)]
struct Args {
    /// Address to listen on
    #[arg(long, default_value = "127.0.0.1:18080")]
    listen: SocketAddr,
    /// Log served for workloads that complete (e.g. an nccl-tests output)
    #[arg(long)]
    stdout: Option<PathBuf>,
    /// Log served for workloads that fail
    #[arg(long)]
    failure_stdout: Option<PathBuf>,
    /// completed, failed, degraded or stuck
    #[arg(long, default_value = "completed")]
    outcome: String,
    /// Seconds in Creating, Pending, Initializing, Running and Deleting
    #[arg(long, value_delimiter = ',', default_value = "1,0,1,3,1")]
    durations: Vec<f64>,
    /// Token lifetime in seconds
    #[arg(long, default_value_t = 3600.0)]
    token_ttl: f64,
    /// Accepted client credentials as ID:SECRET (repeatable)
    #[arg(long = "credentials", default_value = "my-app:s3cr3t")]
    credentials: Vec<String>,
    /// Accept CloudAI's AppId/AppSecret spelling of the token request
    #[arg(long)]
    compat_cloudai_auth: bool,
    /// Keep state in this file across restarts
    #[arg(long)]
    state: Option<PathBuf>,
    #[arg(long, default_value = "4501")]
    project_id: String,
    #[arg(long, default_value = "71f69d83-ba66-4822-adf5-55ce55efd210")]
    cluster_id: String,
}

#[tokio::main]
async fn main() {
    let a = Args::parse();
    let read = |p: &Option<PathBuf>| {
        p.as_ref()
            .map(|p| std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
            .unwrap_or_default()
    };
    let d = |i: usize, def: f64| a.durations.get(i).copied().unwrap_or(def);
    let cfg = Config {
        timing: Timing {
            create_s: d(0, 1.0),
            pending_s: d(1, 0.0),
            init_s: d(2, 1.0),
            run_s: d(3, 3.0),
            delete_s: d(4, 1.0),
            outcome: a.outcome.clone(),
            visible_deleted_s: 0.0,
            preempt_after_s: 0.0,
        },
        stdout: read(&a.stdout),
        failure_stdout: read(&a.failure_stdout),
        token_ttl_s: a.token_ttl,
        project_id: a.project_id.clone(),
        cluster_id: a.cluster_id.clone(),
        compat_cloudai_auth: a.compat_cloudai_auth,
        credentials: a
            .credentials
            .iter()
            .filter_map(|c| c.split_once(':'))
            .map(|(i, s)| (i.to_string(), s.to_string()))
            .collect(),
        ..Config::default()
    };
    let server = match MockServer::start(a.listen, cfg, a.state.clone()).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("runai-mock: cannot listen on {}: {e}", a.listen);
            std::process::exit(1);
        }
    };
    println!(
        "runai-mock listening on {} (project {}, cluster {})",
        server.url(),
        a.project_id,
        a.cluster_id
    );
    let _ = tokio::signal::ctrl_c().await;
}

/// Release tarballs (`scripts/dist.sh`, built with `--cfg cloudai_dist`) link against glibc 2.17, which has no
/// `getrandom` (glibc 2.25); the standard library calls it by name. This forwards it to the system call, which
/// fails with ENOSYS on kernels before 3.17, where the standard library then reads /dev/urandom.
#[cfg(cloudai_dist)]
#[no_mangle]
pub unsafe extern "C" fn getrandom(
    buf: *mut libc::c_void,
    len: libc::size_t,
    flags: libc::c_uint,
) -> libc::ssize_t {
    // SAFETY: the caller's buffer and length go to the kernel unchanged, as glibc's wrapper passes them
    unsafe { libc::syscall(libc::SYS_getrandom, buf, len, flags) as libc::ssize_t }
}
