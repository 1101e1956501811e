//! Queue configuration ([OJS queue configuration fields]): validation of what operators write,
//! the merge rules of a config `PUT`, and resolution through the layers
//! system defaults → `_default` → the queue's own values ([OJS policy inheritance]).
//!
//! A layer is stored as a JSON object holding only the fields set explicitly, in canonical form
//! (durations as ISO 8601 text, timeouts as integer seconds, the backpressure alias expanded).
//! [`QueueConfig`] is the resolved result: every field, with `None` meaning unlimited / none.
//!
//! [OJS queue configuration fields]: https://github.com/openjobspec/spec/blob/main/spec/ojs-queue-config.md#6-queue-configuration-fields
//! [OJS policy inheritance]: https://github.com/openjobspec/spec/blob/main/spec/ojs-queue-config.md#72-policy-inheritance

use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::job::retry::RetryPolicy;
use crate::wire::{Violation, names};
use crate::wire::{duration, json};

/// Name of the virtual queue holding the policy every queue inherits.
pub const DEFAULT_LAYER: &str = "_default";

/// What a config body got wrong.
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigError {
    /// 400 `invalid_request`.
    Invalid(Violation),
    /// 422 `validation_error`: the `default_retry` policy is invalid.
    Retry(Vec<Violation>),
}

fn invalid(path: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid(Violation::new(path, message))
}

/// What a queue does with an enqueue that would take it past its bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OverflowPolicy {
    /// Refuse it: 429 `QUEUE_FULL`.
    #[default]
    Reject,
    /// Discard the oldest waiting jobs to make room.
    DropOldest,
    /// Wait for room up to the client's `OJS-Block-Timeout`, then refuse.
    Block,
}

names!(OverflowPolicy {
    Reject => "reject",
    DropOldest => "drop_oldest",
    Block => "block",
});

impl OverflowPolicy {
    /// Parses a policy name (`drop-oldest` is accepted for `drop_oldest`).
    pub fn parse(s: &str) -> Option<OverflowPolicy> {
        match s {
            "drop-oldest" => Some(OverflowPolicy::DropOldest),
            name => OverflowPolicy::from_name(name),
        }
    }
}

/// A queue-level rate limit: at most `limit` job starts in any window of `period_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    pub limit: i64,
    pub period_ms: u64,
}

/// Retention of terminal jobs, in milliseconds after they finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    pub completed_ms: u64,
    pub discarded_ms: u64,
    pub cancelled_ms: u64,
}

/// System defaults of the retention fields and of `dead_letter_ttl`.
pub const SYSTEM_RETENTION: Retention = Retention {
    completed_ms: 7 * 86_400_000,
    discarded_ms: 30 * 86_400_000,
    cancelled_ms: 7 * 86_400_000,
};
pub const SYSTEM_DEAD_LETTER_TTL_MS: u64 = 30 * 86_400_000;
const SYSTEM_WARNING_THRESHOLD: f64 = 0.8;

/// A queue's resolved configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueConfig {
    pub max_size: Option<i64>,
    pub max_size_bytes: Option<i64>,
    pub overflow_policy: OverflowPolicy,
    pub warning_threshold: f64,
    pub concurrency: Option<i64>,
    pub rate_limit: Option<RateLimit>,
    /// Seconds; `None`: the server's default visibility timeout.
    pub visibility_timeout: Option<i64>,
    /// Seconds; `None`: the server's default execution timeout.
    pub default_timeout: Option<i64>,
    /// The `default_retry` fields set by the layers (partial; jobs' own fields win per field).
    pub default_retry: Map<String, Value>,
    /// The effective default retry policy (system defaults under `default_retry`).
    pub retry_policy: RetryPolicy,
    pub retention: Retention,
    /// Seconds a job's result is served after it ended, for jobs that name no `result_ttl`
    /// of their own (the results extension: 0 keeps none, -1 as long as the job is kept);
    /// `None`: the job's retention decides.
    pub result_ttl: Option<i64>,
    pub dead_letter_queue: Option<String>,
    pub dead_letter_max_size: Option<i64>,
    pub dead_letter_ttl_ms: u64,
    pub allowed_job_types: Vec<String>,
    pub producers: Vec<String>,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            max_size: None,
            max_size_bytes: None,
            overflow_policy: OverflowPolicy::Reject,
            warning_threshold: SYSTEM_WARNING_THRESHOLD,
            concurrency: None,
            rate_limit: None,
            visibility_timeout: None,
            default_timeout: None,
            default_retry: Map::new(),
            retry_policy: RetryPolicy::default(),
            retention: SYSTEM_RETENTION,
            result_ttl: None,
            dead_letter_queue: None,
            dead_letter_max_size: None,
            dead_letter_ttl_ms: SYSTEM_DEAD_LETTER_TTL_MS,
            allowed_job_types: vec!["*".to_owned()],
            producers: vec!["*".to_owned()],
        }
    }
}

