//! Tenants (admin), as their jobs name them (`meta.tenant_id`, or `X-OJS-Tenant` at enqueue)
//! and as an operator configures them: `GET /ojs/v1/admin/tenants` (the admin UI's list,
//! `{items, pagination}`), `GET …/{id}` (the tenant object itself), `GET …/{id}/stats` (the
//! multi-tenancy extension's statistics), `GET …/{id}/jobs` (its jobs, as
//! `GET /ojs/v1/admin/jobs` lists them), and its limits: `PUT …/{id}` (`{"limits": {...}}`),
//! `PUT …/{id}/limits` (the limits themselves) and `DELETE …/{id}`.
//!
//! A tenant exists while a retained job names it or while it is configured. Its `state` is
//! `suspended` while its `max_concurrency` is 0 (its jobs wait), else `active`.

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, SchemaType};
use utoipa::{IntoParams, PartialSchema, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};

use std::collections::HashMap;

use axum::http::StatusCode;

use crate::broker::{LimitUsage, TenantConfig, TenantRow};
use crate::http::error::ApiError;
use crate::http::extract::{Fields, JsonBody};
use crate::http::query::{ADMIN, Page, Pagination, QueryParams};
use crate::http::tenancy::Tenant;
use crate::http::{AppState, Ojs, ok};
use crate::tenant::Limits;
use crate::wire::json::Object;
use crate::wire::timestamp;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(show, configure, deconfigure))
        .routes(routes!(set_limits))
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

/// The tenant of a path.
#[derive(serde::Deserialize, IntoParams)]
#[into_params(names("id"), parameter_in = Path)]
struct TenantPath(
    /// The tenant id: a letter or digit, then letters, digits, `.`, `_`, `:` or `-` (anything
    /// else is 400).
    #[param(pattern = "^[a-zA-Z0-9][a-zA-Z0-9._:-]*$", max_length = 255)]
    String,
);

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

/// The tenant's limits (`null`: none), in the extension's names, and in the names the OJS
/// admin UI reads.
#[derive(Serialize, ToSchema)]
#[schema(as = TenantLimits)]
struct WireLimits {
    /// Most of its jobs running at once (released to workers or active), across queues and
    /// replicas; 0 holds them all (the tenant is `suspended`).
    max_concurrency: Option<i32>,
    /// Most jobs it may enqueue per `period` (a sliding window); past it, 429.
    #[schema(value_type = Option<Object>)]
    max_enqueue_rate: Option<serde_json::Value>,
    /// Most of its jobs waiting (scheduled, available, pending, retryable); past it, 429.
    max_queue_depth: Option<i32>,
    /// The same as `max_concurrency` (the admin UI's name).
    max_concurrent_jobs: Option<i32>,
    /// `max_enqueue_rate` per second (the admin UI's name).
    max_jobs_per_second: Option<f64>,
}

impl WireLimits {
    fn of(limits: &Limits) -> WireLimits {
        WireLimits {
            max_concurrency: limits.max_concurrency,
            max_enqueue_rate: limits.max_enqueue_rate.map(crate::rate_limit::window_json),
            max_queue_depth: limits.max_queue_depth,
            max_concurrent_jobs: limits.max_concurrency,
            max_jobs_per_second: limits
                .max_enqueue_rate
                .map(|w| f64::from(w.limit) * 1000.0 / w.period_ms as f64),
        }
    }
}

/// What a configured tenant uses of its limits now.
#[derive(Serialize, ToSchema)]
#[schema(as = TenantLimitUsage)]
struct WireUsage {
    /// Jobs running or released to workers (counted against `max_concurrency`).
    in_flight: i64,
    /// Jobs held back by `max_concurrency`.
    held: i64,
    /// Jobs waiting (counted against `max_queue_depth`).
    waiting: i64,
    /// Jobs enqueued within the `max_enqueue_rate` window.
    enqueued: i64,
}

impl From<LimitUsage> for WireUsage {
    fn from(u: LimitUsage) -> WireUsage {
        WireUsage {
            in_flight: u.in_flight,
            held: u.held,
            waiting: u.waiting,
            enqueued: u.enqueued,
        }
    }
}

/// A tenant, as the admin UI reads it.
#[derive(Serialize, ToSchema)]
#[schema(as = Tenant)]
struct WireTenant {
    id: String,
    /// The same as `id`.
    tenant_id: String,
    /// The same as `id` (tenants have no other name).
    name: String,
    /// `suspended` while `max_concurrency` is 0, else `active`.
    state: &'static str,
    /// Whether an operator configured it (its limits).
    configured: bool,
    limits: WireLimits,
    /// Why its limits were last changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// Its use of its limits (configured tenants, in the answer about one tenant).
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<WireUsage>,
    stats: Usage,
    /// When its oldest retained job was created, or it was configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    created_at: Option<String>,
}

