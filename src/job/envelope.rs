//! Validation of an enqueue body (an [OJS job envelope]) into a [`NewJob`].
//!
//! The whole envelope is checked before anything is written, and every problem found is
//! reported at once. Optional attributes may sit at the top level or inside an `options` object
//! (the top level wins; see the HTTP binding's [options fields]), and some also under an alias
//! name: `retry_policy`, `timeout_ms`, `delay_until`, `visibility_timeout_ms`, and
//! `options.metadata` merged into `meta`. `type`, `args`, `id` and `specversion` are top-level
//! only. Unknown top-level attributes are kept verbatim, in order; values sent for
//! system-managed attributes are ignored.
//!
//! [OJS job envelope]: https://github.com/openjobspec/spec/blob/main/spec/ojs-core.md#5-job-envelope
//! [options fields]: https://github.com/openjobspec/spec/blob/main/spec/ojs-http-binding.md#options-fields

use chrono::Utc;
use serde_json::value::RawValue;

use super::retry::RetryPolicy;
use super::unique::UniquePolicy;
use super::{DEFAULT_PRIORITY, JobId, is_valid_queue, is_valid_type, priority_alias};
use crate::rate_limit::{self, RatePolicy};
use crate::wire::Violation;
use crate::wire::json::{self, Kind, Object};
use crate::wire::timestamp::{self, ClientTime};

/// The largest `meta` accepted, serialized.
pub const MAX_META_BYTES: usize = 64 * 1024;

/// The queue used when an envelope names none.
pub const DEFAULT_QUEUE: &str = "default";

/// Why an envelope was refused. The variants are in the order ojsd checks for them, and the
/// first that applies is the answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Rejection {
    /// A size limit was exceeded (413 `envelope_too_large`).
    TooLarge {
        field: &'static str,
        size: usize,
        max: usize,
    },
    /// Field validation failed (400 `invalid_request`).
    Invalid(Vec<Violation>),
    /// A priority outside 0..=max (400 `invalid_request`, with the range in the details).
    PriorityOutOfRange {
        violation: Violation,
        value: i64,
        max: i32,
    },
    /// The retry policy is invalid (422 `validation_error`).
    InvalidRetry(Vec<Violation>),
    /// The envelope asks for a feature this server does not offer (422 `unsupported`).
    Unsupported { path: String, message: String },
    /// `args` (or the `version` asked for) fail the job type's registered schema, in `strict`
    /// mode (400 `schema_validation`). Found by the broker, after the envelope is read.
    SchemaMismatch {
        /// `type@version` of the schema.
        schema: String,
        violations: Vec<Violation>,
    },
}

impl Rejection {
    /// The same refusal with its paths under `root` (`$.type` → `$.steps[1].type`): for an
    /// envelope validated inside a larger body (a cron template, a workflow item).
    pub fn rerooted(self, root: &str) -> Rejection {
        let move_path = |path: String| match path.strip_prefix('$') {
            Some(rest) => format!("{root}{rest}"),
            None => path,
        };
        let move_all = |v: Vec<Violation>| {
            v.into_iter()
                .map(|x| Violation::new(move_path(x.path), x.message))
                .collect()
        };
        match self {
            Rejection::Invalid(v) => Rejection::Invalid(move_all(v)),
            Rejection::InvalidRetry(v) => Rejection::InvalidRetry(move_all(v)),
            Rejection::PriorityOutOfRange {
                violation,
                value,
                max,
            } => Rejection::PriorityOutOfRange {
                violation: Violation::new(move_path(violation.path), violation.message),
                value,
                max,
            },
            Rejection::Unsupported { path, message } => Rejection::Unsupported {
                path: move_path(path),
                message,
            },
            Rejection::SchemaMismatch { schema, violations } => Rejection::SchemaMismatch {
                schema,
                violations: move_all(violations),
            },
            other @ Rejection::TooLarge { .. } => other,
        }
    }
}

/// Server settings that shape validation and defaults.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest accepted priority (lowest urgency); at least 255.
    pub max_priority: i32,
    /// Execution timeout used when the job names none, in milliseconds.
    pub default_timeout_ms: i64,
    /// Whether job types may contain hyphens (`OJS_ALLOW_HYPHENATED_TYPES`).
    pub hyphenated_types: bool,
    /// Priority aging interval given to new jobs, in milliseconds (`None`: no aging).
    pub priority_aging_ms: Option<i64>,
}

