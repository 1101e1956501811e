-- Per-tenant limits (multi-tenancy extension MT-003/MT-004), set by an operator
-- (`PUT /ojs/v1/admin/tenants/{id}`): how many of a tenant's jobs may run at once, how many it
-- may enqueue per window, and how many may wait. They are kept with the same machinery as the
-- job rate-limit keys (migration V20), and exact across replicas for the same reasons:
--
--   concurrency  A job of a tenant with `max_concurrency` that becomes available is held out
--                of the dispatch indexes (`rate_held = false`, where a key's hold is `true`),
--                and `ojs_tenant_release(tenant)` lets held jobs go, in dispatch order, under
--                the tenant's row lock, as far as the tenant's jobs in flight (released and
--                not yet claimed, or active) leave room. A released job counts as running
--                until a claim takes it, so the limit holds however late a worker claims it
--                and however many replicas claim at once. A released job that also has a
--                rate-limit key then waits for its key (`rate_held = true`) and keeps counting
--                against its tenant meanwhile: the stricter of the two holds.
--                What releases: the enqueue that made the job (once it commits), and every
--                replica's releaser (`broker::rate_limits`), on a notification on channel
--                `ojs_tenant` (payload: the tenant) whenever one of its jobs leaves flight
--                while it holds others back, or becomes available again, and in its sweep
--                over tenants holding jobs.
--   enqueue rate At most `max_enqueue_rate` jobs per `enqueue_period_ms`, a sliding window
--                over the tenant's enqueues, recorded in `ojs_rate_window` under
--                `tenant:<id>` by `ojs_tenant_admit`.
--   depth        At most `max_queue_depth` jobs waiting (scheduled, available, pending or
--                retryable), counted by `ojs_tenant_admit`.
--
-- `ojs_tenant_admit(tenants, jobs)` runs in the enqueue's transaction after its insert: it
-- locks each limited tenant's row (in id order), so concurrent enqueues of one tenant on any
-- replica take turns, and counts in statements of its own, which see the enqueues that
-- committed while it waited. Over a limit it raises SQLSTATE OJ005 with the refusal as JSON,
-- and the transaction (the jobs included) rolls back. The server calls it for tenants whose
-- limits its configuration snapshot holds (a change of limits bumps the configuration
-- generation, which the enqueue statement checks); the SQL door (`ojs_enqueue`) calls it for
-- every tenant it enqueues for.

create table ojs_tenant (
    id                 text not null,
    max_concurrency    integer,
    max_enqueue_rate   integer,
    enqueue_period_ms  bigint,
    max_queue_depth    integer,
    reason             text,
    created_at         timestamptz not null default now(),
    updated_at         timestamptz not null default now(),
    constraint ojs_tenant_pkey primary key (id),
    constraint ojs_tenant_id_format
        check (id ~ '^[a-zA-Z0-9][a-zA-Z0-9._:-]*$' and octet_length(id) <= 255),
    constraint ojs_tenant_limits_valid check (
        (max_concurrency is null or max_concurrency >= 0)
        and ((max_enqueue_rate is null) = (enqueue_period_ms is null))
        and (max_enqueue_rate is null or (max_enqueue_rate >= 1 and enqueue_period_ms >= 1))
        and (max_queue_depth is null or max_queue_depth >= 0)),
    constraint ojs_tenant_reason_length check (reason is null or char_length(reason) <= 1000)
);

-- A tenant's held jobs in the order they are released.
create index ojs_job_tenant_held_idx on ojs_job (tenant, priority, enqueued_at, seq)
    where rate_held = false and state = 'available';
-- A tenant's jobs in flight (released and not claimed, or running), counted against its
-- concurrency.
create index ojs_job_tenant_flight_idx on ojs_job (tenant)
    where tenant <> '' and state in ('available', 'active') and rate_held is not false;

-- Whether a tenant holds jobs back (one probe of ojs_job_tenant_held_idx).
create function ojs_tenant_holds(tenant text) returns boolean
    language sql
    stable
    set search_path from current
return exists (select from ojs_job j
                where j.tenant = ojs_tenant_holds.tenant and j.state = 'available'
                  and j.rate_held = false);

-- A tenant's job changes state: one trigger (a job without a tenant pays one test of its
-- `tenant` column).
--   It becomes available: held (rate_held = false) when its tenant has a concurrency limit —
--   after a key's hold (triggers fire by name, ojs_job_rate_hold_* first), so a keyed job of a
--   limited tenant waits for its tenant first; the releasers are told when it comes back.
--   It leaves flight (finished, failed, cancelled, rescheduled): while the tenant holds jobs
--   back, one of them may go now.
create function ojs_job_tenant_hold() returns trigger
    language plpgsql
    set search_path from current
