//! Statements on `ojs_job`.
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

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

use crate::job::envelope::NewJob;
use crate::job::{Job, JobId, JobState};

/// Advisory-lock namespace of unique-key checks (first half of the two-int lock key).
const UNIQUE_LOCK_NAMESPACE: i32 = 0x6f6a_7375; // "ojsu"

/// Inserts `jobs` in one statement and returns them in input order, with how many queues the
/// statement created.
///
/// The initial state is decided with the database clock: `pending` when asked, `scheduled` when
/// `scheduled_at` is in the future, else `available`. Nothing is notified here: the caller
/// announces the queues that gained available jobs after the commit (see
/// [`crate::notifier::Announcer`]), so concurrent inserts do not serialize on the notification
/// queue's lock.
pub async fn insert_many(
    db: impl PgExecutor<'_>,
    jobs: &[NewJob],
    strict_queues: bool,
) -> Result<(Vec<Job>, i64), sqlx::Error> {
    if jobs.is_empty() {
        return Ok((Vec::new(), 0));
    }
    // The queue configuration the jobs' defaults came from; a job prepared from an older one
    // makes the statement refuse (SQLSTATE OJ004) so the caller prepares them again.
    let generation = jobs.iter().map(|j| j.config_generation).min().unwrap_or(0);
    let n = jobs.len();
    let mut ids = Vec::with_capacity(n);
    let mut types = Vec::with_capacity(n);
    let mut queues = Vec::with_capacity(n);
    let mut args = Vec::with_capacity(n);
    let mut metas = Vec::with_capacity(n);
    let mut priorities = Vec::with_capacity(n);
    let mut max_attempts = Vec::with_capacity(n);
    let mut retries = Vec::with_capacity(n);
    let mut timeouts = Vec::with_capacity(n);
    let mut visibility = Vec::with_capacity(n);
    let mut scheduled_abs = Vec::with_capacity(n);
    let mut scheduled_rel = Vec::with_capacity(n);
    let mut scheduled_text = Vec::with_capacity(n);
    let mut expires_abs = Vec::with_capacity(n);
    let mut expires_rel = Vec::with_capacity(n);
    let mut expires_text = Vec::with_capacity(n);
    let mut ttls = Vec::with_capacity(n);
    let mut totals = Vec::with_capacity(n);
    let mut tags = Vec::with_capacity(n);
    let mut schemas = Vec::with_capacity(n);
    let mut unique_policies = Vec::with_capacity(n);
    let mut unique_keys = Vec::with_capacity(n);
    let mut extras = Vec::with_capacity(n);
    let mut pendings = Vec::with_capacity(n);
    let mut agings = Vec::with_capacity(n);
    for job in jobs {
        ids.push(job.id.0);
        types.push(job.r#type.as_str());
        queues.push(job.queue.as_str());
        args.push(job.args.as_str());
        metas.push(job.meta.as_str());
        priorities.push(job.priority);
        max_attempts.push(job.retry.max_attempts);
        retries.push(job.retry.to_json());
        timeouts.push(job.timeout_ms);
        visibility.push(job.visibility_timeout_ms);
        scheduled_abs.push(job.scheduled_at.as_ref().and_then(|t| t.absolute()));
        scheduled_rel.push(job.scheduled_at.as_ref().and_then(|t| t.relative_ms()));
        scheduled_text.push(job.scheduled_at.as_ref().and_then(|t| t.text()));
        expires_abs.push(job.expires_at.as_ref().and_then(|t| t.absolute()));
        expires_rel.push(job.expires_at.as_ref().and_then(|t| t.relative_ms()));
        expires_text.push(job.expires_at.as_ref().and_then(|t| t.text()));
        ttls.push(job.enqueue_ttl_secs);
        totals.push(job.total_timeout_secs);
        tags.push(
            job.tags
                .as_ref()
                .map(|t| serde_json::to_string(t).unwrap_or_else(|_| "[]".to_owned())),
        );
        schemas.push(job.schema_uri.as_deref());
        unique_policies.push(job.unique.as_ref().map(|u| u.raw.as_str()));
        unique_keys.push(job.unique.as_ref().map(|u| u.key.as_str()));
        extras.push(job.extra.as_str());
        pendings.push(job.pending);
        agings.push(job.priority_aging_ms);
    }

    let rows = sqlx::query!(
        r#"
        with input as (
            select *
              from unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int4[],
                          $7::int4[], $8::text[], $9::int8[], $10::int8[], $11::timestamptz[],
                          $12::int8[], $13::text[], $14::timestamptz[], $15::int8[], $16::text[],
                          $17::int4[], $18::int4[], $19::text[], $20::text[], $21::text[],
                          $22::text[], $23::text[], $24::bool[], $25::int8[])
                   with ordinality
                as t(id, type, queue, args, meta, priority, max_attempts, retry, timeout_ms,
                     visibility_timeout_ms, scheduled_abs, scheduled_rel_ms, scheduled_at_input,
                     expires_abs, expires_rel_ms, expires_at_input, enqueue_ttl_secs,
                     total_timeout_secs, tags, schema_uri, unique_policy, unique_key, extra,
                     pending, priority_aging_ms, ord)
        ),
        -- A draining queue (being deleted) takes no new jobs: the statement aborts with
        -- SQLSTATE OJ001. No lock is taken: an enqueue that read the queue as active just
        -- before it started draining lands its job there, where it runs normally.
        -- With strict queues ($26) a queue must exist before its first job (SQLSTATE OJ002).
        refused as (
            select ojs_queue_refused(q.name, 'OJ001') as refused
              from ojs_queue q
             where q.name in (select distinct queue from input) and q.state = 'draining'
            union all
            select ojs_queue_refused(n.queue, 'OJ002')
              from (select distinct queue from input) n
             where $26 and not exists (select 1 from ojs_queue q where q.name = n.queue)
            -- The generation is read under the shared lock a pool change takes exclusively
            -- (migration V8), so jobs written here are either seen by such a change or carry
            -- its settings (tenant_fair below).
            union all
            select ojs_queue_refused('', 'OJ004')
             where ojs_config_generation_locked() <> $27
        ),
        -- Bounded queues (queue configuration): the jobs are counted against the bound in the
        -- same statement. The counter row is updated under its row lock, so concurrent
        -- enqueues see each other's counts and never overshoot together; a new queue takes
        -- the `_default` bounds when there are any. Past a bound the statement aborts
        -- (SQLSTATE OJ003) with the depth and bound.
        grouped as (
            select queue, count(*) as jobs, sum(octet_length(args) + octet_length(meta)) as bytes
              from input
             group by queue
        ),
        capacity as (
            insert into ojs_queue_capacity as c (queue, max_jobs, max_bytes, overflow_policy, jobs, bytes)
            select g.queue, d.max_jobs, d.max_bytes, coalesce(d.overflow_policy, 'reject'), g.jobs, g.bytes
              from grouped g
              left join ojs_queue_capacity d on d.queue = '_default'
             where exists (select 1 from ojs_queue_capacity x where x.queue = g.queue)
                or (d.queue is not null and not exists (select 1 from ojs_queue q where q.name = g.queue))
            on conflict (queue) do update
               set jobs = c.jobs + excluded.jobs, bytes = c.bytes + excluded.bytes
            returning c.queue, c.jobs, c.bytes, c.max_jobs, c.max_bytes, c.overflow_policy
        ),
        overflow as (
            select ojs_queue_full(c.queue, c.jobs - g.jobs, c.max_jobs, c.bytes - g.bytes,
                                  c.max_bytes, c.overflow_policy)
              from capacity c
              join grouped g on g.queue = c.queue
             where c.jobs > c.max_jobs or c.bytes > c.max_bytes
        ),
        resolved as (
            select i.*, r.scheduled_at, r.expires_at,
                   case when i.pending then 'pending'
                        when r.scheduled_at > now() then 'scheduled'
                        else 'available'
                   end::ojs_job_state as state
              from input i,
                   lateral (select coalesce(i.scheduled_abs,
                                            now() + i.scheduled_rel_ms * interval '1 millisecond') as scheduled_at,
                                   coalesce(i.expires_abs,
                                            now() + i.expires_rel_ms * interval '1 millisecond') as expires_at) r
        ),
        inserted as (
            insert into ojs_job as j
                   (id, type, queue, args, meta, priority, state, max_attempts, retry, timeout_ms,
                    visibility_timeout_ms, scheduled_at, scheduled_at_input, expires_at,
                    expires_at_input, enqueue_ttl_secs, total_timeout_secs, tags, schema_uri,
                    unique_policy, unique_key, extra, enqueued_at, claim_deadline_at,
                    total_deadline_at, priority_aging_ms, capacity_tracked, tenant_fair)
            select id, type, queue, args::json, meta::json, priority, state, max_attempts,
                   retry::json, timeout_ms, visibility_timeout_ms, scheduled_at, scheduled_at_input,
                   expires_at, expires_at_input, enqueue_ttl_secs, total_timeout_secs,
                   case when tags is not null
                        then array(select json_array_elements_text(tags::json)) end,
                   schema_uri, unique_policy::json, unique_key, extra::json,
                   case when state = 'available' then now() end,
                   now() + enqueue_ttl_secs * interval '1 second',
                   now() + total_timeout_secs * interval '1 second',
                   priority_aging_ms,
                   queue in (select queue from capacity),
                   queue in (select queue from ojs_fair_queue)
              from resolved
             where not exists (select 1 from refused) and not exists (select 1 from overflow)
             -- Rows are inserted in request order, so `seq` (FIFO tie-breaker) follows it.
             order by ord
            returning j as job, j.queue, j.state
        ),
        -- A queue exists from its first enqueue on (queue configuration extension).
        new_queues as (
            insert into ojs_queue (name)
            select distinct queue from input
            on conflict do nothing
            returning name
        ),
        queue_events as (
            insert into ojs_event (type, subject, queue, data)
            select 'queue.created', q.name, q.name, jsonb_build_object('queue', q.name, 'implicit', true)
              from new_queues q
            returning 1
        ),
        events as (
            insert into ojs_event (type, subject, job_id, queue, job_type, from_state, to_state, data)
            select case i.state when 'available' then 'job.enqueued' else 'job.scheduled' end,
                   (i.job).id::text, (i.job).id, i.queue, (i.job).type, null, i.state,
                   -- = ojs_job_transition_data(null, i.job), written out (see `claim`).
                   jsonb_build_object('job_id', (i.job).id, 'job_type', (i.job).type, 'queue', (i.job).queue, 'state', (i.job).state)
                   || jsonb_strip_nulls(jsonb_build_object(
                          'trace_id', coalesce(nullif((i.job).meta ->> 'trace_id', ''),
                                               nullif(split_part((i.job).meta ->> 'traceparent', '-', 2), '')),
                          'priority', case when i.state = 'available' then (i.job).priority end,
                          'unique_key', case when i.state = 'available' then (i.job).unique_key end))
                   || case when (i.job).scheduled_at is not null
                           then jsonb_build_object('scheduled_at', to_char((i.job).scheduled_at at time zone 'UTC',
                                                                           'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
                           else '{}' end
              from inserted i
             -- Reading queue_events first writes a new queue's `queue.created` before the
             -- events of its first jobs.
             where i.state <> 'pending' and (select count(*) from queue_events) >= 0
             order by (i.job).seq
        )
        select i.job as "job!: Job", (select count(*) from queue_events) as "queues_created!"
          from inserted i
        "#,
        &ids,
        &types as &[&str],
        &queues as &[&str],
        &args as &[&str],
        &metas as &[&str],
        &priorities,
        &max_attempts,
        &retries,
        &timeouts,
        &visibility as &[Option<i64>],
        &scheduled_abs as &[Option<DateTime<Utc>>],
        &scheduled_rel as &[Option<i64>],
        &scheduled_text as &[Option<&str>],
        &expires_abs as &[Option<DateTime<Utc>>],
        &expires_rel as &[Option<i64>],
        &expires_text as &[Option<&str>],
        &ttls as &[Option<i32>],
        &totals as &[Option<i32>],
        &tags as &[Option<String>],
        &schemas as &[Option<&str>],
        &unique_policies as &[Option<&str>],
        &unique_keys as &[Option<&str>],
        &extras as &[&str],
        &pendings,
        &agings as &[Option<i64>],
        strict_queues,
        generation,
    )
    .fetch_all(db)
    .await?;

    let created = rows.first().map_or(0, |r| r.queues_created);
    let position: HashMap<Uuid, usize> = ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
    let mut out: Vec<Job> = rows.into_iter().map(|r| r.job).collect();
    out.sort_by_key(|job| position.get(&job.id.0).copied().unwrap_or(usize::MAX));
    Ok((out, created))
}

/// Which of `ids` already exist.
pub async fn existing_ids(db: impl PgExecutor<'_>, ids: &[Uuid]) -> Result<Vec<Uuid>, sqlx::Error> {
    sqlx::query_scalar!(r#"select id from ojs_job where id = any($1::uuid[])"#, ids)
        .fetch_all(db)
        .await
}

/// One job by id.
pub async fn get(db: impl PgExecutor<'_>, id: JobId) -> Result<Option<Job>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"select j as "job!: Job" from ojs_job j where j.id = $1"#,
        id as JobId
    )
    .fetch_optional(db)
    .await
}

/// The jobs of `ids` that exist, in no particular order.
pub async fn get_many(db: impl PgExecutor<'_>, ids: &[Uuid]) -> Result<Vec<Job>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"select j as "job!: Job" from ojs_job j where j.id = any($1::uuid[])"#,
        ids
    )
    .fetch_all(db)
    .await
}

/// Takes the transaction-scoped advisory locks of `keys` (in a fixed order, so two batches with
/// overlapping keys cannot deadlock). Held until the surrounding transaction ends.
pub async fn lock_unique_keys(db: impl PgExecutor<'_>, keys: &[&str]) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"
        select count(pg_advisory_xact_lock($1, hashtext(k))) as "locks!"
          from (select distinct k from unnest($2::text[]) k order by k) keys
        "#,
        UNIQUE_LOCK_NAMESPACE,
        keys as &[&str],
    )
    .fetch_one(db)
    .await?;
    Ok(())
}

