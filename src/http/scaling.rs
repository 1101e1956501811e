//! `GET /ojs/v1/scaling` and `GET /ojs/v1/scaling/{name}`: what to scale workers on, per queue,
//! for the whole cluster (read from the database, so any replica answers the same), in the
//! shape KEDA's `metrics-api` scaler reads: a number at a fixed JSON path. Readable with a
//! `worker` key (limited to the queues it scales, if it is) or an `admin` key.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::broker::{SCALING_WINDOW, ScalingRow};
use crate::http::auth::Caller;
use crate::http::error::ApiError;
use crate::http::extract::QueuePath;
use crate::http::{AppState, ok};
use crate::telemetry::utilization;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(all_queues))
        .routes(routes!(one_queue))
}

/// One queue's figures to scale its workers on.
#[derive(Debug, Serialize, ToSchema)]
struct QueueScaling {
    queue: String,
    /// Jobs ready to run now.
    available: i64,
    /// Jobs due later (scheduled, or waiting for a signal).
    scheduled: i64,
    /// Jobs waiting for their retry.
    retryable: i64,
    /// Jobs held until activated.
    pending: i64,
    /// Jobs running.
    active: i64,
    /// `available + active`: the jobs that need a worker now. Scale on this (with a target of
    /// jobs per worker replica): unlike `available` alone, it does not read 0 while workers
    /// pick every job up at once but are all busy.
    backlog: i64,
    /// Seconds the oldest available job has waited (0 when none waits): the queue's latency.
    oldest_available_age_seconds: f64,
    /// Jobs enqueued per second over the last `window_seconds`.
    enqueue_rate: f64,
    /// Jobs completed (ACKed) per second over the last `window_seconds`.
    completion_rate: f64,
    /// Running registered workers that name the queue.
    workers: i64,
    /// Their declared concurrency, summed (absent when none declared one).
    #[serde(skip_serializing_if = "Option::is_none")]
    worker_capacity: Option<i64>,
    /// Jobs (of any queue) those workers hold now.
    workers_busy: i64,
    /// `workers_busy / worker_capacity` (absent without a declared capacity).
    #[serde(skip_serializing_if = "Option::is_none")]
    utilization: Option<f64>,
}

impl From<ScalingRow> for QueueScaling {
    fn from(r: ScalingRow) -> QueueScaling {
        let per_second = |n: i64| {
            let rate = n as f64 / SCALING_WINDOW.as_secs_f64();
            (rate * 1000.0).round() / 1000.0
        };
        QueueScaling {
            backlog: r.available + r.active,
            oldest_available_age_seconds: (r.oldest_available_secs * 1000.0).round() / 1000.0,
            enqueue_rate: per_second(r.enqueued),
            completion_rate: per_second(r.completed),
            utilization: utilization(r.busy, r.capacity).map(|u| (u * 1000.0).round() / 1000.0),
            queue: r.queue,
            available: r.available,
            scheduled: r.scheduled,
            retryable: r.retryable,
            pending: r.pending,
            active: r.active,
            workers: r.workers,
            worker_capacity: r.capacity,
            workers_busy: r.busy,
        }
    }
}

/// Every queue's figures, by name.
#[derive(Debug, Serialize, ToSchema)]
struct Scaling {
    /// The window the rates are counted over, in seconds.
    window_seconds: u64,
    /// Each queue with unfinished jobs, throughput in the window or a running worker naming it,
    /// by name (a key limited to some queues sees only those).
    queues: BTreeMap<String, QueueScaling>,
}

/// `GET /ojs/v1/scaling`: every queue's scaling figures.
#[utoipa::path(
    get,
    path = "/ojs/v1/scaling",
    tag = "queues",
    operation_id = "scaling",
    summary = "What to scale workers on, per queue",
    description = "Per queue, for the whole cluster: jobs by waiting state and running, \
                   `backlog` (available + active), the oldest available job's age, enqueue and \
                   completion rates over the last 60 s, and the registered workers naming the \
                   queue with their utilization. For KEDA's `metrics-api` scaler \
                   (`valueLocation: queues.<name>.backlog`) or any autoscaler.",
    responses(
        (status = 200, body = Scaling),
        (status = 401, description = "No key, or an unknown one."),
        (status = 403, description = "The key's role may not read it, or the request acts as a tenant."),
    )
)]
async fn all_queues(State(state): State<AppState>, caller: Caller) -> Result<Response, ApiError> {
    let rows = state.broker().scaling(None).await?;
    let queues = rows
        .into_iter()
        .filter(|r| caller.check_queue(&r.queue).is_ok())
        .map(|r| (r.queue.clone(), QueueScaling::from(r)))
        .collect();
    Ok(ok(Scaling {
        window_seconds: SCALING_WINDOW.as_secs(),
        queues,
    })
    .into_response())
}

/// `GET /ojs/v1/scaling/{name}`: one queue's scaling figures, at the top of the answer.
#[utoipa::path(
    get,
    path = "/ojs/v1/scaling/{name}",
    tag = "queues",
    operation_id = "queue_scaling",
    summary = "What to scale one queue's workers on",
    description = "As `GET /ojs/v1/scaling`, for one queue, its figures at the top of the \
                   answer (`valueLocation: backlog`). Zeros for a queue that exists but has \
                   nothing.",
    params(QueuePath),
    responses(
        (status = 200, body = QueueScaling),
        (status = 400, description = "The queue name is invalid."),
        (status = 401, description = "No key, or an unknown one."),
        (status = 403, description = "The key may not use this queue, or the request acts as a tenant."),
        (status = 404, description = "No such queue."),
    )
)]
async fn one_queue(
    State(state): State<AppState>,
    QueuePath(name): QueuePath,
    caller: Caller,
) -> Result<Response, ApiError> {
    caller.check_queue(&name)?;
    let row = state
        .broker()
        .scaling(Some(&name))
        .await?
        .into_iter()
        .next()
        .unwrap_or_else(|| ScalingRow {
            queue: name,
            ..ScalingRow::default()
        });
    Ok(ok(QueueScaling::from(row)).into_response())
}
