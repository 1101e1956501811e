//! Deleting a queue: its waiting jobs are discarded or moved, and the queue drains while
//! active jobs finish.

use sqlx::PgExecutor;

use super::row::QueueState;

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
               (select count(*) from ojs_job_held h where h.queue = q.name) as "active!"
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
