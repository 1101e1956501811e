//! Moves of claimed and waiting jobs: ACK, NACK and reclaims, CANCEL, ACTIVATE, priority
//! changes.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

use crate::job::lifecycle::FailTarget;
use crate::job::{Job, JobId, JobPhase, JobState, RawJson};

/// One ACK for [`complete_many`].
#[derive(Debug, Clone, Copy)]
pub struct CompleteParams<'a> {
    pub id: JobId,
    /// Reservation owner check (`None`: no check).
    pub worker_id: Option<&'a str>,
    /// The handler's result (compact JSON), if any.
    pub result: Option<&'a str>,
}

/// The queues whose completed jobs are deleted on ACK instead of kept (a `retention.completed`
/// of zero): `queues`, or, when `all`, every queue but `except`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteOnAck {
    pub all: bool,
    pub queues: Vec<String>,
    pub except: Vec<String>,
}

impl DeleteOnAck {
    /// Deletes nothing: every completed job is kept.
    pub fn nothing() -> DeleteOnAck {
        DeleteOnAck::default()
    }

    /// Whether every queue keeps its completed jobs.
    pub fn keeps_all(&self) -> bool {
        !self.all && self.queues.is_empty()
    }
}

/// The ACK statement of [`complete_many`] and [`complete_many_brief`]: they differ only in
/// whether the statement can forget jobs (`forgetting:`, or `keeping:` when every queue keeps
/// its completed jobs) and in what they answer (sqlx joins the `+`-separated literals into one
/// checked statement per use).
macro_rules! complete_statement {
    (forgetting: $query:ident, $db:expr, $acks:expr, $delete_on_ack:expr, $answer:tt $(, $as:path)?) => {
        complete_statement!(
            $query,
            $db,
            $acks,
            $delete_on_ack,
            r#"        -- Queues that keep no completed job (`retention.completed` of zero) lose it here: a
        -- delete writes no new row version and no index entry, and leaves the pruner nothing.
        forgotten as (
            delete from ojs_job j
             using input i
             where j.id = i.id
               and j.state::text = 'active'
               and (i.worker_id is null or j.worker_id is null or j.worker_id = i.worker_id)
               and ($4 or cardinality($5::text[]) > 0)
               and (case when $4 then j.queue <> all($6::text[]) else j.queue = any($5::text[]) end)
            -- A workflow's job is kept all the same: its insert into ojs_job_done advances
            -- its workflow (migration V18), and the next steps need its result.
            returning j.*, i.result as ack_result, (j.extra -> 'workflow_id') is not null as keep, i.n
        ),
        -- Plain columns, not whole rows: reading fields out of a row value costs more per job
        -- than the rest of the event below.
        finished as (
            select *, case when extra ->> 'result_ttl' = '0' and extra -> 'workflow_id' is null then null
                        else ack_result end as stored_result
              from (select * from gone union all select * from forgotten) f
        ),
"#,
            $answer
            $(, $as)?
        )
    };
    (keeping: $query:ident, $db:expr, $acks:expr, $delete_on_ack:expr, $answer:tt $(, $as:path)?) => {
        complete_statement!(
            $query,
            $db,
            $acks,
            $delete_on_ack,
            r#"        -- Every queue keeps its completed jobs: no second delete to set up (an ACK group of a
        -- few jobs spends more on setting up its plan than on its rows).
        -- A job whose `result_ttl` is 0 keeps no result (the OJS results extension), unless a
        -- workflow's next steps need it.
        finished as (
            select *, case when extra ->> 'result_ttl' = '0' and extra -> 'workflow_id' is null then null
                        else ack_result end as stored_result
              from gone
        ),
"#,
            $answer
            $(, $as)?
        )
    };
    ($query:ident, $db:expr, $acks:expr, $delete_on_ack:expr, $finished:tt, $answer:tt $(, $as:path)?) => {{
        let acks: &[CompleteParams<'_>] = $acks;
        let delete_on_ack: &DeleteOnAck = $delete_on_ack;
        let ids: Vec<Uuid> = acks.iter().map(|a| a.id.0).collect();
        let workers: Vec<Option<&str>> = acks.iter().map(|a| a.worker_id).collect();
        let results: Vec<Option<&str>> = acks.iter().map(|a| a.result).collect();
        sqlx::$query!(
            $($as,)?
            r#"
        with input as (
            select * from unnest($1::uuid[], $2::text[], $3::text[]) with ordinality
                as t(id, worker_id, result, n)
        ),
        -- The job leaves ojs_job, and a queue that keeps completed jobs keeps it in
        -- ojs_job_done (migration V15): a delete writes no new row version in ojs_job and no
        -- entry in its indexes.
        gone as (
            delete from ojs_job j
             using input i
             -- Each job is found through the primary key, by a join on the id (`id = any(..)`
             -- would be estimated as a handful of rows and joined to the input row by row).
             -- `state::text`, not `state`: a condition on the state would let the generic plan
             -- read through a partial index on the state instead (one of active jobs existed
             -- until migration V29), and with it every entry that finished jobs leave there
             -- until VACUUM removes them (never, while the MVCC horizon is pinned).
             where j.id = i.id
               and j.state::text = 'active'
               and (i.worker_id is null or j.worker_id is null or j.worker_id = i.worker_id)
               -- Parameters only: a one-time filter, so a statement with no queue to keep
               -- (below, no queue to forget) reads nothing for this part.
               and (not $4 or cardinality($6::text[]) > 0)
               and not (case when $4 then j.queue <> all($6::text[]) else j.queue = any($5::text[]) end)
            returning j.*, i.result as ack_result, true as keep, i.n
        ),
"#
                + $finished
                + r#"        -- The jobs are counted off their leases (migration V29). A lease goes here when
        -- none of its jobs is left open: all of them end in this statement (a batch ACK of a
        -- whole FETCH), or these are the last ones (one ACK per job); otherwise it has fewer
        -- open. `open` never runs behind the truth (nor above `jobs`), so a lease it counts
        -- down to none holds no active job. Were it ahead (a job ended by a statement that
        -- does not count it off, or two statements of one lease racing, of which the later
        -- one, after its row re-check, neither deletes nor counts down), the lease stays
        -- until its `due_at`, when the reaper recounts it, as it did every emptied lease
        -- before (a primary-key probe per job).
        leased as (
            select lease_id, count(*)::int4 as n from finished where lease_id is not null group by lease_id
        ),
        lease_closed as (
            delete from ojs_lease l using leased c
             where l.id = c.lease_id and l.open <= c.n
        ),
        lease_left as (
            update ojs_lease l
               set open = l.open - c.n
              from leased c
             where l.id = c.lease_id and l.open > c.n
        ),
        moved as (
            insert into ojs_job_done as d (
                   id, seq, type, queue, args, meta, priority, state, attempt, max_attempts,
                   retry, timeout_ms, visibility_timeout_ms, scheduled_at, scheduled_at_input,
                   expires_at, expires_at_input, enqueue_ttl_secs, total_timeout_secs, tags,
                   schema_uri, unique_policy, unique_key, extra, created_at, enqueued_at,
                   activated_at, started_at, visible_until, reservation_ms, worker_id,
                   next_retry_at, retry_delay_ms, completed_at, cancelled_at, discarded_at,
                   dead_lettered_at, result, error, errors, timeout_at, claim_deadline_at,
                   total_deadline_at, re_enqueued_at, priority_aging_ms, original_queue,
                   capacity_tracked, pool, tenant_fair, tenant, fair_key, rate_key, rate_held)
            select id, seq, type, queue, args, meta, priority, 'completed', attempt,
                   max_attempts, retry, timeout_ms, visibility_timeout_ms, scheduled_at,
                   scheduled_at_input, expires_at, expires_at_input, enqueue_ttl_secs,
                   total_timeout_secs, tags, schema_uri, unique_policy, unique_key, extra,
                   created_at, enqueued_at, activated_at, started_at, null, reservation_ms,
                   worker_id, next_retry_at, retry_delay_ms, now(), cancelled_at, discarded_at,
                   dead_lettered_at, stored_result::json, null, errors, null, claim_deadline_at,
                   total_deadline_at, re_enqueued_at, priority_aging_ms, original_queue,
                   capacity_tracked, pool, tenant_fair, tenant, fair_key, rate_key, null
              from finished
             where keep
        ),
        -- One event row per queue and job type (migration V10): the server renders each
        -- job's `job.completed` from it. A row holds at most 16,384 jobs: the blocks of the
        -- ACKs' places in the input are that long, so no window is needed to cut a group.
        events as (
            insert into ojs_event (type, queue, job_type, from_state, to_state, job_ids,
                                   trace_ids, attempts, durations_ms, results)
            select 'job.completed', e.queue, e.type, 'active', 'completed',
                   array_agg(e.id), array_agg(e.trace_id), array_agg(e.attempt),
                   array_agg(e.duration_ms), array_agg(e.result)
              -- The arrays list the jobs in seq order because the rows come sorted: one sort
              -- here instead of one per array (an ordered aggregate sorts its own input).
              from (select f.id, f.seq, f.queue, f.type, f.attempt,
                           coalesce(nullif(f.meta ->> 'trace_id', ''), nullif(split_part(f.meta ->> 'traceparent', '-', 2), '')) as trace_id,
                           round(extract(epoch from now() - f.started_at) * 1000)::int8
                               as duration_ms,
                           case when octet_length(f.stored_result) <= 65536 then f.stored_result::json end
                               as result,
                           (f.n - 1) / 16384 as block
                      from finished f
                     order by queue, type, block, seq) e
             group by e.queue, e.type, e.block
             order by min(e.seq)
        )
"#
                + $answer,
            &ids,
            &workers as &[Option<&str>],
            &results as &[Option<&str>],
            delete_on_ack.all,
            &delete_on_ack.queues,
            &delete_on_ack.except,
        )
        .fetch_all($db)
        .await
    }};
}