/// For each of `keys`, the most recently created job in each state (enough to decide whether a
/// duplicate exists for any set of states and any period), with the database's "now" (present
/// whenever a row is: periods are only compared against existing jobs).
pub async fn unique_candidates(
    db: impl PgExecutor<'_>,
    keys: &[&str],
) -> Result<(Vec<Job>, Option<DateTime<Utc>>), sqlx::Error> {
    let rows = sqlx::query!(
        r#"
        select distinct on (j.unique_key, j.state) j as "job!: Job", now() as "now!"
          from ojs_job j
         where j.unique_key = any($1::text[])
         order by j.unique_key, j.state, j.created_at desc
        "#,
        keys as &[&str],
    )
    .fetch_all(db)
    .await?;
    let now = rows.first().map(|r| r.now);
    Ok((rows.into_iter().map(|r| r.job).collect(), now))
}

/// Cancels jobs replaced by a unique `replace` (only those still cancellable and not active).
pub async fn cancel_replaced(
    db: impl PgExecutor<'_>,
    ids: &[Uuid],
) -> Result<Vec<Job>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        with target as (
            select id, state from ojs_job
             where id = any($1::uuid[]) and state in ('scheduled', 'available', 'pending', 'retryable')
               for update
        ),
        moved as (
            update ojs_job j
               set state = 'cancelled', cancelled_at = now()
              from target t
             where j.id = t.id
            returning j, t.state as prev
        ),
        events as (
            insert into ojs_event (type, subject, job_id, queue, job_type, from_state, to_state, data)
            select 'job.cancelled', (m.j).id::text, (m.j).id, (m.j).queue, (m.j).type, m.prev,
                   (m.j).state, ojs_job_transition_data(m.prev, m.j)
              from moved m
             order by (m.j).seq
        )
        select m.j as "job!: Job" from moved m
        "#,
        ids,
    )
    .fetch_all(db)
    .await
}

