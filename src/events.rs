//! Lifecycle events ([OJS events]): their wire form, and the in-process tail that feeds the SSE
//! streams.
//!
//! Events are written to `ojs_event` by the statements that make the change they describe, so a
//! change and its events commit or roll back together. The hot path (enqueue, claim, ACK) writes
//! one batch row per statement whose events `store::event` renders in Rust (migration V10);
//! the rarer statements write single events built by the V3 migration's `ojs_*_data`
//! functions. Either way every replica — and every operator with `psql` — sees the same log. Reading it in
//! `(xid, seq)` order, bounded by the oldest running transaction, gives a cursor that never skips
//! an event that commits late (see `store::event`).
//!
//! The [`EventTail`] polls the log on one connection per process, only while some stream is
//! open, and fans new events out in memory; each stream filters them for its job or queue.
//!
//! [OJS events]: https://github.com/openjobspec/spec/blob/main/spec/ojs-events.md

use std::sync::Arc;
use std::time::Duration;

use crate::db::Db;
use serde::ser::{Serialize, SerializeMap, Serializer};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::db::DbHealth;
use crate::store;
use crate::store::event::{EventFilter, EventRow, Position};
use crate::wire::timestamp;

/// `specversion` of every event.
pub const EVENT_SPEC_VERSION: &str = "1.0";

/// Events read per poll of the tail.
const TAIL_BATCH: i64 = 1_000;

/// What an event id says: the event's position in the log and the millisecond it happened.
///
/// Event ids are UUIDv7 (`evt_<uuid>`) made of the event's time (the 48-bit millisecond
/// timestamp) and its `seq` (the 74 bits after version and variant), so they need no column or
/// index of their own, sort like the log, and lead straight to the row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventKey {
    pub seq: i64,
    pub unix_ms: i64,
}

const LOW_62: u128 = (1 << 62) - 1;

impl EventKey {
    /// The key of a stored event.
    pub fn of(e: &EventRow) -> EventKey {
        EventKey {
            seq: e.position.seq,
            unix_ms: e.time.timestamp_millis(),
        }
    }

    /// `evt_<uuid>`.
    pub fn to_id(self) -> String {
        let ms = (self.unix_ms.max(0) as u128) & 0xFFFF_FFFF_FFFF;
        let seq = self.seq.max(0) as u128;
        let bits = (ms << 80)
            | (0x7 << 76)
            | (((seq >> 62) & 0xFFF) << 64)
            | (0b10 << 62)
            | (seq & LOW_62);
        format!("evt_{}", Uuid::from_u128(bits).hyphenated())
    }

    /// Parses `evt_<uuid>`; `None` for anything this server could not have issued.
    pub fn parse(text: &str) -> Option<EventKey> {
        let bits = Uuid::parse_str(text.strip_prefix("evt_")?).ok()?.as_u128();
        if (bits >> 76) & 0xF != 0x7 || (bits >> 62) & 0b11 != 0b10 {
            return None;
        }
        let seq = (((bits >> 64) & 0xFFF) << 62) | (bits & LOW_62);
        Some(EventKey {
            seq: i64::try_from(seq).ok()?,
            unix_ms: (bits >> 80) as i64,
        })
    }

    /// When the event happened, to the millisecond.
    pub fn time(self) -> Option<chrono::DateTime<chrono::Utc>> {
        chrono::DateTime::from_timestamp_millis(self.unix_ms)
    }
}

/// The delivery position of the event `key` names, if the log still has it.
pub async fn locate(db: &Db, key: EventKey) -> Result<Option<Position>, sqlx::Error> {
    Ok(store::event::locate(db, key.seq)
        .await?
        .filter(|(_, time)| time.timestamp_millis() == key.unix_ms)
        .map(|(position, _)| position))
}

/// The OJS event envelope of a stored event.
pub struct WireEvent<'a> {
    row: &'a EventRow,
    /// Also write `timestamp`.
    timestamp: bool,
}

