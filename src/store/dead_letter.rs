//! Statements on the dead-letter queue ([OJS dead-letter semantics]): `discarded` jobs with
//! `dead_lettered_at` set. They live in `ojs_job` like every other job.
//!
//! [OJS dead-letter semantics]: https://github.com/openjobspec/spec/blob/main/spec/ojs-dead-letter.md#4-dead-letter-semantics

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

use crate::job::{Job, JobId};
use crate::store::counting::{Listed, count_up_to};

/// Which dead-lettered jobs an operation applies to.
#[derive(Debug, Clone, Default)]
pub struct DeadLetterFilter {
    pub queue: Option<String>,
    /// Exact job type.
    pub job_type: Option<String>,
    /// Job type prefix (from `type=prefix*`).
    pub type_prefix: Option<String>,
    /// Matches the last error's `type` or `code`.
    pub error_type: Option<String>,
    /// `dead_lettered_at` at or after.
    pub since: Option<DateTime<Utc>>,
    /// `dead_lettered_at` before.
    pub until: Option<DateTime<Utc>>,
    /// Only this tenant's jobs.
    pub tenant: Option<String>,
}

impl DeadLetterFilter {
    fn prefix_pattern(&self) -> Option<String> {
        self.type_prefix.as_deref().map(super::like_prefix)
    }
}

/// Dead-lettered jobs matching `filter`, most recently dead-lettered first, `limit` of them from
/// `offset` on; and how many match (see [`counting`](super::counting)).
pub async fn list(
    db: impl crate::store::Pool<'_>,
    filter: &DeadLetterFilter,
    limit: i64,
    offset: i64,
) -> Result<Listed<Job>, sqlx::Error> {
    let pattern = filter.prefix_pattern();
    // Planned generically, as the server's other statements are, the filters' `$n is null`
    // hide that the newest are first in the index: a million dead-lettered jobs were sorted.
    let mut conn = super::planned_for_their_values(db).await?;
    let jobs = sqlx::query_scalar!(
        r#"
        select j as "job!: Job"
          from ojs_job j
         where j.dead_lettered_at is not null
           and ojs_dead_letter_matches(j, $1, $2, $3, $4, $5, $6)
           and ($9::text is null or j.tenant = $9)
         order by j.dead_lettered_at desc, j.id desc
         limit $7 offset $8
        "#,
        filter.queue,
        filter.job_type,
        pattern,
        filter.error_type,
        filter.since,
        filter.until,
        limit + 1,
        offset,
        filter.tenant,
    )
    .fetch_all(&mut *conn)
    .await?;
    let page = Listed::of(jobs, limit, offset, async || {
        count_up_to(&mut conn, |q| {
            q.push("select 1 from ojs_job j where j.dead_lettered_at is not null")
                .push(" and ojs_dead_letter_matches(j, ")
                .push_bind(filter.queue.clone())
                .push("::text, ")
                .push_bind(filter.job_type.clone())
                .push("::text, ")
                .push_bind(pattern.clone())
                .push("::text, ")
                .push_bind(filter.error_type.clone())
                .push("::text, ")
                .push_bind(filter.since)
                .push("::timestamptz, ")
                .push_bind(filter.until)
                .push("::timestamptz)");
            if let Some(tenant) = &filter.tenant {
                q.push(" and j.tenant = ").push_bind(tenant.clone());
            }
        })
        .await
    })
    .await?;
    conn.commit().await?;
    Ok(page)
}

/// One dead-lettered job.
pub async fn get(db: impl PgExecutor<'_>, id: JobId) -> Result<Option<Job>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"select j as "job!: Job" from ojs_job j where j.id = $1 and j.dead_lettered_at is not null"#,
        id as JobId
    )
    .fetch_optional(db)
    .await
}

/// Aggregates of the dead-letter queue.
#[derive(Debug, Clone)]
pub struct DeadLetterStats {
    pub total: i64,
    /// `(queue, count)`, largest first.
    pub by_queue: Vec<(String, i64)>,
    /// `(last error type, count)`, largest first.
    pub by_error_type: Vec<(String, i64)>,
    pub oldest_at: Option<DateTime<Utc>>,
    pub newest_at: Option<DateTime<Utc>>,
}

