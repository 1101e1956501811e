//! Deadlines: waiting jobs that may no longer start, and active jobs whose time is up.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

use crate::job::Job;

/// Expirer: discards up to `limit` waiting jobs whose `expires_at`, enqueue TTL
/// (`claim_deadline_at`) or total timeout passed, earliest deadline first, with error `expired`.
/// They enter the dead-letter queue unless their retry policy says `on_exhaustion: discard`.
/// Returns how many were discarded, per queue and job type.
pub async fn expire_due(
    db: impl PgExecutor<'_>,
    now: Option<DateTime<Utc>>,
    limit: i64,
) -> Result<Vec<(String, String, i64)>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"
        with doomed as (
            select id,
                   state as prev,
                   coalesce($1::timestamptz, now()) as now,
                   jsonb_build_object(
                       'code', 'expired',
                       'type', 'expired',
                       'message', case
                           when total_deadline_at <= coalesce($1::timestamptz, now())
                               then 'The job''s total_timeout elapsed before it finished.'
                           when claim_deadline_at <= coalesce($1::timestamptz, now())
                               then 'The job was not claimed within its enqueue_ttl.'
                           else 'The job''s expires_at passed before it could start.'
                       end) as error
              from ojs_job
             where state in ('scheduled', 'available', 'pending', 'retryable')
               and (expires_at is not null or claim_deadline_at is not null
                    or total_deadline_at is not null)
               and least(expires_at, claim_deadline_at, total_deadline_at)
                   <= coalesce($1::timestamptz, now())
             order by least(expires_at, claim_deadline_at, total_deadline_at)
             limit $2
               for update skip locked
        ),
        expired as (
            update ojs_job j
               set state = 'discarded',
                   discarded_at = d.now,
                   completed_at = d.now,
                   next_retry_at = null,
                   dead_lettered_at = case when coalesce(j.retry ->> 'on_exhaustion', 'dead_letter') = 'dead_letter'
                                           then d.now end,
                   error = d.error,
                   errors = j.errors || jsonb_build_array(ojs_error_entry(j.attempt, d.error, d.now))
              from doomed d
             where j.id = d.id
            returning j, d.prev
        ),
        events as (
            insert into ojs_event (type, subject, job_id, queue, job_type, from_state, to_state, data)
            select e.type, (x.j).id::text, (x.j).id, (x.j).queue, (x.j).type, e.from_state,
                   e.to_state, e.data
              from expired x
              cross join lateral ojs_job_events(x.prev, null, null, null, 0, null, (x.j).priority, x.j) e
             order by (x.j).seq, e.ord
        )
        select (x.j).queue as "queue!", (x.j).type as "job_type!", count(*) as "expired!"
          from expired x
         group by (x.j).queue, (x.j).type
        "#,
        now,
        limit,
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.queue, r.job_type, r.expired))
        .collect())
}

/// Reaper: locks up to `limit` active jobs whose reservation, execution timeout or total timeout
/// passed (earliest first), for the caller to decide their outcome and end them with
/// [`super::release_many`] in the same transaction. Also returns the effective "now".
pub async fn lock_overdue(
    db: impl PgExecutor<'_>,
    now: Option<DateTime<Utc>>,
    limit: i64,
) -> Result<(Vec<Job>, DateTime<Utc>), sqlx::Error> {
    let rows = sqlx::query!(
        r#"
        select j as "job!: Job", coalesce($1::timestamptz, now()) as "now!"
          from ojs_job j
         where j.state = 'active'
           and least(j.visible_until, j.timeout_at, j.total_deadline_at) <= coalesce($1::timestamptz, now())
         order by least(j.visible_until, j.timeout_at, j.total_deadline_at)
         limit $2
           for update skip locked
        "#,
        now,
        limit,
    )
    .fetch_all(db)
    .await?;
    let now = match rows.first() {
        Some(row) => row.now,
        None => now.unwrap_or_else(Utc::now),
    };
    Ok((rows.into_iter().map(|r| r.job).collect(), now))
}

/// Locks up to `limit` active jobs held by `workers` (a stale or departing worker's jobs), for
/// the caller to release them with [`super::release_many`] in the same transaction.
pub async fn lock_held_by(
    db: impl PgExecutor<'_>,
    workers: &[String],
    limit: i64,
) -> Result<Vec<Job>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        select j as "job!: Job"
          from ojs_job j
         where j.state = 'active' and j.worker_id = any($1::text[])
         order by j.started_at
         limit $2
           for update skip locked
        "#,
        workers,
        limit,
    )
    .fetch_all(db)
    .await
}
