//! How settings are spelled: durations in milliseconds, seconds or ISO 8601, names that may
//! appear in URIs, secrets that never show in logs, the media type of responses.

use std::time::Duration;

/// A number of milliseconds (`OJS_…_MS`).
pub(super) fn millis(text: &str) -> Result<Duration, String> {
    text.trim()
        .parse::<u64>()
        .map(Duration::from_millis)
        .map_err(|_| format!("{text:?} is not a whole number of milliseconds"))
}

/// A number of seconds (`OJS_…_SECS`).
pub(super) fn seconds(text: &str) -> Result<Duration, String> {
    text.trim()
        .parse::<u64>()
        .map(Duration::from_secs)
        .map_err(|_| format!("{text:?} is not a whole number of seconds"))
}

/// A duration: ISO 8601 (`P7D`, `PT30S`) or the short form (`168h`, `30s`, `500ms`).
pub(super) fn span(text: &str) -> Result<Duration, String> {
    crate::wire::duration::parse_ms(text).map(Duration::from_millis)
}

/// A default written as the flag's default text, in milliseconds.
pub(super) fn millis_default(text: &str) -> Duration {
    millis(text).expect("valid default")
}

/// A default written as the flag's default text, in seconds.
pub(super) fn seconds_default(text: &str) -> Duration {
    seconds(text).expect("valid default")
}

/// A default written as the flag's default text, as a duration.
pub(super) fn span_default(text: &str) -> Duration {
    span(text).expect("valid default")
}

/// Characters allowed in instance ids and service names (they appear in URIs and in
/// connection options).
pub(super) fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

/// A setting's value that logs and `Debug` never show (a secret key).
#[derive(Clone, PartialEq, Eq)]
pub struct Redacted(pub String);

impl std::fmt::Debug for Redacted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl std::str::FromStr for Redacted {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Redacted, Self::Err> {
        Ok(Redacted(s.to_owned()))
    }
}

/// The `Content-Type` of JSON responses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ResponseContentType {
    /// `application/openjobspec+json`, as the OJS HTTP binding requires.
    #[default]
    #[value(name = "application/openjobspec+json")]
    Openjobspec,
    /// `application/json`, for clients that only read responses labelled so (the official
    /// Python SDK).
    #[value(name = "application/json")]
    Json,
}
