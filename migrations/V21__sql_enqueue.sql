-- Enqueue from SQL, in the caller's own transaction: ojs_enqueue(json), ojs_enqueue_batch(json)
-- and the typed ojs_enqueue_type(...), which take and answer what POST /ojs/v1/jobs and
-- POST /ojs/v1/jobs/batch take and answer.
--
-- One insert core, two doors. The enqueue statement of a batch PUSH (defaults resolved, queue
-- refusals, capacity accounting under the counter row's lock, the job rows, implicit queues,
-- events) moves here as ojs_insert_jobs(...), and the drop_oldest overflow policy as
-- ojs_queue_drop_oldest(...): the server's PUSH calls them, and so does ojs_enqueue. What is written twice is the reading of the envelope (JSON into
-- typed columns, with the same refusals and field paths): in Rust for HTTP and in PL/pgSQL
-- below; tests/integration/sql_enqueue.rs runs one validation corpus through both doors and
-- requires the same answer. Settings that live in the server process reach SQL through
-- ojs_setting, which every server writes when it starts.
--
-- Refusals raise SQLSTATE class OJ: OJ400, OJ409, OJ413, OJ422 and OJ429 carry the HTTP status
-- of the same refusal, the message is the OJS error's message, and DETAIL is the OJS error body
-- ({"error": {code, type, message, retryable, details}}). Nothing an enqueue writes is visible,
-- and no worker is woken (NOTIFY is transactional), until the caller commits; a rollback leaves
-- nothing. v1 refuses (OJ422 unsupported) what it cannot do exactly as PUSH does: unique
-- policies (their key is a fingerprint computed by the server) and embedded workflows. A job
-- with a rate limit is written held, as PUSH writes it; its key's releasers let it go once the
-- caller commits (NOTIFY ojs_rate_key). A full queue drops its oldest jobs (drop_oldest, ojs_queue_drop_oldest below, as
-- PUSH does) or refuses (reject, and block: the caller's transaction does not wait for room).

create table ojs_setting (
    singleton boolean not null default true,
    strict_queues boolean not null default false,
    hyphenated_types boolean not null default false,
    default_timeout_ms bigint not null default 1800000,
    max_priority integer not null default 255,
    priority_aging_ms bigint,
    max_envelope_bytes integer not null default 1048576,
    max_batch_jobs integer not null default 1000,
    updated_at timestamptz not null default now(),
    constraint ojs_setting_pkey primary key (singleton),
    constraint ojs_setting_singleton check (singleton)
);

insert into ojs_setting default values;

comment on table ojs_setting is
    'One row: the enqueue settings of the server process (OJS_STRICT_QUEUES, OJS_ALLOW_HYPHENATED_TYPES, OJS_DEFAULT_TIMEOUT_SECS, OJS_MAX_PRIORITY, OJS_PRIORITY_AGING_INTERVAL, OJS_MAX_ENVELOPE_BYTES, OJS_MAX_BATCH_SIZE), written by every server as it starts, read by ojs_enqueue. Replicas should share one configuration; the last to start wins.';
comment on column ojs_setting.singleton is 'Always true: the table has one row.';
comment on column ojs_setting.strict_queues is 'Whether a queue must exist before its first job (OJS_STRICT_QUEUES).';
comment on column ojs_setting.hyphenated_types is 'Whether job types may contain hyphens (OJS_ALLOW_HYPHENATED_TYPES).';
comment on column ojs_setting.default_timeout_ms is 'Execution timeout of a job that names none and whose queue has no default_timeout, in milliseconds.';
comment on column ojs_setting.max_priority is 'Largest accepted priority (lowest urgency).';
comment on column ojs_setting.priority_aging_ms is 'Priority aging interval given to new jobs, in milliseconds (null: no aging).';
comment on column ojs_setting.max_envelope_bytes is 'Largest accepted job envelope, in bytes (its compact JSON text).';
comment on column ojs_setting.max_batch_jobs is 'Most jobs in one batch enqueue.';
comment on column ojs_setting.updated_at is 'When a server last wrote these settings.';

-- The enqueue statement of the server (store::job::insert_many), unchanged.
create function ojs_insert_jobs(
    p_id uuid[], p_type text[], p_queue text[], p_args text[], p_meta text[],
    p_priority int4[], p_max_attempts int4[], p_retry text[], p_timeout_ms int8[],
    p_visibility_timeout_ms int8[], p_scheduled_abs timestamptz[], p_scheduled_rel_ms int8[],
    p_scheduled_at_input text[], p_expires_abs timestamptz[], p_expires_rel_ms int8[],
    p_expires_at_input text[], p_enqueue_ttl_secs int4[], p_total_timeout_secs int4[],
    p_tags text[], p_schema_uri text[], p_unique_policy text[], p_unique_key text[],
    p_extra text[], p_pending bool[], p_priority_aging_ms int8[], p_strict_queues bool,
    p_config_generation int8, p_handed bool[], p_hand_worker text[],
    p_hand_visibility_ms int8[], p_hand_pool text[], p_default_visibility_timeout_ms int8,
    p_supplied_ids uuid[], p_rate_key text[])
    returns table (inserted_job ojs_job, queues_created bigint)
    language plpgsql
as $$
#variable_conflict use_column
begin
    return query
    with input as (
        select *
          from unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int4[],
                      $7::int4[], $8::text[], $9::int8[], $10::int8[], $11::timestamptz[],
                      $12::int8[], $13::text[], $14::timestamptz[], $15::int8[], $16::text[],
                      $17::int4[], $18::int4[], $19::text[], $20::text[], $21::text[],
                      $22::text[], $23::text[], $24::bool[], $25::int8[], $28::bool[],
                      $29::text[], $30::int8[], $31::text[], $34::text[])
               with ordinality
            as t(id, type, queue, args, meta, priority, max_attempts, retry, timeout_ms,
                 visibility_timeout_ms, scheduled_abs, scheduled_rel_ms, scheduled_at_input,
                 expires_abs, expires_rel_ms, expires_at_input, enqueue_ttl_secs,
                 total_timeout_secs, tags, schema_uri, unique_policy, unique_key, extra,
                 pending, priority_aging_ms, handed, hand_worker, hand_visibility_ms,
                 hand_pool, rate_key, ord)
         -- The hand-off columns are shorter when few or no jobs are handed off: unnest pads
         -- them with nulls.
         where id is not null
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
        -- A client-supplied id a completed job holds (ojs_job_done, migration V15) is taken
        -- as a live job's would be (its primary key): the same violation.
        union all
        select ojs_job_id_taken(d.id)
          from ojs_job_done d
         where d.id = any($33::uuid[])
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
                    -- Handed to a waiting FETCH when its claim would take the job now
                    -- (false, not null, for a job not handed off: so nothing after the
                    -- first test is evaluated for it). A keyed job waits for its key
                    -- (migration V20) and is never handed off.
                    when coalesce(i.handed, false) and i.rate_key is null
                         and (r.expires_at is null or r.expires_at > now())
                         and not exists (select 1 from ojs_queue q
                                          where q.name = i.queue and q.state = 'paused')
                         and not exists (select 1 from ojs_fair_queue f where f.queue = i.queue)
                         and not exists (select 1 from ojs_worker w
                                          where w.id = i.hand_worker
                                            and (w.directive <> '' or w.state <> 'running'))
                         then 'active'
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
                total_deadline_at, priority_aging_ms, capacity_tracked, tenant_fair,
                attempt, started_at, worker_id, reservation_ms, visible_until, timeout_at,
                pool, rate_key)
        select id, type, queue, args::json, meta::json, priority, state, max_attempts,
               retry::json, timeout_ms, visibility_timeout_ms, scheduled_at, scheduled_at_input,
               expires_at, expires_at_input, enqueue_ttl_secs, total_timeout_secs,
               case when tags is not null
                    then array(select json_array_elements_text(tags::json)) end,
               schema_uri, unique_policy::json, unique_key, extra::json,
               case when state in ('available', 'active') then now() end,
               case when state <> 'active' then now() + enqueue_ttl_secs * interval '1 second' end,
               now() + total_timeout_secs * interval '1 second',
               priority_aging_ms,
               queue in (select queue from capacity),
               queue in (select queue from ojs_fair_queue),
               -- What a claim writes (store::job::claim_shared).
               case when state = 'active' then 1 else 0 end,
               case when state = 'active' then now() end,
               case when state = 'active' then hand_worker end,
               case when state = 'active' then coalesce(hand_visibility_ms, visibility_timeout_ms, $32) end,
               case when state = 'active'
                    then now() + coalesce(hand_visibility_ms, visibility_timeout_ms, $32) * interval '1 millisecond' end,
               case when state = 'active' then now() + timeout_ms * interval '1 millisecond' end,
               case when state = 'active' then hand_pool end,
               rate_key
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
    -- One event row per queue, job type and event type (migration V10): the server
    -- renders each job's event from it. A job handed to a FETCH was enqueued, then
    -- started: its `job.started` rows (as a claim writes them) follow every enqueue row.
    events as (
        insert into ojs_event (type, queue, job_type, from_state, to_state, worker_id,
                               job_ids, trace_ids, priorities, unique_keys, scheduled_ats,
                               attempts)
        select x.type, x.queue, x.job_type, x.from_state, x.to_state, x.worker_id, x.job_ids,
               x.trace_ids, x.priorities, x.unique_keys, x.scheduled_ats, x.attempts
          from (select case e.state when 'available' then 'job.enqueued' else 'job.scheduled' end as type,
                       e.queue, e.type as job_type, null::ojs_job_state as from_state,
                       e.state as to_state, null::text as worker_id,
                       array_agg(e.id) as job_ids,
                       array_agg(e.trace_id) as trace_ids,
                       array_agg(e.priority) as priorities,
                       array_agg(e.unique_key) as unique_keys,
                       array_agg(e.scheduled_at) as scheduled_ats,
                       null::int4[] as attempts, 0 as phase, min(e.seq) as first
                  from (select (i.job).id, (i.job).seq, i.queue, (i.job).type,
                               case when i.state = 'active' then 'available' else i.state end as state,
                               coalesce(nullif((i.job).meta ->> 'trace_id', ''), nullif(split_part((i.job).meta ->> 'traceparent', '-', 2), '')) as trace_id,
                               case when i.state <> 'scheduled' then (i.job).priority end as priority,
                               case when i.state <> 'scheduled' then (i.job).unique_key end as unique_key,
                               (i.job).scheduled_at,
                               (row_number() over (partition by i.queue, (i.job).type,
                                                                i.state = 'scheduled'
                                                   order by (i.job).seq) - 1) / 16384 as block
                          from inserted i
                         -- Reading queue_events first writes a new queue's `queue.created`
                         -- before the events of its first jobs.
                         where i.state <> 'pending' and (select count(*) from queue_events) >= 0
                         -- The arrays list the jobs in seq order because the rows come
                         -- sorted: one sort here instead of one per array.
                         order by queue, type, state, block, seq) e
                 group by e.queue, e.type, e.state, e.block
                union all
                select 'job.started', e.queue, e.type, 'available'::ojs_job_state,
                       'active'::ojs_job_state, e.worker_id, array_agg(e.id),
                       array_agg(e.trace_id), null, null, null,
                       array_agg(e.attempt), 1, min(e.seq)
                  from (select (i.job).id, (i.job).seq, i.queue, (i.job).type,
                               (i.job).worker_id, (i.job).attempt,
                               coalesce(nullif((i.job).meta ->> 'trace_id', ''), nullif(split_part((i.job).meta ->> 'traceparent', '-', 2), '')) as trace_id,
                               (row_number() over (partition by i.queue, (i.job).type, (i.job).worker_id
                                                   order by (i.job).seq) - 1) / 16384 as block
                          from inserted i
                         where i.state = 'active'
                         order by queue, type, worker_id, block, seq) e
                 group by e.queue, e.type, e.worker_id, e.block) x
         order by x.phase, x.first
    )
    select i.job, (select count(*) from queue_events)
      from inserted i;
