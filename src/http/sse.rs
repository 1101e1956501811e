//! Server-sent event streams ([OJS SSE binding]): the event stream of a job or a queue
//! ([`events`]: replay from `Last-Event-ID`, then live events from the process's shared
//! [`EventTail`](crate::events::EventTail)), a job's progress stream ([`progress`]), and its
//! progress-then-outcome stream ([`outcome`], the OJS results extension). Every
//! stream starts with `retry:` and is kept alive by comments; each runs on a task of its own
//! that ends when the client leaves, the stream's subject is finished, or the server shuts down.
//!
//! [OJS SSE binding]: https://github.com/openjobspec/spec/blob/main/spec/ojs-realtime.md#2-server-sent-events-sse-binding

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tokio::sync::{broadcast, mpsc};
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::ReceiverStream;

use utoipa::IntoParams;

use super::AppState;
use super::error::ApiError;
use super::query::QueryParams;
use crate::broker::{EventFilter, EventRow, Position, Progress, ResultOutcome};
use crate::events::EventKey;
use crate::job::JobState;
use crate::wire::timestamp;

/// SSE `retry:` sent first, and the keep-alive comment period.
const RETRY: Duration = Duration::from_millis(3_000);
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// Events read per statement while an event stream replays.
const REPLAY_BATCH: i64 = 500;
/// How often a progress stream looks for a new report.
const PROGRESS_POLL: Duration = Duration::from_secs(1);

/// An SSE response: `retry:` first, then what arrives on `rx` until its sender is dropped.
fn respond(rx: mpsc::Receiver<Event>, keep_alive: KeepAlive) -> Response {
    let events = tokio_stream::once(Event::default().retry(RETRY))
        .chain(ReceiverStream::new(rx))
        .map(Ok::<_, Infallible>);
    Sse::new(events).keep_alive(keep_alive).into_response()
}

/// A stream that is over once sent: `retry:`, then `last`.
pub(super) fn finished(last: Event) -> Response {
    let events = [Event::default().retry(RETRY), last];
    Sse::new(tokio_stream::iter(events).map(Ok::<_, Infallible>)).into_response()
}

/// A job's progress stream: `first`, then each change, each rendered by `render`, until the
/// job is finished (its final progress is the last event).
pub(super) fn progress(
    state: AppState,
    first: Progress,
    render: fn(&Progress) -> String,
) -> Response {
    let (tx, rx) = mpsc::channel::<Event>(16);
    tokio::spawn(follow(state, first, render, tx));
    respond(rx, KeepAlive::new().interval(KEEP_ALIVE))
}

/// A job's progress then its outcome: `first` and each change of progress (unnamed events
/// rendered by `render`), then, as soon as the job ends (woken like a result wait, not by the
/// progress poll), the one event `end` makes of the outcome.
pub(super) fn outcome(
    state: AppState,
    first: Progress,
    render: fn(&Progress) -> String,
    end: fn(&ResultOutcome) -> Event,
) -> Response {
    let (tx, rx) = mpsc::channel::<Event>(16);
    tokio::spawn(follow_to_the_end(state, first, render, end, tx));
    respond(rx, KeepAlive::new().interval(KEEP_ALIVE))
}

/// The longest single wait of an outcome stream for its job's end (it waits again after).
const OUTCOME_WAIT: Duration = Duration::from_secs(3_600);

async fn follow_to_the_end(
    state: AppState,
    mut last: Progress,
    render: fn(&Progress) -> String,
    end: fn(&ResultOutcome) -> Event,
    tx: mpsc::Sender<Event>,
) {
    let id = last.job_id;
    if tx
        .send(Event::default().event("progress").data(render(&last)))
        .await
        .is_err()
    {
        return;
    }
    let shutdown = state.shutdown().clone();
    let broker = state.broker();
    let mut tick = tokio::time::interval(PROGRESS_POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        let outcome = broker.job_result_streamed(id, OUTCOME_WAIT);
        tokio::pin!(outcome);
        let done = loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tx.closed() => return,
                done = &mut outcome => break done,
                _ = tick.tick() => {}
            }
            let Ok(now) = broker.progress(id).await else {
                continue;
            };
            if now.updated_at != last.updated_at && !now.state.is_terminal() {
                let event = Event::default().event("progress").data(render(&now));
                if tx.send(event).await.is_err() {
                    return;
                }
                last = now;
            }
        };
        match done {
            Ok(ResultOutcome::Pending(_)) => continue,
            Ok(outcome) => {
                let _ = tx.send(end(&outcome)).await;
                return;
            }
            Err(e) => {
                let event = Event::default()
                    .event("error")
                    .data(json!({"job_id": id.to_string(), "message": e.to_string()}).to_string());
                let _ = tx.send(event).await;
                return;
            }
        }
    }
}

/// What one stream follows.
#[derive(Debug, Clone)]
pub(super) enum Channel {
    Job(uuid::Uuid),
    /// A queue's job events; of one tenant's jobs only, when a tenant is given.
    Queue(String, Option<std::sync::Arc<str>>),
}

