//! Queue configuration as stored: each queue's own layer (and `_default`'s), the generation
//! counter every change bumps, and the bounds the enqueue statement enforces.

use sqlx::PgExecutor;

use super::row::ensure;

/// The configuration generation and every stored configuration layer that is not empty
/// (`_default` included), read together.
pub async fn config_layers(
    db: impl PgExecutor<'_>,
) -> Result<(i64, Vec<(String, serde_json::Value)>), sqlx::Error> {
    let rows = sqlx::query!(
        r#"
        select g.generation, q.name as "name?", q.config as "config?"
          from ojs_queue_config_generation g
          left join ojs_queue q on q.config <> '{}'
        "#,
    )
    .fetch_all(db)
    .await?;
    let generation = rows.first().map_or(0, |r| r.generation);
    let layers = rows
        .into_iter()
        .filter_map(|r| Some((r.name?, r.config?)))
        .collect();
    Ok((generation, layers))
}

/// The configuration generation alone.
pub async fn config_generation(db: impl PgExecutor<'_>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!("select generation from ojs_queue_config_generation")
        .fetch_one(db)
        .await
}

/// Locks `name`'s row (creating it first, with `queue.created`, unless it exists or it is
/// `_default`) and returns its stored configuration layer and whether it was created.
pub async fn lock_config(
    db: &mut sqlx::PgConnection,
    name: &str,
) -> Result<(serde_json::Value, bool), sqlx::Error> {
    let created = if name == crate::queue_config::DEFAULT_LAYER {
        sqlx::query!("insert into ojs_queue (name) values ('_default') on conflict do nothing")
            .execute(&mut *db)
            .await?;
        false
    } else {
        ensure(&mut *db, name, true).await?
    };
    let config = sqlx::query_scalar!(
        "select config from ojs_queue where name = $1 for update",
        name
    )
    .fetch_one(&mut *db)
    .await?;
    Ok((config, created))
}

/// Stores `name`'s configuration layer (its row is locked by [`lock_config`]), bumps the
/// configuration generation, and records `queue.config_updated` with the fields changed.
pub async fn write_config(
    db: impl PgExecutor<'_>,
    name: &str,
    config: &serde_json::Value,
    changed_fields: &[String],
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"
        with written as (
            update ojs_queue set config = $2, updated_at = now() where name = $1
            returning name
        ),
        bumped as (
            update ojs_queue_config_generation set generation = generation + 1
        )
        insert into ojs_event (type, subject, queue, data)
        select 'queue.config_updated', w.name, nullif(w.name, '_default'),
               jsonb_build_object('queue', w.name, 'changed_fields', to_jsonb($3::text[]))
          from written w
        "#,
        name,
        config,
        changed_fields as &[String],
    )
    .execute(db)
    .await?;
    Ok(())
}

/// A queue's bounds as enforced by the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds<'a> {
    pub max_jobs: Option<i64>,
    pub max_bytes: Option<i64>,
    pub overflow_policy: &'a str,
}

/// Sets the bounds the database enforces for `queue` (`None`: unbounded). A queue that becomes
/// bounded has its unfinished jobs counted (and flagged as counted) in the same transaction.
pub async fn set_bounds(
    db: &mut sqlx::PgConnection,
    queue: &str,
    bounds: Option<Bounds<'_>>,
) -> Result<(), sqlx::Error> {
    let Some(b) = bounds else {
        sqlx::query!("delete from ojs_queue_capacity where queue = $1", queue)
            .execute(&mut *db)
            .await?;
        return Ok(());
    };
    let inserted = sqlx::query_scalar!(
        r#"
        insert into ojs_queue_capacity as c (queue, max_jobs, max_bytes, overflow_policy)
        values ($1, $2, $3, $4)
        on conflict (queue) do update
           set max_jobs = excluded.max_jobs, max_bytes = excluded.max_bytes,
               overflow_policy = excluded.overflow_policy
        returning (xmax = 0) as "inserted!"
        "#,
        queue,
        b.max_jobs,
        b.max_bytes,
        b.overflow_policy,
    )
    .fetch_one(&mut *db)
    .await?;
    if inserted && queue != crate::queue_config::DEFAULT_LAYER {
        // From now on every transition of these jobs adjusts the counters (trigger
        // ojs_job_capacity_move); a job finishing concurrently waits for this row lock.
        sqlx::query!(
            r#"
            with counted as (
                update ojs_job set capacity_tracked = true
                 where queue = $1 and state in ('scheduled', 'available', 'pending', 'retryable', 'active')
                returning ojs_job_size(args, meta) as size
            )
            update ojs_queue_capacity
               set jobs = (select count(*) from counted),
                   bytes = (select coalesce(sum(size), 0) from counted)
             where queue = $1
            "#,
            queue,
        )
        .execute(&mut *db)
        .await?;
    }
    Ok(())
}

/// Every queue with a row (not `_default`) and its stored configuration layer.
pub async fn all_layers(
    db: impl PgExecutor<'_>,
) -> Result<Vec<(String, serde_json::Value)>, sqlx::Error> {
    let rows =
        sqlx::query!("select name, config from ojs_queue where name <> '_default' order by name")
            .fetch_all(db)
            .await?;
    Ok(rows.into_iter().map(|r| (r.name, r.config)).collect())
}

/// The `_default` configuration layer (`{}` when none is stored), locked against a
/// concurrent change.
pub async fn default_layer(db: &mut sqlx::PgConnection) -> Result<serde_json::Value, sqlx::Error> {
    let layer =
        sqlx::query_scalar!("select config from ojs_queue where name = '_default' for share")
            .fetch_optional(db)
            .await?;
    Ok(layer.unwrap_or_else(|| serde_json::json!({})))
}

/// Bumps the configuration generation (every process reloads its cached configuration).
pub async fn bump_generation(db: impl PgExecutor<'_>) -> Result<(), sqlx::Error> {
    sqlx::query!("update ojs_queue_config_generation set generation = generation + 1")
        .execute(db)
        .await?;
    Ok(())
}
