-- ojsd schema, part 3: leadership, lifecycle events, the worker protocol, and what the
-- leader-run maintenance services need to find their work with an index.

---------------------------------------------------------------------------------------------
-- Job types: hyphens are allowed after a segment's first letter. The server validates the
-- stricter seed pattern ([a-z][a-z0-9_]* per segment) unless configured otherwise; the table
-- accepts the superset so that either setting stores.
---------------------------------------------------------------------------------------------
alter table ojs_job drop constraint ojs_job_type_format;
alter table ojs_job add constraint ojs_job_type_format
    check (char_length(type) between 1 and 255
           and type ~ '^[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)*$') not valid;
alter table ojs_job validate constraint ojs_job_type_format;

---------------------------------------------------------------------------------------------
-- Deadlines, stored when they become known so that each maintenance service finds its work
-- with an index range scan instead of evaluating every row.
---------------------------------------------------------------------------------------------
alter table ojs_job
    add column timeout_at        timestamptz,
    add column claim_deadline_at timestamptz,
    add column total_deadline_at timestamptz,
    add column re_enqueued_at    timestamptz;

update ojs_job
   set timeout_at = case when state = 'active'
                         then started_at + timeout_ms * interval '1 millisecond' end,
       claim_deadline_at = case when enqueue_ttl_secs is not null and attempt = 0
                                     and state in ('scheduled', 'available', 'pending')
                                then created_at + enqueue_ttl_secs * interval '1 second' end,
       total_deadline_at = case when total_timeout_secs is not null
                                then created_at + total_timeout_secs * interval '1 second' end
 where state = 'active' or enqueue_ttl_secs is not null or total_timeout_secs is not null;

alter table ojs_job add constraint ojs_job_active_has_timeout
    check (state <> 'active' or timeout_at is not null);

comment on column ojs_job.timeout_at is 'Execution deadline of the current attempt (started_at + timeout); heartbeats do not move it.';
comment on column ojs_job.claim_deadline_at is 'created_at + enqueue_ttl: the job must be claimed for the first time before this; cleared by the first claim.';
comment on column ojs_job.total_deadline_at is 'created_at + total_timeout: the job must have finished, across all attempts, before this.';
comment on column ojs_job.re_enqueued_at is 'When the job was last taken out of the dead-letter queue (manual retry).';

-- Active jobs whose reservation, execution timeout or total timeout ran out (the reaper).
drop index ojs_job_reservation_idx;
create index ojs_job_active_deadline_idx on ojs_job (least(visible_until, timeout_at, total_deadline_at))
    where state = 'active';

-- Waiting jobs that must not start any more (the expirer).
drop index ojs_job_expiry_idx;
create index ojs_job_waiting_deadline_idx on ojs_job (least(expires_at, claim_deadline_at, total_deadline_at))
    where state in ('scheduled', 'available', 'pending', 'retryable')
      and (expires_at is not null or claim_deadline_at is not null or total_deadline_at is not null);

-- Due scheduled and retryable jobs, across queues (the promoter; FETCH filters by its queues).
drop index ojs_job_scheduled_due_idx;
drop index ojs_job_retry_due_idx;
create index ojs_job_scheduled_due_idx on ojs_job (scheduled_at) where state = 'scheduled';
create index ojs_job_retry_due_idx on ojs_job (next_retry_at) where state = 'retryable';

-- Finished jobs by the time they finished (the pruner).
create index ojs_job_finished_idx on ojs_job (state, coalesce(discarded_at, cancelled_at, completed_at))
    where state in ('completed', 'cancelled', 'discarded');

-- The dead-letter queue, newest first.
create index ojs_job_dead_letter_idx on ojs_job (dead_lettered_at) where dead_lettered_at is not null;

