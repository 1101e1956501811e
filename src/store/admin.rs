//! Statements behind the [OJS admin API]: server-wide and per-queue figures, job listings with
//! filters, and the set operations of bulk actions and queue purges.
//!
//! Figures are read from `ojs_job` itself, so they cover the jobs retention still keeps; the
//! "recent" figures (throughput, latency) look at the jobs that finished within a window that
//! the caller passes in seconds.
//!
//! [OJS admin API]: https://github.com/openjobspec/spec/blob/main/spec/ojs-admin-api.md

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

use crate::job::{JobId, JobState};
use crate::store::queue::QueueCounts;
use crate::wire::duration::millis;

fn seconds(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Jobs by state (serialized as the admin API's `counts`/`jobs` object).
#[derive(Debug, Clone, Copy, Default, serde::Serialize, utoipa::ToSchema)]
#[schema(as = JobCounts)]
pub struct StateCounts {
    pub available: i64,
    pub active: i64,
    pub scheduled: i64,
    pub pending: i64,
    pub retryable: i64,
    pub completed: i64,
    pub discarded: i64,
    pub cancelled: i64,
}

impl From<&QueueCounts> for StateCounts {
    fn from(c: &QueueCounts) -> StateCounts {
        StateCounts {
            available: c.available,
            active: c.active,
            scheduled: c.scheduled,
            pending: c.pending,
            retryable: c.retryable,
            completed: c.completed,
            discarded: c.discarded,
            cancelled: c.cancelled,
        }
    }
}

/// The whole server at a glance.
#[derive(Debug, Clone, Copy)]
pub struct Overview {
    /// Queues that exist (`_default` is not a queue).
    pub queues: i64,
    /// Workers that are not stale.
    pub workers: i64,
    pub jobs: StateCounts,
    /// Jobs completed within the window.
    pub completed_recently: i64,
    /// Jobs discarded within the window.
    pub discarded_recently: i64,
}

/// A job holding a unique key: one with a key, in a state its policy counts (the policy's
/// `states`, else the default five unfinished states).
#[derive(Debug, Clone)]
pub struct UniqueHolder {
    pub id: JobId,
    pub unique_key: String,
    pub r#type: String,
    pub queue: String,
    pub state: JobState,
    pub created_at: DateTime<Utc>,
    pub unique_policy: crate::job::RawJson,
}

/// Jobs holding unique keys, by key (newest first within a key), a page at a time; and how many
/// there are. A policy's `period` is not applied here: the caller reports when it ends.
pub async fn unique_holders(
    db: impl PgExecutor<'_> + Copy,
    limit: i64,
    offset: i64,
) -> Result<(Vec<UniqueHolder>, i64), sqlx::Error> {
    let items = sqlx::query_as!(
        UniqueHolder,
        r#"
        select j.id as "id!: JobId", j.unique_key as "unique_key!", j.type as "type!",
               j.queue as "queue!", j.state as "state!: JobState", j.created_at as "created_at!",
               j.unique_policy as "unique_policy!: crate::job::RawJson"
          from ojs_job_all j
         where j.unique_key is not null
           and j.state::text = any(coalesce(
                   (select array_agg(s) from json_array_elements_text(
                        case when json_typeof(j.unique_policy -> 'states') = 'array'
                             then j.unique_policy -> 'states' end) s),
                   array['available', 'active', 'scheduled', 'retryable', 'pending']))
         order by j.unique_key, j.created_at desc, j.id
         limit $1 offset $2
        "#,
        limit,
        offset,
    )
    .fetch_all(db)
    .await?;
    let total = sqlx::query_scalar!(
        r#"
        select count(*) as "total!"
          from ojs_job_all j
         where j.unique_key is not null
           and j.state::text = any(coalesce(
                   (select array_agg(s) from json_array_elements_text(
                        case when json_typeof(j.unique_policy -> 'states') = 'array'
                             then j.unique_policy -> 'states' end) s),
                   array['available', 'active', 'scheduled', 'retryable', 'pending']))
        "#
    )
    .fetch_one(db)
    .await?;
    Ok((items, total))
}

/// Jobs enqueued, completed and discarded per `bucket_ms` since `since` (of `queue`, or all),
/// counted from the retained lifecycle events: `(bucket start in Unix ms, enqueued, completed,
/// discarded)`, only buckets with any. Reads every event since `since`; for the dashboard,
/// not for hot paths.
pub async fn history(
    db: impl PgExecutor<'_>,
    since: DateTime<Utc>,
    bucket_ms: i64,
    queue: Option<&str>,
) -> Result<Vec<(i64, i64, i64, i64)>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"
        select (floor(extract(epoch from time) * 1000 / $2::int8) * $2::int8)::int8 as "bucket!",
               coalesce(sum(n) filter (where type = 'job.enqueued'), 0)::int8 as "enqueued!",
               coalesce(sum(n) filter (where type = 'job.completed'), 0)::int8 as "completed!",
               coalesce(sum(n) filter (where type = 'job.discarded'), 0)::int8 as "discarded!"
          from (select time, type, coalesce(cardinality(job_ids), 1)::int8 as n
                  from ojs_event
                 where time >= $1
                   and type in ('job.enqueued', 'job.completed', 'job.discarded')
                   and ($3::text is null or queue = $3)) e
         group by 1
         order by 1
        "#,
        since,
        bucket_ms,
        queue,
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.bucket, r.enqueued, r.completed, r.discarded))
        .collect())
}

