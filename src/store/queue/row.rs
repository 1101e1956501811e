//! A queue's row in `ojs_queue`: created on demand, read, listed, paused and resumed, and its
//! live job counts.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

/// A queue's lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::Type, serde::Serialize, utoipa::ToSchema)]
#[sqlx(type_name = "ojs_queue_state", rename_all = "lowercase")]
#[serde(rename_all = "lowercase")]
pub enum QueueState {
    Active,
    Paused,
    Draining,
}

/// One `ojs_queue` row.
#[derive(Debug, Clone)]
pub struct QueueRow {
    pub name: String,
    pub state: QueueState,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub paused_at: Option<DateTime<Utc>>,
    pub resumed_at: Option<DateTime<Utc>>,
}

/// Current job counts of a queue, by state, and its recent activity.
#[derive(Debug, Clone, Default)]
pub struct QueueCounts {
    pub available: i64,
    pub active: i64,
    pub scheduled: i64,
    pub retryable: i64,
    pub pending: i64,
    pub completed: i64,
    pub discarded: i64,
    pub cancelled: i64,
    pub dead_letter: i64,
    pub completed_today: i64,
    pub failed_today: i64,
    pub completed_last_hour: i64,
    pub failed_last_hour: i64,
    /// Mean execution time of the jobs completed in the last hour.
    pub avg_duration_ms: Option<f64>,
    /// Mean wait (available → started) of the jobs completed in the last hour.
    pub avg_wait_ms: Option<f64>,
}

impl QueueCounts {
    /// Jobs not yet finished.
    pub fn depth(&self) -> i64 {
        self.available + self.active + self.scheduled + self.retryable + self.pending
    }
}

/// Creates the row of `name` unless it exists (recording `queue.created`); returns whether
/// it was created.
pub async fn ensure(
    db: impl PgExecutor<'_>,
    name: &str,
    implicit: bool,
) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        with created as (
            insert into ojs_queue (name) values ($1)
            on conflict do nothing
            returning name
        ),
        events as (
            insert into ojs_event (type, subject, queue, data)
            select 'queue.created', c.name, c.name,
                   jsonb_build_object('queue', c.name, 'implicit', $2::bool)
              from created c
        )
        select exists (select 1 from created) as "created!"
        "#,
        name,
        implicit,
    )
    .fetch_one(db)
    .await
}

/// One queue's row.
pub async fn get(db: impl PgExecutor<'_>, name: &str) -> Result<Option<QueueRow>, sqlx::Error> {
    sqlx::query_as!(
        QueueRow,
        r#"
        select name, state as "state: QueueState", created_at, updated_at, paused_at, resumed_at
          from ojs_queue
         where name = $1 and name <> '_default'
        "#,
        name,
    )
    .fetch_optional(db)
    .await
}

/// Queues by name (optionally only those in `state`), a page at a time, and how many there
/// are in all.
pub async fn list(
    db: impl PgExecutor<'_> + Copy,
    state: Option<QueueState>,
    limit: i64,
    offset: i64,
) -> Result<(Vec<QueueRow>, i64), sqlx::Error> {
    let rows = sqlx::query_as!(
        QueueRow,
        r#"
        select name, state as "state: QueueState", created_at, updated_at, paused_at, resumed_at
          from ojs_queue
         where name <> '_default' and ($1::ojs_queue_state is null or state = $1)
         order by name
         limit $2 offset $3
        "#,
        state as Option<QueueState>,
        limit,
        offset,
    )
    .fetch_all(db)
    .await?;
    let total = sqlx::query_scalar!(
        r#"
        select count(*) as "n!" from ojs_queue
         where name <> '_default' and ($1::ojs_queue_state is null or state = $1)
        "#,
        state as Option<QueueState>,
    )
    .fetch_one(db)
    .await?;
    Ok((rows, total))
}

/// Pauses (`paused`) or resumes a queue that is not draining, recording `queue.paused` /
/// `queue.resumed` when its state changes. Returns the row as it is afterwards (unchanged for a
/// draining queue, which the caller refuses); `None` if the queue has no row.
pub async fn set_paused(
    db: impl PgExecutor<'_>,
    name: &str,
    paused: bool,
) -> Result<Option<QueueRow>, sqlx::Error> {
    sqlx::query_as!(
        QueueRow,
        r#"
        with target as (
            select name, state from ojs_queue where name = $1 for update
        ),
        changed as (
            update ojs_queue q
               set state = case when $2 then 'paused' else 'active' end::ojs_queue_state,
                   paused_at = case when $2 then now() else q.paused_at end,
                   resumed_at = case when $2 then q.resumed_at else now() end,
                   updated_at = now()
              from target t
             where q.name = t.name
               and t.state = case when $2 then 'active' else 'paused' end::ojs_queue_state
            returning q.*
        ),
        events as (
            insert into ojs_event (type, subject, queue, data)
            select case when $2 then 'queue.paused' else 'queue.resumed' end, c.name, c.name,
                   jsonb_build_object('queue', c.name)
              from changed c
        )
        select name as "name!", state as "state!: QueueState", created_at as "created_at!",
               updated_at as "updated_at!", paused_at, resumed_at
          from changed
        union all
        select q.name, q.state, q.created_at, q.updated_at, q.paused_at, q.resumed_at
          from ojs_queue q
         where q.name = $1 and not exists (select 1 from changed)
        "#,
        name,
        paused,
    )
    .fetch_optional(db)
    .await
}

