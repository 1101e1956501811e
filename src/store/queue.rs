//! `ojs_queue`: queues as rows — their lifecycle state (and, later, their configuration).
//!
//! A queue gets its row on its first enqueue (inside the enqueue statement, see
//! [`crate::store::job::insert_many`]), when it is paused or resumed, or when it is created
//! explicitly. Jobs name their queue by text, so a queue without a row behaves as `active`.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

/// A queue's lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::Type, serde::Serialize)]
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
          from ojs_job
         where queue = any($1)
         group by queue
        "#,
        queues,
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

/// What a deletion found, with the queue row locked.
#[derive(Debug, Clone, Copy)]
pub struct DeletionTarget {
    pub state: QueueState,
    /// Jobs `scheduled`, `available`, `pending` or `retryable`.
    pub waiting: i64,
    /// Jobs `active`.
    pub active: i64,
}

/// Locks `name`'s row for a deletion and counts its unfinished jobs; `None` if it has no row.
pub async fn lock_for_delete(
    db: impl PgExecutor<'_>,
    name: &str,
) -> Result<Option<DeletionTarget>, sqlx::Error> {
    sqlx::query_as!(
        DeletionTarget,
        r#"
        select q.state as "state: QueueState",
               (select count(*) from ojs_job j
                 where j.queue = q.name
                   and j.state in ('scheduled', 'available', 'pending', 'retryable')) as "waiting!",
               (select count(*) from ojs_job j
                 where j.queue = q.name and j.state = 'active') as "active!"
          from ojs_queue q
         where q.name = $1 and q.name <> '_default'
           for update of q
        "#,
        name,
    )
    .fetch_optional(db)
    .await
}

/// Deletion with `discard`: every waiting job of `name` is discarded with error
/// `queue_deleted` (not dead-lettered), with its `job.discarded` event. Returns how many.
pub async fn discard_waiting(db: impl PgExecutor<'_>, name: &str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        with doomed as (
            select id, state as prev,
                   jsonb_build_object('code', 'queue_deleted', 'type', 'queue_deleted',
                                      'message', 'The job''s queue was deleted.') as error
              from ojs_job
             where queue = $1 and state in ('scheduled', 'available', 'pending', 'retryable')
               for update
        ),
        discarded as (
            update ojs_job j
               set state = 'discarded', discarded_at = now(), completed_at = now(),
                   next_retry_at = null, error = d.error,
                   errors = j.errors || jsonb_build_array(ojs_error_entry(j.attempt, d.error, now()))
              from doomed d
             where j.id = d.id
            returning j, d.prev
        ),
        events as (
            insert into ojs_event (type, subject, job_id, queue, job_type, from_state, to_state, data)
            select e.type, (x.j).id::text, (x.j).id, (x.j).queue, (x.j).type, e.from_state,
                   e.to_state, e.data
              from discarded x
              cross join lateral ojs_job_events(x.prev, null, null, null, 0, null, (x.j).priority, x.j) e
             order by (x.j).seq, e.ord
        )
        select count(*) as "n!" from discarded
        "#,
        name,
    )
    .fetch_one(db)
    .await
}

/// Deletion with `move`: every waiting job of `name` moves to `target` (keeping its state and
/// its place in time), remembering `name` as `original_queue`. Returns how many, and how many
/// of them are available.
pub async fn move_waiting(
    db: impl PgExecutor<'_>,
    name: &str,
    target: &str,
) -> Result<(i64, i64), sqlx::Error> {
    let r = sqlx::query!(
        r#"
        with moved as (
            update ojs_job
               set queue = $2, original_queue = $1
             where queue = $1 and state in ('scheduled', 'available', 'pending', 'retryable')
            returning state
        )
        select count(*) as "moved!", count(*) filter (where state = 'available') as "available!"
          from moved
        "#,
        name,
        target,
    )
    .fetch_one(db)
    .await?;
    Ok((r.moved, r.available))
}

