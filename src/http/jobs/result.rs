//! Job results ([OJS results]): `GET /ojs/v1/jobs/{id}/result` reads a job's outcome once it
//! ended, and with `wait=true` holds the request until the job ends (or `timeout` seconds
//! pass); `GET /ojs/v1/jobs/{id}/result/stream` follows its progress, then its outcome (SSE);
//! `POST /ojs/v1/jobs/results` reads many at once.
//!
//! A wait costs the database nothing while it lasts: the job's end, on whichever replica,
//! wakes it (see [`crate::broker::ResultOutcome`] and [`crate::wakeup::results`]).
//!
//! [OJS results]: https://github.com/openjobspec/spec/blob/main/spec/ojs-results.md

use std::collections::BTreeMap;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::json;
use serde_json::value::RawValue;
use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, SchemaType, Type};
use utoipa::{IntoParams, PartialSchema, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::broker::{JobResult, MAX_BULK_RESULTS, ResultOutcome};
use crate::http::auth::Caller;
use crate::http::error::ApiError;
use crate::http::extract::{JobIdPath, JsonBody};
use crate::http::query::QueryParams;
use crate::http::shapes::ProgressBody;
use crate::http::{AppState, ok, sse};
use crate::job::{JobId, JobState};
use crate::wire::timestamp;

/// The wait when `wait=true` names no `timeout`, in seconds.
const DEFAULT_WAIT_SECS: u64 = 30;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(show))
        .routes(routes!(stream))
        .routes(routes!(bulk))
}

/// How long to wait for the job to end.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // documentation: read by `Wait::read`
struct WaitParams {
    /// `true`: hold the request until the job ends or `timeout` passes. Default `false`: answer
    /// at once.
    wait: Option<bool>,
    /// Seconds to wait (with `wait=true`; default 30). Longer waits are cut to the server's
    /// longest long poll (`max_wait_ms` in `GET /ojs/v1/system/settings`).
    #[param(minimum = 0)]
    timeout: Option<u64>,
}

/// The wait a request asks for (zero: none).
fn wait(query: &QueryParams, longest: Duration) -> Result<Duration, ApiError> {
    let wait = match query.get("wait") {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(ApiError::invalid_field(
                "query.wait",
                format!("'wait' must be true or false, got {other:?}"),
            ));
        }
    };
    let timeout = query.count("timeout")?;
    if !wait {
        return Ok(Duration::ZERO);
    }
    let secs = timeout.map_or(DEFAULT_WAIT_SECS, |t| u64::try_from(t).unwrap_or(u64::MAX));
    Ok(Duration::from_secs(secs).min(longest))
}

/// `GET /ojs/v1/jobs/{id}/result`: the job's outcome (`result` once completed, `error` once
/// discarded), waiting for it with `wait=true`.
#[utoipa::path(
    get,
    path = "/ojs/v1/jobs/{id}/result",
    operation_id = "get_job_result",
    tag = "jobs",
    summary = "Read (or await) a job's result",
    params(JobIdPath, WaitParams),
    responses(
        (status = 200, body = ResultBody<'static>, description = "The job ended: its outcome."),
        (status = 400, description = "A bad `wait` or `timeout`."),
        (status = 404, description = "No such job."),
        (status = 408, description = "The job has not ended (`result_not_ready`, with its \
            `state` in `details`): at once without `wait`, else when the wait ran out."),
        (status = 410, description = "The job ended but its result is no longer served \
            (`RESULT_PRUNED`): its `result_ttl` ran out or was 0, or the job was removed while \
            awaited."),
    )
)]
async fn show(
    State(state): State<AppState>,
    JobIdPath(id): JobIdPath,
    query: QueryParams,
    caller: Caller,
) -> Result<Response, ApiError> {
    let wait = wait(&query, state.settings().max_wait)?;
    caller.check_job(&state, id).await?;
    let outcome = state.broker().job_result(id, wait).await?;
    let id = id.to_string();
    match outcome {
        ResultOutcome::Ready(result) => Ok(ok(ResultBody::of(&result)).into_response()),
        ResultOutcome::Pending(job_state) => {
            Err(ApiError::result_not_ready(&id, job_state.as_str()))
        }
        ResultOutcome::Pruned { state: _, at } => Err(pruned(&id, at)),
    }
}

