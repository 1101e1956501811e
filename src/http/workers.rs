//! `/ojs/v1/workers`: FETCH, ACK, NACK, heartbeats, registration and deregistration.

use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use serde::Serialize;
use serde_json::value::RawValue;
use uuid::Uuid;

use super::error::ApiError;
use super::extract::{Fields, JsonBody, WorkerIdPath};
use super::queues::check_queue_name;
use super::{AppState, Ojs, ok};
use crate::broker::{
    FetchRequest, HeartbeatParams, MAX_WEIGHT, NackRequest, Nacked, Strategy, Weights,
    WorkerRecord, WorkerReport,
};
use crate::duration;
use crate::job::failure::JobError;
use crate::job::wire::WireJob;
use crate::job::{JobId, JobState, is_valid_queue};
use crate::json::{self, Kind, Object};
use crate::scheduling::DEFAULT_WORKER_CONCURRENCY;
use crate::timestamp;
use crate::worker::{EffectiveState, WorkerDirective, WorkerState, required_state};

/// Largest ACK `result`, serialized.
const MAX_RESULT_BYTES: usize = 1024 * 1024;
/// Most queues one FETCH may name.
const MAX_FETCH_QUEUES: usize = 100;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ojs/v1/workers/fetch", post(fetch))
        .route("/ojs/v1/workers/ack", post(ack))
        .route("/ojs/v1/workers/nack", post(nack))
        .route("/ojs/v1/workers/ack/batch", post(ack_batch))
        .route("/ojs/v1/workers/nack/batch", post(nack_batch))
        .route("/ojs/v1/workers/heartbeat", post(heartbeat))
        .route("/ojs/v1/workers/beat", post(heartbeat))
        .route("/ojs/v1/workers/register", post(register))
        .route("/ojs/v1/workers/{worker_id}", delete(deregister))
        .route("/ojs/v1/workers/{worker_id}/health", get(worker_health))
}

/// `GET /ojs/v1/workers/{worker_id}/health`: 200 while the worker is running, 503 when it is
/// quiet, terminating, draining or stale (no heartbeat for the heartbeat timeout).
async fn worker_health(
    State(state): State<AppState>,
    WorkerIdPath(worker_id): WorkerIdPath,
) -> Result<Response, ApiError> {
    let worker = state.broker().worker(&worker_id).await?;

    #[derive(Serialize)]
    struct HealthBody {
        worker_id: String,
        state: EffectiveState,
        #[serde(skip_serializing_if = "Option::is_none")]
        last_heartbeat_at: Option<String>,
        last_seen_at: String,
        active_jobs: usize,
    }
    let running = worker.effective_state == EffectiveState::Running;
    let body = HealthBody {
        last_heartbeat_at: worker.last_heartbeat_at.map(timestamp::format),
        last_seen_at: timestamp::format(worker.last_seen_at),
        active_jobs: worker.active_job_ids.len(),
        state: worker.effective_state,
        worker_id: worker.id,
    };
    if running {
        return Ok(ok(body).into_response());
    }
    let mut response = Ojs(StatusCode::SERVICE_UNAVAILABLE, body).into_response();
    response.headers_mut().insert(
        axum::http::header::RETRY_AFTER,
        axum::http::HeaderValue::from(state.settings().heartbeat_interval_secs),
    );
    Ok(response)
}

/// A worker as the API shows it (see [OJS list workers]).
///
/// [OJS list workers]: https://github.com/openjobspec/spec/blob/main/spec/ojs-admin-api.md#91-list-workers
#[derive(Serialize)]
pub struct WireWorker<'a> {
    id: &'a str,
    worker_id: &'a str,
    state: EffectiveState,
    directive: WorkerDirective,
    reported_state: WorkerState,
    #[serde(skip_serializing_if = "Option::is_none")]
    hostname: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pid: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pool: Option<&'a str>,
    /// The worker's queues, else its pool's; `[]` when neither names any (always present: the
    /// admin UI reads it unguarded).
    queues: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    concurrency: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    labels: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    strategy: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    weights: Option<&'a RawValue>,
    active_jobs: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    active_job_ids: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    started_at: Option<String>,
    registered_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_heartbeat_at: Option<String>,
    last_seen_at: String,
    stale: bool,
}

