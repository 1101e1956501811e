//! Events over HTTP: `GET /ojs/v1/events` (polling with a cursor, see [OJS event polling]), the
//! SSE streams of one job or one queue (see [OJS SSE binding]), and a job's execution history
//! (`GET /ojs/v1/jobs/{id}/history`, see [OJS execution history]), read from the same log.
//!
//! [OJS execution history]: https://github.com/openjobspec/spec/blob/main/spec/ojs-execution-history.md
//! [OJS event polling]: https://github.com/openjobspec/spec/blob/main/spec/ojs-events.md#64-http-polling-optional
//! [OJS SSE binding]: https://github.com/openjobspec/spec/blob/main/spec/ojs-realtime.md#2-server-sent-events-sse-binding

use axum::extract::State;
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::json;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::auth::Caller;
use super::error::ApiError;
use super::extract::{JobIdPath, QueuePath};
use super::query::{ADMIN, Page, Pagination, QueryParams};

use super::sse::{self, Channel};
use super::tenancy::Tenant;
use super::{AppState, ok};
use crate::broker::EventFilter;
use crate::events::{EventKey, WireEvent};
use crate::job::{JobId, JobState};
use crate::wire::timestamp;

/// Default and largest `limit` of a poll.
const DEFAULT_POLL_LIMIT: i64 = 100;
const MAX_POLL_LIMIT: i64 = 1_000;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(poll))
        .routes(routes!(job_stream))
        .routes(routes!(queue_stream))
        .routes(routes!(history))
        .routes(routes!(lineage))
}

/// The position of the event whose id (`evt_...`) is `text`, the value of query parameter
/// `name`: a 400 for a malformed id or one no longer retained.
async fn position_of(
    state: &AppState,
    name: &str,
    text: &str,
) -> Result<crate::broker::Position, ApiError> {
    let field = format!("query.{name}");
    let key = EventKey::parse(text).ok_or_else(|| {
        ApiError::invalid_field(
            &field,
            format!("'{name}' must be an event id (evt_...), got {text:?}"),
        )
    })?;
    state.broker().locate_event(key).await?.ok_or_else(|| {
        ApiError::invalid_field(
            &field,
            format!("event {text} is no longer retained; read again without '{name}' to start from the oldest retained event"),
        )
        .with_details(json!({"field": field, "reason": "cursor_expired"}))
    })
}

/// The query of `GET /ojs/v1/events`. Without `page`/`per_page` (or with `after`) it is the
/// cursor form; with `page` or `per_page` and no `after`, the paged newest-first form. Lists
/// are comma-separated; an empty value counts as absent.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // documentation: read by `poll` and `newest_first`
struct PollQuery {
    /// Cursor form: the id (`evt_...`) of the last event seen; events after it are returned.
    /// Without it, from the oldest retained event. An id no longer retained is a 400
    /// (`details.reason: cursor_expired`).
    after: Option<String>,
    /// Event types, comma-separated; `prefix.*` matches a prefix (e.g. `job.*`).
    types: Option<String>,
    /// The same as `types` (used when `types` is absent).
    r#type: Option<String>,
    /// Queues, comma-separated.
    queues: Option<String>,
    /// The same as `queues` (used when `queues` is absent).
    queue: Option<String>,
    /// Job types, comma-separated.
    job_types: Option<String>,
    /// Cursor form only: one job's events (a job id; a malformed id is a 400). Refused (400)
    /// in the paged form.
    #[param(value_type = Option<JobId>)]
    job_id: Option<String>,
    /// Cursor form: most events returned, default 100, clamped to 1..=1000. Paged form: the
    /// page size when `per_page` is absent, default 20, clamped to 1..=100.
    #[param(minimum = 0)]
    limit: Option<i64>,
    /// Paged form: the page, from 1.
    #[param(minimum = 1)]
    page: Option<i64>,
    /// Paged form: the page size, default 20, clamped to 1..=100.
    #[param(minimum = 0)]
    per_page: Option<i64>,
    /// Paged form: items skipped, when neither `cursor` nor `page` is given.
    #[param(minimum = 0)]
    offset: Option<i64>,
    /// Paged form: a `pagination.next_cursor` of an earlier page (wins over `page` and
    /// `offset`).
    cursor: Option<String>,
}

