//! `ApiError`: every non-2xx response, rendered as the [OJS error body].
//!
//! A handler returns `ApiError` (usually converted from [`crate::Error`] with `?`). Its
//! `IntoResponse` only sets the status and headers and parks the error in the response's
//! extensions; the request middleware (`http::middleware`) then writes the body — it knows the
//! request id — and logs the internal cause inside the request's span. Causes are never sent.
//!
//! [OJS error body]: https://github.com/openjobspec/spec/blob/main/spec/ojs-http-binding.md#161-error-response-format

use std::sync::Arc;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Value, json};

use crate::error::Error;
use crate::job::JobState;
use crate::job::envelope::Rejection;
use crate::queue_config::ConfigError;
use crate::wire::Violation;

/// A client-visible error (boxed: it travels through many `Result`s).
#[derive(Debug, Clone)]
pub struct ApiError(Box<ApiErrorData>);

/// The contents of an [`ApiError`].
#[derive(Debug, Clone)]
pub struct ApiErrorData {
    pub status: StatusCode,
    /// OJS error code (`invalid_request`, `not_found`, ...).
    pub code: &'static str,
    pub message: String,
    pub retryable: bool,
    pub details: Option<Value>,
    /// Remediation advice when the code's general hint does not fit.
    pub hint: Option<&'static str>,
    /// `Retry-After` seconds (429 and 503).
    pub retry_after: Option<u32>,
    /// `X-OJS-Queue-Depth` and `X-OJS-Queue-Bound` (429 `QUEUE_FULL`).
    pub queue_depth: Option<(i64, i64)>,
    /// What went wrong inside the server; logged, never sent.
    pub cause: Option<String>,
    /// The database connection broke (the server stops using the database until it is back).
    pub connection_lost: bool,
}

/// The error parked in a response until the middleware renders it.
#[derive(Debug, Clone)]
pub struct PendingError(pub Arc<ApiError>);

impl std::ops::Deref for ApiError {
    type Target = ApiErrorData;

    fn deref(&self) -> &ApiErrorData {
        &self.0
    }
}

