//! `/ojs/v1/jobs`: PUSH, single and batch ([`push`]); INFO, CANCEL, ACTIVATE and priority
//! changes ([`lifecycle`]); a running job's progress ([`progress`]), checkpoint ([`checkpoint`]) and recorded steps
//! ([`steps`]); the signals that wake a waiting job ([`signals`]); a finished job's result,
//! read or awaited ([`result`]); the holders of unique
//! keys ([`unique`]); and the operator's job routes under `/ojs/v1/admin/jobs` ([`admin`]).

pub(crate) mod admin;
mod checkpoint;
pub(super) mod lifecycle;
mod progress;
mod push;
mod result;
mod signals;
mod steps;
mod unique;

use utoipa_axum::router::OpenApiRouter;

use super::{AppState, HttpSettings};

pub fn router(settings: &HttpSettings) -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .merge(push::router(settings))
        .merge(lifecycle::router())
        .merge(progress::router())
        .merge(checkpoint::router())
        .merge(result::router())
        .merge(steps::router())
        .merge(signals::router())
        .merge(unique::router())
        .merge(admin::router())
}
