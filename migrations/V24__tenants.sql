-- Tenants (`X-OJS-Tenant`, multi-tenancy extension): every job with a `meta.tenant_id` carries it
-- in `ojs_job.tenant` (and so in `ojs_job_done.tenant` once finished), which tenant-scoped
-- FETCHes, reads and the tenant statistics use through `ojs_job_tenant_idx` and
-- `ojs_job_done_tenant_idx`. Before, `tenant` was set only for jobs of tenant-fair queues (V8),
-- where a job without a tenant has `''`; it keeps that meaning there.
--
-- API keys may be bound to a tenant (`ojs_api_key.tenant`): the key then acts as that tenant.
--
-- Existing jobs with a tenant are tagged here (one pass over `ojs_job`); finished jobs already in
-- `ojs_job_done` are not (the tenant statistics count them from the next ones on).

alter table ojs_api_key add column tenant text;
alter table ojs_api_key add constraint ojs_api_key_tenant_format
    check (tenant ~ '^[a-zA-Z0-9][a-zA-Z0-9._:-]*$' and octet_length(tenant) <= 255);
comment on column ojs_api_key.tenant is 'The tenant the key acts as (X-OJS-Tenant): its enqueues are tagged with it and its reads and FETCHes see only its jobs; null: any tenant, or none.';

create or replace function ojs_insert_jobs(
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
                pool, rate_key, tenant)
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
               rate_key,
               -- The tenant (migration V24); a tenant-fair queue's tagging trigger sets it too.
               nullif(meta::json ->> 'tenant_id', '')
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

create or replace function ojs_job_fair_tag() returns trigger
    language plpgsql
as $$
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
       and j.state = 'available' and j.fair_key is not null
     order by j.fair_key
     limit 1;
    select j.fair_key into last
      from ojs_job j
     where j.queue = new.queue and j.priority = new.priority and j.tenant = new.tenant
       and j.state = 'available' and j.fair_key is not null
     order by j.fair_key desc
     limit 1;
    new.fair_key := greatest(coalesce(v, 0), coalesce(last, 0)) + 1 / ojs_tenant_weight(fair, new.tenant);
    return new;
end
$$;

update ojs_job set tenant = nullif(meta ->> 'tenant_id', '')
 where tenant is null and meta::text like '%tenant_id%';

create index ojs_job_tenant_idx on ojs_job (tenant, queue, state) where tenant <> '';
create index ojs_job_done_tenant_idx on ojs_job_done (tenant, completed_at) where tenant <> '';

comment on column ojs_job.tenant is 'The job''s tenant: meta.tenant_id (null without one; in a tenant-fair queue, the empty string). Written by the enqueue (ojs_insert_jobs) and by the tenant-fair tagging trigger.';
comment on index ojs_job_tenant_idx is 'Jobs by tenant: tenant-scoped FETCH, reads and statistics (X-OJS-Tenant).';
comment on index ojs_job_done_tenant_idx is 'Finished jobs by tenant and completion time: the tenant statistics.';
