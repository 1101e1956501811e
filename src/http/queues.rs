//! `/ojs/v1/queues`: queues as resources — listing, explicit creation, pause and resume,
//! live statistics and priority statistics (see the [OJS queue endpoints] and the queue
//! configuration extension's [queue management endpoints]).
//!
//! [OJS queue endpoints]: https://github.com/openjobspec/spec/blob/main/spec/ojs-http-binding.md#11-queue-endpoints
//! [queue management endpoints]: https://github.com/openjobspec/spec/blob/main/spec/ojs-queue-config.md#91-queue-management-endpoints

use std::borrow::Cow;

use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use utoipa::openapi::schema::{AnyOfBuilder, Schema};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{IntoParams, PartialSchema, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::ApiError;
use super::extract::{JsonBody, OptionalJsonBody};
use super::openapi::DurationSchema;
use super::query::{DATA_PLANE, Page, PageParams, Pagination, QueryParams};
use super::{AppState, Ojs, ok};
use crate::broker::{DeleteStrategy, Queue, QueueConfigs, QueueStats};
use crate::broker::{QueueCounts, QueueState};
use crate::job::is_valid_queue;
use crate::queue_config::DEFAULT_QUEUE;
use crate::wire::timestamp;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(show, delete_queue))
        .routes(routes!(stats))
        .routes(routes!(pause))
        .routes(routes!(resume))
        .routes(routes!(admin_pause))
        .routes(routes!(admin_resume))
        .routes(routes!(priority_stats))
        .routes(routes!(show_config, put_config))
        .routes(routes!(admin_show_config, admin_put_config))
}

/// The queue name of a path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // documentation: read by `queue_path`
struct QueueNameParam {
    /// 1 to 128 lowercase letters, digits, `-` and `.`, starting with a letter or digit.
    #[param(pattern = r"^[a-z0-9][a-z0-9.-]{0,127}$", max_length = 128)]
    name: String,
}

/// The queue name of a configuration path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // documentation: read by `config_path`
struct ConfigQueueNameParam {
    /// A queue name, or `_default` for the configuration every queue inherits.
    #[param(pattern = r"^(_default|[a-z0-9][a-z0-9.-]{0,127})$", max_length = 128)]
    name: String,
}

/// The filter of `GET /ojs/v1/queues`.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // documentation: read by `list`
struct QueueListQuery {
    /// Only queues in this state.
    #[param(inline)]
    state: Option<QueueStateSchema>,
}

/// The query of `DELETE /ojs/v1/queues/{name}` (the body's members win).
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // documentation: read by `delete_queue`
struct QueueDeleteQuery {
    /// What to do with the queue's waiting jobs; required here or in the body.
    #[param(inline)]
    strategy: Option<DeleteStrategySchema>,
    /// With `move`: the queue that receives the jobs.
    target_queue: Option<String>,
}

/// A queue's lifecycle state.
#[derive(ToSchema, serde::Deserialize)]
#[schema(as = QueueState)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)] // documentation: the server writes `broker::QueueState`
enum QueueStateSchema {
    Active,
    Paused,
    Draining,
}

/// What a queue deletion does with the queue's waiting jobs.
#[derive(ToSchema, serde::Deserialize)]
#[schema(as = QueueDeleteStrategy)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)] // documentation: read by `delete_queue`
enum DeleteStrategySchema {
    /// Refuse when jobs remain.
    Reject,
    /// Discard them.
    Discard,
    /// Move them to `target_queue`.
    Move,
}

/// `POST /ojs/v1/queues`.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)] // documentation: read by `create`
struct QueueCreateRequest {
    /// 1 to 128 lowercase letters, digits, `-` and `.`, starting with a letter or digit.
    #[schema(pattern = r"^[a-z0-9][a-z0-9.-]{0,127}$", max_length = 128)]
    name: String,
    /// The queue's own configuration, as for `PUT /ojs/v1/queues/{name}/config`.
    #[schema(nullable = false)]
    config: Option<QueueConfigUpdate>,
}

