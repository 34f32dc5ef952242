//! The kernel log of one node (`dmesg`, `dmesg -T`, `dmesg --time-format=iso`, `journalctl -k`, syslog files) read
//! for what says a node needs attention: NVIDIA Xid events classified by NVIDIA's Xid catalogue (its "immediate
//! action" buckets), NVSwitch SXid events, PCIe AER errors and InfiniBand links losing carrier. Lines older than
//! the window (`since`) are left out when their time stamp can be read.

use std::collections::BTreeMap;

use chrono::{DateTime, Datelike, NaiveDateTime, TimeZone, Utc};

use super::{Finding, Severity};

/// One event of interest.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// `NVRM: Xid (PCI:0000:9b:00): 119, pid=…, name=…, <text>`
    Xid {
        pci: String,
        code: u32,
        text: String,
    },
    /// `nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, <text>`
    SXid {
        pci: String,
        code: u32,
        fatal: bool,
        text: String,
    },
    /// `pcieport 0000:00:01.0: AER: Uncorrectable (Fatal) error received: 0000:01:00.0`
    Aer {
        device: String,
        severity: AerSeverity,
    },
    /// `mlx5_core 0000:…: ibp12s0: lost carrier` / `ib0: lost carrier`
    LinkDown { device: String },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum AerSeverity {
    Corrected,
    NonFatal,
    Fatal,
}

/// What NVIDIA's catalogue says of an Xid: what it is, and what the node needs.
pub(crate) fn xid_meaning(code: u32) -> (Severity, &'static str) {
    use Severity::*;
    match code {
        8 => (
            Show,
            "GPU stopped processing (FIFO idle timeout); restart the application",
        ),
        13 => (Show, "graphics engine exception; an application error"),
        31 => (Show, "GPU memory page fault; an application error"),
        32 => (
            Show,
            "invalid or corrupted push buffer; restart the application",
        ),
        43 => (
            Show,
            "GPU stopped processing (channel reset); an application error",
        ),
        45 => (Show, "preemptive cleanup after an earlier error"),
        48 => (Fail, "double-bit ECC error; reset the GPU"),
        61 => (Warn, "internal micro-controller breakpoint; report it"),
        62 => (Fail, "internal micro-controller halt; reset the GPU"),
        63 => (
            Show,
            "row remap or page retirement event (its pending state is what counts)",
        ),
        64 => (Fail, "row remap or page retirement failure; reset the GPU"),
        68 => (Show, "NVDEC exception; an application error"),
        69 => (Show, "graphics engine class error; restart the application"),
        74 => (Fail, "NVLink error; check the NVLink and reset the GPU"),
        79 => (Fail, "GPU has fallen off the bus; reboot the node"),
        92 => (Show, "high single-bit ECC error rate"),
        94 => (
            Show,
            "contained uncorrectable ECC error; reset the GPU when idle",
        ),
        95 => (Fail, "uncontained uncorrectable ECC error; reset the GPU"),
        109 => (Fail, "context-switch timeout; reset the GPU"),
        119 => (Fail, "GSP RPC timeout; reset the GPU"),
        120 => (Fail, "GSP error; reset the GPU"),
        121 => (Show, "C2C link error"),
        140 => (Fail, "unrecovered ECC escape; reset the GPU"),
        143 => (Fail, "GPU initialization error; reset the GPU"),
        144..=150 => (Fail, "NVLink5 error; check the NVLink and reset the GPU"),
        154 => (Fail, "recovery action changed"),
        _ => (Warn, "not in NVIDIA's Xid catalogue"),
    }
}

