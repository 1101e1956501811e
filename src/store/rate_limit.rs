//! Rate-limit keys of jobs (`ojs_rate_key`, migration V20): releasing held jobs, the keys the
//! releaser must look at, and each key's limits and use.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

/// Releases `key`'s held jobs as far as its limits allow (`ojs_rate_release`); returns the
/// queues that gained jobs, with how many. `wake`: the database wakes their long polls (an
/// enqueue announces them itself). Its own statement, committed without waiting for the WAL
/// flush: a release lost in a crash leaves its jobs held, and the releasers release them again.
pub async fn release(
    db: impl PgExecutor<'_>,
    key: &str,
    wake: bool,
) -> Result<Vec<(String, i32)>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"
        select r.released_queue as "queue!", r.released_jobs as "jobs!"
          from set_config('synchronous_commit', 'off', true),
               ojs_rate_release($1, $2) r
        "#,
        key,
        wake,
    )
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(|r| (r.queue, r.jobs)).collect())
}

/// [`release`] inside a caller's transaction, which keeps its own durability.
async fn release_in(db: impl PgExecutor<'_>, key: &str) -> Result<(), sqlx::Error> {
    sqlx::query!("select count(*) from ojs_rate_release($1)", key)
        .fetch_one(db)
        .await?;
    Ok(())
}

/// Up to `limit` keys whose check is due, earliest first, and when the next check after them
/// is due (`None`: no key waits for time).
pub async fn due(
    db: impl PgExecutor<'_>,
    limit: i64,
) -> Result<(Vec<String>, Option<DateTime<Utc>>), sqlx::Error> {
    let row = sqlx::query!(
        r#"
        with due as (
            select key from ojs_rate_key
             where next_check_at <= now()
             order by next_check_at
             limit $1
        )
        select array(select key from due) as "keys!",
               (select min(next_check_at) from ojs_rate_key
                 where next_check_at > now()) as "next_at"
        "#,
        limit,
    )
    .fetch_one(db)
    .await?;
    Ok((row.keys, row.next_at))
}

/// Up to `limit` keys that hold jobs back with no check to come (an enqueue whose process
/// died between its commit and its release): one loose walk of `ojs_job_rate_held_idx`.
pub async fn stranded(db: impl PgExecutor<'_>, limit: i64) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        with recursive held(key) as (
            (select j.rate_key from ojs_job j
              where j.phase = 'available' and j.rate_held
              order by j.rate_key limit 1)
            union all
            select (select j.rate_key from ojs_job j
                     where j.phase = 'available' and j.rate_held and j.rate_key > h.key
                     order by j.rate_key limit 1)
              from held h
             where h.key is not null
        )
        select h.key as "key!" from held h
         where h.key is not null
           and not exists (select from ojs_rate_key r
                            where r.key = h.key and r.next_check_at is not null)
         limit $1
        "#,
        limit,
    )
    .fetch_all(db)
    .await
}

