//! Self-contained HTML pages: inline style, inline chart script, data as embedded JSON. They open offline.

const STYLE: &str = include_str!("assets/style.css");
const CHART_JS: &str = include_str!("assets/chart.js");

pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// A full page. `data` is the JSON the chart script reads (`{"charts": {...}}`); `</` is escaped so it cannot
/// close the script element.
pub fn page(title: &str, body: &str, data: &serde_json::Value) -> String {
    let mut out = Vec::with_capacity(body.len() + STYLE.len() + CHART_JS.len() + 1024);
    let _ = page_to(&mut out, title, data, |w| w.write_all(body.as_bytes()));
    String::from_utf8(out).unwrap_or_default()
}

/// [`page`], written as it is made: `body` writes the page's body into the same writer.
pub(crate) fn page_to(
    w: &mut dyn std::io::Write,
    title: &str,
    data: &serde_json::Value,
    body: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let json = data.to_string().replace("</", "<\\/");
    write!(
        w,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{}</title>\n<style>\n{STYLE}</style>\n</head>\n<body>\n",
        esc(title)
    )?;
    body(w)?;
    write!(
        w,
        "\n<script type=\"application/json\" id=\"cloudai-data\">{json}</script>\n<script>\n{CHART_JS}</script>\n</body>\n</html>\n"
    )
}

/// A chart placeholder; the script draws `data.charts[key]` into it.
pub fn chart(key: &str) -> String {
    format!("<div data-chart=\"{}\"></div>", esc(key))
}

/// A chart spec: title, y label and unit, series of (size, value) points.
pub(crate) fn chart_spec(
    title: &str,
    ylabel: &str,
    unit: &str,
    log_y: bool,
    series: Vec<serde_json::Value>,
) -> serde_json::Value {
    let vname = ylabel.split(" (").next().unwrap_or(ylabel);
    serde_json::json!({ "title": title, "ylabel": ylabel, "vname": vname, "unit": unit, "logY": log_y, "series": series })
}

/// Horizontal reference lines (a threshold, a target): (label, value).
pub(crate) fn with_refs(mut spec: serde_json::Value, refs: &[(&str, f64)]) -> serde_json::Value {
    spec["refs"] = refs
        .iter()
        .filter(|(_, v)| v.is_finite())
        .map(|(l, v)| serde_json::json!({ "label": l, "value": v }))
        .collect();
    spec
}

/// A series whose points carry more values for the hover and the CSV export: (size, value, {name: text}).
pub(crate) fn rich_series(
    name: &str,
    points: Vec<(u64, f64, serde_json::Value)>,
    dashed: bool,
) -> serde_json::Value {
    let pts: Vec<serde_json::Value> = points
        .into_iter()
        .filter(|(_, v, _)| v.is_finite())
        .map(|(s, v, x)| serde_json::json!([s, v, x]))
        .collect();
    serde_json::json!({ "name": name, "points": pts, "dashed": dashed })
}

pub fn series(name: &str, points: &[(u64, f64)], dashed: bool) -> serde_json::Value {
    let pts: Vec<serde_json::Value> = points
        .iter()
        .filter(|(_, v)| v.is_finite())
        .map(|(s, v)| serde_json::json!([s, v]))
        .collect();
    serde_json::json!({ "name": name, "points": pts, "dashed": dashed })
}

/// `8 B`, `1 KiB`, `1.5 MiB`: the size format of every page (the charts' axes use the same); CSV files keep
/// CloudAI's [`human_size`].
pub(crate) fn size_iec(b: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i < UNITS.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    let n = (v * 100.0).round() / 100.0;
    format!("{n} {}", UNITS[i])
}

/// A percentage with one decimal, never `-0.0%`.
pub(crate) fn pct(v: f64) -> String {
    let r = (v * 10.0).round() / 10.0;
    if r == 0.0 {
        "0.0%".into()
    } else {
        format!("{r:.1}%")
    }
}

/// `8B`, `1KB`, `1.5MB`: binary units, as CloudAI's "Size Human-readable" column.
pub(crate) fn human_size(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i < UNITS.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if v.fract() == 0.0 {
        format!("{}{}", v as u64, UNITS[i])
    } else {
        format!("{}{}", (v * 100.0).round() / 100.0, UNITS[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_escaping() {
        assert_eq!(human_size(8), "8B");
        assert_eq!(human_size(1024), "1KB");
        assert_eq!(human_size(134217728), "128MB");
        assert_eq!(human_size(1536), "1.5KB");
        assert_eq!(esc("<a href='x'>&"), "&lt;a href=&#39;x&#39;&gt;&amp;");
        let p = page("t", "", &serde_json::json!({"x": "</script>"}));
        assert!(p.contains("<\\/script>") && !p.contains("\"</script>\""));
    }
}
