//! `/ojs/v1/admin/queues` ([OJS admin queue management]): queues with their counts, recent
//! throughput and latency, and the purge of a queue's jobs; and the rate-limited queues
//! (`/ojs/v1/rate-limits`); pause and resume under their admin paths.
//!
//! [OJS admin queue management]: https://github.com/openjobspec/spec/blob/main/spec/ojs-admin-api.md#6-queue-management

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::json;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::{PauseResultDoc, QueueNameParam, pause, resume};
use crate::broker::AdminQueue;
use crate::broker::{QueueState, StateCounts};
use crate::http::admin::stats::{JobCountsSchema, Throughput};
use crate::http::dead_letter::body_timestamp;
use crate::http::error::ApiError;
use crate::http::extract::OptionalJsonBody;
use crate::http::extract::queue_path;
use crate::http::query::{ADMIN, Page, PageParams, Pagination, QueryParams};
use crate::http::{AppState, ok};
use crate::job::JobState;
use crate::wire::timestamp;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(show))
        .routes(routes!(purge))
        .routes(routes!(rate_limits))
        .routes(routes!(admin_pause))
        .routes(routes!(admin_resume))
}

/// `lowercase` [`QueueState`] names, inline.
fn queue_state_schema() -> utoipa::openapi::schema::Object {
    utoipa::openapi::schema::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .enum_values(Some(["active", "paused", "draining"]))
        .build()
}

/// A rate-limited queue's limit and use (written with `json!`).
#[derive(ToSchema)]
#[schema(as = RateLimitUsage)]
#[allow(dead_code)] // a schema
struct RateLimitUsageSchema {
    /// Jobs started within the last `period`.
    active: i64,
    /// The queue.
    key: String,
    /// Jobs per `period`.
    limit: i64,
    /// ISO 8601 duration.
    period: String,
    /// The queue.
    queue: String,
    /// Available jobs.
    waiting: i64,
}

/// A page of rate-limited queues.
#[derive(ToSchema)]
#[schema(as = RateLimitList)]
#[allow(dead_code)] // a schema
struct RateLimitList {
    items: Vec<RateLimitUsageSchema>,
    pagination: Pagination,
}

/// `GET /ojs/v1/rate-limits`: the queues whose configuration sets a `rate_limit` (their own or
/// `_default`'s), by name, a page at a time, as the OJS admin UI lists them: `key` (and
/// `queue`) the queue, `limit` jobs per `period`, `active` the jobs started within the last
/// period, `waiting` its available jobs. Limits are changed through the queue's configuration;
/// the UI's per-key overrides are not offered.
#[utoipa::path(
    get,
    path = "/ojs/v1/rate-limits",
    tag = "admin",
    operation_id = "admin_list_rate_limits",
    summary = "List rate-limited queues",
    description = "The queues whose configuration sets a `rate_limit` (their own or \
                   `_default`'s), by name: `limit` jobs per `period`, `active` the jobs started \
                   within the last period, `waiting` the available jobs.",
    params(PageParams),
    responses(
        (status = 200, body = RateLimitList),
        (status = 400, description = "A page parameter is invalid."),
    )
)]
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
                "period": crate::wire::duration::format_iso(r.period_ms),
                "active": r.started,
                "waiting": r.waiting,
            })
        })
        .collect();
    Ok(ok(json!({"items": items, "pagination": page.describe(total)})).into_response())
}

/// Percentiles of the execution time of the jobs completed in the recent window, in whole
/// milliseconds; omitted when none completed.
#[derive(Serialize, ToSchema)]
#[schema(as = QueueLatency)]
struct Latency {
    #[serde(skip_serializing_if = "Option::is_none")]
    p50: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    p95: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    p99: Option<i64>,
}

/// One queue of the admin listing.
#[derive(Serialize, ToSchema)]
#[schema(as = AdminQueue)]
struct Item<'a> {
    name: &'a str,
    #[schema(schema_with = queue_state_schema)]
    state: QueueState,
    paused: bool,
    /// Jobs by state.
    #[schema(value_type = JobCountsSchema)]
    counts: StateCounts,
    /// The last five minutes.
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

