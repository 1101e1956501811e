-- The ACK completes a job where it is (hot path 3): one non-HOT write per job, the claim.
--
-- Since V15 the ACK deleted the job from ojs_job and inserted it into the day's partition of
-- ojs_job_done: a second full write per job, with two index entries, a trigger and the whole
-- row copied. Since V30 no index of ojs_job reads `state` or any column the ACK sets, so the
-- ACK now updates the row in place (`state`, `completed_at`, `result`, `error`,
-- `visible_until`, `timeout_at`): a HOT update, the new version on the same page (fillfactor
-- 50) and no index entry. A cancel or a discard of an active job is one too.
--
-- Completed jobs therefore stay in ojs_job until retention deletes them, walking the primary
-- key (job ids are UUIDv7, in time order). ojs_job_done keeps the jobs completed before this
-- release; retention empties it day by day as before, and ojs_job_all reads both tables.
--
-- A workflow job advanced its workflow on its insert into ojs_job_done; it now does on its
-- update to `completed`, through the trigger that already handled the other endings.
--
-- Upgrade: no row is moved or rewritten; the trigger is replaced under a moment's lock.
-- Replicas of an earlier release would move the jobs they complete to ojs_job_done, where
-- every reader still finds them: nothing is lost, but stop them before migrating all the
-- same, as V30 requires.

create or replace function ojs_job_workflow_ended() returns trigger
    language plpgsql
    set search_path to '$user', 'public'
as $$
begin
    perform ojs_workflow_job_finished((new.extra ->> 'workflow_id')::uuid,
                                      (new.extra ->> 'workflow_step')::integer, new.id,
                                      case new.state when 'completed' then 'completed'
                                                     when 'discarded' then 'failed'
                                                     else 'cancelled' end,
                                      case when new.state = 'completed' then new.result end,
                                      case when new.state <> 'completed' then new.error end,
                                      new.attempt);
    return null;
end;
$$;
comment on function ojs_job_workflow_ended() is 'Trigger function: a workflow job that ends (completed, discarded or cancelled) advances its workflow.';

drop trigger ojs_job_workflow_ended on ojs_job;
create trigger ojs_job_workflow_ended
    after update of state on ojs_job
    for each row
    when ((new.state = 'completed' and old.state <> 'completed'
           or new.state in ('discarded', 'cancelled') and old.state not in ('discarded', 'cancelled'))
          and (new.extra -> 'workflow_id') is not null)
    execute function ojs_job_workflow_ended();
comment on trigger ojs_job_workflow_ended on ojs_job is 'A workflow job that ends (completed, discarded or cancelled) advances its workflow in the same transaction.';

comment on table ojs_job_done is 'Jobs completed before migration V31 (which completes jobs in ojs_job), with ojs_job''s columns, partitioned by day of completed_at (UTC); retention drops whole days and deletes per queue within them. Read through ojs_job_all.';
comment on table ojs_job is 'One row per OJS job, from its enqueue until retention deletes it: the envelope (known attributes as typed columns, unknown attributes in extra) and its lifecycle state.';

-- Jobs discarded lately (the admin API's queue activity): a discard is not on the hot path,
-- and neither an ACK nor a cancel writes `discarded_at`.
create index ojs_job_discarded_idx on ojs_job (discarded_at) where discarded_at is not null;
comment on index ojs_job_discarded_idx is 'Discarded jobs by discard time: the jobs discarded lately (queue activity).';