/// [`complete_statement!`] answering each job as the ACK left it (kept in `ojs_job_done` or
/// not): the values `moved` inserts.
///
/// Column by column, by name, not as a row cast to `ojs_job`: a cast names every column of the
/// table, so it fails the moment a later release's migration adds one, while this release still
/// serves beside it (a rolling upgrade; `tests/integration/upgrade.rs`).
macro_rules! complete_jobs {
    ($finished:ident, $db:expr, $acks:expr, $delete_on_ack:expr) => {
        complete_statement!($finished:
            query_as,
            $db,
            $acks,
            $delete_on_ack,
            r#"        -- Each job as the ACK left it (kept in ojs_job_done or not): the values `moved` inserts.
        select id as "id!: JobId", seq as "seq!", type as "type!", queue as "queue!",
               args as "args!: RawJson", meta as "meta!: RawJson", priority as "priority!",
               'completed'::ojs_job_state as "state!: JobState", attempt as "attempt!",
               max_attempts as "max_attempts!", retry as "retry!: RawJson",
               timeout_ms as "timeout_ms!", visibility_timeout_ms, scheduled_at,
               scheduled_at_input, expires_at, expires_at_input, enqueue_ttl_secs,
               total_timeout_secs, tags, schema_uri, unique_policy as "unique_policy: RawJson",
               unique_key, extra as "extra!: RawJson", created_at as "created_at!",
               enqueued_at, activated_at, started_at, null::timestamptz as visible_until,
               reservation_ms, worker_id, next_retry_at, retry_delay_ms,
               now() as "completed_at?", cancelled_at, discarded_at, dead_lettered_at,
               stored_result::json as "result: RawJson", null::json as "error: RawJson",
               errors as "errors!: RawJson", null::timestamptz as timeout_at, claim_deadline_at,
               total_deadline_at, re_enqueued_at, priority_aging_ms, original_queue,
               capacity_tracked, pool, tenant_fair, tenant, fair_key, rate_key, rate_held,
               null::int8 as lease_id, 'taken'::ojs_job_phase as "phase!: JobPhase",
               case when rate_key is not null or tenant <> '' then false end as in_flight,
               result_awaited, durable
          from finished
        "#,
            Job
        )
    };
}

