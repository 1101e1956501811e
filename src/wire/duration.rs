//! Durations as OJS writes them.
//!
//! Accepted input (millisecond precision):
//! * ISO 8601 `P[nW][nD][T[nH][nM][n[.f]S]]`, e.g. `PT1S`, `PT0.5S`, `P1DT2H`, `P2W`. Years and
//!   months are rejected because their length is ambiguous.
//! * The short form `<number><unit>` with units `ms`, `s`, `m`, `h`, `d`, concatenated: `1s`,
//!   `300s`, `1h30m`, `500ms`, `1.5s`, `7d` (a day is 24 hours, as in ISO `P1D`).
//!
//! Output is always ISO 8601 (`PT1S`, `PT5M`, `PT0.5S`, `P7D`).
//!
//! Written here rather than taken from the `iso8601` crate because that parser accepts trailing
//! garbage (`"PT5MIN"` reads as five minutes) and has no notion of the short form.

use std::fmt::Write as _;

/// Upper bound for any duration: 100 years, far beyond any sensible job setting, and small
/// enough that adding it to a timestamp never overflows.
pub const MAX_MS: u64 = 100 * 365 * 86_400_000;

/// `d` in whole milliseconds, as the database stores durations (saturating at `i64::MAX`).
pub fn millis(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Parses an OJS duration into milliseconds.
pub fn parse_ms(input: &str) -> Result<u64, String> {
    let s = input.trim();
    if s.is_empty() {
        return Err("empty duration".to_owned());
    }
    let ms = if s.starts_with(['P', 'p']) {
        parse_iso(&s[1..])?
    } else {
        parse_short(s)?
    };
    if ms > MAX_MS {
        return Err(format!("duration {input:?} is longer than 100 years"));
    }
    Ok(ms)
}

/// A rate period: `second`, `minute`, `hour`, `day`, or a positive duration ([`parse_ms`]), in
/// milliseconds.
pub fn parse_period_ms(input: &str) -> Option<u64> {
    match input {
        "second" => Some(1_000),
        "minute" => Some(60_000),
        "hour" => Some(3_600_000),
        "day" => Some(86_400_000),
        d => parse_ms(d).ok().filter(|ms| *ms > 0),
    }
}

/// The durations [`parse_ms`] accepts, as a regular expression for API schemas: an ISO 8601
/// duration (weeks and days, then hours, minutes and seconds with up to 3 decimals), or the
/// short form with one unit. Digit counts are bounded so that no match passes 100 years;
/// longer spellings that parse (`1h30m`, more digits) are left out.
pub fn pattern() -> String {
    let time = "([0-9]{1,5}H([0-9]{1,6}M)?([0-9]{1,7}(\\.[0-9]{1,3})?S)?\
                |[0-9]{1,6}M([0-9]{1,7}(\\.[0-9]{1,3})?S)?\
                |[0-9]{1,7}(\\.[0-9]{1,3})?S)"
        .replace(' ', "");
    let iso = format!("P([0-9]{{1,3}}W([0-9]{{1,4}}D)?(T{time})?|[0-9]{{1,4}}D(T{time})?|T{time})");
    format!("^({iso}|[0-9]{{1,6}}(ms|s|m)|[0-9]{{1,5}}h|[0-9]{{1,4}}d)$")
}

/// One component, from 1 of its unit: durations of at least a second.
const WHOLE_UNITS: &str = "PT[1-9][0-9]{0,6}S|PT[1-9][0-9]{0,5}M|PT[1-9][0-9]{0,4}H\
                           |P[1-9][0-9]{0,3}D|[1-9][0-9]{0,6}s|[1-9][0-9]{0,5}m\
                           |[1-9][0-9]{0,4}h|[1-9][0-9]{0,3}d";

/// The durations of at least one second that [`parse_ms`] accepts, as a regular expression:
/// one component, from 1 of its unit.
pub fn pattern_at_least_a_second() -> String {
    format!("^({})$", WHOLE_UNITS.replace(' ', ""))
}

/// The durations of at least 100 ms that [`parse_ms`] accepts, as a regular expression: those
/// of at least a second (whole or with up to 3 decimals), a tenth of a second or more below it,
/// or 100 ms and more.
pub fn pattern_at_least_100_ms() -> String {
    format!(
        "^({}|PT[1-9][0-9]{{0,6}}\\.[0-9]{{1,3}}S|PT0\\.[1-9][0-9]{{0,2}}S|[1-9][0-9]{{2,6}}ms)$",
        WHOLE_UNITS.replace(' ', "")
    )
}

/// Formats milliseconds as an ISO 8601 duration.
pub fn format_iso(ms: u64) -> String {
    if ms == 0 {
        return "PT0S".to_owned();
    }
    let days = ms / 86_400_000;
    let rest = ms % 86_400_000;
    let mut out = String::from("P");
    if days > 0 {
        let _ = write!(out, "{days}D");
    }
    if rest > 0 {
        out.push('T');
        let hours = rest / 3_600_000;
        let minutes = rest % 3_600_000 / 60_000;
        let millis = rest % 60_000;
        if hours > 0 {
            let _ = write!(out, "{hours}H");
        }
        if minutes > 0 {
            let _ = write!(out, "{minutes}M");
        }
        if millis > 0 {
            let secs = millis / 1000;
            let frac = millis % 1000;
            if frac == 0 {
                let _ = write!(out, "{secs}S");
            } else {
                let frac = format!("{frac:03}");
                let _ = write!(out, "{secs}.{}S", frac.trim_end_matches('0'));
            }
        }
    }
    out
}

/// A number followed by its unit, as scanned from the input.
struct Component<'a> {
    whole: u64,
    /// Fraction digits after the decimal point (may be empty).
    fraction: &'a str,
    unit: &'a str,
}