impl<'a> WireWorker<'a> {
    /// The worker object; `with_job_ids` adds `active_job_ids`.
    pub fn new(w: &'a WorkerRecord, with_job_ids: bool) -> WireWorker<'a> {
        WireWorker {
            id: &w.id,
            worker_id: &w.id,
            state: w.effective_state,
            directive: w.directive,
            reported_state: w.state,
            hostname: w.hostname.as_deref(),
            pid: w.pid,
            pool: w.pool.as_deref(),
            queues: w.queues.as_deref().unwrap_or_default(),
            concurrency: w.concurrency,
            labels: w.labels.as_ref().map(|l| &*l.0),
            strategy: w.strategy.as_deref(),
            weights: w.weights.as_ref().map(|l| &*l.0),
            active_jobs: w.active_job_ids.len(),
            active_job_ids: with_job_ids.then(|| {
                w.active_job_ids
                    .iter()
                    .map(|id| JobId(*id).to_string())
                    .collect()
            }),
            started_at: w.started_at.map(timestamp::format),
            registered_at: timestamp::format(w.registered_at),
            last_heartbeat_at: w.last_heartbeat_at.map(timestamp::format),
            last_seen_at: timestamp::format(w.last_seen_at),
            stale: w.stale,
        }
    }
}

/// What a worker may say about itself in a heartbeat or registration.
struct ReportFields {
    hostname: Option<String>,
    pid: Option<i32>,
    queues: Option<Vec<String>>,
    concurrency: Option<i32>,
    labels: Option<String>,
    pool: Option<String>,
    started_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl ReportFields {
    fn parse(fields: &Fields<'_>) -> Result<ReportFields, ApiError> {
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
        let pid =
            match fields.integer("pid")? {
                Some(pid) => Some(i32::try_from(pid).map_err(|_| {
                    ApiError::invalid_field("$.pid", "'pid' must be a 32-bit integer")
                })?),
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
        let queues = fields.strings("queues")?;
        if let Some(queues) = &queues {
            for (i, name) in queues.iter().enumerate() {
                if !is_valid_queue(name) {
                    return Err(ApiError::invalid_field(
                        &format!("$.queues[{i}]"),
                        format!("queue name {name:?} is invalid"),
                    ));
                }
            }
        }
        let pool = fields.string("pool")?;
        if let Some(pool) = &pool
            && !is_valid_queue(pool)
        {
            return Err(ApiError::invalid_field(
                "$.pool",
                format!(
                    "pool name {pool:?} is invalid: use 1-128 lowercase letters, digits, '-' and '.'"
                ),
            ));
        }
        Ok(ReportFields {
            hostname: fields.string("hostname")?,
            pid,
            queues,
            concurrency,
            labels: fields.raw("labels").map(|r| r.get().to_owned()),
            pool,
            started_at,
        })
    }

    fn report<'a>(&'a self, worker_id: &'a str, state: WorkerState) -> WorkerReport<'a> {
        WorkerReport {
            worker_id,
            state,
            hostname: self.hostname.as_deref(),
            pid: self.pid,
            queues: self.queues.clone(),
            concurrency: self.concurrency,
            labels: self.labels.clone(),
            pool: self.pool.as_deref(),
            started_at: self.started_at,
            strategy: None,
            weights: None,
        }
    }
}

/// `POST /ojs/v1/workers/register` (body optionally wrapped as `{"worker": {...}}`): 201 for a
/// new worker id, 200 for a known one.
async fn register(State(state): State<AppState>, body: JsonBody) -> Result<Response, ApiError> {
    let outer = body.object()?;
    let fields = match outer.raw("worker") {
        Some(raw) => Fields::from_object(
            Object::from_raw(raw)
                .map_err(|_| ApiError::invalid_field("$.worker", "'worker' must be an object"))?,
        ),
        None => outer,
    };
    let worker_id = match fields.worker_id("worker_id")? {
        Some(id) => id,
        None => fields
            .worker_id("id")?
            .ok_or_else(|| ApiError::invalid_field("$.worker_id", "'worker_id' is required"))?,
    };
    let report_fields = ReportFields::parse(&fields)?;
    let strategy = match fields.string("strategy")?.as_deref() {
        None => None,
        Some(name) => Some(name.parse::<Strategy>().map_err(|_| {
            ApiError::invalid_field(
                "$.strategy",
                format!(
                    "'strategy' must be strict, round-robin, weighted or least-loaded, not {name:?}"
                ),
            )
        })?),
    };
    let weights = fields
        .raw("weights")
        .map(parse_weights)
        .transpose()?
        .map(|w| w.to_json());
    let mut report = report_fields.report(&worker_id, WorkerState::Running);
    report.concurrency = report.concurrency.or(Some(DEFAULT_WORKER_CONCURRENCY));
    report.strategy = strategy;
    report.weights = weights;
    let registered = state.broker().register(&report).await?;

    #[derive(Serialize)]
    struct RegisterBody<'a> {
        ok: bool,
        worker_id: &'a str,
        state: WorkerState,
        directive: WorkerDirective,
        server_time: String,
        heartbeat_interval: u32,
        heartbeat_timeout: u64,
        visibility_timeout_default: i64,
    }
    let body = RegisterBody {
        ok: true,
        worker_id: &worker_id,
        state: required_state(registered.directive, WorkerState::Running),
        directive: registered.directive,
        server_time: timestamp::format(registered.server_time),
        heartbeat_interval: state.settings().heartbeat_interval_secs,
        heartbeat_timeout: state.broker().settings().heartbeat_timeout.as_secs(),
        visibility_timeout_default: state.broker().settings().default_visibility_timeout_ms / 1_000,
    };
    let status = if registered.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(Ojs(status, body).into_response())
}

/// `DELETE /ojs/v1/workers/{worker_id}`: deregisters; jobs it still holds are released with
/// error `shutdown` (back to `available` while attempts remain).
async fn deregister(
    State(state): State<AppState>,
    WorkerIdPath(worker_id): WorkerIdPath,
) -> Result<Response, ApiError> {
    let released = state.broker().deregister(&worker_id).await?;

    #[derive(Serialize)]
    struct DeregisterBody {
        deregistered: bool,
        worker_id: String,
        jobs_requeued: usize,
    }
    Ok(ok(DeregisterBody {
        deregistered: true,
        worker_id,
        jobs_requeued: released,
    })
    .into_response())
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
    // A pool member may leave `queues` out: its pool's settings replace the request's (server
    // configuration wins, as OJS fair scheduling allows; see
    // https://github.com/openjobspec/spec/blob/main/spec/ojs-fair-scheduling.md#52-multi-queue-competing-consumers).
    // The broker refuses an empty list when no pool supplies queues.
    let names = fields.strings("queues")?.unwrap_or_default();
    if names.len() > MAX_FETCH_QUEUES || (names.is_empty() && fields.raw("queues").is_some()) {
        return Err(ApiError::invalid_field(
            "$.queues",
            format!("'queues' must name 1 to {MAX_FETCH_QUEUES} queues"),
        ));
    }
    let mut queues: Vec<String> = Vec::with_capacity(names.len());
    for (i, name) in names.into_iter().enumerate() {
        check_queue_name(&format!("$.queues[{i}]"), &name)?;
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
    let strategy = match fields.string("strategy")?.as_deref() {
        None => None,
        Some(name) => Some(
            name.parse()
                .map_err(|e: String| ApiError::invalid_field("$.strategy", e))?,
        ),
    };
    let weights = fields.raw("weights").map(parse_weights).transpose()?;
    Ok(FetchRequest {
        queues,
        count,
        worker_id: fields.worker_id("worker_id")?,
        visibility_timeout_ms: positive_ms(fields, "visibility_timeout_ms")?,
        wait,
        strategy,
        weights,
    })
}

/// A FETCH's `weights`: an object of queue name → integer weight 0..=MAX_WEIGHT.
fn parse_weights(raw: &RawValue) -> Result<Weights, ApiError> {
    let invalid = |path: &str, message: String| ApiError::invalid_field(path, message);
    let object = (Kind::of(raw) == Kind::Object)
        .then(|| Object::from_raw(raw).ok())
        .flatten()
        .ok_or_else(|| {
            invalid(
                "$.weights",
                "'weights' must be an object of queue name to weight".to_owned(),
            )
        })?;
    let mut weights = Weights::default();
    for (queue, value) in object.iter() {
        let path = format!("$.weights.{queue}");
        check_queue_name(&path, queue)?;
        let weight = json::as_integer(value)
            .and_then(|w| u32::try_from(w).ok())
            .filter(|w| *w <= MAX_WEIGHT)
            .ok_or_else(|| {
                invalid(
                    &path,
                    format!("the weight of {queue} must be an integer from 0 to {MAX_WEIGHT}"),
                )
            })?;
        weights.0.insert(queue.to_owned(), weight);
    }
    Ok(weights)
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
    let result = ack_result(&fields, "result")?;
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

/// The ACK `result` of `fields`, within its size limit.
fn ack_result<'a>(fields: &Fields<'a>, path: &str) -> Result<Option<&'a str>, ApiError> {
    let result = fields.raw("result").map(|r| r.get());
    if let Some(result) = result
        && result.len() > MAX_RESULT_BYTES
    {
        return Err(ApiError::too_large(
            Some(path),
            Some(result.len()),
            MAX_RESULT_BYTES,
        ));
    }
    Ok(result)
}

/// A NACK's `job_id`, `error` and `requeue` (`prefix` locates the NACK in the request).
fn nack_request(
    fields: &Fields<'_>,
    worker_id: Option<String>,
    prefix: &str,
) -> Result<NackRequest, ApiError> {
    let job_id = fields.job_id("job_id").map_err(|e| at(e, prefix))?;
    let requeue = fields
        .boolean("requeue")
        .map_err(|e| at(e, prefix))?
        .unwrap_or(false);
    let error = match fields.raw("error") {
        Some(raw) => Some(
            JobError::parse_report(raw, &format!("{prefix}.error")).map_err(|violations| {
                let first = &violations[0];
                ApiError::invalid_field(&first.path, first.message.clone())
            })?,
        ),
        None if requeue => None,
        None => {
            return Err(ApiError::invalid_field(
                &format!("{prefix}.error"),
                "'error' is required: {\"message\": ..., \"code\"?: ..., \"type\"?: ...}",
            ));
        }
    };
    Ok(NackRequest {
        job_id,
        worker_id,
        error,
        requeue,
    })
}

/// Moves a field error of a nested object under `prefix` (`$.x` → `$.nacks[3].x`).
fn at(mut error: ApiError, prefix: &str) -> ApiError {
    if prefix != "$" {
        error.message = format!("{prefix}: {}", error.message);
        if let Some(serde_json::Value::Object(details)) = error.details.as_mut()
            && let Some(serde_json::Value::String(field)) = details.get_mut("field")
            && let Some(rest) = field.strip_prefix('$')
        {
            *field = format!("{prefix}{rest}");
        }
    }
    error
}

/// `POST /ojs/v1/workers/nack`: records the failure; the retry policy decides what follows.
async fn nack(State(state): State<AppState>, body: JsonBody) -> Result<Response, ApiError> {
    let fields = body.object()?;
    let worker_id = fields.worker_id("worker_id")?;
    let request = nack_request(&fields, worker_id, "$")?;
    let nacked = state.broker().nack(request).await?;
    Ok(ok(NackBody::of(&nacked)).into_response())
}

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

impl NackBody<'_> {
    fn of(nacked: &Nacked) -> NackBody<'_> {
        let job = &nacked.job;
        let retrying = job.state == JobState::Retryable;
        let discarded = job.state == JobState::Discarded;
        let next = job
            .next_retry_at
            .filter(|_| retrying)
            .map(timestamp::format);
        NackBody {
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
        }
    }
}