impl<'a> WireEvent<'a> {
    /// The envelope.
    pub fn of(e: &'a EventRow) -> WireEvent<'a> {
        WireEvent {
            row: e,
            timestamp: false,
        }
    }

    /// The envelope plus `timestamp`, the OJS admin UI's name for `time`.
    pub fn with_timestamp(e: &'a EventRow) -> WireEvent<'a> {
        WireEvent {
            row: e,
            timestamp: true,
        }
    }
}

impl Serialize for WireEvent<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let e = self.row;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("specversion", EVENT_SPEC_VERSION)?;
        map.serialize_entry("id", &EventKey::of(e).to_id())?;
        map.serialize_entry("type", &e.r#type)?;
        map.serialize_entry("source", &e.source)?;
        map.serialize_entry("time", &timestamp::format(e.time))?;
        if let Some(subject) = &e.subject {
            map.serialize_entry("subject", subject)?;
        }
        map.serialize_entry("datacontenttype", "application/json")?;
        map.serialize_entry("data", &e.data.0)?;
        if self.timestamp {
            map.serialize_entry("timestamp", &timestamp::format(e.time))?;
        }
        map.end()
    }
}

/// Fans newly deliverable events out to the open streams of this process.
#[derive(Debug, Clone)]
pub struct EventTail {
    tx: broadcast::Sender<Arc<EventRow>>,
    /// Where the tail reads from: `None` while nobody listens (it does not read then); the
    /// first listener sets it to the head when it subscribes, so that every event deliverable
    /// after its subscription is broadcast to it.
    cursor: Arc<tokio::sync::Mutex<Option<Option<Position>>>>,
    db: Db,
    health: DbHealth,
    poll_interval: Duration,
}

impl EventTail {
    pub fn new(db: Db, health: DbHealth, poll_interval: Duration) -> EventTail {
        // Capacity bounds how far a slow stream may lag; a lagging stream re-reads the database.
        let (tx, _) = broadcast::channel(4_096);
        EventTail {
            tx,
            cursor: Arc::default(),
            db,
            health,
            poll_interval,
        }
    }

    /// Events deliverable from now on: the receiver gets every event that becomes deliverable
    /// after this returns (and maybe some just before). The first listener sets where the tail
    /// reads from (the head, read here); had the tail read the head only on its next poll,
    /// events written in between would reach neither that listener's replay nor its receiver.
    pub async fn subscribe(&self) -> Result<broadcast::Receiver<Arc<EventRow>>, sqlx::Error> {
        let rx = self.tx.subscribe();
        let mut cursor = self.cursor.lock().await;
        if cursor.is_none() {
            *cursor = Some(store::event::head(&self.db).await?);
        }
        Ok(rx)
    }

    /// Polls for new events while anyone listens, until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        loop {
            let mut pause = self.poll_interval;
            let mut cursor = self.cursor.lock().await;
            if self.tx.receiver_count() == 0 {
                // Nobody listens: forget the position; the next listener sets it.
                *cursor = None;
            } else if !self.health.is_down() {
                match self.poll(&mut cursor).await {
                    Ok(full) if full => pause = Duration::ZERO,
                    Ok(_) => {}
                    Err(e) => {
                        self.health.report(&e);
                        tracing::warn!(error = %e, "reading events failed; retrying");
                    }
                }
            }
            drop(cursor);
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// One poll; returns whether the batch was full (more may be waiting).
    async fn poll(&self, cursor: &mut Option<Option<Position>>) -> Result<bool, sqlx::Error> {
        let Some(after) = *cursor else {
            *cursor = Some(store::event::head(&self.db).await?);
            return Ok(false);
        };
        let events =
            store::event::list(&self.db, &EventFilter::default(), after, TAIL_BATCH).await?;
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
    fn event_ids_round_trip_and_sort_like_the_log() {
        let keys = [
            EventKey {
                seq: 1,
                unix_ms: 1_790_000_000_000,
            },
            EventKey {
                seq: 2,
                unix_ms: 1_790_000_000_000,
            },
            EventKey {
                seq: (1 << 62) + 5,
                unix_ms: 1_790_000_000_001,
            },
            EventKey {
                seq: i64::MAX,
                unix_ms: 1_790_000_000_002,
            },
        ];
        let ids: Vec<String> = keys.iter().map(|k| k.to_id()).collect();
        for (key, id) in keys.iter().zip(&ids) {
            assert_eq!(EventKey::parse(id), Some(*key), "{id}");
            let uuid = Uuid::parse_str(id.strip_prefix("evt_").unwrap()).unwrap();
            assert_eq!(uuid.get_version_num(), 7);
            assert_eq!(uuid.get_variant(), uuid::Variant::RFC4122);
        }
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(sorted, ids);
        assert_eq!(EventKey::parse("evt_nope"), None);
        assert_eq!(
            EventKey::parse("evt_550e8400-e29b-41d4-a716-446655440000"),
            None
        );
        assert_eq!(EventKey::parse(&Uuid::now_v7().to_string()), None);
    }
}
