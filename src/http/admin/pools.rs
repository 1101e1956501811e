//! `/ojs/v1/admin/pools` and `/ojs/v1/admin/scheduling/stats`: the HTTP side of fair
//! scheduling ([OJS fair-scheduling HTTP binding]).
//!
//! [OJS fair-scheduling HTTP binding]: https://github.com/openjobspec/spec/blob/main/spec/ojs-fair-scheduling.md#10-http-binding

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Value, json};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::broker::pools::{STATS_WINDOW_SECS, pool_json};
use crate::http::error::ApiError;
use crate::http::extract::JsonBody;
use crate::http::extract::check_queue_name;
use crate::http::query::{ADMIN, Page, PageParams, Pagination, QueryParams};
use crate::http::{AppState, Ojs, ok};
use crate::scheduling::pool::WorkerPool;
use crate::wire::duration;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(show, put, remove))
        .routes(routes!(stats))
}

/// The pool name of a path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // documentation: read by `pool_path`
struct PoolNameParam {
    /// The pool: 1 to 128 lowercase letters, digits, `-` and `.`, starting with a letter or
    /// digit (any other name is refused with 400).
    name: String,
}

/// A worker pool with its usage, as `pool_json` writes it.
#[derive(ToSchema)]
#[schema(as = WorkerPool)]
#[allow(dead_code)] // a schema: the server writes `pool_json`
struct PoolSchema {
    /// The same as `name`.
    id: String,
    name: String,
    /// In order of preference.
    queues: Vec<String>,
    /// Most active jobs across all members; `null`: no limit.
    concurrency: Option<i32>,
    /// `strict`, `weighted`, `round-robin` or `least-loaded`.
    strategy: String,
    /// Queue weights; a queue not named weighs 1.
    weights: BTreeMap<String, u32>,
    isolated: bool,
    starvation_prevention: StarvationSchema,
    tenant_fairness: TenantFairnessSchema,
    /// Live members.
    active_workers: i64,
    /// The same as `active_workers`.
    workers: i64,
    active_jobs: i64,
    created_at: String,
    updated_at: String,
}

/// Starvation prevention settings of a pool.
#[derive(ToSchema)]
#[schema(as = PoolStarvationPrevention)]
#[allow(dead_code)] // a schema
struct StarvationSchema {
    enabled: bool,
    /// ISO 8601 duration.
    rotation_interval: String,
    min_dispatch_ratio: f64,
}

/// Per-tenant fairness settings of a pool.
#[derive(ToSchema)]
#[schema(as = PoolTenantFairness)]
#[allow(dead_code)] // a schema
struct TenantFairnessSchema {
    enabled: bool,
    /// Always `fair-share`.
    strategy: String,
    /// Tenant weights keyed `tenant:<id>`.
    weights: BTreeMap<String, u32>,
    default_weight: u32,
}

/// A page of pools, as `items` and again as `pools`.
#[derive(ToSchema)]
#[schema(as = WorkerPoolList)]
#[allow(dead_code)] // a schema
struct PoolList {
    items: Vec<PoolSchema>,
    /// The same as `items`.
    pools: Vec<PoolSchema>,
    pagination: Pagination,
}

/// `{"pool": {...}}`.
#[derive(ToSchema)]
#[schema(as = WorkerPoolBody)]
#[allow(dead_code)] // a schema
struct PoolBody {
    pool: PoolSchema,
}

