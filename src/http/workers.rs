//! `/ojs/v1/workers`: FETCH, ACK, NACK, heartbeats, registration and deregistration.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::value::RawValue;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::auth::Caller;
use super::error::ApiError;
use super::extract::{Fields, JsonBody, WorkerIdPath};
use super::queues::check_queue_name;
use super::{AppState, Ojs, ok, openapi};
use crate::broker::{
    FetchRequest, HeartbeatParams, MAX_WEIGHT, NackRequest, Nacked, Strategy, Weights,
    WorkerRecord, WorkerReport,
};
use crate::job::failure::JobError;
use crate::job::wire::WireJob;
use crate::job::{JobId, JobState, is_valid_queue};
use crate::scheduling::DEFAULT_WORKER_CONCURRENCY;
use crate::wire::duration;
use crate::wire::json::{self, Kind, Object};
use crate::wire::timestamp;
use crate::worker::{EffectiveState, WorkerDirective, WorkerState, required_state};

/// Largest ACK `result`, serialized.
const MAX_RESULT_BYTES: usize = 1024 * 1024;
/// Most queues one FETCH may name.
const MAX_FETCH_QUEUES: usize = 100;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(fetch))
        .routes(routes!(ack))
        .routes(routes!(nack))
        .routes(routes!(ack_batch))
        .routes(routes!(nack_batch))
        .routes(routes!(heartbeat))
        .routes(routes!(beat))
        .routes(routes!(register))
        .routes(routes!(deregister))
        .routes(routes!(worker_health))
}

/// The worker id of a path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // documentation: read by `WorkerIdPath`
struct WorkerIdParam {
    worker_id: String,
}

/// A FETCH.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)] // documentation: read by `parse_fetch`
struct FetchRequestSchema {
    /// Queues to take from (1–100); a pool member may leave them out to use its pool's.
    queues: Option<Vec<String>>,
    /// Most jobs to claim (1 to the server's limit); default 1.
    #[schema(minimum = 1)]
    count: Option<u32>,
    worker_id: Option<String>,
    /// How long the claim lasts before the job is offered again; default the job's.
    #[schema(minimum = 1)]
    visibility_timeout_ms: Option<i64>,
    /// Long poll: wait up to this long for a job when none is ready (capped by the server).
    #[schema(minimum = 0)]
    wait_ms: Option<i64>,
    /// `strict`, `round-robin`, `weighted` or `least-loaded`.
    strategy: Option<String>,
    /// Queue name to weight (0–1000), for `weighted`.
    #[schema(value_type = Option<std::collections::HashMap<String, u32>>)]
    weights: Option<serde_json::Value>,
}

/// An ACK.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)] // documentation: read by `ack`
struct AckRequest {
    job_id: String,
    /// When given, must be the worker holding the job.
    worker_id: Option<String>,
    /// What the job produced (at most 1 MiB).
    result: Option<serde_json::Value>,
}

/// A NACK.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)] // documentation: read by `nack_request`
struct NackRequestSchema {
    job_id: String,
    worker_id: Option<String>,
    /// Required unless `requeue` is true.
    error: Option<ErrorReport>,
    /// Put the job back without spending an attempt.
    requeue: Option<bool>,
}

/// A failed attempt's error as a worker reports it.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)] // documentation: read by `JobError::parse_report`
struct ErrorReport {
    message: String,
    code: Option<String>,
    r#type: Option<String>,
    retryable: Option<bool>,
    #[schema(value_type = Option<Object>)]
    details: Option<serde_json::Value>,
    backtrace: Option<Vec<String>>,
}

/// A batch ACK.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)] // documentation: read by `ack_batch`
struct AckBatchRequest {
    worker_id: Option<String>,
    #[schema(min_items = 1)]
    acks: Vec<AckBatchItem>,
}

#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)]
struct AckBatchItem {
    job_id: String,
    result: Option<serde_json::Value>,
}

/// A batch NACK.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)] // documentation: read by `nack_batch`
struct NackBatchRequest {
    worker_id: Option<String>,
    #[schema(min_items = 1)]
    nacks: Vec<NackBatchItem>,
}

#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)]
struct NackBatchItem {
    job_id: String,
    error: Option<ErrorReport>,
    requeue: Option<bool>,
}