impl Channel {
    fn filter(&self) -> EventFilter {
        match self {
            Channel::Job(id) => EventFilter {
                job_id: Some(*id),
                ..EventFilter::default()
            },
            Channel::Queue(name, _) => EventFilter {
                queues: Some(vec![name.clone()]),
                ..EventFilter::default()
            },
        }
    }

    fn matches(&self, e: &EventRow) -> bool {
        match self {
            Channel::Job(id) => e.job_id == Some(*id),
            Channel::Queue(name, _) => e.queue.as_deref() == Some(name.as_str()),
        }
    }

    /// Of `events` (in order), those the stream may carry: all, unless it is a tenant's.
    async fn visible(
        &self,
        state: &AppState,
        events: Vec<EventRow>,
    ) -> crate::Result<Vec<EventRow>> {
        match self {
            Channel::Queue(_, Some(tenant)) => state.broker().tenant_events(tenant, events).await,
            _ => Ok(events),
        }
    }

    fn name(&self) -> String {
        match self {
            Channel::Job(id) => format!("job:{id}"),
            Channel::Queue(name, _) => format!("queue:{name}"),
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
        let read = batch.len() as i64;
        let end = batch.last().map(|e| e.position);
        for e in &channel.visible(state, batch).await? {
            *last = Some(e.position);
            if !sink.send_row(channel, e).await {
                return Ok(false);
            }
        }
        *last = end.or(*last);
        if read < REPLAY_BATCH {
            return Ok(true);
        }
    }
}

/// Runs one stream: replay from the resume point, then live events, until the client leaves,
/// the job finishes or the server shuts down.
async fn run_stream(state: AppState, channel: Channel, resume: Option<String>, sink: Sink) {
    // Subscribe before reading anything, so nothing falls between replay and live.
    let mut live = match state.events().subscribe().await {
        Ok(live) => live,
        Err(e) => {
            tracing::warn!(error = %e, "event stream could not start");
            return;
        }
    };
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
                    let shown = match channel.visible(&state, vec![(*e).clone()]).await {
                        Ok(shown) => shown,
                        Err(error) => {
                            tracing::warn!(%error, "event stream stopped");
                            return;
                        }
                    };
                    for e in &shown {
                        if !sink.send_row(&channel, e).await {
                            return;
                        }
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

/// The `Last-Event-ID` a stream resumes after; without one, a stream sends only new events.
#[derive(IntoParams)]
#[into_params(names("Last-Event-ID"), parameter_in = Header)]
pub(super) struct Resume(
    /// Resume after this event id (`evt_...`); an id no longer retained (or not one this
    /// server issued) starts with a `system.gap` event. Without it, only new events.
    pub(super) Option<String>,
);

impl<S: Send + Sync> FromRequestParts<S> for Resume {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Infallible> {
        Ok(Resume(
            parts
                .headers
                .get("last-event-id")
                .and_then(|v| v.to_str().ok())
                .filter(|v| !v.is_empty())
                .map(str::to_owned),
        ))
    }
}

/// The event types a stream sends (`event_types`); all when absent.
#[derive(IntoParams)]
#[into_params(names("event_types"), parameter_in = Query)]
pub(super) struct EventTypes(
    /// SSE event types to send, comma-separated (`job.state_changed`, `job.heartbeat`,
    /// `system.gap`, `server.shutdown`); all when absent.
    #[param(value_type = Option<String>)]
    Option<Vec<String>>,
);

impl<S: Send + Sync> FromRequestParts<S> for EventTypes {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let query = QueryParams::from_request_parts(parts, state).await?;
        Ok(EventTypes(query.list("event_types")))
    }
}

/// The event stream of `channel`: replay from `Last-Event-ID` (or only new events without
/// one), then live events.
pub(super) fn events(
    state: &AppState,
    channel: Channel,
    Resume(resume): Resume,
    EventTypes(types): EventTypes,
) -> Response {
    let (tx, rx) = mpsc::channel::<Event>(256);
    let sink = Sink { tx, types };
    tokio::spawn(run_stream(state.clone(), channel, resume, sink));
    respond(rx, KeepAlive::new().interval(KEEP_ALIVE).text("heartbeat"))
}

/// Sends `last`, then polls for changes until the job is finished or nobody listens.
async fn follow(
    state: AppState,
    mut last: Progress,
    render: fn(&Progress) -> String,
    tx: mpsc::Sender<Event>,
) {
    let event = |p: &Progress| Event::default().data(render(p));
    if tx.send(event(&last)).await.is_err() || last.state.is_terminal() {
        return;
    }
    let shutdown = state.shutdown().clone();
    let mut tick = tokio::time::interval(PROGRESS_POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tx.closed() => return,
            _ = tick.tick() => {}
        }
        let now = match state.broker().progress(last.job_id).await {
            Ok(now) => now,
            Err(crate::error::Error::JobNotFound(_)) => return,
            Err(e) => {
                tracing::warn!(error = %e, "progress stream stopped");
                return;
            }
        };
        if now.updated_at != last.updated_at || now.state != last.state {
            if tx.send(event(&now)).await.is_err() {
                return;
            }
            last = now;
        }
        if last.state.is_terminal() {
            return;
        }
    }
}
