//! Retention: finished jobs past their time are deleted.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

use crate::job::JobState;

/// Cutoffs of one terminal state: rows that finished before their cutoff are deleted. Queues
/// with their own retention (queue configuration) have their own cutoffs; dead-lettered
/// discarded jobs follow `dead_letter_ttl` instead of the discarded retention.
#[derive(Debug, Clone)]
pub struct PruneCutoffs {
    pub state: JobState,
    pub cutoff: DateTime<Utc>,
    pub dead_letter_cutoff: DateTime<Utc>,
    /// `(queue, cutoff, dead-letter cutoff)` of queues with their own values.
    pub queues: Vec<(String, DateTime<Utc>, DateTime<Utc>)>,
}

impl PruneCutoffs {
    /// The queues with their own values, their cutoffs and their dead-letter cutoffs, as the
    /// prune statements' arrays.
    fn own(&self) -> (Vec<&str>, Vec<DateTime<Utc>>, Vec<DateTime<Utc>>) {
        let queues = self.queues.iter().map(|(q, _, _)| q.as_str()).collect();
        let cutoffs = self.queues.iter().map(|(_, at, _)| *at).collect();
        let dead_letter = self.queues.iter().map(|(_, _, at)| *at).collect();
        (queues, cutoffs, dead_letter)
    }

    /// The latest cutoff of all, the dead-letter ones too when `dead_letter`: a prune
    /// statement's index range covers every cutoff, and each row is then held to its own.
    fn latest(&self, dead_letter: bool) -> DateTime<Utc> {
        let own = self
            .queues
            .iter()
            .flat_map(|(_, at, dl)| [*at].into_iter().chain(dead_letter.then_some(*dl)));
        let server = [self.cutoff]
            .into_iter()
            .chain(dead_letter.then_some(self.dead_letter_cutoff));
        own.chain(server).max().unwrap_or(self.cutoff)
    }
}

/// Deletes up to `limit` jobs of `ojs_job` in a terminal state past their retention, in
/// primary-key order from after `after` up to `before` (exclusive), reporting dead-lettered
/// ones as `dead_letter.pruned`. Returns how many, and the last id deleted (where the next
/// batch goes on from).
///
/// No index covers finished jobs (an ACK or a cancel would write it, migration V30): the walk
/// follows the primary key. Job ids are UUIDv7, whose first 48 bits are the creation time in
/// milliseconds, so the jobs that can be past a cutoff all sort before the UUIDv7 floor of the
/// cutoff ([`PruneCutoffs::id_bound`]); the jobs the walk reads and keeps are those created
/// before the cutoff that are still waiting, active or within their retention.
pub async fn prune_finished(
    db: impl PgExecutor<'_>,
    c: &PruneCutoffs,
    after: Option<Uuid>,
    before: Uuid,
    limit: i64,
) -> Result<(i64, Option<Uuid>), sqlx::Error> {
    let (queues, cutoffs, dead_letter_cutoffs) = c.own();
    let latest = c.latest(true);
    let row = sqlx::query!(
        r#"
        with own as (
            select * from unnest($4::text[], $5::timestamptz[], $6::timestamptz[])
                       as o(queue, cutoff, dead_letter_cutoff)
        ),
        doomed as (
            select j.id
              from ojs_job j
             where j.id > coalesce($9::uuid, '00000000-0000-0000-0000-000000000000')
               and j.id < $10::uuid
               and j.state = $1
               and coalesce(j.discarded_at, j.cancelled_at, j.completed_at) < $7
               -- The queue's own cutoff, else the server's (a subquery, not a join, so
               -- that the walk stays in key order).
               and coalesce(j.discarded_at, j.cancelled_at, j.completed_at)
                   < coalesce((select case when j.dead_lettered_at is not null
                                           then o.dead_letter_cutoff else o.cutoff end
                                 from own o where o.queue = j.queue),
                              case when j.dead_lettered_at is not null then $3::timestamptz
                                   else $2::timestamptz end)
             order by j.id
             limit $8
               for update of j skip locked
        ),
        deleted as (
            delete from ojs_job j
             using doomed d
             where j.id = d.id
            returning j.queue, j.dead_lettered_at is not null as dead_lettered
        ),
        reported as (
            insert into ojs_event (type, subject, queue, data)
            select 'dead_letter.pruned', queue, queue,
                   jsonb_build_object('queue', queue, 'count', count(*))
              from deleted
             where dead_lettered
             group by queue
            returning 1
        )
        select (select count(*) from deleted) as "deleted!",
               (select d.id from doomed d order by d.id desc limit 1) as last
        "#,
        c.state as JobState,
        c.cutoff,
        c.dead_letter_cutoff,
        &queues as &[&str],
        &cutoffs,
        &dead_letter_cutoffs,
        latest,
        limit,
        after,
        before,
    )
    .fetch_one(db)
    .await?;
    Ok((row.deleted, row.last))
}

