//! Extractors whose rejections are OJS errors.

use std::time::{Duration, SystemTime};

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::HeaderMap;
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use http_body_util::BodyExt;
use serde_json::value::RawValue;
use utoipa::IntoParams;

use super::AppState;
use super::error::ApiError;
use crate::broker::{Completed, PushContext};
use crate::job::id_schema::{QueueName, WorkerId};
use crate::job::{Job, JobId, is_valid_queue};
use crate::telemetry::traces::{JobTracer, Operation, Traceparent};
use crate::wire::Reader;
use crate::wire::json::{self, Object};

/// Read limit of a route's body, in bytes (set per route with an `Extension`).
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit(pub usize);

/// A JSON request body: content type checked, size limited, nesting depth checked, and
/// insignificant whitespace removed. Parse it with [`JsonBody::object`].
#[derive(Debug)]
pub struct JsonBody {
    text: String,
    /// The body as received, kept only when compaction changed it (for error positions).
    original: Option<axum::body::Bytes>,
}

impl JsonBody {
    /// The compact body text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The body as a JSON object (400 `invalid_payload` if it is not one).
    pub fn object(&self) -> Result<Fields<'_>, ApiError> {
        Object::parse(&self.text)
            .map(|obj| Fields { obj })
            .map_err(|e| {
                // Positions in the compact text would mislead; re-parse what was sent.
                let e = match &self.original {
                    Some(original) => serde_json::from_slice::<serde::de::IgnoredAny>(original)
                        .err()
                        .filter(|original_error| original_error.classify() == e.classify())
                        .unwrap_or(e),
                    None => e,
                };
                let what = if e.is_data() {
                    "The request body must be a JSON object"
                } else {
                    "The request body is not valid JSON"
                };
                ApiError::invalid_payload(format!("{what}: {e}."))
            })
    }
}

impl FromRequest<AppState> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        read_json(req, state)
            .await?
            .ok_or_else(|| ApiError::invalid_payload("A request body is required: a JSON object."))
    }
}

/// A JSON body on an endpoint where it may be left out: no body (or only whitespace) is `None`,
/// anything else must be valid like a [`JsonBody`].
#[derive(Debug)]
pub struct OptionalJsonBody(pub Option<JsonBody>);

impl FromRequest<AppState> for OptionalJsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        read_json(req, state).await.map(OptionalJsonBody)
    }
}

/// Reads a body of at most `limit` bytes, waiting at most `idle` for each part of it: a body
/// that stops arriving is answered 408 rather than holding the request until it times out.
async fn read_body(req: Request, limit: usize, idle: Duration) -> Result<Bytes, ApiError> {
    let mut body = http_body_util::Limited::new(req.into_body(), limit);
    let mut chunks: Vec<Bytes> = Vec::new();
    loop {
        let frame = match tokio::time::timeout(idle, body.frame()).await {
            Err(_) => {
                return Err(ApiError::request_timeout(format!(
                    "The request body stopped arriving: nothing came for {} s.",
                    idle.as_secs()
                )));
            }
            Ok(None) => break,
            Ok(Some(Ok(frame))) => frame,
            Ok(Some(Err(e))) if e.is::<http_body_util::LengthLimitError>() => {
                return Err(ApiError::too_large(None, None, limit));
            }
            Ok(Some(Err(e))) => {
                return Err(ApiError::invalid_payload(format!(
                    "The request body could not be read: {e}."
                )));
            }
        };
        if let Ok(data) = frame.into_data() {
            chunks.push(data);
        }
    }
    Ok(match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.pop().unwrap_or_default(),
        _ => chunks.concat().into(),
    })
}

/// Reads a JSON body (`None` when there is none).
async fn read_json(req: Request, state: &AppState) -> Result<Option<JsonBody>, ApiError> {
    {
        // A body is JSON only when its Content-Type says so: a browser sends a cross-site form
        // (or a body with no type) without asking first, and it must not be read as a request.
        let declared = req.headers().get(CONTENT_TYPE).cloned();
        if let Some(value) = &declared {
            let media_type = value
                .to_str()
                .unwrap_or_default()
                .split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase();
            if media_type != "application/json" && media_type != "application/openjobspec+json" {
                return Err(ApiError::unsupported_media_type(format!(
                    "Content-Type '{}' is not supported; send application/json or application/openjobspec+json.",
                    value.to_str().unwrap_or("?")
                )));
            }
        }
        let limit = req
            .extensions()
            .get::<BodyLimit>()
            .map_or(state.settings().max_request_bytes, |l| l.0);
        let bytes = read_body(req, limit, state.settings().body_idle_timeout).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        if declared.is_none() {
            return Err(ApiError::unsupported_media_type(
                "A request body needs Content-Type: application/json (or application/openjobspec+json).",
            ));
        }
        let compact = json::compact(&bytes, json::MAX_DEPTH).map_err(|e| {
            let path = e.offset().map(|at| json::path_at(&bytes, at));
            let message = e.describe(path.as_deref().unwrap_or("The request body"));
            match path {
                Some(path) => ApiError::invalid_field(&path, message),
                None => ApiError::invalid_request(message),
            }
        })?;
        let changed = matches!(compact, std::borrow::Cow::Owned(_));
        let text = String::from_utf8(compact.into_owned())
            .map_err(|_| ApiError::invalid_payload("The request body is not valid UTF-8."))?;
        Ok(Some(JsonBody {
            text,
            original: changed.then_some(bytes),
        }))
    }
}

