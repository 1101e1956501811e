-- Job-level rate limits by key (a job's `rate_limit`: key, concurrency, rate, throttle,
-- on_limit).
--
-- A job with a rate-limit key is held back from dispatch until its key allows it to start: it
-- is `available` (that is its state), but with `rate_held` set it is not in the dispatch
-- indexes, so claims never see it and a backlog behind a limited key costs a FETCH nothing.
-- ojs_rate_release(key) lets held jobs go, in dispatch order, as far as the key's limits
-- allow, under the key's row lock:
--
--   concurrency  released-but-unclaimed + active jobs of the key <= concurrency
--   rate         starts within the last period + released-but-unclaimed <= limit
--                (an exact sliding window over job starts: every claim of keyed jobs records
--                its starts in ojs_rate_window under 'key:' || the key, apart from a queue's
--                own limit, which records under queue:<name>)
--   throttle     one job at a time, each released once the previous one started and
--                period/limit has passed since the last start
--
-- A released job counts as started until a claim takes it, so the limits hold however late
-- a worker claims it and however many replicas claim at once. Each claim records its keyed
-- starts in its own statement; releases are serialised per key by the key's row.
--
-- What releases: the enqueue that made the job (once it commits); a notification on channel
-- ojs_rate_key (payload: the key) whenever a keyed job leaves flight while its key holds jobs
-- back, or becomes available again (a retry, a requeue), which every replica's releaser
-- listens for; the releaser's pass over keys whose ojs_rate_key.next_check_at is due (a rate
-- window sliding, a throttle interval, a block from a NACK's rate_limit_until, an override
-- expiring); and its slow sweep over keys holding jobs (an enqueue whose process died before
-- it released).
--
-- Upgrade: this migration adds two columns to ojs_job and ojs_job_done and rebuilds the
-- dispatch indexes (writes to ojs_job wait while the available jobs are indexed anew). The
-- ACK statement of earlier releases names ojs_job's columns: stop every replica of an earlier
-- release before migrating (a rolling upgrade across this migration is not supported).

alter table ojs_job add column rate_key text, add column rate_held boolean;
alter table ojs_job_done add column rate_key text, add column rate_held boolean;

create or replace view ojs_job_all as
select * from ojs_job
union all
select * from ojs_job_done;

-- Dispatch reads only jobs that are not held (V4, V8 rebuilt with `rate_held is null`).
drop index ojs_job_dispatch_idx;
create index ojs_job_dispatch_idx on ojs_job (
    queue,
    (case when priority_aging_ms is null then priority else 0 end),
    (date_part('epoch', enqueued_at - timestamptz '1970-01-01 00:00:00+00') * 1000
     + coalesce(priority * priority_aging_ms, 0)),
    seq)
    where state = 'available' and rate_held is null;
drop index ojs_job_fair_idx;
create index ojs_job_fair_idx on ojs_job (queue, priority, fair_key, seq)
    where state = 'available' and fair_key is not null and rate_held is null;
drop index ojs_job_fair_tenant_idx;
create index ojs_job_fair_tenant_idx on ojs_job (queue, priority, tenant, fair_key)
    where state = 'available' and fair_key is not null and rate_held is null;

-- A key's held jobs in the order they are released.
create index ojs_job_rate_held_idx on ojs_job (rate_key, priority, enqueued_at, seq)
    where state = 'available' and rate_held;
-- A key's jobs in flight: released and not yet claimed, or active.
create index ojs_job_rate_flight_idx on ojs_job (rate_key, state)
    where rate_key is not null and rate_held is null and state in ('available', 'active');

