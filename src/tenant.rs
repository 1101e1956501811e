//! Tenants ([OJS multi-tenancy], the shared-queue model): who a job, workflow, worker or cron
//! entry belongs to, and the rules a tenant id follows.
//!
//! A request acts as a tenant when its API key is bound to one or it carries `X-OJS-Tenant`;
//! `http::tenancy` decides, for every route, what such a request may see and touch.
//!
//! [OJS multi-tenancy]: https://github.com/openjobspec/spec/blob/main/spec/ojs-multi-tenancy.md

use serde_json::{Value, json};

use crate::rate_limit::{Window, window, window_json};
use crate::wire::json::{self as wire_json, Kind, Object};
use crate::wire::violation::Violation;

/// Longest tenant id, in bytes.
pub const MAX_ID_LEN: usize = 255;

/// Longest `reason` of a change of limits, in characters.
pub const MAX_REASON_CHARS: usize = 1_000;

/// A tenant's limits (multi-tenancy extension, §8.1); `None`: no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Limits {
    /// Most of its jobs running at once (released to workers and not yet claimed, or active),
    /// across queues and replicas; 0 holds them all.
    pub max_concurrency: Option<i32>,
    /// Most jobs it may enqueue per window (a sliding window).
    pub max_enqueue_rate: Option<Window>,
    /// Most of its jobs waiting (scheduled, available, pending or retryable).
    pub max_queue_depth: Option<i32>,
}

/// The names of [`Limits`]' fields, as the wire spells them.
pub const LIMIT_FIELDS: [&str; 3] = ["max_concurrency", "max_enqueue_rate", "max_queue_depth"];

impl Limits {
    /// Whether any limit is set.
    pub fn any(&self) -> bool {
        self.max_concurrency.is_some()
            || self.max_enqueue_rate.is_some()
            || self.max_queue_depth.is_some()
    }

    /// Whether an enqueue must be admitted (an enqueue rate or a depth).
    pub fn limits_enqueue(&self) -> bool {
        self.max_enqueue_rate.is_some() || self.max_queue_depth.is_some()
    }

    /// The wire form: every field, `null` when unlimited.
    pub fn to_json(&self) -> Value {
        json!({
            "max_concurrency": self.max_concurrency,
            "max_enqueue_rate": self.max_enqueue_rate.map(window_json),
            "max_queue_depth": self.max_queue_depth,
        })
    }

    /// These limits with `change` applied: the fields it names replace these (`null` removes a
    /// limit), the others stay.
    pub fn with(&self, change: &LimitsChange) -> Limits {
        Limits {
            max_concurrency: change.max_concurrency.unwrap_or(self.max_concurrency),
            max_enqueue_rate: change.max_enqueue_rate.unwrap_or(self.max_enqueue_rate),
            max_queue_depth: change.max_queue_depth.unwrap_or(self.max_queue_depth),
        }
    }
}

/// An enqueue refused for a tenant's limit, as the database saw it (`ojs_tenant_admit`'s
/// refusal).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct LimitExceeded {
    pub tenant_id: String,
    /// `max_enqueue_rate` or `max_queue_depth`.
    pub limit: String,
    /// What the tenant had (enqueued in the window, or waiting) before this enqueue.
    pub current: i64,
    pub maximum: i64,
    /// Jobs the enqueue asked for.
    pub requested: i64,
    /// When trying again may succeed.
    pub retry_after_ms: i64,
}

/// A change of limits: `None` leaves a field as it is, `Some(None)` removes the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LimitsChange {
    pub max_concurrency: Option<Option<i32>>,
    pub max_enqueue_rate: Option<Option<Window>>,
    pub max_queue_depth: Option<Option<i32>>,
}

/// Reads a change of limits from `obj` (at `path`): [`LIMIT_FIELDS`], each an integer >= 0
/// (`max_enqueue_rate`: `{"limit": N >= 1, "period": duration}`) or `null`. Every problem, with
/// its path; another member is refused by name (a limit that is not kept must not look set).
pub fn parse_limits(obj: &Object<'_>, path: &str) -> Result<LimitsChange, Vec<Violation>> {
    let mut v = Vec::new();
    let mut change = LimitsChange::default();
    for (name, raw) in obj.iter() {
        let at = format!("{path}.{name}");
        let null = Kind::of(raw) == Kind::Null;
        match name {
            "max_concurrency" | "max_queue_depth" => {
                let value = if null {
                    Some(None)
                } else {
                    match wire_json::as_integer(raw) {
                        Some(n) if (0..=i64::from(i32::MAX)).contains(&n) => Some(Some(n as i32)),
                        _ => {
                            v.push(Violation::new(
                                at,
                                format!("'{name}' must be an integer >= 0, or null for no limit"),
                            ));
                            None
                        }
                    }
                };
                if name == "max_concurrency" {
                    change.max_concurrency = value;
                } else {
                    change.max_queue_depth = value;
                }
            }
            "max_enqueue_rate" if null => change.max_enqueue_rate = Some(None),
            "max_enqueue_rate" => match window(raw, &at) {
                Ok(w) => change.max_enqueue_rate = Some(Some(w)),
                Err(e) => v.extend(e),
            },
            other => v.push(Violation::new(
                at,
                format!(
                    "'{other}' is not a limit this server keeps ({})",
                    LIMIT_FIELDS.join(", ")
                ),
            )),
        }
    }
    if v.is_empty() { Ok(change) } else { Err(v) }
}