-- The dead-letter queue's filters (GET /ojs/v1/dead-letter, bulk retry), in one place.
create function ojs_dead_letter_matches(j ojs_job, p_queue text, p_type text, p_type_pattern text,
                                        p_error_type text, p_since timestamptz, p_until timestamptz)
    returns boolean
    language sql stable parallel safe
    return j.dead_lettered_at is not null
       and (p_queue is null or j.queue = p_queue)
       and (p_type is null or j.type = p_type)
       and (p_type_pattern is null or j.type like p_type_pattern)
       and (p_error_type is null or j.error ->> 'type' = p_error_type or j.error ->> 'code' = p_error_type)
       and (p_since is null or j.dead_lettered_at >= p_since)
       and (p_until is null or j.dead_lettered_at < p_until);

comment on function ojs_dead_letter_matches(ojs_job, text, text, text, text, timestamptz, timestamptz) is
    'Whether j is in the dead-letter queue and matches the filters (null: any); p_type_pattern is a LIKE pattern.';

-- An errors[] entry stamped with an explicit time (maintenance passes its own "now").
create function ojs_error_entry(attempt integer, error jsonb, at timestamptz) returns jsonb
    language sql stable strict parallel safe
    return jsonb_build_object('attempt', attempt) || error
           || jsonb_build_object('occurred_at', ojs_timestamp_text(at));

comment on function ojs_error_entry(integer, jsonb, timestamptz) is
    'Builds an errors[] entry: {attempt, <error fields>, occurred_at = at}.';

---------------------------------------------------------------------------------------------
-- Leadership: one lease row. The holder runs the maintenance services.
---------------------------------------------------------------------------------------------
create table ojs_leader (
    name        text        not null,
    leader_id   text        not null,
    term        bigint      not null,
    elected_at  timestamptz not null,
    renewed_at  timestamptz not null,
    expires_at  timestamptz not null,

    constraint ojs_leader_pkey primary key (name),
    constraint ojs_leader_name_known check (name = 'maintenance'),
    constraint ojs_leader_term_positive check (term >= 1),
    constraint ojs_leader_expires_after_renewal check (expires_at >= renewed_at)
);

comment on table ojs_leader is 'Leadership leases. The row named maintenance says which ojsd instance runs the maintenance services (promotion, reclaiming, expiry, retention, stale workers). The lease is held while expires_at > now().';
comment on column ojs_leader.name is 'What the lease is for; only maintenance exists.';
comment on column ojs_leader.leader_id is 'Instance id of the holder (OJS_INSTANCE_ID; by default host, pid and a random suffix).';
comment on column ojs_leader.term is 'Election counter; increases by one each time the lease changes hands or is taken again after it lapsed.';
comment on column ojs_leader.elected_at is 'When the current term began.';
comment on column ojs_leader.renewed_at is 'When the holder last renewed the lease.';
comment on column ojs_leader.expires_at is 'The lease is void after this; another instance may then take it. A resigning holder sets it to the resignation time.';

create view ojs_leadership as
    select name,
           leader_id,
           term,
           elected_at,
           renewed_at,
           expires_at,
           expires_at > now()                         as held,
           greatest(expires_at - now(), interval '0') as remaining
      from ojs_leader;

comment on view ojs_leadership is 'Who leads, and for how much longer unless the lease is renewed.';
comment on column ojs_leadership.name is 'What the lease is for.';
comment on column ojs_leadership.leader_id is 'Instance id of the holder (or last holder).';
comment on column ojs_leadership.term is 'Election counter.';
comment on column ojs_leadership.elected_at is 'When the current term began.';
comment on column ojs_leadership.renewed_at is 'When the holder last renewed.';
comment on column ojs_leadership.expires_at is 'When the lease runs out.';
comment on column ojs_leadership.held is 'Whether the lease is currently held (false: nobody leads until an instance is elected).';
comment on column ojs_leadership.remaining is 'Time until the lease runs out.';