impl WireTenant {
    fn of(row: &TenantRow, config: Option<&TenantConfig>, usage: Option<LimitUsage>) -> WireTenant {
        let limits = config.map(|c| c.limits).unwrap_or_default();
        WireTenant {
            id: row.tenant.clone(),
            tenant_id: row.tenant.clone(),
            name: row.tenant.clone(),
            state: if limits.max_concurrency == Some(0) {
                "suspended"
            } else {
                "active"
            },
            configured: config.is_some(),
            limits: WireLimits::of(&limits),
            reason: config.and_then(|c| c.reason.clone()),
            usage: usage.map(WireUsage::from),
            stats: usage_of(row),
            created_at: row.first_seen_at.map(timestamp::format),
        }
    }
}

fn usage_of(row: &TenantRow) -> Usage {
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
    params(Page),
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
    let configs: HashMap<String, TenantConfig> = state
        .broker()
        .tenant_configs()
        .await?
        .into_iter()
        .map(|c| (c.id.clone(), c))
        .collect();
    Ok(ok(List {
        items: rows
            .iter()
            .map(|r| WireTenant::of(r, configs.get(&r.tenant), None))
            .collect(),
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
    params(TenantPath),
    responses(
        (status = 200, body = WireTenant),
        (status = 400, description = "The id is not a tenant id."),
        (status = 404, description = "No retained job names this tenant."),
    )
)]
async fn show(
    State(state): State<AppState>,
    Path(TenantPath(id)): Path<TenantPath>,
) -> Result<Response, ApiError> {
    tenant_path(&id)?;
    let row = state.broker().tenant(&id).await?;
    let config = state.broker().tenant_config(&id).await?;
    if row.total_jobs() == 0 && config.is_none() {
        return Err(ApiError::not_found("tenant", &id));
    }
    tenant_object(&state, &row, config.as_ref(), StatusCode::OK).await
}

/// The tenant object with its use of its limits.
async fn tenant_object(
    state: &AppState,
    row: &TenantRow,
    config: Option<&TenantConfig>,
    status: StatusCode,
) -> Result<Response, ApiError> {
    let usage = match config {
        Some(config) => Some(state.broker().tenant_usage(config).await?),
        None => None,
    };
    Ok(Ojs(status, WireTenant::of(row, config, usage)).into_response())
}

/// The limits of a change (each optional; `null` removes one), as a schema.
fn limits_schema() -> ObjectBuilder {
    use utoipa::openapi::schema::{AdditionalProperties, OneOfBuilder, Type};
    let count = |what: &str| {
        ObjectBuilder::new()
            .schema_type(SchemaType::from_iter([Type::Integer, Type::Null]))
            .minimum(Some(0))
            .maximum(Some(i64::from(i32::MAX)))
            .description(Some(what))
    };
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .property(
            "max_concurrency",
            count("Most of its jobs running at once (0 holds them all); null: no limit."),
        )
        .property(
            "max_enqueue_rate",
            OneOfBuilder::new()
                .item(crate::http::openapi::values::rate_window())
                .item(ObjectBuilder::new().schema_type(Type::Null))
                .description(Some(
                    "Most jobs enqueued per period (a sliding window); null: no limit.",
                )),
        )
        .property(
            "max_queue_depth",
            count("Most of its jobs waiting; null: no limit."),
        )
        .additional_properties(Some(AdditionalProperties::FreeForm(false)))
}

/// The reason of a change.
fn reason_schema() -> ObjectBuilder {
    use utoipa::openapi::schema::Type;
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
        .max_length(Some(crate::tenant::MAX_REASON_CHARS))
        .description(Some(
            "Why (kept with the limits, and in the `tenant.updated` event).",
        ))
}

/// `PUT …/{id}/limits`: the limits named change (`null` removes one), and why.
struct LimitsChangeRequest;

impl PartialSchema for LimitsChangeRequest {
    fn schema() -> RefOr<Schema> {
        Schema::Object(limits_schema().property("reason", reason_schema()).build()).into()
    }
}

impl ToSchema for LimitsChangeRequest {
    fn name() -> std::borrow::Cow<'static, str> {
        "TenantLimitsChange".into()
    }
}

/// `PUT …/{id}`: a tenant's configuration, in the extension's shape.
struct ConfigureRequest;

impl PartialSchema for ConfigureRequest {
    fn schema() -> RefOr<Schema> {
        use utoipa::openapi::schema::{AdditionalProperties, OneOfBuilder, Type};
        Schema::Object(
            ObjectBuilder::new()
                .schema_type(Type::Object)
                .property(
                    "tenant_id",
                    ObjectBuilder::new()
                        .schema_type(Type::String)
                        .description(Some("When given, the tenant of the path.")),
                )
                .property(
                    "limits",
                    OneOfBuilder::new()
                        .item(limits_schema())
                        .item(ObjectBuilder::new().schema_type(Type::Null)),
                )
                .property("reason", reason_schema())
                .additional_properties(Some(AdditionalProperties::FreeForm(false)))
                .build(),
        )
        .into()
    }
}

impl ToSchema for ConfigureRequest {
    fn name() -> std::borrow::Cow<'static, str> {
        "TenantConfiguration".into()
    }
}