/// Whether `tenant` is a tenant id: a letter or digit, then letters, digits, `.`, `_`, `:` or
/// `-`, at most [`MAX_ID_LEN`] bytes (the multi-tenancy extension's format).
pub fn is_valid_id(tenant: &str) -> bool {
    tenant.len() <= MAX_ID_LEN
        && tenant
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
        && tenant
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// Why `tenant` is not a tenant id.
pub fn invalid_id_message(tenant: &str) -> String {
    format!(
        "tenant {:?} is invalid: a letter or digit, then letters, digits, '.', '_', ':' or '-', at most 255 bytes",
        tenant.chars().take(300).collect::<String>()
    )
}

/// The tenant a job's `meta` names (`meta.tenant_id`, a non-empty string), if any.
pub fn in_meta(meta: &Object<'_>) -> Option<String> {
    meta.get("tenant_id")
        .and_then(|raw| wire_json::decode::<String>(raw).ok())
        .filter(|t| !t.is_empty())
}

/// Whether something owned by `owner` (`None`: by no tenant) is visible to a request acting as
/// `tenant` (`None`: acting as no tenant, which sees everything).
pub fn visible(tenant: Option<&str>, owner: Option<&str>) -> bool {
    tenant.is_none_or(|t| owner == Some(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(text: &str) -> Result<LimitsChange, Vec<String>> {
        parse_limits(&Object::parse(text).unwrap(), "$.limits")
            .map_err(|v| v.into_iter().map(|v| v.path).collect())
    }

    #[test]
    fn limits_are_read_merged_and_written_with_every_field() {
        let c = change(
            r#"{"max_concurrency": 5, "max_enqueue_rate": {"limit": 100, "period": "PT1M"}}"#,
        )
        .unwrap();
        let limits = Limits::default().with(&c);
        assert_eq!(limits.max_concurrency, Some(5));
        assert_eq!(
            limits.max_enqueue_rate,
            Some(Window {
                limit: 100,
                period_ms: 60_000
            })
        );
        assert!(limits.limits_enqueue());
        assert_eq!(
            limits.to_json(),
            json!({"max_concurrency": 5, "max_enqueue_rate": {"limit": 100, "period": "PT1M"},
                   "max_queue_depth": null})
        );
        // A later change keeps what it does not name; null removes a limit.
        let later =
            limits.with(&change(r#"{"max_queue_depth": 10, "max_concurrency": null}"#).unwrap());
        assert_eq!(later.max_concurrency, None);
        assert_eq!(later.max_queue_depth, Some(10));
        assert!(later.max_enqueue_rate.is_some());
        assert!(!Limits::default().any());
    }

    #[test]
    fn every_bad_limit_is_named() {
        assert_eq!(
            change(r#"{"max_concurrency": -1, "max_queue_depth": "x", "max_enqueue_rate": {"limit": 0}, "priority_boost": 1}"#)
                .unwrap_err(),
            [
                "$.limits.max_concurrency",
                "$.limits.max_queue_depth",
                "$.limits.max_enqueue_rate.limit",
                "$.limits.max_enqueue_rate.period",
                "$.limits.priority_boost"
            ]
        );
    }

    #[test]
    fn ids_follow_the_extension_format() {
        for ok in ["a", "acme-corp", "t_1.2:x", "9", &"x".repeat(255)] {
            assert!(is_valid_id(ok), "{ok}");
        }
        for bad in ["", "-a", ".a", "a b", "ü", "a/b", &"x".repeat(256)] {
            assert!(!is_valid_id(bad), "{bad}");
        }
    }

    #[test]
    fn a_tenant_sees_only_its_own_and_no_tenant_sees_everything() {
        assert!(visible(None, None));
        assert!(visible(None, Some("a")));
        assert!(visible(Some("a"), Some("a")));
        assert!(!visible(Some("a"), Some("b")));
        assert!(!visible(Some("a"), None));
        // A tenant-fair queue tags jobs without a tenant with ''.
        assert!(!visible(Some("a"), Some("")));
    }
}