---------------------------------------------------------------------------------------------
-- Workers: liveness, staleness, per-worker fetch defaults.
---------------------------------------------------------------------------------------------
alter table ojs_worker
    alter column last_heartbeat_at drop not null,
    alter column last_heartbeat_at drop default,
    add column last_seen_at       timestamptz not null default now(),
    add column stale_at           timestamptz,
    add column strategy           text,
    add column weights            json,
    add column heartbeat_event_at timestamptz;

alter table ojs_worker
    add constraint ojs_worker_weights_is_object check (weights is null or json_typeof(weights) = 'object');

comment on column ojs_worker.last_heartbeat_at is 'When the server last heard a heartbeat or registration; null for a worker only seen fetching (such workers are never declared stale).';
comment on column ojs_worker.last_seen_at is 'When the server last heard from the worker in any way (fetch, heartbeat, registration); updated at most every few seconds by fetches.';
comment on column ojs_worker.stale_at is 'When the worker was declared stale (no heartbeat for three intervals) and its jobs were released; cleared if it heartbeats again.';
comment on column ojs_worker.strategy is 'Fetch strategy the worker registered with (used when no pool configuration applies).';
comment on column ojs_worker.weights is 'Queue weights the worker registered with, for the weighted strategy.';
comment on column ojs_worker.heartbeat_event_at is 'When the last sampled worker.heartbeat event was written (at most one a minute).';

create index ojs_worker_heartbeat_idx on ojs_worker (last_heartbeat_at) where stale_at is null;

-- The state a worker must be in: the most severe of the server directive and its own report;
-- stale overrides everything. Used by the API and by the views below.
create function ojs_worker_effective_state(directive text, state text, stale boolean) returns text
    language sql immutable parallel safe
    return case
        when stale then 'stale'
        when directive = 'terminate' or state = 'terminate' then 'terminate'
        when state = 'drain' then 'drain'
        when directive = 'quiet' or state = 'quiet' then 'quiet'
        else 'running'
    end;

comment on function ojs_worker_effective_state(text, text, boolean) is
    'Effective worker state: stale > terminate > drain > quiet > running.';

-- Directives only escalate: '' < quiet < terminate.
create function ojs_worker_directive_max(a text, b text) returns text
    language sql immutable parallel safe
    return case
        when a = 'terminate' or b = 'terminate' then 'terminate'
        when a = 'quiet' or b = 'quiet' then 'quiet'
        else ''
    end;

comment on function ojs_worker_directive_max(text, text) is
    'The more severe of two worker directives (empty, quiet, terminate).';

---------------------------------------------------------------------------------------------
-- Events: the lifecycle outbox, written by triggers in the transaction of the change.
---------------------------------------------------------------------------------------------

create table ojs_event (
    seq         bigint        not null generated always as identity,
    xid         xid8          not null default pg_current_xact_id(),
    type        text          not null,
    source      text          not null default coalesce(nullif(current_setting('ojs.source', true), ''), 'ojs://ojs-server/api/unknown'),
    time        timestamptz   not null default now(),
    subject     text,
    job_id      uuid,
    queue       text,
    job_type    text,
    from_state  ojs_job_state,
    to_state    ojs_job_state,
    data        jsonb         not null default '{}',

    constraint ojs_event_pkey primary key (seq),
    constraint ojs_event_data_is_object check (jsonb_typeof(data) = 'object'),
    constraint ojs_event_transition_complete check ((from_state is null) or (to_state is not null))
);

-- Delivery order: by writing transaction, then by position within it. Readers only look at
-- transactions older than every transaction still running, so the order never changes behind
-- a cursor (see src/events.rs).
create unique index ojs_event_order_idx on ojs_event (xid, seq);
create index ojs_event_job_idx on ojs_event (job_id, xid, seq) where job_id is not null;
create index ojs_event_queue_idx on ojs_event (queue, xid, seq) where queue is not null;