/// What a worker may say about itself (registration and heartbeat).
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)] // documentation: read by `ReportFields::parse`
struct WorkerReportSchema {
    hostname: Option<String>,
    pid: Option<i32>,
    queues: Option<Vec<String>>,
    #[schema(minimum = 0)]
    concurrency: Option<i32>,
    labels: Option<Labels>,
    pool: Option<String>,
    /// RFC 3339.
    started_at: Option<String>,
}

/// A registration: the fields, or the same fields wrapped as `{"worker": {...}}`.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)] // documentation: read by `register`
struct RegisterRequest {
    worker: Option<RegisterFields>,
    #[serde(flatten)]
    fields: RegisterFields,
}

/// What a worker registers.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)] // documentation: read by `register`
struct RegisterFields {
    /// Required (or `id`).
    worker_id: Option<String>,
    id: Option<String>,
    /// `strict`, `round-robin`, `weighted` or `least-loaded`.
    strategy: Option<String>,
    #[schema(value_type = Option<std::collections::HashMap<String, u32>>)]
    weights: Option<serde_json::Value>,
    #[serde(flatten)]
    report: WorkerReportSchema,
}

/// A worker's labels: strings, or names to strings (at most 100, of at most 255 characters).
#[derive(ToSchema, serde::Deserialize)]
#[serde(untagged)]
#[allow(dead_code)]
enum Labels {
    List(Vec<String>),
    Map(std::collections::HashMap<String, String>),
}

/// A heartbeat's `active_jobs`: the held job ids, or a count (which names none).
#[derive(ToSchema, serde::Deserialize)]
#[serde(untagged)]
#[allow(dead_code)]
enum ActiveJobs {
    Ids(Vec<String>),
    Count(u32),
}

/// A heartbeat.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)] // documentation: read by `heartbeat`
struct HeartbeatRequest {
    worker_id: String,
    /// `running`, `quiet`, `terminate` or `drain`.
    state: Option<String>,
    /// True means `drain`.
    shutdown: Option<bool>,
    /// The job ids the worker holds (a number is accepted and names none).
    active_jobs: Option<ActiveJobs>,
    active_job_ids: Option<Vec<String>>,
    /// A single held job: 409 when the worker no longer holds it.
    job_id: Option<String>,
    /// Extend held jobs' claims by this much.
    #[schema(minimum = 1)]
    visibility_timeout_ms: Option<i64>,
    #[serde(flatten)]
    report: WorkerReportSchema,
}