as $$
begin
    if new.state = 'available' and (tg_op = 'INSERT' or old.state <> 'available') then
        if exists (select from ojs_tenant t where t.id = new.tenant and t.max_concurrency is not null) then
            new.rate_held := false;
            -- An enqueue releases its tenants itself once it commits.
            if tg_op = 'UPDATE' then
                perform pg_notify('ojs_tenant', new.tenant);
            end if;
        end if;
    elsif tg_op = 'UPDATE' and old.state in ('available', 'active') and old.rate_held is not false
          and new.state not in ('available', 'active') and ojs_tenant_holds(old.tenant) then
        perform pg_notify('ojs_tenant', old.tenant);
    end if;
    return new;
end;
$$;

create trigger ojs_job_tenant_hold_insert
    before insert on ojs_job
    for each row
    when (new.tenant <> '' and new.state = 'available')
    execute function ojs_job_tenant_hold();

create trigger ojs_job_tenant_hold_update
    before update of state on ojs_job
    for each row
    when (new.tenant <> ''
          and ((new.state = 'available' and old.state <> 'available')
               or (old.state in ('available', 'active') and new.state not in ('available', 'active'))))
    execute function ojs_job_tenant_hold();

-- A tenant's job in flight deleted (completed by its ACK, purged): while the tenant holds jobs
-- back, one of them may go now.
create function ojs_job_tenant_room() returns trigger
    language plpgsql
    set search_path from current
as $$
begin
    if ojs_tenant_holds(old.tenant) then
        perform pg_notify('ojs_tenant', old.tenant);
    end if;
    return null;
end;
$$;

create trigger ojs_job_tenant_room_delete
    after delete on ojs_job
    for each row
    when (old.tenant <> '' and old.state in ('available', 'active') and old.rate_held is not false)
    execute function ojs_job_tenant_room();

-- Lets a tenant's held jobs go as far as its concurrency allows (all of them when it has no
-- limit any more), under the tenant's row lock, in dispatch order; a released job with a
-- rate-limit key then waits for its key, which is released at once. Returns the queues that
-- gained available jobs, with how many. wake: NOTIFY ojs_job_available for them (an enqueue
-- announces them itself).
create function ojs_tenant_release(p_tenant text, wake boolean default true)
    returns table (released_queue text, released_jobs integer)
    language plpgsql
    set search_path from current
as $$
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
                   and j.state in ('available', 'active') and j.rate_held is not false
                 limit lim + 1) f;
        allow := lim - flight;
    end if;
    if allow <= 0 then
        return;
    end if;
    with r as (
        select j.id from ojs_job j
         where j.tenant = p_tenant and j.state = 'available' and j.rate_held = false
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

-- Admission of an enqueue's jobs by their tenants' enqueue rate and depth (see the top of this
-- file): `tenants` and `jobs` are parallel arrays (each tenant once, with how many jobs it
-- enqueues); called after the insert, in its transaction. Raises SQLSTATE OJ005 (DETAIL: the
-- refusal as JSON: tenant_id, limit, current, maximum, retry_after_ms) past a limit.
create function ojs_tenant_admit(tenants text[], jobs integer[]) returns void
    language plpgsql
    set search_path from current
as $$
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
                       and j.state in ('scheduled', 'available', 'pending', 'retryable')
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

-- What the SQL door runs after its insert: the admission of its jobs' tenants (a refusal
-- raised as PUSH answers it: SQLSTATE OJ429, the OJS error body as DETAIL), and a word to the
-- releasers for tenants whose new jobs are held (they are released once this commits).
create function ojs_tenant_enqueued(jobs ojs_job[]) returns void
    language plpgsql
    set search_path from current
as $$
declare
    held text;
    refusal jsonb;
