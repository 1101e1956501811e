//! A queue's statistics: its counts by state and last hour, and its available jobs by priority.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::broker::QueueState;
use crate::broker::QueueStats;
use crate::http::error::ApiError;
use crate::http::extract::QueuePath;
use crate::http::tenancy::Tenant;
use crate::http::{AppState, ok};
use crate::wire::timestamp;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(stats))
        .routes(routes!(priority_stats))
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
    params(QueuePath),
    responses(
        (status = 200, body = QueueStatistics<'_>),
        (status = 400, description = "The queue name is invalid."),
        (status = 404, description = "No such queue."),
    )
)]
async fn stats(
    State(state): State<AppState>,
    QueuePath(name): QueuePath,
    tenant: Tenant,
) -> Result<Response, ApiError> {
    let QueueStats { queue, counts: c } = state.broker().queue_stats(&name, tenant.id()).await?;
    let max_size = state.broker().queue_configs().await?.of(&name).max_size;
    let paused = queue.state == QueueState::Paused;
    let round = |ms: Option<f64>| ms.map(|v| v.round() as i64);
    let counts = StateCounts {
        depth: c.depth(),
        available: c.available,
        active: c.active,
        scheduled: c.scheduled,
        retryable: c.retryable,
        pending: c.pending,
        completed: c.completed,
        discarded: c.discarded,
        cancelled: c.cancelled,
        dead_letter: c.dead_letter,
    };
    Ok(ok(QueueStatistics {
        queue: StatisticsQueue {
            name: &queue.name,
            state: queue.state,
            paused,
            counts,
            max_size,
        },
        stats: StatisticsDetail {
            queue: &queue.name,
            counts,
            max_depth: max_size,
            completed_last_hour: c.completed_last_hour,
            failed_last_hour: c.failed_last_hour,
            avg_duration_ms: round(c.avg_duration_ms),
            avg_wait_ms: round(c.avg_wait_ms),
            throughput_per_second: c.completed_last_hour as f64 / 3600.0,
        },
        status: queue.state,
        computed_at: timestamp::format(Utc::now()),
    })
    .into_response())
}

/// `GET /ojs/v1/queues/{name}/stats`: the counts twice (under `queue` and under `stats`, for
/// different clients), with the queue's state and when they were computed.
#[derive(Serialize, ToSchema)]
struct QueueStatistics<'a> {
    queue: StatisticsQueue<'a>,
    stats: StatisticsDetail<'a>,
    status: QueueState,
    computed_at: String,
}

/// A queue's retained jobs by state, in both parts of its statistics.
#[derive(Clone, Copy, Serialize, ToSchema)]
#[schema(as = QueueStatisticsStates)]
struct StateCounts {
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
#[derive(Serialize, ToSchema)]
#[schema(as = QueueStatisticsCounts)]
struct StatisticsQueue<'a> {
    name: &'a str,
    state: QueueState,
    paused: bool,
    #[serde(flatten)]
    counts: StateCounts,
    /// The queue's bound; `null`: unbounded.
    #[schema(required = true)]
    max_size: Option<i64>,
}

/// The `stats` of a queue's statistics: current counts and the last hour.
#[derive(Serialize, ToSchema)]
#[schema(as = QueueStatisticsDetail)]
struct StatisticsDetail<'a> {
    /// The queue's name.
    queue: &'a str,
    #[serde(flatten)]
    counts: StateCounts,
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
    params(QueuePath),
    responses(
        (status = 200, body = PriorityStats),
        (status = 400, description = "The queue name is invalid."),
    )
)]
async fn priority_stats(
    State(state): State<AppState>,
    QueuePath(name): QueuePath,
    tenant: Tenant,
) -> Result<Response, ApiError> {
    let counts = state.broker().priority_stats(&name, tenant.id()).await?;
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
