//! `/ojs/v1/admin/queues` ([OJS admin queue management]): queues with their counts, recent
//! throughput and latency, and the purge of a queue's jobs; and the rate-limited queues
//! (`/ojs/v1/rate-limits`). Pause and resume live with the other queue routes
//! (`http::queues`).
//!
//! [OJS admin queue management]: https://github.com/openjobspec/spec/blob/main/spec/ojs-admin-api.md#6-queue-management

use axum::Router;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use serde::Serialize;
use serde_json::json;

use super::super::dead_letter::body_timestamp;
use super::super::error::ApiError;
use super::super::extract::OptionalJsonBody;
use super::super::query::{ADMIN, Page, Pagination, QueryParams};
use super::super::queues::queue_path;
use super::super::{AppState, ok};
use super::stats::Throughput;
use crate::broker::AdminQueue;
use crate::broker::{QueueState, StateCounts};
use crate::job::JobState;
use crate::timestamp;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ojs/v1/admin/queues", get(list))
        .route("/ojs/v1/admin/queues/{name}", get(show))
        .route("/ojs/v1/admin/queues/{name}/jobs", delete(purge))
        .route("/ojs/v1/rate-limits", get(rate_limits))
}

/// `GET /ojs/v1/rate-limits`: the queues whose configuration sets a `rate_limit` (their own or
/// `_default`'s), by name, a page at a time, as the OJS admin UI lists them: `key` (and
/// `queue`) the queue, `limit` jobs per `period`, `active` the jobs started within the last
/// period, `waiting` its available jobs. Limits are changed through the queue's configuration;
/// the UI's per-key overrides are not offered.
async fn rate_limits(
    State(state): State<AppState>,
    query: QueryParams,
) -> Result<Response, ApiError> {
    let page = Page::from_query(&query, ADMIN)?;
    let (limits, total) = state.broker().rate_limits(page.limit, page.offset).await?;
    let items: Vec<serde_json::Value> = limits
        .iter()
        .map(|r| {
            json!({
                "key": r.queue,
                "queue": r.queue,
                "limit": r.limit,
                "period": crate::duration::format_iso(r.period_ms),
                "active": r.started,
                "waiting": r.waiting,
            })
        })
        .collect();
    Ok(ok(json!({"items": items, "pagination": page.describe(total)})).into_response())
}

/// Percentiles of the execution time of the jobs completed in the recent window, in whole
/// milliseconds; omitted when none completed.
#[derive(Serialize)]
struct Latency {
    #[serde(skip_serializing_if = "Option::is_none")]
    p50: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    p95: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    p99: Option<i64>,
}

/// One queue of the admin listing.
#[derive(Serialize)]
struct Item<'a> {
    name: &'a str,
    state: QueueState,
    paused: bool,
    counts: StateCounts,
    throughput: Throughput,
    latency_ms: Latency,
    created_at: String,
}

impl<'a> Item<'a> {
    fn of(q: &'a AdminQueue) -> Item<'a> {
        let percentile = |i: usize| q.activity.latency_ms.map(|p| p[i].round() as i64);
        Item {
            name: &q.stats.queue.name,
            state: q.stats.queue.state,
            paused: q.stats.queue.state == QueueState::Paused,
            counts: StateCounts::from(&q.stats.counts),
            throughput: Throughput::of(q.activity.completed, q.activity.discarded),
            latency_ms: Latency {
                p50: percentile(0),
                p95: percentile(1),
                p99: percentile(2),
            },
            created_at: timestamp::format(q.stats.queue.created_at),
        }
    }
}

/// `GET /ojs/v1/admin/queues`: queues by name, a page at a time.
async fn list(State(state): State<AppState>, query: QueryParams) -> Result<Response, ApiError> {
    let page = Page::from_query(&query, ADMIN)?;
    let (queues, total) = state.broker().admin_queues(page.limit, page.offset).await?;

    #[derive(Serialize)]
    struct ListBody<'a> {
        items: Vec<Item<'a>>,
        pagination: Pagination,
    }
    Ok(ok(ListBody {
        items: queues.iter().map(Item::of).collect(),
        pagination: page.describe(total),
    })
    .into_response())
}