/// Unique `replace_except_schedule`: overwrites a still-`scheduled` job's input attributes with
/// `job`'s, keeping its id, `scheduled_at` and history.
pub async fn replace_scheduled(
    db: impl PgExecutor<'_>,
    id: JobId,
    job: &NewJob,
) -> Result<Option<Job>, sqlx::Error> {
    let tags = job
        .tags
        .as_ref()
        .map(|t| serde_json::to_string(t).unwrap_or_else(|_| "[]".to_owned()));
    sqlx::query_scalar!(
        r#"
        with target as (
            select id, priority from ojs_job where id = $1 and state = 'scheduled' for update
        ),
        moved as (
            update ojs_job j
               set queue = $2, args = $3::text::json, meta = $4::text::json, priority = $5,
                   max_attempts = $6, retry = $7::text::json, timeout_ms = $8,
                   visibility_timeout_ms = $9, enqueue_ttl_secs = $10, total_timeout_secs = $11,
                   tags = case when $12::text is not null
                               then array(select json_array_elements_text($12::json)) end,
                   schema_uri = $13, unique_policy = $14::text::json, extra = $15::text::json,
                   claim_deadline_at = j.created_at + $10::int4 * interval '1 second',
                   total_deadline_at = j.created_at + $11::int4 * interval '1 second'
              from target t
             where j.id = t.id
            returning j, t.priority as prev_priority
        ),
        events as (
            insert into ojs_event (type, subject, job_id, queue, job_type, from_state, to_state, data)
            select e.type, (m.j).id::text, (m.j).id, (m.j).queue, (m.j).type, e.from_state,
                   e.to_state, e.data
              from moved m
              cross join lateral ojs_job_events('scheduled', null, null, null, 0, null, m.prev_priority, m.j) e
        )
        select m.j as "job!: Job" from moved m
        "#,
        id as JobId,
        job.queue,
        job.args,
        job.meta,
        job.priority,
        job.retry.max_attempts,
        job.retry.to_json(),
        job.timeout_ms,
        job.visibility_timeout_ms,
        job.enqueue_ttl_secs,
        job.total_timeout_secs,
        tags,
        job.schema_uri,
        job.unique.as_ref().map(|u| u.raw.as_str()),
        job.extra,
    )
    .fetch_optional(db)
    .await
}

