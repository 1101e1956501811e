//! Steps that run once (durable execution): the worker holding a job's current attempt records
//! what a named step returned, `POST /ojs/v1/jobs/{id}/steps/{name}`; every later attempt gets
//! the recorded steps with FETCH (`steps`, by name) and skips them. `GET
//! /ojs/v1/jobs/{id}/steps` lists them.
//!
//! A record's body is `{"attempt": n, "result": <any JSON>, "worker_id": "..."}`: `attempt` is
//! the attempt the worker holds (the job must be active at it), `worker_id` when given must be
//! the job's holder, `result` may be absent (null) and up to 1 MiB. The first record of a step
//! stands: a second is answered 409 `step_already_recorded` with the first in `details.step`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::http::auth::Caller;
use crate::http::error::ApiError;
use crate::http::extract::{JobIdPath, JobNamePath, JsonBody};
use crate::http::respond::Ojs;
use crate::http::shapes::StepView;
use crate::http::{AppState, ok};
use crate::job::id_schema::WorkerId;

/// Largest step result, in bytes (its JSON text as sent).
const MAX_RESULT_BYTES: usize = 1024 * 1024;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(record))
        .routes(routes!(list))
}

/// A step's record.
#[derive(ToSchema)]
#[allow(dead_code)]
#[schema(as = StepRecord)]
struct RecordRequest {
    /// The attempt the worker holds (FETCH handed it as the job's `attempt`).
    #[schema(minimum = 1)]
    attempt: i32,
    /// What the step returned: any JSON value, at most 1 MiB (absent: null).
    result: Option<serde_json::Value>,
    /// The recording worker: when given, it must hold the job.
    #[schema(value_type = Option<WorkerId>)]
    worker_id: Option<String>,
}

/// `{"step": {...}}`.
#[derive(Serialize, ToSchema)]
#[schema(as = JobStepBody)]
struct StepBody<'a> {
    step: StepView<'a>,
}

/// `POST /ojs/v1/jobs/{id}/steps/{name}`.
#[utoipa::path(
    post,
    path = "/ojs/v1/jobs/{id}/steps/{name}",
    operation_id = "record_job_step",
    tag = "jobs",
    summary = "Record a step of the current attempt",
    description = "Records what step `name` returned, once: the job must be active at \
                   `attempt` (and held by `worker_id` when given). Every later attempt gets \
                   the job's recorded steps with FETCH, as `steps`, and skips them. A step \
                   recorded before is answered 409 `step_already_recorded` with the first \
                   record in `details.step`.",
    params(JobNamePath),
    request_body = RecordRequest,
    responses(
        (status = 201, description = "Recorded.", body = StepBody<'static>),
        (status = 400, description = "The body or the name is invalid."),
        (status = 404, description = "No such job."),
        (status = 409, description = "Recorded before (`step_already_recorded`, the first record in `details.step`), or the job is not active at that attempt, or is held by another worker."),
        (status = 413, description = "`result` is larger than 1 MiB."),
    )
)]
async fn record(
    State(state): State<AppState>,
    path: JobNamePath,
    caller: Caller,
    body: JsonBody,
) -> Result<Response, ApiError> {
    caller.check_job(&state, path.id).await?;
    let fields = body.object()?;
    let attempt = fields.attempt("attempt")?.ok_or_else(|| {
        ApiError::invalid_field(
            "$.attempt",
            "'attempt' is required: the attempt the worker holds",
        )
    })?;
    let worker_id = fields.worker_id("worker_id")?;
    let result = fields.raw("result");
    if let Some(size) = result.map(|r| r.get().len())
        && size > MAX_RESULT_BYTES
    {
        return Err(ApiError::too_large(
            Some("$.result"),
            Some(size),
            MAX_RESULT_BYTES,
        ));
    }
    let step = state
        .broker()
        .record_step(path.id, &path.name, attempt, worker_id.as_deref(), result)
        .await?;
    Ok(Ojs(
        StatusCode::CREATED,
        StepBody {
            step: StepView::of(&step),
        },
    )
    .into_response())
}

/// A job's recorded steps.
#[derive(Serialize, ToSchema)]
#[schema(as = JobSteps)]
struct StepsBody<'a> {
    #[schema(value_type = crate::job::JobId)]
    job_id: String,
    /// Oldest first.
    steps: Vec<StepView<'a>>,
}

/// `GET /ojs/v1/jobs/{id}/steps`.
#[utoipa::path(
    get,
    path = "/ojs/v1/jobs/{id}/steps",
    operation_id = "list_job_steps",
    tag = "jobs",
    summary = "List a job's recorded steps",
    params(JobIdPath),
    responses(
        (status = 200, body = StepsBody<'static>),
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
    Ok(ok(StepsBody {
        job_id: id.to_string(),
        steps: durable.steps.iter().map(StepView::of).collect(),
    })
    .into_response())
}