/// [`complete_statement!`] answering [`Completed`] of each job.
macro_rules! complete_brief {
    ($finished:ident, $db:expr, $acks:expr, $delete_on_ack:expr) => {
        complete_statement!($finished:
            query_as,
            $db,
            $acks,
            $delete_on_ack,
            r#"        select id as "id!: JobId", queue as "queue!", type as "type!", started_at,
               now() as "completed_at!", attempt as "attempt!", meta ->> 'traceparent' as traceparent
          from finished
"#,
            Completed
        )
    };
}

/// ACK: `active` → `completed` for each of `acks`, storing `result` and removing `error`; jobs
/// of the queues in `delete_on_ack` are deleted instead (their `job.completed` events are written all
/// the same).
///
/// Fenced on the reservation: a `worker_id` other than the owner's matches nothing. Returns the
/// jobs that completed (in no particular order), each as it is after the ACK, deleted or not; a
/// job missing from the answer was not an active job of that worker. Each id must appear at
/// most once.
#[tracing::instrument(level = "debug", skip_all, fields(jobs = acks.len()))]
pub async fn complete_many(
    db: impl PgExecutor<'_>,
    acks: &[CompleteParams<'_>],
    delete_on_ack: &DeleteOnAck,
) -> Result<Vec<Job>, sqlx::Error> {
    if delete_on_ack.keeps_all() {
        return complete_jobs!(keeping, db, acks, delete_on_ack);
    }
    complete_jobs!(forgetting, db, acks, delete_on_ack)
}

/// What [`complete_many_brief`] answers of a completed job: what a batch ACK reports and the
/// metrics count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completed {
    pub id: JobId,
    pub queue: String,
    pub r#type: String,
    pub started_at: Option<DateTime<Utc>>,
    pub completed_at: DateTime<Utc>,
    /// The attempt that completed.
    pub attempt: i32,
    /// `meta.traceparent`, for the ACK's span.
    pub traceparent: Option<String>,
}

