//! `/ojs/v1/workers`: the worker protocol — registration ([`registry`]), FETCH ([`fetch`]), ACK and
//! NACK ([`complete`]), heartbeats ([`heartbeat`]), waits for a signal or a time ([`wait`]) — and the operator's worker routes under
//! `/ojs/v1/admin/workers` ([`admin`]).

mod admin;
mod complete;
mod fetch;
mod heartbeat;
mod registry;
mod wait;

use utoipa_axum::router::OpenApiRouter;

use super::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .merge(fetch::router())
        .merge(complete::router())
        .merge(heartbeat::router())
        .merge(wait::router())
        .merge(registry::router())
        .merge(admin::router())
}
