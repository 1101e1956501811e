//! PUSH: one job (`POST /ojs/v1/jobs`, with an embedded chain or not) and a batch
//! (`POST /ojs/v1/jobs/batch`), answered with back-pressure headers for bounded queues.

use crate::broker::{Pressure, PushContext, PushOutcome, PushResult, Pushed};
use crate::error::Error;
use crate::http::auth::Caller;
use crate::http::error::ApiError;
use crate::http::extract::push_context;
use crate::http::extract::{BodyLimit, JsonBody, caller_trace};
use crate::http::openapi;
use crate::http::shapes::JobBody;
use crate::http::tenancy::Tenant;
use crate::http::{AppState, HttpSettings, Ojs, ok};
use crate::job::JobId;
use crate::job::envelope::{self, NewJob};
use crate::job::wire::WireJob;
use crate::wire::json::{Kind, Object};
use crate::workflow;
use axum::Extension;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::value::RawValue;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub(super) fn router(settings: &HttpSettings) -> OpenApiRouter<AppState> {
    let (schemas, paths, batch) = routes!(push_batch);
    let batch = batch.layer(Extension(BodyLimit(settings.max_batch_bytes)));
    OpenApiRouter::new()
        .routes(routes!(push))
        .routes((schemas, paths, batch))
}

/// Headers a PUSH may carry.
#[derive(IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)] // documentation: read by `extract::push_context`
struct PushHeaders {
    /// Who is enqueueing (checked against a queue's `producers`): 1 to 255 printable ASCII
    /// characters.
    #[param(rename = "OJS-Producer", pattern = "^[ -~]{1,255}$")]
    producer: Option<String>,
    /// Seconds (0–30) to wait for room when a `block` queue is full.
    #[param(rename = "OJS-Block-Timeout", maximum = 30)]
    block_timeout: Option<u32>,
    /// W3C trace context of the producer: the parent of the enqueue span, and copied into the
    /// job's `meta` when it has no `traceparent` (an invalid one is ignored).
    #[param(rename = "traceparent")]
    traceparent: Option<String>,
    /// W3C trace state going with `traceparent`.
    #[param(rename = "tracestate")]
    tracestate: Option<String>,
}

/// `{"jobs": [...]}`.
#[derive(ToSchema)]
#[allow(dead_code)]
struct BatchRequest {
    #[schema(min_items = 1)]
    jobs: Vec<openapi::Enqueue>,
}

/// `{"jobs": [...], "count": n}`, with the warnings of schemas the jobs' `args` failed.
#[derive(Serialize, ToSchema)]
#[schema(as = BatchResponse)]
struct BatchBody<'a> {
    #[schema(value_type = Vec<openapi::Job>)]
    jobs: Vec<WireJob<'a>>,
    count: usize,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<String>,
}

/// Validates one envelope; `index` is its position in a batch.
fn parse_envelope(
    state: &AppState,
    obj: &Object<'_>,
    size: usize,
    index: Option<usize>,
    tenant: &Tenant,
) -> Result<NewJob, Error> {
    within_envelope_limit(state, size, index)?;
    envelope::parse_for(obj, &state.broker().settings().limits, tenant.id())
        .map_err(|rejection| Error::Rejected { index, rejection })
}

/// Refuses an envelope of `size` bytes over the server's limit (`index`: its place in a batch).
fn within_envelope_limit(state: &AppState, size: usize, index: Option<usize>) -> Result<(), Error> {
    let max = state.settings().max_envelope_bytes;
    if size > max {
        return Err(Error::Rejected {
            index,
            rejection: envelope::Rejection::TooLarge {
                field: "envelope",
                size,
                max,
            },
        });
    }
    Ok(())
}

