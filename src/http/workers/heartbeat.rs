//! `POST /ojs/v1/workers/heartbeat` (and `/beat`): liveness, claim extension, directives.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::registry::ReportFields;
use crate::broker::HeartbeatParams;
use crate::http::auth::Caller;
use crate::http::error::ApiError;
use crate::http::extract::positive_ms;
use crate::http::extract::{Fields, JsonBody};
use crate::http::openapi::values::Milliseconds;
use crate::http::{AppState, ok};
use crate::job::JobId;
use crate::job::id_schema::WorkerId;
use crate::wire::json::{self, Kind};
use crate::wire::timestamp;
use crate::worker::{WorkerDirective, WorkerState, required_state};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(heartbeat))
        .routes(routes!(beat))
}

/// A heartbeat's `active_jobs`: the held job ids, or a count (which names none).
fn active_jobs_schema() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, OneOfBuilder, Schema, Type};
    use utoipa::{PartialSchema, openapi::RefOr};
    let ids = ArrayBuilder::new().items(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
        <JobId as ToSchema>::name(),
    )));
    let count = ObjectBuilder::new()
        .schema_type(Type::Integer)
        .minimum(Some(0))
        .maximum(Some(i64::MAX));
    let _ = JobId::schema;
    Schema::OneOf(
        OneOfBuilder::new()
            .item(ids)
            .item(count)
            .description(Some(
                "The job ids the worker holds (a count is accepted and names none).",
            ))
            .build(),
    )
}

/// A heartbeat.
#[derive(ToSchema)]
#[allow(dead_code)] // documentation: read by `heartbeat`
struct HeartbeatRequest {
    #[schema(value_type = WorkerId)]
    worker_id: String,
    /// The state the worker is in.
    #[schema(value_type = Option<WorkerState>)]
    state: Option<String>,
    /// True means `drain`.
    shutdown: Option<bool>,
    #[schema(schema_with = active_jobs_schema)]
    active_jobs: Option<serde_json::Value>,
    #[schema(value_type = Option<Vec<JobId>>)]
    active_job_ids: Option<Vec<String>>,
    /// A single held job: 409 when the worker no longer holds it.
    #[schema(value_type = Option<JobId>)]
    job_id: Option<String>,
    /// Extend held jobs' claims by this much.
    #[schema(value_type = Option<Milliseconds>)]
    visibility_timeout_ms: Option<i64>,
    #[serde(flatten)]
    report: ReportFields,
}

/// Job ids from `active_jobs` (array of ids; an integer count is accepted and carries none),
/// `active_job_ids` and `job_id`.
fn reported_jobs(fields: &Fields<'_>) -> Result<(Vec<Uuid>, Option<JobId>), ApiError> {
    let mut ids = Vec::new();
    for key in ["active_jobs", "active_job_ids"] {
        let Some(raw) = fields.raw(key) else { continue };
        if key == "active_jobs" && Kind::of(raw) == Kind::Number {
            // A count names no job, but it must be one.
            if json::as_integer(raw).is_none_or(|n| n < 0) {
                return Err(ApiError::invalid_field(
                    "$.active_jobs",
                    "'active_jobs' must be an array of job ids or a count (an integer >= 0)",
                ));
            }
            continue;
        }
        let list = json::decode::<Vec<String>>(raw).map_err(|_| {
            ApiError::invalid_field(
                &format!("$.{key}"),
                format!("'{key}' must be an array of job ids"),
            )
        })?;
        for (i, text) in list.iter().enumerate() {
            let id: JobId = text.parse().map_err(|_| {
                ApiError::invalid_field(
                    &format!("$.{key}[{i}]"),
                    format!("{key}[{i}] is not a job id: {text:?}"),
                )
            })?;
            ids.push(id.0);
        }
    }
    let single = match fields.raw("job_id") {
        None => None,
        Some(_) => Some(fields.job_id("job_id")?),
    };
    if let Some(id) = single {
        ids.push(id.0);
    }
    Ok((ids, single))
}

