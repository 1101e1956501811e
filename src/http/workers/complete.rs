//! `POST /ojs/v1/workers/ack` and `/nack`, one job at a time or in batches (ojsd's `batch-ack`
//! extension): an attempt's end.

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::value::RawValue;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::broker::{NackRequest, Nacked};
use crate::http::auth::Caller;
use crate::http::error::ApiError;
use crate::http::extract::{Fields, JsonBody, TraceCall};
use crate::http::{AppState, ok, openapi};
use crate::job::failure::JobError;
use crate::job::id_schema::WorkerId;
use crate::job::wire::WireJob;
use crate::job::{JobId, JobState};
use crate::telemetry::traces::Operation;
use crate::wire::json::Object;
use crate::wire::timestamp;

/// Largest ACK `result`, serialized.
const MAX_RESULT_BYTES: usize = 1024 * 1024;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(ack))
        .routes(routes!(nack))
        .routes(routes!(ack_batch))
        .routes(routes!(nack_batch))
}

/// An ACK.
#[derive(ToSchema)]
struct AckRequest<'a> {
    job_id: JobId,
    /// When given, must be the worker holding the job.
    #[schema(value_type = Option<WorkerId>)]
    worker_id: Option<String>,
    /// What the job produced (at most 1 MiB).
    #[schema(value_type = Option<serde_json::Value>)]
    result: Option<&'a str>,
}

impl<'a> AckRequest<'a> {
    fn read(fields: &Fields<'a>) -> Result<AckRequest<'a>, ApiError> {
        Ok(AckRequest {
            job_id: fields.job_id("job_id")?,
            worker_id: fields.worker_id("worker_id")?,
            result: ack_result(fields, "result")?,
        })
    }
}

/// A NACK.
#[derive(ToSchema)]
#[allow(dead_code)] // documentation: read by `nack_request`
struct NackRequestSchema {
    #[schema(value_type = JobId)]
    job_id: String,
    #[schema(value_type = Option<WorkerId>)]
    worker_id: Option<String>,
    /// May be left out only when `requeue` is true.
    #[schema(nullable = false)]
    error: Option<JobError>,
    /// Put the job back without spending an attempt.
    requeue: Option<bool>,
}

/// A batch ACK.
#[derive(ToSchema)]
struct AckBatchRequest<'a> {
    #[schema(value_type = Option<WorkerId>)]
    worker_id: Option<String>,
    /// 1 to the server's `limits.max_batch_size` items.
    #[schema(min_items = 1, value_type = Vec<AckBatchItem>)]
    acks: Vec<(JobId, Option<&'a str>)>,
}

impl<'a> AckBatchRequest<'a> {
    fn read(fields: &Fields<'a>, max: usize) -> Result<AckBatchRequest<'a>, ApiError> {
        let worker_id = fields.worker_id("worker_id")?;
        let items = batch_items(fields, "acks", max)?;
        let mut acks = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let prefix = format!("$.acks[{i}]");
            let id = item.job_id("job_id").map_err(|e| at(e, &prefix))?;
            let result = ack_result(item, &format!("acks[{i}].result"))?;
            acks.push((id, result));
        }
        Ok(AckBatchRequest { worker_id, acks })
    }
}

#[derive(ToSchema)]
#[allow(dead_code)]
struct AckBatchItem {
    #[schema(value_type = JobId)]
    job_id: String,
    result: Option<serde_json::Value>,
}

/// A batch NACK.
#[derive(ToSchema)]
#[allow(dead_code)] // documentation: read by `nack_batch`
struct NackBatchRequest {
    #[schema(value_type = Option<WorkerId>)]
    worker_id: Option<String>,
    /// 1 to the server's `limits.max_batch_size` items.
    #[schema(min_items = 1)]
    nacks: Vec<NackBatchItem>,
}

#[derive(ToSchema)]
#[allow(dead_code)]
struct NackBatchItem {
    #[schema(value_type = JobId)]
    job_id: String,
    /// May be left out only when `requeue` is true.
    #[schema(nullable = false)]
    error: Option<JobError>,
    requeue: Option<bool>,
}

/// `POST /ojs/v1/workers/ack`: active → completed. Answers the job's id, state and completion
/// time; the whole job too with `Prefer: return=representation`.
#[utoipa::path(
    post,
    path = "/ojs/v1/workers/ack",
    tag = "workers",
    summary = "Complete a job",
    request_body = AckRequest<'_>,
    params(
        ("Prefer" = Option<String>, Header,
         description = "`return=representation`: the answer also carries `job`, the job as the ACK left it (answered with `Preference-Applied`)."),
    ),
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
    trace: TraceCall,
    headers: HeaderMap,
    body: JsonBody,
) -> Result<Response, ApiError> {
    let fields = body.object()?;
    let AckRequest {
        job_id,
        worker_id,
        result,
    } = AckRequest::read(&fields)?;
    caller.check_job(&state, job_id).await?;
    let broker = state.broker();
    if wants_representation(&headers) {
        let job = match broker.ack_whole(job_id, worker_id.as_deref(), result).await {
            Ok(job) => job,
            Err(e) => return Err(refused(&trace, job_id, e)),
        };
        trace.acked(&job);
        let mut response = ok(Acked {
            acknowledged: true,
            id: job.id.to_string(),
            job_id: job.id.to_string(),
            state: job.state,
            completed_at: job.completed_at.map(timestamp::format),
            job: Some(job.wire()),
        })
        .into_response();
        response.headers_mut().insert(
            "preference-applied",
            HeaderValue::from_static("return=representation"),
        );
        return Ok(response);
    }
    let done = match broker.ack(job_id, worker_id.as_deref(), result).await {
        Ok(done) => done,
        Err(e) => return Err(refused(&trace, job_id, e)),
    };
    trace.acked_brief(&done);
    Ok(ok(Acked {
        acknowledged: true,
        id: done.id.to_string(),
        job_id: done.id.to_string(),
        state: JobState::Completed,
        completed_at: Some(timestamp::format(done.completed_at)),
        job: None,
    })
    .into_response())
}