fn pruned(id: &str, at: Option<chrono::DateTime<chrono::Utc>>) -> ApiError {
    let at = at.map(timestamp::format);
    let message = match &at {
        Some(at) => format!("The result of job '{id}' expired at {at}."),
        None => format!("Job '{id}' ended and is no longer kept."),
    };
    ApiError::result_pruned(id, message, at.as_deref())
}

/// `GET /ojs/v1/jobs/{id}/result/stream`: the job's progress, then its outcome, as server-sent
/// events.
#[utoipa::path(
    get,
    path = "/ojs/v1/jobs/{id}/result/stream",
    operation_id = "stream_job_result",
    tag = "jobs",
    summary = "Follow a job's progress, then its result (SSE)",
    params(JobIdPath),
    responses(
        (status = 200, content_type = "text/event-stream", body = String,
            description = "Server-sent events, after a first `retry: 3000`: `progress` events \
            (data: the `JobProgress` object), the current one first, then each new report; then \
            one last event once the job ended: `result` (data `{\"job_id\", \"state\", \
            \"value\"}`, the ACK's result) when it completed, `error` (data `{\"job_id\", \
            \"state\", \"error\"}`) when it was discarded or cancelled or its result is no \
            longer served. Empty comments keep the connection alive."),
        (status = 404, description = "No such job."),
    )
)]
async fn stream(
    State(state): State<AppState>,
    JobIdPath(id): JobIdPath,
    caller: Caller,
) -> Result<Response, ApiError> {
    caller.check_job(&state, id).await?;
    let first = state.broker().progress(id).await?;
    Ok(sse::outcome(state, first, ProgressBody::render, last_event))
}

/// The stream's last event: `result` for a completed job, `error` otherwise.
fn last_event(outcome: &ResultOutcome) -> Event {
    let (name, data) = match outcome {
        ResultOutcome::Ready(r) if r.state == JobState::Completed => (
            "result",
            json!({"job_id": r.job_id.to_string(), "state": r.state,
                   "value": r.result.as_ref().map(|v| &*v.0)}),
        ),
        ResultOutcome::Ready(r) => (
            "error",
            json!({"job_id": r.job_id.to_string(), "state": r.state,
                   "error": r.error.as_ref().map(|v| &*v.0)}),
        ),
        ResultOutcome::Pruned { state, at } => (
            "error",
            json!({"state": state, "error": {"code": "RESULT_PRUNED",
                   "message": "the result is no longer served",
                   "expired_at": at.map(timestamp::format)}}),
        ),
        ResultOutcome::Pending(state) => ("progress", json!({"state": state})),
    };
    Event::default().event(name).data(data.to_string())
}

/// A finished job's outcome.
#[derive(Serialize, ToSchema)]
#[schema(as = JobResult)]
struct ResultBody<'a> {
    #[schema(value_type = JobId)]
    job_id: String,
    /// `completed`, `discarded` or `cancelled`.
    state: JobState,
    /// What the ACK sent (`null` when it sent none, and for a job that did not complete).
    #[schema(value_type = serde_json::Value)]
    result: Option<&'a RawValue>,
    /// The last error of a discarded job.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    error: Option<&'a RawValue>,
    /// When the outcome was stored (the job ended).
    #[schema(value_type = crate::http::openapi::values::Timestamp)]
    result_stored_at: String,
    /// When the result stops being served, when the job's `result_ttl` says (absent: as long
    /// as the job is kept).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<crate::http::openapi::values::Timestamp>)]
    result_expires_at: Option<String>,
    /// The stored result's size in bytes (absent without a result).
    #[serde(skip_serializing_if = "Option::is_none")]
    result_size_bytes: Option<i32>,
}

