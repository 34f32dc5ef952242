//! Run:ai REST client: bearer tokens from the app credentials (refreshed before expiry and once on 401),
//! retries with exponential backoff and full jitter on 429 (honouring Retry-After), 502/503/504 and connection
//! errors (500 too for idempotent requests), request timeouts, rustls with certificate verification against the
//! built-in roots plus a private CA bundle (`ca_bundle` in the system, or `SSL_CERT_FILE`). Credentials the
//! server refuses and certificates it cannot prove are reported as such, once, without retries.

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tokio::sync::Mutex;

use crate::config::system::Secret;
use crate::systems::{ErrorKind, SystemError};
use crate::{debug, warn};

const MAX_TRIES: u32 = 7;
/// Items asked per page of a list (the API's maximum).
const PAGE: usize = 500;
const BACKOFF_BASE: Duration = Duration::from_millis(250);
const BACKOFF_CAP: Duration = Duration::from_secs(30);

#[derive(Debug)]
pub(crate) enum ApiError {
    /// The server answered with an error status.
    Status { code: u16, message: String },
    /// No answer (connection refused/reset, timeout): the request may or may not have been applied.
    Transport(String),
    /// The token request was refused: the credentials are wrong; retrying cannot help.
    Auth(String),
    /// The server's certificate is not trusted (or not valid for the host); retrying cannot help.
    Tls(String),
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApiError::Status { code, message } => write!(f, "HTTP {code}: {message}"),
            ApiError::Transport(m) => write!(f, "no answer: {m}"),
            ApiError::Auth(m) | ApiError::Tls(m) => f.write_str(m),
        }
    }
}

impl From<ApiError> for SystemError {
    fn from(e: ApiError) -> Self {
        SystemError::new(e.kind(), e.to_string())
    }
}

impl ApiError {
    /// What the engine makes of it: no answer may be asked again, a status says for itself, refused credentials
    /// and an untrusted certificate stay refused.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ApiError::Status { code, .. } => ErrorKind::of_http(*code),
            ApiError::Transport(_) => ErrorKind::Transient,
            ApiError::Auth(_) | ApiError::Tls(_) => ErrorKind::Refused,
        }
    }

    /// This error as the engine sees it, said with what was being done (`From` says it bare).
    pub(crate) fn doing(&self, what: &str) -> SystemError {
        SystemError::new(self.kind(), format!("{what}: {self}"))
    }

    pub fn code(&self) -> Option<u16> {
        match self {
            ApiError::Status { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// The error body's message with the server's per-field complaints (`complianceIssues`, `details`), so a 400
/// says which field was refused and why.
fn error_message(text: &str) -> String {
    let Ok(v) = serde_json::from_str::<Value>(text) else {
        return text.chars().take(300).collect();
    };
    let mut msg = v["message"].as_str().unwrap_or("").to_string();
    let issues: Vec<String> = v["complianceIssues"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| {
            format!(
                "{}: {}",
                i["field"].as_str().unwrap_or("?"),
                i["details"].as_str().unwrap_or("")
            )
        })
        .collect();
    if !issues.is_empty() {
        msg = format!("{msg} [{}]", issues.join("; "));
    } else if let Some(d) = v["details"].as_str().filter(|d| !d.is_empty()) {
        msg = format!("{msg} [{d}]");
    }
    if msg.is_empty() {
        text.chars().take(300).collect()
    } else {
        msg
    }
}

/// A certificate the server presented that rustls refused, found anywhere in the error's chain.
fn certificate_problem(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(r) = err.downcast_ref::<rustls::Error>() {
            if matches!(r, rustls::Error::InvalidCertificate(_)) {
                return Some(r.to_string());
            }
        }
        let text = err.to_string();
        if text.contains("invalid peer certificate") {
            return Some(text);
        }
        cur = err.source();
    }
    None
}

/// The TLS configuration of every connection to the control plane and the cluster: the built-in roots, plus the
/// certificates of `ca_bundle` and of `SSL_CERT_FILE` (a private CA of an on-premises control plane).
pub(crate) fn tls_config(
    ca_bundle: Option<&std::path::Path>,
) -> Result<std::sync::Arc<rustls::ClientConfig>, String> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let env = std::env::var_os("SSL_CERT_FILE").map(std::path::PathBuf::from);
    for (path, from) in [
        (ca_bundle.map(std::path::Path::to_path_buf), "ca_bundle"),
        (env, "SSL_CERT_FILE"),
    ] {
        let Some(path) = path else { continue };
        let pem = std::fs::read(&path)
            .map_err(|e| format!("cannot read the CA bundle {} ({from}): {e}", path.display()))?;
        let mut n = 0;
        for cert in rustls_pki_types::CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| {
                format!(
                    "{} ({from}) is not a PEM certificate bundle: {e:?}",
                    path.display()
                )
            })?;
            roots.add(cert).map_err(|e| {
                format!(
                    "{} ({from}): a certificate is not usable as a CA: {e}",
                    path.display()
                )
            })?;
            n += 1;
        }
        if n == 0 {
            return Err(format!(
                "{} ({from}) holds no PEM certificate (expected -----BEGIN CERTIFICATE----- blocks)",
                path.display()
            ));
        }
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(std::sync::Arc::new(cfg))
}