/// Splits `s` into `<digits>[.<digits>]<letters>` components.
fn components(s: &str) -> Result<Vec<Component<'_>>, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return Err(format!("expected a number at {:?}", &s[start..]));
        }
        let whole: u64 = s[start..i]
            .parse()
            .map_err(|_| format!("number {:?} is too large", &s[start..i]))?;
        let mut fraction = "";
        if i < bytes.len() && (bytes[i] == b'.' || bytes[i] == b',') {
            i += 1;
            let frac_start = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            if i == frac_start {
                return Err("a decimal point must be followed by digits".to_owned());
            }
            fraction = &s[frac_start..i];
        }
        let unit_start = i;
        while i < bytes.len() && bytes[i].is_ascii_alphabetic() {
            i += 1;
        }
        if i == unit_start {
            return Err(format!("missing unit after {:?}", &s[start..i]));
        }
        out.push(Component {
            whole,
            fraction,
            unit: &s[unit_start..i],
        });
    }
    Ok(out)
}

/// `whole.fraction` × `unit_ms`, in whole milliseconds (sub-millisecond parts are dropped).
fn scaled(c: &Component<'_>, unit_ms: u64) -> Result<u64, String> {
    let whole = c
        .whole
        .checked_mul(unit_ms)
        .ok_or_else(|| "duration is too large".to_owned())?;
    let mut frac_ms = 0u64;
    let mut scale = unit_ms;
    for digit in c.fraction.bytes().take(12) {
        scale /= 10;
        frac_ms += u64::from(digit - b'0') * scale;
    }
    whole
        .checked_add(frac_ms)
        .ok_or_else(|| "duration is too large".to_owned())
}