/// Typed access to the members of a request object, with field-named 400 errors: the
/// fail-first view of [`Reader`], which reads the same fields with the same messages but
/// collects every problem.
pub struct Fields<'a> {
    obj: Object<'a>,
}

/// What `read` gives, or the first problem it found as a 400.
fn fail_first<T>(read: impl FnOnce(&mut Reader<'_>) -> Option<T>) -> Result<T, ApiError> {
    let mut violations = Vec::new();
    match read(&mut Reader::new(&mut violations)) {
        Some(value) => Ok(value),
        None => Err(violations.into_iter().next().map_or_else(
            || ApiError::invalid_field("$", "the request is invalid"),
            |v| ApiError::invalid_field(&v.path, v.message),
        )),
    }
}

impl<'a> Fields<'a> {
    /// Typed access to an object nested in a request (e.g. `{"worker": {...}}`).
    pub fn from_object(obj: Object<'a>) -> Fields<'a> {
        Fields { obj }
    }

    /// The underlying object (for envelope validation).
    pub fn object(&self) -> &Object<'a> {
        &self.obj
    }

    /// The raw value of `key` (`null` counts as absent).
    pub fn raw(&self, key: &str) -> Option<&'a RawValue> {
        self.obj.get(key)
    }

    /// The member `key`, when given, read as `T` (the subject of its message is `'key'`).
    fn read<T: serde::de::DeserializeOwned>(
        &self,
        key: &str,
        expected: &str,
    ) -> Result<Option<T>, ApiError> {
        let Some(raw) = self.obj.get(key) else {
            return Ok(None);
        };
        fail_first(|r| r.decode(format!("$.{key}"), &format!("'{key}'"), expected, raw)).map(Some)
    }

    /// An optional string.
    pub fn string(&self, key: &str) -> Result<Option<String>, ApiError> {
        self.read(key, "a string")
    }

    /// A required string.
    pub fn required_string(&self, key: &str) -> Result<String, ApiError> {
        let value = self.string(key)?;
        fail_first(|r| r.required(format!("$.{key}"), value, format!("'{key}' is required")))
    }

    /// An optional integer.
    pub fn integer(&self, key: &str) -> Result<Option<i64>, ApiError> {
        let Some(raw) = self.obj.get(key) else {
            return Ok(None);
        };
        fail_first(|r| {
            let n = json::as_integer(raw);
            if n.is_none() {
                r.wrong_type(format!("$.{key}"), &format!("'{key}'"), "an integer", raw);
            }
            n
        })
        .map(Some)
    }

    /// An optional boolean.
    pub fn boolean(&self, key: &str) -> Result<Option<bool>, ApiError> {
        self.read(key, "a boolean")
    }

    /// An optional array of strings.
    pub fn strings(&self, key: &str) -> Result<Option<Vec<String>>, ApiError> {
        self.read(key, "an array of strings")
    }

    /// A required job id. A malformed id is a 400 (it is a field of the request).
    pub fn job_id(&self, key: &str) -> Result<JobId, ApiError> {
        let text = self.required_string(key)?;
        text.parse().map_err(|_| {
            ApiError::invalid_field(
                &format!("$.{key}"),
                format!("'{key}' must be a lowercase UUIDv7 job id, got {text:?}"),
            )
        })
    }

    /// An optional attempt number (a positive 32-bit integer): the attempt a worker holds.
    pub fn attempt(&self, key: &str) -> Result<Option<i32>, ApiError> {
        match self.integer(key)? {
            Some(n) if n >= 1 => i32::try_from(n).map(Some).map_err(|_| bad_attempt(key)),
            Some(_) => Err(bad_attempt(key)),
            None => Ok(None),
        }
    }

    /// An optional worker id (1–255 characters, no control characters).
    pub fn worker_id(&self, key: &str) -> Result<Option<String>, ApiError> {
        match self.string(key)? {
            Some(id) if !crate::job::is_valid_worker_id(&id) => Err(ApiError::invalid_field(
                &format!("$.{key}"),
                format!("'{key}' must be 1-255 characters without control characters"),
            )),
            other => Ok(other),
        }
    }
}

