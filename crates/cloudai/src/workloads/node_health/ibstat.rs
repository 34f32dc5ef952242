//! InfiniBand / RoCE ports of one node, from `ibstat` (infiniband-diags: `CA '<name>'` blocks, or `CA: '<name>'`
//! for one adapter) and `perfquery` port counters (each block after a `== perfquery <ca> <port>` line, as the
//! template's command prints them). The fabric ports are those of the node's compute adapters — the adapter type
//! with the most ports (the faster on a tie), or the CA name prefixes the test declares —; a port of another
//! adapter (a front-end Ethernet NIC) is shown, never failed.

use std::collections::BTreeMap;

use super::{Finding, Severity};

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Port {
    pub ca: String,
    pub ca_type: String,
    pub firmware: String,
    pub port: u32,
    pub state: String,
    pub phys: String,
    /// Gb/s as `Rate:` prints it.
    pub rate: f64,
    pub link_layer: String,
    /// `perfquery` counters of this port, by name.
    pub counters: BTreeMap<String, u64>,
}

/// The ports `ibstat` lists, with the `perfquery` counters printed after them.
pub fn parse(text: &str) -> Vec<Port> {
    let mut ports: Vec<Port> = Vec::new();
    let (mut ca, mut ca_type, mut fw) = (String::new(), String::new(), String::new());
    let mut in_port = false;
    let mut counters_of: Option<usize> = None;
    for raw in text.lines() {
        let line = raw.trim();
        if let Some(rest) = line.strip_prefix("== perfquery ") {
            let mut w = rest.split_whitespace();
            let (c, p) = (
                w.next().unwrap_or(""),
                w.next().and_then(|p| p.parse().ok()),
            );
            counters_of = ports.iter().position(|x| x.ca == c && Some(x.port) == p);
            continue;
        }
        if let Some(i) = counters_of {
            // `PortRcvErrors:...................0`
            if let Some((name, value)) = line.split_once(':') {
                let name = name.trim();
                let v = value.trim_start_matches('.').trim();
                if !name.starts_with('#') && name.chars().all(|c| c.is_ascii_alphanumeric()) {
                    if let Ok(n) = v.parse::<u64>() {
                        ports[i].counters.insert(name.to_string(), n);
                    }
                }
            }
            if !line.is_empty() && !line.starts_with('#') && !line.contains(':') {
                counters_of = None;
            } else {
                continue;
            }
        }
        let quoted = |s: &str| s.trim().trim_matches('\'').to_string();
        if let Some(name) = line
            .strip_prefix("CA '")
            .or_else(|| line.strip_prefix("CA: '"))
        {
            ca = quoted(name);
            ca_type.clear();
            fw.clear();
            in_port = line.starts_with("CA: ");
            if in_port {
                // `ibstat <ca> <port>`: port lines follow without a `Port n:` header
                ports.push(Port {
                    ca: ca.clone(),
                    port: 1,
                    ..Port::default()
                });
            }
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key.trim() {
            "CA type" => ca_type = value.to_string(),
            "Firmware version" => fw = value.to_string(),
            k if k.starts_with("Port ") && value.is_empty() => {
                in_port = true;
                ports.push(Port {
                    ca: ca.clone(),
                    ca_type: ca_type.clone(),
                    firmware: fw.clone(),
                    port: k[5..].trim().parse().unwrap_or(0),
                    ..Port::default()
                });
            }
            k if in_port => {
                let Some(p) = ports.last_mut() else { continue };
                if p.ca_type.is_empty() {
                    p.ca_type = ca_type.clone();
                    p.firmware = fw.clone();
                }
                match k {
                    "State" => p.state = value.to_string(),
                    "Physical state" => p.phys = value.to_string(),
                    "Rate" => {
                        p.rate = value
                            .split_whitespace()
                            .next()
                            .and_then(|r| r.parse().ok())
                            .unwrap_or(0.0)
                    }
                    "Link layer" => p.link_layer = value.to_string(),
                    _ => {}
                }
            }
            _ => {}
        }
    }
    ports
}

/// The fabric ports' adapter type: declared CA name prefixes win; else the type with the most ports, the faster
/// (by its best active rate) on a tie.
fn fabric<'a>(ports: &'a [Port], declared: &[String]) -> Vec<&'a Port> {
    if !declared.is_empty() {
        return ports
            .iter()
            .filter(|p| declared.iter().any(|d| p.ca.starts_with(d.as_str())))
            .collect();
    }
    let mut by: BTreeMap<&str, (usize, f64)> = BTreeMap::new();
    for p in ports {
        let e = by.entry(p.ca_type.as_str()).or_insert((0, 0.0));
        e.0 += 1;
        if p.state == "Active" {
            e.1 = e.1.max(p.rate);
        }
    }
    let Some(kind) = by
        .iter()
        .max_by(|a, b| {
            (a.1 .0, a.1 .1)
                .partial_cmp(&(b.1 .0, b.1 .1))
                .unwrap_or(std::cmp::Ordering::Equal)
        })
        .map(|(k, _)| *k)
    else {
        return Vec::new();
    };
    ports.iter().filter(|p| p.ca_type == kind).collect()
}

