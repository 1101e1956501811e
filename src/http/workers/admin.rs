//! `/ojs/v1/admin/workers`: workers as the operator sees them ([OJS worker management]): the list
//! with counts by state, one worker, directives, and removal of a stale worker.
//!
//! [OJS worker management]: https://github.com/openjobspec/spec/blob/main/spec/ojs-admin-api.md#9-worker-management

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::registry::WireWorker;
use crate::http::error::ApiError;
use crate::http::extract::{OptionalJsonBody, WorkerIdPath};
use crate::http::query::{ADMIN, Page, Pagination, QueryParams};

use crate::http::tenancy::Tenant;
use crate::http::{AppState, ok};
use crate::job::id_schema::WorkerId;
use crate::worker::{EffectiveState, WorkerDirective};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_workers))
        .routes(routes!(get_worker, delete_worker))
        .routes(routes!(direct))
}

/// The worker id and directive of a path.
#[derive(serde::Deserialize, IntoParams)]
#[into_params(names("worker_id", "directive"), parameter_in = Path)]
struct DirectivePath(
    /// The worker's id.
    #[param(value_type = WorkerId)]
    String,
    /// `quiet` or `terminate` (any other segment is not a route: 404).
    #[param(pattern = "^(quiet|terminate)$")]
    String,
);

/// Workers by state.
#[derive(Serialize, ToSchema)]
#[schema(as = WorkerSummary)]
struct Summary {
    total: i64,
    running: i64,
    quiet: i64,
    terminate: i64,
    stale: i64,
}

/// A page of workers, with counts over all of them.
#[derive(Serialize, ToSchema)]
#[schema(as = WorkerList)]
struct WorkerList<'a> {
    items: Vec<WireWorker<'a>>,
    summary: Summary,
    pagination: Pagination,
}

/// `GET /ojs/v1/admin/workers`: workers by id, with counts by state.
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/workers",
    tag = "admin",
    operation_id = "admin_list_workers",
    summary = "List workers",
    params(Page),
    responses(
        (status = 200, description = "Workers by id, a page at a time.", body = WorkerList<'_>),
        (status = 400, description = "A page parameter is invalid."),
    )
)]
async fn list_workers(
    State(state): State<AppState>,
    tenant: Tenant,
    query: QueryParams,
) -> Result<Response, ApiError> {
    let page = Page::from_query(&query, ADMIN)?;
    let (workers, summary) = state
        .broker()
        .workers(tenant.id(), page.limit, page.offset)
        .await?;
    Ok(ok(WorkerList {
        items: workers.iter().map(|w| WireWorker::new(w, false)).collect(),
        summary: Summary {
            total: summary.total,
            running: summary.running,
            quiet: summary.quiet,
            terminate: summary.terminate,
            stale: summary.stale,
        },
        pagination: page.describe(summary.total),
    })
    .into_response())
}

/// `GET /ojs/v1/admin/workers/{id}`: one worker with the ids of the jobs it holds.
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/workers/{worker_id}",
    tag = "admin",
    operation_id = "admin_get_worker",
    summary = "Read a worker",
    params(WorkerIdPath),
    responses(
        (status = 200, description = "The worker, with `active_job_ids`.", body = WireWorker<'_>),
        (status = 404, description = "No such worker."),
    )
)]
async fn get_worker(
    State(state): State<AppState>,
    WorkerIdPath(worker_id): WorkerIdPath,
) -> Result<Response, ApiError> {
    let worker = state.broker().worker(&worker_id).await?;
    Ok(ok(WireWorker::new(&worker, true)).into_response())
}

/// What a directive did.
#[derive(Serialize, ToSchema)]
#[schema(as = WorkerDirected)]
struct Directed {
    /// The worker's directive now: `quiet` or `terminate` (directives only escalate).
    directive: WorkerDirective,
    /// `running`, `quiet`, `terminate`, `drain` or `stale`.
    state: EffectiveState,
    worker_id: String,
}

/// `POST /ojs/v1/admin/workers/{id}/quiet` (stop fetching, finish what you hold) and
/// `/terminate` (stop fetching, finish or return what you hold, exit; cannot be undone). The
/// worker learns it from its next heartbeat. The body, if any, is ignored.
#[utoipa::path(
    post,
    path = "/ojs/v1/admin/workers/{worker_id}/{directive}",
    tag = "admin",
    operation_id = "admin_direct_worker",
    summary = "Quiet or terminate a worker",
    description = "`quiet`: stop fetching, finish what you hold. `terminate`: stop fetching, \
                   finish or return what you hold, exit (cannot be undone). The worker learns it \
                   from its next heartbeat. A body, if any, is ignored.",
    params(DirectivePath),
    responses(
        (status = 200, body = Directed),
        (status = 404, description = "No such worker, or a directive other than `quiet` or `terminate`."),
    )
)]
async fn direct(
    State(state): State<AppState>,
    Path(DirectivePath(worker_id, directive)): Path<DirectivePath>,
    uri: axum::http::Uri,
    _body: OptionalJsonBody,
) -> Result<Response, ApiError> {
    let directive = match directive.as_str() {
        "quiet" => WorkerDirective::Quiet,
        "terminate" => WorkerDirective::Terminate,
        _ => return Err(ApiError::route_not_found(uri.path())),
    };
    if !crate::job::is_valid_worker_id(&worker_id) {
        return Err(ApiError::not_found(
            "worker",
            &worker_id.escape_debug().to_string(),
        ));
    }
    let worker = state.broker().direct_worker(&worker_id, directive).await?;
    tracing::info!(worker_id, %directive, "worker directive set");
    Ok(ok(Directed {
        directive: worker.directive,
        state: worker.effective_state,
        worker_id: worker.id,
    })
    .into_response())
}

/// A removed worker.
#[derive(Serialize, ToSchema)]
#[schema(as = WorkerDeleted)]
struct Deleted {
    /// Always `true`.
    deleted: bool,
    /// Jobs the worker still held, made available again.
    jobs_requeued: usize,
    worker_id: String,
}

/// `DELETE /ojs/v1/admin/workers/{id}`: removes a stale worker (409 for a live one), releasing
/// any job it still holds.
#[utoipa::path(
    delete,
    path = "/ojs/v1/admin/workers/{worker_id}",
    tag = "admin",
    operation_id = "admin_delete_worker",
    summary = "Remove a stale worker",
    params(WorkerIdPath),
    responses(
        (status = 200, description = "Removed; the jobs it held are available again.", body = Deleted),
        (status = 404, description = "No such worker."),
        (status = 409, description = "The worker is not stale."),
    )
)]
async fn delete_worker(
    State(state): State<AppState>,
    WorkerIdPath(worker_id): WorkerIdPath,
) -> Result<Response, ApiError> {
    let released = state.broker().delete_stale_worker(&worker_id).await?;
    Ok(ok(Deleted {
        deleted: true,
        jobs_requeued: released,
        worker_id,
    })
    .into_response())
}