/// The `reason` of a change, checked.
fn reason_of(fields: &Fields<'_>, path: &str) -> Result<Option<String>, ApiError> {
    let reason = fields.string("reason")?;
    if reason
        .as_ref()
        .is_some_and(|r| r.chars().count() > crate::tenant::MAX_REASON_CHARS)
    {
        return Err(ApiError::invalid_field(
            path,
            format!(
                "'reason' must be at most {} characters",
                crate::tenant::MAX_REASON_CHARS
            ),
        ));
    }
    Ok(reason)
}

/// Applies a change of limits and answers the tenant: 201 when it was not configured before.
async fn apply(
    state: &AppState,
    id: &str,
    change: &crate::tenant::LimitsChange,
    reason: Option<&str>,
) -> Result<Response, ApiError> {
    let (config, created) = state.broker().set_tenant_limits(id, change, reason).await?;
    let row = state.broker().tenant(id).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    tenant_object(state, &row, Some(&config), status).await
}

/// Limits read from `obj` at `path`, refused as one 400 naming every problem.
fn limits_of(obj: &Object<'_>, path: &str) -> Result<crate::tenant::LimitsChange, ApiError> {
    crate::tenant::parse_limits(obj, path)
        .map_err(|v| crate::Error::from(crate::job::envelope::Rejection::Invalid(v)).into())
}

/// `PUT /ojs/v1/admin/tenants/{id}`: configures the tenant (the extension's shape:
/// `{"limits": {...}, "reason"?}`); the limits named replace the stored ones.
#[utoipa::path(
    put,
    path = "/ojs/v1/admin/tenants/{id}",
    tag = "admin",
    operation_id = "admin_configure_tenant",
    summary = "Configure a tenant's limits",
    params(TenantPath),
    request_body = ConfigureRequest,
    responses(
        (status = 200, description = "Changed.", body = WireTenant),
        (status = 201, description = "Configured for the first time.", body = WireTenant),
        (status = 400, description = "A limit is invalid, or a field is not one this server keeps."),
    )
)]
async fn configure(
    State(state): State<AppState>,
    Path(TenantPath(id)): Path<TenantPath>,
    body: JsonBody,
) -> Result<Response, ApiError> {
    tenant_path(&id)?;
    let fields = body.object()?;
    let mut change = crate::tenant::LimitsChange::default();
    for (key, raw) in fields.object().iter() {
        match key {
            "tenant_id" | "id" => {
                if crate::wire::json::decode::<String>(raw).ok().as_deref() != Some(id.as_str()) {
                    return Err(ApiError::invalid_field(
                        &format!("$.{key}"),
                        format!("'{key}' must be the tenant of the path ('{id}') when given"),
                    ));
                }
            }
            "limits" if raw.get() == "null" => {}
            "limits" => {
                let obj = Object::from_raw(raw).map_err(|_| {
                    ApiError::invalid_field("$.limits", "'limits' must be an object")
                })?;
                change = limits_of(&obj, "$.limits")?;
            }
            "reason" => {}
            "fairness_weight" | "priority_boost" => {
                return Err(ApiError::invalid_field(
                    &format!("$.{key}"),
                    format!(
                        "'{key}' is not kept per tenant here: fairness between tenants is a pool's tenant_fairness (PUT /ojs/v1/admin/pools/{{name}})"
                    ),
                ));
            }
            other => {
                return Err(ApiError::invalid_field(
                    &format!("$.{other}"),
                    format!("'{other}' is not part of a tenant's configuration (limits, reason)"),
                ));
            }
        }
    }
    let reason = reason_of(&fields, "$.reason")?;
    apply(&state, &id, &change, reason.as_deref()).await
}

