//! Signals (durable execution): `POST /ojs/v1/jobs/{id}/signals/{name}` sends one to a job.
//! A job waiting for that signal (it ended an attempt with `POST /ojs/v1/workers/wait`) becomes
//! available at once and gets the signal's payload with FETCH (`signals`, by name); a job that
//! does not wait for it yet keeps it, and its next wait for that name ends at once, so a signal
//! that arrives before the worker reaches its wait is not lost. `GET
//! /ojs/v1/jobs/{id}/signals` lists a job's signals and its latest wait.
//!
//! The body is optional: `{"payload": <any JSON, at most 1 MiB>, "key": "..."}`. A `key` sends
//! the signal once: a second signal to the job with the same key is answered with the first
//! one's outcome (`duplicate`) and not stored. SQL sends the same signal with
//! `select ojs_signal(job_id, name, payload, key)` in the caller's transaction.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::value::RawValue;
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::broker::{SignalOutcome, SignalRow, WaitRow};
use crate::http::auth::Caller;
use crate::http::error::ApiError;
use crate::http::extract::{JobIdPath, JobNamePath, OptionalJsonBody};
use crate::http::openapi::values::Timestamp;
use crate::http::{AppState, ok};
use crate::job::JobState;
use crate::job::durable::{MAX_NAME_CHARS, is_valid_name};
use crate::wire::timestamp;

/// Largest signal payload, in bytes (its JSON text as sent).
const MAX_PAYLOAD_BYTES: usize = 1024 * 1024;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(send))
        .routes(routes!(list))
}

/// A signal's body (all optional).
#[derive(ToSchema)]
#[allow(dead_code)]
#[schema(as = SignalRequest)]
struct SendRequest {
    /// Handed to the job with FETCH: any JSON value, at most 1 MiB (absent: null).
    payload: Option<serde_json::Value>,
    /// Sends the signal once: a second signal to the job with this key is not stored again.
    #[schema(value_type = Option<crate::job::id_schema::DurableName>)]
    key: Option<String>,
}

/// A signal as a send answers it.
#[derive(Serialize, ToSchema)]
#[schema(as = SignalSent)]
struct Sent {
    /// The signal's id (order of arrival).
    id: i64,
    #[schema(value_type = crate::job::JobId)]
    job_id: String,
    name: String,
    /// `delivered` (the job waited for it and is available again), `kept` (for its next wait
    /// for this name) or `duplicate` (a signal with this key was sent: its id and times).
    outcome: SignalOutcome,
    /// The job's state after the signal.
    job_state: JobState,
    #[schema(value_type = Timestamp)]
    sent_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Timestamp>)]
    delivered_at: Option<String>,
}

/// `{"signal": {...}}`.
#[derive(Serialize, ToSchema)]
#[schema(as = SignalSentBody)]
struct SentBody {
    signal: Sent,
}

/// `POST /ojs/v1/jobs/{id}/signals/{name}`.
#[utoipa::path(
    post,
    path = "/ojs/v1/jobs/{id}/signals/{name}",
    operation_id = "send_job_signal",
    tag = "jobs",
    summary = "Send a signal to a job",
    description = "Delivers signal `name` to a job waiting for it (the job becomes available \
                   at once, once, whatever the replica), or keeps it for the job's next wait \
                   for that name. A finished job takes no signal (409).",
    params(JobNamePath),
    request_body(content = Option<SendRequest>, description = "Optional: the payload and a key."),
    responses(
        (status = 200, description = "Delivered, kept, or a duplicate of the signal with this key.", body = SentBody),
        (status = 400, description = "The body or the name is invalid."),
        (status = 404, description = "No such job."),
        (status = 409, description = "The job has finished."),
        (status = 413, description = "`payload` is larger than 1 MiB."),
    )
)]
async fn send(
    State(state): State<AppState>,
    path: JobNamePath,
    caller: Caller,
    OptionalJsonBody(body): OptionalJsonBody,
) -> Result<Response, ApiError> {
    caller.check_job(&state, path.id).await?;
    let fields = body.as_ref().map(|b| b.object()).transpose()?;
    let payload: Option<&RawValue> = fields.as_ref().and_then(|f| f.raw("payload"));
    if let Some(size) = payload.map(|p| p.get().len())
        && size > MAX_PAYLOAD_BYTES
    {
        return Err(ApiError::too_large(
            Some("$.payload"),
            Some(size),
            MAX_PAYLOAD_BYTES,
        ));
    }
    let key = match &fields {
        Some(fields) => fields.string("key")?,
        None => None,
    };
    if key.as_deref().is_some_and(|k| !is_valid_name(k)) {
        return Err(ApiError::invalid_field(
            "$.key",
            format!("'key' must be 1-{MAX_NAME_CHARS} characters without control characters"),
        ));
    }
    let sent = state
        .broker()
        .signal(path.id, &path.name, payload, key.as_deref())
        .await?;
    Ok(ok(SentBody {
        signal: Sent {
            id: sent.id,
            job_id: sent.job_id.to_string(),
            name: sent.name,
            outcome: sent.outcome,
            job_state: sent.job_state,
            sent_at: timestamp::format(sent.sent_at),
            delivered_at: sent.delivered_at.map(timestamp::format),
        },
    })
    .into_response())
}

