//! The retry policy (the `retry` attribute, see [OJS retry policy]): validation, defaults, and
//! backoff.
//!
//! A job stores its *effective* policy: the client's fields with the defaults filled in and
//! durations rewritten in ISO 8601. Unknown keys inside `retry` are kept and echoed after the
//! known ones. The default policy itself is stored as `{}` ([`RetryPolicy::to_stored`]): it is
//! what nearly every job has, and its 199 bytes were half of a job's row, written again by
//! every claim and by the move to history.
//!
//! [OJS retry policy]: https://github.com/openjobspec/spec/blob/main/spec/ojs-retry.md

use std::fmt::Write as _;

use rand::Rng;
use serde_json::value::RawValue;

use crate::wire::Reader;
use crate::wire::Violation;
use crate::wire::duration;
use crate::wire::json::{self, Object};
use crate::wire::reader::wrong_type;

/// Default total attempts, including the first.
pub const DEFAULT_MAX_ATTEMPTS: i32 = 3;
/// Default delay before the first retry.
pub const DEFAULT_INITIAL_INTERVAL_MS: u64 = 1_000;
/// Default growth factor of the exponential backoff.
pub const DEFAULT_BACKOFF_COEFFICIENT: f64 = 2.0;
/// Default cap on any single backoff delay.
pub const DEFAULT_MAX_INTERVAL_MS: u64 = 300_000;

/// How a job's row stores the default policy.
const STORED_DEFAULT: &str = "{}";

/// What happens to a job whose retries are exhausted (or whose error is non-retryable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnExhaustion {
    /// Discard the job; it does not enter the dead-letter queue.
    Discard,
    /// Discard the job into the dead-letter queue (the default).
    DeadLetter,
}

/// How the delay grows with the attempt number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackoffStrategy {
    /// `initial × coefficient^(n−1)`.
    Exponential,
    /// `initial × n`.
    Linear,
    /// `initial`.
    Constant,
    /// `initial` (alias of constant).
    None,
    /// `initial × n^coefficient`.
    Polynomial,
}

impl BackoffStrategy {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "exponential" => BackoffStrategy::Exponential,
            "linear" => BackoffStrategy::Linear,
            "constant" => BackoffStrategy::Constant,
            "none" => BackoffStrategy::None,
            "polynomial" => BackoffStrategy::Polynomial,
            _ => return None,
        })
    }

    fn as_str(self) -> &'static str {
        match self {
            BackoffStrategy::Exponential => "exponential",
            BackoffStrategy::Linear => "linear",
            BackoffStrategy::Constant => "constant",
            BackoffStrategy::None => "none",
            BackoffStrategy::Polynomial => "polynomial",
        }
    }
}

/// An effective retry policy.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Total attempts allowed, including the first; 0 behaves like 1.
    pub max_attempts: i32,
    /// Delay before the first retry, in milliseconds.
    pub initial_interval_ms: u64,
    /// Growth factor (≥ 1.0).
    pub backoff_coefficient: f64,
    /// Cap on any single delay, in milliseconds.
    pub max_interval_ms: u64,
    /// Whether delays are multiplied by a random factor in [0.5, 1.5).
    pub jitter: bool,
    /// Error types/codes that skip retries; an entry `p.*` matches every value starting `p.`.
    pub non_retryable_errors: Vec<String>,
    /// Where an exhausted job goes.
    pub on_exhaustion: OnExhaustion,
    /// Growth strategy.
    pub backoff_strategy: BackoffStrategy,
    /// Unknown keys, verbatim and in order.
    pub extra: Vec<(String, String)>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            initial_interval_ms: DEFAULT_INITIAL_INTERVAL_MS,
            backoff_coefficient: DEFAULT_BACKOFF_COEFFICIENT,
            max_interval_ms: DEFAULT_MAX_INTERVAL_MS,
            jitter: true,
            non_retryable_errors: Vec::new(),
            on_exhaustion: OnExhaustion::DeadLetter,
            backoff_strategy: BackoffStrategy::Exponential,
            extra: Vec::new(),
        }
    }
}

