//! Statements on `ojs_worker` (and the reservations workers hold in `ojs_job`).
//!
//! A worker becomes known when it registers, heartbeats or fetches. Registration and heartbeats
//! make it subject to stale detection (`last_heartbeat_at`); a worker only ever seen fetching is
//! listed but never declared stale. Worker events (`worker.started`, `worker.quiet`,
//! `worker.heartbeat`, `worker.stopped`) are written by the table's trigger.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

use crate::job::RawJson;
use crate::scheduling::Strategy;
use crate::wire::duration::millis;
use crate::worker::{EffectiveState, WorkerDirective, WorkerState};

/// A stored name as its type; the table's checks keep them valid, so a name that does not
/// parse (a row edited by hand) is logged and read as the type's default.
fn stored<T: std::str::FromStr + Default>(column: &str, name: &str) -> T {
    name.parse().unwrap_or_else(|_| {
        tracing::warn!(column, value = name, "unknown value in ojs_worker; ignored");
        T::default()
    })
}

/// What a worker says about itself (heartbeat or registration). `None` fields keep the stored
/// value.
#[derive(Debug, Clone, Default)]
pub struct WorkerReport<'a> {
    pub worker_id: &'a str,
    /// Self-reported state.
    pub state: WorkerState,
    pub hostname: Option<&'a str>,
    pub pid: Option<i32>,
    pub queues: Option<Vec<String>>,
    pub concurrency: Option<i32>,
    /// Labels as compact JSON.
    pub labels: Option<String>,
    pub pool: Option<&'a str>,
    pub started_at: Option<DateTime<Utc>>,
    /// Per-worker fetch defaults (registration only).
    pub strategy: Option<Strategy>,
    /// Weights as compact JSON (registration only).
    pub weights: Option<String>,
    /// The tenant the request acts as: a new worker becomes the tenant's, and a worker of
    /// another tenant (or of none) is left as it was.
    pub tenant: Option<&'a str>,
}

/// A heartbeat: the report plus the jobs the worker says it runs.
#[derive(Debug, Clone, Default)]
pub struct HeartbeatParams<'a> {
    pub report: WorkerReport<'a>,
    /// Jobs the worker says it is executing.
    pub job_ids: Vec<Uuid>,
    /// Extension requested for each reservation; default: the claim's own length.
    pub visibility_timeout_ms: Option<i64>,
    /// Test hook, on only with `OJS_TEST_HOOKS` (for the conformance suite's worker tests):
    /// escalate the directive from `meta.test_directive` (`quiet` or `terminate`) of the
    /// reported jobs.
    pub directives_from_jobs: bool,
    /// A heartbeat for one job, refused unless the worker still holds it: then nothing is
    /// written, the worker's own record included.
    pub refused_unless_extended: bool,
}