/// A signal as a job's list shows it.
#[derive(Serialize, ToSchema)]
#[schema(as = JobSignal)]
struct SignalView<'a> {
    id: i64,
    name: &'a str,
    #[schema(value_type = Option<serde_json::Value>)]
    payload: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<&'a str>,
    #[schema(value_type = Timestamp)]
    sent_at: String,
    /// When it ended a wait; absent while it is kept for the next one.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Timestamp>)]
    delivered_at: Option<String>,
}

impl<'a> SignalView<'a> {
    fn of(s: &'a SignalRow) -> SignalView<'a> {
        SignalView {
            id: s.id,
            name: &s.name,
            payload: s.payload.as_ref().map(|p| &*p.0),
            key: s.key.as_deref(),
            sent_at: timestamp::format(s.sent_at),
            delivered_at: s.delivered_at.map(timestamp::format),
        }
    }
}

/// A job's latest wait.
#[derive(Serialize, ToSchema)]
#[schema(as = JobWait)]
struct WaitView<'a> {
    /// The signal that ends it (absent: only the time).
    #[serde(skip_serializing_if = "Option::is_none")]
    signal: Option<&'a str>,
    /// When it ends without the signal (absent: only a signal ends it).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Timestamp>)]
    until: Option<String>,
    #[schema(value_type = Timestamp)]
    started_at: String,
    /// When a signal ended it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Timestamp>)]
    ended_at: Option<String>,
    /// The signal that ended it.
    #[serde(skip_serializing_if = "Option::is_none")]
    signal_id: Option<i64>,
}

impl<'a> WaitView<'a> {
    fn of(w: &'a WaitRow) -> WaitView<'a> {
        WaitView {
            signal: w.signal.as_deref(),
            until: w.until.map(timestamp::format),
            started_at: timestamp::format(w.started_at),
            ended_at: w.ended_at.map(timestamp::format),
            signal_id: w.signal_id,
        }
    }
}

/// A job's signals and latest wait.
#[derive(Serialize, ToSchema)]
#[schema(as = JobSignals)]
struct SignalsBody<'a> {
    #[schema(value_type = crate::job::JobId)]
    job_id: String,
    /// The job's latest wait, if it ever waited.
    #[serde(skip_serializing_if = "Option::is_none")]
    wait: Option<WaitView<'a>>,
    /// In order of arrival.
    signals: Vec<SignalView<'a>>,
}

/// `GET /ojs/v1/jobs/{id}/signals`.
#[utoipa::path(
    get,
    path = "/ojs/v1/jobs/{id}/signals",
    operation_id = "list_job_signals",
    tag = "jobs",
    summary = "List a job's signals and its latest wait",
    params(JobIdPath),
    responses(
        (status = 200, body = SignalsBody<'static>),
        (status = 404, description = "No such job."),
    )
)]
async fn list(
    State(state): State<AppState>,
    JobIdPath(id): JobIdPath,
    caller: Caller,
) -> Result<Response, ApiError> {
    caller.check_job(&state, id).await?;
    let durable = state.broker().durable(id).await?;
    Ok(ok(SignalsBody {
        job_id: id.to_string(),
        wait: durable.wait.as_ref().map(WaitView::of),
        signals: durable.signals.iter().map(SignalView::of).collect(),
    })
    .into_response())
}