/// The items of a batch request's array member `key` (1 to `max` objects).
fn batch_items<'a>(
    fields: &Fields<'a>,
    key: &str,
    max: usize,
) -> Result<Vec<Fields<'a>>, ApiError> {
    let raw = fields.raw(key).ok_or_else(|| {
        ApiError::invalid_field(&format!("$.{key}"), format!("'{key}' is required"))
    })?;
    let items: Vec<&'a RawValue> = serde_json::from_str(raw.get()).map_err(|_| {
        ApiError::invalid_field(
            &format!("$.{key}"),
            format!("'{key}' must be an array of objects"),
        )
    })?;
    if items.is_empty() || items.len() > max {
        return Err(ApiError::invalid_field(
            &format!("$.{key}"),
            format!("'{key}' must hold 1 to {max} items, got {}", items.len()),
        ));
    }
    items
        .into_iter()
        .enumerate()
        .map(|(i, raw)| {
            Object::from_raw(raw).map(Fields::from_object).map_err(|_| {
                ApiError::invalid_field(
                    &format!("$.{key}[{i}]"),
                    format!("{key}[{i}] must be an object"),
                )
            })
        })
        .collect()
}

/// A failed item of a batch ACK/NACK: its job id and the error it would have had alone.
#[derive(Serialize)]
struct ItemError {
    job_id: String,
    error: ItemErrorFields,
}

