//! Statements on `ojs_job`, one module per phase of a job's life:
//!
//! | file | statements |
//! |---|---|
//! | `enqueue.rs` | [`insert_many`] (PUSH), and what unique jobs need: [`unique_candidates`], [`cancel_replaced`], [`replace_scheduled`] |
//! | `claim.rs` | [`promote_due`] (due scheduled and retryable jobs) and [`await_due_locks`], [`claim()`], [`claim_fair`] and [`claim_tenant`] (FETCH) |
//! | `transition.rs` | [`complete_many`] (ACK), [`fail_many`] (NACK) and [`release_many`] (reclaims), [`cancel`], [`activate`], [`set_priority`] |
//! | `deadline.rs` | [`expire_due`] (waiting jobs past a deadline), [`lock_overdue`] and [`lock_held_by`] (active jobs to reclaim) |
//! | `retention.rs` | [`prune_finished`] |
//! | `mod.rs` | lookups by id, and the table's size and planner statistics ([`table_pages`], [`analyze`]) |
//!
//! Every state transition is a single statement conditional on the state it expects; moves out
//! of `active` are also fenced on the claim (the attempt and, when known, the worker), so a
//! worker whose reservation was lost cannot complete or fail a job that has since moved on.
//! Job rows come back whole as the table's row type (`returning j`), decoded into [`Job`].
//!
//! Each statement that changes jobs also writes their lifecycle events, in the same statement
//! (an `events` CTE), so a change and its events commit together: what
//! `ojs_job_events(<what changed>, <row after>)` (V3 migration) says the change means, or, where
//! a statement's change can only mean one event, that event built with the same SQL helpers.
//! `migrations/README.md` lists every SQL function these statements rely on.

mod claim;
mod deadline;
mod enqueue;
mod retention;
mod transition;

pub use claim::{
    ClaimParams, ClaimShare, Promoted, await_due_locks, claim, claim_fair, claim_shared,
    claim_tenant, promote_due,
};
pub use deadline::{Overdue, expire_due, lock_held_by, lock_overdue};
pub use enqueue::{
    HandTo, Handoffs, cancel_replaced, insert_many, replace_scheduled, unique_candidates,
};
pub use retention::{
    DroppedPartition, PruneCutoffs, drop_done_partitions, ensure_done_partitions, prune_done,
    prune_finished,
};
pub use transition::{
    CompleteParams, Completed, DeleteOnAck, FailParams, PriorityChange, activate, cancel,
    complete_many, complete_many_brief, fail_many, give_back, release_many, set_priority,
};

use sqlx::PgExecutor;
use uuid::Uuid;

use crate::job::{Job, JobId};

/// Which of `ids` already exist.
pub async fn existing_ids(db: impl PgExecutor<'_>, ids: &[Uuid]) -> Result<Vec<Uuid>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"select id as "id!" from ojs_job_all where id = any($1::uuid[])"#,
        ids
    )
    .fetch_all(db)
    .await
}

/// One job by id.
pub async fn get(db: impl PgExecutor<'_>, id: JobId) -> Result<Option<Job>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"select row(j.*)::ojs_job as "job!: Job" from ojs_job_all j where j.id = $1"#,
        id as JobId
    )
    .fetch_optional(db)
    .await
}

/// Job `id` as INFO shows it: with its recorded steps, latest wait and delivered signals
/// among its attributes (`ojs_job_resume`, migration V33; read only when some job has any).
pub async fn get_shown(db: impl PgExecutor<'_>, id: JobId) -> Result<Option<Job>, sqlx::Error> {
    let row = sqlx::query!(
        r#"
        select row(j.*)::ojs_job as "job!: Job",
               case when (select exists (select 1 from ojs_job_step))
                      or (select exists (select 1 from ojs_job_wait)) then
                   nullif(ojs_job_resume(j.id, j.state = 'scheduled'), '{}')
               end as "resume?: crate::job::RawJson"
          from ojs_job_all j
         where j.id = $1
        "#,
        id as JobId
    )
    .fetch_optional(db)
    .await?;
    Ok(row.map(|r| claim::resumed(r.job, None, r.resume.as_ref())))
}

/// The jobs of `ids` that exist, in no particular order.
pub async fn get_many(db: impl PgExecutor<'_>, ids: &[Uuid]) -> Result<Vec<Job>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"select row(j.*)::ojs_job as "job!: Job" from ojs_job_all j where j.id = any($1::uuid[])"#,
        ids
    )
    .fetch_all(db)
    .await
}

/// Deletes every job (test hook `POST /ojs/v1/admin/reset` only).
pub async fn delete_all(db: impl PgExecutor<'_>) -> Result<(), sqlx::Error> {
    sqlx::query!("truncate ojs_job, ojs_job_done, ojs_lease, ojs_lease_jobs")
        .execute(db)
        .await?;
    Ok(())
}

/// Pages ojs_job takes now.
pub async fn table_pages(db: impl PgExecutor<'_>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"select pg_relation_size('ojs_job') / current_setting('block_size')::int8 as "pages!""#
    )
    .fetch_one(db)
    .await
}

/// Takes ojs_job's planner statistics (`ANALYZE`), which also makes every connection plan its
/// statements on ojs_job again.
///
/// From a sample of 3,000 rows (statistics target 10, for this statement only) rather than the
/// default 30,000: what the plans need from it is the table's size and the rough shares of
/// queues and states, and the full sample cost 190-330 ms of Postgres CPU at 100,000 waiting
/// jobs (450-800 ms under load) against 25 ms. Autovacuum's own analyses keep the configured
/// target.
pub async fn analyze(db: impl crate::store::Pool<'_>) -> Result<(), sqlx::Error> {
    let mut tx = db.begin().await?;
    sqlx::query_scalar!("select set_config('default_statistics_target', '10', true)")
        .fetch_one(&mut *tx)
        .await?;
    sqlx::query!("analyze ojs_job").execute(&mut *tx).await?;
    tx.commit().await
}