/// How a request may be retried: 500s only when repeating it is harmless; `tries` in all.
#[derive(Clone, Copy)]
struct Retry {
    idempotent: bool,
    tries: u32,
}

struct Token {
    value: String,
    refresh_at: Instant,
}

pub struct Client {
    http: reqwest::Client,
    tls: std::sync::Arc<rustls::ClientConfig>,
    base: String,
    app_id: String,
    secret: Secret,
    token: Mutex<Option<Token>>,
    rng: std::sync::Mutex<u64>,
}

/// Per-request timeout; `CLOUDAI_RUNAI_TIMEOUT_S` overrides it (slow control planes, tests).
fn timeout() -> Duration {
    let secs = std::env::var("CLOUDAI_RUNAI_TIMEOUT_S")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(30.0);
    Duration::from_secs_f64(secs.max(0.1))
}

fn retry_after(h: &reqwest::header::HeaderMap) -> Option<Duration> {
    let v = h.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(s) = v.parse::<f64>() {
        return Some(Duration::from_secs_f64(s.clamp(0.0, 300.0)));
    }
    let when = chrono::DateTime::parse_from_rfc2822(v).ok()?;
    let secs = (when.timestamp() - chrono::Utc::now().timestamp()).clamp(0, 300);
    Some(Duration::from_secs(secs as u64))
}

