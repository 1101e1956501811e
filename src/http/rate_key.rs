//! A rate-limit key's usage as every route shows it: the JSON view (`GET
//! /ojs/v1/rate-limits/keys/{key}`, and a rate-limited PUSH's `rate_limit`) and the
//! `X-RateLimit-*` headers of a PUSH.

use crate::broker::RateKeyUsage;
use crate::wire::{duration, timestamp};
use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};

pub(crate) fn ts(at: Option<DateTime<Utc>>) -> Value {
    at.map_or(Value::Null, |at| Value::String(timestamp::format(at)))
}

pub(crate) fn iso(ms: i64) -> String {
    duration::format_iso(u64::try_from(ms).unwrap_or(0))
}

/// The stricter of two optional limits with their periods (for a rate: fewer jobs per
/// millisecond).
pub(crate) fn stricter(own: Option<(i32, i64)>, other: Option<(i32, i64)>) -> Option<(i32, i64)> {
    match (own, other) {
        (Some(a), Some(b)) => {
            // a.0 / a.1 <= b.0 / b.1
            if i64::from(a.0) * b.1 <= i64::from(b.0) * a.1 {
                Some(a)
            } else {
                Some(b)
            }
        }
        (a, b) => a.or(b),
    }
}

pub(crate) fn window(limit: Option<i32>, period_ms: Option<i64>) -> Option<(i32, i64)> {
    limit.zip(period_ms)
}

pub(crate) fn window_json(w: Option<(i32, i64)>) -> Value {
    w.map_or(
        Value::Null,
        |(limit, ms)| json!({"limit": limit, "period": iso(ms)}),
    )
}

/// A key as the rate-limit routes show it.
pub(crate) fn render(u: &RateKeyUsage) -> Value {
    let over = u.overriding;
    let in_flight = u.active + u.released;
    let mut out = Map::new();
    out.insert("kind".into(), json!("key"));
    out.insert("key".into(), json!(u.key));
    let concurrency = match (u.concurrency, u.override_concurrency.filter(|_| over)) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    if let Some(limit) = concurrency {
        out.insert(
            "concurrency".into(),
            json!({"limit": limit, "active": in_flight,
                   "available": (i64::from(limit) - in_flight).max(0)}),
        );
    }
    let rate = stricter(
        window(u.rate_limit, u.rate_period_ms),
        window(u.override_rate_limit, u.override_rate_period_ms).filter(|_| over),
    );
    if let Some((limit, ms)) = rate {
        let resets = u
            .oldest_start
            .map(|at| at + chrono::Duration::milliseconds(ms));
        out.insert(
            "rate".into(),
            json!({"limit": limit, "period": iso(ms), "current_count": u.started + u.released,
                   "window_resets_at": ts(resets)}),
        );
    }
    let throttle = stricter(
        window(u.throttle_limit, u.throttle_period_ms),
        window(u.override_throttle_limit, u.override_throttle_period_ms).filter(|_| over),
    );
    if let Some((limit, ms)) = throttle {
        let next = u
            .last_start
            .map(|at| at + chrono::Duration::milliseconds(ms / i64::from(limit.max(1))));
        out.insert(
            "throttle".into(),
            json!({"limit": limit, "period": iso(ms), "next_allowed_at": ts(next)}),
        );
    }
    out.insert("waiting_count".into(), json!(u.waiting));
    out.insert("blocked_until".into(), ts(u.blocked_until));
    out.insert("on_limit".into(), json!(u.on_limit));
    out.insert("limited_by".into(), json!(u.limited));
    out.insert(
        "policy".into(),
        json!({"concurrency": u.concurrency,
               "rate": window_json(window(u.rate_limit, u.rate_period_ms)),
               "throttle": window_json(window(u.throttle_limit, u.throttle_period_ms))}),
    );
    let has_override = u.override_concurrency.is_some()
        || u.override_rate_limit.is_some()
        || u.override_throttle_limit.is_some();
    out.insert(
        "override".into(),
        if has_override {
            {
                // The admin UI reads `limit` and `period`: the rate, else the throttle.
                let flat = window(u.override_rate_limit, u.override_rate_period_ms).or(window(
                    u.override_throttle_limit,
                    u.override_throttle_period_ms,
                ));
                json!({"concurrency": u.override_concurrency,
                       "rate": window_json(window(u.override_rate_limit, u.override_rate_period_ms)),
                       "throttle": window_json(window(u.override_throttle_limit, u.override_throttle_period_ms)),
                       "limit": flat.map(|w| w.0).or(u.override_concurrency),
                       "period": flat.map(|w| iso(w.1)),
                       "expires_at": ts(u.override_expires_at), "active": over})
            }
        } else {
            Value::Null
        },
    );
    // The admin UI's flat reading: one limit per period (the rate, else the throttle, else the
    // concurrency), jobs in flight, jobs waiting.
    let (limit, period) = match (rate, throttle, concurrency) {
        (Some((l, ms)), _, _) | (None, Some((l, ms)), _) => (json!(l), json!(iso(ms))),
        (None, None, Some(c)) => (json!(c), Value::Null),
        (None, None, None) => (Value::Null, Value::Null),
    };
    out.insert("limit".into(), limit);
    out.insert("period".into(), period);
    out.insert("active".into(), json!(in_flight));
    out.insert("waiting".into(), json!(u.waiting));
    out.insert("created_at".into(), json!(timestamp::format(u.created_at)));
    out.insert("updated_at".into(), json!(timestamp::format(u.updated_at)));
    Value::Object(out)
}

/// `X-RateLimit-Limit`, `-Remaining` and `-Reset` (Unix seconds) of a key: its concurrency
/// when it has one, else its rate, else its throttle.
pub(crate) fn headers(u: &RateKeyUsage) -> Option<(i64, i64, i64)> {
    let view = render(u);
    let now = Utc::now();
    let reset_of = |at: &Value| {
        at.as_str()
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map_or(now.timestamp(), |t| t.timestamp().max(now.timestamp()))
    };
    if let Some(c) = view.get("concurrency") {
        return Some((
            c["limit"].as_i64()?,
            c["available"].as_i64()?,
            now.timestamp(),
        ));
    }
    if let Some(r) = view.get("rate") {
        let limit = r["limit"].as_i64()?;
        let used = r["current_count"].as_i64()?;
        return Some((
            limit,
            (limit - used).max(0),
            reset_of(&r["window_resets_at"]),
        ));
    }
    let t = view.get("throttle")?;
    let next = reset_of(&t["next_allowed_at"]);
    Some((
        t["limit"].as_i64()?,
        i64::from(next <= now.timestamp() && u.released == 0),
        next,
    ))
}