/// A configuration `PUT` (or the `config` of a new queue): the fields to set; `null` resets a
/// field to the inherited value, and the members of `retention`, `default_retry` and
/// `rate_limit` merge one by one with those already set.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)] // documentation: read by `queue_config::apply_patch`
struct QueueConfigUpdate {
    /// Most jobs waiting in the queue.
    #[schema(minimum = 1)]
    max_size: Option<i64>,
    /// Most bytes of waiting job envelopes.
    #[schema(minimum = 1)]
    max_size_bytes: Option<i64>,
    /// What an enqueue past the bound does (`drop-oldest` is accepted for `drop_oldest`).
    #[schema(inline)]
    overflow_policy: Option<OverflowPolicyInput>,
    /// Fraction of the bound from which responses carry the pressure headers.
    #[schema(minimum = 0, maximum = 1)]
    warning_threshold: Option<f64>,
    /// Most jobs of the queue active at once.
    #[schema(minimum = 0)]
    concurrency: Option<i64>,
    /// `{"limit": N, "period": "PT1M"}` (`period` may also be `second`, `minute`, `hour` or
    /// `day`); also accepted as `{"rate": {"limit", "period"}}`, `{"rate": N, "period"}` or
    /// `{"max_per_second": N}`.
    #[schema(value_type = Option<Object>)]
    rate_limit: Option<serde_json::Value>,
    /// Integer seconds (at least 1) or an ISO 8601 duration of at least a second.
    visibility_timeout: Option<DurationSchema>,
    /// Integer seconds (at least 1) or an ISO 8601 duration of at least a second.
    default_timeout: Option<DurationSchema>,
    /// Retry policy fields jobs of the queue get when they set none of their own.
    #[schema(value_type = Option<Object>)]
    default_retry: Option<serde_json::Value>,
    /// How long terminal jobs are kept.
    retention: Option<QueueRetentionUpdate>,
    /// The queue that receives the queue's dead letters (not the queue itself).
    #[schema(pattern = r"^[a-z0-9][a-z0-9.-]{0,127}$", max_length = 128)]
    dead_letter_queue: Option<String>,
    #[schema(minimum = 1)]
    dead_letter_max_size: Option<i64>,
    /// ISO 8601 duration.
    dead_letter_ttl: Option<String>,
    /// Job type patterns the queue accepts (`*` matches any run of characters).
    #[schema(min_items = 1)]
    allowed_job_types: Option<Vec<String>>,
    /// Producer patterns the queue accepts (`OJS-Producer`; `*` accepts any).
    #[schema(min_items = 1)]
    producers: Option<Vec<String>>,
    /// Alias of `max_size` (`max_depth`, 0 meaning unlimited), `max_size_bytes`,
    /// `overflow_policy` (`strategy`) and `warning_threshold`; the plain fields win.
    #[schema(nullable = false)]
    backpressure: Option<QueueBackpressureUpdate>,
}

/// An overflow policy as a request may name it.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)]
enum OverflowPolicyInput {
    #[serde(rename = "reject")]
    Reject,
    #[serde(rename = "drop_oldest")]
    DropOldest,
    #[serde(rename = "drop-oldest")]
    DropOldestDash,
    #[serde(rename = "block")]
    Block,
}

/// Retention of terminal jobs: ISO 8601 durations, `null` to reset one.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)] // documentation
struct QueueRetentionUpdate {
    completed: Option<String>,
    discarded: Option<String>,
    cancelled: Option<String>,
}

/// The backpressure alias of a configuration update.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)] // documentation
struct QueueBackpressureUpdate {
    /// `max_size`; 0 means unlimited.
    #[schema(minimum = 0)]
    max_depth: Option<i64>,
    #[schema(minimum = 1)]
    max_size_bytes: Option<i64>,
    /// `overflow_policy`.
    #[schema(inline)]
    strategy: Option<OverflowPolicyInput>,
    #[schema(minimum = 0, maximum = 1)]
    warning_threshold: Option<f64>,
}

/// A queue's resolved configuration (its own values over `_default` over the system
/// defaults): every field, `null` for none or unlimited.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)] // documentation: the server writes `QueueConfig::to_json`
pub(super) struct ResolvedQueueConfig {
    #[schema(required = true)]
    max_size: Option<i64>,
    #[schema(required = true)]
    max_size_bytes: Option<i64>,
    #[schema(inline)]
    overflow_policy: OverflowPolicyName,
    warning_threshold: f64,
    #[schema(required = true)]
    concurrency: Option<i64>,
    #[schema(required = true)]
    rate_limit: Option<QueueRateLimit>,
    /// Seconds; `null`: the server's default.
    #[schema(required = true)]
    visibility_timeout: Option<i64>,
    /// Seconds; `null`: the server's default.
    #[schema(required = true)]
    default_timeout: Option<i64>,
    /// The effective default retry policy.
    default_retry: QueueDefaultRetry,
    retention: QueueRetention,
    #[schema(required = true)]
    dead_letter_queue: Option<String>,
    #[schema(required = true)]
    dead_letter_max_size: Option<i64>,
    /// ISO 8601 duration.
    dead_letter_ttl: String,
    allowed_job_types: Vec<String>,
    producers: Vec<String>,
    backpressure: QueueBackpressure,
}

