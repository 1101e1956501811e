//! Every advisory lock the server takes, with its key, in one place.
//!
//! Keys are two 32-bit integers: a namespace, then a value (usually `hashtext` of a name). The
//! values are part of the protocol between replicas: during a rolling deploy, processes of two
//! versions must take the same locks for the same things, or the limits the locks protect (one
//! unique job per key, a queue's or pool's concurrency) could be exceeded. Change a key only
//! together with a migration that retires the old one. `migrations/README.md` lists them with
//! the SQL side; the schema test checks that the enqueue gate's key is the one the SQL function
//! `ojs_config_generation_locked` takes.
//!
//! Every lock here is transaction-scoped (`pg_advisory_xact_lock*`): released at commit or
//! rollback, never held by an idle connection. The migrator's own lock (a session lock named
//! `ojsd:schema-migrations`) lives in `crates/ojsd-migrate`.

use sqlx::{PgConnection, PgExecutor};

/// Namespace of unique-job keys (`"ojsu"`): `(UNIQUE_KEY, hashtext(unique_key))`, so that
/// concurrent PUSHes of one unique key check and write one at a time.
pub const UNIQUE_KEY: i32 = 0x6f6a_7375;

/// Namespace of dispatch limits (`"ojsd"`): `(DISPATCH, hashtext(queue))` for a queue with
/// `concurrency` or `rate_limit`, and `(DISPATCH, hashtext('pool:' || pool))` for a pool with
/// a `concurrency` (see [`pool_dispatch_key`]).
pub const DISPATCH: i32 = 0x6f6a_7364;

/// The enqueue gate: taken shared by every enqueue statement (inside the SQL function
/// `ojs_config_generation_locked`, migration V8) and exclusively by a pool change
/// ([`lock_out_enqueues`]), so no enqueue lands between a pool change and the tenant tagging of
/// its queues.
pub const ENQUEUE_GATE: (i32, i32) = (7081, 1);

/// The name hashed into a pool's dispatch key. Pools share the queues' namespace; the prefix
/// keeps a pool from sharing a key with a queue of the same name.
pub fn pool_dispatch_key(pool: &str) -> String {
    format!("pool:{pool}")
}

/// Takes the unique-key locks of `keys` (in a fixed order, so two batches with overlapping keys
/// cannot deadlock). Held until the surrounding transaction ends.
pub async fn lock_unique_keys(db: impl PgExecutor<'_>, keys: &[&str]) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"
        select count(pg_advisory_xact_lock($1, hashtext(k))) as "locks!"
          from (select distinct k from unnest($2::text[]) k order by k) keys
        "#,
        UNIQUE_KEY,
        keys as &[&str],
    )
    .fetch_one(db)
    .await?;
    Ok(())
}

/// Serializes claims from `queue` (with dispatch limits) until the transaction ends. Taken in
/// a statement of its own, so the next statement's snapshot sees every claim committed
/// before the lock was granted.
pub async fn lock_queue_dispatch(db: &mut PgConnection, queue: &str) -> Result<(), sqlx::Error> {
    lock_dispatch(db, queue).await
}

/// Serializes claims by members of `pool` (with a `concurrency`), as
/// [`lock_queue_dispatch`]. A claim that takes both takes the pool's first.
pub async fn lock_pool_dispatch(db: &mut PgConnection, pool: &str) -> Result<(), sqlx::Error> {
    lock_dispatch(db, &pool_dispatch_key(pool)).await
}

async fn lock_dispatch(db: &mut PgConnection, name: &str) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "select pg_advisory_xact_lock($1, hashtext($2))",
        DISPATCH,
        name
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Takes the enqueue gate exclusively until the transaction ends: every enqueue in flight has
/// committed, and every later one sees the configuration generation this transaction bumps.
pub async fn lock_out_enqueues(db: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "select pg_advisory_xact_lock($1, $2)",
        ENQUEUE_GATE.0,
        ENQUEUE_GATE.1
    )
    .execute(db)
    .await?;
    Ok(())
}