/// `GET /ojs/v1/workers/{worker_id}/health`: 200 while the worker is running, 503 when it is
/// quiet, terminating, draining or stale (no heartbeat for the heartbeat timeout).
#[utoipa::path(
    get,
    path = "/ojs/v1/workers/{worker_id}/health",
    tag = "workers",
    summary = "A worker's liveness",
    params(WorkerIdParam),
    responses(
        (status = 200, description = "Running.", body = WorkerHealth),
        (status = 503, description = "Not running; the body says why.", body = WorkerHealth),
        (status = 404, description = "No such worker."),
    )
)]
async fn worker_health(
    State(state): State<AppState>,
    WorkerIdPath(worker_id): WorkerIdPath,
) -> Result<Response, ApiError> {
    let worker = state.broker().worker(&worker_id).await?;
    let running = worker.effective_state == EffectiveState::Running;
    let body = WorkerHealth {
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

/// `GET /ojs/v1/workers/{worker_id}/health`.
#[derive(Serialize, ToSchema)]
struct WorkerHealth {
    worker_id: String,
    /// `running`, `quiet`, `terminate`, `drain` or `stale`.
    #[schema(value_type = String)]
    state: EffectiveState,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_heartbeat_at: Option<String>,
    last_seen_at: String,
    active_jobs: usize,
}

/// A worker as the API shows it (see [OJS list workers]).
///
/// [OJS list workers]: https://github.com/openjobspec/spec/blob/main/spec/ojs-admin-api.md#91-list-workers
#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = Worker)]
pub struct WireWorker<'a> {
    id: &'a str,
    worker_id: &'a str,
    /// `running`, `quiet`, `terminate`, `drain`, or `stale` (no heartbeat for too long).
    #[schema(value_type = String)]
    state: EffectiveState,
    /// What the server asks of the worker: `quiet`, `terminate`, or `""` for nothing.
    #[schema(value_type = String)]
    directive: WorkerDirective,
    /// The state the worker last reported.
    #[schema(value_type = String)]
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
    /// As registered (any JSON).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<serde_json::Value>)]
    labels: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    strategy: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
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
            labels: fields.raw("labels").map(parse_labels).transpose()?,
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

/// Most labels a worker may carry.
const MAX_LABELS: usize = 100;
/// Longest label (or label value), in characters.
const MAX_LABEL_CHARS: usize = 255;

/// A worker's `labels`: an array of strings (`["v2.1", "gpu"]`) or an object of string values
/// (`{"zone": "eu-1"}`), at most [`MAX_LABELS`] of at most [`MAX_LABEL_CHARS`] characters.
fn parse_labels(raw: &RawValue) -> Result<String, ApiError> {
    let invalid = || {
        ApiError::invalid_field(
            "$.labels",
            format!(
                "'labels' must be an array of strings or an object of string values, at most {MAX_LABELS} of at most {MAX_LABEL_CHARS} characters"
            ),
        )
    };
    let values: Vec<String> = match Kind::of(raw) {
        Kind::Array => json::decode::<Vec<String>>(raw).map_err(|_| invalid())?,
        Kind::Object => json::decode::<std::collections::BTreeMap<String, String>>(raw)
            .map_err(|_| invalid())?
            .into_iter()
            .flat_map(|(k, v)| [k, v])
            .collect(),
        _ => return Err(invalid()),
    };
    if values.len() > 2 * MAX_LABELS
        || (Kind::of(raw) == Kind::Array && values.len() > MAX_LABELS)
        || values.iter().any(|v| v.chars().count() > MAX_LABEL_CHARS)
    {
        return Err(invalid());
    }
    Ok(raw.get().to_owned())
}

/// `POST /ojs/v1/workers/register` (body optionally wrapped as `{"worker": {...}}`): 201 for a
/// new worker id, 200 for a known one.
#[utoipa::path(
    post,
    path = "/ojs/v1/workers/register",
    tag = "workers",
    summary = "Register a worker",
    request_body = RegisterRequest,
    responses(
        (status = 201, description = "A new worker id.", body = Registered<'_>),
        (status = 200, description = "A known worker id, updated.", body = Registered<'_>),
        (status = 400, description = "A field is invalid."),
    )
)]
async fn register(
    State(state): State<AppState>,
    caller: Caller,
    body: JsonBody,
) -> Result<Response, ApiError> {
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
    for queue in report_fields.queues.iter().flatten() {
        caller.check_queue(queue)?;
    }
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
    let body = Registered {
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

/// The answer to a registration.
#[derive(Serialize, ToSchema)]
struct Registered<'a> {
    ok: bool,
    worker_id: &'a str,
    /// The state the worker must be in: `running`, `quiet`, `terminate` or `drain`.
    #[schema(value_type = String)]
    state: WorkerState,
    /// `quiet`, `terminate`, or `""`.
    #[schema(value_type = String)]
    directive: WorkerDirective,
    server_time: String,
    /// Seconds between heartbeats.
    heartbeat_interval: u32,
    /// Seconds without a heartbeat before the worker counts as stale.
    heartbeat_timeout: u64,
    /// Seconds a claim lasts by default.
    visibility_timeout_default: i64,
}

/// `DELETE /ojs/v1/workers/{worker_id}`: deregisters; jobs it still holds are released with
/// error `shutdown` (back to `available` while attempts remain).
#[utoipa::path(
    delete,
    path = "/ojs/v1/workers/{worker_id}",
    tag = "workers",
    summary = "Deregister a worker",
    params(WorkerIdParam),
    responses(
        (status = 200, body = Deregistered),
        (status = 404, description = "No such worker."),
    )
)]
async fn deregister(
    State(state): State<AppState>,
    WorkerIdPath(worker_id): WorkerIdPath,
) -> Result<Response, ApiError> {
    let released = state.broker().deregister(&worker_id).await?;
    Ok(ok(Deregistered {
        deregistered: true,
        worker_id,
        jobs_requeued: released,
    })
    .into_response())
}

/// The answer to a deregistration.
#[derive(Serialize, ToSchema)]
struct Deregistered {
    deregistered: bool,
    worker_id: String,
    /// Jobs the worker held, released.
    jobs_requeued: usize,
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
#[utoipa::path(
    post,
    path = "/ojs/v1/workers/fetch",
    tag = "workers",
    summary = "Claim jobs",
    request_body = FetchRequestSchema,
    responses(
        (status = 200, description = "The claimed jobs; `jobs` is empty when none was ready.", body = Fetched<'_>),
        (status = 400, description = "A field is invalid."),
    )
)]
async fn fetch(
    State(state): State<AppState>,
    caller: Caller,
    body: JsonBody,
) -> Result<Response, ApiError> {
    let fields = body.object()?;
    let request = parse_fetch(&state, &fields)?;
    if caller.limited() && request.queues.is_empty() {
        return Err(ApiError::forbidden(
            "This key is limited to some queues: name them in 'queues'.",
        ));
    }
    for queue in &request.queues {
        caller.check_queue(queue)?;
    }
    let jobs = state.broker().fetch(&request, state.shutdown()).await?;
    Ok(ok(Fetched {
        job: jobs.first().map(|j| j.wire()),
        jobs: jobs.iter().map(|j| j.wire()).collect(),
    })
    .into_response())
}

/// The answer to a FETCH.
#[derive(Serialize, ToSchema)]
struct Fetched<'a> {
    #[schema(value_type = Vec<openapi::Job>)]
    jobs: Vec<WireJob<'a>>,
    /// The first of `jobs`, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<openapi::Job>)]
    job: Option<WireJob<'a>>,
}