/// Counts by queue and by last error type, and the age range (of `tenant`'s jobs only, when
/// given).
pub async fn stats(
    db: impl PgExecutor<'_>,
    tenant: Option<&str>,
) -> Result<DeadLetterStats, sqlx::Error> {
    let row = sqlx::query!(
        r#"
        with dlq as (
            select queue, coalesce(error ->> 'type', error ->> 'code', 'unknown') as error_type,
                   dead_lettered_at
              from ojs_job
             where dead_lettered_at is not null and ($1::text is null or tenant = $1)
        )
        select (select count(*) from dlq) as "total!",
               (select min(dead_lettered_at) from dlq) as oldest_at,
               (select max(dead_lettered_at) from dlq) as newest_at,
               array(select queue from dlq group by queue order by count(*) desc, queue) as "queues!",
               array(select count(*) from dlq group by queue order by count(*) desc, queue) as "queue_counts!",
               array(select error_type from dlq group by error_type order by count(*) desc, error_type) as "error_types!",
               array(select count(*) from dlq group by error_type order by count(*) desc, error_type) as "error_type_counts!"
        "#,
        tenant,
    )
    .fetch_one(db)
    .await?;
    Ok(DeadLetterStats {
        total: row.total,
        by_queue: row.queues.into_iter().zip(row.queue_counts).collect(),
        by_error_type: row
            .error_types
            .into_iter()
            .zip(row.error_type_counts)
            .collect(),
        oldest_at: row.oldest_at,
        newest_at: row.newest_at,
    })
}

/// New values for a job taken out of the dead-letter queue (`None`: keep the job's own).
#[derive(Debug, Clone, Default)]
pub struct RetryOverride {
    pub queue: Option<String>,
    /// Compact JSON object.
    pub meta: Option<String>,
    /// Effective retry policy (compact JSON) and its `max_attempts`.
    pub retry: Option<(String, i32)>,
    pub priority: Option<i32>,
    /// Compact JSON array.
    pub args: Option<String>,
}

/// Manual retry: `discarded` → `available` for dead-lettered jobs among `ids`, with a fresh
/// history (attempt 0, no errors), `re_enqueued_at`/`enqueued_at` now and the override applied.
/// Returns the jobs that moved.
pub async fn retry(
    db: impl PgExecutor<'_>,
    ids: &[uuid::Uuid],
    o: &RetryOverride,
) -> Result<Vec<Job>, sqlx::Error> {
    retry_discarded(db, ids, o, true).await
}

/// Manual retry as [`retry`], of the `discarded` jobs among `ids` whether they are in the
/// dead-letter queue or not (`dead_lettered_only`: only those that are). The admin API retries
/// any discarded job; `dead_letter.retried` is recorded only for those taken out of the DLQ.
pub async fn retry_discarded(
    db: impl PgExecutor<'_>,
    ids: &[uuid::Uuid],
    o: &RetryOverride,
    dead_lettered_only: bool,
) -> Result<Vec<Job>, sqlx::Error> {
    let (retry, max_attempts) = match &o.retry {
        Some((retry, max)) => (Some(retry.as_str()), Some(*max)),
        None => (None, None),
    };
    sqlx::query_scalar!(
        r#"
        with target as (
            select id, dead_lettered_at
              from ojs_job
             where id = any($1::uuid[])
               and state = 'discarded'
               and (dead_lettered_at is not null or not $8)
             order by id
               for update
        ),
        retried as (
            update ojs_job j
               set state = 'available',
                   queue = coalesce($2, j.queue),
                   meta = coalesce($3::text::json, j.meta),
                   retry = coalesce($4::text::json, j.retry),
                   max_attempts = coalesce($5, j.max_attempts),
                   priority = coalesce($6, j.priority),
                   args = coalesce($7::text::json, j.args),
                   attempt = 0,
                   error = null,
                   errors = '[]',
                   result = null,
                   worker_id = null,
                   started_at = null,
                   completed_at = null,
                   discarded_at = null,
                   dead_lettered_at = null,
                   next_retry_at = null,
                   retry_delay_ms = null,
                   claim_deadline_at = null,
                   total_deadline_at = now() + j.total_timeout_secs * interval '1 second',
                   enqueued_at = now(),
                   re_enqueued_at = now()
              from target t
             where j.id = t.id
            returning j, t.dead_lettered_at as prev_dead_lettered_at
        ),
        events as (
            insert into ojs_event (type, subject, job_id, queue, job_type, from_state, to_state, data)
            select e.type, (r.j).id::text, (r.j).id, (r.j).queue, (r.j).type, e.from_state,
                   e.to_state, e.data
              from retried r
              -- dead_letter.retried for the jobs taken out of the dead-letter queue.
              cross join lateral ojs_job_events('discarded', null, null, r.prev_dead_lettered_at,
                                                0, null, (r.j).priority, r.j) e
             order by (r.j).seq, e.ord
        ),
        notified as (
            select count(pg_notify('ojs_job_available', q.queue)) as queues
              from (select distinct (r.j).queue as queue from retried r) q
        )
        select r.j as "job!: Job" from retried r cross join notified
        "#,
        ids,
        o.queue,
        o.meta,
        retry,
        max_attempts,
        o.priority,
        o.args,
        dead_lettered_only,
    )
    .fetch_all(db)
    .await
}