/// Queues (`_default` aside) and how many of them are paused.
pub async fn queue_counts(db: impl PgExecutor<'_>) -> Result<(i64, i64), sqlx::Error> {
    let r = sqlx::query!(
        r#"
        select count(*) as "total!", count(*) filter (where state = 'paused') as "paused!"
          from ojs_queue
         where name <> '_default'
        "#
    )
    .fetch_one(db)
    .await?;
    Ok((r.total, r.paused))
}

/// Queue, worker and job counts, and how many jobs completed and were discarded within
/// `window`. A worker without a heartbeat for `stale_after` counts as gone, as it does in the
/// worker listing (even before the detector has run).
pub async fn overview(
    db: impl PgExecutor<'_>,
    stale_after: Duration,
    window: Duration,
) -> Result<Overview, sqlx::Error> {
    let r = sqlx::query!(
        r#"
        select (select count(*) from ojs_queue where name <> '_default') as "queues!",
               (select count(*)
                  from ojs_worker w
                 where w.stale_at is null
                   and coalesce(w.last_heartbeat_at >= now() - $1::int8 * interval '1 millisecond',
                                true)) as "workers!",
               count(*) filter (where state = 'scheduled') as "scheduled!",
               count(*) filter (where state = 'available') as "available!",
               count(*) filter (where state = 'pending') as "pending!",
               count(*) filter (where state = 'active') as "active!",
               count(*) filter (where state = 'retryable') as "retryable!",
               count(*) filter (where state = 'completed') as "completed!",
               count(*) filter (where state = 'discarded') as "discarded!",
               count(*) filter (where state = 'cancelled') as "cancelled!",
               count(*) filter (where state = 'completed'
                                  and completed_at >= now() - $2::float8 * interval '1 second')
                   as "completed_recently!",
               count(*) filter (where state = 'discarded'
                                  and discarded_at >= now() - $2::float8 * interval '1 second')
                   as "discarded_recently!"
          from ojs_job_all
        "#,
        millis(stale_after),
        seconds(window),
    )
    .fetch_one(db)
    .await?;
    Ok(Overview {
        queues: r.queues,
        workers: r.workers,
        jobs: StateCounts {
            scheduled: r.scheduled,
            available: r.available,
            pending: r.pending,
            active: r.active,
            retryable: r.retryable,
            completed: r.completed,
            discarded: r.discarded,
            cancelled: r.cancelled,
        },
        completed_recently: r.completed_recently,
        discarded_recently: r.discarded_recently,
    })
}

/// What a queue did within the window.
#[derive(Debug, Clone, Copy, Default)]
pub struct QueueActivity {
    /// Jobs completed.
    pub completed: i64,
    /// Jobs discarded.
    pub discarded: i64,
    /// Execution time (claim to ACK) of the completed jobs, in milliseconds: 50th, 95th and
    /// 99th percentile; `None` when none completed.
    pub latency_ms: Option<[f64; 3]>,
}

/// The activity of each of `queues` within `window`, read from the jobs that finished in it
/// (through the index of finished jobs). A queue without such jobs is absent.
pub async fn queue_activity(
    db: impl PgExecutor<'_>,
    queues: &[String],
    window: Duration,
) -> Result<HashMap<String, QueueActivity>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"
        select queue as "queue!",
               count(*) filter (where state = 'completed') as "completed!",
               count(*) filter (where state = 'discarded') as "discarded!",
               percentile_cont(array[0.5, 0.95, 0.99]::float8[]) within group (
                   order by extract(epoch from completed_at - started_at) * 1000)
                   filter (where state = 'completed' and started_at is not null) as latency_ms
          from (select queue, state, started_at, completed_at
                  from ojs_job_done
                 where queue = any($1)
                   and completed_at >= now() - $2::float8 * interval '1 second'
                union all
                select queue, state, started_at, completed_at
                  from ojs_job
                 where queue = any($1)
                   and state = 'discarded'
                   and coalesce(discarded_at, cancelled_at, completed_at)
                       >= now() - $2::float8 * interval '1 second') j
         group by queue
        "#,
        queues,
        seconds(window),
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let latency_ms = r.latency_ms.and_then(|p| <[f64; 3]>::try_from(p).ok());
            (
                r.queue,
                QueueActivity {
                    completed: r.completed,
                    discarded: r.discarded,
                    latency_ms,
                },
            )
        })
        .collect())
}