/// `POST /ojs/v1/workers/ack`: active → completed.
#[utoipa::path(
    post,
    path = "/ojs/v1/workers/ack",
    tag = "workers",
    summary = "Complete a job",
    request_body = AckRequest,
    responses(
        (status = 200, body = Acked<'_>),
        (status = 404, description = "No such job."),
        (status = 409, description = "The job is not active, or another worker holds it."),
        (status = 413, description = "`result` is too large."),
    )
)]
async fn ack(
    State(state): State<AppState>,
    caller: Caller,
    body: JsonBody,
) -> Result<Response, ApiError> {
    let fields = body.object()?;
    let job_id = fields.job_id("job_id")?;
    caller.check_job(&state, job_id).await?;
    let worker_id = fields.worker_id("worker_id")?;
    let result = ack_result(&fields, "result")?;
    let job = state
        .broker()
        .ack(job_id, worker_id.as_deref(), result)
        .await?;
    Ok(ok(Acked {
        acknowledged: true,
        id: job.id.to_string(),
        job_id: job.id.to_string(),
        state: job.state,
        completed_at: job.completed_at.map(timestamp::format),
        job: job.wire(),
    })
    .into_response())
}

/// The answer to an ACK.
#[derive(Serialize, ToSchema)]
struct Acked<'a> {
    acknowledged: bool,
    id: String,
    job_id: String,
    #[schema(value_type = openapi::JobState)]
    state: JobState,
    completed_at: Option<String>,
    #[schema(value_type = openapi::Job)]
    job: WireJob<'a>,
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
#[utoipa::path(
    post,
    path = "/ojs/v1/workers/nack",
    tag = "workers",
    summary = "Fail a job's attempt",
    request_body = NackRequestSchema,
    responses(
        (status = 200, body = NackBody<'_>),
        (status = 404, description = "No such job."),
        (status = 409, description = "The job is not active, or another worker holds it."),
    )
)]
async fn nack(
    State(state): State<AppState>,
    caller: Caller,
    body: JsonBody,
) -> Result<Response, ApiError> {
    let fields = body.object()?;
    let worker_id = fields.worker_id("worker_id")?;
    let request = nack_request(&fields, worker_id, "$")?;
    caller.check_job(&state, request.job_id).await?;
    let nacked = state.broker().nack(request).await?;
    Ok(ok(NackBody::of(&nacked)).into_response())
}

