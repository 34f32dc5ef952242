//! The API client: kubeconfig from the system's `kube_config_path` (empty: `$KUBECONFIG`, then `~/.kube/config`),
//! the pod's service account when run inside a cluster, and API errors in words an operator can act on.

use std::path::{Path, PathBuf};

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::systems::{ErrorKind, SystemError};

/// Where the kubeconfig is read from.
pub(crate) fn kubeconfig_path(configured: &Path) -> Option<PathBuf> {
    let s = configured.to_string_lossy();
    if !s.trim().is_empty() {
        return Some(match s.strip_prefix("~/") {
            Some(rest) => home()
                .map(|h| h.join(rest))
                .unwrap_or_else(|| configured.into()),
            None => configured.to_path_buf(),
        });
    }
    if let Some(first) = std::env::var_os("KUBECONFIG")
        .and_then(|v| std::env::split_paths(&v).find(|p| !p.as_os_str().is_empty()))
    {
        return Some(first);
    }
    home().map(|h| h.join(".kube/config"))
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME").map(PathBuf::from)
}

fn in_cluster() -> bool {
    std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
}

/// A client for the cluster, and the API server's address for messages.
pub async fn connect(configured: &Path) -> Result<(Client, String), String> {
    let path = kubeconfig_path(configured);
    let config = match &path {
        Some(p) if p.exists() => {
            let kc = Kubeconfig::read_from(p)
                .map_err(|e| format!("cannot read kubeconfig {}: {e}", p.display()))?;
            Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(|e| format!("kubeconfig {} is not usable: {e}", p.display()))?
        }
        _ if in_cluster() => Config::incluster()
            .map_err(|e| format!("cannot use this pod's service account: {e}"))?,
        _ => {
            return Err(format!(
                "kubeconfig {} not found; set kube_config_path in the system config (or KUBECONFIG), or run \
                 cloudai inside a pod of the cluster",
                path.map(|p| p.display().to_string())
                    .unwrap_or_else(|| "~/.kube/config".into())
            ))
        }
    };
    let mut config = config;
    // audit logs and API priority rules can tell cloudai's requests from everyone else's
    config.headers.push((
        reqwest::header::USER_AGENT,
        reqwest::header::HeaderValue::from_static(concat!("cloudai/", env!("CARGO_PKG_VERSION"))),
    ));
    let server = config.cluster_url.to_string();
    let client = Client::try_from(config)
        .map_err(|e| format!("cannot set up a client for {server}: {e}"))?;
    Ok((client, server))
}

/// An API error as one sentence: the server's status and message, or what failed on the way.
pub fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => {
            let msg = if s.message.is_empty() {
                s.reason.clone()
            } else {
                s.message.clone()
            };
            format!("{} {}: {msg}", s.code, s.reason)
        }
        other => {
            // the transport's own chain says what failed (refused, certificate, DNS)
            let mut out = other.to_string();
            let mut src = std::error::Error::source(other);
            while let Some(s) = src {
                let t = s.to_string();
                if !out.contains(&t) {
                    out = format!("{out}: {t}");
                }
                src = s.source();
            }
            out
        }
    }
}

/// What the engine makes of an API error: a status says for itself; no answer (the connection, a timeout) may be
/// asked again; anything else (the request could not be built, credentials) is refused.
pub fn kind(e: &kube::Error) -> ErrorKind {
    match e {
        kube::Error::Api(s) => ErrorKind::of_http(s.code),
        kube::Error::HyperError(_) | kube::Error::Service(_) => ErrorKind::Transient,
        _ => ErrorKind::Refused,
    }
}

/// The error as the engine sees it, said with what was being done.
pub fn error(e: &kube::Error, doing: &str) -> SystemError {
    SystemError::new(kind(e), format!("{doing}: {}", describe(e)))
}

/// The error as the engine sees it, said bare.
pub fn bare(e: &kube::Error) -> SystemError {
    SystemError::new(kind(e), describe(e))
}

pub(crate) fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configured_path_wins_and_tilde_expands() {
        assert_eq!(
            kubeconfig_path(Path::new("/etc/k.yaml")),
            Some(PathBuf::from("/etc/k.yaml"))
        );
        if let Some(h) = home() {
            assert_eq!(kubeconfig_path(Path::new("~/k")), Some(h.join("k")));
        }
    }
}
