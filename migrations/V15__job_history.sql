-- Completed jobs leave the live table: ojs_job_done, partitioned by day of completion.
--
-- Until now a job's whole life was three versions of one ojs_job row, and every completed job
-- stayed in the table the claims walk until the pruner deleted it, row by row. From here on
-- the ACK statement deletes the job from ojs_job and, when its queue keeps completed jobs,
-- inserts it into ojs_job_done in the same statement. ojs_job holds the jobs that are not
-- completed (waiting, active, and for now cancelled and discarded ones); retention empties
-- ojs_job_done by dropping whole days. The view ojs_job_all shows every job, live or
-- completed, with ojs_job's columns.
--
-- ojs_job_done has exactly ojs_job's columns, in the same order: a job moves with
-- `insert ... select (j).*`, and the view is a union of the two. A column added to ojs_job
-- must be added to ojs_job_done too (tests/integration/schema.rs checks it).
--
-- Upgrade: this migration moves every completed job of ojs_job in one transaction, holding
-- ojs_job's row locks for the moved rows and an exclusive lock on the new tables only (12 s
-- for 1,000,000 completed jobs on a 2-core machine). Replicas of the previous version keep
-- working on ojs_job meanwhile and after it, but they leave completed jobs in ojs_job (where
-- the new version's reads still find them, through ojs_job_all, and its pruner removes them)
-- and no longer see the completed jobs that moved: replace them before long.

create table ojs_job_done (like ojs_job including defaults)
    partition by range (completed_at);

alter table ojs_job_done
    add constraint ojs_job_done_is_completed check (state = 'completed'),
    add constraint ojs_job_done_completed_at_set check (completed_at is not null);

-- Rows whose day has no partition (the partitions are made days ahead, by the migration and
-- the pruner) land here rather than fail the ACK. It is normally empty.
create table ojs_job_done_default partition of ojs_job_done default;

-- Lookups by id (INFO, the admin API): one probe per partition.
create index ojs_job_done_id_idx on ojs_job_done (id);
-- Retention's per-queue deletes and the admin listings of completed jobs, oldest first.
create index ojs_job_done_completed_idx on ojs_job_done (completed_at);
-- Unique policies that count completed jobs.
create index ojs_job_done_unique_key_idx on ojs_job_done (unique_key) where unique_key is not null;

-- Makes the partition of `day` (UTC) if it does not exist, and returns its name. The table is
-- made alone and then attached, which locks ojs_job_done only in SHARE UPDATE EXCLUSIVE mode
-- (ACKs go on). A day some of whose rows already sit in the default partition gets no
-- partition (attaching it would fail); its rows stay in the default partition until the
-- pruner deletes them. Returns null then. Sessions making the same day at once: one makes it,
-- the others wait for it and return its name.
create function ojs_job_done_partition(day date) returns text
    language plpgsql
    set search_path from current
as $$
declare
    part text := format('ojs_job_done_%s', to_char(day, 'YYYYMMDD'));
    low timestamptz := (day::timestamp at time zone 'UTC');
    high timestamptz := ((day + 1)::timestamp at time zone 'UTC');
begin
    if to_regclass(part) is not null then
        return part;
    end if;
    if exists (select 1 from ojs_job_done_default where completed_at >= low and completed_at < high) then
        return null;
    end if;
    begin
        execute format('create table %I (like ojs_job_done including defaults including constraints)', part);
    exception when duplicate_table then
        -- Made by another session meanwhile (which attaches it).
        return part;
    end;
    -- The partition's bound as a constraint first, so the attach need not scan it.
    execute format('alter table %I add constraint %I check (completed_at >= %L and completed_at < %L)',
                   part, part || '_bound', low, high);
    execute format('alter table ojs_job_done attach partition %I for values from (%L) to (%L)',
                   part, low, high);
    execute format('alter table %I drop constraint %I', part, part || '_bound');
    execute format('comment on table %I is %L', part,
                   format('Jobs of ojs_job_done completed on %s (UTC). Dropped whole by retention.', day));
    return part;
end
$$;

-- The partitions of ojs_job_done with their bounds, oldest first (the default partition last,
-- without bounds).
create view ojs_job_done_partitions as
select c.relname::text as name,
       (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''([^'']+)''\)'))[1]::timestamptz as low,
       (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']+)''\)'))[1]::timestamptz as high,
       pg_relation_size(c.oid) as bytes
  from pg_inherits i
  join pg_class c on c.oid = i.inhrelid
 where i.inhparent = 'ojs_job_done'::regclass
 order by 2 nulls last;

