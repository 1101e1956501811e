//! FETCH: due jobs made available, and the claim.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use sqlx::types::Json;

use crate::job::dispatch::DispatchPlace;
use crate::job::{Job, RawJson};

/// Waits until no other transaction holds a due `scheduled` or `retryable` job of `queues`
/// locked, and returns how many such jobs are left unpromoted. [`promote_due`] skips the rows
/// another promotion has locked; a FETCH that claims right after it would miss those jobs,
/// available a moment later, so it waits here for that promotion to commit before claiming
/// again. Promotions never wait on this statement (they skip locked rows).
pub async fn await_due_locks(db: impl PgExecutor<'_>, queues: &[&str]) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        select count(*) as "due!"
          from (select 1
                  from ojs_job
                 where queue = any($1::text[])
                   and ((phase = 'scheduled' and scheduled_at <= now())
                        or (phase = 'retryable' and next_retry_at <= now()))
                 limit 1000
                   for share) due
        "#,
        queues as &[&str],
    )
    .fetch_one(db)
    .await
}

/// Moves due `scheduled` and `retryable` jobs to `available` (at most `limit` of each, earliest
/// due first): those of `queues`, or of every queue when `queues` is `None`. FETCH calls it for
/// its own queues so that a fetch issued after the due time never misses a job, whether or not
/// the promoter has run; the promoter calls it for all queues. `enqueued_at` becomes the due
/// time, which keeps FIFO order fair however late promotion runs. Queues that gained jobs are
/// notified, with how many jobs each gained. `now` overrides the database clock (tests).
#[tracing::instrument(level = "debug", skip_all, fields(limit = limit))]
pub async fn promote_due(
    db: impl PgExecutor<'_>,
    queues: Option<&[&str]>,
    now: Option<DateTime<Utc>>,
    limit: i64,
) -> Result<Promoted, sqlx::Error> {
    let row = sqlx::query!(
        r#"
        with due_scheduled as (
            select id, scheduled_at as due, state as prev
              from ojs_job
             where phase = 'scheduled'
               and scheduled_at <= coalesce($3::timestamptz, now())
               and ($1::text[] is null or queue = any($1::text[]))
             order by scheduled_at
             limit $2
               for update skip locked
        ),
        due_retry as (
            select id, next_retry_at as due, state as prev
              from ojs_job
             where phase = 'retryable'
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
        select coalesce(sum(s.jobs), 0)::int8 as "promoted!",
               -- Of any queue, as of before this statement (so at most "now" when it promoted).
               (extract(epoch from least(
                    (select min(scheduled_at) from ojs_job where phase = 'scheduled'),
                    (select min(next_retry_at) from ojs_job where phase = 'retryable'))
                  - coalesce($3::timestamptz, now())) * 1000)::int8 as next_due_ms
          from (select (p.j).queue as queue, count(*) as jobs,
                       pg_notify('ojs_job_available', format('%s - - - %s', (p.j).queue, count(*)))
                  from promoted p group by (p.j).queue) s
        "#,
        queues as Option<&[&str]>,
        limit,
        now,
    )
    .fetch_one(db)
    .await?;
    Ok(Promoted {
        jobs: row.promoted,
        next_due_ms: row.next_due_ms,
    })
}

/// What [`promote_due`] did, and what it saw waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Promoted {
    /// Jobs made available.
    pub jobs: i64,
    /// Milliseconds until the earliest scheduled or retryable job of any queue was due, as of
    /// before the promotion (zero or less: some were due); `None` when none was waiting.
    pub next_due_ms: Option<i64>,
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
    /// Where the walk of the dispatch index starts (see [`crate::wakeup::floors`]).
    pub from: DispatchPlace,
    /// Only this tenant's jobs (`X-OJS-Tenant`): see [`claim_tenant`].
    pub tenant: Option<&'a str>,
}