const KNOWN_KEYS: &[&str] = &[
    "max_attempts",
    "initial_interval",
    "backoff_coefficient",
    "max_interval",
    "initial_interval_ms",
    "max_interval_ms",
    "jitter",
    "non_retryable_errors",
    "on_exhaustion",
    "backoff_strategy",
    "backoff_type",
];

impl RetryPolicy {
    /// Parses a client `retry` object at `path`, filling in defaults. Every problem found is
    /// returned (the caller answers 422 `validation_error`).
    pub fn parse(raw: &RawValue, path: &str) -> Result<RetryPolicy, Vec<Violation>> {
        let Ok(obj) = Object::from_raw(raw) else {
            return Err(vec![Violation::new(
                path,
                wrong_type("'retry'", "an object", raw),
            )]);
        };
        let mut violations = Vec::new();
        let mut r = Reader::new(&mut violations);
        let field = |name: &str| format!("{path}.{name}");
        let mut policy = RetryPolicy::default();
        policy.read_schedule(&obj, &field, &mut r);
        policy.read_outcomes(&obj, &field, &mut r);
        policy.read_strategy(&obj, &field, &mut r);
        policy.extra = obj
            .iter()
            .filter(|(k, _)| !KNOWN_KEYS.contains(k))
            .map(|(k, v)| (k.to_owned(), v.get().to_owned()))
            .collect();
        if violations.is_empty() {
            Ok(policy)
        } else {
            Err(violations)
        }
    }

    /// When the attempts are made: `max_attempts`, the intervals, the coefficient, jitter.
    fn read_schedule(
        &mut self,
        obj: &Object<'_>,
        field: &dyn Fn(&str) -> String,
        r: &mut Reader<'_>,
    ) {
        if let Some(v) = obj.get("max_attempts") {
            let n = json::as_integer(v)
                .and_then(|n| i32::try_from(n).ok())
                .filter(|n| *n >= 0);
            if let Some(n) = r.required(
                field("max_attempts"),
                n,
                "max_attempts must be an integer >= 0",
            ) {
                self.max_attempts = n;
            }
        }
        let initial = r.positive_interval(obj, "initial_interval", field);
        if let Some(ms) = initial {
            self.initial_interval_ms = ms;
        }
        if let Some(v) = obj.get("backoff_coefficient") {
            let c = json::decode::<f64>(v)
                .ok()
                .filter(|c| c.is_finite() && *c >= 1.0);
            if let Some(c) = r.required(
                field("backoff_coefficient"),
                c,
                "backoff_coefficient must be a number >= 1.0",
            ) {
                self.backoff_coefficient = c;
            }
        }
        let max = r.positive_interval(obj, "max_interval", field);
        if let Some(ms) = max {
            self.max_interval_ms = ms;
        }
        if initial.is_some() && max.is_some() && self.max_interval_ms < self.initial_interval_ms {
            r.refuse(
                field("max_interval"),
                "max_interval must be >= initial_interval",
            );
        } else if initial.is_some() && max.is_none() {
            // A long initial interval raises the default cap instead of being cut by it.
            self.max_interval_ms = self.max_interval_ms.max(self.initial_interval_ms);
        }
        if let Some(v) = obj.get("jitter") {
            let jitter = json::decode::<bool>(v).ok();
            if let Some(jitter) = r.required(field("jitter"), jitter, "jitter must be a boolean") {
                self.jitter = jitter;
            }
        }
    }

