//! Who the workers are: registration, deregistration, a worker's health, and the worker object
//! every worker route answers with.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::value::RawValue;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::fetch::parse_weights;
use crate::broker::{Strategy, WorkerRecord, WorkerReport};
use crate::http::auth::Caller;
use crate::http::error::ApiError;
use crate::http::extract::{Fields, JsonBody, WorkerIdPath};

use crate::http::{AppState, Ojs, ok};
use crate::job::id_schema::{QueueName, WorkerId};
use crate::job::{JobId, is_valid_queue};
use crate::scheduling::DEFAULT_WORKER_CONCURRENCY;
use crate::scheduling::Weights;
use crate::wire::json::{self, Kind, Object};
use crate::wire::timestamp;
use crate::worker::{EffectiveState, WorkerDirective, WorkerState, required_state};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(register))
        .routes(routes!(deregister))
        .routes(routes!(worker_health))
}

/// A registration: the fields, or the same fields wrapped as `{"worker": {...}}`.
#[derive(ToSchema)]
#[allow(dead_code)] // documentation: read by `register`
struct RegisterRequest {
    worker: Option<RegisterFields>,
    #[serde(flatten)]
    fields: RegisterFields,
}

/// What a worker registers.
#[derive(ToSchema)]
#[allow(dead_code)] // documentation: read by `register`
struct RegisterFields {
    /// The worker's id (`id` is accepted instead).
    #[schema(value_type = Option<WorkerId>, nullable = false)]
    worker_id: Option<String>,
    /// The same as `worker_id`, which wins.
    #[schema(value_type = Option<WorkerId>, nullable = false)]
    id: Option<String>,
    /// The worker's preferred fetch strategy.
    #[schema(value_type = Option<Strategy>)]
    strategy: Option<String>,
    #[schema(value_type = Option<Weights>)]
    weights: Option<serde_json::Value>,
    #[serde(flatten)]
    report: ReportFields,
}

/// A worker's labels: strings, or names to strings (at most 100, of at most 255 characters).
fn labels_schema() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, OneOfBuilder, Schema, Type};
    let label = || {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .max_length(Some(MAX_LABEL_CHARS))
    };
    let list = ArrayBuilder::new()
        .items(label())
        .max_items(Some(MAX_LABELS));
    let map = ObjectBuilder::new()
        .schema_type(Type::Object)
        .property_names(Some(label()))
        .additional_properties(Some(label()))
        .max_properties(Some(MAX_LABELS));
    Schema::OneOf(
        OneOfBuilder::new()
            .item(list)
            .item(map)
            .description(Some(format!(
                "Strings, or names to strings: at most {MAX_LABELS}, of at most \
                 {MAX_LABEL_CHARS} characters."
            )))
            .build(),
    )
}

/// `GET /ojs/v1/workers/{worker_id}/health`: 200 while the worker is running, 503 when it is
/// quiet, terminating, draining or stale (no heartbeat for the heartbeat timeout).
#[utoipa::path(
    get,
    path = "/ojs/v1/workers/{worker_id}/health",
    tag = "workers",
    summary = "A worker's liveness",
    params(WorkerIdPath),
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
    state: EffectiveState,
    /// What the server asks of the worker: `quiet`, `terminate`, or `""` for nothing.
    directive: WorkerDirective,
    /// The state the worker last reported.
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
#[derive(ToSchema)]
#[schema(as = WorkerReportSchema)]
pub(super) struct ReportFields {
    hostname: Option<String>,
    pid: Option<i32>,
    #[schema(value_type = Option<Vec<QueueName>>)]
    queues: Option<Vec<String>>,
    #[schema(minimum = 0)]
    concurrency: Option<i32>,
    #[schema(schema_with = labels_schema)]
    labels: Option<String>,
    /// The pool the worker belongs to (a pool name follows the rules of a queue name).
    #[schema(value_type = Option<QueueName>)]
    pool: Option<String>,
    /// RFC 3339.
    #[schema(value_type = Option<crate::http::openapi::values::Timestamp>)]
    started_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl ReportFields {
    pub(super) fn parse(fields: &Fields<'_>) -> Result<ReportFields, ApiError> {
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

    /// The report of worker `worker_id` made acting as `tenant`.
    pub(super) fn report<'a>(
        &'a self,
        worker_id: &'a str,
        state: WorkerState,
        tenant: Option<&'a str>,
    ) -> WorkerReport<'a> {
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
            tenant,
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
    let mut report = report_fields.report(&worker_id, WorkerState::Running, caller.tenant().id());
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
    state: WorkerState,
    /// `quiet`, `terminate`, or `""`.
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
    params(WorkerIdPath),
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