/// What [`set_priority`] found and did.
#[derive(Debug, Clone)]
pub struct PriorityChange {
    /// The job's state when it was looked at.
    pub state: JobState,
    /// Its priority before the change.
    pub previous: i32,
    /// The job after the change; `None` when nothing changed (its state does not allow it, or
    /// `only_if_more_urgent` and `priority` is not more urgent).
    pub job: Option<Job>,
}

/// Sets an `available` or `scheduled` job's stored priority and records `priority.changed`
/// when the value differs. FETCH orders by it from the next claim on (the dispatch index keys
/// on it). With `only_if_more_urgent` (unique `upgrade_priority`) it only ever lowers the
/// number. `None`: no such job.
pub async fn set_priority(
    db: impl PgExecutor<'_>,
    id: JobId,
    priority: i32,
    only_if_more_urgent: bool,
) -> Result<Option<PriorityChange>, sqlx::Error> {
    let row = sqlx::query!(
        r#"
        with target as (
            select id, state, priority from ojs_job where id = $1 for update
        ),
        moved as (
            update ojs_job j set priority = $2
              from target t
             where j.id = t.id
               and t.state in ('available', 'scheduled')
               and (t.priority > $2 or (not $3 and t.priority <> $2))
            returning j, t.state as prev, t.priority as prev_priority
        ),
        events as (
            insert into ojs_event (type, subject, job_id, queue, job_type, from_state, to_state, data)
            select e.type, (m.j).id::text, (m.j).id, (m.j).queue, (m.j).type, e.from_state,
                   e.to_state, e.data
              from moved m
              cross join lateral ojs_job_events(m.prev, null, null, null, 0, null, m.prev_priority, m.j) e
        )
        select t.state as "state!: JobState", t.priority as "previous!",
               (select m.j from moved m) as "job: Job"
          from target t
        "#,
        id as JobId,
        priority,
        only_if_more_urgent,
    )
    .fetch_optional(db)
    .await?;
    Ok(row.map(|r| PriorityChange {
        state: r.state,
        previous: r.previous,
        job: r.job,
    }))
}

/// Moves due `scheduled` and `retryable` jobs to `available` (at most `limit` of each, earliest
/// due first): those of `queues`, or of every queue when `queues` is `None`. FETCH calls it for
/// its own queues so that a fetch issued after the due time never misses a job, whether or not
/// the promoter has run; the promoter calls it for all queues. `enqueued_at` becomes the due
/// time, which keeps FIFO order fair however late promotion runs. Queues that gained jobs are
/// notified. `now` overrides the database clock (tests).
pub async fn promote_due(
    db: impl PgExecutor<'_>,
    queues: Option<&[&str]>,
    now: Option<DateTime<Utc>>,
    limit: i64,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        with due_scheduled as (
            select id, scheduled_at as due, state as prev
              from ojs_job
             where state = 'scheduled'
               and scheduled_at <= coalesce($3::timestamptz, now())
               and ($1::text[] is null or queue = any($1::text[]))
             order by scheduled_at
             limit $2
               for update skip locked
        ),
        due_retry as (
            select id, next_retry_at as due, state as prev
              from ojs_job
             where state = 'retryable'
               and next_retry_at <= coalesce($3::timestamptz, now())
               and ($1::text[] is null or queue = any($1::text[]))
             order by next_retry_at
             limit $2
               for update skip locked
        ),
        promoted as (
            update ojs_job j
               set state = 'available', enqueued_at = d.due, next_retry_at = null
              from (select * from due_scheduled union all select * from due_retry) d
             where j.id = d.id
            returning j, d.prev
        ),
        events as (
            insert into ojs_event (type, subject, job_id, queue, job_type, from_state, to_state, data)
            select 'job.enqueued', (p.j).id::text, (p.j).id, (p.j).queue, (p.j).type, p.prev,
                   (p.j).state, ojs_job_transition_data(p.prev, p.j)
              from promoted p
             order by (p.j).seq
        )
        select coalesce(sum(s.jobs), 0)::int8 as "promoted!"
          from (select (p.j).queue as queue, count(*) as jobs,
                       count(pg_notify('ojs_job_available', (p.j).queue))
                  from promoted p group by (p.j).queue) s
        "#,
        queues as Option<&[&str]>,
        limit,
        now,
    )
    .fetch_one(db)
    .await
}

/// Parameters of [`claim`].
#[derive(Debug, Clone, Copy)]
pub struct ClaimParams<'a> {
    /// The queue to claim from.
    pub queue: &'a str,
    /// At most this many jobs.
    pub limit: i64,
    /// The claiming worker, recorded as the reservation owner.
    pub worker_id: Option<&'a str>,
    /// Reservation length requested by the fetch (wins over the job's own).
    pub visibility_timeout_ms: Option<i64>,
    /// Reservation length when neither the fetch nor the job names one.
    pub default_visibility_timeout_ms: i64,
    /// The claim's time (`None`: the transaction's); rate-limited claims pass the time their
    /// limit was checked at.
    pub started_at: Option<DateTime<Utc>>,
    /// The claiming worker's pool (pool concurrency counts its active jobs).
    pub pool: Option<&'a str>,
}