/// Ends a deletion: while `draining` (active jobs remain) the queue stays as `draining` with
/// `deletion` remembered; otherwise its row goes, with `queue.deleted`.
pub async fn finish_delete(
    db: impl PgExecutor<'_>,
    name: &str,
    deletion: &serde_json::Value,
    draining: bool,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"
        with marked as (
            update ojs_queue set state = 'draining', deletion = $2, updated_at = now()
             where name = $1 and $3
        ),
        removed as (
            delete from ojs_queue where name = $1 and not $3
            returning name
        )
        insert into ojs_event (type, subject, queue, data)
        select 'queue.deleted', r.name, r.name, jsonb_build_object('queue', r.name) || $2
          from removed r
        "#,
        name,
        deletion,
        draining,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Removes draining queues whose last unfinished job has ended, each with `queue.deleted`.
/// Returns their names.
pub async fn complete_draining(db: impl PgExecutor<'_>) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        with done as (
            delete from ojs_queue q
             where q.state = 'draining'
               and not exists (select 1 from ojs_job j
                                where j.queue = q.name
                                  and j.state in ('scheduled', 'available', 'pending',
                                                  'retryable', 'active'))
            returning q.name, q.deletion
        ),
        events as (
            insert into ojs_event (type, subject, queue, data)
            select 'queue.deleted', d.name, d.name,
                   jsonb_build_object('queue', d.name) || coalesce(d.deletion, '{}')
              from done d
        )
        select name as "name!" from done
        "#,
    )
    .fetch_all(db)
    .await
}

/// Why the database refused an enqueue because of its queue, and which queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueRefusal {
    /// The queue is draining (SQLSTATE OJ001).
    Draining,
    /// The queue does not exist and strict queues are on (SQLSTATE OJ002).
    Unknown,
    /// The enqueue would pass the queue's bound (SQLSTATE OJ003).
    Full(Overflow),
    /// The jobs were prepared with an outdated queue configuration (SQLSTATE OJ004).
    StaleConfig,
}

/// A bound an enqueue would pass, as the database saw it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct Overflow {
    /// Unfinished jobs before the enqueue.
    pub depth: i64,
    pub bound: Option<i64>,
    /// Their total size before the enqueue.
    pub bytes: i64,
    pub bound_bytes: Option<i64>,
    pub policy: String,
}

/// Whether `e` is an enqueue refused because of its queue: why, and the queue's name.
pub fn queue_refusal(e: &sqlx::Error) -> Option<(QueueRefusal, String)> {
    let db = e.as_database_error()?;
    let refusal = match db.code().as_deref()? {
        "OJ001" => QueueRefusal::Draining,
        "OJ002" => QueueRefusal::Unknown,
        "OJ003" => {
            let detail = db
                .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                .and_then(|pg| pg.detail())
                .and_then(|d| serde_json::from_str::<Overflow>(d).ok())?;
            QueueRefusal::Full(detail)
        }
        "OJ004" => QueueRefusal::StaleConfig,
        _ => return None,
    };
    Some((refusal, db.message().to_owned()))
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

/// The configuration generation and every stored configuration layer that is not empty
/// (`_default` included), read together.
pub async fn config_layers(
    db: impl PgExecutor<'_>,
) -> Result<(i64, Vec<(String, serde_json::Value)>), sqlx::Error> {
    let rows = sqlx::query!(
        r#"
        select g.generation, q.name as "name?", q.config as "config?"
          from ojs_queue_config_generation g
          left join ojs_queue q on q.config <> '{}'
        "#,
    )
    .fetch_all(db)
    .await?;
    let generation = rows.first().map_or(0, |r| r.generation);
    let layers = rows
        .into_iter()
        .filter_map(|r| Some((r.name?, r.config?)))
        .collect();
    Ok((generation, layers))
}

/// The configuration generation alone.
pub async fn config_generation(db: impl PgExecutor<'_>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!("select generation from ojs_queue_config_generation")
        .fetch_one(db)
        .await
}

/// Locks `name`'s row (creating it first, with `queue.created`, unless it exists or it is
/// `_default`) and returns its stored configuration layer and whether it was created.
pub async fn lock_config(
    db: &mut sqlx::PgConnection,
    name: &str,
) -> Result<(serde_json::Value, bool), sqlx::Error> {
    let created = if name == crate::queue_config::DEFAULT_QUEUE {
        sqlx::query!("insert into ojs_queue (name) values ('_default') on conflict do nothing")
            .execute(&mut *db)
            .await?;
        false
    } else {
        ensure(&mut *db, name, true).await?
    };
    let config = sqlx::query_scalar!(
        "select config from ojs_queue where name = $1 for update",
        name
    )
    .fetch_one(&mut *db)
    .await?;
    Ok((config, created))
}

/// Stores `name`'s configuration layer (its row is locked by [`lock_config`]), bumps the
/// configuration generation, and records `queue.config_updated` with the fields changed.
pub async fn write_config(
    db: impl PgExecutor<'_>,
    name: &str,
    config: &serde_json::Value,
    changed_fields: &[String],
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"
        with written as (
            update ojs_queue set config = $2, updated_at = now() where name = $1
            returning name
        ),
        bumped as (
            update ojs_queue_config_generation set generation = generation + 1
        )
        insert into ojs_event (type, subject, queue, data)
        select 'queue.config_updated', w.name, nullif(w.name, '_default'),
               jsonb_build_object('queue', w.name, 'changed_fields', to_jsonb($3::text[]))
          from written w
        "#,
        name,
        config,
        changed_fields as &[String],
    )
    .execute(db)
    .await?;
    Ok(())
}

