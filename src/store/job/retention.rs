//! Retention: finished jobs past their time are deleted.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

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

/// Deletes up to `limit` jobs in a terminal state past their retention, oldest first,
/// reporting dead-lettered ones as `dead_letter.pruned`. Returns how many.
pub async fn prune_finished(
    db: impl PgExecutor<'_>,
    c: &PruneCutoffs,
    limit: i64,
) -> Result<i64, sqlx::Error> {
    let queues: Vec<&str> = c.queues.iter().map(|(q, _, _)| q.as_str()).collect();
    let cutoffs: Vec<DateTime<Utc>> = c.queues.iter().map(|(_, at, _)| *at).collect();
    let dead_letter_cutoffs: Vec<DateTime<Utc>> = c.queues.iter().map(|(_, _, at)| *at).collect();
    // The index range covers every cutoff; each row is then held to its own.
    let latest = cutoffs
        .iter()
        .chain(&dead_letter_cutoffs)
        .chain([&c.cutoff, &c.dead_letter_cutoff])
        .max()
        .copied()
        .unwrap_or(c.cutoff);
    sqlx::query_scalar!(
        r#"
        with own as (
            select * from unnest($4::text[], $5::timestamptz[], $6::timestamptz[])
                       as o(queue, cutoff, dead_letter_cutoff)
        ),
        doomed as (
            select j.id
              from ojs_job j
              left join own o on o.queue = j.queue
             where j.state = $1
               and j.state in ('completed', 'cancelled', 'discarded')
               and coalesce(j.discarded_at, j.cancelled_at, j.completed_at) < $7
               and coalesce(j.discarded_at, j.cancelled_at, j.completed_at)
                   < case when j.dead_lettered_at is not null
                          then coalesce(o.dead_letter_cutoff, $3)
                          else coalesce(o.cutoff, $2) end
             order by j.state, coalesce(j.discarded_at, j.cancelled_at, j.completed_at)
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
        select count(*) as "deleted!" from deleted
        "#,
        c.state as JobState,
        c.cutoff,
        c.dead_letter_cutoff,
        &queues as &[&str],
        &cutoffs,
        &dead_letter_cutoffs,
        latest,
        limit,
    )
    .fetch_one(db)
    .await
}
