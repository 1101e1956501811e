//! `/ojs/v1/admin/queues` ([OJS admin queue management]): queues with their counts, recent
//! throughput and latency, and the purge of a queue's jobs; pause and resume under their admin
//! paths.
//!
//! [OJS admin queue management]: https://github.com/openjobspec/spec/blob/main/spec/ojs-admin-api.md#6-queue-management

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::lifecycle::{PauseResult, pause, resume};
use crate::broker::AdminQueue;
use crate::broker::{QueueState, StateCounts};
use crate::http::bulk::body_timestamp;
use crate::http::error::ApiError;
use crate::http::extract::QueuePath;
use crate::http::extract::{Fields, OptionalJsonBody};
use crate::http::openapi::values::{Confirm, Timestamp};
use crate::http::query::{ADMIN, Page, Pagination, QueryParams};
use crate::http::shapes::Throughput;
use crate::http::{AppState, ok};
use crate::job::JobState;
use crate::queue_config::WireConfig;
use crate::wire::timestamp;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(show))
        .routes(routes!(purge))
        .routes(routes!(admin_pause))
        .routes(routes!(admin_resume))
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
    state: QueueState,
    paused: bool,
    /// Jobs by state.
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
    params(Page),
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
    params(QueuePath),
    responses(
        (status = 200, description = "The queue as listed, with its configuration.", body = Shown<'_>),
        (status = 400, description = "The queue name is invalid."),
        (status = 404, description = "No such queue."),
    )
)]
async fn show(
    State(state): State<AppState>,
    QueuePath(name): QueuePath,
) -> Result<Response, ApiError> {
    let detail = state.broker().admin_queue(&name).await?;
    let mut configuration = detail.config.wire();
    configuration
        .backpressure
        .with_fill(&detail.config, detail.depth);
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
    /// The resolved configuration, its `backpressure` with the queue's fill now.
    configuration: WireConfig<'a>,
    /// When the job that has waited longest became available; absent while none waits.
    #[serde(skip_serializing_if = "Option::is_none")]
    oldest_available_at: Option<String>,
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

/// The options of a purge, in the body or the query string (each of the body's members wins).
#[derive(IntoParams, ToSchema)]
#[into_params(parameter_in = Query)]
#[schema(as = QueuePurgeRequest)]
struct QueuePurge {
    /// `true`: here, or in the query string when the body does not give it.
    #[param(value_type = Option<Confirm>)]
    #[schema(value_type = Confirm)]
    confirm: bool,
    /// Job states, not `active` (default: every other state); comma-separated in the query
    /// string.
    #[param(schema_with = purgeable_states)]
    #[schema(min_items = 1, value_type = Option<Vec<PurgeableState>>)]
    states: Vec<JobState>,
    /// Only jobs created before it.
    #[param(value_type = Option<Timestamp>)]
    #[schema(value_type = Option<Timestamp>)]
    older_than: Option<chrono::DateTime<chrono::Utc>>,
}

impl QueuePurge {
    /// The options of `body` and `query`.
    fn read(body: Option<&Fields<'_>>, query: &QueryParams) -> Result<QueuePurge, ApiError> {
        let confirm = match body {
            Some(f) if f.raw("confirm").is_some() => f.boolean("confirm")? == Some(true),
            _ => query.get("confirm") == Some("true"),
        };
        let states = match body.map(|f| f.strings("states")).transpose()? {
            Some(Some(names)) => purge_states(Some(names), "$.states")?,
            _ => purge_states(query.list("states"), "query.states")?,
        };
        let older_than = match body
            .map(|f| body_timestamp(f, "older_than", "$"))
            .transpose()?
        {
            Some(Some(t)) => Some(t),
            _ => query.timestamp("older_than")?,
        };
        Ok(QueuePurge {
            confirm,
            states,
            older_than,
        })
    }
}

/// A comma-separated list of the states a purge may name.
fn purgeable_states() -> utoipa::openapi::schema::Object {
    crate::http::openapi::values::job_states(
        &PURGEABLE,
        "Comma-separated job states, not `active` (default: every other state).",
    )
}

/// A state a purge may name: any but `active`.
struct PurgeableState;

impl utoipa::PartialSchema for PurgeableState {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .enum_values(Some(PURGEABLE.iter().map(|s| s.as_str())))
            .into()
    }
}

impl ToSchema for PurgeableState {}

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
    params(QueuePath, QueuePurge),
    request_body(content = Option<QueuePurge>, description = "The options; may be omitted (then the query string gives them)."),
    responses(
        (status = 200, body = Purged),
        (status = 400, description = "Not confirmed, or an option is invalid."),
        (status = 404, description = "No such queue."),
    )
)]
async fn purge(
    State(state): State<AppState>,
    QueuePath(name): QueuePath,
    query: QueryParams,
    OptionalJsonBody(body): OptionalJsonBody,
) -> Result<Response, ApiError> {
    let fields = body.as_ref().map(|b| b.object()).transpose()?;
    let QueuePurge {
        confirm,
        states,
        older_than,
    } = QueuePurge::read(fields.as_ref(), &query)?;
    if !confirm {
        return Err(ApiError::invalid_field(
            "$.confirm",
            "purging deletes jobs for good: send \"confirm\": true",
        ));
    }
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
    params(QueuePath),
    responses(
        (status = 200, description = "Paused.", body = PauseResult<'_>),
        (status = 400, description = "The queue name is invalid."),
    )
)]
async fn admin_pause(state: State<AppState>, name: QueuePath) -> Result<Response, ApiError> {
    pause(state, name).await
}

/// `POST /ojs/v1/admin/queues/{name}/resume`: [`resume`].
#[utoipa::path(
    post,
    path = "/ojs/v1/admin/queues/{name}/resume",
    tag = "admin",
    summary = "Resume a queue",
    description = "The same as `POST /ojs/v1/queues/{name}/resume`.",
    params(QueuePath),
    responses(
        (status = 200, description = "Resumed.", body = PauseResult<'_>),
        (status = 400, description = "The queue name is invalid."),
    )
)]
async fn admin_resume(state: State<AppState>, name: QueuePath) -> Result<Response, ApiError> {
    resume(state, name).await
}
