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
use crate::wire::reader::Reader;
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

/// The server's default limits, for the validators' unit tests (the envelope's, a cron
/// template's, a workflow's).
#[cfg(test)]
pub(crate) const TEST_LIMITS: Limits = Limits {
    max_priority: 255,
    priority_aging_ms: None,
    default_timeout_ms: 1_800_000,
    hyphenated_types: false,
};

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
    let mut violations: Vec<Violation> = Vec::new();
    let mut r = Reader::new(&mut violations);
    let options = obj
        .get("options")
        .and_then(|raw| r.object("$.options", "'options'", raw));
    let src = Sources { top: obj, options };
    // Size limits come before field validation.
    let meta = meta(&src, tenant, &mut r)?;
    let identity = identity(obj, limits, &mut r);
    let queue = queue(&src, &mut r);
    let (priority, out_of_range) = priority(&src, limits, &mut r)?;
    let timing = timing(&src, limits, &mut r);
    let labels = labels(&src, &mut r);
    let (enqueue_ttl_secs, total_timeout_secs) = lifetime(&src, timing.timeout_ms, &mut r);
    result_ttl(obj, &mut r);
    let unique = unique(&src, &identity, &queue, meta.as_deref(), &mut r);
    refuse_what_was_found(violations, out_of_range, limits)?;
    let policies = policies(&src)?;
    // The job shows its rate limit as the server reads it, key resolved.
    let rate_limit_json = policies
        .rate_limit
        .as_ref()
        .map(|p| json::raw(p.to_json(&p.key_for(&queue)).to_string()));
    // A result_ttl is kept as the integer it is (`60.0` as `60`): the ACK statements and the
    // result reads compare its text.
    let result_ttl = obj
        .get("result_ttl")
        .and_then(json::as_integer)
        .map(|n| json::raw(n.to_string()));
    let extra = json::object_text(
        obj.iter()
            .filter(|(key, _)| !INPUT_ATTRIBUTES.contains(key) && !SYSTEM_ATTRIBUTES.contains(key))
            .map(|(key, raw)| match (key, &result_ttl) {
                ("result_ttl", Some(canonical)) => (key, &**canonical),
                _ => (key, raw),
            })
            .chain(rate_limit_json.as_deref().map(|raw| ("rate_limit", raw))),
    );
    Ok(NewJob {
        id: identity.id,
        id_supplied: identity.id_supplied,
        r#type: identity.job_type,
        queue,
        // Validated: present and an array.
        args: identity
            .args
            .map(|a| a.get().to_owned())
            .unwrap_or_else(|| "[]".to_owned()),
        meta: meta.unwrap_or_else(|| "{}".to_owned()),
        priority,
        priority_aging_ms: limits.priority_aging_ms,
        timeout_ms: timing.timeout_ms,
        timeout_explicit: timing.timeout_explicit,
        visibility_timeout_ms: timing.visibility_timeout_ms,
        scheduled_at: timing.scheduled_at,
        expires_at: timing.expires_at,
        pending: timing.pending,
        retry: policies.retry,
        retry_input: policies.retry_input,
        unique,
        tags: labels.tags,
        schema_uri: labels.schema_uri,
        enqueue_ttl_secs,
        total_timeout_secs,
        extra,
        rate_limit: policies.rate_limit,
        version: obj.get("version").map(|raw| raw.get().to_owned()),
        config_generation: -1,
        schema_warnings: Vec::new(),
        tenant_limits: None,
    })
}

/// The job's `meta`: the merged layers, with the caller's tenant in it, within the size limit
/// (a larger one is refused before anything else is looked at).
fn meta(
    src: &Sources<'_>,
    tenant: Option<&str>,
    r: &mut Reader<'_>,
) -> Result<Option<String>, Rejection> {
    let mut meta = merge_meta(src, r);
    if let Some(tenant) = tenant
        && let Some(text) = meta.take()
    {
        meta = Some(with_tenant(text, tenant, r));
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
    Ok(meta)
}

/// What the job is: its id (given or generated), type and arguments.
struct Identity<'a> {
    id: JobId,
    id_supplied: bool,
    /// Empty when invalid (a violation is recorded).
    job_type: String,
    args: Option<&'a RawValue>,
}

