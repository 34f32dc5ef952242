//! The GPUs of one node from `nvidia-smi -q` (indented `Key : value` text) or `nvidia-smi -q -x` (XML), read into one
//! tree per GPU with normalised names (`Remapped Rows` and `remapped_rows` alike), both drivers' names accepted
//! (`Clocks Throttle Reasons` before R550, `Clocks Event Reasons` after; the three ECC layouts), and judged:
//! fewer GPUs than the node should have, uncorrectable ECC errors since the driver loaded, pages or rows waiting
//! for a reset, a failed row remap, and clock slowdowns that mean hardware trouble fail the node; lifetime
//! uncorrectable errors, software thermal slowdown, a slowdown cause flagged while HW Slowdown is not, and
//! persistence mode off are warnings.

use super::{Finding, Severity};

/// One element: its normalised name, its value (empty for a section) and what it holds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Node {
    pub name: String,
    pub value: String,
    pub children: Vec<Node>,
}

impl Node {
    fn child(&self, names: &[&str]) -> Option<&Node> {
        self.children
            .iter()
            .find(|c| names.contains(&c.name.as_str()))
    }

    /// The value at a path of alternative names per level.
    pub fn at(&self, path: &[&[&str]]) -> Option<&str> {
        let mut n = self;
        for names in path {
            n = n.child(names)?;
        }
        Some(n.value.as_str())
    }

    fn section(&self, path: &[&[&str]]) -> Option<&Node> {
        let mut n = self;
        for names in path {
            n = n.child(names)?;
        }
        Some(n)
    }
}

/// `Remapped Rows` → `remapped_rows`; `SRAM Uncorrectable SEC-DED` → `sram_uncorrectable_sec_ded`.
fn norm(s: &str) -> String {
    let mut out = String::new();
    for c in s.trim().chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('_') && !out.is_empty() {
            out.push('_');
        }
    }
    out.trim_end_matches('_').to_string()
}

/// What a node's `nvidia-smi -q` says: driver-wide values and one tree per GPU.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    pub driver: String,
    pub cuda: String,
    /// `Attached GPUs` as printed (None when the output has no such line).
    pub attached: Option<u64>,
    pub gpus: Vec<(String, Node)>,
}

/// Either form of `nvidia-smi -q`; None when the text is neither (an error message, nothing).
pub fn parse(text: &str) -> Option<Report> {
    let t = text.trim_start();
    if t.starts_with("<?xml") || t.contains("<nvidia_smi_log") {
        parse_xml(text)
    } else if text.contains("Attached GPUs") || text.contains("NVSMI LOG") {
        Some(parse_text(text))
    } else {
        None
    }
}