/// `POST /ojs/v1/jobs`: 201 with the new job, or 200 with the existing one (unique policy).
#[utoipa::path(
    post,
    path = "/ojs/v1/jobs",
    tag = "jobs",
    summary = "Enqueue a job",
    params(PushHeaders),
    request_body = openapi::Enqueue,
    responses(
        (status = 201, description = "Created; `Location` names the job, and `id` (first) repeats its id beside `job`. With an embedded chain, also `workflow`: `{id, type, state, steps_total}`.", body = JobBody<'_>),
        (status = 200, description = "A unique policy returned the existing job (`deduplicated: true`); `id` beside `job`.", body = JobBody<'_>),
        (status = 400, description = "The envelope is invalid."),
        (status = 409, description = "A unique policy refused a duplicate (with an embedded chain: a duplicate of any of its jobs)."),
        (status = 413, description = "The envelope is too large."),
        (status = 422, description = "The retry policy is invalid, or the body embeds a group or batch."),
        (status = 429, description = "The queue is full."),
    )
)]
async fn push(
    State(state): State<AppState>,
    headers: HeaderMap,
    caller: Caller,
    tenant: Tenant,
    body: JsonBody,
) -> Result<Response, ApiError> {
    let ctx = push_context(&headers)?;
    let fields = body.object()?;
    // `"workflow": null` is no workflow, as a null attribute is absent everywhere else.
    if fields.object().get("workflow").is_some() {
        return push_chain(
            &state,
            &caller,
            &tenant,
            &ctx,
            fields.object(),
            body.text().len(),
        )
        .await;
    }
    let job = parse_envelope(&state, fields.object(), body.text().len(), None, &tenant)?;
    caller.check_queue(&job.queue)?;
    let pushed = push_traced(&state, &headers, vec![job], &ctx).await?;
    let pressure = pushed.pressure;
    let warnings = pushed.warnings;
    let Some(Pushed { job, outcome }) = pushed.jobs.into_iter().next() else {
        return Err(ApiError::internal("push returned no job"));
    };
    // A job with a rate limit: how its key stands now.
    let rate = match &job.rate_key {
        Some(key) => state.broker().rate_key(key).await.ok(),
        None => None,
    };
    /// The answer: the job, whether a unique policy returned an existing one (and replaced
    /// it in place), and the schema check's warnings.
    #[derive(Serialize)]
    struct Pushed1<'a> {
        /// The job's id, also at the top (where the durable-execution suite reads it).
        id: &'a str,
        job: WireJob<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        deduplicated: Option<bool>,
        #[serde(skip_serializing_if = "Option::is_none")]
        replaced: Option<bool>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        warnings: Vec<String>,
    }
    let id = job.id.to_string();
    let body = Pushed1 {
        id: &id,
        job: job.wire(),
        deduplicated: (outcome != PushOutcome::Created).then_some(true),
        replaced: (outcome == PushOutcome::ReplacedInPlace).then_some(true),
        warnings,
    };
    let response = match outcome {
        PushOutcome::Created => created(&id, body),
        PushOutcome::Deduplicated | PushOutcome::ReplacedInPlace => ok(body).into_response(),
    };
    let mut response = with_pressure(response, pressure.as_ref());
    if let Some((limit, remaining, reset)) = rate.as_ref().and_then(crate::http::rate_key::headers)
    {
        let headers = response.headers_mut();
        headers.insert("x-ratelimit-limit", HeaderValue::from(limit));
        headers.insert("x-ratelimit-remaining", HeaderValue::from(remaining));
        headers.insert("x-ratelimit-reset", HeaderValue::from(reset));
    }
    Ok(response)
}

/// A PUSH with an embedded chain (`"workflow": {"chain": [...]}`): the job and the chain's
/// later steps are made as one workflow, or nothing is. 201 with the job and a summary of the
/// workflow; a unique policy that finds a duplicate of any of its jobs refuses it (409).
async fn push_chain(
    state: &AppState,
    caller: &Caller,
    tenant: &Tenant,
    ctx: &PushContext,
    obj: &Object<'_>,
    size: usize,
) -> Result<Response, ApiError> {
    within_envelope_limit(state, size, None)?;
    let definition = workflow::embedded_chain(obj, &state.broker().settings().limits, tenant.id())
        .map_err(Error::from)?
        .ok_or_else(|| ApiError::internal("no embedded workflow"))?;
    for node in &definition.nodes {
        caller.check_queue(&node.job.queue)?;
    }
    let view = state.broker().create_workflow(&definition, ctx).await?;
    let root = view
        .nodes
        .first()
        .ok_or_else(|| ApiError::internal("a workflow without steps"))?;
    let job = state.broker().info(JobId(root.job_id)).await?;
    #[derive(Serialize)]
    struct Chained<'a> {
        id: &'a str,
        job: WireJob<'a>,
        workflow: serde_json::Value,
    }
    let w = &view.workflow;
    let id = job.id.to_string();
    Ok(created(
        &id,
        Chained {
            id: &id,
            job: job.wire(),
            workflow: serde_json::json!({
                "id": w.id.to_string(),
                "type": w.r#type,
                "state": w.state,
                "steps_total": w.total,
            }),
        },
    ))
}