/// A page of queues.
#[derive(Serialize, ToSchema)]
#[schema(as = AdminQueueList)]
struct ListBody<'a> {
    items: Vec<Item<'a>>,
    pagination: Pagination,
}

/// `GET /ojs/v1/admin/queues`: queues by name, a page at a time.
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/queues",
    tag = "admin",
    operation_id = "admin_list_queues",
    summary = "List queues",
    params(PageParams),
    responses(
        (status = 200, description = "Queues by name, a page at a time.", body = ListBody<'_>),
        (status = 400, description = "A page parameter is invalid."),
    )
)]
async fn list(State(state): State<AppState>, query: QueryParams) -> Result<Response, ApiError> {
    let page = Page::from_query(&query, ADMIN)?;
    let (queues, total) = state.broker().admin_queues(page.limit, page.offset).await?;
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
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/queues/{name}",
    tag = "admin",
    operation_id = "admin_get_queue",
    summary = "Read a queue",
    params(QueueNameParam),
    responses(
        (status = 200, description = "The queue as listed, with its configuration.", body = Shown<'_>),
        (status = 400, description = "The queue name is invalid."),
        (status = 404, description = "No such queue."),
    )
)]
async fn show(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    queue_path(&name)?;
    let detail = state.broker().admin_queue(&name).await?;
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

/// One queue in detail.
#[derive(Serialize, ToSchema)]
#[schema(as = AdminQueueDetail)]
struct Shown<'a> {
    #[serde(flatten)]
    item: Item<'a>,
    /// The resolved configuration.
    #[schema(value_type = QueueConfigurationSchema)]
    configuration: serde_json::Value,
    /// When the job that has waited longest became available; absent while none waits.
    #[serde(skip_serializing_if = "Option::is_none")]
    oldest_available_at: Option<String>,
}

/// A queue's resolved configuration (`QueueConfig::to_json`) with the live backpressure
/// fields.
#[derive(ToSchema)]
#[schema(as = AdminQueueConfiguration)]
#[allow(dead_code)] // a schema: the server writes `QueueConfig::to_json`
struct QueueConfigurationSchema {
    max_size: Option<i64>,
    max_size_bytes: Option<i64>,
    /// `reject`, `drop_oldest` or `block`.
    overflow_policy: String,
    warning_threshold: f64,
    concurrency: Option<i64>,
    rate_limit: Option<QueueRateLimitSchema>,
    /// Seconds.
    visibility_timeout: Option<i64>,
    /// Seconds.
    default_timeout: Option<i64>,
    /// The effective default retry policy.
    #[schema(value_type = crate::http::openapi::RetryPolicy)]
    default_retry: serde_json::Value,
    retention: QueueRetentionSchema,
    dead_letter_queue: Option<String>,
    dead_letter_max_size: Option<i64>,
    /// ISO 8601 duration.
    dead_letter_ttl: String,
    allowed_job_types: Vec<String>,
    producers: Vec<String>,
    backpressure: QueueBackpressureSchema,
}

/// `limit` jobs per `period`.
#[derive(ToSchema)]
#[schema(as = AdminQueueRateLimit)]
#[allow(dead_code)] // a schema
struct QueueRateLimitSchema {
    limit: i64,
    /// ISO 8601 duration.
    period: String,
}

/// How long finished jobs are kept, as ISO 8601 durations.
#[derive(ToSchema)]
#[schema(as = AdminQueueRetention)]
#[allow(dead_code)] // a schema
struct QueueRetentionSchema {
    completed: String,
    discarded: String,
    cancelled: String,
}

