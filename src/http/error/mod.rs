//! `ApiError`: every non-2xx response, rendered as the [OJS error body].
//!
//! A handler returns `ApiError` (usually converted from [`crate::Error`] with `?`; how each
//! error maps to a status and an OJS code is in `mapping.rs`). Its `IntoResponse` only sets the
//! status and headers and parks the error in the response's extensions; the request middleware
//! (`http::ojs_middleware`) then writes the body — it knows the request id —
//! and logs the internal cause inside the request's span. Causes are never sent.
//!
//! [OJS error body]: https://github.com/openjobspec/spec/blob/main/spec/ojs-http-binding.md#161-error-response-format

mod mapping;

use std::sync::Arc;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Value, json};
use utoipa::ToSchema;

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
            "workflow" => "Workflow",
            "tenant" => "Tenant",
            "schema" => "Schema",
            "webhook subscription" => "Webhook subscription",
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

    /// 408 `result_not_ready`: the job had not ended when a result read's wait ran out (the
    /// connection stays open: ask again).
    pub fn result_not_ready(job_id: &str, state: &str) -> ApiError {
        let mut e = ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "result_not_ready",
            format!("Job '{job_id}' has not ended: it is {state}."),
        )
        .with_details(json!({"job_id": job_id, "state": state}));
        e.retryable = true;
        e
    }

    /// 410 `RESULT_PRUNED` (the results extension's code): the job ended, but its result is
    /// no longer served.
    pub fn result_pruned(job_id: &str, message: String, expired_at: Option<&str>) -> ApiError {
        ApiError::new(StatusCode::GONE, "RESULT_PRUNED", message)
            .with_details(json!({"job_id": job_id, "expired_at": expired_at}))
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
            "schema_validation" => {
                "Fix the args at the paths in details.validation_errors, or name a registered version (GET /ojs/v1/admin/schemas/{type}/versions)."
            }
            "not_found" => "Check the id or path; jobs removed by retention are gone permanently.",
            "unauthenticated" => {
                "Send an API key as Authorization: Bearer <key> (create one with `ojsd keys create`)."
            }
            "forbidden" => "Use a key whose role and queues cover this request.",
            "unsupported_media_type" => "Set the header Content-Type: application/json.",
            "request_timeout" => "Send the whole body promptly, on a new connection.",
            "result_not_ready" => {
                "Ask again (GET /ojs/v1/jobs/{id}/result?wait=true&timeout=30): the job is still running or waiting."
            }
            "RESULT_PRUNED" => {
                "Results live for the job's result_ttl, at most as long as the job is kept; set a longer result_ttl when enqueueing."
            }
            "step_already_recorded" => {
                "Use the first record's result (details.step.result) and go on to the next step."
            }
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

/// `{"error": {...}}`, the body of every failed request.
#[derive(Serialize, ToSchema)]
pub struct ErrorBody<'a> {
    error: ErrorFields<'a>,
}

/// The fields of an OJS error.
#[derive(Serialize, ToSchema)]
struct ErrorFields<'a> {
    /// What went wrong, e.g. `invalid_request`, `not_found`, `conflict`, `backend_error`.
    code: &'a str,
    /// The same as `code`.
    r#type: &'a str,
    /// A sentence for people.
    message: &'a str,
    /// Whether the same request may succeed later.
    retryable: bool,
    /// Structured detail, e.g. the field at fault (`details.field`) or each violation.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    details: Option<&'a Value>,
    /// The request's `X-Request-Id`.
    request_id: &'a str,
    /// What to do about it.
    hint: &'a str,
    /// A page about this code.
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
        if self.code == "request_timeout" {
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
