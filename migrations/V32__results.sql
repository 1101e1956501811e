-- Results (OJS results extension): how long a job's result is served, and a wake-up when a job
-- somebody awaits ends.
--
-- A job's `result_ttl` stays where the envelope put it, a top-level attribute in `extra`: the
-- ACK reads it there to drop the result of a job whose `result_ttl` is 0, and the result reads
-- to tell when a result expired. No column is added for it.
--
-- `result_awaited` is set on a job that a client waits for (GET /ojs/v1/jobs/{id}/result
-- ?wait=true): the first waiter sets it, once. When an awaited job ends (a change of state to
-- completed, cancelled or discarded, or the delete with which an ACK moves it to
-- ojs_job_done), a trigger sends its id on `ojs_job_ended`, which every replica listens to and
-- which wakes that replica's waiters for the job. The triggers' WHEN reads only the row: for a
-- job that nobody awaits they queue nothing and call nothing, so the jobs that are never
-- awaited pay nothing for it, and waiting clients cost Postgres nothing while they wait.
--
-- The column is not indexed: setting the flag (an UPDATE of a waiting or active job) can be a
-- HOT update.
--
-- Upgrade: adds a nullable column (no rewrite) to ojs_job and ojs_job_done, and restates
-- ojs_job_all with it. The ACK statement of earlier releases names ojs_job's columns in a
-- row cast: stop replicas of earlier releases before migrating.

alter table ojs_job add column result_awaited boolean;
alter table ojs_job_done add column result_awaited boolean;

comment on column ojs_job.result_awaited is 'True once a client waits for the job''s result: its end is then announced on the ojs_job_ended channel (migration V32).';
comment on column ojs_job_done.result_awaited is 'As ojs_job.result_awaited.';

create or replace view ojs_job_all as
select * from ojs_job
union all
select d.id, d.seq, d.type, d.queue, d.args, d.meta, d.priority, d.state, d.attempt,
       d.max_attempts, d.retry, d.timeout_ms, d.visibility_timeout_ms, d.scheduled_at,
       d.scheduled_at_input, d.expires_at, d.expires_at_input, d.enqueue_ttl_secs,
       d.total_timeout_secs, d.tags, d.schema_uri, d.unique_policy, d.unique_key, d.extra,
       d.created_at, d.enqueued_at, d.activated_at, d.started_at, d.visible_until,
       d.reservation_ms, d.worker_id, d.next_retry_at, d.retry_delay_ms, d.completed_at,
       d.cancelled_at, d.discarded_at, d.dead_lettered_at, d.result, d.error, d.errors,
       d.timeout_at, d.claim_deadline_at, d.total_deadline_at, d.re_enqueued_at,
       d.priority_aging_ms, d.original_queue, d.capacity_tracked, d.pool, d.tenant_fair,
       d.tenant, d.fair_key, d.rate_key, d.rate_held, d.lease_id,
       'taken'::ojs_job_phase, case when d.rate_key is not null or d.tenant <> '' then false end,
       d.result_awaited
  from ojs_job_done d;
comment on column ojs_job_all.result_awaited is 'As ojs_job.result_awaited.';

-- Announces the end of an awaited job: its id on ojs_job_ended (delivered at commit).
create function ojs_job_ended_notify() returns trigger
    language plpgsql
    set search_path from current
as $$
begin
    if tg_op = 'DELETE' then
        perform pg_notify('ojs_job_ended', old.id::text);
    else
        perform pg_notify('ojs_job_ended', new.id::text);
    end if;
    return null;
end;
$$;
comment on function ojs_job_ended_notify() is 'Trigger function: sends an awaited job''s id on ojs_job_ended when it ends (migration V32).';

create trigger ojs_job_ended_update after update of state on ojs_job
    for each row
    when (new.result_awaited and new.state in ('completed', 'cancelled', 'discarded')
          and old.state not in ('completed', 'cancelled', 'discarded'))
    execute function ojs_job_ended_notify();
-- An ACK deletes the job from ojs_job (and keeps it in ojs_job_done); so does deleting a job.
create trigger ojs_job_ended_delete after delete on ojs_job
    for each row
    when (old.result_awaited and old.state not in ('completed', 'cancelled', 'discarded'))
    execute function ojs_job_ended_notify();
comment on trigger ojs_job_ended_update on ojs_job is 'Announces an awaited job''s end by a change of state (discarded, cancelled; a completion not moved by an ACK) on ojs_job_ended.';
comment on trigger ojs_job_ended_delete on ojs_job is 'Announces an awaited job''s end by its removal from ojs_job (an ACK moving it to ojs_job_done, or a delete) on ojs_job_ended.';
