//! Worker pools, tenant-fair queues and the dispatch counts of the scheduling statistics.
//!
//! A pool's concurrency is enforced under its dispatch lock ([`super::locks`]); pool changes
//! take the enqueue gate ([`super::locks::lock_out_enqueues`]).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgConnection, PgExecutor};

use crate::scheduling::pool::{StoredPool, WorkerPool};
use crate::scheduling::starvation::{self, QueueDispatch};

/// Live members and active jobs of a pool.
#[derive(Debug, Clone, Copy, Default)]
pub struct PoolUsage {
    pub active_workers: i64,
    pub active_jobs: i64,
}

/// Every pool, by name.
pub async fn all(db: impl PgExecutor<'_>) -> Result<Vec<StoredPool>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"
        select name, jsonb_build_object('queues', queues, 'concurrency', concurrency, 'strategy', strategy,
                                  'weights', weights, 'isolated', isolated,
                                  'starvation_prevention', starvation_prevention,
                                  'tenant_fairness', tenant_fairness) as "body!",
               created_at, updated_at
          from ojs_pool
         order by name
        "#
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|r| {
            let pool = WorkerPool::from_stored(&r.name, &r.body)?;
            Some(StoredPool {
                pool,
                created_at: r.created_at,
                updated_at: r.updated_at,
            })
        })
        .collect())
}

/// Writes `pool` (creating or replacing it); returns the pool as it was before, if it existed,
/// and the stored row.
pub async fn put(
    db: &mut PgConnection,
    pool: &WorkerPool,
) -> Result<(Option<WorkerPool>, StoredPool), sqlx::Error> {
    let before = sqlx::query!(
        r#"
        select name, jsonb_build_object('queues', queues, 'concurrency', concurrency, 'strategy', strategy,
                                  'weights', weights, 'isolated', isolated,
                                  'starvation_prevention', starvation_prevention,
                                  'tenant_fairness', tenant_fairness) as "body!"
          from ojs_pool where name = $1 for update
        "#,
        pool.name
    )
    .fetch_optional(&mut *db)
    .await?
    .and_then(|r| WorkerPool::from_stored(&r.name, &r.body));
    let row = sqlx::query!(
        r#"
        insert into ojs_pool as p (name, queues, concurrency, strategy, weights, isolated,
                                   starvation_prevention, tenant_fairness)
        values ($1, $2, $3, $4, $5, $6, $7, $8)
        on conflict (name) do update
           set queues = excluded.queues, concurrency = excluded.concurrency,
               strategy = excluded.strategy, weights = excluded.weights,
               isolated = excluded.isolated,
               starvation_prevention = excluded.starvation_prevention,
               tenant_fairness = excluded.tenant_fairness, updated_at = now()
        returning p.created_at, p.updated_at
        "#,
        pool.name,
        &pool.queues,
        pool.concurrency,
        pool.strategy.as_str(),
        pool.weights_json(),
        pool.isolated,
        pool.starvation_json(),
        pool.tenant_fairness_json(),
    )
    .fetch_one(&mut *db)
    .await?;
    Ok((
        before,
        StoredPool {
            pool: pool.clone(),
            created_at: row.created_at,
            updated_at: row.updated_at,
        },
    ))
}

/// Deletes a pool; whether it existed.
pub async fn delete(db: &mut PgConnection, name: &str) -> Result<bool, sqlx::Error> {
    let n = sqlx::query!("delete from ojs_pool where name = $1", name)
        .execute(db)
        .await?
        .rows_affected();
    Ok(n > 0)
}

/// Live members and active jobs of each pool.
pub async fn usage(
    db: impl PgExecutor<'_>,
    heartbeat_timeout_ms: i64,
) -> Result<BTreeMap<String, PoolUsage>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"
        select p.name as "name!",
               (select count(*) from ojs_worker w
                 where w.pool = p.name and w.stale_at is null
                   and greatest(w.last_heartbeat_at, w.last_seen_at)
                       > now() - $1 * interval '1 millisecond') as "workers!",
               (select count(*) from ojs_job_held h where h.pool = p.name) as "jobs!"
          from ojs_pool p
        "#,
        heartbeat_timeout_ms as f64,
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            (
                r.name,
                PoolUsage {
                    active_workers: r.workers,
                    active_jobs: r.jobs,
                },
            )
        })
        .collect())
}

