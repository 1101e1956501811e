//! `/ojs/v1/jobs`: PUSH, single and batch ([`push`]); INFO, CANCEL, ACTIVATE and priority
//! changes ([`lifecycle`]); a running job's progress ([`progress`]) and checkpoint ([`checkpoint`]); the holders of unique
//! keys ([`unique`]); and the operator's job routes under `/ojs/v1/admin/jobs` ([`admin`]).

pub(crate) mod admin;
mod checkpoint;
pub(super) mod lifecycle;
mod progress;
mod push;
mod unique;

use utoipa_axum::router::OpenApiRouter;

use super::{AppState, HttpSettings};

pub fn router(settings: &HttpSettings) -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .merge(push::router(settings))
        .merge(lifecycle::router())
        .merge(progress::router())
        .merge(checkpoint::router())
        .merge(unique::router())
        .merge(admin::router())
}