fn identity<'a>(obj: &Object<'a>, limits: &Limits, r: &mut Reader<'_>) -> Identity<'a> {
    if let Some(raw) = obj.get("specversion")
        && !matches!(
            json::decode::<String>(raw).as_deref(),
            Ok("1.0.0-rc.1" | "1.0")
        )
    {
        r.refuse(
            "$.specversion",
            "specversion must be \"1.0.0-rc.1\" (or \"1.0\")",
        );
    }
    let given = obj.get_raw("id").map(|raw| {
        let id = json::decode::<String>(raw)
            .ok()
            .and_then(|s| s.parse::<JobId>().ok());
        r.required(
            "$.id",
            id,
            "id must be a lowercase UUIDv7 string (e.g. 019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f), or be omitted",
        )
    });
    let job_type = r
        .required("$.type", obj.get_raw("type"), "'type' is required")
        .and_then(|raw| r.decode::<String>("$.type", "'type'", "a string", raw))
        .and_then(|t| {
            r.check("$.type", t, |t| is_valid_type(t, limits.hyphenated_types), |t| {
                format!(
                    "type {t:?} is invalid: use 1-255 characters of dot-separated lowercase segments, each starting with a letter (e.g. email.send)"
                )
            })
        });
    let args = r
        .required(
            "$.args",
            obj.get_raw("args"),
            "'args' is required (a JSON array, may be empty)",
        )
        .and_then(|raw| r.array("$.args", "'args'", raw));
    Identity {
        id: given.flatten().unwrap_or_else(JobId::generate),
        id_supplied: given.is_some(),
        job_type: job_type.unwrap_or_default(),
        args,
    }
}

/// The job's queue (`default` when not given); empty when invalid (a violation is recorded).
fn queue(src: &Sources<'_>, r: &mut Reader<'_>) -> String {
    let Some((path, raw)) = src.either("queue") else {
        return DEFAULT_QUEUE.to_owned();
    };
    r.decode::<String>(path.clone(), "queue", "a string", raw)
        .and_then(|q| {
            r.check(path, q, |q| is_valid_queue(q), |q| {
                format!(
                    "queue {q:?} is invalid: use 1-128 lowercase letters, digits, '-' and '.', starting with a letter or digit"
                )
            })
        })
        .unwrap_or_default()
}

/// The job's priority, and the violation of a priority out of range (which is answered on its
/// own, naming the bound, when nothing else is wrong).
fn priority(
    src: &Sources<'_>,
    limits: &Limits,
    r: &mut Reader<'_>,
) -> Result<(i32, Option<(Violation, i64)>), Rejection> {
    let Some((path, raw)) = src.either("priority") else {
        return Ok((DEFAULT_PRIORITY, None));
    };
    match parse_priority(&path, raw, limits.max_priority) {
        Ok(p) => Ok((p, None)),
        Err(Rejection::PriorityOutOfRange {
            violation, value, ..
        }) => Ok((DEFAULT_PRIORITY, Some((violation, value)))),
        Err(Rejection::Invalid(violations)) => {
            r.refuse_all(violations);
            Ok((DEFAULT_PRIORITY, None))
        }
        Err(other) => Err(other),
    }
}

/// When and for how long the job runs: its execution timeout, schedule, expiry, visibility
/// timeout, and whether it starts pending.
struct Timing {
    timeout_ms: i64,
    timeout_explicit: bool,
    scheduled_at: Option<ClientTime>,
    expires_at: Option<ClientTime>,
    visibility_timeout_ms: Option<i64>,
    pending: bool,
}

fn timing(src: &Sources<'_>, limits: &Limits, r: &mut Reader<'_>) -> Timing {
    let (timeout_ms, timeout_explicit) = timeout(src, limits, r);
    let scheduled_at = client_time(
        src,
        &[
            (At::Top, "scheduled_at"),
            (At::Top, "delay_until"),
            (At::Options, "scheduled_at"),
            (At::Options, "delay_until"),
        ],
        r,
    );
    let expires_at = client_time(
        src,
        &[(At::Top, "expires_at"), (At::Options, "expires_at")],
        r,
    );
    let visibility_timeout_ms = visibility_timeout(src, r);
    let pending = src.either("pending").is_some_and(|(path, raw)| {
        let pending = json::decode::<bool>(raw).ok();
        r.required(path, pending, "pending must be a boolean")
            .unwrap_or(false)
    });
    if pending && scheduled_at.as_ref().is_some_and(is_future) {
        r.refuse(
            "$.pending",
            "a pending job cannot also have a future scheduled_at (activate it, then it runs)",
        );
    }
    Timing {
        timeout_ms,
        timeout_explicit,
        scheduled_at,
        expires_at,
        visibility_timeout_ms,
        pending,
    }
}