/// Jobs active now that members of `pool` claimed.
pub async fn active_jobs(db: impl PgExecutor<'_>, pool: &str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"select count(*) as "n!" from ojs_job_held where pool = $1"#,
        pool
    )
    .fetch_one(db)
    .await
}

/// Available jobs of `queues` (each counted up to `cap`).
pub async fn available(
    db: impl PgExecutor<'_>,
    queues: &[String],
    cap: i64,
) -> Result<Vec<(String, i64)>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"
        select q.queue as "queue!",
               (select count(*) from (select 1 from ojs_job j
                                       where j.queue = q.queue and j.state = 'available'
                                       limit $2) x) as "n!"
          from unnest($1::text[]) q(queue)
        "#,
        queues,
        cap,
    )
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(|r| (r.queue, r.n)).collect())
}

/// Tenant settings of one tenant-fair queue.
#[derive(Debug, Clone, PartialEq)]
pub struct FairQueue {
    pub queue: String,
    pub pool: String,
    pub weights: Value,
    pub default_weight: i32,
}

/// The tenant-fair queues as stored.
pub async fn fair_queues(db: impl PgExecutor<'_>) -> Result<Vec<FairQueue>, sqlx::Error> {
    sqlx::query_as!(
        FairQueue,
        "select queue, pool, weights, default_weight from ojs_fair_queue order by queue"
    )
    .fetch_all(db)
    .await
}

/// Makes `queue` tenant-fair with the given settings. When it was not, its waiting jobs are
/// flagged and its available ones tagged, each tenant's in its current order, so the fair
/// order applies to the backlog as well.
pub async fn make_fair(db: &mut PgConnection, fair: &FairQueue) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"
        insert into ojs_fair_queue (queue, pool, weights, default_weight)
        values ($1, $2, $3, $4)
        on conflict (queue) do update
           set pool = excluded.pool, weights = excluded.weights,
               default_weight = excluded.default_weight
        "#,
        fair.queue,
        fair.pool,
        fair.weights,
        fair.default_weight,
    )
    .execute(&mut *db)
    .await?;
    sqlx::query!(
        r#"
        update ojs_job set tenant_fair = true
         where queue = $1 and state in ('scheduled', 'pending', 'retryable', 'active')
           and tenant_fair is not true
        "#,
        fair.queue
    )
    .execute(&mut *db)
    .await?;
    sqlx::query!(
        r#"
        with ranked as (
            select j.id, coalesce(j.meta ->> 'tenant_id', '') as tenant,
                   row_number() over (partition by j.priority, coalesce(j.meta ->> 'tenant_id', '')
                                      order by j.enqueued_at, j.seq)::double precision
                   / ojs_tenant_weight(f, coalesce(j.meta ->> 'tenant_id', '')) as fair_key
              from ojs_job j
              join ojs_fair_queue f on f.queue = j.queue
             where j.queue = $1 and j.state = 'available' and j.tenant_fair is not true
        )
        update ojs_job j
           set tenant_fair = true, tenant = r.tenant, fair_key = r.fair_key
          from ranked r
         where j.id = r.id
        "#,
        fair.queue
    )
    .execute(&mut *db)
    .await?;
    Ok(())
}

/// Makes `queue` dispatch in plain order again.
pub async fn make_unfair(db: &mut PgConnection, queue: &str) -> Result<(), sqlx::Error> {
    sqlx::query!("delete from ojs_fair_queue where queue = $1", queue)
        .execute(&mut *db)
        .await?;
    sqlx::query!(
        r#"
        update ojs_job set tenant_fair = false, tenant = nullif(meta ->> 'tenant_id', ''), fair_key = null
         where queue = $1 and tenant_fair
        "#,
        queue
    )
    .execute(&mut *db)
    .await?;
    Ok(())
}

/// One row of dispatch counts.
#[derive(Debug, Clone)]
pub struct DispatchCount {
    pub second: DateTime<Utc>,
    pub queue: String,
    pub pool: String,
    pub dispatched: i64,
    pub wait_ms: i64,
}