/// [`complete_many`] answering only [`Completed`] of each job: the same change and events,
/// without building and sending each whole job (an ACK, single or batch, reports only the
/// job's id, state and completion time unless the worker asks for the job).
#[tracing::instrument(level = "debug", skip_all, fields(jobs = acks.len()))]
pub async fn complete_many_brief(
    db: impl PgExecutor<'_>,
    acks: &[CompleteParams<'_>],
    delete_on_ack: &DeleteOnAck,
) -> Result<Vec<Completed>, sqlx::Error> {
    if delete_on_ack.keeps_all() {
        if let [ack] = acks {
            return complete_one(db, ack)
                .await
                .map(|done| done.into_iter().collect());
        }
        return complete_brief!(keeping, db, acks, delete_on_ack);
    }
    complete_brief!(forgetting, db, acks, delete_on_ack)
}

/// [`complete_many_brief`] for one job of a queue that keeps its completed jobs: the same
/// change, event and answer, in a statement a tenth the size. A single ACK is what every SDK
/// sends, and at that size the cost of a statement is mostly setting up its plan (executor
/// start, the row checks, the index predicates), which grows with the plan, not with the rows.
async fn complete_one(
    db: impl PgExecutor<'_>,
    ack: &CompleteParams<'_>,
) -> Result<Option<Completed>, sqlx::Error> {
    sqlx::query_as!(
        Completed,
        r#"
        with gone as (
            delete from ojs_job j
             -- `state::text`: see complete_many.
             where j.id = $1 and j.state::text = 'active'
               and ($2::text is null or j.worker_id is null or j.worker_id = $2)
            returning j.*
        ),
        -- Counted off its lease, as in complete_many.
        lease_closed as (
            delete from ojs_lease l using gone g
             where l.id = g.lease_id and l.open <= 1
        ),
        lease_left as (
            update ojs_lease l
               set open = l.open - 1
              from gone g
             where l.id = g.lease_id and l.open > 1
        ),
        moved as (
            insert into ojs_job_done as d (
                   id, seq, type, queue, args, meta, priority, state, attempt, max_attempts,
                   retry, timeout_ms, visibility_timeout_ms, scheduled_at, scheduled_at_input,
                   expires_at, expires_at_input, enqueue_ttl_secs, total_timeout_secs, tags,
                   schema_uri, unique_policy, unique_key, extra, created_at, enqueued_at,
                   activated_at, started_at, visible_until, reservation_ms, worker_id,
                   next_retry_at, retry_delay_ms, completed_at, cancelled_at, discarded_at,
                   dead_lettered_at, result, error, errors, timeout_at, claim_deadline_at,
                   total_deadline_at, re_enqueued_at, priority_aging_ms, original_queue,
                   capacity_tracked, pool, tenant_fair, tenant, fair_key, rate_key, rate_held)
            select id, seq, type, queue, args, meta, priority, 'completed', attempt,
                   max_attempts, retry, timeout_ms, visibility_timeout_ms, scheduled_at,
                   scheduled_at_input, expires_at, expires_at_input, enqueue_ttl_secs,
                   total_timeout_secs, tags, schema_uri, unique_policy, unique_key, extra,
                   created_at, enqueued_at, activated_at, started_at, null, reservation_ms,
                   worker_id, next_retry_at, retry_delay_ms, now(), cancelled_at, discarded_at,
                   dead_lettered_at, case when extra ->> 'result_ttl' = '0' and extra -> 'workflow_id' is null then null
                        else $3::text::json end,
                   null, errors, null, claim_deadline_at,
                   total_deadline_at, re_enqueued_at, priority_aging_ms, original_queue,
                   capacity_tracked, pool, tenant_fair, tenant, fair_key, rate_key, null
              from gone
            returning d.id, d.queue, d.type, d.started_at, d.completed_at, d.attempt, d.meta,
                      d.result is not null as result_kept
        ),
        events as (
            insert into ojs_event (type, queue, job_type, from_state, to_state, job_ids,
                                   trace_ids, attempts, durations_ms, results)
            select 'job.completed', m.queue, m.type, 'active', 'completed',
                   array[m.id],
                   array[coalesce(nullif(m.meta ->> 'trace_id', ''), nullif(split_part(m.meta ->> 'traceparent', '-', 2), ''))],
                   array[m.attempt],
                   array[round(extract(epoch from now() - m.started_at) * 1000)::int8],
                   array[case when m.result_kept and octet_length($3::text) <= 65536
                              then $3::text::json end]
              from moved m
        )
        select m.id as "id!: JobId", m.queue as "queue!", m.type as "type!", m.started_at,
               m.completed_at as "completed_at!", m.attempt as "attempt!",
               m.meta ->> 'traceparent' as traceparent
          from moved m
        "#,
        ack.id as JobId,
        ack.worker_id,
        ack.result,
    )
    .fetch_optional(db)
    .await
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
#[tracing::instrument(level = "debug", skip_all, fields(jobs = failures.len()))]
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
             -- Through the primary key, as in complete_many.
             where j.id = i.id
               and j.state::text = 'active'
               and j.attempt = i.attempt
               and (i.worker_id is null or j.worker_id is null or j.worker_id = i.worker_id)
            returning j
        ),
        -- Counted off their leases, as in complete_many.
        leased as (
            select (f.j).lease_id, count(*)::int4 as n
              from failed f where (f.j).lease_id is not null group by (f.j).lease_id
        ),
        lease_closed as (
            delete from ojs_lease l using leased c
             where l.id = c.lease_id and l.open <= c.n
        ),
        lease_left as (
            update ojs_lease l
               set open = l.open - c.n
              from leased c
             where l.id = c.lease_id and l.open > c.n
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
            select count(pg_notify('ojs_job_available', format('%s - - - %s', q.queue, q.jobs))) as queues
              from (select (f.j).queue as queue, count(*) as jobs from failed f
                     where (f.j).state = 'available' group by (f.j).queue) q
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

/// [`fail_many`] for active jobs the server takes from their workers (locked by the caller's
/// transaction, so the fenced update cannot miss them): each ends its current attempt with its
/// decided target and error (compact JSON), without an owner check. Returns the jobs as they
/// are now.
pub async fn release_many(
    db: impl PgExecutor<'_>,
    jobs: &[Job],
    decided: &[(FailTarget, String)],
    now: Option<DateTime<Utc>>,
) -> Result<Vec<Job>, sqlx::Error> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let failures: Vec<FailParams<'_>> = jobs
        .iter()
        .zip(decided)
        .map(|(job, (target, error))| FailParams {
            id: job.id,
            attempt: job.attempt,
            worker_id: None,
            error: Some(error),
            target: *target,
        })
        .collect();
    fail_many(db, &failures, now).await
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
        -- An active job is counted off its lease, as in complete_many.
        lease_closed as (
            delete from ojs_lease l using moved m
             where m.prev = 'active' and l.id = (m.j).lease_id and l.open <= 1
        ),
        lease_left as (
            update ojs_lease l
               set open = l.open - 1
              from moved m
             where m.prev = 'active' and l.id = (m.j).lease_id and l.open > 1
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
               -- A job a workflow holds waits for the workflow (migration V18); one it has
               -- released, held only because its client asked, is activated as any other.
               and ((j.extra -> 'workflow_id') is null
                    or not exists (select from ojs_workflow_node n
                                    where n.job_id = j.id and n.state = 'waiting'))
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

/// Gives back jobs written `active` for a FETCH that cannot answer with them (it went away, or
/// maintenance mode began while it claimed):
/// each becomes `available` again in its old place (`enqueued_at` is kept), its attempt not
/// counted, with a `job.enqueued` event from `active`. Only a job still in that attempt
/// (nobody acted on it since) is given back. Notifies the queues; returns how many.
pub async fn give_back(db: impl PgExecutor<'_>, jobs: &[Job]) -> Result<i64, sqlx::Error> {
    let ids: Vec<Uuid> = jobs.iter().map(|j| j.id.0).collect();
    let attempts: Vec<i32> = jobs.iter().map(|j| j.attempt).collect();
    sqlx::query_scalar!(
        r#"
        with moved as (
            update ojs_job j
               set state = 'available',
                   attempt = j.attempt - 1,
                   started_at = null,
                   worker_id = null,
                   reservation_ms = null,
                   visible_until = null,
                   timeout_at = null,
                   pool = null,
                   claim_deadline_at = j.created_at + j.enqueue_ttl_secs * interval '1 second'
              from unnest($1::uuid[], $2::int4[]) as i(id, attempt)
             where j.id = i.id and j.state = 'active' and j.attempt = i.attempt
            returning j
        ),
        -- Counted off their leases, as in complete_many.
        leased as (
            select (m.j).lease_id, count(*)::int4 as n
              from moved m where (m.j).lease_id is not null group by (m.j).lease_id
        ),
        lease_closed as (
            delete from ojs_lease l using leased c
             where l.id = c.lease_id and l.open <= c.n
        ),
        lease_left as (
            update ojs_lease l
               set open = l.open - c.n
              from leased c
             where l.id = c.lease_id and l.open > c.n
        ),
        events as (
            insert into ojs_event (type, subject, job_id, queue, job_type, from_state, to_state, data)
            select 'job.enqueued', (m.j).id::text, (m.j).id, (m.j).queue, (m.j).type, 'active',
                   (m.j).state, ojs_job_transition_data('active', m.j)
              from moved m
             order by (m.j).seq
        )
        select coalesce(sum(q.jobs), 0)::int8 as "given_back!"
          from (select (m.j).queue, count(*) as jobs,
                       pg_notify('ojs_job_available', format('%s - - - %s', (m.j).queue, count(*)))
                  from moved m group by (m.j).queue) q
        "#,
        &ids,
        &attempts,
    )
    .fetch_one(db)
    .await
}
