//! The event log as the API reads it: pages after a cursor, the head a new stream starts from,
//! and whether a queue exists for its stream.

use super::Broker;
use crate::error::Result;
use crate::events::{self, EventKey};
use crate::job::JobId;
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

    /// Job `id`'s events after `after`, oldest first (up to `limit`), and how many it has in
    /// all: its execution history.
    pub async fn job_history(
        &self,
        id: JobId,
        after: Option<Position>,
        limit: i64,
    ) -> Result<(Vec<EventRow>, i64)> {
        let events = store::event::job_history(&self.db, id.0, after, limit).await?;
        let total = store::event::count_for_job(&self.db, id.0).await?;
        Ok((events, total))
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

/// What an event is about, for deciding whose it is: a job (job events, dead letters), else a
/// workflow, a worker or a cron entry named by its subject. Other events (queues, schemas,
/// rate-limit keys, the system) belong to no tenant.
enum About<'a> {
    Job(uuid::Uuid),
    Workflow(uuid::Uuid),
    Worker(&'a str),
    Cron(&'a str),
    Nothing,
}

fn about(e: &EventRow) -> About<'_> {
    if let Some(id) = e.job_id {
        return About::Job(id);
    }
    let subject = e.subject.as_deref().unwrap_or("");
    let prefix = e.r#type.split('.').next().unwrap_or("");
    match prefix {
        "workflow" => subject.parse().map_or(About::Nothing, About::Workflow),
        "worker" if !subject.is_empty() => About::Worker(subject),
        "cron" if !subject.is_empty() => About::Cron(subject),
        _ => About::Nothing,
    }
}

impl Broker {
    /// Of `events`, those a request acting as `tenant` may see: events of its jobs, workflows,
    /// workers and cron entries (one read per kind). Events of a job no longer retained (pruned,
    /// or deleted by its ACK in a queue that keeps no completed job) are not shown: whose they
    /// were is no longer known.
    pub async fn tenant_events(
        &self,
        tenant: &str,
        events: Vec<EventRow>,
    ) -> Result<Vec<EventRow>> {
        let mut subjects = store::tenant::EventSubjects::default();
        for e in &events {
            match about(e) {
                About::Job(id) => subjects.jobs.push(id),
                About::Workflow(id) => subjects.workflows.push(id),
                About::Worker(id) => subjects.workers.push(id.to_owned()),
                About::Cron(name) => subjects.crons.push(name.to_owned()),
                About::Nothing => {}
            }
        }
        let owners = store::tenant::subject_owners(&self.db, &subjects).await?;
        let own = |owner: Option<&String>| owner.is_some_and(|o| o == tenant);
        Ok(events
            .into_iter()
            .filter(|e| match about(e) {
                About::Job(id) => own(owners.jobs.get(&id)),
                About::Workflow(id) => own(owners.workflows.get(&id)),
                About::Worker(id) => own(owners.workers.get(id)),
                About::Cron(name) => own(owners.crons.get(name)),
                About::Nothing => false,
            })
            .collect())
    }
}
