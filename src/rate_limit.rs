//! Job-level rate limits by key ([OJS rate limiting]): a job's `rate_limit` names a key and
//! the limits of that key — `concurrency` (jobs in flight at once), `rate` (starts per sliding
//! window), `throttle` (starts spaced evenly) — and what an enqueue does when the key does not
//! let the job start at once (`on_limit`).
//!
//! This module validates a policy and writes it in its canonical form; the database enforces
//! it (migration V20: jobs wait, held, until `ojs_rate_release` lets them go).
//!
//! [OJS rate limiting]: https://github.com/openjobspec/spec/blob/main/spec/ojs-rate-limiting.md

use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::wire::Reader;
use crate::wire::duration;
use crate::wire::json::{self, Kind, Object};
use crate::wire::reader::wrong_type;
use crate::wire::violation::Violation;

/// Longest key.
pub const MAX_KEY_LEN: usize = 255;

/// At most `limit` per `period_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub limit: i32,
    pub period_ms: i64,
}

/// What an enqueue does with a job its key does not let start at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnLimit {
    /// The job waits, held, until its key lets it start.
    #[default]
    Wait,
    /// Accepted; behaves as `wait` (the job waits for the time its key allows).
    Reschedule,
    /// The job is discarded (`rate_limit_dropped`), not dead-lettered.
    Drop,
}

impl OnLimit {
    pub fn as_str(self) -> &'static str {
        match self {
            OnLimit::Wait => "wait",
            OnLimit::Reschedule => "reschedule",
            OnLimit::Drop => "drop",
        }
    }

    fn parse(s: &str) -> Option<OnLimit> {
        match s {
            "wait" => Some(OnLimit::Wait),
            "reschedule" => Some(OnLimit::Reschedule),
            "drop" => Some(OnLimit::Drop),
            _ => None,
        }
    }
}

/// A validated `rate_limit`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RatePolicy {
    /// `None`: the key is `queue:<the job's queue>`.
    pub key: Option<String>,
    pub concurrency: Option<i32>,
    pub rate: Option<Window>,
    pub throttle: Option<Window>,
    pub on_limit: OnLimit,
}

impl RatePolicy {
    /// The key the policy applies to for a job of `queue`.
    pub fn key_for(&self, queue: &str) -> String {
        self.key.clone().unwrap_or_else(|| format!("queue:{queue}"))
    }

    /// The canonical form, as a job shows it: `{"key", "concurrency", "rate": {"limit",
    /// "period"}, "throttle": {...}, "on_limit"}` with the limits that are set.
    pub fn to_json(&self, key: &str) -> Value {
        let mut out = json!({"key": key});
        let map = out.as_object_mut().expect("an object");
        if let Some(c) = self.concurrency {
            map.insert("concurrency".to_owned(), json!(c));
        }
        for (name, window) in [("rate", self.rate), ("throttle", self.throttle)] {
            if let Some(w) = window {
                map.insert(name.to_owned(), window_json(w));
            }
        }
        map.insert("on_limit".to_owned(), json!(self.on_limit.as_str()));
        out
    }
}

/// `{"limit", "period"}` with the period in ISO 8601.
pub fn window_json(w: Window) -> Value {
    json!({"limit": w.limit, "period": duration::format_iso(u64::try_from(w.period_ms).unwrap_or(0))})
}

/// Whether `key` is a valid rate-limit key: a letter or digit, then letters, digits and
/// `.`, `_`, `:`, `-`, at most [`MAX_KEY_LEN`] bytes.
pub fn valid_key(key: &str) -> bool {
    let mut chars = key.chars();
    key.len() <= MAX_KEY_LEN
        && chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'))
}