/// When the job that has waited longest in `queue` became available (`None`: nothing waits).
pub async fn oldest_available_at(
    db: impl PgExecutor<'_>,
    queue: &str,
) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"select min(enqueued_at) from ojs_job where queue = $1 and state = 'available'"#,
        queue,
    )
    .fetch_one(db)
    .await
}

/// Deletes the finished (`completed`, `cancelled`, `discarded`) jobs among `ids` for good;
/// those that were in the dead-letter queue get their `dead_letter.deleted` event. Returns the
/// ids deleted.
pub async fn delete_finished(
    db: impl PgExecutor<'_>,
    ids: &[Uuid],
) -> Result<Vec<Uuid>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        with deleted_live as (
            delete from ojs_job j
             where j.id = any($1::uuid[])
               and j.state in ('completed', 'cancelled', 'discarded')
            returning j.id, j.queue, j.type, j.dead_lettered_at
        ),
        deleted_done as (
            delete from ojs_job_done j
             where j.id = any($1::uuid[])
            returning j.id, j.queue, j.type, j.dead_lettered_at
        ),
        deleted as (
            select * from deleted_live union all select * from deleted_done
        ),
        reported as (
            insert into ojs_event (type, subject, job_id, queue, job_type, data)
            select 'dead_letter.deleted', d.id::text, d.id, d.queue, d.type,
                   jsonb_build_object('job_id', d.id, 'job_type', d.type, 'queue', d.queue)
              from deleted d
             where d.dead_lettered_at is not null
        )
        select d.id as "id!" from deleted d
        "#,
        ids,
    )
    .fetch_all(db)
    .await
}

/// Purge: deletes up to `limit` jobs of `queue` in `states` (never `active`: a worker holds
/// those) created before `older_than` (any time when `None`). Jobs locked by a concurrent
/// operation are skipped. A workflow job deleted before it finished ends its node as
/// cancelled (`ojs_workflow_jobs_deleted`), so its workflow still ends: run it in a
/// transaction. Returns how many were deleted.
pub async fn purge_queue(
    db: &mut PgConnection,
    queue: &str,
    states: &[JobState],
    older_than: Option<DateTime<Utc>>,
    limit: i64,
) -> Result<i64, sqlx::Error> {
    let states: Vec<&str> = states
        .iter()
        .filter(|s| **s != JobState::Active)
        .map(|s| s.as_str())
        .collect();
    let row = sqlx::query!(
        r#"
        with doomed as (
            select id from ojs_job
             where queue = $1
               and state = any($2::text[]::ojs_job_state[])
               and state <> 'active'
               and ($3::timestamptz is null or created_at < $3)
             limit $4
               for update skip locked
        ),
        deleted as (
            delete from ojs_job j using doomed d where j.id = d.id
            returning j.id, j.extra, j.attempt, j.state
        ),
        -- Completed jobs live in ojs_job_done (migration V15).
        doomed_done as (
            select id from ojs_job_done
             where queue = $1
               and 'completed' = any($2::text[])
               and ($3::timestamptz is null or created_at < $3)
             limit $4
               for update skip locked
        ),
        deleted_done as (
            delete from ojs_job_done j using doomed_done d where j.id = d.id returning j.id
        ),
        unfinished as (
            select d.id, d.extra, d.attempt from deleted d
             where (d.extra -> 'workflow_id') is not null
               and d.state not in ('completed', 'discarded', 'cancelled')
        )
        select (select count(*) from deleted) + (select count(*) from deleted_done) as "purged!",
               (select array_agg(id) from unfinished) as "workflow_ids",
               (select array_agg(extra::text) from unfinished) as "workflow_extras",
               (select array_agg(attempt) from unfinished) as "workflow_attempts"
        "#,
        queue,
        &states as &[&str],
        older_than,
        limit,
    )
    .fetch_one(&mut *db)
    .await?;
    if let (Some(ids), Some(extras), Some(attempts)) =
        (row.workflow_ids, row.workflow_extras, row.workflow_attempts)
    {
        sqlx::query!(
            "select ojs_workflow_jobs_deleted($1::uuid[], $2::text[]::json[], $3::int[])",
            &ids,
            &extras,
            &attempts,
        )
        .fetch_one(&mut *db)
        .await?;
    }
    Ok(row.purged)
}
