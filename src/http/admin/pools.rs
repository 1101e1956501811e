//! `/ojs/v1/admin/pools` and `/ojs/v1/admin/scheduling/stats`: the HTTP side of fair
//! scheduling ([OJS fair-scheduling HTTP binding]).
//!
//! [OJS fair-scheduling HTTP binding]: https://github.com/openjobspec/spec/blob/main/spec/ojs-fair-scheduling.md#10-http-binding

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::broker::pools::{PoolView, STATS_WINDOW_SECS};
use crate::http::error::ApiError;
use crate::http::extract::JsonBody;
use crate::http::extract::check_queue_name;
use crate::http::query::{ADMIN, Page, Pagination, QueryParams};
use crate::http::{AppState, Ojs, ok};
use crate::job::id_schema::QueueName;
use crate::scheduling::Strategy;
use crate::scheduling::pool::{WireStarvation, WireTenantFairness, WorkerPool};
use crate::wire::duration;
use crate::wire::timestamp;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(show, put, remove))
        .routes(routes!(stats))
}

/// The pool of a path.
#[derive(serde::Deserialize, IntoParams)]
#[into_params(names("name"), parameter_in = Path)]
struct PoolPath(
    /// The pool: a name with the rules of a queue name (any other name is refused with 400).
    #[param(value_type = QueueName)]
    String,
);

/// A worker pool with its usage. `id` repeats the name and `workers` the count of active
/// members, the fields the OJS admin UI reads.
#[derive(Serialize, ToSchema)]
#[schema(as = WorkerPool)]
struct WirePool<'a> {
    /// The same as `name`.
    id: &'a str,
    name: &'a str,
    /// In order of preference.
    queues: &'a [String],
    /// Most active jobs across all members; `null`: no limit.
    #[schema(required = true)]
    concurrency: Option<i32>,
    strategy: Strategy,
    /// Queue weights; a queue not named weighs 1.
    weights: &'a BTreeMap<String, u32>,
    isolated: bool,
    starvation_prevention: WireStarvation,
    tenant_fairness: WireTenantFairness<'a>,
    /// Live members.
    active_workers: i64,
    /// The same as `active_workers`.
    workers: i64,
    active_jobs: i64,
    created_at: String,
    updated_at: String,
}

impl<'a> WirePool<'a> {
    fn of(view: &'a PoolView) -> WirePool<'a> {
        let p = &view.stored.pool;
        WirePool {
            id: &p.name,
            name: &p.name,
            queues: &p.queues,
            concurrency: p.concurrency,
            strategy: p.strategy,
            weights: &p.weights,
            isolated: p.isolated,
            starvation_prevention: p.starvation_wire(),
            tenant_fairness: p.tenant_fairness_wire(),
            active_workers: view.usage.active_workers,
            workers: view.usage.active_workers,
            active_jobs: view.usage.active_jobs,
            created_at: timestamp::format(view.stored.created_at),
            updated_at: timestamp::format(view.stored.updated_at),
        }
    }
}

/// A page of pools, as `items` and again as `pools`.
#[derive(Serialize, ToSchema)]
#[schema(as = WorkerPoolList)]
struct PoolList<'a> {
    items: &'a [WirePool<'a>],
    /// The same as `items`.
    pools: &'a [WirePool<'a>],
    pagination: Pagination,
}

/// `{"pool": {...}}`.
#[derive(Serialize, ToSchema)]
#[schema(as = WorkerPoolBody)]
struct PoolBody<'a> {
    pool: WirePool<'a>,
}