/// An OJS event envelope (CloudEvents-style).
#[derive(ToSchema)]
#[allow(dead_code)] // a schema: the server writes this with `WireEvent`
struct EventEnvelope {
    /// Always `1.0`.
    specversion: String,
    /// `evt_<uuidv7>`; usable as `after`.
    id: String,
    /// E.g. `job.completed`, `job.heartbeat`.
    r#type: String,
    /// Who wrote the event.
    source: String,
    /// RFC 3339.
    time: String,
    /// What the event is about, when it names something.
    subject: Option<String>,
    /// Always `application/json`.
    datacontenttype: String,
    /// The event's payload.
    #[schema(value_type = Object)]
    data: serde_json::Value,
}

/// An event envelope of the paged form: the envelope plus `timestamp` (its `time` again).
#[derive(ToSchema)]
#[allow(dead_code)] // a schema: the server writes this with `WireEvent::with_timestamp`
struct TimestampedEventEnvelope {
    #[serde(flatten)]
    envelope: EventEnvelope,
    /// The same as `time`.
    timestamp: String,
}

/// The cursor form's body: events in delivery order.
#[derive(Serialize, ToSchema)]
#[schema(as = EventPollBody)]
struct PollBody<'a> {
    #[schema(value_type = Vec<EventEnvelope>)]
    events: Vec<WireEvent<'a>>,
    /// The id of the last event returned (absent when none is): the next `after`.
    #[serde(skip_serializing_if = "Option::is_none")]
    cursor: Option<String>,
    /// Whether more events follow the last one returned.
    has_more: bool,
}

/// The paged form's body: newest first.
#[derive(Serialize, ToSchema)]
#[schema(as = EventPageBody)]
struct PagedBody<'a> {
    #[schema(value_type = Vec<TimestampedEventEnvelope>)]
    items: Vec<WireEvent<'a>>,
    pagination: Pagination,
}

/// The body of `GET /ojs/v1/events`: the cursor form or the paged form.
#[derive(Serialize, ToSchema)]
#[schema(as = EventList)]
#[serde(untagged)]
enum EventList<'a> {
    Poll(PollBody<'a>),
    Page(PagedBody<'a>),
}

/// `types` as exact names and `prefix.*` prefixes.
fn type_filter(filter: &mut EventFilter, types: Option<Vec<String>>) {
    for t in types.unwrap_or_default() {
        match t.strip_suffix('*') {
            Some(prefix) => filter.type_prefixes.push(prefix.to_owned()),
            None => filter.types.push(t),
        }
    }
}

/// `GET /ojs/v1/events?after=&types=&queues=&job_types=&job_id=&limit=`: events in delivery
/// order after the cursor (from the oldest retained one without it). With `page` or
/// `per_page` (and no `after`), the paged form instead ([`newest_first`]).
#[utoipa::path(
    get,
    path = "/ojs/v1/events",
    operation_id = "poll_events",
    tag = "events",
    summary = "Poll the event log",
    params(PollQuery),
    responses(
        (status = 200, description = "The cursor form (`{events, cursor, has_more}`), or with \
            `page`/`per_page` and no `after` the paged newest-first form (`{items, pagination}`).",
            body = EventList<'static>),
        (status = 400, description = "A malformed parameter, an `after` no longer retained, or \
            `job_id` in the paged form."),
    )
)]
async fn poll(
    State(state): State<AppState>,
    tenant: Tenant,
    query: QueryParams,
) -> Result<Response, ApiError> {
    let mut filter = EventFilter {
        queues: query.list("queues").or_else(|| query.list("queue")),
        job_types: query.list("job_types"),
        ..EventFilter::default()
    };
    type_filter(
        &mut filter,
        query.list("types").or_else(|| query.list("type")),
    );
    if query.get("after").is_none()
        && (query.get("page").is_some() || query.get("per_page").is_some())
    {
        if tenant.id().is_some() {
            // Its total would count every tenant's events.
            return Err(ApiError::invalid_field(
                "query.page",
                "a request acting as a tenant reads events with the cursor form (without page/per_page)",
            ));
        }
        return newest_first(&state, &filter, &query).await;
    }
    if let Some(id) = query.get("job_id") {
        let job_id: crate::job::JobId = id.parse().map_err(|_| {
            ApiError::invalid_field("query.job_id", format!("'job_id' is not a job id: {id:?}"))
        })?;
        filter.job_id = Some(job_id.0);
    }
    let limit = query
        .count("limit")?
        .unwrap_or(DEFAULT_POLL_LIMIT)
        .clamp(1, MAX_POLL_LIMIT);
    let after = match query.get("after") {
        None => None,
        Some(text) => Some(position_of(&state, "after", text).await?),
    };
    let mut events = state
        .broker()
        .events_after(&filter, after, limit + 1)
        .await?;
    let has_more = events.len() as i64 > limit;
    events.truncate(limit as usize);
    // The cursor is the last event read, shown or not, so that a tenant's next poll goes on
    // past other tenants' events (its page may be short, even empty, with `has_more`).
    let cursor = events.last().map(|e| EventKey::of(e).to_id());
    if let Some(tenant) = tenant.id() {
        events = state.broker().tenant_events(tenant, events).await?;
    }
    Ok(ok(EventList::Poll(PollBody {
        cursor,
        events: events.iter().map(WireEvent::of).collect(),
        has_more,
    }))
    .into_response())
}

