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
             where phase <> 'taken'
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

/// What [`lock_overdue`] found: the overdue jobs it locked, the effective "now", and whether
/// more may be due than it looked at.
#[derive(Debug)]
pub struct Overdue {
    pub jobs: Vec<Job>,
    pub now: DateTime<Utc>,
    pub more: bool,
}

/// Reaper: reads up to `limit` due leases (migration V29), earliest first, and locks up to
/// `limit` of their active jobs whose own reservation, execution timeout or total timeout
/// passed (earliest first), for the caller to decide their outcome and end them with
/// [`super::release_many`] in the same transaction, which counts them off their leases.
///
/// Each lease is brought up to date in the same statement: deleted when it holds no other
/// active job, otherwise due again at the earliest deadline among the jobs it keeps (a job
/// another transaction has locked, or one beyond `limit`, keeps it due now), with `open`
/// recounted. A heartbeat extends a job's reservation without touching its lease, so a lease may
/// come due before any of its jobs is overdue; it is then only moved on.
pub async fn lock_overdue(
    db: impl PgExecutor<'_>,
    now: Option<DateTime<Utc>>,
    limit: i64,
) -> Result<Overdue, sqlx::Error> {
    let rows = sqlx::query!(
        r#"
        with due as (
            select l.id, (select lj.job_ids from ojs_lease_jobs lj where lj.lease_id = l.id) as job_ids
              from ojs_lease l
             where l.due_at <= coalesce($1::timestamptz, now())
             order by l.due_at
             limit $2
               for update of l skip locked
        ),
        -- The lease's jobs still held under it, through the primary key.
        held as (
            -- (An active job always has a reservation; were it without any deadline, it would
            -- keep its lease, never due, rather than lose it.)
            select d.id as lease_id, j.id,
                   coalesce(least(j.visible_until, j.timeout_at, j.total_deadline_at),
                            'infinity') as deadline
              from due d
             cross join lateral unnest(d.job_ids) as x(id)
              join ojs_job j on j.id = x.id
             where j.lease_id = d.id and j.state::text = 'active'
        ),
        overdue as (
            select j, j.id
              from ojs_job j
             where j.id in (select h.id from held h
                             where h.deadline <= coalesce($1::timestamptz, now())
                             order by h.deadline
                             limit $2)
               and j.state::text = 'active'
               for update skip locked
        ),
        kept as (
            select d.id,
                   count(h.id) as held,
                   min(h.deadline) filter (where h.id not in (select o.id from overdue o)) as next_due
              from due d
              left join held h on h.lease_id = d.id
             group by d.id
        ),
        -- Nothing left but what the caller releases now: the lease goes.
        closed as (
            delete from ojs_lease l using kept k where l.id = k.id and k.next_due is null
        ),
        -- `open` counts the jobs released now too: their release counts them off.
        moved_on as (
            update ojs_lease l
               set open = k.held, due_at = k.next_due
              from kept k
             where l.id = k.id and k.next_due is not null
        )
        -- One row at least, for the time and the count of leases settled (deleted, or due
        -- again later): a lease kept due now (a job another transaction holds) is no progress.
        select o.j as "job?: Job", coalesce($1::timestamptz, now()) as "now!",
               (select count(*) from kept k
                 where k.next_due is null or k.next_due > coalesce($1::timestamptz, now())) as "leases!"
          from (select 1) one
          left join overdue o on true
        "#,
        now,
        limit,
    )
    .fetch_all(db)
    .await?;
    let leases = rows.first().map_or(0, |r| r.leases);
    let at = rows.first().map(|r| r.now);
    let jobs: Vec<Job> = rows.into_iter().filter_map(|r| r.job).collect();
    // Another batch at once only after a full one that made progress: leases kept due by
    // jobs other transactions hold wait for the next pass.
    let more = jobs.len() as i64 >= limit || leases >= limit;
    Ok(Overdue {
        now: at.or(now).unwrap_or_else(Utc::now),
        jobs,
        more,
    })
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
         -- Through the workers' leases (migration V29) and the primary key.
         where j.id in (select h.job_id from ojs_job_held h where h.worker_id = any($1::text[]))
           and j.state::text = 'active' and j.worker_id = any($1::text[])
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