create table ojs_rate_key (
    key                  text not null,
    concurrency          integer,
    rate_limit           integer,
    rate_period_ms       bigint,
    throttle_limit       integer,
    throttle_period_ms   bigint,
    on_limit             text not null default 'wait',
    blocked_until        timestamptz,
    override_concurrency integer,
    override_rate_limit  integer,
    override_rate_period_ms bigint,
    override_throttle_limit integer,
    override_throttle_period_ms bigint,
    override_expires_at  timestamptz,
    limited              text,
    next_check_at        timestamptz,
    created_at           timestamptz not null default now(),
    updated_at           timestamptz not null default now(),
    constraint ojs_rate_key_pkey primary key (key),
    constraint ojs_rate_key_on_limit_known check (on_limit in ('wait', 'reschedule', 'drop')),
    constraint ojs_rate_key_limits_valid check (
        (concurrency is null or concurrency >= 0)
        and (override_concurrency is null or override_concurrency >= 0)
        and ((rate_limit is null) = (rate_period_ms is null)) and (rate_limit is null or (rate_limit >= 1 and rate_period_ms >= 1))
        and ((throttle_limit is null) = (throttle_period_ms is null)) and (throttle_limit is null or (throttle_limit >= 1 and throttle_period_ms >= 1))
        and ((override_rate_limit is null) = (override_rate_period_ms is null))
        and (override_rate_limit is null or (override_rate_limit >= 1 and override_rate_period_ms >= 1))
        and ((override_throttle_limit is null) = (override_throttle_period_ms is null))
        and (override_throttle_limit is null or (override_throttle_limit >= 1 and override_throttle_period_ms >= 1))),
    constraint ojs_rate_key_limited_known check (limited in ('concurrency', 'rate', 'throttle', 'blocked'))
);

-- The releaser's pass: keys whose held jobs time alone may release.
create index ojs_rate_key_check_idx on ojs_rate_key (next_check_at) where next_check_at is not null;

-- The key of a job being enqueued takes the job's policy (the latest enqueued wins). An
-- unchanged policy is only read, so enqueues under one key neither wait for each other nor
-- lock its row.
create function ojs_rate_key_policy(key text, policy json) returns void
    language plpgsql
    set search_path from current
as $$
declare
    c integer := (policy ->> 'concurrency')::integer;
    rl integer := (policy -> 'rate' ->> 'limit')::integer;
    rp bigint := ojs_rate_period_ms(policy -> 'rate' ->> 'period');
    tl integer := (policy -> 'throttle' ->> 'limit')::integer;
    tp bigint := ojs_rate_period_ms(policy -> 'throttle' ->> 'period');
    ol text := coalesce(policy ->> 'on_limit', 'wait');
    k ojs_rate_key;
begin
    select * into k from ojs_rate_key r where r.key = ojs_rate_key_policy.key;
    if found and k.concurrency is not distinct from c and k.rate_limit is not distinct from rl
       and k.rate_period_ms is not distinct from rp and k.throttle_limit is not distinct from tl
       and k.throttle_period_ms is not distinct from tp and k.on_limit = ol then
        return;
    end if;
    insert into ojs_rate_key as r (key, concurrency, rate_limit, rate_period_ms, throttle_limit,
                                   throttle_period_ms, on_limit, next_check_at)
    values (key, c, rl, rp, tl, tp, ol, now())
    on conflict on constraint ojs_rate_key_pkey do update
       set concurrency = excluded.concurrency, rate_limit = excluded.rate_limit,
           rate_period_ms = excluded.rate_period_ms, throttle_limit = excluded.throttle_limit,
           throttle_period_ms = excluded.throttle_period_ms, on_limit = excluded.on_limit,
           next_check_at = now(), updated_at = now();
end;
$$;

-- Milliseconds of an ISO 8601 period as the server writes it (PnDTnHnMn.nS; weeks as days).
create function ojs_rate_period_ms(period text) returns bigint
    language sql
    immutable
    set search_path from current
return (extract(epoch from period::interval) * 1000)::bigint;

-- Whether a key holds jobs back (one probe of ojs_job_rate_held_idx): only then does a job
-- leaving flight need to wake the releasers.
create function ojs_rate_key_holds(key text) returns boolean
    language sql
    stable
    set search_path from current
return exists (select from ojs_job j
                where j.rate_key = ojs_rate_key_holds.key and j.state = 'available' and j.rate_held);

-- Holds a keyed job that becomes available (made so, retried, requeued, retried from the
-- dead-letter queue), and tells the releasers when a keyed job in flight (released, or
-- active) leaves it: its key may have room again. Keyed jobs only: the WHEN clause reads one column.
create function ojs_job_rate_hold() returns trigger
    language plpgsql
    set search_path from current