/// An overflow policy as the server writes it.
#[derive(ToSchema, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
enum OverflowPolicyName {
    Reject,
    DropOldest,
    Block,
}

/// At most `limit` job starts in any window of `period`.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)] // documentation
struct QueueRateLimit {
    limit: i64,
    /// ISO 8601 duration.
    period: String,
}

/// A queue's effective default retry policy (durations ISO 8601), with any other members
/// `default_retry` set.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)] // documentation: the server writes `RetryPolicy::to_json`
struct QueueDefaultRetry {
    max_attempts: i32,
    initial_interval: String,
    backoff_coefficient: f64,
    max_interval: String,
    jitter: bool,
    non_retryable_errors: Vec<String>,
    /// `discard` or `dead_letter`.
    on_exhaustion: String,
    backoff_strategy: String,
}

/// How long terminal jobs are kept (ISO 8601 durations).
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)] // documentation
struct QueueRetention {
    completed: String,
    discarded: String,
    cancelled: String,
}

/// The backpressure fields again, under their alias names.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)] // documentation
struct QueueBackpressure {
    #[schema(required = true)]
    max_depth: Option<i64>,
    #[schema(required = true)]
    max_size_bytes: Option<i64>,
    #[schema(inline)]
    strategy: OverflowPolicyName,
    warning_threshold: f64,
}

/// The queue object ([OJS queue details]), with its resolved configuration.
///
/// [OJS queue details]: https://github.com/openjobspec/spec/blob/main/spec/ojs-queue-config.md#93-get-queue-details
#[derive(Serialize, ToSchema)]
#[schema(as = Queue)]
struct QueueBody<'a> {
    name: &'a str,
    #[schema(value_type = QueueStateSchema)]
    state: QueueState,
    /// `state` again, for binding clients.
    #[schema(value_type = QueueStateSchema)]
    status: QueueState,
    paused: bool,
    /// While paused, when it was paused.
    #[serde(skip_serializing_if = "Option::is_none")]
    paused_at: Option<String>,
    #[schema(value_type = ResolvedQueueConfig)]
    config: serde_json::Value,
    created_at: String,
    updated_at: String,
}

impl<'a> QueueBody<'a> {
    fn of(q: &'a Queue, configs: &QueueConfigs) -> QueueBody<'a> {
        let paused = q.state == QueueState::Paused;
        QueueBody {
            name: &q.name,
            state: q.state,
            status: q.state,
            paused,
            paused_at: paused
                .then_some(q.paused_at)
                .flatten()
                .map(timestamp::format),
            config: configs.of(&q.name).to_json(),
            created_at: timestamp::format(q.created_at),
            updated_at: timestamp::format(q.updated_at),
        }
    }
}

/// Current counts by state (the `counts` of a listed queue).
#[derive(Serialize, ToSchema)]
#[schema(as = QueueJobCounts)]
struct Counts {
    available: i64,
    active: i64,
    scheduled: i64,
    retryable: i64,
    pending: i64,
}

impl Counts {
    fn of(c: &QueueCounts) -> Counts {
        Counts {
            available: c.available,
            active: c.active,
            scheduled: c.scheduled,
            retryable: c.retryable,
            pending: c.pending,
        }
    }
}

/// A listed queue: the queue object with its current counts.
#[derive(Serialize, ToSchema)]
#[schema(as = ListedQueue)]
struct Listed<'a> {
    #[serde(flatten)]
    queue: QueueBody<'a>,
    counts: Counts,
}

/// A page of queues.
#[derive(Serialize, ToSchema)]
#[schema(as = QueueList)]
struct ListBody<'a> {
    queues: Vec<Listed<'a>>,
    pagination: Pagination,
}

/// `GET /ojs/v1/queues?state=&limit=&offset=`: queues by name, with their current counts.
#[utoipa::path(
    get,
    path = "/ojs/v1/queues",
    tag = "queues",
    summary = "List queues",
    params(QueueListQuery, PageParams),
    responses(
        (status = 200, description = "Queues by name.", body = ListBody<'_>),
        (status = 400, description = "A query parameter is invalid."),
    )
)]
async fn list(State(state): State<AppState>, query: QueryParams) -> Result<Response, ApiError> {
    let page = Page::from_query(&query, DATA_PLANE)?;
    let filter = match query.get("state") {
        None => None,
        Some("active") => Some(QueueState::Active),
        Some("paused") => Some(QueueState::Paused),
        Some("draining") => Some(QueueState::Draining),
        Some(other) => {
            return Err(ApiError::invalid_field(
                "query.state",
                format!("'state' must be active, paused or draining, not {other:?}"),
            ));
        }
    };
    let (queues, total) = state
        .broker()
        .queues(filter, page.limit, page.offset)
        .await?;
    let configs = state.broker().queue_configs().await?;
    Ok(ok(ListBody {
        queues: queues
            .iter()
            .map(|q| Listed {
                queue: QueueBody::of(&q.queue, &configs),
                counts: Counts::of(&q.counts),
            })
            .collect(),
        pagination: page.describe(total),
    })
    .into_response())
}

