//! The parts of the operator's API ([OJS admin API]) that have no data-plane twin: statistics
//! ([`stats`]), API keys ([`keys`]), worker pools ([`pools`]), maintenance mode
//! ([`maintenance`]), the schema registry ([`schemas`]), tenants ([`tenants`]), and the test-only reset
//! (`test_hooks`), never routed unless `OJS_TEST_HOOKS=1`. The admin routes of jobs, queues,
//! the dead-letter queue and workers live next to their data-plane twins, in each resource's
//! `admin.rs`.
//!
//! [OJS admin API]: https://github.com/openjobspec/spec/blob/main/spec/ojs-admin-api.md

pub mod keys;
pub mod maintenance;
pub mod pools;
pub mod schemas;
pub mod stats;
pub mod tenants;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

use super::error::ApiError;
use super::{AppState, ok};

pub fn router(test_hooks: bool) -> OpenApiRouter<AppState> {
    let router = OpenApiRouter::new()
        .merge(stats::router())
        .merge(keys::router())
        .merge(maintenance::router())
        .merge(pools::router())
        .merge(schemas::router())
        .merge(tenants::router());
    if test_hooks {
        router.routes(routes!(reset))
    } else {
        router
    }
}

/// `{"reset": true}`.
#[derive(Serialize, ToSchema)]
#[schema(as = ResetDone)]
struct ResetDone {
    /// Always `true`.
    reset: bool,
}

/// `POST /ojs/v1/admin/reset`: deletes every job, worker and event, so conformance tests start
/// from an empty server. The body, if any, is ignored.
#[utoipa::path(
    post,
    path = "/ojs/v1/admin/reset",
    tag = "admin",
    operation_id = "admin_reset",
    summary = "Delete everything (test hook)",
    description = "Deletes every job, worker and event. Routed only when `OJS_TEST_HOOKS=1`. A \
                   body, if any, is ignored.",
    responses((status = 200, body = ResetDone))
)]
async fn reset(State(state): State<AppState>) -> Result<Response, ApiError> {
    state.broker().reset().await?;
    tracing::warn!("test hook: all jobs, workers and events deleted");
    Ok(ok(ResetDone { reset: true }).into_response())
}