/// A validated job, ready to be written.
#[derive(Debug, Clone)]
pub struct NewJob {
    pub id: JobId,
    /// Whether the client chose the id (a clash is then the client's `duplicate`).
    pub id_supplied: bool,
    pub r#type: String,
    pub queue: String,
    /// Compact JSON array text.
    pub args: String,
    /// Compact JSON object text.
    pub meta: String,
    pub priority: i32,
    /// Priority aging interval (ms) the job is ordered with; `None`: no aging.
    pub priority_aging_ms: Option<i64>,
    pub timeout_ms: i64,
    /// Whether the envelope set the execution timeout (else a queue's `default_timeout` applies).
    pub timeout_explicit: bool,
    pub visibility_timeout_ms: Option<i64>,
    pub scheduled_at: Option<ClientTime>,
    pub expires_at: Option<ClientTime>,
    pub pending: bool,
    pub retry: RetryPolicy,
    /// The envelope's own `retry` object (compact JSON), layered over a queue's
    /// `default_retry`.
    pub retry_input: Option<String>,
    pub unique: Option<UniqueSpec>,
    pub tags: Option<Vec<String>>,
    pub schema_uri: Option<String>,
    pub enqueue_ttl_secs: Option<i32>,
    pub total_timeout_secs: Option<i32>,
    /// Unknown attributes as a compact JSON object text (and `rate_limit`, canonical).
    pub extra: String,
    /// The job's rate limit by key.
    pub rate_limit: Option<RatePolicy>,
    /// The top-level `version` attribute as sent (JSON text; also kept in `extra`): the
    /// registered schema the job's `args` are checked against.
    pub version: Option<String>,
    /// Generation of the queue configuration whose defaults were applied (`-1`: none yet;
    /// the broker applies them before writing).
    pub config_generation: i64,
    /// What the schema check found in `warn` mode (set by the broker).
    pub schema_warnings: Vec<String>,
    /// The limits of the job's tenant, from the configuration whose generation the job carries
    /// (set by the broker; `None`: no tenant, or one without limits).
    pub tenant_limits: Option<crate::tenant::Limits>,
}

impl NewJob {
    /// The job's tenant (`meta.tenant_id`), if it has one.
    pub fn tenant_id(&self) -> Option<String> {
        // Most jobs have none: no parse for them.
        if !self.meta.contains("\"tenant_id\"") {
            return None;
        }
        json::Object::parse(&self.meta)
            .ok()
            .and_then(|meta| crate::tenant::in_meta(&meta))
    }
}

/// A job's unique policy with its fingerprint.
#[derive(Debug, Clone)]
pub struct UniqueSpec {
    /// The policy as the client wrote it (echoed as `unique`).
    pub raw: String,
    pub policy: UniquePolicy,
    /// SHA-256 fingerprint of the policy's dimensions.
    pub key: String,
}

/// Top-level attributes the server interprets (besides `options`).
const INPUT_ATTRIBUTES: &[&str] = &[
    "specversion",
    "id",
    "type",
    "queue",
    "args",
    "meta",
    "priority",
    "timeout",
    "timeout_ms",
    "scheduled_at",
    "delay_until",
    "expires_at",
    "retry",
    "retry_policy",
    "unique",
    "tags",
    "schema",
    "visibility_timeout",
    "visibility_timeout_ms",
    "pending",
    "rate_limit",
    "total_timeout",
    "enqueue_ttl",
    "workflow",
    "options",
];

/// System-managed attributes: a client value is ignored, never stored.
const SYSTEM_ATTRIBUTES: &[&str] = &[
    "state",
    "attempt",
    "max_attempts",
    "created_at",
    "enqueued_at",
    "started_at",
    "completed_at",
    "cancelled_at",
    "discarded_at",
    "dead_lettered_at",
    "activated_at",
    "re_enqueued_at",
    "next_retry_at",
    "next_attempt_at",
    "retry_delay_ms",
    "worker_id",
    "visible_until",
    "result",
    "error",
    "errors",
    "unique_key",
    "original_queue",
    "workflow_id",
    "workflow_step",
    "parent_results",
    "deduplicated",
    "previous_state",
];

/// Where an attribute was found.
#[derive(Clone, Copy)]
enum At {
    Top,
    Options,
}

/// The two places an optional attribute may come from.
struct Sources<'a> {
    top: &'a Object<'a>,
    options: Option<Object<'a>>,
}

impl<'a> Sources<'a> {
    /// The first present (non-null) value among `candidates`, with its JSON path.
    fn first(&self, candidates: &[(At, &str)]) -> Option<(String, &'a RawValue)> {
        candidates.iter().find_map(|&(at, name)| {
            let (obj, prefix) = match at {
                At::Top => (Some(self.top), "$"),
                At::Options => (self.options.as_ref(), "$.options"),
            };
            obj.and_then(|o| o.get(name))
                .map(|raw| (format!("{prefix}.{name}"), raw))
        })
    }

    /// `name` at the top level, then inside `options`.
    fn either(&self, name: &str) -> Option<(String, &'a RawValue)> {
        self.first(&[(At::Top, name), (At::Options, name)])
    }
}

/// A priority value at `path`: an integer 0..=`max` or a conventional name (`critical` = 0 …
/// `bulk` = 4, any case). Out of range → [`Rejection::PriorityOutOfRange`] (naming the bound);
/// anything else → [`Rejection::Invalid`].
pub fn parse_priority(path: &str, raw: &RawValue, max: i32) -> Result<i32, Rejection> {
    let value = match Kind::of(raw) {
        Kind::String => json::decode::<String>(raw)
            .ok()
            .and_then(|s| priority_alias(&s))
            .map(i64::from),
        Kind::Number => json::as_integer(raw),
        _ => None,
    };
    let out_of_range = |message: String, value: i64| Rejection::PriorityOutOfRange {
        violation: Violation::new(path, message),
        value,
        max,
    };
    match value {
        Some(p) if p < 0 => Err(out_of_range("priority must be >= 0".to_owned(), p)),
        Some(p) if p > i64::from(max) => Err(out_of_range(
            format!("priority must be <= {max} (maximum supported priority)"),
            p,
        )),
        Some(p) => Ok(p as i32),
        None => Err(Rejection::Invalid(vec![Violation::new(
            path,
            format!(
                "priority must be an integer from 0 (most urgent) to {max}, or one of critical, high, normal, low, bulk"
            ),
        )])),
    }
}

