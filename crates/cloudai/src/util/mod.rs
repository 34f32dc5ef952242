pub mod color;
pub mod fds;
pub mod fsx;
pub mod nodelist;
pub mod pytoml;
pub mod pyyaml;
pub mod shell;
pub mod signals;
pub mod spill;

/// This machine's name as the kernel knows it (what `hostname` prints).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

/// A CSV field, quoted when it holds a comma, a quote or a newline (Python's csv writer).
pub fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}
