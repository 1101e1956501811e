-- Steps that run once, and jobs that sleep until a signal or a time (durable execution over
-- HTTP, beyond the OJS extensions).
--
-- Steps: a worker records the result of a named step of the attempt it holds; every later
-- attempt gets the recorded steps with FETCH and skips them. One row per job and step name:
-- the primary key makes a second record of a step impossible, whatever the replica, the retry
-- or the race (the second insert finds the first row and is answered with its result).
--
-- Waits: a worker ends its attempt with "wait for signal S, or until T" instead of ACK or NACK.
-- The job goes back to `scheduled` (its scheduled_at is T, or null when only a signal can wake
-- it), so it leaves the claim path and costs nothing while it waits; the promoter makes it
-- available at T, a signal at once. Its attempt is given back: a wait is not a failed attempt.
-- ojs_job_wait holds the job's latest wait and how it ended.
--
-- Signals: kept in ojs_job_signal, delivered or not. A signal to a job that waits for it ends
-- the wait (the job's row lock makes that happen once, on any replica); a signal to a job that
-- does not wait for it yet is kept and ends its next wait for that name at once, so a signal
-- that arrives before the worker reaches its wait is never lost. A signal may carry a key: a
-- second signal with the same key is answered with the first one's outcome and stored once.
--
-- No foreign keys, as for checkpoints (V31): the pruner removes the rows of jobs that are gone.
--
-- `ojs_job.durable` marks the jobs that kept something for their next attempt (a checkpoint, a
-- step, a wait): the claim statement looks those tables up for the jobs it claims with the
-- flag only. It used to look a checkpoint up for every claimed job as soon as any job had one
-- (and would have done the same for steps and waits): once a few jobs of a database use
-- durable execution, every other job paid the lookups (half again as much Postgres time per
-- job on the FETCH/ACK drain). Setting the flag is a HOT update (no index reads it), made once
-- per job by its first checkpoint or step and by every wait (which updates the job anyway).
--
-- Upgrade: adds tables and functions, a nullable column to ojs_job (no rewrite; ojs_job_all
-- restated with it), and drops the check that a scheduled job has a scheduled_at. The ACK
-- statement of earlier releases names ojs_job's columns in a row cast: stop replicas of
-- earlier releases before migrating.

alter table ojs_job add column durable boolean;
comment on column ojs_job.durable is 'True once the job saved a checkpoint, recorded a step or waited: the claim then hands its next attempt what it kept (migration V33). Null for other jobs.';

update ojs_job set durable = true where id in (select job_id from ojs_job_checkpoint);

-- ojs_job_done has no durable: a completed job is never claimed again.
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
       d.result_awaited, null::boolean
  from ojs_job_done d;
comment on column ojs_job_all.durable is 'As ojs_job.durable (null for the jobs of ojs_job_done).';

create table ojs_job_step (
    job_id      uuid not null,
    name        text not null,
    result      jsonb,
    attempt     integer not null,
    worker_id   text,
    size_bytes  integer not null,
    recorded_at timestamptz not null default now(),
    constraint ojs_job_step_pkey primary key (job_id, name),
    constraint ojs_job_step_name_length check (length(name) between 1 and 200),
    constraint ojs_job_step_attempt_positive check (attempt > 0),
    constraint ojs_job_step_size_not_negative check (size_bytes >= 0)
);

comment on table ojs_job_step is
    'The recorded steps of each job (POST /ojs/v1/jobs/{id}/steps/{name}): one result per job and step name, recorded once by the worker holding the job''s current attempt and handed to every later attempt by FETCH, which skips the step. Kept until the job is pruned.';
comment on column ojs_job_step.job_id is 'The job (ojs_job.id; no foreign key, see the table comment).';
comment on column ojs_job_step.name is 'The step''s name, as the worker chose it (1 to 200 characters).';
comment on column ojs_job_step.result is 'What the step returned: any JSON value (null: none).';
comment on column ojs_job_step.attempt is 'The job''s attempt that recorded it.';
comment on column ojs_job_step.worker_id is 'The worker that recorded it, when it said.';
comment on column ojs_job_step.size_bytes is 'The size of the result as the client sent it, in bytes.';
comment on column ojs_job_step.recorded_at is 'When the step was recorded.';

create table ojs_job_wait (
    job_id     uuid not null,
    signal     text,
    until      timestamptz,
    attempt    integer not null,
    worker_id  text,
    started_at timestamptz not null default now(),
    signal_id  bigint,
    ended_at   timestamptz,
    constraint ojs_job_wait_pkey primary key (job_id),
    constraint ojs_job_wait_for_something check (signal is not null or until is not null),
    constraint ojs_job_wait_signal_length check (length(signal) between 1 and 200)
);

comment on table ojs_job_wait is
    'Each job''s latest wait (POST /ojs/v1/workers/wait): the signal it waits for and its time limit, and, once a signal ended it, which. A job waiting is scheduled (scheduled_at: the limit, or null). Kept until the job is pruned.';
comment on column ojs_job_wait.job_id is 'The job (ojs_job.id; no foreign key).';
comment on column ojs_job_wait.signal is 'The signal name that ends the wait (null: only the time).';
comment on column ojs_job_wait.until is 'When the wait ends without a signal (null: only a signal ends it).';
comment on column ojs_job_wait.attempt is 'The attempt that waited (given back: the job''s next attempt has this number again).';
comment on column ojs_job_wait.worker_id is 'The worker that asked for the wait.';
comment on column ojs_job_wait.started_at is 'When the wait began.';
comment on column ojs_job_wait.signal_id is 'The signal that ended the wait (ojs_job_signal.id); null while waiting or when the time ended it.';
comment on column ojs_job_wait.ended_at is 'When a signal ended the wait (a wait that ran out of time ends when the promoter makes the job available).';

create table ojs_job_signal (
    id           bigint generated always as identity,
    job_id       uuid not null,
    name         text not null,
    payload      jsonb,
    key          text,
    sent_at      timestamptz not null default now(),
    delivered_at timestamptz,
    constraint ojs_job_signal_pkey primary key (id),
    constraint ojs_job_signal_key_once unique (job_id, key),
    constraint ojs_job_signal_name_length check (length(name) between 1 and 200),
    constraint ojs_job_signal_key_length check (length(key) between 1 and 200)
);
create index ojs_job_signal_job_idx on ojs_job_signal (job_id, name, id);

comment on table ojs_job_signal is
    'Signals sent to jobs (POST /ojs/v1/jobs/{id}/signals/{name}, or ojs_signal() from SQL): delivered to a job waiting for them, else kept until its next wait for that name. Kept until the job is pruned.';
comment on column ojs_job_signal.id is 'Order of arrival: a wait takes the oldest undelivered signal of its name.';
comment on column ojs_job_signal.job_id is 'The job (ojs_job.id; no foreign key).';
comment on column ojs_job_signal.name is 'The signal''s name (1 to 200 characters).';
comment on column ojs_job_signal.payload is 'What the sender attached: any JSON value (null: nothing), handed to the job with FETCH.';
comment on column ojs_job_signal.key is 'The sender''s key for the signal: a second signal to the job with the same key is not stored again.';
comment on column ojs_job_signal.sent_at is 'When the signal arrived.';
comment on column ojs_job_signal.delivered_at is 'When the signal ended a wait of the job (null: kept for its next wait).';

-- A job waiting only for a signal is scheduled with no scheduled_at: the promoter never makes
-- it available, a signal does.
alter table ojs_job drop constraint ojs_job_scheduled_has_scheduled_at;

-- Sends signal p_name to job p_job_id, in the caller's transaction: delivered (the job waited
-- for it and is now available), kept (for the job's next wait), or a duplicate of the signal
-- with the same key. The job's row lock orders it with the job's wait and other signals.
create function ojs_signal_send(
    p_job_id uuid, p_name text, p_payload jsonb, p_key text,
    out outcome text, out job_state ojs_job_state, out signal_id bigint,
    out sent_at timestamptz, out delivered_at timestamptz)
    language plpgsql
    as $$
declare
    j ojs_job;
begin
    select * into j from ojs_job where id = p_job_id for update;
    if not found then
        select d.state into job_state from ojs_job_done d where d.id = p_job_id;
        outcome := case when found then 'finished' else 'not_found' end;
        return;
    end if;
    job_state := j.state;
    if j.state in ('completed', 'cancelled', 'discarded') then
        outcome := 'finished';
        return;
    end if;
    if p_key is not null then
        select s.id, s.sent_at, s.delivered_at into signal_id, sent_at, delivered_at
          from ojs_job_signal s
         where s.job_id = p_job_id and s.key = p_key;
        if found then
            outcome := 'duplicate';
            return;
        end if;
    end if;
    -- Read after the row lock: a wait that committed before it is seen.
    perform 1 from ojs_job_wait w
     where w.job_id = p_job_id and w.signal = p_name and w.ended_at is null
       and j.state = 'scheduled';
    if not found then
        insert into ojs_job_signal (job_id, name, payload, key)
        values (p_job_id, p_name, p_payload, p_key)
        returning id, ojs_job_signal.sent_at into signal_id, sent_at;
        insert into ojs_event (type, subject, job_id, queue, job_type, data)
        values ('job.signal_received', p_job_id::text, p_job_id, j.queue, j.type,
                jsonb_build_object('signal', p_name, 'signal_id', signal_id, 'delivered', false));
        outcome := 'kept';
        return;
    end if;
    insert into ojs_job_signal (job_id, name, payload, key, delivered_at)
    values (p_job_id, p_name, p_payload, p_key, now())
    returning id, ojs_job_signal.sent_at, ojs_job_signal.delivered_at
         into signal_id, sent_at, delivered_at;
    update ojs_job_wait set signal_id = ojs_signal_send.signal_id, ended_at = now()
     where job_id = p_job_id;
    update ojs_job set state = 'available', scheduled_at = null, enqueued_at = now()
     where id = p_job_id
    returning * into j;
    insert into ojs_event (type, subject, job_id, queue, job_type, from_state, to_state, data)
    values ('job.signalled', p_job_id::text, p_job_id, j.queue, j.type, 'scheduled', 'available',
            ojs_job_transition_data('scheduled', j)
                || jsonb_build_object('signal', p_name, 'signal_id', signal_id));
    perform pg_notify('ojs_job_available', format('%s - - - 1', j.queue));
    job_state := 'available';
    outcome := 'delivered';
end;
$$;
comment on function ojs_signal_send(uuid, text, jsonb, text) is
    'Sends a signal to a job (what POST /ojs/v1/jobs/{id}/signals/{name} runs): outcome delivered (the job waited for it: now available), kept (for its next wait), duplicate (a signal with this key was sent: its id and times), finished or not_found (nothing done).';

-- The SQL door: ojs_signal_send, refusing an unknown or finished job and a bad name with the
-- error POST /ojs/v1/jobs/{id}/signals/{name} would answer (SQLSTATE OJ<status>, the OJS error
-- body in DETAIL). Returns the outcome: delivered, kept or duplicate.
create function ojs_signal(job_id uuid, name text, payload jsonb default null, key text default null)
    returns text
    language plpgsql
    as $$
declare
    r record;
    status integer;
    code text;
    message text;
    details jsonb;
begin
    if name is null or length(name) not between 1 and 200 or name ~ '[\x01-\x1f\x7f-\x9f]' then
        status := 400; code := 'invalid_request';
        message := 'A signal''s name is 1 to 200 characters without control characters.';
        details := jsonb_build_object('field', 'name');
    elsif key is not null and (length(key) not between 1 and 200 or key ~ '[\x01-\x1f\x7f-\x9f]') then
        status := 400; code := 'invalid_request';
        message := 'A signal''s key is 1 to 200 characters without control characters.';
        details := jsonb_build_object('field', 'key');
    else
        select * into r from ojs_signal_send(job_id, name, payload, key);
        if r.outcome = 'not_found' then
            status := 404; code := 'not_found';
            message := format('Job ''%s'' not found.', job_id);
            details := jsonb_build_object('resource_type', 'job', 'resource_id', job_id);
        elsif r.outcome = 'finished' then
            status := 409; code := 'conflict';
            message := format('Job ''%s'' is %s: it takes no signal.', job_id, r.job_state);
            details := jsonb_build_object('job_id', job_id, 'current_state', r.job_state);
        else
            return r.outcome;
        end if;
    end if;
    raise exception using
        errcode = 'OJ' || status::text,
        message = message,
        detail = ojs_json_compact(json_build_object('error', json_build_object(
            'code', code, 'message', message, 'retryable', false, 'details', details))::text),
        hint = 'DETAIL holds the OJS error body POST /ojs/v1/jobs/{id}/signals/{name} would answer.';
end;
$$;
comment on function ojs_signal(uuid, text, jsonb, text) is
    'Sends signal name (with payload, and key to send it once) to a job in the caller''s transaction: delivered when the job waits for it, else kept for its next wait. Raises OJ400/OJ404/OJ409 with the OJS error body in DETAIL.';

-- Ends job p_job_id's attempt with a wait for signal p_signal or until p_until (what POST
-- /ojs/v1/workers/wait runs), if the job is active, held by p_worker_id when given, and at
-- attempt p_attempt when given. Outcome: waiting (the job is scheduled), signalled (a signal
-- of that name was kept: the job is available again at once), or why nothing was done:
-- not_found, state (job_state says which), owner (the holder in worker_id) or attempt.
create function ojs_job_wait_for(
    p_job_id uuid, p_attempt integer, p_worker_id text, p_signal text, p_until timestamptz,
    out outcome text, out job_state ojs_job_state, out holder text, out attempt integer,
    out signal_id bigint)
    language plpgsql
    as $$