impl QueueConfig {
    /// Resolves a queue's own layer over the `_default` layer over the system defaults. Both
    /// layers are stored canonical objects (see [`apply_patch`]).
    pub fn resolve(default_layer: &Value, own: &Value) -> Result<QueueConfig, ConfigError> {
        let mut merged = Map::new();
        for layer in [default_layer, own] {
            if let Value::Object(layer) = layer {
                for (key, value) in layer {
                    merge_field(&mut merged, key, value.clone());
                }
            }
        }
        let mut config = QueueConfig::default();
        let int = |key: &str| merged.get(key).and_then(Value::as_i64);
        config.max_size = int("max_size");
        config.max_size_bytes = int("max_size_bytes");
        if let Some(p) = merged.get("overflow_policy").and_then(Value::as_str) {
            config.overflow_policy = OverflowPolicy::parse(p).unwrap_or_default();
        }
        if let Some(t) = merged.get("warning_threshold").and_then(Value::as_f64) {
            config.warning_threshold = t;
        }
        config.concurrency = int("concurrency");
        if let Some(Value::Object(rate)) = merged.get("rate_limit") {
            let limit = rate.get("limit").and_then(Value::as_i64);
            let period = rate
                .get("period")
                .and_then(Value::as_str)
                .and_then(|p| duration::parse_ms(p).ok());
            config.rate_limit = match (limit, period) {
                (Some(limit), Some(period_ms)) => Some(RateLimit { limit, period_ms }),
                (None, None) => None,
                (None, _) => return Err(invalid("$.rate_limit.limit", "rate_limit needs a limit")),
                (_, None) => {
                    return Err(invalid("$.rate_limit.period", "rate_limit needs a period"));
                }
            };
        }
        config.visibility_timeout = int("visibility_timeout");
        config.default_timeout = int("default_timeout");
        if let Some(Value::Object(retry)) = merged.get("default_retry") {
            config.default_retry = retry.clone();
            config.retry_policy = retry_policy(retry, "$.default_retry")?;
        }
        if let Some(Value::Object(retention)) = merged.get("retention") {
            let ms = |key: &str, fallback: u64| {
                retention
                    .get(key)
                    .and_then(Value::as_str)
                    .and_then(|d| duration::parse_ms(d).ok())
                    .unwrap_or(fallback)
            };
            config.retention = Retention {
                completed_ms: ms("completed", SYSTEM_RETENTION.completed_ms),
                discarded_ms: ms("discarded", SYSTEM_RETENTION.discarded_ms),
                cancelled_ms: ms("cancelled", SYSTEM_RETENTION.cancelled_ms),
            };
        }
        config.result_ttl = int("result_ttl");
        config.dead_letter_queue = merged
            .get("dead_letter_queue")
            .and_then(Value::as_str)
            .map(str::to_owned);
        config.dead_letter_max_size = int("dead_letter_max_size");
        if let Some(ttl) = merged
            .get("dead_letter_ttl")
            .and_then(Value::as_str)
            .and_then(|d| duration::parse_ms(d).ok())
        {
            config.dead_letter_ttl_ms = ttl;
        }
        let strings = |key: &str| {
            merged.get(key).and_then(Value::as_array).map(|items| {
                items
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
        };
        if let Some(types) = strings("allowed_job_types") {
            config.allowed_job_types = types;
        }
        if let Some(producers) = strings("producers") {
            config.producers = producers;
        }
        Ok(config)
    }

    /// Whether the queue accepts jobs of `job_type`.
    pub fn allows_type(&self, job_type: &str) -> bool {
        self.allowed_job_types.iter().any(|p| glob(p, job_type))
    }

    /// Whether the queue accepts jobs from `producer` (`None`: the request named none).
    pub fn allows_producer(&self, producer: Option<&str>) -> bool {
        self.producers
            .iter()
            .any(|p| p == "*" || producer.is_some_and(|who| glob(p, who)))
    }

    /// Whether the queue has a bound on its size.
    pub fn is_bounded(&self) -> bool {
        self.max_size.is_some() || self.max_size_bytes.is_some()
    }

    /// Whether dispatch from the queue is limited (concurrency or rate).
    pub fn limits_dispatch(&self) -> bool {
        self.concurrency.is_some() || self.rate_limit.is_some()
    }

    /// The resolved configuration as the wire shows it: every field, `null` for none.
    pub fn wire(&self) -> WireConfig<'_> {
        WireConfig {
            max_size: self.max_size,
            max_size_bytes: self.max_size_bytes,
            overflow_policy: self.overflow_policy,
            warning_threshold: self.warning_threshold,
            concurrency: self.concurrency,
            rate_limit: self.rate_limit.map(|r| WireRateLimit {
                limit: r.limit,
                period: duration::format_iso(r.period_ms),
            }),
            visibility_timeout: self.visibility_timeout,
            default_timeout: self.default_timeout,
            default_retry: serde_json::from_str(&self.retry_policy.to_json())
                .unwrap_or_else(|_| json!({})),
            retention: WireRetention {
                completed: duration::format_iso(self.retention.completed_ms),
                discarded: duration::format_iso(self.retention.discarded_ms),
                cancelled: duration::format_iso(self.retention.cancelled_ms),
            },
            result_ttl: self.result_ttl,
            dead_letter_queue: self.dead_letter_queue.as_deref(),
            dead_letter_max_size: self.dead_letter_max_size,
            dead_letter_ttl: duration::format_iso(self.dead_letter_ttl_ms),
            allowed_job_types: &self.allowed_job_types,
            producers: &self.producers,
            backpressure: WireBackpressure {
                max_depth: self.max_size,
                max_size_bytes: self.max_size_bytes,
                strategy: self.overflow_policy,
                warning_threshold: self.warning_threshold,
                enabled: None,
                threshold: None,
                current_depth: None,
                state: None,
            },
        }
    }
}

/// A queue's resolved configuration (its own values over `_default` over the system
/// defaults) as the API shows it: every field, `null` for none or unlimited.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = ResolvedQueueConfig)]
pub struct WireConfig<'a> {
    #[schema(required = true)]
    pub max_size: Option<i64>,
    #[schema(required = true)]
    pub max_size_bytes: Option<i64>,
    pub overflow_policy: OverflowPolicy,
    pub warning_threshold: f64,
    #[schema(required = true)]
    pub concurrency: Option<i64>,
    #[schema(required = true)]
    pub rate_limit: Option<WireRateLimit>,
    /// Seconds; `null`: the server's default.
    #[schema(required = true)]
    pub visibility_timeout: Option<i64>,
    /// Seconds; `null`: the server's default.
    #[schema(required = true)]
    pub default_timeout: Option<i64>,
    /// The effective default retry policy, as a job's `retry` reads (durations ISO 8601).
    #[schema(value_type = Object)]
    pub default_retry: Value,
    pub retention: WireRetention,
    /// Seconds a result is served after its job ended, for jobs that name no `result_ttl`
    /// (0: not stored, -1: as long as the job is kept); `null`: the retention decides.
    #[schema(required = true)]
    pub result_ttl: Option<i64>,
    #[schema(required = true)]
    pub dead_letter_queue: Option<&'a str>,
    #[schema(required = true)]
    pub dead_letter_max_size: Option<i64>,
    /// ISO 8601 duration.
    pub dead_letter_ttl: String,
    pub allowed_job_types: &'a [String],
    pub producers: &'a [String],
    pub backpressure: WireBackpressure,
}

