//! Statements on `ojs_worker` (and the reservations workers hold in `ojs_job`).

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

/// What a worker says about itself in a heartbeat.
#[derive(Debug, Clone, Default)]
pub struct HeartbeatParams<'a> {
    pub worker_id: &'a str,
    /// Self-reported state: running, quiet, terminate or drain.
    pub state: &'a str,
    pub hostname: Option<&'a str>,
    pub pid: Option<i32>,
    pub queues: Option<Vec<String>>,
    pub concurrency: Option<i32>,
    /// Labels as compact JSON.
    pub labels: Option<String>,
    pub pool: Option<&'a str>,
    pub started_at: Option<DateTime<Utc>>,
    /// Jobs the worker says it is executing.
    pub job_ids: Vec<Uuid>,
    /// Extension requested for each reservation; default: the claim's own length.
    pub visibility_timeout_ms: Option<i64>,
}

/// The server's answer to a heartbeat.
#[derive(Debug, Clone)]
pub struct HeartbeatOutcome {
    /// The server-side directive for the worker: empty, quiet or terminate.
    pub directive: String,
    /// Whether this heartbeat was the worker's first contact.
    pub registered: bool,
    /// Reported jobs whose reservation was extended.
    pub extended: Vec<Uuid>,
    /// Reported jobs that have been cancelled: the worker should stop them.
    pub cancelled: Vec<Uuid>,
    /// The database clock when the heartbeat was recorded.
    pub server_time: DateTime<Utc>,
    /// Reported jobs the worker no longer holds (reclaimed, finished, owned by another worker,
    /// or unknown): the worker should stop them too; their outcome is no longer its to report.
    pub lost: Vec<Uuid>,
}

/// BEAT: records the worker as alive (registering it on first contact) and extends the
/// reservations it still holds among `job_ids`, in one statement.
pub async fn heartbeat(
    db: impl PgExecutor<'_>,
    p: &HeartbeatParams<'_>,
) -> Result<HeartbeatOutcome, sqlx::Error> {
    let row = sqlx::query!(
        r#"
        with worker as (
            insert into ojs_worker as w
                   (id, state, hostname, pid, queues, concurrency, labels, pool, started_at)
            values ($1, $2, $3, $4, $5, $6, $7::text::json, $8, $9)
            on conflict (id) do update
               set state = excluded.state,
                   hostname = coalesce(excluded.hostname, w.hostname),
                   pid = coalesce(excluded.pid, w.pid),
                   queues = coalesce(excluded.queues, w.queues),
                   concurrency = coalesce(excluded.concurrency, w.concurrency),
                   labels = coalesce(excluded.labels, w.labels),
                   pool = coalesce(excluded.pool, w.pool),
                   started_at = coalesce(excluded.started_at, w.started_at),
                   last_heartbeat_at = now()
            returning w.directive, (w.xmax = 0) as registered
        ),
        listed as (
            select distinct unnest($10::uuid[]) as id
        ),
        extended as (
            update ojs_job j
               set visible_until = now() + coalesce($11, j.reservation_ms) * interval '1 millisecond'
              from listed l
             where j.id = l.id
               and j.state = 'active'
               and (j.worker_id is null or j.worker_id = $1)
            returning j.id
        )
        select now() as "server_time!",
               (select directive from worker) as "directive!",
               (select registered from worker) as "registered!",
               array(select id from extended) as "extended!",
               array(select l.id from listed l join ojs_job j on j.id = l.id
                      where j.state = 'cancelled') as "cancelled!",
               array(select l.id from listed l
                      where l.id not in (select id from extended)
                        and not exists (select 1 from ojs_job j
                                         where j.id = l.id and j.state = 'cancelled')) as "lost!"
        "#,
        p.worker_id,
        p.state,
        p.hostname,
        p.pid,
        p.queues.as_deref(),
        p.concurrency,
        p.labels,
        p.pool,
        p.started_at,
        &p.job_ids,
        p.visibility_timeout_ms,
    )
    .fetch_one(db)
    .await?;
    Ok(HeartbeatOutcome {
        directive: row.directive,
        registered: row.registered,
        extended: row.extended,
        cancelled: row.cancelled,
        lost: row.lost,
        server_time: row.server_time,
    })
}

/// A worker's liveness as seen by the server.
#[derive(Debug, Clone)]
pub struct WorkerHealth {
    /// Self-reported state: running, quiet, terminate or drain.
    pub state: String,
    /// Server-side directive: empty, quiet or terminate.
    pub directive: String,
    pub last_heartbeat_at: DateTime<Utc>,
    /// Whether the last heartbeat is older than the stale threshold.
    pub stale: bool,
    /// Jobs the worker currently holds.
    pub active_jobs: i64,
}

/// A worker's liveness; `stale_after` is how long without a heartbeat makes it stale.
pub async fn health(
    db: impl PgExecutor<'_>,
    worker_id: &str,
    stale_after: std::time::Duration,
) -> Result<Option<WorkerHealth>, sqlx::Error> {
    let stale_after_ms = i64::try_from(stale_after.as_millis()).unwrap_or(i64::MAX);
    let row = sqlx::query!(
        r#"
        select w.state, w.directive, w.last_heartbeat_at,
               w.last_heartbeat_at < now() - $2::int8 * interval '1 millisecond' as "stale!",
               (select count(*) from ojs_job j
                 where j.worker_id = w.id and j.state = 'active') as "active_jobs!"
          from ojs_worker w
         where w.id = $1
        "#,
        worker_id,
        stale_after_ms,
    )
    .fetch_optional(db)
    .await?;
    Ok(row.map(|r| WorkerHealth {
        state: r.state,
        directive: r.directive,
        last_heartbeat_at: r.last_heartbeat_at,
        stale: r.stale,
        active_jobs: r.active_jobs,
    }))
}

/// Deletes every worker (test hook `POST /ojs/v1/admin/reset` only).
pub async fn delete_all(db: impl PgExecutor<'_>) -> Result<(), sqlx::Error> {
    sqlx::query!("truncate ojs_worker").execute(db).await?;
    Ok(())
}
