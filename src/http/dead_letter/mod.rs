//! `/ojs/v1/dead-letter`: the dead-letter queue ([OJS dead-letter HTTP binding]); the same under
//! `/ojs/v1/admin/dead-letter` for the operator ([`admin`]). Also the request helpers the
//! admin job routes share: `confirm`, the retry override, timestamps in bodies.
//!
//! [OJS dead-letter HTTP binding]: https://github.com/openjobspec/spec/blob/main/spec/ojs-dead-letter.md#10-http-binding

mod admin;
mod binding;

use utoipa_axum::router::OpenApiRouter;

use super::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .merge(binding::router())
        .merge(admin::router())
}
