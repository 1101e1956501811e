//! `/ojs/v1/admin`: the operator's API ([OJS admin API]) — statistics, queues, jobs and bulk
//! actions, the dead-letter queue, [workers] (their routes are in this file) — and the
//! test-only reset (`test_hooks`), never routed unless `OJS_TEST_HOOKS=1`.
//!
//! [OJS admin API]: https://github.com/openjobspec/spec/blob/main/spec/ojs-admin-api.md
//! [workers]: https://github.com/openjobspec/spec/blob/main/spec/ojs-admin-api.md#9-worker-management

mod dead_letter;
mod jobs;
mod pools;
mod queues;
mod stats;

use axum::Router;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Serialize;
use serde_json::json;

use super::error::ApiError;
use super::extract::{OptionalJsonBody, WorkerIdPath};
use super::query::{ADMIN, Page, Pagination, QueryParams};
use super::workers::WireWorker;
use super::{AppState, ok};
use crate::worker::WorkerDirective;

pub fn router(test_hooks: bool) -> Router<AppState> {
    let router = Router::new()
        .merge(stats::router())
        .merge(queues::router())
        .merge(jobs::router())
        .merge(dead_letter::router())
        .merge(pools::router())
        .route("/ojs/v1/admin/workers", get(list_workers))
        .route(
            "/ojs/v1/admin/workers/{worker_id}",
            get(get_worker).delete(delete_worker),
        )
        .route(
            "/ojs/v1/admin/workers/{worker_id}/{directive}",
            post(direct),
        );
    if test_hooks {
        router.route("/ojs/v1/admin/reset", post(reset))
    } else {
        router
    }
}

/// `GET /ojs/v1/admin/workers`: workers by id, with counts by state.
async fn list_workers(
    State(state): State<AppState>,
    query: QueryParams,
) -> Result<Response, ApiError> {
    let page = Page::from_query(&query, ADMIN)?;
    let (workers, summary) = state.broker().workers(page.limit, page.offset).await?;

    #[derive(Serialize)]
    struct Summary {
        total: i64,
        running: i64,
        quiet: i64,
        terminate: i64,
        stale: i64,
    }
    #[derive(Serialize)]
    struct ListBody<'a> {
        items: Vec<WireWorker<'a>>,
        summary: Summary,
        pagination: Pagination,
    }
    Ok(ok(ListBody {
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
async fn get_worker(
    State(state): State<AppState>,
    WorkerIdPath(worker_id): WorkerIdPath,
) -> Result<Response, ApiError> {
    let worker = state.broker().worker(&worker_id).await?;
    Ok(ok(WireWorker::new(&worker, true)).into_response())
}

/// `POST /ojs/v1/admin/workers/{id}/quiet` (stop fetching, finish what you hold) and
/// `/terminate` (stop fetching, finish or return what you hold, exit; cannot be undone). The
/// worker learns it from its next heartbeat. The body, if any, is ignored.
async fn direct(
    State(state): State<AppState>,
    Path((worker_id, directive)): Path<(String, String)>,
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
    Ok(ok(json!({
        "worker_id": worker.id,
        "directive": worker.directive,
        "state": worker.effective_state,
    }))
    .into_response())
}

/// `DELETE /ojs/v1/admin/workers/{id}`: removes a stale worker (409 for a live one), releasing
/// any job it still holds.
async fn delete_worker(
    State(state): State<AppState>,
    WorkerIdPath(worker_id): WorkerIdPath,
) -> Result<Response, ApiError> {
    let released = state.broker().delete_stale_worker(&worker_id).await?;
    Ok(
        ok(json!({"deleted": true, "worker_id": worker_id, "jobs_requeued": released}))
            .into_response(),
    )
}

/// `POST /ojs/v1/admin/reset`: deletes every job, worker and event, so conformance tests start
/// from an empty server. The body, if any, is ignored.
async fn reset(State(state): State<AppState>) -> Result<Response, ApiError> {
    state.broker().reset().await?;
    tracing::warn!("test hook: all jobs, workers and events deleted");
    Ok(ok(json!({"reset": true})).into_response())
}