/// At most `limit` job starts in any window of `period`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = QueueRateLimit)]
pub struct WireRateLimit {
    pub limit: i64,
    /// ISO 8601 duration.
    pub period: String,
}

/// How long terminal jobs are kept (ISO 8601 durations).
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = QueueRetention)]
pub struct WireRetention {
    pub completed: String,
    pub discarded: String,
    pub cancelled: String,
}

/// The backpressure fields again, under their alias names. The admin API's queue detail adds
/// how full the queue is now ([`WireBackpressure::with_fill`]), for the OJS admin UI's
/// backpressure panel; elsewhere those members are absent.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = QueueBackpressure)]
pub struct WireBackpressure {
    /// The bound (`max_size`).
    #[schema(required = true)]
    pub max_depth: Option<i64>,
    #[schema(required = true)]
    pub max_size_bytes: Option<i64>,
    /// The overflow policy.
    pub strategy: OverflowPolicy,
    pub warning_threshold: f64,
    /// Admin queue detail only: whether the queue is bounded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Admin queue detail only: the bound (`null`: unbounded).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<i64>)]
    pub threshold: Option<Option<i64>>,
    /// Admin queue detail only: the jobs counted against the bound (`null` for an unbounded
    /// queue).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<i64>)]
    pub current_depth: Option<Option<i64>>,
    /// Admin queue detail only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<PressureState>,
}