fn parse_text(text: &str) -> Report {
    let mut r = Report::default();
    // the GPU being read and its open sections, by indentation
    let mut gpu: Option<(String, Node)> = None;
    let mut stack: Vec<(usize, Node)> = Vec::new();
    fn close(stack: &mut Vec<(usize, Node)>, to: usize, gpu: &mut Option<(String, Node)>) {
        while stack.last().is_some_and(|(i, _)| *i >= to) {
            let (_, n) = stack.pop().expect("checked");
            match stack.last_mut() {
                Some((_, parent)) => parent.children.push(n),
                None => {
                    if let Some((_, g)) = gpu.as_mut() {
                        g.children.push(n)
                    }
                }
            }
        }
    }
    for line in text.lines() {
        if line.trim().is_empty() {
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        let l = line.trim();
        if indent == 0 {
            close(&mut stack, 0, &mut gpu);
            if let Some(bus) = l.strip_prefix("GPU ") {
                r.gpus.extend(gpu.take());
                gpu = Some((bus.trim().to_string(), Node::default()));
                continue;
            }
            if let Some((k, v)) = l.split_once(" : ") {
                match norm(k).as_str() {
                    "driver_version" => r.driver = v.trim().to_string(),
                    "cuda_version" => r.cuda = v.trim().to_string(),
                    "attached_gpus" => r.attached = v.trim().parse().ok(),
                    _ => {}
                }
            }
            continue;
        }
        close(&mut stack, indent, &mut gpu);
        let node = match l
            .split_once(" : ")
            .or_else(|| l.strip_suffix(" :").map(|k| (k, "")))
        {
            Some((k, v)) => Node {
                name: norm(k),
                value: v.trim().to_string(),
                children: Vec::new(),
            },
            None => Node {
                name: norm(l),
                ..Node::default()
            },
        };
        stack.push((indent, node));
    }
    close(&mut stack, 0, &mut gpu);
    r.gpus.extend(gpu);
    r
}

fn parse_xml(text: &str) -> Option<Report> {
    // the DTD line is not needed and older parsers refuse it
    let body: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("<!DOCTYPE"))
        .collect::<Vec<_>>()
        .join("\n");
    let doc = roxmltree::Document::parse(&body).ok()?;
    let root = doc.root_element();
    let text_of = |n: roxmltree::Node, tag: &str| {
        n.children()
            .find(|c| c.has_tag_name(tag))
            .and_then(|c| c.text())
            .unwrap_or("")
            .trim()
            .to_string()
    };
    fn tree(n: roxmltree::Node) -> Node {
        Node {
            name: norm(n.tag_name().name()),
            value: n
                .children()
                .filter(|c| c.is_text())
                .filter_map(|c| c.text())
                .collect::<String>()
                .trim()
                .to_string(),
            children: n.children().filter(|c| c.is_element()).map(tree).collect(),
        }
    }
    Some(Report {
        driver: text_of(root, "driver_version"),
        cuda: text_of(root, "cuda_version"),
        attached: text_of(root, "attached_gpus").parse().ok(),
        gpus: root
            .children()
            .filter(|c| c.has_tag_name("gpu"))
            .map(|g| (g.attribute("id").unwrap_or("").to_string(), tree(g)))
            .collect(),
    })
}

