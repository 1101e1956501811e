//! Job progress ([OJS progress]): a worker reports how far it is with a job it holds,
//! `PUT /ojs/v1/jobs/{id}/progress` or `POST /ojs/v1/workers/progress` (the official SDKs'
//! path, the job in the body); anyone reads it with `GET /ojs/v1/jobs/{id}/progress`, or
//! follows it with the SSE stream `GET /ojs/v1/jobs/{id}/progress/stream` (unnamed events,
//! each the progress object; the stream ends once the job is finished).
//!
//! A report gives `progress` as a fraction (0 to 1) or `percentage` (0 to 100); values outside
//! the range are clamped, not refused. Only an `active` job takes reports, and when the report
//! names its `worker_id`, only from the worker that holds the job.
//!
//! [OJS progress]: https://github.com/openjobspec/spec/blob/main/spec/ojs-progress.md

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::value::RawValue;
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::broker::ProgressReport;
use crate::http::auth::Caller;
use crate::http::error::ApiError;
use crate::http::extract::{Fields, JobIdPath, JsonBody};

use crate::http::shapes::ProgressBody;
use crate::http::sse;
use crate::http::{AppState, ok};
use crate::job::JobId;
use crate::job::id_schema::WorkerId;
use crate::wire::json::{self, Kind};

/// Longest `message`, in characters.
const MAX_MESSAGE_CHARS: usize = 1_000;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(show, report_for_path))
        .routes(routes!(stream))
        .routes(routes!(report_for_body))
}

/// A progress report. Give `progress` (a fraction) or `percentage`; when both are given,
/// `progress` wins. Out-of-range values are clamped, not refused. Other members are ignored.
#[derive(ToSchema)]
#[allow(dead_code)] // documentation: read by `parse_report`
struct ProgressReportRequest {
    /// 0 to 1 (clamped). Give this or `percentage`.
    #[schema(nullable = false)]
    progress: Option<f64>,
    /// 0 to 100 (clamped); used when `progress` is absent.
    #[schema(nullable = false)]
    percentage: Option<f64>,
    /// At most 1000 characters.
    #[schema(max_length = 1000)]
    message: Option<String>,
    /// Anything the worker wants to attach.
    #[schema(value_type = Option<Object>)]
    data: Option<serde_json::Value>,
    /// The reporting worker: when given, it must be the worker holding the job.
    #[schema(value_type = Option<WorkerId>)]
    worker_id: Option<String>,
}

/// A progress report naming its job. Give `progress` (a fraction) or `percentage`; when both
/// are given, `progress` wins. Out-of-range values are clamped, not refused. Other members are
/// ignored.
#[derive(ToSchema)]
#[allow(dead_code)] // documentation: read by `report_for_body`
struct WorkerProgressRequest {
    #[schema(value_type = JobId)]
    job_id: String,
    #[serde(flatten)]
    report: ProgressReportRequest,
}

/// A number field, if given.
fn number(fields: &Fields<'_>, key: &str) -> Result<Option<f64>, ApiError> {
    let Some(raw) = fields.raw(key) else {
        return Ok(None);
    };
    json::decode::<f64>(raw)
        .ok()
        .filter(|n| n.is_finite())
        .map(Some)
        .ok_or_else(|| {
            ApiError::invalid_field(
                &format!("$.{key}"),
                format!(
                    "'{key}' must be a number, got {}",
                    Kind::of(raw).article_name()
                ),
            )
        })
}

/// A report as a request body gives it.
struct Parsed<'a> {
    worker_id: Option<String>,
    /// Clamped to 0..=1.
    progress: f64,
    message: Option<String>,
    data: Option<&'a RawValue>,
}

/// The report in a request body.
fn parse_report<'a>(fields: &Fields<'a>) -> Result<Parsed<'a>, ApiError> {
    let progress = match (number(fields, "progress")?, number(fields, "percentage")?) {
        (Some(fraction), _) => fraction,
        (None, Some(percent)) => percent / 100.0,
        (None, None) => {
            return Err(ApiError::invalid_field(
                "$.progress",
                "'progress' (0 to 1) or 'percentage' (0 to 100) is required",
            ));
        }
    };
    let message = fields.string("message")?;
    if message
        .as_ref()
        .is_some_and(|m| m.chars().count() > MAX_MESSAGE_CHARS)
    {
        return Err(ApiError::invalid_field(
            "$.message",
            format!("'message' must be at most {MAX_MESSAGE_CHARS} characters"),
        ));
    }
    let data = fields.raw("data");
    if let Some(raw) = data
        && Kind::of(raw) != Kind::Object
    {
        return Err(ApiError::invalid_field(
            "$.data",
            format!(
                "'data' must be an object, got {}",
                Kind::of(raw).article_name()
            ),
        ));
    }
    Ok(Parsed {
        worker_id: fields.worker_id("worker_id")?,
        progress: progress.clamp(0.0, 1.0),
        message,
        data,
    })
}