/// The claim statement of [`claim_shared`], [`claim`] and [`claim_fair`]: the plain and the
/// tenant-fair claim differ only in the end of the candidate filter and the order (each must
/// match its own partial index). sqlx joins the `+`-separated literals into one checked
/// statement per use, so each variant stays a top-level statement whose plan sees its `LIMIT`.
macro_rules! claim_statement {
    // The plain dispatch order.
    (plain: $db:expr, $queue:expr, $shares:expr, $default_visibility:expr, $started_at:expr, $from:expr) => {
        claim_statement!(
            $db,
            $queue,
            $shares,
            $default_visibility,
            $started_at,
            $from,
            r#"             -- A queue's dispatch limits (concurrency, rate_limit) are applied by the caller,
             -- which claims only as many jobs as they allow: priority orders what they allow.
             -- The dispatch order of ojs_job_dispatch_idx (migration V4), written exactly as
             -- indexed: priority, then the time the job became available (with priority
             -- aging: that time plus priority * interval), then seq.
             order by (case when priority_aging_ms is null then priority else 0 end),
                      (date_part('epoch', enqueued_at - timestamptz '1970-01-01 00:00:00+00') * 1000
                       + coalesce(priority * priority_aging_ms, 0)),
                      seq
"#
        )
    };
    ($db:expr, $queue:expr, $shares:expr, $default_visibility:expr, $started_at:expr, $from:expr, $candidates:tt $(, $extra:expr)*) => {{
        let shares: &[ClaimShare<'_>] = $shares;
        let from: DispatchPlace = $from;
        let limits: Vec<i32> = shares.iter().map(|s| s.limit).collect();
        let workers: Vec<Option<&str>> = shares.iter().map(|s| s.worker_id).collect();
        let visibility: Vec<Option<i64>> =
            shares.iter().map(|s| s.visibility_timeout_ms).collect();
        let pools: Vec<Option<&str>> = shares.iter().map(|s| s.pool).collect();
        let rows = sqlx::query!(
            r#"
        with share as materialized (
            -- Each FETCH's lease (migration V29): a volatile call, so this is evaluated once.
            select s.*, nextval('ojs_lease_id_seq') as lease_id
              from unnest($2::int4[], $3::text[], $4::int8[], $5::text[]) with ordinality
                as s(wanted, worker_id, visibility_timeout_ms, pool, share)
             -- A worker told to stop (or stopping by itself) gets nothing.
             where not exists (select 1 from ojs_worker w
                                where w.id = s.worker_id and (w.directive <> '' or w.state <> 'running'))
        ),
        -- The FETCHes served, as arrays in share order with the first slot of each: the n-th
        -- job claimed goes to the FETCH whose slots hold n (`width_bucket`, a binary search),
        -- with no row per slot to number and join.
        shares as (
            select coalesce(sum(s.wanted), 0) as total,
                   array_agg(s.first order by s.share) as firsts,
                   array_agg(s.share order by s.share) as share_nos,
                   array_agg(s.worker_id order by s.share) as workers,
                   array_agg(s.visibility_timeout_ms order by s.share) as visibility,
                   array_agg(s.pool order by s.share) as pools,
                   array_agg(s.lease_id order by s.share) as leases
              from (select s.*,
                           1 + coalesce(sum(s.wanted) over (order by s.share rows between
                                                            unbounded preceding and 1 preceding), 0)
                               as first
                      from share s) s
        ),
        candidate as (
            -- The row's place, not its id: the update below goes straight to it (a TID scan),
            -- with no second walk of the primary key. The row is locked, so it stays there.
            select ctid as rid
              from ojs_job
             where queue = $1
               and phase = 'available'
               -- Not held for its rate-limit key (migration V20): the dispatch indexes hold
               -- only such jobs.
               and rate_held is null
               and (expires_at is null or expires_at > now())
               and (claim_deadline_at is null or claim_deadline_at > now())
               and (total_deadline_at is null or total_deadline_at > now())
               -- A paused queue is skipped (it still accepts jobs).
               and not exists (select 1 from ojs_queue q where q.name = $1 and q.state = 'paused')
               -- The walk of ojs_job_dispatch_idx starts at the queue's claim floor
               -- (crate::wakeup::floors), past the entries that claimed jobs leave in the index
               -- until VACUUM removes them.
               and ((case when priority_aging_ms is null then priority else 0 end),
                    (date_part('epoch', enqueued_at - timestamptz '1970-01-01 00:00:00+00') * 1000
                     + coalesce(priority * priority_aging_ms, 0))) >= ($8::int4, $9::float8)
"#
                + $candidates
                + r#"             limit (select total from shares)
               for update skip locked
        ),
        -- The candidates in order, numbered, with the FETCH each goes to. Read through an
        -- array, whose length a plan made without the parameters estimates as a handful: the
        -- update below then takes each row by its place.
        numbered as (
            select u.rid, u.slot, width_bucket(u.slot, x.firsts) as k
              from unnest(array(select rid from candidate)) with ordinality as u(rid, slot),
                   shares x
        ),
        moved as (
            update ojs_job j
               set state = 'active',
                   attempt = j.attempt + 1,
                   started_at = coalesce($7, now()),
                   worker_id = x.workers[c.k],
                   reservation_ms = coalesce(x.visibility[c.k], j.visibility_timeout_ms, $6),
                   visible_until = coalesce($7, now()) + coalesce(x.visibility[c.k], j.visibility_timeout_ms, $6) * interval '1 millisecond',
                   timeout_at = coalesce($7, now()) + j.timeout_ms * interval '1 millisecond',
                   claim_deadline_at = null,
                   pool = x.pools[c.k],
                   lease_id = x.leases[c.k]
              from numbered c, shares x
             where j.ctid = c.rid
            -- Plain columns beside the row for the event below: reading fields out of a row
            -- value walks its columns each time (the row is then only sent to the client).
            returning j, x.share_nos[c.k] as share, c.slot, j.id, j.seq, j.queue, j.type,
                      j.attempt, j.worker_id, j.rate_key, j.pool, j.lease_id, j.durable,
                      least(j.visible_until, j.timeout_at, j.total_deadline_at) as due_at,
                      coalesce(nullif(j.meta ->> 'trace_id', ''), nullif(split_part(j.meta ->> 'traceparent', '-', 2), '')) as trace_id
        ),
        -- One lease per FETCH served (migration V29): what the reaper, the worker's jobs and
        -- the counts of active jobs read, instead of an index entry per job.
        leases as (
            insert into ojs_lease (id, worker_id, queue, pool, jobs, open, due_at)
            select m.lease_id, min(m.worker_id), $1, min(m.pool), count(*), count(*), min(m.due_at)
              from moved m
             group by m.lease_id
        ),
        lease_jobs as (
            insert into ojs_lease_jobs (lease_id, job_ids)
            select m.lease_id, array_agg(m.id) from moved m group by m.lease_id
        ),
        -- One event row per worker and job type (migration V10): the server renders each
        -- job's `job.started` from it. A row holds at most 16,384 jobs: the blocks of the
        -- claim's slots are that long, so no window is needed to cut a group into rows.
        events as (
            insert into ojs_event (type, queue, job_type, from_state, to_state, worker_id,
                                   job_ids, trace_ids, attempts)
            select 'job.started', e.queue, e.type, 'available', 'active', e.worker_id,
                   array_agg(e.id), array_agg(e.trace_id), array_agg(e.attempt)
              -- The arrays list the jobs in seq order because the rows come sorted: one sort
              -- here instead of one per array (an ordered aggregate sorts its own input).
              from (select m.id, m.seq, m.queue, m.type, m.attempt, m.worker_id, m.trace_id,
                           (m.slot - 1) / 16384 as block
                      from moved m
                     order by queue, type, worker_id, block, seq) e
             group by e.queue, e.type, e.worker_id, e.block
             order by min(e.seq)
        ),
        -- Starts of keyed jobs (migration V20): their keys' rate windows and throttles count
        -- them (under key:<key>, apart from the queue limits' queue:<name>). The jobs were
        -- released by their keys, which counted them as started already.
        keyed_starts as (
            insert into ojs_rate_window (key, started_at, jobs)
            select 'key:' || m.rate_key, coalesce($7, now()), count(*)
              from moved m
             where m.rate_key is not null
             group by m.rate_key
        )
        -- What each job kept of its earlier attempts (durable execution): its latest
        -- checkpoint (migration V31), its recorded steps, its latest wait and the signals
        -- delivered to it (V33). Looked up only for the jobs flagged `durable` (V33), so jobs
        -- that use none of it pay nothing for it, whatever other jobs keep.
        select m.j as "job!: Job", m.share as "share!",
               case when m.durable then
                   (select jsonb_build_object('state', c.state, 'sequence', c.sequence)
                      from ojs_job_checkpoint c
                     where c.job_id = m.id)
               end as "checkpoint?: RawJson",
               case when m.durable then
                   nullif(ojs_job_resume(m.id, false), '{}')
               end as "resume?: RawJson"
          from moved m
        "#,
            $queue,
            &limits,
            &workers as &[Option<&str>],
            &visibility as &[Option<i64>],
            &pools as &[Option<&str>],
            $default_visibility,
            $started_at,
            from.priority,
            from.time_ms,
            $($extra,)*
        )
        .fetch_all($db)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| {
                (
                    usize::try_from(r.share - 1).unwrap_or(usize::MAX),
                    resumed(r.job, r.checkpoint.as_ref(), r.resume.as_ref()),
                )
            })
            .collect::<Vec<(usize, Job)>>())
    }};
}