/// The server's answer to a heartbeat.
#[derive(Debug, Clone)]
pub struct HeartbeatOutcome {
    /// The server-side directive for the worker.
    pub directive: WorkerDirective,
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

/// BEAT: records the worker as alive (registering it on first contact, reviving it if it was
/// stale) and extends the reservations it still holds among `job_ids`, in one statement.
pub async fn heartbeat(
    db: impl PgExecutor<'_>,
    p: &HeartbeatParams<'_>,
) -> Result<HeartbeatOutcome, sqlx::Error> {
    let r = &p.report;
    let row = sqlx::query!(
        r#"
        with listed as (
            select distinct unnest($10::uuid[]) as id
        ),
        hook as (
            select case max(case j.meta ->> 'test_directive' when 'terminate' then 2
                                                             when 'quiet' then 1 else 0 end)
                        when 2 then 'terminate' when 1 then 'quiet' else '' end as directive
              from ojs_job j
              join listed l on l.id = j.id
             -- Through the primary key (see store::job::complete_many on `state::text`).
             where $12 and j.state::text = 'active' and (j.worker_id is null or j.worker_id = $1)
        ),
        extended as (
            update ojs_job j
               set visible_until = now() + coalesce($11, j.reservation_ms) * interval '1 millisecond'
              from listed l
             -- Through the primary key (see store::job::complete_many on `state::text`).
             where j.id = l.id
               and j.state::text = 'active'
               and (j.worker_id is null or j.worker_id = $1)
            returning j.id, j
        ),
        worker as (
            insert into ojs_worker as w
                   (id, state, hostname, pid, queues, concurrency, labels, pool, started_at,
                    directive, last_heartbeat_at, last_seen_at, tenant)
            select $1, $2, $3, $4, $5, $6, $7::text::json, $8, $9,
                   (select directive from hook), now(), now(), $14
             where not $13 or exists (select 1 from extended)
            on conflict (id) do update
               set state = excluded.state,
                   hostname = coalesce(excluded.hostname, w.hostname),
                   pid = coalesce(excluded.pid, w.pid),
                   queues = coalesce(excluded.queues, w.queues),
                   concurrency = coalesce(excluded.concurrency, w.concurrency),
                   labels = coalesce(excluded.labels, w.labels),
                   pool = coalesce(excluded.pool, w.pool),
                   started_at = coalesce(excluded.started_at, w.started_at),
                   directive = ojs_worker_directive_max(w.directive, excluded.directive),
                   last_heartbeat_at = now(),
                   last_seen_at = now(),
                   stale_at = null
             where $14::text is null or w.tenant = $14
            returning w.directive, (w.xmax = 0) as registered
        ),
        events as (
            insert into ojs_event (type, subject, job_id, queue, job_type, data)
            select 'job.heartbeat', (x.j).id::text, (x.j).id, (x.j).queue, (x.j).type,
                   ojs_job_heartbeat_data(x.j)
              from extended x
        )
        select now() as "server_time!",
               coalesce((select directive from worker), '') as "directive!",
               coalesce((select registered from worker), false) as "registered!",
               array(select id from extended) as "extended!",
               array(select l.id from listed l join ojs_job j on j.id = l.id
                      where j.state = 'cancelled') as "cancelled!",
               array(select l.id from listed l
                      where l.id not in (select id from extended)
                        and not exists (select 1 from ojs_job j
                                         where j.id = l.id and j.state = 'cancelled')) as "lost!"
        "#,
        r.worker_id,
        r.state.as_str(),
        r.hostname,
        r.pid,
        r.queues.as_deref(),
        r.concurrency,
        r.labels,
        r.pool,
        r.started_at,
        &p.job_ids,
        p.visibility_timeout_ms,
        p.directives_from_jobs,
        p.refused_unless_extended,
        r.tenant,
    )
    .fetch_one(db)
    .await?;
    Ok(HeartbeatOutcome {
        directive: stored("directive", &row.directive),
        registered: row.registered,
        extended: row.extended,
        cancelled: row.cancelled,
        lost: row.lost,
        server_time: row.server_time,
    })
}

/// Registration: creates or updates the worker record (a registration counts as a heartbeat and
/// revives a stale worker). Returns whether the worker is new, its directive and the database
/// clock; `None` when the worker id belongs to a tenant other than `r.tenant` (or to none),
/// which is left as it was.
pub async fn register(
    db: impl PgExecutor<'_>,
    r: &WorkerReport<'_>,
) -> Result<Option<(bool, WorkerDirective, DateTime<Utc>)>, sqlx::Error> {
    let row = sqlx::query!(
        r#"
        insert into ojs_worker as w
               (id, state, hostname, pid, queues, concurrency, labels, pool, started_at, strategy,
                weights, last_heartbeat_at, last_seen_at, tenant)
        values ($1, $2, $3, $4, $5, $6, $7::text::json, $8, $9, $10, $11::text::json, now(), now(),
                $12)
        on conflict (id) do update
           set state = excluded.state,
               hostname = coalesce(excluded.hostname, w.hostname),
               pid = coalesce(excluded.pid, w.pid),
               queues = coalesce(excluded.queues, w.queues),
               concurrency = coalesce(excluded.concurrency, w.concurrency),
               labels = coalesce(excluded.labels, w.labels),
               pool = coalesce(excluded.pool, w.pool),
               started_at = coalesce(excluded.started_at, w.started_at),
               strategy = coalesce(excluded.strategy, w.strategy),
               weights = coalesce(excluded.weights, w.weights),
               last_heartbeat_at = now(),
               last_seen_at = now(),
               stale_at = null
         where $12::text is null or w.tenant = $12
        returning (w.xmax = 0) as "created!", w.directive, now() as "now!"
        "#,
        r.worker_id,
        r.state.as_str(),
        r.hostname,
        r.pid,
        r.queues.as_deref(),
        r.concurrency,
        r.labels,
        r.pool,
        r.started_at,
        r.strategy.map(Strategy::as_str),
        r.weights,
        r.tenant,
    )
    .fetch_optional(db)
    .await?;
    Ok(row.map(|row| (row.created, stored("directive", &row.directive), row.now)))
}

/// Records that a worker fetched (creating a bare record for an unknown worker id). Such a
/// record is not subject to stale detection until the worker heartbeats or registers. Returns
/// what the worker registered with; `None` when the worker id belongs to a tenant other than
/// `tenant` (or to none), which is left as it was.
pub async fn record_seen(
    db: impl PgExecutor<'_>,
    worker_id: &str,
    tenant: Option<&str>,
) -> Result<Option<Registration>, sqlx::Error> {
    sqlx::query_as!(
        Registration,
        r#"
        insert into ojs_worker as w (id, last_seen_at, tenant) values ($1, now(), $2)
        on conflict (id) do update set last_seen_at = now()
         where $2::text is null or w.tenant = $2
        returning w.strategy, w.weights::text as weights, w.pool, w.concurrency
        "#,
        worker_id,
        tenant,
    )
    .fetch_optional(db)
    .await
}

/// The pool `worker_id` registered in (`None`: none, or no such worker).
pub async fn pool_of(
    db: impl PgExecutor<'_>,
    worker_id: &str,
) -> Result<Option<String>, sqlx::Error> {
    Ok(
        sqlx::query_scalar!("select pool from ojs_worker where id = $1", worker_id)
            .fetch_optional(db)
            .await?
            .flatten(),
    )
}

/// What a worker registered with that FETCH uses.
#[derive(Debug, Clone, Default)]
pub struct Registration {
    /// Fetch strategy (used when no pool configuration applies).
    pub strategy: Option<String>,
    /// Queue weights, JSON text.
    pub weights: Option<String>,
    /// The pool it belongs to.
    pub pool: Option<String>,
    /// Jobs it runs at once (`least-loaded`).
    pub concurrency: Option<i32>,
}

/// Jobs active now under `worker_id`'s reservation.
pub async fn active_jobs(db: impl PgExecutor<'_>, worker_id: &str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"select count(*) as "n!" from ojs_job_held where worker_id = $1"#,
        worker_id
    )
    .fetch_one(db)
    .await
}

