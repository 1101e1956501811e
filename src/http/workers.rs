//! `/ojs/v1/workers`: FETCH, ACK, NACK and heartbeats.

use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Serialize;
use uuid::Uuid;

use super::error::ApiError;
use super::extract::{Fields, JsonBody};
use super::{AppState, ok};
use crate::broker::{FetchRequest, NackRequest};
use crate::duration;
use crate::job::failure::JobError;
use crate::job::wire::WireJob;
use crate::job::{JobId, JobState, is_valid_queue};
use crate::json::{self, Kind};
use crate::store::worker::HeartbeatParams;
use crate::timestamp;

/// Largest ACK `result`, serialized.
const MAX_RESULT_BYTES: usize = 1024 * 1024;
/// Most queues one FETCH may name.
const MAX_FETCH_QUEUES: usize = 100;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ojs/v1/workers/fetch", post(fetch))
        .route("/ojs/v1/workers/ack", post(ack))
        .route("/ojs/v1/workers/nack", post(nack))
        .route("/ojs/v1/workers/heartbeat", post(heartbeat))
        .route("/ojs/v1/workers/beat", post(heartbeat))
        .route("/ojs/v1/workers/{worker_id}/health", get(worker_health))
}

/// `GET /ojs/v1/workers/{worker_id}/health`: 200 while the worker is running, 503 when it is
/// quiet, terminating, draining or stale (no heartbeat for three intervals).
async fn worker_health(
    State(state): State<AppState>,
    Path(worker_id): Path<String>,
) -> Result<Response, ApiError> {
    let stale_after = Duration::from_secs(u64::from(state.settings().heartbeat_interval_secs) * 3);
    let health = state
        .broker()
        .worker_health(&worker_id, stale_after)
        .await?
        .ok_or_else(|| ApiError::not_found("worker", &worker_id))?;
    let effective = if health.stale {
        "stale"
    } else {
        match (health.directive.as_str(), health.state.as_str()) {
            ("terminate", _) | (_, "terminate") => "terminate",
            (_, "drain") => "drain",
            ("quiet", _) | (_, "quiet") => "quiet",
            _ => "running",
        }
    };

    #[derive(Serialize)]
    struct HealthBody {
        worker_id: String,
        state: &'static str,
        last_heartbeat_at: String,
        active_jobs: i64,
    }
    let body = HealthBody {
        worker_id,
        state: effective,
        last_heartbeat_at: timestamp::format(health.last_heartbeat_at),
        active_jobs: health.active_jobs,
    };
    if effective == "running" {
        return Ok(ok(body).into_response());
    }
    let mut response =
        super::Ojs(axum::http::StatusCode::SERVICE_UNAVAILABLE, body).into_response();
    response.headers_mut().insert(
        axum::http::header::RETRY_AFTER,
        axum::http::HeaderValue::from(state.settings().heartbeat_interval_secs),
    );
    Ok(response)
}

fn positive_ms(fields: &Fields<'_>, key: &str) -> Result<Option<i64>, ApiError> {
    match fields.integer(key)? {
        Some(ms) if ms <= 0 || ms > duration::MAX_MS as i64 => Err(ApiError::invalid_field(
            &format!("$.{key}"),
            format!("'{key}' must be a positive number of milliseconds"),
        )),
        other => Ok(other),
    }
}

