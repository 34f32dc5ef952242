//! Logging as CloudAI does it: `[LEVEL] message` on stdout at the chosen level, and every DEBUG line with a
//! timestamp in the log file (truncated per invocation). A hand-rolled logger keeps start-up instant.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Debug = 10,
    Info = 20,
    Warning = 30,
    Error = 40,
}

impl Level {
    pub fn parse(s: &str) -> Option<Level> {
        Some(match s.to_ascii_uppercase().as_str() {
            "DEBUG" => Level::Debug,
            "INFO" => Level::Info,
            "WARNING" | "WARN" => Level::Warning,
            "ERROR" | "CRITICAL" => Level::Error,
            _ => return None,
        })
    }
    fn name(self) -> &'static str {
        match self {
            Level::Debug => "DEBUG",
            Level::Info => "INFO",
            Level::Warning => "WARNING",
            Level::Error => "ERROR",
        }
    }
}

struct Logger {
    console: Level,
    file: Mutex<Option<File>>,
    /// The run's own log inside its results tree (appended: `resume` adds to it).
    tree: Mutex<Option<File>>,
}

static LOGGER: OnceLock<Logger> = OnceLock::new();

/// Sets up logging; a log file that cannot be created is reported once and then skipped.
pub fn init(console: Level, file: Option<&Path>) {
    let f = file.and_then(|p| match File::create(p) {
        Ok(f) => Some(f),
        Err(e) => {
            let _ = writeln!(
                std::io::stdout(),
                "[WARNING] Cannot write log file {}: {e}",
                p.display()
            );
            None
        }
    });
    let _ = LOGGER.set(Logger {
        console,
        file: Mutex::new(f),
        tree: Mutex::new(None),
    });
}

/// From now on every line also goes to `path` (appended, created 0600): a run keeps its own log in its results
/// tree, whatever another invocation does to the working directory's log file.
pub(crate) fn also_to(path: &Path) {
    use std::os::unix::fs::OpenOptionsExt;
    let Some(l) = LOGGER.get() else { return };
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path);
    match f {
        Ok(f) => {
            if let Ok(mut g) = l.tree.lock() {
                *g = Some(f);
            }
        }
        Err(e) => log(
            Level::Warning,
            &format!("Cannot write the run's log {}: {e}", path.display()),
        ),
    }
}

/// No log line reaches the console from now on (a command whose stdout is JSON); the log file keeps them.
static CONSOLE_OFF: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub(crate) fn console_off() {
    CONSOLE_OFF.store(true, std::sync::atomic::Ordering::Relaxed);
}

pub fn log(level: Level, msg: &str) {
    if CONSOLE_OFF.load(std::sync::atomic::Ordering::Relaxed) {
        log_file_only(level, msg);
        return;
    }
    let Some(l) = LOGGER.get() else {
        if level >= Level::Info {
            // never println!: a closed terminal (SIGHUP) must not end the process mid-cancel
            let _ = writeln!(std::io::stdout(), "[{}] {msg}", level.name());
        }
        return;
    };
    if level >= l.console {
        let mut out = std::io::stdout().lock();
        let status = STATUS.lock().ok().and_then(|s| s.clone());
        if status.is_some() {
            let _ = write!(out, "\r\x1b[2K");
        }
        let tag = match level {
            Level::Error => crate::util::color::paint(level.name(), crate::util::color::Paint::Red),
            Level::Warning => {
                crate::util::color::paint(level.name(), crate::util::color::Paint::Yellow)
            }
            _ => level.name().to_string(),
        };
        let _ = writeln!(out, "[{tag}] {msg}");
        if let Some(s) = status {
            let _ = write!(out, "{s}");
            let _ = out.flush();
        }
    }
    log_file_only(level, msg);
}

/// The status line shown under the log on a terminal (redrawn in place); `None` when nothing is shown.
static STATUS: Mutex<Option<String>> = Mutex::new(None);
/// What the last status line said when stdout is not a terminal (a new line is printed only on change).
static LAST_STATUS_KEY: Mutex<String> = Mutex::new(String::new());

/// Shows a one-line status. On a terminal the line is redrawn in place under the log; otherwise `text` is logged
/// as an INFO line whenever `key` (what matters in it, without clocks) changes.
pub fn status(text: &str, key: &str) {
    use std::io::IsTerminal;
    let mut out = std::io::stdout();
    if out.is_terminal() {
        let line: String = text
            .chars()
            .take(terminal_width().saturating_sub(1))
            .collect();
        let _ = write!(out.lock(), "\r\x1b[2K{line}");
        let _ = out.flush();
        if let Ok(mut s) = STATUS.lock() {
            *s = Some(line);
        }
        return;
    }
    let changed = LAST_STATUS_KEY.lock().is_ok_and(|mut last| {
        let changed = *last != key;
        if changed {
            *last = key.to_string();
        }
        changed
    });
    if changed {
        log(Level::Info, text);
    }
}

/// Removes the status line (before the final table).
pub(crate) fn clear_status() {
    let had = STATUS.lock().ok().and_then(|mut s| s.take()).is_some();
    if had {
        let mut out = std::io::stdout();
        let _ = write!(out, "\r\x1b[2K");
        let _ = out.flush();
    }
}

fn terminal_width() -> usize {
    // SAFETY: TIOCGWINSZ fills a winsize struct; the result is only read on success.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0;
    if ok && ws.ws_col > 0 {
        ws.ws_col as usize
    } else {
        80
    }
}

/// Plain console text (CloudAI prints some lines without a level), mirrored to the log file.
pub fn print(text: &str) {
    let _ = writeln!(std::io::stdout(), "{text}");
    log_file_only(Level::Info, text);
}

pub(crate) fn log_file_only(level: Level, msg: &str) {
    if let Some(l) = LOGGER.get() {
        let ts = chrono::Local::now().format("%Y-%m-%d %H:%M:%S,%3f");
        for file in [&l.file, &l.tree] {
            if let Ok(mut g) = file.lock() {
                if let Some(f) = g.as_mut() {
                    let _ = writeln!(f, "{ts} - {} - {msg}", level.name());
                }
            }
        }
    }
}

#[macro_export]
macro_rules! info { ($($t:tt)*) => { $crate::log::log($crate::log::Level::Info, &format!($($t)*)) } }
#[macro_export]
macro_rules! warn { ($($t:tt)*) => { $crate::log::log($crate::log::Level::Warning, &format!($($t)*)) } }
#[macro_export]
macro_rules! error { ($($t:tt)*) => { $crate::log::log($crate::log::Level::Error, &format!($($t)*)) } }
#[macro_export]
macro_rules! debug { ($($t:tt)*) => { $crate::log::log($crate::log::Level::Debug, &format!($($t)*)) } }