/// A line's time stamp (wall clock) when its prefix has one; `year` completes syslog stamps without a year.
fn stamp(line: &str, year: i32) -> (Option<NaiveDateTime>, &str) {
    let l = line.trim_start();
    // dmesg -T: `[Sun Feb 23 16:24:18 2025] `
    if let Some(rest) = l.strip_prefix('[') {
        if let Some((inside, after)) = rest.split_once("] ") {
            let t = NaiveDateTime::parse_from_str(inside.trim(), "%a %b %e %H:%M:%S %Y").ok();
            return (t, after);
        }
    }
    // dmesg --decode --time-format=iso: `kern  :warn  : 2025-01-21T04:41:44,285060+00:00 …`
    let decoded = l
        .split_once(" : ")
        .filter(|(f, _)| f.starts_with("kern") || f.contains(':'))
        .map(|(_, r)| r.trim_start());
    for candidate in decoded.into_iter().chain(std::iter::once(l)) {
        let word = candidate.split_whitespace().next().unwrap_or("");
        if word.len() >= 19 && word.as_bytes().get(10) == Some(&b'T') {
            let iso = word.replacen(',', ".", 1);
            if let Ok(t) = DateTime::parse_from_rfc3339(&iso) {
                return (Some(t.naive_utc()), candidate[word.len()..].trim_start());
            }
            if let Ok(t) = NaiveDateTime::parse_from_str(&word[..19], "%Y-%m-%dT%H:%M:%S") {
                return (Some(t), candidate[word.len()..].trim_start());
            }
        }
    }
    // syslog / journalctl: `Dec 06 03:46:46 host kernel: …`
    if l.len() > 15 {
        if let Ok(t) =
            NaiveDateTime::parse_from_str(&format!("{year} {}", &l[..15]), "%Y %b %e %H:%M:%S")
        {
            return (Some(t), &l[15..]);
        }
    }
    (None, l)
}

fn after<'a>(s: &'a str, key: &str) -> Option<&'a str> {
    s.find(key).map(|i| &s[i + key.len()..])
}

/// The PCI address in `(PCI:0000:9b:00): …`, and what follows the parenthesis.
fn pci_and_rest(s: &str) -> Option<(String, &str)> {
    let r = after(s, "(PCI:")?;
    let (pci, rest) = r.split_once(')')?;
    Some((pci.to_string(), rest.trim_start_matches(':').trim_start()))
}

/// The event a line reports, if any.
pub fn event(msg: &str) -> Option<Event> {
    if let Some(r) = after(msg, "NVRM: Xid ") {
        let (pci, rest) = pci_and_rest(r)?;
        let (code, text) = rest.split_once(',').unwrap_or((rest, ""));
        let text = text
            .split(", ")
            .filter(|p| !p.trim_start().starts_with("pid=") && !p.trim_start().starts_with("name="))
            .collect::<Vec<_>>()
            .join(", ");
        return Some(Event::Xid {
            pci,
            code: code.trim().parse().ok()?,
            text: text.trim().to_string(),
        });
    }
    if let Some(r) = after(msg, "SXid ") {
        let (pci, rest) = pci_and_rest(r)?;
        let mut parts = rest.splitn(3, ',');
        let code = parts.next()?.trim().parse().ok()?;
        let fatal = parts
            .next()
            .unwrap_or("")
            .trim()
            .eq_ignore_ascii_case("fatal");
        return Some(Event::SXid {
            pci,
            code,
            fatal,
            text: parts.next().unwrap_or("").trim().to_string(),
        });
    }
    if let Some(r) = after(msg, "AER: ") {
        let severity = if r.starts_with("Corrected") || r.starts_with("Multiple Corrected") {
            AerSeverity::Corrected
        } else if r.contains("Uncorrectable (Fatal)") || r.contains("Uncorrected (Fatal)") {
            AerSeverity::Fatal
        } else if r.contains("Uncorrectable (Non-Fatal)") || r.contains("Uncorrected (Non-Fatal)") {
            AerSeverity::NonFatal
        } else {
            return None;
        };
        if !r.contains("error received") {
            return None;
        }
        let device = r.rsplit(' ').next().unwrap_or("").to_string();
        return Some(Event::Aer { device, severity });
    }
    if msg.trim_end().ends_with(": lost carrier") {
        let before = msg.trim_end().trim_end_matches(": lost carrier");
        let device = before.rsplit(' ').next().unwrap_or(before).to_string();
        if device.starts_with("ib") || msg.contains("mlx5") {
            return Some(Event::LinkDown { device });
        }
    }
    None
}

/// The events of `text` at or after `since` (lines without a readable time stamp always count); `now` gives the
/// year of syslog stamps.
pub fn events(text: &str, since: Option<NaiveDateTime>, now: DateTime<Utc>) -> Vec<Event> {
    text.lines()
        .filter_map(|line| {
            let (at, msg) = stamp(line, now.year());
            match (at, since) {
                (Some(t), Some(s)) if t < s => None,
                _ => event(msg),
            }
        })
        .collect()
}

