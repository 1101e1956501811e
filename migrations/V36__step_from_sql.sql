-- Steps recorded from SQL, in the caller's transaction.
--
-- ojs_record_step(job_id, attempt, name, result, worker_id) does what
-- POST /ojs/v1/jobs/{id}/steps/{name} does (V33), for a worker that writes to the same database:
-- the step's record commits or rolls back with the worker's own writes, so a step whose effect
-- is a change in this database happens exactly once, even when the worker dies between its
-- write and its answer. Same checks, same refusals (SQLSTATE OJ<status> with the OJS error body
-- the HTTP route would answer in DETAIL), same event (job.step_recorded), same flag
-- (ojs_job.durable).
--
-- Upgrade: adds a function.

create function ojs_record_step(job_id uuid, attempt integer, name text, result jsonb default null,
                                worker_id text default null)
    returns json
    language plpgsql
    as $$
declare
    v_job constant uuid := job_id;
    v_attempt constant integer := attempt;
    v_name constant text := name;
    v_worker constant text := worker_id;
    v_result constant text := case when result is not null then ojs_json_compact(result::text) end;
    v_size constant integer := coalesce(octet_length(v_result), 0);
    j record;
    s ojs_job_step;
    done_state ojs_job_state;
    status integer;
    code text;
    message text;
    details jsonb;
begin
    if v_name is null or length(v_name) not between 1 and 200 or v_name ~ '[\x01-\x1f\x7f-\x9f]' then
        status := 400; code := 'invalid_request';
        message := 'The name must be 1-200 characters without control characters';
        details := jsonb_build_object('field', 'name');
    elsif v_attempt is null or v_attempt < 1 then
        status := 400; code := 'invalid_request';
        message := 'attempt must be the attempt the worker holds (an integer >= 1)';
        details := jsonb_build_object('field', '$.attempt');
    elsif v_size > 1048576 then
        status := 413; code := 'envelope_too_large';
        message := format('''result'' is %s bytes; the maximum is 1048576 bytes.', v_size);
        details := jsonb_build_object('max_size', 1048576, 'size', v_size, 'field', 'result');
    else
        select jb.state, jb.attempt, jb.worker_id, jb.queue, jb.type into j
          from ojs_job jb where jb.id = v_job for share;
        if not found then
            select d.state into done_state from ojs_job_done d where d.id = v_job;
        end if;
        if j is null and done_state is null then
            status := 404; code := 'not_found';
            message := format('Job ''%s'' not found.', v_job);
            details := jsonb_build_object('resource_type', 'job', 'resource_id', v_job);
        elsif coalesce(j.state, done_state) <> 'active' then
            status := 409; code := 'conflict';
            message := format('Cannot record a step of job in state ''%s''; expected ''active''.',
                              coalesce(j.state, done_state));
            details := jsonb_build_object('job_id', v_job, 'current_state', coalesce(j.state, done_state),
                                          'allowed_states', jsonb_build_array('active'),
                                          'expected_state', 'active');
        elsif j.attempt <> v_attempt then
            status := 409; code := 'conflict';
            message := format('Job ''%s'' is at attempt %s; attempt %s is no longer its current one.',
                              v_job, j.attempt, v_attempt);
            details := jsonb_build_object('job_id', v_job, 'attempt', v_attempt, 'current_attempt', j.attempt);
        elsif v_worker is not null and j.worker_id is not null and j.worker_id <> v_worker then
            status := 409; code := 'conflict';
            message := format('Job ''%s'' is reserved by worker ''%s'', not by the caller.', v_job, j.worker_id);
            details := jsonb_build_object('job_id', v_job, 'current_state', 'active', 'worker_id', j.worker_id);
        else
            insert into ojs_job_step (job_id, name, result, attempt, worker_id, size_bytes)
            values (v_job, v_name, v_result::jsonb, v_attempt, coalesce(v_worker, j.worker_id), v_size)
            on conflict on constraint ojs_job_step_pkey do nothing
            returning * into s;
            if found then
                -- The job's next claims hand its steps (a HOT update, once per job).
                update ojs_job jb set durable = true where jb.id = v_job and jb.durable is not true;
                insert into ojs_event (type, subject, job_id, queue, job_type, worker_id, data)
                values ('job.step_recorded', v_job::text, v_job, j.queue, j.type, s.worker_id,
                        jsonb_strip_nulls(jsonb_build_object('step', s.name, 'attempt', s.attempt,
                                                             'worker_id', s.worker_id, 'size_bytes', v_size)));
                return ojs_step_json(s);
            end if;
            select * into s from ojs_job_step st where st.job_id = v_job and st.name = v_name;
            status := 409; code := 'step_already_recorded';
            message := format('Step ''%s'' of job ''%s'' was recorded by attempt %s; its first record stands (in details.step).',
                              s.name, v_job, s.attempt);
            details := jsonb_build_object('job_id', v_job, 'step', ojs_step_json(s)::jsonb);
        end if;
    end if;
    raise exception using
        errcode = 'OJ' || status::text,
        message = message,
        detail = ojs_json_compact(json_build_object('error', json_build_object(
            'code', code, 'message', message, 'retryable', false, 'details', details))::text),
        hint = 'DETAIL holds the OJS error body POST /ojs/v1/jobs/{id}/steps/{name} would answer.';
end;
$$;

-- A recorded step as the API shows it (`step` of POST /ojs/v1/jobs/{id}/steps/{name}).
create function ojs_step_json(s ojs_job_step) returns json
    language sql stable
as $$
    select ojs_json_compact('{"job_id":' || to_json(s.job_id)::text || ',"name":' || to_json(s.name)::text
               || ',"result":' || coalesce(s.result::text, 'null') || ',"attempt":' || s.attempt
               || coalesce(',"worker_id":' || to_json(s.worker_id)::text, '')
               || ',"recorded_at":' || ojs_wire_time(s.recorded_at) || '}')::json
$$;

comment on function ojs_record_step(uuid, integer, text, jsonb, text) is
    'Records step name of job_id''s current attempt with result, in the caller''s transaction, as POST /ojs/v1/jobs/{id}/steps/{name} does: once (a second record raises OJ409 step_already_recorded with the first in details.step), only while the job is active at attempt and, when worker_id is given, held by it. Returns the step; raises OJ400/OJ404/OJ409/OJ413 with the OJS error body in DETAIL.';
comment on function ojs_step_json(ojs_job_step) is
    'A recorded step in its API form: job_id, name, result (null: none), attempt, worker_id (absent when none), recorded_at.';