impl Client {
    pub fn new(
        base_url: &str,
        app_id: &str,
        secret: Secret,
        tls: std::sync::Arc<rustls::ClientConfig>,
    ) -> Result<Self, String> {
        let http = reqwest::Client::builder()
            .use_preconfigured_tls((*tls).clone())
            .timeout(timeout())
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("cloudai-rs/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            | 1;
        Ok(Self {
            http,
            tls,
            base: base_url.trim_end_matches('/').to_string(),
            app_id: app_id.to_string(),
            secret,
            token: Mutex::new(None),
            rng: std::sync::Mutex::new(seed),
        })
    }

    /// Full jitter: a random delay up to min(cap, base * 2^attempt).
    fn backoff(&self, attempt: u32) -> Duration {
        let max = (BACKOFF_BASE * 2u32.saturating_pow(attempt)).min(BACKOFF_CAP);
        let mut r = self.rng.lock().unwrap();
        *r ^= *r << 13;
        *r ^= *r >> 7;
        *r ^= *r << 17;
        max.mul_f64((*r % 10_000) as f64 / 10_000.0)
    }

    async fn grant(&self) -> Result<Token, ApiError> {
        // client_credentials first (the documented grant); app_token for older tenants.
        let bodies = [
            json!({"grantType": "client_credentials", "clientID": self.app_id, "clientSecret": self.secret.expose()}),
            json!({"grantType": "app_token", "appID": self.app_id, "appSecret": self.secret.expose()}),
        ];
        let mut last = ApiError::Transport("no token request made".into());
        for body in &bodies {
            match self
                .send(
                Method::POST,
                "/api/v1/token",
                &[],
                Some(body),
                None,
                Retry {
                    idempotent: true,
                    tries: MAX_TRIES,
                },
            )
                .await
            {
                Ok(v) => {
                    let value = v["accessToken"].as_str().unwrap_or_default().to_string();
                    if value.is_empty() {
                        return Err(ApiError::Status {
                            code: 200,
                            message: "the token response has no accessToken".into(),
                        });
                    }
                    let ttl = v["expiresIn"].as_f64().unwrap_or(3600.0).max(1.0);
                    debug!("Run:ai token obtained, valid {ttl} s");
                    return Ok(Token {
                        value,
                        refresh_at: Instant::now() + Duration::from_secs_f64(ttl * 0.8),
                    });
                }
                Err(e @ ApiError::Status { code: 400, .. }) => last = e,
                Err(ApiError::Status {
                    code: code @ (401 | 403),
                    message,
                }) => {
                    return Err(ApiError::Auth(format!(
                        "authentication failed for app_id {} at {} (HTTP {code}: {message}); check app_id and \
                         app_secret (or RUNAI_APP_SECRET)",
                        self.app_id, self.base
                    )))
                }
                Err(e) => return Err(e),
            }
        }
        Err(match last {
            ApiError::Status { code, message } => ApiError::Auth(format!(
                "authentication failed for app_id {} at {} (HTTP {code}: {message})",
                self.app_id, self.base
            )),
            other => other,
        })
    }

    async fn bearer(&self, force: bool) -> Result<String, ApiError> {
        let mut t = self.token.lock().await;
        if force || t.as_ref().is_none_or(|t| Instant::now() >= t.refresh_at) {
            *t = Some(self.grant().await?);
        }
        Ok(t.as_ref().unwrap().value.clone())
    }

    /// One request with retries. `idempotent` allows retrying 500s.
    async fn send(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&Value>,
        bearer: Option<&str>,
        retry: Retry,
    ) -> Result<Value, ApiError> {
        let Retry { idempotent, tries } = retry;
        let url = format!("{}{path}", self.base);
        let mut attempt = 0;
        loop {
            let mut req = self
                .http
                .request(method.clone(), &url)
                .query(query)
                .header("Accept", "application/json");
            if let Some(b) = bearer {
                req = req.bearer_auth(b);
            }
            if let Some(b) = body {
                req = req.json(b);
            }
            let (err, wait) = match req.send().await {
                Ok(resp) => {
                    let status = resp.status();
                    let after = retry_after(resp.headers());
                    let text = resp.text().await.unwrap_or_default();
                    if status.is_success() {
                        return Ok(serde_json::from_str(&text).unwrap_or(Value::String(text)));
                    }
                    let message = error_message(&text);
                    let e = ApiError::Status {
                        code: status.as_u16(),
                        message,
                    };
                    let retry = match status {
                        StatusCode::TOO_MANY_REQUESTS
                        | StatusCode::BAD_GATEWAY
                        | StatusCode::SERVICE_UNAVAILABLE
                        | StatusCode::GATEWAY_TIMEOUT => true,
                        StatusCode::INTERNAL_SERVER_ERROR => idempotent,
                        _ => false,
                    };
                    if !retry {
                        return Err(e);
                    }
                    (e, after)
                }
                Err(e) => {
                    if let Some(why) = certificate_problem(&e) {
                        let host = reqwest::Url::parse(&url)
                            .ok()
                            .and_then(|u| u.host_str().map(str::to_string))
                            .unwrap_or_default();
                        return Err(ApiError::Tls(format!(
                            "certificate not trusted for {host}: {why}; give the control plane's CA as ca_bundle \
                             in the system config (or SSL_CERT_FILE)"
                        )));
                    }
                    let e = ApiError::Transport(error_chain(&e));
                    if !idempotent {
                        return Err(e); // the caller must find out whether it happened
                    }
                    (e, None)
                }
            };
            attempt += 1;
            if attempt >= tries {
                return Err(err);
            }
            let wait = wait.unwrap_or_else(|| self.backoff(attempt));
            let msg = format!(
                "Run:ai {method} {path}: {err}; retrying in {:.1} s ({attempt}/{})",
                wait.as_secs_f64(),
                tries - 1
            );
            // brief calls repeat every poll on the way out: their failure is reported by the caller
            if tries > 2 {
                warn!("{msg}");
            } else {
                debug!("{msg}");
            }
            tokio::time::sleep(wait).await;
        }
    }

    /// An authenticated request; a 401 gets a fresh token and one replay.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&Value>,
    ) -> Result<Value, ApiError> {
        self.call_tries(method, path, query, body, MAX_TRIES).await
    }