/// Validates a `rate_limit` at `path`: the policy object, or its shorthands `{"max_per_second":
/// N}` (a throttle of N per second) and `{"rate": N, "period": "second"}`. Every problem, with
/// its path.
pub fn parse(raw: &RawValue, path: &str) -> Result<RatePolicy, Vec<Violation>> {
    let Ok(obj) = Object::from_raw(raw) else {
        return Err(vec![Violation::new(
            path,
            wrong_type("'rate_limit'", "an object", raw),
        )]);
    };
    let mut v = Vec::new();
    let mut r = Reader::new(&mut v);
    let mut policy = RatePolicy::default();
    // `{"rate": N, "period": …}`, the shorthand, against `{"rate": {"limit", "period"}}`.
    let numeric_rate = obj.get("rate").is_some_and(|r| Kind::of(r) == Kind::Number);
    for (name, value) in obj.iter() {
        read_member(&mut policy, &obj, (name, value), numeric_rate, path, &mut r);
    }
    if r.is_clean()
        && policy.key.is_none()
        && policy.concurrency.is_none()
        && policy.rate.is_none()
        && policy.throttle.is_none()
    {
        r.refuse(
            path,
            "a rate_limit needs a key or a limit (concurrency, rate, throttle, max_per_second)",
        );
    }
    if v.is_empty() { Ok(policy) } else { Err(v) }
}

/// One member `(name, value)` of a `rate_limit` object at `path`, read into `policy`.
fn read_member(
    policy: &mut RatePolicy,
    obj: &Object<'_>,
    (name, value): (&str, &RawValue),
    numeric_rate: bool,
    path: &str,
    r: &mut Reader<'_>,
) {
    let at = format!("{path}.{name}");
    match name {
        "key" => match json::decode::<String>(value) {
            Ok(key) if valid_key(&key) => policy.key = Some(key),
            _ => r.refuse(
                at,
                format!(
                    "'key' must be 1 to {MAX_KEY_LEN} letters, digits and . _ : - (starting with a letter or digit)"
                ),
            ),
        },
        "concurrency" => match json::as_integer(value) {
            Some(n) if (0..=i64::from(i32::MAX)).contains(&n) => {
                policy.concurrency = Some(n as i32)
            }
            _ => r.refuse(
                at,
                "'concurrency' must be an integer >= 0 (0 pauses the key)",
            ),
        },
        "rate" if numeric_rate => {
            let period = obj.get("period");
            match (limit_of(value), period.and_then(period_of)) {
                (Some(limit), Some(period_ms)) => {
                    policy.rate = Some(Window { limit, period_ms })
                }
                (None, _) => r.refuse(at, "'rate' must be an integer >= 1"),
                (_, None) => r.refuse(
                    format!("{path}.period"),
                    "'period' must be second, minute, hour, day or a positive duration",
                ),
            }
        }
        "period" if numeric_rate => {}
        "rate" | "throttle" => match window(value, &at) {
            Ok(w) => {
                if name == "rate" {
                    policy.rate = Some(w);
                } else {
                    policy.throttle = Some(w);
                }
            }
            Err(e) => r.refuse_all(e),
        },
        "max_per_second" => match limit_of(value) {
            Some(_) if obj.get("throttle").is_some() => r.refuse(
                at,
                "'max_per_second' is a throttle: give it or 'throttle', not both",
            ),
            Some(limit) => {
                policy.throttle = Some(Window {
                    limit,
                    period_ms: 1_000,
                })
            }
            None => r.refuse(at, "'max_per_second' must be an integer >= 1"),
        },
        "on_limit" => match json::decode::<String>(value)
            .ok()
            .and_then(|s| OnLimit::parse(&s))
        {
            Some(on_limit) => policy.on_limit = on_limit,
            None => r.refuse(
                at,
                "'on_limit' must be one of wait, reschedule, drop",
            ),
        },
        other => r.refuse(
            at,
            format!(
                "unknown rate_limit field '{other}' (key, concurrency, rate, throttle, max_per_second, on_limit)"
            ),
        ),
    }
}