/// A pool to create or replace. Every member but `queues` may be `null` (the default). A pool
/// as answered may be sent back: its `id` must name the pool of the path, like `name`, and its
/// read-only members (`active_workers`, `workers`, `active_jobs`, `created_at`, `updated_at`)
/// are accepted and ignored; any other member is refused.
#[derive(ToSchema, serde::Deserialize)]
#[schema(as = WorkerPoolRequest)]
#[allow(dead_code)] // a schema: read by `WorkerPool::parse`
struct PoolRequest {
    /// The pool of the path, if given.
    id: Option<String>,
    /// The pool of the path, if given.
    name: Option<String>,
    /// 1 to 100 queues (each once, not `_default`): names in order of preference, or an object
    /// of name to `{"weight": n}` (or `null`), which also sets `weights`.
    #[schema(schema_with = pool_queues_schema)]
    queues: Value,
    /// Most active jobs across all members; `null` or absent: no limit.
    #[schema(minimum = 0)]
    concurrency: Option<i32>,
    /// Default `round-robin`.
    #[schema(pattern = "^(strict|weighted|round-robin|least-loaded)$")]
    strategy: Option<String>,
    /// Weights (1 to 1,000,000) of queues of `queues`.
    #[schema(value_type = Option<BTreeMap<String, u32>>)]
    weights: Option<BTreeMap<String, u32>>,
    isolated: Option<bool>,
    starvation_prevention: Option<StarvationRequest>,
    tenant_fairness: Option<TenantFairnessRequest>,
    /// Ignored.
    active_workers: Option<Value>,
    /// Ignored.
    workers: Option<Value>,
    /// Ignored.
    active_jobs: Option<Value>,
    /// Ignored.
    created_at: Option<Value>,
    /// Ignored.
    updated_at: Option<Value>,
}

/// The `queues` of a pool to set, inline: names, or an object of name to `{"weight": n}`.
fn pool_queues_schema() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{
        ArrayBuilder, ObjectBuilder, OneOfBuilder, Schema, SchemaType, Type,
    };
    let names = ArrayBuilder::new()
        .items(ObjectBuilder::new().schema_type(Type::String))
        .min_items(Some(1))
        .max_items(Some(crate::scheduling::pool::MAX_QUEUES));
    let weight = ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Integer, Type::Null]))
        .minimum(Some(1))
        .maximum(Some(crate::scheduling::MAX_WEIGHT))
        .description(Some("1 to 1,000,000; default 1."));
    let spec = ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Object, Type::Null]))
        .property("weight", weight);
    let weighted = ObjectBuilder::new()
        .schema_type(Type::Object)
        .additional_properties(Some(spec))
        .min_properties(Some(1))
        .max_properties(Some(crate::scheduling::pool::MAX_QUEUES));
    Schema::OneOf(
        OneOfBuilder::new()
            .item(names)
            .item(weighted)
            .description(Some(
                "1 to 100 queues (each once, not `_default`): names in order of preference, or \
                 an object of name to `{\"weight\": n}` (or `null`), which also sets `weights`.",
            ))
            .build(),
    )
}

/// Starvation prevention settings to set; omitted members keep their defaults.
#[derive(ToSchema, serde::Deserialize)]
#[schema(as = PoolStarvationPreventionRequest)]
#[allow(dead_code)] // a schema
struct StarvationRequest {
    /// Default `false`.
    enabled: Option<bool>,
    /// A duration of at least 100 ms (`PT30S`); default `PT30S`.
    rotation_interval: Option<String>,
    /// 0 to 1, and at most 1 over all the pool's queues; default 0.05.
    #[schema(minimum = 0, maximum = 1)]
    min_dispatch_ratio: Option<f64>,
}

/// Per-tenant fairness settings to set.
#[derive(ToSchema, serde::Deserialize)]
#[schema(as = PoolTenantFairnessRequest)]
#[allow(dead_code)] // a schema
struct TenantFairnessRequest {
    /// Default `false`.
    enabled: Option<bool>,
    /// Only `fair-share`.
    #[schema(pattern = "^fair-share$")]
    strategy: Option<String>,
    /// Weights (1 to 1,000,000) by tenant, keyed `tenant:<id>` or `<id>`.
    #[schema(value_type = Option<BTreeMap<String, u32>>)]
    weights: Option<BTreeMap<String, u32>>,
    /// 1 to 1,000,000; default 1.
    #[schema(minimum = 1, maximum = 1_000_000)]
    default_weight: Option<u32>,
}

/// Pool names follow the [queue-name pattern].
///
/// [queue-name pattern]: https://github.com/openjobspec/spec/blob/main/spec/ojs-core.md#queue
fn pool_path(name: &str) -> Result<(), ApiError> {
    check_queue_name("path.name", name)
}