/// The queue's bound and how full it is.
#[derive(ToSchema)]
#[schema(as = AdminQueueBackpressure)]
#[allow(dead_code)] // a schema
struct QueueBackpressureSchema {
    /// The bound (`max_size`).
    max_depth: Option<i64>,
    max_size_bytes: Option<i64>,
    /// The overflow policy: `reject`, `drop_oldest` or `block`.
    strategy: String,
    warning_threshold: f64,
    /// Whether the queue is bounded.
    enabled: bool,
    /// The bound.
    threshold: Option<i64>,
    /// The jobs counted against the bound (bounded queues only).
    current_depth: Option<i64>,
    /// `normal`, `warning` (from `warning_threshold` of the bound) or `critical` (at the bound).
    #[schema(pattern = "^(normal|warning|critical)$")]
    state: String,
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

/// The options of a purge in the query string.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // documentation: read by `purge`
struct PurgeParams {
    /// Must be `true` unless the body says `"confirm": true`.
    confirm: Option<bool>,
    /// Comma-separated job states, not `active` (default: every other state).
    states: Option<String>,
    /// RFC 3339 timestamp with a zone: only jobs created before it.
    older_than: Option<String>,
}

/// The options of a purge in the body (each wins over the query string's).
#[derive(ToSchema)]
#[schema(as = QueuePurgeRequest)]
#[allow(dead_code)] // a schema
struct PurgeRequest {
    /// Must be `true` (here or in the query string).
    confirm: Option<bool>,
    /// Job states, not `active` (default: every other state).
    #[schema(min_items = 1)]
    states: Option<Vec<String>>,
    /// RFC 3339 timestamp with a zone: only jobs created before it.
    older_than: Option<String>,
}

/// What a purge deleted.
#[derive(Serialize, ToSchema)]
#[schema(as = QueuePurged)]
struct Purged {
    /// Jobs deleted.
    purged_count: i64,
    /// The states purged.
    states: Vec<&'static str>,
}

/// `DELETE /ojs/v1/admin/queues/{name}/jobs`: deletes the queue's jobs in `states` (all but
/// `active`; every such state when absent) created before `older_than`, for good. Options in
/// the body or the query string, the body winning; `confirm: true` required.
#[utoipa::path(
    delete,
    path = "/ojs/v1/admin/queues/{name}/jobs",
    tag = "admin",
    operation_id = "admin_purge_queue",
    summary = "Delete a queue's jobs",
    description = "Deletes, for good, the queue's jobs in `states` (never `active`; every other \
                   state when absent) created before `older_than`. The options come in the body \
                   or the query string, the body winning; `confirm: true` is required.",
    params(QueueNameParam, PurgeParams),
    request_body(content = Option<PurgeRequest>, description = "The options; may be omitted (then the query string gives them)."),
    responses(
        (status = 200, body = Purged),
        (status = 400, description = "Not confirmed, or an option is invalid."),
        (status = 404, description = "No such queue."),
    )
)]
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
    Ok(ok(Purged {
        purged_count: purged,
        states: states.iter().map(|s| s.as_str()).collect(),
    })
    .into_response())
}

/// `POST /ojs/v1/admin/queues/{name}/pause`: [`pause`].
#[utoipa::path(
    post,
    path = "/ojs/v1/admin/queues/{name}/pause",
    tag = "admin",
    summary = "Pause a queue",
    description = "The same as `POST /ojs/v1/queues/{name}/pause`.",
    params(QueueNameParam),
    responses(
        (status = 200, description = "Paused.", body = PauseResultDoc),
        (status = 400, description = "The queue name is invalid."),
    )
)]
async fn admin_pause(state: State<AppState>, name: Path<String>) -> Result<Response, ApiError> {
    pause(state, name).await
}

/// `POST /ojs/v1/admin/queues/{name}/resume`: [`resume`].
#[utoipa::path(
    post,
    path = "/ojs/v1/admin/queues/{name}/resume",
    tag = "admin",
    summary = "Resume a queue",
    description = "The same as `POST /ojs/v1/queues/{name}/resume`.",
    params(QueueNameParam),
    responses(
        (status = 200, description = "Resumed.", body = PauseResultDoc),
        (status = 400, description = "The queue name is invalid."),
    )
)]
async fn admin_resume(state: State<AppState>, name: Path<String>) -> Result<Response, ApiError> {
    resume(state, name).await
}
