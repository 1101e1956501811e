//! Test-only administration (`test_hooks`): never routed unless `OJS_TEST_HOOKS=1`.

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::json;

use super::error::ApiError;
use super::{AppState, ok};

pub fn router() -> Router<AppState> {
    Router::new().route("/ojs/v1/admin/reset", post(reset))
}

/// `POST /ojs/v1/admin/reset`: deletes every job and worker, so conformance tests start from an
/// empty server. The body, if any, is ignored.
async fn reset(State(state): State<AppState>) -> Result<Response, ApiError> {
    state.broker().reset().await?;
    tracing::warn!("test hook: all jobs and workers deleted");
    Ok(ok(json!({"reset": true})).into_response())
}
