//! `POST /ojs/v1/workers/fetch`: FETCH, claiming jobs (long polling, routing strategies).

use std::time::Duration;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::value::RawValue;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::broker::{FetchRequest, MAX_WEIGHT, Strategy, Weights};
use crate::http::auth::Caller;
use crate::http::error::ApiError;
use crate::http::extract::check_queue_name;
use crate::http::extract::positive_ms;
use crate::http::extract::{Fields, JsonBody, TraceCall};
use crate::http::openapi::values::{FetchCount, Milliseconds};
use crate::http::tenancy::Tenant;
use crate::http::{AppState, ok, openapi};
use crate::job::id_schema::{QueueName, WorkerId};
use crate::job::wire::WireJob;
use crate::wire::json::{self, Kind, Object};

/// Most queues one FETCH may name.
const MAX_FETCH_QUEUES: usize = 100;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(fetch))
}

/// A FETCH.
#[derive(ToSchema)]
#[allow(dead_code)] // documentation: read by `parse_fetch`
struct FetchRequestSchema {
    /// Queues to take from (1–100, a repeated name counts once). A member of a configured
    /// pool may leave them out to use its pool's; anyone else must name them.
    #[schema(value_type = Option<Vec<QueueName>>, min_items = 1, max_items = 100)]
    queues: Option<Vec<String>>,
    /// Most jobs to claim (1 to the server's `limits.max_fetch_count`); default 1.
    #[schema(value_type = Option<FetchCount>)]
    count: Option<u32>,
    #[schema(value_type = Option<WorkerId>)]
    worker_id: Option<String>,
    /// How long the claim lasts before the job is offered again; default the job's.
    #[schema(value_type = Option<Milliseconds>)]
    visibility_timeout_ms: Option<i64>,
    /// Long poll: wait up to this long for a job when none is ready (capped by the server).
    #[schema(minimum = 0, maximum = 9_223_372_036_854_775_807_i64)]
    wait_ms: Option<i64>,
    /// For this FETCH only; the server's setting, if any, wins.
    #[schema(value_type = Option<Strategy>)]
    strategy: Option<String>,
    #[schema(value_type = Option<Weights>)]
    weights: Option<serde_json::Value>,
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
        tenant: None,
    })
}

/// A FETCH's `weights`: an object of queue name → integer weight 0..=MAX_WEIGHT.
pub(super) fn parse_weights(raw: &RawValue) -> Result<Weights, ApiError> {
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
    tenant: Tenant,
    trace: TraceCall,
    body: JsonBody,
) -> Result<Response, ApiError> {
    let fields = body.object()?;
    let mut request = parse_fetch(&state, &fields)?;
    request.tenant = tenant.owned();
    if caller.limited() && request.queues.is_empty() {
        return Err(ApiError::forbidden(
            "This key is limited to some queues: name them in 'queues'.",
        ));
    }
    for queue in &request.queues {
        caller.check_queue(queue)?;
    }
    let jobs = state.broker().fetch(&request, state.shutdown()).await?;
    trace.fetched(request.worker_id.as_deref(), &jobs);
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