/// `POST /ojs/v1/workers/heartbeat` (and `/beat`): liveness, reservation extension, directives.
///
/// With `active_jobs`/`active_job_ids` the answer lists which jobs were extended, which were
/// cancelled and which the worker no longer holds. A heartbeat for a single `job_id` alone is
/// answered 409 when the worker no longer holds that job.
#[utoipa::path(
    post,
    path = "/ojs/v1/workers/heartbeat",
    tag = "workers",
    summary = "Heartbeat",
    request_body = HeartbeatRequest,
    responses(
        (status = 200, body = Heartbeat),
        (status = 400, description = "A field is invalid."),
        (status = 409, description = "A heartbeat for a single `job_id` the worker no longer holds."),
    )
)]
async fn heartbeat(
    State(state): State<AppState>,
    caller: Caller,
    body: JsonBody,
) -> Result<Response, ApiError> {
    let fields = body.object()?;
    let worker_id = fields
        .worker_id("worker_id")?
        .ok_or_else(|| ApiError::invalid_field("$.worker_id", "'worker_id' is required"))?;
    let mut reported_state = match fields.string("state")?.as_deref() {
        None => WorkerState::Running,
        Some(name) => name.parse::<WorkerState>().map_err(|_| {
            ApiError::invalid_field(
                "$.state",
                format!("'state' must be running, quiet, terminate or drain, not {name:?}"),
            )
        })?,
    };
    if fields.boolean("shutdown")? == Some(true) {
        reported_state = WorkerState::Drain;
    }
    let (job_ids, single) = reported_jobs(&fields)?;
    let held: Vec<JobId> = job_ids.iter().copied().map(JobId).collect();
    caller.check_jobs(&state, &held).await?;
    let single_only = single.is_some() && job_ids.len() == 1;
    let report_fields = ReportFields::parse(&fields)?;
    let params = HeartbeatParams {
        report: report_fields.report(&worker_id, reported_state, caller.tenant().id()),
        job_ids,
        visibility_timeout_ms: positive_ms(&fields, "visibility_timeout_ms")?,
        directives_from_jobs: state.broker().settings().test_hooks,
        refused_unless_extended: single_only,
    };
    let outcome = state.broker().heartbeat(&params).await?;
    if let Some(id) = single
        && single_only
        && outcome.extended.is_empty()
    {
        return Err(state.broker().reservation_lost(id, &worker_id).await.into());
    }
    let required = required_state(outcome.directive, reported_state);
    let ids = |v: &[Uuid]| -> Vec<String> { v.iter().map(|id| JobId(*id).to_string()).collect() };

    Ok(ok(Heartbeat {
        state: required,
        directive: outcome.directive,
        acknowledged: true,
        worker_id,
        jobs_extended: ids(&outcome.extended),
        jobs_cancelled: ids(&outcome.cancelled),
        jobs_lost: ids(&outcome.lost),
        server_time: timestamp::format(outcome.server_time),
        heartbeat_interval: state.settings().heartbeat_interval_secs,
    })
    .into_response())
}

/// `POST /ojs/v1/workers/beat`: the same as `/heartbeat`.
#[utoipa::path(
    post,
    path = "/ojs/v1/workers/beat",
    tag = "workers",
    summary = "Heartbeat (alias of /ojs/v1/workers/heartbeat)",
    request_body = HeartbeatRequest,
    responses(
        (status = 200, body = Heartbeat),
        (status = 400, description = "A field is invalid."),
        (status = 409, description = "A heartbeat for a single `job_id` the worker no longer holds."),
    )
)]
async fn beat(
    state: State<AppState>,
    caller: Caller,
    body: JsonBody,
) -> Result<Response, ApiError> {
    heartbeat(state, caller, body).await
}

/// The answer to a heartbeat.
#[derive(Serialize, ToSchema)]
struct Heartbeat {
    /// The state the worker must move to: `running`, `quiet`, `terminate` or `drain`.
    state: WorkerState,
    /// `quiet`, `terminate`, or `""`.
    directive: WorkerDirective,
    acknowledged: bool,
    worker_id: String,
    /// Held jobs whose claims were extended.
    jobs_extended: Vec<String>,
    /// Held jobs that were cancelled: stop working on them.
    jobs_cancelled: Vec<String>,
    /// Jobs the worker reported but no longer holds.
    jobs_lost: Vec<String>,
    server_time: String,
    heartbeat_interval: u32,
}
