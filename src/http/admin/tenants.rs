//! Tenants (admin), as their jobs name them (`meta.tenant_id`, or `X-OJS-Tenant` at enqueue):
//! `GET /ojs/v1/admin/tenants` (the admin UI's list, `{items, pagination}`), `GET …/{id}` (the
//! tenant object itself), `GET …/{id}/stats` (the multi-tenancy extension's statistics) and
//! `GET …/{id}/jobs` (its jobs, as `GET /ojs/v1/admin/jobs` lists them).
//!
//! A tenant exists while a retained job names it; none is configured, so `limits` is empty and
//! `state` is `active`.

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::broker::TenantRow;
use crate::http::error::ApiError;
use crate::http::query::{ADMIN, Page, PageParams, Pagination, QueryParams};
use crate::http::tenancy::Tenant;
use crate::http::{AppState, ok};
use crate::wire::timestamp;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(show))
        .routes(routes!(stats))
        .routes(routes!(jobs))
}

/// A tenant id in a path: 400 unless it has the extension's form.
fn tenant_path(id: &str) -> Result<(), ApiError> {
    if crate::tenant::is_valid_id(id) {
        Ok(())
    } else {
        Err(ApiError::invalid_field(
            "path.id",
            crate::tenant::invalid_id_message(id),
        ))
    }
}

/// The tenant id of a path (documentation).
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
struct IdParam {
    /// The tenant id: a letter or digit, then letters, digits, `.`, `_`, `:` or `-` (anything
    /// else is 400).
    #[param(pattern = "^[a-zA-Z0-9][a-zA-Z0-9._:-]*$", max_length = 255)]
    id: String,
}

/// Its jobs by state.
#[derive(Serialize, ToSchema)]
#[schema(as = TenantJobCounts)]
struct JobCounts {
    available: i64,
    active: i64,
    scheduled: i64,
    retryable: i64,
    pending: i64,
    completed: i64,
    discarded: i64,
    cancelled: i64,
}

/// What a tenant uses.
#[derive(Serialize, ToSchema)]
#[schema(as = TenantUsage)]
struct Usage {
    /// Queues holding its jobs.
    queues: i64,
    jobs: JobCounts,
    /// Workers running its jobs now.
    workers: i64,
}

/// Limits configured for the tenant: none (documentation of an empty object).
#[derive(Serialize, ToSchema)]
#[schema(as = TenantLimits)]
struct Limits {}

/// A tenant, as the admin UI reads it.
#[derive(Serialize, ToSchema)]
#[schema(as = Tenant)]
struct WireTenant {
    id: String,
    /// The same as `id`.
    tenant_id: String,
    /// The same as `id` (tenants have no other name).
    name: String,
    /// Always `active`.
    state: &'static str,
    limits: Limits,
    stats: Usage,
    /// When its oldest retained job was created.
    #[serde(skip_serializing_if = "Option::is_none")]
    created_at: Option<String>,
}

impl WireTenant {
    fn of(row: &TenantRow) -> WireTenant {
        WireTenant {
            id: row.tenant.clone(),
            tenant_id: row.tenant.clone(),
            name: row.tenant.clone(),
            state: "active",
            limits: Limits {},
            stats: usage(row),
            created_at: row.first_seen_at.map(timestamp::format),
        }
    }
}

fn usage(row: &TenantRow) -> Usage {
    Usage {
        queues: row.queues,
        workers: row.workers,
        jobs: JobCounts {
            available: row.available,
            active: row.active,
            scheduled: row.scheduled,
            retryable: row.retryable,
            pending: row.pending,
            completed: row.completed,
            discarded: row.discarded,
            cancelled: row.cancelled,
        },
    }
}

/// A page of tenants, by id.
#[derive(Serialize, ToSchema)]
#[schema(as = TenantList)]
struct List {
    items: Vec<WireTenant>,
    pagination: Pagination,
}

