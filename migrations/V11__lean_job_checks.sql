-- ojsd schema, part 11: what every write statement on ojs_job pays before it touches a row.
--
-- PostgreSQL rebuilds a table's CHECK expressions and its triggers' WHEN conditions from their
-- stored text at every execution of a statement that writes the table; a cached plan does not
-- keep them. On ojs_job that was 18 kB of CHECK text and 5.3 kB of update-trigger conditions
-- for each ENQUEUE, claim, ACK and NACK, measured at about 70 and 37 µs of backend CPU per
-- state-changing statement, a third of a one-row update's cost.
--
-- 1. The CHECKs that restate the server's own validation of a job envelope go: the type and
--    queue formats, the positive durations and counts, and the JSON shapes of args, meta, retry
--    and extra. ojsd is the only writer of these columns and refuses such input with a 400 before
--    any statement runs (tests/integration/validation.rs covers each). The CHECKs that tie a
--    job's state to its timestamps and reservation stay: those guard the server's own SQL.
-- 2. The update triggers keep a one-or-two-term WHEN that is false for an unbounded,
--    non-fair queue; the exact condition moved into their functions, which return early when
--    it does not hold. What the triggers do is unchanged.

alter table ojs_job
    drop constraint ojs_job_type_format,
    drop constraint ojs_job_queue_format,
    drop constraint ojs_job_args_is_array,
    drop constraint ojs_job_meta_is_object,
    drop constraint ojs_job_retry_is_object,
    drop constraint ojs_job_extra_is_object,
    drop constraint ojs_job_priority_non_negative,
    drop constraint ojs_job_max_attempts_non_negative,
    drop constraint ojs_job_timeout_positive,
    drop constraint ojs_job_visibility_timeout_positive,
    drop constraint ojs_job_enqueue_ttl_positive,
    drop constraint ojs_job_total_timeout_positive,
    drop constraint ojs_job_priority_aging_positive;

create or replace function ojs_job_capacity_move() returns trigger
    language plpgsql
as $$
begin
    -- The trigger's WHEN only filters; this is the condition.
    if ((old.capacity_tracked
         and old.state not in ('completed', 'cancelled', 'discarded')
         and new.state in ('completed', 'cancelled', 'discarded'))
        or (old.state in ('completed', 'cancelled', 'discarded')
            and new.state not in ('completed', 'cancelled', 'discarded'))
        or old.queue is distinct from new.queue) is not true then
        return new;
    end if;
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

create or replace trigger ojs_job_capacity_move
    before update of state, queue on ojs_job
    for each row
    when (old.capacity_tracked
          or old.state in ('completed', 'cancelled', 'discarded')
          or old.queue <> new.queue)
    execute function ojs_job_capacity_move();

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

create or replace trigger ojs_job_fair_tag_update
    before update of state, queue on ojs_job
    for each row
    when (new.tenant_fair and new.state = 'available')
    execute function ojs_job_fair_tag();

comment on function ojs_job_capacity_move() is
    'Trigger function of ojs_job_capacity_move. When an update takes a counted job out of the unfinished states, takes a finished job back into them, or moves a job to another queue: subtracts a counted unfinished job from its old queue''s ojs_queue_capacity row and adds an unfinished job to its new queue''s row when that queue is bounded; capacity_tracked then says whether it was added. Returns early otherwise (the trigger''s WHEN is a cheaper, wider filter).';

comment on function ojs_job_fair_tag() is
    'Trigger function of ojs_job_fair_tag_insert and ojs_job_fair_tag_update. For a job that becomes available in a tenant-fair queue (inserted available, or updated into available or into another queue while available), sets tenant (meta.tenant_id, empty for none) and fair_key = max(smallest fair_key among the available jobs of its queue and priority, largest fair_key of its tenant among them) + 1 / weight. In a queue that is not tenant-fair it clears tenant_fair, tenant and fair_key.';

comment on trigger ojs_job_capacity_move on ojs_job is
    'Runs ojs_job_capacity_move() for an update of state or queue of a counted job, a finished job or a job changing queue (the function checks the exact condition), so ojs_queue_capacity stays exact.';

comment on trigger ojs_job_fair_tag_update on ojs_job is
    'Runs ojs_job_fair_tag() for an update of state or queue that leaves a tenant_fair job available; the function acts when the job became available (promotion, activation, release, manual retry) or moved to another queue while available.';