/// Parses and validates one enqueue body (`obj` is the body's top-level object).
pub fn parse(obj: &Object<'_>, limits: &Limits) -> Result<NewJob, Rejection> {
    parse_for(obj, limits, None)
}

/// [`parse`] for a caller acting as `tenant` (`X-OJS-Tenant`, or its API key's tenant): the job
/// gets `meta.tenant_id` = `tenant` unless it has one, and one naming another tenant is refused
/// (`$.meta.tenant_id`). The tenant is in `meta` before anything reads it (a unique policy's
/// `meta_keys` may name it).
pub fn parse_for(
    obj: &Object<'_>,
    limits: &Limits,
    tenant: Option<&str>,
) -> Result<NewJob, Rejection> {
    let mut v: Vec<Violation> = Vec::new();

    let options = match obj.get("options") {
        None => None,
        Some(raw) => match Object::from_raw(raw) {
            Ok(o) => Some(o),
            Err(_) => {
                v.push(Violation::new(
                    "$.options",
                    format!(
                        "'options' must be an object, got {}",
                        Kind::of(raw).article_name()
                    ),
                ));
                None
            }
        },
    };
    let src = Sources { top: obj, options };

    // Size limits come before field validation.
    let mut meta = merge_meta(&src, &mut v);
    if let Some(tenant) = tenant
        && let Some(text) = meta.take()
    {
        meta = Some(with_tenant(text, tenant, &mut v));
    }
    if let Some(meta) = &meta
        && meta.len() > MAX_META_BYTES
    {
        return Err(Rejection::TooLarge {
            field: "meta",
            size: meta.len(),
            max: MAX_META_BYTES,
        });
    }

    if let Some(raw) = obj.get("specversion") {
        match json::decode::<String>(raw).as_deref() {
            Ok("1.0.0-rc.1" | "1.0") => {}
            _ => v.push(Violation::new(
                "$.specversion",
                "specversion must be \"1.0.0-rc.1\" (or \"1.0\")",
            )),
        }
    }

    let (id, id_supplied) = match obj.get_raw("id") {
        None => (JobId::generate(), false),
        Some(raw) => match json::decode::<String>(raw)
            .ok()
            .and_then(|s| s.parse::<JobId>().ok())
        {
            Some(id) => (id, true),
            None => {
                v.push(Violation::new(
                    "$.id",
                    "id must be a lowercase UUIDv7 string (e.g. 019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f), or be omitted",
                ));
                (JobId::generate(), true)
            }
        },
    };

    let job_type = match obj.get_raw("type") {
        None => {
            v.push(Violation::new("$.type", "'type' is required"));
            String::new()
        }
        Some(raw) => match json::decode::<String>(raw) {
            Ok(t) if is_valid_type(&t, limits.hyphenated_types) => t,
            Ok(t) => {
                v.push(Violation::new(
                    "$.type",
                    format!(
                        "type {t:?} is invalid: use 1-255 characters of dot-separated lowercase segments, each starting with a letter (e.g. email.send)"
                    ),
                ));
                String::new()
            }
            Err(_) => {
                v.push(Violation::new(
                    "$.type",
                    format!(
                        "'type' must be a string, got {}",
                        Kind::of(raw).article_name()
                    ),
                ));
                String::new()
            }
        },
    };

    let args = match obj.get_raw("args") {
        None => {
            v.push(Violation::new(
                "$.args",
                "'args' is required (a JSON array, may be empty)",
            ));
            None
        }
        Some(raw) if Kind::of(raw) == Kind::Array => Some(raw),
        Some(raw) => {
            v.push(Violation::new(
                "$.args",
                format!(
                    "'args' must be an array, got {}",
                    Kind::of(raw).article_name()
                ),
            ));
            None
        }
    };

    let queue = match src.either("queue") {
        None => DEFAULT_QUEUE.to_owned(),
        Some((path, raw)) => match json::decode::<String>(raw) {
            Ok(q) if is_valid_queue(&q) => q,
            Ok(q) => {
                v.push(Violation::new(
                    path,
                    format!(
                        "queue {q:?} is invalid: use 1-128 lowercase letters, digits, '-' and '.', starting with a letter or digit"
                    ),
                ));
                String::new()
            }
            Err(_) => {
                v.push(Violation::new(
                    path,
                    format!(
                        "queue must be a string, got {}",
                        Kind::of(raw).article_name()
                    ),
                ));
                String::new()
            }
        },
    };

    let mut priority_range: Option<(Violation, i64)> = None;
    let priority = match src.either("priority") {
        None => DEFAULT_PRIORITY,
        Some((path, raw)) => match parse_priority(&path, raw, limits.max_priority) {
            Ok(p) => p,
            Err(Rejection::PriorityOutOfRange {
                violation, value, ..
            }) => {
                priority_range = Some((violation, value));
                DEFAULT_PRIORITY
            }
            Err(Rejection::Invalid(mut violations)) => {
                v.append(&mut violations);
                DEFAULT_PRIORITY
            }
            Err(other) => return Err(other),
        },
    };

    let timeout_given = src.first(&[
        (At::Top, "timeout_ms"),
        (At::Top, "timeout"),
        (At::Options, "timeout_ms"),
        (At::Options, "timeout"),
    ]);
    let timeout_explicit = timeout_given
        .as_ref()
        .is_some_and(|(_, raw)| json::as_integer(raw) != Some(0));
    let timeout_ms = match timeout_given {
        None => limits.default_timeout_ms,
        Some((path, raw)) => {
            let per_unit = if path.ends_with("_ms") { 1 } else { 1_000 };
            match json::as_integer(raw) {
                Some(0) => limits.default_timeout_ms,
                Some(n) if n > 0 && n <= crate::wire::duration::MAX_MS as i64 / per_unit => {
                    n * per_unit
                }
                _ => {
                    v.push(Violation::new(
                        path.clone(),
                        format!(
                            "{} must be a non-negative integer ({}; 0 uses the default)",
                            path.trim_start_matches("$.").trim_start_matches("options."),
                            if per_unit == 1 {
                                "milliseconds"
                            } else {
                                "seconds"
                            }
                        ),
                    ));
                    limits.default_timeout_ms
                }
            }
        }
    };

    let scheduled_at = client_time(
        &src,
        &[
            (At::Top, "scheduled_at"),
            (At::Top, "delay_until"),
            (At::Options, "scheduled_at"),
            (At::Options, "delay_until"),
        ],
        &mut v,
    );
    let expires_at = client_time(
        &src,
        &[(At::Top, "expires_at"), (At::Options, "expires_at")],
        &mut v,
    );

    let visibility_timeout_ms = match src.first(&[
        (At::Top, "visibility_timeout_ms"),
        (At::Top, "visibility_timeout"),
        (At::Options, "visibility_timeout_ms"),
        (At::Options, "visibility_timeout"),
    ]) {
        None => None,
        Some((path, raw)) => {
            let ms = if path.ends_with("_ms") {
                json::as_integer(raw).filter(|n| *n > 0)
            } else if Kind::of(raw) == Kind::String {
                json::decode::<String>(raw)
                    .ok()
                    .and_then(|s| crate::wire::duration::parse_ms(&s).ok())
                    .and_then(|ms| i64::try_from(ms).ok())
                    .filter(|n| *n > 0)
            } else {
                json::as_integer(raw)
                    .filter(|n| *n > 0 && *n <= crate::wire::duration::MAX_MS as i64 / 1_000)
                    .map(|s| s * 1_000)
            };
            if ms.is_none() {
                v.push(Violation::new(
                    path,
                    "visibility timeout must be positive: integer milliseconds (visibility_timeout_ms), integer seconds or an ISO 8601 duration (visibility_timeout)",
                ));
            }
            ms
        }
    };

    let pending = match src.either("pending") {
        None => false,
        Some((path, raw)) => match json::decode::<bool>(raw) {
            Ok(b) => b,
            Err(_) => {
                v.push(Violation::new(path, "pending must be a boolean"));
                false
            }
        },
    };
    if pending && scheduled_at.as_ref().is_some_and(is_future) {
        v.push(Violation::new(
            "$.pending",
            "a pending job cannot also have a future scheduled_at (activate it, then it runs)",
        ));
    }

    let tags = match src.either("tags") {
        None => None,
        Some((path, raw)) => match json::decode::<Vec<String>>(raw) {
            Ok(tags) => Some(tags),
            Err(_) => {
                v.push(Violation::new(path, "tags must be an array of strings"));
                None
            }
        },
    };

    let schema_uri = match src.either("schema") {
        None => None,
        Some((path, raw)) => match json::decode::<String>(raw) {
            Ok(s) if !s.is_empty() => Some(s),
            _ => {
                v.push(Violation::new(
                    path,
                    "schema must be a non-empty string (a URI)",
                ));
                None
            }
        },
    };

    let enqueue_ttl_secs = positive_seconds(&src, "enqueue_ttl", &mut v);
    let total_timeout_secs = positive_seconds(&src, "total_timeout", &mut v);
    if let Some(total) = total_timeout_secs
        && i64::from(total) * 1_000 < timeout_ms
    {
        v.push(Violation::new(
            "$.total_timeout",
            "total_timeout must be >= the execution timeout",
        ));
    }

    let unique = match (src.either("unique"), args) {
        (Some((path, raw)), Some(args)) if !job_type.is_empty() && !queue.is_empty() => {
            match UniquePolicy::parse(raw, &path) {
                Ok(policy) => {
                    let meta_raw = json::raw(meta.clone().unwrap_or_else(|| "{}".to_owned()));
                    match policy.fingerprint(&job_type, &queue, args, &meta_raw, &path) {
                        Ok(key) => Some(UniqueSpec {
                            raw: raw.get().to_owned(),
                            policy,
                            key,
                        }),
                        Err(violation) => {
                            v.push(violation);
                            None
                        }
                    }
                }
                Err(mut violations) => {
                    v.append(&mut violations);
                    None
                }
            }
        }
        (Some((path, raw)), _) => {
            // Still report policy errors when type/queue/args are broken too.
            if let Err(mut violations) = UniquePolicy::parse(raw, &path) {
                v.append(&mut violations);
            }
            None
        }
        (None, _) => None,
    };

    if let Some((violation, value)) = priority_range {
        if v.is_empty() {
            return Err(Rejection::PriorityOutOfRange {
                violation,
                value,
                max: limits.max_priority,
            });
        }
        v.insert(0, violation);
    }
    if !v.is_empty() {
        return Err(Rejection::Invalid(v));
    }

    let retry_raw = src.first(&[
        (At::Top, "retry"),
        (At::Top, "retry_policy"),
        (At::Options, "retry"),
        (At::Options, "retry_policy"),
    ]);
    let retry = match &retry_raw {
        None => RetryPolicy::default(),
        Some((path, raw)) => RetryPolicy::parse(raw, path).map_err(Rejection::InvalidRetry)?,
    };
    let retry_input = retry_raw.map(|(_, raw)| raw.get().to_owned());

    let rate_limit = match src.either("rate_limit") {
        None => None,
        Some((path, raw)) => Some(rate_limit::parse(raw, &path).map_err(Rejection::Invalid)?),
    };
    // A single PUSH takes an embedded chain at its top level (`workflow::embedded_chain`),
    // before the envelope is parsed; anywhere else it is refused.
    if let Some((path, _)) = src.either("workflow") {
        return Err(Rejection::Unsupported {
            message: "an embedded workflow is accepted only at the top level of POST /ojs/v1/jobs; create workflows with POST /ojs/v1/workflows"
                .to_owned(),
            path,
        });
    }

    // The job shows its rate limit as the server reads it, key resolved.
    let rate_limit_json = rate_limit
        .as_ref()
        .map(|p| json::raw(p.to_json(&p.key_for(&queue)).to_string()));
    let extra = json::object_text(
        obj.iter()
            .filter(|(key, _)| !INPUT_ATTRIBUTES.contains(key) && !SYSTEM_ATTRIBUTES.contains(key))
            .chain(rate_limit_json.as_deref().map(|raw| ("rate_limit", raw))),
    );

    Ok(NewJob {
        id,
        id_supplied,
        r#type: job_type,
        queue,
        // Validated above: present and an array.
        args: args
            .map(|a| a.get().to_owned())
            .unwrap_or_else(|| "[]".to_owned()),
        meta: meta.unwrap_or_else(|| "{}".to_owned()),
        priority,
        priority_aging_ms: limits.priority_aging_ms,
        timeout_ms,
        timeout_explicit,
        visibility_timeout_ms,
        scheduled_at,
        expires_at,
        pending,
        retry,
        retry_input,
        unique,
        tags,
        schema_uri,
        enqueue_ttl_secs,
        total_timeout_secs,
        extra,
        rate_limit,
        version: obj.get("version").map(|raw| raw.get().to_owned()),
        config_generation: -1,
        schema_warnings: Vec::new(),
        tenant_limits: None,
    })
}