/// A pool to create or replace. Every member but `queues` may be `null` (the default). A pool
/// as answered may be sent back: its `id` must name the pool of the path, like `name`, and its
/// read-only members (`active_workers`, `workers`, `active_jobs`, `created_at`, `updated_at`)
/// are accepted and ignored; any other member is refused.
#[derive(ToSchema)]
#[schema(as = WorkerPoolRequest)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // a schema: read by `WorkerPool::parse`
struct PoolRequest {
    /// The pool of the path, if given.
    #[schema(value_type = Option<QueueName>)]
    id: Option<String>,
    /// The pool of the path, if given.
    #[schema(value_type = Option<QueueName>)]
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
        AdditionalProperties, ArrayBuilder, ObjectBuilder, OneOfBuilder, Schema, SchemaType, Type,
    };
    let names = ArrayBuilder::new()
        .items(<QueueName as utoipa::PartialSchema>::schema())
        .min_items(Some(1))
        .max_items(Some(crate::scheduling::pool::MAX_QUEUES))
        .unique_items(true);
    let weight = ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Integer, Type::Null]))
        .minimum(Some(1))
        .maximum(Some(crate::scheduling::MAX_WEIGHT))
        .description(Some("1 to 1,000,000; default 1."));
    let spec = ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Object, Type::Null]))
        .property("weight", weight)
        .additional_properties(Some(AdditionalProperties::FreeForm(false)));
    let weighted = ObjectBuilder::new()
        .schema_type(Type::Object)
        .property_names(Some(<QueueName as utoipa::PartialSchema>::schema()))
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
#[derive(ToSchema)]
#[schema(as = PoolStarvationPreventionRequest)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // a schema
struct StarvationRequest {
    /// Default `false`.
    enabled: Option<bool>,
    /// A duration of at least 100 ms (`PT30S`); default `PT30S`.
    #[schema(schema_with = rotation_interval_schema)]
    rotation_interval: Option<String>,
    /// 0 to 1, and at most 1 over all the pool's queues; default 0.05.
    #[schema(minimum = 0, maximum = 1)]
    min_dispatch_ratio: Option<f64>,
}

/// A rotation interval: a duration of at least 100 ms (`PT30S`).
fn rotation_interval_schema() -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
        .pattern(Some(crate::wire::duration::pattern_at_least_100_ms()))
        .description(Some(
            "A duration of at least 100 ms (`PT30S`); default `PT30S`.",
        ))
        .build()
}

/// Per-tenant fairness settings to set.
#[derive(ToSchema)]
#[schema(as = PoolTenantFairnessRequest)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // a schema
struct TenantFairnessRequest {
    /// Default `false`.
    enabled: Option<bool>,
    /// Only `fair-share`.
    #[schema(pattern = "^fair-share$")]
    strategy: Option<String>,
    /// Weights (1 to 1,000,000) by tenant, keyed `tenant:<id>` (or `<id>`).
    #[schema(schema_with = tenant_weights_schema)]
    weights: Option<BTreeMap<String, u32>>,
    /// 1 to 1,000,000; default 1.
    #[schema(minimum = 1, maximum = 1_000_000)]
    default_weight: Option<u32>,
}

/// The weights of a pool's tenants: `tenant:<id>` or `<id>` (the id 1 to 255 bytes) to
/// 1..=1,000,000.
fn tenant_weights_schema() -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Object, Type::Null]))
        .property_names(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some("^(tenant:.{1,63}|.{1,63})$")),
        ))
        .additional_properties(Some(
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .minimum(Some(1))
                .maximum(Some(crate::scheduling::MAX_WEIGHT)),
        ))
        .description(Some(
            "Weights (1 to 1,000,000) by tenant, keyed `tenant:<id>` or `<id>` (an id of 1 to 255 \
             bytes).",
        ))
        .build()
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
    params(Page),
    responses(
        (status = 200, description = "Pools by name, as `items` and again as `pools`.", body = PoolList<'_>),
        (status = 400, description = "A page parameter is invalid."),
    )
)]
async fn list(State(state): State<AppState>, query: QueryParams) -> Result<Response, ApiError> {
    let page = Page::from_query(&query, ADMIN)?;
    let pools = state.broker().pools().await?;
    let total = pools.len() as i64;
    let items: Vec<WirePool<'_>> = pools
        .iter()
        .skip(usize::try_from(page.offset).unwrap_or(usize::MAX))
        .take(usize::try_from(page.limit).unwrap_or(usize::MAX))
        .map(WirePool::of)
        .collect();
    Ok(ok(PoolList {
        items: &items,
        pools: &items,
        pagination: page.describe(total),
    })
    .into_response())
}

/// `GET /ojs/v1/admin/pools/{name}`.
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/pools/{name}",
    tag = "admin",
    operation_id = "admin_get_pool",
    summary = "Read a worker pool",
    params(PoolPath),
    responses(
        (status = 200, body = PoolBody<'_>),
        (status = 400, description = "The pool name is invalid."),
        (status = 404, description = "No such pool."),
    )
)]
async fn show(
    State(state): State<AppState>,
    Path(PoolPath(name)): Path<PoolPath>,
) -> Result<Response, ApiError> {
    pool_path(&name)?;
    let view = state.broker().pool_view(&name).await?;
    Ok(ok(PoolBody {
        pool: WirePool::of(&view),
    })
    .into_response())
}