impl<'a> ResultBody<'a> {
    fn of(r: &'a JobResult) -> ResultBody<'a> {
        ResultBody {
            job_id: r.job_id.to_string(),
            state: r.state,
            result: r.result.as_ref().map(|v| &*v.0),
            error: r.error.as_ref().map(|v| &*v.0),
            result_stored_at: timestamp::format(r.stored_at),
            result_expires_at: r.expires_at.map(timestamp::format),
            result_size_bytes: r.size_bytes,
        }
    }
}

/// Jobs whose results to read.
#[derive(ToSchema)]
#[schema(as = JobResultsRequest)]
#[allow(dead_code)] // documentation: read by `bulk`
struct BulkRequest {
    /// Up to 1000 job ids.
    #[schema(value_type = Vec<JobId>, max_items = 1000)]
    ids: Vec<String>,
}

/// Each job's outcome, by id.
#[derive(Serialize, ToSchema)]
#[schema(as = JobResults)]
struct BulkBody<'a> {
    /// Each named job's outcome by id; `null` for a job that does not exist.
    #[schema(schema_with = results_schema)]
    results: BTreeMap<String, Option<BulkEntry<'a>>>,
}

/// `results`: an object whose members are [`BulkEntry`]s or `null`.
fn results_schema() -> Schema {
    let entry = OneOfBuilder::new()
        .item(BulkEntry::schema())
        .item(ObjectBuilder::new().schema_type(SchemaType::Type(Type::Null)))
        .build();
    ObjectBuilder::new()
        .additional_properties(Some(Schema::OneOf(entry)))
        .into()
}

/// One job's outcome in a bulk read.
#[derive(Serialize, ToSchema)]
#[schema(as = JobResultEntry)]
struct BulkEntry<'a> {
    state: JobState,
    /// The result, once completed and while served; else `null`.
    #[schema(value_type = serde_json::Value)]
    result: Option<&'a RawValue>,
    /// The last error of a discarded job, while served.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    error: Option<&'a RawValue>,
    /// `true` when the job ended but its result is no longer served.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pruned: bool,
}

/// `POST /ojs/v1/jobs/results`: the outcomes of up to 1000 jobs.
#[utoipa::path(
    post,
    path = "/ojs/v1/jobs/results",
    operation_id = "get_job_results",
    tag = "jobs",
    summary = "Read many jobs' results",
    request_body = BulkRequest,
    responses(
        (status = 200, body = BulkBody<'static>, description = "Every named job, by id: its state and \
            `result` (`null` until it completed, or once pruned), or `null` when it does not \
            exist."),
        (status = 400, description = "Not `{\"ids\": [...]}` of job ids, or more than 1000."),
    )
)]
async fn bulk(
    State(state): State<AppState>,
    caller: Caller,
    body: JsonBody,
) -> Result<Response, ApiError> {
    let fields = body.object()?;
    let Some(texts) = fields.strings("ids")? else {
        return Err(ApiError::invalid_field("$.ids", "'ids' is required"));
    };
    if texts.len() > MAX_BULK_RESULTS {
        return Err(ApiError::invalid_field(
            "$.ids",
            format!(
                "'ids' may name at most {MAX_BULK_RESULTS} jobs, got {}",
                texts.len()
            ),
        ));
    }
    let ids = texts
        .iter()
        .enumerate()
        .map(|(i, text)| {
            text.parse::<JobId>().map_err(|_| {
                ApiError::invalid_field(
                    &format!("$.ids[{i}]"),
                    format!("'ids[{i}]' must be a lowercase UUIDv7 job id, got {text:?}"),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    caller.check_jobs(&state, &ids).await?;
    let outcomes = state.broker().job_results(&ids).await?;
    let results = outcomes
        .iter()
        .map(|(id, outcome)| (id.to_string(), outcome.as_ref().map(BulkEntry::of)))
        .collect();
    Ok(ok(BulkBody { results }).into_response())
}

impl<'a> BulkEntry<'a> {
    fn of(outcome: &'a ResultOutcome) -> BulkEntry<'a> {
        match outcome {
            ResultOutcome::Ready(r) => BulkEntry {
                state: r.state,
                result: r.result.as_ref().map(|v| &*v.0),
                error: r.error.as_ref().map(|v| &*v.0),
                pruned: false,
            },
            ResultOutcome::Pending(state) => BulkEntry {
                state: *state,
                result: None,
                error: None,
                pruned: false,
            },
            ResultOutcome::Pruned { state, .. } => BulkEntry {
                state: state.unwrap_or(JobState::Completed),
                result: None,
                error: None,
                pruned: true,
            },
        }
    }
}