impl std::ops::DerefMut for ApiError {
    fn deref_mut(&mut self) -> &mut ApiErrorData {
        &mut self.0
    }
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError(Box::new(ApiErrorData {
            status,
            code,
            message: message.into(),
            retryable: false,
            details: None,
            hint: None,
            retry_after: None,
            queue_depth: None,
            cause: None,
            connection_lost: false,
        }))
    }

    /// Replaces the code's general hint.
    pub fn with_hint(mut self, hint: &'static str) -> ApiError {
        self.hint = Some(hint);
        self
    }

    /// Adds structured details.
    pub fn with_details(mut self, details: Value) -> ApiError {
        self.details = Some(details);
        self
    }

    /// 400 `invalid_payload`: no body, not JSON, or not a JSON object.
    pub fn invalid_payload(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_payload", message)
    }

    /// 400 `invalid_request` about one field.
    pub fn invalid_field(field: &str, message: impl Into<String>) -> ApiError {
        let message = message.into();
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message.clone()).with_details(
            json!({"field": field, "validation_errors": [{"path": field, "message": message}]}),
        )
    }

    /// 400 `invalid_request` without a field (bad content type, bad header, ...).
    pub fn invalid_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    /// 404 `not_found` for a resource.
    pub fn not_found(resource_type: &str, resource_id: &str) -> ApiError {
        let label = match resource_type {
            "job" => "Job",
            "worker" => "Worker",
            "queue" => "Queue",
            _ => "Resource",
        };
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{label} '{resource_id}' not found."),
        )
        .with_details(json!({"resource_type": resource_type, "resource_id": resource_id}))
    }

    /// 404 `not_found` for a path the server does not serve.
    pub fn route_not_found(path: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("No endpoint at '{path}'."),
        )
        .with_details(json!({"resource_type": "route", "resource_id": path}))
    }

    /// 405 for a known path with an unsupported method (axum adds the `Allow` header).
    pub fn method_not_allowed(method: &str, path: &str) -> ApiError {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request",
            format!("Method {method} is not allowed on '{path}'; see the Allow header."),
        )
    }

    /// 413 `envelope_too_large`.
    pub fn too_large(field: Option<&str>, size: Option<usize>, max: usize) -> ApiError {
        let what = field.map_or_else(|| "the request body".to_owned(), |f| format!("'{f}'"));
        let message = match size {
            Some(size) => format!("{what} is {size} bytes; the maximum is {max} bytes."),
            None => format!("{what} is larger than the maximum of {max} bytes."),
        };
        let mut details = json!({"max_size": max});
        if let Some(size) = size {
            details["size"] = json!(size);
        }
        if let Some(field) = field {
            details["field"] = json!(field);
        }
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "envelope_too_large", message)
            .with_details(details)
    }

    /// 401 `unauthenticated`: no API key, or one the server does not know (or that was revoked).
    pub fn unauthenticated(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthenticated", message)
    }

    /// 403 `forbidden`: the key's role or queues do not cover the request.
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// 408 `request_timeout`: the request's body stopped arriving. The connection is closed
    /// (the rest of the body may still come, and would be read as a request).
    pub fn request_timeout(message: impl Into<String>) -> ApiError {
        let mut e = ApiError::new(StatusCode::REQUEST_TIMEOUT, "request_timeout", message);
        e.retryable = true;
        e
    }

    /// 415 `unsupported_media_type`: a body without a JSON `Content-Type`.
    pub fn unsupported_media_type(message: impl Into<String>) -> ApiError {
        ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            message,
        )
    }

    /// 422 `unsupported`.
    pub fn unsupported(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "unsupported", message)
    }

    /// 500 `internal_error` (a bug or panic); `cause` is logged.
    pub fn internal(cause: impl Into<String>) -> ApiError {
        let mut e = ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            "The server failed to handle the request.",
        );
        e.retryable = true;
        e.cause = Some(cause.into());
        e
    }

    /// 503 `backend_error` with `Retry-After`: the database is unreachable or overloaded, or the
    /// server is shutting down.
    pub fn unavailable(message: impl Into<String>, cause: Option<String>) -> ApiError {
        let mut e = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "backend_error", message);
        e.retryable = true;
        e.retry_after = Some(1);
        e.cause = cause;
        e
    }

    /// Remediation advice for the code.
    fn hint(&self) -> &'static str {
        if let Some(hint) = self.hint {
            return hint;
        }
        match self.code {
            "invalid_payload" => "Send a JSON object with Content-Type: application/json.",
            "invalid_request" => "Fix the field named in details.field and send the request again.",
            "validation_error" => "Fix the retry policy field named in the message.",
            "not_found" => "Check the id or path; jobs removed by retention are gone permanently.",
            "unauthenticated" => {
                "Send an API key as Authorization: Bearer <key> (create one with `ojsd keys create`)."
            }
            "forbidden" => "Use a key whose role and queues cover this request.",
            "unsupported_media_type" => "Set the header Content-Type: application/json.",
            "request_timeout" => "Send the whole body promptly, on a new connection.",
            "conflict" => "Read the job's current state (GET /ojs/v1/jobs/{id}) before retrying.",
            "duplicate" => {
                "The job already exists; use the existing job (details.existing_job_id)."
            }
            "envelope_too_large" => {
                "Make the payload smaller, e.g. pass references instead of data."
            }
            "unsupported" => "Use only the features listed in GET /ojs/manifest.",
            "backend_error" => "Retry after the number of seconds in the Retry-After header.",
            _ => "Retry the request; if the problem persists, report it with the request_id.",
        }
    }

    /// The OJS error body for `request_id`.
    pub fn body<'a>(&'a self, request_id: &'a str) -> ErrorBody<'a> {
        ErrorBody {
            error: ErrorFields {
                code: self.code,
                r#type: self.code,
                message: &self.message,
                retryable: self.retryable,
                details: self.details.as_ref(),
                request_id,
                hint: self.hint(),
                docs_url: format!("https://openjobspec.org/errors/{}", self.code),
            },
        }
    }
}