declare
    j ojs_job;
    waited_at timestamptz := now();
begin
    select * into j from ojs_job where id = p_job_id for update;
    if not found then
        select d.state into job_state from ojs_job_done d where d.id = p_job_id;
        outcome := case when found then 'state' else 'not_found' end;
        return;
    end if;
    job_state := j.state;
    holder := j.worker_id;
    attempt := j.attempt;
    if j.state <> 'active' then
        outcome := 'state';
        return;
    end if;
    if p_attempt is not null and p_attempt <> j.attempt then
        outcome := 'attempt';
        return;
    end if;
    if p_worker_id is not null and j.worker_id is not null and j.worker_id <> p_worker_id then
        outcome := 'owner';
        return;
    end if;
    -- A signal of that name kept for this wait ends it at once.
    if p_signal is not null then
        select s.id into signal_id from ojs_job_signal s
         where s.job_id = p_job_id and s.name = p_signal and s.delivered_at is null
         order by s.id limit 1
           for update;
        if found then
            update ojs_job_signal set delivered_at = waited_at where id = signal_id;
        end if;
    end if;
    insert into ojs_job_wait (job_id, signal, until, attempt, worker_id, started_at, signal_id, ended_at)
    values (p_job_id, p_signal, p_until, j.attempt, coalesce(p_worker_id, j.worker_id), waited_at,
            signal_id, case when signal_id is not null then waited_at end)
    on conflict on constraint ojs_job_wait_pkey do update
       set signal = excluded.signal, until = excluded.until, attempt = excluded.attempt,
           worker_id = excluded.worker_id, started_at = excluded.started_at,
           signal_id = excluded.signal_id, ended_at = excluded.ended_at;
    -- Counted off its lease, as an ACK or a NACK does.
    if j.lease_id is not null then
        delete from ojs_lease l where l.id = j.lease_id and l.open <= 1;
        update ojs_lease l set open = l.open - 1 where l.id = j.lease_id and l.open > 1;
    end if;
    update ojs_job
       set state = case when signal_id is not null then 'available'::ojs_job_state
                        else 'scheduled'::ojs_job_state end,
           scheduled_at = case when signal_id is null then p_until end,
           enqueued_at = case when signal_id is not null then waited_at else ojs_job.enqueued_at end,
           attempt = ojs_job.attempt - 1,
           durable = true,
           visible_until = null,
           timeout_at = null
     where id = p_job_id
    returning * into j;
    insert into ojs_event (type, subject, job_id, queue, job_type, from_state, to_state, worker_id, data)
    values ('job.waiting', p_job_id::text, p_job_id, j.queue, j.type, 'active', 'scheduled',
            coalesce(p_worker_id, holder),
            jsonb_strip_nulls(jsonb_build_object(
                'signal', p_signal, 'until', ojs_timestamp_text(p_until),
                'attempt', j.attempt + 1, 'worker_id', coalesce(p_worker_id, holder))));
    if signal_id is not null then
        insert into ojs_event (type, subject, job_id, queue, job_type, from_state, to_state, data)
        values ('job.signalled', p_job_id::text, p_job_id, j.queue, j.type, 'scheduled', 'available',
                ojs_job_transition_data('scheduled', j)
                    || jsonb_build_object('signal', p_signal, 'signal_id', signal_id));
        perform pg_notify('ojs_job_available', format('%s - - - 1', j.queue));
        outcome := 'signalled';
    else
        outcome := 'waiting';
    end if;
    job_state := j.state;
    attempt := j.attempt;