impl WireBackpressure {
    /// Adds how full a queue configured as `config` is, holding `depth` jobs.
    pub fn with_fill(&mut self, config: &QueueConfig, depth: Option<i64>) {
        let bound = config.max_size;
        let state = match (bound, depth) {
            (Some(bound), Some(depth)) if depth >= bound => PressureState::Critical,
            (Some(bound), Some(depth))
                if depth as f64 >= config.warning_threshold * bound as f64 =>
            {
                PressureState::Warning
            }
            _ => PressureState::Normal,
        };
        self.enabled = Some(bound.is_some());
        self.threshold = Some(bound);
        self.current_depth = Some(depth);
        self.state = Some(state);
    }
}

/// `normal`, `warning` (from `warning_threshold` of the bound) or `critical` (at the bound).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PressureState {
    Normal,
    Warning,
    Critical,
}

names!(PressureState {
    Normal => "normal",
    Warning => "warning",
    Critical => "critical",
});

/// Parses a merged `default_retry` object as a policy (system defaults for what it omits).
fn retry_policy(retry: &Map<String, Value>, path: &str) -> Result<RetryPolicy, ConfigError> {
    let text = Value::Object(retry.clone()).to_string();
    let raw = crate::wire::json::raw(text);
    RetryPolicy::parse(&raw, path).map_err(ConfigError::Retry)
}

/// The job's own retry fields over the queue's `default_retry` (job fields win, per field).
pub fn layered_retry(queue: &Map<String, Value>, job: Option<&str>) -> Option<String> {
    if queue.is_empty() {
        return None;
    }
    let mut merged = queue.clone();
    if let Some(Ok(Value::Object(own))) = job.map(serde_json::from_str::<Value>) {
        merged.extend(own);
    }
    Some(Value::Object(merged).to_string())
}

/// Nested fields merged per field by a PUT.
const NESTED: &[&str] = &["retention", "default_retry", "rate_limit"];

/// Sets `key` in a layer: nested objects merge per field (a `null` member removes that
/// member), `null` removes the field, anything else replaces it.
fn merge_field(layer: &mut Map<String, Value>, key: &str, value: Value) {
    match value {
        Value::Null => {
            layer.remove(key);
        }
        Value::Object(fields) if NESTED.contains(&key) => {
            let mut current = match layer.remove(key) {
                Some(Value::Object(current)) => current,
                _ => Map::new(),
            };
            for (field, v) in fields {
                if v.is_null() {
                    current.remove(&field);
                } else {
                    current.insert(field, v);
                }
            }
            if !current.is_empty() {
                layer.insert(key.to_owned(), Value::Object(current));
            }
        }
        other => {
            layer.insert(key.to_owned(), other);
        }
    }
}