/// `GET /ojs/v1/admin/tenants`.
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/tenants",
    tag = "admin",
    operation_id = "admin_list_tenants",
    summary = "List tenants",
    description = "Every tenant some retained job names, by id, with its jobs by state.",
    params(PageParams),
    responses(
        (status = 200, body = List),
        (status = 400, description = "A page parameter is invalid."),
    )
)]
async fn list(
    State(state): State<AppState>,
    tenant: Tenant,
    query: QueryParams,
) -> Result<Response, ApiError> {
    let page = Page::from_query(&query, ADMIN)?;
    let (rows, total) = match tenant.id() {
        None => state.broker().tenants(page.limit, page.offset).await?,
        // A request acting as a tenant lists itself alone.
        Some(own) => {
            let row = state.broker().tenant(own).await?;
            let total = i64::from(row.total_jobs() > 0);
            let rows: Vec<TenantRow> = (total > page.offset).then_some(row).into_iter().collect();
            (rows, total)
        }
    };
    Ok(ok(List {
        items: rows.iter().map(WireTenant::of).collect(),
        pagination: page.describe(total),
    })
    .into_response())
}

/// `GET /ojs/v1/admin/tenants/{id}`.
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/tenants/{id}",
    tag = "admin",
    operation_id = "admin_get_tenant",
    summary = "Read a tenant",
    params(IdParam),
    responses(
        (status = 200, body = WireTenant),
        (status = 400, description = "The id is not a tenant id."),
        (status = 404, description = "No retained job names this tenant."),
    )
)]
async fn show(State(state): State<AppState>, Path(id): Path<String>) -> Result<Response, ApiError> {
    tenant_path(&id)?;
    let row = state.broker().tenant(&id).await?;
    if row.total_jobs() == 0 {
        return Err(ApiError::not_found("tenant", &id));
    }
    Ok(ok(WireTenant::of(&row)).into_response())
}

/// The extension's tenant statistics.
#[derive(Serialize, ToSchema)]
#[schema(as = TenantStats)]
struct Stats {
    tenant_id: String,
    /// Every retained job of the tenant.
    total_jobs: i64,
    jobs: StatsJobs,
    queues: i64,
    workers: i64,
}

/// Jobs by state, and finished in the last 24 hours.
#[derive(Serialize, ToSchema)]
#[schema(as = TenantStatsJobs)]
struct StatsJobs {
    #[serde(flatten)]
    by_state: JobCounts,
    completed_24h: i64,
    /// Discarded (failed for good) in the last 24 hours.
    failed_24h: i64,
}

/// `GET /ojs/v1/admin/tenants/{id}/stats`: zeros for a tenant no retained job names.
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/tenants/{id}/stats",
    tag = "admin",
    operation_id = "admin_tenant_stats",
    summary = "A tenant's statistics",
    params(IdParam),
    responses(
        (status = 200, body = Stats),
        (status = 400, description = "The id is not a tenant id."),
    )
)]
async fn stats(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    tenant_path(&id)?;
    let row = state.broker().tenant(&id).await?;
    let Usage {
        queues,
        jobs,
        workers,
    } = usage(&row);
    Ok(ok(Stats {
        total_jobs: row.total_jobs(),
        tenant_id: id,
        jobs: StatsJobs {
            by_state: jobs,
            completed_24h: row.completed_24h,
            failed_24h: row.failed_24h,
        },
        queues,
        workers,
    })
    .into_response())
}

/// `GET /ojs/v1/admin/tenants/{id}/jobs`: the tenant's jobs, filtered, ordered and paged as
/// `GET /ojs/v1/admin/jobs` does.
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/tenants/{id}/jobs",
    tag = "admin",
    operation_id = "admin_tenant_jobs",
    summary = "A tenant's jobs",
    params(IdParam, PageParams),
    responses(
        (status = 200, description = "As `GET /ojs/v1/admin/jobs`.", body = crate::http::jobs::admin::ListBody<'_>),
        (status = 400, description = "A parameter is invalid."),
    )
)]
async fn jobs(
    State(state): State<AppState>,
    Path(id): Path<String>,
    query: QueryParams,
) -> Result<Response, ApiError> {
    tenant_path(&id)?;
    crate::http::jobs::admin::listing(&state, &query, Some(&id)).await
}