comment on table ojs_event is 'Lifecycle events (OJS event vocabulary), written by triggers in the same transaction as the change they describe. Served by GET /ojs/v1/events and the SSE streams; pruned after 7 days or beyond 1,000,000 events.';
comment on column ojs_event.xid is 'Transaction that wrote the event; events are delivered in (xid, seq) order once that transaction is older than every running one.';
comment on column ojs_event.seq is 'Position of the event among all events; orders the events of one transaction. The event id sent to clients (evt_<UUIDv7>) is made of time and seq.';
comment on column ojs_event.type is 'Event type, e.g. job.completed.';
comment on column ojs_event.source is 'ojs://<service>/<component>/<instance> of the writer.';
comment on column ojs_event.time is 'When the change happened (the transaction time of the writer).';
comment on column ojs_event.subject is 'What the event is about: a job id, worker id, queue name, ...';
comment on column ojs_event.job_id is 'Job the event is about, if any.';
comment on column ojs_event.queue is 'Queue of that job (or the queue the event is about).';
comment on column ojs_event.job_type is 'Type of that job.';
comment on column ojs_event.from_state is 'For the one event that records a job state change: the state before.';
comment on column ojs_event.to_state is 'For the one event that records a job state change: the state after.';
comment on column ojs_event.data is 'Event payload.';

-- Fields every job event carries.
create function ojs_job_event_base(job_id uuid, job_type text, queue text, state ojs_job_state, meta json)
    returns jsonb
    language sql stable parallel safe
    return jsonb_build_object('job_id', job_id, 'job_type', job_type, 'queue', queue, 'state', state)
           || jsonb_strip_nulls(jsonb_build_object('trace_id',
                  coalesce(nullif(meta ->> 'trace_id', ''),
                           nullif(split_part(meta ->> 'traceparent', '-', 2), ''))));

comment on function ojs_job_event_base(uuid, text, text, ojs_job_state, json) is 'job_id, job_type, queue, state and, when meta carries one, trace_id.';

-- Milliseconds between two instants (null when either is).
create function ojs_ms_between(a timestamptz, b timestamptz) returns bigint
    language sql immutable parallel safe
    return round(extract(epoch from (b - a)) * 1000)::bigint;

comment on function ojs_ms_between(timestamptz, timestamptz) is 'Whole milliseconds from a to b.';

-- Why a job was discarded, from what the transition left in the row.
create function ojs_discard_reason(previous ojs_job_state, code text, attempt integer, max_attempts integer,
                                   total_deadline_at timestamptz, discarded_at timestamptz)
    returns text
    language sql immutable parallel safe
    return case
        when code in ('DISCARD', 'FAIL', 'DEAD_LETTER') and previous = 'active' then 'handler_directive'
        when code = 'expired' and total_deadline_at <= discarded_at then 'total_timeout'
        when code = 'expired' then 'expired'
        when code in ('overflow', 'rate_limit_dropped', 'queue_deleted') then code
        when attempt >= greatest(max_attempts, 1) then 'exhausted'
        else 'non_retryable'
    end;

comment on function ojs_discard_reason(ojs_job_state, text, integer, integer, timestamptz, timestamptz) is 'Reason of a job.discarded event: exhausted, non_retryable, handler_directive, expired, total_timeout, overflow, rate_limit_dropped or queue_deleted.';

-- The event that records a job's move into its current state, and its payload (scalar
-- functions, inlined where they are used).
create function ojs_job_event_type(state ojs_job_state) returns text
    language sql immutable parallel safe
    return case state
        when 'available' then 'job.enqueued'
        when 'scheduled' then 'job.scheduled'
        when 'active' then 'job.started'
        when 'completed' then 'job.completed'
        when 'retryable' then 'job.retrying'
        when 'discarded' then 'job.discarded'
        when 'cancelled' then 'job.cancelled'
    end;

comment on function ojs_job_event_type(ojs_job_state) is 'The event type of a move into state (job.enqueued for available, ...); null for pending.';