/// `POST /ojs/v1/queues` with `{"name", "config"?}`: 201 with the queue, 409 if it exists.
#[utoipa::path(
    post,
    path = "/ojs/v1/queues",
    tag = "queues",
    summary = "Create a queue",
    request_body = QueueCreateRequest,
    responses(
        (status = 201, description = "Created; `Location` names the queue.", body = QueueBody<'_>,
            headers(("Location" = String, description = "`/ojs/v1/queues/{name}`"))),
        (status = 400, description = "The name or the configuration is invalid."),
        (status = 409, description = "The queue exists."),
        (status = 422, description = "`config.default_retry` is not a valid retry policy."),
    )
)]
async fn create(State(state): State<AppState>, body: JsonBody) -> Result<Response, ApiError> {
    let fields = body.object()?;
    let name = fields.required_string("name")?;
    check_queue_name("$.name", &name)?;
    let config = match fields.raw("config") {
        None => None,
        Some(raw) => Some(
            serde_json::from_str::<serde_json::Value>(raw.get())
                .map_err(|_| ApiError::invalid_field("$.config", "'config' must be an object"))?,
        ),
    };
    let broker = state.broker();
    let queue = broker.create_queue(&name, config.as_ref()).await?;
    let configs = broker.queue_configs().await?;
    let mut response = Ojs(StatusCode::CREATED, QueueBody::of(&queue, &configs)).into_response();
    if let Ok(location) = HeaderValue::from_str(&format!("/ojs/v1/queues/{name}")) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// Current counts of a shown queue (`depth`: jobs not yet finished).
#[derive(Serialize, ToSchema)]
#[schema(as = QueueDetailStats)]
struct Stats {
    depth: i64,
    available: i64,
    active: i64,
    retryable: i64,
    scheduled: i64,
    pending: i64,
    completed_today: i64,
    failed_today: i64,
}

/// The queue object with its `stats`.
#[derive(Serialize, ToSchema)]
#[schema(as = QueueDetail)]
struct Shown<'a> {
    #[serde(flatten)]
    queue: QueueBody<'a>,
    stats: Stats,
}

/// `GET /ojs/v1/queues/{name}`: the queue with its `stats`.
#[utoipa::path(
    get,
    path = "/ojs/v1/queues/{name}",
    tag = "queues",
    summary = "Read a queue",
    params(QueueNameParam),
    responses(
        (status = 200, body = Shown<'_>),
        (status = 400, description = "The queue name is invalid."),
        (status = 404, description = "No such queue."),
    )
)]
async fn show(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    queue_path(&name)?;
    let QueueStats { queue, counts } = state.broker().queue_stats(&name).await?;
    let configs = state.broker().queue_configs().await?;
    Ok(ok(Shown {
        queue: QueueBody::of(&queue, &configs),
        stats: Stats {
            depth: counts.depth(),
            available: counts.available,
            active: counts.active,
            retryable: counts.retryable,
            scheduled: counts.scheduled,
            pending: counts.pending,
            completed_today: counts.completed_today,
            failed_today: counts.failed_today,
        },
    })
    .into_response())
}