/// A queue's bounds as enforced by the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds<'a> {
    pub max_jobs: Option<i64>,
    pub max_bytes: Option<i64>,
    pub overflow_policy: &'a str,
}

/// Sets the bounds the database enforces for `queue` (`None`: unbounded). A queue that becomes
/// bounded has its unfinished jobs counted (and flagged as counted) in the same transaction.
pub async fn set_bounds(
    db: &mut sqlx::PgConnection,
    queue: &str,
    bounds: Option<Bounds<'_>>,
) -> Result<(), sqlx::Error> {
    let Some(b) = bounds else {
        sqlx::query!("delete from ojs_queue_capacity where queue = $1", queue)
            .execute(&mut *db)
            .await?;
        return Ok(());
    };
    let inserted = sqlx::query_scalar!(
        r#"
        insert into ojs_queue_capacity as c (queue, max_jobs, max_bytes, overflow_policy)
        values ($1, $2, $3, $4)
        on conflict (queue) do update
           set max_jobs = excluded.max_jobs, max_bytes = excluded.max_bytes,
               overflow_policy = excluded.overflow_policy
        returning (xmax = 0) as "inserted!"
        "#,
        queue,
        b.max_jobs,
        b.max_bytes,
        b.overflow_policy,
    )
    .fetch_one(&mut *db)
    .await?;
    if inserted && queue != crate::queue_config::DEFAULT_QUEUE {
        // From now on every transition of these jobs adjusts the counters (trigger
        // ojs_job_capacity_move); a job finishing concurrently waits for this row lock.
        sqlx::query!(
            r#"
            with counted as (
                update ojs_job set capacity_tracked = true
                 where queue = $1 and state in ('scheduled', 'available', 'pending', 'retryable', 'active')
                returning ojs_job_size(args, meta) as size
            )
            update ojs_queue_capacity
               set jobs = (select count(*) from counted),
                   bytes = (select coalesce(sum(size), 0) from counted)
             where queue = $1
            "#,
            queue,
        )
        .execute(&mut *db)
        .await?;
    }
    Ok(())
}

/// Every queue with a row (not `_default`) and its stored configuration layer.
pub async fn all_layers(
    db: impl PgExecutor<'_>,
) -> Result<Vec<(String, serde_json::Value)>, sqlx::Error> {
    let rows =
        sqlx::query!("select name, config from ojs_queue where name <> '_default' order by name")
            .fetch_all(db)
            .await?;
    Ok(rows.into_iter().map(|r| (r.name, r.config)).collect())
}

/// A queue's capacity counters: unfinished jobs and their total size, as counted for its
/// bounds (`None`: the queue is unbounded).
pub async fn capacity(
    db: impl PgExecutor<'_>,
    queue: &str,
) -> Result<Option<(i64, i64)>, sqlx::Error> {
    let row = sqlx::query!(
        "select jobs, bytes from ojs_queue_capacity where queue = $1",
        queue
    )
    .fetch_optional(db)
    .await?;
    Ok(row.map(|r| (r.jobs, r.bytes)))
}

