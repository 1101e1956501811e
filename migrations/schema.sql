-- migrations/schema.sql: the ojsd schema after every migration. GENERATED, do not edit.
--
-- The migrations (migrations/V*.sql) are the source of truth; this file only shows their
-- result in one place. Regenerate it after adding a migration:
--
--     migrations/snapshot.sh
--
-- which migrates a scratch database with `cargo run -q -p ojsd-migrate` and runs
-- `pg_dump --schema-only --no-owner --no-privileges` on it. Left out: refinery's own table
-- refinery_schema_history, the day partitions of ojs_job_done (ojs_job_done_YYYYMMDD, made by
-- date), and pg_dump's version lines and \restrict keys. CI fails when this
-- file is stale (`migrations/snapshot.sh --check`).
-- Written by pg_dump 15; other major versions format some statements differently.

--
-- PostgreSQL database dump
--

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: ojs_job_phase; Type: TYPE; Schema: public; Owner: -
--

CREATE TYPE public.ojs_job_phase AS ENUM (
    'scheduled',
    'available',
    'pending',
    'retryable',
    'taken'
);

--
-- Name: TYPE ojs_job_phase; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TYPE public.ojs_job_phase IS 'Where a job is on the way to its claim: its waiting state, or taken (claimed, then active or finished). The only state the waiting-job indexes of ojs_job read (migration V30).';

--
-- Name: ojs_job_state; Type: TYPE; Schema: public; Owner: -
--

CREATE TYPE public.ojs_job_state AS ENUM (
    'scheduled',
    'available',
    'pending',
    'active',
    'completed',
    'retryable',
    'cancelled',
    'discarded'
);

--
-- Name: TYPE ojs_job_state; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TYPE public.ojs_job_state IS 'Lifecycle state of an OJS job. Terminal: completed, cancelled, discarded.';

--
-- Name: ojs_new_job; Type: TYPE; Schema: public; Owner: -
--

CREATE TYPE public.ojs_new_job AS (
	id uuid,
	id_supplied boolean,
	type text,
	queue text,
	args text,
	meta text,
	priority integer,
	priority_aging_ms bigint,
	timeout_ms bigint,
	timeout_explicit boolean,
	visibility_timeout_ms bigint,
	scheduled_abs timestamp with time zone,
	scheduled_rel_ms bigint,
	scheduled_text text,
	expires_abs timestamp with time zone,
	expires_rel_ms bigint,
	expires_text text,
	pending boolean,
	max_attempts integer,
	retry text,
	retry_input text,
	tags text,
	schema_uri text,
	enqueue_ttl_secs integer,
	total_timeout_secs integer,
	extra text,
	rate_key text
);

--
-- Name: TYPE ojs_new_job; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TYPE public.ojs_new_job IS 'A job envelope read and validated by ojs_envelope_read: the typed values ojs_insert_jobs writes (retry is the stored effective policy, {} for the default; retry_input the client''s own retry object, layered over a queue''s default_retry).';

--
-- Name: ojs_queue_state; Type: TYPE; Schema: public; Owner: -
--

CREATE TYPE public.ojs_queue_state AS ENUM (
    'active',
    'paused',
    'draining'
);

--
-- Name: TYPE ojs_queue_state; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TYPE public.ojs_queue_state IS 'Queue lifecycle: active (fetched), paused (accepts jobs, FETCH skips it), draining (being deleted).';

