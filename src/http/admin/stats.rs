//! `GET /ojs/v1/admin/stats` ([OJS aggregate statistics]): the whole server at a glance; and
//! `GET /ojs/v1/admin/stats/history`: throughput over time, for the OJS admin UI's dashboard.
//!
//! [OJS aggregate statistics]: https://github.com/openjobspec/spec/blob/main/spec/ojs-admin-api.md#101-aggregate-statistics

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Serialize;

use super::super::error::ApiError;
use super::super::query::QueryParams;
use super::super::queues::check_queue_name;
use super::super::{AppState, ok};
use crate::broker::RECENT_WINDOW;
use crate::broker::StateCounts;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ojs/v1/admin/stats", get(stats))
        .route("/ojs/v1/admin/stats/history", get(history))
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
async fn history(State(state): State<AppState>, query: QueryParams) -> Result<Response, ApiError> {
    let period_text = query.get("period").unwrap_or("5m").to_owned();
    let bucket_ms = crate::duration::parse_ms(&period_text)
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

    #[derive(Serialize)]
    struct Point {
        timestamp: String,
        processed: i64,
        failed: i64,
        enqueued: i64,
    }
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
            timestamp: crate::timestamp::format(
                chrono::DateTime::from_timestamp_millis(bucket).unwrap_or_default(),
            ),
            processed,
            failed,
            enqueued,
        });
        bucket += bucket_ms;
    }

    #[derive(Serialize)]
    struct Body {
        period: String,
        data: Vec<Point>,
    }
    Ok(ok(Body {
        period: crate::duration::format_iso(bucket_ms as u64),
        data,
    })
    .into_response())
}

/// Jobs finished per minute over the recent window.
#[derive(Serialize)]
pub(super) struct Throughput {
    /// Completed.
    processed_per_minute: f64,
    /// Discarded.
    failed_per_minute: f64,
}

impl Throughput {
    /// From the jobs completed and discarded within [`RECENT_WINDOW`].
    pub(super) fn of(completed: i64, discarded: i64) -> Throughput {
        let minutes = RECENT_WINDOW.as_secs_f64() / 60.0;
        Throughput {
            processed_per_minute: completed as f64 / minutes,
            failed_per_minute: discarded as f64 / minutes,
        }
    }
}

/// `GET /ojs/v1/admin/stats`: queues, live workers, jobs by state, the throughput of the last
/// five minutes, and how long this process has been up.
async fn stats(State(state): State<AppState>) -> Result<Response, ApiError> {
    let overview = state.broker().overview().await?;

    #[derive(Serialize)]
    struct Body {
        queues: i64,
        workers: i64,
        jobs: StateCounts,
        throughput: Throughput,
        uptime_seconds: u64,
    }
    Ok(ok(Body {
        queues: overview.queues,
        workers: overview.workers,
        jobs: overview.jobs,
        throughput: Throughput::of(overview.completed_recently, overview.discarded_recently),
        uptime_seconds: state.uptime().as_secs(),
    })
    .into_response())
}