/// Job counts and recent activity of each of `queues` ("today" starts at 00:00 UTC), in one
/// pass over their jobs. A queue without jobs gets all zeros.
pub async fn counts(
    db: impl PgExecutor<'_>,
    queues: &[String],
    tenant: Option<&str>,
) -> Result<HashMap<String, QueueCounts>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"
        select queue as "queue!",
               count(*) filter (where state = 'available') as "available!",
               count(*) filter (where state = 'active') as "active!",
               count(*) filter (where state = 'scheduled') as "scheduled!",
               count(*) filter (where state = 'retryable') as "retryable!",
               count(*) filter (where state = 'pending') as "pending!",
               count(*) filter (where state = 'completed') as "completed!",
               count(*) filter (where state = 'discarded') as "discarded!",
               count(*) filter (where state = 'cancelled') as "cancelled!",
               count(*) filter (where dead_lettered_at is not null) as "dead_letter!",
               count(*) filter (where state = 'completed'
                                  and completed_at >= date_trunc('day', now(), 'UTC')) as "completed_today!",
               count(*) filter (where state = 'discarded'
                                  and discarded_at >= date_trunc('day', now(), 'UTC')) as "failed_today!",
               count(*) filter (where state = 'completed'
                                  and completed_at >= now() - interval '1 hour') as "completed_last_hour!",
               count(*) filter (where state = 'discarded'
                                  and discarded_at >= now() - interval '1 hour') as "failed_last_hour!",
               avg(extract(epoch from completed_at - started_at) * 1000)
                   filter (where state = 'completed' and completed_at >= now() - interval '1 hour')
                   ::float8 as avg_duration_ms,
               avg(extract(epoch from started_at - enqueued_at) * 1000)
                   filter (where state = 'completed' and completed_at >= now() - interval '1 hour')
                   ::float8 as avg_wait_ms
          from ojs_job_all
         where queue = any($1) and ($2::text is null or tenant = $2)
         group by queue
        "#,
        queues,
        tenant,
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let counts = QueueCounts {
                available: r.available,
                active: r.active,
                scheduled: r.scheduled,
                retryable: r.retryable,
                pending: r.pending,
                completed: r.completed,
                discarded: r.discarded,
                cancelled: r.cancelled,
                dead_letter: r.dead_letter,
                completed_today: r.completed_today,
                failed_today: r.failed_today,
                completed_last_hour: r.completed_last_hour,
                failed_last_hour: r.failed_last_hour,
                avg_duration_ms: r.avg_duration_ms,
                avg_wait_ms: r.avg_wait_ms,
            };
            (r.queue, counts)
        })
        .collect())
}

/// Whether a queue exists: it has a row (every enqueue, pause or resume creates one), or
/// events name it (a queue deleted while its events are retained). Both are index lookups.
pub async fn queue_known(db: impl PgExecutor<'_>, queue: &str) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        select exists (select 1 from ojs_queue where name = $1)
            or exists (select 1 from ojs_event where queue = $1) as "known!"
        "#,
        queue
    )
    .fetch_one(db)
    .await
}

/// Available jobs per queue and stored priority (of `queue` only, when given), ordered by queue
/// then priority: priority statistics and the `ojs_queue_available_by_priority` gauge.
pub async fn available_by_priority(
    db: impl PgExecutor<'_>,
    queue: Option<&str>,
    tenant: Option<&str>,
) -> Result<Vec<(String, i32, i64)>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"
        select queue, priority, count(*) as "jobs!"
          from ojs_job
         where state = 'available' and ($1::text is null or queue = $1)
           and ($2::text is null or tenant = $2)
         group by queue, priority
         order by queue, priority
        "#,
        queue,
        tenant,
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.queue, r.priority, r.jobs))
        .collect())
}

/// Deletes every queue row (test hook `POST /ojs/v1/admin/reset` only).
pub async fn delete_all(db: impl PgExecutor<'_>) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"
        with queues as (delete from ojs_queue),
        capacity as (delete from ojs_queue_capacity),
        rates as (delete from ojs_rate_window)
        update ojs_queue_config_generation set generation = generation + 1
        "#
    )
    .execute(db)
    .await?;
    Ok(())
}