/// How long the job may wait to start (`enqueue_ttl`) and live in all (`total_timeout`, at
/// least the execution timeout `timeout_ms`), in seconds.
fn lifetime(src: &Sources<'_>, timeout_ms: i64, r: &mut Reader<'_>) -> (Option<i32>, Option<i32>) {
    let enqueue_ttl_secs = positive_seconds(src, "enqueue_ttl", r);
    let total_timeout_secs = positive_seconds(src, "total_timeout", r);
    if let Some(total) = total_timeout_secs
        && i64::from(total) * 1_000 < timeout_ms
    {
        r.refuse(
            "$.total_timeout",
            "total_timeout must be >= the execution timeout",
        );
    }
    (enqueue_ttl_secs, total_timeout_secs)
}

/// Checks `result_ttl` (the results extension): seconds the result is served after the job
/// ends, 0 for a result that is not stored, -1 for as long as the job is kept. It stays a
/// top-level attribute of the job (written as an integer): the ACK and the result reads read
/// it there.
fn result_ttl(obj: &Object<'_>, r: &mut Reader<'_>) {
    if let Some(raw) = obj.get("result_ttl") {
        let valid = json::as_integer(raw).is_some_and(|n| (-1..=i64::from(i32::MAX)).contains(&n));
        if !valid {
            r.refuse(
                "$.result_ttl",
                "result_ttl must be an integer number of seconds: 0 (not stored), -1 (as long as the job is kept) or more",
            );
        }
    }
}

/// The execution timeout in milliseconds (the default when not given or 0), and whether the
/// job named one.
fn timeout(src: &Sources<'_>, limits: &Limits, r: &mut Reader<'_>) -> (i64, bool) {
    let Some((path, raw)) = src.first(&[
        (At::Top, "timeout_ms"),
        (At::Top, "timeout"),
        (At::Options, "timeout_ms"),
        (At::Options, "timeout"),
    ]) else {
        return (limits.default_timeout_ms, false);
    };
    let explicit = json::as_integer(raw) != Some(0);
    let per_unit = if path.ends_with("_ms") { 1 } else { 1_000 };
    let ms = match json::as_integer(raw) {
        Some(0) => limits.default_timeout_ms,
        Some(n) if n > 0 && n <= crate::wire::duration::MAX_MS as i64 / per_unit => n * per_unit,
        _ => {
            let unit = if per_unit == 1 {
                "milliseconds"
            } else {
                "seconds"
            };
            let name = path.trim_start_matches("$.").trim_start_matches("options.");
            let message =
                format!("{name} must be a non-negative integer ({unit}; 0 uses the default)");
            r.refuse(path, message);
            limits.default_timeout_ms
        }
    };
    (ms, explicit)
}

/// The visibility timeout in milliseconds: `visibility_timeout_ms`, or `visibility_timeout` in
/// seconds or as an ISO 8601 duration.
fn visibility_timeout(src: &Sources<'_>, r: &mut Reader<'_>) -> Option<i64> {
    let (path, raw) = src.first(&[
        (At::Top, "visibility_timeout_ms"),
        (At::Top, "visibility_timeout"),
        (At::Options, "visibility_timeout_ms"),
        (At::Options, "visibility_timeout"),
    ])?;
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
    r.required(
        path,
        ms,
        "visibility timeout must be positive: integer milliseconds (visibility_timeout_ms), integer seconds or an ISO 8601 duration (visibility_timeout)",
    )
}

/// What the job is labelled with: its tags and the URI of its schema.
struct Labels {
    tags: Option<Vec<String>>,
    schema_uri: Option<String>,
}

fn labels(src: &Sources<'_>, r: &mut Reader<'_>) -> Labels {
    let tags = src.either("tags").and_then(|(path, raw)| {
        let tags = json::decode::<Vec<String>>(raw).ok();
        r.required(path, tags, "tags must be an array of strings")
    });
    let schema_uri = src.either("schema").and_then(|(path, raw)| {
        let uri = json::decode::<String>(raw).ok().filter(|s| !s.is_empty());
        r.required(path, uri, "schema must be a non-empty string (a URI)")
    });
    Labels { tags, schema_uri }
}