/// `GET /ojs/v1/admin/queues/{name}`: a listed queue plus its configuration and when its
/// longest-waiting job became available (omitted while none waits). The configuration's
/// `backpressure` also reports, for the OJS admin UI, whether the queue is bounded
/// (`enabled`), its bound (`threshold`), its `current_depth` and `state`: `normal`, `warning`
/// from `warning_threshold` of the bound, `critical` at the bound.
async fn show(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    queue_path(&name)?;
    let detail = state.broker().admin_queue(&name).await?;

    #[derive(Serialize)]
    struct Shown<'a> {
        #[serde(flatten)]
        item: Item<'a>,
        configuration: serde_json::Value,
        #[serde(skip_serializing_if = "Option::is_none")]
        oldest_available_at: Option<String>,
    }
    let mut configuration = detail.config.to_json();
    if let Some(pressure) = configuration
        .get_mut("backpressure")
        .and_then(serde_json::Value::as_object_mut)
    {
        let bound = detail.config.max_size;
        let state = match (bound, detail.depth) {
            (Some(bound), Some(depth)) if depth >= bound => "critical",
            (Some(bound), Some(depth))
                if depth as f64 >= detail.config.warning_threshold * bound as f64 =>
            {
                "warning"
            }
            _ => "normal",
        };
        pressure.insert("enabled".to_owned(), bound.is_some().into());
        pressure.insert("threshold".to_owned(), bound.into());
        pressure.insert("current_depth".to_owned(), detail.depth.into());
        pressure.insert("state".to_owned(), state.into());
    }
    Ok(ok(Shown {
        item: Item::of(&detail.queue),
        configuration,
        oldest_available_at: detail.oldest_available_at.map(timestamp::format),
    })
    .into_response())
}

/// The states a purge may name: all but `active` (a worker holds those jobs).
const PURGEABLE: [JobState; 7] = [
    JobState::Scheduled,
    JobState::Available,
    JobState::Pending,
    JobState::Retryable,
    JobState::Completed,
    JobState::Cancelled,
    JobState::Discarded,
];

/// Parses the `states` of a purge (every purgeable state when absent).
fn purge_states(names: Option<Vec<String>>, field: &str) -> Result<Vec<JobState>, ApiError> {
    let Some(names) = names else {
        return Ok(PURGEABLE.to_vec());
    };
    if names.is_empty() {
        return Err(ApiError::invalid_field(
            field,
            "'states' must name at least one state",
        ));
    }
    let mut states = Vec::with_capacity(names.len());
    for name in &names {
        match JobState::parse(name) {
            Some(JobState::Active) => {
                return Err(ApiError::invalid_field(
                    field,
                    "active jobs cannot be purged: a worker holds them (cancel them instead)",
                ));
            }
            Some(s) if !states.contains(&s) => states.push(s),
            Some(_) => {}
            None => {
                return Err(ApiError::invalid_field(
                    field,
                    format!("{name:?} is not a job state"),
                ));
            }
        }
    }
    Ok(states)
}

/// `DELETE /ojs/v1/admin/queues/{name}/jobs`: deletes the queue's jobs in `states` (all but
/// `active`; every such state when absent) created before `older_than`, for good. Options in
/// the body or the query string, the body winning; `confirm: true` required.
async fn purge(
    State(state): State<AppState>,
    Path(name): Path<String>,
    query: QueryParams,
    OptionalJsonBody(body): OptionalJsonBody,
) -> Result<Response, ApiError> {
    queue_path(&name)?;
    let fields = body.as_ref().map(|b| b.object()).transpose()?;
    let confirmed = match &fields {
        Some(f) if f.raw("confirm").is_some() => f.boolean("confirm")? == Some(true),
        _ => query.get("confirm") == Some("true"),
    };
    if !confirmed {
        return Err(ApiError::invalid_field(
            "$.confirm",
            "purging deletes jobs for good: send \"confirm\": true",
        ));
    }
    let states = match fields.as_ref().map(|f| f.strings("states")).transpose()? {
        Some(Some(names)) => purge_states(Some(names), "$.states")?,
        _ => purge_states(query.list("states"), "query.states")?,
    };
    let older_than = match fields
        .as_ref()
        .map(|f| body_timestamp(f, "older_than", "$"))
        .transpose()?
    {
        Some(Some(t)) => Some(t),
        _ => query.timestamp("older_than")?,
    };
    let purged = state
        .broker()
        .purge_queue(&name, &states, older_than)
        .await?;
    let names: Vec<&str> = states.iter().map(|s| s.as_str()).collect();
    Ok(ok(json!({"purged_count": purged, "states": names})).into_response())
}