end;
$$;
comment on function ojs_job_wait_for(uuid, integer, text, text, timestamptz) is
    'Ends an active job''s attempt with a wait for a signal or a time (what POST /ojs/v1/workers/wait runs): outcome waiting, signalled (a kept signal ended it at once), or not_found, state, owner, attempt (nothing done). The attempt is given back.';

-- What a job kept of its earlier attempts, as FETCH hands it to the next one and INFO shows it:
-- {"steps": {name: {result, attempt, recorded_at}}, "wait": {signal, until, started_at,
-- ended_by}, "signals": {name: {payload, id, sent_at}}}, each member only when there is one.
-- ended_by is "signal" or, once the job is no longer waiting (p_waiting false), "time".
create function ojs_job_resume(p_job_id uuid, p_waiting boolean) returns jsonb
    language sql stable parallel safe
    return (
        coalesce((select jsonb_build_object('steps', jsonb_object_agg(s.name, jsonb_build_object(
                             'result', s.result, 'attempt', s.attempt,
                             'recorded_at', ojs_timestamp_text(s.recorded_at))))
                    from ojs_job_step s
                   where s.job_id = p_job_id
                  having count(*) > 0), '{}'::jsonb)
        || coalesce((select jsonb_build_object(
                                'wait', jsonb_strip_nulls(jsonb_build_object(
                                    'signal', w.signal, 'until', ojs_timestamp_text(w.until),
                                    'started_at', ojs_timestamp_text(w.started_at),
                                    'ended_by', case when w.signal_id is not null then 'signal'
                                                     when not p_waiting then 'time' end)),
                                'signals', (select coalesce(jsonb_object_agg(g.name, jsonb_build_object(
                                                    'payload', g.payload, 'id', g.id,
                                                    'sent_at', ojs_timestamp_text(g.sent_at)) order by g.id), '{}')
                                              from ojs_job_signal g
                                             where g.job_id = p_job_id and g.delivered_at is not null))
                       from ojs_job_wait w
                      where w.job_id = p_job_id), '{}'::jsonb));
comment on function ojs_job_resume(uuid, boolean) is
    'What job p_job_id kept of its earlier attempts: {"steps", "wait", "signals"} (each only when it has one), as FETCH hands it to the next attempt (p_waiting false) and INFO shows it (p_waiting: whether the job still waits).';
