//! `time_limit` values in CloudAI's Slurm-like syntax.

/// Parses `30m`, `2h`, `1d`, `D-HH:MM:SS`, `HH:MM:SS` or `HH:MM` (hours and minutes, as CloudAI reads it) into
/// seconds. The error is the message to show, with the accepted forms.
pub fn parse(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let invalid = || format!("invalid time limit format: {s:?}");
    if t.is_empty() {
        return Err(invalid());
    }
    let last = t.chars().last().unwrap().to_ascii_lowercase();
    if "smhdw".contains(last) && t.len() > 1 && !t.contains(':') {
        let n: u64 = t[..t.len() - 1].parse().map_err(|_| invalid())?;
        let unit = match last {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            _ => 7 * 86_400,
        };
        return Ok(n * unit);
    }
    let (days, rest) = match t.split_once('-') {
        Some((d, r)) => (d.parse::<u64>().map_err(|_| invalid())?, r),
        None => (0, t),
    };
    let parts: Vec<&str> = rest.split(':').collect();
    let nums: Vec<u64> = parts
        .iter()
        .map(|p| p.parse::<u64>())
        .collect::<Result<_, _>>()
        .map_err(|_| invalid())?;
    let secs = match (t.contains('-'), nums.as_slice()) {
        // Like CloudAI, fields are not range-checked: "00:60:00" is an hour.
        (_, [h, m, s]) => h * 3600 + m * 60 + s,
        (false, [h, m]) => h * 3600 + m * 60,
        _ => return Err(format!("unsupported time limit format: {s:?}")),
    };
    Ok(days * 86_400 + secs)
}

pub(crate) const FORMS_HINT: &str =
    "use a Slurm-like form: \"30m\", \"2h\", \"HH:MM:SS\", \"HH:MM\" or \"D-HH:MM:SS\"";

/// Formats seconds as Slurm's `--time`: `HH:MM:SS`, or `D-HH:MM:SS` from one day on.
pub fn format(secs: u64) -> String {
    let (d, r) = (secs / 86_400, secs % 86_400);
    let (h, m, s) = (r / 3600, (r % 3600) / 60, r % 60);
    if d > 0 {
        format!("{d}-{h:02}:{m:02}:{s:02}")
    } else {
        format!("{h:02}:{m:02}:{s:02}")
    }
}

/// `format` for a duration that may be negative (clock skew): `-` then the magnitude.
pub(crate) fn format_signed(secs: i64) -> String {
    if secs < 0 {
        format!("-{}", format(secs.unsigned_abs()))
    } else {
        format(secs as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_forms() {
        assert_eq!(parse("30m"), Ok(1800));
        assert_eq!(parse("2H"), Ok(7200));
        assert_eq!(parse("10s"), Ok(10));
        assert_eq!(parse("1w"), Ok(604_800));
        assert_eq!(parse("00:10:00"), Ok(600));
        assert_eq!(parse("01:30"), Ok(5400));
        assert_eq!(parse("1-02:00:00"), Ok(93_600));
    }

    #[test]
    fn rejected_forms() {
        assert!(parse("abc").unwrap_err().contains("invalid"));
        assert!(parse("10x").is_err());
        assert_eq!(parse("00:60:00"), Ok(3600));
        assert!(parse("1:2:3:4").unwrap_err().contains("unsupported"));
        assert!(parse("").is_err());
    }

    #[test]
    fn formats_like_slurm() {
        assert_eq!(format(3000), "00:50:00");
        assert_eq!(format(93_600), "1-02:00:00");
    }
}