/// `GET /ojs/v1/queues/{name}/stats` ([OJS queue statistics]): exact current counts of the
/// queue's retained jobs, and its last hour.
///
/// [OJS queue statistics]: https://github.com/openjobspec/spec/blob/main/spec/ojs-http-binding.md#112-queue-statistics
#[utoipa::path(
    get,
    path = "/ojs/v1/queues/{name}/stats",
    tag = "queues",
    summary = "Queue statistics",
    params(QueueNameParam),
    responses(
        (status = 200, body = QueueStatisticsDoc),
        (status = 400, description = "The queue name is invalid."),
        (status = 404, description = "No such queue."),
    )
)]
async fn stats(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    queue_path(&name)?;
    let QueueStats { queue, counts: c } = state.broker().queue_stats(&name).await?;
    let max_size = state.broker().queue_configs().await?.of(&name).max_size;
    let paused = queue.state == QueueState::Paused;
    let round = |ms: Option<f64>| ms.map(|v| v.round() as i64);
    Ok(ok(serde_json::json!({
        "queue": {
            "name": queue.name, "state": queue.state, "paused": paused, "depth": c.depth(),
            "available": c.available, "active": c.active, "scheduled": c.scheduled,
            "retryable": c.retryable, "pending": c.pending, "completed": c.completed,
            "discarded": c.discarded, "cancelled": c.cancelled, "dead_letter": c.dead_letter,
            "max_size": max_size,
        },
        "stats": {
            "queue": queue.name, "depth": c.depth(), "available": c.available,
            "active": c.active, "scheduled": c.scheduled, "retryable": c.retryable,
            "pending": c.pending, "completed": c.completed, "discarded": c.discarded,
            "cancelled": c.cancelled, "dead_letter": c.dead_letter, "max_depth": max_size,
            "completed_last_hour": c.completed_last_hour,
            "failed_last_hour": c.failed_last_hour,
            "avg_duration_ms": round(c.avg_duration_ms),
            "avg_wait_ms": round(c.avg_wait_ms),
            "throughput_per_second": c.completed_last_hour as f64 / 3600.0,
        },
        "status": queue.state,
        "computed_at": timestamp::format(Utc::now()),
    }))
    .into_response())
}

/// `GET /ojs/v1/queues/{name}/stats`: the counts twice (under `queue` and under `stats`, for
/// different clients), with the queue's state and when they were computed.
#[derive(ToSchema, serde::Deserialize)]
#[schema(as = QueueStatistics)]
#[allow(dead_code)] // documentation: `stats` writes this with `json!`
struct QueueStatisticsDoc {
    queue: QueueStatisticsCounts,
    stats: QueueStatisticsDetail,
    #[schema(inline)]
    status: QueueStateSchema,
    computed_at: String,
}

/// A queue's retained jobs by state, in both parts of its statistics.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)] // documentation
struct QueueStatisticsStates {
    /// Jobs not yet finished.
    depth: i64,
    available: i64,
    active: i64,
    scheduled: i64,
    retryable: i64,
    pending: i64,
    completed: i64,
    discarded: i64,
    cancelled: i64,
    dead_letter: i64,
}

/// The `queue` of a queue's statistics: current counts of its retained jobs.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)] // documentation
struct QueueStatisticsCounts {
    name: String,
    #[schema(inline)]
    state: QueueStateSchema,
    paused: bool,
    #[serde(flatten)]
    counts: QueueStatisticsStates,
    /// The queue's bound; `null`: unbounded.
    #[schema(required = true)]
    max_size: Option<i64>,
}

/// The `stats` of a queue's statistics: current counts and the last hour.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)] // documentation
struct QueueStatisticsDetail {
    /// The queue's name.
    queue: String,
    #[serde(flatten)]
    counts: QueueStatisticsStates,
    /// The queue's bound; `null`: unbounded.
    #[schema(required = true)]
    max_depth: Option<i64>,
    completed_last_hour: i64,
    failed_last_hour: i64,
    /// Mean execution time of the jobs completed in the last hour; `null` when none.
    #[schema(required = true)]
    avg_duration_ms: Option<i64>,
    /// Mean wait (available to started) of the jobs completed in the last hour.
    #[schema(required = true)]
    avg_wait_ms: Option<i64>,
    /// Jobs completed in the last hour, per second.
    throughput_per_second: f64,
}

/// The queue and its configuration: `{"config", "name"}`.
#[derive(Serialize, ToSchema)]
#[schema(as = NamedQueueConfig)]
struct ConfigBody<'a> {
    #[schema(value_type = ResolvedQueueConfig)]
    config: serde_json::Value,
    name: &'a str,
}

/// What a queue deletion did.
#[derive(Serialize, ToSchema)]
#[schema(as = QueueDeleted)]
struct Deleted<'a> {
    /// Jobs discarded or moved.
    jobs_affected: i64,
    queue: &'a str,
    /// `draining` while active jobs remain, then the queue goes.
    #[schema(value_type = DeletionState)]
    state: &'static str,
    #[schema(inline, value_type = DeleteStrategySchema)]
    strategy: &'static str,
    /// With `move`.
    #[serde(skip_serializing_if = "Option::is_none")]
    target_queue: Option<String>,
}

/// The state of a deleted queue.
#[derive(ToSchema, serde::Deserialize)]
#[schema(as = QueueDeletionState)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)] // documentation
enum DeletionState {
    Draining,
    Deleted,
}