/// A claimed job with what it kept of its earlier attempts among the attributes FETCH writes
/// for it (`extra`, which [`crate::job::wire`] writes after the job's own): its latest
/// `checkpoint` (`{"state", "sequence"}`, OJS durable execution), and its recorded `steps`,
/// latest `wait` and delivered `signals` (`ojs_job_resume`, migration V33). The attempt resumes
/// from them. Only this copy changes; client attributes of those names stay as stored.
pub(crate) fn resumed(mut job: Job, checkpoint: Option<&RawJson>, resume: Option<&RawJson>) -> Job {
    if checkpoint.is_none() && resume.is_none() {
        return job;
    }
    let mut extra: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(job.extra.0.get()).unwrap_or_default();
    let parse = |raw: &RawJson| serde_json::from_str::<serde_json::Value>(raw.0.get()).ok();
    if let Some(checkpoint) = checkpoint.and_then(parse) {
        extra.insert("checkpoint".to_owned(), checkpoint);
    }
    if let Some(serde_json::Value::Object(resume)) = resume.and_then(parse) {
        extra.extend(resume);
    }
    if let Ok(raw) = serde_json::value::to_raw_value(&extra) {
        job.extra = Json(raw);
    }
    job
}

/// One FETCH's share of [`claim_shared`].
#[derive(Debug, Clone, Copy)]
pub struct ClaimShare<'a> {
    /// At most this many jobs for this FETCH.
    pub limit: i32,
    /// The claiming worker, recorded as the reservation owner.
    pub worker_id: Option<&'a str>,
    /// Reservation length requested by the fetch (wins over the job's own).
    pub visibility_timeout_ms: Option<i64>,
    /// The claiming worker's pool (recorded on the job).
    pub pool: Option<&'a str>,
}

