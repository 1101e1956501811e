//! What bounded and limited queues use: capacity counters (and `drop_oldest`), dispatch
//! limits (active jobs and rate windows), and the depth gauges.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

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

/// The key a queue's job starts are recorded under in `ojs_rate_window`.
pub fn rate_key(queue: &str) -> String {
    format!("queue:{queue}")
}

/// For a rate-limited queue: the job starts recorded under `rate_key` within the last
/// `period_ms`, and its available jobs.
pub async fn rate_usage(
    db: impl PgExecutor<'_>,
    queue: &str,
    rate_key: &str,
    period_ms: i64,
) -> Result<(i64, i64), sqlx::Error> {
    let r = sqlx::query!(
        r#"
        select (select coalesce(sum(jobs), 0) from ojs_rate_window
                 where key = $2 and started_at > clock_timestamp() - $3 * interval '1 millisecond')::int8
                   as "started!",
               (select count(*) from ojs_job where queue = $1 and state = 'available') as "waiting!"
        "#,
        queue,
        rate_key,
        period_ms as f64,
    )
    .fetch_one(db)
    .await?;
    Ok((r.started, r.waiting))
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
    db: &mut sqlx::PgConnection,
) -> Result<(Vec<(String, String, i64)>, Vec<(String, i64)>), sqlx::Error> {
    let depth = sqlx::query!(
        r#"
        select queue as "queue!", state::text as "state!", count(*) as "jobs!"
          from ojs_job
         where state in ('scheduled', 'available', 'pending', 'retryable', 'active')
         group by queue, state
        "#,
    )
    .fetch_all(&mut *db)
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
    .fetch_all(&mut *db)
    .await?
    .into_iter()
    .map(|r| (r.queue, r.max_jobs))
    .collect();
    Ok((depth, bounds))
}
