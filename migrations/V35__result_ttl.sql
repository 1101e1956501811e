-- A queue's result_ttl, and the SQL door checks a job's result_ttl as PUSH does.
--
-- A queue (or `_default`) may now set `result_ttl` in its configuration (the results
-- extension's "per job or queue"): a job that names no result_ttl of its own gets its queue's
-- at enqueue, as it gets the queue's default_timeout, so the ACK statements and the result reads
-- find it on the job as before. ojs_enqueue_configure applies it for the SQL door, the broker's
-- `prepare` for PUSH. ojs_envelope_read now refuses a result_ttl that is not an integer from -1
-- to 2^31-1 with PUSH's violation (it kept any value as sent; the reads treated one that was not
-- an integer as absent), and keeps a valid one as an integer (`60.0` as `60`, as PUSH does: the
-- ACK statements test the text '0'). Both functions are replaced with the same signatures.
--
-- Upgrade: replaces two functions. Replicas of earlier releases neither show nor apply a
-- queue's result_ttl (their PUSH ignores it; this release's SQL door applies it to every job).

create or replace function ojs_envelope_read(body json, idx integer, s ojs_setting) returns ojs_new_job
    language plpgsql
as $$
declare
    j ojs_new_job;
    top json;
    opt json;
    v json;
    p text;
    meta_layers json[] := '{}';
    meta_paths text[] := '{}';
    merged_keys text[];
    merged_values json[];
    violations jsonb := '[]';
    range_violation jsonb;
    range_value bigint;
    n bigint;
    per_unit bigint;
    t record;
    r record;
    pr record;
    rp record;
    rate_canonical text;
    type_pattern text := case when s.hyphenated_types
                              then '^[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)*$'
                              else '^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$' end;
    idx_details jsonb := case when idx is not null then jsonb_build_object('index', idx) else '{}' end;
    prefix text := case when idx is not null then format('jobs[%s]: ', idx) else '' end;
    input_attributes constant text[] := array['specversion', 'id', 'type', 'queue', 'args', 'meta',
        'priority', 'timeout', 'timeout_ms', 'scheduled_at', 'delay_until', 'expires_at', 'retry',
        'retry_policy', 'unique', 'tags', 'schema', 'visibility_timeout', 'visibility_timeout_ms',
        'pending', 'rate_limit', 'total_timeout', 'enqueue_ttl', 'workflow', 'options'];
    system_attributes constant text[] := array['state', 'attempt', 'max_attempts', 'created_at',
        'enqueued_at', 'started_at', 'completed_at', 'cancelled_at', 'discarded_at',
        'dead_lettered_at', 'activated_at', 're_enqueued_at', 'next_retry_at', 'next_attempt_at',
        'retry_delay_ms', 'worker_id', 'visible_until', 'result', 'error', 'errors', 'unique_key',
        'original_queue', 'workflow_id', 'workflow_step', 'parent_results', 'deduplicated',
        'previous_state'];
