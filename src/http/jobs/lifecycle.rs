//! One job by id: INFO, CANCEL, ACTIVATE and priority changes.

use crate::error::Error;
use crate::http::auth::Caller;
use crate::http::error::ApiError;
use crate::http::extract::{Fields, JobIdPath, JsonBody};
use crate::http::openapi;
use crate::http::shapes::{JobBody, WrappedJob};
use crate::http::{AppState, ok};
use crate::job::envelope::{self};
use crate::job::wire::WireJob;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(info, cancel, change_priority))
        .routes(routes!(activate))
}

/// `{"priority": n}`; other members are ignored.
#[derive(ToSchema)]
pub(super) struct PriorityRequest {
    #[schema(value_type = openapi::values::Priority)]
    priority: i32,
}

impl PriorityRequest {
    /// The request of `fields`, its priority at most `max`.
    fn read(fields: &Fields<'_>, max: i32) -> Result<PriorityRequest, ApiError> {
        let Some(raw) = fields.raw("priority") else {
            return Err(ApiError::invalid_field(
                "$.priority",
                "'priority' is required: the job's new priority (0 is the most urgent)",
            ));
        };
        let priority = envelope::parse_priority("$.priority", raw, max).map_err(Error::from)?;
        Ok(PriorityRequest { priority })
    }
}

/// The answer to a priority change.
#[derive(Serialize, ToSchema)]
#[schema(as = PriorityResponse)]
pub(super) struct PriorityChanged<'a> {
    id: String,
    priority: i32,
    previous_priority: i32,
    #[schema(value_type = openapi::Job)]
    job: WireJob<'a>,
}

/// Wrapped and bare at once ([`WireJob::wrapped_and_bare`]).
fn wrapped_and_bare(job: WireJob<'_>) -> Response {
    ok(job.wrapped_and_bare()).into_response()
}

/// `GET /ojs/v1/jobs/{id}`: `{"job": ...}` with the attributes also beside `job`.
#[utoipa::path(
    get,
    path = "/ojs/v1/jobs/{id}",
    tag = "jobs",
    summary = "Read a job",
    params(JobIdPath),
    responses(
        (status = 200, body = WrappedJob),
        (status = 404, description = "No such job."),
    )
)]
async fn info(
    State(state): State<AppState>,
    JobIdPath(id): JobIdPath,
    caller: Caller,
) -> Result<Response, ApiError> {
    let job = state.broker().show(id).await?;
    caller.check_queue(&job.queue)?;
    Ok(wrapped_and_bare(job.wire()))
}

/// `DELETE /ojs/v1/jobs/{id}`: cancel (idempotent for an already cancelled job); the job
/// wrapped and bare, as for GET.
#[utoipa::path(
    delete,
    path = "/ojs/v1/jobs/{id}",
    tag = "jobs",
    summary = "Cancel a job",
    params(JobIdPath),
    responses(
        (status = 200, description = "Cancelled (or already cancelled); `previous_state` says from what.", body = WrappedJob),
        (status = 404, description = "No such job."),
        (status = 409, description = "The job already finished."),
    )
)]
pub(super) async fn cancel(
    State(state): State<AppState>,
    JobIdPath(id): JobIdPath,
    caller: Caller,
) -> Result<Response, ApiError> {
    caller.check_job(&state, id).await?;
    let cancelled = state.broker().cancel(id).await?;
    Ok(wrapped_and_bare(
        cancelled
            .job
            .wire()
            .with_previous_state(cancelled.previous_state),
    ))
}

/// `PATCH /ojs/v1/jobs/{id}` with `{"priority": n}` ([OJS priority update]): changes the
/// priority of an `available` or `scheduled` job; FETCH uses it from the next claim on.
/// Other members of the body are ignored.
///
/// [OJS priority update]: https://github.com/openjobspec/spec/blob/main/spec/ojs-priority.md#81-priority-update
#[utoipa::path(
    patch,
    path = "/ojs/v1/jobs/{id}",
    tag = "jobs",
    summary = "Change a waiting job's priority",
    params(JobIdPath),
    request_body = PriorityRequest,
    responses(
        (status = 200, body = PriorityChanged<'_>),
        (status = 400, description = "The priority is missing or out of range."),
        (status = 404, description = "No such job."),
        (status = 409, description = "The job is no longer waiting."),
    )
)]
pub(super) async fn change_priority(
    State(state): State<AppState>,
    JobIdPath(id): JobIdPath,
    caller: Caller,
    body: JsonBody,
) -> Result<Response, ApiError> {
    caller.check_job(&state, id).await?;
    let max = state.broker().settings().limits.max_priority;
    let PriorityRequest { priority } = PriorityRequest::read(&body.object()?, max)?;
    let (job, previous_priority) = state.broker().set_priority(id, priority).await?;
    Ok(ok(PriorityChanged {
        id: job.id.to_string(),
        priority: job.priority,
        previous_priority,
        job: job.wire(),
    })
    .into_response())
}

/// `POST /ojs/v1/jobs/{id}/activate`: pending → available. The body, if any, is ignored.
#[utoipa::path(
    post,
    path = "/ojs/v1/jobs/{id}/activate",
    tag = "jobs",
    summary = "Activate a pending job",
    params(JobIdPath),
    responses(
        (status = 200, body = JobBody<'_>),
        (status = 404, description = "No such job."),
        (status = 409, description = "The job is not pending."),
    )
)]
async fn activate(
    State(state): State<AppState>,
    JobIdPath(id): JobIdPath,
    caller: Caller,
) -> Result<Response, ApiError> {
    caller.check_job(&state, id).await?;
    let job = state.broker().activate(id).await?;
    Ok(ok(JobBody {
        job: job
            .wire()
            .with_previous_state(crate::job::JobState::Pending),
    })
    .into_response())
}
