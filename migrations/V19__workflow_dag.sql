-- Workflows of the dependency form (type `dag`): steps named by an id, each listing the steps it
-- depends on. A step runs once every step it depends on has completed, with their results in
-- `parent_results` (in its `depends_on` order); a step that fails or is cancelled fails the
-- workflow and cancels every step not yet released (steps already released run on).
--
-- Also: a held job ended by hand (cancelled, or discarded with its queue) ends its node, and a
-- workflow job deleted before it finished (a queue purge) ends its node as cancelled
-- (ojs_workflow_jobs_deleted). Before, either left the workflow running for ever.
--
-- Upgrade: the new columns have constant defaults (no rewrite); the type constraint is
-- replaced NOT VALID and then validated (ojs_workflow is read, not rewritten, under SHARE
-- UPDATE EXCLUSIVE). Replicas of the previous release keep working; they do not create DAGs.

alter table ojs_workflow drop constraint ojs_workflow_type_known;
alter table ojs_workflow add constraint ojs_workflow_type_known
    check (type in ('chain', 'group', 'batch', 'dag')) not valid;
alter table ojs_workflow validate constraint ojs_workflow_type_known;

alter table ojs_workflow_node
    add column name text,
    add column depends_on integer[],
    add column waiting_on integer not null default 0;
alter table ojs_workflow_node add constraint ojs_workflow_node_waiting_on_nonnegative
    check (waiting_on >= 0) not valid;
alter table ojs_workflow_node validate constraint ojs_workflow_node_waiting_on_nonnegative;

create or replace function ojs_workflow_job_finished(workflow_id uuid, step integer, job_id uuid,
                                                     outcome text, result json, error jsonb,
                                                     attempt integer) returns void
    language plpgsql
    set search_path from current
as $$
declare
    w ojs_workflow;
    n ojs_workflow_node;
    released ojs_workflow_node;
    fired text[];
    results json;
    failed_now boolean := outcome <> 'completed';
begin
    -- One workflow's finishing jobs take turns here; every read below sees the ones before.
    select * into w from ojs_workflow where id = workflow_id for update;
    if not found then
        return;
    end if;
    -- The node as it was: released (its job ran), or waiting (its held job was ended by hand,
    -- or deleted).
    select * into n from ojs_workflow_node x
     where x.workflow_id = w.id and x.idx = step and x.job_id = ojs_workflow_job_finished.job_id
       and x.state in ('released', 'waiting');
    if not found then
        -- A job finishing twice (retried from the dead-letter queue after its first end), or
        -- a held job deleted because its node was dropped: nothing to record.
        return;
    end if;
    update ojs_workflow_node x
       set state = case outcome when 'completed' then 'completed' when 'cancelled' then 'cancelled'
                        else 'failed' end,
           result = case when failed_now then null else ojs_workflow_job_finished.result end,
           error = ojs_workflow_job_finished.error, finished_at = now(), waiting_on = 0
     where x.workflow_id = w.id and x.idx = step;
    if w.state <> 'running' then
        -- A job of a workflow that already ended (cancelled or failed while it ran): recorded,
        -- no more.
        return;
    end if;

    if n.kind in ('on_complete', 'on_success', 'on_failure') then
        if n.state = 'waiting' then
            -- A held callback ended by hand: it will not fire, and is not waited for.
            return;
        end if;
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
        case when w.type in ('chain', 'dag') then 'workflow.step_' else 'workflow.job_' end
            || case when failed_now then 'failed' else 'completed' end,
        w, job_id,
        jsonb_build_object('index', step, 'step_id', coalesce(n.name, step::text), 'outcome', outcome));

    if w.type in ('chain', 'dag') and failed_now then
        -- A failed step stops the workflow: what has not been released never runs.
        update ojs_workflow
           set state = 'failed', completed_at = now(),
               cancelled = cancelled + ojs_workflow_drop_waiting(w.id, array['step'], 'cancelled')
         where id = w.id
        returning * into w;
        perform ojs_workflow_event('workflow.failed', w, null, '{}');
        return;
    end if;

    if w.type = 'chain' then
        if step + 1 < w.total then
            update ojs_workflow_node x set state = 'released'
             where x.workflow_id = w.id and x.idx = step + 1 and x.state = 'waiting'
            returning * into released;
            select json_agg(x.result order by x.idx) into results
              from ojs_workflow_node x where x.workflow_id = w.id and x.idx <= step;
            perform ojs_workflow_release(released.job_id, results);
        else
            update ojs_workflow set state = 'completed', completed_at = now()
             where id = w.id returning * into w;
            perform ojs_workflow_event('workflow.completed', w, null, '{}');
        end if;
        return;
    end if;

    if w.type = 'dag' then
        -- The steps waiting on this one count it off; those with nothing left to wait for run,
        -- given their dependencies' results in their depends_on order.
        for released in
            update ojs_workflow_node x
               set waiting_on = x.waiting_on - 1,
                   state = case when x.waiting_on = 1 then 'released' else x.state end
             where x.workflow_id = w.id and x.state = 'waiting' and step = any(x.depends_on)
            returning *
        loop
            if released.state = 'released' then
                select json_agg(d.result order by o.ord) into results
                  from unnest(released.depends_on) with ordinality o(idx, ord)
                  join ojs_workflow_node d on d.workflow_id = w.id and d.idx = o.idx;
                perform ojs_workflow_release(released.job_id, results);
            end if;
        end loop;
        if w.completed = w.total then
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
    for released in
        update ojs_workflow_node x set state = 'released'
         where x.workflow_id = w.id and x.state = 'waiting' and x.kind = any(fired)
        returning *
    loop
        perform ojs_workflow_release(released.job_id, results);
        perform ojs_workflow_event('workflow.callback_fired', w, released.job_id,
                                   jsonb_build_object('callback', released.kind));
    end loop;
    update ojs_workflow
       set callbacks_fired = array(select kind from ojs_workflow_node x
                                    where x.workflow_id = w.id and x.kind = any(fired)
                                      and x.state = 'released' order by x.idx),
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

