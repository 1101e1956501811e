//! `/ojs/v1/workers`: the worker protocol — registration ([`registry`]), FETCH ([`fetch`]), ACK and
//! NACK ([`complete`]), heartbeats ([`heartbeat`]) — and the operator's worker routes under
//! `/ojs/v1/admin/workers` ([`admin`]).

mod admin;
mod complete;
mod fetch;
mod heartbeat;
mod registry;

use utoipa_axum::router::OpenApiRouter;

use super::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .merge(fetch::router())
        .merge(complete::router())
        .merge(heartbeat::router())
        .merge(registry::router())
        .merge(admin::router())
}