/// Whether the request asks for the whole job in the answer (RFC 7240 `Prefer:
/// return=representation`). No official SDK reads the job from an ACK's answer, so by default
/// it is left out: reading and rendering it cost more than the rest of the ACK's answer.
fn wants_representation(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::HeaderName::from_static("prefer"))
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|p| p.trim().eq_ignore_ascii_case("return=representation"))
}

/// A refused ACK, traced.
fn refused(trace: &TraceCall, job_id: JobId, e: crate::error::Error) -> ApiError {
    let e = ApiError::from(e);
    trace.refused(Operation::Ack, job_id, &e);
    e
}

/// The answer to an ACK.
#[derive(Serialize, ToSchema)]
struct Acked<'a> {
    acknowledged: bool,
    id: String,
    job_id: String,
    state: JobState,
    completed_at: Option<String>,
    /// The job as the ACK left it: only when the request says `Prefer: return=representation`.
    #[schema(value_type = Option<openapi::Job>)]
    #[serde(skip_serializing_if = "Option::is_none")]
    job: Option<WireJob<'a>>,
}

/// The ACK `result` of `fields`, within its size limit.
fn ack_result<'a>(fields: &Fields<'a>, path: &str) -> Result<Option<&'a str>, ApiError> {
    let result = fields.raw("result").map(|r| r.get());
    if let Some(result) = result
        && result.len() > MAX_RESULT_BYTES
    {
        crate::telemetry::result_rejected();
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

/// The worker's error of a NACK, for its span: its type (else its code) and message.
fn failure_of(request: &NackRequest) -> Option<(String, String)> {
    request.error.as_ref().map(|e| {
        let kind = if e.r#type.is_empty() {
            &e.code
        } else {
            &e.r#type
        };
        (kind.clone(), e.message.clone())
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
    trace: TraceCall,
    body: JsonBody,
) -> Result<Response, ApiError> {
    let fields = body.object()?;
    let worker_id = fields.worker_id("worker_id")?;
    let request = nack_request(&fields, worker_id, "$")?;
    caller.check_job(&state, request.job_id).await?;
    let job_id = request.job_id;
    let failure = trace.is_on().then(|| failure_of(&request)).flatten();
    let nacked = match state.broker().nack(request).await {
        Ok(nacked) => nacked,
        Err(e) => {
            let e = ApiError::from(e);
            trace.refused(Operation::Nack, job_id, &e);
            return Err(e);
        }
    };
    trace.nacked(
        &nacked.job,
        failure.as_ref().map(|(t, m)| (t.as_str(), m.as_str())),
    );
    Ok(ok(NackBody::of(&nacked)).into_response())
}

/// The answer to a NACK: the job's state after the failure.
#[derive(Serialize, ToSchema)]
#[schema(as = Nacked)]
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
    request_body = AckBatchRequest<'_>,
    responses(
        (status = 200, description = "Each item's outcome, in request order.", body = AckedBatch),
        (status = 400, description = "The request is invalid (no item was applied)."),
    )
)]
async fn ack_batch(
    State(state): State<AppState>,
    caller: Caller,
    trace: TraceCall,
    body: JsonBody,
) -> Result<Response, ApiError> {
    let fields = body.object()?;
    let AckBatchRequest { worker_id, acks } =
        AckBatchRequest::read(&fields, state.settings().max_batch_jobs)?;
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
                trace.acked_brief(&job);
                AckItem::Done {
                    job_id: job.id.to_string(),
                    acknowledged: true,
                    state: JobState::Completed,
                    completed_at: Some(timestamp::format(job.completed_at)),
                }
            }
            Err(e) => {
                failed += 1;
                let item = ItemError::new(*id, e);
                trace.refused_item(Operation::Ack, *id, item.error.code, &item.error.message);
                AckItem::Failed(item)
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
    trace: TraceCall,
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
    // The workers' errors, for the spans (read only while traces are on).
    let failures: Vec<_> = if trace.is_on() {
        requests.iter().map(failure_of).collect()
    } else {
        Vec::new()
    };
    let outcomes = state.broker().nack_many(requests).await?;

    let outcomes: Vec<Result<Nacked, ItemError>> = ids
        .into_iter()
        .zip(outcomes)
        .enumerate()
        .map(|(i, (id, outcome))| match outcome {
            Ok(nacked) => {
                let failure = failures.get(i).and_then(Option::as_ref);
                trace.nacked(&nacked.job, failure.map(|(t, m)| (t.as_str(), m.as_str())));
                Ok(nacked)
            }
            Err(e) => {
                let item = ItemError::new(id, e);
                trace.refused_item(Operation::Nack, id, item.error.code, &item.error.message);
                Err(item)
            }
        })
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