/// Claims up to `limit` available jobs of one queue, most urgent first (priority, then FIFO).
///
/// One statement: the candidates are locked `for update skip locked` (concurrent claimers never
/// wait on each other and never get the same job) and updated to `active` with a new attempt,
/// owner, reservation deadline and execution deadline. Jobs past their `expires_at`,
/// `enqueue_ttl` or `total_timeout` are never handed out (the expirer discards them), and a
/// worker whose directive or own state is not `running` gets nothing. The returned order is not
/// significant.
pub async fn claim(db: impl PgExecutor<'_>, p: ClaimParams<'_>) -> Result<Vec<Job>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        with candidate as (
            select id
              from ojs_job
             where queue = $1
               and state = 'available'
               and (expires_at is null or expires_at > now())
               and (claim_deadline_at is null or claim_deadline_at > now())
               and (total_deadline_at is null or total_deadline_at > now())
               -- A paused queue is skipped (it still accepts jobs).
               and not exists (select 1 from ojs_queue q where q.name = $1 and q.state = 'paused')
               -- A worker told to stop (or stopping by itself) gets nothing.
               and not exists (select 1 from ojs_worker w
                                where w.id = $3 and (w.directive <> '' or w.state <> 'running'))
             -- Rate limits (priority extension §9.1), when they exist, filter here: a
             -- rate-limited urgent job is skipped and the next eligible one taken, so the
             -- limit stays a hard constraint and priority orders what it allows.
             -- The dispatch order of ojs_job_dispatch_idx (migration V4), written exactly as
             -- indexed: priority, then the time the job became available (with priority
             -- aging: that time plus priority * interval), then seq.
             order by (case when priority_aging_ms is null then priority else 0 end),
                      (date_part('epoch', enqueued_at - timestamptz '1970-01-01 00:00:00+00') * 1000
                       + coalesce(priority * priority_aging_ms, 0)),
                      seq
             limit $2
               for update skip locked
        ),
        moved as (
            update ojs_job j
               set state = 'active',
                   attempt = j.attempt + 1,
                   started_at = coalesce($6, now()),
                   worker_id = $3,
                   reservation_ms = coalesce($4, j.visibility_timeout_ms, $5),
                   visible_until = coalesce($6, now()) + coalesce($4, j.visibility_timeout_ms, $5) * interval '1 millisecond',
                   timeout_at = coalesce($6, now()) + j.timeout_ms * interval '1 millisecond',
                   claim_deadline_at = null,
                   pool = $7
              from candidate c
             where j.id = c.id
            returning j
        ),
        events as (
            insert into ojs_event (type, subject, job_id, queue, job_type, from_state, to_state, data)
            select 'job.started', (m.j).id::text, (m.j).id, (m.j).queue, (m.j).type, 'available',
                   (m.j).state,
                   -- = ojs_job_transition_data('available', m.j), written out: inlining that
                   -- function costs ~2 ms of planning per execution (tested against it).
                   jsonb_build_object('job_id', (m.j).id, 'job_type', (m.j).type, 'queue', (m.j).queue, 'state', (m.j).state)
                   || jsonb_strip_nulls(jsonb_build_object(
                          'trace_id', coalesce(nullif((m.j).meta ->> 'trace_id', ''),
                                               nullif(split_part((m.j).meta ->> 'traceparent', '-', 2), '')),
                          'worker_id', (m.j).worker_id, 'attempt', (m.j).attempt))
              from moved m
             order by (m.j).seq
        )
        select m.j as "job!: Job" from moved m
        "#,
        p.queue,
        p.limit,
        p.worker_id,
        p.visibility_timeout_ms,
        p.default_visibility_timeout_ms,
        p.started_at,
        p.pool,
    )
    .fetch_all(db)
    .await
}

/// [`claim`] from a tenant-fair queue: within each priority level, jobs are taken by their
/// virtual finish time (`fair_key`, migration V8), which interleaves tenants in proportion to
/// their weights. Untagged jobs (none, unless tagging was switched on mid-flight) are left to
/// [`claim`].
pub async fn claim_fair(
    db: impl PgExecutor<'_>,
    p: ClaimParams<'_>,
) -> Result<Vec<Job>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        with candidate as (
            select id
              from ojs_job
             where queue = $1
               and state = 'available'
               and (expires_at is null or expires_at > now())
               and (claim_deadline_at is null or claim_deadline_at > now())
               and (total_deadline_at is null or total_deadline_at > now())
               -- A paused queue is skipped (it still accepts jobs).
               and not exists (select 1 from ojs_queue q where q.name = $1 and q.state = 'paused')
               -- A worker told to stop (or stopping by itself) gets nothing.
               and not exists (select 1 from ojs_worker w
                                where w.id = $3 and (w.directive <> '' or w.state <> 'running'))
               and fair_key is not null
             -- The order of ojs_job_fair_idx (migration V8): priority, then the tenant-fair
             -- virtual finish time, then seq.
             order by priority, fair_key, seq
             limit $2
               for update skip locked
        ),
        moved as (
            update ojs_job j
               set state = 'active',
                   attempt = j.attempt + 1,
                   started_at = coalesce($6, now()),
                   worker_id = $3,
                   reservation_ms = coalesce($4, j.visibility_timeout_ms, $5),
                   visible_until = coalesce($6, now()) + coalesce($4, j.visibility_timeout_ms, $5) * interval '1 millisecond',
                   timeout_at = coalesce($6, now()) + j.timeout_ms * interval '1 millisecond',
                   claim_deadline_at = null,
                   pool = $7
              from candidate c
             where j.id = c.id
            returning j
        ),
        events as (
            insert into ojs_event (type, subject, job_id, queue, job_type, from_state, to_state, data)
            select 'job.started', (m.j).id::text, (m.j).id, (m.j).queue, (m.j).type, 'available',
                   (m.j).state,
                   -- = ojs_job_transition_data('available', m.j), written out: inlining that
                   -- function costs ~2 ms of planning per execution (tested against it).
                   jsonb_build_object('job_id', (m.j).id, 'job_type', (m.j).type, 'queue', (m.j).queue, 'state', (m.j).state)
                   || jsonb_strip_nulls(jsonb_build_object(
                          'trace_id', coalesce(nullif((m.j).meta ->> 'trace_id', ''),
                                               nullif(split_part((m.j).meta ->> 'traceparent', '-', 2), '')),
                          'worker_id', (m.j).worker_id, 'attempt', (m.j).attempt))
              from moved m
             order by (m.j).seq
        )
        select m.j as "job!: Job" from moved m
        "#,
        p.queue,
        p.limit,
        p.worker_id,
        p.visibility_timeout_ms,
        p.default_visibility_timeout_ms,
        p.started_at,
        p.pool,
    )
    .fetch_all(db)
    .await
}