/// The paged form of `GET /ojs/v1/events` that the OJS admin UI reads: newest first,
/// `page`/`per_page` (or `offset`/`limit`), filtered by `type`/`types`, `queue`/`queues` and
/// `job_types`, as `{items, pagination}`. Each item is the event envelope plus `timestamp`
/// (its `time` again).
async fn newest_first(
    state: &AppState,
    filter: &EventFilter,
    query: &QueryParams,
) -> Result<Response, ApiError> {
    if filter.job_id.is_some() || query.get("job_id").is_some() {
        return Err(ApiError::invalid_field(
            "query.job_id",
            "'job_id' is served by the cursor form (without page/per_page) and the job's own stream",
        ));
    }
    let page = Page::from_query(query, ADMIN)?;
    let (events, total) = state
        .broker()
        .events_page(filter, page.offset, page.limit)
        .await?;
    Ok(ok(EventList::Page(PagedBody {
        items: events.iter().map(WireEvent::with_timestamp).collect(),
        pagination: page.describe(total),
    }))
    .into_response())
}

/// `GET /ojs/v1/jobs/{id}/events`: the job's state changes and heartbeats. For a finished job:
/// its current state, then the stream ends.
#[utoipa::path(
    get,
    path = "/ojs/v1/jobs/{id}/events",
    operation_id = "stream_job_events",
    tag = "events",
    summary = "Stream a job's events (SSE)",
    params(JobIdPath, sse::EventTypes, sse::Resume),
    responses(
        (status = 200, content_type = "text/event-stream", body = String,
            description = "Server-sent events, after a first `retry: 3000`; `: heartbeat` \
            comments keep the connection alive. `job.state_changed` (`{job_id, queue, type, \
            from, to, timestamp}`) and `job.heartbeat` (`{job_id, worker_id, timestamp}`) carry \
            the event id as `id:`; `system.gap` (`{channel, gap_start, gap_end, \
            estimated_missed_count}`) and `server.shutdown` (`{reason, grace_period_ms}`) have \
            none. The stream ends after the job's terminal state; for a job already finished \
            (and no `Last-Event-ID`) it is just that state (`from: null`)."),
        (status = 404, description = "No such job."),
    )
)]
async fn job_stream(
    State(state): State<AppState>,
    JobIdPath(id): JobIdPath,
    resume: sse::Resume,
    caller: Caller,
    types: sse::EventTypes,
) -> Result<Response, ApiError> {
    let job = state.broker().info(id).await?;
    caller.check_queue(&job.queue)?;
    if job.state.is_terminal() && resume.0.is_none() {
        let data = json!({
            "job_id": job.id.to_string(),
            "queue": job.queue,
            "type": job.r#type,
            "from": null,
            "to": job.state,
            "timestamp": timestamp::format(
                job.completed_at.or(job.cancelled_at).or(job.discarded_at).unwrap_or(job.created_at)
            ),
        });
        return Ok(sse::finished(
            Event::default()
                .event("job.state_changed")
                .data(data.to_string()),
        ));
    }
    Ok(sse::events(&state, Channel::Job(id.0), resume, types))
}

