//! Timestamps as OJS writes them.
//!
//! Server output is UTC RFC 3339 with exactly three fractional digits and a `Z`
//! (`2026-02-12T10:30:00.123Z`). Client input is RFC 3339 with a zone designator (`Z` or
//! `±hh:mm`), or `+` followed by a duration, meaning "that long from now" (resolved with the
//! database clock when the job is written).

use chrono::{DateTime, FixedOffset, SecondsFormat, Utc};

use super::duration;

/// A client-supplied point in time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientTime {
    /// An absolute timestamp, with the exact text the client sent (echoed verbatim).
    Absolute { at: DateTime<Utc>, text: String },
    /// `+<duration>`: this many milliseconds after "now".
    Relative { after_ms: u64 },
}

impl ClientTime {
    /// The absolute instant, if this is one.
    pub fn absolute(&self) -> Option<DateTime<Utc>> {
        match self {
            ClientTime::Absolute { at, .. } => Some(*at),
            ClientTime::Relative { .. } => None,
        }
    }

    /// The client's text of an absolute instant.
    pub fn text(&self) -> Option<&str> {
        match self {
            ClientTime::Absolute { text, .. } => Some(text),
            ClientTime::Relative { .. } => None,
        }
    }

    /// The offset of a relative instant, in milliseconds.
    pub fn relative_ms(&self) -> Option<i64> {
        match self {
            ClientTime::Relative { after_ms } => i64::try_from(*after_ms).ok(),
            ClientTime::Absolute { .. } => None,
        }
    }
}

/// Parses a client timestamp.
pub fn parse_client(input: &str) -> Result<ClientTime, String> {
    if let Some(rest) = input.strip_prefix('+') {
        let after_ms = duration::parse_ms(rest)
            .map_err(|e| format!("invalid relative time {input:?}: {e}"))?;
        return Ok(ClientTime::Relative { after_ms });
    }
    let parsed: DateTime<FixedOffset> = DateTime::parse_from_rfc3339(input).map_err(|_| {
        format!(
            "{input:?} is not an RFC 3339 timestamp with a time zone (e.g. 2026-03-15T09:30:00Z or +PT30S)"
        )
    })?;
    let at = parsed.with_timezone(&Utc);
    // Postgres timestamptz stops at year 294276; keep well inside what both sides represent.
    if !(1..=9999).contains(&chrono::Datelike::year(&at)) {
        return Err(format!("{input:?} is outside the years 0001-9999"));
    }
    Ok(ClientTime::Absolute {
        at,
        text: input.to_owned(),
    })
}

/// The absolute timestamps [`parse_client`] accepts, as a regular expression for API schemas:
/// RFC 3339 with a zone, in the years 0002-9998 (a zone may move 0001 and 9999 out of range).
/// Dates past the end of their month (`02-30`) match but are refused.
pub const PATTERN: &str = concat!(
    "^(000[2-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-8][0-9]{3}|9[0-8][0-9]{2}|99[0-8][0-9]|999[0-8])",
    "-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])",
    "[Tt]([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?",
    "([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$",
);

/// Formats a timestamp the way the server writes every timestamp.
pub fn format(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn formats_with_millis_and_z() {
        let at = Utc.with_ymd_and_hms(2026, 2, 12, 10, 30, 0).unwrap()
            + chrono::Duration::microseconds(123_456);
        assert_eq!(format(at), "2026-02-12T10:30:00.123Z");
        let whole = Utc.with_ymd_and_hms(2026, 2, 12, 10, 30, 0).unwrap();
        assert_eq!(format(whole), "2026-02-12T10:30:00.000Z");
    }

    #[test]
    fn parses_absolute_with_zone_and_keeps_text() {
        let t = parse_client("2026-02-17T08:00:00+01:00").unwrap();
        assert_eq!(t.text(), Some("2026-02-17T08:00:00+01:00"));
        assert_eq!(
            t.absolute(),
            Some(Utc.with_ymd_and_hms(2026, 2, 17, 7, 0, 0).unwrap())
        );
        assert!(parse_client("2026-02-17T08:00:00.5Z").is_ok());
    }

    #[test]
    fn parses_relative() {
        assert_eq!(
            parse_client("+PT2S"),
            Ok(ClientTime::Relative { after_ms: 2_000 })
        );
        assert_eq!(
            parse_client("+P1D"),
            Ok(ClientTime::Relative {
                after_ms: 86_400_000
            })
        );
    }

    #[test]
    fn rejects_timestamps_without_zone_and_garbage() {
        for bad in [
            "2026-02-17T08:00:00",
            "2026-02-17",
            "tomorrow",
            "",
            "+",
            "+PT",
            "+1Y",
            "1700000000",
        ] {
            assert!(parse_client(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn the_pattern_matches_only_what_parses() {
        let pattern = serde_json::json!({"type": "string", "pattern": PATTERN});
        let validator = jsonschema::validator_for(&pattern).unwrap();
        for ok in [
            "2026-03-15T09:30:00Z",
            "2026-03-15t09:30:00.123456789+13:45",
            "0002-01-01T00:00:00-23:59",
            "9998-12-31T23:59:59z",
        ] {
            assert!(validator.is_valid(&serde_json::json!(ok)), "{ok}");
            assert!(
                parse_client(ok).is_ok_and(|t| t.absolute().is_some()),
                "{ok}"
            );
        }
        for bad in [
            "",
            "2026-03-15",
            "2026-03-15T09:30:00",
            "2026-13-15T09:30:00Z",
            "2026-03-15T24:00:00Z",
            "0001-01-01T00:00:00Z",
            "+PT30S",
        ] {
            assert!(!validator.is_valid(&serde_json::json!(bad)), "{bad}");
        }
    }
}