/// The options of a queue deletion, in the body or the query string (the body winning).
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)] // documentation: read by `delete_queue`
struct QueueDeleteRequest {
    /// What to do with the queue's waiting jobs; required here or in the query.
    #[schema(inline, nullable = false)]
    strategy: Option<DeleteStrategySchema>,
    /// With `move`: the queue that receives the jobs (not the deleted one).
    #[schema(nullable = false)]
    target_queue: Option<String>,
}

/// `DELETE /ojs/v1/queues/{name}` with `strategy` (`reject`, `discard`, `move`) and, for
/// `move`, `target_queue`, in the body or the query ([OJS delete queue]): 202.
///
/// [OJS delete queue]: https://github.com/openjobspec/spec/blob/main/spec/ojs-queue-config.md#94-delete-queue
#[utoipa::path(
    delete,
    path = "/ojs/v1/queues/{name}",
    tag = "queues",
    summary = "Delete a queue",
    params(QueueNameParam, QueueDeleteQuery),
    request_body(
        content = Option<QueueDeleteRequest>,
        description = "The options; may be omitted when the query string gives them."
    ),
    responses(
        (status = 202, description = "Deleted, or draining until its active jobs end.", body = Deleted<'_>),
        (status = 400, description = "`strategy` or `target_queue` is missing or invalid."),
        (status = 404, description = "No such queue."),
        (status = 409, description = "Strategy `reject` and the queue still has jobs."),
    )
)]
async fn delete_queue(
    State(state): State<AppState>,
    Path(name): Path<String>,
    query: QueryParams,
    OptionalJsonBody(body): OptionalJsonBody,
) -> Result<Response, ApiError> {
    queue_path(&name)?;
    let fields = body.as_ref().map(|b| b.object()).transpose()?;
    let option = |key: &str| -> Result<Option<String>, ApiError> {
        match fields.as_ref().map(|f| f.string(key)).transpose()? {
            Some(Some(v)) => Ok(Some(v)),
            _ => Ok(query.get(key).map(str::to_owned)),
        }
    };
    let strategy = match option("strategy")?.as_deref() {
        Some("reject") => DeleteStrategy::Reject,
        Some("discard") => DeleteStrategy::Discard,
        Some("move") => {
            let target = option("target_queue")?.ok_or_else(|| {
                ApiError::invalid_field(
                    "$.target_queue",
                    "'target_queue' is required with strategy move",
                )
            })?;
            if !is_valid_queue(&target) || target == name {
                return Err(ApiError::invalid_field(
                    "$.target_queue",
                    format!("'target_queue' must be a valid queue name other than {name:?}"),
                ));
            }
            DeleteStrategy::Move(target)
        }
        other => {
            return Err(ApiError::invalid_field(
                "$.strategy",
                format!(
                    "'strategy' is required: reject, discard or move{}",
                    other.map(|o| format!(", not {o:?}")).unwrap_or_default()
                ),
            ));
        }
    };
    let deleted = state.broker().delete_queue(&name, &strategy).await?;
    // Members in the order `json!` wrote them (by name).
    let body = Deleted {
        jobs_affected: deleted.jobs_affected,
        queue: &name,
        state: if deleted.draining {
            "draining"
        } else {
            "deleted"
        },
        strategy: strategy.name(),
        target_queue: match &strategy {
            DeleteStrategy::Move(target) => Some(target.clone()),
            _ => None,
        },
    };
    Ok(Ojs(StatusCode::ACCEPTED, body).into_response())
}

/// The queue after a pause or resume.
#[derive(ToSchema, serde::Deserialize)]
#[schema(as = QueuePauseResult)]
#[allow(dead_code)] // documentation: `set_paused` writes this with `json!`
struct PauseResultDoc {
    name: String,
    paused: bool,
    /// After a pause: when the queue was paused.
    paused_at: Option<String>,
    /// After a resume: when the queue was resumed.
    resumed_at: Option<String>,
    queue: QueuePauseSummary,
    #[schema(inline)]
    state: QueueStateSchema,
}

/// The `queue` of a pause or resume.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)] // documentation
struct QueuePauseSummary {
    name: String,
    paused: bool,
    #[schema(inline)]
    state: QueueStateSchema,
}

/// `POST /ojs/v1/queues/{name}/pause`.
#[utoipa::path(
    post,
    path = "/ojs/v1/queues/{name}/pause",
    tag = "queues",
    summary = "Pause a queue",
    description = "Workers fetch nothing from a paused queue; enqueues still succeed. Creates \
                   an unknown queue; idempotent. A body, if any, is ignored.",
    params(QueueNameParam),
    responses(
        (status = 200, description = "Paused.", body = PauseResultDoc),
        (status = 400, description = "The queue name is invalid."),
    )
)]
async fn pause(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    set_paused(&state, &name, true).await
}

