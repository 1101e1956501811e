//! `/ojs/v1/crons`: the cron entries in the shapes the OJS admin UI reads (a page as `items`
//! with `pagination`, an entry as a bare object keyed by `id`, which is its name; DELETE
//! answers 204). The same operations as `/ojs/v1/cron`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::entries::{EnabledParam, WireCron, name_of, page_of};
use crate::http::error::ApiError;
use crate::http::extract::JsonBody;
use crate::http::query::{Page, Pagination, QueryParams};
use crate::http::tenancy::Tenant;
use crate::http::{AppState, ok};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(show, change, remove))
}

/// The entry name of a `/crons/{id}` path.
#[derive(serde::Deserialize, IntoParams)]
#[into_params(names("id"), parameter_in = Path)]
struct CronIdPath(
    /// The entry's name.
    #[param(value_type = super::entries::CronName)]
    String,
);

/// A page of entries, as the admin UI reads it.
#[derive(Serialize, ToSchema)]
#[schema(as = CronPage)]
struct CronPage<'a> {
    /// Entries by name.
    items: &'a [WireCron<'a>],
    pagination: Pagination,
}

/// `GET /ojs/v1/crons`: entries by name, as `items`.
#[utoipa::path(
    get,
    path = "/ojs/v1/crons",
    tag = "cron",
    operation_id = "ui_list_crons",
    summary = "List cron entries (admin UI shape)",
    params(EnabledParam, Page),
    responses(
        (status = 200, body = CronPage<'_>),
        (status = 400, description = "A query parameter is invalid."),
    )
)]
async fn list(
    State(state): State<AppState>,
    tenant: Tenant,
    query: QueryParams,
) -> Result<Response, ApiError> {
    let (entries, pagination) = page_of(&state, &tenant, &query).await?;
    let wire: Vec<WireCron<'_>> = entries.iter().map(WireCron::of).collect();
    Ok(ok(CronPage {
        items: &wire,
        pagination,
    })
    .into_response())
}

/// `GET /ojs/v1/crons/{id}`: the bare entry.
#[utoipa::path(
    get,
    path = "/ojs/v1/crons/{id}",
    tag = "cron",
    operation_id = "ui_get_cron",
    summary = "Read a cron entry (admin UI shape)",
    params(CronIdPath),
    responses(
        (status = 200, body = WireCron<'_>),
        (status = 400, description = "The name is invalid."),
        (status = 404, description = "No such entry."),
    )
)]
async fn show(
    State(state): State<AppState>,
    Path(CronIdPath(id)): Path<CronIdPath>,
) -> Result<Response, ApiError> {
    name_of("path.id", &id)?;
    let entry = state.broker().cron_entry(&id).await?;
    Ok(ok(WireCron::of(&entry)).into_response())
}

/// `PATCH /ojs/v1/crons/{id}`: as `PATCH /ojs/v1/cron/{name}`; answers the bare entry.
#[utoipa::path(
    patch,
    path = "/ojs/v1/crons/{id}",
    tag = "cron",
    operation_id = "ui_change_cron",
    summary = "Change, enable or disable a cron entry (admin UI shape)",
    params(CronIdPath),
    request_body = super::entries::CronPatch,
    responses(
        (status = 200, body = WireCron<'_>),
        (status = 400, description = "A field is invalid; `details` names it."),
        (status = 404, description = "No such entry."),
        (status = 413, description = "The template is larger than the largest enqueue envelope."),
        (status = 422, description = "The template's retry policy is invalid."),
    )
)]
async fn change(
    State(state): State<AppState>,
    Path(CronIdPath(id)): Path<CronIdPath>,
    tenant: Tenant,
    body: JsonBody,
) -> Result<Response, ApiError> {
    name_of("path.id", &id)?;
    let fields = body.object()?;
    let max = state.settings().max_envelope_bytes;
    let entry = state
        .broker()
        .patch_cron(&id, fields.object(), max, tenant.id())
        .await?;
    Ok(ok(WireCron::of(&entry)).into_response())
}

/// `DELETE /ojs/v1/crons/{id}`: 204.
#[utoipa::path(
    delete,
    path = "/ojs/v1/crons/{id}",
    tag = "cron",
    operation_id = "ui_delete_cron",
    summary = "Delete a cron entry (admin UI shape)",
    params(CronIdPath),
    responses(
        (status = 204, description = "Deleted; jobs it enqueued are untouched."),
        (status = 400, description = "The name is invalid."),
        (status = 404, description = "No such entry."),
    )
)]
async fn remove(
    State(state): State<AppState>,
    Path(CronIdPath(id)): Path<CronIdPath>,
) -> Result<Response, ApiError> {
    name_of("path.id", &id)?;
    state.broker().delete_cron(&id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
