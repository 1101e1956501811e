//! The event log as the API reads it: pages after a cursor, the head a new stream starts from,
//! and whether a queue exists for its stream.

use super::Broker;
use crate::error::Result;
use crate::events::{self, EventKey};
use crate::store;
use crate::store::event::{EventFilter, EventRow, Position};

impl Broker {
    /// Up to `limit` deliverable events after `after` (from the oldest retained one when
    /// `None`) that match `filter`, in delivery order.
    pub async fn events_after(
        &self,
        filter: &EventFilter,
        after: Option<Position>,
        limit: i64,
    ) -> Result<Vec<EventRow>> {
        Ok(store::event::list(&self.db, filter, after, limit).await?)
    }

    /// A page of events newest first, and how many match in all
    /// ([`store::event::page_newest_first`]).
    pub async fn events_page(
        &self,
        filter: &EventFilter,
        offset: i64,
        limit: i64,
    ) -> Result<(Vec<EventRow>, i64)> {
        Ok(store::event::page_newest_first(&self.db, filter, offset, limit).await?)
    }

    /// The position of the newest deliverable event (`None`: there is none): a stream that
    /// starts after it sees exactly the events that become deliverable from now on.
    pub async fn event_head(&self) -> Result<Option<Position>> {
        Ok(store::event::head(&self.db).await?)
    }

    /// Where the event `key` (an event id) sits in delivery order, if it is still retained.
    pub async fn locate_event(&self, key: EventKey) -> Result<Option<Position>> {
        Ok(events::locate(&self.db, key).await?)
    }

    /// Whether a queue exists for event streams: it has a row, or retained events name it (a
    /// queue deleted while its events are kept).
    pub async fn queue_known(&self, name: &str) -> Result<bool> {
        Ok(store::queue::queue_known(&self.db, name).await?)
    }
}