/// `GET /ojs/v1/queues/{name}/events`: state changes and heartbeats of the queue's jobs.
#[utoipa::path(
    get,
    path = "/ojs/v1/queues/{name}/events",
    operation_id = "stream_queue_events",
    tag = "events",
    summary = "Stream a queue's events (SSE)",
    params(QueuePath, sse::EventTypes, sse::Resume),
    responses(
        (status = 200, content_type = "text/event-stream", body = String,
            description = "Server-sent events of the queue's jobs, after a first \
            `retry: 3000`; `: heartbeat` comments keep the connection alive. \
            `job.state_changed` (`{job_id, queue, type, from, to, timestamp}`) and \
            `job.heartbeat` (`{job_id, worker_id, timestamp}`) carry the event id as `id:`; \
            `system.gap` (`{channel, gap_start, gap_end, estimated_missed_count}`) and \
            `server.shutdown` (`{reason, grace_period_ms}`) have none."),
        (status = 400, description = "The queue name is invalid."),
        (status = 404, description = "No such queue."),
    )
)]
async fn queue_stream(
    State(state): State<AppState>,
    QueuePath(name): QueuePath,
    tenant: Tenant,
    resume: sse::Resume,
    types: sse::EventTypes,
) -> Result<Response, ApiError> {
    let known = state.broker().queue_known(&name).await?;
    if !known {
        return Err(ApiError::not_found("queue", &name));
    }
    Ok(sse::events(
        &state,
        Channel::Queue(name, tenant.0),
        resume,
        types,
    ))
}

/// Default and largest `limit` of a history page.
const DEFAULT_HISTORY_LIMIT: i64 = 50;
const MAX_HISTORY_LIMIT: i64 = 1_000;

/// A page of a job's history.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // documentation: read by `history`
struct HistoryQuery {
    /// Events per page (default 50; more than 1000 is cut to 1000).
    #[param(minimum = 0)]
    limit: Option<i64>,
    /// `next_cursor` of the previous page: the events after it.
    cursor: Option<String>,
}

/// `GET /ojs/v1/jobs/{id}/history`: the job's events, oldest first, from the event log.
#[utoipa::path(
    get,
    path = "/ojs/v1/jobs/{id}/history",
    operation_id = "get_job_history",
    tag = "events",
    summary = "A job's execution history",
    params(JobIdPath, HistoryQuery),
    responses(
        (status = 200, body = HistoryBody<'static>, description = "The job's events, oldest \
            first: its creation, each attempt started, completed or failed, each change of \
            state, its end, checkpoints and heartbeats."),
        (status = 400, description = "A malformed `limit` or `cursor`, or a `cursor` no longer \
            retained."),
        (status = 404, description = "No such job."),
    )
)]
async fn history(
    State(state): State<AppState>,
    JobIdPath(id): JobIdPath,
    caller: Caller,
    query: QueryParams,
) -> Result<Response, ApiError> {
    let limit = query
        .count("limit")?
        .unwrap_or(DEFAULT_HISTORY_LIMIT)
        .clamp(1, MAX_HISTORY_LIMIT);
    let after = match query.get("cursor") {
        None => None,
        Some(text) => Some(position_of(&state, "cursor", text).await?),
    };
    let job = state.broker().info(id).await?;
    caller.check_queue(&job.queue)?;
    caller.check_job(&state, id).await?;
    let (mut events, total) = state.broker().job_history(id, after, limit + 1).await?;
    let has_more = events.len() as i64 > limit;
    events.truncate(limit as usize);
    let next_cursor = has_more
        .then(|| events.last().map(|e| EventKey::of(e).to_id()))
        .flatten();
    Ok(ok(HistoryBody {
        job_id: id.to_string(),
        events: events.iter().map(HistoryEvent::of).collect(),
        next_cursor,
        total,
    })
    .into_response())
}

