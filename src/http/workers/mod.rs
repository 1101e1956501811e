//! `/ojs/v1/workers`: the worker protocol — registration ([`registry`]), FETCH ([`fetch`]), ACK and
//! NACK ([`complete`]), heartbeats ([`heartbeat`]) — and the operator's worker routes under
//! `/ojs/v1/admin/workers` ([`admin`]).

mod admin;
mod complete;
mod fetch;
mod heartbeat;
mod registry;

use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;

use super::AppState;
use super::error::ApiError;
use super::extract::Fields;
use crate::job::id_schema::WorkerId;
use crate::wire::duration;

pub use registry::WireWorker;

/// Largest ACK `result`, serialized.
pub(super) const MAX_RESULT_BYTES: usize = 1024 * 1024;
/// Most queues one FETCH may name.
pub(super) const MAX_FETCH_QUEUES: usize = 100;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .merge(fetch::router())
        .merge(complete::router())
        .merge(heartbeat::router())
        .merge(registry::router())
        .merge(admin::router())
}

/// The worker id of a path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // documentation: read by `WorkerIdPath`
pub(super) struct WorkerIdParam {
    /// The worker's id (any other string names no worker).
    #[param(value_type = WorkerId)]
    worker_id: String,
}

/// A positive number of milliseconds `key`, if given.
pub(super) fn positive_ms(fields: &Fields<'_>, key: &str) -> Result<Option<i64>, ApiError> {
    match fields.integer(key)? {
        Some(ms) if ms <= 0 || ms > duration::MAX_MS as i64 => Err(ApiError::invalid_field(
            &format!("$.{key}"),
            format!("'{key}' must be a positive number of milliseconds"),
        )),
        other => Ok(other),
    }
}