end;
$$;

comment on function ojs_insert_jobs(uuid[], text[], text[], text[], text[], int4[], int4[], text[], int8[], int8[], timestamptz[], int8[], text[], timestamptz[], int8[], text[], int4[], int4[], text[], text[], text[], text[], text[], bool[], int8[], bool, int8, bool[], text[], int8[], text[], int8, uuid[], text[]) is
    'The insert core of every enqueue: writes validated jobs (one array element per job, in order) with their defaults resolved, in one statement: queue refusals (OJ001 draining, OJ002 unknown under strict queues, OJ004 stale configuration, a taken id), capacity accounting (OJ003 past a bound), the initial state by the database clock (or active for a waiting FETCH named by the hand-off arrays), implicit queues and the enqueue events. Returns each job and how many queues it created. Called by the server''s PUSH and by ojs_enqueue; nothing is notified here.';

-- The drop_oldest overflow policy (the server's store::queue::drop_oldest, unchanged): for a
-- drop_oldest queue about to receive p_jobs new jobs of p_bytes bytes, locks its capacity row,
-- then discards its oldest waiting jobs (error overflow, not dead-lettered; job.discarded,
-- queue.overflow and backpressure.dropped events) until the new jobs fit or none is left.
create function ojs_queue_drop_oldest(p_queue text, p_jobs bigint, p_bytes bigint)
    returns table (dropped_queue text, dropped_type text)
    language plpgsql
as $$
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
           and j.state in ('scheduled', 'available', 'pending', 'retryable')
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
$$;

comment on function ojs_queue_drop_oldest(text, bigint, bigint) is
    'The drop_oldest overflow policy: for a drop_oldest queue about to receive p_jobs jobs of p_bytes bytes, locks its capacity row and discards its oldest waiting jobs (error overflow; job.discarded, queue.overflow, backpressure.dropped events) until they fit or none is left. Returns each dropped job''s queue and type; nothing for a queue of another policy. Called by the server''s PUSH and by ojs_enqueue, then the enqueue is tried again.';

-- ---------------------------------------------------------------------------------------------
-- Reading an envelope: the PL/pgSQL twin of the server's src/job/envelope.rs, src/job/retry.rs,
-- src/wire/duration.rs and src/wire/timestamp.rs (same rules, refusals and field paths; the
-- differential test holds them together).
-- ---------------------------------------------------------------------------------------------

-- A validated job, as ojs_insert_jobs takes it.
create type ojs_new_job as (
    id uuid,
    id_supplied boolean,
    type text,
    queue text,
    args text,
    meta text,
    priority integer,
    priority_aging_ms bigint,
    timeout_ms bigint,
    timeout_explicit boolean,
    visibility_timeout_ms bigint,
    scheduled_abs timestamptz,
    scheduled_rel_ms bigint,
    scheduled_text text,
    expires_abs timestamptz,
    expires_rel_ms bigint,
    expires_text text,
    pending boolean,
    max_attempts integer,
    retry text,
    retry_input text,
    tags text,
    schema_uri text,
    enqueue_ttl_secs integer,
    total_timeout_secs integer,
    extra text,
    rate_key text
);

comment on type ojs_new_job is
    'A job envelope read and validated by ojs_envelope_read: the typed values ojs_insert_jobs writes (retry is the stored effective policy, {} for the default; retry_input the client''s own retry object, layered over a queue''s default_retry).';

-- How the server names a JSON value's kind in messages.
create function ojs_json_article(v json) returns text
    language sql immutable
as $$
    select case json_typeof(v)
               when 'object' then 'an object' when 'array' then 'an array'
               when 'string' then 'a string' when 'number' then 'a number'
               when 'boolean' then 'a boolean' else 'null' end
$$;

-- A JSON number that denotes an integer (2, 2.0, 2e0) and that a double holds exactly when it is
-- not written as a plain integer; null for anything else.
create function ojs_json_integer(v json) returns bigint
    language plpgsql immutable
as $$
declare
    t text;
    f float8;
begin
    if v is null or json_typeof(v) <> 'number' then
        return null;
    end if;
    t := v #>> '{}';
    if t ~ '^-?[0-9]{1,19}$' and t::numeric between -9223372036854775808 and 9223372036854775807 then
        return t::bigint;
    end if;
    begin
        f := t::float8;
    exception when others then
        return null;
    end;
    if f = trunc(f) and abs(f) <= 9007199254740992 then
        return f::bigint;
    end if;
    return null;
end;
$$;

-- The members of a JSON object in document order, a repeated key at its first position with
-- its last value (as the server reads objects).
create function ojs_json_members(obj json) returns table (key text, value json, pos bigint)
    language sql immutable
as $$
    select e.key, (array_agg(e.value order by e.ord desc))[1], min(e.ord)
      from json_each(obj) with ordinality as e(key, value, ord)
     group by e.key
$$;

-- A JSON object's members written compactly, in order.
create function ojs_json_object_text(members json[], keys text[]) returns text
    language sql immutable
as $$
    select '{' || coalesce(string_agg(to_json(k)::text || ':' || v::text, ',' order by i), '') || '}'
      from unnest(keys, members) with ordinality as m(k, v, i)
$$;

-- `whole.fraction` of a unit, in whole milliseconds, digit by digit as the server scales it.
create function ojs_duration_scaled(whole numeric, fraction text, unit_ms bigint) returns numeric
    language plpgsql immutable
as $$
declare
    scale bigint := unit_ms;
    frac numeric := 0;
    d text;
begin
    foreach d in array regexp_split_to_array(left(coalesce(fraction, ''), 12), '')
    loop
        continue when d = '';
        scale := scale / 10;
        frac := frac + d::int * scale;
    end loop;
    return whole * unit_ms + frac;
end;
$$;

-- The `<digits>[.<digits>]<letters>` components of a duration, scanned as the server scans them,
-- or the problem with them.
create function ojs_duration_components(s text, out comps jsonb, out problem text)
    language plpgsql immutable
as $$
declare
    i integer := 1;
    n integer := length(s);
    start integer;
    frac_start integer;
    unit_start integer;
    whole text;
    frac text;
begin
    comps := '[]';
    while i <= n loop
        start := i;
        while i <= n and substr(s, i, 1) between '0' and '9' loop
            i := i + 1;
        end loop;
        if i = start then
            problem := format('expected a number at %s', to_json(substr(s, start)));
            return;
        end if;
        whole := substr(s, start, i - start);
        if length(ltrim(whole, '0')) > 20 or whole::numeric > 18446744073709551615 then
            problem := format('number %s is too large', to_json(whole));
            return;
        end if;
        frac := '';
        if i <= n and substr(s, i, 1) in ('.', ',') then
            i := i + 1;
            frac_start := i;
            while i <= n and substr(s, i, 1) between '0' and '9' loop
                i := i + 1;
            end loop;
            if i = frac_start then
                problem := 'a decimal point must be followed by digits';
                return;
            end if;
            frac := substr(s, frac_start, i - frac_start);
        end if;
        unit_start := i;
        while i <= n and substr(s, i, 1) ~ '^[A-Za-z]$' loop
            i := i + 1;
        end loop;
        if i = unit_start then
            problem := format('missing unit after %s', to_json(substr(s, start, i - start)));
            return;
        end if;
        comps := comps || jsonb_build_object('whole', whole, 'fraction', frac,
                                             'unit', substr(s, unit_start, i - unit_start));
    end loop;
end;
$$;

-- An OJS duration (ISO 8601 with weeks, days, hours, minutes and seconds, or the short form
-- 1h30m / 500ms / 7d) in milliseconds, or the problem with it, worded as the server words it.
create function ojs_duration_ms(input text, out ms bigint, out problem text)
    language plpgsql immutable
as $$
declare
    s text := btrim(input, E' \t\n\r\f\v');
    rest text;
    parts text[];
    k integer;
    scan record;
    c jsonb;
    total numeric := 0;
    part numeric;
    unit text;
    seen text[] := '{}';
    unit_ms bigint;
    rank integer;
    last_rank integer;
begin
    if s = '' then
        problem := 'empty duration';
        return;
    end if;
    if left(s, 1) in ('P', 'p') then
        rest := upper(substr(s, 2));
        if position('T' in rest) > 0 then
            parts := array[substr(rest, 1, position('T' in rest) - 1),
                           substr(rest, position('T' in rest) + 1)];
            if parts[2] = '' then
                problem := '''T'' must be followed by hours, minutes or seconds';
                return;
            end if;
        else
            parts := array[rest, ''];
            if rest = '' then
                problem := 'an ISO 8601 duration needs at least one component';
                return;
            end if;
        end if;
        -- Date designators in the order W, D; time designators in the order H, M, S.
        for k in 1 .. 2 loop
            scan := ojs_duration_components(parts[k]);
            if scan.problem is not null then
                problem := scan.problem;
                return;
            end if;
            last_rank := 0;
            for c in select value from jsonb_array_elements(scan.comps)
            loop
                unit := c ->> 'unit';
                if k = 1 then
                    rank := case unit when 'W' then 1 when 'D' then 2 end;
                    unit_ms := case unit when 'W' then 604800000 when 'D' then 86400000 end;
                    if unit in ('Y', 'M') then
                        problem := 'years and months are not allowed in durations (their length is ambiguous); use weeks or days';
                        return;
                    elsif rank is null then
                        problem := format('unknown date designator %s', to_json(unit));
                        return;
                    elsif rank <= last_rank then
                        problem := 'designators must appear once each, in the order W, D';
                        return;
                    end if;
                else
                    rank := case unit when 'H' then 1 when 'M' then 2 when 'S' then 3 end;
                    unit_ms := case unit when 'H' then 3600000 when 'M' then 60000 when 'S' then 1000 end;
                    if rank is null then
                        problem := format('unknown time designator %s', to_json(unit));
                        return;
                    elsif rank <= last_rank then
                        problem := 'designators must appear once each, in the order H, M, S';
                        return;
                    end if;
                end if;
                if c ->> 'fraction' <> '' and unit <> 'S' then
                    problem := 'only seconds may have a fraction';
                    return;
                end if;
                last_rank := rank;
                part := ojs_duration_scaled((c ->> 'whole')::numeric, c ->> 'fraction', unit_ms);
                if part > 18446744073709551615 or total + part > 18446744073709551615 then
                    problem := 'duration is too large';
                    return;
                end if;
                total := total + part;
            end loop;
        end loop;
    else
        scan := ojs_duration_components(s);
        if scan.problem is not null then
            problem := scan.problem;
            return;
        end if;
        for c in select value from jsonb_array_elements(scan.comps)
        loop
            unit := lower(c ->> 'unit');
            unit_ms := case unit when 'ms' then 1 when 's' then 1000 when 'm' then 60000
                                 when 'h' then 3600000 when 'd' then 86400000 end;
            if unit_ms is null then
                problem := format('unknown unit %s (use ms, s, m, h or d, or an ISO 8601 duration such as PT5M)', to_json(unit));
                return;
            end if;
            if unit = any(seen) then
                problem := format('unit %s appears twice', to_json(unit));
                return;
            end if;
            seen := seen || unit;
            part := ojs_duration_scaled((c ->> 'whole')::numeric, c ->> 'fraction', unit_ms);
            if part > 18446744073709551615 or total + part > 18446744073709551615 then
                problem := 'duration is too large';
                return;
            end if;
            total := total + part;
        end loop;
    end if;
    if total > 3153600000000 then
        problem := format('duration %s is longer than 100 years', to_json(input));
        return;
    end if;
    ms := total;
end;
$$;

-- An ISO 8601 duration of `ms` milliseconds, as the server writes durations (PT1S, PT0.5S, P7D).
create function ojs_duration_iso(ms bigint) returns text
    language sql immutable
as $$
    select case when ms = 0 then 'PT0S' else
           'P' || case when ms / 86400000 > 0 then (ms / 86400000)::text || 'D' else '' end
               || case when ms % 86400000 > 0 then
                      'T' || case when ms % 86400000 / 3600000 > 0 then (ms % 86400000 / 3600000)::text || 'H' else '' end
                          || case when ms % 3600000 / 60000 > 0 then (ms % 3600000 / 60000)::text || 'M' else '' end
                          || case when ms % 60000 > 0 then
                                 (ms % 60000 / 1000)::text
                                 || case when ms % 1000 = 0 then ''
                                         else '.' || rtrim(lpad((ms % 1000)::text, 3, '0'), '0') end
                                 || 'S'
                             else '' end
                  else '' end
           end
$$;

-- A rate period (second, minute, hour, day, or a positive duration) in milliseconds; null if none.
create function ojs_rate_period_read(v json) returns bigint
    language sql immutable
as $$
    select case when json_typeof(v) <> 'string' then null
                when v #>> '{}' = 'second' then 1000
                when v #>> '{}' = 'minute' then 60000
                when v #>> '{}' = 'hour' then 3600000
                when v #>> '{}' = 'day' then 86400000
                else nullif((ojs_duration_ms(v #>> '{}')).ms, 0) end
$$;

-- A rate limit's count (an integer from 1 to 2^31 - 1); null if it is not one.
create function ojs_rate_limit_read(v json) returns integer
    language sql immutable
as $$
    select case when n between 1 and 2147483647 then n::integer end
      from (select ojs_json_integer(v) as n) x
$$;

-- A rate window {"limit": N, "period": P} at `path`, as canonical JSON ({"limit","period"}),
-- or its violations appended.
create function ojs_rate_window_read(raw json, path text, inout violations jsonb, out canonical text)
    language plpgsql immutable
as $$
declare
    obj json;
    lim integer;
    period bigint;
    before integer := jsonb_array_length(violations);
    m record;
begin
    if json_typeof(raw) <> 'object' then
        violations := violations || jsonb_build_object('path', path,
            'message', 'must be an object {"limit": N, "period": "PT1S"}');
        return;
    end if;
    select coalesce(json_object_agg(x.key, x.value order by x.pos), '{}') into obj from ojs_json_members(raw) x;
    lim := ojs_rate_limit_read(ojs_json_present(obj -> 'limit'));
    if lim is null then
        violations := violations || jsonb_build_object('path', path || '.limit',
            'message', '''limit'' must be an integer >= 1');
    end if;
    period := ojs_rate_period_read(ojs_json_present(obj -> 'period'));
    if period is null then
        violations := violations || jsonb_build_object('path', path || '.period',
            'message', '''period'' must be second, minute, hour, day or a positive duration');
    end if;
    for m in select x.key from ojs_json_members(raw) x where x.key not in ('limit', 'period') order by x.pos
    loop
        violations := violations || jsonb_build_object('path', path || '.' || m.key,
            'message', format('unknown field ''%s'' (limit, period)', m.key));
    end loop;
    if jsonb_array_length(violations) = before then
        canonical := format('{"limit":%s,"period":"%s"}', lim, ojs_duration_iso(period));
    end if;
end;
$$;

-- A job's rate_limit at `path` (the PL/pgSQL twin of the server's rate_limit::parse): its key
-- (queue:<queue> when it names none) and its canonical form, as a job shows it, or its
-- violations.
create function ojs_rate_policy_read(raw json, path text, queue text, out rate_key text,
                                     out canonical text, out violations jsonb)
    language plpgsql immutable
as $$
declare
    obj json;
    numeric_rate boolean;
    m record;
    at text;
    n bigint;
    wc text;
    key text;
    concurrency integer;
    rate text;
    throttle text;
    on_limit text := 'wait';
    lim integer;
    period bigint;
begin
    violations := '[]';
    if json_typeof(raw) <> 'object' then
        violations := jsonb_build_array(jsonb_build_object('path', path,
            'message', format('''rate_limit'' must be an object, got %s', ojs_json_article(raw))));
        return;
    end if;
    select coalesce(json_object_agg(x.key, x.value order by x.pos), '{}') into obj from ojs_json_members(raw) x;
    numeric_rate := json_typeof(obj -> 'rate') = 'number';
    for m in select x.key, x.value from ojs_json_members(raw) x order by x.pos
    loop
        at := path || '.' || m.key;
        if m.key = 'key' then
            if json_typeof(m.value) = 'string' and octet_length(m.value #>> '{}') <= 255
               and m.value #>> '{}' ~ '^[A-Za-z0-9][A-Za-z0-9._:-]*$' then
                key := m.value #>> '{}';
            else
                violations := violations || jsonb_build_object('path', at,
                    'message', '''key'' must be 1 to 255 letters, digits and . _ : - (starting with a letter or digit)');
            end if;
        elsif m.key = 'concurrency' then
            n := ojs_json_integer(m.value);
            if n between 0 and 2147483647 then
                concurrency := n;
            else
                violations := violations || jsonb_build_object('path', at,
                    'message', '''concurrency'' must be an integer >= 0 (0 pauses the key)');
            end if;
        elsif m.key = 'rate' and numeric_rate then
            lim := ojs_rate_limit_read(m.value);
            period := ojs_rate_period_read(ojs_json_present(obj -> 'period'));
            if lim is null then
                violations := violations || jsonb_build_object('path', at, 'message', '''rate'' must be an integer >= 1');
            elsif period is null then
                violations := violations || jsonb_build_object('path', path || '.period',
                    'message', '''period'' must be second, minute, hour, day or a positive duration');
            else
                rate := format('{"limit":%s,"period":"%s"}', lim, ojs_duration_iso(period));
            end if;
        elsif m.key = 'period' and numeric_rate then
            null;
        elsif m.key in ('rate', 'throttle') then
            select x.violations, x.canonical into violations, wc from ojs_rate_window_read(m.value, at, violations) x;
            if m.key = 'rate' then
                rate := coalesce(wc, rate);
            else
                throttle := coalesce(wc, throttle);
            end if;
        elsif m.key = 'max_per_second' then
            lim := ojs_rate_limit_read(m.value);
            if lim is not null and ojs_json_present(obj -> 'throttle') is not null then
                violations := violations || jsonb_build_object('path', at,
                    'message', '''max_per_second'' is a throttle: give it or ''throttle'', not both');
            elsif lim is not null then
                throttle := format('{"limit":%s,"period":"PT1S"}', lim);
            else
                violations := violations || jsonb_build_object('path', at,
                    'message', '''max_per_second'' must be an integer >= 1');
            end if;
        elsif m.key = 'on_limit' then
            if json_typeof(m.value) = 'string' and m.value #>> '{}' in ('wait', 'reschedule', 'drop') then
                on_limit := m.value #>> '{}';
            else
                violations := violations || jsonb_build_object('path', at,
                    'message', '''on_limit'' must be one of wait, reschedule, drop');
            end if;
        else
            violations := violations || jsonb_build_object('path', at,
                'message', format('unknown rate_limit field ''%s'' (key, concurrency, rate, throttle, max_per_second, on_limit)', m.key));
        end if;
    end loop;
    if violations = '[]' and key is null and concurrency is null and rate is null and throttle is null then
        violations := jsonb_build_array(jsonb_build_object('path', path,
            'message', 'a rate_limit needs a key or a limit (concurrency, rate, throttle, max_per_second)'));
    end if;
    if violations <> '[]' then
        return;
    end if;
    rate_key := coalesce(key, 'queue:' || queue);
    -- The server writes the policy's members in name order.
    canonical := '{' || concat_ws(',',
        '"concurrency":' || concurrency,
        '"key":' || to_json(rate_key)::text,
        '"on_limit":"' || on_limit || '"',
        '"rate":' || rate,
        '"throttle":' || throttle) || '}';
end;
$$;

-- A JSON value, or SQL null for JSON null (an attribute given as null is absent).
create function ojs_json_present(v json) returns json
    language sql immutable
as $$
    select case when json_typeof(v) <> 'null' then v end
$$;

-- A client timestamp: RFC 3339 with a zone (kept as written), or `+<duration>` from now.
create function ojs_client_time(input text, out at_abs timestamptz, out rel_ms bigint, out problem text)
    language plpgsql stable
as $$
declare
    m text[];
    d record;
    bad text := format('%s is not an RFC 3339 timestamp with a time zone (e.g. 2026-03-15T09:30:00Z or +PT30S)', to_json(input));
begin
    if left(input, 1) = '+' then
        d := ojs_duration_ms(substr(input, 2));
        if d.problem is not null then
            problem := format('invalid relative time %s: %s', to_json(input), d.problem);
        else
            rel_ms := d.ms;
        end if;
        return;
    end if;
    m := regexp_match(input, '^([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$');
    if m is null or m[4]::int > 23 or m[5]::int > 59 or m[6]::int > 60
       or (upper(m[8]) <> 'Z' and (substr(m[8], 2, 2)::int > 23 or substr(m[8], 5, 2)::int > 59)) then
        problem := bad;
        return;
    end if;
    begin
        -- Year 0000 is 1 BC to Postgres.
        at_abs := (case when m[1] = '0000' then '0001' else m[1] end || '-' || m[2] || '-' || m[3]
                   || ' ' || m[4] || ':' || m[5] || ':' || m[6] || coalesce(m[7], '')
                   || case when upper(m[8]) = 'Z' then '+00:00' else m[8] end
                   || case when m[1] = '0000' then ' BC' else '' end)::timestamptz;
    exception when others then
        problem := bad;
        return;
    end;
    if extract(year from at_abs at time zone 'UTC') not between 1 and 9999 then
        at_abs := null;
        problem := format('%s is outside the years 0001-9999', to_json(input));
    end if;
end;
$$;

-- An envelope's timestamp attribute (null: absent): ojs_client_time of a string, and the text
-- to echo for an absolute one; a value that is not a string is a problem.
create function ojs_envelope_time(v json, out at_abs timestamptz, out rel_ms bigint, out input text,
                                  out problem text)
    language plpgsql stable
as $$
declare
    t record;
begin
    if v is null then
        return;
    elsif json_typeof(v) <> 'string' then
        problem := 'expected an RFC 3339 timestamp string with a time zone (or +<duration>)';
        return;
    end if;
    t := ojs_client_time(v #>> '{}');
    at_abs := t.at_abs;
    rel_ms := t.rel_ms;
    problem := t.problem;
    input := case when t.at_abs is not null then v #>> '{}' end;
end;
$$;

-- An envelope's whole number of seconds `name` at `path` (null: absent); a value that is not a
-- positive 32-bit integer is appended to `violations`.
create function ojs_envelope_seconds(v json, path text, name text, inout violations jsonb,
                                     out secs integer)
    language plpgsql immutable
as $$
declare
    n bigint := ojs_json_integer(v);
begin
    if v is null then
        return;
    elsif n > 0 and n <= 2147483647 then
        secs := n;
    else
        violations := violations || jsonb_build_object('path', path,
            'message', name || ' must be a positive integer number of seconds');
    end if;
end;
$$;

-- A priority: an integer 0..max or a conventional name; `outcome` is ok, range (an integer out of
-- range, `value` holding it) or invalid.
create function ojs_priority_read(v json, max_priority integer, out value bigint, out outcome text)
    language plpgsql immutable
as $$
begin
    if json_typeof(v) = 'string' then
        value := case lower(v #>> '{}') when 'critical' then 0 when 'high' then 1 when 'normal' then 2
                                        when 'low' then 3 when 'bulk' then 4 end;
    elsif json_typeof(v) = 'number' then
        value := ojs_json_integer(v);
    end if;
    outcome := case when value is null then 'invalid'
                    when value < 0 or value > max_priority then 'range'
                    else 'ok' end;
end;
$$;

-- A positive interval `name` (a duration string) or `name_ms` (whole milliseconds) of a retry
-- object; problems are appended to `violations` ({path, message} objects).
create function ojs_retry_interval(obj json, name text, path text, inout violations jsonb, out ms bigint)
    language plpgsql immutable
as $$
declare
    key text;
    v json;
    found_key text;
    parsed bigint;
    problem text;
    d record;
begin
    foreach key in array array[name, name || '_ms']
    loop
        v := obj -> key;
        continue when v is null or json_typeof(v) = 'null';
        problem := null;
        parsed := null;
        if key = name then
            if json_typeof(v) = 'string' then
                d := ojs_duration_ms(v #>> '{}');
                parsed := d.ms;
                problem := d.problem;
            else
                problem := format('expected a duration string such as "PT1S", got %s', ojs_json_article(v));
            end if;
        else
            parsed := ojs_json_integer(v);
            if parsed is null or parsed < 0 then
                parsed := null;
                problem := 'expected a whole number of milliseconds';
            end if;
        end if;
        if problem is not null then
            violations := violations || jsonb_build_object('path', path || '.' || key,
                'message', format('%s is not a valid duration: %s', key, problem));
        elsif parsed = 0 then
            violations := violations || jsonb_build_object('path', path || '.' || key,
                'message', format('%s must be greater than zero', key));
        elsif ms is not null and ms <> parsed then
            violations := violations || jsonb_build_object('path', path || '.' || key,
                'message', format('%s disagrees with %s', key, found_key));
        elsif ms is null then
            ms := parsed;
            found_key := key;
        end if;
    end loop;
end;
$$;

-- A retry object at `path`, defaults filled in: the stored effective policy ({} for the
-- default one) and max_attempts, or the violations (the server answers 422 validation_error).
create function ojs_retry_read(raw json, path text, out stored text, out max_attempts integer, out violations jsonb)
    language plpgsql immutable
as $$
declare
    obj json;
    v json;
    n bigint;
    coef float8 := 2.0;
    initial bigint;
    maxi bigint;
    initial_ms bigint := 1000;
    max_ms bigint := 300000;
    jitter boolean := true;
    nre text := '[]';
    exhaustion text := 'dead_letter';
    strategy text := 'exponential';
    strategy_key text;
    extra text := '';
    r record;
    num numeric;
begin
    violations := '[]';
    max_attempts := 3;
    if json_typeof(raw) <> 'object' then
        violations := jsonb_build_array(jsonb_build_object('path', path,
            'message', format('''retry'' must be an object, got %s', ojs_json_article(raw))));
        return;
    end if;
    select json_object_agg(m.key, m.value order by m.pos) into obj from ojs_json_members(raw) m;
    obj := coalesce(obj, '{}');
    v := obj -> 'max_attempts';
    if v is not null and json_typeof(v) <> 'null' then
        n := ojs_json_integer(v);
        if n is not null and n between 0 and 2147483647 then
            max_attempts := n;
        else
            violations := violations || jsonb_build_object('path', path || '.max_attempts',
                'message', 'max_attempts must be an integer >= 0');
        end if;
    end if;
    select x.violations, x.ms into violations, initial from ojs_retry_interval(obj, 'initial_interval', path, violations) x;
    initial_ms := coalesce(initial, initial_ms);
    v := obj -> 'backoff_coefficient';
    if v is not null and json_typeof(v) <> 'null' then
        num := case when json_typeof(v) = 'number' then (v #>> '{}')::numeric end;
        if num is not null and num >= 1 and num <= 1.7976931348623157e308 then
            coef := num::float8;
        else
            violations := violations || jsonb_build_object('path', path || '.backoff_coefficient',
                'message', 'backoff_coefficient must be a number >= 1.0');
        end if;
    end if;
    select x.violations, x.ms into violations, maxi from ojs_retry_interval(obj, 'max_interval', path, violations) x;
    max_ms := coalesce(maxi, max_ms);
    if initial is not null and maxi is not null and max_ms < initial_ms then
        violations := violations || jsonb_build_object('path', path || '.max_interval',
            'message', 'max_interval must be >= initial_interval');
    elsif initial is not null and maxi is null then
        max_ms := greatest(max_ms, initial_ms);
    end if;
    v := obj -> 'jitter';
    if v is not null and json_typeof(v) <> 'null' then
        if json_typeof(v) = 'boolean' then
            jitter := (v #>> '{}')::boolean;
        else
            violations := violations || jsonb_build_object('path', path || '.jitter',
                'message', 'jitter must be a boolean');
        end if;
    end if;
    v := obj -> 'non_retryable_errors';
    if v is not null and json_typeof(v) <> 'null' then
        if json_typeof(v) = 'array'
           and not exists (select 1 from json_array_elements(v) e where json_typeof(e) <> 'string') then
            select coalesce(array_to_json(array_agg(e order by i))::text, '[]') into nre
              from json_array_elements_text(v) with ordinality as x(e, i);
        else
            violations := violations || jsonb_build_object('path', path || '.non_retryable_errors',
                'message', 'non_retryable_errors must be an array of strings');
        end if;
    end if;
    v := obj -> 'on_exhaustion';
    if v is not null and json_typeof(v) <> 'null' then
        if json_typeof(v) = 'string' and v #>> '{}' in ('discard', 'dead_letter') then
            exhaustion := v #>> '{}';
        else
            violations := violations || jsonb_build_object('path', path || '.on_exhaustion',
                'message', 'on_exhaustion must be "discard" or "dead_letter"');
        end if;
    end if;
    strategy_key := case when obj -> 'backoff_strategy' is not null
                               and json_typeof(obj -> 'backoff_strategy') <> 'null'
                         then 'backoff_strategy' else 'backoff_type' end;
    v := obj -> strategy_key;
    if v is not null and json_typeof(v) <> 'null' then
        if json_typeof(v) = 'string'
           and v #>> '{}' in ('exponential', 'linear', 'constant', 'none', 'polynomial') then
            strategy := v #>> '{}';
        else
            violations := violations || jsonb_build_object('path', path || '.' || strategy_key,
                'message', format('%s must be one of exponential, linear, constant, none, polynomial', strategy_key));
        end if;
    end if;
    if violations <> '[]' then
        return;
    end if;
    for r in select m.key, m.value from ojs_json_members(raw) m
              where m.key not in ('max_attempts', 'initial_interval', 'backoff_coefficient',
                                  'max_interval', 'initial_interval_ms', 'max_interval_ms',
                                  'jitter', 'non_retryable_errors', 'on_exhaustion',
                                  'backoff_strategy', 'backoff_type')
              order by m.pos
    loop
        extra := extra || ',' || to_json(r.key)::text || ':' || r.value::text;
    end loop;
    if max_attempts = 3 and initial_ms = 1000 and coef = 2.0 and max_ms = 300000 and jitter
       and nre = '[]' and exhaustion = 'dead_letter' and strategy = 'exponential' and extra = '' then
        stored := '{}';
        return;
    end if;
    stored := format('{"max_attempts":%s,"initial_interval":"%s","backoff_coefficient":%s,"max_interval":"%s","jitter":%s,"non_retryable_errors":%s,"on_exhaustion":"%s","backoff_strategy":"%s"%s}',
        max_attempts, ojs_duration_iso(initial_ms),
        case when coef = trunc(coef) and coef < 1e16 then trunc(coef)::numeric::text || '.0' else coef::text end,
        ojs_duration_iso(max_ms), case when jitter then 'true' else 'false' end, nre, exhaustion, strategy, extra);
end;
$$;

-- Raises an enqueue refusal: SQLSTATE OJ<status>, the message, and the OJS error body as DETAIL.
create function ojs_enqueue_refuse(status integer, code text, message text, details jsonb,
                                   retryable boolean default false) returns void
    language plpgsql
as $$
begin
    raise exception using
        errcode = 'OJ' || status::text,
        message = message,
        detail = ojs_json_compact(json_build_object('error', json_build_object(
            'code', code, 'type', code, 'message', message, 'retryable', retryable,
            'details', details))::text),
        hint = 'DETAIL holds the OJS error body ({"error": {code, message, details}}) that POST /ojs/v1/jobs would answer.';
end;
$$;

-- Refuses with the field violations collected by a reader (400 invalid_request or, for the retry
-- policy, 422 validation_error), as the server words them.
create function ojs_enqueue_refuse_violations(violations jsonb, idx integer, status integer, code text)
    returns void
    language plpgsql
as $$
declare
    n integer := jsonb_array_length(violations);
    message text := violations -> 0 ->> 'message';
begin
    if idx is not null then
        message := format('jobs[%s]: %s', idx, message);
    end if;
    if n > 1 then
        message := message || format(' (and %s more problem%s; see details.validation_errors)',
                                     n - 1, case when n = 2 then '' else 's' end);
    end if;
    perform ojs_enqueue_refuse(status, code, message,
        jsonb_build_object('field', violations -> 0 ->> 'path', 'validation_errors', violations)
        || case when idx is not null then jsonb_build_object('index', idx) else '{}' end);
end;
$$;

-- Reads and validates one job envelope (`idx`: its position in a batch, null for a single job)
-- with the server's settings; raises the refusal PUSH would answer.
create function ojs_envelope_read(body json, idx integer, s ojs_setting) returns ojs_new_job
    language plpgsql
as $$
declare
    j ojs_new_job;
    top json;
    opt json;
    v json;
    p text;
    meta_layers json[] := '{}';
    meta_paths text[] := '{}';
    merged_keys text[];
    merged_values json[];
    violations jsonb := '[]';
    range_violation jsonb;
    range_value bigint;
    n bigint;
    per_unit bigint;
    t record;
    r record;
    pr record;
    rp record;
    rate_canonical text;
    type_pattern text := case when s.hyphenated_types
                              then '^[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)*$'
                              else '^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$' end;
    idx_details jsonb := case when idx is not null then jsonb_build_object('index', idx) else '{}' end;
    prefix text := case when idx is not null then format('jobs[%s]: ', idx) else '' end;
    input_attributes constant text[] := array['specversion', 'id', 'type', 'queue', 'args', 'meta',
        'priority', 'timeout', 'timeout_ms', 'scheduled_at', 'delay_until', 'expires_at', 'retry',
        'retry_policy', 'unique', 'tags', 'schema', 'visibility_timeout', 'visibility_timeout_ms',
        'pending', 'rate_limit', 'total_timeout', 'enqueue_ttl', 'workflow', 'options'];
    system_attributes constant text[] := array['state', 'attempt', 'max_attempts', 'created_at',
        'enqueued_at', 'started_at', 'completed_at', 'cancelled_at', 'discarded_at',
        'dead_lettered_at', 'activated_at', 're_enqueued_at', 'next_retry_at', 'next_attempt_at',
        'retry_delay_ms', 'worker_id', 'visible_until', 'result', 'error', 'errors', 'unique_key',
        'original_queue', 'workflow_id', 'workflow_step', 'parent_results', 'deduplicated',
        'previous_state'];
begin
    -- Repeated keys: first position, last value.
    select coalesce(json_object_agg(m.key, m.value order by m.pos), '{}') into top
      from ojs_json_members(body) m;
    -- `options`: a non-null value must be an object.
    v := top -> 'options';
    if v is not null and json_typeof(v) <> 'null' then
        if json_typeof(v) = 'object' then
            select coalesce(json_object_agg(m.key, m.value order by m.pos), '{}') into opt
              from ojs_json_members(v) m;
        else
            violations := violations || jsonb_build_object('path', '$.options',
                'message', format('''options'' must be an object, got %s', ojs_json_article(v)));
        end if;
    end if;

    -- meta: options.metadata, options.meta, then meta (later wins per key); size first.
    j.meta := '{}';
    <<meta>>
    foreach p in array array['$.options.metadata', '$.options.meta', '$.meta']
    loop
        v := case p when '$.meta' then top -> 'meta' when '$.options.meta' then opt -> 'meta'
                    else opt -> 'metadata' end;
        continue when v is null or json_typeof(v) = 'null';
        if json_typeof(v) <> 'object' then
            violations := violations || jsonb_build_object('path', p,
                'message', format('meta must be an object, got %s', ojs_json_article(v)));
            meta_layers := null;
            exit meta;
        end if;
        meta_layers := meta_layers || v;
    end loop;
    if meta_layers is null then
        j.meta := null;
    elsif cardinality(meta_layers) = 1 then
        j.meta := meta_layers[1]::text;
    elsif cardinality(meta_layers) > 1 then
        select array_agg(x.key order by x.pos), array_agg(x.value order by x.pos)
          into merged_keys, merged_values
          from (select e.key, (array_agg(e.value order by l.layer desc, e.ord desc))[1] as value,
                       min(l.layer * 1000000000 + e.ord) as pos
                  from unnest(meta_layers) with ordinality as l(obj, layer),
                       json_each(l.obj) with ordinality as e(key, value, ord)
                 group by e.key) x;
        j.meta := ojs_json_object_text(merged_values, merged_keys);
    end if;
    if j.meta is not null and octet_length(j.meta) > 65536 then
        perform ojs_enqueue_refuse(413, 'envelope_too_large',
            prefix || format('''meta'' is %s bytes; the maximum is 65536 bytes.', octet_length(j.meta)),
            jsonb_build_object('max_size', 65536, 'size', octet_length(j.meta), 'field', 'meta') || idx_details);
    end if;

    v := top -> 'specversion';
    if v is not null and json_typeof(v) <> 'null'
       and not (json_typeof(v) = 'string' and v #>> '{}' in ('1.0.0-rc.1', '1.0')) then
        violations := violations || jsonb_build_object('path', '$.specversion',
            'message', 'specversion must be "1.0.0-rc.1" (or "1.0")');
    end if;

    v := top -> 'id';
    if v is null then
        j.id := ojs_uuidv7();
        j.id_supplied := false;
    elsif json_typeof(v) = 'string'
          and v #>> '{}' ~ '^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$' then
        j.id := (v #>> '{}')::uuid;
        j.id_supplied := true;
    else
        violations := violations || jsonb_build_object('path', '$.id',
            'message', 'id must be a lowercase UUIDv7 string (e.g. 019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f), or be omitted');
        j.id_supplied := true;
    end if;

    v := top -> 'type';
    if v is null then
        violations := violations || jsonb_build_object('path', '$.type', 'message', '''type'' is required');
    elsif json_typeof(v) <> 'string' then
        violations := violations || jsonb_build_object('path', '$.type',
            'message', format('''type'' must be a string, got %s', ojs_json_article(v)));
    elsif octet_length(v #>> '{}') between 1 and 255 and v #>> '{}' ~ type_pattern then
        j.type := v #>> '{}';
    else
        violations := violations || jsonb_build_object('path', '$.type',
            'message', format('type %s is invalid: use 1-255 characters of dot-separated lowercase segments, each starting with a letter (e.g. email.send)', to_json(v #>> '{}')));
    end if;

    v := top -> 'args';
    if v is null then
        violations := violations || jsonb_build_object('path', '$.args',
            'message', '''args'' is required (a JSON array, may be empty)');
    elsif json_typeof(v) <> 'array' then
        violations := violations || jsonb_build_object('path', '$.args',
            'message', format('''args'' must be an array, got %s', ojs_json_article(v)));
    else
        j.args := v::text;
    end if;

    -- Optional attributes: top level first, then options (null counts as absent).
    j.queue := 'default';
    select x.p, x.v into p, v from ojs_envelope_first(top, opt, array['queue']) x;
    if v is not null then
        if json_typeof(v) <> 'string' then
            violations := violations || jsonb_build_object('path', p,
                'message', format('queue must be a string, got %s', ojs_json_article(v)));
            j.queue := '';
        elsif octet_length(v #>> '{}') <= 128 and v #>> '{}' ~ '^[a-z0-9][a-z0-9.-]*$' then
            j.queue := v #>> '{}';
        else
            violations := violations || jsonb_build_object('path', p,
                'message', format('queue %s is invalid: use 1-128 lowercase letters, digits, ''-'' and ''.'', starting with a letter or digit', to_json(v #>> '{}')));
            j.queue := '';
        end if;
    end if;

    j.priority := 2;
    select x.p, x.v into p, v from ojs_envelope_first(top, opt, array['priority']) x;
    if v is not null then
        pr := ojs_priority_read(v, s.max_priority);
        if pr.outcome = 'ok' then
            j.priority := pr.value;
        elsif pr.outcome = 'range' then
            range_value := pr.value;
            range_violation := jsonb_build_object('path', p, 'message',
                case when pr.value < 0 then 'priority must be >= 0'
                     else format('priority must be <= %s (maximum supported priority)', s.max_priority) end);
        else
            violations := violations || jsonb_build_object('path', p, 'message',
                format('priority must be an integer from 0 (most urgent) to %s, or one of critical, high, normal, low, bulk', s.max_priority));
        end if;
    end if;
    j.priority_aging_ms := s.priority_aging_ms;

    j.timeout_ms := s.default_timeout_ms;
    j.timeout_explicit := false;
    select x.p, x.v into p, v
      from ojs_envelope_first(top, opt, array['timeout_ms', 'timeout'], true) x;
    if v is not null then
        n := ojs_json_integer(v);
        j.timeout_explicit := n is distinct from 0;
        per_unit := case when p like '%\_ms' then 1 else 1000 end;
        if n = 0 then
            null;
        elsif n > 0 and n <= 3153600000000 / per_unit then
            j.timeout_ms := n * per_unit;
        else
            violations := violations || jsonb_build_object('path', p, 'message',
                format('%s must be a non-negative integer (%s; 0 uses the default)',
                       regexp_replace(p, '^\$\.(options\.)?', ''),
                       case when per_unit = 1 then 'milliseconds' else 'seconds' end));
        end if;
    end if;

    select x.p, x.v into p, v
      from ojs_envelope_first(top, opt, array['scheduled_at', 'delay_until'], true) x;
    t := ojs_envelope_time(v);
    if t.problem is not null then
        violations := violations || jsonb_build_object('path', p, 'message', t.problem);
    else
        j.scheduled_abs := t.at_abs;
        j.scheduled_rel_ms := t.rel_ms;
        j.scheduled_text := t.input;
    end if;
    select x.p, x.v into p, v from ojs_envelope_first(top, opt, array['expires_at']) x;
    t := ojs_envelope_time(v);
    if t.problem is not null then
        violations := violations || jsonb_build_object('path', p, 'message', t.problem);
    else
        j.expires_abs := t.at_abs;
        j.expires_rel_ms := t.rel_ms;
        j.expires_text := t.input;
    end if;

    select x.p, x.v into p, v
      from ojs_envelope_first(top, opt, array['visibility_timeout_ms', 'visibility_timeout'], true) x;
    if v is not null then
        n := null;
        if p like '%\_ms' then
            n := ojs_json_integer(v);
        elsif json_typeof(v) = 'string' then
            n := (ojs_duration_ms(v #>> '{}')).ms;
        else
            n := ojs_json_integer(v);
            n := case when n > 0 and n <= 3153600000 then n * 1000 end;
        end if;
        if n is null or n <= 0 then
            violations := violations || jsonb_build_object('path', p, 'message',
                'visibility timeout must be positive: integer milliseconds (visibility_timeout_ms), integer seconds or an ISO 8601 duration (visibility_timeout)');
        else
            j.visibility_timeout_ms := n;
        end if;
    end if;

    j.pending := false;
    select x.p, x.v into p, v from ojs_envelope_first(top, opt, array['pending']) x;
    if v is not null then
        if json_typeof(v) = 'boolean' then
            j.pending := (v #>> '{}')::boolean;
        else
            violations := violations || jsonb_build_object('path', p, 'message', 'pending must be a boolean');
        end if;
    end if;
    if j.pending and (j.scheduled_abs > clock_timestamp() or j.scheduled_rel_ms > 0) then
        violations := violations || jsonb_build_object('path', '$.pending',
            'message', 'a pending job cannot also have a future scheduled_at (activate it, then it runs)');
    end if;

    select x.p, x.v into p, v from ojs_envelope_first(top, opt, array['tags']) x;
    if v is not null then
        if json_typeof(v) = 'array'
           and not exists (select 1 from json_array_elements(v) e where json_typeof(e) <> 'string') then
            select coalesce(array_to_json(array_agg(e order by i))::text, '[]') into j.tags
              from json_array_elements_text(v) with ordinality as x(e, i);
        else
            violations := violations || jsonb_build_object('path', p, 'message', 'tags must be an array of strings');
        end if;
    end if;

    select x.p, x.v into p, v from ojs_envelope_first(top, opt, array['schema']) x;
    if v is not null then
        if json_typeof(v) = 'string' and v #>> '{}' <> '' then
            j.schema_uri := v #>> '{}';
        else
            violations := violations || jsonb_build_object('path', p, 'message', 'schema must be a non-empty string (a URI)');
        end if;
    end if;

    select x.p, x.v into p, v from ojs_envelope_first(top, opt, array['enqueue_ttl']) x;
    select x.violations, x.secs into violations, j.enqueue_ttl_secs
      from ojs_envelope_seconds(v, p, 'enqueue_ttl', violations) x;
    select x.p, x.v into p, v from ojs_envelope_first(top, opt, array['total_timeout']) x;
    select x.violations, x.secs into violations, j.total_timeout_secs
      from ojs_envelope_seconds(v, p, 'total_timeout', violations) x;
    if j.total_timeout_secs::bigint * 1000 < j.timeout_ms then
        violations := violations || jsonb_build_object('path', '$.total_timeout',
            'message', 'total_timeout must be >= the execution timeout');
    end if;

    if range_violation is not null then
        if violations = '[]' then
            perform ojs_enqueue_refuse(400, 'invalid_request',
                prefix || (range_violation ->> 'message'),
                jsonb_build_object('field', range_violation ->> 'path',
                                   'validation_errors', jsonb_build_array(range_violation),
                                   'value', range_value, 'min', 0, 'max_priority', s.max_priority)
                || idx_details);
        end if;
        violations := jsonb_build_array(range_violation) || violations;
    end if;
    if violations <> '[]' then
        perform ojs_enqueue_refuse_violations(violations, idx, 400, 'invalid_request');
    end if;

    -- What this door does not do yet is refused, never half done.
    select x.p, x.v into p, v from ojs_envelope_first(top, opt, array['unique']) x;
    if v is not null then
        perform ojs_enqueue_refuse(422, 'unsupported',
            prefix || 'unique policies are not accepted by ojs_enqueue yet: enqueue jobs with a unique policy with POST /ojs/v1/jobs',
            jsonb_build_object('field', p) || idx_details);
    end if;

    select x.p, x.v into p, v
      from ojs_envelope_first(top, opt, array['retry', 'retry_policy'], true) x;
    j.retry := '{}';
    j.max_attempts := 3;
    if v is not null then
        r := ojs_retry_read(v, p);
        if r.violations <> '[]' then
            perform ojs_enqueue_refuse_violations(r.violations, idx, 422, 'validation_error');
        end if;
        j.retry := r.stored;
        j.max_attempts := r.max_attempts;
        j.retry_input := v::text;
    end if;

    select x.p, x.v into p, v from ojs_envelope_first(top, opt, array['rate_limit']) x;
    if v is not null then
        rp := ojs_rate_policy_read(v, p, j.queue);
        if rp.violations <> '[]' then
            perform ojs_enqueue_refuse_violations(rp.violations, idx, 400, 'invalid_request');
        end if;
        j.rate_key := rp.rate_key;
        rate_canonical := rp.canonical;
    end if;
    select x.p, x.v into p, v from ojs_envelope_first(top, opt, array['workflow']) x;
    if v is not null then
        perform ojs_enqueue_refuse(422, 'unsupported',
            prefix || 'embedded workflows are not accepted by ojs_enqueue: create workflows with POST /ojs/v1/workflows',
            jsonb_build_object('field', p) || idx_details);
    end if;

    -- Unknown attributes are kept, in order; system-managed ones are ignored.
    -- The job shows its rate limit as the server reads it, key resolved, last.
    select ojs_json_object_text(
               coalesce(array_agg(m.value order by m.pos), '{}')
               || case when rate_canonical is not null then array[rate_canonical::json] else '{}' end,
               coalesce(array_agg(m.key order by m.pos), '{}')
               || case when rate_canonical is not null then array['rate_limit'] else '{}' end)
      into j.extra
      from ojs_json_members(body) m
     where m.key <> all (input_attributes) and m.key <> all (system_attributes);
    return j;
end;
$$;

-- The first present (non-null) optional attribute among `names`, with its path: each name at
-- the top level then in options, or (`names_first`) every name at the top level first.
create function ojs_envelope_first(top json, opt json, names text[], names_first boolean default false,
                                   out p text, out v json)
    language plpgsql immutable
as $$
declare
    n text;
begin
    if names_first then
        foreach n in array names loop
            v := top -> n;
            if v is not null and json_typeof(v) <> 'null' then
                p := '$.' || n;
                return;
            end if;
        end loop;
        if opt is not null then
            foreach n in array names loop
                v := opt -> n;
                if v is not null and json_typeof(v) <> 'null' then
                    p := '$.options.' || n;
                    return;
                end if;
            end loop;
        end if;
    else
        foreach n in array names loop
            v := top -> n;
            if v is not null and json_typeof(v) <> 'null' then
                p := '$.' || n;
                return;
            end if;
            if opt is not null then
                v := opt -> n;
                if v is not null and json_typeof(v) <> 'null' then
                    p := '$.options.' || n;
                    return;
                end if;
            end if;
        end loop;
    end if;
    v := null;
end;
$$;

-- A new UUIDv7 (Postgres 15 has no uuidv7()): the current Unix time in milliseconds, then random
-- bits, with the version and variant of RFC 9562.
create function ojs_uuidv7() returns uuid
    language sql volatile
as $$
    select encode(set_byte(overlay(uuid_send(gen_random_uuid())
                                   placing substring(int8send((extract(epoch from clock_timestamp()) * 1000)::int8) from 3)
                                   from 1 for 6),
                           6, (get_byte(uuid_send(gen_random_uuid()), 6) & 15) | 112), 'hex')::uuid
$$;

-- JSON text without insignificant whitespace (jsonb renders {"a": 1}; OJS answers are compact).
create function ojs_json_compact(t text) returns text
    language sql immutable
as $$
    select regexp_replace(t, '("(?:[^"\\]|\\.)*")|[ \t\n\r]+', '\1', 'g')
$$;

-- A server timestamp: UTC, milliseconds, `Z`.
create function ojs_wire_time(at timestamptz) returns text
    language sql stable
as $$
    select to_json(to_char(at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))::text
$$;

-- A job in its OJS JSON form, as GET /ojs/v1/jobs/{id} shows it under `job`.
create function ojs_job_wire(j ojs_job) returns json
    language sql stable
as $$
    select ('{' || concat_ws(',',
        '"specversion":"1.0.0-rc.1"',
        '"id":"' || j.id || '"',
        '"type":' || to_json(j.type),
        '"queue":' || to_json(j.queue),
        '"args":' || j.args::text,
        '"meta":' || j.meta::text,
        '"priority":' || j.priority,
        '"timeout":' || (j.timeout_ms + 999) / 1000,
        '"timeout_ms":' || j.timeout_ms,
        '"retry":' || case when j.retry::text = '{}'
            then '{"max_attempts":3,"initial_interval":"PT1S","backoff_coefficient":2.0,"max_interval":"PT5M","jitter":true,"non_retryable_errors":[],"on_exhaustion":"dead_letter","backoff_strategy":"exponential"}'
            else j.retry::text end,
        '"unique":' || j.unique_policy::text,
        '"tags":' || array_to_json(j.tags)::text,
        '"schema":' || to_json(j.schema_uri),
        '"scheduled_at":' || coalesce(to_json(j.scheduled_at_input)::text, ojs_wire_time(j.scheduled_at)),
        '"expires_at":' || coalesce(to_json(j.expires_at_input)::text, ojs_wire_time(j.expires_at)),
        '"visibility_timeout_ms":' || j.visibility_timeout_ms,
        '"enqueue_ttl":' || j.enqueue_ttl_secs,
        '"total_timeout":' || j.total_timeout_secs,
        '"state":"' || j.state || '"',
        '"attempt":' || j.attempt,
        '"max_attempts":' || j.max_attempts,
        '"created_at":' || ojs_wire_time(j.created_at),
        '"enqueued_at":' || ojs_wire_time(j.enqueued_at),
        '"activated_at":' || ojs_wire_time(j.activated_at),
        '"re_enqueued_at":' || ojs_wire_time(j.re_enqueued_at),
        '"original_queue":' || to_json(j.original_queue),
        '"started_at":' || ojs_wire_time(j.started_at),
        '"worker_id":' || to_json(j.worker_id),
        case when j.state = 'active' then '"visible_until":' || ojs_wire_time(j.visible_until) end,
        case when j.state = 'retryable' then '"next_retry_at":' || ojs_wire_time(j.next_retry_at)
                                             || ',"next_attempt_at":' || ojs_wire_time(j.next_retry_at) end,
        '"retry_delay_ms":' || j.retry_delay_ms,
        '"completed_at":' || ojs_wire_time(j.completed_at),
        '"cancelled_at":' || ojs_wire_time(j.cancelled_at),
        '"discarded_at":' || ojs_wire_time(j.discarded_at),
        '"dead_lettered_at":' || ojs_wire_time(j.dead_lettered_at),
        '"result":' || j.result::text,
        '"error":' || ojs_json_compact(j.error::text),
        '"errors":' || ojs_json_compact(coalesce(j.errors, '[]')::text),
        '"unique_key":' || to_json(j.unique_key),
        nullif(substr(j.extra::text, 2, length(j.extra::text) - 2), '')
    ) || '}')::json
$$;


-- Whether `text` matches a queue access pattern (`*` matches any run of characters).
create function ojs_glob(pattern text, value text) returns boolean
    language sql immutable
as $$
    select value like replace(replace(replace(replace(pattern, '\', '\\'), '%', '\%'), '_', '\_'), '*', '%')
$$;

-- One body of an enqueue read (`idx`: its position in a batch, null for a single job): an
-- object, within the size limit, a valid envelope. Raises the refusal PUSH answers.
create function ojs_enqueue_read(body json, idx integer, s ojs_setting) returns ojs_new_job
    language plpgsql
as $$
declare
    text_body text;
begin
    if body is null or json_typeof(body) <> 'object' then
        if idx is not null then
            perform ojs_enqueue_refuse(400, 'invalid_request',
                format('jobs[%s]: each job must be an object, got %s', idx, coalesce(ojs_json_article(body), 'null')),
                jsonb_build_object('field', format('$.jobs[%s]', idx), 'index', idx));
        end if;
        perform ojs_enqueue_refuse_violations(jsonb_build_array(jsonb_build_object('path', '$', 'message',
            format('the job must be a JSON object, got %s', coalesce(ojs_json_article(body), 'null')))), null, 400, 'invalid_request');
    end if;
    text_body := ojs_json_compact(body::text);
    if octet_length(text_body) > s.max_envelope_bytes then
        perform ojs_enqueue_refuse(413, 'envelope_too_large',
            case when idx is not null then format('jobs[%s]: ', idx) else '' end
            || format('''envelope'' is %s bytes; the maximum is %s bytes.', octet_length(text_body), s.max_envelope_bytes),
            jsonb_build_object('max_size', s.max_envelope_bytes, 'size', octet_length(text_body), 'field', 'envelope')
            || case when idx is not null then jsonb_build_object('index', idx) else '{}' end);
    end if;
    return ojs_envelope_read(text_body::json, idx, s);
end;
$$;

-- A read job with its queue's configuration applied (`d`: the _default layer; `producer`: the
-- setting ojs.producer), as PUSH applies it: access rules, then defaults. Raises the refusal
-- PUSH answers.
create function ojs_enqueue_configure(j ojs_new_job, idx integer, s ojs_setting, d jsonb, producer text)
    returns ojs_new_job
    language plpgsql
as $$
declare
    q jsonb;
    allowed jsonb;
    queue_retry jsonb;
    merged json;
    r record;
begin
    -- The queue's configuration: its own layer over _default's.
    select config into q from ojs_queue where name = j.queue;
    q := coalesce(q, '{}');
    allowed := coalesce(q -> 'allowed_job_types', d -> 'allowed_job_types');
    if jsonb_typeof(allowed) = 'array'
       and not exists (select 1 from jsonb_array_elements_text(allowed) p where ojs_glob(p, j.type)) then
        perform ojs_enqueue_refuse(400, 'JOB_TYPE_NOT_ALLOWED',
            case when idx is not null then format('jobs[%s]: ', idx) else '' end
            || format('Job type ''%s'' is not allowed in queue ''%s'' (see the queue''s allowed_job_types).', j.type, j.queue),
            jsonb_build_object('field', '$.type', 'queue', j.queue, 'job_type', j.type)
            || case when idx is not null then jsonb_build_object('index', idx) else '{}' end);
    end if;
    allowed := coalesce(q -> 'producers', d -> 'producers');
    if jsonb_typeof(allowed) = 'array'
       and not exists (select 1 from jsonb_array_elements_text(allowed) p
                        where p = '*' or (producer is not null and ojs_glob(p, producer))) then
        perform ojs_enqueue_refuse(400, 'invalid_request',
            case when idx is not null then format('jobs[%s]: ', idx) else '' end
            || case when producer is not null
                    then format('Producer ''%s'' (setting ojs.producer) may not enqueue to queue ''%s''.', producer, j.queue)
                    else format('Queue ''%s'' only accepts jobs from listed producers: name yours in the setting ojs.producer.', j.queue) end,
            jsonb_build_object('queue', j.queue, 'producer', producer, 'reason', 'producer_not_allowed')
            || case when idx is not null then jsonb_build_object('index', idx) else '{}' end);
    end if;
    if not j.timeout_explicit then
        j.timeout_ms := coalesce((coalesce(q -> 'default_timeout', d -> 'default_timeout'))::bigint * 1000,
                                 s.default_timeout_ms);
    end if;
    if j.visibility_timeout_ms is null then
        j.visibility_timeout_ms := (coalesce(q -> 'visibility_timeout', d -> 'visibility_timeout'))::bigint * 1000;
    end if;
    queue_retry := coalesce(d -> 'default_retry', '{}') || coalesce(q -> 'default_retry', '{}');
    if jsonb_typeof(queue_retry) = 'object' and queue_retry <> '{}' then
        select coalesce(json_object_agg(y.key, y.value order by y.pos), '{}') into merged
          from (select x.key, (array_agg(x.value order by x.src desc, x.ord desc))[1] as value,
                       min(x.src * 1000000000 + x.ord) as pos
                  from (select 1 as src, e.key, ojs_json_compact(e.value::text)::json as value, e.ord
                          from jsonb_each(queue_retry) with ordinality as e(key, value, ord)
                        union all
                        select 2, e.key, e.value, e.ord
                          from json_each(coalesce(j.retry_input, '{}')::json) with ordinality as e(key, value, ord)) x
                 group by x.key) y;
        r := ojs_retry_read(merged, '$.retry');
        if r.violations <> '[]' then
            perform ojs_enqueue_refuse_violations(r.violations, idx, 422, 'validation_error');
        end if;
        j.retry := r.stored;
        j.max_attempts := r.max_attempts;
    end if;
    return j;
end;
$$;

-- Enqueues bodies (`batch`: paths and messages name each job's index) exactly as PUSH does:
-- every body read first, then the queues' configuration applied, then ids checked, then the
-- jobs written; returns them in order.
create function ojs_enqueue_bodies(bodies json[], batch boolean) returns ojs_job[]
    language plpgsql
as $$
declare
    s ojs_setting;
    jobs ojs_new_job[];
    i integer;
    d jsonb;
    producer text := nullif(current_setting('ojs.producer', true), '');
    out_jobs ojs_job[];
    created bigint;
    refused_state text;
    refused_queue text;
    refused_detail text;
    refused_constraint text;
    overflow jsonb;
    k integer;
begin
    select * into s from ojs_setting;
    if not found then
        raise exception 'ojs_setting has no row: restore it (insert into ojs_setting default values), then restart an ojs server to write its settings';
    end if;
    select config into d from ojs_queue where name = '_default';
    d := coalesce(d, '{}');
    -- Rows are read in array order, so the first body at fault is the one refused.
    select array_agg(ojs_enqueue_read(b.body, case when batch then (b.n - 1)::int end, s) order by b.n)
      into jobs
      from unnest(bodies) with ordinality as b(body, n);
    select array_agg(ojs_enqueue_configure(jobs[g.n], case when batch then g.n - 1 end, s, d, producer)
                     order by g.n)
      into jobs
      from generate_subscripts(jobs, 1) as g(n);
    -- The same id twice in one request: the second one is refused.
    select x.n - 1 into i
      from (select g.n, row_number() over (partition by (jobs[g.n]).id order by g.n) as nth
              from generate_subscripts(jobs, 1) as g(n)) x
     where x.nth = 2
     order by x.n
     limit 1;
    if found then
        perform ojs_enqueue_refuse(409, 'duplicate',
            case when batch then format('jobs[%s]: ', i) else '' end
            || format('A job with id ''%s'' already exists.', jobs[i + 1].id),
            jsonb_build_object('job_id', jobs[i + 1].id, 'existing_job_id', jobs[i + 1].id)
            || case when batch then jsonb_build_object('index', i) else '{}' end);
    end if;

    -- A full drop_oldest queue makes room once (as PUSH does), then the jobs are written again.
    <<attempts>>
    for attempt in 1 .. 2 loop
        begin
            select array_agg(x.inserted_job), max(x.queues_created) into out_jobs, created
              from (select array_agg(u.id order by u.ordinality) as id,
                           array_agg(u.type order by u.ordinality) as type,
                           array_agg(u.queue order by u.ordinality) as queue,
                           array_agg(u.args order by u.ordinality) as args,
                           array_agg(u.meta order by u.ordinality) as meta,
                           array_agg(u.priority order by u.ordinality) as priority,
                           array_agg(u.max_attempts order by u.ordinality) as max_attempts,
                           array_agg(u.retry order by u.ordinality) as retry,
                           array_agg(u.timeout_ms order by u.ordinality) as timeout_ms,
                           array_agg(u.visibility_timeout_ms order by u.ordinality) as visibility_timeout_ms,
                           array_agg(u.scheduled_abs order by u.ordinality) as scheduled_abs,
                           array_agg(u.scheduled_rel_ms order by u.ordinality) as scheduled_rel_ms,
                           array_agg(u.scheduled_text order by u.ordinality) as scheduled_text,
                           array_agg(u.expires_abs order by u.ordinality) as expires_abs,
                           array_agg(u.expires_rel_ms order by u.ordinality) as expires_rel_ms,
                           array_agg(u.expires_text order by u.ordinality) as expires_text,
                           array_agg(u.enqueue_ttl_secs order by u.ordinality) as enqueue_ttl_secs,
                           array_agg(u.total_timeout_secs order by u.ordinality) as total_timeout_secs,
                           array_agg(u.tags order by u.ordinality) as tags,
                           array_agg(u.schema_uri order by u.ordinality) as schema_uri,
                           array_agg(null::text) as no_text,
                           array_agg(u.extra order by u.ordinality) as extra,
                           array_agg(u.pending order by u.ordinality) as pending,
                           array_agg(u.priority_aging_ms order by u.ordinality) as priority_aging_ms,
                           array_agg(u.id order by u.ordinality) filter (where u.id_supplied) as supplied,
                           array_agg(u.rate_key order by u.ordinality) as rate_key
                      from unnest(jobs) with ordinality as u) a,
                   ojs_insert_jobs(a.id, a.type, a.queue, a.args, a.meta, a.priority, a.max_attempts,
                                   a.retry, a.timeout_ms, a.visibility_timeout_ms, a.scheduled_abs,
                                   a.scheduled_rel_ms, a.scheduled_text, a.expires_abs,
                                   a.expires_rel_ms, a.expires_text, a.enqueue_ttl_secs,
                                   a.total_timeout_secs, a.tags, a.schema_uri, a.no_text, a.no_text,
                                   a.extra, a.pending, a.priority_aging_ms, s.strict_queues,
                                   ojs_config_generation_locked(), '{}', '{}', '{}', '{}', 0,
                                   coalesce(a.supplied, '{}'), a.rate_key) x;
            exit attempts;
        exception
            when unique_violation then
                get stacked diagnostics refused_constraint = constraint_name;
                if refused_constraint <> 'ojs_job_pkey' then
                    raise;
                end if;
                i := null;
                for k in 1 .. cardinality(jobs) loop
                    if jobs[k].id_supplied and exists (select 1 from ojs_job_all a where a.id = jobs[k].id) then
                        i := k - 1;
                        exit;
                    end if;
                end loop;
                -- The clashing row is gone again: the first supplied id.
                if i is null then
                    for k in 1 .. cardinality(jobs) loop
                        if jobs[k].id_supplied then
                            i := k - 1;
                            exit;
                        end if;
                    end loop;
                end if;
                if i is null then
                    raise;
                end if;
                perform ojs_enqueue_refuse(409, 'duplicate',
                    case when batch then format('jobs[%s]: ', i) else '' end
                    || format('A job with id ''%s'' already exists.', jobs[i + 1].id),
                    jsonb_build_object('job_id', jobs[i + 1].id, 'existing_job_id', jobs[i + 1].id)
                    || case when batch then jsonb_build_object('index', i) else '{}' end);
            when sqlstate 'OJ001' or sqlstate 'OJ002' or sqlstate 'OJ003' then
                get stacked diagnostics refused_state = returned_sqlstate, refused_queue = message_text,
                                        refused_detail = pg_exception_detail;
                if refused_state = 'OJ001' then
                    perform ojs_enqueue_refuse(409, 'conflict',
                        format('Queue ''%s'' is draining (being deleted); cannot enqueue into it.', refused_queue),
                        jsonb_build_object('queue', refused_queue, 'current_state', 'draining'));
                elsif refused_state = 'OJ002' then
                    perform ojs_enqueue_refuse(400, 'invalid_request',
                        format('Queue ''%s'' does not exist, and this server only enqueues to existing queues: create it first (POST /ojs/v1/queues).', refused_queue),
                        jsonb_build_object('field', '$.queue', 'queue', refused_queue, 'reason', 'unknown_queue'));
                end if;
                overflow := refused_detail::jsonb;
                if overflow ->> 'policy' = 'drop_oldest' and attempt = 1 then
                    perform ojs_queue_drop_oldest(g.queue, g.jobs, g.bytes)
                       from (select x.queue, count(*) as jobs,
                                    sum(octet_length(x.args) + octet_length(x.meta)) as bytes
                               from unnest(jobs) x
                              group by x.queue
                              order by x.queue) g;
                    continue attempts;
                end if;
                i := null;
                for k in 1 .. cardinality(jobs) loop
                    if jobs[k].queue = refused_queue then
                        i := k - 1;
                        exit;
                    end if;
                end loop;
                perform ojs_enqueue_refuse(429, 'QUEUE_FULL',
                    case when batch then format('jobs[%s]: ', i) else '' end
                    || format('Queue ''%s'' is full: it holds %s unfinished jobs and the job would take it past %s.',
                              refused_queue, overflow ->> 'depth',
                              case when (overflow -> 'bound_bytes') is not null and jsonb_typeof(overflow -> 'bound_bytes') <> 'null'
                                        and (jsonb_typeof(overflow -> 'bound') = 'null' or (overflow ->> 'depth')::bigint < (overflow ->> 'bound')::bigint)
                                        and (overflow ->> 'bytes')::bigint <= (overflow ->> 'bound_bytes')::bigint
                                   then format('its size bound of %s bytes', overflow ->> 'bound_bytes')
                                   else format('its bound of %s jobs', coalesce(overflow ->> 'bound', overflow ->> 'depth')) end),
                    jsonb_build_object('queue', refused_queue, 'depth', (overflow ->> 'depth')::bigint,
                                       'bound', coalesce(overflow -> 'bound', overflow -> 'depth'),
                                       'max_size_bytes', overflow -> 'bound_bytes',
                                       'strategy', overflow ->> 'policy')
                    || case when batch then jsonb_build_object('index', i) else '{}' end,
                    true);
        end;
    end loop;

    -- Wake-ups and counts, delivered when (and only if) the caller commits.
    perform pg_notify('ojs_job_available', a.queue || ' - - - ' || a.n)
       from (select x.queue, count(*) as n from unnest(out_jobs) x
              where x.state = 'available' group by x.queue) a;
    perform pg_notify('ojs_job_enqueued', a.queue || ' ' || a.type || ' ' || a.n || ' ' || a.scheduled)
       from (select x.queue, x.type, count(*) as n, count(*) filter (where x.state = 'scheduled') as scheduled
               from unnest(out_jobs) x
              group by x.queue, x.type) a;
    -- Jobs with a rate-limit key were written held: the releasers let them go once the caller
    -- commits (the server's PUSH releases them itself).
    perform pg_notify('ojs_rate_key', k.key)
       from (select distinct x.rate_key as key from unnest(out_jobs) x where x.rate_key is not null) k;
    -- In request order.
    return array(select x from unnest(out_jobs) x
                   join unnest(jobs) with ordinality as o(id) on o.id = x.id
                  order by o.ordinality);
end;
$$;

-- ---------------------------------------------------------------------------------------------
-- The SQL door.
-- ---------------------------------------------------------------------------------------------

create function ojs_enqueue(job json) returns json
    language plpgsql security definer
as $$
declare
    out_jobs ojs_job[] := ojs_enqueue_bodies(array[job], false);
begin
    return ('{"job":' || ojs_job_wire(out_jobs[1])::text || '}')::json;
end;
$$;

create function ojs_enqueue_batch(body json) returns json
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
    return ('{"jobs":[' || (select string_agg(ojs_job_wire(out_jobs[k])::text, ',' order by k)
                              from generate_subscripts(out_jobs, 1) as k)
            || '],"count":' || cardinality(out_jobs) || '}')::json;
end;
$$;

create function ojs_enqueue_type(type text, args json default '[]', queue text default null,
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
    return out_jobs[1].id;
end;
$$;

-- The same for a jsonb or text argument (with only json and jsonb, a quoted literal would match
-- neither one better than the other; with text as well, it is read as text).
create function ojs_enqueue(job jsonb) returns json
    language sql
    return ojs_enqueue(job::json);

create function ojs_enqueue(job text) returns json
    language sql
    return ojs_enqueue(job::json);

create function ojs_enqueue_batch(body jsonb) returns json
    language sql
    return ojs_enqueue_batch(body::json);

create function ojs_enqueue_batch(body text) returns json
    language sql
    return ojs_enqueue_batch(body::json);

-- Functions that run with the server's privileges run with a fixed search path; and with
-- generic plans, as the server's statements do (they are written for them; a custom plan of the
-- enqueue statement would be planned anew at every call, a few milliseconds each).
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

-- A role that may enqueue and nothing else: grant it to an application's role.
do $$
begin
    if not exists (select 1 from pg_roles where rolname = 'ojs_producer') then
        create role ojs_producer nologin;
    end if;
exception
    when duplicate_object or unique_violation then
        null;
    when insufficient_privilege then
        raise notice 'ojs_producer not created (no CREATEROLE): create it and grant it EXECUTE on ojs_enqueue, ojs_enqueue_batch and ojs_enqueue_type';
end;
$$;

revoke execute on function ojs_enqueue(json), ojs_enqueue(jsonb), ojs_enqueue(text),
    ojs_enqueue_batch(json), ojs_enqueue_batch(jsonb), ojs_enqueue_batch(text),
    ojs_enqueue_type(text, json, text, integer, timestamptz, json, json, uuid) from public;
do $$
begin
    if exists (select 1 from pg_roles where rolname = 'ojs_producer') then
        grant execute on function ojs_enqueue(json), ojs_enqueue(jsonb), ojs_enqueue(text),
            ojs_enqueue_batch(json), ojs_enqueue_batch(jsonb), ojs_enqueue_batch(text),
            ojs_enqueue_type(text, json, text, integer, timestamptz, json, json, uuid) to ojs_producer;
    end if;
end;
$$;

comment on function ojs_enqueue(json) is
    'Enqueues one job in the caller''s transaction: takes the body of POST /ojs/v1/jobs and returns its 201 body ({"job": {...}}). Same validation, defaults, queue configuration and events as PUSH; the job is visible, and workers are woken, when the caller commits. Refusals raise SQLSTATE OJ400/OJ409/OJ413/OJ422/OJ429 with the OJS error body as DETAIL. The producer for a queue''s `producers` list is the setting ojs.producer. Unique policies and embedded workflows are refused (OJ422 unsupported); a rate-limited job is released by its key''s releasers once the caller commits.';
comment on function ojs_enqueue_batch(json) is
    'Enqueues a batch in the caller''s transaction, all or nothing: takes the body of POST /ojs/v1/jobs/batch ({"jobs": [...]}) and returns its 201 body ({"jobs": [...], "count": n}). See ojs_enqueue.';
comment on function ojs_enqueue(jsonb) is 'ojs_enqueue(json) for a jsonb body (its members in jsonb''s order).';
comment on function ojs_enqueue(text) is 'ojs_enqueue(json) for a text body (a quoted literal resolves to this one).';
comment on function ojs_enqueue_batch(jsonb) is 'ojs_enqueue_batch(json) for a jsonb body.';
comment on function ojs_enqueue_batch(text) is 'ojs_enqueue_batch(json) for a text body (a quoted literal resolves to this one).';
comment on function ojs_enqueue_type(text, json, text, integer, timestamptz, json, json, uuid) is
    'ojs_enqueue with typed arguments (null: not given; options as in the envelope): returns the new job''s id.';
comment on function ojs_enqueue_bodies(json[], boolean) is
    'The body of ojs_enqueue and ojs_enqueue_batch: reads every envelope (ojs_enqueue_read), applies its queue''s configuration (ojs_enqueue_configure), refuses an id given twice, writes the jobs with ojs_insert_jobs (a full drop_oldest queue makes room once with ojs_queue_drop_oldest), translates its refusals into the OJS errors, and notifies ojs_job_available, ojs_rate_key and ojs_job_enqueued (delivered at commit). Returns the jobs in order.';
comment on function ojs_enqueue_read(json, integer, ojs_setting) is 'One body of an enqueue read: an object, within the size limit (ojs_setting.max_envelope_bytes, compact), a valid envelope (ojs_envelope_read); raises PUSH''s refusal.';
comment on function ojs_enqueue_configure(ojs_new_job, integer, ojs_setting, jsonb, text) is 'A read job with its queue''s configuration applied as PUSH applies it: allowed_job_types, producers (the setting ojs.producer), default_timeout, visibility_timeout, default_retry layered under the job''s retry; raises PUSH''s refusal.';
comment on function ojs_envelope_read(json, integer, ojs_setting) is
    'Reads and validates one job envelope (the PL/pgSQL twin of the server''s envelope reader: same rules, refusals and field paths); raises the refusal PUSH answers. idx: the position in a batch (null for one job).';
comment on function ojs_envelope_first(json, json, text[], boolean) is
    'The first present (non-null) optional attribute of an envelope among names, with its path: each name at the top level then in options, or with names_first every name at the top level first.';
comment on function ojs_enqueue_refuse(integer, text, text, jsonb, boolean) is
    'Raises an enqueue refusal: SQLSTATE OJ<status>, the OJS error message, and DETAIL = the OJS error body.';
comment on function ojs_enqueue_refuse_violations(jsonb, integer, integer, text) is
    'Raises the refusal of field violations ([{path, message}]) as PUSH words it: status 400 invalid_request, or 422 validation_error for a retry policy.';
comment on function ojs_json_article(json) is 'How the server names a JSON value''s kind in messages (an object, a string, null, ...).';
comment on function ojs_json_integer(json) is 'A JSON number that denotes an integer (2, 2.0, 2e0) as the server reads one; null otherwise.';
comment on function ojs_json_members(json) is 'The members of a JSON object in order, a repeated key at its first position with its last value (as the server reads objects).';
comment on function ojs_json_object_text(json[], text[]) is 'Members written as a compact JSON object, in order.';
comment on function ojs_json_compact(text) is 'JSON text without insignificant whitespace.';
comment on function ojs_duration_scaled(numeric, text, bigint) is 'whole.fraction units in whole milliseconds, scaled digit by digit as the server does.';
comment on function ojs_duration_components(text) is 'The <digits>[.<digits>]<letters> components of a duration as a JSON array of {whole, fraction, unit}, or the problem with them.';
comment on function ojs_duration_ms(text) is 'An OJS duration (ISO 8601 weeks to seconds, or the short form 1h30m / 500ms) in milliseconds, or the problem with it.';
comment on function ojs_duration_iso(bigint) is 'Milliseconds as an ISO 8601 duration, as the server writes durations (PT1S, PT0.5S, P7D).';
comment on function ojs_client_time(text) is 'A client timestamp: RFC 3339 with a zone (at_abs), or +<duration> from now (rel_ms), or the problem with it.';
comment on function ojs_envelope_time(json) is 'An envelope''s timestamp attribute: ojs_client_time of a string, with the text to echo for an absolute one, or the problem with it.';
comment on function ojs_envelope_seconds(json, text, text, jsonb) is 'An envelope''s positive whole number of seconds, or a violation appended.';
comment on function ojs_json_present(json) is 'A JSON value, or SQL null for JSON null.';
comment on function ojs_rate_period_read(json) is 'A rate period (second, minute, hour, day or a positive duration) in milliseconds; null if it is none.';
comment on function ojs_rate_limit_read(json) is 'A rate limit''s count (1 to 2^31 - 1); null if it is none.';
comment on function ojs_rate_window_read(json, text, jsonb) is 'A rate window {limit, period} as canonical JSON, or its violations appended.';
comment on function ojs_rate_policy_read(json, text, text) is 'A job''s rate_limit (the PL/pgSQL twin of the server''s rate_limit::parse): its key (queue:<queue> without one) and canonical form, or its violations.';
comment on function ojs_priority_read(json, integer) is 'A priority value: an integer 0..max or critical/high/normal/low/bulk; outcome ok, range or invalid.';
comment on function ojs_retry_interval(json, text, text, jsonb) is 'A positive interval of a retry object, as a duration string (name) or whole milliseconds (name_ms); problems appended to violations.';
comment on function ojs_retry_read(json, text) is 'A retry object read with defaults: the stored effective policy ({} for the default) and max_attempts, or the violations.';
comment on function ojs_uuidv7() is 'A new UUIDv7 (millisecond Unix time, then random bits).';
comment on function ojs_wire_time(timestamptz) is 'A timestamp as the server writes them (UTC, milliseconds, Z), as a JSON string.';
comment on function ojs_job_wire(ojs_job) is 'A job in its OJS JSON form, as GET /ojs/v1/jobs/{id} shows it under job.';
comment on function ojs_glob(text, text) is 'Whether value matches a queue access pattern (* matches any run of characters).';