begin
    -- Repeated keys: first position, last value.
    select coalesce(json_object_agg(m.key, m.value order by m.pos), '{}') into top
      from ojs_json_members(body) m;
    -- `options`: a non-null value must be an object.
    v := top -> 'options';
    if v is not null and json_typeof(v) <> 'null' then
        if json_typeof(v) = 'object' then
            select coalesce(json_object_agg(m.key, m.value order by m.pos), '{}') into opt
              from ojs_json_members(v) m;
        else
            violations := violations || jsonb_build_object('path', '$.options',
                'message', format('''options'' must be an object, got %s', ojs_json_article(v)));
        end if;
    end if;

    -- meta: options.metadata, options.meta, then meta (later wins per key); size first.
    j.meta := '{}';
    <<meta>>
    foreach p in array array['$.options.metadata', '$.options.meta', '$.meta']
    loop
        v := case p when '$.meta' then top -> 'meta' when '$.options.meta' then opt -> 'meta'
                    else opt -> 'metadata' end;
        continue when v is null or json_typeof(v) = 'null';
        if json_typeof(v) <> 'object' then
            violations := violations || jsonb_build_object('path', p,
                'message', format('meta must be an object, got %s', ojs_json_article(v)));
            meta_layers := null;
            exit meta;
        end if;
        meta_layers := meta_layers || v;
    end loop;
    if meta_layers is null then
        j.meta := null;
    elsif cardinality(meta_layers) = 1 then
        j.meta := meta_layers[1]::text;
    elsif cardinality(meta_layers) > 1 then
        select array_agg(x.key order by x.pos), array_agg(x.value order by x.pos)
          into merged_keys, merged_values
          from (select e.key, (array_agg(e.value order by l.layer desc, e.ord desc))[1] as value,
                       min(l.layer * 1000000000 + e.ord) as pos
                  from unnest(meta_layers) with ordinality as l(obj, layer),
                       json_each(l.obj) with ordinality as e(key, value, ord)
                 group by e.key) x;
        j.meta := ojs_json_object_text(merged_values, merged_keys);
    end if;
    if j.meta is not null and octet_length(j.meta) > 65536 then
        perform ojs_enqueue_refuse(413, 'envelope_too_large',
            prefix || format('''meta'' is %s bytes; the maximum is 65536 bytes.', octet_length(j.meta)),
            jsonb_build_object('max_size', 65536, 'size', octet_length(j.meta), 'field', 'meta') || idx_details);
    end if;

    v := top -> 'specversion';
    if v is not null and json_typeof(v) <> 'null'
       and not (json_typeof(v) = 'string' and v #>> '{}' in ('1.0.0-rc.1', '1.0')) then
        violations := violations || jsonb_build_object('path', '$.specversion',
            'message', 'specversion must be "1.0.0-rc.1" (or "1.0")');
    end if;

    v := top -> 'id';
    if v is null then
        j.id := ojs_uuidv7();
        j.id_supplied := false;
    elsif json_typeof(v) = 'string'
          and v #>> '{}' ~ '^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$' then
        j.id := (v #>> '{}')::uuid;
        j.id_supplied := true;
    else
        violations := violations || jsonb_build_object('path', '$.id',
            'message', 'id must be a lowercase UUIDv7 string (e.g. 019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f), or be omitted');
        j.id_supplied := true;
    end if;

    v := top -> 'type';
    if v is null then
        violations := violations || jsonb_build_object('path', '$.type', 'message', '''type'' is required');
    elsif json_typeof(v) <> 'string' then
        violations := violations || jsonb_build_object('path', '$.type',
            'message', format('''type'' must be a string, got %s', ojs_json_article(v)));
    elsif octet_length(v #>> '{}') between 1 and 255 and v #>> '{}' ~ type_pattern then
        j.type := v #>> '{}';
    else
        violations := violations || jsonb_build_object('path', '$.type',
            'message', format('type %s is invalid: use 1-255 characters of dot-separated lowercase segments, each starting with a letter (e.g. email.send)', to_json(v #>> '{}')));
    end if;

    v := top -> 'args';
    if v is null then
        violations := violations || jsonb_build_object('path', '$.args',
            'message', '''args'' is required (a JSON array, may be empty)');
    elsif json_typeof(v) <> 'array' then
        violations := violations || jsonb_build_object('path', '$.args',
            'message', format('''args'' must be an array, got %s', ojs_json_article(v)));
    else
        j.args := v::text;
    end if;

    -- Optional attributes: top level first, then options (null counts as absent).
    j.queue := 'default';
    select x.p, x.v into p, v from ojs_envelope_first(top, opt, array['queue']) x;
    if v is not null then
        if json_typeof(v) <> 'string' then
            violations := violations || jsonb_build_object('path', p,
                'message', format('queue must be a string, got %s', ojs_json_article(v)));
            j.queue := '';
        elsif octet_length(v #>> '{}') <= 128 and v #>> '{}' ~ '^[a-z0-9][a-z0-9.-]*$' then
            j.queue := v #>> '{}';
        else
            violations := violations || jsonb_build_object('path', p,
                'message', format('queue %s is invalid: use 1-128 lowercase letters, digits, ''-'' and ''.'', starting with a letter or digit', to_json(v #>> '{}')));
            j.queue := '';
        end if;
    end if;

    j.priority := 2;
    select x.p, x.v into p, v from ojs_envelope_first(top, opt, array['priority']) x;
    if v is not null then
        pr := ojs_priority_read(v, s.max_priority);
        if pr.outcome = 'ok' then
            j.priority := pr.value;
        elsif pr.outcome = 'range' then
            range_value := pr.value;
            range_violation := jsonb_build_object('path', p, 'message',
                case when pr.value < 0 then 'priority must be >= 0'
                     else format('priority must be <= %s (maximum supported priority)', s.max_priority) end);
        else
            violations := violations || jsonb_build_object('path', p, 'message',
                format('priority must be an integer from 0 (most urgent) to %s, or one of critical, high, normal, low, bulk', s.max_priority));
        end if;
    end if;
    j.priority_aging_ms := s.priority_aging_ms;

    j.timeout_ms := s.default_timeout_ms;
    j.timeout_explicit := false;
    select x.p, x.v into p, v
      from ojs_envelope_first(top, opt, array['timeout_ms', 'timeout'], true) x;
    if v is not null then
        n := ojs_json_integer(v);
        j.timeout_explicit := n is distinct from 0;
        per_unit := case when p like '%\_ms' then 1 else 1000 end;
        if n = 0 then
            null;
        elsif n > 0 and n <= 3153600000000 / per_unit then
            j.timeout_ms := n * per_unit;
        else
            violations := violations || jsonb_build_object('path', p, 'message',
                format('%s must be a non-negative integer (%s; 0 uses the default)',
                       regexp_replace(p, '^\$\.(options\.)?', ''),
                       case when per_unit = 1 then 'milliseconds' else 'seconds' end));
        end if;
    end if;

    select x.p, x.v into p, v
      from ojs_envelope_first(top, opt, array['scheduled_at', 'delay_until'], true) x;
    t := ojs_envelope_time(v);
    if t.problem is not null then
        violations := violations || jsonb_build_object('path', p, 'message', t.problem);
    else
        j.scheduled_abs := t.at_abs;
        j.scheduled_rel_ms := t.rel_ms;
        j.scheduled_text := t.input;
    end if;
    select x.p, x.v into p, v from ojs_envelope_first(top, opt, array['expires_at']) x;
    t := ojs_envelope_time(v);
    if t.problem is not null then
        violations := violations || jsonb_build_object('path', p, 'message', t.problem);
    else
        j.expires_abs := t.at_abs;
        j.expires_rel_ms := t.rel_ms;
        j.expires_text := t.input;
    end if;

    select x.p, x.v into p, v
      from ojs_envelope_first(top, opt, array['visibility_timeout_ms', 'visibility_timeout'], true) x;
    if v is not null then
        n := null;
        if p like '%\_ms' then
            n := ojs_json_integer(v);
        elsif json_typeof(v) = 'string' then
            n := (ojs_duration_ms(v #>> '{}')).ms;
        else
            n := ojs_json_integer(v);
            n := case when n > 0 and n <= 3153600000 then n * 1000 end;
        end if;
        if n is null or n <= 0 then
            violations := violations || jsonb_build_object('path', p, 'message',
                'visibility timeout must be positive: integer milliseconds (visibility_timeout_ms), integer seconds or an ISO 8601 duration (visibility_timeout)');
        else
            j.visibility_timeout_ms := n;
        end if;
    end if;

    j.pending := false;
    select x.p, x.v into p, v from ojs_envelope_first(top, opt, array['pending']) x;
    if v is not null then
        if json_typeof(v) = 'boolean' then
            j.pending := (v #>> '{}')::boolean;
        else
            violations := violations || jsonb_build_object('path', p, 'message', 'pending must be a boolean');
        end if;
    end if;
    if j.pending and (j.scheduled_abs > clock_timestamp() or j.scheduled_rel_ms > 0) then
        violations := violations || jsonb_build_object('path', '$.pending',
            'message', 'a pending job cannot also have a future scheduled_at (activate it, then it runs)');
    end if;

    select x.p, x.v into p, v from ojs_envelope_first(top, opt, array['tags']) x;
    if v is not null then
        if json_typeof(v) = 'array'
           and not exists (select 1 from json_array_elements(v) e where json_typeof(e) <> 'string') then
            select coalesce(array_to_json(array_agg(e order by i))::text, '[]') into j.tags
              from json_array_elements_text(v) with ordinality as x(e, i);
        else
            violations := violations || jsonb_build_object('path', p, 'message', 'tags must be an array of strings');
        end if;
    end if;

    select x.p, x.v into p, v from ojs_envelope_first(top, opt, array['schema']) x;
    if v is not null then
        if json_typeof(v) = 'string' and v #>> '{}' <> '' then
            j.schema_uri := v #>> '{}';
        else
            violations := violations || jsonb_build_object('path', p, 'message', 'schema must be a non-empty string (a URI)');
        end if;
    end if;

    select x.p, x.v into p, v from ojs_envelope_first(top, opt, array['enqueue_ttl']) x;
    select x.violations, x.secs into violations, j.enqueue_ttl_secs
      from ojs_envelope_seconds(v, p, 'enqueue_ttl', violations) x;
    select x.p, x.v into p, v from ojs_envelope_first(top, opt, array['total_timeout']) x;
    select x.violations, x.secs into violations, j.total_timeout_secs
      from ojs_envelope_seconds(v, p, 'total_timeout', violations) x;
    if j.total_timeout_secs::bigint * 1000 < j.timeout_ms then
        violations := violations || jsonb_build_object('path', '$.total_timeout',
            'message', 'total_timeout must be >= the execution timeout');
    end if;
    -- result_ttl (the results extension): a top-level attribute kept as sent (the ACK and the
    -- result reads read it there); null is absent.
    v := top -> 'result_ttl';
    if json_typeof(v) <> 'null'
       and not coalesce(ojs_json_integer(v) between -1 and 2147483647, false) then
        violations := violations || jsonb_build_object('path', '$.result_ttl',
            'message', 'result_ttl must be an integer number of seconds: 0 (not stored), -1 (as long as the job is kept) or more');
    end if;

    if range_violation is not null then
        if violations = '[]' then
            perform ojs_enqueue_refuse(400, 'invalid_request',
                prefix || (range_violation ->> 'message'),
                jsonb_build_object('field', range_violation ->> 'path',
                                   'validation_errors', jsonb_build_array(range_violation),
                                   'value', range_value, 'min', 0, 'max_priority', s.max_priority)
                || idx_details);
        end if;
        violations := jsonb_build_array(range_violation) || violations;
    end if;
    if violations <> '[]' then
        perform ojs_enqueue_refuse_violations(violations, idx, 400, 'invalid_request');
    end if;

    -- What this door does not do yet is refused, never half done.
    select x.p, x.v into p, v from ojs_envelope_first(top, opt, array['unique']) x;
    if v is not null then
        perform ojs_enqueue_refuse(422, 'unsupported',
            prefix || 'unique policies are not accepted by ojs_enqueue yet: enqueue jobs with a unique policy with POST /ojs/v1/jobs',
            jsonb_build_object('field', p) || idx_details);
    end if;

    select x.p, x.v into p, v
      from ojs_envelope_first(top, opt, array['retry', 'retry_policy'], true) x;
    j.retry := '{}';
    j.max_attempts := 3;
    if v is not null then
        r := ojs_retry_read(v, p);
        if r.violations <> '[]' then
            perform ojs_enqueue_refuse_violations(r.violations, idx, 422, 'validation_error');
        end if;
        j.retry := r.stored;
        j.max_attempts := r.max_attempts;
        j.retry_input := v::text;
    end if;

    select x.p, x.v into p, v from ojs_envelope_first(top, opt, array['rate_limit']) x;
    if v is not null then
        rp := ojs_rate_policy_read(v, p, j.queue);
        if rp.violations <> '[]' then
            perform ojs_enqueue_refuse_violations(rp.violations, idx, 400, 'invalid_request');
        end if;
        j.rate_key := rp.rate_key;
        rate_canonical := rp.canonical;
    end if;
    select x.p, x.v into p, v from ojs_envelope_first(top, opt, array['workflow']) x;
    if v is not null then
        perform ojs_enqueue_refuse(422, 'unsupported',
            prefix || 'embedded workflows are not accepted by ojs_enqueue: create workflows with POST /ojs/v1/workflows',
            jsonb_build_object('field', p) || idx_details);
    end if;

    -- Unknown attributes are kept, in order; system-managed ones are ignored.
    -- The job shows its rate limit as the server reads it, key resolved, last.
    -- A result_ttl is kept as the integer it is (60.0 as 60): the ACK and the reads compare its text.
    select ojs_json_object_text(
               coalesce(array_agg(case when m.key = 'result_ttl' and ojs_json_integer(m.value) is not null
                                       then to_json(ojs_json_integer(m.value)) else m.value end
                                  order by m.pos), '{}')
               || case when rate_canonical is not null then array[rate_canonical::json] else '{}' end,
               coalesce(array_agg(m.key order by m.pos), '{}')
               || case when rate_canonical is not null then array['rate_limit'] else '{}' end)
      into j.extra
      from ojs_json_members(body) m
     where m.key <> all (input_attributes) and m.key <> all (system_attributes);
    return j;
end;
$$;

-- A read job with its queue's configuration applied (`d`: the _default layer; `producer`: the
-- setting ojs.producer), as PUSH applies it: access rules, then defaults (result_ttl among them
-- since V35). Raises the refusal PUSH answers.
create or replace function ojs_enqueue_configure(j ojs_new_job, idx integer, s ojs_setting, d jsonb, producer text)
    returns ojs_new_job
    language plpgsql
as $$
declare
    q jsonb;
    allowed jsonb;
    queue_retry jsonb;
    queue_ttl jsonb;
    merged json;
    r record;
begin
    -- The queue's configuration: its own layer over _default's.
    select config into q from ojs_queue where name = j.queue;
    q := coalesce(q, '{}');
    allowed := coalesce(q -> 'allowed_job_types', d -> 'allowed_job_types');
    if jsonb_typeof(allowed) = 'array'
       and not exists (select 1 from jsonb_array_elements_text(allowed) p where ojs_glob(p, j.type)) then
        perform ojs_enqueue_refuse(400, 'JOB_TYPE_NOT_ALLOWED',
            case when idx is not null then format('jobs[%s]: ', idx) else '' end
            || format('Job type ''%s'' is not allowed in queue ''%s'' (see the queue''s allowed_job_types).', j.type, j.queue),
            jsonb_build_object('field', '$.type', 'queue', j.queue, 'job_type', j.type)
            || case when idx is not null then jsonb_build_object('index', idx) else '{}' end);
    end if;
    allowed := coalesce(q -> 'producers', d -> 'producers');
    if jsonb_typeof(allowed) = 'array'
       and not exists (select 1 from jsonb_array_elements_text(allowed) p
                        where p = '*' or (producer is not null and ojs_glob(p, producer))) then
        perform ojs_enqueue_refuse(400, 'invalid_request',
            case when idx is not null then format('jobs[%s]: ', idx) else '' end
            || case when producer is not null
                    then format('Producer ''%s'' (setting ojs.producer) may not enqueue to queue ''%s''.', producer, j.queue)
                    else format('Queue ''%s'' only accepts jobs from listed producers: name yours in the setting ojs.producer.', j.queue) end,
            jsonb_build_object('queue', j.queue, 'producer', producer, 'reason', 'producer_not_allowed')
            || case when idx is not null then jsonb_build_object('index', idx) else '{}' end);
    end if;
    if not j.timeout_explicit then
        j.timeout_ms := coalesce((coalesce(q -> 'default_timeout', d -> 'default_timeout'))::bigint * 1000,
                                 s.default_timeout_ms);
    end if;
    if j.visibility_timeout_ms is null then
        j.visibility_timeout_ms := (coalesce(q -> 'visibility_timeout', d -> 'visibility_timeout'))::bigint * 1000;
    end if;
    -- A job that names no result_ttl (not even null) gets its queue's, last among its attributes.
    queue_ttl := coalesce(q -> 'result_ttl', d -> 'result_ttl');
    if queue_ttl is not null and not (j.extra::jsonb ? 'result_ttl') then
        j.extra := case when j.extra = '{}' then '{' else left(j.extra, -1) || ',' end
                   || '"result_ttl":' || (queue_ttl::bigint)::text || '}';
    end if;
    queue_retry := coalesce(d -> 'default_retry', '{}') || coalesce(q -> 'default_retry', '{}');
    if jsonb_typeof(queue_retry) = 'object' and queue_retry <> '{}' then
        select coalesce(json_object_agg(y.key, y.value order by y.pos), '{}') into merged
          from (select x.key, (array_agg(x.value order by x.src desc, x.ord desc))[1] as value,
                       min(x.src * 1000000000 + x.ord) as pos
                  from (select 1 as src, e.key, ojs_json_compact(e.value::text)::json as value, e.ord
                          from jsonb_each(queue_retry) with ordinality as e(key, value, ord)
                        union all
                        select 2, e.key, e.value, e.ord
                          from json_each(coalesce(j.retry_input, '{}')::json) with ordinality as e(key, value, ord)) x
                 group by x.key) y;
        r := ojs_retry_read(merged, '$.retry');
        if r.violations <> '[]' then
            perform ojs_enqueue_refuse_violations(r.violations, idx, 422, 'validation_error');
        end if;
        j.retry := r.stored;
        j.max_attempts := r.max_attempts;
    end if;
    return j;
end;
$$;

comment on function ojs_enqueue_configure(ojs_new_job, integer, ojs_setting, jsonb, text) is 'A read job with its queue''s configuration applied as PUSH applies it: allowed_job_types, producers (the setting ojs.producer), default_timeout, visibility_timeout, result_ttl (V35), default_retry layered under the job''s retry; raises PUSH''s refusal.';