/// Claims available jobs of one queue for several FETCHes at once, most urgent first
/// (priority, then FIFO), giving each FETCH up to its share's limit. Returns each job with the
/// index of its share in `shares` (the order is not significant).
///
/// One statement: the candidates are locked `for update skip locked` (concurrent claimers never
/// wait on each other and never get the same job) and updated to `active` with a new attempt,
/// owner, reservation deadline and execution deadline. Jobs past their `expires_at`,
/// `enqueue_ttl` or `total_timeout` are never handed out (the expirer discards them), a paused
/// queue gives nothing, and a share of a worker whose directive or own state is not `running`
/// gets nothing. Concurrent claimers of one queue walk past each other's locked rows at the head
/// of the queue; FETCHes that share the statement walk it once. The walk starts at `from`
/// in dispatch order ([`crate::wakeup::floors`]).
#[tracing::instrument(level = "debug", skip_all, fields(queue = queue, shares = shares.len()))]
pub async fn claim_shared(
    db: impl PgExecutor<'_>,
    queue: &str,
    shares: &[ClaimShare<'_>],
    default_visibility_timeout_ms: i64,
    from: DispatchPlace,
) -> Result<Vec<(usize, Job)>, sqlx::Error> {
    claim_statement!(plain: db, queue, shares, default_visibility_timeout_ms, None::<DateTime<Utc>>, from)
}

/// The one share of `p`.
fn one_share<'a>(p: &ClaimParams<'a>) -> [ClaimShare<'a>; 1] {
    [ClaimShare {
        limit: i32::try_from(p.limit).unwrap_or(i32::MAX),
        worker_id: p.worker_id,
        visibility_timeout_ms: p.visibility_timeout_ms,
        pool: p.pool,
    }]
}

