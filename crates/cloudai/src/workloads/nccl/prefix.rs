//! Launcher prefixes on nccl-tests output lines, recognised by their rules rather than by sample:
//! - `mpirun --tag-output`: `[<job>,<rank>]<stdout>:` (also `<stderr>:`, `<stddiag>:`; PMIx-based launchers write
//!   `[<namespace>:<rank>]`), written before every chunk mpirun forwards, so it can stand in the middle of a line;
//! - `mpirun --timestamp-output`: a ctime stamp (`Thu Dec  3 04:47:57 2026`) before the tag, or before a bare
//!   `<stdout>:` without `--tag-output`;
//! - `srun --label`: the task number padded to the widest one and `: ` (`0: `, ` 3: `, `12: `);
//! - log collectors: an RFC 3339 stamp and a blank (`kubectl logs --timestamps`), NCCL's `[YYYY-MM-DD HH:MM:SS] `.

/// Strips the prefixes at the start of a line; returns the launcher tag it carried (`[1,0]<stdout>`, used to
/// reassemble a rank's line that arrived in pieces) and the rest.
pub fn leading(line: &str) -> (Option<&str>, &str) {
    let mut rest = strip_iso_stamp(line);
    let mut tag = None;
    if let Some((0, end, key)) = find_tag(rest) {
        tag = Some(key);
        rest = &rest[end..];
    }
    (tag, strip_label(rest))
}

/// [`leading`] for a line without `<` (so without a launcher tag).
pub(crate) fn leading_untagged(line: &str) -> &str {
    strip_label(strip_iso_stamp(line))
}

/// The first launcher tag in `s`: (start, end, key), where `start..end` covers an optional ctime stamp and the
/// tag, and `key` is the tag without the stamp.
pub(crate) fn find_tag(s: &str) -> Option<(usize, usize, &str)> {
    let b = s.as_bytes();
    if !b.contains(&b'<') {
        return None;
    }
    let mut from = 0;
    while let Some(i) = s[from..].find("<std").map(|i| i + from) {
        from = i + 4;
        let after = &s[i..];
        let Some(len) = ["<stdout>:", "<stderr>:", "<stddiag>:"]
            .iter()
            .find(|t| after.starts_with(**t))
            .map(|t| t.len())
        else {
            continue;
        };
        let mut start = i;
        if i > 0 && b[i - 1] == b']' {
            let Some(open) = s[..i - 1].rfind('[') else {
                continue;
            };
            // `[1,0]` (Open MPI 4), `[prterun-host-123@1:0]` (PMIx: namespace:rank), `[0]` (rank only)
            let inside = &s[open + 1..i - 1];
            let rank = inside.rsplit([',', ':']).next().unwrap_or("");
            if !all_digits(rank) || inside.contains(['[', ']', ' ']) {
                continue;
            }
            start = open;
        }
        let key_start = start;
        if start >= CTIME_LEN && is_ctime(&s.as_bytes()[start - CTIME_LEN..start]) {
            start -= CTIME_LEN;
        } else if start == i {
            // a bare `<stdout>:` is a tag only behind a timestamp
            continue;
        }
        let mut end = i + len;
        // Open MPI 5 (PMIx) writes `: `
        if s.as_bytes().get(end) == Some(&b' ') && start == 0 {
            end += 1;
        }
        return Some((start, end, &s[key_start..i + len - 1]));
    }
    None
}

fn all_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// `Www Mmm dd hh:mm:ss yyyy` (ctime without the newline).
const CTIME_LEN: usize = 24;

fn is_ctime(b: &[u8]) -> bool {
    let alpha = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_alphabetic);
    let digit = |i: usize| b[i].is_ascii_digit();
    b.len() == CTIME_LEN
        && alpha(0..3)
        && b[3] == b' '
        && alpha(4..7)
        && b[7] == b' '
        && (b[8] == b' ' || digit(8))
        && digit(9)
        && b[10] == b' '
        && digit(11)
        && digit(12)
        && b[13] == b':'
        && digit(14)
        && digit(15)
        && b[16] == b':'
        && digit(17)
        && digit(18)
        && b[19] == b' '
        && (20..24).all(digit)
}

