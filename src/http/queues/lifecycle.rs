//! Queues by name: listed, created, read, deleted, paused and resumed.

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::body::{Counts, QueueBody};
use super::config::QueueConfigUpdate;
use crate::broker::QueueState;
use crate::broker::{DeleteStrategy, QueueStats};
use crate::http::error::ApiError;
use crate::http::extract::{Fields, JsonBody, OptionalJsonBody, QueuePath, check_queue_name};
use crate::http::query::{DATA_PLANE, Page, Pagination, QueryParams};
use crate::http::tenancy::Tenant;
use crate::http::{AppState, Ojs, ok};
use crate::job::id_schema::QueueName;
use crate::job::is_valid_queue;
use crate::wire::names;
use crate::wire::timestamp;

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(show, delete_queue))
        .routes(routes!(pause))
        .routes(routes!(resume))
}

/// The filter of `GET /ojs/v1/queues`.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
struct QueueListQuery {
    /// Only queues in this state.
    #[param(inline)]
    state: Option<QueueState>,
}

impl QueueListQuery {
    fn from_query(query: &QueryParams) -> Result<QueueListQuery, ApiError> {
        let state = match query.get("state") {
            None => None,
            Some("active") => Some(QueueState::Active),
            Some("paused") => Some(QueueState::Paused),
            Some("draining") => Some(QueueState::Draining),
            Some(other) => {
                return Err(ApiError::invalid_field(
                    "query.state",
                    format!("'state' must be active, paused or draining, not {other:?}"),
                ));
            }
        };
        Ok(QueueListQuery { state })
    }
}

/// What a queue deletion does with the queue's waiting jobs: `reject` refuses when jobs
/// remain, `discard` discards them, `move` moves them to `target_queue`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QueueDeleteStrategy {
    Reject,
    Discard,
    Move,
}

names!(QueueDeleteStrategy {
    Reject => "reject",
    Discard => "discard",
    Move => "move",
});

/// `POST /ojs/v1/queues`.
#[derive(ToSchema)]
struct QueueCreateRequest {
    #[schema(value_type = QueueName)]
    name: String,
    /// The queue's own configuration, as for `PUT /ojs/v1/queues/{name}/config`.
    #[schema(nullable = false, value_type = Option<QueueConfigUpdate>)]
    config: Option<serde_json::Value>,
}

impl QueueCreateRequest {
    fn read(fields: &Fields<'_>) -> Result<QueueCreateRequest, ApiError> {
        let name = fields.required_string("name")?;
        check_queue_name("$.name", &name)?;
        let config = match fields.raw("config") {
            None => None,
            Some(raw) => Some(
                serde_json::from_str::<serde_json::Value>(raw.get()).map_err(|_| {
                    ApiError::invalid_field("$.config", "'config' must be an object")
                })?,
            ),
        };
        Ok(QueueCreateRequest { name, config })
    }
}

/// A listed queue: the queue object with its current counts, and the two figures the OJS
/// Kubernetes operator scales workers on at the top (it reads `pending` and `active` there).
#[derive(Serialize, ToSchema)]
#[schema(as = ListedQueue)]
struct Listed<'a> {
    #[serde(flatten)]
    queue: QueueBody<'a>,
    counts: Counts,
    /// Jobs ready to run now (`counts.available`), as the OJS Kubernetes operator reads a
    /// queue's depth. Not the `pending` state, which `counts.pending` counts.
    pending: i64,
    /// Jobs running now (`counts.active`).
    active: i64,
}

/// A page of queues.
#[derive(Serialize, ToSchema)]
#[schema(as = QueueList)]
struct ListBody<'a> {
    queues: Vec<Listed<'a>>,
    pagination: Pagination,
}