/// For a `drop_oldest` queue about to receive `jobs` new jobs of `bytes` bytes: locks its
/// capacity row, then discards its oldest waiting jobs (error `overflow`, not dead-lettered;
/// `job.discarded`, `queue.overflow` and `backpressure.dropped` events) until the new jobs fit
/// or none is left to drop. Returns the queue and type of each job dropped. Does nothing for
/// queues of another policy.
pub async fn drop_oldest(
    db: &mut sqlx::PgConnection,
    queue: &str,
    jobs: i64,
    bytes: i64,
) -> Result<Vec<(String, String)>, sqlx::Error> {
    // Locked first, in a statement of its own, so that the next statement's snapshot sees
    // what concurrent enqueues into the queue committed before the lock was granted.
    let locked = sqlx::query_scalar!(
        r#"
        select true as "locked!" from ojs_queue_capacity
         where queue = $1 and overflow_policy = 'drop_oldest'
           for update
        "#,
        queue,
    )
    .fetch_optional(&mut *db)
    .await?;
    if locked.is_none() {
        return Ok(Vec::new());
    }
    let rows = sqlx::query!(
        r#"
        with need as (
            select greatest(c.jobs + $2 - coalesce(c.max_jobs, c.jobs + $2), 0) as jobs,
                   greatest(c.bytes + $3 - coalesce(c.max_bytes, c.bytes + $3), 0) as bytes
              from ojs_queue_capacity c
             where c.queue = $1
        ),
        candidates as (
            select j.id, j.state,
                   row_number() over w as n,
                   sum(ojs_job_size(j.args, j.meta)) over w - ojs_job_size(j.args, j.meta) as freed_before
              from ojs_job j
             where j.queue = $1 and j.capacity_tracked
               and j.state in ('scheduled', 'available', 'pending', 'retryable')
            window w as (order by j.created_at, j.seq rows between unbounded preceding and current row)
        ),
        doomed as (
            select c.id, c.state as prev,
                   jsonb_build_object('code', 'overflow', 'type', 'overflow',
                                      'message', 'Dropped to make room in its full queue (overflow policy drop_oldest).') as error
              from candidates c, need n
             where c.n <= n.jobs or c.freed_before < n.bytes
        ),
        discarded as (
            update ojs_job j
               set state = 'discarded', discarded_at = now(), completed_at = now(),
                   next_retry_at = null, error = d.error,
                   errors = j.errors || jsonb_build_array(ojs_error_entry(j.attempt, d.error))
              from doomed d
             where j.id = d.id
               and j.state in ('scheduled', 'available', 'pending', 'retryable')
            returning j, d.prev
        ),
        job_events as (
            insert into ojs_event (type, subject, job_id, queue, job_type, from_state, to_state, data)
            select e.type, (x.j).id::text, (x.j).id, (x.j).queue, (x.j).type, e.from_state,
                   e.to_state, e.data
              from discarded x
              cross join lateral ojs_job_events(x.prev, null, null, null, 0, null, (x.j).priority, x.j) e
             order by (x.j).seq, e.ord
        ),
        queue_events as (
            insert into ojs_event (type, subject, job_id, queue, job_type, data)
            select k.kind, (x.j).queue, (x.j).id, (x.j).queue, (x.j).type,
                   jsonb_build_object('queue', (x.j).queue, 'job_id', (x.j).id, 'job_type', (x.j).type)
              from discarded x
              cross join (values (1, 'queue.overflow'), (2, 'backpressure.dropped')) as k(ord, kind)
             order by (x.j).seq, k.ord
        )
        select (x.j).queue as "queue!", (x.j).type as "job_type!" from discarded x
        "#,
        queue,
        jobs,
        bytes,
    )
    .fetch_all(&mut *db)
    .await?;
    Ok(rows.into_iter().map(|r| (r.queue, r.job_type)).collect())
}