/// `2026-12-03T04:47:57.123456789Z ` (RFC 3339, as `kubectl logs --timestamps` writes) and `[2026-12-03 04:47:57] `.
fn strip_iso_stamp(s: &str) -> &str {
    let b = s.as_bytes();
    let date = |o: usize| {
        b.len() >= o + 19
            && (0..4)
                .chain(5..7)
                .chain(8..10)
                .all(|i| b[o + i].is_ascii_digit())
            && b[o + 4] == b'-'
            && b[o + 7] == b'-'
            && (b[o + 10] == b'T' || b[o + 10] == b' ')
            && b[o + 13] == b':'
            && b[o + 16] == b':'
    };
    if b.first() == Some(&b'[') && date(1) && b.get(20) == Some(&b']') {
        return s[21..].strip_prefix(' ').unwrap_or(&s[21..]);
    }
    if !date(0) || b[10] != b'T' {
        return s;
    }
    match s[19..].find(' ') {
        Some(sp)
            if s[19..19 + sp]
                .bytes()
                .all(|c| c.is_ascii_digit() || b".:+-Z".contains(&c)) =>
        {
            &s[19 + sp + 1..]
        }
        _ => s,
    }
}

/// `srun --label`: optional padding blanks, the task number, `:` and a blank (or the end of the line). NCCL's own
/// `host:pid:tid` lines have no blank after the colon, and a data row has no colon after its first number.
fn strip_label(s: &str) -> &str {
    let t = s.trim_start_matches(' ');
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > 6 {
        return s;
    }
    match &t[digits..] {
        ":" => "",
        r if r.starts_with(": ") => &r[2..],
        _ => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_stamps_and_labels() {
        assert_eq!(
            leading("[1,0]<stdout>:#  Rank  0"),
            (Some("[1,0]<stdout>"), "#  Rank  0")
        );
        assert_eq!(leading("[1,12]<stderr>: x"), (Some("[1,12]<stderr>"), "x"));
        assert_eq!(
            leading("[prterun-h-123@1,3]<stdout>: # nThread"),
            (Some("[prterun-h-123@1,3]<stdout>"), "# nThread")
        );
        assert_eq!(
            leading("[prterun-h-123@1:12]<stderr>: x"),
            (Some("[prterun-h-123@1:12]<stderr>"), "x")
        );
        assert_eq!(leading("[3]<stdout>:# x"), (Some("[3]<stdout>"), "# x"));
        assert_eq!(
            leading("Thu Dec  3 04:47:57 2026[1,0]<stdout>:   8   2"),
            (Some("[1,0]<stdout>"), "  8   2")
        );
        assert_eq!(
            leading("Mon Jan 12 10:00:00 2026<stdout>:# x"),
            (Some("<stdout>"), "# x")
        );
        assert_eq!(leading(" 3: #  Rank  3"), (None, "#  Rank  3"));
        assert_eq!(
            leading("12:            8    2"),
            (None, "           8    2")
        );
        assert_eq!(leading("0:"), (None, ""));
        assert_eq!(
            leading("2026-12-03T04:47:57.123456789Z # nThread 1"),
            (None, "# nThread 1")
        );
        assert_eq!(
            leading("[2026-12-03 04:47:57] host:1:2 [0] NCCL INFO x"),
            (None, "host:1:2 [0] NCCL INFO x")
        );
        // not prefixes
        for s in [
            "           8             2     float",
            "0fed198eb8ba:528157:528268 [0] NCCL INFO",
            "12345:528157:528268 [0] NCCL INFO",
            "# <stdout>: is not a tag here",
            "[a b,1]<stdout>:x",
        ] {
            assert_eq!(leading(s), (None, s), "{s}");
        }
        let mid = "[1,0]<stdout>:   8   2  float  sum  -1[1,0]<stdout>:   34.84";
        let (tag, rest) = leading(mid);
        assert_eq!(tag, Some("[1,0]<stdout>"));
        let (s, e, k) = find_tag(rest).unwrap();
        assert_eq!(
            (&rest[..s], k, &rest[e..]),
            ("  8   2  float  sum  -1", "[1,0]<stdout>", "   34.84")
        );
    }
}
