-- Workflows: chain, group and batch (POST /ojs/v1/workflows).
--
-- A workflow is one ojs_workflow row and one ojs_workflow_node row per step, member job and
-- callback. Every node's job is made when the workflow is created, through the server's
-- ordinary enqueue (validation, queue configuration, unique policies, capacity, fair tags):
-- the jobs that run at once are enqueued as usual, the others are held in state `pending`
-- until the workflow releases them. A held job cannot be activated by hand.
--
-- A workflow job carries `workflow_id` and `workflow_step` (and, once released,
-- `parent_results`) in `extra`, so they show on the job as every other attribute there does and
-- move with it to ojs_job_done. ojs_job's columns are unchanged: its row type is what replicas
-- of earlier releases decode, and a new column would break their ACK.
--
-- The workflow advances in the transaction that finishes each of its jobs, through two
-- triggers: a completed job (its insert into ojs_job_done: the ACK statement keeps every
-- workflow job, whatever its queue's retention) and a job that ends discarded or cancelled
-- (an update of ojs_job, whatever statement makes it). Both call ojs_workflow_job_finished(),
-- which locks the workflow's row first: siblings finishing at the same instant, on any
-- replica, take turns, and the one that finishes the last member fires the batch callbacks
-- (once; ojs_workflow.callbacks_fired is the latch). The triggers' WHEN clauses read only the
-- new row, so a job outside workflows pays one test of its `extra` when it completes and
-- nothing else.
--
-- Upgrade: no existing table is rewritten or locked beyond the catalog change of adding
-- triggers (SHARE ROW EXCLUSIVE on ojs_job and ojs_job_done for milliseconds). Replicas of
-- the previous release may run beside it; they make no workflow, and their ACK statement may
-- forget (not keep) a completed workflow job of a zero-retention queue: its workflow then
-- waits. Create workflows only once every replica runs this release.

create table ojs_workflow (
    id                uuid not null,
    type              text not null,
    name              text,
    state             text not null default 'running',
    total             integer not null,
    completed         integer not null default 0,
    failed            integer not null default 0,
    cancelled         integer not null default 0,
    callbacks_fired   text[],
    callbacks_open    integer not null default 0,
    priority          integer,
    failed_step_index integer,
    errors            jsonb not null default '[]',
    created_at        timestamptz not null default now(),
    completed_at      timestamptz,
    cancelled_at      timestamptz,
    constraint ojs_workflow_pkey primary key (id),
    constraint ojs_workflow_type_known check (type in ('chain', 'group', 'batch')),
    constraint ojs_workflow_state_known check (state in ('running', 'completed', 'failed', 'cancelled')),
    constraint ojs_workflow_counts_bounded
        check (total >= 1 and completed >= 0 and failed >= 0 and cancelled >= 0
               and completed + failed + cancelled <= total and callbacks_open >= 0),
    constraint ojs_workflow_errors_array check (jsonb_typeof(errors) = 'array')
);

-- The list, newest first.
create index ojs_workflow_created_idx on ojs_workflow (created_at, id);
-- Retention: finished workflows by the time they ended.
create index ojs_workflow_ended_idx on ojs_workflow ((coalesce(completed_at, cancelled_at)))
    where state <> 'running';

create table ojs_workflow_node (
    workflow_id  uuid not null,
    idx          integer not null,
    kind         text not null,
    job_id       uuid not null,
    type         text not null,
    queue        text not null,
    state        text not null,
    result       json,
    error        jsonb,
    finished_at  timestamptz,
    constraint ojs_workflow_node_pkey primary key (workflow_id, idx),
    constraint ojs_workflow_node_workflow_fkey foreign key (workflow_id)
        references ojs_workflow (id) on delete cascade,
    constraint ojs_workflow_node_kind_known
        check (kind in ('step', 'job', 'on_complete', 'on_success', 'on_failure')),
    constraint ojs_workflow_node_state_known
        check (state in ('waiting', 'released', 'completed', 'failed', 'cancelled', 'not_fired')),
    constraint ojs_workflow_node_idx_nonnegative check (idx >= 0)
);

-- Reads of a job's node (INFO of a workflow job, the test reset).
create index ojs_workflow_node_job_idx on ojs_workflow_node (job_id);

-- Releases a held job: pending → available, with the results it is given appended to `extra`
-- (which always holds the workflow's keys, so it is never empty), as an ACTIVATE would do it:
-- the job.enqueued event and the wake-up of long polls.
create function ojs_workflow_release(job uuid, parent_results json) returns void
    language plpgsql
    set search_path from current
as $$
declare
    j ojs_job;
begin
    update ojs_job
       set state = 'available', activated_at = now(), enqueued_at = now(),
           extra = case when parent_results is null then extra
                        else (left(rtrim(extra::text), -1) || ', "parent_results": '
                              || parent_results::text || '}')::json end
     where id = job and state = 'pending'
    returning * into j;
    if not found then
        return;
    end if;
    insert into ojs_event (type, subject, job_id, queue, job_type, from_state, to_state, data)
    values ('job.enqueued', j.id::text, j.id, j.queue, j.type, 'pending', j.state,
            ojs_job_transition_data('pending', j));
    perform pg_notify('ojs_job_available', j.queue);
end;
$$;

-- Nodes that will never run: their held jobs are deleted (a client never saw them enqueued),
-- the nodes take `state`. Returns how many.
create function ojs_workflow_drop_waiting(workflow uuid, kinds text[], state text) returns integer
    language plpgsql
    set search_path from current
as $$
declare
    dropped integer;
begin
    with gone as (
        update ojs_workflow_node n
           set state = ojs_workflow_drop_waiting.state, finished_at = now()
         where n.workflow_id = workflow and n.state = 'waiting' and n.kind = any(kinds)
        returning n.job_id
    ), deleted as (
        delete from ojs_job j using gone g where j.id = g.job_id and j.state = 'pending'
    )
    select count(*) into dropped from gone;
    return dropped;
end;
$$;

create function ojs_workflow_event(type text, workflow ojs_workflow, job uuid, data jsonb) returns void
    language sql
    set search_path from current
begin atomic
    insert into ojs_event (type, subject, job_id, data)
    values (type, (workflow).id::text, job,
            jsonb_build_object('workflow_id', (workflow).id, 'workflow_type', (workflow).type,
                               'name', (workflow).name, 'state', (workflow).state) || data);
end;

-- The heart of workflows: what the end of one of a workflow's jobs does to it. Called by the
-- triggers below, in the transaction that finished the job. `outcome` is completed, failed
-- (discarded) or cancelled.
create function ojs_workflow_job_finished(workflow_id uuid, step integer, job_id uuid,
                                          outcome text, result json, error jsonb,
                                          attempt integer) returns void
    language plpgsql
    set search_path from current
as $$
declare
    w ojs_workflow;
    n ojs_workflow_node;
    fired text[];
    results json;
    failed_now boolean := outcome <> 'completed';
begin
    -- One workflow's finishing jobs take turns here; every read below sees the ones before.
    select * into w from ojs_workflow where id = workflow_id for update;
    if not found then
        return;
    end if;
    update ojs_workflow_node x
       set state = case outcome when 'completed' then 'completed' when 'cancelled' then 'cancelled'
                        else 'failed' end,
           result = case when failed_now then null else ojs_workflow_job_finished.result end,
           error = ojs_workflow_job_finished.error, finished_at = now()
     where x.workflow_id = w.id and x.idx = step and x.job_id = ojs_workflow_job_finished.job_id
       and x.state = 'released'
    returning * into n;
    if not found or w.state <> 'running' then
        -- A job of a workflow that already ended (cancelled while it ran), or one finishing
        -- twice (retried from the dead-letter queue after its first end): recorded, no more.
        return;
    end if;

    if n.kind in ('on_complete', 'on_success', 'on_failure') then
        update ojs_workflow
           set callbacks_open = callbacks_open - 1,
               state = case when failed_now then 'failed'
                            when callbacks_open - 1 = 0 then case when failed > 0 then 'failed' else 'completed' end
                            else state end,
               errors = case when failed_now then errors || jsonb_build_array(jsonb_build_object(
                            'job_id', job_id, 'code', error -> 'code', 'message', error -> 'message',
                            'attempt', attempt)) else errors end
         where id = w.id
        returning * into w;
        if w.state <> 'running' then
            update ojs_workflow set completed_at = now() where id = w.id returning * into w;
            perform ojs_workflow_event('workflow.' || w.state, w, null, '{}');
        end if;
        return;
    end if;

    update ojs_workflow
       set completed = completed + (not failed_now)::int,
           failed = failed + failed_now::int,
           failed_step_index = case when failed_now then coalesce(failed_step_index, step) else failed_step_index end,
           errors = case when failed_now then errors || jsonb_build_array(jsonb_build_object(
                        'job_id', job_id, 'code', coalesce(error -> 'code', to_jsonb(outcome)),
                        'message', error -> 'message', 'attempt', attempt)) else errors end
     where id = w.id
    returning * into w;
    perform ojs_workflow_event(
        case when w.type = 'chain' then 'workflow.step_' else 'workflow.job_' end
            || case when failed_now then 'failed' else 'completed' end,
        w, job_id, jsonb_build_object('index', step, 'outcome', outcome));

    if w.type = 'chain' then
        if failed_now then
            update ojs_workflow
               set state = 'failed', completed_at = now(),
                   cancelled = cancelled + ojs_workflow_drop_waiting(w.id, array['step'], 'cancelled')
             where id = w.id
            returning * into w;
            perform ojs_workflow_event('workflow.failed', w, null, '{}');
        elsif step + 1 < w.total then
            update ojs_workflow_node x set state = 'released'
             where x.workflow_id = w.id and x.idx = step + 1 and x.state = 'waiting'
            returning * into n;
            select json_agg(x.result order by x.idx) into results
              from ojs_workflow_node x where x.workflow_id = w.id and x.idx <= step;
            perform ojs_workflow_release(n.job_id, results);
        else
            update ojs_workflow set state = 'completed', completed_at = now()
             where id = w.id returning * into w;
            perform ojs_workflow_event('workflow.completed', w, null, '{}');
        end if;
        return;
    end if;

    if w.completed + w.failed + w.cancelled < w.total then
        return;
    end if;
    if w.type = 'group' then
        update ojs_workflow
           set state = case when failed > 0 then 'failed' else 'completed' end, completed_at = now()
         where id = w.id
        returning * into w;
        perform ojs_workflow_event('workflow.' || w.state, w, null, '{}');
        return;
    end if;

    -- The last member of a batch: fire its callbacks, once.
    if w.callbacks_fired is not null then
        return;
    end if;
    fired := array['on_complete'] || case when w.failed = 0 then array['on_success'] else array['on_failure'] end;
    select json_agg(case when x.state = 'completed' then x.result end order by x.idx) into results
      from ojs_workflow_node x where x.workflow_id = w.id and x.kind = 'job';
    perform ojs_workflow_drop_waiting(
        w.id, array(select k from unnest(array['on_complete', 'on_success', 'on_failure']) k where k <> all(fired)),
        'not_fired');
    for n in
        update ojs_workflow_node x set state = 'released'
         where x.workflow_id = w.id and x.state = 'waiting' and x.kind = any(fired)
        returning *
    loop
        perform ojs_workflow_release(n.job_id, results);
        perform ojs_workflow_event('workflow.callback_fired', w, n.job_id,
                                   jsonb_build_object('callback', n.kind));
    end loop;
    update ojs_workflow
       set callbacks_fired = array(select kind from ojs_workflow_node x
                                    where x.workflow_id = w.id and x.kind = any(fired) order by x.idx),
           callbacks_open = (select count(*) from ojs_workflow_node x
                              where x.workflow_id = w.id and x.kind = any(fired) and x.state = 'released')
     where id = w.id
    returning * into w;
    if w.callbacks_open = 0 then
        update ojs_workflow
           set state = case when failed > 0 then 'failed' else 'completed' end, completed_at = now()
         where id = w.id
        returning * into w;
        perform ojs_workflow_event('workflow.' || w.state, w, null, '{}');
    end if;
end;
$$;

create function ojs_job_workflow_completed() returns trigger
    language plpgsql
    set search_path from current
as $$
begin
    perform ojs_workflow_job_finished((new.extra ->> 'workflow_id')::uuid,
                                      (new.extra ->> 'workflow_step')::integer, new.id,
                                      'completed', new.result, null, new.attempt);
    return null;
end;
$$;

create function ojs_job_workflow_ended() returns trigger
    language plpgsql
    set search_path from current
as $$
begin
    perform ojs_workflow_job_finished((new.extra ->> 'workflow_id')::uuid,
                                      (new.extra ->> 'workflow_step')::integer, new.id,
                                      case when new.state = 'discarded' then 'failed' else 'cancelled' end,
                                      null, new.error, new.attempt);
    return null;
end;
$$;

create trigger ojs_job_workflow_completed
    after insert on ojs_job_done
    for each row
    when ((new.extra -> 'workflow_id') is not null)
    execute function ojs_job_workflow_completed();

create trigger ojs_job_workflow_ended
    after update of state on ojs_job
    for each row
    when (new.state in ('discarded', 'cancelled') and old.state not in ('discarded', 'cancelled')
          and (new.extra -> 'workflow_id') is not null)
    execute function ojs_job_workflow_ended();

comment on table ojs_workflow is
    'Workflows (/ojs/v1/workflows): a chain, group or batch of jobs and its progress. Its steps, members and callbacks are ojs_workflow_node rows.';
comment on column ojs_workflow.id is 'UUIDv7, as job ids.';
comment on column ojs_workflow.type is 'chain (steps run one after another), group (members run at once) or batch (a group with callbacks).';
comment on column ojs_workflow.name is 'Optional name given at creation.';
comment on column ojs_workflow.state is 'running from creation, then completed, failed or cancelled.';
comment on column ojs_workflow.total is 'Steps (chain) or member jobs (group, batch); callbacks are not counted.';
comment on column ojs_workflow.completed is 'Steps or members whose job completed.';
comment on column ojs_workflow.failed is 'Steps or members whose job ended discarded (after its retries) or cancelled.';
comment on column ojs_workflow.cancelled is 'Steps never run because the chain failed first.';
comment on column ojs_workflow.callbacks_fired is 'Batch only: the callbacks released when its last member finished, null until then. Set once, under the row''s lock: the exactly-once latch.';
comment on column ojs_workflow.callbacks_open is 'Batch only: released callbacks whose jobs have not finished.';
comment on column ojs_workflow.priority is 'The workflow-level priority given at creation, if any.';
comment on column ojs_workflow.failed_step_index is 'The first step or member whose job failed.';
comment on column ojs_workflow.errors is 'JSON array of {job_id, code, message, attempt}, one per failed step, member or callback.';
comment on column ojs_workflow.created_at is 'When the workflow was created.';
comment on column ojs_workflow.completed_at is 'When it reached completed or failed.';
comment on column ojs_workflow.cancelled_at is 'When it was cancelled.';

comment on table ojs_workflow_node is
    'One step, member job or callback of a workflow, with the outcome and result of its job (kept here: a completed job may be pruned before the workflow is read).';
comment on column ojs_workflow_node.workflow_id is 'The workflow.';
comment on column ojs_workflow_node.idx is 'Position: the step or member index; callbacks follow the members (the job''s extra.workflow_step).';
comment on column ojs_workflow_node.kind is 'step (chain), job (group or batch member), or the batch callback it is: on_complete, on_success, on_failure.';
comment on column ojs_workflow_node.job_id is 'The node''s job (made with the workflow; held pending while the node waits).';
comment on column ojs_workflow_node.type is 'The job type of the node''s job.';
comment on column ojs_workflow_node.queue is 'The queue of the node''s job.';
comment on column ojs_workflow_node.state is 'waiting (its job held), released (its job enqueued; the job has the live state), completed, failed, cancelled (never run), or not_fired (a callback whose condition was false).';
comment on column ojs_workflow_node.result is 'The completed job''s result, as the worker gave it.';
comment on column ojs_workflow_node.error is 'The error the job ended with.';
comment on column ojs_workflow_node.finished_at is 'When the node''s job finished, or the node was dropped.';

comment on function ojs_workflow_release(uuid, json) is 'Releases a job a workflow held: pending to available, with the results it is given in extra.parent_results; writes job.enqueued and wakes long polls.';
comment on function ojs_workflow_drop_waiting(uuid, text[], text) is 'Marks a workflow''s waiting nodes of the given kinds with a final state and deletes their held jobs; returns how many.';
comment on function ojs_workflow_event(text, ojs_workflow, uuid, jsonb) is 'Writes one workflow.* event.';
comment on function ojs_workflow_job_finished(uuid, integer, uuid, text, json, jsonb, integer) is 'Advances a workflow when one of its jobs ends (completed, failed or cancelled), under the workflow row''s lock: releases the next chain step, ends the workflow, or fires a batch''s callbacks exactly once.';
comment on function ojs_job_workflow_completed() is 'Trigger function: a completed workflow job (its insert into ojs_job_done) advances its workflow.';
comment on function ojs_job_workflow_ended() is 'Trigger function: a workflow job that ends discarded or cancelled advances its workflow.';
comment on trigger ojs_job_workflow_completed on ojs_job_done is 'A completed workflow job advances its workflow in the ACK''s transaction.';
comment on trigger ojs_job_workflow_ended on ojs_job is 'A workflow job that ends discarded or cancelled advances its workflow in the same transaction.';
