//! `/ojs/v1/admin/dead-letter` ([OJS dead-letter management]): the dead-letter queue of
//! `http::dead_letter` with the admin list shape (`items`, 20 per page) and a 204 on delete,
//! which the admin conformance tests expect (the data-plane delete answers 200 with a body).
//!
//! [OJS dead-letter management]: https://github.com/openjobspec/spec/blob/main/spec/ojs-admin-api.md#11-dead-letter-management

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::binding::{
    self, DeadLetterBulkRetry, DeadLetterBulkRetryRequest, DeadLetterFilterQuery, DeadLetterPurge,
    DeadLetterPurged, DeadLetterStats, filter_from_query,
};
use crate::http::bulk::RetryRequest;
use crate::http::error::ApiError;
use crate::http::extract::{JobIdPath, OptionalJsonBody};
use crate::http::openapi;
use crate::http::query::{ADMIN, Page, Pagination, QueryParams};
use crate::http::shapes::WrappedJob;
use crate::http::tenancy::Tenant;
use crate::http::{AppState, ok};
use crate::job::wire::WireJob;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list, purge))
        .routes(routes!(stats))
        .routes(routes!(retry_all))
        .routes(routes!(remove))
        .routes(routes!(retry_one))
}

/// A page of dead-lettered jobs, newest first, under `items`.
#[derive(Serialize, ToSchema)]
#[schema(as = AdminDeadLetterList)]
struct ListBody<'a> {
    #[schema(value_type = Vec<openapi::Job>)]
    items: Vec<WireJob<'a>>,
    pagination: Pagination,
}

/// `GET /ojs/v1/admin/dead-letter`: as `GET /ojs/v1/dead-letter`, listed under `items`.
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/dead-letter",
    tag = "admin",
    summary = "List dead-lettered jobs",
    params(DeadLetterFilterQuery, Page),
    responses(
        (status = 200, description = "Newest first.", body = ListBody<'_>),
        (status = 400, description = "A query parameter is invalid."),
    )
)]
async fn list(
    State(state): State<AppState>,
    tenant: Tenant,
    query: QueryParams,
) -> Result<Response, ApiError> {
    let page = Page::from_query(&query, ADMIN)?;
    let filter = filter_from_query(&query, &tenant)?;
    let found = state
        .broker()
        .dead_letters(&filter, page.limit, page.offset)
        .await?;
    Ok(ok(ListBody {
        items: found.items.iter().map(|j| j.wire()).collect(),
        pagination: page.describe_counted(found.total, found.total_estimated, found.has_more),
    })
    .into_response())
}

/// `DELETE /ojs/v1/admin/dead-letter/{id}`: deletes the job for good; 204.
#[utoipa::path(
    delete,
    path = "/ojs/v1/admin/dead-letter/{id}",
    tag = "admin",
    summary = "Delete a dead-lettered job",
    params(JobIdPath),
    responses(
        (status = 204, description = "Deleted for good; no body."),
        (status = 400, description = "The id is not a job id."),
        (status = 404, description = "No such job in the dead-letter queue."),
    )
)]
async fn remove(
    State(state): State<AppState>,
    JobIdPath(id): JobIdPath,
) -> Result<Response, ApiError> {
    state.broker().delete_dead_letter(id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `DELETE /ojs/v1/admin/dead-letter`: [`binding::purge`].
#[utoipa::path(
    delete,
    path = "/ojs/v1/admin/dead-letter",
    tag = "admin",
    summary = "Purge dead-lettered jobs",
    description = "The same as `DELETE /ojs/v1/dead-letter`.",
    params(DeadLetterPurge),
    request_body(
        content = Option<DeadLetterPurge>,
        description = "The options; may be omitted when the query string gives them."
    ),
    responses(
        (status = 200, body = DeadLetterPurged),
        (status = 400, description = "`confirm: true` is missing or an option is invalid."),
    )
)]
async fn purge(
    state: State<AppState>,
    tenant: Tenant,
    query: QueryParams,
    body: OptionalJsonBody,
) -> Result<Response, ApiError> {
    binding::purge(state, tenant, query, body).await
}

/// `GET /ojs/v1/admin/dead-letter/stats`: [`binding::stats`].
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/dead-letter/stats",
    tag = "admin",
    summary = "Dead-letter statistics",
    description = "The same as `GET /ojs/v1/dead-letter/stats`.",
    responses((status = 200, body = DeadLetterStats))
)]
async fn stats(state: State<AppState>, tenant: Tenant) -> Result<Response, ApiError> {
    binding::stats(state, tenant).await
}

/// `POST /ojs/v1/admin/dead-letter/retry`: [`binding::retry_all`].
#[utoipa::path(
    post,
    path = "/ojs/v1/admin/dead-letter/retry",
    tag = "admin",
    summary = "Retry dead-lettered jobs in bulk",
    description = "The same as `POST /ojs/v1/dead-letter/retry`.",
    request_body = DeadLetterBulkRetryRequest,
    responses(
        (status = 200, body = DeadLetterBulkRetry),
        (status = 400, description = "`confirm: true` is missing or the filter is invalid."),
    )
)]
async fn retry_all(
    state: State<AppState>,
    tenant: Tenant,
    body: OptionalJsonBody,
) -> Result<Response, ApiError> {
    binding::retry_all(state, tenant, body).await
}

/// `POST /ojs/v1/admin/dead-letter/{id}/retry`: [`binding::retry_one`].
#[utoipa::path(
    post,
    path = "/ojs/v1/admin/dead-letter/{id}/retry",
    tag = "admin",
    summary = "Retry a dead-lettered job",
    description = "The same as `POST /ojs/v1/dead-letter/{id}/retry`.",
    params(JobIdPath),
    request_body(
        content = Option<RetryRequest>,
        description = "An optional override; the body may be omitted."
    ),
    responses(
        (status = 200, description = "The job, `available` again.", body = WrappedJob),
        (status = 400, description = "The override is invalid."),
        (status = 404, description = "No such job in the dead-letter queue."),
    )
)]
async fn retry_one(
    state: State<AppState>,
    id: JobIdPath,
    body: OptionalJsonBody,
) -> Result<Response, ApiError> {
    binding::retry_one(state, id, body).await
}
