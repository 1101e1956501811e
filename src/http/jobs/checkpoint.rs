//! Checkpoints ([OJS durable execution]): a job saves its state as it goes,
//! `PUT` (or `POST`) `/ojs/v1/jobs/{id}/checkpoint`, reads it back with `GET`, drops it with
//! `DELETE`; FETCH hands the latest one to the job's next attempt as `checkpoint`.
//!
//! A save's body is `{"state": <any JSON>}`, with an optional `worker_id` that fences it (the
//! job must then be active and held by that worker); a body without a `state` member is the
//! state itself. The state may be up to 1 MiB. Answers carry the checkpoint's members at the
//! top (as the conformance suite reads them) and again under `checkpoint` (as the
//! specification writes them).
//!
//! [OJS durable execution]: https://github.com/openjobspec/spec/blob/main/spec/ojs-durable-execution.md

use std::borrow::Cow;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::value::RawValue;
use utoipa::openapi::schema::{AnyOfBuilder, ObjectBuilder, Schema, SchemaType};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::broker::Checkpoint;
use crate::http::auth::Caller;
use crate::http::error::ApiError;
use crate::http::extract::{JobIdPath, JsonBody};
use crate::http::{AppState, ok};
use crate::job::id_schema::WorkerId;
use crate::wire::timestamp;

/// Largest saved state, in bytes (its JSON text as sent).
pub(crate) const MAX_CHECKPOINT_BYTES: usize = 1024 * 1024;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(save, save_post, show, remove))
}

/// A save: `{"state": ...}` (and, to fence it, `worker_id`), or the state itself.
#[derive(ToSchema)]
#[schema(as = CheckpointRequest)]
struct SaveRequest<'a> {
    /// The state to save: any JSON value, at most 1 MiB.
    #[schema(value_type = serde_json::Value)]
    state: &'a RawValue,
    /// The saving worker: when given, the job must be active and held by it.
    #[schema(value_type = Option<WorkerId>)]
    worker_id: Option<String>,
}

impl<'a> SaveRequest<'a> {
    fn read(body: &'a JsonBody) -> Result<SaveRequest<'a>, ApiError> {
        let text = body.text();
        let wrapped = body
            .object()
            .ok()
            .and_then(|fields| fields.raw("state").map(|state| (fields, state)));
        let request = match wrapped {
            Some((fields, state)) => SaveRequest {
                worker_id: fields.worker_id("worker_id")?,
                state,
            },
            None => SaveRequest {
                state: serde_json::from_str(text).map_err(|e| {
                    ApiError::invalid_payload(format!("The request body is not valid JSON: {e}."))
                })?,
                worker_id: None,
            },
        };
        let size = request.state.get().len();
        if size > MAX_CHECKPOINT_BYTES {
            return Err(ApiError::too_large(
                Some("$.state"),
                Some(size),
                MAX_CHECKPOINT_BYTES,
            ));
        }
        Ok(request)
    }
}

/// The body of a save: `{"state": ...}` ([`SaveRequest`]), or any other JSON value, which is
/// then the state itself.
struct SaveBody;

impl PartialSchema for SaveBody {
    fn schema() -> RefOr<Schema> {
        AnyOfBuilder::new()
            .item(Ref::from_schema_name(SaveRequest::name()))
            .item(
                ObjectBuilder::new()
                    .schema_type(SchemaType::AnyValue)
                    .description(Some("The state itself.")),
            )
            .description(Some(
                "`{\"state\": ...}` (with `worker_id` to fence the save), or any other JSON \
                 value: the state itself.",
            ))
            .into()
    }
}

impl ToSchema for SaveBody {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("CheckpointSave")
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((SaveRequest::name().into(), SaveRequest::schema()));
        SaveRequest::schemas(schemas);
    }
}

/// A checkpoint as the answers show it.
#[derive(Clone, Copy, Serialize, ToSchema)]
#[schema(as = Checkpoint)]
struct CheckpointView<'a> {
    #[schema(value_type = crate::job::JobId)]
    job_id: &'a str,
    /// The saved state (not repeated in the answer to a save).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<serde_json::Value>)]
    state: Option<&'a RawValue>,
    /// 1 for the first save, one more for each later one (a deleted checkpoint starts again).
    sequence: i32,
    #[schema(value_type = crate::http::openapi::values::Timestamp)]
    created_at: &'a str,
}

/// A checkpoint: its members, and the same under `checkpoint`.
#[derive(Serialize, ToSchema)]
#[schema(as = CheckpointBody)]
struct Body<'a> {
    #[serde(flatten)]
    top: CheckpointView<'a>,
    checkpoint: CheckpointView<'a>,
}