/// A page of a job's history.
#[derive(Serialize, ToSchema)]
#[schema(as = JobHistory)]
struct HistoryBody<'a> {
    #[schema(value_type = JobId)]
    job_id: String,
    events: Vec<HistoryEvent<'a>>,
    /// The `cursor` of the next page (`null`: this is the last one).
    next_cursor: Option<String>,
    /// How many events the job has in all.
    total: i64,
}

/// One event of a job's history.
#[derive(Serialize, ToSchema)]
#[schema(as = JobHistoryEvent)]
struct HistoryEvent<'a> {
    /// The event's id (`evt_...`), as the event log and its streams give it.
    id: String,
    #[schema(value_type = JobId)]
    job_id: String,
    /// The history's name for it: `job.created`, `job.attempt_started`,
    /// `job.attempt_completed`, `job.attempt_failed`, `job.cancelled`, `job.discarded`,
    /// `job.checkpoint_saved`, `job.state_changed` for another change of state, else the
    /// event log's own type.
    event_type: &'a str,
    /// The event log's type (`job.enqueued`, `job.started`, ...).
    r#type: &'a str,
    #[schema(value_type = crate::http::openapi::values::Timestamp)]
    timestamp: String,
    /// The state the job left, for a change of state.
    #[serde(skip_serializing_if = "Option::is_none")]
    from: Option<JobState>,
    /// The state the job entered, for a change of state.
    #[serde(skip_serializing_if = "Option::is_none")]
    to: Option<JobState>,
    /// Who did it: the `worker` named in the event, a `client` of the API, or the `system`
    /// (the server's own maintenance).
    actor: Actor,
    /// The event's payload, as the event log has it.
    #[schema(value_type = Object)]
    data: &'a serde_json::value::RawValue,
}

/// Who caused a history event.
#[derive(Serialize, ToSchema)]
#[schema(as = JobHistoryActor)]
struct Actor {
    /// `worker`, `client` or `system`.
    r#type: &'static str,
    /// The worker's id, or the event's source (the server instance).
    id: String,
}

impl<'a> HistoryEvent<'a> {
    fn of(e: &'a crate::broker::EventRow) -> HistoryEvent<'a> {
        let event_type = match (e.r#type.as_str(), e.from_state, e.to_state) {
            ("job.enqueued" | "job.scheduled", None, _) => "job.created",
            ("job.started", ..) => "job.attempt_started",
            ("job.completed", ..) => "job.attempt_completed",
            ("job.failed", ..) => "job.attempt_failed",
            ("job.cancelled", ..) => "job.cancelled",
            ("job.discarded", ..) => "job.discarded",
            ("job.checkpointed", ..) => "job.checkpoint_saved",
            ("job.waiting", ..) => "job.waiting",
            ("job.signalled", ..) => "job.signalled",
            (_, _, Some(_)) => "job.state_changed",
            (other, ..) => other,
        };
        let worker = serde_json::from_str::<serde_json::Value>(e.data.0.get())
            .ok()
            .and_then(|d| d.get("worker_id")?.as_str().map(str::to_owned));
        let actor = match worker {
            Some(id) => Actor {
                r#type: "worker",
                id,
            },
            None if e.source.contains("/api/") => Actor {
                r#type: "client",
                id: e.source.clone(),
            },
            None => Actor {
                r#type: "system",
                id: e.source.clone(),
            },
        };
        HistoryEvent {
            id: EventKey::of(e).to_id(),
            job_id: e.job_id.map(|id| id.to_string()).unwrap_or_default(),
            event_type,
            r#type: &e.r#type,
            timestamp: timestamp::format(e.time),
            from: e.from_state,
            to: e.to_state,
            actor,
            data: &e.data.0,
        }
    }
}

/// `GET /ojs/v1/jobs/{id}/lineage`: where the job came from and what it leads to.
#[utoipa::path(
    get,
    path = "/ojs/v1/jobs/{id}/lineage",
    operation_id = "get_job_lineage",
    tag = "events",
    summary = "A job's lineage",
    params(JobIdPath),
    responses(
        (status = 200, body = LineageBody, description = "The job's parents and children in \
            its workflow, its root, the cron entry that enqueued it, and its attempts."),
        (status = 404, description = "No such job."),
    )
)]
async fn lineage(
    State(state): State<AppState>,
    JobIdPath(id): JobIdPath,
    caller: Caller,
) -> Result<Response, ApiError> {
    caller.check_job(&state, id).await?;
    let row = state.broker().job_lineage(id).await?;
    Ok(ok(LineageBody::of(id, row)).into_response())
}