--
-- Name: ojs_client_time(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_client_time(input text, OUT at_abs timestamp with time zone, OUT rel_ms bigint, OUT problem text) RETURNS record
    LANGUAGE plpgsql STABLE
    AS $_$
declare
    m text[];
    d record;
    bad text := format('%s is not an RFC 3339 timestamp with a time zone (e.g. 2026-03-15T09:30:00Z or +PT30S)', to_json(input));
begin
    if left(input, 1) = '+' then
        d := ojs_duration_ms(substr(input, 2));
        if d.problem is not null then
            problem := format('invalid relative time %s: %s', to_json(input), d.problem);
        else
            rel_ms := d.ms;
        end if;
        return;
    end if;
    m := regexp_match(input, '^([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$');
    if m is null or m[4]::int > 23 or m[5]::int > 59 or m[6]::int > 60
       or (upper(m[8]) <> 'Z' and (substr(m[8], 2, 2)::int > 23 or substr(m[8], 5, 2)::int > 59)) then
        problem := bad;
        return;
    end if;
    begin
        -- Year 0000 is 1 BC to Postgres.
        at_abs := (case when m[1] = '0000' then '0001' else m[1] end || '-' || m[2] || '-' || m[3]
                   || ' ' || m[4] || ':' || m[5] || ':' || m[6] || coalesce(m[7], '')
                   || case when upper(m[8]) = 'Z' then '+00:00' else m[8] end
                   || case when m[1] = '0000' then ' BC' else '' end)::timestamptz;
    exception when others then
        problem := bad;
        return;
    end;
    if extract(year from at_abs at time zone 'UTC') not between 1 and 9999 then
        at_abs := null;
        problem := format('%s is outside the years 0001-9999', to_json(input));
    end if;
end;
$_$;

--
-- Name: FUNCTION ojs_client_time(input text, OUT at_abs timestamp with time zone, OUT rel_ms bigint, OUT problem text); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_client_time(input text, OUT at_abs timestamp with time zone, OUT rel_ms bigint, OUT problem text) IS 'A client timestamp: RFC 3339 with a zone (at_abs), or +<duration> from now (rel_ms), or the problem with it.';

--
-- Name: ojs_config_generation_locked(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_config_generation_locked() RETURNS bigint
    LANGUAGE plpgsql
    AS $$
begin
    perform pg_advisory_xact_lock_shared(7081, 1);
    return (select generation from ojs_queue_config_generation);
end
$$;

--
-- Name: FUNCTION ojs_config_generation_locked(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_config_generation_locked() IS 'The queue configuration generation, read after taking advisory lock (7081, 1) shared until the transaction ends. The enqueue statement compares it with the generation its jobs were prepared from (SQLSTATE OJ004 when they differ); pool changes take the same lock exclusively.';

SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: ojs_job; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ojs_job (
    id uuid NOT NULL,
    seq bigint NOT NULL,
    type text NOT NULL,
    queue text NOT NULL,
    args json NOT NULL,
    meta json DEFAULT '{}'::json NOT NULL,
    priority integer DEFAULT 2 NOT NULL,
    state public.ojs_job_state NOT NULL,
    attempt integer DEFAULT 0 NOT NULL,
    max_attempts integer NOT NULL,
    retry json NOT NULL,
    timeout_ms bigint NOT NULL,
    visibility_timeout_ms bigint,
    scheduled_at timestamp with time zone,
    scheduled_at_input text,
    expires_at timestamp with time zone,
    expires_at_input text,
    enqueue_ttl_secs integer,
    total_timeout_secs integer,
    tags text[],
    schema_uri text,
    unique_policy json,
    unique_key text,
    extra json DEFAULT '{}'::json NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    enqueued_at timestamp with time zone,
    activated_at timestamp with time zone,
    started_at timestamp with time zone,
    visible_until timestamp with time zone,
    reservation_ms bigint,
    worker_id text,
    next_retry_at timestamp with time zone,
    retry_delay_ms bigint,
    completed_at timestamp with time zone,
    cancelled_at timestamp with time zone,
    discarded_at timestamp with time zone,
    dead_lettered_at timestamp with time zone,
    result json,
    error jsonb,
    errors jsonb DEFAULT '[]'::jsonb NOT NULL,
    timeout_at timestamp with time zone,
    claim_deadline_at timestamp with time zone,
    total_deadline_at timestamp with time zone,
    re_enqueued_at timestamp with time zone,
    priority_aging_ms bigint,
    original_queue text,
    capacity_tracked boolean DEFAULT false,
    pool text,
    tenant_fair boolean DEFAULT false,
    tenant text,
    fair_key double precision,
    rate_key text,
    rate_held boolean,
    lease_id bigint,
    phase public.ojs_job_phase GENERATED ALWAYS AS (
CASE state
    WHEN 'scheduled'::public.ojs_job_state THEN 'scheduled'::public.ojs_job_phase
    WHEN 'available'::public.ojs_job_state THEN 'available'::public.ojs_job_phase
    WHEN 'pending'::public.ojs_job_state THEN 'pending'::public.ojs_job_phase
    WHEN 'retryable'::public.ojs_job_state THEN 'retryable'::public.ojs_job_phase
    ELSE 'taken'::public.ojs_job_phase
END) STORED NOT NULL,
    in_flight boolean GENERATED ALWAYS AS (
CASE
    WHEN ((rate_key IS NOT NULL) OR (tenant <> ''::text)) THEN (state = ANY (ARRAY['available'::public.ojs_job_state, 'active'::public.ojs_job_state]))
    ELSE NULL::boolean
END) STORED,
    result_awaited boolean,
    durable boolean,
    CONSTRAINT ojs_job_active_has_reservation CHECK (((state <> 'active'::public.ojs_job_state) OR ((attempt >= 1) AND (started_at IS NOT NULL) AND (visible_until IS NOT NULL) AND (reservation_ms IS NOT NULL)))),
    CONSTRAINT ojs_job_active_has_timeout CHECK (((state <> 'active'::public.ojs_job_state) OR (timeout_at IS NOT NULL))),
    CONSTRAINT ojs_job_attempt_non_negative CHECK ((attempt >= 0)),
    CONSTRAINT ojs_job_available_has_enqueued_at CHECK (((state <> 'available'::public.ojs_job_state) OR (enqueued_at IS NOT NULL))),
    CONSTRAINT ojs_job_cancelled_has_cancelled_at CHECK (((state <> 'cancelled'::public.ojs_job_state) OR (cancelled_at IS NOT NULL))),
    CONSTRAINT ojs_job_completed_has_completed_at CHECK (((state <> 'completed'::public.ojs_job_state) OR (completed_at IS NOT NULL))),
    CONSTRAINT ojs_job_dead_letter_is_discarded CHECK (((dead_lettered_at IS NULL) OR (state = 'discarded'::public.ojs_job_state))),
    CONSTRAINT ojs_job_discarded_has_timestamps CHECK (((state <> 'discarded'::public.ojs_job_state) OR ((discarded_at IS NOT NULL) AND (completed_at IS NOT NULL)))),
    CONSTRAINT ojs_job_errors_is_array CHECK ((jsonb_typeof(errors) = 'array'::text)),
    CONSTRAINT ojs_job_expires_at_input_has_value CHECK (((expires_at_input IS NULL) OR (expires_at IS NOT NULL))),
    CONSTRAINT ojs_job_retryable_has_next_retry_at CHECK (((state <> 'retryable'::public.ojs_job_state) OR (next_retry_at IS NOT NULL))),
    CONSTRAINT ojs_job_scheduled_at_input_has_value CHECK (((scheduled_at_input IS NULL) OR (scheduled_at IS NOT NULL))),
    CONSTRAINT ojs_job_unique_key_has_policy CHECK (((unique_key IS NULL) = (unique_policy IS NULL)))
)
WITH (fillfactor='50');

--
-- Name: TABLE ojs_job; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ojs_job IS 'One row per OJS job: the envelope (known attributes as typed columns, unknown attributes in extra) and its lifecycle state.';

--
-- Name: COLUMN ojs_job.id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.id IS 'Job id: UUIDv7, client-supplied or generated.';

--
-- Name: COLUMN ojs_job.seq; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.seq IS 'Arrival sequence; FIFO tie-breaker among jobs with equal priority and enqueued_at.';

--
-- Name: COLUMN ojs_job.type; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.type IS 'Job type, dot-namespaced lowercase segments (e.g. email.send); routes the job to a handler.';

--
-- Name: COLUMN ojs_job.queue; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.queue IS 'Queue the job is fetched from.';

--
-- Name: COLUMN ojs_job.args; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.args IS 'Positional handler arguments, a JSON array stored verbatim.';

--
-- Name: COLUMN ojs_job.meta; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.meta IS 'Client metadata (trace ids, tenant, ...), a JSON object stored verbatim.';

--
-- Name: COLUMN ojs_job.priority; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.priority IS 'Priority within the queue: lower is more urgent; 0 first, default 2.';

--
-- Name: COLUMN ojs_job.state; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.state IS 'Current lifecycle state.';

--
-- Name: COLUMN ojs_job.attempt; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.attempt IS 'Number of claims so far; incremented by every FETCH that hands the job out.';

--
-- Name: COLUMN ojs_job.max_attempts; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.max_attempts IS 'Effective retry.max_attempts: total attempts allowed (0 behaves like 1).';

--
-- Name: COLUMN ojs_job.retry; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.retry IS 'Effective retry policy (defaults merged in, durations in ISO 8601 form); ''{}'' is the default policy (max_attempts 3, initial_interval PT1S, backoff_coefficient 2.0, max_interval PT5M, jitter, exponential, dead_letter on exhaustion), which the server writes that way.';

--
-- Name: COLUMN ojs_job.timeout_ms; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.timeout_ms IS 'Resolved execution timeout in milliseconds.';

--
-- Name: COLUMN ojs_job.visibility_timeout_ms; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.visibility_timeout_ms IS 'Job-level reservation length in milliseconds; null uses the server default.';

--
-- Name: COLUMN ojs_job.scheduled_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.scheduled_at IS 'Earliest time the job may run (client scheduled_at / delay_until).';

--
-- Name: COLUMN ojs_job.scheduled_at_input; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.scheduled_at_input IS 'scheduled_at exactly as the client wrote it (echoed verbatim); null when given relatively.';

--
-- Name: COLUMN ojs_job.expires_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.expires_at IS 'Deadline after which the job must not start; it is discarded instead.';

--
-- Name: COLUMN ojs_job.expires_at_input; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.expires_at_input IS 'expires_at exactly as the client wrote it (echoed verbatim); null when given relatively.';

--
-- Name: COLUMN ojs_job.enqueue_ttl_secs; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.enqueue_ttl_secs IS 'Seconds after created_at within which the job must be claimed for the first time.';

--
-- Name: COLUMN ojs_job.total_timeout_secs; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.total_timeout_secs IS 'Seconds after created_at by which the job must have finished, across all attempts.';

--
-- Name: COLUMN ojs_job.tags; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.tags IS 'Client tags, for filtering.';

--
-- Name: COLUMN ojs_job.schema_uri; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.schema_uri IS 'Client schema attribute (a URI for args); preserved, not validated.';

--
-- Name: COLUMN ojs_job.unique_policy; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.unique_policy IS 'Unique policy as given by the client (echoed as "unique").';

--
-- Name: COLUMN ojs_job.unique_key; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.unique_key IS 'SHA-256 fingerprint of the unique dimensions; jobs sharing it are duplicates.';

--
-- Name: COLUMN ojs_job.extra; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.extra IS 'Unknown top-level envelope attributes, kept verbatim and in the order received.';

--
-- Name: COLUMN ojs_job.created_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.created_at IS 'When the server received the job.';

--
-- Name: COLUMN ojs_job.enqueued_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.enqueued_at IS 'Most recent entry into available; null while the job has never been available.';

--
-- Name: COLUMN ojs_job.activated_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.activated_at IS 'When a pending job was activated.';

--
-- Name: COLUMN ojs_job.started_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.started_at IS 'Most recent claim; cleared when a reservation is lost.';

--
-- Name: COLUMN ojs_job.visible_until; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.visible_until IS 'Reservation deadline of the current claim (active jobs).';

--
-- Name: COLUMN ojs_job.reservation_ms; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.reservation_ms IS 'Reservation length chosen at the most recent claim; a heartbeat extends by it.';

--
-- Name: COLUMN ojs_job.worker_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.worker_id IS 'Worker that holds (or last held) the reservation, if it named itself.';

--
-- Name: COLUMN ojs_job.next_retry_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.next_retry_at IS 'When a retryable job becomes available again.';

--
-- Name: COLUMN ojs_job.retry_delay_ms; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.retry_delay_ms IS 'Backoff delay most recently computed, after jitter and caps.';

--
-- Name: COLUMN ojs_job.completed_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.completed_at IS 'Set on completed and on every transition to discarded.';

--
-- Name: COLUMN ojs_job.cancelled_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.cancelled_at IS 'Set on cancelled.';

--
-- Name: COLUMN ojs_job.discarded_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.discarded_at IS 'Set on discarded.';

--
-- Name: COLUMN ojs_job.dead_lettered_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.dead_lettered_at IS 'Set when the job entered the dead-letter queue (a subset of discarded jobs).';

--
-- Name: COLUMN ojs_job.result; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.result IS 'Handler result sent with ACK, verbatim.';

--
-- Name: COLUMN ojs_job.error; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.error IS 'Most recent error {code, type, message, ...}; removed on ACK.';

--
-- Name: COLUMN ojs_job.errors; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.errors IS 'Error history, oldest first: one entry per failed attempt, with attempt and occurred_at.';

--
-- Name: COLUMN ojs_job.timeout_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.timeout_at IS 'Execution deadline of the current attempt (started_at + timeout); heartbeats do not move it.';

--
-- Name: COLUMN ojs_job.claim_deadline_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.claim_deadline_at IS 'created_at + enqueue_ttl: the job must be claimed for the first time before this; cleared by the first claim.';

--
-- Name: COLUMN ojs_job.total_deadline_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.total_deadline_at IS 'created_at + total_timeout: the job must have finished, across all attempts, before this.';

--
-- Name: COLUMN ojs_job.re_enqueued_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.re_enqueued_at IS 'When the job was last taken out of the dead-letter queue (manual retry).';

--
-- Name: COLUMN ojs_job.priority_aging_ms; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.priority_aging_ms IS 'Priority aging interval (ms) in effect when the job was enqueued; NULL = no aging.';

--
-- Name: COLUMN ojs_job.original_queue; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.original_queue IS 'The queue the job was in before that queue was deleted with strategy move.';

--
-- Name: COLUMN ojs_job.capacity_tracked; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.capacity_tracked IS 'Whether the job is counted in its queue''s ojs_queue_capacity row (its queue was bounded when it entered); null = false.';

--
-- Name: COLUMN ojs_job.pool; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.pool IS 'Pool of the worker that claimed the job, if it had one.';

--
-- Name: COLUMN ojs_job.tenant_fair; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.tenant_fair IS 'Whether the job is in a tenant-fair queue (dispatched by fair_key).';

--
-- Name: COLUMN ojs_job.tenant; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.tenant IS 'The job''s tenant: meta.tenant_id (null without one; in a tenant-fair queue, the empty string). Written by the enqueue (ojs_insert_jobs) and by the tenant-fair tagging trigger.';

--
-- Name: COLUMN ojs_job.fair_key; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.fair_key IS 'Virtual finish time of a tenant-fair job while available: lower dispatches first within its priority.';

--
-- Name: COLUMN ojs_job.rate_key; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.rate_key IS 'The job''s rate-limit key (its rate_limit.key, or queue:<queue> when it names none); null for a job without a rate_limit.';

--
-- Name: COLUMN ojs_job.rate_held; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.rate_held IS 'True while an available keyed job waits for its key to allow it to start (held jobs are not in the dispatch indexes); null otherwise.';

--
-- Name: COLUMN ojs_job.lease_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.lease_id IS 'The lease (ojs_lease) of the claim that holds the job''s current attempt; meaningful only while the job is active. Not indexed: a lease lists its jobs.';

--
-- Name: COLUMN ojs_job.phase; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.phase IS 'Generated from state: the waiting state, or taken from the claim on (active, completed, cancelled, discarded). The waiting-job indexes read it instead of state, so the writes after a claim are HOT updates.';

--
-- Name: COLUMN ojs_job.in_flight; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.in_flight IS 'Generated from state, for a job with a rate-limit key or a tenant: whether it is available or active (what their concurrency limits count). Null for other jobs, so that their changes of state touch no index.';

--
-- Name: COLUMN ojs_job.result_awaited; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.result_awaited IS 'True once a client waits for the job''s result: its end is then announced on the ojs_job_ended channel (migration V32).';

--
-- Name: COLUMN ojs_job.durable; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job.durable IS 'True once the job saved a checkpoint, recorded a step or waited: the claim then hands its next attempt what it kept (migration V33). Null for other jobs.';

--
-- Name: ojs_dead_letter_matches(public.ojs_job, text, text, text, text, timestamp with time zone, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_dead_letter_matches(j public.ojs_job, p_queue text, p_type text, p_type_pattern text, p_error_type text, p_since timestamp with time zone, p_until timestamp with time zone) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN (((j).dead_lettered_at IS NOT NULL) AND ((p_queue IS NULL) OR ((j).queue = p_queue)) AND ((p_type IS NULL) OR ((j).type = p_type)) AND ((p_type_pattern IS NULL) OR ((j).type ~~ p_type_pattern)) AND ((p_error_type IS NULL) OR (((j).error ->> 'type'::text) = p_error_type) OR (((j).error ->> 'code'::text) = p_error_type)) AND ((p_since IS NULL) OR ((j).dead_lettered_at >= p_since)) AND ((p_until IS NULL) OR ((j).dead_lettered_at < p_until)));

--
-- Name: FUNCTION ojs_dead_letter_matches(j public.ojs_job, p_queue text, p_type text, p_type_pattern text, p_error_type text, p_since timestamp with time zone, p_until timestamp with time zone); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_dead_letter_matches(j public.ojs_job, p_queue text, p_type text, p_type_pattern text, p_error_type text, p_since timestamp with time zone, p_until timestamp with time zone) IS 'Whether j is in the dead-letter queue and matches the filters (null: any); p_type_pattern is a LIKE pattern.';

--
-- Name: ojs_discard_reason(public.ojs_job_state, text, integer, integer, timestamp with time zone, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_discard_reason(previous public.ojs_job_state, code text, attempt integer, max_attempts integer, total_deadline_at timestamp with time zone, discarded_at timestamp with time zone) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN ((code = ANY (ARRAY['DISCARD'::text, 'FAIL'::text, 'DEAD_LETTER'::text])) AND (previous = 'active'::public.ojs_job_state)) THEN 'handler_directive'::text WHEN ((code = 'expired'::text) AND (total_deadline_at <= discarded_at)) THEN 'total_timeout'::text WHEN (code = 'expired'::text) THEN 'expired'::text WHEN (code = ANY (ARRAY['overflow'::text, 'rate_limit_dropped'::text, 'queue_deleted'::text])) THEN code WHEN (attempt >= GREATEST(max_attempts, 1)) THEN 'exhausted'::text ELSE 'non_retryable'::text END;

--
-- Name: FUNCTION ojs_discard_reason(previous public.ojs_job_state, code text, attempt integer, max_attempts integer, total_deadline_at timestamp with time zone, discarded_at timestamp with time zone); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_discard_reason(previous public.ojs_job_state, code text, attempt integer, max_attempts integer, total_deadline_at timestamp with time zone, discarded_at timestamp with time zone) IS 'Reason of a job.discarded event: exhausted, non_retryable, handler_directive, expired, total_timeout, overflow, rate_limit_dropped or queue_deleted.';

--
-- Name: ojs_duration_components(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_duration_components(s text, OUT comps jsonb, OUT problem text) RETURNS record
    LANGUAGE plpgsql IMMUTABLE
    AS $_$
declare
    i integer := 1;
    n integer := length(s);
    start integer;
    frac_start integer;
    unit_start integer;
    whole text;
    frac text;
begin
    comps := '[]';
    while i <= n loop
        start := i;
        while i <= n and substr(s, i, 1) between '0' and '9' loop
            i := i + 1;
        end loop;
        if i = start then
            problem := format('expected a number at %s', to_json(substr(s, start)));
            return;
        end if;
        whole := substr(s, start, i - start);
        if length(ltrim(whole, '0')) > 20 or whole::numeric > 18446744073709551615 then
            problem := format('number %s is too large', to_json(whole));
            return;
        end if;
        frac := '';
        if i <= n and substr(s, i, 1) in ('.', ',') then
            i := i + 1;
            frac_start := i;
            while i <= n and substr(s, i, 1) between '0' and '9' loop
                i := i + 1;
            end loop;
            if i = frac_start then
                problem := 'a decimal point must be followed by digits';
                return;
            end if;
            frac := substr(s, frac_start, i - frac_start);
        end if;
        unit_start := i;
        while i <= n and substr(s, i, 1) ~ '^[A-Za-z]$' loop
            i := i + 1;
        end loop;
        if i = unit_start then
            problem := format('missing unit after %s', to_json(substr(s, start, i - start)));
            return;
        end if;
        comps := comps || jsonb_build_object('whole', whole, 'fraction', frac,
                                             'unit', substr(s, unit_start, i - unit_start));
    end loop;
end;
$_$;

--
-- Name: FUNCTION ojs_duration_components(s text, OUT comps jsonb, OUT problem text); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_duration_components(s text, OUT comps jsonb, OUT problem text) IS 'The <digits>[.<digits>]<letters> components of a duration as a JSON array of {whole, fraction, unit}, or the problem with them.';

--
-- Name: ojs_duration_iso(bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_duration_iso(ms bigint) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
    select case when ms = 0 then 'PT0S' else
           'P' || case when ms / 86400000 > 0 then (ms / 86400000)::text || 'D' else '' end
               || case when ms % 86400000 > 0 then
                      'T' || case when ms % 86400000 / 3600000 > 0 then (ms % 86400000 / 3600000)::text || 'H' else '' end
                          || case when ms % 3600000 / 60000 > 0 then (ms % 3600000 / 60000)::text || 'M' else '' end
                          || case when ms % 60000 > 0 then
                                 (ms % 60000 / 1000)::text
                                 || case when ms % 1000 = 0 then ''
                                         else '.' || rtrim(lpad((ms % 1000)::text, 3, '0'), '0') end
                                 || 'S'
                             else '' end
                  else '' end
           end
$$;

--
-- Name: FUNCTION ojs_duration_iso(ms bigint); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_duration_iso(ms bigint) IS 'Milliseconds as an ISO 8601 duration, as the server writes durations (PT1S, PT0.5S, P7D).';

--
-- Name: ojs_duration_ms(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_duration_ms(input text, OUT ms bigint, OUT problem text) RETURNS record
    LANGUAGE plpgsql IMMUTABLE
    AS $$
declare
    s text := btrim(input, E' \t\n\r\f\v');
    rest text;
    parts text[];
    k integer;
    scan record;
    c jsonb;
    total numeric := 0;
    part numeric;
    unit text;
    seen text[] := '{}';
    unit_ms bigint;
    rank integer;
    last_rank integer;
begin
    if s = '' then
        problem := 'empty duration';
        return;
    end if;
    if left(s, 1) in ('P', 'p') then
        rest := upper(substr(s, 2));
        if position('T' in rest) > 0 then
            parts := array[substr(rest, 1, position('T' in rest) - 1),
                           substr(rest, position('T' in rest) + 1)];
            if parts[2] = '' then
                problem := '''T'' must be followed by hours, minutes or seconds';
                return;
            end if;
        else
            parts := array[rest, ''];
            if rest = '' then
                problem := 'an ISO 8601 duration needs at least one component';
                return;
            end if;
        end if;
        -- Date designators in the order W, D; time designators in the order H, M, S.
        for k in 1 .. 2 loop
            scan := ojs_duration_components(parts[k]);
            if scan.problem is not null then
                problem := scan.problem;
                return;
            end if;
            last_rank := 0;
            for c in select value from jsonb_array_elements(scan.comps)
            loop
                unit := c ->> 'unit';
                if k = 1 then
                    rank := case unit when 'W' then 1 when 'D' then 2 end;
                    unit_ms := case unit when 'W' then 604800000 when 'D' then 86400000 end;
                    if unit in ('Y', 'M') then
                        problem := 'years and months are not allowed in durations (their length is ambiguous); use weeks or days';
                        return;
                    elsif rank is null then
                        problem := format('unknown date designator %s', to_json(unit));
                        return;
                    elsif rank <= last_rank then
                        problem := 'designators must appear once each, in the order W, D';
                        return;
                    end if;
                else
                    rank := case unit when 'H' then 1 when 'M' then 2 when 'S' then 3 end;
                    unit_ms := case unit when 'H' then 3600000 when 'M' then 60000 when 'S' then 1000 end;
                    if rank is null then
                        problem := format('unknown time designator %s', to_json(unit));
                        return;
                    elsif rank <= last_rank then
                        problem := 'designators must appear once each, in the order H, M, S';
                        return;
                    end if;
                end if;
                if c ->> 'fraction' <> '' and unit <> 'S' then
                    problem := 'only seconds may have a fraction';
                    return;
                end if;
                last_rank := rank;
                part := ojs_duration_scaled((c ->> 'whole')::numeric, c ->> 'fraction', unit_ms);
                if part > 18446744073709551615 or total + part > 18446744073709551615 then
                    problem := 'duration is too large';
                    return;
                end if;
                total := total + part;
            end loop;
        end loop;
    else
        scan := ojs_duration_components(s);
        if scan.problem is not null then
            problem := scan.problem;
            return;
        end if;
        for c in select value from jsonb_array_elements(scan.comps)
        loop
            unit := lower(c ->> 'unit');
            unit_ms := case unit when 'ms' then 1 when 's' then 1000 when 'm' then 60000
                                 when 'h' then 3600000 when 'd' then 86400000 end;
            if unit_ms is null then
                problem := format('unknown unit %s (use ms, s, m, h or d, or an ISO 8601 duration such as PT5M)', to_json(unit));
                return;
            end if;
            if unit = any(seen) then
                problem := format('unit %s appears twice', to_json(unit));
                return;
            end if;
            seen := seen || unit;
            part := ojs_duration_scaled((c ->> 'whole')::numeric, c ->> 'fraction', unit_ms);
            if part > 18446744073709551615 or total + part > 18446744073709551615 then
                problem := 'duration is too large';
                return;
            end if;
            total := total + part;
        end loop;
    end if;
    if total > 3153600000000 then
        problem := format('duration %s is longer than 100 years', to_json(input));
        return;
    end if;
    ms := total;
end;
$$;

--
-- Name: FUNCTION ojs_duration_ms(input text, OUT ms bigint, OUT problem text); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_duration_ms(input text, OUT ms bigint, OUT problem text) IS 'An OJS duration (ISO 8601 weeks to seconds, or the short form 1h30m / 500ms) in milliseconds, or the problem with it.';

--
-- Name: ojs_duration_scaled(numeric, text, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_duration_scaled(whole numeric, fraction text, unit_ms bigint) RETURNS numeric
    LANGUAGE plpgsql IMMUTABLE
    AS $$
declare
    scale bigint := unit_ms;
    frac numeric := 0;
    d text;
begin
    foreach d in array regexp_split_to_array(left(coalesce(fraction, ''), 12), '')
    loop
        continue when d = '';
        scale := scale / 10;
        frac := frac + d::int * scale;
    end loop;
    return whole * unit_ms + frac;
end;
$$;

--
-- Name: FUNCTION ojs_duration_scaled(whole numeric, fraction text, unit_ms bigint); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_duration_scaled(whole numeric, fraction text, unit_ms bigint) IS 'whole.fraction units in whole milliseconds, scaled digit by digit as the server does.';

--
-- Name: ojs_enqueue(json); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_enqueue(job json) RETURNS json
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
declare
    out_jobs ojs_job[] := ojs_enqueue_bodies(array[job], false);
begin
    perform ojs_tenant_enqueued(out_jobs);
    return ('{"job":' || ojs_job_wire(out_jobs[1])::text || '}')::json;
end;
$$;

--
-- Name: FUNCTION ojs_enqueue(job json); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_enqueue(job json) IS 'Enqueues one job in the caller''s transaction: takes the body of POST /ojs/v1/jobs and returns its 201 body ({"job": {...}}). Same validation, defaults, queue configuration and events as PUSH; the job is visible, and workers are woken, when the caller commits. Refusals raise SQLSTATE OJ400/OJ409/OJ413/OJ422/OJ429 with the OJS error body as DETAIL. The producer for a queue''s `producers` list is the setting ojs.producer. Unique policies and embedded workflows are refused (OJ422 unsupported); a rate-limited job is released by its key''s releasers once the caller commits.';

--
-- Name: ojs_enqueue(jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_enqueue(job jsonb) RETURNS json
    LANGUAGE sql
    RETURN public.ojs_enqueue((job)::json);

--
-- Name: FUNCTION ojs_enqueue(job jsonb); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_enqueue(job jsonb) IS 'ojs_enqueue(json) for a jsonb body (its members in jsonb''s order).';

--
-- Name: ojs_enqueue(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_enqueue(job text) RETURNS json
    LANGUAGE sql
    RETURN public.ojs_enqueue((job)::json);

--
-- Name: FUNCTION ojs_enqueue(job text); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_enqueue(job text) IS 'ojs_enqueue(json) for a text body (a quoted literal resolves to this one).';

--
-- Name: ojs_enqueue_batch(json); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_enqueue_batch(body json) RETURNS json
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $_$
declare
    s ojs_setting;
    items json;
    n integer;
    out_jobs ojs_job[];
begin
    select * into s from ojs_setting;
    if not found then
        raise exception 'ojs_setting has no row: restore it (insert into ojs_setting default values), then restart an ojs server to write its settings';
    end if;
    if body is null or json_typeof(body) <> 'object' then
        perform ojs_enqueue_refuse_violations(jsonb_build_array(jsonb_build_object('path', '$', 'message',
                format('the body must be a JSON object, got %s', coalesce(ojs_json_article(body), 'null')))), null, 400, 'invalid_request');
    end if;
    select m.value into items from ojs_json_members(body) m where m.key = 'jobs';
    if items is null or json_typeof(items) = 'null' then
        perform ojs_enqueue_refuse_violations(jsonb_build_array(jsonb_build_object('path', '$.jobs', 'message', '''jobs'' is required: an array of job envelopes')), null, 400, 'invalid_request');
    elsif json_typeof(items) <> 'array' then
        perform ojs_enqueue_refuse_violations(jsonb_build_array(jsonb_build_object('path', '$.jobs', 'message', format('''jobs'' must be an array, got %s', ojs_json_article(items)))), null, 400, 'invalid_request');
    end if;
    n := json_array_length(items);
    if n = 0 or n > s.max_batch_jobs then
        perform ojs_enqueue_refuse_violations(jsonb_build_array(jsonb_build_object('path', '$.jobs', 'message', format('''jobs'' must hold 1 to %s jobs, got %s', s.max_batch_jobs, n))), null, 400, 'invalid_request');
    end if;
    out_jobs := ojs_enqueue_bodies(array(select e from json_array_elements(items) with ordinality as x(e, i) order by i), true);
    perform ojs_tenant_enqueued(out_jobs);
    return ('{"jobs":[' || (select string_agg(ojs_job_wire(out_jobs[k])::text, ',' order by k)
                              from generate_subscripts(out_jobs, 1) as k)
            || '],"count":' || cardinality(out_jobs) || '}')::json;
end;
$_$;

--
-- Name: FUNCTION ojs_enqueue_batch(body json); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_enqueue_batch(body json) IS 'Enqueues a batch in the caller''s transaction, all or nothing: takes the body of POST /ojs/v1/jobs/batch ({"jobs": [...]}) and returns its 201 body ({"jobs": [...], "count": n}). See ojs_enqueue.';

--
-- Name: ojs_enqueue_batch(jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_enqueue_batch(body jsonb) RETURNS json
    LANGUAGE sql
    RETURN public.ojs_enqueue_batch((body)::json);

--
-- Name: FUNCTION ojs_enqueue_batch(body jsonb); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_enqueue_batch(body jsonb) IS 'ojs_enqueue_batch(json) for a jsonb body.';

--
-- Name: ojs_enqueue_batch(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_enqueue_batch(body text) RETURNS json
    LANGUAGE sql
    RETURN public.ojs_enqueue_batch((body)::json);

--
-- Name: FUNCTION ojs_enqueue_batch(body text); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_enqueue_batch(body text) IS 'ojs_enqueue_batch(json) for a text body (a quoted literal resolves to this one).';

--
-- Name: ojs_enqueue_bodies(json[], boolean); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_enqueue_bodies(bodies json[], batch boolean) RETURNS public.ojs_job[]
    LANGUAGE plpgsql
    AS $_$
declare
    s ojs_setting;
    jobs ojs_new_job[];
    i integer;
    d jsonb;
    producer text := nullif(current_setting('ojs.producer', true), '');
    out_jobs ojs_job[];
    created bigint;
    refused_state text;
    refused_queue text;
    refused_detail text;
    refused_constraint text;
    overflow jsonb;
    k integer;
begin
    select * into s from ojs_setting;
    if not found then
        raise exception 'ojs_setting has no row: restore it (insert into ojs_setting default values), then restart an ojs server to write its settings';
    end if;
    select config into d from ojs_queue where name = '_default';
    d := coalesce(d, '{}');
    -- Rows are read in array order, so the first body at fault is the one refused.
    select array_agg(ojs_enqueue_read(b.body, case when batch then (b.n - 1)::int end, s) order by b.n)
      into jobs
      from unnest(bodies) with ordinality as b(body, n);
    select array_agg(ojs_enqueue_configure(jobs[g.n], case when batch then g.n - 1 end, s, d, producer)
                     order by g.n)
      into jobs
      from generate_subscripts(jobs, 1) as g(n);
    -- The same id twice in one request: the second one is refused.
    select x.n - 1 into i
      from (select g.n, row_number() over (partition by (jobs[g.n]).id order by g.n) as nth
              from generate_subscripts(jobs, 1) as g(n)) x
     where x.nth = 2
     order by x.n
     limit 1;
    if found then
        perform ojs_enqueue_refuse(409, 'duplicate',
            case when batch then format('jobs[%s]: ', i) else '' end
            || format('A job with id ''%s'' already exists.', jobs[i + 1].id),
            jsonb_build_object('job_id', jobs[i + 1].id, 'existing_job_id', jobs[i + 1].id)
            || case when batch then jsonb_build_object('index', i) else '{}' end);
    end if;

    -- A full drop_oldest queue makes room once (as PUSH does), then the jobs are written again.
    <<attempts>>
    for attempt in 1 .. 2 loop
        begin
            select array_agg(x.inserted_job), max(x.queues_created) into out_jobs, created
              from (select array_agg(u.id order by u.ordinality) as id,
                           array_agg(u.type order by u.ordinality) as type,
                           array_agg(u.queue order by u.ordinality) as queue,
                           array_agg(u.args order by u.ordinality) as args,
                           array_agg(u.meta order by u.ordinality) as meta,
                           array_agg(u.priority order by u.ordinality) as priority,
                           array_agg(u.max_attempts order by u.ordinality) as max_attempts,
                           array_agg(u.retry order by u.ordinality) as retry,
                           array_agg(u.timeout_ms order by u.ordinality) as timeout_ms,
                           array_agg(u.visibility_timeout_ms order by u.ordinality) as visibility_timeout_ms,
                           array_agg(u.scheduled_abs order by u.ordinality) as scheduled_abs,
                           array_agg(u.scheduled_rel_ms order by u.ordinality) as scheduled_rel_ms,
                           array_agg(u.scheduled_text order by u.ordinality) as scheduled_text,
                           array_agg(u.expires_abs order by u.ordinality) as expires_abs,
                           array_agg(u.expires_rel_ms order by u.ordinality) as expires_rel_ms,
                           array_agg(u.expires_text order by u.ordinality) as expires_text,
                           array_agg(u.enqueue_ttl_secs order by u.ordinality) as enqueue_ttl_secs,
                           array_agg(u.total_timeout_secs order by u.ordinality) as total_timeout_secs,
                           array_agg(u.tags order by u.ordinality) as tags,
                           array_agg(u.schema_uri order by u.ordinality) as schema_uri,
                           array_agg(null::text) as no_text,
                           array_agg(u.extra order by u.ordinality) as extra,
                           array_agg(u.pending order by u.ordinality) as pending,
                           array_agg(u.priority_aging_ms order by u.ordinality) as priority_aging_ms,
                           array_agg(u.id order by u.ordinality) filter (where u.id_supplied) as supplied,
                           array_agg(u.rate_key order by u.ordinality) as rate_key
                      from unnest(jobs) with ordinality as u) a,
                   ojs_insert_jobs(a.id, a.type, a.queue, a.args, a.meta, a.priority, a.max_attempts,
                                   a.retry, a.timeout_ms, a.visibility_timeout_ms, a.scheduled_abs,
                                   a.scheduled_rel_ms, a.scheduled_text, a.expires_abs,
                                   a.expires_rel_ms, a.expires_text, a.enqueue_ttl_secs,
                                   a.total_timeout_secs, a.tags, a.schema_uri, a.no_text, a.no_text,
                                   a.extra, a.pending, a.priority_aging_ms, s.strict_queues,
                                   ojs_config_generation_locked(), '{}', '{}', '{}', '{}', 0,
                                   coalesce(a.supplied, '{}'), a.rate_key) x;
            exit attempts;
        exception
            when unique_violation then
                get stacked diagnostics refused_constraint = constraint_name;
                if refused_constraint <> 'ojs_job_pkey' then
                    raise;
                end if;
                i := null;
                for k in 1 .. cardinality(jobs) loop
                    if jobs[k].id_supplied and exists (select 1 from ojs_job_all a where a.id = jobs[k].id) then
                        i := k - 1;
                        exit;
                    end if;
                end loop;
                -- The clashing row is gone again: the first supplied id.
                if i is null then
                    for k in 1 .. cardinality(jobs) loop
                        if jobs[k].id_supplied then
                            i := k - 1;
                            exit;
                        end if;
                    end loop;
                end if;
                if i is null then
                    raise;
                end if;
                perform ojs_enqueue_refuse(409, 'duplicate',
                    case when batch then format('jobs[%s]: ', i) else '' end
                    || format('A job with id ''%s'' already exists.', jobs[i + 1].id),
                    jsonb_build_object('job_id', jobs[i + 1].id, 'existing_job_id', jobs[i + 1].id)
                    || case when batch then jsonb_build_object('index', i) else '{}' end);
            when sqlstate 'OJ001' or sqlstate 'OJ002' or sqlstate 'OJ003' then
                get stacked diagnostics refused_state = returned_sqlstate, refused_queue = message_text,
                                        refused_detail = pg_exception_detail;
                if refused_state = 'OJ001' then
                    perform ojs_enqueue_refuse(409, 'conflict',
                        format('Queue ''%s'' is draining (being deleted); cannot enqueue into it.', refused_queue),
                        jsonb_build_object('queue', refused_queue, 'current_state', 'draining'));
                elsif refused_state = 'OJ002' then
                    perform ojs_enqueue_refuse(400, 'invalid_request',
                        format('Queue ''%s'' does not exist, and this server only enqueues to existing queues: create it first (POST /ojs/v1/queues).', refused_queue),
                        jsonb_build_object('field', '$.queue', 'queue', refused_queue, 'reason', 'unknown_queue'));
                end if;
                overflow := refused_detail::jsonb;
                if overflow ->> 'policy' = 'drop_oldest' and attempt = 1 then
                    perform ojs_queue_drop_oldest(g.queue, g.jobs, g.bytes)
                       from (select x.queue, count(*) as jobs,
                                    sum(octet_length(x.args) + octet_length(x.meta)) as bytes
                               from unnest(jobs) x
                              group by x.queue
                              order by x.queue) g;
                    continue attempts;
                end if;
                i := null;
                for k in 1 .. cardinality(jobs) loop
                    if jobs[k].queue = refused_queue then
                        i := k - 1;
                        exit;
                    end if;
                end loop;
                perform ojs_enqueue_refuse(429, 'QUEUE_FULL',
                    case when batch then format('jobs[%s]: ', i) else '' end
                    || format('Queue ''%s'' is full: it holds %s unfinished jobs and the job would take it past %s.',
                              refused_queue, overflow ->> 'depth',
                              case when (overflow -> 'bound_bytes') is not null and jsonb_typeof(overflow -> 'bound_bytes') <> 'null'
                                        and (jsonb_typeof(overflow -> 'bound') = 'null' or (overflow ->> 'depth')::bigint < (overflow ->> 'bound')::bigint)
                                        and (overflow ->> 'bytes')::bigint <= (overflow ->> 'bound_bytes')::bigint
                                   then format('its size bound of %s bytes', overflow ->> 'bound_bytes')
                                   else format('its bound of %s jobs', coalesce(overflow ->> 'bound', overflow ->> 'depth')) end),
                    jsonb_build_object('queue', refused_queue, 'depth', (overflow ->> 'depth')::bigint,
                                       'bound', coalesce(overflow -> 'bound', overflow -> 'depth'),
                                       'max_size_bytes', overflow -> 'bound_bytes',
                                       'strategy', overflow ->> 'policy')
                    || case when batch then jsonb_build_object('index', i) else '{}' end,
                    true);
        end;
    end loop;

    -- Wake-ups and counts, delivered when (and only if) the caller commits.
    perform pg_notify('ojs_job_available', a.queue || ' - - - ' || a.n)
       from (select x.queue, count(*) as n from unnest(out_jobs) x
              where x.state = 'available' group by x.queue) a;
    perform pg_notify('ojs_job_enqueued', a.queue || ' ' || a.type || ' ' || a.n || ' ' || a.scheduled)
       from (select x.queue, x.type, count(*) as n, count(*) filter (where x.state = 'scheduled') as scheduled
               from unnest(out_jobs) x
              group by x.queue, x.type) a;
    -- Jobs with a rate-limit key were written held: the releasers let them go once the caller
    -- commits (the server's PUSH releases them itself).
    perform pg_notify('ojs_rate_key', k.key)
       from (select distinct x.rate_key as key from unnest(out_jobs) x where x.rate_key is not null) k;
    -- In request order.
    return array(select x from unnest(out_jobs) x
                   join unnest(jobs) with ordinality as o(id) on o.id = x.id
                  order by o.ordinality);
end;
$_$;

--
-- Name: FUNCTION ojs_enqueue_bodies(bodies json[], batch boolean); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_enqueue_bodies(bodies json[], batch boolean) IS 'The body of ojs_enqueue and ojs_enqueue_batch: reads every envelope (ojs_enqueue_read), applies its queue''s configuration (ojs_enqueue_configure), refuses an id given twice, writes the jobs with ojs_insert_jobs (a full drop_oldest queue makes room once with ojs_queue_drop_oldest), translates its refusals into the OJS errors, and notifies ojs_job_available, ojs_rate_key and ojs_job_enqueued (delivered at commit). Returns the jobs in order.';

--
-- Name: ojs_setting; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ojs_setting (
    singleton boolean DEFAULT true NOT NULL,
    strict_queues boolean DEFAULT false NOT NULL,
    hyphenated_types boolean DEFAULT false NOT NULL,
    default_timeout_ms bigint DEFAULT 1800000 NOT NULL,
    max_priority integer DEFAULT 255 NOT NULL,
    priority_aging_ms bigint,
    max_envelope_bytes integer DEFAULT 1048576 NOT NULL,
    max_batch_jobs integer DEFAULT 1000 NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT ojs_setting_singleton CHECK (singleton)
);

--
-- Name: TABLE ojs_setting; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ojs_setting IS 'One row: the enqueue settings of the server process (OJS_STRICT_QUEUES, OJS_ALLOW_HYPHENATED_TYPES, OJS_DEFAULT_TIMEOUT_SECS, OJS_MAX_PRIORITY, OJS_PRIORITY_AGING_INTERVAL, OJS_MAX_ENVELOPE_BYTES, OJS_MAX_BATCH_SIZE), written by every server as it starts, read by ojs_enqueue. Replicas should share one configuration; the last to start wins.';

--
-- Name: COLUMN ojs_setting.singleton; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_setting.singleton IS 'Always true: the table has one row.';

--
-- Name: COLUMN ojs_setting.strict_queues; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_setting.strict_queues IS 'Whether a queue must exist before its first job (OJS_STRICT_QUEUES).';

--
-- Name: COLUMN ojs_setting.hyphenated_types; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_setting.hyphenated_types IS 'Whether job types may contain hyphens (OJS_ALLOW_HYPHENATED_TYPES).';

--
-- Name: COLUMN ojs_setting.default_timeout_ms; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_setting.default_timeout_ms IS 'Execution timeout of a job that names none and whose queue has no default_timeout, in milliseconds.';

--
-- Name: COLUMN ojs_setting.max_priority; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_setting.max_priority IS 'Largest accepted priority (lowest urgency).';

--
-- Name: COLUMN ojs_setting.priority_aging_ms; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_setting.priority_aging_ms IS 'Priority aging interval given to new jobs, in milliseconds (null: no aging).';

--
-- Name: COLUMN ojs_setting.max_envelope_bytes; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_setting.max_envelope_bytes IS 'Largest accepted job envelope, in bytes (its compact JSON text).';

--
-- Name: COLUMN ojs_setting.max_batch_jobs; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_setting.max_batch_jobs IS 'Most jobs in one batch enqueue.';

--
-- Name: COLUMN ojs_setting.updated_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_setting.updated_at IS 'When a server last wrote these settings.';

--
-- Name: ojs_enqueue_configure(public.ojs_new_job, integer, public.ojs_setting, jsonb, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_enqueue_configure(j public.ojs_new_job, idx integer, s public.ojs_setting, d jsonb, producer text) RETURNS public.ojs_new_job
    LANGUAGE plpgsql
    AS $_$
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
$_$;

--
-- Name: FUNCTION ojs_enqueue_configure(j public.ojs_new_job, idx integer, s public.ojs_setting, d jsonb, producer text); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_enqueue_configure(j public.ojs_new_job, idx integer, s public.ojs_setting, d jsonb, producer text) IS 'A read job with its queue''s configuration applied as PUSH applies it: allowed_job_types, producers (the setting ojs.producer), default_timeout, visibility_timeout, result_ttl (V35), default_retry layered under the job''s retry; raises PUSH''s refusal.';

--
-- Name: ojs_enqueue_read(json, integer, public.ojs_setting); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_enqueue_read(body json, idx integer, s public.ojs_setting) RETURNS public.ojs_new_job
    LANGUAGE plpgsql
    AS $_$
declare
    text_body text;
begin
    if body is null or json_typeof(body) <> 'object' then
        if idx is not null then
            perform ojs_enqueue_refuse(400, 'invalid_request',
                format('jobs[%s]: each job must be an object, got %s', idx, coalesce(ojs_json_article(body), 'null')),
                jsonb_build_object('field', format('$.jobs[%s]', idx), 'index', idx));
        end if;
        perform ojs_enqueue_refuse_violations(jsonb_build_array(jsonb_build_object('path', '$', 'message',
            format('the job must be a JSON object, got %s', coalesce(ojs_json_article(body), 'null')))), null, 400, 'invalid_request');
    end if;
    text_body := ojs_json_compact(body::text);
    if octet_length(text_body) > s.max_envelope_bytes then
        perform ojs_enqueue_refuse(413, 'envelope_too_large',
            case when idx is not null then format('jobs[%s]: ', idx) else '' end
            || format('''envelope'' is %s bytes; the maximum is %s bytes.', octet_length(text_body), s.max_envelope_bytes),
            jsonb_build_object('max_size', s.max_envelope_bytes, 'size', octet_length(text_body), 'field', 'envelope')
            || case when idx is not null then jsonb_build_object('index', idx) else '{}' end);
    end if;
    return ojs_envelope_read(text_body::json, idx, s);
end;
$_$;

--
-- Name: FUNCTION ojs_enqueue_read(body json, idx integer, s public.ojs_setting); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_enqueue_read(body json, idx integer, s public.ojs_setting) IS 'One body of an enqueue read: an object, within the size limit (ojs_setting.max_envelope_bytes, compact), a valid envelope (ojs_envelope_read); raises PUSH''s refusal.';

--
-- Name: ojs_enqueue_refuse(integer, text, text, jsonb, boolean); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_enqueue_refuse(status integer, code text, message text, details jsonb, retryable boolean DEFAULT false) RETURNS void
    LANGUAGE plpgsql
    AS $$
begin
    raise exception using
        errcode = 'OJ' || status::text,
        message = message,
        detail = ojs_json_compact(json_build_object('error', json_build_object(
            'code', code, 'type', code, 'message', message, 'retryable', retryable,
            'details', details))::text),
        hint = 'DETAIL holds the OJS error body ({"error": {code, message, details}}) that POST /ojs/v1/jobs would answer.';
end;
$$;

--
-- Name: FUNCTION ojs_enqueue_refuse(status integer, code text, message text, details jsonb, retryable boolean); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_enqueue_refuse(status integer, code text, message text, details jsonb, retryable boolean) IS 'Raises an enqueue refusal: SQLSTATE OJ<status>, the OJS error message, and DETAIL = the OJS error body.';

--
-- Name: ojs_enqueue_refuse_violations(jsonb, integer, integer, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_enqueue_refuse_violations(violations jsonb, idx integer, status integer, code text) RETURNS void
    LANGUAGE plpgsql
    AS $$
declare
    n integer := jsonb_array_length(violations);
    message text := violations -> 0 ->> 'message';
begin
    if idx is not null then
        message := format('jobs[%s]: %s', idx, message);
    end if;
    if n > 1 then
        message := message || format(' (and %s more problem%s; see details.validation_errors)',
                                     n - 1, case when n = 2 then '' else 's' end);
    end if;
    perform ojs_enqueue_refuse(status, code, message,
        jsonb_build_object('field', violations -> 0 ->> 'path', 'validation_errors', violations)
        || case when idx is not null then jsonb_build_object('index', idx) else '{}' end);
end;
$$;

--
-- Name: FUNCTION ojs_enqueue_refuse_violations(violations jsonb, idx integer, status integer, code text); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_enqueue_refuse_violations(violations jsonb, idx integer, status integer, code text) IS 'Raises the refusal of field violations ([{path, message}]) as PUSH words it: status 400 invalid_request, or 422 validation_error for a retry policy.';

--
-- Name: ojs_enqueue_type(text, json, text, integer, timestamp with time zone, json, json, uuid); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_enqueue_type(type text, args json DEFAULT '[]'::json, queue text DEFAULT NULL::text, priority integer DEFAULT NULL::integer, scheduled_at timestamp with time zone DEFAULT NULL::timestamp with time zone, meta json DEFAULT NULL::json, options json DEFAULT NULL::json, id uuid DEFAULT NULL::uuid) RETURNS uuid
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
declare
    out_jobs ojs_job[];
begin
    out_jobs := ojs_enqueue_bodies(array[json_strip_nulls(json_build_object(
        'type', type, 'args', args, 'queue', queue, 'priority', priority,
        'scheduled_at', to_char(scheduled_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'meta', meta, 'options', options, 'id', id))], false);
    perform ojs_tenant_enqueued(out_jobs);
    return out_jobs[1].id;
end;
$$;

--
-- Name: FUNCTION ojs_enqueue_type(type text, args json, queue text, priority integer, scheduled_at timestamp with time zone, meta json, options json, id uuid); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_enqueue_type(type text, args json, queue text, priority integer, scheduled_at timestamp with time zone, meta json, options json, id uuid) IS 'ojs_enqueue with typed arguments (null: not given; options as in the envelope): returns the new job''s id.';

--
-- Name: ojs_envelope_first(json, json, text[], boolean); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_envelope_first(top json, opt json, names text[], names_first boolean DEFAULT false, OUT p text, OUT v json) RETURNS record
    LANGUAGE plpgsql IMMUTABLE
    AS $_$
declare
    n text;
begin
    if names_first then
        foreach n in array names loop
            v := top -> n;
            if v is not null and json_typeof(v) <> 'null' then
                p := '$.' || n;
                return;
            end if;
        end loop;
        if opt is not null then
            foreach n in array names loop
                v := opt -> n;
                if v is not null and json_typeof(v) <> 'null' then
                    p := '$.options.' || n;
                    return;
                end if;
            end loop;
        end if;
    else
        foreach n in array names loop
            v := top -> n;
            if v is not null and json_typeof(v) <> 'null' then
                p := '$.' || n;
                return;
            end if;
            if opt is not null then
                v := opt -> n;
                if v is not null and json_typeof(v) <> 'null' then
                    p := '$.options.' || n;
                    return;
                end if;
            end if;
        end loop;
    end if;
    v := null;
end;
$_$;

--
-- Name: FUNCTION ojs_envelope_first(top json, opt json, names text[], names_first boolean, OUT p text, OUT v json); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_envelope_first(top json, opt json, names text[], names_first boolean, OUT p text, OUT v json) IS 'The first present (non-null) optional attribute of an envelope among names, with its path: each name at the top level then in options, or with names_first every name at the top level first.';

--
-- Name: ojs_envelope_read(json, integer, public.ojs_setting); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_envelope_read(body json, idx integer, s public.ojs_setting) RETURNS public.ojs_new_job
    LANGUAGE plpgsql
    AS $_$
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
$_$;

--
-- Name: FUNCTION ojs_envelope_read(body json, idx integer, s public.ojs_setting); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_envelope_read(body json, idx integer, s public.ojs_setting) IS 'Reads and validates one job envelope (the PL/pgSQL twin of the server''s envelope reader: same rules, refusals and field paths); raises the refusal PUSH answers. idx: the position in a batch (null for one job).';

--
-- Name: ojs_envelope_seconds(json, text, text, jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_envelope_seconds(v json, path text, name text, INOUT violations jsonb, OUT secs integer) RETURNS record
    LANGUAGE plpgsql IMMUTABLE
    AS $$
declare
    n bigint := ojs_json_integer(v);
begin
    if v is null then
        return;
    elsif n > 0 and n <= 2147483647 then
        secs := n;
    else
        violations := violations || jsonb_build_object('path', path,
            'message', name || ' must be a positive integer number of seconds');
    end if;
end;
$$;

--
-- Name: FUNCTION ojs_envelope_seconds(v json, path text, name text, INOUT violations jsonb, OUT secs integer); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_envelope_seconds(v json, path text, name text, INOUT violations jsonb, OUT secs integer) IS 'An envelope''s positive whole number of seconds, or a violation appended.';

--
-- Name: ojs_envelope_time(json); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_envelope_time(v json, OUT at_abs timestamp with time zone, OUT rel_ms bigint, OUT input text, OUT problem text) RETURNS record
    LANGUAGE plpgsql STABLE
    AS $$
declare
    t record;
begin
    if v is null then
        return;
    elsif json_typeof(v) <> 'string' then
        problem := 'expected an RFC 3339 timestamp string with a time zone (or +<duration>)';
        return;
    end if;
    t := ojs_client_time(v #>> '{}');
    at_abs := t.at_abs;
    rel_ms := t.rel_ms;
    problem := t.problem;
    input := case when t.at_abs is not null then v #>> '{}' end;
end;
$$;

--
-- Name: FUNCTION ojs_envelope_time(v json, OUT at_abs timestamp with time zone, OUT rel_ms bigint, OUT input text, OUT problem text); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_envelope_time(v json, OUT at_abs timestamp with time zone, OUT rel_ms bigint, OUT input text, OUT problem text) IS 'An envelope''s timestamp attribute: ojs_client_time of a string, with the text to echo for an absolute one, or the problem with it.';

--
-- Name: ojs_timestamp_text(timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_timestamp_text(t timestamp with time zone) RETURNS text
    LANGUAGE sql STABLE STRICT PARALLEL SAFE
    RETURN to_char((t AT TIME ZONE 'UTC'::text), 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'::text);

--
-- Name: FUNCTION ojs_timestamp_text(t timestamp with time zone); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_timestamp_text(t timestamp with time zone) IS 'Formats a timestamp as OJS does on the wire: 2026-02-12T10:30:00.123Z.';

--
-- Name: ojs_error_entry(integer, jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_error_entry(attempt integer, error jsonb) RETURNS jsonb
    LANGUAGE sql STABLE STRICT PARALLEL SAFE
    RETURN ((jsonb_build_object('attempt', attempt) || error) || jsonb_build_object('occurred_at', public.ojs_timestamp_text(now())));

--
-- Name: FUNCTION ojs_error_entry(attempt integer, error jsonb); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_error_entry(attempt integer, error jsonb) IS 'Builds an errors[] entry: {attempt, <error fields>, occurred_at}.';

--
-- Name: ojs_error_entry(integer, jsonb, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_error_entry(attempt integer, error jsonb, at timestamp with time zone) RETURNS jsonb
    LANGUAGE sql STABLE STRICT PARALLEL SAFE
    RETURN ((jsonb_build_object('attempt', attempt) || error) || jsonb_build_object('occurred_at', public.ojs_timestamp_text(at)));

--
-- Name: FUNCTION ojs_error_entry(attempt integer, error jsonb, at timestamp with time zone); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_error_entry(attempt integer, error jsonb, at timestamp with time zone) IS 'Builds an errors[] entry: {attempt, <error fields>, occurred_at = at}.';

--
-- Name: ojs_glob(text, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_glob(pattern text, value text) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    AS $$
    select value like replace(replace(replace(replace(pattern, '\', '\\'), '%', '\%'), '_', '\_'), '*', '%')
$$;

--
-- Name: FUNCTION ojs_glob(pattern text, value text); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_glob(pattern text, value text) IS 'Whether value matches a queue access pattern (* matches any run of characters).';

--
-- Name: ojs_insert_jobs(uuid[], text[], text[], text[], text[], integer[], integer[], text[], bigint[], bigint[], timestamp with time zone[], bigint[], text[], timestamp with time zone[], bigint[], text[], integer[], integer[], text[], text[], text[], text[], text[], boolean[], bigint[], boolean, bigint, boolean[], text[], bigint[], text[], bigint, uuid[], text[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_insert_jobs(p_id uuid[], p_type text[], p_queue text[], p_args text[], p_meta text[], p_priority integer[], p_max_attempts integer[], p_retry text[], p_timeout_ms bigint[], p_visibility_timeout_ms bigint[], p_scheduled_abs timestamp with time zone[], p_scheduled_rel_ms bigint[], p_scheduled_at_input text[], p_expires_abs timestamp with time zone[], p_expires_rel_ms bigint[], p_expires_at_input text[], p_enqueue_ttl_secs integer[], p_total_timeout_secs integer[], p_tags text[], p_schema_uri text[], p_unique_policy text[], p_unique_key text[], p_extra text[], p_pending boolean[], p_priority_aging_ms bigint[], p_strict_queues boolean, p_config_generation bigint, p_handed boolean[], p_hand_worker text[], p_hand_visibility_ms bigint[], p_hand_pool text[], p_default_visibility_timeout_ms bigint, p_supplied_ids uuid[], p_rate_key text[]) RETURNS TABLE(inserted_job public.ojs_job, queues_created bigint)
    LANGUAGE plpgsql
    AS $_$
#variable_conflict use_column
begin
    return query
    with input as (
        select *
          from unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int4[],
                      $7::int4[], $8::text[], $9::int8[], $10::int8[], $11::timestamptz[],
                      $12::int8[], $13::text[], $14::timestamptz[], $15::int8[], $16::text[],
                      $17::int4[], $18::int4[], $19::text[], $20::text[], $21::text[],
                      $22::text[], $23::text[], $24::bool[], $25::int8[], $28::bool[],
                      $29::text[], $30::int8[], $31::text[], $34::text[])
               with ordinality
            as t(id, type, queue, args, meta, priority, max_attempts, retry, timeout_ms,
                 visibility_timeout_ms, scheduled_abs, scheduled_rel_ms, scheduled_at_input,
                 expires_abs, expires_rel_ms, expires_at_input, enqueue_ttl_secs,
                 total_timeout_secs, tags, schema_uri, unique_policy, unique_key, extra,
                 pending, priority_aging_ms, handed, hand_worker, hand_visibility_ms,
                 hand_pool, rate_key, ord)
         -- The hand-off columns are shorter when few or no jobs are handed off: unnest pads
         -- them with nulls.
         where id is not null
    ),
    -- A draining queue (being deleted) takes no new jobs: the statement aborts with
    -- SQLSTATE OJ001. No lock is taken: an enqueue that read the queue as active just
    -- before it started draining lands its job there, where it runs normally.
    -- With strict queues ($26) a queue must exist before its first job (SQLSTATE OJ002).
    refused as (
        select ojs_queue_refused(q.name, 'OJ001') as refused
          from ojs_queue q
         where q.name in (select distinct queue from input) and q.state = 'draining'
        union all
        select ojs_queue_refused(n.queue, 'OJ002')
          from (select distinct queue from input) n
         where $26 and not exists (select 1 from ojs_queue q where q.name = n.queue)
        -- The generation is read under the shared lock a pool change takes exclusively
        -- (migration V8), so jobs written here are either seen by such a change or carry
        -- its settings (tenant_fair below).
        union all
        select ojs_queue_refused('', 'OJ004')
         where ojs_config_generation_locked() <> $27
        -- A client-supplied id a completed job holds (ojs_job_done, migration V15) is taken
        -- as a live job's would be (its primary key): the same violation.
        union all
        select ojs_job_id_taken(d.id)
          from ojs_job_done d
         where d.id = any($33::uuid[])
    ),
    -- Bounded queues (queue configuration): the jobs are counted against the bound in the
    -- same statement. The counter row is updated under its row lock, so concurrent
    -- enqueues see each other's counts and never overshoot together; a new queue takes
    -- the `_default` bounds when there are any. Past a bound the statement aborts
    -- (SQLSTATE OJ003) with the depth and bound.
    grouped as (
        select queue, count(*) as jobs, sum(octet_length(args) + octet_length(meta)) as bytes
          from input
         group by queue
    ),
    capacity as (
        insert into ojs_queue_capacity as c (queue, max_jobs, max_bytes, overflow_policy, jobs, bytes)
        select g.queue, d.max_jobs, d.max_bytes, coalesce(d.overflow_policy, 'reject'), g.jobs, g.bytes
          from grouped g
          left join ojs_queue_capacity d on d.queue = '_default'
         where exists (select 1 from ojs_queue_capacity x where x.queue = g.queue)
            or (d.queue is not null and not exists (select 1 from ojs_queue q where q.name = g.queue))
        on conflict (queue) do update
           set jobs = c.jobs + excluded.jobs, bytes = c.bytes + excluded.bytes
        returning c.queue, c.jobs, c.bytes, c.max_jobs, c.max_bytes, c.overflow_policy
    ),
    overflow as (
        select ojs_queue_full(c.queue, c.jobs - g.jobs, c.max_jobs, c.bytes - g.bytes,
                              c.max_bytes, c.overflow_policy)
          from capacity c
          join grouped g on g.queue = c.queue
         where c.jobs > c.max_jobs or c.bytes > c.max_bytes
    ),
    resolved as (
        select i.*, r.scheduled_at, r.expires_at,
               case when i.pending then 'pending'
                    when r.scheduled_at > now() then 'scheduled'
                    -- Handed to a waiting FETCH when its claim would take the job now
                    -- (false, not null, for a job not handed off: so nothing after the
                    -- first test is evaluated for it). A keyed job waits for its key
                    -- (migration V20) and is never handed off.
                    when coalesce(i.handed, false) and i.rate_key is null
                         and (r.expires_at is null or r.expires_at > now())
                         and not exists (select 1 from ojs_queue q
                                          where q.name = i.queue and q.state = 'paused')
                         and not exists (select 1 from ojs_fair_queue f where f.queue = i.queue)
                         and not exists (select 1 from ojs_worker w
                                          where w.id = i.hand_worker
                                            and (w.directive <> '' or w.state <> 'running'))
                         then 'active'
                    else 'available'
               end::ojs_job_state as state
          from input i,
               lateral (select coalesce(i.scheduled_abs,
                                        now() + i.scheduled_rel_ms * interval '1 millisecond') as scheduled_at,
                               coalesce(i.expires_abs,
                                        now() + i.expires_rel_ms * interval '1 millisecond') as expires_at) r
    ),
    inserted as (
        insert into ojs_job as j
               (id, type, queue, args, meta, priority, state, max_attempts, retry, timeout_ms,
                visibility_timeout_ms, scheduled_at, scheduled_at_input, expires_at,
                expires_at_input, enqueue_ttl_secs, total_timeout_secs, tags, schema_uri,
                unique_policy, unique_key, extra, enqueued_at, claim_deadline_at,
                total_deadline_at, priority_aging_ms, capacity_tracked, tenant_fair,
                attempt, started_at, worker_id, reservation_ms, visible_until, timeout_at,
                pool, rate_key, tenant, lease_id)
        select id, type, queue, args::json, meta::json, priority, state, max_attempts,
               retry::json, timeout_ms, visibility_timeout_ms, scheduled_at, scheduled_at_input,
               expires_at, expires_at_input, enqueue_ttl_secs, total_timeout_secs,
               case when tags is not null
                    then array(select json_array_elements_text(tags::json)) end,
               schema_uri, unique_policy::json, unique_key, extra::json,
               case when state in ('available', 'active') then now() end,
               case when state <> 'active' then now() + enqueue_ttl_secs * interval '1 second' end,
               now() + total_timeout_secs * interval '1 second',
               priority_aging_ms,
               queue in (select queue from capacity),
               queue in (select queue from ojs_fair_queue),
               -- What a claim writes (store::job::claim_shared).
               case when state = 'active' then 1 else 0 end,
               case when state = 'active' then now() end,
               case when state = 'active' then hand_worker end,
               case when state = 'active' then coalesce(hand_visibility_ms, visibility_timeout_ms, $32) end,
               case when state = 'active'
                    then now() + coalesce(hand_visibility_ms, visibility_timeout_ms, $32) * interval '1 millisecond' end,
               case when state = 'active' then now() + timeout_ms * interval '1 millisecond' end,
               case when state = 'active' then hand_pool end,
               rate_key,
               -- The tenant (migration V24); a tenant-fair queue's tagging trigger sets it too.
               nullif(meta::json ->> 'tenant_id', ''),
               -- A handed-off job's lease (migration V29), one per job.
               case when state = 'active' then nextval('ojs_lease_id_seq') end
          from resolved
         where not exists (select 1 from refused) and not exists (select 1 from overflow)
         -- Rows are inserted in request order, so `seq` (FIFO tie-breaker) follows it.
         order by ord
        returning j as job, j.queue, j.state
    ),
    -- The lease of each handed-off job (migration V29): what the reaper and the counts of
    -- active jobs read.
    leases as (
        insert into ojs_lease (id, worker_id, queue, pool, jobs, open, due_at)
        select (i.job).lease_id, (i.job).worker_id, i.queue, (i.job).pool, 1, 1,
               least((i.job).visible_until, (i.job).timeout_at, (i.job).total_deadline_at)
          from inserted i
         where i.state = 'active'
    ),
    lease_jobs as (
        insert into ojs_lease_jobs (lease_id, job_ids)
        select (i.job).lease_id, array[(i.job).id] from inserted i where i.state = 'active'
    ),
    -- A queue exists from its first enqueue on (queue configuration extension).
    new_queues as (
        insert into ojs_queue (name)
        select distinct queue from input
        on conflict do nothing
        returning name
    ),
    queue_events as (
        insert into ojs_event (type, subject, queue, data)
        select 'queue.created', q.name, q.name, jsonb_build_object('queue', q.name, 'implicit', true)
          from new_queues q
        returning 1
    ),
    -- One event row per queue, job type and event type (migration V10): the server
    -- renders each job's event from it. A job handed to a FETCH was enqueued, then
    -- started: its `job.started` rows (as a claim writes them) follow every enqueue row.
    events as (
        insert into ojs_event (type, queue, job_type, from_state, to_state, worker_id,
                               job_ids, trace_ids, priorities, unique_keys, scheduled_ats,
                               attempts)
        select x.type, x.queue, x.job_type, x.from_state, x.to_state, x.worker_id, x.job_ids,
               x.trace_ids, x.priorities, x.unique_keys, x.scheduled_ats, x.attempts
          from (select case e.state when 'available' then 'job.enqueued' else 'job.scheduled' end as type,
                       e.queue, e.type as job_type, null::ojs_job_state as from_state,
                       e.state as to_state, null::text as worker_id,
                       array_agg(e.id) as job_ids,
                       array_agg(e.trace_id) as trace_ids,
                       array_agg(e.priority) as priorities,
                       array_agg(e.unique_key) as unique_keys,
                       array_agg(e.scheduled_at) as scheduled_ats,
                       null::int4[] as attempts, 0 as phase, min(e.seq) as first
                  from (select (i.job).id, (i.job).seq, i.queue, (i.job).type,
                               case when i.state = 'active' then 'available' else i.state end as state,
                               coalesce(nullif((i.job).meta ->> 'trace_id', ''), nullif(split_part((i.job).meta ->> 'traceparent', '-', 2), '')) as trace_id,
                               case when i.state <> 'scheduled' then (i.job).priority end as priority,
                               case when i.state <> 'scheduled' then (i.job).unique_key end as unique_key,
                               (i.job).scheduled_at,
                               (row_number() over (partition by i.queue, (i.job).type,
                                                                i.state = 'scheduled'
                                                   order by (i.job).seq) - 1) / 16384 as block
                          from inserted i
                         -- Reading queue_events first writes a new queue's `queue.created`
                         -- before the events of its first jobs.
                         where i.state <> 'pending' and (select count(*) from queue_events) >= 0
                         -- The arrays list the jobs in seq order because the rows come
                         -- sorted: one sort here instead of one per array.
                         order by queue, type, state, block, seq) e
                 group by e.queue, e.type, e.state, e.block
                union all
                select 'job.started', e.queue, e.type, 'available'::ojs_job_state,
                       'active'::ojs_job_state, e.worker_id, array_agg(e.id),
                       array_agg(e.trace_id), null, null, null,
                       array_agg(e.attempt), 1, min(e.seq)
                  from (select (i.job).id, (i.job).seq, i.queue, (i.job).type,
                               (i.job).worker_id, (i.job).attempt,
                               coalesce(nullif((i.job).meta ->> 'trace_id', ''), nullif(split_part((i.job).meta ->> 'traceparent', '-', 2), '')) as trace_id,
                               (row_number() over (partition by i.queue, (i.job).type, (i.job).worker_id
                                                   order by (i.job).seq) - 1) / 16384 as block
                          from inserted i
                         where i.state = 'active'
                         order by queue, type, worker_id, block, seq) e
                 group by e.queue, e.type, e.worker_id, e.block) x
         order by x.phase, x.first
    )
    select i.job, (select count(*) from queue_events)
      from inserted i;
end;
$_$;

--
-- Name: FUNCTION ojs_insert_jobs(p_id uuid[], p_type text[], p_queue text[], p_args text[], p_meta text[], p_priority integer[], p_max_attempts integer[], p_retry text[], p_timeout_ms bigint[], p_visibility_timeout_ms bigint[], p_scheduled_abs timestamp with time zone[], p_scheduled_rel_ms bigint[], p_scheduled_at_input text[], p_expires_abs timestamp with time zone[], p_expires_rel_ms bigint[], p_expires_at_input text[], p_enqueue_ttl_secs integer[], p_total_timeout_secs integer[], p_tags text[], p_schema_uri text[], p_unique_policy text[], p_unique_key text[], p_extra text[], p_pending boolean[], p_priority_aging_ms bigint[], p_strict_queues boolean, p_config_generation bigint, p_handed boolean[], p_hand_worker text[], p_hand_visibility_ms bigint[], p_hand_pool text[], p_default_visibility_timeout_ms bigint, p_supplied_ids uuid[], p_rate_key text[]); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_insert_jobs(p_id uuid[], p_type text[], p_queue text[], p_args text[], p_meta text[], p_priority integer[], p_max_attempts integer[], p_retry text[], p_timeout_ms bigint[], p_visibility_timeout_ms bigint[], p_scheduled_abs timestamp with time zone[], p_scheduled_rel_ms bigint[], p_scheduled_at_input text[], p_expires_abs timestamp with time zone[], p_expires_rel_ms bigint[], p_expires_at_input text[], p_enqueue_ttl_secs integer[], p_total_timeout_secs integer[], p_tags text[], p_schema_uri text[], p_unique_policy text[], p_unique_key text[], p_extra text[], p_pending boolean[], p_priority_aging_ms bigint[], p_strict_queues boolean, p_config_generation bigint, p_handed boolean[], p_hand_worker text[], p_hand_visibility_ms bigint[], p_hand_pool text[], p_default_visibility_timeout_ms bigint, p_supplied_ids uuid[], p_rate_key text[]) IS 'The insert core of every enqueue: writes validated jobs (one array element per job, in order) with their defaults resolved, in one statement: queue refusals (OJ001 draining, OJ002 unknown under strict queues, OJ004 stale configuration, a taken id), capacity accounting (OJ003 past a bound), the initial state by the database clock (or active for a waiting FETCH named by the hand-off arrays), implicit queues and the enqueue events. Returns each job and how many queues it created. Called by the server''s PUSH and by ojs_enqueue; nothing is notified here.';

--
-- Name: ojs_job_capacity_delete(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_job_capacity_delete() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
begin
    update ojs_queue_capacity
       set jobs = jobs - 1, bytes = bytes - ojs_job_size(old.args, old.meta)
     where queue = old.queue;
    return null;
end;
$$;

--
-- Name: FUNCTION ojs_job_capacity_delete(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_job_capacity_delete() IS 'Trigger function of ojs_job_capacity_delete. Subtracts a deleted job that was counted and unfinished from its queue''s ojs_queue_capacity row.';

--
-- Name: ojs_job_capacity_move(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_job_capacity_move() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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

--
-- Name: FUNCTION ojs_job_capacity_move(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_job_capacity_move() IS 'Trigger function of ojs_job_capacity_move. When an update takes a counted job out of the unfinished states, takes a finished job back into them, or moves a job to another queue: subtracts a counted unfinished job from its old queue''s ojs_queue_capacity row and adds an unfinished job to its new queue''s row when that queue is bounded; capacity_tracked then says whether it was added. Returns early otherwise (the trigger''s WHEN is a cheaper, wider filter).';

--
-- Name: ojs_job_done_partition(date); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_job_done_partition(day date) RETURNS text
    LANGUAGE plpgsql
    SET search_path TO '$user', 'public'
    AS $$
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

--
-- Name: FUNCTION ojs_job_done_partition(day date); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_job_done_partition(day date) IS 'Makes and attaches the ojs_job_done partition of a UTC day, unless it exists (returns its name) or rows of that day sit in the default partition (returns null).';

--
-- Name: ojs_job_ended_notify(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_job_ended_notify() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO '$user', 'public'
    AS $$
begin
    if tg_op = 'DELETE' then
        perform pg_notify('ojs_job_ended', old.id::text);
    else
        perform pg_notify('ojs_job_ended', new.id::text);
    end if;
    return null;
end;
$$;

--
-- Name: FUNCTION ojs_job_ended_notify(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_job_ended_notify() IS 'Trigger function: sends an awaited job''s id on ojs_job_ended when it ends (migration V32).';

--
-- Name: ojs_job_event_base(uuid, text, text, public.ojs_job_state, json); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_job_event_base(job_id uuid, job_type text, queue text, state public.ojs_job_state, meta json) RETURNS jsonb
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN (jsonb_build_object('job_id', job_id, 'job_type', job_type, 'queue', queue, 'state', state) || jsonb_strip_nulls(jsonb_build_object('trace_id', COALESCE(NULLIF((meta ->> 'trace_id'::text), ''::text), NULLIF(split_part((meta ->> 'traceparent'::text), '-'::text, 2), ''::text)))));

--
-- Name: FUNCTION ojs_job_event_base(job_id uuid, job_type text, queue text, state public.ojs_job_state, meta json); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_job_event_base(job_id uuid, job_type text, queue text, state public.ojs_job_state, meta json) IS 'job_id, job_type, queue, state and, when meta carries one, trace_id.';

--
-- Name: ojs_job_event_type(public.ojs_job_state); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_job_event_type(state public.ojs_job_state) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE state WHEN 'available'::public.ojs_job_state THEN 'job.enqueued'::text WHEN 'scheduled'::public.ojs_job_state THEN 'job.scheduled'::text WHEN 'active'::public.ojs_job_state THEN 'job.started'::text WHEN 'completed'::public.ojs_job_state THEN 'job.completed'::text WHEN 'retryable'::public.ojs_job_state THEN 'job.retrying'::text WHEN 'discarded'::public.ojs_job_state THEN 'job.discarded'::text WHEN 'cancelled'::public.ojs_job_state THEN 'job.cancelled'::text ELSE NULL::text END;

--
-- Name: FUNCTION ojs_job_event_type(state public.ojs_job_state); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_job_event_type(state public.ojs_job_state) IS 'The event type of a move into state (job.enqueued for available, ...); null for pending.';

--
-- Name: ojs_job_heartbeat_data(public.ojs_job); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_job_heartbeat_data(n public.ojs_job) RETURNS jsonb
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN (public.ojs_job_event_base((n).id, (n).type, (n).queue, (n).state, (n).meta) || jsonb_build_object('worker_id', (n).worker_id, 'attempt', (n).attempt, 'visible_until', public.ojs_timestamp_text((n).visible_until)));

--
-- Name: FUNCTION ojs_job_heartbeat_data(n public.ojs_job); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_job_heartbeat_data(n public.ojs_job) IS 'Payload of job.heartbeat: the reservation was extended.';

--
-- Name: ojs_ms_between(timestamp with time zone, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_ms_between(a timestamp with time zone, b timestamp with time zone) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN (round((EXTRACT(epoch FROM (b - a)) * (1000)::numeric)))::bigint;

--
-- Name: FUNCTION ojs_ms_between(a timestamp with time zone, b timestamp with time zone); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_ms_between(a timestamp with time zone, b timestamp with time zone) IS 'Whole milliseconds from a to b.';

--
-- Name: ojs_job_transition_data(public.ojs_job_state, public.ojs_job); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_job_transition_data(prev public.ojs_job_state, n public.ojs_job) RETURNS jsonb
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN (public.ojs_job_event_base((n).id, (n).type, (n).queue, (n).state, (n).meta) || CASE (n).state WHEN 'available'::public.ojs_job_state THEN jsonb_strip_nulls(jsonb_build_object('priority', (n).priority, 'scheduled_at', public.ojs_timestamp_text((n).scheduled_at), 'unique_key', (n).unique_key)) WHEN 'scheduled'::public.ojs_job_state THEN jsonb_build_object('scheduled_at', public.ojs_timestamp_text((n).scheduled_at)) WHEN 'active'::public.ojs_job_state THEN jsonb_strip_nulls(jsonb_build_object('worker_id', (n).worker_id, 'attempt', (n).attempt)) WHEN 'completed'::public.ojs_job_state THEN jsonb_strip_nulls(jsonb_build_object('duration_ms', public.ojs_ms_between((n).started_at, (n).completed_at), 'attempt', (n).attempt, 'result', CASE WHEN (octet_length(((n).result)::text) <= 65536) THEN ((n).result)::jsonb ELSE NULL::jsonb END)) WHEN 'retryable'::public.ojs_job_state THEN jsonb_build_object('attempt', (n).attempt, 'max_attempts', (n).max_attempts, 'next_retry_at', public.ojs_timestamp_text((n).next_retry_at), 'error', jsonb_build_object('code', ((n).error -> 'code'::text), 'message', ((n).error -> 'message'::text))) WHEN 'discarded'::public.ojs_job_state THEN jsonb_strip_nulls(jsonb_build_object('total_attempts', (n).attempt, 'last_error', CASE WHEN ((n).error IS NOT NULL) THEN jsonb_build_object('code', ((n).error -> 'code'::text), 'message', ((n).error -> 'message'::text)) ELSE NULL::jsonb END, 'dead_lettered', ((n).dead_lettered_at IS NOT NULL), 'reason', public.ojs_discard_reason(prev, ((n).error ->> 'code'::text), (n).attempt, (n).max_attempts, (n).total_deadline_at, (n).discarded_at))) WHEN 'cancelled'::public.ojs_job_state THEN jsonb_strip_nulls(jsonb_build_object('previous_state', prev)) ELSE '{}'::jsonb END);

--
-- Name: FUNCTION ojs_job_transition_data(prev public.ojs_job_state, n public.ojs_job); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_job_transition_data(prev public.ojs_job_state, n public.ojs_job) IS 'Payload of the event that records a move from prev into n.state.';

--
-- Name: ojs_job_events(public.ojs_job_state, timestamp with time zone, text, timestamp with time zone, integer, timestamp with time zone, integer, public.ojs_job); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_job_events(prev public.ojs_job_state, prev_started_at timestamp with time zone, prev_worker_id text, prev_dead_lettered_at timestamp with time zone, prev_error_count integer, prev_visible_until timestamp with time zone, prev_priority integer, n public.ojs_job) RETURNS TABLE(ord integer, type text, from_state public.ojs_job_state, to_state public.ojs_job_state, data jsonb)
    LANGUAGE sql STABLE PARALLEL SAFE
    BEGIN ATOMIC
 SELECT 10,
     'dead_letter.retried'::text AS text,
     NULL::public.ojs_job_state AS ojs_job_state,
     NULL::public.ojs_job_state AS ojs_job_state,
     public.ojs_job_event_base((ojs_job_events.n).id, (ojs_job_events.n).type, (ojs_job_events.n).queue, (ojs_job_events.n).state, (ojs_job_events.n).meta) AS ojs_job_event_base
   WHERE ((ojs_job_events.prev = 'discarded'::public.ojs_job_state) AND ((ojs_job_events.n).state = 'available'::public.ojs_job_state) AND (ojs_job_events.prev_dead_lettered_at IS NOT NULL))
 UNION ALL
  SELECT 20,
     'job.failed'::text AS text,
     NULL::public.ojs_job_state AS ojs_job_state,
     NULL::public.ojs_job_state AS ojs_job_state,
     (public.ojs_job_event_base((ojs_job_events.n).id, (ojs_job_events.n).type, (ojs_job_events.n).queue, (ojs_job_events.n).state, (ojs_job_events.n).meta) || jsonb_build_object('attempt', (ojs_job_events.n).attempt, 'error', jsonb_strip_nulls(jsonb_build_object('code', ((ojs_job_events.n).error -> 'code'::text), 'message', ((ojs_job_events.n).error -> 'message'::text), 'retryable', ((ojs_job_events.n).error -> 'retryable'::text), 'stack_trace', ((ojs_job_events.n).error -> 'backtrace'::text))), 'duration_ms', public.ojs_ms_between(ojs_job_events.prev_started_at, now())))
   WHERE ((ojs_job_events.prev = 'active'::public.ojs_job_state) AND (jsonb_array_length((ojs_job_events.n).errors) > ojs_job_events.prev_error_count))
 UNION ALL
  SELECT 30,
     'job.timeout'::text AS text,
     NULL::public.ojs_job_state AS ojs_job_state,
     NULL::public.ojs_job_state AS ojs_job_state,
     (public.ojs_job_event_base((ojs_job_events.n).id, (ojs_job_events.n).type, (ojs_job_events.n).queue, (ojs_job_events.n).state, (ojs_job_events.n).meta) || jsonb_build_object('timeout_kind', 'execution', 'limit_seconds', round((((ojs_job_events.n).timeout_ms)::numeric / 1000.0), 3), 'elapsed_seconds', round(EXTRACT(epoch FROM (now() - ojs_job_events.prev_started_at)), 3), 'attempt', (ojs_job_events.n).attempt))
   WHERE ((ojs_job_events.prev = 'active'::public.ojs_job_state) AND (jsonb_array_length((ojs_job_events.n).errors) > ojs_job_events.prev_error_count) AND (((ojs_job_events.n).error ->> 'code'::text) = 'timeout'::text))
 UNION ALL
  SELECT 31,
     'job.timeout'::text AS text,
     NULL::public.ojs_job_state AS ojs_job_state,
     NULL::public.ojs_job_state AS ojs_job_state,
     (public.ojs_job_event_base((ojs_job_events.n).id, (ojs_job_events.n).type, (ojs_job_events.n).queue, (ojs_job_events.n).state, (ojs_job_events.n).meta) || jsonb_build_object('timeout_kind', 'total', 'limit_seconds', (ojs_job_events.n).total_timeout_secs, 'elapsed_seconds', round(EXTRACT(epoch FROM ((ojs_job_events.n).discarded_at - (ojs_job_events.n).created_at)), 3), 'attempt', (ojs_job_events.n).attempt))
   WHERE ((ojs_job_events.prev IS DISTINCT FROM (ojs_job_events.n).state) AND ((ojs_job_events.n).state = 'discarded'::public.ojs_job_state) AND (((ojs_job_events.n).error ->> 'code'::text) = 'expired'::text) AND ((ojs_job_events.n).total_deadline_at <= (ojs_job_events.n).discarded_at))
 UNION ALL
  SELECT 40,
     'job.stalled'::text AS text,
     NULL::public.ojs_job_state AS ojs_job_state,
     NULL::public.ojs_job_state AS ojs_job_state,
     (public.ojs_job_event_base((ojs_job_events.n).id, (ojs_job_events.n).type, (ojs_job_events.n).queue, (ojs_job_events.n).state, (ojs_job_events.n).meta) || jsonb_strip_nulls(jsonb_build_object('worker_id', ojs_job_events.prev_worker_id, 'attempt', (ojs_job_events.n).attempt, 'reason', ((ojs_job_events.n).error ->> 'code'::text))))
   WHERE ((ojs_job_events.prev = 'active'::public.ojs_job_state) AND (jsonb_array_length((ojs_job_events.n).errors) > ojs_job_events.prev_error_count) AND (((ojs_job_events.n).error ->> 'code'::text) = ANY (ARRAY['visibility_timeout'::text, 'worker_death'::text, 'shutdown'::text])))
 UNION ALL
  SELECT 50,
     'job.expired'::text AS text,
     NULL::public.ojs_job_state AS ojs_job_state,
     NULL::public.ojs_job_state AS ojs_job_state,
     (public.ojs_job_event_base((ojs_job_events.n).id, (ojs_job_events.n).type, (ojs_job_events.n).queue, (ojs_job_events.n).state, (ojs_job_events.n).meta) || jsonb_strip_nulls(jsonb_build_object('created_at', public.ojs_timestamp_text((ojs_job_events.n).created_at), 'expired_at', public.ojs_timestamp_text((ojs_job_events.n).discarded_at), 'ttl_ms', public.ojs_ms_between((ojs_job_events.n).created_at, LEAST((ojs_job_events.n).expires_at, ((ojs_job_events.n).created_at + (((ojs_job_events.n).enqueue_ttl_secs)::double precision * '00:00:01'::interval)))))))
   WHERE ((ojs_job_events.prev IS DISTINCT FROM (ojs_job_events.n).state) AND ((ojs_job_events.n).state = 'discarded'::public.ojs_job_state) AND (ojs_job_events.prev <> 'active'::public.ojs_job_state) AND (((ojs_job_events.n).error ->> 'code'::text) = 'expired'::text) AND (NOT COALESCE(((ojs_job_events.n).total_deadline_at <= (ojs_job_events.n).discarded_at), false)))
 UNION ALL
  SELECT 60,
     public.ojs_job_event_type((ojs_job_events.n).state) AS ojs_job_event_type,
     ojs_job_events.prev AS prev,
     (ojs_job_events.n).state AS state,
     public.ojs_job_transition_data(ojs_job_events.prev, ojs_job_events.n) AS ojs_job_transition_data
   WHERE ((ojs_job_events.prev IS DISTINCT FROM (ojs_job_events.n).state) AND ((ojs_job_events.n).state <> 'pending'::public.ojs_job_state))
 UNION ALL
  SELECT 70,
     'dead_letter.added'::text AS text,
     NULL::public.ojs_job_state AS ojs_job_state,
     NULL::public.ojs_job_state AS ojs_job_state,
     (public.ojs_job_event_base((ojs_job_events.n).id, (ojs_job_events.n).type, (ojs_job_events.n).queue, (ojs_job_events.n).state, (ojs_job_events.n).meta) || jsonb_build_object('last_error', jsonb_build_object('code', ((ojs_job_events.n).error -> 'code'::text), 'message', ((ojs_job_events.n).error -> 'message'::text))))
   WHERE ((ojs_job_events.prev IS DISTINCT FROM (ojs_job_events.n).state) AND ((ojs_job_events.n).state = 'discarded'::public.ojs_job_state) AND ((ojs_job_events.n).dead_lettered_at IS NOT NULL))
 UNION ALL
  SELECT 80,
     'job.heartbeat'::text AS text,
     NULL::public.ojs_job_state AS ojs_job_state,
     NULL::public.ojs_job_state AS ojs_job_state,
     public.ojs_job_heartbeat_data(ojs_job_events.n) AS ojs_job_heartbeat_data
   WHERE ((ojs_job_events.prev = 'active'::public.ojs_job_state) AND ((ojs_job_events.n).state = 'active'::public.ojs_job_state) AND ((ojs_job_events.n).visible_until > ojs_job_events.prev_visible_until))
 UNION ALL
  SELECT 90,
     'priority.changed'::text AS text,
     NULL::public.ojs_job_state AS ojs_job_state,
     NULL::public.ojs_job_state AS ojs_job_state,
     (public.ojs_job_event_base((ojs_job_events.n).id, (ojs_job_events.n).type, (ojs_job_events.n).queue, (ojs_job_events.n).state, (ojs_job_events.n).meta) || jsonb_build_object('previous_priority', ojs_job_events.prev_priority, 'new_priority', (ojs_job_events.n).priority))
   WHERE ((ojs_job_events.n).priority <> ojs_job_events.prev_priority);
END;

--
-- Name: FUNCTION ojs_job_events(prev public.ojs_job_state, prev_started_at timestamp with time zone, prev_worker_id text, prev_dead_lettered_at timestamp with time zone, prev_error_count integer, prev_visible_until timestamp with time zone, prev_priority integer, n public.ojs_job); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_job_events(prev public.ojs_job_state, prev_started_at timestamp with time zone, prev_worker_id text, prev_dead_lettered_at timestamp with time zone, prev_error_count integer, prev_visible_until timestamp with time zone, prev_priority integer, n public.ojs_job) IS 'The OJS events of one job row change (n after; prev_* what the change replaced), in order. Statements that change jobs insert them into ojs_event in the same statement.';

--
-- Name: ojs_job_fair_tag(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_job_fair_tag() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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
        new.tenant := nullif(new.meta ->> 'tenant_id', '');
        new.fair_key := null;
        return new;
    end if;
    new.tenant := coalesce(new.meta ->> 'tenant_id', '');
    select j.fair_key into v
      from ojs_job j
     where j.queue = new.queue and j.priority = new.priority
       and j.phase = 'available' and j.fair_key is not null
     order by j.fair_key
     limit 1;
    select j.fair_key into last
      from ojs_job j
     where j.queue = new.queue and j.priority = new.priority and j.tenant = new.tenant
       and j.phase = 'available' and j.fair_key is not null
     order by j.fair_key desc
     limit 1;
    new.fair_key := greatest(coalesce(v, 0), coalesce(last, 0)) + 1 / ojs_tenant_weight(fair, new.tenant);
    return new;
end
$$;

--
-- Name: FUNCTION ojs_job_fair_tag(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_job_fair_tag() IS 'Trigger function of ojs_job_fair_tag_insert and ojs_job_fair_tag_update. For a job that becomes available in a tenant-fair queue (inserted available, or updated into available or into another queue while available), sets tenant (meta.tenant_id, empty for none) and fair_key = max(smallest fair_key among the available jobs of its queue and priority, largest fair_key of its tenant among them) + 1 / weight. In a queue that is not tenant-fair it clears tenant_fair, tenant and fair_key.';

--
-- Name: ojs_job_id_taken(uuid); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_job_id_taken(id uuid) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
begin
    raise unique_violation using
        message = format('job id %s is taken', id),
        constraint = 'ojs_job_pkey',
        table = 'ojs_job';
end
$$;

--
-- Name: FUNCTION ojs_job_id_taken(id uuid); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_job_id_taken(id uuid) IS 'Raises the violation of ojs_job_pkey for a client-supplied job id that a completed job holds (called by the enqueue statement).';

--
-- Name: ojs_job_rate_gone(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_job_rate_gone() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO '$user', 'public'
    AS $$
begin
    if ojs_rate_key_holds(old.rate_key) then
        perform pg_notify('ojs_rate_key', old.rate_key);
    end if;
    return null;
end;
$$;

--
-- Name: FUNCTION ojs_job_rate_gone(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_job_rate_gone() IS 'Trigger function: notifies ojs_rate_key when a keyed job in flight is deleted.';

--
-- Name: ojs_job_rate_hold(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_job_rate_hold() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO '$user', 'public'
    AS $$
begin
    if tg_op = 'INSERT' then
        perform ojs_rate_key_policy(new.rate_key, new.extra -> 'rate_limit');
    elsif new.state = 'available' and old.state <> 'available'
          and not exists (select from ojs_rate_key r where r.key = new.rate_key) then
        -- The key was pruned while the job waited (scheduled, retrying): it comes back with
        -- the job's policy.
        perform ojs_rate_key_policy(new.rate_key, new.extra -> 'rate_limit');
    end if;
    if new.state = 'available' and (tg_op = 'INSERT' or old.state <> 'available') then
        new.rate_held := true;
        -- An enqueue releases its keys itself once it commits (a notification per enqueue
        -- would make concurrent enqueues take turns at commit); a job that becomes available
        -- again tells the releasers.
        if tg_op = 'UPDATE' then
            perform pg_notify('ojs_rate_key', new.rate_key);
        end if;
    elsif tg_op = 'UPDATE' and old.rate_held is null and old.state in ('available', 'active')
          and new.state <> old.state and ojs_rate_key_holds(new.rate_key) then
        -- Leaves flight (finished, failed, cancelled, rescheduled) while the key holds jobs
        -- back: one of them may go now.
        perform pg_notify('ojs_rate_key', new.rate_key);
    end if;
    return new;
end;
$$;

--
-- Name: FUNCTION ojs_job_rate_hold(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_job_rate_hold() IS 'Trigger function: holds a keyed job that becomes available; notifies ojs_rate_key when a keyed job becomes available again or leaves flight.';

--
-- Name: ojs_job_signal; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ojs_job_signal (
    id bigint NOT NULL,
    job_id uuid NOT NULL,
    name text NOT NULL,
    payload jsonb,
    key text,
    sent_at timestamp with time zone DEFAULT now() NOT NULL,
    delivered_at timestamp with time zone,
    CONSTRAINT ojs_job_signal_key_length CHECK (((length(key) >= 1) AND (length(key) <= 200))),
    CONSTRAINT ojs_job_signal_name_length CHECK (((length(name) >= 1) AND (length(name) <= 200)))
);

--
-- Name: TABLE ojs_job_signal; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ojs_job_signal IS 'Signals sent to jobs (POST /ojs/v1/jobs/{id}/signals/{name}, or ojs_signal() from SQL): delivered to a job waiting for them, else kept until its next wait for that name. Kept until the job is pruned.';

--
-- Name: COLUMN ojs_job_signal.id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_signal.id IS 'Order of arrival: a wait takes the oldest undelivered signal of its name.';

--
-- Name: COLUMN ojs_job_signal.job_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_signal.job_id IS 'The job (ojs_job.id; no foreign key).';

--
-- Name: COLUMN ojs_job_signal.name; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_signal.name IS 'The signal''s name (1 to 200 characters).';

--
-- Name: COLUMN ojs_job_signal.payload; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_signal.payload IS 'What the sender attached: any JSON value (null: nothing), handed to the job with FETCH.';

--
-- Name: COLUMN ojs_job_signal.key; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_signal.key IS 'The sender''s key for the signal: a second signal to the job with the same key is not stored again.';

--
-- Name: COLUMN ojs_job_signal.sent_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_signal.sent_at IS 'When the signal arrived.';

--
-- Name: COLUMN ojs_job_signal.delivered_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_signal.delivered_at IS 'When the signal ended a wait of the job (null: kept for its next wait).';

--
-- Name: ojs_job_step; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ojs_job_step (
    job_id uuid NOT NULL,
    name text NOT NULL,
    result jsonb,
    attempt integer NOT NULL,
    worker_id text,
    size_bytes integer NOT NULL,
    recorded_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT ojs_job_step_attempt_positive CHECK ((attempt > 0)),
    CONSTRAINT ojs_job_step_name_length CHECK (((length(name) >= 1) AND (length(name) <= 200))),
    CONSTRAINT ojs_job_step_size_not_negative CHECK ((size_bytes >= 0))
);

--
-- Name: TABLE ojs_job_step; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ojs_job_step IS 'The recorded steps of each job (POST /ojs/v1/jobs/{id}/steps/{name}): one result per job and step name, recorded once by the worker holding the job''s current attempt and handed to every later attempt by FETCH, which skips the step. Kept until the job is pruned.';

--
-- Name: COLUMN ojs_job_step.job_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_step.job_id IS 'The job (ojs_job.id; no foreign key, see the table comment).';

--
-- Name: COLUMN ojs_job_step.name; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_step.name IS 'The step''s name, as the worker chose it (1 to 200 characters).';

--
-- Name: COLUMN ojs_job_step.result; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_step.result IS 'What the step returned: any JSON value (null: none).';

--
-- Name: COLUMN ojs_job_step.attempt; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_step.attempt IS 'The job''s attempt that recorded it.';

--
-- Name: COLUMN ojs_job_step.worker_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_step.worker_id IS 'The worker that recorded it, when it said.';

--
-- Name: COLUMN ojs_job_step.size_bytes; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_step.size_bytes IS 'The size of the result as the client sent it, in bytes.';

--
-- Name: COLUMN ojs_job_step.recorded_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_step.recorded_at IS 'When the step was recorded.';

--
-- Name: ojs_job_wait; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ojs_job_wait (
    job_id uuid NOT NULL,
    signal text,
    until timestamp with time zone,
    attempt integer NOT NULL,
    worker_id text,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    signal_id bigint,
    ended_at timestamp with time zone,
    CONSTRAINT ojs_job_wait_for_something CHECK (((signal IS NOT NULL) OR (until IS NOT NULL))),
    CONSTRAINT ojs_job_wait_signal_length CHECK (((length(signal) >= 1) AND (length(signal) <= 200)))
);

--
-- Name: TABLE ojs_job_wait; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ojs_job_wait IS 'Each job''s latest wait (POST /ojs/v1/workers/wait): the signal it waits for and its time limit, and, once a signal ended it, which. A job waiting is scheduled (scheduled_at: the limit, or null). Kept until the job is pruned.';

--
-- Name: COLUMN ojs_job_wait.job_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_wait.job_id IS 'The job (ojs_job.id; no foreign key).';

--
-- Name: COLUMN ojs_job_wait.signal; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_wait.signal IS 'The signal name that ends the wait (null: only the time).';

--
-- Name: COLUMN ojs_job_wait.until; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_wait.until IS 'When the wait ends without a signal (null: only a signal ends it).';

--
-- Name: COLUMN ojs_job_wait.attempt; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_wait.attempt IS 'The attempt that waited (given back: the job''s next attempt has this number again).';

--
-- Name: COLUMN ojs_job_wait.worker_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_wait.worker_id IS 'The worker that asked for the wait.';

--
-- Name: COLUMN ojs_job_wait.started_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_wait.started_at IS 'When the wait began.';

--
-- Name: COLUMN ojs_job_wait.signal_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_wait.signal_id IS 'The signal that ended the wait (ojs_job_signal.id); null while waiting or when the time ended it.';

--
-- Name: COLUMN ojs_job_wait.ended_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_wait.ended_at IS 'When a signal ended the wait (a wait that ran out of time ends when the promoter makes the job available).';

--
-- Name: ojs_job_resume(uuid, boolean); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_job_resume(p_job_id uuid, p_waiting boolean) RETURNS jsonb
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN (COALESCE((SELECT jsonb_build_object('steps', jsonb_object_agg(s.name, jsonb_build_object('result', s.result, 'attempt', s.attempt, 'recorded_at', public.ojs_timestamp_text(s.recorded_at)))) AS jsonb_build_object FROM public.ojs_job_step s WHERE (s.job_id = ojs_job_resume.p_job_id) HAVING (count(*) > 0)), '{}'::jsonb) || COALESCE((SELECT jsonb_build_object('wait', jsonb_strip_nulls(jsonb_build_object('signal', w.signal, 'until', public.ojs_timestamp_text(w.until), 'started_at', public.ojs_timestamp_text(w.started_at), 'ended_by', CASE WHEN (w.signal_id IS NOT NULL) THEN 'signal'::text WHEN (NOT ojs_job_resume.p_waiting) THEN 'time'::text ELSE NULL::text END)), 'signals', (SELECT COALESCE(jsonb_object_agg(g.name, jsonb_build_object('payload', g.payload, 'id', g.id, 'sent_at', public.ojs_timestamp_text(g.sent_at)) ORDER BY g.id), '{}'::jsonb) AS "coalesce" FROM public.ojs_job_signal g WHERE ((g.job_id = ojs_job_resume.p_job_id) AND (g.delivered_at IS NOT NULL)))) AS jsonb_build_object FROM public.ojs_job_wait w WHERE (w.job_id = ojs_job_resume.p_job_id)), '{}'::jsonb));

--
-- Name: FUNCTION ojs_job_resume(p_job_id uuid, p_waiting boolean); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_job_resume(p_job_id uuid, p_waiting boolean) IS 'What job p_job_id kept of its earlier attempts: {"steps", "wait", "signals"} (each only when it has one), as FETCH hands it to the next attempt (p_waiting false) and INFO shows it (p_waiting: whether the job still waits).';

--
-- Name: ojs_job_size(json, json); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_job_size(args json, meta json) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN (octet_length((args)::text) + octet_length((meta)::text));

--
-- Name: FUNCTION ojs_job_size(args json, meta json); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_job_size(args json, meta json) IS 'Size a job counts for against its queue''s max_size_bytes: bytes of args plus bytes of meta, as stored. Used by the capacity triggers and when a queue becomes bounded or drops its oldest jobs; the enqueue statement computes the same sum from its input.';

--
-- Name: ojs_job_tenant_hold(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_job_tenant_hold() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO '$user', 'public'
    AS $$
begin
    if new.state = 'available' and (tg_op = 'INSERT' or old.state <> 'available') then
        if exists (select from ojs_tenant t where t.id = new.tenant and t.max_concurrency is not null) then
            new.rate_held := false;
            -- An enqueue releases its tenants itself once it commits.
            if tg_op = 'UPDATE' then
                perform pg_notify('ojs_tenant', new.tenant);
            end if;
        end if;
    elsif tg_op = 'UPDATE' and old.state in ('available', 'active') and old.rate_held is not false
          and new.state not in ('available', 'active') and ojs_tenant_holds(old.tenant) then
        perform pg_notify('ojs_tenant', old.tenant);
    end if;
    return new;
end;
$$;

--
-- Name: FUNCTION ojs_job_tenant_hold(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_job_tenant_hold() IS 'Trigger function: holds (rate_held = false) a job of a tenant with max_concurrency as it becomes available (notifying ojs_tenant when it becomes available again); notifies ojs_tenant when a job in flight of a tenant that holds jobs back leaves flight.';

--
-- Name: ojs_job_tenant_room(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_job_tenant_room() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO '$user', 'public'
    AS $$
begin
    if ojs_tenant_holds(old.tenant) then
        perform pg_notify('ojs_tenant', old.tenant);
    end if;
    return null;
end;
$$;

--
-- Name: FUNCTION ojs_job_tenant_room(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_job_tenant_room() IS 'Trigger function: notifies ojs_tenant when a job in flight of a tenant that holds jobs back is deleted.';

--
-- Name: ojs_job_wait_for(uuid, integer, text, text, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_job_wait_for(p_job_id uuid, p_attempt integer, p_worker_id text, p_signal text, p_until timestamp with time zone, OUT outcome text, OUT job_state public.ojs_job_state, OUT holder text, OUT attempt integer, OUT signal_id bigint) RETURNS record
    LANGUAGE plpgsql
    AS $$
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

--
-- Name: FUNCTION ojs_job_wait_for(p_job_id uuid, p_attempt integer, p_worker_id text, p_signal text, p_until timestamp with time zone, OUT outcome text, OUT job_state public.ojs_job_state, OUT holder text, OUT attempt integer, OUT signal_id bigint); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_job_wait_for(p_job_id uuid, p_attempt integer, p_worker_id text, p_signal text, p_until timestamp with time zone, OUT outcome text, OUT job_state public.ojs_job_state, OUT holder text, OUT attempt integer, OUT signal_id bigint) IS 'Ends an active job''s attempt with a wait for a signal or a time (what POST /ojs/v1/workers/wait runs): outcome waiting, signalled (a kept signal ended it at once), or not_found, state, owner, attempt (nothing done). The attempt is given back.';

--
-- Name: ojs_job_wire(public.ojs_job); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_job_wire(j public.ojs_job) RETURNS json
    LANGUAGE sql STABLE
    AS $$
    select ('{' || concat_ws(',',
        '"specversion":"1.0.0-rc.1"',
        '"id":"' || j.id || '"',
        '"type":' || to_json(j.type),
        '"queue":' || to_json(j.queue),
        '"args":' || j.args::text,
        '"meta":' || j.meta::text,
        '"priority":' || j.priority,
        '"timeout":' || (j.timeout_ms + 999) / 1000,
        '"timeout_ms":' || j.timeout_ms,
        '"retry":' || case when j.retry::text = '{}'
            then '{"max_attempts":3,"initial_interval":"PT1S","backoff_coefficient":2.0,"max_interval":"PT5M","jitter":true,"non_retryable_errors":[],"on_exhaustion":"dead_letter","backoff_strategy":"exponential"}'
            else j.retry::text end,
        '"unique":' || j.unique_policy::text,
        '"tags":' || array_to_json(j.tags)::text,
        '"schema":' || to_json(j.schema_uri),
        '"scheduled_at":' || coalesce(to_json(j.scheduled_at_input)::text, ojs_wire_time(j.scheduled_at)),
        '"expires_at":' || coalesce(to_json(j.expires_at_input)::text, ojs_wire_time(j.expires_at)),
        '"visibility_timeout_ms":' || j.visibility_timeout_ms,
        '"enqueue_ttl":' || j.enqueue_ttl_secs,
        '"total_timeout":' || j.total_timeout_secs,
        '"state":"' || j.state || '"',
        '"attempt":' || j.attempt,
        '"max_attempts":' || j.max_attempts,
        '"created_at":' || ojs_wire_time(j.created_at),
        '"enqueued_at":' || ojs_wire_time(j.enqueued_at),
        '"activated_at":' || ojs_wire_time(j.activated_at),
        '"re_enqueued_at":' || ojs_wire_time(j.re_enqueued_at),
        '"original_queue":' || to_json(j.original_queue),
        '"started_at":' || ojs_wire_time(j.started_at),
        '"worker_id":' || to_json(j.worker_id),
        case when j.state = 'active' then '"visible_until":' || ojs_wire_time(j.visible_until) end,
        case when j.state = 'retryable' then '"next_retry_at":' || ojs_wire_time(j.next_retry_at)
                                             || ',"next_attempt_at":' || ojs_wire_time(j.next_retry_at) end,
        '"retry_delay_ms":' || j.retry_delay_ms,
        '"completed_at":' || ojs_wire_time(j.completed_at),
        '"cancelled_at":' || ojs_wire_time(j.cancelled_at),
        '"discarded_at":' || ojs_wire_time(j.discarded_at),
        '"dead_lettered_at":' || ojs_wire_time(j.dead_lettered_at),
        '"result":' || j.result::text,
        '"error":' || ojs_json_compact(j.error::text),
        '"errors":' || ojs_json_compact(coalesce(j.errors, '[]')::text),
        '"unique_key":' || to_json(j.unique_key),
        nullif(substr(j.extra::text, 2, length(j.extra::text) - 2), '')
    ) || '}')::json
$$;

--
-- Name: FUNCTION ojs_job_wire(j public.ojs_job); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_job_wire(j public.ojs_job) IS 'A job in its OJS JSON form, as GET /ojs/v1/jobs/{id} shows it under job.';

--
-- Name: ojs_job_workflow_completed(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_job_workflow_completed() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO '$user', 'public'
    AS $$
begin
    perform ojs_workflow_job_finished((new.extra ->> 'workflow_id')::uuid,
                                      (new.extra ->> 'workflow_step')::integer, new.id,
                                      'completed', new.result, null, new.attempt);
    return null;
end;
$$;

--
-- Name: FUNCTION ojs_job_workflow_completed(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_job_workflow_completed() IS 'Trigger function: a completed workflow job (its insert into ojs_job_done) advances its workflow.';

--
-- Name: ojs_job_workflow_ended(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_job_workflow_ended() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO '$user', 'public'
    AS $$
begin
    perform ojs_workflow_job_finished((new.extra ->> 'workflow_id')::uuid,
                                      (new.extra ->> 'workflow_step')::integer, new.id,
                                      case when new.state = 'discarded' then 'failed' else 'cancelled' end,
                                      null, new.error, new.attempt);
    return null;
end;
$$;

--
-- Name: FUNCTION ojs_job_workflow_ended(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_job_workflow_ended() IS 'Trigger function: a workflow job that ends discarded or cancelled advances its workflow.';

--
-- Name: ojs_json_article(json); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_json_article(v json) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
    select case json_typeof(v)
               when 'object' then 'an object' when 'array' then 'an array'
               when 'string' then 'a string' when 'number' then 'a number'
               when 'boolean' then 'a boolean' else 'null' end
$$;

--
-- Name: FUNCTION ojs_json_article(v json); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_json_article(v json) IS 'How the server names a JSON value''s kind in messages (an object, a string, null, ...).';

--
-- Name: ojs_json_compact(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_json_compact(t text) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
    select regexp_replace(t, '("(?:[^"\\]|\\.)*")|[ \t\n\r]+', '\1', 'g')
$$;

--
-- Name: FUNCTION ojs_json_compact(t text); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_json_compact(t text) IS 'JSON text without insignificant whitespace.';

--
-- Name: ojs_json_integer(json); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_json_integer(v json) RETURNS bigint
    LANGUAGE plpgsql IMMUTABLE
    AS $_$
declare
    t text;
    f float8;
begin
    if v is null or json_typeof(v) <> 'number' then
        return null;
    end if;
    t := v #>> '{}';
    if t ~ '^-?[0-9]{1,19}$' and t::numeric between -9223372036854775808 and 9223372036854775807 then
        return t::bigint;
    end if;
    begin
        f := t::float8;
    exception when others then
        return null;
    end;
    if f = trunc(f) and abs(f) <= 9007199254740992 then
        return f::bigint;
    end if;
    return null;
end;
$_$;

--
-- Name: FUNCTION ojs_json_integer(v json); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_json_integer(v json) IS 'A JSON number that denotes an integer (2, 2.0, 2e0) as the server reads one; null otherwise.';

--
-- Name: ojs_json_members(json); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_json_members(obj json) RETURNS TABLE(key text, value json, pos bigint)
    LANGUAGE sql IMMUTABLE
    AS $$
    select e.key, (array_agg(e.value order by e.ord desc))[1], min(e.ord)
      from json_each(obj) with ordinality as e(key, value, ord)
     group by e.key
$$;

--
-- Name: FUNCTION ojs_json_members(obj json); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_json_members(obj json) IS 'The members of a JSON object in order, a repeated key at its first position with its last value (as the server reads objects).';

--
-- Name: ojs_json_object_text(json[], text[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_json_object_text(members json[], keys text[]) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
    select '{' || coalesce(string_agg(to_json(k)::text || ':' || v::text, ',' order by i), '') || '}'
      from unnest(keys, members) with ordinality as m(k, v, i)
$$;

--
-- Name: FUNCTION ojs_json_object_text(members json[], keys text[]); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_json_object_text(members json[], keys text[]) IS 'Members written as a compact JSON object, in order.';

--
-- Name: ojs_json_present(json); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_json_present(v json) RETURNS json
    LANGUAGE sql IMMUTABLE
    AS $$
    select case when json_typeof(v) <> 'null' then v end
$$;

--
-- Name: FUNCTION ojs_json_present(v json); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_json_present(v json) IS 'A JSON value, or SQL null for JSON null.';

--
-- Name: ojs_priority_read(json, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_priority_read(v json, max_priority integer, OUT value bigint, OUT outcome text) RETURNS record
    LANGUAGE plpgsql IMMUTABLE
    AS $$
begin
    if json_typeof(v) = 'string' then
        value := case lower(v #>> '{}') when 'critical' then 0 when 'high' then 1 when 'normal' then 2
                                        when 'low' then 3 when 'bulk' then 4 end;
    elsif json_typeof(v) = 'number' then
        value := ojs_json_integer(v);
    end if;
    outcome := case when value is null then 'invalid'
                    when value < 0 or value > max_priority then 'range'
                    else 'ok' end;
end;
$$;

--
-- Name: FUNCTION ojs_priority_read(v json, max_priority integer, OUT value bigint, OUT outcome text); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_priority_read(v json, max_priority integer, OUT value bigint, OUT outcome text) IS 'A priority value: an integer 0..max or critical/high/normal/low/bulk; outcome ok, range or invalid.';

--
-- Name: ojs_queue_drop_oldest(text, bigint, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_queue_drop_oldest(p_queue text, p_jobs bigint, p_bytes bigint) RETURNS TABLE(dropped_queue text, dropped_type text)
    LANGUAGE plpgsql
    AS $_$
#variable_conflict use_column
begin
    -- Locked first, in a statement of its own, so that the next statement's snapshot sees
    -- what concurrent enqueues into the queue committed before the lock was granted.
    perform 1 from ojs_queue_capacity
      where queue = $1 and overflow_policy = 'drop_oldest'
        for update;
    if not found then
        return;
    end if;
    return query
    with need as (
        select greatest(c.jobs + $2 - coalesce(c.max_jobs, c.jobs + $2), 0) as jobs,
               greatest(c.bytes + $3 - coalesce(c.max_bytes, c.bytes + $3), 0) as bytes
          from ojs_queue_capacity c
         where c.queue = $1
    ),
    candidates as (
        select j.id, j.state,
               row_number() over w as n,
               sum(ojs_job_size(j.args, j.meta)) over w - ojs_job_size(j.args, j.meta) as freed_before
          from ojs_job j
         where j.queue = $1 and j.capacity_tracked
           and j.phase <> 'taken'
        window w as (order by j.created_at, j.seq rows between unbounded preceding and current row)
    ),
    doomed as (
        select c.id, c.state as prev,
               jsonb_build_object('code', 'overflow', 'type', 'overflow',
                                  'message', 'Dropped to make room in its full queue (overflow policy drop_oldest).') as error
          from candidates c, need n
         where c.n <= n.jobs or c.freed_before < n.bytes
    ),
    discarded as (
        update ojs_job j
           set state = 'discarded', discarded_at = now(), completed_at = now(),
               next_retry_at = null, error = d.error,
               errors = j.errors || jsonb_build_array(ojs_error_entry(j.attempt, d.error))
          from doomed d
         where j.id = d.id
           and j.state in ('scheduled', 'available', 'pending', 'retryable')
        returning j, d.prev
    ),
    job_events as (
        insert into ojs_event (type, subject, job_id, queue, job_type, from_state, to_state, data)
        select e.type, (x.j).id::text, (x.j).id, (x.j).queue, (x.j).type, e.from_state,
               e.to_state, e.data
          from discarded x
          cross join lateral ojs_job_events(x.prev, null, null, null, 0, null, (x.j).priority, x.j) e
         order by (x.j).seq, e.ord
    ),
    queue_events as (
        insert into ojs_event (type, subject, job_id, queue, job_type, data)
        select k.kind, (x.j).queue, (x.j).id, (x.j).queue, (x.j).type,
               jsonb_build_object('queue', (x.j).queue, 'job_id', (x.j).id, 'job_type', (x.j).type)
          from discarded x
          cross join (values (1, 'queue.overflow'), (2, 'backpressure.dropped')) as k(ord, kind)
         order by (x.j).seq, k.ord
    )
    select (x.j).queue, (x.j).type from discarded x;
end;
$_$;

--
-- Name: FUNCTION ojs_queue_drop_oldest(p_queue text, p_jobs bigint, p_bytes bigint); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_queue_drop_oldest(p_queue text, p_jobs bigint, p_bytes bigint) IS 'The drop_oldest overflow policy: for a drop_oldest queue about to receive p_jobs jobs of p_bytes bytes, locks its capacity row and discards its oldest waiting jobs (error overflow; job.discarded, queue.overflow, backpressure.dropped events) until they fit or none is left. Returns each dropped job''s queue and type; nothing for a queue of another policy. Called by the server''s PUSH and by ojs_enqueue, then the enqueue is tried again.';

--
-- Name: ojs_queue_full(text, bigint, bigint, bigint, bigint, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_queue_full(queue text, depth bigint, bound bigint, bytes bigint, bound_bytes bigint, policy text) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
begin
    raise exception using errcode = 'OJ003', message = queue,
        detail = json_build_object('depth', depth, 'bound', bound, 'bytes', bytes,
                                   'bound_bytes', bound_bytes, 'policy', policy)::text;
end;
$$;

--
-- Name: FUNCTION ojs_queue_full(queue text, depth bigint, bound bigint, bytes bigint, bound_bytes bigint, policy text); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_queue_full(queue text, depth bigint, bound bigint, bytes bigint, bound_bytes bigint, policy text) IS 'Aborts an enqueue that would take a bounded queue past max_size or max_size_bytes (SQLSTATE OJ003; message = queue name; detail = JSON {depth, bound, bytes, bound_bytes, policy}, depth and bytes as before the enqueue). Called by the enqueue statement; the server then rejects, drops the oldest jobs or waits, per the policy.';

--
-- Name: ojs_queue_refused(text, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_queue_refused(queue text, code text) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
begin
    raise exception using errcode = code, message = queue;
end;
$$;

--
-- Name: FUNCTION ojs_queue_refused(queue text, code text); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_queue_refused(queue text, code text) IS 'Aborts an enqueue its queue refuses (SQLSTATE OJ001: draining; OJ002: unknown under strict queues; message = queue name).';

--
-- Name: ojs_rate_key_holds(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_rate_key_holds(key text) RETURNS boolean
    LANGUAGE sql STABLE
    SET search_path TO '$user', 'public'
    RETURN (EXISTS (SELECT FROM public.ojs_job j WHERE ((j.rate_key = ojs_rate_key_holds.key) AND (j.phase = 'available'::public.ojs_job_phase) AND j.rate_held)));

--
-- Name: FUNCTION ojs_rate_key_holds(key text); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_rate_key_holds(key text) IS 'Whether a rate-limit key holds jobs back.';

--
-- Name: ojs_rate_key_policy(text, json); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_rate_key_policy(key text, policy json) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO '$user', 'public'
    AS $$
declare
    c integer := (policy ->> 'concurrency')::integer;
    rl integer := (policy -> 'rate' ->> 'limit')::integer;
    rp bigint := ojs_rate_period_ms(policy -> 'rate' ->> 'period');
    tl integer := (policy -> 'throttle' ->> 'limit')::integer;
    tp bigint := ojs_rate_period_ms(policy -> 'throttle' ->> 'period');
    ol text := coalesce(policy ->> 'on_limit', 'wait');
    k ojs_rate_key;
begin
    select * into k from ojs_rate_key r where r.key = ojs_rate_key_policy.key;
    if found and k.concurrency is not distinct from c and k.rate_limit is not distinct from rl
       and k.rate_period_ms is not distinct from rp and k.throttle_limit is not distinct from tl
       and k.throttle_period_ms is not distinct from tp and k.on_limit = ol then
        return;
    end if;
    insert into ojs_rate_key as r (key, concurrency, rate_limit, rate_period_ms, throttle_limit,
                                   throttle_period_ms, on_limit, next_check_at)
    values (key, c, rl, rp, tl, tp, ol, now())
    on conflict on constraint ojs_rate_key_pkey do update
       set concurrency = excluded.concurrency, rate_limit = excluded.rate_limit,
           rate_period_ms = excluded.rate_period_ms, throttle_limit = excluded.throttle_limit,
           throttle_period_ms = excluded.throttle_period_ms, on_limit = excluded.on_limit,
           next_check_at = now(), updated_at = now();
end;
$$;

--
-- Name: FUNCTION ojs_rate_key_policy(key text, policy json); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_rate_key_policy(key text, policy json) IS 'The key of a job being enqueued takes the job''s rate_limit policy (from its extra): the latest enqueued wins; an unchanged policy is only read.';

--
-- Name: ojs_rate_limit_read(json); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_rate_limit_read(v json) RETURNS integer
    LANGUAGE sql IMMUTABLE
    AS $$
    select case when n between 1 and 2147483647 then n::integer end
      from (select ojs_json_integer(v) as n) x
$$;

--
-- Name: FUNCTION ojs_rate_limit_read(v json); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_rate_limit_read(v json) IS 'A rate limit''s count (1 to 2^31 - 1); null if it is none.';

--
-- Name: ojs_rate_period_ms(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_rate_period_ms(period text) RETURNS bigint
    LANGUAGE sql IMMUTABLE
    SET search_path TO '$user', 'public'
    RETURN ((EXTRACT(epoch FROM (period)::interval) * (1000)::numeric))::bigint;

--
-- Name: FUNCTION ojs_rate_period_ms(period text); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_rate_period_ms(period text) IS 'Milliseconds of an ISO 8601 period (PT1S, P1D, PT0.5S).';

--
-- Name: ojs_rate_period_read(json); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_rate_period_read(v json) RETURNS bigint
    LANGUAGE sql IMMUTABLE
    AS $$
    select case when json_typeof(v) <> 'string' then null
                when v #>> '{}' = 'second' then 1000
                when v #>> '{}' = 'minute' then 60000
                when v #>> '{}' = 'hour' then 3600000
                when v #>> '{}' = 'day' then 86400000
                else nullif((ojs_duration_ms(v #>> '{}')).ms, 0) end
$$;

--
-- Name: FUNCTION ojs_rate_period_read(v json); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_rate_period_read(v json) IS 'A rate period (second, minute, hour, day or a positive duration) in milliseconds; null if it is none.';

--
-- Name: ojs_rate_policy_read(json, text, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_rate_policy_read(raw json, path text, queue text, OUT rate_key text, OUT canonical text, OUT violations jsonb) RETURNS record
    LANGUAGE plpgsql IMMUTABLE
    AS $_$
declare
    obj json;
    numeric_rate boolean;
    m record;
    at text;
    n bigint;
    wc text;
    key text;
    concurrency integer;
    rate text;
    throttle text;
    on_limit text := 'wait';
    lim integer;
    period bigint;
begin
    violations := '[]';
    if json_typeof(raw) <> 'object' then
        violations := jsonb_build_array(jsonb_build_object('path', path,
            'message', format('''rate_limit'' must be an object, got %s', ojs_json_article(raw))));
        return;
    end if;
    select coalesce(json_object_agg(x.key, x.value order by x.pos), '{}') into obj from ojs_json_members(raw) x;
    numeric_rate := json_typeof(obj -> 'rate') = 'number';
    for m in select x.key, x.value from ojs_json_members(raw) x order by x.pos
    loop
        at := path || '.' || m.key;
        if m.key = 'key' then
            if json_typeof(m.value) = 'string' and octet_length(m.value #>> '{}') <= 255
               and m.value #>> '{}' ~ '^[A-Za-z0-9][A-Za-z0-9._:-]*$' then
                key := m.value #>> '{}';
            else
                violations := violations || jsonb_build_object('path', at,
                    'message', '''key'' must be 1 to 255 letters, digits and . _ : - (starting with a letter or digit)');
            end if;
        elsif m.key = 'concurrency' then
            n := ojs_json_integer(m.value);
            if n between 0 and 2147483647 then
                concurrency := n;
            else
                violations := violations || jsonb_build_object('path', at,
                    'message', '''concurrency'' must be an integer >= 0 (0 pauses the key)');
            end if;
        elsif m.key = 'rate' and numeric_rate then
            lim := ojs_rate_limit_read(m.value);
            period := ojs_rate_period_read(ojs_json_present(obj -> 'period'));
            if lim is null then
                violations := violations || jsonb_build_object('path', at, 'message', '''rate'' must be an integer >= 1');
            elsif period is null then
                violations := violations || jsonb_build_object('path', path || '.period',
                    'message', '''period'' must be second, minute, hour, day or a positive duration');
            else
                rate := format('{"limit":%s,"period":"%s"}', lim, ojs_duration_iso(period));
            end if;
        elsif m.key = 'period' and numeric_rate then
            null;
        elsif m.key in ('rate', 'throttle') then
            select x.violations, x.canonical into violations, wc from ojs_rate_window_read(m.value, at, violations) x;
            if m.key = 'rate' then
                rate := coalesce(wc, rate);
            else
                throttle := coalesce(wc, throttle);
            end if;
        elsif m.key = 'max_per_second' then
            lim := ojs_rate_limit_read(m.value);
            if lim is not null and ojs_json_present(obj -> 'throttle') is not null then
                violations := violations || jsonb_build_object('path', at,
                    'message', '''max_per_second'' is a throttle: give it or ''throttle'', not both');
            elsif lim is not null then
                throttle := format('{"limit":%s,"period":"PT1S"}', lim);
            else
                violations := violations || jsonb_build_object('path', at,
                    'message', '''max_per_second'' must be an integer >= 1');
            end if;
        elsif m.key = 'on_limit' then
            if json_typeof(m.value) = 'string' and m.value #>> '{}' in ('wait', 'reschedule', 'drop') then
                on_limit := m.value #>> '{}';
            else
                violations := violations || jsonb_build_object('path', at,
                    'message', '''on_limit'' must be one of wait, reschedule, drop');
            end if;
        else
            violations := violations || jsonb_build_object('path', at,
                'message', format('unknown rate_limit field ''%s'' (key, concurrency, rate, throttle, max_per_second, on_limit)', m.key));
        end if;
    end loop;
    if violations = '[]' and key is null and concurrency is null and rate is null and throttle is null then
        violations := jsonb_build_array(jsonb_build_object('path', path,
            'message', 'a rate_limit needs a key or a limit (concurrency, rate, throttle, max_per_second)'));
    end if;
    if violations <> '[]' then
        return;
    end if;
    rate_key := coalesce(key, 'queue:' || queue);
    -- The server writes the policy's members in name order.
    canonical := '{' || concat_ws(',',
        '"concurrency":' || concurrency,
        '"key":' || to_json(rate_key)::text,
        '"on_limit":"' || on_limit || '"',
        '"rate":' || rate,
        '"throttle":' || throttle) || '}';
end;
$_$;

--
-- Name: FUNCTION ojs_rate_policy_read(raw json, path text, queue text, OUT rate_key text, OUT canonical text, OUT violations jsonb); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_rate_policy_read(raw json, path text, queue text, OUT rate_key text, OUT canonical text, OUT violations jsonb) IS 'A job''s rate_limit (the PL/pgSQL twin of the server''s rate_limit::parse): its key (queue:<queue> without one) and canonical form, or its violations.';

--
-- Name: ojs_rate_release(text, boolean); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_rate_release(rate_key text, wake boolean DEFAULT true) RETURNS TABLE(released_queue text, released_jobs integer)
    LANGUAGE plpgsql
    SET search_path TO '$user', 'public'
    AS $$
declare
    k ojs_rate_key;
    overriding boolean;
    lim integer;
    per bigint;
    active_n integer;
    cap bigint;
    unstarted integer;
    started integer;
    oldest timestamptz;
    last_start timestamptz;
    allow bigint := 2147483647;
    binding text;
    binding_limit integer;
    binding_current integer;
    next_at timestamptz;
    released uuid[];
    released_queues text[];
    held_left boolean;
    keep_ms bigint := 0;
begin
    if not ojs_rate_key_holds(ojs_rate_release.rate_key) then
        -- Nothing held back (the usual case of a key under its limits): nothing to release,
        -- and, unless the key was marked limited, nothing to write — no lock, no commit to
        -- flush. A job held after this read is released by whoever held it.
        update ojs_rate_key r set limited = null, next_check_at = null
         where r.key = ojs_rate_release.rate_key
           and (r.limited is not null or r.next_check_at is not null);
        return;
    end if;
    select * into k from ojs_rate_key r where r.key = ojs_rate_release.rate_key for update;
    if not found then
        return;
    end if;
    overriding := k.override_expires_at is null or k.override_expires_at > now();

    -- A key without limits (named only, for overrides to come) lets everything go, uncounted.
    if num_nonnulls(k.concurrency, k.rate_limit, k.throttle_limit) > 0
       or (overriding and num_nonnulls(k.override_concurrency, k.override_rate_limit,
                                       k.override_throttle_limit) > 0) then
        -- Counted only as far as the largest limit: past it the key allows nothing anyway,
        -- and a count stays a short range of ojs_job_rate_flight_idx.
        cap := greatest(k.concurrency, k.rate_limit, k.throttle_limit,
                        case when overriding then greatest(k.override_concurrency,
                                                           k.override_rate_limit,
                                                           k.override_throttle_limit) end) + 1;
        -- One statement, one snapshot: a claim that commits meanwhile moves a job from one
        -- count to the other, never out of both. (The starts below are read after this: a job
        -- claimed in between counts twice, never not at all.)
        select (select count(*)
                  from (select from ojs_job j
                         where j.rate_key = k.key and j.rate_held is null and j.in_flight
                           and j.phase = 'taken'
                         limit cap) a),
               (select count(*)
                  from (select from ojs_job j
                         where j.rate_key = k.key and j.rate_held is null and j.in_flight
                           and j.phase = 'available'
                         limit cap) u)
          into active_n, unstarted;
    else
        active_n := 0;
        unstarted := 0;
    end if;

    if k.blocked_until > now() then
        allow := 0;
        binding := 'blocked';
        next_at := k.blocked_until;
    end if;

    -- Concurrency: the key's own and the override's, each must pass.
    foreach lim in array array[k.concurrency, case when overriding then k.override_concurrency end] loop
        if lim is not null and lim - active_n - unstarted < allow then
            allow := lim - active_n - unstarted;
            binding := 'concurrency';
            binding_limit := lim;
            binding_current := active_n + unstarted;
            next_at := null;
        end if;
    end loop;

    -- Rate: starts within the period, and the released jobs not started yet.
    for lim, per in
        select x.l, x.p from (values (k.rate_limit, k.rate_period_ms),
                                     (case when overriding then k.override_rate_limit end,
                                      case when overriding then k.override_rate_period_ms end)) x(l, p)
         where x.l is not null
    loop
        keep_ms := greatest(keep_ms, per);
        select coalesce(sum(w.jobs), 0), min(w.started_at) into started, oldest
          from ojs_rate_window w
         where w.key = 'key:' || k.key and w.started_at > now() - per * interval '1 millisecond';
        if lim - started - unstarted < allow then
            allow := lim - started - unstarted;
            binding := 'rate';
            binding_limit := lim;
            binding_current := started + unstarted;
            next_at := coalesce(oldest + per * interval '1 millisecond', now() + per * interval '1 millisecond');
        end if;
    end loop;

    -- Throttle: one at a time, period/limit after the last start.
    for lim, per in
        select x.l, x.p from (values (k.throttle_limit, k.throttle_period_ms),
                                     (case when overriding then k.override_throttle_limit end,
                                      case when overriding then k.override_throttle_period_ms end)) x(l, p)
         where x.l is not null
    loop
        keep_ms := greatest(keep_ms, per / lim + 1);
        select max(w.started_at) into last_start from ojs_rate_window w where w.key = 'key:' || k.key;
        if unstarted > 0 then
            if 0 < allow then
                allow := 0;
                binding := 'throttle';
                binding_limit := lim;
                binding_current := unstarted;
                -- The released job's start does not notify: look again after one interval.
                next_at := now() + (per / lim) * interval '1 millisecond';
            end if;
        elsif last_start > now() - (per / lim) * interval '1 millisecond' then
            if 0 < allow then
                allow := 0;
                binding := 'throttle';
                binding_limit := lim;
                binding_current := 1;
                next_at := last_start + (per / lim) * interval '1 millisecond';
            end if;
        elsif 1 < allow then
            allow := 1;
        end if;
    end loop;

    if allow > 0 then
        with r as (
            select j.id from ojs_job j
             where j.rate_key = k.key and j.phase = 'available' and j.rate_held
             order by j.priority, j.enqueued_at, j.seq
             limit allow
               for update skip locked
        ),
        let_go as (
            update ojs_job j set rate_held = null from r where j.id = r.id
            returning j.id, j.queue
        )
        select array_agg(l.id), array_agg(l.queue) into released, released_queues
          from let_go l;
        -- Wake the long polls of the queues that gained jobs (an enqueue announces them
        -- itself, coalesced, and passes wake = false).
        if wake then
            perform pg_notify('ojs_job_available', format('%s - - - %s', q.queue, q.n))
               from (select u.queue, count(*) as n from unnest(released_queues) u(queue)
                      group by u.queue) q;
        end if;
    end if;

    select exists (select from ojs_job j
                    where j.rate_key = k.key and j.phase = 'available' and j.rate_held)
      into held_left;

    -- on_limit drop: what the key does not let start now is discarded, not dead-lettered.
    if held_left and k.on_limit = 'drop' then
        with doomed as (
            select j.id from ojs_job j
             where j.rate_key = k.key and j.phase = 'available' and j.rate_held
               for update skip locked
        ),
        dropped as (
            update ojs_job j
               set state = 'discarded', discarded_at = now(), completed_at = now(),
                   error = jsonb_build_object('code', 'rate_limit_dropped', 'type', 'rate_limit_dropped',
                                              'message', format('Rate-limit key %s was at its %s limit (on_limit: drop).',
                                                                k.key, coalesce(binding, 'concurrency'))),
                   errors = j.errors || jsonb_build_array(ojs_error_entry(j.attempt,
                                jsonb_build_object('code', 'rate_limit_dropped', 'type', 'rate_limit_dropped',
                                                   'message', format('Rate-limit key %s was at its %s limit (on_limit: drop).',
                                                                     k.key, coalesce(binding, 'concurrency'))),
                                now()))
              from doomed d
             where j.id = d.id
            returning j
        ),
        job_events as (
            insert into ojs_event (type, subject, job_id, queue, job_type, from_state, to_state, data)
            select e.type, (x.j).id::text, (x.j).id, (x.j).queue, (x.j).type, e.from_state,
                   e.to_state, e.data
              from dropped x
              cross join lateral ojs_job_events('available', null, null, null, 0, null, (x.j).priority, x.j) e
             order by (x.j).seq, e.ord
        )
        insert into ojs_event (type, subject, job_id, queue, job_type, data)
        select 'rate_limit.dropped', k.key, (x.j).id, (x.j).queue, (x.j).type,
               jsonb_build_object('key', k.key, 'job_id', (x.j).id, 'job_type', (x.j).type,
                                  'strategy', coalesce(binding, 'concurrency'))
          from dropped x;
        select exists (select from ojs_job j
                        where j.rate_key = k.key and j.phase = 'available' and j.rate_held)
          into held_left;
    end if;

    if k.limited is not null and coalesce(cardinality(released), 0) > 0 then
        insert into ojs_event (type, subject, job_id, data)
        values ('rate_limit.released', k.key, released[1],
                jsonb_build_object('key', k.key, 'strategy', k.limited, 'job_id', released[1],
                                   'job_ids', to_jsonb(released)));
    end if;
    if held_left and k.limited is null and binding is not null then
        insert into ojs_event (type, subject, data)
        values ('rate_limit.exceeded', k.key,
                jsonb_build_object('key', k.key, 'strategy', binding, 'limit', binding_limit,
                                   'current', binding_current));
    end if;

    delete from ojs_rate_window w
     where w.key = 'key:' || k.key and w.started_at < now() - keep_ms * interval '1 millisecond';

    -- Time alone releases nothing for a key limited by its concurrency (a job leaving flight
    -- notifies); a slow check covers a notification lost with its replica.
    next_at := case when not held_left then null
                    when allow > 0 then now()
                    else coalesce(next_at, now() + interval '5 seconds') end;
    binding := case when held_left then coalesce(binding, k.limited) end;
    if binding is distinct from k.limited or next_at is distinct from k.next_check_at then
        update ojs_rate_key r set limited = binding, next_check_at = next_at where r.key = k.key;
    end if;
    return query
        select u.queue, count(*)::integer from unnest(released_queues) u(queue) group by u.queue;
end;
$$;

--
-- Name: FUNCTION ojs_rate_release(rate_key text, wake boolean); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_rate_release(rate_key text, wake boolean) IS 'Releases a key''s held jobs as far as its limits (and an unexpired override, and a NACK block) allow, under the key''s row lock; returns the queues that gained jobs, with how many. wake: NOTIFY ojs_job_available for them (an enqueue announces them itself).';

--
-- Name: ojs_rate_window_read(json, text, jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_rate_window_read(raw json, path text, INOUT violations jsonb, OUT canonical text) RETURNS record
    LANGUAGE plpgsql IMMUTABLE
    AS $$
declare
    obj json;
    lim integer;
    period bigint;
    before integer := jsonb_array_length(violations);
    m record;
begin
    if json_typeof(raw) <> 'object' then
        violations := violations || jsonb_build_object('path', path,
            'message', 'must be an object {"limit": N, "period": "PT1S"}');
        return;
    end if;
    select coalesce(json_object_agg(x.key, x.value order by x.pos), '{}') into obj from ojs_json_members(raw) x;
    lim := ojs_rate_limit_read(ojs_json_present(obj -> 'limit'));
    if lim is null then
        violations := violations || jsonb_build_object('path', path || '.limit',
            'message', '''limit'' must be an integer >= 1');
    end if;
    period := ojs_rate_period_read(ojs_json_present(obj -> 'period'));
    if period is null then
        violations := violations || jsonb_build_object('path', path || '.period',
            'message', '''period'' must be second, minute, hour, day or a positive duration');
    end if;
    for m in select x.key from ojs_json_members(raw) x where x.key not in ('limit', 'period') order by x.pos
    loop
        violations := violations || jsonb_build_object('path', path || '.' || m.key,
            'message', format('unknown field ''%s'' (limit, period)', m.key));
    end loop;
    if jsonb_array_length(violations) = before then
        canonical := format('{"limit":%s,"period":"%s"}', lim, ojs_duration_iso(period));
    end if;
end;
$$;

--
-- Name: FUNCTION ojs_rate_window_read(raw json, path text, INOUT violations jsonb, OUT canonical text); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_rate_window_read(raw json, path text, INOUT violations jsonb, OUT canonical text) IS 'A rate window {limit, period} as canonical JSON, or its violations appended.';

--
-- Name: ojs_record_step(uuid, integer, text, jsonb, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_record_step(job_id uuid, attempt integer, name text, result jsonb DEFAULT NULL::jsonb, worker_id text DEFAULT NULL::text) RETURNS json
    LANGUAGE plpgsql
    AS $_$
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
$_$;

--
-- Name: FUNCTION ojs_record_step(job_id uuid, attempt integer, name text, result jsonb, worker_id text); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_record_step(job_id uuid, attempt integer, name text, result jsonb, worker_id text) IS 'Records step name of job_id''s current attempt with result, in the caller''s transaction, as POST /ojs/v1/jobs/{id}/steps/{name} does: once (a second record raises OJ409 step_already_recorded with the first in details.step), only while the job is active at attempt and, when worker_id is given, held by it. Returns the step; raises OJ400/OJ404/OJ409/OJ413 with the OJS error body in DETAIL.';

--
-- Name: ojs_retry_interval(json, text, text, jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_retry_interval(obj json, name text, path text, INOUT violations jsonb, OUT ms bigint) RETURNS record
    LANGUAGE plpgsql IMMUTABLE
    AS $$
declare
    key text;
    v json;
    found_key text;
    parsed bigint;
    problem text;
    d record;
begin
    foreach key in array array[name, name || '_ms']
    loop
        v := obj -> key;
        continue when v is null or json_typeof(v) = 'null';
        problem := null;
        parsed := null;
        if key = name then
            if json_typeof(v) = 'string' then
                d := ojs_duration_ms(v #>> '{}');
                parsed := d.ms;
                problem := d.problem;
            else
                problem := format('expected a duration string such as "PT1S", got %s', ojs_json_article(v));
            end if;
        else
            parsed := ojs_json_integer(v);
            if parsed is null or parsed < 0 then
                parsed := null;
                problem := 'expected a whole number of milliseconds';
            end if;
        end if;
        if problem is not null then
            violations := violations || jsonb_build_object('path', path || '.' || key,
                'message', format('%s is not a valid duration: %s', key, problem));
        elsif parsed = 0 then
            violations := violations || jsonb_build_object('path', path || '.' || key,
                'message', format('%s must be greater than zero', key));
        elsif ms is not null and ms <> parsed then
            violations := violations || jsonb_build_object('path', path || '.' || key,
                'message', format('%s disagrees with %s', key, found_key));
        elsif ms is null then
            ms := parsed;
            found_key := key;
        end if;
    end loop;
end;
$$;

--
-- Name: FUNCTION ojs_retry_interval(obj json, name text, path text, INOUT violations jsonb, OUT ms bigint); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_retry_interval(obj json, name text, path text, INOUT violations jsonb, OUT ms bigint) IS 'A positive interval of a retry object, as a duration string (name) or whole milliseconds (name_ms); problems appended to violations.';

--
-- Name: ojs_retry_read(json, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_retry_read(raw json, path text, OUT stored text, OUT max_attempts integer, OUT violations jsonb) RETURNS record
    LANGUAGE plpgsql IMMUTABLE
    AS $$
declare
    obj json;
    v json;
    n bigint;
    coef float8 := 2.0;
    initial bigint;
    maxi bigint;
    initial_ms bigint := 1000;
    max_ms bigint := 300000;
    jitter boolean := true;
    nre text := '[]';
    exhaustion text := 'dead_letter';
    strategy text := 'exponential';
    strategy_key text;
    extra text := '';
    r record;
    num numeric;
begin
    violations := '[]';
    max_attempts := 3;
    if json_typeof(raw) <> 'object' then
        violations := jsonb_build_array(jsonb_build_object('path', path,
            'message', format('''retry'' must be an object, got %s', ojs_json_article(raw))));
        return;
    end if;
    select json_object_agg(m.key, m.value order by m.pos) into obj from ojs_json_members(raw) m;
    obj := coalesce(obj, '{}');
    v := obj -> 'max_attempts';
    if v is not null and json_typeof(v) <> 'null' then
        n := ojs_json_integer(v);
        if n is not null and n between 0 and 2147483647 then
            max_attempts := n;
        else
            violations := violations || jsonb_build_object('path', path || '.max_attempts',
                'message', 'max_attempts must be an integer >= 0');
        end if;
    end if;
    select x.violations, x.ms into violations, initial from ojs_retry_interval(obj, 'initial_interval', path, violations) x;
    initial_ms := coalesce(initial, initial_ms);
    v := obj -> 'backoff_coefficient';
    if v is not null and json_typeof(v) <> 'null' then
        num := case when json_typeof(v) = 'number' then (v #>> '{}')::numeric end;
        if num is not null and num >= 1 and num <= 1.7976931348623157e308 then
            coef := num::float8;
        else
            violations := violations || jsonb_build_object('path', path || '.backoff_coefficient',
                'message', 'backoff_coefficient must be a number >= 1.0');
        end if;
    end if;
    select x.violations, x.ms into violations, maxi from ojs_retry_interval(obj, 'max_interval', path, violations) x;
    max_ms := coalesce(maxi, max_ms);
    if initial is not null and maxi is not null and max_ms < initial_ms then
        violations := violations || jsonb_build_object('path', path || '.max_interval',
            'message', 'max_interval must be >= initial_interval');
    elsif initial is not null and maxi is null then
        max_ms := greatest(max_ms, initial_ms);
    end if;
    v := obj -> 'jitter';
    if v is not null and json_typeof(v) <> 'null' then
        if json_typeof(v) = 'boolean' then
            jitter := (v #>> '{}')::boolean;
        else
            violations := violations || jsonb_build_object('path', path || '.jitter',
                'message', 'jitter must be a boolean');
        end if;
    end if;
    v := obj -> 'non_retryable_errors';
    if v is not null and json_typeof(v) <> 'null' then
        if json_typeof(v) = 'array'
           and not exists (select 1 from json_array_elements(v) e where json_typeof(e) <> 'string') then
            select coalesce(array_to_json(array_agg(e order by i))::text, '[]') into nre
              from json_array_elements_text(v) with ordinality as x(e, i);
        else
            violations := violations || jsonb_build_object('path', path || '.non_retryable_errors',
                'message', 'non_retryable_errors must be an array of strings');
        end if;
    end if;
    v := obj -> 'on_exhaustion';
    if v is not null and json_typeof(v) <> 'null' then
        if json_typeof(v) = 'string' and v #>> '{}' in ('discard', 'dead_letter') then
            exhaustion := v #>> '{}';
        else
            violations := violations || jsonb_build_object('path', path || '.on_exhaustion',
                'message', 'on_exhaustion must be "discard" or "dead_letter"');
        end if;
    end if;
    strategy_key := case when obj -> 'backoff_strategy' is not null
                               and json_typeof(obj -> 'backoff_strategy') <> 'null'
                         then 'backoff_strategy' else 'backoff_type' end;
    v := obj -> strategy_key;
    if v is not null and json_typeof(v) <> 'null' then
        if json_typeof(v) = 'string'
           and v #>> '{}' in ('exponential', 'linear', 'constant', 'none', 'polynomial') then
            strategy := v #>> '{}';
        else
            violations := violations || jsonb_build_object('path', path || '.' || strategy_key,
                'message', format('%s must be one of exponential, linear, constant, none, polynomial', strategy_key));
        end if;
    end if;
    if violations <> '[]' then
        return;
    end if;
    for r in select m.key, m.value from ojs_json_members(raw) m
              where m.key not in ('max_attempts', 'initial_interval', 'backoff_coefficient',
                                  'max_interval', 'initial_interval_ms', 'max_interval_ms',
                                  'jitter', 'non_retryable_errors', 'on_exhaustion',
                                  'backoff_strategy', 'backoff_type')
              order by m.pos
    loop
        extra := extra || ',' || to_json(r.key)::text || ':' || r.value::text;
    end loop;
    if max_attempts = 3 and initial_ms = 1000 and coef = 2.0 and max_ms = 300000 and jitter
       and nre = '[]' and exhaustion = 'dead_letter' and strategy = 'exponential' and extra = '' then
        stored := '{}';
        return;
    end if;
    stored := format('{"max_attempts":%s,"initial_interval":"%s","backoff_coefficient":%s,"max_interval":"%s","jitter":%s,"non_retryable_errors":%s,"on_exhaustion":"%s","backoff_strategy":"%s"%s}',
        max_attempts, ojs_duration_iso(initial_ms),
        case when coef = trunc(coef) and coef < 1e16 then trunc(coef)::numeric::text || '.0' else coef::text end,
        ojs_duration_iso(max_ms), case when jitter then 'true' else 'false' end, nre, exhaustion, strategy, extra);
end;
$$;

--
-- Name: FUNCTION ojs_retry_read(raw json, path text, OUT stored text, OUT max_attempts integer, OUT violations jsonb); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_retry_read(raw json, path text, OUT stored text, OUT max_attempts integer, OUT violations jsonb) IS 'A retry object read with defaults: the stored effective policy ({} for the default) and max_attempts, or the violations.';

--
-- Name: ojs_signal(uuid, text, jsonb, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_signal(job_id uuid, name text, payload jsonb DEFAULT NULL::jsonb, key text DEFAULT NULL::text) RETURNS text
    LANGUAGE plpgsql
    AS $$
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

--
-- Name: FUNCTION ojs_signal(job_id uuid, name text, payload jsonb, key text); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_signal(job_id uuid, name text, payload jsonb, key text) IS 'Sends signal name (with payload, and key to send it once) to a job in the caller''s transaction: delivered when the job waits for it, else kept for its next wait. Raises OJ400/OJ404/OJ409 with the OJS error body in DETAIL.';

--
-- Name: ojs_signal_send(uuid, text, jsonb, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_signal_send(p_job_id uuid, p_name text, p_payload jsonb, p_key text, OUT outcome text, OUT job_state public.ojs_job_state, OUT signal_id bigint, OUT sent_at timestamp with time zone, OUT delivered_at timestamp with time zone) RETURNS record
    LANGUAGE plpgsql
    AS $$
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

--
-- Name: FUNCTION ojs_signal_send(p_job_id uuid, p_name text, p_payload jsonb, p_key text, OUT outcome text, OUT job_state public.ojs_job_state, OUT signal_id bigint, OUT sent_at timestamp with time zone, OUT delivered_at timestamp with time zone); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_signal_send(p_job_id uuid, p_name text, p_payload jsonb, p_key text, OUT outcome text, OUT job_state public.ojs_job_state, OUT signal_id bigint, OUT sent_at timestamp with time zone, OUT delivered_at timestamp with time zone) IS 'Sends a signal to a job (what POST /ojs/v1/jobs/{id}/signals/{name} runs): outcome delivered (the job waited for it: now available), kept (for its next wait), duplicate (a signal with this key was sent: its id and times), finished or not_found (nothing done).';

--
-- Name: ojs_step_json(public.ojs_job_step); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_step_json(s public.ojs_job_step) RETURNS json
    LANGUAGE sql STABLE
    AS $$
    select ojs_json_compact('{"job_id":' || to_json(s.job_id)::text || ',"name":' || to_json(s.name)::text
               || ',"result":' || coalesce(s.result::text, 'null') || ',"attempt":' || s.attempt
               || coalesce(',"worker_id":' || to_json(s.worker_id)::text, '')
               || ',"recorded_at":' || ojs_wire_time(s.recorded_at) || '}')::json
$$;

--
-- Name: FUNCTION ojs_step_json(s public.ojs_job_step); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_step_json(s public.ojs_job_step) IS 'A recorded step in its API form: job_id, name, result (null: none), attempt, worker_id (absent when none), recorded_at.';

--
-- Name: ojs_tenant_admit(text[], integer[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_tenant_admit(tenants text[], jobs integer[]) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO '$user', 'public'
    AS $$
declare
    t ojs_tenant;
    n integer;
    started bigint;
    oldest timestamptz;
    depth bigint;
begin
    for t in select * from ojs_tenant x
              where x.id = any(tenants)
                and (x.max_enqueue_rate is not null or x.max_queue_depth is not null)
              order by x.id
                for update
    loop
        n := jobs[array_position(tenants, t.id)];
        if t.max_enqueue_rate is not null then
            select coalesce(sum(w.jobs), 0), min(w.started_at) into started, oldest
              from ojs_rate_window w
             where w.key = 'tenant:' || t.id
               and w.started_at > now() - t.enqueue_period_ms * interval '1 millisecond';
            if started + n > t.max_enqueue_rate then
                raise exception using
                    errcode = 'OJ005',
                    message = format('tenant %s is at its max_enqueue_rate', t.id),
                    detail = json_build_object(
                        'tenant_id', t.id, 'limit', 'max_enqueue_rate', 'current', started,
                        'maximum', t.max_enqueue_rate, 'requested', n,
                        'retry_after_ms', greatest(1, ceil(extract(epoch from
                            coalesce(oldest, now()) + t.enqueue_period_ms * interval '1 millisecond'
                            - now()) * 1000)))::text;
            end if;
            delete from ojs_rate_window w
             where w.key = 'tenant:' || t.id
               and w.started_at <= now() - t.enqueue_period_ms * interval '1 millisecond';
            insert into ojs_rate_window (key, started_at, jobs) values ('tenant:' || t.id, now(), n);
        end if;
        if t.max_queue_depth is not null then
            -- The enqueue's own jobs are among those counted (it runs after the insert).
            select count(*) into depth
              from (select from ojs_job j
                     where j.tenant = t.id and j.tenant <> ''
                       and j.phase <> 'taken'
                     limit t.max_queue_depth + n + 1) d;
            if depth > t.max_queue_depth then
                raise exception using
                    errcode = 'OJ005',
                    message = format('tenant %s is at its max_queue_depth', t.id),
                    detail = json_build_object(
                        'tenant_id', t.id, 'limit', 'max_queue_depth',
                        'current', greatest(depth - n, 0), 'maximum', t.max_queue_depth,
                        'requested', n, 'retry_after_ms', 1000)::text;
            end if;
        end if;
    end loop;
end;
$$;

--
-- Name: FUNCTION ojs_tenant_admit(tenants text[], jobs integer[]); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_tenant_admit(tenants text[], jobs integer[]) IS 'Admission of an enqueue (after its insert, in its transaction) by its tenants'' max_enqueue_rate and max_queue_depth, under their row locks in id order; records the enqueues in ojs_rate_window (tenant:<id>); raises OJ005 past a limit.';

--
-- Name: ojs_tenant_enqueued(public.ojs_job[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_tenant_enqueued(jobs public.ojs_job[]) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO '$user', 'public'
    AS $$
declare
    held text;
    refusal jsonb;
begin
    begin
        perform ojs_tenant_admit(array_agg(g.tenant), array_agg(g.n))
           from (select j.tenant, count(*)::integer as n from unnest(jobs) j
                  where j.tenant <> '' group by j.tenant) g
         having count(*) > 0;
    exception
        when sqlstate 'OJ005' then
            get stacked diagnostics refusal = pg_exception_detail;
            perform ojs_enqueue_refuse(429, 'TENANT_LIMIT_EXCEEDED',
                format('Tenant ''%s'' has exceeded %s (%s).', refusal ->> 'tenant_id',
                       refusal ->> 'limit', refusal ->> 'maximum'),
                refusal - 'retry_after_ms' || jsonb_build_object('retry_after_seconds',
                    ceil((refusal ->> 'retry_after_ms')::numeric / 1000)),
                true);
    end;
    for held in select distinct j.tenant from unnest(jobs) j
                 where j.tenant <> '' and j.rate_held = false
    loop
        perform pg_notify('ojs_tenant', held);
    end loop;
end;
$$;

--
-- Name: FUNCTION ojs_tenant_enqueued(jobs public.ojs_job[]); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_tenant_enqueued(jobs public.ojs_job[]) IS 'What the SQL door runs after its insert: ojs_tenant_admit for its jobs'' tenants, and NOTIFY ojs_tenant for tenants whose new jobs are held.';

--
-- Name: ojs_tenant_holds(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_tenant_holds(tenant text) RETURNS boolean
    LANGUAGE sql STABLE
    SET search_path TO '$user', 'public'
    RETURN (EXISTS (SELECT FROM public.ojs_job j WHERE ((j.tenant = ojs_tenant_holds.tenant) AND (j.phase = 'available'::public.ojs_job_phase) AND (j.rate_held = false))));

--
-- Name: FUNCTION ojs_tenant_holds(tenant text); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_tenant_holds(tenant text) IS 'Whether a tenant holds jobs back (its concurrency limit).';

--
-- Name: ojs_tenant_release(text, boolean); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_tenant_release(p_tenant text, wake boolean DEFAULT true) RETURNS TABLE(released_queue text, released_jobs integer)
    LANGUAGE plpgsql
    SET search_path TO '$user', 'public'
    AS $$
declare
    lim integer;
    flight integer;
    allow integer;
    queues text[];
    keys text[];
    k text;
begin
    if not ojs_tenant_holds(p_tenant) then
        return;
    end if;
    select t.max_concurrency into lim from ojs_tenant t where t.id = p_tenant for update;
    if lim is null then
        -- No limit (any more): everything held goes.
        allow := 2147483647;
    else
        -- Its own statement, after the lock: it sees what committed while this waited.
        select count(*) into flight
          from (select from ojs_job j
                 where j.tenant = p_tenant and j.tenant <> ''
                   and j.in_flight and j.rate_held is not false
                 limit lim + 1) f;
        allow := lim - flight;
    end if;
    if allow <= 0 then
        return;
    end if;
    with r as (
        select j.id from ojs_job j
         where j.tenant = p_tenant and j.phase = 'available' and j.rate_held = false
         order by j.priority, j.enqueued_at, j.seq
         limit allow
           for update skip locked
    ),
    let_go as (
        update ojs_job j set rate_held = case when j.rate_key is not null then true end
          from r
         where j.id = r.id
        returning j.queue, j.rate_key
    )
    select array_agg(l.queue) filter (where l.rate_key is null),
           array_agg(distinct l.rate_key) filter (where l.rate_key is not null)
      into queues, keys
      from let_go l;
    if wake then
        perform pg_notify('ojs_job_available', format('%s - - - %s', q.queue, q.n))
           from (select u.queue, count(*) as n from unnest(queues) u(queue) group by u.queue) q;
    end if;
    return query
        select u.queue, count(*)::integer from unnest(queues) u(queue) group by u.queue;
    -- Released jobs with a key wait for it now.
    foreach k in array coalesce(keys, '{}') loop
        return query select r.released_queue, r.released_jobs from ojs_rate_release(k, wake) r;
    end loop;
end;
$$;

--
-- Name: FUNCTION ojs_tenant_release(p_tenant text, wake boolean); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_tenant_release(p_tenant text, wake boolean) IS 'Releases a tenant''s held jobs as far as its max_concurrency allows (all of them without one), under its row lock, in dispatch order; released jobs with a rate-limit key then wait for their key. Returns the queues that gained jobs; wake: NOTIFY ojs_job_available for them.';

--
-- Name: ojs_fair_queue; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ojs_fair_queue (
    queue text NOT NULL,
    pool text NOT NULL,
    weights jsonb DEFAULT '{}'::jsonb NOT NULL,
    default_weight integer DEFAULT 1 NOT NULL,
    CONSTRAINT ojs_fair_queue_default_weight_positive CHECK ((default_weight >= 1))
);

--
-- Name: TABLE ojs_fair_queue; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ojs_fair_queue IS 'Queues dispatched fairly across tenants (meta.tenant_id), with the tenant weights.';

--
-- Name: COLUMN ojs_fair_queue.queue; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_fair_queue.queue IS 'The tenant-fair queue.';

--
-- Name: COLUMN ojs_fair_queue.pool; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_fair_queue.pool IS 'The pool whose tenant_fairness settings apply.';

--
-- Name: COLUMN ojs_fair_queue.weights; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_fair_queue.weights IS 'Tenant weights: "tenant:<id>" -> integer >= 1.';

--
-- Name: COLUMN ojs_fair_queue.default_weight; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_fair_queue.default_weight IS 'Weight of a tenant not named in weights.';

--
-- Name: ojs_tenant_weight(public.ojs_fair_queue, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_tenant_weight(fair public.ojs_fair_queue, tenant text) RETURNS double precision
    LANGUAGE sql IMMUTABLE
    AS $$
    select coalesce((fair.weights ->> ('tenant:' || tenant))::double precision,
                    fair.default_weight::double precision)
$$;

--
-- Name: FUNCTION ojs_tenant_weight(fair public.ojs_fair_queue, tenant text); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_tenant_weight(fair public.ojs_fair_queue, tenant text) IS 'Weight of a tenant in a tenant-fair queue: fair.weights->''tenant:<tenant>'', else fair.default_weight. Used by ojs_job_fair_tag and when a queue becomes tenant-fair (its available jobs are tagged then).';

--
-- Name: ojs_uuidv7(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_uuidv7() RETURNS uuid
    LANGUAGE sql
    AS $$
    select encode(set_byte(overlay(uuid_send(gen_random_uuid())
                                   placing substring(int8send((extract(epoch from clock_timestamp()) * 1000)::int8) from 3)
                                   from 1 for 6),
                           6, (get_byte(uuid_send(gen_random_uuid()), 6) & 15) | 112), 'hex')::uuid
$$;

--
-- Name: FUNCTION ojs_uuidv7(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_uuidv7() IS 'A new UUIDv7 (millisecond Unix time, then random bits).';

--
-- Name: ojs_wire_time(timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_wire_time(at timestamp with time zone) RETURNS text
    LANGUAGE sql STABLE
    AS $$
    select to_json(to_char(at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))::text
$$;

--
-- Name: FUNCTION ojs_wire_time(at timestamp with time zone); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_wire_time(at timestamp with time zone) IS 'A timestamp as the server writes them (UTC, milliseconds, Z), as a JSON string.';

--
-- Name: ojs_worker_directive_max(text, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_worker_directive_max(a text, b text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN ((a = 'terminate'::text) OR (b = 'terminate'::text)) THEN 'terminate'::text WHEN ((a = 'quiet'::text) OR (b = 'quiet'::text)) THEN 'quiet'::text ELSE ''::text END;

--
-- Name: FUNCTION ojs_worker_directive_max(a text, b text); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_worker_directive_max(a text, b text) IS 'The more severe of two worker directives (empty, quiet, terminate).';

--
-- Name: ojs_worker_effective_state(text, text, boolean); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_worker_effective_state(directive text, state text, stale boolean) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN stale THEN 'stale'::text WHEN ((directive = 'terminate'::text) OR (state = 'terminate'::text)) THEN 'terminate'::text WHEN (state = 'drain'::text) THEN 'drain'::text WHEN ((directive = 'quiet'::text) OR (state = 'quiet'::text)) THEN 'quiet'::text ELSE 'running'::text END;

--
-- Name: FUNCTION ojs_worker_effective_state(directive text, state text, stale boolean); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_worker_effective_state(directive text, state text, stale boolean) IS 'Effective worker state: stale > terminate > drain > quiet > running.';

--
-- Name: ojs_worker_events(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_worker_events() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
declare
    was text;
    now_is text;
begin
    if tg_op = 'DELETE' then
        if old.stale_at is null and old.last_heartbeat_at is not null then
            insert into ojs_event (type, subject, data)
            values ('worker.stopped', old.id,
                    jsonb_build_object('worker_id', old.id, 'reason', 'shutdown',
                                       'uptime_ms', ojs_ms_between(coalesce(old.started_at, old.registered_at), now())));
        end if;
        return old;
    end if;

    if tg_op = 'INSERT' and tg_when = 'BEFORE' then
        if new.last_heartbeat_at is not null then
            new.heartbeat_event_at := now();
        end if;
        return new;
    end if;

    if tg_op = 'INSERT' then
        if new.last_heartbeat_at is not null then
            insert into ojs_event (type, subject, data)
            values ('worker.started', new.id,
                    jsonb_strip_nulls(jsonb_build_object('worker_id', new.id, 'queues', to_jsonb(new.queues),
                                                         'concurrency', new.concurrency))),
                   ('worker.heartbeat', new.id,
                    jsonb_strip_nulls(jsonb_build_object('worker_id', new.id, 'queues', to_jsonb(new.queues),
                                                         'active_jobs', 0)));
        end if;
        return null;
    end if;

    -- UPDATE
    if new.last_heartbeat_at is not null
       and (old.last_heartbeat_at is null or (old.stale_at is not null and new.stale_at is null)) then
        insert into ojs_event (type, subject, data)
        values ('worker.started', new.id,
                jsonb_strip_nulls(jsonb_build_object('worker_id', new.id, 'queues', to_jsonb(new.queues),
                                                     'concurrency', new.concurrency)));
    end if;
    if new.stale_at is not null and old.stale_at is null then
        insert into ojs_event (type, subject, data)
        values ('worker.stopped', new.id,
                jsonb_build_object('worker_id', new.id, 'reason', 'error',
                                   'uptime_ms', ojs_ms_between(coalesce(new.started_at, new.registered_at), now())));
    end if;
    was := ojs_worker_effective_state(old.directive, old.state, old.stale_at is not null);
    now_is := ojs_worker_effective_state(new.directive, new.state, new.stale_at is not null);
    if now_is = 'quiet' and was <> 'quiet' then
        insert into ojs_event (type, subject, data)
        values ('worker.quiet', new.id,
                jsonb_build_object('worker_id', new.id,
                                   'active_jobs', (select count(*) from ojs_job j
                                                    where j.worker_id = new.id and j.state = 'active')));
    end if;
    if new.last_heartbeat_at is distinct from old.last_heartbeat_at
       and new.last_heartbeat_at is not null
       and (new.heartbeat_event_at is null or new.heartbeat_event_at <= now() - interval '1 minute') then
        new.heartbeat_event_at := now();
        insert into ojs_event (type, subject, data)
        values ('worker.heartbeat', new.id,
                jsonb_strip_nulls(jsonb_build_object(
                    'worker_id', new.id, 'queues', to_jsonb(new.queues),
                    'active_jobs', (select count(*) from ojs_job j
                                     where j.worker_id = new.id and j.state = 'active'))));
    end if;
    return new;
end;
$$;

--
-- Name: FUNCTION ojs_worker_events(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_worker_events() IS 'Writes worker.started, worker.quiet, worker.heartbeat (sampled) and worker.stopped events.';

--
-- Name: ojs_workflow_drop_waiting(uuid, text[], text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_workflow_drop_waiting(workflow uuid, kinds text[], state text) RETURNS integer
    LANGUAGE plpgsql
    SET search_path TO '$user', 'public'
    AS $$
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

--
-- Name: FUNCTION ojs_workflow_drop_waiting(workflow uuid, kinds text[], state text); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_workflow_drop_waiting(workflow uuid, kinds text[], state text) IS 'Marks a workflow''s waiting nodes of the given kinds with a final state and deletes their held jobs; returns how many.';

--
-- Name: ojs_event; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ojs_event (
    seq bigint NOT NULL,
    xid xid8 DEFAULT pg_current_xact_id() NOT NULL,
    type text NOT NULL,
    source text DEFAULT COALESCE(NULLIF(current_setting('ojs.source'::text, true), ''::text), 'ojs://ojs-server/api/unknown'::text) NOT NULL,
    "time" timestamp with time zone DEFAULT now() NOT NULL,
    subject text,
    job_id uuid,
    queue text,
    job_type text,
    from_state public.ojs_job_state,
    to_state public.ojs_job_state,
    data jsonb DEFAULT '{}'::jsonb NOT NULL,
    job_ids uuid[],
    trace_ids text[],
    attempts integer[],
    priorities integer[],
    unique_keys text[],
    scheduled_ats timestamp with time zone[],
    durations_ms bigint[],
    results json[],
    worker_id text,
    CONSTRAINT ojs_event_batch_shape CHECK (((job_ids IS NULL) OR ((job_id IS NULL) AND ((cardinality(job_ids) >= 1) AND (cardinality(job_ids) <= 16384))))),
    CONSTRAINT ojs_event_data_is_object CHECK ((jsonb_typeof(data) = 'object'::text)),
    CONSTRAINT ojs_event_transition_complete CHECK (((from_state IS NULL) OR (to_state IS NOT NULL)))
);
ALTER TABLE ONLY public.ojs_event ALTER COLUMN job_ids SET COMPRESSION lz4;
ALTER TABLE ONLY public.ojs_event ALTER COLUMN trace_ids SET COMPRESSION lz4;
ALTER TABLE ONLY public.ojs_event ALTER COLUMN attempts SET COMPRESSION lz4;
ALTER TABLE ONLY public.ojs_event ALTER COLUMN priorities SET COMPRESSION lz4;
ALTER TABLE ONLY public.ojs_event ALTER COLUMN unique_keys SET COMPRESSION lz4;
ALTER TABLE ONLY public.ojs_event ALTER COLUMN scheduled_ats SET COMPRESSION lz4;
ALTER TABLE ONLY public.ojs_event ALTER COLUMN durations_ms SET COMPRESSION lz4;
ALTER TABLE ONLY public.ojs_event ALTER COLUMN results SET COMPRESSION lz4;

--
-- Name: TABLE ojs_event; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ojs_event IS 'Lifecycle events (OJS event vocabulary). Job and dead-letter events are written by an events CTE in the same SQL statement that changes the job, worker events by the ojs_worker_events triggers, queue changes (queue.created, queue.paused, ...) in the statement that makes them, cron.triggered and cron.skipped by the cron firer in the transaction of the occurrence, and queue.full, backpressure, pool and scheduling events by inserts of their own. Served by GET /ojs/v1/events and the SSE streams; pruned after 7 days or beyond 1,000,000 events (the defaults).';

--
-- Name: COLUMN ojs_event.seq; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_event.seq IS 'Position of the row among all events; each row takes a block of 16,384 positions, and the events of a batch row are at seq, seq + 1, ... The event id sent to clients (evt_<UUIDv7>) is made of time and position.';

--
-- Name: COLUMN ojs_event.xid; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_event.xid IS 'Transaction that wrote the event; events are delivered in (xid, seq) order once that transaction is older than every running one.';

--
-- Name: COLUMN ojs_event.type; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_event.type IS 'Event type, e.g. job.completed.';

--
-- Name: COLUMN ojs_event.source; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_event.source IS 'ojs://<service>/<component>/<instance> of the writer.';

--
-- Name: COLUMN ojs_event."time"; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_event."time" IS 'When the change happened (the transaction time of the writer).';

--
-- Name: COLUMN ojs_event.subject; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_event.subject IS 'What the event is about: a job id, worker id, queue name, ...';

--
-- Name: COLUMN ojs_event.job_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_event.job_id IS 'Job the event is about, if any.';

--
-- Name: COLUMN ojs_event.queue; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_event.queue IS 'Queue of that job (or the queue the event is about).';

--
-- Name: COLUMN ojs_event.job_type; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_event.job_type IS 'Type of that job.';

--
-- Name: COLUMN ojs_event.from_state; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_event.from_state IS 'For the one event that records a job state change: the state before.';

--
-- Name: COLUMN ojs_event.to_state; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_event.to_state IS 'For the one event that records a job state change: the state after.';

--
-- Name: COLUMN ojs_event.data; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_event.data IS 'Event payload.';

--
-- Name: COLUMN ojs_event.job_ids; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_event.job_ids IS 'Batch row: the jobs of the statement that wrote it, in job order; the i-th (from 1) is the event at seq + i - 1. Null for a row of one event.';

--
-- Name: COLUMN ojs_event.trace_ids; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_event.trace_ids IS 'Batch row: each job''s trace id (meta.trace_id, else the trace id of meta.traceparent), or null.';

--
-- Name: COLUMN ojs_event.attempts; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_event.attempts IS 'Batch row: each job''s attempt (job.started, job.completed).';

--
-- Name: COLUMN ojs_event.priorities; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_event.priorities IS 'Batch row: each job''s priority (job.enqueued).';

--
-- Name: COLUMN ojs_event.unique_keys; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_event.unique_keys IS 'Batch row: each job''s unique key, or null (job.enqueued).';

--
-- Name: COLUMN ojs_event.scheduled_ats; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_event.scheduled_ats IS 'Batch row: each job''s scheduled_at, or null (job.enqueued, job.scheduled).';

--
-- Name: COLUMN ojs_event.durations_ms; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_event.durations_ms IS 'Batch row: each attempt''s duration in milliseconds (job.completed).';

--
-- Name: COLUMN ojs_event.results; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_event.results IS 'Batch row: each job''s result when at most 64 KiB, else null (job.completed).';

--
-- Name: COLUMN ojs_event.worker_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_event.worker_id IS 'Batch row: the worker that claimed the jobs (job.started).';

--
-- Name: ojs_workflow; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ojs_workflow (
    id uuid NOT NULL,
    type text NOT NULL,
    name text,
    state text DEFAULT 'running'::text NOT NULL,
    total integer NOT NULL,
    completed integer DEFAULT 0 NOT NULL,
    failed integer DEFAULT 0 NOT NULL,
    cancelled integer DEFAULT 0 NOT NULL,
    callbacks_fired text[],
    callbacks_open integer DEFAULT 0 NOT NULL,
    priority integer,
    failed_step_index integer,
    errors jsonb DEFAULT '[]'::jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    completed_at timestamp with time zone,
    cancelled_at timestamp with time zone,
    tenant text,
    CONSTRAINT ojs_workflow_counts_bounded CHECK (((total >= 1) AND (completed >= 0) AND (failed >= 0) AND (cancelled >= 0) AND (((completed + failed) + cancelled) <= total) AND (callbacks_open >= 0))),
    CONSTRAINT ojs_workflow_errors_array CHECK ((jsonb_typeof(errors) = 'array'::text)),
    CONSTRAINT ojs_workflow_state_known CHECK ((state = ANY (ARRAY['running'::text, 'completed'::text, 'failed'::text, 'cancelled'::text]))),
    CONSTRAINT ojs_workflow_type_known CHECK ((type = ANY (ARRAY['chain'::text, 'group'::text, 'batch'::text, 'dag'::text])))
);

--
-- Name: TABLE ojs_workflow; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ojs_workflow IS 'Workflows (/ojs/v1/workflows): a chain, group or batch of jobs and its progress. Its steps, members and callbacks are ojs_workflow_node rows.';

--
-- Name: COLUMN ojs_workflow.id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_workflow.id IS 'UUIDv7, as job ids.';

--
-- Name: COLUMN ojs_workflow.type; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_workflow.type IS 'chain (steps run one after another), group (members run at once), batch (a group with callbacks) or dag (steps that each run once the steps they depend on have completed).';

--
-- Name: COLUMN ojs_workflow.name; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_workflow.name IS 'Optional name given at creation.';

--
-- Name: COLUMN ojs_workflow.state; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_workflow.state IS 'running from creation, then completed, failed or cancelled.';

--
-- Name: COLUMN ojs_workflow.total; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_workflow.total IS 'Steps (chain, dag) or member jobs (group, batch); callbacks are not counted.';

--
-- Name: COLUMN ojs_workflow.completed; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_workflow.completed IS 'Steps or members whose job completed.';

--
-- Name: COLUMN ojs_workflow.failed; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_workflow.failed IS 'Steps or members whose job ended discarded (after its retries) or cancelled.';

--
-- Name: COLUMN ojs_workflow.cancelled; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_workflow.cancelled IS 'Steps never run because the chain or dag failed first.';

--
-- Name: COLUMN ojs_workflow.callbacks_fired; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_workflow.callbacks_fired IS 'Batch only: the callbacks released when its last member finished, null until then. Set once, under the row''s lock: the exactly-once latch.';

--
-- Name: COLUMN ojs_workflow.callbacks_open; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_workflow.callbacks_open IS 'Batch only: released callbacks whose jobs have not finished.';

--
-- Name: COLUMN ojs_workflow.priority; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_workflow.priority IS 'The workflow-level priority given at creation, if any.';

--
-- Name: COLUMN ojs_workflow.failed_step_index; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_workflow.failed_step_index IS 'The first step or member whose job failed.';

--
-- Name: COLUMN ojs_workflow.errors; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_workflow.errors IS 'JSON array of {job_id, code, message, attempt}, one per failed step, member or callback.';

--
-- Name: COLUMN ojs_workflow.created_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_workflow.created_at IS 'When the workflow was created.';

--
-- Name: COLUMN ojs_workflow.completed_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_workflow.completed_at IS 'When it reached completed or failed.';

--
-- Name: COLUMN ojs_workflow.cancelled_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_workflow.cancelled_at IS 'When it was cancelled.';

--
-- Name: COLUMN ojs_workflow.tenant; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_workflow.tenant IS 'The tenant the workflow belongs to (the tenant of all its jobs); null: none. Requests acting as another tenant do not see it.';

--
-- Name: ojs_workflow_event(text, public.ojs_workflow, uuid, jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_workflow_event(type text, workflow public.ojs_workflow, job uuid, data jsonb) RETURNS void
    LANGUAGE sql
    SET search_path TO '$user', 'public'
    BEGIN ATOMIC
 INSERT INTO public.ojs_event (type, subject, job_id, data)
   VALUES (ojs_workflow_event.type, ((ojs_workflow_event.workflow).id)::text, ojs_workflow_event.job, (jsonb_build_object('workflow_id', (ojs_workflow_event.workflow).id, 'workflow_type', (ojs_workflow_event.workflow).type, 'name', (ojs_workflow_event.workflow).name, 'state', (ojs_workflow_event.workflow).state) || ojs_workflow_event.data));
END;

--
-- Name: FUNCTION ojs_workflow_event(type text, workflow public.ojs_workflow, job uuid, data jsonb); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_workflow_event(type text, workflow public.ojs_workflow, job uuid, data jsonb) IS 'Writes one workflow.* event.';

--
-- Name: ojs_workflow_job_finished(uuid, integer, uuid, text, json, jsonb, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_workflow_job_finished(workflow_id uuid, step integer, job_id uuid, outcome text, result json, error jsonb, attempt integer) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO '$user', 'public'
    AS $$
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

--
-- Name: FUNCTION ojs_workflow_job_finished(workflow_id uuid, step integer, job_id uuid, outcome text, result json, error jsonb, attempt integer); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_workflow_job_finished(workflow_id uuid, step integer, job_id uuid, outcome text, result json, error jsonb, attempt integer) IS 'Advances a workflow when one of its jobs ends (completed, failed or cancelled), under the workflow row''s lock: releases the next chain step or the dag steps no longer waiting, ends the workflow, or fires a batch''s callbacks exactly once.';

--
-- Name: ojs_workflow_jobs_deleted(uuid[], json[], integer[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_workflow_jobs_deleted(ids uuid[], extras json[], attempts integer[]) RETURNS integer
    LANGUAGE plpgsql
    SET search_path TO '$user', 'public'
    AS $$
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

--
-- Name: FUNCTION ojs_workflow_jobs_deleted(ids uuid[], extras json[], attempts integer[]); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_workflow_jobs_deleted(ids uuid[], extras json[], attempts integer[]) IS 'Ends the workflow nodes of jobs deleted before they finished (given each job''s id, extra and attempt) as cancelled; returns how many of them were workflow jobs.';

--
-- Name: ojs_workflow_release(uuid, json); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ojs_workflow_release(job uuid, parent_results json) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO '$user', 'public'
    AS $$
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

--
-- Name: FUNCTION ojs_workflow_release(job uuid, parent_results json); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ojs_workflow_release(job uuid, parent_results json) IS 'Releases a job a workflow held: pending to available, with the results it is given in extra.parent_results; writes job.enqueued and wakes long polls.';

--
-- Name: ojs_api_key; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ojs_api_key (
    id uuid NOT NULL,
    name text DEFAULT ''::text NOT NULL,
    role text NOT NULL,
    queues text[],
    key_hash bytea NOT NULL,
    key_prefix text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    revoked_at timestamp with time zone,
    tenant text,
    CONSTRAINT ojs_api_key_hash_is_sha256 CHECK ((length(key_hash) = 32)),
    CONSTRAINT ojs_api_key_name_short CHECK ((length(name) <= 200)),
    CONSTRAINT ojs_api_key_queues_listed CHECK (((queues IS NULL) OR ((cardinality(queues) >= 1) AND (cardinality(queues) <= 100)))),
    CONSTRAINT ojs_api_key_role_known CHECK ((role = ANY (ARRAY['producer'::text, 'worker'::text, 'admin'::text]))),
    CONSTRAINT ojs_api_key_tenant_format CHECK (((tenant ~ '^[a-zA-Z0-9][a-zA-Z0-9._:-]*$'::text) AND (octet_length(tenant) <= 255)))
);

--
-- Name: TABLE ojs_api_key; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ojs_api_key IS 'API keys (Authorization: Bearer). Create, list and revoke them with `ojsd keys` or /ojs/v1/admin/keys; replicas reload the active ones every second.';

--
-- Name: COLUMN ojs_api_key.id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_api_key.id IS 'The key''s id (UUIDv7), which names it in lists and revocations; not secret.';

--
-- Name: COLUMN ojs_api_key.name; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_api_key.name IS 'What the operator called the key (e.g. the service that uses it).';

--
-- Name: COLUMN ojs_api_key.role; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_api_key.role IS 'producer (enqueue, read and cancel jobs), worker (the worker protocol) or admin (everything).';

--
-- Name: COLUMN ojs_api_key.queues; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_api_key.queues IS 'The queues the key may use; null: every queue.';

--
-- Name: COLUMN ojs_api_key.key_hash; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_api_key.key_hash IS 'SHA-256 of the key; the key itself is shown once, when created, and never stored.';

--
-- Name: COLUMN ojs_api_key.key_prefix; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_api_key.key_prefix IS 'The key''s first characters, to recognise it in lists without revealing it.';

--
-- Name: COLUMN ojs_api_key.created_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_api_key.created_at IS 'When the key was created.';

--
-- Name: COLUMN ojs_api_key.revoked_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_api_key.revoked_at IS 'When the key was revoked; a revoked key authenticates nothing.';

--
-- Name: COLUMN ojs_api_key.tenant; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_api_key.tenant IS 'The tenant the key acts as (X-OJS-Tenant): its enqueues are tagged with it and its reads and FETCHes see only its jobs; null: any tenant, or none.';

--
-- Name: ojs_cron; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ojs_cron (
    name text NOT NULL,
    expression text NOT NULL,
    timezone text DEFAULT 'UTC'::text NOT NULL,
    overlap_policy text DEFAULT 'skip'::text NOT NULL,
    enabled boolean DEFAULT true NOT NULL,
    description text,
    job_template json NOT NULL,
    next_run_at timestamp with time zone,
    next_local timestamp without time zone,
    last_run_at timestamp with time zone,
    run_count bigint DEFAULT 0 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    tenant text,
    CONSTRAINT ojs_cron_disabled_not_due CHECK ((enabled OR (next_run_at IS NULL))),
    CONSTRAINT ojs_cron_name_format CHECK (((name ~ '^[a-z0-9][a-z0-9.-]*$'::text) AND (length(name) <= 255))),
    CONSTRAINT ojs_cron_next_both_or_neither CHECK (((next_run_at IS NULL) = (next_local IS NULL))),
    CONSTRAINT ojs_cron_overlap_policy_known CHECK ((overlap_policy = ANY (ARRAY['skip'::text, 'allow'::text, 'cancel_previous'::text, 'enqueue'::text]))),
    CONSTRAINT ojs_cron_template_object CHECK ((json_typeof(job_template) = 'object'::text))
);

--
-- Name: TABLE ojs_cron; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ojs_cron IS 'Cron entries: a job template enqueued at every occurrence of a schedule. Managed with /ojs/v1/cron; fired by the leader (ojs_cron_run records each occurrence).';

--
-- Name: COLUMN ojs_cron.name; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_cron.name IS 'The entry''s name and key: lowercase letters, digits, ''-'' and ''.''.';

--
-- Name: COLUMN ojs_cron.expression; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_cron.expression IS 'The schedule as registered: 5 cron fields, 6 with leading seconds, an @ alias or @every <duration>.';

--
-- Name: COLUMN ojs_cron.timezone; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_cron.timezone IS 'IANA zone the fields are read in (wall-clock time); @every ignores it.';

--
-- Name: COLUMN ojs_cron.overlap_policy; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_cron.overlap_policy IS 'What an occurrence does while an earlier run is active: skip (no run), allow, cancel_previous (cancel the active runs first) or enqueue (run held pending until earlier runs finish).';

--
-- Name: COLUMN ojs_cron.enabled; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_cron.enabled IS 'A disabled entry fires nothing and has no next occurrence.';

--
-- Name: COLUMN ojs_cron.description; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_cron.description IS 'What the entry is for, as registered.';

--
-- Name: COLUMN ojs_cron.job_template; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_cron.job_template IS 'The enqueue body (POST /ojs/v1/jobs, without id) each run is made from; runs also get meta.cron_name and meta.cron_triggered_at.';

--
-- Name: COLUMN ojs_cron.next_run_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_cron.next_run_at IS 'When the next occurrence falls due; null when disabled or when the schedule never fires again. For a wall-clock time skipped by a change to daylight saving time, the instant of the change (it is then recorded as skipped, and the API shows the next occurrence that fires).';

--
-- Name: COLUMN ojs_cron.next_local; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_cron.next_local IS 'The next occurrence''s wall-clock time in the entry''s zone (UTC for @every).';

--
-- Name: COLUMN ojs_cron.last_run_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_cron.last_run_at IS 'The occurrence (scheduled instant) of the latest run enqueued.';

--
-- Name: COLUMN ojs_cron.run_count; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_cron.run_count IS 'Runs enqueued since the entry was registered.';

--
-- Name: COLUMN ojs_cron.created_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_cron.created_at IS 'When the entry was first registered.';

--
-- Name: COLUMN ojs_cron.updated_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_cron.updated_at IS 'When the entry was last registered again, changed, enabled or disabled.';

--
-- Name: COLUMN ojs_cron.tenant; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_cron.tenant IS 'The tenant of the request that registered the entry (its runs are that tenant''s jobs); null: none. Requests acting as another tenant do not see it.';

--
-- Name: ojs_cron_run; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ojs_cron_run (
    cron_name text NOT NULL,
    scheduled_at timestamp with time zone NOT NULL,
    outcome text NOT NULL,
    reason text,
    job_id uuid,
    missed bigint DEFAULT 0 NOT NULL,
    error jsonb,
    fired_at timestamp with time zone NOT NULL,
    open boolean DEFAULT false NOT NULL,
    held boolean DEFAULT false NOT NULL,
    CONSTRAINT ojs_cron_run_held_is_open CHECK ((open OR (NOT held))),
    CONSTRAINT ojs_cron_run_outcome_known CHECK ((((outcome = 'enqueued'::text) AND (reason IS NULL) AND (job_id IS NOT NULL)) OR ((outcome = 'skipped'::text) AND (reason = ANY (ARRAY['overlap_skip'::text, 'enqueue_failed'::text])) AND (NOT open))))
);

--
-- Name: TABLE ojs_cron_run; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ojs_cron_run IS 'The run ledger: one row per occurrence of a cron entry that came due and existed, written in the transaction that enqueued its job (or decided not to). Its key makes a second job for one occurrence impossible. Kept OJS_CRON_HISTORY_RETENTION (7 days by default); rows of runs that may still be running are kept.';

--
-- Name: COLUMN ojs_cron_run.cron_name; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_cron_run.cron_name IS 'The entry (rows outlive a deleted entry until retention removes them, so a re-registered entry never repeats an occurrence).';

--
-- Name: COLUMN ojs_cron_run.scheduled_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_cron_run.scheduled_at IS 'The occurrence: the instant the schedule names (meta.cron_triggered_at of its job), not when it was fired.';

--
-- Name: COLUMN ojs_cron_run.outcome; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_cron_run.outcome IS 'enqueued (a job was made) or skipped (none was: see reason).';

--
-- Name: COLUMN ojs_cron_run.reason; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_cron_run.reason IS 'Why a skipped occurrence made no job: overlap_skip (an earlier run was active) or enqueue_failed (the queue refused it: see error).';

--
-- Name: COLUMN ojs_cron_run.job_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_cron_run.job_id IS 'The job enqueued for the occurrence.';

--
-- Name: COLUMN ojs_cron_run.missed; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_cron_run.missed IS 'Earlier occurrences this run stands for (fired once after downtime).';

--
-- Name: COLUMN ojs_cron_run.error; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_cron_run.error IS 'For enqueue_failed: the OJS error the enqueue got.';

--
-- Name: COLUMN ojs_cron_run.fired_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_cron_run.fired_at IS 'When the occurrence was handled.';

--
-- Name: COLUMN ojs_cron_run.open; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_cron_run.open IS 'The job may not have finished: overlap policies check it; cleared once the job is seen finished or gone.';

--
-- Name: COLUMN ojs_cron_run.held; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_cron_run.held IS 'overlap_policy enqueue: the job waits pending until every earlier run of the entry has finished, then the firer makes it available.';

--
-- Name: ojs_dead_letter; Type: VIEW; Schema: public; Owner: -
--

CREATE VIEW public.ojs_dead_letter AS
 SELECT ojs_job.id,
    ojs_job.queue,
    ojs_job.type,
    ojs_job.attempt,
    (ojs_job.error ->> 'code'::text) AS error_code,
    (ojs_job.error ->> 'message'::text) AS error_message,
    ojs_job.created_at,
    ojs_job.dead_lettered_at
   FROM public.ojs_job
  WHERE ((ojs_job.state = 'discarded'::public.ojs_job_state) AND (ojs_job.dead_lettered_at IS NOT NULL));

--
-- Name: VIEW ojs_dead_letter; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON VIEW public.ojs_dead_letter IS 'Jobs in the dead-letter queue: discarded by their own failure with on_exhaustion = dead_letter (or the DEAD_LETTER directive).';

--
-- Name: COLUMN ojs_dead_letter.id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_dead_letter.id IS 'Job id.';

--
-- Name: COLUMN ojs_dead_letter.queue; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_dead_letter.queue IS 'Queue name.';

--
-- Name: COLUMN ojs_dead_letter.type; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_dead_letter.type IS 'Job type.';

--
-- Name: COLUMN ojs_dead_letter.attempt; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_dead_letter.attempt IS 'Attempts made.';

--
-- Name: COLUMN ojs_dead_letter.error_code; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_dead_letter.error_code IS 'Code of the last error.';

--
-- Name: COLUMN ojs_dead_letter.error_message; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_dead_letter.error_message IS 'Message of the last error.';

--
-- Name: COLUMN ojs_dead_letter.created_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_dead_letter.created_at IS 'When the job was received.';

--
-- Name: COLUMN ojs_dead_letter.dead_lettered_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_dead_letter.dead_lettered_at IS 'When it entered the dead-letter queue.';

--
-- Name: ojs_dispatch_second; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ojs_dispatch_second (
    second timestamp with time zone NOT NULL,
    queue text NOT NULL,
    pool text NOT NULL,
    dispatched bigint DEFAULT 0 NOT NULL,
    wait_ms bigint DEFAULT 0 NOT NULL
);

--
-- Name: TABLE ojs_dispatch_second; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ojs_dispatch_second IS 'Jobs dispatched per second, queue and pool, over all replicas (recent minutes only).';

--
-- Name: COLUMN ojs_dispatch_second.second; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_dispatch_second.second IS 'The second (truncated) the jobs were dispatched in.';

--
-- Name: COLUMN ojs_dispatch_second.queue; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_dispatch_second.queue IS 'Queue the jobs came from.';

--
-- Name: COLUMN ojs_dispatch_second.pool; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_dispatch_second.pool IS 'Pool of the fetching workers ('''' for none).';

--
-- Name: COLUMN ojs_dispatch_second.dispatched; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_dispatch_second.dispatched IS 'Jobs dispatched.';

--
-- Name: COLUMN ojs_dispatch_second.wait_ms; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_dispatch_second.wait_ms IS 'Sum of their waits from available to dispatch, in milliseconds.';

--
-- Name: ojs_event_log; Type: VIEW; Schema: public; Owner: -
--

CREATE VIEW public.ojs_event_log AS
 SELECT e.seq,
    e.xid,
    e.type,
    e.source,
    e."time",
    e.subject,
    e.job_id,
    e.queue,
    e.job_type,
    e.from_state,
    e.to_state,
    e.data
   FROM public.ojs_event e
  WHERE (e.job_ids IS NULL)
UNION ALL
 SELECT ((e.seq + b.n) - 1) AS seq,
    e.xid,
    e.type,
    e.source,
    e."time",
    (b.job_id)::text AS subject,
    b.job_id,
    e.queue,
    e.job_type,
    e.from_state,
    e.to_state,
    ((jsonb_build_object('job_id', b.job_id, 'job_type', e.job_type, 'queue', e.queue, 'state', e.to_state) || jsonb_strip_nulls(jsonb_build_object('trace_id', b.trace_id, 'priority', b.priority, 'unique_key', b.unique_key, 'worker_id', e.worker_id, 'attempt', b.attempt, 'duration_ms', b.duration_ms, 'result', (b.result)::jsonb))) ||
        CASE
            WHEN (b.scheduled_at IS NOT NULL) THEN jsonb_build_object('scheduled_at', to_char((b.scheduled_at AT TIME ZONE 'UTC'::text), 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'::text))
            ELSE '{}'::jsonb
        END) AS data
   FROM (public.ojs_event e
     CROSS JOIN LATERAL UNNEST(e.job_ids, e.trace_ids, e.attempts, e.priorities, e.unique_keys, e.scheduled_ats, e.durations_ms, e.results) WITH ORDINALITY b(job_id, trace_id, attempt, priority, unique_key, scheduled_at, duration_ms, result, n))
  WHERE (e.job_ids IS NOT NULL);

--
-- Name: VIEW ojs_event_log; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON VIEW public.ojs_event_log IS 'Every retained event, one row per event, in the shape of ojs_event before batch rows (V10): batch rows are expanded, with the data the server sends. Order by (xid, seq) for delivery order.';

--
-- Name: COLUMN ojs_event_log.seq; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_event_log.seq IS 'Position of the event (for a batch row''s events: the row''s seq plus the job''s index in it).';

--
-- Name: COLUMN ojs_event_log.xid; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_event_log.xid IS 'Transaction that wrote the event.';

--
-- Name: COLUMN ojs_event_log.type; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_event_log.type IS 'Event type, e.g. job.completed.';

--
-- Name: COLUMN ojs_event_log.source; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_event_log.source IS 'ojs://<service>/<component>/<instance> of the writer.';

--
-- Name: COLUMN ojs_event_log."time"; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_event_log."time" IS 'When the change happened (the transaction time of the writer).';

--
-- Name: COLUMN ojs_event_log.subject; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_event_log.subject IS 'What the event is about: a job id, worker id, queue name, ...';

--
-- Name: COLUMN ojs_event_log.job_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_event_log.job_id IS 'The job, for job events.';

--
-- Name: COLUMN ojs_event_log.queue; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_event_log.queue IS 'The queue, for job and queue events.';

--
-- Name: COLUMN ojs_event_log.job_type; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_event_log.job_type IS 'The job''s type, for job events.';

--
-- Name: COLUMN ojs_event_log.from_state; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_event_log.from_state IS 'State before a job transition.';

--
-- Name: COLUMN ojs_event_log.to_state; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_event_log.to_state IS 'State after a job transition.';

--
-- Name: COLUMN ojs_event_log.data; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_event_log.data IS 'The event''s data object, as the server sends it.';

--
-- Name: ojs_event_seq_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.ojs_event ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.ojs_event_seq_seq
    START WITH 1
    INCREMENT BY 16384
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: ojs_job_done; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ojs_job_done (
    id uuid NOT NULL,
    seq bigint NOT NULL,
    type text NOT NULL,
    queue text NOT NULL,
    args json NOT NULL,
    meta json DEFAULT '{}'::json NOT NULL,
    priority integer DEFAULT 2 NOT NULL,
    state public.ojs_job_state NOT NULL,
    attempt integer DEFAULT 0 NOT NULL,
    max_attempts integer NOT NULL,
    retry json NOT NULL,
    timeout_ms bigint NOT NULL,
    visibility_timeout_ms bigint,
    scheduled_at timestamp with time zone,
    scheduled_at_input text,
    expires_at timestamp with time zone,
    expires_at_input text,
    enqueue_ttl_secs integer,
    total_timeout_secs integer,
    tags text[],
    schema_uri text,
    unique_policy json,
    unique_key text,
    extra json DEFAULT '{}'::json NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    enqueued_at timestamp with time zone,
    activated_at timestamp with time zone,
    started_at timestamp with time zone,
    visible_until timestamp with time zone,
    reservation_ms bigint,
    worker_id text,
    next_retry_at timestamp with time zone,
    retry_delay_ms bigint,
    completed_at timestamp with time zone,
    cancelled_at timestamp with time zone,
    discarded_at timestamp with time zone,
    dead_lettered_at timestamp with time zone,
    result json,
    error jsonb,
    errors jsonb DEFAULT '[]'::jsonb NOT NULL,
    timeout_at timestamp with time zone,
    claim_deadline_at timestamp with time zone,
    total_deadline_at timestamp with time zone,
    re_enqueued_at timestamp with time zone,
    priority_aging_ms bigint,
    original_queue text,
    capacity_tracked boolean DEFAULT false,
    pool text,
    tenant_fair boolean DEFAULT false,
    tenant text,
    fair_key double precision,
    rate_key text,
    rate_held boolean,
    lease_id bigint,
    result_awaited boolean,
    CONSTRAINT ojs_job_done_completed_at_set CHECK ((completed_at IS NOT NULL)),
    CONSTRAINT ojs_job_done_is_completed CHECK ((state = 'completed'::public.ojs_job_state))
)
PARTITION BY RANGE (completed_at);

--
-- Name: TABLE ojs_job_done; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ojs_job_done IS 'Completed jobs, with ojs_job''s columns, partitioned by day of completed_at (UTC). The ACK moves a job here from ojs_job in its statement (or deletes it, for a queue that keeps no completed jobs); retention drops whole days and deletes per queue within them.';

--
-- Name: COLUMN ojs_job_done.id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.id IS 'Job id: UUIDv7, client-supplied or generated.';

--
-- Name: COLUMN ojs_job_done.seq; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.seq IS 'Arrival sequence; FIFO tie-breaker among jobs with equal priority and enqueued_at.';

--
-- Name: COLUMN ojs_job_done.type; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.type IS 'Job type, dot-namespaced lowercase segments (e.g. email.send); routes the job to a handler.';

--
-- Name: COLUMN ojs_job_done.queue; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.queue IS 'Queue the job is fetched from.';

--
-- Name: COLUMN ojs_job_done.args; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.args IS 'Positional handler arguments, a JSON array stored verbatim.';

--
-- Name: COLUMN ojs_job_done.meta; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.meta IS 'Client metadata (trace ids, tenant, ...), a JSON object stored verbatim.';

--
-- Name: COLUMN ojs_job_done.priority; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.priority IS 'Priority within the queue: lower is more urgent; 0 first, default 2.';

--
-- Name: COLUMN ojs_job_done.state; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.state IS 'Current lifecycle state.';

--
-- Name: COLUMN ojs_job_done.attempt; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.attempt IS 'Number of claims so far; incremented by every FETCH that hands the job out.';

--
-- Name: COLUMN ojs_job_done.max_attempts; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.max_attempts IS 'Effective retry.max_attempts: total attempts allowed (0 behaves like 1).';

--
-- Name: COLUMN ojs_job_done.retry; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.retry IS 'Effective retry policy (defaults merged in, durations in ISO 8601 form); ''{}'' is the default policy (max_attempts 3, initial_interval PT1S, backoff_coefficient 2.0, max_interval PT5M, jitter, exponential, dead_letter on exhaustion), which the server writes that way.';

--
-- Name: COLUMN ojs_job_done.timeout_ms; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.timeout_ms IS 'Resolved execution timeout in milliseconds.';

--
-- Name: COLUMN ojs_job_done.visibility_timeout_ms; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.visibility_timeout_ms IS 'Job-level reservation length in milliseconds; null uses the server default.';

--
-- Name: COLUMN ojs_job_done.scheduled_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.scheduled_at IS 'Earliest time the job may run (client scheduled_at / delay_until).';

--
-- Name: COLUMN ojs_job_done.scheduled_at_input; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.scheduled_at_input IS 'scheduled_at exactly as the client wrote it (echoed verbatim); null when given relatively.';

--
-- Name: COLUMN ojs_job_done.expires_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.expires_at IS 'Deadline after which the job must not start; it is discarded instead.';

--
-- Name: COLUMN ojs_job_done.expires_at_input; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.expires_at_input IS 'expires_at exactly as the client wrote it (echoed verbatim); null when given relatively.';

--
-- Name: COLUMN ojs_job_done.enqueue_ttl_secs; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.enqueue_ttl_secs IS 'Seconds after created_at within which the job must be claimed for the first time.';

--
-- Name: COLUMN ojs_job_done.total_timeout_secs; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.total_timeout_secs IS 'Seconds after created_at by which the job must have finished, across all attempts.';

--
-- Name: COLUMN ojs_job_done.tags; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.tags IS 'Client tags, for filtering.';

--
-- Name: COLUMN ojs_job_done.schema_uri; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.schema_uri IS 'Client schema attribute (a URI for args); preserved, not validated.';

--
-- Name: COLUMN ojs_job_done.unique_policy; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.unique_policy IS 'Unique policy as given by the client (echoed as "unique").';

--
-- Name: COLUMN ojs_job_done.unique_key; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.unique_key IS 'SHA-256 fingerprint of the unique dimensions; jobs sharing it are duplicates.';

--
-- Name: COLUMN ojs_job_done.extra; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.extra IS 'Unknown top-level envelope attributes, kept verbatim and in the order received.';

--
-- Name: COLUMN ojs_job_done.created_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.created_at IS 'When the server received the job.';

--
-- Name: COLUMN ojs_job_done.enqueued_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.enqueued_at IS 'Most recent entry into available; null while the job has never been available.';

--
-- Name: COLUMN ojs_job_done.activated_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.activated_at IS 'When a pending job was activated.';

--
-- Name: COLUMN ojs_job_done.started_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.started_at IS 'Most recent claim; cleared when a reservation is lost.';

--
-- Name: COLUMN ojs_job_done.visible_until; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.visible_until IS 'Reservation deadline of the current claim (active jobs).';

--
-- Name: COLUMN ojs_job_done.reservation_ms; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.reservation_ms IS 'Reservation length chosen at the most recent claim; a heartbeat extends by it.';

--
-- Name: COLUMN ojs_job_done.worker_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.worker_id IS 'Worker that holds (or last held) the reservation, if it named itself.';

--
-- Name: COLUMN ojs_job_done.next_retry_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.next_retry_at IS 'When a retryable job becomes available again.';

--
-- Name: COLUMN ojs_job_done.retry_delay_ms; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.retry_delay_ms IS 'Backoff delay most recently computed, after jitter and caps.';

--
-- Name: COLUMN ojs_job_done.completed_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.completed_at IS 'Set on completed and on every transition to discarded.';

--
-- Name: COLUMN ojs_job_done.cancelled_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.cancelled_at IS 'Set on cancelled.';

--
-- Name: COLUMN ojs_job_done.discarded_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.discarded_at IS 'Set on discarded.';

--
-- Name: COLUMN ojs_job_done.dead_lettered_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.dead_lettered_at IS 'Set when the job entered the dead-letter queue (a subset of discarded jobs).';

--
-- Name: COLUMN ojs_job_done.result; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.result IS 'Handler result sent with ACK, verbatim.';

--
-- Name: COLUMN ojs_job_done.error; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.error IS 'Most recent error {code, type, message, ...}; removed on ACK.';

--
-- Name: COLUMN ojs_job_done.errors; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.errors IS 'Error history, oldest first: one entry per failed attempt, with attempt and occurred_at.';

--
-- Name: COLUMN ojs_job_done.timeout_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.timeout_at IS 'Execution deadline of the current attempt (started_at + timeout); heartbeats do not move it.';

--
-- Name: COLUMN ojs_job_done.claim_deadline_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.claim_deadline_at IS 'created_at + enqueue_ttl: the job must be claimed for the first time before this; cleared by the first claim.';

--
-- Name: COLUMN ojs_job_done.total_deadline_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.total_deadline_at IS 'created_at + total_timeout: the job must have finished, across all attempts, before this.';

--
-- Name: COLUMN ojs_job_done.re_enqueued_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.re_enqueued_at IS 'When the job was last taken out of the dead-letter queue (manual retry).';

--
-- Name: COLUMN ojs_job_done.priority_aging_ms; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.priority_aging_ms IS 'Priority aging interval (ms) in effect when the job was enqueued; NULL = no aging.';

--
-- Name: COLUMN ojs_job_done.original_queue; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.original_queue IS 'The queue the job was in before that queue was deleted with strategy move.';

--
-- Name: COLUMN ojs_job_done.capacity_tracked; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.capacity_tracked IS 'Whether the job is counted in its queue''s ojs_queue_capacity row (its queue was bounded when it entered); null = false.';

--
-- Name: COLUMN ojs_job_done.pool; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.pool IS 'Pool of the worker that claimed the job, if it had one.';

--
-- Name: COLUMN ojs_job_done.tenant_fair; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.tenant_fair IS 'Whether the job is in a tenant-fair queue (dispatched by fair_key).';

--
-- Name: COLUMN ojs_job_done.tenant; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.tenant IS 'Tenant of a tenant-fair job (meta.tenant_id; empty string for none).';

--
-- Name: COLUMN ojs_job_done.fair_key; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.fair_key IS 'Virtual finish time of a tenant-fair job while available: lower dispatches first within its priority.';

--
-- Name: COLUMN ojs_job_done.rate_key; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.rate_key IS 'As ojs_job.rate_key.';

--
-- Name: COLUMN ojs_job_done.rate_held; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.rate_held IS 'As ojs_job.rate_held (always null once completed).';

--
-- Name: COLUMN ojs_job_done.lease_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.lease_id IS 'As ojs_job.lease_id (null once completed).';

--
-- Name: COLUMN ojs_job_done.result_awaited; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done.result_awaited IS 'As ojs_job.result_awaited.';

--
-- Name: ojs_job_all; Type: VIEW; Schema: public; Owner: -
--

CREATE VIEW public.ojs_job_all AS
 SELECT ojs_job.id,
    ojs_job.seq,
    ojs_job.type,
    ojs_job.queue,
    ojs_job.args,
    ojs_job.meta,
    ojs_job.priority,
    ojs_job.state,
    ojs_job.attempt,
    ojs_job.max_attempts,
    ojs_job.retry,
    ojs_job.timeout_ms,
    ojs_job.visibility_timeout_ms,
    ojs_job.scheduled_at,
    ojs_job.scheduled_at_input,
    ojs_job.expires_at,
    ojs_job.expires_at_input,
    ojs_job.enqueue_ttl_secs,
    ojs_job.total_timeout_secs,
    ojs_job.tags,
    ojs_job.schema_uri,
    ojs_job.unique_policy,
    ojs_job.unique_key,
    ojs_job.extra,
    ojs_job.created_at,
    ojs_job.enqueued_at,
    ojs_job.activated_at,
    ojs_job.started_at,
    ojs_job.visible_until,
    ojs_job.reservation_ms,
    ojs_job.worker_id,
    ojs_job.next_retry_at,
    ojs_job.retry_delay_ms,
    ojs_job.completed_at,
    ojs_job.cancelled_at,
    ojs_job.discarded_at,
    ojs_job.dead_lettered_at,
    ojs_job.result,
    ojs_job.error,
    ojs_job.errors,
    ojs_job.timeout_at,
    ojs_job.claim_deadline_at,
    ojs_job.total_deadline_at,
    ojs_job.re_enqueued_at,
    ojs_job.priority_aging_ms,
    ojs_job.original_queue,
    ojs_job.capacity_tracked,
    ojs_job.pool,
    ojs_job.tenant_fair,
    ojs_job.tenant,
    ojs_job.fair_key,
    ojs_job.rate_key,
    ojs_job.rate_held,
    ojs_job.lease_id,
    ojs_job.phase,
    ojs_job.in_flight,
    ojs_job.result_awaited,
    ojs_job.durable
   FROM public.ojs_job
UNION ALL
 SELECT d.id,
    d.seq,
    d.type,
    d.queue,
    d.args,
    d.meta,
    d.priority,
    d.state,
    d.attempt,
    d.max_attempts,
    d.retry,
    d.timeout_ms,
    d.visibility_timeout_ms,
    d.scheduled_at,
    d.scheduled_at_input,
    d.expires_at,
    d.expires_at_input,
    d.enqueue_ttl_secs,
    d.total_timeout_secs,
    d.tags,
    d.schema_uri,
    d.unique_policy,
    d.unique_key,
    d.extra,
    d.created_at,
    d.enqueued_at,
    d.activated_at,
    d.started_at,
    d.visible_until,
    d.reservation_ms,
    d.worker_id,
    d.next_retry_at,
    d.retry_delay_ms,
    d.completed_at,
    d.cancelled_at,
    d.discarded_at,
    d.dead_lettered_at,
    d.result,
    d.error,
    d.errors,
    d.timeout_at,
    d.claim_deadline_at,
    d.total_deadline_at,
    d.re_enqueued_at,
    d.priority_aging_ms,
    d.original_queue,
    d.capacity_tracked,
    d.pool,
    d.tenant_fair,
    d.tenant,
    d.fair_key,
    d.rate_key,
    d.rate_held,
    d.lease_id,
    'taken'::public.ojs_job_phase AS phase,
        CASE
            WHEN ((d.rate_key IS NOT NULL) OR (d.tenant <> ''::text)) THEN false
            ELSE NULL::boolean
        END AS in_flight,
    d.result_awaited,
    NULL::boolean AS durable
   FROM public.ojs_job_done d;

--
-- Name: VIEW ojs_job_all; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON VIEW public.ojs_job_all IS 'Every job, live (ojs_job) or completed (ojs_job_done), with ojs_job''s columns: read any job from here.';

--
-- Name: COLUMN ojs_job_all.id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.id IS 'Job id: UUIDv7, client-supplied or generated.';

--
-- Name: COLUMN ojs_job_all.seq; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.seq IS 'Arrival sequence; FIFO tie-breaker among jobs with equal priority and enqueued_at.';

--
-- Name: COLUMN ojs_job_all.type; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.type IS 'Job type, dot-namespaced lowercase segments (e.g. email.send); routes the job to a handler.';

--
-- Name: COLUMN ojs_job_all.queue; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.queue IS 'Queue the job is fetched from.';

--
-- Name: COLUMN ojs_job_all.args; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.args IS 'Positional handler arguments, a JSON array stored verbatim.';

--
-- Name: COLUMN ojs_job_all.meta; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.meta IS 'Client metadata (trace ids, tenant, ...), a JSON object stored verbatim.';

--
-- Name: COLUMN ojs_job_all.priority; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.priority IS 'Priority within the queue: lower is more urgent; 0 first, default 2.';

--
-- Name: COLUMN ojs_job_all.state; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.state IS 'Current lifecycle state.';

--
-- Name: COLUMN ojs_job_all.attempt; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.attempt IS 'Number of claims so far; incremented by every FETCH that hands the job out.';

--
-- Name: COLUMN ojs_job_all.max_attempts; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.max_attempts IS 'Effective retry.max_attempts: total attempts allowed (0 behaves like 1).';

--
-- Name: COLUMN ojs_job_all.retry; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.retry IS 'Effective retry policy (defaults merged in, durations in ISO 8601 form).';

--
-- Name: COLUMN ojs_job_all.timeout_ms; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.timeout_ms IS 'Resolved execution timeout in milliseconds.';

--
-- Name: COLUMN ojs_job_all.visibility_timeout_ms; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.visibility_timeout_ms IS 'Job-level reservation length in milliseconds; null uses the server default.';

--
-- Name: COLUMN ojs_job_all.scheduled_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.scheduled_at IS 'Earliest time the job may run (client scheduled_at / delay_until).';

--
-- Name: COLUMN ojs_job_all.scheduled_at_input; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.scheduled_at_input IS 'scheduled_at exactly as the client wrote it (echoed verbatim); null when given relatively.';

--
-- Name: COLUMN ojs_job_all.expires_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.expires_at IS 'Deadline after which the job must not start; it is discarded instead.';

--
-- Name: COLUMN ojs_job_all.expires_at_input; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.expires_at_input IS 'expires_at exactly as the client wrote it (echoed verbatim); null when given relatively.';

--
-- Name: COLUMN ojs_job_all.enqueue_ttl_secs; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.enqueue_ttl_secs IS 'Seconds after created_at within which the job must be claimed for the first time.';

--
-- Name: COLUMN ojs_job_all.total_timeout_secs; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.total_timeout_secs IS 'Seconds after created_at by which the job must have finished, across all attempts.';

--
-- Name: COLUMN ojs_job_all.tags; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.tags IS 'Client tags, for filtering.';

--
-- Name: COLUMN ojs_job_all.schema_uri; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.schema_uri IS 'Client schema attribute (a URI for args); preserved, not validated.';

--
-- Name: COLUMN ojs_job_all.unique_policy; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.unique_policy IS 'Unique policy as given by the client (echoed as "unique").';

--
-- Name: COLUMN ojs_job_all.unique_key; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.unique_key IS 'SHA-256 fingerprint of the unique dimensions; jobs sharing it are duplicates.';

--
-- Name: COLUMN ojs_job_all.extra; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.extra IS 'Unknown top-level envelope attributes, kept verbatim and in the order received.';

--
-- Name: COLUMN ojs_job_all.created_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.created_at IS 'When the server received the job.';

--
-- Name: COLUMN ojs_job_all.enqueued_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.enqueued_at IS 'Most recent entry into available; null while the job has never been available.';

--
-- Name: COLUMN ojs_job_all.activated_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.activated_at IS 'When a pending job was activated.';

--
-- Name: COLUMN ojs_job_all.started_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.started_at IS 'Most recent claim; cleared when a reservation is lost.';

--
-- Name: COLUMN ojs_job_all.visible_until; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.visible_until IS 'Reservation deadline of the current claim (active jobs).';

--
-- Name: COLUMN ojs_job_all.reservation_ms; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.reservation_ms IS 'Reservation length chosen at the most recent claim; a heartbeat extends by it.';

--
-- Name: COLUMN ojs_job_all.worker_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.worker_id IS 'Worker that holds (or last held) the reservation, if it named itself.';

--
-- Name: COLUMN ojs_job_all.next_retry_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.next_retry_at IS 'When a retryable job becomes available again.';

--
-- Name: COLUMN ojs_job_all.retry_delay_ms; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.retry_delay_ms IS 'Backoff delay most recently computed, after jitter and caps.';

--
-- Name: COLUMN ojs_job_all.completed_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.completed_at IS 'Set on completed and on every transition to discarded.';

--
-- Name: COLUMN ojs_job_all.cancelled_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.cancelled_at IS 'Set on cancelled.';

--
-- Name: COLUMN ojs_job_all.discarded_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.discarded_at IS 'Set on discarded.';

--
-- Name: COLUMN ojs_job_all.dead_lettered_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.dead_lettered_at IS 'Set when the job entered the dead-letter queue (a subset of discarded jobs).';

--
-- Name: COLUMN ojs_job_all.result; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.result IS 'Handler result sent with ACK, verbatim.';

--
-- Name: COLUMN ojs_job_all.error; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.error IS 'Most recent error {code, type, message, ...}; removed on ACK.';

--
-- Name: COLUMN ojs_job_all.errors; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.errors IS 'Error history, oldest first: one entry per failed attempt, with attempt and occurred_at.';

--
-- Name: COLUMN ojs_job_all.timeout_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.timeout_at IS 'Execution deadline of the current attempt (started_at + timeout); heartbeats do not move it.';

--
-- Name: COLUMN ojs_job_all.claim_deadline_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.claim_deadline_at IS 'created_at + enqueue_ttl: the job must be claimed for the first time before this; cleared by the first claim.';

--
-- Name: COLUMN ojs_job_all.total_deadline_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.total_deadline_at IS 'created_at + total_timeout: the job must have finished, across all attempts, before this.';

--
-- Name: COLUMN ojs_job_all.re_enqueued_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.re_enqueued_at IS 'When the job was last taken out of the dead-letter queue (manual retry).';

--
-- Name: COLUMN ojs_job_all.priority_aging_ms; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.priority_aging_ms IS 'Priority aging interval (ms) in effect when the job was enqueued; NULL = no aging.';

--
-- Name: COLUMN ojs_job_all.original_queue; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.original_queue IS 'The queue the job was in before that queue was deleted with strategy move.';

--
-- Name: COLUMN ojs_job_all.capacity_tracked; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.capacity_tracked IS 'Whether the job is counted in its queue''s ojs_queue_capacity row (its queue was bounded when it entered); null = false.';

--
-- Name: COLUMN ojs_job_all.pool; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.pool IS 'Pool of the worker that claimed the job, if it had one.';

--
-- Name: COLUMN ojs_job_all.tenant_fair; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.tenant_fair IS 'Whether the job is in a tenant-fair queue (dispatched by fair_key).';

--
-- Name: COLUMN ojs_job_all.tenant; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.tenant IS 'Tenant of a tenant-fair job (meta.tenant_id; empty string for none).';

--
-- Name: COLUMN ojs_job_all.fair_key; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.fair_key IS 'Virtual finish time of a tenant-fair job while available: lower dispatches first within its priority.';

--
-- Name: COLUMN ojs_job_all.rate_key; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.rate_key IS 'As ojs_job.rate_key.';

--
-- Name: COLUMN ojs_job_all.rate_held; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.rate_held IS 'As ojs_job.rate_held.';

--
-- Name: COLUMN ojs_job_all.lease_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.lease_id IS 'As ojs_job.lease_id.';

--
-- Name: COLUMN ojs_job_all.phase; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.phase IS 'As ojs_job.phase (taken, for the jobs of ojs_job_done).';

--
-- Name: COLUMN ojs_job_all.in_flight; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.in_flight IS 'As ojs_job.in_flight.';

--
-- Name: COLUMN ojs_job_all.result_awaited; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.result_awaited IS 'As ojs_job.result_awaited.';

--
-- Name: COLUMN ojs_job_all.durable; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_all.durable IS 'As ojs_job.durable (null for the jobs of ojs_job_done).';

--
-- Name: ojs_job_checkpoint; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ojs_job_checkpoint (
    job_id uuid NOT NULL,
    state jsonb NOT NULL,
    sequence integer NOT NULL,
    size_bytes integer NOT NULL,
    attempt integer NOT NULL,
    worker_id text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT ojs_job_checkpoint_sequence_positive CHECK ((sequence > 0)),
    CONSTRAINT ojs_job_checkpoint_size_not_negative CHECK ((size_bytes >= 0))
);

--
-- Name: TABLE ojs_job_checkpoint; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ojs_job_checkpoint IS 'The latest checkpoint of each job (OJS durable execution: PUT or POST /ojs/v1/jobs/{id}/checkpoint), handed to the job''s next attempt by FETCH and kept, read-only, until the job itself is pruned. Rows of jobs that no longer exist are pruned.';

--
-- Name: COLUMN ojs_job_checkpoint.job_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_checkpoint.job_id IS 'The job (ojs_job.id; no foreign key, see the table comment).';

--
-- Name: COLUMN ojs_job_checkpoint.state; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_checkpoint.state IS 'The state the job saved: any JSON value.';

--
-- Name: COLUMN ojs_job_checkpoint.sequence; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_checkpoint.sequence IS 'Saves since this row was made: 1 for the first, one more for each later save (a delete starts again at 1).';

--
-- Name: COLUMN ojs_job_checkpoint.size_bytes; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_checkpoint.size_bytes IS 'The size of the saved state as the client sent it, in bytes.';

--
-- Name: COLUMN ojs_job_checkpoint.attempt; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_checkpoint.attempt IS 'The job''s attempt when the state was saved.';

--
-- Name: COLUMN ojs_job_checkpoint.worker_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_checkpoint.worker_id IS 'The worker that saved it, when it said (or the worker holding the job).';

--
-- Name: COLUMN ojs_job_checkpoint.created_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_checkpoint.created_at IS 'When this checkpoint was saved.';

--
-- Name: ojs_job_counts; Type: VIEW; Schema: public; Owner: -
--

CREATE VIEW public.ojs_job_counts AS
 SELECT ojs_job_all.queue,
    ojs_job_all.state,
    count(*) AS jobs,
    min(ojs_job_all.created_at) AS oldest_created_at,
    max(ojs_job_all.created_at) AS newest_created_at
   FROM public.ojs_job_all
  GROUP BY ojs_job_all.queue, ojs_job_all.state;

--
-- Name: VIEW ojs_job_counts; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON VIEW public.ojs_job_counts IS 'Number of jobs per queue and state, completed ones included (scans both tables; filter by queue for big tables).';

--
-- Name: COLUMN ojs_job_counts.queue; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_counts.queue IS 'Queue name.';

--
-- Name: COLUMN ojs_job_counts.state; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_counts.state IS 'Job state.';

--
-- Name: COLUMN ojs_job_counts.jobs; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_counts.jobs IS 'Number of jobs of the queue in that state.';

--
-- Name: COLUMN ojs_job_counts.oldest_created_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_counts.oldest_created_at IS 'created_at of the oldest such job.';

--
-- Name: COLUMN ojs_job_counts.newest_created_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_counts.newest_created_at IS 'created_at of the newest such job.';

--
-- Name: ojs_job_done_default; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ojs_job_done_default (
    id uuid NOT NULL,
    seq bigint NOT NULL,
    type text NOT NULL,
    queue text NOT NULL,
    args json NOT NULL,
    meta json DEFAULT '{}'::json NOT NULL,
    priority integer DEFAULT 2 NOT NULL,
    state public.ojs_job_state NOT NULL,
    attempt integer DEFAULT 0 NOT NULL,
    max_attempts integer NOT NULL,
    retry json NOT NULL,
    timeout_ms bigint NOT NULL,
    visibility_timeout_ms bigint,
    scheduled_at timestamp with time zone,
    scheduled_at_input text,
    expires_at timestamp with time zone,
    expires_at_input text,
    enqueue_ttl_secs integer,
    total_timeout_secs integer,
    tags text[],
    schema_uri text,
    unique_policy json,
    unique_key text,
    extra json DEFAULT '{}'::json NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    enqueued_at timestamp with time zone,
    activated_at timestamp with time zone,
    started_at timestamp with time zone,
    visible_until timestamp with time zone,
    reservation_ms bigint,
    worker_id text,
    next_retry_at timestamp with time zone,
    retry_delay_ms bigint,
    completed_at timestamp with time zone,
    cancelled_at timestamp with time zone,
    discarded_at timestamp with time zone,
    dead_lettered_at timestamp with time zone,
    result json,
    error jsonb,
    errors jsonb DEFAULT '[]'::jsonb NOT NULL,
    timeout_at timestamp with time zone,
    claim_deadline_at timestamp with time zone,
    total_deadline_at timestamp with time zone,
    re_enqueued_at timestamp with time zone,
    priority_aging_ms bigint,
    original_queue text,
    capacity_tracked boolean DEFAULT false,
    pool text,
    tenant_fair boolean DEFAULT false,
    tenant text,
    fair_key double precision,
    rate_key text,
    rate_held boolean,
    lease_id bigint,
    result_awaited boolean,
    CONSTRAINT ojs_job_done_completed_at_set CHECK ((completed_at IS NOT NULL)),
    CONSTRAINT ojs_job_done_is_completed CHECK ((state = 'completed'::public.ojs_job_state))
);

--
-- Name: TABLE ojs_job_done_default; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ojs_job_done_default IS 'Completed jobs of days without a partition of their own (normally none).';

--
-- Name: ojs_job_done_partitions; Type: VIEW; Schema: public; Owner: -
--

CREATE VIEW public.ojs_job_done_partitions AS
 SELECT (c.relname)::text AS name,
    ((regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''([^'']+)''\)'::text))[1])::timestamp with time zone AS low,
    ((regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']+)''\)'::text))[1])::timestamp with time zone AS high,
    pg_relation_size((c.oid)::regclass) AS bytes
   FROM (pg_inherits i
     JOIN pg_class c ON ((c.oid = i.inhrelid)))
  WHERE (i.inhparent = ('public.ojs_job_done'::regclass)::oid)
  ORDER BY ((regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''([^'']+)''\)'::text))[1])::timestamp with time zone;

--
-- Name: VIEW ojs_job_done_partitions; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON VIEW public.ojs_job_done_partitions IS 'The partitions of ojs_job_done with their bounds and sizes, oldest first; the default partition last.';

--
-- Name: COLUMN ojs_job_done_partitions.name; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done_partitions.name IS 'Partition table.';

--
-- Name: COLUMN ojs_job_done_partitions.low; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done_partitions.low IS 'First instant of completed_at it holds; null for the default partition.';

--
-- Name: COLUMN ojs_job_done_partitions.high; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done_partitions.high IS 'First instant past it; null for the default partition.';

--
-- Name: COLUMN ojs_job_done_partitions.bytes; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_done_partitions.bytes IS 'Size of the partition''s table, without indexes.';

--
-- Name: ojs_lease; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ojs_lease (
    id bigint NOT NULL,
    worker_id text,
    queue text NOT NULL,
    pool text,
    jobs integer NOT NULL,
    open integer NOT NULL,
    due_at timestamp with time zone NOT NULL
);

--
-- Name: TABLE ojs_lease; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ojs_lease IS 'One claim''s hold on its jobs (one row per FETCH served by a claim statement, or per job handed to a waiting FETCH): what the reaper, a worker''s jobs and the counts of active jobs read, instead of indexes over active jobs (migration V29). Its jobs are in ojs_lease_jobs.';

--
-- Name: COLUMN ojs_lease.id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_lease.id IS 'The lease, from ojs_lease_id_seq; its jobs record it in ojs_job.lease_id.';

--
-- Name: COLUMN ojs_lease.worker_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_lease.worker_id IS 'The claiming worker (null: a FETCH without a worker id).';

--
-- Name: COLUMN ojs_lease.queue; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_lease.queue IS 'The queue the jobs were claimed from.';

--
-- Name: COLUMN ojs_lease.pool; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_lease.pool IS 'The claiming worker''s pool, if any.';

--
-- Name: COLUMN ojs_lease.jobs; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_lease.jobs IS 'How many jobs the claim took: a statement that ends that many of them at once deletes the lease.';

--
-- Name: COLUMN ojs_lease.open; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_lease.open IS 'Jobs of the lease not yet counted off by the statement that ended them; 0 or less: the lease is due for deletion. May run ahead of the truth (readers check each job), never behind.';

--
-- Name: COLUMN ojs_lease.due_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_lease.due_at IS 'When the reaper next looks at the lease: at the latest, the earliest reservation, execution or total deadline among its jobs.';

--
-- Name: ojs_lease_jobs; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ojs_lease_jobs (
    lease_id bigint NOT NULL,
    job_ids uuid[] NOT NULL
);
ALTER TABLE ONLY public.ojs_lease_jobs ALTER COLUMN job_ids SET COMPRESSION lz4;

--
-- Name: TABLE ojs_lease_jobs; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ojs_lease_jobs IS 'The jobs of a lease (ojs_lease), apart from its counter so that counting a job off does not copy them.';

--
-- Name: COLUMN ojs_lease_jobs.lease_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_lease_jobs.lease_id IS 'The lease.';

--
-- Name: COLUMN ojs_lease_jobs.job_ids; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_lease_jobs.job_ids IS 'The jobs the claim took (lz4-compressed).';

--
-- Name: ojs_job_held; Type: VIEW; Schema: public; Owner: -
--

CREATE VIEW public.ojs_job_held AS
 SELECT l.id AS lease_id,
    l.worker_id,
    l.queue,
    l.pool,
    j.id AS job_id,
    j.started_at
   FROM (((public.ojs_lease l
     JOIN public.ojs_lease_jobs lj ON ((lj.lease_id = l.id)))
     CROSS JOIN LATERAL unnest(lj.job_ids) x(id))
     JOIN public.ojs_job j ON ((j.id = x.id)))
  WHERE ((l.open > 0) AND (j.lease_id = l.id) AND ((j.state)::text = 'active'::text));

--
-- Name: VIEW ojs_job_held; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON VIEW public.ojs_job_held IS 'Every active job with the lease (ojs_lease) that holds it: a worker''s, queue''s or pool''s active jobs, read through its leases and the primary key.';

--
-- Name: COLUMN ojs_job_held.lease_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_held.lease_id IS 'The lease.';

--
-- Name: COLUMN ojs_job_held.worker_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_held.worker_id IS 'The worker holding the job.';

--
-- Name: COLUMN ojs_job_held.queue; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_held.queue IS 'The job''s queue.';

--
-- Name: COLUMN ojs_job_held.pool; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_held.pool IS 'The worker''s pool, if any.';

--
-- Name: COLUMN ojs_job_held.job_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_held.job_id IS 'The active job.';

--
-- Name: COLUMN ojs_job_held.started_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_held.started_at IS 'When its current attempt started.';

--
-- Name: ojs_job_overdue; Type: VIEW; Schema: public; Owner: -
--

CREATE VIEW public.ojs_job_overdue AS
 SELECT ojs_job.id,
    ojs_job.queue,
    ojs_job.type,
    ojs_job.worker_id,
    ojs_job.attempt,
    ojs_job.max_attempts,
    ojs_job.started_at,
    ojs_job.visible_until,
    (now() - ojs_job.visible_until) AS overdue_by
   FROM public.ojs_job
  WHERE ((ojs_job.state = 'active'::public.ojs_job_state) AND (ojs_job.visible_until < now()));

--
-- Name: VIEW ojs_job_overdue; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON VIEW public.ojs_job_overdue IS 'Active jobs whose reservation deadline has passed: the worker neither acknowledged, failed nor heartbeated them in time.';

--
-- Name: COLUMN ojs_job_overdue.id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_overdue.id IS 'Job id.';

--
-- Name: COLUMN ojs_job_overdue.queue; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_overdue.queue IS 'Queue name.';

--
-- Name: COLUMN ojs_job_overdue.type; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_overdue.type IS 'Job type.';

--
-- Name: COLUMN ojs_job_overdue.worker_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_overdue.worker_id IS 'Worker holding the expired reservation, if known.';

--
-- Name: COLUMN ojs_job_overdue.attempt; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_overdue.attempt IS 'Attempt number of the expired claim.';

--
-- Name: COLUMN ojs_job_overdue.max_attempts; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_overdue.max_attempts IS 'Attempts allowed in total.';

--
-- Name: COLUMN ojs_job_overdue.started_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_overdue.started_at IS 'When the expired claim was made.';

--
-- Name: COLUMN ojs_job_overdue.visible_until; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_overdue.visible_until IS 'The reservation deadline that passed.';

--
-- Name: COLUMN ojs_job_overdue.overdue_by; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_overdue.overdue_by IS 'How long ago the deadline passed.';

--
-- Name: ojs_job_progress; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ojs_job_progress (
    job_id uuid NOT NULL,
    attempt integer NOT NULL,
    worker_id text,
    progress double precision NOT NULL,
    message text,
    data jsonb,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT ojs_job_progress_in_range CHECK (((progress >= (0)::double precision) AND (progress <= (1)::double precision)))
);

--
-- Name: TABLE ojs_job_progress; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ojs_job_progress IS 'The latest progress report of each job, for the attempt that made it (OJS progress: PUT /ojs/v1/jobs/{id}/progress, POST /ojs/v1/workers/progress). Rows of jobs that no longer exist are pruned.';

--
-- Name: COLUMN ojs_job_progress.job_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_progress.job_id IS 'The job (ojs_job.id; no foreign key, see the table comment).';

--
-- Name: COLUMN ojs_job_progress.attempt; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_progress.attempt IS 'The attempt that reported: a report of an earlier attempt is not the current attempt''s progress.';

--
-- Name: COLUMN ojs_job_progress.worker_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_progress.worker_id IS 'The worker that reported, when it said.';

--
-- Name: COLUMN ojs_job_progress.progress; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_progress.progress IS 'Fraction done, 0 to 1 (reports outside are clamped; percentages are divided by 100).';

--
-- Name: COLUMN ojs_job_progress.message; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_progress.message IS 'What the worker said it is doing, if anything.';

--
-- Name: COLUMN ojs_job_progress.data; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_progress.data IS 'Structured detail the worker attached (a JSON object), if any.';

--
-- Name: COLUMN ojs_job_progress.updated_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_progress.updated_at IS 'When the latest report arrived.';

--
-- Name: ojs_job_schema; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ojs_job_schema (
    job_type text NOT NULL,
    version text NOT NULL,
    major integer NOT NULL,
    minor integer NOT NULL,
    patch integer NOT NULL,
    schema jsonb NOT NULL,
    validation text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT ojs_job_schema_validation_known CHECK ((validation = ANY (ARRAY['strict'::text, 'warn'::text, 'off'::text]))),
    CONSTRAINT ojs_job_schema_version_numbers CHECK (((major >= 0) AND (minor >= 0) AND (patch >= 0)))
);

--
-- Name: TABLE ojs_job_schema; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ojs_job_schema IS 'Schema registry: a JSON Schema for the args of each registered version of a job type. Written through /ojs/v1/admin/schemas (or /ojs/v1/schemas); kept until deleted. Changes bump ojs_queue_config_generation and write schema.registered / schema.deleted events.';

--
-- Name: COLUMN ojs_job_schema.job_type; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_schema.job_type IS 'The job type the schema describes.';

--
-- Name: COLUMN ojs_job_schema.version; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_schema.version IS 'The version as registered (N, N.N or N.N.N); a job names it in its top-level version attribute.';

--
-- Name: COLUMN ojs_job_schema.major; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_schema.major IS 'First number of the version (ordering and identity: 1, 1.0 and 1.0.0 are one version).';

--
-- Name: COLUMN ojs_job_schema.minor; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_schema.minor IS 'Second number of the version (0 when absent).';

--
-- Name: COLUMN ojs_job_schema.patch; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_schema.patch IS 'Third number of the version (0 when absent).';

--
-- Name: COLUMN ojs_job_schema.schema; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_schema.schema IS 'The JSON Schema (draft 2020-12 unless its $schema names another), checked when registered.';

--
-- Name: COLUMN ojs_job_schema.validation; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_schema.validation IS 'What a PUSH whose args fail it gets: strict (400 schema_validation), warn (accepted, with warnings), off (not checked); null: the server default (OJS_SCHEMA_VALIDATION).';

--
-- Name: COLUMN ojs_job_schema.created_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_schema.created_at IS 'When the version was registered.';

--
-- Name: ojs_job_seq_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.ojs_job ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.ojs_job_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: ojs_job_signal_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.ojs_job_signal ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.ojs_job_signal_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: ojs_job_stuck; Type: VIEW; Schema: public; Owner: -
--

CREATE VIEW public.ojs_job_stuck AS
 SELECT ojs_job.id,
    ojs_job.queue,
    ojs_job.type,
    ojs_job.state,
    ojs_job.worker_id,
    ojs_job.attempt,
    ojs_job.max_attempts,
        CASE
            WHEN ((ojs_job.state = 'active'::public.ojs_job_state) AND (ojs_job.visible_until < now())) THEN 'reservation expired'::text
            WHEN ((ojs_job.state = 'active'::public.ojs_job_state) AND (ojs_job.timeout_at < now())) THEN 'execution timeout passed'::text
            WHEN ((ojs_job.state = 'active'::public.ojs_job_state) AND (ojs_job.total_deadline_at < now())) THEN 'total timeout passed'::text
            WHEN (ojs_job.state = 'scheduled'::public.ojs_job_state) THEN 'scheduled time passed, not promoted'::text
            WHEN (ojs_job.state = 'retryable'::public.ojs_job_state) THEN 'retry time passed, not promoted'::text
            ELSE 'deadline passed, not expired'::text
        END AS why,
    COALESCE(
        CASE
            WHEN (ojs_job.state = 'active'::public.ojs_job_state) THEN LEAST(ojs_job.visible_until, ojs_job.timeout_at, ojs_job.total_deadline_at)
            ELSE NULL::timestamp with time zone
        END,
        CASE
            WHEN (ojs_job.state = 'scheduled'::public.ojs_job_state) THEN ojs_job.scheduled_at
            ELSE NULL::timestamp with time zone
        END,
        CASE
            WHEN (ojs_job.state = 'retryable'::public.ojs_job_state) THEN ojs_job.next_retry_at
            ELSE NULL::timestamp with time zone
        END, LEAST(ojs_job.expires_at, ojs_job.claim_deadline_at, ojs_job.total_deadline_at)) AS due_at
   FROM public.ojs_job
  WHERE (((ojs_job.state = 'active'::public.ojs_job_state) AND (LEAST(ojs_job.visible_until, ojs_job.timeout_at, ojs_job.total_deadline_at) < (now() - '00:00:05'::interval))) OR ((ojs_job.state = 'scheduled'::public.ojs_job_state) AND (ojs_job.scheduled_at < (now() - '00:00:05'::interval))) OR ((ojs_job.state = 'retryable'::public.ojs_job_state) AND (ojs_job.next_retry_at < (now() - '00:00:05'::interval))) OR ((ojs_job.state = ANY (ARRAY['scheduled'::public.ojs_job_state, 'available'::public.ojs_job_state, 'pending'::public.ojs_job_state, 'retryable'::public.ojs_job_state])) AND (LEAST(ojs_job.expires_at, ojs_job.claim_deadline_at, ojs_job.total_deadline_at) < (now() - '00:00:05'::interval))));

--
-- Name: VIEW ojs_job_stuck; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON VIEW public.ojs_job_stuck IS 'Jobs a maintenance service should have moved more than 5 seconds ago. Empty while a leader is running; rows here mean no instance leads or maintenance is falling behind.';

--
-- Name: COLUMN ojs_job_stuck.id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_stuck.id IS 'Job id.';

--
-- Name: COLUMN ojs_job_stuck.queue; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_stuck.queue IS 'Queue name.';

--
-- Name: COLUMN ojs_job_stuck.type; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_stuck.type IS 'Job type.';

--
-- Name: COLUMN ojs_job_stuck.state; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_stuck.state IS 'Current state.';

--
-- Name: COLUMN ojs_job_stuck.worker_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_stuck.worker_id IS 'Worker holding it, for active jobs.';

--
-- Name: COLUMN ojs_job_stuck.attempt; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_stuck.attempt IS 'Attempts so far.';

--
-- Name: COLUMN ojs_job_stuck.max_attempts; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_stuck.max_attempts IS 'Attempts allowed.';

--
-- Name: COLUMN ojs_job_stuck.why; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_stuck.why IS 'Which deadline passed.';

--
-- Name: COLUMN ojs_job_stuck.due_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_job_stuck.due_at IS 'When the job should have moved.';

--
-- Name: ojs_leader; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ojs_leader (
    name text NOT NULL,
    leader_id text NOT NULL,
    term bigint NOT NULL,
    elected_at timestamp with time zone NOT NULL,
    renewed_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    CONSTRAINT ojs_leader_expires_after_renewal CHECK ((expires_at >= renewed_at)),
    CONSTRAINT ojs_leader_name_known CHECK ((name = 'maintenance'::text)),
    CONSTRAINT ojs_leader_term_positive CHECK ((term >= 1))
);

--
-- Name: TABLE ojs_leader; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ojs_leader IS 'Leadership leases. The row named maintenance says which ojsd instance runs the maintenance services (promotion with dead-letter routing, reclaiming, expiry with draining-queue completion, stale workers, retention, the starvation watch). The lease is held while expires_at > now().';

--
-- Name: COLUMN ojs_leader.name; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_leader.name IS 'What the lease is for; only maintenance exists.';

--
-- Name: COLUMN ojs_leader.leader_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_leader.leader_id IS 'Instance id of the holder (OJS_INSTANCE_ID; by default host, pid and a random suffix).';

--
-- Name: COLUMN ojs_leader.term; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_leader.term IS 'Election counter; increases by one each time the lease changes hands or is taken again after it lapsed.';

--
-- Name: COLUMN ojs_leader.elected_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_leader.elected_at IS 'When the current term began.';

--
-- Name: COLUMN ojs_leader.renewed_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_leader.renewed_at IS 'When the holder last renewed the lease.';

--
-- Name: COLUMN ojs_leader.expires_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_leader.expires_at IS 'The lease is void after this; another instance may then take it. A resigning holder sets it to the resignation time.';

--
-- Name: ojs_leadership; Type: VIEW; Schema: public; Owner: -
--

CREATE VIEW public.ojs_leadership AS
 SELECT ojs_leader.name,
    ojs_leader.leader_id,
    ojs_leader.term,
    ojs_leader.elected_at,
    ojs_leader.renewed_at,
    ojs_leader.expires_at,
    (ojs_leader.expires_at > now()) AS held,
    GREATEST((ojs_leader.expires_at - now()), '00:00:00'::interval) AS remaining
   FROM public.ojs_leader;

--
-- Name: VIEW ojs_leadership; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON VIEW public.ojs_leadership IS 'Who leads, and for how much longer unless the lease is renewed.';

--
-- Name: COLUMN ojs_leadership.name; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_leadership.name IS 'What the lease is for.';

--
-- Name: COLUMN ojs_leadership.leader_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_leadership.leader_id IS 'Instance id of the holder (or last holder).';

--
-- Name: COLUMN ojs_leadership.term; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_leadership.term IS 'Election counter.';

--
-- Name: COLUMN ojs_leadership.elected_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_leadership.elected_at IS 'When the current term began.';

--
-- Name: COLUMN ojs_leadership.renewed_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_leadership.renewed_at IS 'When the holder last renewed.';

--
-- Name: COLUMN ojs_leadership.expires_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_leadership.expires_at IS 'When the lease runs out.';

--
-- Name: COLUMN ojs_leadership.held; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_leadership.held IS 'Whether the lease is currently held (false: nobody leads until an instance is elected).';

--
-- Name: COLUMN ojs_leadership.remaining; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_leadership.remaining IS 'Time until the lease runs out.';

--
-- Name: ojs_lease_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.ojs_lease_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: ojs_lease_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.ojs_lease_id_seq OWNED BY public.ojs_lease.id;

--
-- Name: ojs_listener; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ojs_listener (
    instance_id text NOT NULL,
    backend_pid integer NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    seen_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT ojs_listener_instance_id_length CHECK (((length(instance_id) >= 1) AND (length(instance_id) <= 255)))
);

--
-- Name: TABLE ojs_listener; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ojs_listener IS 'The replicas whose notification listener is connected (LISTEN in place), one row per replica: registered by the listener when it starts listening, renewed with each of its pings (every 2 s), deleted when the replica stops. An enqueue sends a NOTIFY only while another replica''s row was renewed in the last 10 s. Read instead of pg_stat_activity, which a connection pooler or a managed Postgres may hide (migration V34).';

--
-- Name: COLUMN ojs_listener.instance_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_listener.instance_id IS 'The replica (OJS_INSTANCE_ID; unique per replica).';

--
-- Name: COLUMN ojs_listener.backend_pid; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_listener.backend_pid IS 'The backend pid of its listening connection.';

--
-- Name: COLUMN ojs_listener.started_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_listener.started_at IS 'When this listening connection registered.';

--
-- Name: COLUMN ojs_listener.seen_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_listener.seen_at IS 'When it last answered a ping: a row older than 10 s is a listener that is gone.';

--
-- Name: ojs_pool; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ojs_pool (
    name text NOT NULL,
    queues text[] NOT NULL,
    concurrency integer,
    strategy text DEFAULT 'round-robin'::text NOT NULL,
    weights jsonb DEFAULT '{}'::jsonb NOT NULL,
    isolated boolean DEFAULT false NOT NULL,
    starvation_prevention jsonb NOT NULL,
    tenant_fairness jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT ojs_pool_concurrency_non_negative CHECK (((concurrency IS NULL) OR (concurrency >= 0))),
    CONSTRAINT ojs_pool_queues_not_empty CHECK ((cardinality(queues) > 0)),
    CONSTRAINT ojs_pool_strategy CHECK ((strategy = ANY (ARRAY['strict'::text, 'round-robin'::text, 'weighted'::text, 'least-loaded'::text])))
);

--
-- Name: TABLE ojs_pool; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ojs_pool IS 'Worker pools (fair scheduling): the queues their members consume and how.';

--
-- Name: COLUMN ojs_pool.name; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_pool.name IS 'Pool name; workers name it in their registration or heartbeat.';

--
-- Name: COLUMN ojs_pool.queues; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_pool.queues IS 'Queues the members consume, in order of preference.';

--
-- Name: COLUMN ojs_pool.concurrency; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_pool.concurrency IS 'Most jobs active at once across all members on all replicas; null = no limit.';

--
-- Name: COLUMN ojs_pool.strategy; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_pool.strategy IS 'How a FETCH spreads over the queues: strict, round-robin, weighted or least-loaded.';

--
-- Name: COLUMN ojs_pool.weights; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_pool.weights IS 'Queue weights of the weighted strategy (queue -> integer >= 1; missing = 1).';

--
-- Name: COLUMN ojs_pool.isolated; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_pool.isolated IS 'Whether the pool''s queues are served to its members only.';

--
-- Name: COLUMN ojs_pool.starvation_prevention; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_pool.starvation_prevention IS 'Object: enabled, rotation_interval (ISO 8601), min_dispatch_ratio.';

--
-- Name: COLUMN ojs_pool.tenant_fairness; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_pool.tenant_fairness IS 'Object: enabled, strategy (fair-share), weights ("tenant:<id>" -> integer), default_weight.';

--
-- Name: COLUMN ojs_pool.created_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_pool.created_at IS 'When the pool was first saved.';

--
-- Name: COLUMN ojs_pool.updated_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_pool.updated_at IS 'When the pool was last saved.';

--
-- Name: ojs_queue; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ojs_queue (
    name text NOT NULL,
    state public.ojs_queue_state DEFAULT 'active'::public.ojs_queue_state NOT NULL,
    config jsonb DEFAULT '{}'::jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    paused_at timestamp with time zone,
    resumed_at timestamp with time zone,
    deletion jsonb,
    CONSTRAINT ojs_queue_config_is_object CHECK ((jsonb_typeof(config) = 'object'::text)),
    CONSTRAINT ojs_queue_name_format CHECK (((name = '_default'::text) OR (((char_length(name) >= 1) AND (char_length(name) <= 128)) AND (name ~ '^[a-z0-9][a-z0-9.-]*$'::text)))),
    CONSTRAINT ojs_queue_paused_has_paused_at CHECK (((state <> 'paused'::public.ojs_queue_state) OR (paused_at IS NOT NULL)))
);

--
-- Name: TABLE ojs_queue; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ojs_queue IS 'One row per queue: its lifecycle state and its own configuration layer (queue configuration, over the _default row). Jobs name their queue by text; a queue without a row behaves as active with the default configuration.';

--
-- Name: COLUMN ojs_queue.name; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue.name IS 'Queue name (the job''s queue), or _default for the policy every queue inherits.';

--
-- Name: COLUMN ojs_queue.state; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue.state IS 'active, paused (FETCH skips it; enqueues are accepted) or draining.';

--
-- Name: COLUMN ojs_queue.config; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue.config IS 'The queue''s own configuration values (only those set explicitly); the resolved configuration layers them over _default and the system defaults.';

--
-- Name: COLUMN ojs_queue.created_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue.created_at IS 'When the queue came into existence (first enqueue, pause/resume, or explicit creation).';

--
-- Name: COLUMN ojs_queue.updated_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue.updated_at IS 'Last change of state or configuration.';

--
-- Name: COLUMN ojs_queue.paused_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue.paused_at IS 'When the queue was last paused (kept after a resume).';

--
-- Name: COLUMN ojs_queue.resumed_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue.resumed_at IS 'When the queue was last resumed.';

--
-- Name: COLUMN ojs_queue.deletion; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue.deletion IS 'While draining: how the queue is being deleted ({"strategy", "target_queue", "jobs_affected"}), for its queue.deleted event once its last active job ends.';

--
-- Name: ojs_queue_capacity; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ojs_queue_capacity (
    queue text NOT NULL,
    max_jobs bigint,
    max_bytes bigint,
    overflow_policy text DEFAULT 'reject'::text NOT NULL,
    jobs bigint DEFAULT 0 NOT NULL,
    bytes bigint DEFAULT 0 NOT NULL,
    CONSTRAINT ojs_queue_capacity_policy CHECK ((overflow_policy = ANY (ARRAY['reject'::text, 'drop_oldest'::text, 'block'::text])))
);

--
-- Name: TABLE ojs_queue_capacity; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ojs_queue_capacity IS 'Bounded queues: resolved max_size (max_jobs), max_size_bytes (max_bytes), overflow policy, and the current count and total size of their non-terminal jobs.';

--
-- Name: COLUMN ojs_queue_capacity.queue; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue_capacity.queue IS 'The bounded queue, or _default for the bounds new queues take.';

--
-- Name: COLUMN ojs_queue_capacity.max_jobs; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue_capacity.max_jobs IS 'Resolved max_size: most unfinished jobs; null = no bound on the count.';

--
-- Name: COLUMN ojs_queue_capacity.max_bytes; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue_capacity.max_bytes IS 'Resolved max_size_bytes: most total size of unfinished jobs; null = no bound on the size.';

--
-- Name: COLUMN ojs_queue_capacity.overflow_policy; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue_capacity.overflow_policy IS 'What an enqueue past a bound does: reject, drop_oldest or block.';

--
-- Name: COLUMN ojs_queue_capacity.jobs; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue_capacity.jobs IS 'Non-terminal jobs (active included) now in the queue.';

--
-- Name: COLUMN ojs_queue_capacity.bytes; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue_capacity.bytes IS 'Total size (args + meta, bytes) of those jobs.';

--
-- Name: ojs_queue_config_generation; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ojs_queue_config_generation (
    singleton boolean DEFAULT true NOT NULL,
    generation bigint DEFAULT 0 NOT NULL,
    CONSTRAINT ojs_queue_config_generation_singleton CHECK (singleton)
);

--
-- Name: TABLE ojs_queue_config_generation; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ojs_queue_config_generation IS 'One row: a counter bumped by every queue configuration change (cache invalidation).';

--
-- Name: COLUMN ojs_queue_config_generation.singleton; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue_config_generation.singleton IS 'Always true: the table has one row.';

--
-- Name: COLUMN ojs_queue_config_generation.generation; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue_config_generation.generation IS 'Incremented by every configuration change of a queue or of _default.';

--
-- Name: ojs_queue_overview; Type: VIEW; Schema: public; Owner: -
--

CREATE VIEW public.ojs_queue_overview AS
 WITH d AS (
         SELECT ojs_queue.config
           FROM public.ojs_queue
          WHERE (ojs_queue.name = '_default'::text)
        ), counts AS (
         SELECT ojs_job_all.queue,
            count(*) FILTER (WHERE (ojs_job_all.state = 'available'::public.ojs_job_state)) AS available,
            count(*) FILTER (WHERE (ojs_job_all.state = 'active'::public.ojs_job_state)) AS active,
            count(*) FILTER (WHERE (ojs_job_all.state = 'scheduled'::public.ojs_job_state)) AS scheduled,
            count(*) FILTER (WHERE (ojs_job_all.state = 'retryable'::public.ojs_job_state)) AS retryable,
            count(*) FILTER (WHERE (ojs_job_all.state = 'pending'::public.ojs_job_state)) AS pending,
            count(*) FILTER (WHERE (ojs_job_all.state = 'completed'::public.ojs_job_state)) AS completed,
            count(*) FILTER (WHERE (ojs_job_all.state = 'discarded'::public.ojs_job_state)) AS discarded,
            count(*) FILTER (WHERE (ojs_job_all.state = 'cancelled'::public.ojs_job_state)) AS cancelled
           FROM public.ojs_job_all
          GROUP BY ojs_job_all.queue
        )
 SELECT q.name AS queue,
    q.state,
    ((((COALESCE(c.available, (0)::bigint) + COALESCE(c.active, (0)::bigint)) + COALESCE(c.scheduled, (0)::bigint)) + COALESCE(c.retryable, (0)::bigint)) + COALESCE(c.pending, (0)::bigint)) AS depth,
    COALESCE(c.available, (0)::bigint) AS available,
    COALESCE(c.active, (0)::bigint) AS active,
    COALESCE(c.scheduled, (0)::bigint) AS scheduled,
    COALESCE(c.retryable, (0)::bigint) AS retryable,
    COALESCE(c.pending, (0)::bigint) AS pending,
    COALESCE(c.completed, (0)::bigint) AS completed,
    COALESCE(c.discarded, (0)::bigint) AS discarded,
    COALESCE(c.cancelled, (0)::bigint) AS cancelled,
    (COALESCE((q.config -> 'max_size'::text), (d.config -> 'max_size'::text)))::bigint AS max_size,
    (COALESCE((q.config -> 'max_size_bytes'::text), (d.config -> 'max_size_bytes'::text)))::bigint AS max_size_bytes,
    COALESCE((q.config ->> 'overflow_policy'::text), (d.config ->> 'overflow_policy'::text), 'reject'::text) AS overflow_policy,
    (COALESCE((q.config -> 'concurrency'::text), (d.config -> 'concurrency'::text)))::bigint AS concurrency,
    COALESCE((q.config -> 'rate_limit'::text), (d.config -> 'rate_limit'::text)) AS rate_limit,
    cap.jobs AS counted_depth,
    round(((((((COALESCE(c.available, (0)::bigint) + COALESCE(c.active, (0)::bigint)) + COALESCE(c.scheduled, (0)::bigint)) + COALESCE(c.retryable, (0)::bigint)) + COALESCE(c.pending, (0)::bigint)))::numeric / (NULLIF((COALESCE((q.config -> 'max_size'::text), (d.config -> 'max_size'::text)))::bigint, 0))::numeric), 4) AS utilization,
    q.config AS own_config,
    q.created_at,
    q.updated_at
   FROM (((public.ojs_queue q
     LEFT JOIN d ON (true))
     LEFT JOIN counts c ON ((c.queue = q.name)))
     LEFT JOIN public.ojs_queue_capacity cap ON ((cap.queue = q.name)))
  WHERE (q.name <> '_default'::text);

--
-- Name: VIEW ojs_queue_overview; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON VIEW public.ojs_queue_overview IS 'Per queue: lifecycle state, jobs by state, and the limits resolved over _default (null = unlimited). counted_depth is the capacity counter of bounded queues.';

--
-- Name: COLUMN ojs_queue_overview.queue; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue_overview.queue IS 'Queue name.';

--
-- Name: COLUMN ojs_queue_overview.state; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue_overview.state IS 'active, paused or draining.';

--
-- Name: COLUMN ojs_queue_overview.depth; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue_overview.depth IS 'Unfinished jobs (available, active, scheduled, retryable, pending).';

--
-- Name: COLUMN ojs_queue_overview.available; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue_overview.available IS 'Jobs available.';

--
-- Name: COLUMN ojs_queue_overview.active; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue_overview.active IS 'Jobs active.';

--
-- Name: COLUMN ojs_queue_overview.scheduled; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue_overview.scheduled IS 'Jobs scheduled.';

--
-- Name: COLUMN ojs_queue_overview.retryable; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue_overview.retryable IS 'Jobs retryable.';

--
-- Name: COLUMN ojs_queue_overview.pending; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue_overview.pending IS 'Jobs pending.';

--
-- Name: COLUMN ojs_queue_overview.completed; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue_overview.completed IS 'Completed jobs retained.';

--
-- Name: COLUMN ojs_queue_overview.discarded; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue_overview.discarded IS 'Discarded jobs retained.';

--
-- Name: COLUMN ojs_queue_overview.cancelled; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue_overview.cancelled IS 'Cancelled jobs retained.';

--
-- Name: COLUMN ojs_queue_overview.max_size; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue_overview.max_size IS 'Resolved max_size (null = unlimited).';

--
-- Name: COLUMN ojs_queue_overview.max_size_bytes; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue_overview.max_size_bytes IS 'Resolved max_size_bytes (null = unlimited).';

--
-- Name: COLUMN ojs_queue_overview.overflow_policy; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue_overview.overflow_policy IS 'Resolved overflow policy.';

--
-- Name: COLUMN ojs_queue_overview.concurrency; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue_overview.concurrency IS 'Resolved concurrency limit (null = unlimited).';

--
-- Name: COLUMN ojs_queue_overview.rate_limit; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue_overview.rate_limit IS 'Resolved rate limit {limit, period} (null = none).';

--
-- Name: COLUMN ojs_queue_overview.counted_depth; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue_overview.counted_depth IS 'The capacity counter of a bounded queue (equals depth).';

--
-- Name: COLUMN ojs_queue_overview.utilization; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue_overview.utilization IS 'depth / max_size.';

--
-- Name: COLUMN ojs_queue_overview.own_config; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue_overview.own_config IS 'The queue''s own configuration values.';

--
-- Name: COLUMN ojs_queue_overview.created_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue_overview.created_at IS 'When the queue came into existence.';

--
-- Name: COLUMN ojs_queue_overview.updated_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_queue_overview.updated_at IS 'Last change of state or configuration.';

--
-- Name: ojs_rate_key; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ojs_rate_key (
    key text NOT NULL,
    concurrency integer,
    rate_limit integer,
    rate_period_ms bigint,
    throttle_limit integer,
    throttle_period_ms bigint,
    on_limit text DEFAULT 'wait'::text NOT NULL,
    blocked_until timestamp with time zone,
    override_concurrency integer,
    override_rate_limit integer,
    override_rate_period_ms bigint,
    override_throttle_limit integer,
    override_throttle_period_ms bigint,
    override_expires_at timestamp with time zone,
    limited text,
    next_check_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT ojs_rate_key_limited_known CHECK ((limited = ANY (ARRAY['concurrency'::text, 'rate'::text, 'throttle'::text, 'blocked'::text]))),
    CONSTRAINT ojs_rate_key_limits_valid CHECK ((((concurrency IS NULL) OR (concurrency >= 0)) AND ((override_concurrency IS NULL) OR (override_concurrency >= 0)) AND ((rate_limit IS NULL) = (rate_period_ms IS NULL)) AND ((rate_limit IS NULL) OR ((rate_limit >= 1) AND (rate_period_ms >= 1))) AND ((throttle_limit IS NULL) = (throttle_period_ms IS NULL)) AND ((throttle_limit IS NULL) OR ((throttle_limit >= 1) AND (throttle_period_ms >= 1))) AND ((override_rate_limit IS NULL) = (override_rate_period_ms IS NULL)) AND ((override_rate_limit IS NULL) OR ((override_rate_limit >= 1) AND (override_rate_period_ms >= 1))) AND ((override_throttle_limit IS NULL) = (override_throttle_period_ms IS NULL)) AND ((override_throttle_limit IS NULL) OR ((override_throttle_limit >= 1) AND (override_throttle_period_ms >= 1))))),
    CONSTRAINT ojs_rate_key_on_limit_known CHECK ((on_limit = ANY (ARRAY['wait'::text, 'reschedule'::text, 'drop'::text])))
);

--
-- Name: TABLE ojs_rate_key; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ojs_rate_key IS 'Rate-limit keys of jobs (their rate_limit policies): the latest policy enqueued under each key, an operator''s temporary override, a block from a NACK, and the releaser''s bookkeeping.';

--
-- Name: COLUMN ojs_rate_key.key; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_rate_key.key IS 'The key, as jobs name it (queue:<queue> for a policy without one).';

--
-- Name: COLUMN ojs_rate_key.concurrency; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_rate_key.concurrency IS 'Most jobs of the key in flight at once (released or active); 0 pauses the key.';

--
-- Name: COLUMN ojs_rate_key.rate_limit; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_rate_key.rate_limit IS 'Most job starts of the key within rate_period_ms (a sliding window).';

--
-- Name: COLUMN ojs_rate_key.rate_period_ms; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_rate_key.rate_period_ms IS 'The rate window, in milliseconds.';

--
-- Name: COLUMN ojs_rate_key.throttle_limit; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_rate_key.throttle_limit IS 'Throttle: starts spaced throttle_period_ms / throttle_limit apart, one at a time.';

--
-- Name: COLUMN ojs_rate_key.throttle_period_ms; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_rate_key.throttle_period_ms IS 'The throttle period, in milliseconds.';

--
-- Name: COLUMN ojs_rate_key.on_limit; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_rate_key.on_limit IS 'What an enqueue does with a job its key does not let start at once: wait (held until allowed), reschedule (as wait), drop (discarded, rate_limit_dropped).';

--
-- Name: COLUMN ojs_rate_key.blocked_until; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_rate_key.blocked_until IS 'No job of the key starts before this (a NACK''s rate_limit_until).';

--
-- Name: COLUMN ojs_rate_key.override_concurrency; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_rate_key.override_concurrency IS 'Operator override (PUT /ojs/v1/rate-limits/{key}) until override_expires_at: applies besides the key''s own limits, so the stricter wins.';

--
-- Name: COLUMN ojs_rate_key.override_rate_limit; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_rate_key.override_rate_limit IS 'Override: rate limit.';

--
-- Name: COLUMN ojs_rate_key.override_rate_period_ms; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_rate_key.override_rate_period_ms IS 'Override: rate window, in milliseconds.';

--
-- Name: COLUMN ojs_rate_key.override_throttle_limit; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_rate_key.override_throttle_limit IS 'Override: throttle limit.';

--
-- Name: COLUMN ojs_rate_key.override_throttle_period_ms; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_rate_key.override_throttle_period_ms IS 'Override: throttle period, in milliseconds.';

--
-- Name: COLUMN ojs_rate_key.override_expires_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_rate_key.override_expires_at IS 'When the override lapses; null: until removed.';

--
-- Name: COLUMN ojs_rate_key.limited; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_rate_key.limited IS 'The limit holding the key''s jobs back when last released (concurrency, rate, throttle, blocked); null when none were held. Edge for the rate_limit.exceeded and .released events.';

--
-- Name: COLUMN ojs_rate_key.next_check_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_rate_key.next_check_at IS 'When the releaser should look at the key again (held jobs that time may release); null when nothing is held.';

--
-- Name: COLUMN ojs_rate_key.created_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_rate_key.created_at IS 'When a job or override first named the key.';

--
-- Name: COLUMN ojs_rate_key.updated_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_rate_key.updated_at IS 'When its policy last changed.';

--
-- Name: ojs_rate_window; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ojs_rate_window (
    key text NOT NULL,
    started_at timestamp with time zone NOT NULL,
    jobs integer NOT NULL,
    CONSTRAINT ojs_rate_window_jobs CHECK ((jobs > 0))
);

--
-- Name: TABLE ojs_rate_window; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ojs_rate_window IS 'Job starts under a rate limit: one row per claim and limit (queue:<name> for a queue''s own limit, key:<key> for a job rate-limit key), kept for the longest period that counts them.';

--
-- Name: COLUMN ojs_rate_window.key; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_rate_window.key IS 'Whose starts (or enqueues): queue:<queue name> for a queue''s limit, key:<key> for a job rate-limit key, tenant:<id> for a tenant''s max_enqueue_rate (its enqueues).';

--
-- Name: COLUMN ojs_rate_window.started_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_rate_window.started_at IS 'When the claim started its jobs.';

--
-- Name: COLUMN ojs_rate_window.jobs; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_rate_window.jobs IS 'Jobs the claim started.';

--
-- Name: ojs_system_hold; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ojs_system_hold (
    id boolean DEFAULT true NOT NULL,
    enabled boolean DEFAULT false NOT NULL,
    reason text,
    started_at timestamp with time zone,
    ends_at timestamp with time zone,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT ojs_system_hold_id_check CHECK (id),
    CONSTRAINT ojs_system_hold_reason_length CHECK ((octet_length(reason) <= 1000)),
    CONSTRAINT ojs_system_hold_started CHECK (((NOT enabled) OR (started_at IS NOT NULL)))
);

--
-- Name: TABLE ojs_system_hold; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ojs_system_hold IS 'Maintenance mode (the system hold): one row. In force while enabled and ends_at, if set, is in the future: no replica hands out work (FETCH answers empty, long polls wait), the promoter and the cron firer pause; enqueues, heartbeats, ACKs and NACKs go on. Set with POST /ojs/v1/admin/system/maintenance; changes write server.maintenance_started, server.maintenance_updated and server.maintenance_ended events.';

--
-- Name: COLUMN ojs_system_hold.id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_system_hold.id IS 'Always true: the table has exactly one row.';

--
-- Name: COLUMN ojs_system_hold.enabled; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_system_hold.enabled IS 'Whether maintenance mode was turned on (and not yet off or past ends_at and cleared).';

--
-- Name: COLUMN ojs_system_hold.reason; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_system_hold.reason IS 'What the operator said it is for (up to 1,000 bytes); null when off.';

--
-- Name: COLUMN ojs_system_hold.started_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_system_hold.started_at IS 'When it was turned on (kept when an operator changes the reason or end of a hold in force); null when off.';

--
-- Name: COLUMN ojs_system_hold.ends_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_system_hold.ends_at IS 'When it lifts by itself; null: until turned off.';

--
-- Name: COLUMN ojs_system_hold.updated_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_system_hold.updated_at IS 'When the row last changed.';

--
-- Name: ojs_tenant; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ojs_tenant (
    id text NOT NULL,
    max_concurrency integer,
    max_enqueue_rate integer,
    enqueue_period_ms bigint,
    max_queue_depth integer,
    reason text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT ojs_tenant_id_format CHECK (((id ~ '^[a-zA-Z0-9][a-zA-Z0-9._:-]*$'::text) AND (octet_length(id) <= 255))),
    CONSTRAINT ojs_tenant_limits_valid CHECK ((((max_concurrency IS NULL) OR (max_concurrency >= 0)) AND ((max_enqueue_rate IS NULL) = (enqueue_period_ms IS NULL)) AND ((max_enqueue_rate IS NULL) OR ((max_enqueue_rate >= 1) AND (enqueue_period_ms >= 1))) AND ((max_queue_depth IS NULL) OR (max_queue_depth >= 0)))),
    CONSTRAINT ojs_tenant_reason_length CHECK (((reason IS NULL) OR (char_length(reason) <= 1000)))
);

--
-- Name: TABLE ojs_tenant; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ojs_tenant IS 'Tenants an operator configured (PUT /ojs/v1/admin/tenants/{id}), with their limits; a tenant named only by its jobs has no row. Limits are kept by ojs_tenant_release (concurrency, with the rate-limit keys'' hold) and ojs_tenant_admit (enqueue rate and depth); changes bump ojs_queue_config_generation.';

--
-- Name: COLUMN ojs_tenant.id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_tenant.id IS 'The tenant id (meta.tenant_id, X-OJS-Tenant).';

--
-- Name: COLUMN ojs_tenant.max_concurrency; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_tenant.max_concurrency IS 'Most of the tenant''s jobs in flight at once (released and not yet claimed, or active), across queues and replicas; 0 holds them all; null: no limit.';

--
-- Name: COLUMN ojs_tenant.max_enqueue_rate; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_tenant.max_enqueue_rate IS 'Most jobs the tenant may enqueue within enqueue_period_ms (a sliding window; past it enqueues are refused with 429); null: no limit.';

--
-- Name: COLUMN ojs_tenant.enqueue_period_ms; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_tenant.enqueue_period_ms IS 'The enqueue-rate window, in milliseconds.';

--
-- Name: COLUMN ojs_tenant.max_queue_depth; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_tenant.max_queue_depth IS 'Most of the tenant''s jobs waiting (scheduled, available, pending or retryable); past it enqueues are refused with 429; null: no limit.';

--
-- Name: COLUMN ojs_tenant.reason; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_tenant.reason IS 'Why the limits were last changed, as the operator said.';

--
-- Name: COLUMN ojs_tenant.created_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_tenant.created_at IS 'When the tenant was first configured.';

--
-- Name: COLUMN ojs_tenant.updated_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_tenant.updated_at IS 'When its limits last changed.';

--
-- Name: ojs_webhook; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ojs_webhook (
    id uuid NOT NULL,
    url text NOT NULL,
    events text[] NOT NULL,
    secret text NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    active boolean DEFAULT true NOT NULL,
    paused_reason text,
    paused_at timestamp with time zone,
    cursor_xid bigint NOT NULL,
    cursor_seq bigint NOT NULL,
    attempt integer DEFAULT 0 NOT NULL,
    next_attempt_at timestamp with time zone DEFAULT now() NOT NULL,
    failure_count integer DEFAULT 0 NOT NULL,
    delivered bigint DEFAULT 0 NOT NULL,
    last_delivery_at timestamp with time zone,
    last_delivery_status integer,
    last_error text,
    gap_at timestamp with time zone,
    gap_events bigint DEFAULT 0 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT ojs_webhook_events_count CHECK (((cardinality(events) >= 1) AND (cardinality(events) <= 100))),
    CONSTRAINT ojs_webhook_secret_length CHECK (((octet_length(secret) >= 1) AND (octet_length(secret) <= 2048))),
    CONSTRAINT ojs_webhook_url_length CHECK ((octet_length(url) <= 2048))
);

--
-- Name: TABLE ojs_webhook; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ojs_webhook IS 'Webhook subscriptions: the events of ojs_event matching events are POSTed to url, in log order, at least once, signed with secret (HMAC-SHA256). Written through /ojs/v1/webhooks/subscriptions; delivered by the leader (broker::webhooks).';

--
-- Name: COLUMN ojs_webhook.id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_webhook.id IS 'The subscription id.';

--
-- Name: COLUMN ojs_webhook.url; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_webhook.url IS 'Where events are POSTed (http or https). Addresses in private, loopback and link-local ranges are refused at delivery unless OJS_WEBHOOK_ALLOW_PRIVATE is set.';

--
-- Name: COLUMN ojs_webhook.events; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_webhook.events IS 'Event type filters: an exact type (job.completed), a prefix (job.*), or * for every event.';

--
-- Name: COLUMN ojs_webhook.secret; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_webhook.secret IS 'The HMAC-SHA256 key of X-OJS-Signature, sealed under the server''s OJS_SECRET_KEY (v1:<key id>:<base64>; see src/secret.rs), never in clear. Shown only in the answer that created the subscription.';

--
-- Name: COLUMN ojs_webhook.metadata; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_webhook.metadata IS 'What the operator attached to the subscription (shown, never sent).';

--
-- Name: COLUMN ojs_webhook.active; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_webhook.active IS 'Whether events are delivered; false: paused by the operator or after the last retry failed (paused_reason).';

--
-- Name: COLUMN ojs_webhook.paused_reason; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_webhook.paused_reason IS 'Why the subscription is paused; null while active.';

--
-- Name: COLUMN ojs_webhook.paused_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_webhook.paused_at IS 'When it was paused; null while active.';

--
-- Name: COLUMN ojs_webhook.cursor_xid; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_webhook.cursor_xid IS 'Position (transaction) of the last event delivered or passed over; the next delivery is the first matching event after it.';

--
-- Name: COLUMN ojs_webhook.cursor_seq; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_webhook.cursor_seq IS 'Position (sequence) of the last event delivered or passed over.';

--
-- Name: COLUMN ojs_webhook.attempt; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_webhook.attempt IS 'Failed attempts at the next event (0: none).';

--
-- Name: COLUMN ojs_webhook.next_attempt_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_webhook.next_attempt_at IS 'When the deliverer next looks at the subscription (the backoff of a failed delivery).';

--
-- Name: COLUMN ojs_webhook.failure_count; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_webhook.failure_count IS 'Failed delivery attempts since the last success.';

--
-- Name: COLUMN ojs_webhook.delivered; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_webhook.delivered IS 'Events delivered (2xx) since the subscription was created.';

--
-- Name: COLUMN ojs_webhook.last_delivery_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_webhook.last_delivery_at IS 'When the last delivery attempt ended.';

--
-- Name: COLUMN ojs_webhook.last_delivery_status; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_webhook.last_delivery_status IS 'HTTP status of the last attempt (null: no answer).';

--
-- Name: COLUMN ojs_webhook.last_error; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_webhook.last_error IS 'What went wrong with the last failed attempt; null after a success.';

--
-- Name: COLUMN ojs_webhook.gap_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_webhook.gap_at IS 'When the pruner last deleted events matching the filter that had not been delivered yet (the subscription was paused or behind for longer than the event retention).';

--
-- Name: COLUMN ojs_webhook.gap_events; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_webhook.gap_events IS 'How many matching events were pruned before they could be delivered, in all.';

--
-- Name: COLUMN ojs_webhook.created_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_webhook.created_at IS 'When the subscription was created.';

--
-- Name: COLUMN ojs_webhook.updated_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_webhook.updated_at IS 'When the subscription was last changed by an operator.';

--
-- Name: ojs_worker; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ojs_worker (
    id text NOT NULL,
    state text DEFAULT 'running'::text NOT NULL,
    directive text DEFAULT ''::text NOT NULL,
    hostname text,
    pid integer,
    queues text[],
    concurrency integer,
    labels json,
    pool text,
    started_at timestamp with time zone,
    registered_at timestamp with time zone DEFAULT now() NOT NULL,
    last_heartbeat_at timestamp with time zone,
    last_seen_at timestamp with time zone DEFAULT now() NOT NULL,
    stale_at timestamp with time zone,
    strategy text,
    weights json,
    heartbeat_event_at timestamp with time zone,
    tenant text,
    CONSTRAINT ojs_worker_concurrency_non_negative CHECK (((concurrency IS NULL) OR (concurrency >= 0))),
    CONSTRAINT ojs_worker_directive_known CHECK ((directive = ANY (ARRAY[''::text, 'quiet'::text, 'terminate'::text]))),
    CONSTRAINT ojs_worker_id_format CHECK ((((char_length(id) >= 1) AND (char_length(id) <= 255)) AND (id !~ '[[:cntrl:]]'::text))),
    CONSTRAINT ojs_worker_state_known CHECK ((state = ANY (ARRAY['running'::text, 'quiet'::text, 'terminate'::text, 'drain'::text]))),
    CONSTRAINT ojs_worker_weights_is_object CHECK (((weights IS NULL) OR (json_typeof(weights) = 'object'::text)))
);

--
-- Name: TABLE ojs_worker; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ojs_worker IS 'Workers that have heartbeated or registered, with their self-reported state and the server directive for them.';

--
-- Name: COLUMN ojs_worker.id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_worker.id IS 'Worker id chosen by the worker (a new id per process).';

--
-- Name: COLUMN ojs_worker.state; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_worker.state IS 'State the worker last reported: running, quiet, terminate or drain.';

--
-- Name: COLUMN ojs_worker.directive; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_worker.directive IS 'Server-side directive for the worker: empty, quiet or terminate (directives only escalate).';

--
-- Name: COLUMN ojs_worker.hostname; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_worker.hostname IS 'Host name the worker reported.';

--
-- Name: COLUMN ojs_worker.pid; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_worker.pid IS 'Process id the worker reported.';

--
-- Name: COLUMN ojs_worker.queues; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_worker.queues IS 'Queues the worker said it consumes.';

--
-- Name: COLUMN ojs_worker.concurrency; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_worker.concurrency IS 'Jobs the worker said it runs at once.';

--
-- Name: COLUMN ojs_worker.labels; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_worker.labels IS 'Free-form labels the worker reported.';

--
-- Name: COLUMN ojs_worker.pool; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_worker.pool IS 'Worker pool the worker said it belongs to.';

--
-- Name: COLUMN ojs_worker.started_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_worker.started_at IS 'When the worker process says it started.';

--
-- Name: COLUMN ojs_worker.registered_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_worker.registered_at IS 'When the server first heard from the worker.';

--
-- Name: COLUMN ojs_worker.last_heartbeat_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_worker.last_heartbeat_at IS 'When the server last heard a heartbeat or registration; null for a worker only seen fetching (such workers are never declared stale).';

--
-- Name: COLUMN ojs_worker.last_seen_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_worker.last_seen_at IS 'When the server last heard from the worker in any way (fetch, heartbeat, registration); updated at most every few seconds by fetches.';

--
-- Name: COLUMN ojs_worker.stale_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_worker.stale_at IS 'When the worker was declared stale (no heartbeat for three intervals) and its jobs were released; cleared if it heartbeats again.';

--
-- Name: COLUMN ojs_worker.strategy; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_worker.strategy IS 'Fetch strategy the worker registered with (used when no pool configuration applies).';

--
-- Name: COLUMN ojs_worker.weights; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_worker.weights IS 'Queue weights the worker registered with, for the weighted strategy.';

--
-- Name: COLUMN ojs_worker.heartbeat_event_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_worker.heartbeat_event_at IS 'When the last sampled worker.heartbeat event was written (at most one a minute).';

--
-- Name: COLUMN ojs_worker.tenant; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_worker.tenant IS 'The tenant of the request that first named the worker (register, heartbeat or FETCH); null: none. Requests acting as another tenant cannot use or see it.';

--
-- Name: ojs_worker_status; Type: VIEW; Schema: public; Owner: -
--

CREATE VIEW public.ojs_worker_status AS
 SELECT w.id,
    public.ojs_worker_effective_state(w.directive, w.state, (w.stale_at IS NOT NULL)) AS effective_state,
    w.state AS reported_state,
    w.directive,
    w.hostname,
    w.pool,
    w.last_heartbeat_at,
    w.last_seen_at,
    w.stale_at,
    ( SELECT count(*) AS count
           FROM public.ojs_job j
          WHERE ((j.worker_id = w.id) AND (j.state = 'active'::public.ojs_job_state))) AS active_jobs
   FROM public.ojs_worker w;

--
-- Name: VIEW ojs_worker_status; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON VIEW public.ojs_worker_status IS 'Workers with their effective state and the number of jobs they hold.';

--
-- Name: COLUMN ojs_worker_status.id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_worker_status.id IS 'Worker id.';

--
-- Name: COLUMN ojs_worker_status.effective_state; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_worker_status.effective_state IS 'running, quiet, terminate, drain or stale.';

--
-- Name: COLUMN ojs_worker_status.reported_state; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_worker_status.reported_state IS 'What the worker last said about itself.';

--
-- Name: COLUMN ojs_worker_status.directive; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_worker_status.directive IS 'Server directive for the worker (empty, quiet, terminate).';

--
-- Name: COLUMN ojs_worker_status.hostname; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_worker_status.hostname IS 'Host the worker reported.';

--
-- Name: COLUMN ojs_worker_status.pool; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_worker_status.pool IS 'Pool the worker reported.';

--
-- Name: COLUMN ojs_worker_status.last_heartbeat_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_worker_status.last_heartbeat_at IS 'Last heartbeat or registration.';

--
-- Name: COLUMN ojs_worker_status.last_seen_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_worker_status.last_seen_at IS 'Last contact of any kind.';

--
-- Name: COLUMN ojs_worker_status.stale_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_worker_status.stale_at IS 'When it was declared stale, if it was.';

--
-- Name: COLUMN ojs_worker_status.active_jobs; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_worker_status.active_jobs IS 'Jobs it holds now.';

--
-- Name: ojs_workflow_node; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ojs_workflow_node (
    workflow_id uuid NOT NULL,
    idx integer NOT NULL,
    kind text NOT NULL,
    job_id uuid NOT NULL,
    type text NOT NULL,
    queue text NOT NULL,
    state text NOT NULL,
    result json,
    error jsonb,
    finished_at timestamp with time zone,
    name text,
    depends_on integer[],
    waiting_on integer DEFAULT 0 NOT NULL,
    CONSTRAINT ojs_workflow_node_idx_nonnegative CHECK ((idx >= 0)),
    CONSTRAINT ojs_workflow_node_kind_known CHECK ((kind = ANY (ARRAY['step'::text, 'job'::text, 'on_complete'::text, 'on_success'::text, 'on_failure'::text]))),
    CONSTRAINT ojs_workflow_node_state_known CHECK ((state = ANY (ARRAY['waiting'::text, 'released'::text, 'completed'::text, 'failed'::text, 'cancelled'::text, 'not_fired'::text]))),
    CONSTRAINT ojs_workflow_node_waiting_on_nonnegative CHECK ((waiting_on >= 0))
);

--
-- Name: TABLE ojs_workflow_node; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ojs_workflow_node IS 'One step, member job or callback of a workflow, with the outcome and result of its job (kept here: a completed job may be pruned before the workflow is read).';

--
-- Name: COLUMN ojs_workflow_node.workflow_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_workflow_node.workflow_id IS 'The workflow.';

--
-- Name: COLUMN ojs_workflow_node.idx; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_workflow_node.idx IS 'Position: the step or member index; callbacks follow the members (the job''s extra.workflow_step).';

--
-- Name: COLUMN ojs_workflow_node.kind; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_workflow_node.kind IS 'step (chain, dag), job (group or batch member), or the batch callback it is: on_complete, on_success, on_failure.';

--
-- Name: COLUMN ojs_workflow_node.job_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_workflow_node.job_id IS 'The node''s job (made with the workflow; held pending while the node waits).';

--
-- Name: COLUMN ojs_workflow_node.type; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_workflow_node.type IS 'The job type of the node''s job.';

--
-- Name: COLUMN ojs_workflow_node.queue; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_workflow_node.queue IS 'The queue of the node''s job.';

--
-- Name: COLUMN ojs_workflow_node.state; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_workflow_node.state IS 'waiting (its job held), released (its job enqueued; the job has the live state), completed, failed, cancelled (never run), or not_fired (a callback whose condition was false).';

--
-- Name: COLUMN ojs_workflow_node.result; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_workflow_node.result IS 'The completed job''s result, as the worker gave it.';

--
-- Name: COLUMN ojs_workflow_node.error; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_workflow_node.error IS 'The error the job ended with.';

--
-- Name: COLUMN ojs_workflow_node.finished_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_workflow_node.finished_at IS 'When the node''s job finished, or the node was dropped.';

--
-- Name: COLUMN ojs_workflow_node.name; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_workflow_node.name IS 'Dag only: the step''s id, as the definition named it.';

--
-- Name: COLUMN ojs_workflow_node.depends_on; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_workflow_node.depends_on IS 'Dag only: the indexes (idx) of the steps this one runs after, in the definition''s order (the order of its parent_results).';

--
-- Name: COLUMN ojs_workflow_node.waiting_on; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ojs_workflow_node.waiting_on IS 'Dag only: how many of depends_on have not completed yet; the step is released when it reaches 0.';

--
-- Name: ojs_job_done_default; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ojs_job_done ATTACH PARTITION public.ojs_job_done_default DEFAULT;

--
-- Name: ojs_lease id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ojs_lease ALTER COLUMN id SET DEFAULT nextval('public.ojs_lease_id_seq'::regclass);

--
-- Name: ojs_api_key ojs_api_key_hash_unique; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ojs_api_key
    ADD CONSTRAINT ojs_api_key_hash_unique UNIQUE (key_hash);

--
-- Name: ojs_api_key ojs_api_key_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ojs_api_key
    ADD CONSTRAINT ojs_api_key_pkey PRIMARY KEY (id);

--
-- Name: ojs_cron ojs_cron_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ojs_cron
    ADD CONSTRAINT ojs_cron_pkey PRIMARY KEY (name);

--
-- Name: ojs_cron_run ojs_cron_run_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ojs_cron_run
    ADD CONSTRAINT ojs_cron_run_pkey PRIMARY KEY (cron_name, scheduled_at);

--
-- Name: ojs_dispatch_second ojs_dispatch_second_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ojs_dispatch_second
    ADD CONSTRAINT ojs_dispatch_second_pkey PRIMARY KEY (second, queue, pool);

--
-- Name: ojs_event ojs_event_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ojs_event
    ADD CONSTRAINT ojs_event_pkey PRIMARY KEY (seq);

--
-- Name: ojs_fair_queue ojs_fair_queue_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ojs_fair_queue
    ADD CONSTRAINT ojs_fair_queue_pkey PRIMARY KEY (queue);

--
-- Name: ojs_job_checkpoint ojs_job_checkpoint_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ojs_job_checkpoint
    ADD CONSTRAINT ojs_job_checkpoint_pkey PRIMARY KEY (job_id);

--
-- Name: ojs_job ojs_job_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ojs_job
    ADD CONSTRAINT ojs_job_pkey PRIMARY KEY (id);

--
-- Name: ojs_job_progress ojs_job_progress_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ojs_job_progress
    ADD CONSTRAINT ojs_job_progress_pkey PRIMARY KEY (job_id);

--
-- Name: ojs_job_schema ojs_job_schema_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ojs_job_schema
    ADD CONSTRAINT ojs_job_schema_pkey PRIMARY KEY (job_type, major, minor, patch);

--
-- Name: ojs_job_signal ojs_job_signal_key_once; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ojs_job_signal
    ADD CONSTRAINT ojs_job_signal_key_once UNIQUE (job_id, key);

--
-- Name: ojs_job_signal ojs_job_signal_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ojs_job_signal
    ADD CONSTRAINT ojs_job_signal_pkey PRIMARY KEY (id);

--
-- Name: ojs_job_step ojs_job_step_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ojs_job_step
    ADD CONSTRAINT ojs_job_step_pkey PRIMARY KEY (job_id, name);

--
-- Name: ojs_job_wait ojs_job_wait_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ojs_job_wait
    ADD CONSTRAINT ojs_job_wait_pkey PRIMARY KEY (job_id);

--
-- Name: ojs_leader ojs_leader_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ojs_leader
    ADD CONSTRAINT ojs_leader_pkey PRIMARY KEY (name);

--
-- Name: ojs_lease_jobs ojs_lease_jobs_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ojs_lease_jobs
    ADD CONSTRAINT ojs_lease_jobs_pkey PRIMARY KEY (lease_id);

--
-- Name: ojs_lease ojs_lease_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ojs_lease
    ADD CONSTRAINT ojs_lease_pkey PRIMARY KEY (id);

--
-- Name: ojs_listener ojs_listener_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ojs_listener
    ADD CONSTRAINT ojs_listener_pkey PRIMARY KEY (instance_id);

--
-- Name: ojs_pool ojs_pool_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ojs_pool
    ADD CONSTRAINT ojs_pool_pkey PRIMARY KEY (name);

--
-- Name: ojs_queue_capacity ojs_queue_capacity_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ojs_queue_capacity
    ADD CONSTRAINT ojs_queue_capacity_pkey PRIMARY KEY (queue);

--
-- Name: ojs_queue_config_generation ojs_queue_config_generation_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ojs_queue_config_generation
    ADD CONSTRAINT ojs_queue_config_generation_pkey PRIMARY KEY (singleton);

--
-- Name: ojs_queue ojs_queue_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ojs_queue
    ADD CONSTRAINT ojs_queue_pkey PRIMARY KEY (name);

--
-- Name: ojs_rate_key ojs_rate_key_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ojs_rate_key
    ADD CONSTRAINT ojs_rate_key_pkey PRIMARY KEY (key);

--
-- Name: ojs_setting ojs_setting_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ojs_setting
    ADD CONSTRAINT ojs_setting_pkey PRIMARY KEY (singleton);

--
-- Name: ojs_system_hold ojs_system_hold_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ojs_system_hold
    ADD CONSTRAINT ojs_system_hold_pkey PRIMARY KEY (id);

--
-- Name: ojs_tenant ojs_tenant_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ojs_tenant
    ADD CONSTRAINT ojs_tenant_pkey PRIMARY KEY (id);

--
-- Name: ojs_webhook ojs_webhook_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ojs_webhook
    ADD CONSTRAINT ojs_webhook_pkey PRIMARY KEY (id);

--
-- Name: ojs_worker ojs_worker_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ojs_worker
    ADD CONSTRAINT ojs_worker_pkey PRIMARY KEY (id);

--
-- Name: ojs_workflow_node ojs_workflow_node_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ojs_workflow_node
    ADD CONSTRAINT ojs_workflow_node_pkey PRIMARY KEY (workflow_id, idx);

--
-- Name: ojs_workflow ojs_workflow_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ojs_workflow
    ADD CONSTRAINT ojs_workflow_pkey PRIMARY KEY (id);

--
-- Name: ojs_cron_due_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_cron_due_idx ON public.ojs_cron USING btree (next_run_at) WHERE (enabled AND (next_run_at IS NOT NULL));

--
-- Name: ojs_cron_run_fired_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_cron_run_fired_idx ON public.ojs_cron_run USING btree (fired_at);

--
-- Name: ojs_cron_run_open_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_cron_run_open_idx ON public.ojs_cron_run USING btree (cron_name, scheduled_at) WHERE open;

--
-- Name: ojs_dispatch_second_queue_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_dispatch_second_queue_idx ON public.ojs_dispatch_second USING btree (queue, second);

--
-- Name: ojs_event_batch_time_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_event_batch_time_idx ON public.ojs_event USING btree ("time") WHERE (job_ids IS NOT NULL);

--
-- Name: ojs_event_job_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_event_job_idx ON public.ojs_event USING btree (job_id, xid, seq) WHERE (job_id IS NOT NULL);

--
-- Name: ojs_event_order_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX ojs_event_order_idx ON public.ojs_event USING btree (xid, seq);

--
-- Name: ojs_event_queue_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_event_queue_idx ON public.ojs_event USING btree (queue, xid, seq) WHERE (queue IS NOT NULL);

--
-- Name: ojs_job_capacity_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_job_capacity_idx ON public.ojs_job USING btree (queue, created_at, seq) WHERE (capacity_tracked AND (phase <> 'taken'::public.ojs_job_phase));

--
-- Name: ojs_job_dead_letter_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_job_dead_letter_idx ON public.ojs_job USING btree (dead_lettered_at) WHERE (dead_lettered_at IS NOT NULL);

--
-- Name: ojs_job_dispatch_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_job_dispatch_idx ON public.ojs_job USING btree (queue, (
CASE
    WHEN (priority_aging_ms IS NULL) THEN priority
    ELSE 0
END), (((date_part('epoch'::text, (enqueued_at - '1970-01-01 00:00:00+00'::timestamp with time zone)) * (1000)::double precision) + (COALESCE((priority * priority_aging_ms), (0)::bigint))::double precision)), seq) WHERE ((phase = 'available'::public.ojs_job_phase) AND (rate_held IS NULL));

--
-- Name: ojs_job_done_completed_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_job_done_completed_idx ON ONLY public.ojs_job_done USING btree (completed_at);

--
-- Name: ojs_job_done_default_completed_at_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_job_done_default_completed_at_idx ON public.ojs_job_done_default USING btree (completed_at);

--
-- Name: ojs_job_done_id_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_job_done_id_idx ON ONLY public.ojs_job_done USING btree (id);

--
-- Name: ojs_job_done_default_id_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_job_done_default_id_idx ON public.ojs_job_done_default USING btree (id);

--
-- Name: ojs_job_done_tenant_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_job_done_tenant_idx ON ONLY public.ojs_job_done USING btree (tenant, completed_at) WHERE (tenant <> ''::text);

--
-- Name: INDEX ojs_job_done_tenant_idx; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON INDEX public.ojs_job_done_tenant_idx IS 'Finished jobs by tenant and completion time: the tenant statistics.';

--
-- Name: ojs_job_done_default_tenant_completed_at_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_job_done_default_tenant_completed_at_idx ON public.ojs_job_done_default USING btree (tenant, completed_at) WHERE (tenant <> ''::text);

--
-- Name: ojs_job_done_unique_key_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_job_done_unique_key_idx ON ONLY public.ojs_job_done USING btree (unique_key) WHERE (unique_key IS NOT NULL);

--
-- Name: ojs_job_done_default_unique_key_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_job_done_default_unique_key_idx ON public.ojs_job_done_default USING btree (unique_key) WHERE (unique_key IS NOT NULL);

--
-- Name: ojs_job_fair_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_job_fair_idx ON public.ojs_job USING btree (queue, priority, fair_key, seq) WHERE ((phase = 'available'::public.ojs_job_phase) AND (fair_key IS NOT NULL) AND (rate_held IS NULL));

--
-- Name: ojs_job_fair_tenant_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_job_fair_tenant_idx ON public.ojs_job USING btree (queue, priority, tenant, fair_key) WHERE ((phase = 'available'::public.ojs_job_phase) AND (fair_key IS NOT NULL) AND (rate_held IS NULL));

--
-- Name: ojs_job_rate_flight_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_job_rate_flight_idx ON public.ojs_job USING btree (rate_key, phase) WHERE ((rate_key IS NOT NULL) AND (rate_held IS NULL) AND in_flight);

--
-- Name: INDEX ojs_job_rate_flight_idx; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON INDEX public.ojs_job_rate_flight_idx IS 'A key''s jobs in flight (available or active, not held), by phase: what its concurrency counts.';

--
-- Name: ojs_job_rate_held_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_job_rate_held_idx ON public.ojs_job USING btree (rate_key, priority, enqueued_at, seq) WHERE ((phase = 'available'::public.ojs_job_phase) AND rate_held);

--
-- Name: INDEX ojs_job_rate_held_idx; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON INDEX public.ojs_job_rate_held_idx IS 'A key''s held jobs in release order.';

--
-- Name: ojs_job_retry_due_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_job_retry_due_idx ON public.ojs_job USING btree (next_retry_at) WHERE (phase = 'retryable'::public.ojs_job_phase);

--
-- Name: ojs_job_scheduled_due_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_job_scheduled_due_idx ON public.ojs_job USING btree (scheduled_at) WHERE (phase = 'scheduled'::public.ojs_job_phase);

--
-- Name: ojs_job_signal_job_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_job_signal_job_idx ON public.ojs_job_signal USING btree (job_id, name, id);

--
-- Name: ojs_job_tenant_flight_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_job_tenant_flight_idx ON public.ojs_job USING btree (tenant) WHERE ((tenant <> ''::text) AND in_flight AND (rate_held IS NOT FALSE));

--
-- Name: INDEX ojs_job_tenant_flight_idx; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON INDEX public.ojs_job_tenant_flight_idx IS 'A tenant''s jobs in flight (available or active, not held for the tenant): what its max_concurrency counts.';

--
-- Name: ojs_job_tenant_held_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_job_tenant_held_idx ON public.ojs_job USING btree (tenant, priority, enqueued_at, seq) WHERE ((rate_held = false) AND (phase = 'available'::public.ojs_job_phase));

--
-- Name: INDEX ojs_job_tenant_held_idx; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON INDEX public.ojs_job_tenant_held_idx IS 'A tenant''s held jobs (rate_held = false) in release order.';

--
-- Name: ojs_job_tenant_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_job_tenant_idx ON public.ojs_job USING btree (tenant, phase, queue) WHERE (tenant <> ''::text);

--
-- Name: INDEX ojs_job_tenant_idx; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON INDEX public.ojs_job_tenant_idx IS 'A tenant''s jobs by phase and queue: a tenant''s FETCH, its waiting jobs (max_queue_depth), its counts.';

--
-- Name: ojs_job_unique_key_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_job_unique_key_idx ON public.ojs_job USING btree (unique_key) WHERE (unique_key IS NOT NULL);

--
-- Name: ojs_job_waiting_deadline_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_job_waiting_deadline_idx ON public.ojs_job USING btree (LEAST(expires_at, claim_deadline_at, total_deadline_at)) WHERE ((phase <> 'taken'::public.ojs_job_phase) AND ((expires_at IS NOT NULL) OR (claim_deadline_at IS NOT NULL) OR (total_deadline_at IS NOT NULL)));

--
-- Name: ojs_lease_due_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_lease_due_idx ON public.ojs_lease USING btree (due_at);

--
-- Name: ojs_lease_pool_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_lease_pool_idx ON public.ojs_lease USING btree (pool) WHERE (pool IS NOT NULL);

--
-- Name: ojs_lease_queue_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_lease_queue_idx ON public.ojs_lease USING btree (queue);

--
-- Name: ojs_lease_worker_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_lease_worker_idx ON public.ojs_lease USING btree (worker_id) WHERE (worker_id IS NOT NULL);

--
-- Name: ojs_rate_key_check_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_rate_key_check_idx ON public.ojs_rate_key USING btree (next_check_at) WHERE (next_check_at IS NOT NULL);

--
-- Name: ojs_rate_window_key_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_rate_window_key_idx ON public.ojs_rate_window USING btree (key, started_at);

--
-- Name: ojs_webhook_due_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_webhook_due_idx ON public.ojs_webhook USING btree (next_attempt_at) WHERE active;

--
-- Name: ojs_worker_heartbeat_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_worker_heartbeat_idx ON public.ojs_worker USING btree (last_heartbeat_at) WHERE (stale_at IS NULL);

--
-- Name: ojs_workflow_created_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_workflow_created_idx ON public.ojs_workflow USING btree (created_at, id);

--
-- Name: ojs_workflow_ended_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_workflow_ended_idx ON public.ojs_workflow USING btree (COALESCE(completed_at, cancelled_at)) WHERE (state <> 'running'::text);

--
-- Name: ojs_workflow_node_job_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_workflow_node_job_idx ON public.ojs_workflow_node USING btree (job_id);

--
-- Name: ojs_workflow_tenant_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ojs_workflow_tenant_idx ON public.ojs_workflow USING btree (tenant, created_at) WHERE (tenant IS NOT NULL);

--
-- Name: INDEX ojs_workflow_tenant_idx; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON INDEX public.ojs_workflow_tenant_idx IS 'A tenant''s workflows by creation time.';

--
-- Name: ojs_job_done_default_completed_at_idx; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.ojs_job_done_completed_idx ATTACH PARTITION public.ojs_job_done_default_completed_at_idx;

--
-- Name: ojs_job_done_default_id_idx; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.ojs_job_done_id_idx ATTACH PARTITION public.ojs_job_done_default_id_idx;

--
-- Name: ojs_job_done_default_tenant_completed_at_idx; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.ojs_job_done_tenant_idx ATTACH PARTITION public.ojs_job_done_default_tenant_completed_at_idx;

--
-- Name: ojs_job_done_default_unique_key_idx; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.ojs_job_done_unique_key_idx ATTACH PARTITION public.ojs_job_done_default_unique_key_idx;

--
-- Name: ojs_job ojs_job_capacity_delete; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER ojs_job_capacity_delete AFTER DELETE ON public.ojs_job FOR EACH ROW WHEN ((old.capacity_tracked AND (old.state <> ALL (ARRAY['completed'::public.ojs_job_state, 'cancelled'::public.ojs_job_state, 'discarded'::public.ojs_job_state])))) EXECUTE FUNCTION public.ojs_job_capacity_delete();

--
-- Name: TRIGGER ojs_job_capacity_delete ON ojs_job; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TRIGGER ojs_job_capacity_delete ON public.ojs_job IS 'Runs ojs_job_capacity_delete() after a counted unfinished job is deleted, so ojs_queue_capacity stays exact.';

--
-- Name: ojs_job ojs_job_capacity_move; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER ojs_job_capacity_move BEFORE UPDATE OF state, queue ON public.ojs_job FOR EACH ROW WHEN ((old.capacity_tracked OR (old.state = ANY (ARRAY['completed'::public.ojs_job_state, 'cancelled'::public.ojs_job_state, 'discarded'::public.ojs_job_state])) OR (old.queue <> new.queue))) EXECUTE FUNCTION public.ojs_job_capacity_move();

--
-- Name: TRIGGER ojs_job_capacity_move ON ojs_job; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TRIGGER ojs_job_capacity_move ON public.ojs_job IS 'Runs ojs_job_capacity_move() for an update of state or queue of a counted job, a finished job or a job changing queue (the function checks the exact condition), so ojs_queue_capacity stays exact.';

--
-- Name: ojs_job ojs_job_ended_delete; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER ojs_job_ended_delete AFTER DELETE ON public.ojs_job FOR EACH ROW WHEN ((old.result_awaited AND (old.state <> ALL (ARRAY['completed'::public.ojs_job_state, 'cancelled'::public.ojs_job_state, 'discarded'::public.ojs_job_state])))) EXECUTE FUNCTION public.ojs_job_ended_notify();

--
-- Name: TRIGGER ojs_job_ended_delete ON ojs_job; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TRIGGER ojs_job_ended_delete ON public.ojs_job IS 'Announces an awaited job''s end by its removal from ojs_job (an ACK moving it to ojs_job_done, or a delete) on ojs_job_ended.';

--
-- Name: ojs_job ojs_job_ended_update; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER ojs_job_ended_update AFTER UPDATE OF state ON public.ojs_job FOR EACH ROW WHEN ((new.result_awaited AND (new.state = ANY (ARRAY['completed'::public.ojs_job_state, 'cancelled'::public.ojs_job_state, 'discarded'::public.ojs_job_state])) AND (old.state <> ALL (ARRAY['completed'::public.ojs_job_state, 'cancelled'::public.ojs_job_state, 'discarded'::public.ojs_job_state])))) EXECUTE FUNCTION public.ojs_job_ended_notify();

--
-- Name: TRIGGER ojs_job_ended_update ON ojs_job; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TRIGGER ojs_job_ended_update ON public.ojs_job IS 'Announces an awaited job''s end by a change of state (discarded, cancelled; a completion not moved by an ACK) on ojs_job_ended.';

--
-- Name: ojs_job ojs_job_fair_tag_insert; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER ojs_job_fair_tag_insert BEFORE INSERT ON public.ojs_job FOR EACH ROW WHEN ((new.tenant_fair AND (new.state = 'available'::public.ojs_job_state))) EXECUTE FUNCTION public.ojs_job_fair_tag();

--
-- Name: TRIGGER ojs_job_fair_tag_insert ON ojs_job; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TRIGGER ojs_job_fair_tag_insert ON public.ojs_job IS 'Runs ojs_job_fair_tag() for a job inserted as available with tenant_fair set (the enqueue sets it for the queues in ojs_fair_queue).';

--
-- Name: ojs_job ojs_job_fair_tag_update; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER ojs_job_fair_tag_update BEFORE UPDATE OF state, queue ON public.ojs_job FOR EACH ROW WHEN ((new.tenant_fair AND (new.state = 'available'::public.ojs_job_state))) EXECUTE FUNCTION public.ojs_job_fair_tag();

--
-- Name: TRIGGER ojs_job_fair_tag_update ON ojs_job; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TRIGGER ojs_job_fair_tag_update ON public.ojs_job IS 'Runs ojs_job_fair_tag() for an update of state or queue that leaves a tenant_fair job available; the function acts when the job became available (promotion, activation, release, manual retry) or moved to another queue while available.';

--
-- Name: ojs_job ojs_job_rate_gone; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER ojs_job_rate_gone AFTER DELETE ON public.ojs_job FOR EACH ROW WHEN (((old.rate_key IS NOT NULL) AND (old.rate_held IS NULL) AND (old.state = ANY (ARRAY['available'::public.ojs_job_state, 'active'::public.ojs_job_state])))) EXECUTE FUNCTION public.ojs_job_rate_gone();

--
-- Name: TRIGGER ojs_job_rate_gone ON ojs_job; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TRIGGER ojs_job_rate_gone ON public.ojs_job IS 'A keyed job in flight deleted (completed, purged) frees room in its key.';

--
-- Name: ojs_job ojs_job_rate_hold_insert; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER ojs_job_rate_hold_insert BEFORE INSERT ON public.ojs_job FOR EACH ROW WHEN ((new.rate_key IS NOT NULL)) EXECUTE FUNCTION public.ojs_job_rate_hold();

--
-- Name: TRIGGER ojs_job_rate_hold_insert ON ojs_job; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TRIGGER ojs_job_rate_hold_insert ON public.ojs_job IS 'A keyed job enqueued available is held until its key releases it (the enqueue releases at once what the key allows).';

--
-- Name: ojs_job ojs_job_rate_hold_update; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER ojs_job_rate_hold_update BEFORE UPDATE OF state ON public.ojs_job FOR EACH ROW WHEN ((new.rate_key IS NOT NULL)) EXECUTE FUNCTION public.ojs_job_rate_hold();

--
-- Name: TRIGGER ojs_job_rate_hold_update ON ojs_job; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TRIGGER ojs_job_rate_hold_update ON public.ojs_job IS 'A keyed job that becomes available again is held; one that leaves active frees room in its key.';

--
-- Name: ojs_job ojs_job_tenant_hold_insert; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER ojs_job_tenant_hold_insert BEFORE INSERT ON public.ojs_job FOR EACH ROW WHEN (((new.tenant <> ''::text) AND (new.state = 'available'::public.ojs_job_state))) EXECUTE FUNCTION public.ojs_job_tenant_hold();

--
-- Name: TRIGGER ojs_job_tenant_hold_insert ON ojs_job; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TRIGGER ojs_job_tenant_hold_insert ON public.ojs_job IS 'A job of a tenant with a concurrency limit is enqueued held; the enqueue releases what the tenant allows once it commits.';

--
-- Name: ojs_job ojs_job_tenant_hold_update; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER ojs_job_tenant_hold_update BEFORE UPDATE OF state ON public.ojs_job FOR EACH ROW WHEN (((new.tenant <> ''::text) AND (((new.state = 'available'::public.ojs_job_state) AND (old.state <> 'available'::public.ojs_job_state)) OR ((old.state = ANY (ARRAY['available'::public.ojs_job_state, 'active'::public.ojs_job_state])) AND (new.state <> ALL (ARRAY['available'::public.ojs_job_state, 'active'::public.ojs_job_state])))))) EXECUTE FUNCTION public.ojs_job_tenant_hold();

--
-- Name: TRIGGER ojs_job_tenant_hold_update ON ojs_job; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TRIGGER ojs_job_tenant_hold_update ON public.ojs_job IS 'A job of a tenant with a concurrency limit that becomes available again is held; a tenant''s job leaving flight (finished, failed, rescheduled) frees room for its held jobs.';

--
-- Name: ojs_job ojs_job_tenant_room_delete; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER ojs_job_tenant_room_delete AFTER DELETE ON public.ojs_job FOR EACH ROW WHEN (((old.tenant <> ''::text) AND (old.state = ANY (ARRAY['available'::public.ojs_job_state, 'active'::public.ojs_job_state])) AND (old.rate_held IS NOT FALSE))) EXECUTE FUNCTION public.ojs_job_tenant_room();

--
-- Name: TRIGGER ojs_job_tenant_room_delete ON ojs_job; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TRIGGER ojs_job_tenant_room_delete ON public.ojs_job IS 'A tenant''s job in flight deleted (completed by its ACK, purged) frees room for its held jobs.';

--
-- Name: ojs_job_done ojs_job_workflow_completed; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER ojs_job_workflow_completed AFTER INSERT ON public.ojs_job_done FOR EACH ROW WHEN (((new.extra -> 'workflow_id'::text) IS NOT NULL)) EXECUTE FUNCTION public.ojs_job_workflow_completed();

--
-- Name: TRIGGER ojs_job_workflow_completed ON ojs_job_done; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TRIGGER ojs_job_workflow_completed ON public.ojs_job_done IS 'A completed workflow job advances its workflow in the ACK''s transaction.';

--
-- Name: ojs_job ojs_job_workflow_ended; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER ojs_job_workflow_ended AFTER UPDATE OF state ON public.ojs_job FOR EACH ROW WHEN (((new.state = ANY (ARRAY['discarded'::public.ojs_job_state, 'cancelled'::public.ojs_job_state])) AND (old.state <> ALL (ARRAY['discarded'::public.ojs_job_state, 'cancelled'::public.ojs_job_state])) AND ((new.extra -> 'workflow_id'::text) IS NOT NULL))) EXECUTE FUNCTION public.ojs_job_workflow_ended();

--
-- Name: TRIGGER ojs_job_workflow_ended ON ojs_job; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TRIGGER ojs_job_workflow_ended ON public.ojs_job IS 'A workflow job that ends discarded or cancelled advances its workflow in the same transaction.';

--
-- Name: ojs_worker ojs_worker_events_after; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER ojs_worker_events_after AFTER INSERT ON public.ojs_worker FOR EACH ROW EXECUTE FUNCTION public.ojs_worker_events();

--
-- Name: TRIGGER ojs_worker_events_after ON ojs_worker; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TRIGGER ojs_worker_events_after ON public.ojs_worker IS 'Runs ojs_worker_events() after an insert: worker.started and worker.heartbeat for a new worker that heartbeated. An upsert that ends in an update does not fire it.';

--
-- Name: ojs_worker ojs_worker_events_before; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER ojs_worker_events_before BEFORE INSERT OR DELETE OR UPDATE ON public.ojs_worker FOR EACH ROW EXECUTE FUNCTION public.ojs_worker_events();

--
-- Name: TRIGGER ojs_worker_events_before ON ojs_worker; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TRIGGER ojs_worker_events_before ON public.ojs_worker IS 'Runs ojs_worker_events() before every insert, update and delete of a worker: writes worker.started, worker.quiet, worker.stopped and the sampled worker.heartbeat for updates and deletes, and stamps heartbeat_event_at on inserts.';

--
-- Name: ojs_lease_jobs ojs_lease_jobs_lease_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ojs_lease_jobs
    ADD CONSTRAINT ojs_lease_jobs_lease_id_fkey FOREIGN KEY (lease_id) REFERENCES public.ojs_lease(id) ON DELETE CASCADE;

--
-- Name: ojs_workflow_node ojs_workflow_node_workflow_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ojs_workflow_node
    ADD CONSTRAINT ojs_workflow_node_workflow_fkey FOREIGN KEY (workflow_id) REFERENCES public.ojs_workflow(id) ON DELETE CASCADE;

--
-- PostgreSQL database dump complete
--

