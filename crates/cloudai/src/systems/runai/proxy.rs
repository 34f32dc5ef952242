//! The log stream through the site's HTTP proxy, as the REST calls go: `HTTPS_PROXY` for `wss://`, `HTTP_PROXY`
//! for `ws://` (`ALL_PROXY` for either, lower-case names too), hosts in `NO_PROXY` reached directly. The proxy is
//! asked for a tunnel (`CONNECT host:port`), with Basic credentials when its URL carries them.

use reqwest::Url;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn env(names: &[&str]) -> Option<String> {
    names
        .iter()
        .find_map(|n| std::env::var(n).ok().filter(|v| !v.trim().is_empty()))
}

/// Whether `NO_PROXY` (comma-separated: `*`, host names that match themselves and their subdomains, a leading
/// dot allowed, IP addresses, each with an optional `:port`) exempts this host.
pub fn bypassed(no_proxy: &str, host: &str, port: u16) -> bool {
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    no_proxy
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .any(|e| {
            if e == "*" {
                return true;
            }
            let (name, p) = match e.rsplit_once(':') {
                Some((n, p)) if p.chars().all(|c| c.is_ascii_digit()) && !n.contains(':') => {
                    (n, p.parse::<u16>().ok())
                }
                _ => (e, None),
            };
            if p.is_some_and(|p| p != port) {
                return false;
            }
            let name = name
                .trim_start_matches("*.")
                .trim_start_matches('.')
                .to_ascii_lowercase();
            host == name || host.ends_with(&format!(".{name}"))
        })
}

/// The proxy to reach `url` through, if any.
pub(crate) fn proxy_for(url: &Url) -> Option<Url> {
    let (host, port) = (url.host_str()?, url.port_or_known_default()?);
    if let Some(no) = env(&["NO_PROXY", "no_proxy"]) {
        if bypassed(&no, host, port) {
            return None;
        }
    }
    let names: &[&str] = match url.scheme() {
        "wss" | "https" => &["HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"],
        _ => &["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"],
    };
    let raw = env(names)?;
    let with_scheme = if raw.contains("://") {
        raw
    } else {
        format!("http://{raw}")
    };
    Url::parse(&with_scheme).ok()
}

fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A TCP stream to `target` through the proxy's tunnel.
pub async fn tunnel(proxy: &Url, target: &Url) -> Result<TcpStream, String> {
    if proxy.scheme() != "http" {
        return Err(format!(
            "proxy {} for the log stream: only http:// proxies are supported",
            proxy.as_str()
        ));
    }
    let (ph, pp) = (
        proxy.host_str().unwrap_or_default(),
        proxy.port_or_known_default().unwrap_or(80),
    );
    let (th, tp) = (
        target.host_str().unwrap_or_default(),
        target.port_or_known_default().unwrap_or(443),
    );
    let mut s = TcpStream::connect((ph, pp))
        .await
        .map_err(|e| format!("cannot reach proxy {ph}:{pp}: {e}"))?;
    let authority = if th.contains(':') {
        format!("[{th}]:{tp}")
    } else {
        format!("{th}:{tp}")
    };
    let mut req = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n");
    if !proxy.username().is_empty() {
        let user = percent_decode(proxy.username());
        let pass = percent_decode(proxy.password().unwrap_or(""));
        req.push_str(&format!(
            "Proxy-Authorization: Basic {}\r\n",
            base64(format!("{user}:{pass}").as_bytes())
        ));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| format!("proxy {ph}:{pp}: {e}"))?;
    // the answer's head, byte by byte: nothing of the tunnel may be read past it
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > 16 * 1024 {
            return Err(format!("proxy {ph}:{pp} sent an endless answer to CONNECT"));
        }
        let b = s
            .read_u8()
            .await
            .map_err(|e| format!("proxy {ph}:{pp} closed the tunnel request: {e}"))?;
        head.push(b);
    }
    let text = String::from_utf8_lossy(&head);
    let status = text.lines().next().unwrap_or("").to_string();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(format!(
            "proxy {ph}:{pp} refused a tunnel to {authority}: {status}"
        ));
    }
    Ok(s)
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_proxy_rules() {
        assert!(bypassed("*", "a.example.com", 443));
        assert!(bypassed("example.com", "a.example.com", 443));
        assert!(bypassed(".example.com", "example.com", 443));
        assert!(bypassed("localhost, 10.0.0.1", "10.0.0.1", 80));
        assert!(!bypassed("example.com", "badexample.com", 443));
        assert!(bypassed("example.com:443", "example.com", 443));
        assert!(!bypassed("example.com:8443", "example.com", 443));
        assert!(!bypassed("", "example.com", 443));
    }

    #[test]
    fn basic_credentials() {
        assert_eq!(base64(b"user:pa ss"), "dXNlcjpwYSBzcw==");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b"abc"), "YWJj");
        assert_eq!(percent_decode("p%40ss"), "p@ss");
    }
}