/// `GET /ojs/v1/queues?state=&limit=&offset=`: queues by name, with their current counts.
#[utoipa::path(
    get,
    path = "/ojs/v1/queues",
    tag = "queues",
    summary = "List queues",
    params(QueueListQuery, Page),
    responses(
        (status = 200, description = "Queues by name.", body = ListBody<'_>),
        (status = 400, description = "A query parameter is invalid."),
    )
)]
async fn list(
    State(state): State<AppState>,
    tenant: Tenant,
    query: QueryParams,
) -> Result<Response, ApiError> {
    let page = Page::from_query(&query, DATA_PLANE)?;
    let QueueListQuery { state: filter } = QueueListQuery::from_query(&query)?;
    let (queues, total) = state
        .broker()
        .queues(filter, tenant.id(), page.limit, page.offset)
        .await?;
    let configs = state.broker().queue_configs().await?;
    Ok(ok(ListBody {
        queues: queues
            .iter()
            .map(|q| Listed {
                queue: QueueBody::of(&q.queue, &configs),
                counts: Counts::of(&q.counts),
                pending: q.counts.available,
                active: q.counts.active,
            })
            .collect(),
        pagination: page.describe(total),
    })
    .into_response())
}

/// `POST /ojs/v1/queues` with `{"name", "config"?}`: 201 with the queue, 409 if it exists.
#[utoipa::path(
    post,
    path = "/ojs/v1/queues",
    tag = "queues",
    summary = "Create a queue",
    request_body = QueueCreateRequest,
    responses(
        (status = 201, description = "Created; `Location` names the queue.", body = QueueBody<'_>,
            headers(("Location" = String, description = "`/ojs/v1/queues/{name}`"))),
        (status = 400, description = "The name or the configuration is invalid."),
        (status = 409, description = "The queue exists."),
        (status = 422, description = "`config.default_retry` is not a valid retry policy."),
    )
)]
async fn create(State(state): State<AppState>, body: JsonBody) -> Result<Response, ApiError> {
    let QueueCreateRequest { name, config } = QueueCreateRequest::read(&body.object()?)?;
    let broker = state.broker();
    let queue = broker.create_queue(&name, config.as_ref()).await?;
    let configs = broker.queue_configs().await?;
    let mut response = Ojs(StatusCode::CREATED, QueueBody::of(&queue, &configs)).into_response();
    if let Ok(location) = HeaderValue::from_str(&format!("/ojs/v1/queues/{name}")) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// Current counts of a shown queue (`depth`: jobs not yet finished).
#[derive(Serialize, ToSchema)]
#[schema(as = QueueDetailStats)]
struct Stats {
    depth: i64,
    available: i64,
    active: i64,
    retryable: i64,
    scheduled: i64,
    pending: i64,
    completed_today: i64,
    failed_today: i64,
}

/// The queue object with its `stats`.
#[derive(Serialize, ToSchema)]
#[schema(as = QueueDetail)]
struct Shown<'a> {
    #[serde(flatten)]
    queue: QueueBody<'a>,
    /// The queue object again, wrapped (`$.queue.name`, as the multi-tenancy suite and the
    /// stats endpoint read it).
    #[serde(rename = "queue")]
    wrapped: QueueBody<'a>,
    stats: Stats,
}

/// `GET /ojs/v1/queues/{name}`: the queue with its `stats`.
#[utoipa::path(
    get,
    path = "/ojs/v1/queues/{name}",
    tag = "queues",
    summary = "Read a queue",
    params(QueuePath),
    responses(
        (status = 200, body = Shown<'_>),
        (status = 400, description = "The queue name is invalid."),
        (status = 404, description = "No such queue."),
    )
)]
async fn show(
    State(state): State<AppState>,
    QueuePath(name): QueuePath,
    tenant: Tenant,
) -> Result<Response, ApiError> {
    let QueueStats { queue, counts } = state.broker().queue_stats(&name, tenant.id()).await?;
    let configs = state.broker().queue_configs().await?;
    Ok(ok(Shown {
        queue: QueueBody::of(&queue, &configs),
        wrapped: QueueBody::of(&queue, &configs),
        stats: Stats {
            depth: counts.depth(),
            available: counts.available,
            active: counts.active,
            retryable: counts.retryable,
            scheduled: counts.scheduled,
            pending: counts.pending,
            completed_today: counts.completed_today,
            failed_today: counts.failed_today,
        },
    })
    .into_response())
}