begin
    begin
        perform ojs_tenant_admit(array_agg(g.tenant), array_agg(g.n))
           from (select j.tenant, count(*)::integer as n from unnest(jobs) j
                  where j.tenant <> '' group by j.tenant) g
         having count(*) > 0;
    exception
        when sqlstate 'OJ005' then
            get stacked diagnostics refusal = pg_exception_detail;
            perform ojs_enqueue_refuse(429, 'TENANT_LIMIT_EXCEEDED',
                format('Tenant ''%s'' has exceeded %s (%s).', refusal ->> 'tenant_id',
                       refusal ->> 'limit', refusal ->> 'maximum'),
                refusal - 'retry_after_ms' || jsonb_build_object('retry_after_seconds',
                    ceil((refusal ->> 'retry_after_ms')::numeric / 1000)),
                true);
    end;
    for held in select distinct j.tenant from unnest(jobs) j
                 where j.tenant <> '' and j.rate_held = false
    loop
        perform pg_notify('ojs_tenant', held);
    end loop;
end;
$$;

-- The SQL door (migration V21) keeps the same limits: its functions run the admission of their
-- jobs' tenants after the insert (restated with that one call added).
create or replace function ojs_enqueue(job json) returns json
    language plpgsql security definer
as $$
declare
    out_jobs ojs_job[] := ojs_enqueue_bodies(array[job], false);
begin
    perform ojs_tenant_enqueued(out_jobs);
    return ('{"job":' || ojs_job_wire(out_jobs[1])::text || '}')::json;
end;
$$;

create or replace function ojs_enqueue_batch(body json) returns json
    language plpgsql security definer
as $$
declare
    s ojs_setting;
    items json;
    n integer;
    out_jobs ojs_job[];