/// Counters that mean this link (cable, transceiver, port) is bad, with `ibcheckerrs`' default thresholds, then
/// those that mean trouble elsewhere or congestion (warned).
const PHYSICAL: &[(&str, u64, u32)] = &[
    ("SymbolErrorCounter", 10, 16),
    ("LinkErrorRecoveryCounter", 10, 8),
    ("LinkDownedCounter", 10, 8),
    ("PortRcvErrors", 10, 16),
    ("LocalLinkIntegrityErrors", 10, 4),
    ("ExcessiveBufferOverrunErrors", 10, 4),
];
const ELSEWHERE: &[(&str, u64, u32)] = &[
    ("PortRcvRemotePhysicalErrors", 100, 16),
    ("PortRcvSwitchRelayErrors", 100, 16),
    ("PortXmitDiscards", 100, 16),
    ("PortXmitConstraintErrors", 100, 8),
    ("PortRcvConstraintErrors", 100, 8),
];

/// Why a link's state is bad, in words an operator acts on.
fn state_meaning(state: &str, phys: &str) -> &'static str {
    match (state, phys) {
        (_, "Polling") => "no partner seen: cable, transceiver or far port",
        (_, "Disabled") => "port disabled (administratively, by firmware or by the subnet manager)",
        ("Initializing" | "Init", "LinkUp") => {
            "cable fine but no subnet manager configured the port"
        }
        ("Armed", "LinkUp") => "configured but not activated",
        (_, "LinkErrorRecovery") => "the link is retraining",
        _ => "not Active/LinkUp",
    }
}

