-- ojsd schema, part 8: fair scheduling (seed 002): worker pools, pool concurrency across
-- replicas, per-tenant fair ordering within a priority level, and the dispatch counts behind
-- the scheduling statistics.

---------------------------------------------------------------------------------------------
-- Worker pools (seed 002 §6). A worker names its pool when it registers (`ojs_worker.pool`);
-- the pool's settings then replace what its FETCH asks for. Validation happens in the server.
---------------------------------------------------------------------------------------------
create table ojs_pool (
    name                   text         not null,
    queues                 text[]       not null,
    concurrency            integer,
    strategy               text         not null default 'round-robin',
    weights                jsonb        not null default '{}',
    isolated               boolean      not null default false,
    starvation_prevention  jsonb        not null,
    tenant_fairness        jsonb        not null,
    created_at             timestamptz  not null default now(),
    updated_at             timestamptz  not null default now(),
    constraint ojs_pool_pkey primary key (name),
    constraint ojs_pool_queues_not_empty check (cardinality(queues) > 0),
    constraint ojs_pool_concurrency_non_negative check (concurrency is null or concurrency >= 0),
    constraint ojs_pool_strategy check (strategy in ('strict', 'round-robin', 'weighted', 'least-loaded'))
);

comment on table ojs_pool is 'Worker pools (fair scheduling): the queues their members consume and how.';
comment on column ojs_pool.name is 'Pool name; workers name it in their registration or heartbeat.';
comment on column ojs_pool.queues is 'Queues the members consume, in order of preference.';
comment on column ojs_pool.concurrency is 'Most jobs active at once across all members on all replicas; null = no limit.';
comment on column ojs_pool.strategy is 'How a FETCH spreads over the queues: strict, round-robin, weighted or least-loaded.';
comment on column ojs_pool.weights is 'Queue weights of the weighted strategy (queue -> integer >= 1; missing = 1).';
comment on column ojs_pool.isolated is 'Whether the pool''s queues are served to its members only.';
comment on column ojs_pool.starvation_prevention is 'Object: enabled, rotation_interval (ISO 8601), min_dispatch_ratio.';
comment on column ojs_pool.created_at is 'When the pool was first saved.';
comment on column ojs_pool.updated_at is 'When the pool was last saved.';
comment on column ojs_pool.tenant_fairness is 'Object: enabled, strategy (fair-share), weights ("tenant:<id>" -> integer), default_weight.';

---------------------------------------------------------------------------------------------
-- Tenant-fair queues: the queues of pools with tenant fairness enabled, with the tenant
-- weights. Kept in step with ojs_pool by the server (two pools may not give one queue
-- different tenant weights).
---------------------------------------------------------------------------------------------
create table ojs_fair_queue (
    queue           text     not null,
    pool            text     not null,
    weights         jsonb    not null default '{}',
    default_weight  integer  not null default 1,
    constraint ojs_fair_queue_pkey primary key (queue),
    constraint ojs_fair_queue_default_weight_positive check (default_weight >= 1)
);

comment on table ojs_fair_queue is 'Queues dispatched fairly across tenants (meta.tenant_id), with the tenant weights.';
comment on column ojs_fair_queue.queue is 'The tenant-fair queue.';
comment on column ojs_fair_queue.pool is 'The pool whose tenant_fairness settings apply.';
comment on column ojs_fair_queue.weights is 'Tenant weights: "tenant:<id>" -> integer >= 1.';
comment on column ojs_fair_queue.default_weight is 'Weight of a tenant not named in weights.';

---------------------------------------------------------------------------------------------
-- Job columns. Added without a default, then given one (see V7): older rows read as null.
--   pool         the pool of the worker that claimed the job (pool concurrency counts it);
--   tenant_fair  the job is in a tenant-fair queue (set at enqueue);
--   tenant       its tenant (meta.tenant_id, '' for none), set when it is tagged;
--   fair_key     its virtual finish time among the tenants of its queue and priority level
--                while it is available; the fair claim orders by it.
---------------------------------------------------------------------------------------------
alter table ojs_job add column pool text;
alter table ojs_job add column tenant_fair boolean;
alter table ojs_job alter column tenant_fair set default false;
alter table ojs_job add column tenant text;
alter table ojs_job add column fair_key double precision;

comment on column ojs_job.pool is 'Pool of the worker that claimed the job, if it had one.';
comment on column ojs_job.tenant_fair is 'Whether the job is in a tenant-fair queue (dispatched by fair_key).';
comment on column ojs_job.tenant is 'Tenant of a tenant-fair job (meta.tenant_id; empty string for none).';
comment on column ojs_job.fair_key is 'Virtual finish time of a tenant-fair job while available: lower dispatches first within its priority.';