/// What a queue deletion did.
#[derive(Serialize, ToSchema)]
#[schema(as = QueueDeleted)]
struct Deleted<'a> {
    /// Jobs discarded or moved.
    jobs_affected: i64,
    queue: &'a str,
    /// `draining` while active jobs remain, then the queue goes.
    state: QueueDeletionState,
    #[schema(inline)]
    strategy: QueueDeleteStrategy,
    /// With `move`.
    #[serde(skip_serializing_if = "Option::is_none")]
    target_queue: Option<String>,
}

/// The state of a deleted queue.
#[derive(Debug, Clone, Copy)]
enum QueueDeletionState {
    Draining,
    Deleted,
}

names!(QueueDeletionState {
    Draining => "draining",
    Deleted => "deleted",
});

/// The options of a queue deletion, in the body or the query string (each of the body's members
/// wins).
#[derive(IntoParams, ToSchema)]
#[into_params(parameter_in = Query)]
#[schema(as = QueueDeleteRequest)]
struct QueueDelete {
    /// What to do with the queue's waiting jobs; required, here or in the query string.
    #[param(inline, value_type = Option<QueueDeleteStrategy>)]
    #[schema(inline, value_type = QueueDeleteStrategy)]
    strategy: Option<String>,
    /// With `move`: the queue that receives the jobs (not the deleted one).
    #[param(value_type = Option<QueueName>)]
    #[schema(nullable = false, value_type = Option<QueueName>)]
    target_queue: Option<String>,
}

impl QueueDelete {
    /// The options of `body` and `query` (`target_queue` is read only with `move`).
    fn read(body: Option<&Fields<'_>>, query: &QueryParams) -> Result<QueueDelete, ApiError> {
        let option = |key: &str| -> Result<Option<String>, ApiError> {
            match body.map(|f| f.string(key)).transpose()? {
                Some(Some(v)) => Ok(Some(v)),
                _ => Ok(query.get(key).map(str::to_owned)),
            }
        };
        let strategy = option("strategy")?;
        let target_queue = match strategy.as_deref() {
            Some("move") => option("target_queue")?,
            _ => None,
        };
        Ok(QueueDelete {
            strategy,
            target_queue,
        })
    }
}

/// `DELETE /ojs/v1/queues/{name}` with `strategy` (`reject`, `discard`, `move`) and, for
/// `move`, `target_queue`, in the body or the query ([OJS delete queue]): 202.
///
/// [OJS delete queue]: https://github.com/openjobspec/spec/blob/main/spec/ojs-queue-config.md#94-delete-queue
#[utoipa::path(
    delete,
    path = "/ojs/v1/queues/{name}",
    tag = "queues",
    summary = "Delete a queue",
    params(QueuePath, QueueDelete),
    request_body(
        content = Option<QueueDelete>,
        description = "The options; may be omitted when the query string gives them."
    ),
    responses(
        (status = 202, description = "Deleted, or draining until its active jobs end.", body = Deleted<'_>),
        (status = 400, description = "`strategy` or `target_queue` is missing or invalid."),
        (status = 404, description = "No such queue."),
        (status = 409, description = "Strategy `reject` and the queue still has jobs."),
    )
)]
async fn delete_queue(
    State(state): State<AppState>,
    QueuePath(name): QueuePath,
    query: QueryParams,
    OptionalJsonBody(body): OptionalJsonBody,
) -> Result<Response, ApiError> {
    let fields = body.as_ref().map(|b| b.object()).transpose()?;
    let QueueDelete {
        strategy: given,
        target_queue,
    } = QueueDelete::read(fields.as_ref(), &query)?;
    let strategy = match given.as_deref().and_then(QueueDeleteStrategy::from_name) {
        Some(QueueDeleteStrategy::Reject) => DeleteStrategy::Reject,
        Some(QueueDeleteStrategy::Discard) => DeleteStrategy::Discard,
        Some(QueueDeleteStrategy::Move) => {
            let target = target_queue.ok_or_else(|| {
                ApiError::invalid_field(
                    "$.target_queue",
                    "'target_queue' is required with strategy move",
                )
            })?;
            if !is_valid_queue(&target) || target == name {
                return Err(ApiError::invalid_field(
                    "$.target_queue",
                    format!("'target_queue' must be a valid queue name other than {name:?}"),
                ));
            }
            DeleteStrategy::Move(target)
        }
        None => {
            return Err(ApiError::invalid_field(
                "$.strategy",
                format!(
                    "'strategy' is required: reject, discard or move{}",
                    given.map(|o| format!(", not {o:?}")).unwrap_or_default()
                ),
            ));
        }
    };
    let deleted = state.broker().delete_queue(&name, &strategy).await?;
    let body = Deleted {
        jobs_affected: deleted.jobs_affected,
        queue: &name,
        state: if deleted.draining {
            QueueDeletionState::Draining
        } else {
            QueueDeletionState::Deleted
        },
        strategy: match &strategy {
            DeleteStrategy::Reject => QueueDeleteStrategy::Reject,
            DeleteStrategy::Discard => QueueDeleteStrategy::Discard,
            DeleteStrategy::Move(_) => QueueDeleteStrategy::Move,
        },
        target_queue: match &strategy {
            DeleteStrategy::Move(target) => Some(target.clone()),
            _ => None,
        },
    };
    Ok(Ojs(StatusCode::ACCEPTED, body).into_response())
}