/// What the ports say of the node. `declared` names the fabric adapters (CA name prefixes; empty: derived),
/// `rate` the fabric's expected Gb/s (0: the best of the node's fabric ports).
pub fn judge(ports: &[Port], declared: &[String], rate: f64) -> Vec<Finding> {
    let mut out = Vec::new();
    if ports.is_empty() {
        out.push(Finding::new(
            Severity::Fail,
            "ibstat lists no InfiniBand/RoCE port",
        ));
        return out;
    }
    let fab = fabric(ports, declared);
    if fab.is_empty() {
        out.push(Finding::new(
            Severity::Fail,
            format!(
                "no port of the declared fabric adapters ({}) is present",
                declared.join(", ")
            ),
        ));
    }
    let best = fab
        .iter()
        .filter(|p| p.state == "Active")
        .map(|p| p.rate)
        .fold(0.0_f64, f64::max);
    let want = if rate > 0.0 { rate } else { best };
    for p in ports {
        let name = format!("{} port {}", p.ca, p.port);
        let is_fabric = fab.iter().any(|f| f.ca == p.ca && f.port == p.port);
        let up = p.state == "Active" && p.phys == "LinkUp";
        if !is_fabric {
            if !up {
                out.push(Finding::new(
                    Severity::Show,
                    format!(
                        "{name} ({}, not a fabric adapter): {}/{}",
                        p.ca_type, p.state, p.phys
                    ),
                ));
            }
            continue;
        }
        if !up {
            out.push(Finding::new(
                Severity::Fail,
                format!(
                    "{name}: {}/{} ({})",
                    p.state,
                    p.phys,
                    state_meaning(&p.state, &p.phys)
                ),
            ));
            continue;
        }
        if want > 0.0 && p.rate + 1e-9 < want {
            out.push(Finding::new(
                Severity::Fail,
                format!(
                    "{name}: {} Gb/s, below the fabric's {} Gb/s (a lane down, or a slower cable)",
                    p.rate, want
                ),
            ));
        }
        for (set, sev) in [(PHYSICAL, Severity::Fail), (ELSEWHERE, Severity::Warn)] {
            for (counter, limit, bits) in set {
                let Some(&v) = p.counters.get(*counter) else {
                    continue;
                };
                let saturated = *bits < 64 && v >= (1u64 << bits) - 1;
                if v > *limit || saturated {
                    out.push(Finding::new(
                        sev,
                        format!(
                            "{name}: {counter} = {v}{} (threshold {limit})",
                            if saturated { ", saturated" } else { "" }
                        ),
                    ));
                }
            }
        }
    }
    out.sort_by_key(|f| std::cmp::Reverse(f.severity));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &str = "CA: 'mlx5_0'\nCA type: MT4123\nNumber of ports: 1\nFirmware version: 20.31.1014\n\
                       Hardware version: 0\nNode GUID: 0x1c34da0300123456\nSystem image GUID: 0x1c34da0300123456\n\
                       State: Active\nPhysical state: LinkUp\nRate: 200\nBase lid: 12\nLMC: 0\nSM lid: 1\n\
                       Capability mask: 0xa651e848\nPort GUID: 0x1c34da0300123456\nLink layer: InfiniBand\n";

    #[test]
    fn one_adapters_form_and_counters() {
        let text = format!(
            "{ONE}== perfquery mlx5_0 1\n# Port counters: Lid 12 port 1 (CapMask: 0x5A00)\n\
             PortSelect:......................1\nSymbolErrorCounter:..............65535\n\
             LinkDownedCounter:...............2\nPortXmitDiscards:................250\n"
        );
        let ports = parse(&text);
        assert_eq!(ports.len(), 1);
        let p = &ports[0];
        assert_eq!((p.ca.as_str(), p.port, p.rate), ("mlx5_0", 1, 200.0));
        assert_eq!((p.state.as_str(), p.phys.as_str()), ("Active", "LinkUp"));
        assert_eq!(p.counters["SymbolErrorCounter"], 65535);
        let f = judge(&ports, &[], 0.0);
        assert_eq!(f[0].severity, Severity::Fail);
        assert!(
            f[0].what.contains("SymbolErrorCounter = 65535, saturated"),
            "{f:?}"
        );
        assert!(f
            .iter()
            .any(|x| x.severity == Severity::Warn && x.what.contains("PortXmitDiscards = 250")));
        assert!(!f.iter().any(|x| x.what.contains("LinkDowned")));
        // the declared fabric rate: 200 is below 400
        let f = judge(&ports, &[], 400.0);
        assert!(f
            .iter()
            .any(|x| x.what.contains("200 Gb/s, below the fabric's 400 Gb/s")));
    }

    #[test]
    fn empty_or_unrelated_output_fails() {
        assert_eq!(
            judge(&parse("ibstat: command not found\n"), &[], 0.0)[0].severity,
            Severity::Fail
        );
    }
}