fn answer(checkpoint: &Checkpoint) -> Response {
    let job_id = checkpoint.job_id.to_string();
    let created_at = timestamp::format(checkpoint.created_at);
    let view = CheckpointView {
        job_id: &job_id,
        state: checkpoint.state.as_ref().map(|s| &*s.0),
        sequence: checkpoint.sequence,
        created_at: &created_at,
    };
    ok(Body {
        top: view,
        checkpoint: view,
    })
    .into_response()
}

/// Saves a checkpoint.
async fn record(
    state: &AppState,
    caller: &Caller,
    id: crate::job::JobId,
    body: &JsonBody,
) -> Result<Response, ApiError> {
    caller.check_job(state, id).await?;
    let request = SaveRequest::read(body)?;
    let saved = state
        .broker()
        .save_checkpoint(id, request.worker_id.as_deref(), request.state)
        .await?;
    Ok(answer(&saved))
}

/// `PUT /ojs/v1/jobs/{id}/checkpoint`.
#[utoipa::path(
    put,
    path = "/ojs/v1/jobs/{id}/checkpoint",
    operation_id = "save_job_checkpoint",
    tag = "jobs",
    summary = "Save a job's checkpoint",
    description = "Replaces the job's checkpoint with `state`; the next attempt gets it with \
                   FETCH. Any job that has not finished takes one; a save naming `worker_id` \
                   only an active job that worker holds.",
    params(JobIdPath),
    request_body = SaveBody,
    responses(
        (status = 200, description = "Saved.", body = Body<'static>),
        (status = 400, description = "The body is invalid."),
        (status = 404, description = "No such job."),
        (status = 409, description = "The job has finished, or (with `worker_id`) is not held by that worker."),
        (status = 413, description = "`state` is larger than 1 MiB."),
    )
)]
async fn save(
    State(state): State<AppState>,
    JobIdPath(id): JobIdPath,
    caller: Caller,
    body: JsonBody,
) -> Result<Response, ApiError> {
    record(&state, &caller, id, &body).await
}

/// `POST /ojs/v1/jobs/{id}/checkpoint`: [`save`], as the specification spells it.
#[utoipa::path(
    post,
    path = "/ojs/v1/jobs/{id}/checkpoint",
    operation_id = "save_job_checkpoint_post",
    tag = "jobs",
    summary = "Save a job's checkpoint",
    description = "The same as `PUT /ojs/v1/jobs/{id}/checkpoint`.",
    params(JobIdPath),
    request_body = SaveBody,
    responses(
        (status = 200, description = "Saved.", body = Body<'static>),
        (status = 400, description = "The body is invalid."),
        (status = 404, description = "No such job."),
        (status = 409, description = "The job has finished, or (with `worker_id`) is not held by that worker."),
        (status = 413, description = "`state` is larger than 1 MiB."),
    )
)]
async fn save_post(
    State(state): State<AppState>,
    JobIdPath(id): JobIdPath,
    caller: Caller,
    body: JsonBody,
) -> Result<Response, ApiError> {
    record(&state, &caller, id, &body).await
}

/// `GET /ojs/v1/jobs/{id}/checkpoint`.
#[utoipa::path(
    get,
    path = "/ojs/v1/jobs/{id}/checkpoint",
    operation_id = "get_job_checkpoint",
    tag = "jobs",
    summary = "Read a job's checkpoint",
    params(JobIdPath),
    responses(
        (status = 200, body = Body<'static>),
        (status = 404, description = "No such job, or it has no checkpoint."),
    )
)]
async fn show(
    State(state): State<AppState>,
    JobIdPath(id): JobIdPath,
    caller: Caller,
) -> Result<Response, ApiError> {
    caller.check_job(&state, id).await?;
    let checkpoint = state.broker().checkpoint(id).await?;
    Ok(answer(&checkpoint))
}

/// The answer to a delete.
#[derive(Serialize, ToSchema)]
#[schema(as = CheckpointDeleted)]
struct Deleted {
    /// Whether there was a checkpoint (deleting none is not an error).
    deleted: bool,
    #[schema(value_type = crate::job::JobId)]
    job_id: String,
}

/// `DELETE /ojs/v1/jobs/{id}/checkpoint`.
#[utoipa::path(
    delete,
    path = "/ojs/v1/jobs/{id}/checkpoint",
    operation_id = "delete_job_checkpoint",
    tag = "jobs",
    summary = "Delete a job's checkpoint",
    description = "The job's next attempt starts without one; a later save starts again at \
                   sequence 1.",
    params(JobIdPath),
    responses(
        (status = 200, body = Deleted),
        (status = 404, description = "No such job."),
    )
)]
async fn remove(
    State(state): State<AppState>,
    JobIdPath(id): JobIdPath,
    caller: Caller,
) -> Result<Response, ApiError> {
    caller.check_job(&state, id).await?;
    let deleted = state.broker().delete_checkpoint(id).await?;
    Ok(ok(Deleted {
        deleted,
        job_id: id.to_string(),
    })
    .into_response())
}
