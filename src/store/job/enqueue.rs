//! PUSH: the enqueue statement, and the reads and writes of unique jobs.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

use crate::job::envelope::NewJob;
use crate::job::{Job, JobId};

/// A waiting FETCH that a new job may be written `active` for (see [`insert_many`]).
#[derive(Debug, Clone, Copy)]
pub struct HandTo<'a> {
    /// The fetching worker, recorded as the reservation owner.
    pub worker_id: Option<&'a str>,
    /// Reservation length requested by the FETCH (wins over the job's own).
    pub visibility_timeout_ms: Option<i64>,
    /// The worker's pool, recorded on the job.
    pub pool: Option<&'a str>,
}

/// Which new jobs [`insert_many`] writes straight to a waiting FETCH.
#[derive(Debug, Clone, Copy, Default)]
pub struct Handoffs<'a> {
    /// Per job (in order; shorter than the jobs, or empty: none for the rest).
    pub to: &'a [Option<HandTo<'a>>],
    /// Reservation length when neither the FETCH nor the job names one.
    pub default_visibility_timeout_ms: i64,
}

/// Inserts `jobs` in one statement and returns them in input order, with how many queues the
/// statement created.
///
/// The initial state is decided with the database clock: `pending` when asked, `scheduled` when
/// `scheduled_at` is in the future, else `available` — or `active` for the FETCH that
/// `handoffs` names for the job, exactly as that FETCH's claim would have made it (first
/// attempt, reservation, execution deadline, `job.enqueued` then `job.started`), when its claim
/// would have taken it: the queue is not paused or tenant-fair, the worker is not told to stop,
/// and the job has not expired. Otherwise the job is `available` and the FETCH gets nothing
/// from this statement. Nothing is notified here: the caller announces the queues that gained
/// available jobs after the commit (see [`crate::wakeup::Announcer`]), so concurrent inserts
/// do not serialize on the notification queue's lock. One job is written by a smaller
/// statement with the same effect.
#[tracing::instrument(level = "debug", skip_all, fields(jobs = jobs.len()))]
pub async fn insert_many(
    db: impl PgExecutor<'_>,
    jobs: &[NewJob],
    strict_queues: bool,
    handoffs: Handoffs<'_>,
) -> Result<(Vec<Job>, i64), sqlx::Error> {
    if jobs.is_empty() {
        return Ok((Vec::new(), 0));
    }
    if let [job] = jobs {
        let hand_to = handoffs.to.first().copied().flatten();
        return insert_one(
            db,
            job,
            strict_queues,
            hand_to,
            handoffs.default_visibility_timeout_ms,
        )
        .await
        .map(|(job, created)| (vec![job], created));
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
    let mut rate_keys = Vec::with_capacity(n);
    for job in jobs {
        let row = Row::of(job);
        ids.push(job.id.0);
        types.push(job.r#type.as_str());
        queues.push(job.queue.as_str());
        args.push(job.args.as_str());
        metas.push(job.meta.as_str());
        priorities.push(job.priority);
        max_attempts.push(job.retry.max_attempts);
        retries.push(row.retry);
        timeouts.push(job.timeout_ms);
        visibility.push(job.visibility_timeout_ms);
        scheduled_abs.push(row.scheduled_abs);
        scheduled_rel.push(row.scheduled_rel_ms);
        scheduled_text.push(row.scheduled_text);
        expires_abs.push(row.expires_abs);
        expires_rel.push(row.expires_rel_ms);
        expires_text.push(row.expires_text);
        ttls.push(job.enqueue_ttl_secs);
        totals.push(job.total_timeout_secs);
        tags.push(row.tags);
        schemas.push(job.schema_uri.as_deref());
        unique_policies.push(row.unique_policy);
        unique_keys.push(row.unique_key);
        extras.push(job.extra.as_str());
        pendings.push(job.pending);
        agings.push(job.priority_aging_ms);
        rate_keys.push(row.rate_key);
    }
    let handed: Vec<bool> = handoffs.to.iter().map(Option::is_some).collect();
    let hand_workers: Vec<Option<&str>> = handoffs
        .to
        .iter()
        .map(|h| h.and_then(|h| h.worker_id))
        .collect();
    let hand_visibility: Vec<Option<i64>> = handoffs
        .to
        .iter()
        .map(|h| h.and_then(|h| h.visibility_timeout_ms))
        .collect();
    let hand_pools: Vec<Option<&str>> =
        handoffs.to.iter().map(|h| h.and_then(|h| h.pool)).collect();
    let supplied: Vec<Uuid> = jobs
        .iter()
        .filter(|j| j.id_supplied)
        .map(|j| j.id.0)
        .collect();

    // The statement is the SQL function ojs_insert_jobs (migration V21), which ojs_enqueue
    // calls too: both doors write jobs with the same rules.
    let rows = sqlx::query!(
        r#"
        select inserted_job as "job!: Job", queues_created as "queues_created!"
          from ojs_insert_jobs($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[],
                               $6::int4[], $7::int4[], $8::text[], $9::int8[], $10::int8[],
                               $11::timestamptz[], $12::int8[], $13::text[],
                               $14::timestamptz[], $15::int8[], $16::text[], $17::int4[],
                               $18::int4[], $19::text[], $20::text[], $21::text[], $22::text[],
                               $23::text[], $24::bool[], $25::int8[], $26::bool, $27::int8,
                               $28::bool[], $29::text[], $30::int8[], $31::text[], $32::int8,
                               $33::uuid[], $34::text[])
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
        &handed,
        &hand_workers as &[Option<&str>],
        &hand_visibility as &[Option<i64>],
        &hand_pools as &[Option<&str>],
        handoffs.default_visibility_timeout_ms,
        &supplied,
        &rate_keys as &[Option<String>],
    )
    .fetch_all(db)
    .await?;

    let created = rows.first().map_or(0, |r| r.queues_created);
    let position: HashMap<Uuid, usize> = ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
    let mut out: Vec<Job> = rows.into_iter().map(|r| r.job).collect();
    out.sort_by_key(|job| position.get(&job.id.0).copied().unwrap_or(usize::MAX));
    Ok((out, created))
}

/// One job's values as the enqueue statements take them.
struct Row<'a> {
    retry: String,
    scheduled_abs: Option<DateTime<Utc>>,
    scheduled_rel_ms: Option<i64>,
    scheduled_text: Option<&'a str>,
    expires_abs: Option<DateTime<Utc>>,
    expires_rel_ms: Option<i64>,
    expires_text: Option<&'a str>,
    tags: Option<String>,
    unique_policy: Option<&'a str>,
    unique_key: Option<&'a str>,
    /// The rate-limit key of a job with a `rate_limit`.
    rate_key: Option<String>,
}

impl<'a> Row<'a> {
    fn of(job: &'a NewJob) -> Row<'a> {
        Row {
            retry: job.retry.to_stored(),
            scheduled_abs: job.scheduled_at.as_ref().and_then(|t| t.absolute()),
            scheduled_rel_ms: job.scheduled_at.as_ref().and_then(|t| t.relative_ms()),
            scheduled_text: job.scheduled_at.as_ref().and_then(|t| t.text()),
            expires_abs: job.expires_at.as_ref().and_then(|t| t.absolute()),
            expires_rel_ms: job.expires_at.as_ref().and_then(|t| t.relative_ms()),
            expires_text: job.expires_at.as_ref().and_then(|t| t.text()),
            tags: job
                .tags
                .as_ref()
                .map(|t| serde_json::to_string(t).unwrap_or_else(|_| "[]".to_owned())),
            unique_policy: job.unique.as_ref().map(|u| u.raw.as_str()),
            unique_key: job.unique.as_ref().map(|u| u.key.as_str()),
            rate_key: job.rate_limit.as_ref().map(|p| p.key_for(&job.queue)),
        }
    }
}

/// [`insert_many`] for one job: the same refusals, bounds, hand-off, queue creation and events,
/// in a statement without the per-batch machinery (unnesting the columns, aggregating the
/// events per queue and type), which is a fifth of a single job's enqueue (pgbench, generic
/// plans: 630-710 against 810-940 µs of backend CPU per enqueue with its commit). Every
/// single-job PUSH goes through it, so the two statements are tested alike.
async fn insert_one(
    db: impl PgExecutor<'_>,
    job: &NewJob,
    strict_queues: bool,
    hand_to: Option<HandTo<'_>>,
    default_visibility_timeout_ms: i64,
) -> Result<(Job, i64), sqlx::Error> {
    let row = Row::of(job);
    let inserted = sqlx::query!(
        r#"
        -- insert_many for one job, with the same rules; see insert_many for what each part is for.
        with refused as (
            select ojs_queue_refused(q.name, 'OJ001') as refused
              from ojs_queue q
             where q.name = $3::text and q.state = 'draining'
            union all
            select ojs_queue_refused($3::text, 'OJ002')
             where $26::bool and not exists (select 1 from ojs_queue q where q.name = $3::text)
            union all
            select ojs_queue_refused('', 'OJ004')
             where ojs_config_generation_locked() <> $27::int8
            -- A client-supplied id a completed job holds is taken (see insert_many).
            union all
            select ojs_job_id_taken(d.id)
              from ojs_job_done d
             where $33::bool and d.id = $1::uuid
        ),
        capacity as (
            insert into ojs_queue_capacity as c (queue, max_jobs, max_bytes, overflow_policy, jobs, bytes)
            select $3::text, d.max_jobs, d.max_bytes, coalesce(d.overflow_policy, 'reject'), 1,
                   octet_length($4::text) + octet_length($5::text)
              from (select) g
              left join ojs_queue_capacity d on d.queue = '_default'
             where exists (select 1 from ojs_queue_capacity x where x.queue = $3::text)
                or (d.queue is not null and not exists (select 1 from ojs_queue q where q.name = $3::text))
            on conflict (queue) do update
               set jobs = c.jobs + excluded.jobs, bytes = c.bytes + excluded.bytes
            returning c.queue, c.jobs, c.bytes, c.max_jobs, c.max_bytes, c.overflow_policy
        ),
        overflow as (
            select ojs_queue_full(c.queue, c.jobs - 1, c.max_jobs,
                                  c.bytes - (octet_length($4::text) + octet_length($5::text)), c.max_bytes,
                                  c.overflow_policy)
              from capacity c
             where c.jobs > c.max_jobs or c.bytes > c.max_bytes
        ),
        resolved as (
            select r.scheduled_at, r.expires_at,
                   case when $24::bool then 'pending'
                        when r.scheduled_at > now() then 'scheduled'
                        when $28::bool and $34::text is null
                             and (r.expires_at is null or r.expires_at > now())
                             and not exists (select 1 from ojs_queue q
                                              where q.name = $3::text and q.state = 'paused')
                             and not exists (select 1 from ojs_fair_queue f where f.queue = $3::text)
                             and not exists (select 1 from ojs_worker w
                                              where w.id = $29::text
                                                and (w.directive <> '' or w.state <> 'running'))
                             then 'active'
                        else 'available'
                   end::ojs_job_state as state
              from (select coalesce($11::timestamptz, now() + $12::int8 * interval '1 millisecond') as scheduled_at,
                           coalesce($14::timestamptz, now() + $15::int8 * interval '1 millisecond') as expires_at) r
        ),
        inserted as (
            insert into ojs_job as j
                   (id, type, queue, args, meta, priority, state, max_attempts, retry, timeout_ms,
                    visibility_timeout_ms, scheduled_at, scheduled_at_input, expires_at,
                    expires_at_input, enqueue_ttl_secs, total_timeout_secs, tags, schema_uri,
                    unique_policy, unique_key, extra, enqueued_at, claim_deadline_at,
                    total_deadline_at, priority_aging_ms, capacity_tracked, tenant_fair,
                    attempt, started_at, worker_id, reservation_ms, visible_until, timeout_at,
                    pool, rate_key, tenant, lease_id)
            select $1::uuid, $2::text, $3::text, $4::text::json, $5::text::json, $6::int4, state, $7::int4, $8::text::json, $9::int8, $10::int8, scheduled_at, $13::text,
                   expires_at, $16::text, $17::int4, $18::int4,
                   case when $19::text is not null
                        then array(select json_array_elements_text($19::text::json)) end,
                   $20::text, $21::text::json, $22::text, $23::text::json,
                   case when state in ('available', 'active') then now() end,
                   case when state <> 'active' then now() + $17::int4 * interval '1 second' end,
                   now() + $18::int4 * interval '1 second',
                   $25::int8,
                   exists (select 1 from capacity),
                   exists (select 1 from ojs_fair_queue f where f.queue = $3::text),
                   case when state = 'active' then 1 else 0 end,
                   case when state = 'active' then now() end,
                   case when state = 'active' then $29::text end,
                   case when state = 'active' then coalesce($30::int8, $10::int8, $32::int8) end,
                   case when state = 'active'
                        then now() + coalesce($30::int8, $10::int8, $32::int8) * interval '1 millisecond' end,
                   case when state = 'active' then now() + $9::int8 * interval '1 millisecond' end,
                   case when state = 'active' then $31::text end,
                   $34::text,
                   -- The tenant, as ojs_insert_jobs writes it (migration V24).
                   nullif($5::text::json ->> 'tenant_id', ''),
                   case when state = 'active' then nextval('ojs_lease_id_seq') end
              from resolved
             where not exists (select 1 from refused) and not exists (select 1 from overflow)
            returning j as job, j.state
        ),
        leases as (
            insert into ojs_lease (id, worker_id, queue, pool, jobs, open, due_at)
            select (i.job).lease_id, (i.job).worker_id, (i.job).queue, (i.job).pool, 1, 1,
                   least((i.job).visible_until, (i.job).timeout_at, (i.job).total_deadline_at)
              from inserted i
             where i.state = 'active'
        ),
        lease_jobs as (
            insert into ojs_lease_jobs (lease_id, job_ids)
            select (i.job).lease_id, array[(i.job).id] from inserted i where i.state = 'active'
        ),
        new_queues as (
            insert into ojs_queue (name) values ($3::text)
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
            insert into ojs_event (type, queue, job_type, from_state, to_state, worker_id,
                                   job_ids, trace_ids, priorities, unique_keys, scheduled_ats,
                                   attempts)
            select x.type, x.queue, x.job_type, x.from_state, x.to_state, x.worker_id, x.job_ids,
                   x.trace_ids, x.priorities, x.unique_keys, x.scheduled_ats, x.attempts
              from (select case when i.state = 'scheduled' then 'job.scheduled' else 'job.enqueued' end as type,
                           (i.job).queue, (i.job).type as job_type, null::ojs_job_state as from_state,
                           case when i.state = 'active' then 'available' else i.state end as to_state,
                           null::text as worker_id, array[(i.job).id] as job_ids,
                           array[coalesce(nullif((i.job).meta ->> 'trace_id', ''), nullif(split_part((i.job).meta ->> 'traceparent', '-', 2), ''))] as trace_ids,
                           array[case when i.state <> 'scheduled' then (i.job).priority end] as priorities,
                           array[case when i.state <> 'scheduled' then (i.job).unique_key end] as unique_keys,
                           array[(i.job).scheduled_at] as scheduled_ats,
                           null::int4[] as attempts, 0 as phase
                      from inserted i
                     where i.state <> 'pending' and (select count(*) from queue_events) >= 0
                    union all
                    select 'job.started', (i.job).queue, (i.job).type, 'available', 'active',
                           (i.job).worker_id, array[(i.job).id],
                           array[coalesce(nullif((i.job).meta ->> 'trace_id', ''), nullif(split_part((i.job).meta ->> 'traceparent', '-', 2), ''))],
                           null, null, null, array[(i.job).attempt], 1
                      from inserted i
                     where i.state = 'active') x
             order by x.phase
        )
        select i.job as "job!: Job", (select count(*) from queue_events) as "queues_created!"
          from inserted i
        "#,
        job.id as JobId,
        job.r#type,
        job.queue,
        job.args,
        job.meta,
        job.priority,
        job.retry.max_attempts,
        row.retry,
        job.timeout_ms,
        job.visibility_timeout_ms,
        row.scheduled_abs,
        row.scheduled_rel_ms,
        row.scheduled_text,
        row.expires_abs,
        row.expires_rel_ms,
        row.expires_text,
        job.enqueue_ttl_secs,
        job.total_timeout_secs,
        row.tags,
        job.schema_uri,
        row.unique_policy,
        row.unique_key,
        job.extra,
        job.pending,
        job.priority_aging_ms,
        strict_queues,
        job.config_generation,
        hand_to.is_some(),
        hand_to.and_then(|h| h.worker_id),
        hand_to.and_then(|h| h.visibility_timeout_ms),
        hand_to.and_then(|h| h.pool),
        default_visibility_timeout_ms,
        job.id_supplied,
        row.rate_key,
    )
    .fetch_optional(db)
    .await?;
    // Refusals abort the statement, so a statement that ran inserted its job.
    let row = inserted.ok_or(sqlx::Error::RowNotFound)?;
    Ok((row.job, row.queues_created))
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
        select distinct on (j.unique_key, j.state) row(j.*)::ojs_job as "job!: Job", now() as "now!"
          from ojs_job_all j
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
        job.retry.to_stored(),
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
