-- The phase: the one column the waiting-job indexes read, so that what happens to a job after
-- its claim never touches them (hot path 3).
--
-- Postgres can update a row in place (a HOT update: no new index entry, no index predicate
-- re-evaluated) only when no column that any index reads, in its key or in its predicate,
-- changes. Every partial index over waiting jobs read `state`, so every change of state after
-- the claim (the ACK's `completed`, a cancel) was a full write under every index of ojs_job.
--
-- `phase` is generated from `state`: the waiting state itself (`scheduled`, `available`,
-- `pending`, `retryable`), or `taken` once the job is claimed or finished. The claim moves a
-- job from `available` to `taken`; nothing after it changes its phase (active → completed,
-- cancelled, discarded are all `taken`); a retry, a release or a re-enqueue moves it back.
-- The waiting-job indexes are rebuilt on `phase`, and the statements that walk them say
-- `phase`. Being generated, it can never disagree with `state`, and no statement writes it.
--
-- The indexes over jobs in flight read `in_flight` instead, generated for a job with a
-- rate-limit key or a tenant (whether it is available or active; null for any other job, so
-- that a plain job's changes of state never touch it), and `ojs_job_tenant_idx` reads `phase`.
-- `ojs_job_finished_idx` is dropped: finished jobs are pruned along the primary key (job ids
-- are UUIDv7, in time order). No index of ojs_job reads `state` any more, so an update that
-- changes only the state and unindexed columns of a plain job can be HOT.
--
-- Upgrade: adding two stored generated columns rewrites ojs_job (live jobs only: completed
-- jobs are in ojs_job_done) under an ACCESS EXCLUSIVE lock, then twelve indexes are rebuilt
-- under the same lock: 1.8 s for 300,000 waiting jobs on the 2-core benchmark machine.
-- Replicas of an earlier release decode ojs_job's row type positionally and must be stopped
-- before migrating.

-- Four SQL-bodied functions take ojs_job's row type, which blocks the rewrite: they are dropped
-- here and made again, unchanged, once the column is added.
drop function ojs_job_events(ojs_job_state, timestamptz, text, timestamptz, integer, timestamptz, integer, ojs_job);
drop function ojs_job_transition_data(ojs_job_state, ojs_job);
drop function ojs_job_heartbeat_data(ojs_job);
drop function ojs_dead_letter_matches(ojs_job, text, text, text, text, timestamptz, timestamptz);

create type ojs_job_phase as enum ('scheduled', 'available', 'pending', 'retryable', 'taken');
comment on type ojs_job_phase is 'Where a job is on the way to its claim: its waiting state, or taken (claimed, then active or finished). The only state the waiting-job indexes of ojs_job read (migration V30).';

alter table ojs_job add column phase ojs_job_phase not null generated always as (
    case state
        when 'scheduled' then 'scheduled'::ojs_job_phase
        when 'available' then 'available'::ojs_job_phase
        when 'pending' then 'pending'::ojs_job_phase
        when 'retryable' then 'retryable'::ojs_job_phase
        else 'taken'::ojs_job_phase
    end) stored,
    add column in_flight boolean generated always as (
        case when rate_key is not null or tenant <> '' then state in ('available', 'active') end) stored;
comment on column ojs_job.in_flight is 'Generated from state, for a job with a rate-limit key or a tenant: whether it is available or active (what their concurrency limits count). Null for other jobs, so that their changes of state touch no index.';
comment on column ojs_job.phase is 'Generated from state: the waiting state, or taken from the claim on (active, completed, cancelled, discarded). The waiting-job indexes read it instead of state, so the writes after a claim are HOT updates.';

-- ojs_job_done has no phase: its jobs are all taken.
create or replace view ojs_job_all as
select * from ojs_job
union all
select d.*, 'taken'::ojs_job_phase, case when d.rate_key is not null or d.tenant <> '' then false end
  from ojs_job_done d;
comment on column ojs_job_all.phase is 'As ojs_job.phase (taken, for the jobs of ojs_job_done).';
comment on column ojs_job_all.in_flight is 'As ojs_job.in_flight.';

-- The four functions dropped above, as they were.

create function public.ojs_dead_letter_matches(j public.ojs_job, p_queue text, p_type text, p_type_pattern text, p_error_type text, p_since timestamp with time zone, p_until timestamp with time zone) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN (((j).dead_lettered_at IS NOT NULL) AND ((p_queue IS NULL) OR ((j).queue = p_queue)) AND ((p_type IS NULL) OR ((j).type = p_type)) AND ((p_type_pattern IS NULL) OR ((j).type ~~ p_type_pattern)) AND ((p_error_type IS NULL) OR (((j).error ->> 'type'::text) = p_error_type) OR (((j).error ->> 'code'::text) = p_error_type)) AND ((p_since IS NULL) OR ((j).dead_lettered_at >= p_since)) AND ((p_until IS NULL) OR ((j).dead_lettered_at < p_until)));
COMMENT ON FUNCTION public.ojs_dead_letter_matches(j public.ojs_job, p_queue text, p_type text, p_type_pattern text, p_error_type text, p_since timestamp with time zone, p_until timestamp with time zone) IS 'Whether j is in the dead-letter queue and matches the filters (null: any); p_type_pattern is a LIKE pattern.';

create function public.ojs_job_transition_data(prev public.ojs_job_state, n public.ojs_job) RETURNS jsonb
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN (public.ojs_job_event_base((n).id, (n).type, (n).queue, (n).state, (n).meta) || CASE (n).state WHEN 'available'::public.ojs_job_state THEN jsonb_strip_nulls(jsonb_build_object('priority', (n).priority, 'scheduled_at', public.ojs_timestamp_text((n).scheduled_at), 'unique_key', (n).unique_key)) WHEN 'scheduled'::public.ojs_job_state THEN jsonb_build_object('scheduled_at', public.ojs_timestamp_text((n).scheduled_at)) WHEN 'active'::public.ojs_job_state THEN jsonb_strip_nulls(jsonb_build_object('worker_id', (n).worker_id, 'attempt', (n).attempt)) WHEN 'completed'::public.ojs_job_state THEN jsonb_strip_nulls(jsonb_build_object('duration_ms', public.ojs_ms_between((n).started_at, (n).completed_at), 'attempt', (n).attempt, 'result', CASE WHEN (octet_length(((n).result)::text) <= 65536) THEN ((n).result)::jsonb ELSE NULL::jsonb END)) WHEN 'retryable'::public.ojs_job_state THEN jsonb_build_object('attempt', (n).attempt, 'max_attempts', (n).max_attempts, 'next_retry_at', public.ojs_timestamp_text((n).next_retry_at), 'error', jsonb_build_object('code', ((n).error -> 'code'::text), 'message', ((n).error -> 'message'::text))) WHEN 'discarded'::public.ojs_job_state THEN jsonb_strip_nulls(jsonb_build_object('total_attempts', (n).attempt, 'last_error', CASE WHEN ((n).error IS NOT NULL) THEN jsonb_build_object('code', ((n).error -> 'code'::text), 'message', ((n).error -> 'message'::text)) ELSE NULL::jsonb END, 'dead_lettered', ((n).dead_lettered_at IS NOT NULL), 'reason', public.ojs_discard_reason(prev, ((n).error ->> 'code'::text), (n).attempt, (n).max_attempts, (n).total_deadline_at, (n).discarded_at))) WHEN 'cancelled'::public.ojs_job_state THEN jsonb_strip_nulls(jsonb_build_object('previous_state', prev)) ELSE '{}'::jsonb END);
COMMENT ON FUNCTION public.ojs_job_transition_data(prev public.ojs_job_state, n public.ojs_job) IS 'Payload of the event that records a move from prev into n.state.';

create function public.ojs_job_heartbeat_data(n public.ojs_job) RETURNS jsonb
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN (public.ojs_job_event_base((n).id, (n).type, (n).queue, (n).state, (n).meta) || jsonb_build_object('worker_id', (n).worker_id, 'attempt', (n).attempt, 'visible_until', public.ojs_timestamp_text((n).visible_until)));
COMMENT ON FUNCTION public.ojs_job_heartbeat_data(n public.ojs_job) IS 'Payload of job.heartbeat: the reservation was extended.';

create function public.ojs_job_events(prev public.ojs_job_state, prev_started_at timestamp with time zone, prev_worker_id text, prev_dead_lettered_at timestamp with time zone, prev_error_count integer, prev_visible_until timestamp with time zone, prev_priority integer, n public.ojs_job) RETURNS TABLE(ord integer, type text, from_state public.ojs_job_state, to_state public.ojs_job_state, data jsonb)
    LANGUAGE sql STABLE PARALLEL SAFE
    BEGIN ATOMIC
 SELECT 10,
     'dead_letter.retried'::text,
     NULL::public.ojs_job_state AS ojs_job_state,
     NULL::public.ojs_job_state AS ojs_job_state,
     public.ojs_job_event_base((ojs_job_events.n).id, (ojs_job_events.n).type, (ojs_job_events.n).queue, (ojs_job_events.n).state, (ojs_job_events.n).meta) AS ojs_job_event_base
   WHERE ((ojs_job_events.prev = 'discarded'::public.ojs_job_state) AND ((ojs_job_events.n).state = 'available'::public.ojs_job_state) AND (ojs_job_events.prev_dead_lettered_at IS NOT NULL))
 UNION ALL
  SELECT 20,
     'job.failed'::text,
     NULL::public.ojs_job_state,
     NULL::public.ojs_job_state,
     (public.ojs_job_event_base((ojs_job_events.n).id, (ojs_job_events.n).type, (ojs_job_events.n).queue, (ojs_job_events.n).state, (ojs_job_events.n).meta) || jsonb_build_object('attempt', (ojs_job_events.n).attempt, 'error', jsonb_strip_nulls(jsonb_build_object('code', ((ojs_job_events.n).error -> 'code'::text), 'message', ((ojs_job_events.n).error -> 'message'::text), 'retryable', ((ojs_job_events.n).error -> 'retryable'::text), 'stack_trace', ((ojs_job_events.n).error -> 'backtrace'::text))), 'duration_ms', public.ojs_ms_between(ojs_job_events.prev_started_at, now())))
   WHERE ((ojs_job_events.prev = 'active'::public.ojs_job_state) AND (jsonb_array_length((ojs_job_events.n).errors) > ojs_job_events.prev_error_count))
 UNION ALL
  SELECT 30,
     'job.timeout'::text,
     NULL::public.ojs_job_state,
     NULL::public.ojs_job_state,
     (public.ojs_job_event_base((ojs_job_events.n).id, (ojs_job_events.n).type, (ojs_job_events.n).queue, (ojs_job_events.n).state, (ojs_job_events.n).meta) || jsonb_build_object('timeout_kind', 'execution', 'limit_seconds', round((((ojs_job_events.n).timeout_ms)::numeric / 1000.0), 3), 'elapsed_seconds', round(EXTRACT(epoch FROM (now() - ojs_job_events.prev_started_at)), 3), 'attempt', (ojs_job_events.n).attempt))
   WHERE ((ojs_job_events.prev = 'active'::public.ojs_job_state) AND (jsonb_array_length((ojs_job_events.n).errors) > ojs_job_events.prev_error_count) AND (((ojs_job_events.n).error ->> 'code'::text) = 'timeout'::text))
 UNION ALL
  SELECT 31,
     'job.timeout'::text,
     NULL::public.ojs_job_state,
     NULL::public.ojs_job_state,
     (public.ojs_job_event_base((ojs_job_events.n).id, (ojs_job_events.n).type, (ojs_job_events.n).queue, (ojs_job_events.n).state, (ojs_job_events.n).meta) || jsonb_build_object('timeout_kind', 'total', 'limit_seconds', (ojs_job_events.n).total_timeout_secs, 'elapsed_seconds', round(EXTRACT(epoch FROM ((ojs_job_events.n).discarded_at - (ojs_job_events.n).created_at)), 3), 'attempt', (ojs_job_events.n).attempt))
   WHERE ((ojs_job_events.prev IS DISTINCT FROM (ojs_job_events.n).state) AND ((ojs_job_events.n).state = 'discarded'::public.ojs_job_state) AND (((ojs_job_events.n).error ->> 'code'::text) = 'expired'::text) AND ((ojs_job_events.n).total_deadline_at <= (ojs_job_events.n).discarded_at))
 UNION ALL
  SELECT 40,
     'job.stalled'::text,
     NULL::public.ojs_job_state,
     NULL::public.ojs_job_state,
     (public.ojs_job_event_base((ojs_job_events.n).id, (ojs_job_events.n).type, (ojs_job_events.n).queue, (ojs_job_events.n).state, (ojs_job_events.n).meta) || jsonb_strip_nulls(jsonb_build_object('worker_id', ojs_job_events.prev_worker_id, 'attempt', (ojs_job_events.n).attempt, 'reason', ((ojs_job_events.n).error ->> 'code'::text))))
   WHERE ((ojs_job_events.prev = 'active'::public.ojs_job_state) AND (jsonb_array_length((ojs_job_events.n).errors) > ojs_job_events.prev_error_count) AND (((ojs_job_events.n).error ->> 'code'::text) = ANY (ARRAY['visibility_timeout'::text, 'worker_death'::text, 'shutdown'::text])))
 UNION ALL
  SELECT 50,
     'job.expired'::text,
     NULL::public.ojs_job_state,
     NULL::public.ojs_job_state,
     (public.ojs_job_event_base((ojs_job_events.n).id, (ojs_job_events.n).type, (ojs_job_events.n).queue, (ojs_job_events.n).state, (ojs_job_events.n).meta) || jsonb_strip_nulls(jsonb_build_object('created_at', public.ojs_timestamp_text((ojs_job_events.n).created_at), 'expired_at', public.ojs_timestamp_text((ojs_job_events.n).discarded_at), 'ttl_ms', public.ojs_ms_between((ojs_job_events.n).created_at, LEAST((ojs_job_events.n).expires_at, ((ojs_job_events.n).created_at + (((ojs_job_events.n).enqueue_ttl_secs)::double precision * '00:00:01'::interval)))))))
   WHERE ((ojs_job_events.prev IS DISTINCT FROM (ojs_job_events.n).state) AND ((ojs_job_events.n).state = 'discarded'::public.ojs_job_state) AND (ojs_job_events.prev <> 'active'::public.ojs_job_state) AND (((ojs_job_events.n).error ->> 'code'::text) = 'expired'::text) AND (NOT COALESCE(((ojs_job_events.n).total_deadline_at <= (ojs_job_events.n).discarded_at), false)))
 UNION ALL
  SELECT 60,
     public.ojs_job_event_type((ojs_job_events.n).state) AS ojs_job_event_type,
     ojs_job_events.prev AS prev,
     (ojs_job_events.n).state AS state,
     public.ojs_job_transition_data(ojs_job_events.prev, ojs_job_events.n) AS ojs_job_transition_data
   WHERE ((ojs_job_events.prev IS DISTINCT FROM (ojs_job_events.n).state) AND ((ojs_job_events.n).state <> 'pending'::public.ojs_job_state))
 UNION ALL
  SELECT 70,
     'dead_letter.added'::text,
     NULL::public.ojs_job_state,
     NULL::public.ojs_job_state,
     (public.ojs_job_event_base((ojs_job_events.n).id, (ojs_job_events.n).type, (ojs_job_events.n).queue, (ojs_job_events.n).state, (ojs_job_events.n).meta) || jsonb_build_object('last_error', jsonb_build_object('code', ((ojs_job_events.n).error -> 'code'::text), 'message', ((ojs_job_events.n).error -> 'message'::text))))
   WHERE ((ojs_job_events.prev IS DISTINCT FROM (ojs_job_events.n).state) AND ((ojs_job_events.n).state = 'discarded'::public.ojs_job_state) AND ((ojs_job_events.n).dead_lettered_at IS NOT NULL))
 UNION ALL
  SELECT 80,
     'job.heartbeat'::text,
     NULL::public.ojs_job_state,
     NULL::public.ojs_job_state,
     public.ojs_job_heartbeat_data(ojs_job_events.n) AS ojs_job_heartbeat_data
   WHERE ((ojs_job_events.prev = 'active'::public.ojs_job_state) AND ((ojs_job_events.n).state = 'active'::public.ojs_job_state) AND ((ojs_job_events.n).visible_until > ojs_job_events.prev_visible_until))
 UNION ALL
  SELECT 90,
     'priority.changed'::text,
     NULL::public.ojs_job_state,
     NULL::public.ojs_job_state,
     (public.ojs_job_event_base((ojs_job_events.n).id, (ojs_job_events.n).type, (ojs_job_events.n).queue, (ojs_job_events.n).state, (ojs_job_events.n).meta) || jsonb_build_object('previous_priority', ojs_job_events.prev_priority, 'new_priority', (ojs_job_events.n).priority))
   WHERE ((ojs_job_events.n).priority <> ojs_job_events.prev_priority);
END;
COMMENT ON FUNCTION public.ojs_job_events(prev public.ojs_job_state, prev_started_at timestamp with time zone, prev_worker_id text, prev_dead_lettered_at timestamp with time zone, prev_error_count integer, prev_visible_until timestamp with time zone, prev_priority integer, n public.ojs_job) IS 'The OJS events of one job row change (n after; prev_* what the change replaced), in order. Statements that change jobs insert them into ojs_event in the same statement.';
COMMENT ON FUNCTION public.ojs_job_events(prev public.ojs_job_state, prev_started_at timestamp with time zone, prev_worker_id text, prev_dead_lettered_at timestamp with time zone, prev_error_count integer, prev_visible_until timestamp with time zone, prev_priority integer, n public.ojs_job) IS 'The OJS events of one job row change (n after; prev_* what the change replaced), in order. Statements that change jobs insert them into ojs_event in the same statement.';

drop index ojs_job_capacity_idx;
create index ojs_job_capacity_idx on ojs_job (queue, created_at, seq)
    where capacity_tracked and phase <> 'taken';
drop index ojs_job_dispatch_idx;
create index ojs_job_dispatch_idx on ojs_job (
    queue,
    (case when priority_aging_ms is null then priority else 0 end),
    (date_part('epoch', enqueued_at - timestamptz '1970-01-01 00:00:00+00') * 1000
     + coalesce(priority * priority_aging_ms, 0)),
    seq)
    where phase = 'available' and rate_held is null;
drop index ojs_job_fair_idx;
create index ojs_job_fair_idx on ojs_job (queue, priority, fair_key, seq)
    where phase = 'available' and fair_key is not null and rate_held is null;
drop index ojs_job_fair_tenant_idx;
create index ojs_job_fair_tenant_idx on ojs_job (queue, priority, tenant, fair_key)
    where phase = 'available' and fair_key is not null and rate_held is null;
drop index ojs_job_rate_held_idx;
create index ojs_job_rate_held_idx on ojs_job (rate_key, priority, enqueued_at, seq)
    where phase = 'available' and rate_held;
comment on index ojs_job_rate_held_idx is 'A key''s held jobs in release order.';
drop index ojs_job_retry_due_idx;
create index ojs_job_retry_due_idx on ojs_job (next_retry_at) where phase = 'retryable';
drop index ojs_job_scheduled_due_idx;
create index ojs_job_scheduled_due_idx on ojs_job (scheduled_at) where phase = 'scheduled';
drop index ojs_job_tenant_held_idx;
create index ojs_job_tenant_held_idx on ojs_job (tenant, priority, enqueued_at, seq)
    where rate_held = false and phase = 'available';
comment on index ojs_job_tenant_held_idx is 'A tenant''s held jobs (rate_held = false) in release order.';
drop index ojs_job_waiting_deadline_idx;
create index ojs_job_waiting_deadline_idx on ojs_job (least(expires_at, claim_deadline_at, total_deadline_at))
    where phase <> 'taken'
      and (expires_at is not null or claim_deadline_at is not null or total_deadline_at is not null);

-- The indexes over jobs in flight or finished, which read state, are rebuilt on phase and
-- in_flight (which only a keyed or tenant job's changes of state move).
drop index ojs_job_rate_flight_idx;
create index ojs_job_rate_flight_idx on ojs_job (rate_key, phase)
    where rate_key is not null and rate_held is null and in_flight;
comment on index ojs_job_rate_flight_idx is 'A key''s jobs in flight (available or active, not held), by phase: what its concurrency counts.';
drop index ojs_job_tenant_flight_idx;
create index ojs_job_tenant_flight_idx on ojs_job (tenant)
    where tenant <> '' and in_flight and rate_held is not false;
comment on index ojs_job_tenant_flight_idx is 'A tenant''s jobs in flight (available or active, not held for the tenant): what its max_concurrency counts.';
drop index ojs_job_tenant_idx;
create index ojs_job_tenant_idx on ojs_job (tenant, phase, queue) where tenant <> '';
comment on index ojs_job_tenant_idx is 'A tenant''s jobs by phase and queue: a tenant''s FETCH, its waiting jobs (max_queue_depth), its counts.';
-- Finished jobs are pruned along the primary key (job ids are UUIDv7, in time order): an
-- index over them would be written by every ACK and cancel.
drop index ojs_job_finished_idx;

-- The functions that walk those indexes, as they were (V24, V28) but for `phase`.

create or replace function ojs_job_fair_tag() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
declare
    fair ojs_fair_queue;
    v double precision;
    last double precision;
begin
    -- The update trigger's WHEN only filters; an available job that stays in its queue keeps
    -- its tag.
    if tg_op = 'UPDATE' and old.state = 'available' and old.queue = new.queue then
        return new;
    end if;
    select * into fair from ojs_fair_queue f where f.queue = new.queue;
    if not found then
        new.tenant_fair := false;
        new.tenant := nullif(new.meta ->> 'tenant_id', '');
        new.fair_key := null;
        return new;
    end if;
    new.tenant := coalesce(new.meta ->> 'tenant_id', '');
    select j.fair_key into v
      from ojs_job j
     where j.queue = new.queue and j.priority = new.priority
       and j.phase = 'available' and j.fair_key is not null
     order by j.fair_key
     limit 1;
    select j.fair_key into last
      from ojs_job j
     where j.queue = new.queue and j.priority = new.priority and j.tenant = new.tenant
       and j.phase = 'available' and j.fair_key is not null
     order by j.fair_key desc
     limit 1;
    new.fair_key := greatest(coalesce(v, 0), coalesce(last, 0)) + 1 / ojs_tenant_weight(fair, new.tenant);
    return new;
end
$$;

create or replace function ojs_queue_drop_oldest(p_queue text, p_jobs bigint, p_bytes bigint) RETURNS TABLE(dropped_queue text, dropped_type text)
    LANGUAGE plpgsql
    AS $_$
#variable_conflict use_column
begin
    -- Locked first, in a statement of its own, so that the next statement's snapshot sees
    -- what concurrent enqueues into the queue committed before the lock was granted.
    perform 1 from ojs_queue_capacity
      where queue = $1 and overflow_policy = 'drop_oldest'
        for update;
    if not found then
        return;
    end if;
    return query
    with need as (
        select greatest(c.jobs + $2 - coalesce(c.max_jobs, c.jobs + $2), 0) as jobs,
               greatest(c.bytes + $3 - coalesce(c.max_bytes, c.bytes + $3), 0) as bytes
          from ojs_queue_capacity c
         where c.queue = $1
    ),
    candidates as (
        select j.id, j.state,
               row_number() over w as n,
               sum(ojs_job_size(j.args, j.meta)) over w - ojs_job_size(j.args, j.meta) as freed_before
          from ojs_job j
         where j.queue = $1 and j.capacity_tracked
           and j.phase <> 'taken'
        window w as (order by j.created_at, j.seq rows between unbounded preceding and current row)
    ),
    doomed as (
        select c.id, c.state as prev,
               jsonb_build_object('code', 'overflow', 'type', 'overflow',
                                  'message', 'Dropped to make room in its full queue (overflow policy drop_oldest).') as error
          from candidates c, need n
         where c.n <= n.jobs or c.freed_before < n.bytes
    ),
    discarded as (
        update ojs_job j
           set state = 'discarded', discarded_at = now(), completed_at = now(),
               next_retry_at = null, error = d.error,
               errors = j.errors || jsonb_build_array(ojs_error_entry(j.attempt, d.error))
          from doomed d
         where j.id = d.id
           and j.state in ('scheduled', 'available', 'pending', 'retryable')
        returning j, d.prev
    ),
    job_events as (
        insert into ojs_event (type, subject, job_id, queue, job_type, from_state, to_state, data)
        select e.type, (x.j).id::text, (x.j).id, (x.j).queue, (x.j).type, e.from_state,
               e.to_state, e.data
          from discarded x
          cross join lateral ojs_job_events(x.prev, null, null, null, 0, null, (x.j).priority, x.j) e
         order by (x.j).seq, e.ord
    ),
    queue_events as (
        insert into ojs_event (type, subject, job_id, queue, job_type, data)
        select k.kind, (x.j).queue, (x.j).id, (x.j).queue, (x.j).type,
               jsonb_build_object('queue', (x.j).queue, 'job_id', (x.j).id, 'job_type', (x.j).type)
          from discarded x
          cross join (values (1, 'queue.overflow'), (2, 'backpressure.dropped')) as k(ord, kind)
         order by (x.j).seq, k.ord
    )
    select (x.j).queue, (x.j).type from discarded x;
end;
$_$;

create or replace function ojs_rate_key_holds(key text) RETURNS boolean
    LANGUAGE sql STABLE
    SET search_path TO '$user', 'public'
    RETURN (EXISTS (SELECT FROM public.ojs_job j WHERE ((j.rate_key = ojs_rate_key_holds.key) AND (j.phase = 'available'::public.ojs_job_phase) AND j.rate_held)));

create or replace function ojs_rate_release(rate_key text, wake boolean DEFAULT true) RETURNS TABLE(released_queue text, released_jobs integer)
    LANGUAGE plpgsql
    SET search_path TO '$user', 'public'
    AS $$
declare
    k ojs_rate_key;
    overriding boolean;
    lim integer;
    per bigint;
    active_n integer;
    cap bigint;
    unstarted integer;
    started integer;
    oldest timestamptz;
    last_start timestamptz;
    allow bigint := 2147483647;
    binding text;
    binding_limit integer;
    binding_current integer;
    next_at timestamptz;
    released uuid[];
    released_queues text[];
    held_left boolean;
    keep_ms bigint := 0;
begin
    if not ojs_rate_key_holds(ojs_rate_release.rate_key) then
        -- Nothing held back (the usual case of a key under its limits): nothing to release,
        -- and, unless the key was marked limited, nothing to write — no lock, no commit to
        -- flush. A job held after this read is released by whoever held it.
        update ojs_rate_key r set limited = null, next_check_at = null
         where r.key = ojs_rate_release.rate_key
           and (r.limited is not null or r.next_check_at is not null);
        return;
    end if;
    select * into k from ojs_rate_key r where r.key = ojs_rate_release.rate_key for update;
    if not found then
        return;
    end if;
    overriding := k.override_expires_at is null or k.override_expires_at > now();

    -- A key without limits (named only, for overrides to come) lets everything go, uncounted.
    if num_nonnulls(k.concurrency, k.rate_limit, k.throttle_limit) > 0
       or (overriding and num_nonnulls(k.override_concurrency, k.override_rate_limit,
                                       k.override_throttle_limit) > 0) then
        -- Counted only as far as the largest limit: past it the key allows nothing anyway,
        -- and a count stays a short range of ojs_job_rate_flight_idx.
        cap := greatest(k.concurrency, k.rate_limit, k.throttle_limit,
                        case when overriding then greatest(k.override_concurrency,
                                                           k.override_rate_limit,
                                                           k.override_throttle_limit) end) + 1;
        -- One statement, one snapshot: a claim that commits meanwhile moves a job from one
        -- count to the other, never out of both. (The starts below are read after this: a job
        -- claimed in between counts twice, never not at all.)
        select (select count(*)
                  from (select from ojs_job j
                         where j.rate_key = k.key and j.rate_held is null and j.in_flight
                           and j.phase = 'taken'
                         limit cap) a),
               (select count(*)
                  from (select from ojs_job j
                         where j.rate_key = k.key and j.rate_held is null and j.in_flight
                           and j.phase = 'available'
                         limit cap) u)
          into active_n, unstarted;
    else
        active_n := 0;
        unstarted := 0;
    end if;

    if k.blocked_until > now() then
        allow := 0;
        binding := 'blocked';
        next_at := k.blocked_until;
    end if;

    -- Concurrency: the key's own and the override's, each must pass.
    foreach lim in array array[k.concurrency, case when overriding then k.override_concurrency end] loop
        if lim is not null and lim - active_n - unstarted < allow then
            allow := lim - active_n - unstarted;
            binding := 'concurrency';
            binding_limit := lim;
            binding_current := active_n + unstarted;
            next_at := null;
        end if;
    end loop;

    -- Rate: starts within the period, and the released jobs not started yet.
    for lim, per in
        select x.l, x.p from (values (k.rate_limit, k.rate_period_ms),
                                     (case when overriding then k.override_rate_limit end,
                                      case when overriding then k.override_rate_period_ms end)) x(l, p)
         where x.l is not null
    loop
        keep_ms := greatest(keep_ms, per);
        select coalesce(sum(w.jobs), 0), min(w.started_at) into started, oldest
          from ojs_rate_window w
         where w.key = 'key:' || k.key and w.started_at > now() - per * interval '1 millisecond';
        if lim - started - unstarted < allow then
            allow := lim - started - unstarted;
            binding := 'rate';
            binding_limit := lim;
            binding_current := started + unstarted;
            next_at := coalesce(oldest + per * interval '1 millisecond', now() + per * interval '1 millisecond');
        end if;
    end loop;

    -- Throttle: one at a time, period/limit after the last start.
    for lim, per in
        select x.l, x.p from (values (k.throttle_limit, k.throttle_period_ms),
                                     (case when overriding then k.override_throttle_limit end,
                                      case when overriding then k.override_throttle_period_ms end)) x(l, p)
         where x.l is not null
    loop
        keep_ms := greatest(keep_ms, per / lim + 1);
        select max(w.started_at) into last_start from ojs_rate_window w where w.key = 'key:' || k.key;
        if unstarted > 0 then
            if 0 < allow then
                allow := 0;
                binding := 'throttle';
                binding_limit := lim;
                binding_current := unstarted;
                -- The released job's start does not notify: look again after one interval.
                next_at := now() + (per / lim) * interval '1 millisecond';
            end if;
        elsif last_start > now() - (per / lim) * interval '1 millisecond' then
            if 0 < allow then
                allow := 0;
                binding := 'throttle';
                binding_limit := lim;
                binding_current := 1;
                next_at := last_start + (per / lim) * interval '1 millisecond';
            end if;
        elsif 1 < allow then
            allow := 1;
        end if;
    end loop;

    if allow > 0 then
        with r as (
            select j.id from ojs_job j
             where j.rate_key = k.key and j.phase = 'available' and j.rate_held
             order by j.priority, j.enqueued_at, j.seq
             limit allow
               for update skip locked
        ),
        let_go as (
            update ojs_job j set rate_held = null from r where j.id = r.id
            returning j.id, j.queue
        )
        select array_agg(l.id), array_agg(l.queue) into released, released_queues
          from let_go l;
        -- Wake the long polls of the queues that gained jobs (an enqueue announces them
        -- itself, coalesced, and passes wake = false).
        if wake then
            perform pg_notify('ojs_job_available', format('%s - - - %s', q.queue, q.n))
               from (select u.queue, count(*) as n from unnest(released_queues) u(queue)
                      group by u.queue) q;
        end if;
    end if;

    select exists (select from ojs_job j
                    where j.rate_key = k.key and j.phase = 'available' and j.rate_held)
      into held_left;

    -- on_limit drop: what the key does not let start now is discarded, not dead-lettered.
    if held_left and k.on_limit = 'drop' then
        with doomed as (
            select j.id from ojs_job j
             where j.rate_key = k.key and j.phase = 'available' and j.rate_held
               for update skip locked
        ),
        dropped as (
            update ojs_job j
               set state = 'discarded', discarded_at = now(), completed_at = now(),
                   error = jsonb_build_object('code', 'rate_limit_dropped', 'type', 'rate_limit_dropped',
                                              'message', format('Rate-limit key %s was at its %s limit (on_limit: drop).',
                                                                k.key, coalesce(binding, 'concurrency'))),
                   errors = j.errors || jsonb_build_array(ojs_error_entry(j.attempt,
                                jsonb_build_object('code', 'rate_limit_dropped', 'type', 'rate_limit_dropped',
                                                   'message', format('Rate-limit key %s was at its %s limit (on_limit: drop).',
                                                                     k.key, coalesce(binding, 'concurrency'))),
                                now()))
              from doomed d
             where j.id = d.id
            returning j
        ),
        job_events as (
            insert into ojs_event (type, subject, job_id, queue, job_type, from_state, to_state, data)
            select e.type, (x.j).id::text, (x.j).id, (x.j).queue, (x.j).type, e.from_state,
                   e.to_state, e.data
              from dropped x
              cross join lateral ojs_job_events('available', null, null, null, 0, null, (x.j).priority, x.j) e
             order by (x.j).seq, e.ord
        )
        insert into ojs_event (type, subject, job_id, queue, job_type, data)
        select 'rate_limit.dropped', k.key, (x.j).id, (x.j).queue, (x.j).type,
               jsonb_build_object('key', k.key, 'job_id', (x.j).id, 'job_type', (x.j).type,
                                  'strategy', coalesce(binding, 'concurrency'))
          from dropped x;
        select exists (select from ojs_job j
                        where j.rate_key = k.key and j.phase = 'available' and j.rate_held)
          into held_left;
    end if;

    if k.limited is not null and coalesce(cardinality(released), 0) > 0 then
        insert into ojs_event (type, subject, job_id, data)
        values ('rate_limit.released', k.key, released[1],
                jsonb_build_object('key', k.key, 'strategy', k.limited, 'job_id', released[1],
                                   'job_ids', to_jsonb(released)));
    end if;
    if held_left and k.limited is null and binding is not null then
        insert into ojs_event (type, subject, data)
        values ('rate_limit.exceeded', k.key,
                jsonb_build_object('key', k.key, 'strategy', binding, 'limit', binding_limit,
                                   'current', binding_current));
    end if;

    delete from ojs_rate_window w
     where w.key = 'key:' || k.key and w.started_at < now() - keep_ms * interval '1 millisecond';

    -- Time alone releases nothing for a key limited by its concurrency (a job leaving flight
    -- notifies); a slow check covers a notification lost with its replica.
    next_at := case when not held_left then null
                    when allow > 0 then now()
                    else coalesce(next_at, now() + interval '5 seconds') end;
    binding := case when held_left then coalesce(binding, k.limited) end;
    if binding is distinct from k.limited or next_at is distinct from k.next_check_at then
        update ojs_rate_key r set limited = binding, next_check_at = next_at where r.key = k.key;
    end if;
    return query
        select u.queue, count(*)::integer from unnest(released_queues) u(queue) group by u.queue;
end;
$$;

create or replace function ojs_tenant_holds(tenant text) RETURNS boolean
    LANGUAGE sql STABLE
    SET search_path TO '$user', 'public'
    RETURN (EXISTS (SELECT FROM public.ojs_job j WHERE ((j.tenant = ojs_tenant_holds.tenant) AND (j.phase = 'available'::public.ojs_job_phase) AND (j.rate_held = false))));

create or replace function ojs_tenant_release(p_tenant text, wake boolean DEFAULT true) RETURNS TABLE(released_queue text, released_jobs integer)
    LANGUAGE plpgsql
    SET search_path TO '$user', 'public'
    AS $$
declare
    lim integer;
    flight integer;
    allow integer;
    queues text[];
    keys text[];
    k text;
begin
    if not ojs_tenant_holds(p_tenant) then
        return;
    end if;
    select t.max_concurrency into lim from ojs_tenant t where t.id = p_tenant for update;
    if lim is null then
        -- No limit (any more): everything held goes.
        allow := 2147483647;
    else
        -- Its own statement, after the lock: it sees what committed while this waited.
        select count(*) into flight
          from (select from ojs_job j
                 where j.tenant = p_tenant and j.tenant <> ''
                   and j.in_flight and j.rate_held is not false
                 limit lim + 1) f;
        allow := lim - flight;
    end if;
    if allow <= 0 then
        return;
    end if;
    with r as (
        select j.id from ojs_job j
         where j.tenant = p_tenant and j.phase = 'available' and j.rate_held = false
         order by j.priority, j.enqueued_at, j.seq
         limit allow
           for update skip locked
    ),
    let_go as (
        update ojs_job j set rate_held = case when j.rate_key is not null then true end
          from r
         where j.id = r.id
        returning j.queue, j.rate_key
    )
    select array_agg(l.queue) filter (where l.rate_key is null),
           array_agg(distinct l.rate_key) filter (where l.rate_key is not null)
      into queues, keys
      from let_go l;
    if wake then
        perform pg_notify('ojs_job_available', format('%s - - - %s', q.queue, q.n))
           from (select u.queue, count(*) as n from unnest(queues) u(queue) group by u.queue) q;
    end if;
    return query
        select u.queue, count(*)::integer from unnest(queues) u(queue) group by u.queue;
    -- Released jobs with a key wait for it now.
    foreach k in array coalesce(keys, '{}') loop
        return query select r.released_queue, r.released_jobs from ojs_rate_release(k, wake) r;
    end loop;
end;
$$;

create or replace function ojs_tenant_admit(tenants text[], jobs integer[]) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO '$user', 'public'
    AS $$
declare
    t ojs_tenant;
    n integer;
    started bigint;
    oldest timestamptz;
    depth bigint;
begin
    for t in select * from ojs_tenant x
              where x.id = any(tenants)
                and (x.max_enqueue_rate is not null or x.max_queue_depth is not null)
              order by x.id
                for update
    loop
        n := jobs[array_position(tenants, t.id)];
        if t.max_enqueue_rate is not null then
            select coalesce(sum(w.jobs), 0), min(w.started_at) into started, oldest
              from ojs_rate_window w
             where w.key = 'tenant:' || t.id
               and w.started_at > now() - t.enqueue_period_ms * interval '1 millisecond';
            if started + n > t.max_enqueue_rate then
                raise exception using
                    errcode = 'OJ005',
                    message = format('tenant %s is at its max_enqueue_rate', t.id),
                    detail = json_build_object(
                        'tenant_id', t.id, 'limit', 'max_enqueue_rate', 'current', started,
                        'maximum', t.max_enqueue_rate, 'requested', n,
                        'retry_after_ms', greatest(1, ceil(extract(epoch from
                            coalesce(oldest, now()) + t.enqueue_period_ms * interval '1 millisecond'
                            - now()) * 1000)))::text;
            end if;
            delete from ojs_rate_window w
             where w.key = 'tenant:' || t.id
               and w.started_at <= now() - t.enqueue_period_ms * interval '1 millisecond';
            insert into ojs_rate_window (key, started_at, jobs) values ('tenant:' || t.id, now(), n);
        end if;
        if t.max_queue_depth is not null then
            -- The enqueue's own jobs are among those counted (it runs after the insert).
            select count(*) into depth
              from (select from ojs_job j
                     where j.tenant = t.id and j.tenant <> ''
                       and j.phase <> 'taken'
                     limit t.max_queue_depth + n + 1) d;
            if depth > t.max_queue_depth then
                raise exception using
                    errcode = 'OJ005',
                    message = format('tenant %s is at its max_queue_depth', t.id),
                    detail = json_build_object(
                        'tenant_id', t.id, 'limit', 'max_queue_depth',
                        'current', greatest(depth - n, 0), 'maximum', t.max_queue_depth,
                        'requested', n, 'retry_after_ms', 1000)::text;
            end if;
        end if;
    end loop;
end;
$$;