/// One ACK for [`complete_many`].
#[derive(Debug, Clone, Copy)]
pub struct CompleteParams<'a> {
    pub id: JobId,
    /// Reservation owner check (`None`: no check).
    pub worker_id: Option<&'a str>,
    /// The handler's result (compact JSON), if any.
    pub result: Option<&'a str>,
}

/// ACK: `active` → `completed` for each of `acks`, storing `result` and removing `error`.
///
/// Fenced on the reservation: a `worker_id` other than the owner's matches nothing. Returns the
/// jobs that completed (in no particular order); a job missing from the answer was not an active
/// job of that worker. Each id must appear at most once.
pub async fn complete_many(
    db: impl PgExecutor<'_>,
    acks: &[CompleteParams<'_>],
) -> Result<Vec<Job>, sqlx::Error> {
    let ids: Vec<Uuid> = acks.iter().map(|a| a.id.0).collect();
    let workers: Vec<Option<&str>> = acks.iter().map(|a| a.worker_id).collect();
    let results: Vec<Option<&str>> = acks.iter().map(|a| a.result).collect();
    sqlx::query_scalar!(
        r#"
        with input as (
            select * from unnest($1::uuid[], $2::text[], $3::text[]) as t(id, worker_id, result)
        ),
        moved as (
            update ojs_job j
               set state = 'completed', completed_at = now(), result = i.result::json,
                   error = null, visible_until = null, timeout_at = null
              from input i
             where j.id = i.id
               and j.state = 'active'
               and (i.worker_id is null or j.worker_id is null or j.worker_id = i.worker_id)
            returning j
        ),
        events as (
            insert into ojs_event (type, subject, job_id, queue, job_type, from_state, to_state, data)
            select 'job.completed', (m.j).id::text, (m.j).id, (m.j).queue, (m.j).type, 'active',
                   (m.j).state,
                   -- = ojs_job_transition_data('active', m.j), written out (see `claim`).
                   jsonb_build_object('job_id', (m.j).id, 'job_type', (m.j).type, 'queue', (m.j).queue, 'state', (m.j).state)
                   || jsonb_strip_nulls(jsonb_build_object(
                          'trace_id', coalesce(nullif((m.j).meta ->> 'trace_id', ''),
                                               nullif(split_part((m.j).meta ->> 'traceparent', '-', 2), '')),
                          'duration_ms', round(extract(epoch from (m.j).completed_at - (m.j).started_at) * 1000)::int8,
                          'attempt', (m.j).attempt,
                          'result', case when octet_length((m.j).result::text) <= 65536
                                         then (m.j).result::jsonb end))
              from moved m
             order by (m.j).seq
        )
        select m.j as "job!: Job" from moved m
        "#,
        &ids,
        &workers as &[Option<&str>],
        &results as &[Option<&str>],
    )
    .fetch_all(db)
    .await
}

/// Where a failed attempt sends the job (decided by the retry policy, see `job::failure`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailTarget {
    /// Back to `available` immediately (NACK `requeue`).
    Available,
    /// `retryable` after `delay_ms`.
    Retryable { delay_ms: i64 },
    /// `discarded`, dead-lettered or not.
    Discarded { dead_letter: bool },
}

impl FailTarget {
    /// Where the retry policy's outcome sends the job.
    pub fn from_outcome(outcome: crate::job::failure::Outcome) -> FailTarget {
        use crate::job::failure::Outcome;
        match outcome {
            Outcome::Requeue => FailTarget::Available,
            Outcome::Retry { delay_ms } => FailTarget::Retryable {
                delay_ms: i64::try_from(delay_ms).unwrap_or(i64::MAX),
            },
            Outcome::Discard { dead_letter, .. } => FailTarget::Discarded { dead_letter },
        }
    }
}

/// One failed attempt for [`fail_many`].
#[derive(Debug, Clone, Copy)]
pub struct FailParams<'a> {
    pub id: JobId,
    /// The attempt being failed; the update only applies while it is still the current one.
    pub attempt: i32,
    /// Reservation owner check, as for ACK (`None`: no check, e.g. the server's own reclaim).
    pub worker_id: Option<&'a str>,
    /// The error object to record (compact JSON), or `None` for a requeue without error.
    pub error: Option<&'a str>,
    pub target: FailTarget,
}