/// What the events mean for the node, one finding per kind of event and device, counted, worst first.
pub fn judge(events: &[Event]) -> Vec<Finding> {
    let mut by: BTreeMap<(String, String), (Severity, String, usize)> = BTreeMap::new();
    for e in events {
        let (key, severity, what) = match e {
            Event::Xid { pci, code, text } => {
                let (mut sev, meaning) = xid_meaning(*code);
                // 154 names the recovery it now asks (after "to"); only "None" is nothing to do
                let now_asks = text.rsplit(" to ").next().unwrap_or(text);
                if *code == 154 && now_asks.contains("None") {
                    sev = Severity::Show;
                }
                (
                    format!("xid {code:05} {pci}"),
                    sev,
                    format!("Xid {code} on GPU {pci}: {meaning}"),
                )
            }
            Event::SXid {
                pci, code, fatal, ..
            } => (
                format!("sxid {code:05} {pci}"),
                if *fatal {
                    Severity::Fail
                } else {
                    Severity::Show
                },
                format!(
                    "SXid {code} ({}) on NVSwitch {pci}",
                    if *fatal { "fatal" } else { "non-fatal" }
                ),
            ),
            Event::Aer { device, severity } => (
                format!("aer {severity:?} {device}"),
                match severity {
                    AerSeverity::Fatal => Severity::Fail,
                    AerSeverity::NonFatal => Severity::Warn,
                    AerSeverity::Corrected => Severity::Show,
                },
                format!(
                    "PCIe AER {} error at {device}",
                    match severity {
                        AerSeverity::Fatal => "uncorrectable (fatal)",
                        AerSeverity::NonFatal => "uncorrectable (non-fatal)",
                        AerSeverity::Corrected => "corrected",
                    }
                ),
            ),
            Event::LinkDown { device } => (
                format!("link {device}"),
                Severity::Warn,
                format!("{device} lost carrier (link flap)"),
            ),
        };
        let e = by
            .entry((key, what))
            .or_insert((severity, String::new(), 0));
        e.0 = e.0.max(severity);
        e.2 += 1;
    }
    let mut out: Vec<Finding> = by
        .into_iter()
        .map(|((_, what), (severity, _, count))| Finding {
            severity,
            what: if count > 1 {
                format!("{what} ({count} times)")
            } else {
                what
            },
        })
        .collect();
    out.sort_by_key(|f| std::cmp::Reverse(f.severity));
    out
}

/// `24h`, `90m`, `7d`, `3600` (seconds): the window before the check's own time.
pub fn window(s: &str) -> Option<chrono::Duration> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: i64 = num.parse().ok()?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86_400,
        _ => return None,
    };
    (n > 0).then(|| chrono::Duration::seconds(secs))
}