/// The `_default` configuration layer (`{}` when none is stored), locked against a
/// concurrent change.
pub async fn default_layer(db: &mut sqlx::PgConnection) -> Result<serde_json::Value, sqlx::Error> {
    let layer =
        sqlx::query_scalar!("select config from ojs_queue where name = '_default' for share")
            .fetch_optional(db)
            .await?;
    Ok(layer.unwrap_or_else(|| serde_json::json!({})))
}

/// Advisory-lock namespace of claims from queues with dispatch limits.
const DISPATCH_LOCK_NAMESPACE: i32 = 0x6f6a_7364; // "ojsd"

/// Serializes claims from `queue` (with dispatch limits) until the transaction ends. Taken in
/// a statement of its own, so the next statement's snapshot sees every claim committed
/// before the lock was granted.
pub async fn lock_dispatch(db: &mut sqlx::PgConnection, queue: &str) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "select pg_advisory_xact_lock($1, hashtext($2))",
        DISPATCH_LOCK_NAMESPACE,
        queue
    )
    .execute(db)
    .await?;
    Ok(())
}

/// What a queue with dispatch limits is using now: its active jobs, the job starts recorded
/// under `rate_key` within the last `period_ms` (0 without a rate limit), and the time they
/// were counted at (the time the claim that follows starts its jobs at).
pub async fn dispatch_usage(
    db: &mut sqlx::PgConnection,
    queue: &str,
    rate_key: &str,
    period_ms: i64,
) -> Result<(i64, i64, DateTime<Utc>), sqlx::Error> {
    let r = sqlx::query!(
        r#"
        with t as (select clock_timestamp() as now)
        select (select count(*) from ojs_job where queue = $1 and state = 'active') as "active!",
               (select coalesce(sum(jobs), 0) from ojs_rate_window, t
                 where $3 > 0 and key = $2
                   and started_at > t.now - $3 * interval '1 millisecond')::int8 as "started!",
               (select now from t) as "now!"
        "#,
        queue,
        rate_key,
        period_ms as f64,
    )
    .fetch_one(db)
    .await?;
    Ok((r.active, r.started, r.now))
}

/// Records `jobs` starts under `rate_key` at `at`, and forgets starts older than `period_ms`.
pub async fn record_starts(
    db: &mut sqlx::PgConnection,
    rate_key: &str,
    jobs: i32,
    at: DateTime<Utc>,
    period_ms: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"
        with forgotten as (
            delete from ojs_rate_window
             where key = $1 and started_at <= $3::timestamptz - $4 * interval '1 millisecond'
        )
        insert into ojs_rate_window (key, started_at, jobs) values ($1, $3::timestamptz, $2)
        "#,
        rate_key,
        jobs,
        at,
        period_ms as f64,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Unfinished jobs by queue and state, and each bounded queue's bound: the `ojs_queue_depth`,
/// `ojs_queue_max_size` and `ojs_queue_utilization` gauges.
pub async fn depth_gauges(
    db: impl PgExecutor<'_> + Copy,
) -> Result<(Vec<(String, String, i64)>, Vec<(String, i64)>), sqlx::Error> {
    let depth = sqlx::query!(
        r#"
        select queue as "queue!", state::text as "state!", count(*) as "jobs!"
          from ojs_job
         where state in ('scheduled', 'available', 'pending', 'retryable', 'active')
         group by queue, state
        "#,
    )
    .fetch_all(db)
    .await?
    .into_iter()
    .map(|r| (r.queue, r.state, r.jobs))
    .collect();
    let bounds = sqlx::query!(
        r#"
        select queue, max_jobs as "max_jobs!" from ojs_queue_capacity
         where queue <> '_default' and max_jobs is not null
        "#,
    )
    .fetch_all(db)
    .await?
    .into_iter()
    .map(|r| (r.queue, r.max_jobs))
    .collect();
    Ok((depth, bounds))
}

/// Bumps the configuration generation (every process reloads its cached configuration).
pub async fn bump_generation(db: impl PgExecutor<'_>) -> Result<(), sqlx::Error> {
    sqlx::query!("update ojs_queue_config_generation set generation = generation + 1")
        .execute(db)
        .await?;
    Ok(())
}