/// The queue after a pause or resume.
#[derive(Serialize, ToSchema)]
#[schema(as = QueuePauseResult)]
pub(super) struct PauseResult<'a> {
    queue: PauseSummary<'a>,
    name: &'a str,
    paused: bool,
    state: QueueState,
    /// After a pause: when the queue was paused.
    #[serde(skip_serializing_if = "Option::is_none")]
    paused_at: Option<String>,
    /// After a resume: when the queue was resumed.
    #[serde(skip_serializing_if = "Option::is_none")]
    resumed_at: Option<String>,
}

/// The `queue` of a pause or resume.
#[derive(Serialize, ToSchema)]
#[schema(as = QueuePauseSummary)]
struct PauseSummary<'a> {
    name: &'a str,
    paused: bool,
    state: QueueState,
}

/// `POST /ojs/v1/queues/{name}/pause`.
#[utoipa::path(
    post,
    path = "/ojs/v1/queues/{name}/pause",
    tag = "queues",
    summary = "Pause a queue",
    description = "Workers fetch nothing from a paused queue; enqueues still succeed. Creates \
                   an unknown queue; idempotent. A body, if any, is ignored.",
    params(QueuePath),
    responses(
        (status = 200, description = "Paused.", body = PauseResult<'_>),
        (status = 400, description = "The queue name is invalid."),
    )
)]
pub(super) async fn pause(
    State(state): State<AppState>,
    QueuePath(name): QueuePath,
) -> Result<Response, ApiError> {
    set_paused(&state, &name, true).await
}

/// `POST /ojs/v1/queues/{name}/resume`.
#[utoipa::path(
    post,
    path = "/ojs/v1/queues/{name}/resume",
    tag = "queues",
    summary = "Resume a queue",
    description = "Creates an unknown queue; idempotent. A body, if any, is ignored.",
    params(QueuePath),
    responses(
        (status = 200, description = "Resumed.", body = PauseResult<'_>),
        (status = 400, description = "The queue name is invalid."),
    )
)]
pub(super) async fn resume(
    State(state): State<AppState>,
    QueuePath(name): QueuePath,
) -> Result<Response, ApiError> {
    set_paused(&state, &name, false).await
}

/// Pause or resume ([OJS pause queue], [resume queue]): creates an unknown queue, idempotent.
///
/// [OJS pause queue]: https://github.com/openjobspec/spec/blob/main/spec/ojs-http-binding.md#113-pause-queue
/// [resume queue]: https://github.com/openjobspec/spec/blob/main/spec/ojs-http-binding.md#114-resume-queue
async fn set_paused(state: &AppState, name: &str, paused: bool) -> Result<Response, ApiError> {
    let queue = state.broker().set_queue_paused(name, paused).await?;
    let at = |t: Option<DateTime<Utc>>, now: bool| t.filter(|_| now).map(timestamp::format);
    Ok(ok(PauseResult {
        queue: PauseSummary {
            name: &queue.name,
            paused,
            state: queue.state,
        },
        name: &queue.name,
        paused,
        state: queue.state,
        paused_at: at(queue.paused_at, paused),
        resumed_at: at(queue.resumed_at, !paused),
    })
    .into_response())
}