create function ojs_job_transition_data(prev ojs_job_state, n ojs_job) returns jsonb
    language sql stable parallel safe
    return ojs_job_event_base(n.id, n.type, n.queue, n.state, n.meta) || case n.state
        when 'available' then jsonb_strip_nulls(jsonb_build_object(
            'priority', n.priority, 'scheduled_at', ojs_timestamp_text(n.scheduled_at),
            'unique_key', n.unique_key))
        when 'scheduled' then jsonb_build_object('scheduled_at', ojs_timestamp_text(n.scheduled_at))
        when 'active' then jsonb_strip_nulls(jsonb_build_object(
            'worker_id', n.worker_id, 'attempt', n.attempt))
        when 'completed' then jsonb_strip_nulls(jsonb_build_object(
            'duration_ms', ojs_ms_between(n.started_at, n.completed_at), 'attempt', n.attempt,
            'result', case when octet_length(n.result::text) <= 65536 then n.result::jsonb end))
        when 'retryable' then jsonb_build_object(
            'attempt', n.attempt, 'max_attempts', n.max_attempts,
            'next_retry_at', ojs_timestamp_text(n.next_retry_at),
            'error', jsonb_build_object('code', n.error -> 'code', 'message', n.error -> 'message'))
        when 'discarded' then jsonb_strip_nulls(jsonb_build_object(
            'total_attempts', n.attempt,
            'last_error', case when n.error is not null then
                jsonb_build_object('code', n.error -> 'code', 'message', n.error -> 'message') end,
            'dead_lettered', n.dead_lettered_at is not null,
            'reason', ojs_discard_reason(prev, n.error ->> 'code', n.attempt, n.max_attempts,
                                         n.total_deadline_at, n.discarded_at)))
        when 'cancelled' then jsonb_strip_nulls(jsonb_build_object('previous_state', prev))
        else '{}'::jsonb
    end;

comment on function ojs_job_transition_data(ojs_job_state, ojs_job) is 'Payload of the event that records a move from prev into n.state.';

create function ojs_job_heartbeat_data(n ojs_job) returns jsonb
    language sql stable parallel safe
    return ojs_job_event_base(n.id, n.type, n.queue, n.state, n.meta) || jsonb_build_object(
        'worker_id', n.worker_id, 'attempt', n.attempt,
        'visible_until', ojs_timestamp_text(n.visible_until));

comment on function ojs_job_heartbeat_data(ojs_job) is 'Payload of job.heartbeat: the reservation was extended.';

-- The events of one job row change, in order: `n` is the row after the change, the prev_*
-- arguments what the statement changed (the state before; null for a new job). Every statement
-- that changes jobs writes the events in the same statement:
--
--     with moved as (update ojs_job j ... returning j, <prev values>),
--          events as (insert into ojs_event (...)
--                     select ... from moved m cross join lateral ojs_job_events(..., m.j) e)
--
-- The function is a union of one branch per event kind whose WHERE only reads arguments, so
-- Postgres inlines it and computes the payload of the events that apply only. The event that
-- records the state change itself carries from_state/to_state. Statements whose change can only
-- mean one event (a claim: job.started; an ACK: job.completed; ...) write it directly with the
-- scalar functions above, which is cheaper to start than the union.
create function ojs_job_events(prev ojs_job_state, prev_started_at timestamptz, prev_worker_id text,
                               prev_dead_lettered_at timestamptz, prev_error_count integer,
                               prev_visible_until timestamptz, prev_priority integer, n ojs_job)
    returns table (ord integer, type text, from_state ojs_job_state, to_state ojs_job_state, data jsonb)
    language sql stable parallel safe