-- A client-supplied id may not name a job that already completed, as it may not name a live
-- one: the enqueue statement raises the primary key's violation for both.
create function ojs_job_id_taken(id uuid) returns boolean
    language plpgsql
as $$
begin
    raise unique_violation using
        message = format('job id %s is taken', id),
        constraint = 'ojs_job_pkey',
        table = 'ojs_job';
end
$$;

-- The days of the completed jobs already here, and the next three days.
select ojs_job_done_partition(d::date)
  from (select distinct (completed_at at time zone 'UTC')::date as d
          from ojs_job where state = 'completed'
        union
        select ((now() at time zone 'UTC')::date + n) from generate_series(0, 3) n) days
 order by 1;

-- Completed jobs move out of ojs_job, with every column as it was.
with moved as (
    delete from ojs_job j where j.state = 'completed' returning j
)
insert into ojs_job_done select (m.j).* from moved m;

create view ojs_job_all as
select * from ojs_job
union all
select * from ojs_job_done;

-- Operators' views count completed jobs where they now are.
create or replace view ojs_job_counts as
select queue, state, count(*) as jobs, min(created_at) as oldest_created_at,
       max(created_at) as newest_created_at
  from ojs_job_all
 group by queue, state;

-- ojs_queue_overview counts completed jobs where they now are (otherwise as in V7).
create or replace view ojs_queue_overview as
with d as (
    select config from ojs_queue where name = '_default'
), counts as (
    select queue,
           count(*) filter (where state = 'available') as available,
           count(*) filter (where state = 'active') as active,
           count(*) filter (where state = 'scheduled') as scheduled,
           count(*) filter (where state = 'retryable') as retryable,
           count(*) filter (where state = 'pending') as pending,
           count(*) filter (where state = 'completed') as completed,
           count(*) filter (where state = 'discarded') as discarded,
           count(*) filter (where state = 'cancelled') as cancelled
      from ojs_job_all
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
             / nullif((coalesce(q.config -> 'max_size', d.config -> 'max_size'))::bigint, 0)::numeric, 4)
           as utilization,
       q.config as own_config,
       q.created_at,
       q.updated_at
  from ojs_queue q
  left join d on true
  left join counts c on c.queue = q.name
  left join ojs_queue_capacity cap on cap.queue = q.name
 where q.name <> '_default';

-- ojs_job_done and ojs_job_all mean by each column what ojs_job does.
do $$
declare
    col record;
begin
    for col in
        select a.attname, col_description('ojs_job'::regclass, a.attnum) as comment
          from pg_attribute a
         where a.attrelid = 'ojs_job'::regclass and a.attnum > 0 and not a.attisdropped
    loop
        execute format('comment on column ojs_job_done.%I is %L', col.attname, col.comment);
        execute format('comment on column ojs_job_all.%I is %L', col.attname, col.comment);
    end loop;
end
$$;

comment on table ojs_job_done is
    'Completed jobs, with ojs_job''s columns, partitioned by day of completed_at (UTC). The ACK moves a job here from ojs_job in its statement (or deletes it, for a queue that keeps no completed jobs); retention drops whole days and deletes per queue within them.';
comment on table ojs_job_done_default is
    'Completed jobs of days without a partition of their own (normally none).';
comment on function ojs_job_done_partition(date) is
    'Makes and attaches the ojs_job_done partition of a UTC day, unless it exists (returns its name) or rows of that day sit in the default partition (returns null).';
comment on view ojs_job_done_partitions is
    'The partitions of ojs_job_done with their bounds and sizes, oldest first; the default partition last.';
comment on column ojs_job_done_partitions.name is 'Partition table.';
comment on column ojs_job_done_partitions.low is 'First instant of completed_at it holds; null for the default partition.';
comment on column ojs_job_done_partitions.high is 'First instant past it; null for the default partition.';
comment on column ojs_job_done_partitions.bytes is 'Size of the partition''s table, without indexes.';
comment on function ojs_job_id_taken(uuid) is
    'Raises the violation of ojs_job_pkey for a client-supplied job id that a completed job holds (called by the enqueue statement).';
comment on view ojs_job_all is
    'Every job, live (ojs_job) or completed (ojs_job_done), with ojs_job''s columns: read any job from here.';
comment on view ojs_job_counts is
    'Number of jobs per queue and state, completed ones included (scans both tables; filter by queue for big tables).';