/// The job's unique policy with its key, when it has one. The key is computed only from a
/// valid type, queue and args; the policy's own errors are reported whatever else is wrong.
fn unique(
    src: &Sources<'_>,
    identity: &Identity<'_>,
    queue: &str,
    meta: Option<&str>,
    r: &mut Reader<'_>,
) -> Option<UniqueSpec> {
    let (path, raw) = src.either("unique")?;
    let policy = match UniquePolicy::parse(raw, &path) {
        Ok(policy) => policy,
        Err(violations) => {
            r.refuse_all(violations);
            return None;
        }
    };
    let args = identity
        .args
        .filter(|_| !identity.job_type.is_empty() && !queue.is_empty())?;
    let meta_raw = json::raw(meta.unwrap_or("{}").to_owned());
    match policy.fingerprint(&identity.job_type, queue, args, &meta_raw, &path) {
        Ok(key) => Some(UniqueSpec {
            raw: raw.get().to_owned(),
            policy,
            key,
        }),
        Err(violation) => {
            r.refuse_all([violation]);
            None
        }
    }
}

/// The refusal for what the field readers found: a priority out of range alone is answered
/// as such (naming the bound), otherwise it leads the list of violations.
fn refuse_what_was_found(
    mut violations: Vec<Violation>,
    out_of_range: Option<(Violation, i64)>,
    limits: &Limits,
) -> Result<(), Rejection> {
    if let Some((violation, value)) = out_of_range {
        if violations.is_empty() {
            return Err(Rejection::PriorityOutOfRange {
                violation,
                value,
                max: limits.max_priority,
            });
        }
        violations.insert(0, violation);
    }
    if violations.is_empty() {
        Ok(())
    } else {
        Err(Rejection::Invalid(violations))
    }
}

/// The job's retry policy and rate limit, read once every other field is valid (each is
/// refused on its own).
struct Policies {
    retry: RetryPolicy,
    retry_input: Option<String>,
    rate_limit: Option<RatePolicy>,
}

fn policies(src: &Sources<'_>) -> Result<Policies, Rejection> {
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
    Ok(Policies {
        retry,
        retry_input: retry_raw.map(|(_, raw)| raw.get().to_owned()),
        rate_limit,
    })
}

/// Merges `options.metadata`, `options.meta` and top-level `meta` (later wins on a key).
/// Returns the compact object text, or `None` after recording a violation.
fn merge_meta(src: &Sources<'_>, r: &mut Reader<'_>) -> Option<String> {
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
        let parsed = r.object(path, "meta", raw)?;
        only_raw = Some(raw);
        layers.push((path.to_owned(), parsed));
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
pub(crate) fn with_tenant(meta: String, tenant: &str, r: &mut Reader<'_>) -> String {
    let raw = json::raw(meta);
    let Ok(obj) = Object::from_raw(&raw) else {
        return raw.get().to_owned();
    };
    let quoted = serde_json::Value::from(tenant).to_string();
    match obj.get("tenant_id") {
        Some(present) => {
            let path = "$.meta.tenant_id";
            if let Some(own) = r.decode::<String>(path, "meta.tenant_id", "a string", present) {
                r.check(path, own, |own| own == tenant, |own| {
                    format!(
                        "meta.tenant_id {} is not the tenant of the request ({quoted}, from X-OJS-Tenant or the API key)",
                        serde_json::Value::from(own.as_str())
                    )
                });
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
    r: &mut Reader<'_>,
) -> Option<ClientTime> {
    let (path, raw) = src.first(candidates)?;
    let Ok(text) = json::decode::<String>(raw) else {
        r.refuse(
            path,
            "expected an RFC 3339 timestamp string with a time zone (or +<duration>)",
        );
        return None;
    };
    match timestamp::parse_client(&text) {
        Ok(t) => Some(t),
        Err(e) => {
            r.refuse(path, e);
            None
        }
    }
}

fn positive_seconds(src: &Sources<'_>, name: &str, r: &mut Reader<'_>) -> Option<i32> {
    let (path, raw) = src.either(name)?;
    let seconds = json::as_integer(raw)
        .and_then(|n| i32::try_from(n).ok())
        .filter(|n| *n > 0);
    r.required(
        path,
        seconds,
        format!("{name} must be a positive integer number of seconds"),
    )
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

    const LIMITS: Limits = TEST_LIMITS;

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
    fn a_result_ttl_is_kept_as_an_integer() {
        for (sent, kept) in [
            ("0.0", r#"{"x":1,"result_ttl":0}"#),
            ("6e1", r#"{"x":1,"result_ttl":60}"#),
            ("-1", r#"{"x":1,"result_ttl":-1}"#),
            ("null", r#"{"x":1,"result_ttl":null}"#),
        ] {
            let job = parse_text(&format!(
                r#"{{"type":"t","args":[],"x":1,"result_ttl":{sent}}}"#
            ))
            .unwrap();
            assert_eq!(job.extra, kept, "{sent}");
        }
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