/// `{"error": {...}}`.
#[derive(Serialize)]
pub struct ErrorBody<'a> {
    error: ErrorFields<'a>,
}

#[derive(Serialize)]
struct ErrorFields<'a> {
    code: &'a str,
    r#type: &'a str,
    message: &'a str,
    retryable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<&'a Value>,
    request_id: &'a str,
    hint: &'a str,
    docs_url: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = self.status.into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if self.status == StatusCode::REQUEST_TIMEOUT {
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        if let Some((depth, bound)) = self.queue_depth {
            let headers = response.headers_mut();
            headers.insert("x-ojs-queue-depth", HeaderValue::from(depth));
            headers.insert("x-ojs-queue-bound", HeaderValue::from(bound));
        }
        response
            .extensions_mut()
            .insert(PendingError(Arc::new(self)));
        response
    }
}

fn validation_details(violations: &[Violation], index: Option<usize>) -> Value {
    let mut details = json!({
        "field": violations.first().map(|v| v.path.as_str()).unwrap_or("$"),
        "validation_errors": violations
            .iter()
            .map(|v| json!({"path": v.path, "message": v.message}))
            .collect::<Vec<_>>(),
    });
    if let Some(index) = index {
        details["index"] = json!(index);
    }
    details
}

/// `"jobs[2]: message"` inside a batch, the message alone otherwise; notes further problems.
fn validation_message(violations: &[Violation], index: Option<usize>) -> String {
    let first = violations
        .first()
        .map(|v| v.message.as_str())
        .unwrap_or("invalid request");
    let mut message = match index {
        Some(i) => format!("jobs[{i}]: {first}"),
        None => first.to_owned(),
    };
    if violations.len() > 1 {
        message.push_str(&format!(
            " (and {} more problem{}; see details.validation_errors)",
            violations.len() - 1,
            if violations.len() == 2 { "" } else { "s" }
        ));
    }
    message
}

fn prefixed(index: Option<usize>, message: &str) -> String {
    match index {
        Some(i) => format!("jobs[{i}]: {message}"),
        None => message.to_owned(),
    }
}

fn with_index(mut details: Value, index: Option<usize>) -> Value {
    if let Some(i) = index {
        details["index"] = json!(i);
    }
    details
}

fn state_names(states: &[JobState]) -> Vec<&'static str> {
    states.iter().map(|s| s.as_str()).collect()
}