/// Applies a config PUT body to a stored layer (`queue` names the queue, `None` for
/// `_default`). Returns the names of the fields the body set or reset. The caller resolves
/// the result to check the fields together.
pub fn apply_patch(
    layer: &mut Map<String, Value>,
    body: &Value,
    queue: Option<&str>,
) -> Result<Vec<String>, ConfigError> {
    let Value::Object(body) = body else {
        return Err(invalid("$", "the configuration must be a JSON object"));
    };
    // The backpressure alias, under the fields set explicitly.
    let mut fields: Vec<(String, Value)> = Vec::new();
    if let Some(alias) = body.get("backpressure") {
        let Value::Object(alias) = alias else {
            return Err(invalid("$.backpressure", "backpressure must be an object"));
        };
        for (name, value) in alias {
            let target = match name.as_str() {
                "max_depth" => "max_size",
                "max_size_bytes" => "max_size_bytes",
                "strategy" => "overflow_policy",
                "warning_threshold" => "warning_threshold",
                other => {
                    return Err(invalid(
                        format!("$.backpressure.{other}"),
                        format!(
                            "unknown backpressure field '{other}' (max_depth, max_size_bytes, strategy, warning_threshold)"
                        ),
                    ));
                }
            };
            if body.contains_key(target) {
                continue;
            }
            // A depth bound of 0 means unlimited: the inherited value.
            let value = if target == "max_size" && json::whole(value) == Some(0) {
                Value::Null
            } else {
                value.clone()
            };
            fields.push((target.to_owned(), value));
        }
    }
    fields.extend(
        body.iter()
            .filter(|(k, _)| *k != "backpressure")
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    let mut changed = Vec::with_capacity(fields.len());
    for (name, value) in fields {
        let path = format!("$.{name}");
        let canonical = if value.is_null() {
            Value::Null
        } else {
            canonical(&name, &value, &path, queue)?
        };
        merge_field(layer, &name, canonical);
        changed.push(name);
    }
    changed.sort();
    changed.dedup();
    Ok(changed)
}

/// Validates one field of a config body and returns its canonical form.
fn canonical(
    name: &str,
    value: &Value,
    path: &str,
    queue: Option<&str>,
) -> Result<Value, ConfigError> {
    let positive = |min: i64, what: &str| match json::whole(value) {
        Some(n) if n >= min => Ok(json!(n)),
        _ => Err(invalid(
            path,
            format!("{name} must be an integer >= {min}{what}"),
        )),
    };
    match name {
        "max_size" | "max_size_bytes" | "dead_letter_max_size" => {
            positive(1, " or null (unlimited)")
        }
        "concurrency" => positive(0, " or null (unlimited)"),
        "visibility_timeout" | "default_timeout" => match value {
            Value::String(d) => duration::parse_ms(d)
                .ok()
                .filter(|ms| *ms >= 1_000)
                .map(|ms| json!(ms.div_ceil(1_000)))
                .ok_or_else(|| {
                    invalid(path, format!("{name} must be a positive number of seconds"))
                }),
            _ => positive(1, " (seconds) or null"),
        },
        "overflow_policy" => value
            .as_str()
            .and_then(OverflowPolicy::parse)
            .map(|p| json!(p.as_str()))
            .ok_or_else(|| {
                invalid(
                    path,
                    format!("{name} must be one of reject, drop_oldest, block"),
                )
            }),
        "warning_threshold" => value
            .as_f64()
            .filter(|t| (0.0..=1.0).contains(t))
            .map(|t| json!(t))
            .ok_or_else(|| invalid(path, "warning_threshold must be a number from 0 to 1")),
        "rate_limit" => rate_limit(value, path),
        "result_ttl" => match json::whole(value) {
            Some(n) if (-1..=i64::from(i32::MAX)).contains(&n) => Ok(json!(n)),
            _ => Err(invalid(
                path,
                "result_ttl must be an integer number of seconds: 0 (not stored), -1 (as long as the job is kept) or more, or null",
            )),
        },
        "default_retry" => default_retry(value, path),
        "retention" => retention(value, path),
        "dead_letter_ttl" => text_duration(value, path),
        "dead_letter_queue" => dead_letter_queue(value, path, queue),
        "allowed_job_types" | "producers" => patterns(name, value, path),
        other => Err(invalid(
            path,
            format!("unknown queue configuration field '{other}'"),
        )),
    }
}

/// An ISO 8601 duration, canonical (`P7D`).
fn text_duration(v: &Value, path: &str) -> Result<Value, ConfigError> {
    v.as_str()
        .and_then(|d| duration::parse_ms(d).ok())
        .map(|ms| json!(duration::format_iso(ms)))
        .ok_or_else(|| {
            invalid(
                path,
                format!(
                    "{} must be an ISO 8601 duration such as \"P7D\"",
                    path.trim_start_matches("$.")
                ),
            )
        })
}

/// `default_retry`: a retry policy whose members are checked alone here and together once
/// merged (see `resolve`).
fn default_retry(value: &Value, path: &str) -> Result<Value, ConfigError> {
    let Value::Object(retry) = value else {
        return Err(ConfigError::Retry(vec![Violation::new(
            path,
            "default_retry must be an object",
        )]));
    };
    let set: Map<String, Value> = retry
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    retry_policy(&set, path)?;
    Ok(value.clone())
}

/// `retention`: how long completed, discarded and cancelled jobs are kept (`null` resets one).
fn retention(value: &Value, path: &str) -> Result<Value, ConfigError> {
    let Value::Object(fields) = value else {
        return Err(invalid(
            path,
            "retention must be an object with completed, discarded, cancelled",
        ));
    };
    let mut out = Map::new();
    for (field, v) in fields {
        let field_path = format!("{path}.{field}");
        if !["completed", "discarded", "cancelled"].contains(&field.as_str()) {
            return Err(invalid(
                field_path,
                format!("unknown retention field '{field}' (completed, discarded, cancelled)"),
            ));
        }
        out.insert(
            field.clone(),
            if v.is_null() {
                Value::Null
            } else {
                text_duration(v, &field_path)?
            },
        );
    }
    Ok(Value::Object(out))
}

/// `dead_letter_queue`: another queue's name.
fn dead_letter_queue(value: &Value, path: &str, queue: Option<&str>) -> Result<Value, ConfigError> {
    let name_ok = value.as_str().is_some_and(|q| {
        !q.is_empty()
            && q.len() <= 128
            && q.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && q.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-')
    });
    if !name_ok {
        return Err(invalid(
            path,
            "dead_letter_queue must be a queue name (lowercase letters, digits, '.', '-', up to 128 characters)",
        ));
    }
    if queue.is_some_and(|q| value.as_str() == Some(q)) {
        return Err(invalid(path, "dead_letter_queue must be another queue"));
    }
    Ok(value.clone())
}

/// `allowed_job_types` or `producers`: a non-empty list of patterns.
fn patterns(name: &str, value: &Value, path: &str) -> Result<Value, ConfigError> {
    match value.as_array() {
        Some(items)
            if !items.is_empty()
                && items
                    .iter()
                    .all(|i| i.as_str().is_some_and(|s| !s.is_empty() && s.len() <= 255)) =>
        {
            Ok(value.clone())
        }
        _ => Err(invalid(
            path,
            format!(
                "{name} must be a non-empty array of non-empty strings (patterns, '*' matches anything)"
            ),
        )),
    }
}

/// A queue `rate_limit` in any accepted form, as `{"limit", "period"}`: the queue form
/// `{"limit", "period"}`, the policy form `{"rate": {"limit", "period"}}`, and the shorthands
/// `{"rate": N, "period"}` and `{"max_per_second": N}`. A member set to `null` resets it.
fn rate_limit(value: &Value, path: &str) -> Result<Value, ConfigError> {
    let Value::Object(fields) = value else {
        return Err(invalid(
            path,
            "rate_limit must be an object {\"limit\": N, \"period\": \"PT1M\"}",
        ));
    };
    let (limit, period) = if let Some(n) = fields.get("max_per_second") {
        (Some(n), Some(&Value::String("PT1S".to_owned())))
    } else if let Some(Value::Object(rate)) = fields.get("rate") {
        (rate.get("limit"), rate.get("period"))
    } else if let Some(n @ Value::Number(_)) = fields.get("rate") {
        (Some(n), fields.get("period"))
    } else {
        if let Some(other) = fields
            .keys()
            .find(|k| !["limit", "period"].contains(&k.as_str()))
        {
            return Err(invalid(
                format!("{path}.{other}"),
                format!("unknown rate_limit field '{other}' (limit, period)"),
            ));
        }
        (fields.get("limit"), fields.get("period"))
    };
    let mut out = Map::new();
    if let Some(limit) = limit {
        out.insert(
            "limit".to_owned(),
            match limit {
                Value::Null => Value::Null,
                _ => match json::whole(limit) {
                    Some(n) if n >= 1 => json!(n),
                    _ => {
                        return Err(invalid(
                            format!("{path}.limit"),
                            "rate_limit.limit must be an integer >= 1",
                        ));
                    }
                },
            },
        );
    }
    if let Some(period) = period {
        out.insert(
            "period".to_owned(),
            match period {
                Value::Null => Value::Null,
                _ => {
                    let ms = period.as_str().and_then(duration::parse_period_ms);
                    match ms {
                        Some(ms) => json!(duration::format_iso(ms)),
                        None => {
                            return Err(invalid(
                                format!("{path}.period"),
                                "rate_limit.period must be a positive ISO 8601 duration (or second, minute, hour, day)",
                            ));
                        }
                    }
                }
            },
        );
    }
    Ok(Value::Object(out))
}

/// Glob match where `*` stands for any run of characters (including none).
pub fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || text.len() < first.len() + last.len() || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(layer: &mut Map<String, Value>, body: &Value) -> Result<Vec<String>, ConfigError> {
        apply_patch(layer, body, Some("q"))
    }

    #[test]
    fn defaults_resolve_to_the_system_values() {
        let c = QueueConfig::resolve(&json!({}), &json!({})).unwrap();
        assert_eq!(c, QueueConfig::default());
        let wire = serde_json::to_value(c.wire()).unwrap();
        assert_eq!(wire["max_size"], Value::Null);
        assert_eq!(wire["overflow_policy"], "reject");
        assert_eq!(wire["retention"]["discarded"], "P30D");
        assert_eq!(wire["allowed_job_types"], json!(["*"]));
        assert_eq!(wire["default_retry"]["max_attempts"], 3);
    }

    #[test]
    fn layers_override_and_nested_fields_merge() {
        let default_layer = json!({"concurrency": 10, "retention": {"completed": "P1D"},
                                   "default_retry": {"max_attempts": 5}});
        let own = json!({"retention": {"cancelled": "PT1H"}, "default_retry": {"jitter": false}});
        let c = QueueConfig::resolve(&default_layer, &own).unwrap();
        assert_eq!(c.concurrency, Some(10));
        assert_eq!(c.retention.completed_ms, 86_400_000);
        assert_eq!(c.retention.cancelled_ms, 3_600_000);
        assert_eq!(c.retention.discarded_ms, SYSTEM_RETENTION.discarded_ms);
        assert_eq!(c.retry_policy.max_attempts, 5);
        assert!(!c.retry_policy.jitter);
    }

    #[test]
    fn put_merges_resets_and_reports_changed_fields() {
        let mut layer = Map::new();
        let changed = put(
            &mut layer,
            &json!({"max_size": 100, "retention": {"completed": "P1D", "discarded": "P2D"}}),
        )
        .unwrap();
        assert_eq!(changed, ["max_size", "retention"]);
        put(
            &mut layer,
            &json!({"retention": {"discarded": null}, "max_size": null}),
        )
        .unwrap();
        assert_eq!(
            Value::Object(layer),
            json!({"retention": {"completed": "P1D"}})
        );
    }

    #[test]
    fn backpressure_alias_maps_and_explicit_fields_win() {
        let mut layer = Map::new();
        put(&mut layer, &json!({"backpressure": {"max_depth": 10, "strategy": "drop-oldest", "warning_threshold": 0.5},
                   "overflow_policy": "block"}),
        )
        .unwrap();
        assert_eq!(
            Value::Object(layer.clone()),
            json!({"max_size": 10, "overflow_policy": "block", "warning_threshold": 0.5})
        );
        put(&mut layer, &json!({"backpressure": {"max_depth": 0}})).unwrap();
        assert!(!layer.contains_key("max_size"));
    }

    #[test]
    fn invalid_fields_are_refused_with_their_path() {
        let cases = [
            (json!({"max_size": 0}), "$.max_size"),
            (json!({"max_size": -1}), "$.max_size"),
            (json!({"max_size": 1.5}), "$.max_size"),
            (json!({"max_size": "10"}), "$.max_size"),
            (json!({"concurrency": -1}), "$.concurrency"),
            (json!({"overflow_policy": "explode"}), "$.overflow_policy"),
            (json!({"warning_threshold": 1.5}), "$.warning_threshold"),
            (
                json!({"rate_limit": {"limit": 0, "period": "PT1S"}}),
                "$.rate_limit.limit",
            ),
            (
                json!({"rate_limit": {"limit": 1, "period": "soon"}}),
                "$.rate_limit.period",
            ),
            (json!({"rate_limit": {"burst": 1}}), "$.rate_limit.burst"),
            (json!({"visibility_timeout": 0}), "$.visibility_timeout"),
            (
                json!({"retention": {"completed": "7 days"}}),
                "$.retention.completed",
            ),
            (
                json!({"retention": {"forever": "P1D"}}),
                "$.retention.forever",
            ),
            (
                json!({"dead_letter_queue": "Bad Name"}),
                "$.dead_letter_queue",
            ),
            (json!({"dead_letter_queue": "q"}), "$.dead_letter_queue"),
            (json!({"allowed_job_types": []}), "$.allowed_job_types"),
            (json!({"producers": [1]}), "$.producers"),
            (json!({"colour": "blue"}), "$.colour"),
            (json!({"result_ttl": -2}), "$.result_ttl"),
            (json!({"result_ttl": 1.5}), "$.result_ttl"),
            (json!({"result_ttl": "60"}), "$.result_ttl"),
            (json!({"result_ttl": 2_147_483_648_i64}), "$.result_ttl"),
        ];
        for (body, path) in cases {
            match put(&mut Map::new(), &body) {
                Err(ConfigError::Invalid(v)) => assert_eq!(v.path, path, "{body}"),
                other => panic!("{body}: {other:?}"),
            }
        }
        assert!(matches!(
            put(
                &mut Map::new(),
                &json!({"default_retry": {"max_attempts": -1}})
            ),
            Err(ConfigError::Retry(_))
        ));
        assert!(matches!(
            put(&mut Map::new(), &json!([1])),
            Err(ConfigError::Invalid(_))
        ));
    }

    #[test]
    fn a_queues_result_ttl_overrides_the_default_layers_and_null_inherits_it() {
        let mut default_layer = Map::new();
        put(&mut default_layer, &json!({"result_ttl": 3600})).unwrap();
        let mut own = Map::new();
        put(&mut own, &json!({"result_ttl": 0})).unwrap();
        let default_layer = Value::Object(default_layer);
        let resolved = QueueConfig::resolve(&default_layer, &Value::Object(own.clone())).unwrap();
        assert_eq!(resolved.result_ttl, Some(0));
        assert_eq!(resolved.wire().result_ttl, Some(0));
        put(&mut own, &json!({"result_ttl": null})).unwrap();
        let resolved = QueueConfig::resolve(&default_layer, &Value::Object(own)).unwrap();
        assert_eq!(resolved.result_ttl, Some(3600));
        assert_eq!(QueueConfig::default().result_ttl, None);
        let mut layer = Map::new();
        put(&mut layer, &json!({"result_ttl": 6e1})).unwrap();
        assert_eq!(layer["result_ttl"], json!(60));
    }

    #[test]
    fn rate_limit_forms_are_canonical() {
        for body in [
            json!({"rate_limit": {"limit": 10, "period": "PT1S"}}),
            json!({"rate_limit": {"rate": {"limit": 10, "period": "PT1S"}}}),
            json!({"rate_limit": {"rate": 10, "period": "second"}}),
            json!({"rate_limit": {"max_per_second": 10}}),
        ] {
            let mut layer = Map::new();
            put(&mut layer, &body).unwrap();
            assert_eq!(
                layer["rate_limit"],
                json!({"limit": 10, "period": "PT1S"}),
                "{body}"
            );
        }
        let mut layer = Map::new();
        put(&mut layer, &json!({"rate_limit": {"limit": 10}})).unwrap();
        assert!(QueueConfig::resolve(&json!({}), &Value::Object(layer)).is_err());
    }

    #[test]
    fn globs_and_access_rules() {
        assert!(glob("*", "anything"));
        assert!(glob("payment.*", "payment.charge"));
        assert!(!glob("payment.*", "payments.charge"));
        assert!(glob("*.send", "email.send"));
        assert!(glob("a*b*c", "a-x-b-y-c"));
        assert!(!glob("a*b*c", "a-x-c"));
        assert!(glob("exact", "exact"));
        let c = QueueConfig::resolve(
            &json!({}),
            &json!({"allowed_job_types": ["payment.*"], "producers": ["billing-*"]}),
        )
        .unwrap();
        assert!(c.allows_type("payment.refund"));
        assert!(!c.allows_type("email.send"));
        assert!(c.allows_producer(Some("billing-api")));
        assert!(!c.allows_producer(Some("web")));
        assert!(!c.allows_producer(None));
        assert!(QueueConfig::default().allows_producer(None));
    }

    #[test]
    fn job_retry_fields_win_over_the_queue_default() {
        let queue: Map<String, Value> =
            serde_json::from_value(json!({"max_attempts": 7, "jitter": false})).unwrap();
        let merged = layered_retry(&queue, Some(r#"{"max_attempts":2}"#)).unwrap();
        let v: Value = serde_json::from_str(&merged).unwrap();
        assert_eq!(v, json!({"max_attempts": 2, "jitter": false}));
        assert!(layered_retry(&Map::new(), Some("{}")).is_none());
    }
}