begin
    select * into s from ojs_setting;
    if not found then
        raise exception 'ojs_setting has no row: restore it (insert into ojs_setting default values), then restart an ojs server to write its settings';
    end if;
    if body is null or json_typeof(body) <> 'object' then
        perform ojs_enqueue_refuse_violations(jsonb_build_array(jsonb_build_object('path', '$', 'message',
                format('the body must be a JSON object, got %s', coalesce(ojs_json_article(body), 'null')))), null, 400, 'invalid_request');
    end if;
    select m.value into items from ojs_json_members(body) m where m.key = 'jobs';
    if items is null or json_typeof(items) = 'null' then
        perform ojs_enqueue_refuse_violations(jsonb_build_array(jsonb_build_object('path', '$.jobs', 'message', '''jobs'' is required: an array of job envelopes')), null, 400, 'invalid_request');
    elsif json_typeof(items) <> 'array' then
        perform ojs_enqueue_refuse_violations(jsonb_build_array(jsonb_build_object('path', '$.jobs', 'message', format('''jobs'' must be an array, got %s', ojs_json_article(items)))), null, 400, 'invalid_request');
    end if;
    n := json_array_length(items);
    if n = 0 or n > s.max_batch_jobs then
        perform ojs_enqueue_refuse_violations(jsonb_build_array(jsonb_build_object('path', '$.jobs', 'message', format('''jobs'' must hold 1 to %s jobs, got %s', s.max_batch_jobs, n))), null, 400, 'invalid_request');
    end if;
    out_jobs := ojs_enqueue_bodies(array(select e from json_array_elements(items) with ordinality as x(e, i) order by i), true);
    perform ojs_tenant_enqueued(out_jobs);
    return ('{"jobs":[' || (select string_agg(ojs_job_wire(out_jobs[k])::text, ',' order by k)
                              from generate_subscripts(out_jobs, 1) as k)
            || '],"count":' || cardinality(out_jobs) || '}')::json;
end;
$$;

create or replace function ojs_enqueue_type(type text, args json default '[]', queue text default null,
                                            priority integer default null, scheduled_at timestamptz default null,
                                            meta json default null, options json default null, id uuid default null)
    returns uuid
    language plpgsql security definer
as $$
declare
    out_jobs ojs_job[];
begin
    out_jobs := ojs_enqueue_bodies(array[json_strip_nulls(json_build_object(
        'type', type, 'args', args, 'queue', queue, 'priority', priority,
        'scheduled_at', to_char(scheduled_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'meta', meta, 'options', options, 'id', id))], false);
    perform ojs_tenant_enqueued(out_jobs);
    return out_jobs[1].id;
end;
$$;

-- As V21 set them: a fixed search path, and generic plans.
do $$
declare
    f text;
begin
    foreach f in array array['ojs_enqueue(json)', 'ojs_enqueue_batch(json)',
                             'ojs_enqueue_type(text, json, text, integer, timestamptz, json, json, uuid)']
    loop
        execute format('alter function %s set search_path = %I, pg_temp', f, current_schema());
        execute format('alter function %s set plan_cache_mode = force_generic_plan', f);
    end loop;
end;
$$;

comment on table ojs_tenant is 'Tenants an operator configured (PUT /ojs/v1/admin/tenants/{id}), with their limits; a tenant named only by its jobs has no row. Limits are kept by ojs_tenant_release (concurrency, with the rate-limit keys'' hold) and ojs_tenant_admit (enqueue rate and depth); changes bump ojs_queue_config_generation.';
comment on column ojs_tenant.id is 'The tenant id (meta.tenant_id, X-OJS-Tenant).';
comment on column ojs_tenant.max_concurrency is 'Most of the tenant''s jobs in flight at once (released and not yet claimed, or active), across queues and replicas; 0 holds them all; null: no limit.';
comment on column ojs_tenant.max_enqueue_rate is 'Most jobs the tenant may enqueue within enqueue_period_ms (a sliding window; past it enqueues are refused with 429); null: no limit.';
comment on column ojs_tenant.enqueue_period_ms is 'The enqueue-rate window, in milliseconds.';
comment on column ojs_tenant.max_queue_depth is 'Most of the tenant''s jobs waiting (scheduled, available, pending or retryable); past it enqueues are refused with 429; null: no limit.';
comment on column ojs_tenant.reason is 'Why the limits were last changed, as the operator said.';
comment on column ojs_tenant.created_at is 'When the tenant was first configured.';
comment on column ojs_tenant.updated_at is 'When its limits last changed.';
comment on index ojs_job_tenant_held_idx is 'A tenant''s held jobs (rate_held = false) in release order.';
comment on index ojs_job_tenant_flight_idx is 'A tenant''s jobs in flight (released and not claimed, or active), counted against its max_concurrency.';
comment on function ojs_tenant_holds(text) is 'Whether a tenant holds jobs back (its concurrency limit).';
comment on function ojs_job_tenant_hold() is 'Trigger function: holds (rate_held = false) a job of a tenant with max_concurrency as it becomes available (notifying ojs_tenant when it becomes available again); notifies ojs_tenant when a job in flight of a tenant that holds jobs back leaves flight.';
comment on trigger ojs_job_tenant_hold_insert on ojs_job is 'A job of a tenant with a concurrency limit is enqueued held; the enqueue releases what the tenant allows once it commits.';
comment on trigger ojs_job_tenant_hold_update on ojs_job is 'A job of a tenant with a concurrency limit that becomes available again is held; a tenant''s job leaving flight (finished, failed, rescheduled) frees room for its held jobs.';
comment on function ojs_job_tenant_room() is 'Trigger function: notifies ojs_tenant when a job in flight of a tenant that holds jobs back is deleted.';
comment on trigger ojs_job_tenant_room_delete on ojs_job is 'A tenant''s job in flight deleted (completed by its ACK, purged) frees room for its held jobs.';
comment on function ojs_tenant_release(text, boolean) is 'Releases a tenant''s held jobs as far as its max_concurrency allows (all of them without one), under its row lock, in dispatch order; released jobs with a rate-limit key then wait for their key. Returns the queues that gained jobs; wake: NOTIFY ojs_job_available for them.';
comment on function ojs_tenant_admit(text[], integer[]) is 'Admission of an enqueue (after its insert, in its transaction) by its tenants'' max_enqueue_rate and max_queue_depth, under their row locks in id order; records the enqueues in ojs_rate_window (tenant:<id>); raises OJ005 past a limit.';
comment on function ojs_tenant_enqueued(ojs_job[]) is 'What the SQL door runs after its insert: ojs_tenant_admit for its jobs'' tenants, and NOTIFY ojs_tenant for tenants whose new jobs are held.';
comment on column ojs_rate_window.key is 'Whose starts (or enqueues): queue:<queue name> for a queue''s limit, key:<key> for a job rate-limit key, tenant:<id> for a tenant''s max_enqueue_rate (its enqueues).';
