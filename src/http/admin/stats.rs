//! `GET /ojs/v1/admin/stats` ([OJS aggregate statistics]): the whole server at a glance; and
//! `GET /ojs/v1/admin/stats/history`: throughput over time, for the OJS admin UI's dashboard.
//!
//! [OJS aggregate statistics]: https://github.com/openjobspec/spec/blob/main/spec/ojs-admin-api.md#101-aggregate-statistics

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::broker::StateCounts;
use crate::broker::WorkflowCounts;
use crate::http::error::ApiError;
use crate::http::extract::check_queue_name;
use crate::http::query::QueryParams;
use crate::http::shapes::Throughput;
use crate::http::{AppState, ok};
use crate::job::id_schema::QueueName;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(stats))
        .routes(routes!(history))
}

/// Buckets a history answers at most.
const MAX_HISTORY_BUCKETS: i64 = 1_440;
/// Buckets a history covers when `since` is not given.
const DEFAULT_HISTORY_BUCKETS: i64 = 12;

/// `GET /ojs/v1/admin/stats/history?period=5m&since=&queue=`: jobs enqueued, `processed`
/// (completed) and `failed` (discarded, as in `/admin/stats`) per `period` (a duration, 1s to
/// 1d, default 5m), from `since` (default: the last 12 periods; at most 1,440 periods back)
/// to now, oldest first, every period present. Counted from the retained lifecycle events, so
/// the history reaches back as far as event retention does.
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/stats/history",
    tag = "admin",
    operation_id = "admin_stats_history",
    summary = "Throughput over time",
    description = "Jobs enqueued, `processed` (completed) and `failed` (discarded) per `period`, \
                   from `since` to now, oldest first, every period present. Counted from the \
                   retained lifecycle events.",
    params(
        ("period" = Option<String>, Query,
         pattern = "^([1-9][0-9]{0,3}s|[1-9][0-9]{0,2}m|([1-9]|1[0-9]|2[0-4])h|1d|PT[1-9][0-9]{0,3}S|PT[1-9][0-9]{0,2}M|PT([1-9]|1[0-9]|2[0-4])H|P1D)$",
         description = "The bucket size: a duration from 1s to 1d (`5m`, `1h`, `PT30S`...); default `5m`."),
        ("since" = Option<crate::http::openapi::values::Timestamp>, Query,
         description = "RFC 3339 timestamp with a zone: the first bucket (at most 1,440 periods back); default\nthe last 12 periods."),
        ("queue" = Option<QueueName>, Query, description = "Only this queue's jobs."),
    ),
    responses(
        (status = 200, body = History),
        (status = 400, description = "A parameter is invalid."),
    )
)]
async fn history(State(state): State<AppState>, query: QueryParams) -> Result<Response, ApiError> {
    let period_text = query.get("period").unwrap_or("5m").to_owned();
    let bucket_ms = crate::wire::duration::parse_ms(&period_text)
        .ok()
        .and_then(|ms| i64::try_from(ms).ok())
        .filter(|ms| (1_000..=86_400_000).contains(ms))
        .ok_or_else(|| {
            ApiError::invalid_field(
                "query.period",
                format!(
                    "'period' must be a duration from 1s to 1d, such as 5m; got {period_text:?}"
                ),
            )
        })?;
    let queue = query.get("queue");
    if let Some(queue) = queue {
        check_queue_name("query.queue", queue)?;
    }
    let now = chrono::Utc::now().timestamp_millis();
    let last = now.div_euclid(bucket_ms) * bucket_ms;
    let earliest = last - (MAX_HISTORY_BUCKETS - 1) * bucket_ms;
    let first = match query.timestamp("since")? {
        Some(since) => (since.timestamp_millis().div_euclid(bucket_ms) * bucket_ms).max(earliest),
        None => last - (DEFAULT_HISTORY_BUCKETS - 1) * bucket_ms,
    };
    let since = chrono::DateTime::from_timestamp_millis(first).unwrap_or_default();
    let counted = state.broker().history(since, bucket_ms, queue).await?;

    let mut counted = counted.into_iter().peekable();
    let mut data = Vec::new();
    let mut bucket = first;
    while bucket <= last {
        let (mut enqueued, mut processed, mut failed) = (0, 0, 0);
        // Events stamped a little ahead of this process's clock land in the last bucket.
        while let Some(&(at, e, c, d)) = counted.peek() {
            if at > bucket && bucket != last {
                break;
            }
            enqueued += e;
            processed += c;
            failed += d;
            counted.next();
        }
        data.push(Point {
            timestamp: crate::wire::timestamp::format(
                chrono::DateTime::from_timestamp_millis(bucket).unwrap_or_default(),
            ),
            processed,
            failed,
            enqueued,
        });
        bucket += bucket_ms;
    }

    Ok(ok(History {
        period: crate::wire::duration::format_iso(bucket_ms as u64),
        data,
    })
    .into_response())
}

/// One bucket of a history.
#[derive(Serialize, ToSchema)]
#[schema(as = StatsHistoryPoint)]
struct Point {
    /// The start of the bucket.
    timestamp: String,
    /// Jobs completed.
    processed: i64,
    /// Jobs discarded.
    failed: i64,
    /// Jobs enqueued.
    enqueued: i64,
}

/// Counts per period, oldest first.
#[derive(Serialize, ToSchema)]
#[schema(as = StatsHistory)]
struct History {
    /// The bucket size, as an ISO 8601 duration.
    period: String,
    data: Vec<Point>,
}

/// The whole server at a glance.
#[derive(Serialize, ToSchema)]
#[schema(as = AdminStats)]
struct Stats {
    /// Queues that exist.
    queues: i64,
    /// Workers that are not stale.
    workers: i64,
    jobs: StateCounts,
    /// The last five minutes.
    throughput: Throughput,
    /// Since this process started.
    uptime_seconds: u64,
    /// Workflows per state.
    workflows: WorkflowCounts,
}

/// `GET /ojs/v1/admin/stats`: queues, live workers, jobs by state, the throughput of the last
/// five minutes, and how long this process has been up.
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/stats",
    tag = "admin",
    operation_id = "admin_stats",
    summary = "Server statistics",
    responses((status = 200, body = Stats))
)]
async fn stats(State(state): State<AppState>) -> Result<Response, ApiError> {
    let overview = state.broker().overview().await?;
    let workflows = state.broker().workflow_counts().await?;
    Ok(ok(Stats {
        queues: overview.queues,
        workers: overview.workers,
        jobs: overview.jobs,
        throughput: Throughput::of(overview.completed_recently, overview.discarded_recently),
        uptime_seconds: state.uptime().as_secs(),
        workflows,
    })
    .into_response())
}