    /// As `call`, with one retry only: for cleanup on the way out, where a control plane that does not answer
    /// at once is reported rather than waited for.
    pub(crate) async fn call_brief(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&Value>,
    ) -> Result<Value, ApiError> {
        self.call_tries(method, path, query, body, 2).await
    }

    async fn call_tries(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&Value>,
        tries: u32,
    ) -> Result<Value, ApiError> {
        let retry = Retry {
            idempotent: method != Method::POST,
            tries,
        };
        let token = self.bearer(false).await?;
        match self
            .send(method.clone(), path, query, body, Some(&token), retry)
            .await
        {
            Err(ApiError::Status { code: 401, .. }) => {
                debug!("Run:ai answered 401: refreshing the token");
                let token = self.bearer(true).await?;
                self.send(method, path, query, body, Some(&token), retry)
                    .await
            }
            other => other,
        }
    }

    /// Every item of a paged list (`{"<key>": [...], "next": <offset>}`), 500 a page; `brief` retries once per
    /// page only.
    pub(crate) async fn list_all(
        &self,
        path: &str,
        key: &str,
        query: &[(&str, String)],
        brief: bool,
    ) -> Result<Vec<Value>, ApiError> {
        let mut out = Vec::new();
        let mut offset = 0usize;
        loop {
            let mut q = query.to_vec();
            q.push(("offset", offset.to_string()));
            q.push(("limit", PAGE.to_string()));
            let v = self
                .call_tries(
                    Method::GET,
                    path,
                    &q,
                    None,
                    if brief { 2 } else { MAX_TRIES },
                )
                .await?;
            // some lists answer a bare array
            let page = v[key]
                .as_array()
                .or(v.as_array())
                .cloned()
                .unwrap_or_default();
            let n = page.len();
            out.extend(page);
            match v["next"].as_u64().map(|n| n as usize) {
                Some(next) if n > 0 && next > offset => offset = next,
                _ => return Ok(out),
            }
        }
    }

    pub fn tls(&self) -> std::sync::Arc<rustls::ClientConfig> {
        self.tls.clone()
    }

    pub async fn token(&self) -> Result<String, ApiError> {
        self.bearer(false).await
    }
}

/// An error with its causes ("error sending request: connection refused"), as reqwest's Display stops at the top.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !out.contains(&t) {
            out = format!("{out}: {t}");
        }
        cur = c.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_api_error_says_whether_asking_again_may_help() {
        let status = |code| ApiError::Status {
            code,
            message: String::new(),
        };
        assert_eq!(status(503).kind(), ErrorKind::Transient);
        assert_eq!(status(429).kind(), ErrorKind::Transient);
        assert_eq!(status(400).kind(), ErrorKind::Refused);
        assert_eq!(status(404).kind(), ErrorKind::Gone);
        assert_eq!(
            ApiError::Transport("reset".into()).kind(),
            ErrorKind::Transient
        );
        assert_eq!(
            ApiError::Auth("bad secret".into()).kind(),
            ErrorKind::Refused
        );
        assert_eq!(ApiError::Tls("untrusted".into()).kind(), ErrorKind::Refused);
        let e = status(503).doing("cannot look up Run:ai workload w");
        assert_eq!(e.kind, ErrorKind::Transient);
        assert_eq!(e.message, "cannot look up Run:ai workload w: HTTP 503: ");
    }
}
