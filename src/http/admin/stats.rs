//! `GET /ojs/v1/admin/stats` ([OJS aggregate statistics]): the whole server at a glance.
//!
//! [OJS aggregate statistics]: https://github.com/openjobspec/spec/blob/main/spec/ojs-admin-api.md#101-aggregate-statistics

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Serialize;

use super::super::error::ApiError;
use super::super::{AppState, ok};
use crate::broker::RECENT_WINDOW;
use crate::broker::StateCounts;

pub fn router() -> Router<AppState> {
    Router::new().route("/ojs/v1/admin/stats", get(stats))
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