async fn record(state: &AppState, id: JobId, fields: &Fields<'_>) -> Result<Response, ApiError> {
    let parsed = parse_report(fields)?;
    let report = ProgressReport {
        worker_id: parsed.worker_id.as_deref(),
        progress: parsed.progress,
        message: parsed.message.as_deref(),
        data: parsed.data,
    };
    let saved = state.broker().report_progress(id, &report).await?;
    Ok(ok(ProgressBody::of(&saved)).into_response())
}

/// `PUT /ojs/v1/jobs/{id}/progress`.
#[utoipa::path(
    put,
    path = "/ojs/v1/jobs/{id}/progress",
    operation_id = "report_job_progress",
    tag = "jobs",
    summary = "Report an active job's progress",
    params(JobIdPath),
    request_body = ProgressReportRequest,
    responses(
        (status = 200, description = "The recorded progress.", body = ProgressBody<'static>),
        (status = 400, description = "The report is invalid."),
        (status = 404, description = "No such job."),
        (status = 409, description = "The job is not active, or another worker holds it."),
    )
)]
async fn report_for_path(
    State(state): State<AppState>,
    JobIdPath(id): JobIdPath,
    caller: Caller,
    body: JsonBody,
) -> Result<Response, ApiError> {
    caller.check_job(&state, id).await?;
    let fields = body.object()?;
    record(&state, id, &fields).await
}

/// `POST /ojs/v1/workers/progress` with `job_id` in the body.
#[utoipa::path(
    post,
    path = "/ojs/v1/workers/progress",
    operation_id = "report_worker_progress",
    tag = "workers",
    summary = "Report an active job's progress (job in the body)",
    request_body = WorkerProgressRequest,
    responses(
        (status = 200, description = "The recorded progress.", body = ProgressBody<'static>),
        (status = 400, description = "The report is invalid or `job_id` is missing or malformed."),
        (status = 404, description = "No such job."),
        (status = 409, description = "The job is not active, or another worker holds it."),
    )
)]
async fn report_for_body(
    State(state): State<AppState>,
    caller: Caller,
    body: JsonBody,
) -> Result<Response, ApiError> {
    let fields = body.object()?;
    let id = fields.job_id("job_id")?;
    caller.check_job(&state, id).await?;
    record(&state, id, &fields).await
}

/// `GET /ojs/v1/jobs/{id}/progress`: the current attempt's latest report (`progress` 0 before
/// any, 1 once the job completed).
#[utoipa::path(
    get,
    path = "/ojs/v1/jobs/{id}/progress",
    operation_id = "get_job_progress",
    tag = "jobs",
    summary = "Read a job's progress",
    params(JobIdPath),
    responses(
        (status = 200, body = ProgressBody<'static>),
        (status = 404, description = "No such job."),
    )
)]
async fn show(
    State(state): State<AppState>,
    JobIdPath(id): JobIdPath,
    caller: Caller,
) -> Result<Response, ApiError> {
    caller.check_job(&state, id).await?;
    let progress = state.broker().progress(id).await?;
    Ok(ok(ProgressBody::of(&progress)).into_response())
}

/// `GET /ojs/v1/jobs/{id}/progress/stream`: the progress now, then each new report, until the
/// job is finished (its final progress is the last event), the client leaves or the server
/// shuts down.
#[utoipa::path(
    get,
    path = "/ojs/v1/jobs/{id}/progress/stream",
    operation_id = "stream_job_progress",
    tag = "jobs",
    summary = "Follow a job's progress (SSE)",
    params(JobIdPath),
    responses(
        (status = 200, content_type = "text/event-stream", body = String,
            description = "Server-sent events, after a first `retry: 3000`: unnamed events \
            whose data is the progress object (`JobProgress`), the current one first, then each \
            change; empty comments keep the connection alive. The stream ends after the job's \
            final progress once it is finished."),
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
    Ok(sse::progress(state, first, ProgressBody::render))
}