/// The least UUIDv7 of the millisecond `at` (its time bits, every other bit zero): every id
/// made at or after `at` sorts after it.
fn uuid_v7_floor(at: DateTime<Utc>) -> Uuid {
    let ms = u128::try_from(at.timestamp_millis()).unwrap_or(0) & 0xFFFF_FFFF_FFFF;
    Uuid::from_u128(ms << 80)
}

impl PruneCutoffs {
    /// Where [`prune_finished`]'s walk of these cutoffs can stop: the floor of the latest.
    pub fn id_bound(&self) -> Uuid {
        uuid_v7_floor(self.latest(true))
    }
}

/// [`prune_finished`] for the completed jobs of `ojs_job_done` (migration V15): deletes up to
/// `limit` of them past their queue's cutoff, oldest first. Whole days past every cutoff go
/// faster with [`drop_done_partitions`]; this deletes the rest (a queue whose own retention is
/// shorter, the day that is only partly past).
pub async fn prune_done(
    db: impl PgExecutor<'_>,
    c: &PruneCutoffs,
    limit: i64,
) -> Result<i64, sqlx::Error> {
    let (queues, cutoffs, _) = c.own();
    let latest = c.latest(false);
    sqlx::query_scalar!(
        r#"
        with own as (
            select * from unnest($2::text[], $3::timestamptz[]) as o(queue, cutoff)
        ),
        doomed as (
            select j.id, j.completed_at
              from ojs_job_done j
              left join own o on o.queue = j.queue
             where j.completed_at < $4
               and j.completed_at < coalesce(o.cutoff, $1)
             order by j.completed_at
             limit $5
               for update of j skip locked
        ),
        deleted as (
            -- The partition key too, so each row is looked for in its own partition.
            delete from ojs_job_done j
             using doomed d
             where j.id = d.id and j.completed_at = d.completed_at
            returning 1
        )
        select count(*) as "deleted!" from deleted
        "#,
        c.cutoff,
        &queues as &[&str],
        &cutoffs,
        latest,
        limit,
    )
    .fetch_one(db)
    .await
}

/// A partition of `ojs_job_done` dropped by [`drop_done_partitions`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DroppedPartition {
    pub name: String,
    /// Bytes of its table (without indexes) when dropped.
    pub bytes: i64,
}

/// Drops the day partitions of `ojs_job_done` that end at or before `before` (every job in
/// them is past every queue's retention), oldest first, at most `limit`. Dropping a partition
/// locks `ojs_job_done` exclusively for a moment: each waits at most `lock_timeout` for the
/// lock (so ACKs never queue behind a drop that waits for a long reader), and one that cannot
/// get it is left for the next pass.
pub async fn drop_done_partitions(
    db: impl crate::store::Pool<'_>,
    before: DateTime<Utc>,
    limit: i64,
) -> Result<Vec<DroppedPartition>, sqlx::Error> {
    let doomed = sqlx::query!(
        r#"
        select name as "name!", bytes as "bytes!"
          from ojs_job_done_partitions
         where high <= $1
         order by low
         limit $2
        "#,
        before,
        limit,
    )
    .fetch_all(db)
    .await?;
    let mut dropped = Vec::with_capacity(doomed.len());
    for p in doomed {
        let mut tx = db.begin().await?;
        sqlx::query("select set_config('lock_timeout', '200ms', true)")
            .execute(&mut *tx)
            .await?;
        // The name comes from the catalog; quote_ident keeps it an identifier whatever it is.
        let drop = format!("drop table if exists {}", quote_ident(&p.name));
        match sqlx::query(&drop).execute(&mut *tx).await {
            Ok(_) => {
                tx.commit().await?;
                dropped.push(DroppedPartition {
                    name: p.name,
                    bytes: p.bytes,
                });
            }
            // 55P03: lock_not_available (the lock timeout); tried again next pass.
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("55P03") => {
                tx.rollback().await?;
                tracing::debug!(partition = %p.name, "ojs_job_done partition busy, not dropped yet");
                break;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(dropped)
}

/// Makes the day partitions of `ojs_job_done` from `from`'s day (UTC) to `days` days after it,
/// where missing. Returns the days that could not have one (rows of theirs already sit in the
/// default partition).
pub async fn ensure_done_partitions(
    db: impl PgExecutor<'_>,
    from: DateTime<Utc>,
    days: i32,
) -> Result<Vec<chrono::NaiveDate>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        select d::date as "day!"
          from generate_series(($1::timestamptz at time zone 'UTC')::date,
                               ($1::timestamptz at time zone 'UTC')::date + $2::int4,
                               interval '1 day') d
         where ojs_job_done_partition(d::date) is null
        "#,
        from,
        days,
    )
    .fetch_all(db)
    .await
}

/// An SQL identifier, quoted.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