/// Adds dispatch counts.
pub async fn add_dispatches(
    db: impl PgExecutor<'_>,
    rows: &[DispatchCount],
) -> Result<(), sqlx::Error> {
    let seconds: Vec<DateTime<Utc>> = rows.iter().map(|r| r.second).collect();
    let queues: Vec<&str> = rows.iter().map(|r| r.queue.as_str()).collect();
    let pools: Vec<&str> = rows.iter().map(|r| r.pool.as_str()).collect();
    let counts: Vec<i64> = rows.iter().map(|r| r.dispatched).collect();
    let waits: Vec<i64> = rows.iter().map(|r| r.wait_ms).collect();
    sqlx::query!(
        r#"
        insert into ojs_dispatch_second as d (second, queue, pool, dispatched, wait_ms)
        select * from unnest($1::timestamptz[], $2::text[], $3::text[], $4::int8[], $5::int8[])
         order by 1, 2, 3
        on conflict (second, queue, pool) do update
           set dispatched = d.dispatched + excluded.dispatched,
               wait_ms = d.wait_ms + excluded.wait_ms
        "#,
        &seconds,
        &queues as &[&str],
        &pools as &[&str],
        &counts,
        &waits,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Deletes dispatch counts older than `keep_secs`.
pub async fn prune_dispatches(db: impl PgExecutor<'_>, keep_secs: i64) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query!(
        "delete from ojs_dispatch_second where second < now() - $1 * interval '1 second'",
        keep_secs as f64
    )
    .execute(db)
    .await?
    .rows_affected())
}

/// One queue's dispatches over the last `window_secs`, over all pools and replicas.
#[derive(Debug, Clone)]
pub struct QueueDispatches {
    pub queue: String,
    pub dispatched: i64,
    pub wait_ms: i64,
    /// Active jobs of the queue now.
    pub active: i64,
}

/// Dispatches per queue over the last `window_secs`, with each queue's active jobs; queues
/// in `also` are included even without either.
pub async fn dispatches(
    db: impl PgExecutor<'_>,
    window_secs: i64,
    also: &[String],
) -> Result<Vec<QueueDispatches>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"
        with recent as (
            select queue, sum(dispatched)::int8 as dispatched, sum(wait_ms)::int8 as wait_ms
              from ojs_dispatch_second
             where second > now() - $1 * interval '1 second'
             group by queue
        ),
        active as (
            select queue, count(*) as n from ojs_job_held group by queue
        ),
        names as (
            select queue from recent union select queue from active
            union select unnest($2::text[])
        )
        select n.queue as "queue!", coalesce(r.dispatched, 0) as "dispatched!",
               coalesce(r.wait_ms, 0) as "wait_ms!", coalesce(a.n, 0) as "active!"
          from names n
          left join recent r on r.queue = n.queue
          left join active a on a.queue = n.queue
         order by n.queue
        "#,
        window_secs as f64,
        also,
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| QueueDispatches {
            queue: r.queue,
            dispatched: r.dispatched,
            wait_ms: r.wait_ms,
            active: r.active,
        })
        .collect())
}

/// The dispatch records starvation detection needs: for each queue of the pools among `pools`
/// that have starvation prevention, when it was last dispatched from (end of that second;
/// `None`: not within the recorded minutes) and how many jobs it has available (up to 10 000).
pub async fn watched_dispatches(
    db: impl PgExecutor<'_>,
    pools: &[StoredPool],
) -> Result<Vec<QueueDispatch>, sqlx::Error> {
    let queues = starvation::watched_queues(pools);
    if queues.is_empty() {
        return Ok(Vec::new());
    }
    let rows = sqlx::query!(
        r#"
        select q.queue as "queue!",
               (select max(d.second) + interval '1 second' from ojs_dispatch_second d
                 where d.queue = q.queue) as last,
               (select count(*) from (select 1 from ojs_job j
                                       where j.queue = q.queue and j.state = 'available'
                                       limit 10000) x) as "available!",
               now() as "now!"
          from unnest($1::text[]) q(queue)
        "#,
        &queues,
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| QueueDispatch {
            queue: r.queue,
            last_dispatch: r.last,
            available: r.available,
            now: r.now,
        })
        .collect())
}

/// Deletes every pool, tenant-fair queue and dispatch count (test hook reset only).
pub async fn reset(db: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query!("delete from ojs_pool")
        .execute(&mut *db)
        .await?;
    sqlx::query!("delete from ojs_fair_queue")
        .execute(&mut *db)
        .await?;
    sqlx::query!("delete from ojs_dispatch_second")
        .execute(&mut *db)
        .await?;
    Ok(())
}