/// `GET /ojs/v1/admin/pools`: pools by name, with live members and active jobs, as `items` (with
/// `pagination`) and again as `pools`, the key the OJS admin UI reads.
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/pools",
    tag = "admin",
    operation_id = "admin_list_pools",
    summary = "List worker pools",
    params(PageParams),
    responses(
        (status = 200, description = "Pools by name, as `items` and again as `pools`.", body = PoolList),
        (status = 400, description = "A page parameter is invalid."),
    )
)]
async fn list(State(state): State<AppState>, query: QueryParams) -> Result<Response, ApiError> {
    let page = Page::from_query(&query, ADMIN)?;
    let pools = state.broker().pools().await?;
    let total = pools.len() as i64;
    let items: Vec<Value> = pools
        .iter()
        .skip(usize::try_from(page.offset).unwrap_or(usize::MAX))
        .take(usize::try_from(page.limit).unwrap_or(usize::MAX))
        .map(pool_json)
        .collect();
    Ok(
        ok(json!({"items": items, "pools": items, "pagination": page.describe(total)}))
            .into_response(),
    )
}

/// `GET /ojs/v1/admin/pools/{name}`.
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/pools/{name}",
    tag = "admin",
    operation_id = "admin_get_pool",
    summary = "Read a worker pool",
    params(PoolNameParam),
    responses(
        (status = 200, body = PoolBody),
        (status = 400, description = "The pool name is invalid."),
        (status = 404, description = "No such pool."),
    )
)]
async fn show(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    pool_path(&name)?;
    let view = state.broker().pool_view(&name).await?;
    Ok(ok(json!({"pool": pool_json(&view)})).into_response())
}

/// `PUT /ojs/v1/admin/pools/{name}`: creates (201) or replaces (200) a pool.
#[utoipa::path(
    put,
    path = "/ojs/v1/admin/pools/{name}",
    tag = "admin",
    operation_id = "admin_put_pool",
    summary = "Create or replace a worker pool",
    params(PoolNameParam),
    request_body = PoolRequest,
    responses(
        (status = 200, description = "Replaced.", body = PoolBody),
        (status = 201, description = "Created; `Location` names the pool.", body = PoolBody),
        (status = 400, description = "The pool is invalid."),
    )
)]
async fn put(
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: JsonBody,
) -> Result<Response, ApiError> {
    pool_path(&name)?;
    body.object()?;
    let value: Value = serde_json::from_str(body.text())
        .map_err(|_| ApiError::invalid_field("$", "the body must be a JSON object"))?;
    let pool = WorkerPool::parse(&name, &value)?;
    let put = state.broker().put_pool(pool).await?;
    let body = json!({"pool": pool_json(&put.view)});
    if !put.created {
        return Ok(ok(body).into_response());
    }
    let mut response = Ojs(StatusCode::CREATED, body).into_response();
    if let Ok(location) = HeaderValue::from_str(&format!("/ojs/v1/admin/pools/{name}")) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// A deleted pool.
#[derive(Serialize, ToSchema)]
#[schema(as = WorkerPoolDeleted)]
struct Deleted {
    /// Always `true`.
    deleted: bool,
    name: String,
}

/// `DELETE /ojs/v1/admin/pools/{name}`.
#[utoipa::path(
    delete,
    path = "/ojs/v1/admin/pools/{name}",
    tag = "admin",
    operation_id = "admin_delete_pool",
    summary = "Delete a worker pool",
    params(PoolNameParam),
    responses(
        (status = 200, body = Deleted),
        (status = 400, description = "The pool name is invalid."),
        (status = 404, description = "No such pool."),
    )
)]
async fn remove(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    pool_path(&name)?;
    state.broker().delete_pool(&name).await?;
    Ok(ok(Deleted {
        deleted: true,
        name,
    })
    .into_response())
}

/// The scheduling statistics (written with `json!`).
#[derive(ToSchema)]
#[schema(as = SchedulingStats)]
#[allow(dead_code)] // a schema
struct SchedulingStatsSchema {
    /// Queues with dispatches in the window.
    queues: Vec<SchedulingQueueSchema>,
    stats: SchedulingTotalsSchema,
    /// The server's default fetch strategy: `strict`, `weighted`, `round-robin` or
    /// `least-loaded`.
    strategy: String,
    /// The window, as an ISO 8601 duration (`PT1M`).
    window: String,
}

