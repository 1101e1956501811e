//! `/ojs/v1/admin/pools` and `/ojs/v1/admin/scheduling/stats`: the HTTP side of fair
//! scheduling ([OJS fair-scheduling HTTP binding]).
//!
//! [OJS fair-scheduling HTTP binding]: https://github.com/openjobspec/spec/blob/main/spec/ojs-fair-scheduling.md#10-http-binding

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

use super::super::error::ApiError;
use super::super::extract::JsonBody;
use super::super::query::{ADMIN, Page, QueryParams};
use super::super::queues::check_queue_name;
use super::super::{AppState, Ojs, ok};
use crate::broker::pools::{STATS_WINDOW_SECS, pool_json};
use crate::duration;
use crate::pool::WorkerPool;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ojs/v1/admin/pools", get(list))
        .route(
            "/ojs/v1/admin/pools/{name}",
            get(show).put(put).delete(remove),
        )
        .route("/ojs/v1/admin/scheduling/stats", get(stats))
}

/// Pool names follow the [queue-name pattern].
///
/// [queue-name pattern]: https://github.com/openjobspec/spec/blob/main/spec/ojs-core.md#queue
fn pool_path(name: &str) -> Result<(), ApiError> {
    check_queue_name("path.name", name)
}

/// `GET /ojs/v1/admin/pools`: pools by name, with live members and active jobs, as `items` (with
/// `pagination`) and again as `pools`, the key the OJS admin UI reads.
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
async fn show(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    pool_path(&name)?;
    let view = state.broker().pool_view(&name).await?;
    Ok(ok(json!({"pool": pool_json(&view)})).into_response())
}

/// `PUT /ojs/v1/admin/pools/{name}`: creates (201) or replaces (200) a pool.
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

/// `DELETE /ojs/v1/admin/pools/{name}`.
async fn remove(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    pool_path(&name)?;
    state.broker().delete_pool(&name).await?;
    Ok(ok(json!({"deleted": true, "name": name})).into_response())
}

/// `GET /ojs/v1/admin/scheduling/stats`: dispatches per queue over the last minute, over all
/// replicas, as `queues` and `window` ([OJS scheduling statistics]); `stats` adds the totals,
/// starved queues and pools, because the conformance suite reads that object. For the OJS admin
/// UI, `strategy` is the server's default fetch strategy and each queue also carries
/// `dispatched`, `starved` and the `weight` its pool gives it (1 when unnamed, absent outside
/// pools).
///
/// [OJS scheduling statistics]: https://github.com/openjobspec/spec/blob/main/spec/ojs-fair-scheduling.md#102-scheduling-statistics
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