fn bad_attempt(key: &str) -> ApiError {
    ApiError::invalid_field(
        &format!("$.{key}"),
        format!("'{key}' must be a positive integer: the attempt the worker holds"),
    )
}

/// A worker id taken from the path. A segment that is not a valid worker id (1-255 characters,
/// no control characters) names no worker: 404.
#[derive(Debug, Clone, IntoParams)]
#[into_params(names("worker_id"), parameter_in = Path)]
pub struct WorkerIdPath(
    /// The worker's id (any other string names no worker).
    #[param(value_type = WorkerId)]
    pub String,
);

impl<S: Send + Sync> FromRequestParts<S> for WorkerIdPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(segments) = Path::<Vec<String>>::from_request_parts(parts, state)
            .await
            .map_err(|_| ApiError::route_not_found(parts.uri.path()))?;
        let id = segments.into_iter().next().unwrap_or_default();
        if crate::job::is_valid_worker_id(&id) {
            Ok(WorkerIdPath(id))
        } else {
            Err(ApiError::not_found(
                "worker",
                &id.escape_debug().to_string(),
            ))
        }
    }
}

/// The one parameter of a route's path, as text; one that cannot be read (not UTF-8) names no
/// route: 404.
pub(crate) async fn path_segment<S: Send + Sync>(
    parts: &mut Parts,
    state: &S,
) -> Result<String, ApiError> {
    Path::<String>::from_request_parts(parts, state)
        .await
        .map(|Path(segment)| segment)
        .map_err(|_| ApiError::route_not_found(parts.uri.path()))
}

/// A job id taken from the path. A segment that is not a valid UUIDv7 names no job: 404.
#[derive(Debug, Clone, Copy, IntoParams)]
#[into_params(names("id"), parameter_in = Path)]
pub struct JobIdPath(
    /// The job's id.
    pub JobId,
);

impl<S: Send + Sync> FromRequestParts<S> for JobIdPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let segment = path_segment(parts, state).await?;
        segment
            .parse()
            .map(JobIdPath)
            .map_err(|_| ApiError::not_found("job", &segment))
    }
}

/// A job id and a step or signal name taken from the path (`/ojs/v1/jobs/{id}/steps/{name}`,
/// `.../signals/{name}`). A first segment that is not a valid UUIDv7 names no job: 404; a name
/// that is not 1 to 200 characters without control characters: 400.
#[derive(Debug, Clone, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct JobNamePath {
    /// The job's id.
    #[param(value_type = crate::job::JobId)]
    pub id: JobId,
    /// The step's or signal's name: 1 to 200 characters, no control characters.
    #[param(value_type = crate::job::id_schema::DurableName)]
    pub name: String,
}

impl<S: Send + Sync> FromRequestParts<S> for JobNamePath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path((id, name)) = Path::<(String, String)>::from_request_parts(parts, state)
            .await
            .map_err(|_| ApiError::route_not_found(parts.uri.path()))?;
        let id = id.parse().map_err(|_| ApiError::not_found("job", &id))?;
        if !crate::job::durable::is_valid_name(&name) {
            return Err(ApiError::invalid_field(
                "name",
                format!(
                    "The name must be 1-{} characters without control characters",
                    crate::job::durable::MAX_NAME_CHARS
                ),
            ));
        }
        Ok(JobNamePath { id, name })
    }
}

/// A queue name found at `field` of a request, validated.
pub fn check_queue_name(field: &str, name: &str) -> Result<(), ApiError> {
    if is_valid_queue(name) {
        Ok(())
    } else {
        Err(ApiError::invalid_field(
            field,
            format!(
                "queue name {name:?} is invalid: use 1-128 lowercase letters, digits, '-' and '.'"
            ),
        ))
    }
}

/// A queue name taken from the path, validated: any other name is refused with 400.
#[derive(Debug, Clone, IntoParams)]
#[into_params(names("name"), parameter_in = Path)]
pub struct QueuePath(
    /// The queue (any other name is refused with 400).
    #[param(value_type = QueueName)]
    pub String,
);

impl<S: Send + Sync> FromRequestParts<S> for QueuePath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let name = path_segment(parts, state).await?;
        check_queue_name("path.name", &name)?;
        Ok(QueuePath(name))
    }
}

