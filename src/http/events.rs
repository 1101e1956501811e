//! Events over HTTP: `GET /ojs/v1/events` (polling with a cursor, see [OJS event polling]) and
//! the SSE streams of one job or one queue (see [OJS SSE binding]).
//!
//! [OJS event polling]: https://github.com/openjobspec/spec/blob/main/spec/ojs-events.md#64-http-polling-optional
//! [OJS SSE binding]: https://github.com/openjobspec/spec/blob/main/spec/ojs-realtime.md#2-server-sent-events-sse-binding

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::json;
use tokio::sync::{broadcast, mpsc};
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::ReceiverStream;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::auth::Caller;
use super::error::ApiError;
use super::extract::JobIdPath;
use super::jobs::JobIdParam;
use super::query::{ADMIN, Page, Pagination, QueryParams};
use super::{AppState, ok};
use crate::broker::{EventFilter, EventRow, Position};
use crate::events::{EventKey, WireEvent};
use crate::job::JobState;
use crate::wire::timestamp;

/// Default and largest `limit` of a poll.
const DEFAULT_POLL_LIMIT: i64 = 100;
const MAX_POLL_LIMIT: i64 = 1_000;
/// Events read per statement while a stream replays.
const REPLAY_BATCH: i64 = 500;
/// SSE `retry:` sent first, and the keep-alive comment period.
const SSE_RETRY: Duration = Duration::from_millis(3_000);
const SSE_KEEP_ALIVE: Duration = Duration::from_secs(15);

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(poll))
        .routes(routes!(job_stream))
        .routes(routes!(queue_stream))
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
#[derive(ToSchema, serde::Deserialize)]
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
#[derive(ToSchema, serde::Deserialize)]
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
#[derive(ToSchema)]
#[schema(as = EventList)]
#[serde(untagged)]
#[allow(dead_code)] // documentation: the two bodies `poll` writes
enum EventList<'a> {
    Poll(PollBody<'a>),
    Page(PagedBody<'a>),
}

/// The queue name of a path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // documentation: read by `queue_stream`
struct QueueNameParam {
    /// The queue's name: 1-128 lowercase letters, digits, `-` and `.`, starting with a letter
    /// or digit.
    name: String,
}

/// The query of an event stream.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // documentation: read by `stream`
struct StreamQuery {
    /// SSE event types to send, comma-separated (`job.state_changed`, `job.heartbeat`,
    /// `system.gap`, `server.shutdown`); all when absent.
    event_types: Option<String>,
}

/// The headers of an event stream.
#[derive(IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)] // documentation: read by `stream` and `job_stream`
struct StreamHeaders {
    /// Resume after this event id (`evt_...`); an id no longer retained (or not one this
    /// server issued) starts with a `system.gap` event. Without it, only new events.
    #[param(rename = "Last-Event-ID")]
    last_event_id: Option<String>,
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
async fn poll(State(state): State<AppState>, query: QueryParams) -> Result<Response, ApiError> {
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
        Some(text) => {
            let key = EventKey::parse(text).ok_or_else(|| {
                ApiError::invalid_field(
                    "query.after",
                    format!("'after' must be an event id (evt_...), got {text:?}"),
                )
            })?;
            let position = state.broker().locate_event(key).await?.ok_or_else(|| {
                    ApiError::invalid_field(
                        "query.after",
                        format!("event {text} is no longer retained; poll again without 'after' to start from the oldest retained event"),
                    )
                    .with_details(json!({"field": "query.after", "reason": "cursor_expired"}))
                })?;
            Some(position)
        }
    };
    let mut events = state
        .broker()
        .events_after(&filter, after, limit + 1)
        .await?;
    let has_more = events.len() as i64 > limit;
    events.truncate(limit as usize);
    Ok(ok(PollBody {
        cursor: events.last().map(|e| EventKey::of(e).to_id()),
        events: events.iter().map(WireEvent::of).collect(),
        has_more,
    })
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
    Ok(ok(PagedBody {
        items: events.iter().map(WireEvent::with_timestamp).collect(),
        pagination: page.describe(total),
    })
    .into_response())
}

/// What one stream follows.
#[derive(Debug, Clone)]
enum Channel {
    Job(uuid::Uuid),
    Queue(String),
}

impl Channel {
    fn filter(&self) -> EventFilter {
        match self {
            Channel::Job(id) => EventFilter {
                job_id: Some(*id),
                ..EventFilter::default()
            },
            Channel::Queue(name) => EventFilter {
                queues: Some(vec![name.clone()]),
                ..EventFilter::default()
            },
        }
    }

    fn matches(&self, e: &EventRow) -> bool {
        match self {
            Channel::Job(id) => e.job_id == Some(*id),
            Channel::Queue(name) => e.queue.as_deref() == Some(name.as_str()),
        }
    }

    fn name(&self) -> String {
        match self {
            Channel::Job(id) => format!("job:{id}"),
            Channel::Queue(name) => format!("queue:{name}"),
        }
    }
}

/// The SSE form of a stored event: `job.state_changed` for the event that records a state
/// change, `job.heartbeat`, nothing for the rest.
fn sse_event(e: &EventRow) -> Option<(&'static str, serde_json::Value)> {
    let job_id = e.job_id.map(|id| id.to_string());
    if let Some(to) = e.to_state {
        return Some((
            "job.state_changed",
            json!({
                "job_id": job_id,
                "queue": e.queue,
                "type": e.job_type,
                "from": e.from_state,
                "to": to,
                "timestamp": timestamp::format(e.time),
            }),
        ));
    }
    if e.r#type == "job.heartbeat" {
        let data: serde_json::Value = serde_json::from_str(e.data.0.get()).unwrap_or_default();
        return Some((
            "job.heartbeat",
            json!({
                "job_id": job_id,
                "worker_id": data.get("worker_id"),
                "timestamp": timestamp::format(e.time),
            }),
        ));
    }
    None
}

/// A stream's sending side: the SSE event types it wants and where its events go.
struct Sink {
    tx: mpsc::Sender<Event>,
    types: Option<Vec<String>>,
}

impl Sink {
    /// Sends an event unless filtered out; `false` when the client is gone.
    async fn send(&self, kind: &str, data: &serde_json::Value, id: Option<String>) -> bool {
        if self
            .types
            .as_ref()
            .is_some_and(|types| !types.iter().any(|t| t == kind))
        {
            return true;
        }
        let mut event = Event::default().event(kind).data(data.to_string());
        if let Some(id) = id {
            event = event.id(id);
        }
        self.tx.send(event).await.is_ok()
    }

    /// Sends a stored event; returns whether to go on (`false`: client gone or job finished).
    async fn send_row(&self, channel: &Channel, e: &EventRow) -> bool {
        let Some((kind, data)) = sse_event(e) else {
            return true;
        };
        if !self.send(kind, &data, Some(EventKey::of(e).to_id())).await {
            return false;
        }
        !matches!(channel, Channel::Job(_)) || !e.to_state.is_some_and(JobState::is_terminal)
    }
}

/// Sends the stored events of `channel` after `*last`; returns whether to go on.
async fn replay(
    state: &AppState,
    channel: &Channel,
    sink: &Sink,
    last: &mut Option<Position>,
) -> crate::Result<bool> {
    let filter = channel.filter();
    loop {
        let batch = state
            .broker()
            .events_after(&filter, *last, REPLAY_BATCH)
            .await?;
        for e in &batch {
            *last = Some(e.position);
            if !sink.send_row(channel, e).await {
                return Ok(false);
            }
        }
        if (batch.len() as i64) < REPLAY_BATCH {
            return Ok(true);
        }
    }
}

/// Runs one stream: replay from the resume point, then live events, until the client leaves,
/// the job finishes or the server shuts down.
async fn run_stream(
    state: AppState,
    channel: Channel,
    mut live: broadcast::Receiver<std::sync::Arc<EventRow>>,
    resume: Option<String>,
    sink: Sink,
) {
    let mut last: Option<Position> = match resume {
        None => match state.broker().event_head().await {
            Ok(head) => head,
            Err(e) => {
                tracing::warn!(error = %e, "event stream could not start");
                return;
            }
        },
        Some(text) => {
            let key = EventKey::parse(&text);
            let position = match key {
                Some(key) => state.broker().locate_event(key).await.ok().flatten(),
                None => None,
            };
            if position.is_none() {
                let gap = json!({
                    "channel": channel.name(),
                    "gap_start": key.and_then(EventKey::time).map(timestamp::format),
                    "gap_end": timestamp::format(chrono::Utc::now()),
                    "estimated_missed_count": null,
                });
                if !sink.send("system.gap", &gap, None).await {
                    return;
                }
            }
            position
        }
    };
    match replay(&state, &channel, &sink, &mut last).await {
        Ok(true) => {}
        Ok(false) => return,
        Err(e) => {
            tracing::warn!(error = %e, "event stream replay failed");
            return;
        }
    }
    let shutdown = state.shutdown().clone();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => {
                let grace = state.settings().shutdown_timeout.as_millis() as u64;
                sink.send("server.shutdown", &json!({"reason": "shutdown", "grace_period_ms": grace}), None).await;
                return;
            }
            () = sink.tx.closed() => return,
            received = live.recv() => match received {
                Ok(e) => {
                    if last.is_some_and(|l| e.position <= l) || !channel.matches(&e) {
                        continue;
                    }
                    last = Some(e.position);
                    if !sink.send_row(&channel, &e).await {
                        return;
                    }
                }
                // Fell behind the in-memory tail: catch up from the database.
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    match replay(&state, &channel, &sink, &mut last).await {
                        Ok(true) => {}
                        Ok(false) => return,
                        Err(e) => {
                            tracing::warn!(error = %e, "event stream catch-up failed");
                            return;
                        }
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
        }
    }
}

/// Starts a stream and returns the SSE response.
fn stream(
    state: &AppState,
    channel: Channel,
    headers: &HeaderMap,
    query: &QueryParams,
) -> Response {
    let resume = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .filter(|v| !v.is_empty());
    let (tx, rx) = mpsc::channel::<Event>(256);
    // Subscribe before reading anything, so nothing falls between replay and live.
    let live = state.events().subscribe();
    let sink = Sink {
        tx,
        types: query.list("event_types"),
    };
    tokio::spawn(run_stream(state.clone(), channel, live, resume, sink));
    let first = tokio_stream::once(Event::default().retry(SSE_RETRY));
    let events = first
        .chain(ReceiverStream::new(rx))
        .map(Ok::<_, Infallible>);
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(SSE_KEEP_ALIVE).text("heartbeat"))
        .into_response()
}

