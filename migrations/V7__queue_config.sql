-- ojsd schema, part 7: queue configuration (seed 003 §6): capacity bounds kept exact under
-- concurrent enqueues, dispatch limits (concurrency, rate), and a view for operators.
--
-- A queue's own configuration is `ojs_queue.config` (fields set explicitly); the `_default` row
-- holds the policy every queue inherits. Resolution (system defaults, then `_default`, then the
-- queue's own values) happens in the server; the SQL below only stores what it needs to enforce
-- bounds atomically.

---------------------------------------------------------------------------------------------
-- Configuration generation: bumped by every configuration change, so each server process can
-- tell cheaply that its cached configuration is stale, and an enqueue statement can refuse to
-- apply defaults from a stale one (SQLSTATE OJ004).
---------------------------------------------------------------------------------------------
create table ojs_queue_config_generation (
    singleton   boolean  not null default true,
    generation  bigint   not null default 0,
    constraint ojs_queue_config_generation_pkey primary key (singleton),
    constraint ojs_queue_config_generation_singleton check (singleton)
);

insert into ojs_queue_config_generation default values;

comment on table ojs_queue_config_generation is
    'One row: a counter bumped by every queue configuration change (cache invalidation).';
comment on column ojs_queue_config_generation.singleton is 'Always true: the table has one row.';
comment on column ojs_queue_config_generation.generation is 'Incremented by every configuration change of a queue or of _default.';

---------------------------------------------------------------------------------------------
-- Capacity: one row per bounded queue with its resolved bounds and its current depth (jobs and
-- bytes of non-terminal jobs). The `_default` row, when present, holds the bounds every queue
-- without its own gets when it is created. Enqueues add to the counters in the same statement
-- that inserts the jobs and abort when a bound would be passed; jobs leaving the non-terminal
-- states (or the queue) subtract through the trigger below. Jobs counted are flagged
-- (`ojs_job.capacity_tracked`), so jobs of unbounded queues never touch these rows.
---------------------------------------------------------------------------------------------
create table ojs_queue_capacity (
    queue            text    not null,
    max_jobs         bigint,
    max_bytes        bigint,
    overflow_policy  text    not null default 'reject',
    jobs             bigint  not null default 0,
    bytes            bigint  not null default 0,
    constraint ojs_queue_capacity_pkey primary key (queue),
    constraint ojs_queue_capacity_policy check (overflow_policy in ('reject', 'drop_oldest', 'block'))
);

comment on table ojs_queue_capacity is
    'Bounded queues: resolved max_size (max_jobs), max_size_bytes (max_bytes), overflow policy, and the current count and total size of their non-terminal jobs.';
comment on column ojs_queue_capacity.queue is 'The bounded queue, or _default for the bounds new queues take.';
comment on column ojs_queue_capacity.max_jobs is 'Resolved max_size: most unfinished jobs; null = no bound on the count.';
comment on column ojs_queue_capacity.max_bytes is 'Resolved max_size_bytes: most total size of unfinished jobs; null = no bound on the size.';
comment on column ojs_queue_capacity.overflow_policy is 'What an enqueue past a bound does: reject, drop_oldest or block.';
comment on column ojs_queue_capacity.jobs is 'Non-terminal jobs (active included) now in the queue.';
comment on column ojs_queue_capacity.bytes is 'Total size (args + meta, bytes) of those jobs.';

-- Added without a default (a default would make PostgreSQL check every stored expression using
-- the row type), then given one: rows older than this migration read as null, meaning false.
alter table ojs_job add column capacity_tracked boolean;
alter table ojs_job alter column capacity_tracked set default false;

comment on column ojs_job.capacity_tracked is
    'Whether the job is counted in its queue''s ojs_queue_capacity row (its queue was bounded when it entered); null = false.';

-- The size a job counts for against max_size_bytes.
create function ojs_job_size(args json, meta json) returns bigint
    language sql immutable parallel safe
    return octet_length(args::text) + octet_length(meta::text);

-- Keeps the counters right as jobs move: leaving the non-terminal states or the queue subtracts
-- (when the job was counted); entering them, or another queue, adds when that queue is bounded.
create function ojs_job_capacity_move() returns trigger
    language plpgsql
as $$
begin
    if old.capacity_tracked and old.state not in ('completed', 'cancelled', 'discarded') then
        update ojs_queue_capacity
           set jobs = jobs - 1, bytes = bytes - ojs_job_size(old.args, old.meta)
         where queue = old.queue;
    end if;
    if new.state not in ('completed', 'cancelled', 'discarded') then
        update ojs_queue_capacity
           set jobs = jobs + 1, bytes = bytes + ojs_job_size(new.args, new.meta)
         where queue = new.queue;
        new.capacity_tracked := found;
    end if;
    return new;
end;
$$;

create trigger ojs_job_capacity_move
    before update of state, queue on ojs_job
    for each row
    when ((old.capacity_tracked
           and old.state not in ('completed', 'cancelled', 'discarded')
           and new.state in ('completed', 'cancelled', 'discarded'))
          or (old.state in ('completed', 'cancelled', 'discarded')
              and new.state not in ('completed', 'cancelled', 'discarded'))
          or old.queue is distinct from new.queue)
    execute function ojs_job_capacity_move();

create function ojs_job_capacity_delete() returns trigger
    language plpgsql
as $$
begin
    update ojs_queue_capacity
       set jobs = jobs - 1, bytes = bytes - ojs_job_size(old.args, old.meta)
     where queue = old.queue;
    return null;
end;
$$;

create trigger ojs_job_capacity_delete
    after delete on ojs_job
    for each row
    when (old.capacity_tracked and old.state not in ('completed', 'cancelled', 'discarded'))
    execute function ojs_job_capacity_delete();

-- Aborts an enqueue that would pass a bound (SQLSTATE OJ003; message = queue name; detail =
-- JSON with the depth before the enqueue, the bound and the policy).
create function ojs_queue_full(queue text, depth bigint, bound bigint, bytes bigint,
                               bound_bytes bigint, policy text) returns boolean
    language plpgsql
as $$
begin
    raise exception using errcode = 'OJ003', message = queue,
        detail = json_build_object('depth', depth, 'bound', bound, 'bytes', bytes,
                                   'bound_bytes', bound_bytes, 'policy', policy)::text;
end;
$$;

-- The oldest waiting jobs of a bounded queue, for drop_oldest.
create index ojs_job_capacity_idx on ojs_job (queue, created_at, seq)
    where capacity_tracked and state in ('scheduled', 'available', 'pending', 'retryable');

---------------------------------------------------------------------------------------------
-- Dispatch limits. Claims from a queue with a `concurrency` or `rate_limit` are serialized per
-- queue (advisory lock) and count what is active and what started within the rate window.
---------------------------------------------------------------------------------------------
create index ojs_job_active_queue_idx on ojs_job (queue) where state = 'active';

create table ojs_rate_window (
    key         text         not null,
    started_at  timestamptz  not null,
    jobs        integer      not null,
    constraint ojs_rate_window_jobs check (jobs > 0)
);

create index ojs_rate_window_key_idx on ojs_rate_window (key, started_at);

comment on table ojs_rate_window is
    'Job starts under a rate limit: one row per claim (key = "queue:<name>"), kept for one rate period.';
comment on column ojs_rate_window.key is 'Rate-limit key: queue:<queue name>.';
comment on column ojs_rate_window.started_at is 'When the claim started its jobs.';
comment on column ojs_rate_window.jobs is 'Jobs the claim started.';

---------------------------------------------------------------------------------------------
-- Operators: every queue, its jobs by state, and its limits as resolved from its own
-- configuration over _default (system defaults shown as null = unlimited).
---------------------------------------------------------------------------------------------
create view ojs_queue_overview as
with d as (select config from ojs_queue where name = '_default'),
counts as (
    select queue,
           count(*) filter (where state = 'available')  as available,
           count(*) filter (where state = 'active')     as active,
           count(*) filter (where state = 'scheduled')  as scheduled,
           count(*) filter (where state = 'retryable')  as retryable,
           count(*) filter (where state = 'pending')    as pending,
           count(*) filter (where state = 'completed')  as completed,
           count(*) filter (where state = 'discarded')  as discarded,
           count(*) filter (where state = 'cancelled')  as cancelled
      from ojs_job
     group by queue
)
select q.name as queue,
       q.state,
       coalesce(c.available, 0) + coalesce(c.active, 0) + coalesce(c.scheduled, 0)
           + coalesce(c.retryable, 0) + coalesce(c.pending, 0) as depth,
       coalesce(c.available, 0) as available,
       coalesce(c.active, 0) as active,
       coalesce(c.scheduled, 0) as scheduled,
       coalesce(c.retryable, 0) as retryable,
       coalesce(c.pending, 0) as pending,
       coalesce(c.completed, 0) as completed,
       coalesce(c.discarded, 0) as discarded,
       coalesce(c.cancelled, 0) as cancelled,
       (coalesce(q.config -> 'max_size', d.config -> 'max_size'))::bigint as max_size,
       (coalesce(q.config -> 'max_size_bytes', d.config -> 'max_size_bytes'))::bigint as max_size_bytes,
       coalesce(q.config ->> 'overflow_policy', d.config ->> 'overflow_policy', 'reject') as overflow_policy,
       (coalesce(q.config -> 'concurrency', d.config -> 'concurrency'))::bigint as concurrency,
       coalesce(q.config -> 'rate_limit', d.config -> 'rate_limit') as rate_limit,
       cap.jobs as counted_depth,
       round((coalesce(c.available, 0) + coalesce(c.active, 0) + coalesce(c.scheduled, 0)
              + coalesce(c.retryable, 0) + coalesce(c.pending, 0))::numeric
             / nullif((coalesce(q.config -> 'max_size', d.config -> 'max_size'))::bigint, 0), 4)
           as utilization,
       q.config as own_config,
       q.created_at,
       q.updated_at
  from ojs_queue q
  left join d on true
  left join counts c on c.queue = q.name
  left join ojs_queue_capacity cap on cap.queue = q.name
 where q.name <> '_default';

comment on view ojs_queue_overview is
    'Per queue: lifecycle state, jobs by state, and the limits resolved over _default (null = unlimited). counted_depth is the capacity counter of bounded queues.';

comment on column ojs_queue_overview.queue is 'Queue name.';
comment on column ojs_queue_overview.state is 'active, paused or draining.';
comment on column ojs_queue_overview.depth is 'Unfinished jobs (available, active, scheduled, retryable, pending).';
comment on column ojs_queue_overview.available is 'Jobs available.';
comment on column ojs_queue_overview.active is 'Jobs active.';
comment on column ojs_queue_overview.scheduled is 'Jobs scheduled.';
comment on column ojs_queue_overview.retryable is 'Jobs retryable.';
comment on column ojs_queue_overview.pending is 'Jobs pending.';
comment on column ojs_queue_overview.completed is 'Completed jobs retained.';
comment on column ojs_queue_overview.discarded is 'Discarded jobs retained.';
comment on column ojs_queue_overview.cancelled is 'Cancelled jobs retained.';
comment on column ojs_queue_overview.max_size is 'Resolved max_size (null = unlimited).';
comment on column ojs_queue_overview.max_size_bytes is 'Resolved max_size_bytes (null = unlimited).';
comment on column ojs_queue_overview.overflow_policy is 'Resolved overflow policy.';
comment on column ojs_queue_overview.concurrency is 'Resolved concurrency limit (null = unlimited).';
comment on column ojs_queue_overview.rate_limit is 'Resolved rate limit {limit, period} (null = none).';
comment on column ojs_queue_overview.counted_depth is 'The capacity counter of a bounded queue (equals depth).';
comment on column ojs_queue_overview.utilization is 'depth / max_size.';
comment on column ojs_queue_overview.own_config is 'The queue''s own configuration values.';
comment on column ojs_queue_overview.created_at is 'When the queue came into existence.';
comment on column ojs_queue_overview.updated_at is 'Last change of state or configuration.';

-- Statistics for the new tables now. A table that was never analyzed is assumed by the planner
-- to hold several pages of rows; these stay (nearly) empty, so autovacuum may never analyze
-- them, and the enqueue statement, which reads them, would then be re-planned at every
-- execution instead of using its cached generic plan.
analyze ojs_queue;
analyze ojs_queue_capacity;
analyze ojs_queue_config_generation;
analyze ojs_rate_window;