#[derive(Serialize)]
struct ItemErrorFields {
    code: &'static str,
    message: String,
    retryable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<serde_json::Value>,
}

impl ItemError {
    fn new(job_id: JobId, error: crate::error::Error) -> ItemError {
        let error = ApiError::from(error);
        ItemError {
            job_id: job_id.to_string(),
            error: ItemErrorFields {
                code: error.code,
                message: error.message.clone(),
                retryable: error.retryable,
                details: error.details.clone(),
            },
        }
    }
}

/// `POST /ojs/v1/workers/ack/batch` (ojsd extension `batch-ack`): completes many jobs in one
/// statement. `{"worker_id"?, "acks": [{"job_id", "result"?}, ...]}`; every item is answered
/// in `results`, in order, with what a single ACK would have answered (its error included), so
/// one stale job does not fail the others.
async fn ack_batch(State(state): State<AppState>, body: JsonBody) -> Result<Response, ApiError> {
    let fields = body.object()?;
    let worker_id = fields.worker_id("worker_id")?;
    let items = batch_items(&fields, "acks", state.settings().max_batch_jobs)?;
    let mut acks = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let prefix = format!("$.acks[{i}]");
        let id = item.job_id("job_id").map_err(|e| at(e, &prefix))?;
        let result = ack_result(item, &format!("acks[{i}].result"))?;
        acks.push((id, result));
    }
    let outcomes = state.broker().ack_many(worker_id.as_deref(), &acks).await?;

    #[derive(Serialize)]
    #[serde(untagged)]
    enum Item {
        Done {
            job_id: String,
            acknowledged: bool,
            state: JobState,
            completed_at: Option<String>,
        },
        Failed(ItemError),
    }
    let (mut succeeded, mut failed) = (0, 0);
    let results: Vec<Item> = acks
        .iter()
        .zip(outcomes)
        .map(|((id, _), outcome)| match outcome {
            Ok(job) => {
                succeeded += 1;
                Item::Done {
                    job_id: job.id.to_string(),
                    acknowledged: true,
                    state: job.state,
                    completed_at: job.completed_at.map(timestamp::format),
                }
            }
            Err(e) => {
                failed += 1;
                Item::Failed(ItemError::new(*id, e))
            }
        })
        .collect();
    Ok(ok(serde_json::json!({
        "results": results,
        "acknowledged": succeeded,
        "failed": failed,
    }))
    .into_response())
}