/// Ends failed attempts (NACK, and the server's reclaims): records each error in `error` and
/// `errors[]` and moves each job to its target state, but only jobs still in the claim that
/// failed (active, same attempt, same owner). Returns the jobs that moved. Queues that regained
/// available jobs are notified. `now` overrides the database clock (tests).
pub async fn fail_many(
    db: impl PgExecutor<'_>,
    failures: &[FailParams<'_>],
    now: Option<DateTime<Utc>>,
) -> Result<Vec<Job>, sqlx::Error> {
    let n = failures.len();
    let mut ids = Vec::with_capacity(n);
    let mut attempts = Vec::with_capacity(n);
    let mut workers = Vec::with_capacity(n);
    let mut errors = Vec::with_capacity(n);
    let mut targets = Vec::with_capacity(n);
    let mut delays = Vec::with_capacity(n);
    let mut dead_letters = Vec::with_capacity(n);
    for f in failures {
        let (state, delay_ms, dead_letter) = match f.target {
            FailTarget::Available => (JobState::Available, None, false),
            FailTarget::Retryable { delay_ms } => (JobState::Retryable, Some(delay_ms), false),
            FailTarget::Discarded { dead_letter } => (JobState::Discarded, None, dead_letter),
        };
        ids.push(f.id.0);
        attempts.push(f.attempt);
        workers.push(f.worker_id);
        errors.push(f.error);
        targets.push(state.as_str());
        delays.push(delay_ms);
        dead_letters.push(dead_letter);
    }
    sqlx::query_scalar!(
        r#"
        with input as (
            select *
              from unnest($1::uuid[], $2::int4[], $3::text[], $4::text[], $5::text[], $6::int8[],
                          $7::bool[])
                as t(id, attempt, worker_id, error, target, delay_ms, dead_letter)
        ),
        -- The attempt as it was (the statement's snapshot precedes its own update).
        before as (
            select id, started_at, worker_id, jsonb_array_length(errors) as error_count
              from ojs_job
             where id = any($1::uuid[])
        ),
        failed as (
            update ojs_job j
               set state = i.target::ojs_job_state,
                   error = coalesce(i.error::jsonb, j.error),
                   errors = case when i.error is null then j.errors
                                 else j.errors || jsonb_build_array(ojs_error_entry(
                                          j.attempt, i.error::jsonb, coalesce($8::timestamptz, now())))
                            end,
                   next_retry_at = case when i.target = 'retryable'
                                        then coalesce($8::timestamptz, now()) + i.delay_ms * interval '1 millisecond' end,
                   retry_delay_ms = coalesce(i.delay_ms, j.retry_delay_ms),
                   discarded_at = case when i.target = 'discarded' then coalesce($8::timestamptz, now()) end,
                   completed_at = case when i.target = 'discarded' then coalesce($8::timestamptz, now())
                                       else j.completed_at end,
                   dead_lettered_at = case when i.dead_letter then coalesce($8::timestamptz, now()) end,
                   started_at = case when i.target = 'available' then null else j.started_at end,
                   enqueued_at = case when i.target = 'available' then coalesce($8::timestamptz, now())
                                      else j.enqueued_at end,
                   visible_until = null,
                   timeout_at = null
              from input i
             where j.id = i.id
               and j.state = 'active'
               and j.attempt = i.attempt
               and (i.worker_id is null or j.worker_id is null or j.worker_id = i.worker_id)
            returning j
        ),
        events as (
            insert into ojs_event (type, subject, job_id, queue, job_type, from_state, to_state, data)
            select e.type, (f.j).id::text, (f.j).id, (f.j).queue, (f.j).type, e.from_state,
                   e.to_state, e.data
              from failed f
              join before b on b.id = (f.j).id
              cross join lateral ojs_job_events('active', b.started_at, b.worker_id, null,
                                                b.error_count, null, (f.j).priority, f.j) e
             order by (f.j).seq, e.ord
        ),
        notified as (
            select count(pg_notify('ojs_job_available', q.queue)) as queues
              from (select distinct (f.j).queue as queue from failed f
                     where (f.j).state = 'available') q
        )
        select f.j as "job!: Job"
          from failed f cross join notified
        "#,
        &ids,
        &attempts,
        &workers as &[Option<&str>],
        &errors as &[Option<&str>],
        &targets as &[&str],
        &delays as &[Option<i64>],
        &dead_letters,
        now,
    )
    .fetch_all(db)
    .await
}

/// CANCEL: moves a `scheduled`, `available`, `pending`, `retryable` or `active` job to
/// `cancelled` and returns it with its previous state. For an active job `error` (the
/// cancellation error, compact JSON) is recorded; its worker learns about it from its next
/// heartbeat, and its later ACK/NACK no longer matches.
pub async fn cancel(
    db: impl PgExecutor<'_>,
    id: JobId,
    error: &str,
) -> Result<Option<(Job, JobState)>, sqlx::Error> {
    let row = sqlx::query!(
        r#"
        with target as (
            select id, state from ojs_job where id = $1 for update
        ),
        moved as (
            update ojs_job j
               set state = 'cancelled',
                   cancelled_at = now(),
                   visible_until = null,
                   timeout_at = null,
                   error = case when t.state = 'active' then $2::text::jsonb else j.error end,
                   errors = case when t.state = 'active'
                                 then j.errors || jsonb_build_array(ojs_error_entry(j.attempt, $2::text::jsonb))
                                 else j.errors
                            end
              from target t
             where j.id = t.id
               and t.state in ('scheduled', 'available', 'pending', 'active', 'retryable')
            returning j, t.state as prev
        ),
        events as (
            insert into ojs_event (type, subject, job_id, queue, job_type, from_state, to_state, data)
            -- A cancelled attempt is not a failed one: the error recorded is no job.failed.
            select 'job.cancelled', (m.j).id::text, (m.j).id, (m.j).queue, (m.j).type, m.prev,
                   (m.j).state, ojs_job_transition_data(m.prev, m.j)
              from moved m
        )
        select m.j as "job!: Job", m.prev as "previous_state!: JobState" from moved m
        "#,
        id as JobId,
        error,
    )
    .fetch_optional(db)
    .await?;
    Ok(row.map(|r| (r.job, r.previous_state)))
}

/// ACTIVATE: `pending` → `available`, notifying the queue.
pub async fn activate(db: impl PgExecutor<'_>, id: JobId) -> Result<Option<Job>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        with activated as (
            update ojs_job j
               set state = 'available', activated_at = now(), enqueued_at = now()
             where j.id = $1 and j.state = 'pending'
            returning j
        ),
        events as (
            insert into ojs_event (type, subject, job_id, queue, job_type, from_state, to_state, data)
            select 'job.enqueued', (a.j).id::text, (a.j).id, (a.j).queue, (a.j).type, 'pending',
                   (a.j).state, ojs_job_transition_data('pending', a.j)
              from activated a
        )
        select a.j as "job!: Job"
          from activated a
          cross join lateral (select pg_notify('ojs_job_available', (a.j).queue)) n
        "#,
        id as JobId,
    )
    .fetch_optional(db)
    .await
}