/// PUSH with an enqueue span per job (see [`crate::telemetry::traces`]): each job gets the
/// producer's trace context (`traceparent` header) unless its `meta` has one, and each span
/// ends with the job's outcome or the push's error.
async fn push_traced(
    state: &AppState,
    headers: &HeaderMap,
    mut jobs: Vec<NewJob>,
    ctx: &PushContext,
) -> Result<PushResult, ApiError> {
    let trace = caller_trace(headers);
    let spans: Vec<_> = jobs
        .iter_mut()
        .map(|job| state.traces().enqueue(trace.as_ref(), job))
        .collect();
    match state.broker().push(jobs, ctx).await {
        Ok(pushed) => {
            for (span, p) in spans.into_iter().zip(&pushed.jobs) {
                span.end(Ok((p.job.id, p.outcome != PushOutcome::Created)));
            }
            Ok(pushed)
        }
        Err(e) => {
            let e = ApiError::from(e);
            for span in spans {
                span.end(Err((e.code, &e.message)));
            }
            Err(e)
        }
    }
}

/// Adds `X-OJS-Queue-Pressure`, `-Depth` and `-Bound` when a bounded queue written to is at
/// or past its warning threshold.
fn with_pressure(mut response: Response, pressure: Option<&Pressure>) -> Response {
    if let Some(p) = pressure {
        let headers = response.headers_mut();
        if let Ok(ratio) = HeaderValue::from_str(&format!("{:.2}", p.ratio().min(1.0))) {
            headers.insert("x-ojs-queue-pressure", ratio);
        }
        headers.insert("x-ojs-queue-depth", HeaderValue::from(p.depth));
        headers.insert("x-ojs-queue-bound", HeaderValue::from(p.bound));
    }
    response
}

/// A 201 with `Location: /ojs/v1/jobs/{id}`.
fn created(id: &str, body: impl Serialize) -> Response {
    let mut response = Ojs(StatusCode::CREATED, body).into_response();
    if let Ok(location) = HeaderValue::from_str(&format!("/ojs/v1/jobs/{id}")) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response
}

/// `POST /ojs/v1/jobs/batch`: all jobs or none, in request order.
#[utoipa::path(
    post,
    path = "/ojs/v1/jobs/batch",
    tag = "jobs",
    summary = "Enqueue jobs atomically",
    params(PushHeaders),
    request_body = BatchRequest,
    responses(
        (status = 201, description = "Every job, in request order.", body = BatchBody<'_>),
        (status = 400, description = "An envelope is invalid (`details.index` says which)."),
        (status = 409, description = "A unique policy refused a duplicate."),
        (status = 413, description = "The batch is too large."),
        (status = 429, description = "A queue is full."),
    )
)]
async fn push_batch(
    State(state): State<AppState>,
    headers: HeaderMap,
    caller: Caller,
    tenant: Tenant,
    body: JsonBody,
) -> Result<Response, ApiError> {
    let ctx = push_context(&headers)?;
    let fields = body.object()?;
    let max_jobs = state.settings().max_batch_jobs;
    let items: Vec<&RawValue> = match fields.raw("jobs") {
        None => {
            return Err(ApiError::invalid_field(
                "$.jobs",
                "'jobs' is required: an array of job envelopes",
            ));
        }
        Some(raw) => serde_json::from_str::<Vec<&RawValue>>(raw.get()).map_err(|_| {
            ApiError::invalid_field(
                "$.jobs",
                format!(
                    "'jobs' must be an array, got {}",
                    Kind::of(raw).article_name()
                ),
            )
        })?,
    };
    if items.is_empty() || items.len() > max_jobs {
        return Err(ApiError::invalid_field(
            "$.jobs",
            format!("'jobs' must hold 1 to {max_jobs} jobs, got {}", items.len()),
        ));
    }
    let mut jobs = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let obj = Object::from_raw(item).map_err(|_| {
            ApiError::invalid_field(
                &format!("$.jobs[{index}]"),
                format!(
                    "jobs[{index}]: each job must be an object, got {}",
                    Kind::of(item).article_name()
                ),
            )
            .with_details(serde_json::json!({"field": format!("$.jobs[{index}]"), "index": index}))
        })?;
        let job = parse_envelope(&state, &obj, item.get().len(), Some(index), &tenant)?;
        caller.check_queue(&job.queue)?;
        jobs.push(job);
    }
    let PushResult {
        jobs: pushed,
        pressure,
        warnings,
    } = push_traced(&state, &headers, jobs, &ctx).await?;

    let body = BatchBody {
        warnings,
        count: pushed.len(),
        jobs: pushed
            .iter()
            .map(|p| p.job.wire().deduplicated(p.outcome != PushOutcome::Created))
            .collect(),
    };
    Ok(with_pressure(
        Ojs(StatusCode::CREATED, body).into_response(),
        pressure.as_ref(),
    ))
}