/// Ids of the dead-lettered jobs matching `filter` (for a bulk retry), at most `limit`.
pub async fn matching_ids(
    db: impl PgExecutor<'_>,
    filter: &DeadLetterFilter,
    limit: i64,
) -> Result<Vec<uuid::Uuid>, sqlx::Error> {
    let pattern = filter.prefix_pattern();
    sqlx::query_scalar!(
        r#"
        select j.id
          from ojs_job j
         where j.dead_lettered_at is not null
           and ojs_dead_letter_matches(j, $1, $2, $3, $4, $5, $6)
           and ($8::text is null or j.tenant = $8)
         order by j.dead_lettered_at
         limit $7
        "#,
        filter.queue,
        filter.job_type,
        pattern,
        filter.error_type,
        filter.since,
        filter.until,
        limit,
        filter.tenant,
    )
    .fetch_all(db)
    .await
}

/// Deletes dead-lettered jobs among `ids` for good, writing a `dead_letter.deleted` event for
/// each. Returns the ids deleted.
pub async fn delete(
    db: impl PgExecutor<'_>,
    ids: &[uuid::Uuid],
) -> Result<Vec<uuid::Uuid>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        with deleted as (
            delete from ojs_job j
             where j.id = any($1::uuid[]) and j.dead_lettered_at is not null
            returning j.id, j.queue, j.type
        ),
        reported as (
            insert into ojs_event (type, subject, job_id, queue, job_type, data)
            select 'dead_letter.deleted', d.id::text, d.id, d.queue, d.type,
                   jsonb_build_object('job_id', d.id, 'job_type', d.type, 'queue', d.queue)
              from deleted d
            returning 1
        )
        select d.id as "id!" from deleted d
        "#,
        ids,
    )
    .fetch_all(db)
    .await
}

/// Purge: deletes up to `limit` dead-lettered jobs dead-lettered before `older_than` (all when
/// `None`) of `queue` (any when `None`) and `tenant` (any when `None`). Returns how many were
/// deleted.
pub async fn purge(
    db: impl PgExecutor<'_>,
    older_than: Option<DateTime<Utc>>,
    queue: Option<&str>,
    tenant: Option<&str>,
    limit: i64,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        with doomed as (
            select id from ojs_job
             where dead_lettered_at is not null
               and ($1::timestamptz is null or dead_lettered_at < $1)
               and ($2::text is null or queue = $2)
               and ($4::text is null or tenant = $4)
             order by dead_lettered_at
             limit $3
               for update skip locked
        ),
        deleted as (
            delete from ojs_job j using doomed d where j.id = d.id returning j.id
        )
        select count(*) as "purged!" from deleted
        "#,
        older_than,
        queue,
        limit,
        tenant,
    )
    .fetch_one(db)
    .await
}