/// `POST /ojs/v1/queues/{name}/resume`.
#[utoipa::path(
    post,
    path = "/ojs/v1/queues/{name}/resume",
    tag = "queues",
    summary = "Resume a queue",
    description = "Creates an unknown queue; idempotent. A body, if any, is ignored.",
    params(QueueNameParam),
    responses(
        (status = 200, description = "Resumed.", body = PauseResultDoc),
        (status = 400, description = "The queue name is invalid."),
    )
)]
async fn resume(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    set_paused(&state, &name, false).await
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

/// Pause or resume ([OJS pause queue], [resume queue]): creates an unknown queue, idempotent.
///
/// [OJS pause queue]: https://github.com/openjobspec/spec/blob/main/spec/ojs-http-binding.md#113-pause-queue
/// [resume queue]: https://github.com/openjobspec/spec/blob/main/spec/ojs-http-binding.md#114-resume-queue
async fn set_paused(state: &AppState, name: &str, paused: bool) -> Result<Response, ApiError> {
    queue_path(name)?;
    let queue = state.broker().set_queue_paused(name, paused).await?;
    let (key, at) = if paused {
        ("paused_at", queue.paused_at)
    } else {
        ("resumed_at", queue.resumed_at)
    };
    let summary = serde_json::json!({
        "name": queue.name, "paused": paused, "state": queue.state,
    });
    let mut body = serde_json::json!({
        "queue": summary, "name": queue.name, "paused": paused, "state": queue.state,
    });
    body[key] = serde_json::json!(at.map(timestamp::format));
    Ok(ok(body).into_response())
}

/// A queue name of a configuration path: a queue, or `_default`.
fn config_path(name: &str) -> Result<(), ApiError> {
    if name == DEFAULT_QUEUE {
        Ok(())
    } else {
        queue_path(name)
    }
}

/// `GET /ojs/v1/queues/{name}/config` (and `_default`, and the admin alias): the resolved
/// configuration.
#[utoipa::path(
    get,
    path = "/ojs/v1/queues/{name}/config",
    tag = "queues",
    summary = "Read a queue's configuration",
    params(ConfigQueueNameParam),
    responses(
        (status = 200, description = "The resolved configuration.", body = ConfigBody<'_>),
        (status = 400, description = "The queue name is invalid."),
        (status = 404, description = "No such queue."),
    )
)]
async fn show_config(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    config_path(&name)?;
    let config = state.broker().queue_config(&name).await?;
    Ok(ok(ConfigBody {
        config: config.to_json(),
        name: &name,
    })
    .into_response())
}

/// The 200 body of a configuration `PUT`: the queue object, or for `_default` the
/// configuration with its name ([`ConfigBody`]). Both have `name` and `config`, so the
/// schema is an `anyOf` (a `oneOf` would match a queue object twice).
struct PutConfigResult;

impl PartialSchema for PutConfigResult {
    fn schema() -> RefOr<Schema> {
        AnyOfBuilder::new()
            .item(Ref::from_schema_name(QueueBody::name()))
            .item(Ref::from_schema_name(ConfigBody::name()))
            .description(Some(
                "The queue object; for `_default`, `{\"config\", \"name\"}`.",
            ))
            .into()
    }
}

impl ToSchema for PutConfigResult {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("QueueConfigPutResult")
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((QueueBody::name().into(), QueueBody::schema()));
        QueueBody::schemas(schemas);
        schemas.push((ConfigBody::name().into(), ConfigBody::schema()));
        ConfigBody::schemas(schemas);
    }
}

/// `PUT /ojs/v1/queues/{name}/config` (and `_default`, and the admin alias): merges the body
/// into the queue's own configuration (creating an unknown queue); 200 with the queue object.
#[utoipa::path(
    put,
    path = "/ojs/v1/queues/{name}/config",
    tag = "queues",
    summary = "Change a queue's configuration",
    params(ConfigQueueNameParam),
    request_body = QueueConfigUpdate,
    responses(
        (status = 200, description = "The queue object (for `_default`, its configuration).", body = PutConfigResult),
        (status = 400, description = "A field is unknown or invalid."),
        (status = 422, description = "`default_retry` is not a valid retry policy."),
    )
)]
async fn put_config(
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: JsonBody,
) -> Result<Response, ApiError> {
    config_path(&name)?;
    body.object()?;
    let value: serde_json::Value = serde_json::from_str(body.text())
        .map_err(|_| ApiError::invalid_field("$", "the body must be a JSON object"))?;
    let broker = state.broker();
    let config = broker.set_queue_config(&name, &value).await?;
    if name == DEFAULT_QUEUE {
        return Ok(ok(ConfigBody {
            config: config.to_json(),
            name: &name,
        })
        .into_response());
    }
    let queue = broker.queue(&name).await?;
    let configs = broker.queue_configs().await?;
    Ok(ok(QueueBody::of(&queue, &configs)).into_response())
}