/// One queue of the scheduling statistics.
#[derive(ToSchema)]
#[schema(as = SchedulingQueue)]
#[allow(dead_code)] // a schema
struct SchedulingQueueSchema {
    name: String,
    dispatch_count_1m: i64,
    /// Of all dispatches in the window, to 4 decimals.
    dispatch_ratio_1m: f64,
    avg_wait_ms: i64,
    active_jobs: i64,
    /// The same as `dispatch_count_1m`.
    dispatched: i64,
    starved: bool,
    /// The weight its pool gives it (1 when unnamed); `null` outside pools.
    weight: Option<u32>,
}

/// Totals, starved queues and pools of the scheduling statistics.
#[derive(ToSchema)]
#[schema(as = SchedulingTotals)]
#[allow(dead_code)] // a schema
struct SchedulingTotalsSchema {
    total_dispatch_count_1m: i64,
    queues_starved: Vec<String>,
    pools: Vec<SchedulingPoolSchema>,
}

/// One pool of the scheduling statistics.
#[derive(ToSchema)]
#[schema(as = SchedulingPool)]
#[allow(dead_code)] // a schema
struct SchedulingPoolSchema {
    name: String,
    strategy: String,
    concurrency: Option<i32>,
    active_jobs: i64,
    active_workers: i64,
    /// Active jobs over `concurrency`; `null` without one.
    utilization: Option<f64>,
}

/// `GET /ojs/v1/admin/scheduling/stats`: dispatches per queue over the last minute, over all
/// replicas, as `queues` and `window` ([OJS scheduling statistics]); `stats` adds the totals,
/// starved queues and pools, because the conformance suite reads that object. For the OJS admin
/// UI, `strategy` is the server's default fetch strategy and each queue also carries
/// `dispatched`, `starved` and the `weight` its pool gives it (1 when unnamed, absent outside
/// pools).
///
/// [OJS scheduling statistics]: https://github.com/openjobspec/spec/blob/main/spec/ojs-fair-scheduling.md#102-scheduling-statistics
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/scheduling/stats",
    tag = "admin",
    operation_id = "admin_scheduling_stats",
    summary = "Scheduling statistics",
    description = "Dispatches per queue over the last minute, over all replicas.",
    responses((status = 200, body = SchedulingStatsSchema))
)]
async fn stats(State(state): State<AppState>) -> Result<Response, ApiError> {
    let stats = state.broker().scheduling_stats().await?;
    let weight = |queue: &str| {
        stats
            .pools
            .iter()
            .map(|view| &view.stored.pool)
            .find(|p| p.queues.iter().any(|q| q == queue))
            .map(|p| p.weights.get(queue).copied().unwrap_or(1))
    };
    let window = duration::format_iso(STATS_WINDOW_SECS as u64 * 1_000);
    let queues: Vec<Value> = stats
        .queues
        .iter()
        .map(|q| {
            json!({
                "name": q.queue,
                "dispatch_count_1m": q.dispatched,
                "dispatch_ratio_1m": (q.ratio * 10_000.0).round() / 10_000.0,
                "avg_wait_ms": q.avg_wait_ms,
                "active_jobs": q.active,
                "dispatched": q.dispatched,
                "starved": stats.starved.contains(&q.queue),
                "weight": weight(&q.queue),
            })
        })
        .collect();
    let pools: Vec<Value> = stats
        .pools
        .iter()
        .map(|view| {
            let p = &view.stored.pool;
            json!({
                "name": p.name,
                "strategy": p.strategy.as_str(),
                "concurrency": p.concurrency,
                "active_jobs": view.usage.active_jobs,
                "active_workers": view.usage.active_workers,
                "utilization": view.utilization(),
            })
        })
        .collect();
    let strategy = state.broker().settings().fetch_strategy.unwrap_or_default();
    Ok(ok(json!({
        "strategy": strategy.as_str(),
        "queues": queues,
        "window": window,
        "stats": {
            "total_dispatch_count_1m": stats.total,
            "queues_starved": stats.starved,
            "pools": pools,
        },
    }))
    .into_response())
}