/// A job's lineage.
#[derive(Serialize, ToSchema)]
#[schema(as = JobLineage)]
struct LineageBody {
    #[schema(value_type = JobId)]
    job_id: String,
    /// The job it came from: its own `parent_id` attribute, else the first workflow job it
    /// waited for.
    parent_id: Option<String>,
    /// Every workflow job it waited for (a chain's previous step, a dag's dependencies, a
    /// batch's members for a callback), in step order.
    parent_ids: Vec<String>,
    /// Its workflow.
    workflow_id: Option<String>,
    /// The workflow's type (`chain`, `group`, `batch`, `dag`) and the job's step in it.
    workflow_type: Option<String>,
    workflow_step: Option<i32>,
    /// The first job of its line: its own `root_id` attribute, else its chain's first step,
    /// else the job itself when it has no parent.
    root_id: Option<String>,
    /// The workflow jobs that wait for it (direct children only), in step order.
    children: Vec<LineageChild>,
    /// The cron entry whose run enqueued it.
    #[serde(skip_serializing_if = "Option::is_none")]
    cron: Option<CronOrigin>,
    /// Attempts made so far (its retries are attempts of the same job).
    attempts: i32,
}

/// A direct child in a lineage.
#[derive(Serialize, ToSchema)]
#[schema(as = JobLineageChild)]
struct LineageChild {
    #[schema(value_type = JobId)]
    job_id: String,
}

/// The cron run that enqueued a job.
#[derive(Serialize, ToSchema)]
#[schema(as = JobLineageCron)]
struct CronOrigin {
    name: String,
    /// The slot of the run.
    #[schema(value_type = Option<crate::http::openapi::values::Timestamp>)]
    scheduled_time: Option<String>,
}

impl LineageBody {
    fn of(id: JobId, row: crate::broker::LineageRow) -> LineageBody {
        let parent_ids: Vec<String> = row.parents.iter().map(ToString::to_string).collect();
        let parent_id = row.parent_attr.or_else(|| parent_ids.first().cloned());
        let root_id = row
            .root_attr
            .or_else(|| row.chain_root.map(|r| r.to_string()))
            .or_else(|| parent_id.is_none().then(|| id.to_string()));
        LineageBody {
            job_id: id.to_string(),
            parent_id,
            parent_ids,
            workflow_id: row.workflow_id.map(|w| w.to_string()),
            workflow_type: row.workflow_type,
            workflow_step: row.step,
            root_id,
            children: row
                .children
                .iter()
                .map(|c| LineageChild {
                    job_id: c.to_string(),
                })
                .collect(),
            cron: row.cron_name.map(|name| CronOrigin {
                name,
                scheduled_time: row.cron_scheduled_time,
            }),
            attempts: row.attempt,
        }
    }
}