fn parse_short(s: &str) -> Result<u64, String> {
    let mut total = 0u64;
    let mut seen = Vec::new();
    for c in components(s)? {
        let unit = c.unit.to_ascii_lowercase();
        let unit_ms = match unit.as_str() {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            other => {
                return Err(format!(
                    "unknown unit {other:?} (use ms, s, m, h or d, or an ISO 8601 duration such as PT5M)"
                ));
            }
        };
        if seen.contains(&unit) {
            return Err(format!("unit {unit:?} appears twice"));
        }
        seen.push(unit);
        total = total
            .checked_add(scaled(&c, unit_ms)?)
            .ok_or_else(|| "duration is too large".to_owned())?;
    }
    Ok(total)
}

/// Parses what follows the leading `P` of an ISO 8601 duration.
fn parse_iso(rest: &str) -> Result<u64, String> {
    let upper = rest.to_ascii_uppercase();
    let (date_part, time_part) = match upper.split_once('T') {
        Some((date, time)) => {
            if time.is_empty() {
                return Err("'T' must be followed by hours, minutes or seconds".to_owned());
            }
            (date, Some(time))
        }
        None => (upper.as_str(), None),
    };
    if date_part.is_empty() && time_part.is_none() {
        return Err("an ISO 8601 duration needs at least one component".to_owned());
    }
    let mut total = 0u64;
    let mut add = |c: &Component<'_>, unit_ms: u64| -> Result<(), String> {
        total = total
            .checked_add(scaled(c, unit_ms)?)
            .ok_or_else(|| "duration is too large".to_owned())?;
        Ok(())
    };
    // Date designators must appear in the order W, D; time designators in the order H, M, S.
    let mut last = 0;
    for c in components(date_part)? {
        let (rank, unit_ms) = match c.unit {
            "W" => (1, 7 * 86_400_000),
            "D" => (2, 86_400_000),
            "Y" | "M" => {
                return Err(
                    "years and months are not allowed in durations (their length is ambiguous); use weeks or days"
                        .to_owned(),
                );
            }
            other => return Err(format!("unknown date designator {other:?}")),
        };
        if rank <= last {
            return Err("designators must appear once each, in the order W, D".to_owned());
        }
        if !c.fraction.is_empty() {
            return Err("only seconds may have a fraction".to_owned());
        }
        last = rank;
        add(&c, unit_ms)?;
    }
    let mut last = 0;
    for c in components(time_part.unwrap_or_default())? {
        let (rank, unit_ms) = match c.unit {
            "H" => (1, 3_600_000),
            "M" => (2, 60_000),
            "S" => (3, 1_000),
            other => return Err(format!("unknown time designator {other:?}")),
        };
        if rank <= last {
            return Err("designators must appear once each, in the order H, M, S".to_owned());
        }
        if !c.fraction.is_empty() && c.unit != "S" {
            return Err("only seconds may have a fraction".to_owned());
        }
        last = rank;
        add(&c, unit_ms)?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_iso_durations() {
        assert_eq!(parse_ms("PT1S"), Ok(1_000));
        assert_eq!(parse_ms("PT5M"), Ok(300_000));
        assert_eq!(parse_ms("PT0.5S"), Ok(500));
        assert_eq!(parse_ms("PT0.001S"), Ok(1));
        assert_eq!(parse_ms("PT1H30M"), Ok(5_400_000));
        assert_eq!(parse_ms("P1D"), Ok(86_400_000));
        assert_eq!(parse_ms("P1DT2H"), Ok(93_600_000));
        assert_eq!(parse_ms("P2W"), Ok(14 * 86_400_000));
        assert_eq!(parse_ms("P1W1D"), Ok(8 * 86_400_000));
        assert_eq!(parse_ms("pt10s"), Ok(10_000));
        assert_eq!(parse_ms("PT0S"), Ok(0));
    }

    #[test]
    fn parses_short_durations() {
        assert_eq!(parse_ms("1s"), Ok(1_000));
        assert_eq!(parse_ms("300s"), Ok(300_000));
        assert_eq!(parse_ms("3600s"), Ok(3_600_000));
        assert_eq!(parse_ms("1h30m"), Ok(5_400_000));
        assert_eq!(parse_ms("500ms"), Ok(500));
        assert_eq!(parse_ms("1.5s"), Ok(1_500));
        assert_eq!(parse_ms("2m10s"), Ok(130_000));
        assert_eq!(parse_ms("7d"), Ok(7 * 86_400_000));
        assert_eq!(parse_ms("1d12h"), Ok(129_600_000));
        assert_eq!(parse_ms("7d"), parse_ms("P7D"));
    }

    #[test]
    fn rejects_malformed_durations() {
        for bad in [
            "",
            "P",
            "PT",
            "PT5MIN",
            "P1Y",
            "P1M",
            "PT1.5M",
            "P1.5D",
            "5",
            "5x",
            "1s1s",
            "PT1S1M",
            "P1D1W",
            "1..5s",
            "-1s",
            "PT-1S",
            "s",
            "P1DT",
            "99999999999999999999s",
            "2000000h",
            "1d1d",
            "40000d",
        ] {
            assert!(parse_ms(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn formats_as_iso() {
        assert_eq!(format_iso(0), "PT0S");
        assert_eq!(format_iso(1_000), "PT1S");
        assert_eq!(format_iso(500), "PT0.5S");
        assert_eq!(format_iso(1_250), "PT1.25S");
        assert_eq!(format_iso(300_000), "PT5M");
        assert_eq!(format_iso(5_400_000), "PT1H30M");
        assert_eq!(format_iso(7 * 86_400_000), "P7D");
        assert_eq!(format_iso(86_400_000 + 1), "P1DT0.001S");
    }

    #[test]
    fn format_and_parse_round_trip() {
        for ms in [
            1,
            999,
            1_000,
            61_001,
            3_600_000,
            90_061_001,
            30 * 86_400_000,
        ] {
            assert_eq!(parse_ms(&format_iso(ms)), Ok(ms));
        }
    }

    #[test]
    fn the_patterns_match_only_what_parses() {
        let validator = |pattern: String| {
            jsonschema::validator_for(&serde_json::json!({"type": "string", "pattern": pattern}))
                .unwrap()
        };
        let any = validator(pattern());
        let second = validator(pattern_at_least_a_second());
        let matches = |v: &jsonschema::Validator, s: &str| v.is_valid(&serde_json::json!(s));
        for ok in [
            "PT0S",
            "PT1S",
            "PT0.5S",
            "PT0.05S",
            "P7D",
            "P1DT2H",
            "P2W",
            "P999W9999DT99999H999999M9999999.999S",
            "PT1H30M",
            "PT30M15.5S",
            "0s",
            "500ms",
            "300s",
            "999999m",
            "99999h",
            "9999d",
        ] {
            assert!(matches(&any, ok), "{ok}");
            assert!(parse_ms(ok).is_ok(), "{ok}");
        }
        for bad in [
            "", "P", "PT", "P1M", "1h30", "PT1.5M", "P1DT", "1w", "soon", "-1s",
        ] {
            assert!(!matches(&any, bad), "{bad}");
        }
        for ok in ["PT1S", "PT30S", "P1D", "1s", "9999999s", "9999d"] {
            assert!(matches(&second, ok), "{ok}");
            assert!(parse_ms(ok).is_ok_and(|ms| ms >= 1_000), "{ok}");
        }
        for bad in ["PT0S", "0s", "PT0.5S", "500ms", "P0D"] {
            assert!(!matches(&second, bad), "{bad}");
        }
        let tenth = validator(pattern_at_least_100_ms());
        for ok in ["PT0.1S", "PT0.25S", "PT1.5S", "100ms", "PT2S", "1s"] {
            assert!(matches(&tenth, ok), "{ok}");
            assert!(parse_ms(ok).is_ok_and(|ms| ms >= 100), "{ok}");
        }
        for bad in ["PT0.05S", "99ms", "PT0S", "soon"] {
            assert!(!matches(&tenth, bad), "{bad}");
        }
    }
}