fn parse_fetch(state: &AppState, fields: &Fields<'_>) -> Result<FetchRequest, ApiError> {
    let settings = state.settings();
    let names = fields.strings("queues")?.ok_or_else(|| {
        ApiError::invalid_field(
            "$.queues",
            "'queues' is required: the queues to fetch from, in order of preference",
        )
    })?;
    if names.is_empty() || names.len() > MAX_FETCH_QUEUES {
        return Err(ApiError::invalid_field(
            "$.queues",
            format!("'queues' must name 1 to {MAX_FETCH_QUEUES} queues"),
        ));
    }
    let mut queues: Vec<String> = Vec::with_capacity(names.len());
    for (i, name) in names.into_iter().enumerate() {
        if !is_valid_queue(&name) {
            return Err(ApiError::invalid_field(
                &format!("$.queues[{i}]"),
                format!(
                    "queue name {name:?} is invalid: use 1-128 lowercase letters, digits, '-' and '.'"
                ),
            ));
        }
        if !queues.contains(&name) {
            queues.push(name);
        }
    }
    let max_count = settings.max_fetch_count;
    let count = match fields.integer("count")? {
        None => 1,
        Some(n) if n >= 1 && n <= max_count as i64 => n as usize,
        Some(_) => {
            return Err(ApiError::invalid_field(
                "$.count",
                format!("'count' must be an integer from 1 to {max_count}"),
            ));
        }
    };
    let wait = match fields.integer("wait_ms")? {
        None => Duration::ZERO,
        Some(ms) if ms < 0 => {
            return Err(ApiError::invalid_field(
                "$.wait_ms",
                "'wait_ms' must be >= 0",
            ));
        }
        Some(ms) => Duration::from_millis(ms as u64).min(settings.max_wait),
    };
    match fields.string("strategy")?.as_deref() {
        None | Some("strict") => {}
        Some(s @ ("round-robin" | "weighted" | "least-loaded")) => {
            return Err(ApiError::unsupported(format!(
                "Fetch strategy '{s}' is not supported yet; use 'strict' (queues in the order given)."
            )));
        }
        Some(other) => {
            return Err(ApiError::invalid_field(
                "$.strategy",
                format!(
                    "'strategy' must be strict, round-robin, weighted or least-loaded, not {other:?}"
                ),
            ));
        }
    }
    if let Some(raw) = fields.raw("weights")
        && Kind::of(raw) != Kind::Object
    {
        return Err(ApiError::invalid_field(
            "$.weights",
            "'weights' must be an object",
        ));
    }
    Ok(FetchRequest {
        queues,
        count,
        worker_id: fields.worker_id("worker_id")?,
        visibility_timeout_ms: positive_ms(fields, "visibility_timeout_ms")?,
        wait,
    })
}

/// `POST /ojs/v1/workers/fetch`: `{"jobs": [...], "job": <first>}`; `{"jobs": []}` when idle.
async fn fetch(State(state): State<AppState>, body: JsonBody) -> Result<Response, ApiError> {
    let fields = body.object()?;
    let request = parse_fetch(&state, &fields)?;
    let jobs = state.broker().fetch(&request, state.shutdown()).await?;

    #[derive(Serialize)]
    struct FetchBody<'a> {
        jobs: Vec<WireJob<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        job: Option<WireJob<'a>>,
    }
    Ok(ok(FetchBody {
        job: jobs.first().map(|j| j.wire()),
        jobs: jobs.iter().map(|j| j.wire()).collect(),
    })
    .into_response())
}

/// `POST /ojs/v1/workers/ack`: active → completed.
async fn ack(State(state): State<AppState>, body: JsonBody) -> Result<Response, ApiError> {
    let fields = body.object()?;
    let job_id = fields.job_id("job_id")?;
    let worker_id = fields.worker_id("worker_id")?;
    let result = fields.raw("result").map(|r| r.get());
    if let Some(result) = result
        && result.len() > MAX_RESULT_BYTES
    {
        return Err(ApiError::too_large(
            Some("result"),
            Some(result.len()),
            MAX_RESULT_BYTES,
        ));
    }
    let job = state
        .broker()
        .ack(job_id, worker_id.as_deref(), result)
        .await?;

    #[derive(Serialize)]
    struct AckBody<'a> {
        acknowledged: bool,
        id: String,
        job_id: String,
        state: JobState,
        completed_at: Option<String>,
        job: WireJob<'a>,
    }
    Ok(ok(AckBody {
        acknowledged: true,
        id: job.id.to_string(),
        job_id: job.id.to_string(),
        state: job.state,
        completed_at: job.completed_at.map(timestamp::format),
        job: job.wire(),
    })
    .into_response())
}