/// The answer to a NACK: the job's state after the failure.
#[derive(Serialize, ToSchema)]
#[schema(as = Nacked)]
struct NackBody<'a> {
    id: String,
    job_id: String,
    #[schema(value_type = openapi::JobState)]
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
    #[schema(value_type = openapi::Job)]
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
#[derive(Serialize, ToSchema)]
#[schema(as = BatchItemError)]
struct ItemError {
    job_id: String,
    error: ItemErrorFields,
}

#[derive(Serialize, ToSchema)]
#[schema(as = BatchItemErrorFields)]
struct ItemErrorFields {
    code: &'static str,
    message: String,
    retryable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
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
#[utoipa::path(
    post,
    path = "/ojs/v1/workers/ack/batch",
    tag = "workers",
    summary = "Complete many jobs",
    request_body = AckBatchRequest,
    responses(
        (status = 200, description = "Each item's outcome, in request order.", body = AckedBatch),
        (status = 400, description = "The request is invalid (no item was applied)."),
    )
)]
async fn ack_batch(
    State(state): State<AppState>,
    caller: Caller,
    body: JsonBody,
) -> Result<Response, ApiError> {
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
    let ids: Vec<JobId> = acks.iter().map(|(id, _)| *id).collect();
    caller.check_jobs(&state, &ids).await?;
    let outcomes = state.broker().ack_many(worker_id.as_deref(), &acks).await?;
    let (mut succeeded, mut failed) = (0, 0);
    let results: Vec<AckItem> = acks
        .iter()
        .zip(outcomes)
        .map(|((id, _), outcome)| match outcome {
            Ok(job) => {
                succeeded += 1;
                AckItem::Done {
                    job_id: job.id.to_string(),
                    acknowledged: true,
                    state: job.state,
                    completed_at: job.completed_at.map(timestamp::format),
                }
            }
            Err(e) => {
                failed += 1;
                AckItem::Failed(ItemError::new(*id, e))
            }
        })
        .collect();
    Ok(ok(AckedBatch {
        results,
        acknowledged: succeeded,
        failed,
    })
    .into_response())
}

/// The answer to a batch ACK.
#[derive(Serialize, ToSchema)]
struct AckedBatch {
    results: Vec<AckItem>,
    /// Items completed.
    acknowledged: usize,
    /// Items refused (see their `error`).
    failed: usize,
}

/// One item of a batch ACK: completed, or refused as a single ACK would have been.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
enum AckItem {
    Done {
        job_id: String,
        acknowledged: bool,
        #[schema(value_type = openapi::JobState)]
        state: JobState,
        completed_at: Option<String>,
    },
    Failed(ItemError),
}