begin atomic
    select 10, 'dead_letter.retried', null::ojs_job_state, null::ojs_job_state,
           ojs_job_event_base(n.id, n.type, n.queue, n.state, n.meta)
     where prev = 'discarded' and n.state = 'available' and prev_dead_lettered_at is not null
    union all
    select 20, 'job.failed', null, null,
           ojs_job_event_base(n.id, n.type, n.queue, n.state, n.meta) || jsonb_build_object(
               'attempt', n.attempt,
               'error', jsonb_strip_nulls(jsonb_build_object(
                   'code', n.error -> 'code', 'message', n.error -> 'message',
                   'retryable', n.error -> 'retryable', 'stack_trace', n.error -> 'backtrace')),
               'duration_ms', ojs_ms_between(prev_started_at, now()))
     where prev = 'active' and jsonb_array_length(n.errors) > prev_error_count
    union all
    select 30, 'job.timeout', null, null,
           ojs_job_event_base(n.id, n.type, n.queue, n.state, n.meta) || jsonb_build_object(
               'timeout_kind', 'execution', 'limit_seconds', round(n.timeout_ms / 1000.0, 3),
               'elapsed_seconds', round(extract(epoch from now() - prev_started_at), 3),
               'attempt', n.attempt)
     where prev = 'active' and jsonb_array_length(n.errors) > prev_error_count
       and n.error ->> 'code' = 'timeout'
    union all
    select 31, 'job.timeout', null, null,
           ojs_job_event_base(n.id, n.type, n.queue, n.state, n.meta) || jsonb_build_object(
               'timeout_kind', 'total', 'limit_seconds', n.total_timeout_secs,
               'elapsed_seconds', round(extract(epoch from n.discarded_at - n.created_at), 3),
               'attempt', n.attempt)
     where prev is distinct from n.state and n.state = 'discarded' and n.error ->> 'code' = 'expired'
       and n.total_deadline_at <= n.discarded_at
    union all
    select 40, 'job.stalled', null, null,
           ojs_job_event_base(n.id, n.type, n.queue, n.state, n.meta) || jsonb_strip_nulls(jsonb_build_object(
               'worker_id', prev_worker_id, 'attempt', n.attempt, 'reason', n.error ->> 'code'))
     where prev = 'active' and jsonb_array_length(n.errors) > prev_error_count
       and n.error ->> 'code' in ('visibility_timeout', 'worker_death', 'shutdown')
    union all
    select 50, 'job.expired', null, null,
           ojs_job_event_base(n.id, n.type, n.queue, n.state, n.meta) || jsonb_strip_nulls(jsonb_build_object(
               'created_at', ojs_timestamp_text(n.created_at),
               'expired_at', ojs_timestamp_text(n.discarded_at),
               'ttl_ms', ojs_ms_between(n.created_at,
                                        least(n.expires_at, n.created_at + n.enqueue_ttl_secs * interval '1 second'))))
     where prev is distinct from n.state and n.state = 'discarded' and prev <> 'active'
       and n.error ->> 'code' = 'expired'
       and not coalesce(n.total_deadline_at <= n.discarded_at, false)
    union all
    select 60, ojs_job_event_type(n.state), prev, n.state, ojs_job_transition_data(prev, n)
     where prev is distinct from n.state and n.state <> 'pending'
    union all
    select 70, 'dead_letter.added', null, null,
           ojs_job_event_base(n.id, n.type, n.queue, n.state, n.meta) || jsonb_build_object(
               'last_error', jsonb_build_object('code', n.error -> 'code', 'message', n.error -> 'message'))
     where prev is distinct from n.state and n.state = 'discarded' and n.dead_lettered_at is not null
    union all
    select 80, 'job.heartbeat', null, null, ojs_job_heartbeat_data(n)
     where prev = 'active' and n.state = 'active' and n.visible_until > prev_visible_until
    union all
    select 90, 'priority.changed', null, null,
           ojs_job_event_base(n.id, n.type, n.queue, n.state, n.meta) || jsonb_build_object(
               'previous_priority', prev_priority, 'new_priority', n.priority)
     where n.priority <> prev_priority;
end;

