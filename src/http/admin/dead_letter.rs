//! `/ojs/v1/admin/dead-letter` ([OJS dead-letter management]): the dead-letter queue of
//! `http::dead_letter` with the admin list shape (`items`, 20 per page) and a 204 on delete,
//! which the admin conformance tests expect (the data-plane delete answers 200 with a body).
//!
//! [OJS dead-letter management]: https://github.com/openjobspec/spec/blob/main/spec/ojs-admin-api.md#11-dead-letter-management

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use serde::Serialize;

use super::super::dead_letter::{filter_from_query, purge, retry_all, retry_one, stats};
use super::super::error::ApiError;
use super::super::extract::JobIdPath;
use super::super::query::{ADMIN, Page, Pagination, QueryParams};
use super::super::{AppState, ok};
use crate::job::wire::WireJob;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ojs/v1/admin/dead-letter", get(list).delete(purge))
        .route("/ojs/v1/admin/dead-letter/stats", get(stats))
        .route("/ojs/v1/admin/dead-letter/retry", post(retry_all))
        .route("/ojs/v1/admin/dead-letter/{id}", delete(remove))
        .route("/ojs/v1/admin/dead-letter/{id}/retry", post(retry_one))
}

/// `GET /ojs/v1/admin/dead-letter`: as `GET /ojs/v1/dead-letter`, listed under `items`.
async fn list(State(state): State<AppState>, query: QueryParams) -> Result<Response, ApiError> {
    let page = Page::from_query(&query, ADMIN)?;
    let filter = filter_from_query(&query)?;
    let (jobs, total) = state
        .broker()
        .dead_letters(&filter, page.limit, page.offset)
        .await?;

    #[derive(Serialize)]
    struct ListBody<'a> {
        items: Vec<WireJob<'a>>,
        pagination: Pagination,
    }
    Ok(ok(ListBody {
        items: jobs.iter().map(|j| j.wire()).collect(),
        pagination: page.describe(total),
    })
    .into_response())
}

/// `DELETE /ojs/v1/admin/dead-letter/{id}`: deletes the job for good; 204.
async fn remove(
    State(state): State<AppState>,
    JobIdPath(id): JobIdPath,
) -> Result<Response, ApiError> {
    state.broker().delete_dead_letter(id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
