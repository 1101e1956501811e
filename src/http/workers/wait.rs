//! `POST /ojs/v1/workers/wait`: a worker ends the attempt it holds with "wait for signal S, or
//! until T" instead of an ACK or a NACK (durable execution). The job is scheduled again (at T,
//! or with no time when only a signal can wake it), leaves the claim path and costs nothing
//! while it waits; `POST /ojs/v1/jobs/{id}/signals/S` or T makes it available again, and the
//! FETCH that resumes it hands the latest `wait` (`ended_by`: `signal` or `time`) and the
//! `signals` delivered so far. The attempt is given back: a wait is not a failed attempt.
//!
//! Body: `{"job_id", "signal"?, "until"? | "timeout_ms"?, "worker_id"?, "attempt"?}`: a signal,
//! a time limit, or both; `until` is an RFC 3339 timestamp or `+<duration>` from now.
//! `worker_id` and `attempt`, when given, must be the job's holder and current attempt.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::broker::WaitRequest;
use crate::http::auth::Caller;
use crate::http::error::ApiError;
use crate::http::extract::{JsonBody, positive_ms};
use crate::http::openapi::values::{Milliseconds, Timestamp};
use crate::http::{AppState, ok};
use crate::job::durable::{MAX_NAME_CHARS, is_valid_name};
use crate::job::id_schema::WorkerId;
use crate::job::{JobId, JobState};
use crate::wire::timestamp;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(wait))
}

/// A wait.
#[derive(ToSchema)]
#[allow(dead_code)] // documentation: read by `wait`
#[schema(as = WaitRequest)]
struct Request {
    job_id: JobId,
    /// The signal that ends the wait (`POST /ojs/v1/jobs/{id}/signals/{signal}`).
    #[schema(value_type = Option<crate::job::id_schema::DurableName>)]
    signal: Option<String>,
    /// When the wait ends without the signal: RFC 3339, or `+<ISO 8601 duration>` from now.
    #[schema(value_type = Option<Timestamp>)]
    until: Option<String>,
    /// The same as `until`, as milliseconds from now.
    #[schema(value_type = Option<Milliseconds>)]
    timeout_ms: Option<i64>,
    /// The waiting worker: when given, it must hold the job.
    #[schema(value_type = Option<WorkerId>)]
    worker_id: Option<String>,
    /// The attempt the worker holds: when given, it must be the job's current one.
    #[schema(minimum = 1)]
    attempt: Option<i32>,
}

/// What a wait did.
#[derive(Serialize, ToSchema)]
#[schema(as = WaitAnswer)]
struct Answer {
    #[schema(value_type = JobId)]
    job_id: String,
    /// `scheduled` (waiting), or `available` when a signal kept for the job ended the wait at
    /// once.
    state: JobState,
    /// `waiting`, or `signalled` (a kept signal ended it at once).
    outcome: &'static str,
    /// The attempt the job's next run will have (the waiting one, given back).
    attempt: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    signal: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Timestamp>)]
    until: Option<String>,
    /// The kept signal that ended the wait at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    signal_id: Option<i64>,
}

/// `POST /ojs/v1/workers/wait`.
#[utoipa::path(
    post,
    path = "/ojs/v1/workers/wait",
    operation_id = "wait_job",
    tag = "workers",
    summary = "End the attempt with a wait for a signal or a time",
    description = "Instead of ACK or NACK: the active job is scheduled again until `signal` \
                   arrives or `until` passes, and gives its attempt back. A signal of that \
                   name kept for the job ends the wait at once (`outcome: signalled`).",
    request_body = Request,
    responses(
        (status = 200, description = "The job waits (or, with a kept signal, is available again).", body = Answer),
        (status = 400, description = "The body is invalid: no signal and no time, both `until` and `timeout_ms`, a time in the past."),
        (status = 404, description = "No such job."),
        (status = 409, description = "The job is not active, is held by another worker, or is at another attempt."),
    )
)]
async fn wait(
    State(state): State<AppState>,
    caller: Caller,
    body: JsonBody,
) -> Result<Response, ApiError> {
    let fields = body.object()?;
    let job_id = fields.job_id("job_id")?;
    let signal = fields.string("signal")?;
    if signal.as_deref().is_some_and(|s| !is_valid_name(s)) {
        return Err(ApiError::invalid_field(
            "$.signal",
            format!("'signal' must be 1-{MAX_NAME_CHARS} characters without control characters"),
        ));
    }
    let until = until(
        fields.string("until")?.as_deref(),
        positive_ms(&fields, "timeout_ms")?,
    )?;
    if signal.is_none() && until.is_none() {
        return Err(ApiError::invalid_field(
            "$.signal",
            "A wait needs 'signal', a time limit ('until' or 'timeout_ms'), or both",
        ));
    }
    let worker_id = fields.worker_id("worker_id")?;
    let attempt = fields.attempt("attempt")?;
    caller.check_job(&state, job_id).await?;
    let waited = state
        .broker()
        .wait(WaitRequest {
            job_id,
            attempt,
            worker_id: worker_id.as_deref(),
            signal: signal.as_deref(),
            until,
        })
        .await?;
    Ok(ok(Answer {
        job_id: job_id.to_string(),
        state: waited.job_state,
        outcome: if waited.signal_id.is_some() {
            "signalled"
        } else {
            "waiting"
        },
        attempt: waited.attempt,
        signal,
        until: until.map(timestamp::format),
        signal_id: waited.signal_id,
    })
    .into_response())
}

/// The wait's time limit: `until` (absolute, or `+duration` from now) or `timeout_ms` from now,
/// not both, and not in the past.
fn until(until: Option<&str>, timeout_ms: Option<i64>) -> Result<Option<DateTime<Utc>>, ApiError> {
    let now = Utc::now();
    let at = match (until, timeout_ms) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid_field(
                "$.timeout_ms",
                "Give 'until' or 'timeout_ms', not both",
            ));
        }
        (Some(text), None) => {
            let time = timestamp::parse_client(text)
                .map_err(|e| ApiError::invalid_field("$.until", format!("'until': {e}")))?;
            match (time.absolute(), time.relative_ms()) {
                (Some(at), _) => at,
                (None, Some(ms)) => from_now(now, ms, "$.until")?,
                (None, None) => {
                    return Err(ApiError::invalid_field(
                        "$.until",
                        "'until' is out of range",
                    ));
                }
            }
        }
        (None, Some(ms)) => from_now(now, ms, "$.timeout_ms")?,
        (None, None) => return Ok(None),
    };
    if at <= now {
        return Err(ApiError::invalid_field(
            "$.until",
            "The wait's time limit has passed: give a later 'until'",
        ));
    }
    Ok(Some(at))
}

/// `ms` milliseconds after `now`, if that is a time the server can represent.
fn from_now(now: DateTime<Utc>, ms: i64, field: &str) -> Result<DateTime<Utc>, ApiError> {
    chrono::Duration::try_milliseconds(ms)
        .and_then(|d| now.checked_add_signed(d))
        .filter(|at| chrono::Datelike::year(at) <= 9999)
        .ok_or_else(|| ApiError::invalid_field(field, "The wait's time limit is too far away"))
}