impl From<Error> for ApiError {
    fn from(e: Error) -> ApiError {
        match e {
            Error::InvalidRequest { field, message } => ApiError::invalid_field(&field, message),
            Error::Rejected { index, rejection } => match rejection {
                Rejection::TooLarge { field, size, max } => {
                    let mut err = ApiError::too_large(Some(field), Some(size), max);
                    err.message = prefixed(index, &err.message);
                    err.details = err.details.take().map(|d| with_index(d, index));
                    err
                }
                Rejection::Invalid(violations) => ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_request",
                    validation_message(&violations, index),
                )
                .with_details(validation_details(&violations, index)),
                Rejection::PriorityOutOfRange {
                    violation,
                    value,
                    max,
                } => {
                    let mut details = validation_details(std::slice::from_ref(&violation), index);
                    details["value"] = json!(value);
                    details["min"] = json!(0);
                    details["max_priority"] = json!(max);
                    ApiError::new(
                        StatusCode::BAD_REQUEST,
                        "invalid_request",
                        prefixed(index, &violation.message),
                    )
                    .with_details(details)
                }
                Rejection::InvalidRetry(violations) => ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "validation_error",
                    validation_message(&violations, index),
                )
                .with_details(validation_details(&violations, index)),
                Rejection::Unsupported { path, message } => {
                    ApiError::unsupported(prefixed(index, &message))
                        .with_details(with_index(json!({"field": path}), index))
                }
            },
            Error::JobNotFound(id) => ApiError::not_found("job", &id.to_string()),
            Error::NotInDeadLetter(id) => ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("Job '{id}' is not in the dead-letter queue."),
            )
            .with_details(json!({"resource_type": "dead_letter", "resource_id": id.to_string()})),
            Error::WorkerNotFound(id) => ApiError::not_found("worker", &id),
            Error::InvalidConfig(ConfigError::Invalid(v)) => ApiError::invalid_field(&v.path, v.message),
            Error::InvalidConfig(ConfigError::Retry(violations)) => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "validation_error",
                validation_message(&violations, None),
            )
            .with_details(validation_details(&violations, None)),
            Error::QueueFull {
                queue,
                depth,
                bound,
                bound_bytes,
                policy,
                index,
            } => {
                let what = match bound_bytes {
                    Some(bytes) => format!("its size bound of {bytes} bytes"),
                    None => format!("its bound of {bound} jobs"),
                };
                let mut err = ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "QUEUE_FULL",
                    prefixed(
                        index,
                        &format!(
                            "Queue '{queue}' is full: it holds {depth} unfinished jobs and the job would take it past {what}."
                        ),
                    ),
                )
                .with_details(with_index(
                    json!({"queue": queue, "depth": depth, "bound": bound,
                           "max_size_bytes": bound_bytes, "strategy": policy.as_str()}),
                    index,
                ));
                err.retryable = true;
                err.retry_after = Some(1);
                err.queue_depth = Some((depth, bound));
                err
            }
            Error::JobTypeNotAllowed {
                queue,
                job_type,
                index,
            } => ApiError::new(
                StatusCode::BAD_REQUEST,
                "JOB_TYPE_NOT_ALLOWED",
                prefixed(
                    index,
                    &format!("Job type '{job_type}' is not allowed in queue '{queue}' (see the queue's allowed_job_types)."),
                ),
            )
            .with_details(with_index(
                json!({"field": "$.type", "queue": queue, "job_type": job_type}),
                index,
            )),
            Error::ProducerNotAllowed {
                queue,
                producer,
                index,
            } => ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                prefixed(
                    index,
                    &match &producer {
                        Some(p) => format!("Producer '{p}' (OJS-Producer header) may not enqueue to queue '{queue}'."),
                        None => format!("Queue '{queue}' only accepts jobs from listed producers: name yours in the OJS-Producer header."),
                    },
                ),
            )
            .with_details(with_index(
                json!({"queue": queue, "producer": producer, "reason": "producer_not_allowed"}),
                index,
            )),
            Error::QueueNotFound(name) => ApiError::not_found("queue", &name),
            Error::PoolNotFound(name) => ApiError::not_found("pool", &name),
            Error::UnknownQueue(name) => ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                format!(
                    "Queue '{name}' does not exist, and this server only enqueues to existing queues: create it first (POST /ojs/v1/queues)."
                ),
            )
            .with_details(json!({"field": "$.queue", "queue": name, "reason": "unknown_queue"})),
            Error::QueueExists(name) => ApiError::new(
                StatusCode::CONFLICT,
                "conflict",
                format!("Queue '{name}' already exists."),
            )
            .with_details(json!({"queue": name})),
            Error::QueueNotEmpty {
                queue,
                non_terminal,
            } => ApiError::new(
                StatusCode::CONFLICT,
                "conflict",
                format!(
                    "Queue '{queue}' still has {non_terminal} unfinished jobs; delete it with strategy discard or move, or wait for them."
                ),
            )
            .with_details(json!({"queue": queue, "non_terminal_count": non_terminal})),
            Error::QueueDraining { queue, operation } => ApiError::new(
                StatusCode::CONFLICT,
                "conflict",
                format!("Queue '{queue}' is draining (being deleted); cannot {operation} it."),
            )
            .with_details(json!({"queue": queue, "current_state": "draining"})),
            Error::WorkerNotStale { worker_id, state } => ApiError::new(
                StatusCode::CONFLICT,
                "conflict",
                format!(
                    "Worker '{worker_id}' is {state}; only stale workers can be deleted (a live worker deregisters with DELETE /ojs/v1/workers/{{id}})."
                ),
            )
            .with_details(json!({"worker_id": worker_id, "current_state": state})),
            Error::InvalidTransition {
                job_id,
                operation,
                current,
                allowed,
            } => {
                let expected = match allowed {
                    [one] => format!("expected '{one}'"),
                    many => format!("expected one of {}", state_names(many).join(", ")),
                };
                let mut details = json!({
                    "job_id": job_id.to_string(),
                    "current_state": current,
                    "allowed_states": state_names(allowed),
                });
                if let [one] = allowed {
                    details["expected_state"] = json!(one);
                }
                ApiError::new(
                    StatusCode::CONFLICT,
                    "conflict",
                    format!("Cannot {operation} job in state '{current}'; {expected}."),
                )
                .with_details(details)
            }
            Error::NotOwner { job_id, owner } => ApiError::new(
                StatusCode::CONFLICT,
                "conflict",
                format!("Job '{job_id}' is reserved by worker '{owner}', not by the caller."),
            )
            .with_details(json!({
                "job_id": job_id.to_string(),
                "current_state": JobState::Active,
                "worker_id": owner,
            })),
            Error::ReservationLost {
                job_id,
                current,
                owner,
            } => {
                let why = match (&owner, current) {
                    (Some(owner), JobState::Active) => {
                        format!("it is reserved by worker '{owner}'")
                    }
                    _ => format!("it is in state '{current}'"),
                };
                let mut details = json!({"job_id": job_id.to_string(), "current_state": current});
                if let Some(owner) = owner {
                    details["worker_id"] = json!(owner);
                }
                ApiError::new(
                    StatusCode::CONFLICT,
                    "conflict",
                    format!("The worker no longer holds job '{job_id}': {why}."),
                )
                .with_details(details)
            }
            Error::DuplicateId { job_id, index } => ApiError::new(
                StatusCode::CONFLICT,
                "duplicate",
                prefixed(index, &format!("A job with id '{job_id}' already exists.")),
            )
            .with_details(with_index(
                json!({"job_id": job_id.to_string(), "existing_job_id": job_id.to_string()}),
                index,
            )),
            Error::DuplicateUnique {
                existing,
                existing_state,
                unique_key,
                index,
            } => ApiError::new(
                StatusCode::CONFLICT,
                "duplicate",
                prefixed(
                    index,
                    &format!(
                        "A duplicate job exists ('{existing}', state '{existing_state}') under the job's unique policy."
                    ),
                ),
            )
            .with_details(with_index(
                json!({
                    "existing_job_id": existing.to_string(),
                    "existing_job_state": existing_state,
                    "unique_key": unique_key,
                }),
                index,
            )),
            Error::Unsupported(message) => ApiError::unsupported(message),
            Error::Database(e) => database_error(&e),
        }
    }
}

