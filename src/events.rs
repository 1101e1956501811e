//! Lifecycle events (contract §7): their wire form, and the in-process tail that feeds the SSE
//! streams.
//!
//! Events are written by database triggers in the transaction of the change they describe
//! (`ojs_event`, see the V3 migration), so a change and its events commit or roll back together
//! and every replica — and every operator with `psql` — sees the same log. Reading it in
//! `(xid, seq)` order, bounded by the oldest running transaction, gives a cursor that never skips
//! an event that commits late (see `store::event`).
//!
//! The [`EventTail`] polls the log on one connection per process, only while some stream is
//! open, and fans new events out in memory; each stream filters them for its job or queue.

use std::sync::Arc;
use std::time::Duration;

use serde::ser::{Serialize, SerializeMap, Serializer};
use sqlx::PgPool;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::store;
use crate::store::event::{EventFilter, EventRow, Position};
use crate::timestamp;

/// `specversion` of every event.
pub const EVENT_SPEC_VERSION: &str = "1.0";

/// Events read per poll of the tail.
const TAIL_BATCH: i64 = 1_000;

/// Parses an event id as sent (`evt_<uuid>`).
pub fn parse_event_id(text: &str) -> Option<Uuid> {
    Uuid::parse_str(text.strip_prefix("evt_")?).ok()
}

/// The id of an event as sent.
pub fn event_id(id: Uuid) -> String {
    format!("evt_{}", id.hyphenated())
}

/// The OJS event envelope of a stored event.
pub struct WireEvent<'a>(pub &'a EventRow);

impl Serialize for WireEvent<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let e = self.0;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("specversion", EVENT_SPEC_VERSION)?;
        map.serialize_entry("id", &event_id(e.id))?;
        map.serialize_entry("type", &e.r#type)?;
        map.serialize_entry("source", &e.source)?;
        map.serialize_entry("time", &timestamp::format(e.time))?;
        if let Some(subject) = &e.subject {
            map.serialize_entry("subject", subject)?;
        }
        map.serialize_entry("datacontenttype", "application/json")?;
        map.serialize_entry("data", &e.data.0)?;
        map.end()
    }
}

/// Fans newly deliverable events out to the open streams of this process.
#[derive(Debug, Clone)]
pub struct EventTail {
    tx: broadcast::Sender<Arc<EventRow>>,
    pool: PgPool,
    poll_interval: Duration,
}

impl EventTail {
    pub fn new(pool: PgPool, poll_interval: Duration) -> EventTail {
        // Capacity bounds how far a slow stream may lag; a lagging stream re-reads the database.
        let (tx, _) = broadcast::channel(4_096);
        EventTail {
            tx,
            pool,
            poll_interval,
        }
    }

    /// Events deliverable from now on (the receiver sees those the tail reads after this call).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<EventRow>> {
        self.tx.subscribe()
    }

    /// The pool streams use to replay.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Polls for new events while anyone listens, until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut cursor: Option<Option<Position>> = None;
        loop {
            let mut pause = self.poll_interval;
            if self.tx.receiver_count() == 0 {
                // Nobody listens: forget the position; the next listener starts from the head.
                cursor = None;
            } else {
                match self.poll(&mut cursor).await {
                    Ok(full) if full => pause = Duration::ZERO,
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "reading events failed; retrying"),
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// One poll; returns whether the batch was full (more may be waiting).
    async fn poll(&self, cursor: &mut Option<Option<Position>>) -> Result<bool, sqlx::Error> {
        let Some(after) = *cursor else {
            *cursor = Some(store::event::head(&self.pool).await?);
            return Ok(false);
        };
        let events =
            store::event::list(&self.pool, &EventFilter::default(), after, TAIL_BATCH).await?;
        let full = events.len() as i64 >= TAIL_BATCH;
        if let Some(last) = events.last() {
            *cursor = Some(Some(last.position));
        }
        for event in events {
            let _ = self.tx.send(Arc::new(event));
        }
        Ok(full)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_ids_round_trip() {
        let id = Uuid::now_v7();
        assert_eq!(parse_event_id(&event_id(id)), Some(id));
        assert_eq!(parse_event_id("evt_nope"), None);
        assert_eq!(parse_event_id(&id.to_string()), None);
    }
}