/// `GET /ojs/v1/jobs/{id}/events`: the job's state changes and heartbeats. For a finished job:
/// its current state, then the stream ends.
#[utoipa::path(
    get,
    path = "/ojs/v1/jobs/{id}/events",
    operation_id = "stream_job_events",
    tag = "events",
    summary = "Stream a job's events (SSE)",
    params(JobIdParam, StreamQuery, StreamHeaders),
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
    headers: HeaderMap,
    caller: Caller,
    query: QueryParams,
) -> Result<Response, ApiError> {
    let job = state.broker().info(id).await?;
    caller.check_queue(&job.queue)?;
    if job.state.is_terminal() && headers.get("last-event-id").is_none() {
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
        let events = [
            Event::default().retry(SSE_RETRY),
            Event::default()
                .event("job.state_changed")
                .data(data.to_string()),
        ];
        return Ok(Sse::new(tokio_stream::iter(events).map(Ok::<_, Infallible>)).into_response());
    }
    Ok(stream(&state, Channel::Job(id.0), &headers, &query))
}

/// `GET /ojs/v1/queues/{name}/events`: state changes and heartbeats of the queue's jobs.
#[utoipa::path(
    get,
    path = "/ojs/v1/queues/{name}/events",
    operation_id = "stream_queue_events",
    tag = "events",
    summary = "Stream a queue's events (SSE)",
    params(QueueNameParam, StreamQuery, StreamHeaders),
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
    Path(name): Path<String>,
    headers: HeaderMap,
    query: QueryParams,
) -> Result<Response, ApiError> {
    super::queues::queue_path(&name)?;
    let known = state.broker().queue_known(&name).await?;
    if !known {
        return Err(ApiError::not_found("queue", &name));
    }
    Ok(stream(&state, Channel::Queue(name), &headers, &query))
}