-- Workflow jobs deleted before they finished (a queue purge deletes waiting jobs outright):
-- each ends its node as cancelled, as if cancelled by hand. Later nodes first, so a held
-- successor deleted in the same purge is recorded before an earlier node could release it.
create function ojs_workflow_jobs_deleted(ids uuid[], extras json[], attempts integer[]) returns integer
    language plpgsql
    set search_path from current
as $$
declare
    g record;
    ended integer := 0;
begin
    for g in
        select u.id, (u.extra ->> 'workflow_id')::uuid as workflow_id,
               (u.extra ->> 'workflow_step')::integer as step, u.attempt
          from unnest(ids, extras, attempts) as u(id, extra, attempt)
         where (u.extra -> 'workflow_id') is not null
         order by 2, 3 desc
    loop
        perform ojs_workflow_job_finished(
            g.workflow_id, g.step, g.id, 'cancelled', null,
            jsonb_build_object('code', 'deleted', 'message', 'The job was deleted before it finished.'),
            g.attempt);
        ended := ended + 1;
    end loop;
    return ended;
end;
$$;

comment on column ojs_workflow.type is 'chain (steps run one after another), group (members run at once), batch (a group with callbacks) or dag (steps that each run once the steps they depend on have completed).';
comment on column ojs_workflow.total is 'Steps (chain, dag) or member jobs (group, batch); callbacks are not counted.';
comment on column ojs_workflow.cancelled is 'Steps never run because the chain or dag failed first.';
comment on column ojs_workflow_node.kind is 'step (chain, dag), job (group or batch member), or the batch callback it is: on_complete, on_success, on_failure.';
comment on column ojs_workflow_node.name is 'Dag only: the step''s id, as the definition named it.';
comment on column ojs_workflow_node.depends_on is 'Dag only: the indexes (idx) of the steps this one runs after, in the definition''s order (the order of its parent_results).';
comment on column ojs_workflow_node.waiting_on is 'Dag only: how many of depends_on have not completed yet; the step is released when it reaches 0.';
comment on function ojs_workflow_job_finished(uuid, integer, uuid, text, json, jsonb, integer) is 'Advances a workflow when one of its jobs ends (completed, failed or cancelled), under the workflow row''s lock: releases the next chain step or the dag steps no longer waiting, ends the workflow, or fires a batch''s callbacks exactly once.';
comment on function ojs_workflow_jobs_deleted(uuid[], json[], integer[]) is 'Ends the workflow nodes of jobs deleted before they finished (given each job''s id, extra and attempt) as cancelled; returns how many of them were workflow jobs.';