/// `PUT /ojs/v1/admin/pools/{name}`: creates (201) or replaces (200) a pool.
#[utoipa::path(
    put,
    path = "/ojs/v1/admin/pools/{name}",
    tag = "admin",
    operation_id = "admin_put_pool",
    summary = "Create or replace a worker pool",
    params(PoolPath),
    request_body = PoolRequest,
    responses(
        (status = 200, description = "Replaced.", body = PoolBody<'_>),
        (status = 201, description = "Created; `Location` names the pool.", body = PoolBody<'_>),
        (status = 400, description = "The pool is invalid."),
    )
)]
async fn put(
    State(state): State<AppState>,
    Path(PoolPath(name)): Path<PoolPath>,
    body: JsonBody,
) -> Result<Response, ApiError> {
    pool_path(&name)?;
    body.object()?;
    let value: Value = serde_json::from_str(body.text())
        .map_err(|_| ApiError::invalid_field("$", "the body must be a JSON object"))?;
    let pool = WorkerPool::parse(&name, &value)?;
    let put = state.broker().put_pool(pool).await?;
    let body = PoolBody {
        pool: WirePool::of(&put.view),
    };
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
    params(PoolPath),
    responses(
        (status = 200, body = Deleted),
        (status = 400, description = "The pool name is invalid."),
        (status = 404, description = "No such pool."),
    )
)]
async fn remove(
    State(state): State<AppState>,
    Path(PoolPath(name)): Path<PoolPath>,
) -> Result<Response, ApiError> {
    pool_path(&name)?;
    state.broker().delete_pool(&name).await?;
    Ok(ok(Deleted {
        deleted: true,
        name,
    })
    .into_response())
}

/// The scheduling statistics.
#[derive(Serialize, ToSchema)]
struct SchedulingStats<'a> {
    /// The server's default fetch strategy.
    strategy: Strategy,
    /// Queues with dispatches in the window.
    queues: Vec<SchedulingQueue<'a>>,
    /// The window, as an ISO 8601 duration (`PT1M`).
    window: String,
    stats: SchedulingTotals<'a>,
}

/// One queue of the scheduling statistics.
#[derive(Serialize, ToSchema)]
struct SchedulingQueue<'a> {
    name: &'a str,
    dispatch_count_1m: i64,
    /// Of all dispatches in the window, to 4 decimals.
    dispatch_ratio_1m: f64,
    avg_wait_ms: i64,
    active_jobs: i64,
    /// The same as `dispatch_count_1m`.
    dispatched: i64,
    starved: bool,
    /// The weight its pool gives it (1 when unnamed); `null` outside pools.
    #[schema(required = true)]
    weight: Option<u32>,
}

/// Totals, starved queues and pools of the scheduling statistics.
#[derive(Serialize, ToSchema)]
struct SchedulingTotals<'a> {
    total_dispatch_count_1m: i64,
    queues_starved: &'a [String],
    pools: Vec<SchedulingPool<'a>>,
}

/// One pool of the scheduling statistics.
#[derive(Serialize, ToSchema)]
struct SchedulingPool<'a> {
    name: &'a str,
    strategy: Strategy,
    #[schema(required = true)]
    concurrency: Option<i32>,
    active_jobs: i64,
    active_workers: i64,
    /// Active jobs over `concurrency`; `null` without one.
    #[schema(required = true)]
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
    responses((status = 200, body = SchedulingStats<'_>))
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
    let queues = stats
        .queues
        .iter()
        .map(|q| SchedulingQueue {
            name: &q.queue,
            dispatch_count_1m: q.dispatched,
            dispatch_ratio_1m: (q.ratio * 10_000.0).round() / 10_000.0,
            avg_wait_ms: q.avg_wait_ms,
            active_jobs: q.active,
            dispatched: q.dispatched,
            starved: stats.starved.contains(&q.queue),
            weight: weight(&q.queue),
        })
        .collect();
    let pools = stats
        .pools
        .iter()
        .map(|view| {
            let p = &view.stored.pool;
            SchedulingPool {
                name: &p.name,
                strategy: p.strategy,
                concurrency: p.concurrency,
                active_jobs: view.usage.active_jobs,
                active_workers: view.usage.active_workers,
                utilization: view.utilization(),
            }
        })
        .collect();
    Ok(ok(SchedulingStats {
        strategy: state.broker().settings().fetch_strategy.unwrap_or_default(),
        queues,
        window: duration::format_iso(STATS_WINDOW_SECS as u64 * 1_000),
        stats: SchedulingTotals {
            total_dispatch_count_1m: stats.total,
            queues_starved: &stats.starved,
            pools,
        },
    })
    .into_response())
}