/// [`claim_shared`] for one FETCH, at `p.started_at` when given (rate-limited claims).
#[tracing::instrument(level = "debug", skip_all, fields(queue = p.queue, limit = p.limit))]
pub async fn claim(db: impl PgExecutor<'_>, p: ClaimParams<'_>) -> Result<Vec<Job>, sqlx::Error> {
    let claimed: Result<Vec<(usize, Job)>, sqlx::Error> = claim_statement!(plain:
        db,
        p.queue,
        &one_share(&p),
        p.default_visibility_timeout_ms,
        p.started_at,
        p.from
    );
    Ok(claimed?.into_iter().map(|(_, job)| job).collect())
}

/// [`claim`] from a tenant-fair queue: within each priority level, jobs are taken by their
/// virtual finish time (`fair_key`, migration V8), which interleaves tenants in proportion to
/// their weights. Untagged jobs (none, unless tagging was switched on mid-flight) are left to
/// [`claim`].
#[tracing::instrument(level = "debug", skip_all, fields(queue = p.queue, limit = p.limit))]
pub async fn claim_fair(
    db: impl PgExecutor<'_>,
    p: ClaimParams<'_>,
) -> Result<Vec<Job>, sqlx::Error> {
    let claimed: Result<Vec<(usize, Job)>, sqlx::Error> = claim_statement!(
        db,
        p.queue,
        &one_share(&p),
        p.default_visibility_timeout_ms,
        p.started_at,
        DispatchPlace::START,
        r#"               and fair_key is not null
             -- The order of ojs_job_fair_idx (migration V8): priority, then the tenant-fair
             -- virtual finish time, then seq.
             order by priority, fair_key, seq
"#
    );
    Ok(claimed?.into_iter().map(|(_, job)| job).collect())
}

/// [`claim`] of one tenant's jobs (`p.tenant`; a FETCH with `X-OJS-Tenant`, or by a key bound
/// to a tenant), in the plain dispatch order, whether or not the queue is tenant-fair (the
/// fair order only interleaves tenants). Found through `ojs_job_tenant_idx` (migration V24);
/// the walk starts at the head of the queue, never at a claim floor, which belongs to the
/// whole queue's order.
#[tracing::instrument(level = "debug", skip_all, fields(queue = p.queue, limit = p.limit))]
pub async fn claim_tenant(
    db: impl PgExecutor<'_>,
    p: ClaimParams<'_>,
) -> Result<Vec<Job>, sqlx::Error> {
    let tenant = p.tenant.unwrap_or_default();
    let claimed: Result<Vec<(usize, Job)>, sqlx::Error> = claim_statement!(
        db,
        p.queue,
        &one_share(&p),
        p.default_visibility_timeout_ms,
        p.started_at,
        DispatchPlace::START,
        r#"               and tenant = $10
             order by (case when priority_aging_ms is null then priority else 0 end),
                      (date_part('epoch', enqueued_at - timestamptz '1970-01-01 00:00:00+00') * 1000
                       + coalesce(priority * priority_aging_ms, 0)),
                      seq
"#,
        tenant
    );
    Ok(claimed?.into_iter().map(|(_, job)| job).collect())
}