comment on function ojs_job_events(ojs_job_state, timestamptz, text, timestamptz, integer, timestamptz, integer, ojs_job) is
    'The OJS events of one job row change (n after; prev_* what the change replaced), in order. Statements that change jobs insert them into ojs_event in the same statement.';

-- Worker events, row by row (workers change rarely). An upsert fires BEFORE INSERT even when
-- it ends up updating, so inserts are reported AFTER INSERT (only rows actually inserted), and
-- changes BEFORE UPDATE (where the sampled heartbeat can be stamped on the row).
create function ojs_worker_events() returns trigger
    language plpgsql as $$
declare
    was text;
    now_is text;
begin
    if tg_op = 'DELETE' then
        if old.stale_at is null and old.last_heartbeat_at is not null then
            insert into ojs_event (type, subject, data)
            values ('worker.stopped', old.id,
                    jsonb_build_object('worker_id', old.id, 'reason', 'shutdown',
                                       'uptime_ms', ojs_ms_between(coalesce(old.started_at, old.registered_at), now())));
        end if;
        return old;
    end if;

    if tg_op = 'INSERT' and tg_when = 'BEFORE' then
        if new.last_heartbeat_at is not null then
            new.heartbeat_event_at := now();
        end if;
        return new;
    end if;

    if tg_op = 'INSERT' then
        if new.last_heartbeat_at is not null then
            insert into ojs_event (type, subject, data)
            values ('worker.started', new.id,
                    jsonb_strip_nulls(jsonb_build_object('worker_id', new.id, 'queues', to_jsonb(new.queues),
                                                         'concurrency', new.concurrency))),
                   ('worker.heartbeat', new.id,
                    jsonb_strip_nulls(jsonb_build_object('worker_id', new.id, 'queues', to_jsonb(new.queues),
                                                         'active_jobs', 0)));
        end if;
        return null;
    end if;

    -- UPDATE
    if new.last_heartbeat_at is not null
       and (old.last_heartbeat_at is null or (old.stale_at is not null and new.stale_at is null)) then
        insert into ojs_event (type, subject, data)
        values ('worker.started', new.id,
                jsonb_strip_nulls(jsonb_build_object('worker_id', new.id, 'queues', to_jsonb(new.queues),
                                                     'concurrency', new.concurrency)));
    end if;
    if new.stale_at is not null and old.stale_at is null then
        insert into ojs_event (type, subject, data)
        values ('worker.stopped', new.id,
                jsonb_build_object('worker_id', new.id, 'reason', 'error',
                                   'uptime_ms', ojs_ms_between(coalesce(new.started_at, new.registered_at), now())));
    end if;
    was := ojs_worker_effective_state(old.directive, old.state, old.stale_at is not null);
    now_is := ojs_worker_effective_state(new.directive, new.state, new.stale_at is not null);
    if now_is = 'quiet' and was <> 'quiet' then
        insert into ojs_event (type, subject, data)
        values ('worker.quiet', new.id,
                jsonb_build_object('worker_id', new.id,
                                   'active_jobs', (select count(*) from ojs_job j
                                                    where j.worker_id = new.id and j.state = 'active')));
    end if;
    if new.last_heartbeat_at is distinct from old.last_heartbeat_at
       and new.last_heartbeat_at is not null
       and (new.heartbeat_event_at is null or new.heartbeat_event_at <= now() - interval '1 minute') then
        new.heartbeat_event_at := now();
        insert into ojs_event (type, subject, data)
        values ('worker.heartbeat', new.id,
                jsonb_strip_nulls(jsonb_build_object(
                    'worker_id', new.id, 'queues', to_jsonb(new.queues),
                    'active_jobs', (select count(*) from ojs_job j
                                     where j.worker_id = new.id and j.state = 'active'))));
    end if;
    return new;
end;
$$;

comment on function ojs_worker_events() is 'Writes worker.started, worker.quiet, worker.heartbeat (sampled) and worker.stopped events.';

