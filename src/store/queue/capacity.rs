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
    // The statements are the SQL function ojs_queue_drop_oldest (migration V21), which
    // ojs_enqueue calls too.
    let rows = sqlx::query!(
        r#"
        select dropped_queue as "queue!", dropped_type as "job_type!"
          from ojs_queue_drop_oldest($1::text, $2::int8, $3::int8)
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
        select (select count(*) from ojs_job_held where queue = $1) as "active!",
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

/// The figures of the queue gauges: unfinished jobs by queue and state (`ojs_queue_depth`),
/// how long each queue's oldest available job has waited, in seconds
/// (`ojs_queue_oldest_available_age_seconds`: the queue's latency, what to scale workers on),
/// and each bounded queue's bound (`ojs_queue_max_size`, `ojs_queue_utilization`).
#[derive(Debug, Clone, Default)]
pub struct DepthGauges {
    pub depth: Vec<(String, String, i64)>,
    pub oldest_available: Vec<(String, f64)>,
    pub bounds: Vec<(String, i64)>,
}

/// Reads [`DepthGauges`]: one scan of the unfinished jobs, and the bounds.
pub async fn depth_gauges(db: &mut sqlx::PgConnection) -> Result<DepthGauges, sqlx::Error> {
    let rows = super::depths(&mut *db, None).await?;
    let oldest_available = rows
        .iter()
        .filter(|r| r.1 == "available")
        .filter_map(|r| Some((r.0.clone(), r.3?)))
        .collect();
    let depth = rows.into_iter().map(|r| (r.0, r.1, r.2)).collect();
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
    Ok(DepthGauges {
        depth,
        oldest_available,
        bounds,
    })
}