/// `POST /ojs/v1/workers/nack/batch` (ojsd extension `batch-ack`): fails many attempts with one
/// read and one write. `{"worker_id"?, "nacks": [{"job_id", "error"?, "requeue"?}, ...]}`;
/// every item is answered in `results`, in order, with what a single NACK would have answered.
#[utoipa::path(
    post,
    path = "/ojs/v1/workers/nack/batch",
    tag = "workers",
    summary = "Fail many attempts",
    request_body = NackBatchRequest,
    responses(
        (status = 200, description = "Each item's outcome, in request order.", body = NackedBatch<'_>),
        (status = 400, description = "The request is invalid (no item was applied)."),
    )
)]
async fn nack_batch(
    State(state): State<AppState>,
    caller: Caller,
    body: JsonBody,
) -> Result<Response, ApiError> {
    let fields = body.object()?;
    let worker_id = fields.worker_id("worker_id")?;
    let items = batch_items(&fields, "nacks", state.settings().max_batch_jobs)?;
    let requests = items
        .iter()
        .enumerate()
        .map(|(i, item)| nack_request(item, worker_id.clone(), &format!("$.nacks[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    let ids: Vec<JobId> = requests.iter().map(|r| r.job_id).collect();
    caller.check_jobs(&state, &ids).await?;
    let outcomes = state.broker().nack_many(requests).await?;

    let outcomes: Vec<Result<Nacked, ItemError>> = ids
        .into_iter()
        .zip(outcomes)
        .map(|(id, outcome)| outcome.map_err(|e| ItemError::new(id, e)))
        .collect();

    let results: Vec<NackItem<'_>> = outcomes
        .iter()
        .map(|outcome| match outcome {
            Ok(nacked) => NackItem::Done(NackBody::of(nacked)),
            Err(e) => NackItem::Failed(e),
        })
        .collect();
    let failed = outcomes.iter().filter(|o| o.is_err()).count();
    Ok(ok(NackedBatch {
        results,
        nacked: outcomes.len() - failed,
        failed,
    })
    .into_response())
}

/// The answer to a batch NACK.
#[derive(Serialize, ToSchema)]
struct NackedBatch<'a> {
    results: Vec<NackItem<'a>>,
    /// Items whose failure was recorded.
    nacked: usize,
    /// Items refused (see their `error`).
    failed: usize,
}

/// One item of a batch NACK: recorded, or refused as a single NACK would have been.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
enum NackItem<'a> {
    Done(NackBody<'a>),
    Failed(&'a ItemError),
}

/// Job ids from `active_jobs` (array of ids; an integer count is accepted and carries none),
/// `active_job_ids` and `job_id`.
fn reported_jobs(fields: &Fields<'_>) -> Result<(Vec<Uuid>, Option<JobId>), ApiError> {
    let mut ids = Vec::new();
    for key in ["active_jobs", "active_job_ids"] {
        let Some(raw) = fields.raw(key) else { continue };
        if key == "active_jobs" && Kind::of(raw) == Kind::Number {
            // A count names no job, but it must be one.
            if json::as_integer(raw).is_none_or(|n| n < 0) {
                return Err(ApiError::invalid_field(
                    "$.active_jobs",
                    "'active_jobs' must be an array of job ids or a count (an integer >= 0)",
                ));
            }
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
#[utoipa::path(
    post,
    path = "/ojs/v1/workers/heartbeat",
    tag = "workers",
    summary = "Heartbeat",
    request_body = HeartbeatRequest,
    responses(
        (status = 200, body = Heartbeat),
        (status = 400, description = "A field is invalid."),
        (status = 409, description = "A heartbeat for a single `job_id` the worker no longer holds."),
    )
)]
async fn heartbeat(
    State(state): State<AppState>,
    caller: Caller,
    body: JsonBody,
) -> Result<Response, ApiError> {
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
    let held: Vec<JobId> = job_ids.iter().copied().map(JobId).collect();
    caller.check_jobs(&state, &held).await?;
    let single_only = single.is_some() && job_ids.len() == 1;
    let report_fields = ReportFields::parse(&fields)?;
    let params = HeartbeatParams {
        report: report_fields.report(&worker_id, reported_state),
        job_ids,
        visibility_timeout_ms: positive_ms(&fields, "visibility_timeout_ms")?,
        directives_from_jobs: state.broker().settings().test_hooks,
        refused_unless_extended: single_only,
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

    Ok(ok(Heartbeat {
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

/// `POST /ojs/v1/workers/beat`: the same as `/heartbeat`.
#[utoipa::path(
    post,
    path = "/ojs/v1/workers/beat",
    tag = "workers",
    summary = "Heartbeat (alias of /ojs/v1/workers/heartbeat)",
    request_body = HeartbeatRequest,
    responses(
        (status = 200, body = Heartbeat),
        (status = 400, description = "A field is invalid."),
        (status = 409, description = "A heartbeat for a single `job_id` the worker no longer holds."),
    )
)]
async fn beat(
    state: State<AppState>,
    caller: Caller,
    body: JsonBody,
) -> Result<Response, ApiError> {
    heartbeat(state, caller, body).await
}

/// The answer to a heartbeat.
#[derive(Serialize, ToSchema)]
struct Heartbeat {
    /// The state the worker must move to: `running`, `quiet`, `terminate` or `drain`.
    #[schema(value_type = String)]
    state: WorkerState,
    /// `quiet`, `terminate`, or `""`.
    #[schema(value_type = String)]
    directive: WorkerDirective,
    acknowledged: bool,
    worker_id: String,
    /// Held jobs whose claims were extended.
    jobs_extended: Vec<String>,
    /// Held jobs that were cancelled: stop working on them.
    jobs_cancelled: Vec<String>,
    /// Jobs the worker reported but no longer holds.
    jobs_lost: Vec<String>,
    server_time: String,
    heartbeat_interval: u32,
}