/// A worker as the API shows it.
#[derive(Debug, Clone)]
pub struct WorkerRecord {
    pub id: String,
    /// What the worker is doing as the server sees it.
    pub effective_state: EffectiveState,
    /// Self-reported state.
    pub state: WorkerState,
    /// Server directive.
    pub directive: WorkerDirective,
    pub hostname: Option<String>,
    pub pid: Option<i32>,
    /// The queues it registered with, else its pool's.
    pub queues: Option<Vec<String>>,
    pub concurrency: Option<i32>,
    pub labels: Option<RawJson>,
    pub pool: Option<String>,
    pub strategy: Option<String>,
    pub weights: Option<RawJson>,
    pub started_at: Option<DateTime<Utc>>,
    pub registered_at: DateTime<Utc>,
    pub last_heartbeat_at: Option<DateTime<Utc>>,
    pub last_seen_at: DateTime<Utc>,
    pub stale: bool,
    pub active_job_ids: Vec<Uuid>,
}

/// A worker row as read, before its names are typed.
struct WorkerRow {
    id: String,
    effective_state: String,
    state: String,
    directive: String,
    hostname: Option<String>,
    pid: Option<i32>,
    queues: Option<Vec<String>>,
    concurrency: Option<i32>,
    labels: Option<RawJson>,
    pool: Option<String>,
    strategy: Option<String>,
    weights: Option<RawJson>,
    started_at: Option<DateTime<Utc>>,
    registered_at: DateTime<Utc>,
    last_heartbeat_at: Option<DateTime<Utc>>,
    last_seen_at: DateTime<Utc>,
    stale: bool,
    active_job_ids: Vec<Uuid>,
}