/// Dead-letter routing (queue configuration `dead_letter_queue`): moves up to `limit` jobs that
/// were dead-lettered in a queue with a dead-letter queue configured (its own or `_default`'s)
/// since that configuration took effect into that queue, as new `available` jobs there. Their
/// error and error history are kept; `original_queue` names the queue they failed in. Writes
/// `job.enqueued` (with `dead_lettered_from`). Returns the queues that received jobs.
pub async fn route(db: impl PgExecutor<'_>, limit: i64) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        with routes as (
            select q.name as queue,
                   coalesce(q.config ->> 'dead_letter_queue', d.config ->> 'dead_letter_queue') as target,
                   case when q.config ? 'dead_letter_queue' then q.updated_at else d.updated_at end as since
              from ojs_queue q
              left join ojs_queue d on d.name = '_default'
             where q.name <> '_default'
               and (q.config ? 'dead_letter_queue' or d.config ? 'dead_letter_queue')
        ),
        due as (
            select j.id, r.target
              from routes r
              join ojs_job j on j.queue = r.queue
             where r.target is not null and r.target <> r.queue
               and j.state = 'discarded' and j.dead_lettered_at >= r.since
             limit $1
               for update of j skip locked
        ),
        targets as (
            insert into ojs_queue (name) select distinct target from due
            on conflict do nothing
        ),
        routed as (
            update ojs_job j
               set original_queue = j.queue,
                   queue = d.target,
                   state = 'available',
                   attempt = 0,
                   worker_id = null,
                   started_at = null,
                   completed_at = null,
                   discarded_at = null,
                   dead_lettered_at = null,
                   next_retry_at = null,
                   retry_delay_ms = null,
                   claim_deadline_at = null,
                   total_deadline_at = now() + j.total_timeout_secs * interval '1 second',
                   enqueued_at = now(),
                   re_enqueued_at = now()
              from due d
             where j.id = d.id
            returning j
        ),
        events as (
            insert into ojs_event (type, subject, job_id, queue, job_type, from_state, to_state, data)
            select 'job.enqueued', (r.j).id::text, (r.j).id, (r.j).queue, (r.j).type, 'discarded',
                   'available',
                   jsonb_build_object('job_id', (r.j).id, 'job_type', (r.j).type,
                                      'queue', (r.j).queue, 'state', 'available',
                                      'priority', (r.j).priority,
                                      'dead_lettered_from', (r.j).original_queue)
              from routed r
             order by (r.j).seq
        )
        select distinct (r.j).queue as "queue!" from routed r
        "#,
        limit,
    )
    .fetch_all(db)
    .await
}

/// Deletes the dead-lettered jobs of `queue` beyond its newest `keep` (its
/// `dead_letter_max_size`), up to `limit`, reporting them as `dead_letter.pruned`. Returns how
/// many.
pub async fn prune_excess(
    db: impl PgExecutor<'_>,
    queue: &str,
    keep: i64,
    limit: i64,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        with doomed as (
            select id from ojs_job
             where queue = $1 and dead_lettered_at is not null
             order by dead_lettered_at desc, seq desc
            offset $2
             limit $3
               for update skip locked
        ),
        deleted as (
            delete from ojs_job j using doomed d where j.id = d.id
            returning j.queue
        ),
        reported as (
            insert into ojs_event (type, subject, queue, data)
            select 'dead_letter.pruned', $1, $1,
                   jsonb_build_object('queue', $1::text, 'count', count(*), 'reason', 'max_size')
              from deleted
            having count(*) > 0
            returning 1
        )
        select count(*) as "deleted!" from deleted
        "#,
        queue,
        keep,
        limit,
    )
    .fetch_one(db)
    .await
}

/// Queues that have dead-lettered jobs.
pub async fn queues(db: impl PgExecutor<'_>) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"select distinct queue as "queue!" from ojs_job where dead_lettered_at is not null"#
    )
    .fetch_all(db)
    .await
}