/// A key's limits and use.
#[derive(Debug, Clone)]
pub struct KeyUsage {
    pub key: String,
    pub concurrency: Option<i32>,
    pub rate_limit: Option<i32>,
    pub rate_period_ms: Option<i64>,
    pub throttle_limit: Option<i32>,
    pub throttle_period_ms: Option<i64>,
    pub on_limit: String,
    pub blocked_until: Option<DateTime<Utc>>,
    pub override_concurrency: Option<i32>,
    pub override_rate_limit: Option<i32>,
    pub override_rate_period_ms: Option<i64>,
    pub override_throttle_limit: Option<i32>,
    pub override_throttle_period_ms: Option<i64>,
    pub override_expires_at: Option<DateTime<Utc>>,
    /// Whether an override is set and has not lapsed.
    pub overriding: bool,
    /// Jobs of the key running.
    pub active: i64,
    /// Released and not claimed yet (they count as started).
    pub released: i64,
    /// Held: waiting for the key.
    pub waiting: i64,
    /// Starts within the longest rate period (own or override).
    pub started: i64,
    /// The oldest of those starts.
    pub oldest_start: Option<DateTime<Utc>>,
    /// The latest start on record.
    pub last_start: Option<DateTime<Utc>>,
    pub limited: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// The keys' limits and use, by key: `keys` (all when `None`), a page of `limit` after
/// `offset`.
async fn read(
    db: impl PgExecutor<'_>,
    keys: Option<&[String]>,
    limit: i64,
    offset: i64,
) -> Result<Vec<KeyUsage>, sqlx::Error> {
    sqlx::query_as!(
        KeyUsage,
        r#"
        select k.key, k.concurrency, k.rate_limit, k.rate_period_ms, k.throttle_limit,
               k.throttle_period_ms, k.on_limit, k.blocked_until, k.override_concurrency,
               k.override_rate_limit, k.override_rate_period_ms, k.override_throttle_limit,
               k.override_throttle_period_ms, k.override_expires_at,
               (num_nonnulls(k.override_concurrency, k.override_rate_limit, k.override_throttle_limit) > 0
                and (k.override_expires_at is null or k.override_expires_at > now())) as "overriding!",
               f.active as "active!", f.released as "released!",
               (select count(*) from ojs_job j
                 where j.rate_key = k.key and j.phase = 'available' and j.rate_held) as "waiting!",
               w.started as "started!", w.oldest as "oldest_start", w.last as "last_start",
               k.limited, k.created_at, k.updated_at
          from ojs_rate_key k
          cross join lateral (
              select count(*) filter (where j.state = 'active') as active,
                     count(*) filter (where j.state = 'available') as released
                from ojs_job j
               where j.rate_key = k.key and j.rate_held is null and j.in_flight
          ) f
          cross join lateral (
              select coalesce(sum(x.jobs) filter (where x.started_at > now() - p.ms * interval '1 millisecond'), 0)::int8 as started,
                     min(x.started_at) filter (where x.started_at > now() - p.ms * interval '1 millisecond') as oldest,
                     max(x.started_at) as last
                from (select greatest(k.rate_period_ms, k.override_rate_period_ms, 0) as ms) p
                left join ojs_rate_window x on x.key = 'key:' || k.key
          ) w
         where $1::text[] is null or k.key = any($1::text[])
         order by k.key
         limit $2 offset $3
        "#,
        keys,
        limit,
        offset,
    )
    .fetch_all(db)
    .await
}

/// One key's limits and use; `None` for a key no job or override has named.
pub async fn usage(db: impl PgExecutor<'_>, key: &str) -> Result<Option<KeyUsage>, sqlx::Error> {
    Ok(read(db, Some(&[key.to_owned()]), 1, 0).await?.pop())
}

/// The keys, by key, a page at a time, and how many there are.
pub async fn list(
    db: impl PgExecutor<'_> + Copy,
    limit: i64,
    offset: i64,
) -> Result<(Vec<KeyUsage>, i64), sqlx::Error> {
    let rows = read(db, None, limit, offset).await?;
    let total = sqlx::query_scalar!(r#"select count(*) as "n!" from ojs_rate_key"#)
        .fetch_one(db)
        .await?;
    Ok((rows, total))
}

/// Forgets every key (the test reset; `store::queue::delete_all` forgets the starts).
pub async fn delete_all(db: &mut sqlx::PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query!("delete from ojs_rate_key")
        .execute(&mut *db)
        .await?;
    Ok(())
}

/// An override's limits (`None`: that limit is not overridden).
#[derive(Debug, Clone, Copy, Default)]
pub struct Override {
    pub concurrency: Option<i32>,
    pub rate: Option<(i32, i64)>,
    pub throttle: Option<(i32, i64)>,
    pub expires_at: Option<DateTime<Utc>>,
}

/// Sets `key`'s override (the key is known from then on, even before a job names it), takes
/// back the jobs it had released and not started (the override may allow fewer), and releases
/// what it allows now.
pub async fn set_override(
    db: &mut sqlx::PgConnection,
    key: &str,
    o: &Override,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"
        insert into ojs_rate_key as k (key, override_concurrency, override_rate_limit,
                                       override_rate_period_ms, override_throttle_limit,
                                       override_throttle_period_ms, override_expires_at,
                                       next_check_at)
        values ($1, $2, $3, $4, $5, $6, $7, now())
        on conflict on constraint ojs_rate_key_pkey do update
           set override_concurrency = excluded.override_concurrency,
               override_rate_limit = excluded.override_rate_limit,
               override_rate_period_ms = excluded.override_rate_period_ms,
               override_throttle_limit = excluded.override_throttle_limit,
               override_throttle_period_ms = excluded.override_throttle_period_ms,
               override_expires_at = excluded.override_expires_at,
               next_check_at = now(), updated_at = now()
        "#,
        key,
        o.concurrency,
        o.rate.map(|r| r.0),
        o.rate.map(|r| r.1),
        o.throttle.map(|t| t.0),
        o.throttle.map(|t| t.1),
        o.expires_at,
    )
    .execute(&mut *db)
    .await?;
    rehold(&mut *db, key).await?;
    release_in(&mut *db, key).await
}

/// Removes `key`'s override and releases what its own limits allow; false for an unknown key.
pub async fn clear_override(db: &mut sqlx::PgConnection, key: &str) -> Result<bool, sqlx::Error> {
    let found = sqlx::query!(
        r#"
        update ojs_rate_key
           set override_concurrency = null, override_rate_limit = null,
               override_rate_period_ms = null, override_throttle_limit = null,
               override_throttle_period_ms = null, override_expires_at = null,
               next_check_at = now(), updated_at = now()
         where key = $1
        "#,
        key,
    )
    .execute(&mut *db)
    .await?
    .rows_affected()
        > 0;
    if found {
        release_in(&mut *db, key).await?;
    }
    Ok(found)
}

/// Blocks `key` until `until` (a NACK's `rate_limit_until`; a later block wins), takes back
/// the jobs it had released and not started, and writes `rate_limit.dynamic_adjusted`.
pub async fn block(
    db: &mut sqlx::PgConnection,
    key: &str,
    until: DateTime<Utc>,
    job: uuid::Uuid,
) -> Result<(), sqlx::Error> {
    let updated = sqlx::query!(
        r#"
        with blocked as (
            update ojs_rate_key
               set blocked_until = greatest(blocked_until, $2), next_check_at = greatest(blocked_until, $2)
             where key = $1
            returning key, blocked_until
        )
        insert into ojs_event (type, subject, job_id, data)
        select 'rate_limit.dynamic_adjusted', b.key, $3::uuid,
               jsonb_build_object('key', b.key, 'until', ojs_timestamp_text(b.blocked_until),
                                  'reason', 'rate_limit_until', 'job_id', $3::uuid)
          from blocked b
        "#,
        key,
        until,
        job,
    )
    .execute(&mut *db)
    .await?
    .rows_affected();
    if updated > 0 {
        rehold(&mut *db, key).await?;
    }
    Ok(())
}

/// Holds again `key`'s jobs that were released and not claimed yet.
async fn rehold(db: impl PgExecutor<'_>, key: &str) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"
        update ojs_job set rate_held = true
         where rate_key = $1 and phase = 'available' and rate_held is null and in_flight
        "#,
        key,
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Rate-limit keys, those holding jobs back, and the jobs held (the gauges).
pub async fn gauges(db: impl PgExecutor<'_>) -> Result<(i64, i64, i64), sqlx::Error> {
    let row = sqlx::query!(
        r#"
        select (select count(*) from ojs_rate_key) as "keys!",
               (select count(*) from ojs_rate_key where limited is not null) as "limited!",
               (select count(*) from ojs_job where phase = 'available' and rate_held) as "held!"
        "#
    )
    .fetch_one(db)
    .await?;
    Ok((row.keys, row.limited, row.held))
}

/// Deletes, with their recorded starts, at most `limit` keys unchanged since `before` that hold
/// no job back, have none in flight, and have no override or block in force (the pruner; a
/// key comes back with the next job that names it). Returns how many.
pub async fn prune(
    db: impl PgExecutor<'_>,
    before: DateTime<Utc>,
    limit: i64,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        with doomed as (
            select k.key from ojs_rate_key k
             where k.updated_at < $1
               and (k.blocked_until is null or k.blocked_until < now())
               and (num_nonnulls(k.override_concurrency, k.override_rate_limit,
                                 k.override_throttle_limit) = 0
                    or k.override_expires_at < now())
               and not exists (select from ojs_job j
                                where j.rate_key = k.key and j.phase = 'available' and j.rate_held)
               and not exists (select from ojs_job j
                                where j.rate_key = k.key and j.rate_held is null
                                  and j.in_flight)
             limit $2
               for update skip locked
        ),
        starts as (
            delete from ojs_rate_window w using doomed d where w.key = 'key:' || d.key
        ),
        deleted as (
            delete from ojs_rate_key k using doomed d where k.key = d.key returning 1
        )
        select count(*) as "n!" from deleted
        "#,
        before,
        limit,
    )
    .fetch_one(db)
    .await
}

/// Deletes at most `limit` recorded starts of job keys that no limit counts any more: older
/// than the longest period of their key (own or override), or of a key that is gone (the
/// pruner; a key that holds jobs back has its starts trimmed at each release). Returns how
/// many.
pub async fn prune_starts(db: impl PgExecutor<'_>, limit: i64) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        with doomed as (
            select w.ctid from ojs_rate_window w
              left join ojs_rate_key k on w.key = 'key:' || k.key
             where w.key like 'key:%'
               and (k.key is null
                    or w.started_at < now() - greatest(k.rate_period_ms, k.override_rate_period_ms,
                                                       k.throttle_period_ms,
                                                       k.override_throttle_period_ms, 0)
                                             * interval '1 millisecond')
             limit $1
        ),
        deleted as (
            delete from ojs_rate_window w using doomed d where w.ctid = d.ctid returning 1
        )
        select count(*) as "n!" from deleted
        "#,
        limit,
    )
    .fetch_one(db)
    .await
}