impl From<WorkerRow> for WorkerRecord {
    fn from(r: WorkerRow) -> WorkerRecord {
        WorkerRecord {
            effective_state: stored("effective state", &r.effective_state),
            state: stored("state", &r.state),
            directive: stored("directive", &r.directive),
            id: r.id,
            hostname: r.hostname,
            pid: r.pid,
            queues: r.queues,
            concurrency: r.concurrency,
            labels: r.labels,
            pool: r.pool,
            strategy: r.strategy,
            weights: r.weights,
            started_at: r.started_at,
            registered_at: r.registered_at,
            last_heartbeat_at: r.last_heartbeat_at,
            last_seen_at: r.last_seen_at,
            stale: r.stale,
            active_job_ids: r.active_job_ids,
        }
    }
}

/// One worker; `stale_after` is how long without a heartbeat makes it stale (even before the
/// detector has run).
pub async fn get(
    db: impl PgExecutor<'_>,
    worker_id: &str,
    stale_after: Duration,
) -> Result<Option<WorkerRecord>, sqlx::Error> {
    Ok(list(db, Some(worker_id), None, stale_after, 1, 0)
        .await?
        .pop())
}

/// Workers ordered by id (`only`: just that one; `tenant`: only the tenant's), `limit` from
/// `offset`.
pub async fn list(
    db: impl PgExecutor<'_>,
    only: Option<&str>,
    tenant: Option<&str>,
    stale_after: Duration,
    limit: i64,
    offset: i64,
) -> Result<Vec<WorkerRecord>, sqlx::Error> {
    let rows = sqlx::query_as!(
        WorkerRow,
        r#"
        select w.id, s.stale as "stale!",
               ojs_worker_effective_state(w.directive, w.state, s.stale) as "effective_state!",
               w.state, w.directive, w.hostname, w.pid,
               coalesce(w.queues, (select p.queues from ojs_pool p where p.name = w.pool)) as queues,
               w.concurrency, w.labels as "labels: RawJson", w.pool, w.strategy, w.weights as "weights: RawJson",
               w.started_at, w.registered_at, w.last_heartbeat_at, w.last_seen_at,
               array(select h.job_id from ojs_job_held h
                      where h.worker_id = w.id
                      order by h.started_at, h.job_id) as "active_job_ids!: Vec<Uuid>"
          from ojs_worker w
          cross join lateral (
              select w.stale_at is not null
                     or coalesce(w.last_heartbeat_at < now() - $2::int8 * interval '1 millisecond', false)
                     as stale
          ) s
         where ($1::text is null or w.id = $1) and ($5::text is null or w.tenant = $5)
         order by w.id
         limit $3 offset $4
        "#,
        only,
        millis(stale_after),
        limit,
        offset,
        tenant,
    )
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(WorkerRecord::from).collect())
}

/// Worker counts by effective state (only `tenant`'s workers when given): (total, running,
/// quiet, terminate (drain included), stale).
pub async fn summary(
    db: impl PgExecutor<'_>,
    tenant: Option<&str>,
    stale_after: Duration,
) -> Result<(i64, i64, i64, i64, i64), sqlx::Error> {
    let row = sqlx::query!(
        r#"
        select count(*) as "total!",
               count(*) filter (where e.state = 'running') as "running!",
               count(*) filter (where e.state = 'quiet') as "quiet!",
               count(*) filter (where e.state in ('terminate', 'drain')) as "terminate!",
               count(*) filter (where e.state = 'stale') as "stale!"
          from ojs_worker w
          cross join lateral (
              select ojs_worker_effective_state(
                         w.directive, w.state,
                         w.stale_at is not null
                         or coalesce(w.last_heartbeat_at < now() - $1::int8 * interval '1 millisecond', false))
                     as state
          ) e
         where $2::text is null or w.tenant = $2
        "#,
        millis(stale_after),
        tenant,
    )
    .fetch_one(db)
    .await?;
    Ok((row.total, row.running, row.quiet, row.terminate, row.stale))
}