as $$
begin
    if tg_op = 'INSERT' then
        perform ojs_rate_key_policy(new.rate_key, new.extra -> 'rate_limit');
    elsif new.state = 'available' and old.state <> 'available'
          and not exists (select from ojs_rate_key r where r.key = new.rate_key) then
        -- The key was pruned while the job waited (scheduled, retrying): it comes back with
        -- the job's policy.
        perform ojs_rate_key_policy(new.rate_key, new.extra -> 'rate_limit');
    end if;
    if new.state = 'available' and (tg_op = 'INSERT' or old.state <> 'available') then
        new.rate_held := true;
        -- An enqueue releases its keys itself once it commits (a notification per enqueue
        -- would make concurrent enqueues take turns at commit); a job that becomes available
        -- again tells the releasers.
        if tg_op = 'UPDATE' then
            perform pg_notify('ojs_rate_key', new.rate_key);
        end if;
    elsif tg_op = 'UPDATE' and old.rate_held is null and old.state in ('available', 'active')
          and new.state <> old.state and ojs_rate_key_holds(new.rate_key) then
        -- Leaves flight (finished, failed, cancelled, rescheduled) while the key holds jobs
        -- back: one of them may go now.
        perform pg_notify('ojs_rate_key', new.rate_key);
    end if;
    return new;
end;
$$;

create trigger ojs_job_rate_hold_insert
    before insert on ojs_job
    for each row
    when (new.rate_key is not null)
    execute function ojs_job_rate_hold();

create trigger ojs_job_rate_hold_update
    before update of state on ojs_job
    for each row
    when (new.rate_key is not null)
    execute function ojs_job_rate_hold();

-- A keyed job in flight deleted (completed by an ACK, purged): its key may have room again.
create function ojs_job_rate_gone() returns trigger
    language plpgsql
    set search_path from current
as $$
begin
    if ojs_rate_key_holds(old.rate_key) then
        perform pg_notify('ojs_rate_key', old.rate_key);
    end if;
    return null;
end;
$$;

create trigger ojs_job_rate_gone
    after delete on ojs_job
    for each row
    when (old.rate_key is not null and old.rate_held is null and old.state in ('available', 'active'))
    execute function ojs_job_rate_gone();

-- Lets a key's held jobs go as far as its limits allow (see the top of this file), under the
-- key's row lock, in dispatch order (priority, then time available, then seq); wakes the
-- queues that gained jobs; records when time alone may release more (next_check_at); writes
-- rate_limit.exceeded when the key becomes limited and rate_limit.released when jobs of a
-- limited key are released. Returns the queues it released jobs into, with how many.
create function ojs_rate_release(rate_key text, wake boolean default true)
    returns table (released_queue text, released_jobs integer)
    language plpgsql
    set search_path from current