/// Expirer: discards up to `limit` waiting jobs whose `expires_at`, enqueue TTL
/// (`claim_deadline_at`) or total timeout passed, earliest deadline first, with error `expired`.
/// They enter the dead-letter queue unless their retry policy says `on_exhaustion: discard`.
/// Returns how many were discarded, per queue and job type.
pub async fn expire_due(
    db: impl PgExecutor<'_>,
    now: Option<DateTime<Utc>>,
    limit: i64,
) -> Result<Vec<(String, String, i64)>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"
        with doomed as (
            select id,
                   state as prev,
                   coalesce($1::timestamptz, now()) as now,
                   jsonb_build_object(
                       'code', 'expired',
                       'type', 'expired',
                       'message', case
                           when total_deadline_at <= coalesce($1::timestamptz, now())
                               then 'The job''s total_timeout elapsed before it finished.'
                           when claim_deadline_at <= coalesce($1::timestamptz, now())
                               then 'The job was not claimed within its enqueue_ttl.'
                           else 'The job''s expires_at passed before it could start.'
                       end) as error
              from ojs_job
             where state in ('scheduled', 'available', 'pending', 'retryable')
               and (expires_at is not null or claim_deadline_at is not null
                    or total_deadline_at is not null)
               and least(expires_at, claim_deadline_at, total_deadline_at)
                   <= coalesce($1::timestamptz, now())
             order by least(expires_at, claim_deadline_at, total_deadline_at)
             limit $2
               for update skip locked
        ),
        expired as (
            update ojs_job j
               set state = 'discarded',
                   discarded_at = d.now,
                   completed_at = d.now,
                   next_retry_at = null,
                   dead_lettered_at = case when coalesce(j.retry ->> 'on_exhaustion', 'dead_letter') = 'dead_letter'
                                           then d.now end,
                   error = d.error,
                   errors = j.errors || jsonb_build_array(ojs_error_entry(j.attempt, d.error, d.now))
              from doomed d
             where j.id = d.id
            returning j, d.prev
        ),
        events as (
            insert into ojs_event (type, subject, job_id, queue, job_type, from_state, to_state, data)
            select e.type, (x.j).id::text, (x.j).id, (x.j).queue, (x.j).type, e.from_state,
                   e.to_state, e.data
              from expired x
              cross join lateral ojs_job_events(x.prev, null, null, null, 0, null, (x.j).priority, x.j) e
             order by (x.j).seq, e.ord
        )
        select (x.j).queue as "queue!", (x.j).type as "job_type!", count(*) as "expired!"
          from expired x
         group by (x.j).queue, (x.j).type
        "#,
        now,
        limit,
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.queue, r.job_type, r.expired))
        .collect())
}

/// Reaper: locks up to `limit` active jobs whose reservation, execution timeout or total timeout
/// passed (earliest first), for the caller to decide their outcome and end them with
/// [`fail_many`] in the same transaction. Also returns the effective "now".
pub async fn lock_overdue(
    db: impl PgExecutor<'_>,
    now: Option<DateTime<Utc>>,
    limit: i64,
) -> Result<(Vec<Job>, DateTime<Utc>), sqlx::Error> {
    let rows = sqlx::query!(
        r#"
        select j as "job!: Job", coalesce($1::timestamptz, now()) as "now!"
          from ojs_job j
         where j.state = 'active'
           and least(j.visible_until, j.timeout_at, j.total_deadline_at) <= coalesce($1::timestamptz, now())
         order by least(j.visible_until, j.timeout_at, j.total_deadline_at)
         limit $2
           for update skip locked
        "#,
        now,
        limit,
    )
    .fetch_all(db)
    .await?;
    let now = match rows.first() {
        Some(row) => row.now,
        None => now.unwrap_or_else(Utc::now),
    };
    Ok((rows.into_iter().map(|r| r.job).collect(), now))
}

/// Locks up to `limit` active jobs held by `workers` (a stale or departing worker's jobs), for
/// the caller to release them with [`fail_many`] in the same transaction.
pub async fn lock_held_by(
    db: impl PgExecutor<'_>,
    workers: &[String],
    limit: i64,
) -> Result<Vec<Job>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        select j as "job!: Job"
          from ojs_job j
         where j.state = 'active' and j.worker_id = any($1::text[])
         order by j.started_at
         limit $2
           for update skip locked
        "#,
        workers,
        limit,
    )
    .fetch_all(db)
    .await
}

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

/// Deletes the dead-lettered jobs of `queue` beyond its newest `keep` (its
/// `dead_letter_max_size`), up to `limit`, reporting them as `dead_letter.pruned`. Returns how
/// many.
pub async fn prune_dead_letter_excess(
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
pub async fn dead_letter_queues(db: impl PgExecutor<'_>) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"select distinct queue as "queue!" from ojs_job where dead_lettered_at is not null"#
    )
    .fetch_all(db)
    .await
}

/// Whether a queue exists: it has a row (every enqueue, pause or resume creates one), or
/// events name it (a queue deleted while its events are retained). Both are index lookups.
pub async fn queue_known(db: impl PgExecutor<'_>, queue: &str) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        select exists (select 1 from ojs_queue where name = $1)
            or exists (select 1 from ojs_event where queue = $1) as "known!"
        "#,
        queue
    )
    .fetch_one(db)
    .await
}

/// Deletes every job (test hook `POST /ojs/v1/admin/reset` only).
pub async fn delete_all(db: impl PgExecutor<'_>) -> Result<(), sqlx::Error> {
    sqlx::query!("truncate ojs_job").execute(db).await?;
    Ok(())
}

/// Available jobs per queue and stored priority (of `queue` only, when given), ordered by queue
/// then priority: priority statistics and the `ojs_queue_available_by_priority` gauge.
pub async fn available_by_priority(
    db: impl PgExecutor<'_>,
    queue: Option<&str>,
) -> Result<Vec<(String, i32, i64)>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"
        select queue, priority, count(*) as "jobs!"
          from ojs_job
         where state = 'available' and ($1::text is null or queue = $1)
         group by queue, priority
         order by queue, priority
        "#,
        queue,
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.queue, r.priority, r.jobs))
        .collect())
}