fn number(v: Option<&str>) -> u64 {
    v.and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn yes(v: Option<&str>) -> bool {
    v.is_some_and(|s| s.eq_ignore_ascii_case("yes"))
}

/// Uncorrectable ECC errors of a counter section (`volatile`, `aggregate`): every `*uncorrectable*` count (layouts
/// B and C) and the double-bit total (layout A).
fn uncorrectable(gpu: &Node, which: &str) -> u64 {
    let Some(sec) = gpu.section(&[&["ecc_errors"], &[which]]) else {
        return 0;
    };
    let mut n: u64 = sec
        .children
        .iter()
        .filter(|c| c.name.contains("uncorrectable") && !c.name.contains("threshold"))
        .map(|c| number(Some(&c.value)))
        .sum();
    n += number(sec.at(&[&["double_bit"], &["total"]]));
    n
}

/// The clock event reasons that are active, in the output's order, by their normalised names without the
/// `clocks_*_reason_` prefix (text nests HW Thermal / Power Brake under HW Slowdown).
fn active_reasons(gpu: &Node) -> Vec<String> {
    fn walk(list: &[Node], out: &mut Vec<String>) {
        for c in list {
            if c.value.eq_ignore_ascii_case("active") {
                out.push(
                    c.name
                        .trim_start_matches("clocks_event_reason_")
                        .trim_start_matches("clocks_throttle_reason_")
                        .to_string(),
                );
            }
            walk(&c.children, out);
        }
    }
    let mut out = Vec::new();
    if let Some(sec) = gpu.child(&["clocks_event_reasons", "clocks_throttle_reasons"]) {
        walk(&sec.children, &mut out);
    }
    out
}

/// What the report says of the node; `expected` is the GPUs it should have (0: not checked).
pub fn judge(r: &Report, expected: u64) -> Vec<Finding> {
    let mut out = Vec::new();
    let seen = r.gpus.len() as u64;
    if expected > 0 && seen < expected {
        out.push(Finding::new(
            Severity::Fail,
            format!("{seen} GPUs found, the node should have {expected} (a GPU fell off the bus or is not bound)"),
        ));
    }
    if let Some(a) = r.attached {
        if a != seen {
            out.push(Finding::new(
                Severity::Warn,
                format!("Attached GPUs says {a}, the output lists {seen}"),
            ));
        }
    }
    for (bus, g) in &r.gpus {
        let gpu = format!("GPU {bus}");
        let v = uncorrectable(g, "volatile");
        if v > 0 {
            out.push(Finding::new(
                Severity::Fail,
                format!("{gpu}: {v} uncorrectable ECC error(s) since the driver loaded"),
            ));
        }
        let a = uncorrectable(g, "aggregate");
        if a > 0 {
            out.push(Finding::new(
                Severity::Warn,
                format!("{gpu}: {a} uncorrectable ECC error(s) in its lifetime"),
            ));
        }
        let pending_pages = yes(g.at(&[
            &["retired_pages"],
            &["pending_page_blacklist", "pending_blacklist"],
        ])) || yes(g.at(&[
            &["retired_pages"],
            &["pending_page_retirement", "pending_retirement"],
        ]));
        if pending_pages {
            out.push(Finding::new(
                Severity::Fail,
                format!("{gpu}: retired pages wait for a reset (pending)"),
            ));
        }
        if yes(g.at(&[&["remapped_rows"], &["pending", "remapped_row_pending"]])) {
            out.push(Finding::new(
                Severity::Fail,
                format!("{gpu}: a row remap waits for a GPU reset (pending)"),
            ));
        }
        if yes(g.at(&[
            &["remapped_rows"],
            &["remapping_failure_occurred", "remapped_row_failure"],
        ])) {
            out.push(Finding::new(
                Severity::Fail,
                format!("{gpu}: a row remap failed (the GPU needs repair)"),
            ));
        }
        // the causes count as hardware trouble when HW Slowdown itself is active: the reasons are read at one
        // instant, and a cause flagged without the slowdown is a transient (shown as a warning)
        let reasons = active_reasons(g);
        let slowdown = reasons.iter().any(|r| r == "hw_slowdown");
        for reason in &reasons {
            let cause = if slowdown {
                Severity::Fail
            } else {
                Severity::Warn
            };
            let (sev, why) = match reason.as_str() {
                "hw_slowdown" => (
                    Severity::Fail,
                    "HW slowdown (clocks cut: over-temperature or power brake)",
                ),
                "hw_thermal_slowdown" => (cause, "HW thermal slowdown"),
                "hw_power_brake_slowdown" => (cause, "HW power brake slowdown"),
                "sw_thermal_slowdown" => (Severity::Warn, "SW thermal slowdown (cooling)"),
                _ => continue,
            };
            out.push(Finding::new(sev, format!("{gpu}: {why} active")));
        }
        if g.at(&[&["persistence_mode"]])
            .is_some_and(|p| p.eq_ignore_ascii_case("disabled"))
        {
            out.push(Finding::new(
                Severity::Warn,
                format!("{gpu}: persistence mode off"),
            ));
        }
    }
    out.sort_by_key(|f| std::cmp::Reverse(f.severity));
    out
}

/// The versions a fleet should agree on: driver, CUDA, and each GPU's VBIOS (the distinct ones, sorted).
pub fn versions(r: &Report) -> Vec<(&'static str, String)> {
    let mut vbios: Vec<String> = r
        .gpus
        .iter()
        .filter_map(|(_, g)| g.at(&[&["vbios_version"]]).map(str::to_string))
        .collect();
    vbios.sort();
    vbios.dedup();
    vec![
        ("driver", r.driver.clone()),
        ("cuda", r.cuda.clone()),
        ("vbios", vbios.join(",")),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    const SICK: &str = r#"==============NVSMI LOG==============

Driver Version                            : 550.54.15
CUDA Version                              : 12.4

Attached GPUs                             : 2
GPU 00000000:1B:00.0
    Product Name                          : NVIDIA H100 80GB HBM3
    Persistence Mode                      : Disabled
    VBIOS Version                         : 96.00.74.00.01
    Clocks Event Reasons
        Idle                              : Not Active
        HW Slowdown                       : Active
            HW Thermal Slowdown           : Active
            HW Power Brake Slowdown       : Not Active
        SW Thermal Slowdown               : Not Active
    ECC Errors
        Volatile
            SRAM Correctable              : 0
            SRAM Uncorrectable Parity     : 0
            SRAM Uncorrectable SEC-DED    : 0
            DRAM Correctable              : 4
            DRAM Uncorrectable            : 2
        Aggregate
            DRAM Uncorrectable            : 7
            SRAM Threshold Exceeded       : No
    Retired Pages
        Pending Page Blacklist            : N/A
    Remapped Rows
        Correctable Error                 : 0
        Uncorrectable Error               : 2
        Pending                           : Yes
        Remapping Failure Occurred        : No
GPU 00000000:2B:00.0
    Persistence Mode                      : Enabled
"#;

    #[test]
    fn the_text_form_is_read_section_by_section() {
        let r = parse(SICK).unwrap();
        assert_eq!(
            (r.driver.as_str(), r.cuda.as_str(), r.attached),
            ("550.54.15", "12.4", Some(2))
        );
        assert_eq!(r.gpus.len(), 2);
        let f = judge(&r, 8);
        let fails: Vec<&str> = f
            .iter()
            .filter(|x| x.severity == Severity::Fail)
            .map(|x| x.what.as_str())
            .collect();
        assert!(
            fails
                .iter()
                .any(|x| x.contains("2 GPUs found, the node should have 8")),
            "{f:?}"
        );
        assert!(
            fails
                .iter()
                .any(|x| x.contains("2 uncorrectable ECC error(s) since the driver loaded")),
            "{f:?} {:?}",
            r.gpus[0]
        );
        assert!(fails
            .iter()
            .any(|x| x.contains("a row remap waits for a GPU reset")));
        assert!(fails.iter().any(|x| x.contains("HW slowdown")));
        assert!(fails.iter().any(|x| x.contains("HW thermal slowdown")));
        assert!(!fails.iter().any(|x| x.contains("HW power brake")));
        assert!(f.iter().any(|x| x.severity == Severity::Warn
            && x.what
                .contains("7 uncorrectable ECC error(s) in its lifetime")));
        assert!(f
            .iter()
            .any(|x| x.severity == Severity::Warn && x.what.contains("persistence mode off")));
        assert_eq!(versions(&r)[2], ("vbios", "96.00.74.00.01".into()));
    }

    #[test]
    fn the_xml_form_with_older_names() {
        let xml = r#"<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v11.dtd">
<nvidia_smi_log>
  <driver_version>525.125.06</driver_version><cuda_version>12.0</cuda_version><attached_gpus>1</attached_gpus>
  <gpu id="00000000:07:00.0">
    <persistence_mode>Enabled</persistence_mode><vbios_version>92.00.45.00.03</vbios_version>
    <clocks_throttle_reasons>
      <clocks_throttle_reason_hw_slowdown>Active</clocks_throttle_reason_hw_slowdown>
      <clocks_throttle_reason_hw_power_brake_slowdown>Active</clocks_throttle_reason_hw_power_brake_slowdown>
    </clocks_throttle_reasons>
    <ecc_errors><volatile><double_bit><total>3</total></double_bit></volatile></ecc_errors>
    <retired_pages><pending_blacklist>Yes</pending_blacklist></retired_pages>
    <remapped_rows>N/A</remapped_rows>
  </gpu>
</nvidia_smi_log>"#;
        let r = parse(xml).unwrap();
        assert_eq!(r.gpus[0].0, "00000000:07:00.0");
        let f = judge(&r, 1);
        let fails: Vec<&str> = f
            .iter()
            .filter(|x| x.severity == Severity::Fail)
            .map(|x| x.what.as_str())
            .collect();
        assert_eq!(fails.len(), 4, "{f:?}");
        assert!(fails.iter().any(|x| x.contains("HW power brake")));
        assert!(fails.iter().any(|x| x.contains("3 uncorrectable")));
        assert!(fails.iter().any(|x| x.contains("retired pages wait")));
    }

    #[test]
    fn not_nvidia_smi_output() {
        assert!(parse(
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
        )
        .is_none());
    }
}