/// The wall-clock time the window starts, in the time zone of the node's stamps (`dmesg -T` and syslog print
/// local time; ISO stamps are read as UTC): the check's time less the window.
pub fn since(checked_at: DateTime<Utc>, window: chrono::Duration, local: bool) -> NaiveDateTime {
    let t = checked_at - window;
    if local {
        chrono::Local
            .from_utc_datetime(&t.naive_utc())
            .naive_local()
    } else {
        t.naive_utc()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_prefix_form_gives_its_time_and_message() {
        let y = 2026;
        let (t, m) = stamp(
            "[Sun Feb 23 16:24:18 2025] NVRM: Xid (PCI:0000:9b:00): 119, x",
            y,
        );
        assert_eq!(t.unwrap().to_string(), "2025-02-23 16:24:18");
        assert!(m.starts_with("NVRM"));
        let (t, m) = stamp("[  123.456789] NVRM: Xid (PCI:0000:9b:00): 79, x", y);
        assert!(t.is_none() && m.starts_with("NVRM"));
        let (t, m) = stamp(
            "kern  :warn  : 2025-01-21T04:41:44,285060+00:00 pt_main_thread[1]: segfault",
            y,
        );
        assert_eq!(t.unwrap().to_string(), "2025-01-21 04:41:44.285060");
        assert!(m.starts_with("pt_main_thread"), "{m}");
        let (t, m) = stamp(
            "2026-12-06T03:46:46+00:00 gpu01 kernel: NVRM: Xid (PCI:0000:1b:00): 48, x",
            y,
        );
        assert_eq!(t.unwrap().to_string(), "2026-12-06 03:46:46");
        assert!(m.starts_with("gpu01 kernel:"), "{m}");
        let (t, m) = stamp(
            "Dec  6 03:46:46 gpu01 kernel: NVRM: Xid (PCI:0000:1b:00): 48, x",
            y,
        );
        assert_eq!(t.unwrap().to_string(), "2026-12-06 03:46:46");
        assert!(m.contains("NVRM"), "{m}");
    }

    #[test]
    fn events_by_the_lines_rules() {
        assert_eq!(
            event("NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception"),
            Some(Event::Xid {
                pci: "0000:cb:00".into(),
                code: 13,
                text: "Graphics SM Warp Exception".into()
            })
        );
        // older drivers: no pid/name
        assert_eq!(
            event("NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."),
            Some(Event::Xid {
                pci: "0000:3b:00".into(),
                code: 79,
                text: "GPU has fallen off the bus.".into()
            })
        );
        assert_eq!(
            event("nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error"),
            Some(Event::SXid {
                pci: "0000:05:00.0".into(),
                code: 12028,
                fatal: false,
                text: "Link 32 egress non-posted PRIV error".into()
            })
        );
        assert_eq!(
            event("pcieport 0000:00:03.1: AER: Uncorrectable (Fatal) error received: 0000:3b:00.0"),
            Some(Event::Aer {
                device: "0000:3b:00.0".into(),
                severity: AerSeverity::Fatal
            })
        );
        assert_eq!(
            event("pcieport 0000:00:03.1: AER: Multiple Corrected error received: 0000:00:03.1"),
            Some(Event::Aer {
                device: "0000:00:03.1".into(),
                severity: AerSeverity::Corrected
            })
        );
        assert_eq!(
            event("mlx5_core 0000:0c:00.0 ibp12s0: lost carrier"),
            Some(Event::LinkDown {
                device: "ibp12s0".into()
            })
        );
        assert_eq!(event("eth0: lost carrier"), None);
        assert_eq!(event("NVRM: GPU at PCI:0000:9b:00: GPU-509665ad"), None);
    }

    #[test]
    fn the_catalogue_fails_what_needs_a_reset_and_shows_application_errors() {
        let ev = |code: u32, text: &str| Event::Xid {
            pci: "0000:1b:00".into(),
            code,
            text: text.into(),
        };
        let f = judge(&[ev(13, ""), ev(13, ""), ev(79, ""), ev(63, ""), ev(999, "")]);
        assert_eq!(f[0].severity, Severity::Fail);
        assert!(f[0]
            .what
            .starts_with("Xid 79 on GPU 0000:1b:00: GPU has fallen off the bus"));
        assert_eq!(f[1].severity, Severity::Warn);
        assert!(f
            .iter()
            .any(|x| x.what.contains("Xid 13") && x.what.ends_with("(2 times)")));
        assert!(f
            .iter()
            .all(|x| !(x.what.contains("Xid 63") && x.severity == Severity::Fail)));
        assert_eq!(
            judge(&[ev(
                154,
                "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"
            )])[0]
                .severity,
            Severity::Fail
        );
        assert_eq!(
            judge(&[ev(
                154,
                "GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)"
            )])[0]
                .severity,
            Severity::Show
        );
        assert_eq!(
            judge(&[ev(154, "recovery action changed to 0x0 (None)")])[0].severity,
            Severity::Show
        );
    }

    #[test]
    fn the_window_leaves_old_lines_out() {
        let now = Utc.with_ymd_and_hms(2025, 2, 24, 12, 0, 0).unwrap();
        let text = "[Sun Feb 23 10:00:00 2025] NVRM: Xid (PCI:0000:9b:00): 79, old\n\
                    [Mon Feb 24 11:00:00 2025] NVRM: Xid (PCI:0000:9b:00): 119, new\n\
                    [  5.0] NVRM: Xid (PCI:0000:9b:00): 48, no stamp\n";
        let s = NaiveDateTime::parse_from_str("2025-02-24 00:00:00", "%Y-%m-%d %H:%M:%S").unwrap();
        let codes: Vec<u32> = events(text, Some(s), now)
            .into_iter()
            .filter_map(|e| match e {
                Event::Xid { code, .. } => Some(code),
                _ => None,
            })
            .collect();
        assert_eq!(codes, [119, 48]);
        assert_eq!(window("24h"), Some(chrono::Duration::hours(24)));
        assert_eq!(window("7d"), Some(chrono::Duration::days(7)));
        assert_eq!(window("0h"), None);
        assert_eq!(window("1w"), None);
    }
}