/// Escalates the server directive of a worker (directives never de-escalate). Returns the
/// resulting directive, or `None` for an unknown worker.
pub async fn escalate_directive(
    db: impl PgExecutor<'_>,
    worker_id: &str,
    directive: WorkerDirective,
) -> Result<Option<WorkerDirective>, sqlx::Error> {
    let directive = sqlx::query_scalar!(
        r#"
        update ojs_worker w
           set directive = ojs_worker_directive_max(w.directive, $2)
         where w.id = $1
        returning w.directive
        "#,
        worker_id,
        directive.as_str(),
    )
    .fetch_optional(db)
    .await?;
    Ok(directive.map(|d| stored("directive", &d)))
}

/// Stale-worker detector: marks up to `limit` workers stale whose last heartbeat is older than
/// `stale_after` and returns their ids. `now` overrides the database clock (tests).
pub async fn mark_stale(
    db: impl PgExecutor<'_>,
    stale_after: Duration,
    now: Option<DateTime<Utc>>,
    limit: i64,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        with silent as (
            select id from ojs_worker
             where stale_at is null
               and last_heartbeat_at < coalesce($2::timestamptz, now()) - $1::int8 * interval '1 millisecond'
             order by last_heartbeat_at
             limit $3
               for update skip locked
        )
        update ojs_worker w
           set stale_at = coalesce($2::timestamptz, now())
          from silent s
         where w.id = s.id
        returning w.id
        "#,
        millis(stale_after),
        now,
        limit,
    )
    .fetch_all(db)
    .await
}

/// Stale workers still holding active jobs (whose release was cut short by a batch limit).
pub async fn stale_with_jobs(
    db: impl PgExecutor<'_>,
    limit: i64,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        select w.id from ojs_worker w
         where w.stale_at is not null
           and exists (select 1 from ojs_job_held h where h.worker_id = w.id)
         limit $1
        "#,
        limit,
    )
    .fetch_all(db)
    .await
}

/// Deletes workers stale since before `cutoff`, and workers only ever seen fetching that have
/// not been seen since `cutoff`. Returns how many were deleted.
pub async fn prune(
    db: impl PgExecutor<'_>,
    cutoff: DateTime<Utc>,
    limit: i64,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        with doomed as (
            select id from ojs_worker
             where stale_at < $1 or (last_heartbeat_at is null and last_seen_at < $1)
             limit $2
               for update skip locked
        ),
        deleted as (
            delete from ojs_worker w using doomed d where w.id = d.id returning 1
        )
        select count(*) as "deleted!" from deleted
        "#,
        cutoff,
        limit,
    )
    .fetch_one(db)
    .await
}

/// Deletes one worker; `only_stale` refuses a worker that is not stale. Returns whether a row
/// was deleted.
pub async fn delete(
    db: impl PgExecutor<'_>,
    worker_id: &str,
    only_stale_after: Option<Duration>,
) -> Result<bool, sqlx::Error> {
    let deleted = sqlx::query_scalar!(
        r#"
        delete from ojs_worker w
         where w.id = $1
           and ($2::int8 is null
                or w.stale_at is not null
                or coalesce(w.last_heartbeat_at < now() - $2::int8 * interval '1 millisecond', false))
        returning w.id
        "#,
        worker_id,
        only_stale_after.map(millis),
    )
    .fetch_optional(db)
    .await?;
    Ok(deleted.is_some())
}

/// Deletes every worker (test hook `POST /ojs/v1/admin/reset` only).
pub async fn delete_all(db: impl PgExecutor<'_>) -> Result<(), sqlx::Error> {
    sqlx::query!("truncate ojs_worker").execute(db).await?;
    Ok(())
}
