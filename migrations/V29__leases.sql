-- Leases: a claim's jobs are found through one row per claim statement and worker, not through
-- indexes over active jobs (hot path 3).
--
-- Until now a claim added four index entries per job: the primary key's, and one each in
-- `ojs_job_active_deadline_idx` (the reaper), `ojs_job_active_queue_idx` (queue concurrency)
-- and `ojs_job_worker_idx` (a worker's jobs), plus `ojs_job_active_pool_idx` for a pool's
-- worker. Each heartbeat moved `visible_until`, an indexed column, so it was never a HOT update
-- either. Those four indexes are dropped. What they answered is now answered by `ojs_lease`:
--
--   * Every claim statement writes one lease per FETCH it serves (and every hand-off of a new
--     job to a waiting FETCH one for that job): its worker, queue and pool, the ids of its jobs,
--     how many of them are still open, and the earliest deadline among them (`due_at`). Each
--     job records its lease in `ojs_job.lease_id`, an unindexed column. The ids are kept apart
--     (`ojs_lease_jobs`, written once) so that counting a job off rewrites only a small row.
--   * The statements that end active jobs (ACK, NACK, the reapers' releases, CANCEL) count
--     them off their leases in the same statement: a lease all of whose jobs end in one
--     statement (a batch ACK of a whole FETCH) is deleted there; otherwise `open` goes down,
--     and a lease left with none open becomes due at once.
--   * The reaper reads leases by `due_at`, checks their jobs' own deadlines through the
--     primary key (a heartbeat extends a job's reservation without touching its lease, so a
--     lease may come due early), releases the jobs that are overdue, and moves the lease's
--     `due_at` to the next deadline, with `open` recounted, or deletes it when none is left.
--     Per-job deadlines stay exact.
--   * A worker's jobs, a queue's and a pool's active jobs are the jobs of their open leases
--     that are still active under that lease (`ojs_job_held`). `open` only lets readers skip
--     finished leases: the jobs themselves are always checked, so a count is exact even when
--     `open` runs ahead of the truth (a job ended by a statement that does not count it off,
--     which the reaper corrects when the lease comes due).
--
-- The claim now adds one index entry per job (the primary key's; unique-key and tenant jobs
-- their own one more), and a heartbeat is a HOT update.
--
-- The event arrays (one `ojs_event` row per statement, migration V10) are compressed with lz4
-- instead of pglz: half the CPU per row.
--
-- Upgrade: this migration adds a column to ojs_job and ojs_job_done (the ACK statement of
-- earlier releases names ojs_job's columns) and claims of earlier releases write no lease, so
-- the jobs they claim would never be reaped: stop every replica of an earlier release before
-- migrating. Active jobs are given leases here, one per worker, queue and pool. The statement
-- holds ojs_job's lock while it reads the active jobs and drops the indexes: a moment, however
-- many jobs wait.

create sequence ojs_lease_id_seq;

-- What changes while a lease lives (a small row: counting a job off writes about 80 bytes)...
create table ojs_lease (
    id        bigint primary key default nextval('ojs_lease_id_seq'),
    worker_id text,
    queue     text not null,
    pool      text,
    jobs      integer not null,
    open      integer not null,
    due_at    timestamptz not null
);
alter sequence ojs_lease_id_seq owned by ojs_lease.id;
create index ojs_lease_due_idx on ojs_lease (due_at);
create index ojs_lease_worker_idx on ojs_lease (worker_id) where worker_id is not null;
create index ojs_lease_queue_idx on ojs_lease (queue);
create index ojs_lease_pool_idx on ojs_lease (pool) where pool is not null;

-- ... and what does not: its jobs, written once by the claim, gone with the lease.
create table ojs_lease_jobs (
    lease_id bigint primary key references ojs_lease (id) on delete cascade,
    job_ids  uuid[] not null
);
alter table ojs_lease_jobs alter column job_ids set compression lz4;

comment on table ojs_lease is 'One claim''s hold on its jobs (one row per FETCH served by a claim statement, or per job handed to a waiting FETCH): what the reaper, a worker''s jobs and the counts of active jobs read, instead of indexes over active jobs (migration V29). Its jobs are in ojs_lease_jobs.';
comment on column ojs_lease.id is 'The lease, from ojs_lease_id_seq; its jobs record it in ojs_job.lease_id.';
comment on column ojs_lease.worker_id is 'The claiming worker (null: a FETCH without a worker id).';
comment on column ojs_lease.queue is 'The queue the jobs were claimed from.';
comment on column ojs_lease.pool is 'The claiming worker''s pool, if any.';
comment on column ojs_lease.jobs is 'How many jobs the claim took: a statement that ends that many of them at once deletes the lease.';
comment on column ojs_lease.open is 'Jobs of the lease not yet counted off by the statement that ended them; 0 or less: the lease is due for deletion. May run ahead of the truth (readers check each job), never behind.';
comment on column ojs_lease.due_at is 'When the reaper next looks at the lease: at the latest, the earliest reservation, execution or total deadline among its jobs.';
comment on table ojs_lease_jobs is 'The jobs of a lease (ojs_lease), apart from its counter so that counting a job off does not copy them.';
comment on column ojs_lease_jobs.lease_id is 'The lease.';
comment on column ojs_lease_jobs.job_ids is 'The jobs the claim took (lz4-compressed).';

alter table ojs_job add column lease_id bigint;
alter table ojs_job_done add column lease_id bigint;
comment on column ojs_job.lease_id is 'The lease (ojs_lease) of the claim that holds the job''s current attempt; meaningful only while the job is active. Not indexed: a lease lists its jobs.';
comment on column ojs_job_done.lease_id is 'As ojs_job.lease_id (null once completed).';

create or replace view ojs_job_all as
select * from ojs_job
union all
select * from ojs_job_done;
comment on column ojs_job_all.lease_id is 'As ojs_job.lease_id.';

-- The jobs active now, with the lease that holds each: through the leases, not an index over
-- active jobs.
create view ojs_job_held as
select l.id as lease_id, l.worker_id, l.queue, l.pool, j.id as job_id, j.started_at
  from ojs_lease l
  join ojs_lease_jobs lj on lj.lease_id = l.id
 cross join lateral unnest(lj.job_ids) as x(id)
  join ojs_job j on j.id = x.id
 where l.open > 0 and j.lease_id = l.id and j.state::text = 'active';
comment on view ojs_job_held is 'Every active job with the lease (ojs_lease) that holds it: a worker''s, queue''s or pool''s active jobs, read through its leases and the primary key.';
comment on column ojs_job_held.lease_id is 'The lease.';
comment on column ojs_job_held.worker_id is 'The worker holding the job.';
comment on column ojs_job_held.queue is 'The job''s queue.';
comment on column ojs_job_held.pool is 'The worker''s pool, if any.';
comment on column ojs_job_held.job_id is 'The active job.';
comment on column ojs_job_held.started_at is 'When its current attempt started.';

-- Leases for the jobs active now: one per worker, queue and pool.
with held as (
    select nextval('ojs_lease_id_seq') as lease_id, worker_id, queue, pool, ids, due_at
      from (select worker_id, queue, pool, array_agg(id) as ids,
                   min(coalesce(least(visible_until, timeout_at, total_deadline_at), now())) as due_at
              from ojs_job
             where state = 'active'
             group by worker_id, queue, pool) g
),
leases as (
    insert into ojs_lease (id, worker_id, queue, pool, jobs, open, due_at)
    select lease_id, worker_id, queue, pool, cardinality(ids), cardinality(ids), due_at from held
),
lease_jobs as (
    insert into ojs_lease_jobs (lease_id, job_ids) select lease_id, ids from held
)
update ojs_job j
   set lease_id = h.lease_id
  from held h
 where j.id = any(h.ids);

drop index ojs_job_active_deadline_idx;
drop index ojs_job_active_queue_idx;
drop index ojs_job_worker_idx;
drop index ojs_job_active_pool_idx;

alter table ojs_event
    alter column job_ids set compression lz4,
    alter column trace_ids set compression lz4,
    alter column attempts set compression lz4,
    alter column durations_ms set compression lz4,
    alter column results set compression lz4,
    alter column priorities set compression lz4,
    alter column unique_keys set compression lz4,
    alter column scheduled_ats set compression lz4;

-- The enqueue (V24's, with the lease of each job handed to a waiting FETCH).
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
                pool, rate_key, tenant, lease_id)
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
               nullif(meta::json ->> 'tenant_id', ''),
               -- A handed-off job's lease (migration V29), one per job.
               case when state = 'active' then nextval('ojs_lease_id_seq') end
          from resolved
         where not exists (select 1 from refused) and not exists (select 1 from overflow)
         -- Rows are inserted in request order, so `seq` (FIFO tie-breaker) follows it.
         order by ord
        returning j as job, j.queue, j.state
    ),
    -- The lease of each handed-off job (migration V29): what the reaper and the counts of
    -- active jobs read.
    leases as (
        insert into ojs_lease (id, worker_id, queue, pool, jobs, open, due_at)
        select (i.job).lease_id, (i.job).worker_id, i.queue, (i.job).pool, 1, 1,
               least((i.job).visible_until, (i.job).timeout_at, (i.job).total_deadline_at)
          from inserted i
         where i.state = 'active'
    ),
    lease_jobs as (
        insert into ojs_lease_jobs (lease_id, job_ids)
        select (i.job).lease_id, array[(i.job).id] from inserted i where i.state = 'active'
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
