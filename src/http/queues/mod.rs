//! `/ojs/v1/queues`: queues by name, created, read, deleted, paused and resumed
//! ([`lifecycle`]); their statistics ([`stats`]); their configuration, under both URL families
//! ([`config`]); and the operator's queue routes under `/ojs/v1/admin/queues` ([`admin`]).

mod admin;
mod body;
mod config;
mod lifecycle;
mod stats;

use utoipa_axum::router::OpenApiRouter;

use super::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .merge(lifecycle::router())
        .merge(stats::router())
        .merge(config::router())
        .merge(admin::router())
}