as $$
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
                         where j.rate_key = k.key and j.rate_held is null and j.state = 'active'
                         limit cap) a),
               (select count(*)
                  from (select from ojs_job j
                         where j.rate_key = k.key and j.rate_held is null and j.state = 'available'
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
             where j.rate_key = k.key and j.state = 'available' and j.rate_held
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
                    where j.rate_key = k.key and j.state = 'available' and j.rate_held)
      into held_left;

    -- on_limit drop: what the key does not let start now is discarded, not dead-lettered.
    if held_left and k.on_limit = 'drop' then
        with doomed as (
            select j.id from ojs_job j
             where j.rate_key = k.key and j.state = 'available' and j.rate_held
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
                        where j.rate_key = k.key and j.state = 'available' and j.rate_held)
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

comment on column ojs_job.rate_key is 'The job''s rate-limit key (its rate_limit.key, or queue:<queue> when it names none); null for a job without a rate_limit.';
comment on column ojs_job.rate_held is 'True while an available keyed job waits for its key to allow it to start (held jobs are not in the dispatch indexes); null otherwise.';
comment on column ojs_job_done.rate_key is 'As ojs_job.rate_key.';
comment on column ojs_job_all.rate_key is 'As ojs_job.rate_key.';
comment on column ojs_job_all.rate_held is 'As ojs_job.rate_held.';
comment on function ojs_rate_key_policy(text, json) is 'The key of a job being enqueued takes the job''s rate_limit policy (from its extra): the latest enqueued wins; an unchanged policy is only read.';
comment on function ojs_rate_period_ms(text) is 'Milliseconds of an ISO 8601 period (PT1S, P1D, PT0.5S).';
comment on column ojs_job_done.rate_held is 'As ojs_job.rate_held (always null once completed).';
comment on index ojs_job_rate_held_idx is 'A key''s held jobs in release order.';
comment on index ojs_job_rate_flight_idx is 'A key''s jobs in flight (released and unclaimed, or active), counted against its concurrency and rate.';

comment on table ojs_rate_key is
    'Rate-limit keys of jobs (their rate_limit policies): the latest policy enqueued under each key, an operator''s temporary override, a block from a NACK, and the releaser''s bookkeeping.';
comment on column ojs_rate_key.key is 'The key, as jobs name it (queue:<queue> for a policy without one).';
comment on column ojs_rate_key.concurrency is 'Most jobs of the key in flight at once (released or active); 0 pauses the key.';
comment on column ojs_rate_key.rate_limit is 'Most job starts of the key within rate_period_ms (a sliding window).';
comment on column ojs_rate_key.rate_period_ms is 'The rate window, in milliseconds.';
comment on column ojs_rate_key.throttle_limit is 'Throttle: starts spaced throttle_period_ms / throttle_limit apart, one at a time.';
comment on column ojs_rate_key.throttle_period_ms is 'The throttle period, in milliseconds.';
comment on column ojs_rate_key.on_limit is 'What an enqueue does with a job its key does not let start at once: wait (held until allowed), reschedule (as wait), drop (discarded, rate_limit_dropped).';
comment on column ojs_rate_key.blocked_until is 'No job of the key starts before this (a NACK''s rate_limit_until).';
comment on column ojs_rate_key.override_concurrency is 'Operator override (PUT /ojs/v1/rate-limits/{key}) until override_expires_at: applies besides the key''s own limits, so the stricter wins.';
comment on column ojs_rate_key.override_rate_limit is 'Override: rate limit.';
comment on column ojs_rate_key.override_rate_period_ms is 'Override: rate window, in milliseconds.';
comment on column ojs_rate_key.override_throttle_limit is 'Override: throttle limit.';
comment on column ojs_rate_key.override_throttle_period_ms is 'Override: throttle period, in milliseconds.';
comment on column ojs_rate_key.override_expires_at is 'When the override lapses; null: until removed.';
comment on column ojs_rate_key.limited is 'The limit holding the key''s jobs back when last released (concurrency, rate, throttle, blocked); null when none were held. Edge for the rate_limit.exceeded and .released events.';
comment on column ojs_rate_key.next_check_at is 'When the releaser should look at the key again (held jobs that time may release); null when nothing is held.';
comment on column ojs_rate_key.created_at is 'When a job or override first named the key.';
comment on column ojs_rate_key.updated_at is 'When its policy last changed.';
comment on function ojs_job_rate_hold() is 'Trigger function: holds a keyed job that becomes available; notifies ojs_rate_key when a keyed job becomes available again or leaves flight.';
comment on trigger ojs_job_rate_hold_insert on ojs_job is 'A keyed job enqueued available is held until its key releases it (the enqueue releases at once what the key allows).';
comment on trigger ojs_job_rate_hold_update on ojs_job is 'A keyed job that becomes available again is held; one that leaves active frees room in its key.';
comment on function ojs_job_rate_gone() is 'Trigger function: notifies ojs_rate_key when a keyed job in flight is deleted.';
comment on trigger ojs_job_rate_gone on ojs_job is 'A keyed job in flight deleted (completed, purged) frees room in its key.';
comment on function ojs_rate_key_holds(text) is 'Whether a rate-limit key holds jobs back.';
comment on function ojs_rate_release(text, boolean) is 'Releases a key''s held jobs as far as its limits (and an unexpired override, and a NACK block) allow, under the key''s row lock; returns the queues that gained jobs, with how many. wake: NOTIFY ojs_job_available for them (an enqueue announces them itself).';
comment on table ojs_rate_window is
    'Job starts under a rate limit: one row per claim and limit (queue:<name> for a queue''s own limit, key:<key> for a job rate-limit key), kept for the longest period that counts them.';
comment on column ojs_rate_window.key is 'Whose starts: queue:<queue name> for a queue''s limit, key:<key> for a job rate-limit key (a key may itself be named queue:<name>).';