/// Merges `options.metadata`, `options.meta` and top-level `meta` (later wins on a key).
/// Returns the compact object text, or `None` after recording a violation.
fn merge_meta(src: &Sources<'_>, v: &mut Vec<Violation>) -> Option<String> {
    let mut layers: Vec<(String, Object<'_>)> = Vec::new();
    let candidates = [
        (src.options.as_ref(), "$.options.metadata", "metadata"),
        (src.options.as_ref(), "$.options.meta", "meta"),
        (Some(src.top), "$.meta", "meta"),
    ];
    let mut only_raw: Option<&RawValue> = None;
    for (obj, path, name) in candidates {
        let Some(raw) = obj.and_then(|o| o.get(name)) else {
            continue;
        };
        match Object::from_raw(raw) {
            Ok(parsed) => {
                only_raw = Some(raw);
                layers.push((path.to_owned(), parsed));
            }
            Err(_) => {
                v.push(Violation::new(
                    path,
                    format!(
                        "meta must be an object, got {}",
                        Kind::of(raw).article_name()
                    ),
                ));
                return None;
            }
        }
    }
    match layers.len() {
        0 => Some("{}".to_owned()),
        // The common case: one meta object, kept byte for byte.
        1 => only_raw.map(|raw| raw.get().to_owned()),
        _ => {
            let mut merged: indexmap::IndexMap<&str, &RawValue> = indexmap::IndexMap::new();
            for (_, layer) in &layers {
                for (key, value) in layer.iter() {
                    merged.insert(key, value);
                }
            }
            Some(json::object_text(merged))
        }
    }
}

/// `meta` (an object's text) with `tenant_id` = `tenant`: appended when absent (the rest kept
/// byte for byte), checked when present.
pub(crate) fn with_tenant(meta: String, tenant: &str, v: &mut Vec<Violation>) -> String {
    let raw = json::raw(meta);
    let Ok(obj) = Object::from_raw(&raw) else {
        return raw.get().to_owned();
    };
    let quoted = serde_json::Value::from(tenant).to_string();
    match obj.get("tenant_id") {
        Some(present) => {
            match json::decode::<String>(present) {
                Ok(own) if own == tenant => {}
                Ok(own) => v.push(Violation::new(
                    "$.meta.tenant_id",
                    format!(
                        "meta.tenant_id {} is not the tenant of the request ({quoted}, from X-OJS-Tenant or the API key)",
                        serde_json::Value::from(own)
                    ),
                )),
                Err(_) => v.push(Violation::new(
                    "$.meta.tenant_id",
                    format!(
                        "meta.tenant_id must be a string, got {}",
                        Kind::of(present).article_name()
                    ),
                )),
            }
            raw.get().to_owned()
        }
        // `"tenant_id": null` counts as absent, and is replaced.
        None if obj.iter().any(|(key, _)| key == "tenant_id") => {
            let tenant_raw = json::raw(quoted);
            json::object_text(obj.iter().map(|(key, value)| match key {
                "tenant_id" => (key, &*tenant_raw),
                _ => (key, value),
            }))
        }
        None if obj.iter().next().is_none() => format!("{{\"tenant_id\":{quoted}}}"),
        None => {
            let text = raw.get().trim_end();
            let body = text.strip_suffix('}').unwrap_or(text);
            format!("{body},\"tenant_id\":{quoted}}}")
        }
    }
}

fn client_time(
    src: &Sources<'_>,
    candidates: &[(At, &str)],
    v: &mut Vec<Violation>,
) -> Option<ClientTime> {
    let (path, raw) = src.first(candidates)?;
    match json::decode::<String>(raw) {
        Ok(s) => match timestamp::parse_client(&s) {
            Ok(t) => Some(t),
            Err(e) => {
                v.push(Violation::new(path, e));
                None
            }
        },
        Err(_) => {
            v.push(Violation::new(
                path,
                "expected an RFC 3339 timestamp string with a time zone (or +<duration>)",
            ));
            None
        }
    }
}

fn positive_seconds(src: &Sources<'_>, name: &str, v: &mut Vec<Violation>) -> Option<i32> {
    let (path, raw) = src.either(name)?;
    match json::as_integer(raw).and_then(|n| i32::try_from(n).ok()) {
        Some(n) if n > 0 => Some(n),
        _ => {
            v.push(Violation::new(
                path,
                format!("{name} must be a positive integer number of seconds"),
            ));
            None
        }
    }
}

fn is_future(t: &ClientTime) -> bool {
    match t {
        ClientTime::Absolute { at, .. } => *at > Utc::now(),
        ClientTime::Relative { after_ms } => *after_ms > 0,
    }
}

/// A job parsed from envelope `text` with the default limits (the tests of other modules).
#[cfg(test)]
pub(crate) fn parse_for_test(text: &str) -> NewJob {
    let limits = Limits {
        max_priority: 255,
        priority_aging_ms: None,
        default_timeout_ms: 1_000,
        hyphenated_types: false,
    };
    parse(&Object::parse(text).expect("a JSON object"), &limits).expect("a valid envelope")
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        max_priority: 255,
        priority_aging_ms: None,
        default_timeout_ms: 1_800_000,
        hyphenated_types: false,
    };

    fn parse_text(text: &str) -> Result<NewJob, Rejection> {
        let obj = Object::parse(text).unwrap();
        parse(&obj, &LIMITS)
    }

    fn invalid_paths(text: &str) -> Vec<String> {
        match parse_text(text) {
            Err(Rejection::Invalid(v)) => v.into_iter().map(|v| v.path).collect(),
            other => panic!("expected Invalid for {text}, got {other:?}"),
        }
    }

    #[test]
    fn a_tenant_is_put_into_meta_or_must_match_it() {
        let as_tenant = |text: &str| {
            let obj = Object::parse(text).unwrap();
            parse_for(&obj, &LIMITS, Some("acme-corp"))
        };
        let meta = |text: &str| as_tenant(text).unwrap().meta;
        assert_eq!(
            meta(r#"{"type":"a","args":[]}"#),
            r#"{"tenant_id":"acme-corp"}"#
        );
        assert_eq!(
            meta(r#"{"type":"a","args":[],"meta":{ }}"#),
            r#"{"tenant_id":"acme-corp"}"#
        );
        // The client's bytes are kept.
        assert_eq!(
            meta(r#"{"type":"a","args":[],"meta":{"k": [1, 2] }}"#),
            r#"{"k": [1, 2] ,"tenant_id":"acme-corp"}"#
        );
        assert_eq!(
            meta(r#"{"type":"a","args":[],"meta":{"tenant_id":"acme-corp"}}"#),
            r#"{"tenant_id":"acme-corp"}"#
        );
        // Merged from options.metadata too.
        assert_eq!(
            meta(r#"{"type":"a","args":[],"options":{"metadata":{"tenant_id":"acme-corp"}}}"#),
            r#"{"tenant_id":"acme-corp"}"#
        );
        assert_eq!(
            meta(r#"{"type":"a","args":[],"meta":{"tenant_id":null,"b":1}}"#),
            r#"{"tenant_id":"acme-corp","b":1}"#
        );
        for other in [r#""beta""#, "7", "{}"] {
            let text = format!(r#"{{"type":"a","args":[],"meta":{{"tenant_id":{other}}}}}"#);
            match as_tenant(&text) {
                Err(Rejection::Invalid(v)) => assert_eq!(v[0].path, "$.meta.tenant_id", "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
        // A unique policy sees the tenant.
        let job = as_tenant(
            r#"{"type":"a","args":[],"unique":{"keys":["type","meta"],"meta_keys":["tenant_id"]}}"#,
        )
        .unwrap();
        let other = parse_for(
            &Object::parse(
                r#"{"type":"a","args":[],"unique":{"keys":["type","meta"],"meta_keys":["tenant_id"]}}"#,
            )
            .unwrap(),
            &LIMITS,
            Some("beta"),
        )
        .unwrap();
        assert_ne!(job.unique.unwrap().key, other.unique.unwrap().key);
    }

    #[test]
    fn minimal_job_gets_defaults() {
        let job = parse_text(r#"{"type":"email.send","args":["a@b.c"]}"#).unwrap();
        assert_eq!(job.queue, "default");
        assert_eq!(job.priority, 2);
        assert_eq!(job.meta, "{}");
        assert_eq!(job.args, r#"["a@b.c"]"#);
        assert_eq!(job.timeout_ms, 1_800_000);
        assert_eq!(job.extra, "{}");
        assert!(!job.id_supplied);
        assert_eq!(job.retry, RetryPolicy::default());
    }

    #[test]
    fn options_are_read_and_top_level_wins() {
        let job = parse_text(
            r#"{"type":"t","args":[],"priority":1,"options":{"priority":7,"queue":"q","timeout_ms":5000,"delay_until":"2020-01-01T00:00:00Z","tags":["x"]}}"#,
        )
        .unwrap();
        assert_eq!(job.priority, 1);
        assert_eq!(job.queue, "q");
        assert_eq!(job.timeout_ms, 5_000);
        assert_eq!(job.tags, Some(vec!["x".to_owned()]));
        assert_eq!(
            job.scheduled_at.unwrap().text(),
            Some("2020-01-01T00:00:00Z")
        );
    }

    #[test]
    fn timeout_units_and_aliases() {
        assert_eq!(
            parse_text(r#"{"type":"t","args":[],"timeout":30}"#)
                .unwrap()
                .timeout_ms,
            30_000
        );
        assert_eq!(
            parse_text(r#"{"type":"t","args":[],"timeout":0}"#)
                .unwrap()
                .timeout_ms,
            1_800_000
        );
        assert_eq!(
            parse_text(r#"{"type":"t","args":[],"timeout":30,"timeout_ms":1500}"#)
                .unwrap()
                .timeout_ms,
            1_500
        );
        assert_eq!(
            invalid_paths(r#"{"type":"t","args":[],"timeout":-1}"#),
            ["$.timeout"]
        );
        assert_eq!(
            invalid_paths(r#"{"type":"t","args":[],"timeout":"1m"}"#),
            ["$.timeout"]
        );
    }

    #[test]
    fn meta_layers_merge_per_key() {
        let job = parse_text(
            r#"{"type":"t","args":[],"meta":{"a":1,"c":3},"options":{"metadata":{"a":0,"b":2},"meta":{"b":20}}}"#,
        )
        .unwrap();
        assert_eq!(job.meta, r#"{"a":1,"b":20,"c":3}"#);
        let verbatim = parse_text(r#"{"type":"t","args":[],"meta":{"z":1.50,"a":[]}}"#).unwrap();
        assert_eq!(verbatim.meta, r#"{"z":1.50,"a":[]}"#);
        let null_meta = parse_text(r#"{"type":"t","args":[],"meta":null}"#).unwrap();
        assert_eq!(null_meta.meta, "{}");
    }

    #[test]
    fn unknown_attributes_are_kept_in_order_and_system_ones_ignored() {
        let job = parse_text(
            r#"{"x_b":1,"type":"t","state":"completed","args":[],"x_a":{"n":true},"attempt":9}"#,
        )
        .unwrap();
        assert_eq!(job.extra, r#"{"x_b":1,"x_a":{"n":true}}"#);
    }

    #[test]
    fn collects_every_violation() {
        let paths = invalid_paths(
            r#"{"type":"Email.Send","args":{},"options":{"queue":"Default"},"id":"nope"}"#,
        );
        assert_eq!(paths, ["$.id", "$.type", "$.args", "$.options.queue"]);
        assert_eq!(invalid_paths(r#"{"args":[]}"#), ["$.type"]);
        assert_eq!(invalid_paths(r#"{"type":"t"}"#), ["$.args"]);
        assert_eq!(invalid_paths(r#"{"type":"t","args":null}"#), ["$.args"]);
        assert_eq!(
            invalid_paths(r#"{"type":"t","args":[],"options":[]}"#),
            ["$.options"]
        );
        assert_eq!(
            invalid_paths(r#"{"type":"t","args":[],"specversion":"2.0"}"#),
            ["$.specversion"]
        );
        assert_eq!(invalid_paths(r#"{"type":"t","args":[],"id":""}"#), ["$.id"]);
        assert_eq!(
            invalid_paths(r#"{"type":"t","args":[],"id":"019461A8-1A2B-7C3D-8E4F-5A6B7C8D9E0F"}"#),
            ["$.id"]
        );
    }

    #[test]
    fn priority_rules() {
        let p = |text: &str| parse_text(text).map(|j| j.priority);
        assert_eq!(p(r#"{"type":"t","args":[],"priority":0}"#).unwrap(), 0);
        assert_eq!(p(r#"{"type":"t","args":[],"priority":255}"#).unwrap(), 255);
        assert_eq!(p(r#"{"type":"t","args":[],"priority":"HIGH"}"#).unwrap(), 1);
        assert_eq!(
            p(r#"{"type":"t","args":[],"options":{"priority":"bulk"}}"#).unwrap(),
            4
        );
        match p(r#"{"type":"t","args":[],"priority":-1}"#) {
            Err(Rejection::PriorityOutOfRange {
                violation, value, ..
            }) => {
                assert_eq!(violation.message, "priority must be >= 0");
                assert_eq!(value, -1);
            }
            other => panic!("{other:?}"),
        }
        match p(r#"{"type":"t","args":[],"priority":256}"#) {
            Err(Rejection::PriorityOutOfRange { violation, max, .. }) => {
                assert_eq!(
                    violation.message,
                    "priority must be <= 255 (maximum supported priority)"
                );
                assert_eq!(max, 255);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            invalid_paths(r#"{"type":"t","args":[],"priority":1.5}"#),
            ["$.priority"]
        );
        assert_eq!(
            invalid_paths(r#"{"type":"t","args":[],"priority":"urgent"}"#),
            ["$.priority"]
        );
        // Out of range plus another problem: one 400 listing both.
        assert_eq!(
            invalid_paths(r#"{"type":"T","args":[],"priority":-5}"#),
            ["$.priority", "$.type"]
        );
    }

    #[test]
    fn timestamps_need_a_zone() {
        assert_eq!(
            invalid_paths(r#"{"type":"t","args":[],"scheduled_at":"2026-01-01T00:00:00"}"#),
            ["$.scheduled_at"]
        );
        assert_eq!(
            invalid_paths(r#"{"type":"t","args":[],"expires_at":12}"#),
            ["$.expires_at"]
        );
        let job = parse_text(r#"{"type":"t","args":[],"scheduled_at":"+PT2S"}"#).unwrap();
        assert_eq!(
            job.scheduled_at,
            Some(ClientTime::Relative { after_ms: 2_000 })
        );
    }

    #[test]
    fn pending_cannot_be_scheduled_in_the_future() {
        assert_eq!(
            invalid_paths(
                r#"{"type":"t","args":[],"pending":true,"scheduled_at":"2999-01-01T00:00:00Z"}"#
            ),
            ["$.pending"]
        );
        assert!(
            parse_text(
                r#"{"type":"t","args":[],"pending":true,"scheduled_at":"2000-01-01T00:00:00Z"}"#
            )
            .unwrap()
            .pending
        );
        assert_eq!(
            invalid_paths(r#"{"type":"t","args":[],"pending":"yes"}"#),
            ["$.pending"]
        );
    }

    #[test]
    fn visibility_timeout_forms() {
        let vt = |text: &str| parse_text(text).unwrap().visibility_timeout_ms;
        assert_eq!(
            vt(r#"{"type":"t","args":[],"visibility_timeout_ms":1500}"#),
            Some(1_500)
        );
        assert_eq!(
            vt(r#"{"type":"t","args":[],"visibility_timeout":30}"#),
            Some(30_000)
        );
        assert_eq!(
            vt(r#"{"type":"t","args":[],"visibility_timeout":"PT1M"}"#),
            Some(60_000)
        );
        assert_eq!(
            invalid_paths(r#"{"type":"t","args":[],"visibility_timeout_ms":0}"#),
            ["$.visibility_timeout_ms"]
        );
    }

    #[test]
    fn retry_errors_are_422_after_field_errors() {
        assert!(matches!(
            parse_text(r#"{"type":"t","args":[],"retry":{"max_attempts":-1}}"#),
            Err(Rejection::InvalidRetry(_))
        ));
        assert!(matches!(
            parse_text(
                r#"{"type":"t","args":[],"options":{"retry_policy":{"backoff_coefficient":0}}}"#
            ),
            Err(Rejection::InvalidRetry(_))
        ));
        // A field error wins over a retry error.
        assert!(matches!(
            parse_text(r#"{"type":"T","args":[],"retry":{"max_attempts":-1}}"#),
            Err(Rejection::Invalid(_))
        ));
        let job =
            parse_text(r#"{"type":"t","args":[],"options":{"retry":{"max_attempts":5}}}"#).unwrap();
        assert_eq!(job.retry.max_attempts, 5);
    }

    #[test]
    fn meta_over_64_kib_is_too_large() {
        let big = format!(
            r#"{{"type":"t","args":[],"meta":{{"k":"{}"}}}}"#,
            "x".repeat(MAX_META_BYTES)
        );
        assert!(matches!(
            parse_text(&big),
            Err(Rejection::TooLarge { field: "meta", .. })
        ));
    }

    #[test]
    fn unique_policy_is_validated_and_fingerprinted() {
        let job = parse_text(
            r#"{"type":"t","args":[1],"unique":{"keys":["type","args"],"period":"PT1H"}}"#,
        )
        .unwrap();
        let unique = job.unique.unwrap();
        assert_eq!(unique.key.len(), 64);
        assert_eq!(unique.raw, r#"{"keys":["type","args"],"period":"PT1H"}"#);
        assert_eq!(
            invalid_paths(r#"{"type":"t","args":[],"unique":{"on_conflict":"merge"}}"#),
            ["$.unique.on_conflict"]
        );
    }

    #[test]
    fn unsupported_features_are_refused_not_ignored() {
        assert!(matches!(
            parse_text(r#"{"type":"t","args":[],"workflow":{"chain":[]}}"#),
            Err(Rejection::Unsupported { .. })
        ));
    }

    #[test]
    fn ttl_and_total_timeout() {
        let job = parse_text(
            r#"{"type":"t","args":[],"enqueue_ttl":60,"total_timeout":3600,"timeout":60}"#,
        )
        .unwrap();
        assert_eq!(
            (job.enqueue_ttl_secs, job.total_timeout_secs),
            (Some(60), Some(3600))
        );
        assert_eq!(
            invalid_paths(r#"{"type":"t","args":[],"total_timeout":10,"timeout":60}"#),
            ["$.total_timeout"]
        );
        assert_eq!(
            invalid_paths(r#"{"type":"t","args":[],"enqueue_ttl":0}"#),
            ["$.enqueue_ttl"]
        );
    }
}