create trigger ojs_worker_events_before before insert or update or delete on ojs_worker
    for each row execute function ojs_worker_events();

create trigger ojs_worker_events_after after insert on ojs_worker
    for each row execute function ojs_worker_events();

---------------------------------------------------------------------------------------------
-- Operator views.
---------------------------------------------------------------------------------------------
create view ojs_worker_status as
    select w.id,
           ojs_worker_effective_state(w.directive, w.state, w.stale_at is not null) as effective_state,
           w.state     as reported_state,
           w.directive,
           w.hostname,
           w.pool,
           w.last_heartbeat_at,
           w.last_seen_at,
           w.stale_at,
           (select count(*) from ojs_job j where j.worker_id = w.id and j.state = 'active') as active_jobs
      from ojs_worker w;

comment on view ojs_worker_status is 'Workers with their effective state and the number of jobs they hold.';
comment on column ojs_worker_status.id is 'Worker id.';
comment on column ojs_worker_status.effective_state is 'running, quiet, terminate, drain or stale.';
comment on column ojs_worker_status.reported_state is 'What the worker last said about itself.';
comment on column ojs_worker_status.directive is 'Server directive for the worker (empty, quiet, terminate).';
comment on column ojs_worker_status.hostname is 'Host the worker reported.';
comment on column ojs_worker_status.pool is 'Pool the worker reported.';
comment on column ojs_worker_status.last_heartbeat_at is 'Last heartbeat or registration.';
comment on column ojs_worker_status.last_seen_at is 'Last contact of any kind.';
comment on column ojs_worker_status.stale_at is 'When it was declared stale, if it was.';
comment on column ojs_worker_status.active_jobs is 'Jobs it holds now.';

create view ojs_job_stuck as
    select id,
           queue,
           type,
           state,
           worker_id,
           attempt,
           max_attempts,
           case when state = 'active' and visible_until < now() then 'reservation expired'
                when state = 'active' and timeout_at < now() then 'execution timeout passed'
                when state = 'active' and total_deadline_at < now() then 'total timeout passed'
                when state = 'scheduled' then 'scheduled time passed, not promoted'
                when state = 'retryable' then 'retry time passed, not promoted'
                else 'deadline passed, not expired'
           end as why,
           coalesce(case when state = 'active' then least(visible_until, timeout_at, total_deadline_at) end,
                    case when state = 'scheduled' then scheduled_at end,
                    case when state = 'retryable' then next_retry_at end,
                    least(expires_at, claim_deadline_at, total_deadline_at)) as due_at
      from ojs_job
     where (state = 'active' and least(visible_until, timeout_at, total_deadline_at) < now() - interval '5 seconds')
        or (state = 'scheduled' and scheduled_at < now() - interval '5 seconds')
        or (state = 'retryable' and next_retry_at < now() - interval '5 seconds')
        or (state in ('scheduled', 'available', 'pending', 'retryable')
            and least(expires_at, claim_deadline_at, total_deadline_at) < now() - interval '5 seconds');

comment on view ojs_job_stuck is 'Jobs a maintenance service should have moved more than 5 seconds ago. Empty while a leader is running; rows here mean no instance leads or maintenance is falling behind.';
comment on column ojs_job_stuck.id is 'Job id.';
comment on column ojs_job_stuck.queue is 'Queue name.';
comment on column ojs_job_stuck.type is 'Job type.';
comment on column ojs_job_stuck.state is 'Current state.';
comment on column ojs_job_stuck.worker_id is 'Worker holding it, for active jobs.';
comment on column ojs_job_stuck.attempt is 'Attempts so far.';
comment on column ojs_job_stuck.max_attempts is 'Attempts allowed.';
comment on column ojs_job_stuck.why is 'Which deadline passed.';
comment on column ojs_job_stuck.due_at is 'When the job should have moved.';