/// `{"limit": N >= 1, "period": duration}` at `path`.
pub fn window(raw: &RawValue, path: &str) -> Result<Window, Vec<Violation>> {
    let Ok(obj) = Object::from_raw(raw) else {
        return Err(vec![Violation::new(
            path,
            "must be an object {\"limit\": N, \"period\": \"PT1S\"}",
        )]);
    };
    let mut v = Vec::new();
    let limit = obj.get("limit").and_then(limit_of);
    if limit.is_none() {
        v.push(Violation::new(
            format!("{path}.limit"),
            "'limit' must be an integer >= 1",
        ));
    }
    let period_ms = obj.get("period").and_then(period_of);
    if period_ms.is_none() {
        v.push(Violation::new(
            format!("{path}.period"),
            "'period' must be second, minute, hour, day or a positive duration",
        ));
    }
    for (name, _) in obj.iter() {
        if name != "limit" && name != "period" {
            v.push(Violation::new(
                format!("{path}.{name}"),
                format!("unknown field '{name}' (limit, period)"),
            ));
        }
    }
    match (limit, period_ms) {
        (Some(limit), Some(period_ms)) if v.is_empty() => Ok(Window { limit, period_ms }),
        _ => Err(v),
    }
}

fn limit_of(raw: &RawValue) -> Option<i32> {
    json::as_integer(raw)
        .filter(|n| (1..=i64::from(i32::MAX)).contains(n))
        .map(|n| n as i32)
}

fn period_of(raw: &RawValue) -> Option<i64> {
    json::decode::<String>(raw)
        .ok()
        .and_then(|s| duration::parse_period_ms(&s))
        .and_then(|ms| i64::try_from(ms).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Result<RatePolicy, Vec<String>> {
        parse(&json::raw(text.to_owned()), "$.rate_limit")
            .map_err(|v| v.into_iter().map(|v| v.path).collect())
    }

    #[test]
    fn every_form_of_the_policy() {
        let p = parsed(
            r#"{"key":"stripe-api","concurrency":5,"rate":{"limit":100,"period":"PT1M"},"throttle":{"limit":10,"period":"second"},"on_limit":"drop"}"#,
        )
        .unwrap();
        assert_eq!(p.key.as_deref(), Some("stripe-api"));
        assert_eq!(p.concurrency, Some(5));
        assert_eq!(
            p.rate,
            Some(Window {
                limit: 100,
                period_ms: 60_000
            })
        );
        assert_eq!(
            p.throttle,
            Some(Window {
                limit: 10,
                period_ms: 1_000
            })
        );
        assert_eq!(p.on_limit, OnLimit::Drop);
        assert_eq!(
            p.to_json("stripe-api"),
            json!({"key": "stripe-api", "concurrency": 5,
                   "rate": {"limit": 100, "period": "PT1M"},
                   "throttle": {"limit": 10, "period": "PT1S"}, "on_limit": "drop"})
        );
        let short = parsed(r#"{"max_per_second":3}"#).unwrap();
        assert_eq!(short.key_for("q"), "queue:q");
        assert_eq!(
            short.throttle,
            Some(Window {
                limit: 3,
                period_ms: 1_000
            })
        );
        let numeric = parsed(r#"{"key":"k","rate":1,"period":"second"}"#).unwrap();
        assert_eq!(
            numeric.rate,
            Some(Window {
                limit: 1,
                period_ms: 1_000
            })
        );
        assert_eq!(
            parsed(r#"{"key":"only.a-key:1"}"#).unwrap().concurrency,
            None
        );
    }

    #[test]
    fn every_problem_has_its_path() {
        assert_eq!(
            parsed(r#"{"key":"-bad","concurrency":-1,"rate":{"limit":0,"period":"never"},"on_limit":"later","x":1}"#)
                .unwrap_err(),
            [
                "$.rate_limit.key",
                "$.rate_limit.concurrency",
                "$.rate_limit.rate.limit",
                "$.rate_limit.rate.period",
                "$.rate_limit.on_limit",
                "$.rate_limit.x"
            ]
        );
        assert_eq!(parsed(r#"{}"#).unwrap_err(), ["$.rate_limit"]);
        assert_eq!(parsed(r#"[]"#).unwrap_err(), ["$.rate_limit"]);
        assert_eq!(
            parsed(r#"{"rate":2,"period":"fortnight"}"#).unwrap_err(),
            ["$.rate_limit.period"]
        );
        assert_eq!(
            parsed(r#"{"max_per_second":2,"throttle":{"limit":1,"period":"PT1S"}}"#).unwrap_err(),
            ["$.rate_limit.max_per_second"]
        );
        assert!(!valid_key(&"k".repeat(256)));
        assert!(valid_key("tenant:42.api_v2-x"));
    }
}