/// `POST /ojs/v1/workers/nack/batch` (ojsd extension `batch-ack`): fails many attempts with one
/// read and one write. `{"worker_id"?, "nacks": [{"job_id", "error"?, "requeue"?}, ...]}`;
/// every item is answered in `results`, in order, with what a single NACK would have answered.
async fn nack_batch(State(state): State<AppState>, body: JsonBody) -> Result<Response, ApiError> {
    let fields = body.object()?;
    let worker_id = fields.worker_id("worker_id")?;
    let items = batch_items(&fields, "nacks", state.settings().max_batch_jobs)?;
    let requests = items
        .iter()
        .enumerate()
        .map(|(i, item)| nack_request(item, worker_id.clone(), &format!("$.nacks[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    let ids: Vec<JobId> = requests.iter().map(|r| r.job_id).collect();
    let outcomes = state.broker().nack_many(requests).await?;

    let outcomes: Vec<Result<Nacked, ItemError>> = ids
        .into_iter()
        .zip(outcomes)
        .map(|(id, outcome)| outcome.map_err(|e| ItemError::new(id, e)))
        .collect();

    #[derive(Serialize)]
    #[serde(untagged)]
    enum Item<'a> {
        Done(NackBody<'a>),
        Failed(&'a ItemError),
    }
    let results: Vec<Item<'_>> = outcomes
        .iter()
        .map(|outcome| match outcome {
            Ok(nacked) => Item::Done(NackBody::of(nacked)),
            Err(e) => Item::Failed(e),
        })
        .collect();
    let failed = outcomes.iter().filter(|o| o.is_err()).count();
    Ok(ok(serde_json::json!({
        "results": results,
        "nacked": outcomes.len() - failed,
        "failed": failed,
    }))
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
    let mut reported_state = match fields.string("state")?.as_deref() {
        None => WorkerState::Running,
        Some(name) => name.parse::<WorkerState>().map_err(|_| {
            ApiError::invalid_field(
                "$.state",
                format!("'state' must be running, quiet, terminate or drain, not {name:?}"),
            )
        })?,
    };
    if fields.boolean("shutdown")? == Some(true) {
        reported_state = WorkerState::Drain;
    }
    let (job_ids, single) = reported_jobs(&fields)?;
    let single_only = single.is_some() && job_ids.len() == 1;
    let report_fields = ReportFields::parse(&fields)?;
    let params = HeartbeatParams {
        report: report_fields.report(&worker_id, reported_state),
        job_ids,
        visibility_timeout_ms: positive_ms(&fields, "visibility_timeout_ms")?,
        directives_from_jobs: state.broker().settings().test_hooks,
    };
    let outcome = state.broker().heartbeat(&params).await?;
    if let Some(id) = single
        && single_only
        && outcome.extended.is_empty()
    {
        return Err(state.broker().reservation_lost(id, &worker_id).await.into());
    }
    let required = required_state(outcome.directive, reported_state);
    let ids = |v: &[Uuid]| -> Vec<String> { v.iter().map(|id| JobId(*id).to_string()).collect() };

    #[derive(Serialize)]
    struct HeartbeatBody {
        state: WorkerState,
        directive: WorkerDirective,
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
        directive: outcome.directive,
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