/// 503 when the database cannot be reached (or the pool is exhausted), 500 otherwise.
fn database_error(e: &sqlx::Error) -> ApiError {
    let mut err = database_error_kind(e);
    err.connection_lost = crate::db::is_connection_error(e);
    err
}

fn database_error_kind(e: &sqlx::Error) -> ApiError {
    match e {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::WorkerCrashed => ApiError::unavailable(
            "The database is unavailable; retry shortly.",
            Some(e.to_string()),
        ),
        sqlx::Error::Database(db) if db.code().as_deref().is_some_and(is_unavailable_code) => {
            ApiError::unavailable(
                "The database is unavailable; retry shortly.",
                Some(e.to_string()),
            )
        }
        _ => {
            let mut err = ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "backend_error",
                "The database failed to handle the request.",
            );
            err.retryable = true;
            err.cause = Some(e.to_string());
            err
        }
    }
}

/// SQLSTATEs meaning "the database cannot serve us right now" rather than "this statement is
/// wrong": connection exceptions (08), authorization (28), missing database (3D000),
/// insufficient resources (53), shutdown (57P01–57P03), a database closed to connections
/// (55000, raised by `allow_connections = false`), and a statement or idle transaction cut
/// short by the session's timeouts (57014, 25P03).
fn is_unavailable_code(code: &str) -> bool {
    code.starts_with("08")
        || code.starts_with("28")
        || code.starts_with("53")
        || matches!(
            code,
            "3D000" | "55000" | "57P01" | "57P02" | "57P03" | "57014" | "25P03"
        )
}