/// `GET /ojs/v1/admin/queues/{name}/config`: [`show_config`].
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/queues/{name}/config",
    tag = "admin",
    summary = "Read a queue's configuration",
    description = "The same as `GET /ojs/v1/queues/{name}/config`.",
    params(ConfigQueueNameParam),
    responses(
        (status = 200, description = "The resolved configuration.", body = ConfigBody<'_>),
        (status = 400, description = "The queue name is invalid."),
        (status = 404, description = "No such queue."),
    )
)]
async fn admin_show_config(
    state: State<AppState>,
    name: Path<String>,
) -> Result<Response, ApiError> {
    show_config(state, name).await
}

/// `PUT /ojs/v1/admin/queues/{name}/config`: [`put_config`].
#[utoipa::path(
    put,
    path = "/ojs/v1/admin/queues/{name}/config",
    tag = "admin",
    summary = "Change a queue's configuration",
    description = "The same as `PUT /ojs/v1/queues/{name}/config`.",
    params(ConfigQueueNameParam),
    request_body = QueueConfigUpdate,
    responses(
        (status = 200, description = "The queue object (for `_default`, its configuration).", body = PutConfigResult),
        (status = 400, description = "A field is unknown or invalid."),
        (status = 422, description = "`default_retry` is not a valid retry policy."),
    )
)]
async fn admin_put_config(
    state: State<AppState>,
    name: Path<String>,
    body: JsonBody,
) -> Result<Response, ApiError> {
    put_config(state, name, body).await
}

/// A queue name found at `field` of a request, validated.
pub fn check_queue_name(field: &str, name: &str) -> Result<(), ApiError> {
    if is_valid_queue(name) {
        Ok(())
    } else {
        Err(ApiError::invalid_field(
            field,
            format!(
                "queue name {name:?} is invalid: use 1-128 lowercase letters, digits, '-' and '.'"
            ),
        ))
    }
}

/// The queue name of a path, validated.
pub fn queue_path(name: &str) -> Result<(), ApiError> {
    check_queue_name("path.name", name)
}

/// `GET /ojs/v1/queues/{name}/priority-stats` ([OJS priority statistics]): available jobs per
/// stored priority, most urgent first, only the priorities that have jobs: as the
/// `counts_by_priority` object of the priority extension and as the `distribution` list
/// (`{priority, count}`) the OJS admin UI reads.
///
/// [OJS priority statistics]: https://github.com/openjobspec/spec/blob/main/spec/ojs-priority.md#103-priority-statistics
#[utoipa::path(
    get,
    path = "/ojs/v1/queues/{name}/priority-stats",
    tag = "queues",
    summary = "Available jobs by priority",
    params(QueueNameParam),
    responses(
        (status = 200, body = PriorityStats),
        (status = 400, description = "The queue name is invalid."),
    )
)]
async fn priority_stats(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    queue_path(&name)?;
    let counts = state.broker().priority_stats(&name).await?;
    Ok(ok(PriorityStats {
        total: counts.iter().map(|(_, n)| n).sum(),
        distribution: counts
            .iter()
            .map(|&(priority, count)| Bucket { priority, count })
            .collect(),
        counts_by_priority: ByPriority(counts),
        queue: name,
    })
    .into_response())
}

/// Available jobs of one priority.
#[derive(Serialize, ToSchema)]
#[schema(as = PriorityBucket)]
struct Bucket {
    priority: i32,
    count: i64,
}

/// A queue's available jobs by priority, most urgent first.
#[derive(Serialize, ToSchema)]
#[schema(as = QueuePriorityStats)]
struct PriorityStats {
    queue: String,
    /// Job counts keyed by priority (`{"0": 3, "2": 10}`), only the priorities that have jobs.
    #[schema(value_type = std::collections::HashMap<String, i64>)]
    counts_by_priority: ByPriority,
    /// The same counts as a list.
    distribution: Vec<Bucket>,
    /// All available jobs.
    total: i64,
}

/// Counts keyed by priority, written as a JSON object in the order given (numeric order; a
/// sorted map of strings would put "10" before "2").
struct ByPriority(Vec<(i32, i64)>);

impl Serialize for ByPriority {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (priority, jobs) in &self.0 {
            map.serialize_entry(&priority.to_string(), jobs)?;
        }
        map.end()
    }
}
