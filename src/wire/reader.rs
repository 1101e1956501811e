//! [`Reader`]: how a validator reads a request's fields. It reads a field, records what is
//! wrong with it as a [`Violation`] under its JSON path, and goes on, so one refusal names every
//! problem at once. A validator is then a list of small field readers, each returning the
//! value it read (or `None` after recording why not), with the messages written the same way
//! everywhere: `'type' must be a string, got an array`.

use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

use super::duration;
use super::json::{self, Kind, Object};
use super::violation::Violation;

/// Reads fields, collecting the violations it finds.
#[derive(Debug)]
pub struct Reader<'v> {
    violations: &'v mut Vec<Violation>,
}

impl<'v> Reader<'v> {
    /// A reader that records into `violations`.
    pub fn new(violations: &'v mut Vec<Violation>) -> Reader<'v> {
        Reader { violations }
    }

    /// Records that the field at `path` is wrong, saying why.
    pub fn refuse(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.violations.push(Violation::new(path, message));
    }

    /// Records the violations another reader found (a nested policy's).
    pub fn refuse_all(&mut self, violations: impl IntoIterator<Item = Violation>) {
        self.violations.extend(violations);
    }

    /// Records `{subject} must be {expected}, got {what raw is}` (`got an array`, `got null`).
    pub fn wrong_type(
        &mut self,
        path: impl Into<String>,
        subject: &str,
        expected: &str,
        raw: &RawValue,
    ) {
        self.refuse(path, wrong_type(subject, expected, raw));
    }

    /// `raw` as a `T`; otherwise records [`Reader::wrong_type`] and gives `None`.
    pub fn decode<T: DeserializeOwned>(
        &mut self,
        path: impl Into<String>,
        subject: &str,
        expected: &str,
        raw: &RawValue,
    ) -> Option<T> {
        match json::decode(raw) {
            Ok(value) => Some(value),
            Err(_) => {
                self.wrong_type(path, subject, expected, raw);
                None
            }
        }
    }

    /// `raw` as a JSON object; otherwise records [`Reader::wrong_type`] and gives `None`.
    pub fn object<'a>(
        &mut self,
        path: impl Into<String>,
        subject: &str,
        raw: &'a RawValue,
    ) -> Option<Object<'a>> {
        match Object::from_raw(raw) {
            Ok(object) => Some(object),
            Err(_) => {
                self.wrong_type(path, subject, "an object", raw);
                None
            }
        }
    }

    /// `raw` when it is a JSON array; otherwise records [`Reader::wrong_type`] and gives
    /// `None`.
    pub fn array<'a>(
        &mut self,
        path: impl Into<String>,
        subject: &str,
        raw: &'a RawValue,
    ) -> Option<&'a RawValue> {
        if Kind::of(raw) == Kind::Array {
            return Some(raw);
        }
        self.wrong_type(path, subject, "an array", raw);
        None
    }

    /// `value` when `valid` holds for it; otherwise records `message(&value)` and gives `None`.
    pub fn check<T>(
        &mut self,
        path: impl Into<String>,
        value: T,
        valid: impl FnOnce(&T) -> bool,
        message: impl FnOnce(&T) -> String,
    ) -> Option<T> {
        if valid(&value) {
            return Some(value);
        }
        self.refuse(path, message(&value));
        None
    }

    /// `value` when given; otherwise records `message` (a required field is missing).
    pub fn required<T>(
        &mut self,
        path: impl Into<String>,
        value: Option<T>,
        message: impl Into<String>,
    ) -> Option<T> {
        if value.is_none() {
            self.refuse(path, message);
        }
        value
    }

    /// The positive duration `name` of `obj`, if given, as a duration string (`name`) or as whole
    /// milliseconds (`name_ms`, the spelling of the OJS HTTP binding's examples and of the Go and
    /// Java SDKs); both may be given only if they agree. A bad one is recorded in `violations`.
    pub fn positive_interval(
        &mut self,
        obj: &Object<'_>,
        name: &str,
        field: &dyn Fn(&str) -> String,
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
                Ok(ms) if ms > 0 => self.refuse(
                    field(key),
                    format!("{key} disagrees with {}", found.map_or("", |(k, _)| k)),
                ),
                Ok(_) => self.refuse(field(key), format!("{key} must be greater than zero")),
                Err(e) => self.refuse(field(key), format!("{key} is not a valid duration: {e}")),
            }
        }
        found.map(|(_, ms)| ms)
    }

    /// Whether nothing was found wrong so far.
    pub fn is_clean(&self) -> bool {
        self.violations.is_empty()
    }
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

/// `{subject} must be {expected}, got {what raw is}`.
pub fn wrong_type(subject: &str, expected: &str, raw: &RawValue) -> String {
    format!(
        "{subject} must be {expected}, got {}",
        Kind::of(raw).article_name()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_records_each_problem_with_its_path_and_goes_on() {
        let body = Object::parse(r#"{"a": [1], "b": "x", "c": {"d": 1}, "e": 7}"#).unwrap();
        let mut violations = Vec::new();
        let mut r = Reader::new(&mut violations);
        let a: Option<String> = r.decode("$.a", "'a'", "a string", body.get("a").unwrap());
        let b = r.array("$.b", "'b'", body.get("b").unwrap());
        let c = r.object("$.c", "'c'", body.get("c").unwrap());
        let e = r.check(
            "$.e",
            7,
            |n| *n < 5,
            |n| format!("e must be below 5, not {n}"),
        );
        let f = r.required("$.f", body.get("f"), "'f' is required");
        assert!(a.is_none() && b.is_none() && e.is_none() && f.is_none());
        assert!(c.is_some());
        assert!(!r.is_clean());
        let found: Vec<(&str, &str)> = violations
            .iter()
            .map(|v| (v.path.as_str(), v.message.as_str()))
            .collect();
        assert_eq!(
            found,
            [
                ("$.a", "'a' must be a string, got an array"),
                ("$.b", "'b' must be an array, got a string"),
                ("$.e", "e must be below 5, not 7"),
                ("$.f", "'f' is required"),
            ]
        );
    }
}
