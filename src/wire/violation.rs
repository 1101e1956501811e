//! A problem with one field of a request, located by its JSON path, and the field readers
//! shared by the domain's validators.
//!
//! Validation collects every [`Violation`] it finds, so a refusal names all of them at once;
//! the HTTP layer renders them as an `invalid_request` error with `details.validation_errors`.

use serde_json::value::RawValue;

use super::duration;
use super::json::{self, Kind, Object};

/// One problem with a request field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// JSON path of the offending field, e.g. `$.options.priority`.
    pub path: String,
    /// What is wrong, naming the field.
    pub message: String,
}

impl Violation {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Violation {
        Violation {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// The positive duration `name` of `obj`, if given, as a duration string (`name`) or as whole
/// milliseconds (`name_ms`, the spelling of the OJS HTTP binding's examples and of the Go and
/// Java SDKs); both may be given only if they agree. A bad one is recorded in `violations`.
pub fn positive_interval(
    obj: &Object<'_>,
    name: &str,
    field: &dyn Fn(&str) -> String,
    violations: &mut Vec<Violation>,
) -> Option<u64> {
    let ms_name = format!("{name}_ms");
    let text = obj.get(name).map(|v| (name, parse_interval(v)));
    let millis = obj.get(&ms_name).map(|v| {
        let ms = json::as_integer(v)
            .and_then(|n| u64::try_from(n).ok())
            .ok_or_else(|| "expected a whole number of milliseconds".to_owned());
        (ms_name.as_str(), ms)
    });
    let mut found = None;
    for (key, parsed) in [text, millis].into_iter().flatten() {
        match parsed {
            Ok(ms) if ms > 0 && found.is_none_or(|(_, first)| first == ms) => {
                found = Some((key, ms));
            }
            Ok(ms) if ms > 0 => violations.push(Violation::new(
                field(key),
                format!("{key} disagrees with {}", found.map_or("", |(k, _)| k)),
            )),
            Ok(_) => violations.push(Violation::new(
                field(key),
                format!("{key} must be greater than zero"),
            )),
            Err(e) => violations.push(Violation::new(
                field(key),
                format!("{key} is not a valid duration: {e}"),
            )),
        }
    }
    found.map(|(_, ms)| ms)
}

/// A duration given as an ISO 8601 / short-form string.
fn parse_interval(raw: &RawValue) -> Result<u64, String> {
    match json::decode::<String>(raw) {
        Ok(s) => duration::parse_ms(&s),
        Err(_) => Err(format!(
            "expected a duration string such as \"PT1S\", got {}",
            Kind::of(raw).article_name()
        )),
    }
}