/// `PUT /ojs/v1/admin/tenants/{id}/limits`: changes the tenant's limits (the ones named; `null`
/// removes one), e.g. `{"max_concurrency": 5, "reason": "incident"}`.
#[utoipa::path(
    put,
    path = "/ojs/v1/admin/tenants/{id}/limits",
    tag = "admin",
    operation_id = "admin_set_tenant_limits",
    summary = "Change a tenant's limits",
    params(TenantPath),
    request_body = LimitsChangeRequest,
    responses(
        (status = 200, description = "Changed.", body = WireTenant),
        (status = 201, description = "Configured for the first time.", body = WireTenant),
        (status = 400, description = "A limit is invalid, or not one this server keeps."),
    )
)]
async fn set_limits(
    State(state): State<AppState>,
    Path(TenantPath(id)): Path<TenantPath>,
    body: JsonBody,
) -> Result<Response, ApiError> {
    tenant_path(&id)?;
    let fields = body.object()?;
    let reason = reason_of(&fields, "$.reason")?;
    let limits =
        crate::wire::json::object_text(fields.object().iter().filter(|(key, _)| *key != "reason"));
    let limits = Object::parse(&limits).map_err(|e| ApiError::invalid_payload(e.to_string()))?;
    let change = limits_of(&limits, "$")?;
    apply(&state, &id, &change, reason.as_deref()).await
}

/// `DELETE /ojs/v1/admin/tenants/{id}`: removes the tenant's configuration and limits (its
/// held jobs go); answers the tenant as it was configured.
#[utoipa::path(
    delete,
    path = "/ojs/v1/admin/tenants/{id}",
    tag = "admin",
    operation_id = "admin_deconfigure_tenant",
    summary = "Remove a tenant's configuration and limits",
    params(TenantPath),
    responses(
        (status = 200, description = "Removed; the tenant as it was configured.", body = WireTenant),
        (status = 404, description = "The tenant is not configured."),
    )
)]
async fn deconfigure(
    State(state): State<AppState>,
    Path(TenantPath(id)): Path<TenantPath>,
) -> Result<Response, ApiError> {
    tenant_path(&id)?;
    let removed = state.broker().delete_tenant(&id).await?;
    let row = state.broker().tenant(&id).await?;
    Ok(ok(WireTenant::of(&row, Some(&removed), None)).into_response())
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
    /// Each limit set, with what the tenant uses of it now: `max_concurrency` and
    /// `max_queue_depth` as `{limit, current}`, `max_enqueue_rate` as `{limit, period,
    /// current}` (enqueued within the window). Empty when none is set.
    #[schema(value_type = Object)]
    limits: serde_json::Value,
}

/// The extension's `limits` of the statistics: each limit set, with its use.
fn limit_stats(limits: &Limits, usage: &LimitUsage) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    if let Some(limit) = limits.max_concurrency {
        out.insert(
            "max_concurrency".into(),
            serde_json::json!({"limit": limit, "current": usage.in_flight, "held": usage.held}),
        );
    }
    if let Some(w) = limits.max_enqueue_rate {
        let mut rate = crate::rate_limit::window_json(w);
        rate["current"] = serde_json::json!(usage.enqueued);
        out.insert("max_enqueue_rate".into(), rate);
    }
    if let Some(limit) = limits.max_queue_depth {
        out.insert(
            "max_queue_depth".into(),
            serde_json::json!({"limit": limit, "current": usage.waiting}),
        );
    }
    serde_json::Value::Object(out)
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
    params(TenantPath),
    responses(
        (status = 200, body = Stats),
        (status = 400, description = "The id is not a tenant id."),
    )
)]
async fn stats(
    State(state): State<AppState>,
    Path(TenantPath(id)): Path<TenantPath>,
) -> Result<Response, ApiError> {
    tenant_path(&id)?;
    let row = state.broker().tenant(&id).await?;
    let Usage {
        queues,
        jobs,
        workers,
    } = usage_of(&row);
    let limits = match state.broker().tenant_config(&id).await? {
        Some(config) => limit_stats(&config.limits, &state.broker().tenant_usage(&config).await?),
        None => serde_json::json!({}),
    };
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
        limits,
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
    params(TenantPath, Page),
    responses(
        (status = 200, description = "As `GET /ojs/v1/admin/jobs`.", body = crate::http::job_listing::ListBody<'_>),
        (status = 400, description = "A parameter is invalid."),
    )
)]
async fn jobs(
    State(state): State<AppState>,
    Path(TenantPath(id)): Path<TenantPath>,
    query: QueryParams,
) -> Result<Response, ApiError> {
    tenant_path(&id)?;
    crate::http::job_listing::listing(&state, &query, Some(&id)).await
}
