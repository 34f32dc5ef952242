//! Colour on the console: on a terminal unless `NO_COLOR` is set (no-color.org), or as `--color` says. Only the
//! console is coloured; log files, JSON and reports never are.

use std::sync::atomic::{AtomicBool, Ordering};

static ON: AtomicBool = AtomicBool::new(false);

/// `--color`: auto (a terminal without NO_COLOR), always, never.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum When {
    Auto,
    Always,
    Never,
}

/// Decides once, at start-up.
pub fn init(when: When) {
    let on = match when {
        When::Always => true,
        When::Never => false,
        When::Auto => {
            // SAFETY: isatty only reads the descriptor's state
            let tty = unsafe { libc::isatty(1) == 1 };
            tty && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        }
    };
    ON.store(on, Ordering::Relaxed);
}

pub(crate) fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

/// SGR codes: red, green, yellow, bold.
#[derive(Clone, Copy, Debug)]
pub enum Paint {
    Red,
    Green,
    Yellow,
    Bold,
}

/// `text` in `paint` when colour is on, else as is.
pub(crate) fn paint(text: &str, paint: Paint) -> String {
    if !enabled() {
        return text.to_string();
    }
    let code = match paint {
        Paint::Red => "31",
        Paint::Green => "32",
        Paint::Yellow => "33",
        Paint::Bold => "1",
    };
    format!("\x1b[{code}m{text}\x1b[0m")
}

/// The colour of a status word: green for success, red for failures, yellow for what did not run to an end.
pub fn status(word: &str) -> Option<Paint> {
    match word.trim() {
        "PASSED" | "STOPPED" => Some(Paint::Green),
        "FAILED" | "TIMEOUT" | "INTERRUPTED" => Some(Paint::Red),
        "SKIPPED" | "CANCELLED" | "DRY-RUN" => Some(Paint::Yellow),
        _ => None,
    }
}