/// `POST /ojs/v1/workers/nack`: records the failure; the retry policy decides what follows.
async fn nack(State(state): State<AppState>, body: JsonBody) -> Result<Response, ApiError> {
    let fields = body.object()?;
    let job_id = fields.job_id("job_id")?;
    let worker_id = fields.worker_id("worker_id")?;
    let requeue = fields.boolean("requeue")?.unwrap_or(false);
    let error = match fields.raw("error") {
        Some(raw) => Some(
            JobError::parse_report(raw, "$.error").map_err(|violations| {
                let first = &violations[0];
                ApiError::invalid_field(&first.path, first.message.clone())
            })?,
        ),
        None if requeue => None,
        None => {
            return Err(ApiError::invalid_field(
                "$.error",
                "'error' is required: {\"message\": ..., \"code\"?: ..., \"type\"?: ...}",
            ));
        }
    };
    let nacked = state
        .broker()
        .nack(NackRequest {
            job_id,
            worker_id,
            error,
            requeue,
        })
        .await?;
    let job = &nacked.job;

    #[derive(Serialize)]
    struct NackBody<'a> {
        id: String,
        job_id: String,
        state: JobState,
        attempt: i32,
        max_attempts: i32,
        #[serde(skip_serializing_if = "Option::is_none")]
        next_attempt_at: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        next_retry_at: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        retry_delay_ms: Option<i64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        discarded_at: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        completed_at: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        dead_lettered: Option<bool>,
        job: WireJob<'a>,
    }
    let retrying = job.state == JobState::Retryable;
    let discarded = job.state == JobState::Discarded;
    let next = job
        .next_retry_at
        .filter(|_| retrying)
        .map(timestamp::format);
    Ok(ok(NackBody {
        id: job.id.to_string(),
        job_id: job.id.to_string(),
        state: job.state,
        attempt: job.attempt,
        max_attempts: job.max_attempts,
        next_attempt_at: next.clone(),
        next_retry_at: next,
        retry_delay_ms: job.retry_delay_ms.filter(|_| retrying),
        discarded_at: job
            .discarded_at
            .filter(|_| discarded)
            .map(timestamp::format),
        completed_at: job
            .completed_at
            .filter(|_| discarded)
            .map(timestamp::format),
        dead_lettered: discarded.then_some(nacked.dead_lettered),
        job: job.wire(),
    })
    .into_response())
}

/// Job ids from `active_jobs` (array of ids; an integer count is accepted and carries none),
/// `active_job_ids` and `job_id`.
fn reported_jobs(fields: &Fields<'_>) -> Result<(Vec<Uuid>, Option<JobId>), ApiError> {
    let mut ids = Vec::new();
    for key in ["active_jobs", "active_job_ids"] {
        let Some(raw) = fields.raw(key) else { continue };
        if key == "active_jobs" && Kind::of(raw) == Kind::Number {
            continue;
        }
        let list = json::decode::<Vec<String>>(raw).map_err(|_| {
            ApiError::invalid_field(
                &format!("$.{key}"),
                format!("'{key}' must be an array of job ids"),
            )
        })?;
        for (i, text) in list.iter().enumerate() {
            let id: JobId = text.parse().map_err(|_| {
                ApiError::invalid_field(
                    &format!("$.{key}[{i}]"),
                    format!("{key}[{i}] is not a job id: {text:?}"),
                )
            })?;
            ids.push(id.0);
        }
    }
    let single = match fields.raw("job_id") {
        None => None,
        Some(_) => Some(fields.job_id("job_id")?),
    };
    if let Some(id) = single {
        ids.push(id.0);
    }
    Ok((ids, single))
}