    /// What ends the retries: errors that are not retried, and where an exhausted job goes.
    fn read_outcomes(
        &mut self,
        obj: &Object<'_>,
        field: &dyn Fn(&str) -> String,
        r: &mut Reader<'_>,
    ) {
        if let Some(v) = obj.get("non_retryable_errors") {
            let list = json::decode::<Vec<String>>(v).ok();
            if let Some(list) = r.required(
                field("non_retryable_errors"),
                list,
                "non_retryable_errors must be an array of strings",
            ) {
                self.non_retryable_errors = list;
            }
        }
        if let Some(v) = obj.get("on_exhaustion") {
            let on_exhaustion = match json::decode::<String>(v).as_deref() {
                Ok("discard") => Some(OnExhaustion::Discard),
                Ok("dead_letter") => Some(OnExhaustion::DeadLetter),
                _ => None,
            };
            if let Some(on_exhaustion) = r.required(
                field("on_exhaustion"),
                on_exhaustion,
                "on_exhaustion must be \"discard\" or \"dead_letter\"",
            ) {
                self.on_exhaustion = on_exhaustion;
            }
        }
    }

    /// How the intervals grow: `backoff_strategy` (or `backoff_type`).
    fn read_strategy(
        &mut self,
        obj: &Object<'_>,
        field: &dyn Fn(&str) -> String,
        r: &mut Reader<'_>,
    ) {
        let strategy_key = if obj.get("backoff_strategy").is_some() {
            "backoff_strategy"
        } else {
            "backoff_type"
        };
        if let Some(v) = obj.get(strategy_key) {
            let strategy = json::decode::<String>(v)
                .ok()
                .and_then(|s| BackoffStrategy::parse(&s));
            if let Some(strategy) = r.required(
                field(strategy_key),
                strategy,
                format!(
                    "{strategy_key} must be one of exponential, linear, constant, none, polynomial"
                ),
            ) {
                self.backoff_strategy = strategy;
            }
        }
    }

    /// The effective policy as stored in a job's row: `{}` for the default policy, else
    /// [`RetryPolicy::to_json`]. Either form reads back the same through
    /// [`RetryPolicy::from_stored`] (parsing fills in the defaults); rows written before this
    /// form hold the long one.
    pub fn to_stored(&self) -> String {
        if *self == RetryPolicy::default() {
            STORED_DEFAULT.to_owned()
        } else {
            self.to_json()
        }
    }

    /// The effective policy of a stored one, as JSON for clients: `{}` becomes the default
    /// policy written out in full; any other stored form already is the effective policy.
    pub fn effective_raw(stored: &RawValue) -> &RawValue {
        static DEFAULT: std::sync::LazyLock<Box<RawValue>> =
            std::sync::LazyLock::new(|| json::raw(RetryPolicy::default().to_json()));
        if stored.get() == STORED_DEFAULT {
            &DEFAULT
        } else {
            stored
        }
    }

    /// Reads a stored effective policy (as written by [`RetryPolicy::to_stored`]).
    pub fn from_stored(raw: &RawValue) -> RetryPolicy {
        // Stored policies were validated on the way in; a row edited by hand into something
        // invalid falls back to the defaults rather than failing the job's transition.
        RetryPolicy::parse(raw, "$.retry").unwrap_or_default()
    }