/// The W3C `traceparent` (with its `tracestate`) a request carries, when valid.
pub fn caller_trace(headers: &axum::http::HeaderMap) -> Option<Traceparent> {
    let traceparent = headers.get("traceparent")?.to_str().ok()?;
    let tracestate = headers.get("tracestate").and_then(|v| v.to_str().ok());
    Traceparent::parse(traceparent, tracestate)
}

/// What the job spans of a FETCH, ACK or NACK need of the request: its trace context and when
/// it arrived. Read only while traces are on; otherwise every method does nothing.
pub struct TraceCall(Option<(JobTracer, Option<Traceparent>, SystemTime)>);

impl FromRequestParts<AppState> for TraceCall {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let tracer = state.traces();
        Ok(TraceCall(tracer.is_on().then(|| {
            (
                tracer.clone(),
                caller_trace(&parts.headers),
                SystemTime::now(),
            )
        })))
    }
}

impl TraceCall {
    /// Whether spans are made (traces on).
    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// See [`JobTracer::fetched`].
    pub fn fetched(&self, worker_id: Option<&str>, jobs: &[Job]) {
        if let Some((tracer, caller, started)) = &self.0 {
            tracer.fetched(caller.as_ref(), *started, worker_id, jobs);
        }
    }

    /// See [`JobTracer::acked`].
    pub fn acked(&self, job: &Job) {
        if let Some((tracer, caller, started)) = &self.0 {
            tracer.acked(caller.as_ref(), *started, job);
        }
    }

    /// See [`JobTracer::acked_brief`].
    pub fn acked_brief(&self, job: &Completed) {
        if let Some((tracer, caller, started)) = &self.0 {
            tracer.acked_brief(caller.as_ref(), *started, job);
        }
    }

    /// See [`JobTracer::nacked`].
    pub fn nacked(&self, job: &Job, failure: Option<(&str, &str)>) {
        if let Some((tracer, caller, started)) = &self.0 {
            tracer.nacked(caller.as_ref(), *started, job, failure);
        }
    }

    /// See [`JobTracer::refused`].
    pub fn refused(&self, operation: Operation, id: JobId, error: &ApiError) {
        self.refused_item(operation, id, error.code, &error.message);
    }

    /// See [`JobTracer::refused`] (`code` and `message`: a batch item's error).
    pub fn refused_item(&self, operation: Operation, id: JobId, code: &str, message: &str) {
        if let Some((tracer, caller, started)) = &self.0 {
            tracer.refused(operation, caller.as_ref(), *started, id, code, message);
        }
    }
}

/// A positive number of milliseconds `key`, if given.
pub(crate) fn positive_ms(fields: &Fields<'_>, key: &str) -> Result<Option<i64>, ApiError> {
    match fields.integer(key)? {
        Some(ms) if ms <= 0 || ms > crate::wire::duration::MAX_MS as i64 => {
            Err(ApiError::invalid_field(
                &format!("$.{key}"),
                format!("'{key}' must be a positive number of milliseconds"),
            ))
        }
        other => Ok(other),
    }
}

/// Header naming the producer, checked against a queue's `producers`.
const PRODUCER_HEADER: &str = "ojs-producer";
/// Header with the seconds an enqueue may wait for room in a full `block` queue.
const BLOCK_TIMEOUT_HEADER: &str = "ojs-block-timeout";
/// Longest `OJS-Block-Timeout` accepted, in seconds.
const MAX_BLOCK_TIMEOUT_SECS: u64 = 30;

/// The producer and block timeout of a PUSH, from its headers.
pub(crate) fn push_context(headers: &HeaderMap) -> Result<PushContext, ApiError> {
    let producer = match headers.get(PRODUCER_HEADER) {
        None => None,
        Some(v) => match v.to_str().map(str::trim) {
            Ok(p) if !p.is_empty() && p.len() <= 255 => Some(p.to_owned()),
            _ => {
                return Err(ApiError::invalid_field(
                    "OJS-Producer",
                    "OJS-Producer must be 1 to 255 printable ASCII characters",
                ));
            }
        },
    };
    let block_timeout = match headers.get(BLOCK_TIMEOUT_HEADER) {
        None => 0,
        Some(v) => match v.to_str().ok().and_then(|t| t.trim().parse::<u64>().ok()) {
            Some(secs) if secs <= MAX_BLOCK_TIMEOUT_SECS => secs,
            _ => {
                return Err(ApiError::invalid_field(
                    "OJS-Block-Timeout",
                    format!(
                        "OJS-Block-Timeout must be an integer number of seconds from 0 to {MAX_BLOCK_TIMEOUT_SECS}"
                    ),
                ));
            }
        },
    };
    Ok(PushContext {
        producer,
        block_timeout: std::time::Duration::from_secs(block_timeout),
    })
}