/// `POST /ojs/v1/workers/heartbeat` (and `/beat`): liveness, reservation extension, directives.
///
/// With `active_jobs`/`active_job_ids` the answer lists which jobs were extended, which were
/// cancelled and which the worker no longer holds. A heartbeat for a single `job_id` alone is
/// answered 409 when the worker no longer holds that job.
async fn heartbeat(State(state): State<AppState>, body: JsonBody) -> Result<Response, ApiError> {
    let fields = body.object()?;
    let worker_id = fields
        .worker_id("worker_id")?
        .ok_or_else(|| ApiError::invalid_field("$.worker_id", "'worker_id' is required"))?;
    let mut reported_state: &'static str = match fields.string("state")?.as_deref() {
        None | Some("running") => "running",
        Some("quiet") => "quiet",
        Some("terminate") => "terminate",
        Some("drain") => "drain",
        Some(other) => {
            return Err(ApiError::invalid_field(
                "$.state",
                format!("'state' must be running, quiet, terminate or drain, not {other:?}"),
            ));
        }
    };
    if fields.boolean("shutdown")? == Some(true) {
        reported_state = "drain";
    }
    let (job_ids, single) = reported_jobs(&fields)?;
    let single_only = single.is_some() && job_ids.len() == 1;
    let started_at = match fields.string("started_at")? {
        None => None,
        Some(text) => Some(
            timestamp::parse_client(&text)
                .ok()
                .and_then(|t| t.absolute())
                .ok_or_else(|| {
                    ApiError::invalid_field(
                        "$.started_at",
                        "'started_at' must be an RFC 3339 timestamp",
                    )
                })?,
        ),
    };
    let pid = match fields.integer("pid")? {
        Some(pid) => Some(
            i32::try_from(pid)
                .map_err(|_| ApiError::invalid_field("$.pid", "'pid' must be a 32-bit integer"))?,
        ),
        None => None,
    };
    let concurrency = match fields.integer("concurrency")? {
        Some(c) if !(0..=i64::from(i32::MAX)).contains(&c) => {
            return Err(ApiError::invalid_field(
                "$.concurrency",
                "'concurrency' must be >= 0",
            ));
        }
        other => other.map(|c| c as i32),
    };
    let hostname = fields.string("hostname")?;
    let pool = fields.string("pool")?;
    let params = HeartbeatParams {
        worker_id: &worker_id,
        state: reported_state,
        hostname: hostname.as_deref(),
        pid,
        queues: fields.strings("queues")?,
        concurrency,
        labels: fields.raw("labels").map(|r| r.get().to_owned()),
        pool: pool.as_deref(),
        started_at,
        job_ids,
        visibility_timeout_ms: positive_ms(&fields, "visibility_timeout_ms")?,
    };
    let outcome = state.broker().heartbeat(&params).await?;
    if let Some(id) = single
        && single_only
        && outcome.extended.is_empty()
    {
        return Err(state.broker().reservation_lost(id, &worker_id).await.into());
    }

    // The state the worker must be in: the more severe of the server's directive and its own.
    let rank = |s: &str| match s {
        "quiet" => 1,
        "terminate" | "drain" => 2,
        _ => 0,
    };
    let required = match rank(&outcome.directive).max(rank(reported_state)) {
        2 => "terminate",
        1 => "quiet",
        _ => "running",
    };
    let ids = |v: &[Uuid]| -> Vec<String> { v.iter().map(|id| JobId(*id).to_string()).collect() };

    #[derive(Serialize)]
    struct HeartbeatBody {
        state: &'static str,
        directive: String,
        acknowledged: bool,
        worker_id: String,
        jobs_extended: Vec<String>,
        jobs_cancelled: Vec<String>,
        jobs_lost: Vec<String>,
        server_time: String,
        heartbeat_interval: u32,
    }
    Ok(ok(HeartbeatBody {
        state: required,
        directive: outcome.directive.clone(),
        acknowledged: true,
        worker_id,
        jobs_extended: ids(&outcome.extended),
        jobs_cancelled: ids(&outcome.cancelled),
        jobs_lost: ids(&outcome.lost),
        server_time: timestamp::format(outcome.server_time),
        heartbeat_interval: state.settings().heartbeat_interval_secs,
    })
    .into_response())
}