    /// The effective policy as compact JSON, durations in ISO 8601, unknown keys last.
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(200);
        let _ = write!(
            out,
            "{{\"max_attempts\":{},\"initial_interval\":\"{}\",\"backoff_coefficient\":{},\"max_interval\":\"{}\",\"jitter\":{},\"non_retryable_errors\":{},\"on_exhaustion\":\"{}\",\"backoff_strategy\":\"{}\"",
            self.max_attempts,
            duration::format_iso(self.initial_interval_ms),
            serde_json::to_string(&self.backoff_coefficient).unwrap_or_else(|_| "2.0".into()),
            duration::format_iso(self.max_interval_ms),
            self.jitter,
            serde_json::to_string(&self.non_retryable_errors).unwrap_or_else(|_| "[]".into()),
            match self.on_exhaustion {
                OnExhaustion::Discard => "discard",
                OnExhaustion::DeadLetter => "dead_letter",
            },
            self.backoff_strategy.as_str(),
        );
        for (key, value) in &self.extra {
            out.push(',');
            out.push_str(&serde_json::to_string(key).unwrap_or_default());
            out.push(':');
            out.push_str(value);
        }
        out.push('}');
        out
    }

    /// Attempts allowed in total (a `max_attempts` of 0 behaves like 1).
    pub fn attempts_allowed(&self) -> i32 {
        self.max_attempts.max(1)
    }

    /// The backoff delay after failed attempt `attempt` (1-based), in whole milliseconds.
    pub fn delay_ms(&self, attempt: i32, rng: &mut impl Rng) -> u64 {
        let n = f64::from(attempt.max(1));
        let initial = self.initial_interval_ms as f64;
        let c = self.backoff_coefficient;
        let raw = match self.backoff_strategy {
            BackoffStrategy::Exponential => initial * c.powf(n - 1.0),
            BackoffStrategy::Linear => initial * n,
            BackoffStrategy::Constant | BackoffStrategy::None => initial,
            BackoffStrategy::Polynomial => initial * n.powf(c),
        };
        let cap = self.max_interval_ms as f64;
        let mut delay = raw.min(cap);
        if self.jitter {
            delay = (delay * rng.random_range(0.5..1.5)).min(cap);
        }
        delay.round().max(0.0) as u64
    }

    /// Whether any of `values` (error type, class, code) is listed as non-retryable.
    pub fn is_non_retryable<'v>(&self, values: impl IntoIterator<Item = &'v str>) -> bool {
        let values: Vec<&str> = values.into_iter().collect();
        self.non_retryable_errors.iter().any(|entry| {
            values.iter().any(|value| match entry.strip_suffix('*') {
                Some(prefix) if entry.ends_with(".*") => value.starts_with(prefix),
                _ => value == entry,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn parse(text: &str) -> Result<RetryPolicy, Vec<Violation>> {
        let raw: Box<RawValue> = serde_json::from_str(text).unwrap();
        RetryPolicy::parse(&raw, "$.retry")
    }

    fn rng() -> rand::rngs::StdRng {
        rand::rngs::StdRng::seed_from_u64(7)
    }

    #[test]
    fn defaults_fill_missing_fields() {
        let p = parse("{}").unwrap();
        assert_eq!(p, RetryPolicy::default());
        assert_eq!(
            p.to_json(),
            r#"{"max_attempts":3,"initial_interval":"PT1S","backoff_coefficient":2.0,"max_interval":"PT5M","jitter":true,"non_retryable_errors":[],"on_exhaustion":"dead_letter","backoff_strategy":"exponential"}"#
        );
    }

    #[test]
    fn accepts_both_duration_spellings_and_keeps_unknown_keys() {
        let p = parse(r#"{"initial_interval":"1s","max_interval":"300s","x_note":[1,2],"backoff_type":"linear"}"#).unwrap();
        assert_eq!(p.initial_interval_ms, 1_000);
        assert_eq!(p.max_interval_ms, 300_000);
        assert_eq!(p.backoff_strategy, BackoffStrategy::Linear);
        assert!(p.to_json().ends_with(r#","x_note":[1,2]}"#));
        assert_eq!(RetryPolicy::from_stored(&json::raw(p.to_json())), p);
    }

    #[test]
    fn the_default_policy_is_stored_short_and_read_back_in_full() {
        let default = RetryPolicy::default();
        assert_eq!(default.to_stored(), "{}");
        assert_eq!(
            RetryPolicy::from_stored(&json::raw(default.to_stored())),
            default
        );
        let stored = json::raw(default.to_stored());
        assert_eq!(RetryPolicy::effective_raw(&stored).get(), default.to_json());
        // Any other policy is stored, and read, in full.
        let custom = parse(r#"{"max_attempts":5}"#).unwrap();
        assert_eq!(custom.to_stored(), custom.to_json());
        let stored = json::raw(custom.to_stored());
        assert_eq!(RetryPolicy::effective_raw(&stored).get(), custom.to_json());
        // The long form of the default (rows written before the short one) is read as it is.
        let long = json::raw(default.to_json());
        assert_eq!(RetryPolicy::effective_raw(&long).get(), default.to_json());
        assert_eq!(RetryPolicy::from_stored(&long), default);
    }

    #[test]
    fn violations_name_the_field() {
        let err = parse(r#"{"max_attempts":-1,"backoff_coefficient":0.5,"initial_interval":"soon","jitter":"yes","on_exhaustion":"explode"}"#).unwrap_err();
        let messages: Vec<_> = err.iter().map(|v| v.message.as_str()).collect();
        assert!(messages[0].contains("max_attempts"));
        assert!(messages.iter().any(|m| m.contains("backoff_coefficient")));
        assert!(messages.iter().any(|m| m.contains("initial_interval")));
        assert!(messages.iter().any(|m| m.contains("jitter")));
        assert!(messages.iter().any(|m| m.contains("on_exhaustion")));
        assert!(parse(r#"{"initial_interval":"PT10S","max_interval":"PT1S"}"#).is_err());
        assert!(parse("[]").is_err());
    }

    #[test]
    fn long_initial_interval_raises_default_cap() {
        let p = parse(r#"{"initial_interval":"PT10M"}"#).unwrap();
        assert_eq!(p.max_interval_ms, 600_000);
    }

    #[test]
    fn backoff_strategies() {
        let mut r = rng();
        let exp = parse(r#"{"jitter":false}"#).unwrap();
        let delays: Vec<u64> = (1..=4).map(|n| exp.delay_ms(n, &mut r)).collect();
        assert_eq!(delays, [1_000, 2_000, 4_000, 8_000]);
        let lin = parse(r#"{"jitter":false,"backoff_strategy":"linear"}"#).unwrap();
        assert_eq!(lin.delay_ms(3, &mut r), 3_000);
        let con = parse(r#"{"jitter":false,"backoff_strategy":"constant"}"#).unwrap();
        assert_eq!(con.delay_ms(5, &mut r), 1_000);
        let poly = parse(r#"{"jitter":false,"backoff_strategy":"polynomial"}"#).unwrap();
        assert_eq!(poly.delay_ms(3, &mut r), 9_000);
        let capped =
            parse(r#"{"jitter":false,"backoff_coefficient":10,"max_interval":"PT2S"}"#).unwrap();
        let delays: Vec<u64> = (1..=3).map(|n| capped.delay_ms(n, &mut r)).collect();
        assert_eq!(delays, [1_000, 2_000, 2_000]);
        // Huge attempt numbers saturate at the cap instead of overflowing.
        assert_eq!(exp.delay_ms(10_000, &mut r), 300_000);
    }

    #[test]
    fn jitter_stays_within_half_to_one_and_a_half_and_the_cap() {
        let p = parse(r#"{"initial_interval":"PT2S"}"#).unwrap();
        let mut r = rng();
        for _ in 0..1000 {
            let d = p.delay_ms(1, &mut r);
            assert!((1_000..=3_000).contains(&d), "{d}");
        }
        let capped = parse(r#"{"initial_interval":"PT2S","max_interval":"PT2S"}"#).unwrap();
        for _ in 0..1000 {
            assert!(capped.delay_ms(1, &mut r) <= 2_000);
        }
    }

    #[test]
    fn non_retryable_matching_is_exact_or_prefix() {
        let p = parse(r#"{"non_retryable_errors":["ValidationError","auth.*"]}"#).unwrap();
        assert!(p.is_non_retryable(["ValidationError"]));
        assert!(!p.is_non_retryable(["validationerror"]));
        assert!(p.is_non_retryable(["x", "auth.expired"]));
        assert!(!p.is_non_retryable(["auth"]));
        assert!(!p.is_non_retryable(["authentication"]));
    }
}