-- Active jobs of a pool (pool concurrency).
create index ojs_job_active_pool_idx on ojs_job (pool) where state = 'active' and pool is not null;

-- The fair claim's order: priority, then virtual finish time, then seq. Only tenant-fair jobs
-- are in it, so other queues pay nothing for it.
create index ojs_job_fair_idx on ojs_job (queue, priority, fair_key, seq)
    where state = 'available' and fair_key is not null;

-- A tenant's last tag in its queue and priority level.
create index ojs_job_fair_tenant_idx on ojs_job (queue, priority, tenant, fair_key)
    where state = 'available' and fair_key is not null;

---------------------------------------------------------------------------------------------
-- Tagging (start-time fair queuing, per queue and priority level). When a job of a
-- tenant-fair queue becomes available it gets
--     fair_key = max(V, last tag of its tenant among available jobs of that level) + 1 / weight
-- where V is the smallest tag available at that level (the level's virtual time: where
-- dispatch stands). A tenant with a backlog thus has tags spaced 1 / weight apart from V on,
-- and a tenant arriving later starts at V: its jobs interleave with the backlog instead of
-- queueing behind it, in proportion to the weights. An idle tenant keeps no credit. Tags are
-- only compared within one queue and priority level, so fairness never crosses priorities.
-- No row is locked: two concurrent transactions tagging the same tenant may give equal tags
-- (a brief tie, resolved by seq).
---------------------------------------------------------------------------------------------
create function ojs_tenant_weight(fair ojs_fair_queue, tenant text) returns double precision
    language sql
    immutable
as $$
    select coalesce((fair.weights ->> ('tenant:' || tenant))::double precision,
                    fair.default_weight::double precision)
$$;

create function ojs_job_fair_tag() returns trigger
    language plpgsql
as $$
declare
    fair ojs_fair_queue;
    v double precision;
    last double precision;
begin
    select * into fair from ojs_fair_queue f where f.queue = new.queue;
    if not found then
        new.tenant_fair := false;
        new.tenant := null;
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

create trigger ojs_job_fair_tag_insert
    before insert on ojs_job
    for each row
    when (new.tenant_fair and new.state = 'available')
    execute function ojs_job_fair_tag();

create trigger ojs_job_fair_tag_update
    before update of state, queue on ojs_job
    for each row
    when (new.tenant_fair and new.state = 'available'
          and (old.state <> 'available' or old.queue <> new.queue))
    execute function ojs_job_fair_tag();

-- Enqueues call this (through the enqueue statement's generation check) under a shared lock
-- that a pool change takes exclusively, so a pool change that makes queues tenant-fair sees
-- every job enqueued before it, and every enqueue after it sees the new generation. The
-- generation is read after the lock with a fresh snapshot (a volatile function's query).
create function ojs_config_generation_locked() returns bigint
    language plpgsql
    volatile
as $$
begin
    perform pg_advisory_xact_lock_shared(7081, 1);
    return (select generation from ojs_queue_config_generation);
end
$$;

---------------------------------------------------------------------------------------------
-- Dispatch counts per second, queue and pool, added to by every replica (about every second),
-- for the scheduling statistics and starvation detection. Pruned after a few minutes.
---------------------------------------------------------------------------------------------
create table ojs_dispatch_second (
    second      timestamptz  not null,
    queue       text         not null,
    pool        text         not null,
    dispatched  bigint       not null default 0,
    wait_ms     bigint       not null default 0,
    constraint ojs_dispatch_second_pkey primary key (second, queue, pool)
);

create index ojs_dispatch_second_queue_idx on ojs_dispatch_second (queue, second);

comment on table ojs_dispatch_second is 'Jobs dispatched per second, queue and pool, over all replicas (recent minutes only).';
comment on column ojs_dispatch_second.second is 'The second (truncated) the jobs were dispatched in.';
comment on column ojs_dispatch_second.queue is 'Queue the jobs came from.';
comment on column ojs_dispatch_second.pool is 'Pool of the fetching workers ('''' for none).';
comment on column ojs_dispatch_second.dispatched is 'Jobs dispatched.';
comment on column ojs_dispatch_second.wait_ms is 'Sum of their waits from available to dispatch, in milliseconds.';

analyze ojs_pool;
analyze ojs_fair_queue;
analyze ojs_dispatch_second;
