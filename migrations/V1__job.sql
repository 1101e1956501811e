-- ojsd schema, part 1: jobs.
--
-- Conventions used by every migration:
--   * tables are singular and prefixed `ojs_`; timestamps are timestamptz named `<event>_at`;
--   * every invariant is a named constraint, so a violation names itself in logs and in psql;
--   * every table and column carries a comment, so `\d+ ojs_job` explains the schema;
--   * migrations are append-only: never edit one that has been applied anywhere.

-- The eight OJS job states, spelled exactly as the specification spells them.
create type ojs_job_state as enum (
    'scheduled',  -- waiting for scheduled_at
    'available',  -- ready to be fetched
    'pending',    -- staged; needs ACTIVATE
    'active',     -- claimed by a worker, reserved until visible_until
    'completed',  -- acknowledged (terminal)
    'retryable',  -- failed, waiting for next_retry_at
    'cancelled',  -- cancelled (terminal)
    'discarded'   -- permanently failed or dropped (terminal; dead-lettered when dead_lettered_at is set)
);

comment on type ojs_job_state is
    'Lifecycle state of an OJS job. Terminal: completed, cancelled, discarded.';

-- Timestamps inside JSON written by SQL (error history) use the server's wire format:
-- UTC, millisecond precision, 'Z' suffix.
create function ojs_timestamp_text(t timestamptz) returns text
    language sql stable strict parallel safe
    return to_char(t at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"');

comment on function ojs_timestamp_text(timestamptz) is
    'Formats a timestamp as OJS does on the wire: 2026-02-12T10:30:00.123Z.';

-- One entry of a job's error history: the error object plus the attempt it ended and when.
create function ojs_error_entry(attempt integer, error jsonb) returns jsonb
    language sql stable strict parallel safe
    return jsonb_build_object('attempt', attempt) || error
           || jsonb_build_object('occurred_at', ojs_timestamp_text(now()));

comment on function ojs_error_entry(integer, jsonb) is
    'Builds an errors[] entry: {attempt, <error fields>, occurred_at}.';

create table ojs_job (
    id                     uuid          not null,
    -- FIFO tie-breaker among jobs that entered `available` at the same instant (a batch shares
    -- one now(); client-supplied ids are not ordered by arrival).
    seq                    bigint        not null generated always as identity,
    type                   text          not null,
    queue                  text          not null,
    -- args/meta/result/extra use `json`, not `jsonb`: the server never queries inside them, and
    -- `json` keeps the client's text exactly (key order, number spelling) and is cheaper to write
    -- and to send back.
    args                   json          not null,
    meta                   json          not null default '{}',
    priority               integer       not null default 2,
    state                  ojs_job_state not null,
    attempt                integer       not null default 0,
    max_attempts           integer       not null,
    retry                  json          not null,
    timeout_ms             bigint        not null,
    visibility_timeout_ms  bigint,
    scheduled_at           timestamptz,
    scheduled_at_input     text,
    expires_at             timestamptz,
    expires_at_input       text,
    enqueue_ttl_secs       integer,
    total_timeout_secs     integer,
    tags                   text[],
    schema_uri             text,
    unique_policy          json,
    unique_key             text,
    extra                  json          not null default '{}',
    created_at             timestamptz   not null default now(),
    enqueued_at            timestamptz,
    activated_at           timestamptz,
    started_at             timestamptz,
    visible_until          timestamptz,
    reservation_ms         bigint,
    worker_id              text,
    next_retry_at          timestamptz,
    retry_delay_ms         bigint,
    completed_at           timestamptz,
    cancelled_at           timestamptz,
    discarded_at           timestamptz,
    dead_lettered_at       timestamptz,
    result                 json,
    error                  jsonb,
    errors                 jsonb         not null default '[]',

    constraint ojs_job_pkey primary key (id),
    constraint ojs_job_type_format
        check (char_length(type) between 1 and 255 and type ~ '^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$'),
    constraint ojs_job_queue_format
        check (char_length(queue) between 1 and 128 and queue ~ '^[a-z0-9][a-z0-9.-]*$'),
    constraint ojs_job_args_is_array check (json_typeof(args) = 'array'),
    constraint ojs_job_meta_is_object check (json_typeof(meta) = 'object'),
    constraint ojs_job_retry_is_object check (json_typeof(retry) = 'object'),
    constraint ojs_job_extra_is_object check (json_typeof(extra) = 'object'),
    constraint ojs_job_errors_is_array check (jsonb_typeof(errors) = 'array'),
    constraint ojs_job_priority_non_negative check (priority >= 0),
    constraint ojs_job_attempt_non_negative check (attempt >= 0),
    constraint ojs_job_max_attempts_non_negative check (max_attempts >= 0),
    constraint ojs_job_timeout_positive check (timeout_ms > 0),
    constraint ojs_job_visibility_timeout_positive
        check (visibility_timeout_ms is null or visibility_timeout_ms > 0),
    constraint ojs_job_enqueue_ttl_positive check (enqueue_ttl_secs is null or enqueue_ttl_secs > 0),
    constraint ojs_job_total_timeout_positive check (total_timeout_secs is null or total_timeout_secs > 0),
    constraint ojs_job_scheduled_at_input_has_value
        check (scheduled_at_input is null or scheduled_at is not null),
    constraint ojs_job_expires_at_input_has_value
        check (expires_at_input is null or expires_at is not null),
    constraint ojs_job_unique_key_has_policy check ((unique_key is null) = (unique_policy is null)),
    -- What each state guarantees about the row:
    constraint ojs_job_scheduled_has_scheduled_at
        check (state <> 'scheduled' or scheduled_at is not null),
    constraint ojs_job_available_has_enqueued_at
        check (state <> 'available' or enqueued_at is not null),
    constraint ojs_job_active_has_reservation
        check (state <> 'active' or (attempt >= 1 and started_at is not null
                                     and visible_until is not null and reservation_ms is not null)),
    constraint ojs_job_retryable_has_next_retry_at
        check (state <> 'retryable' or next_retry_at is not null),
    constraint ojs_job_completed_has_completed_at
        check (state <> 'completed' or completed_at is not null),
    constraint ojs_job_cancelled_has_cancelled_at
        check (state <> 'cancelled' or cancelled_at is not null),
    constraint ojs_job_discarded_has_timestamps
        check (state <> 'discarded' or (discarded_at is not null and completed_at is not null)),
    constraint ojs_job_dead_letter_is_discarded
        check (dead_lettered_at is null or state = 'discarded')
);

-- FETCH: "next available job of this queue", ordered exactly like the claim's ORDER BY so that
-- a claim is an index range scan that stops after LIMIT rows. Only available jobs are indexed,
-- so finished jobs never slow the hot path.
create index ojs_job_fetch_idx on ojs_job (queue, priority, enqueued_at, seq)
    where state = 'available';

-- Promotion of due scheduled and retryable jobs, per queue (FETCH promotes the queues it reads).
create index ojs_job_scheduled_due_idx on ojs_job (queue, scheduled_at) where state = 'scheduled';
create index ojs_job_retry_due_idx on ojs_job (queue, next_retry_at) where state = 'retryable';

-- Reservations whose visibility deadline passed (reclaim, and the ojs_job_overdue view).
create index ojs_job_reservation_idx on ojs_job (visible_until) where state = 'active';

-- Active jobs of a worker (heartbeats, worker health, releasing a dead worker's jobs).
create index ojs_job_worker_idx on ojs_job (worker_id) where state = 'active';

-- Jobs that must not start after expires_at.
create index ojs_job_expiry_idx on ojs_job (queue, expires_at)
    where expires_at is not null and state in ('scheduled', 'available', 'pending', 'retryable');

-- Unique-job lookups (strong uniqueness: checks are serialized per key by an advisory lock).
create index ojs_job_unique_key_idx on ojs_job (unique_key) where unique_key is not null;

comment on table ojs_job is
    'One row per OJS job: the envelope (known attributes as typed columns, unknown attributes in extra) and its lifecycle state.';
comment on column ojs_job.id is 'Job id: UUIDv7, client-supplied or generated.';
comment on column ojs_job.seq is 'Arrival sequence; FIFO tie-breaker among jobs with equal priority and enqueued_at.';
comment on column ojs_job.type is 'Job type, dot-namespaced lowercase segments (e.g. email.send); routes the job to a handler.';
comment on column ojs_job.queue is 'Queue the job is fetched from.';
comment on column ojs_job.args is 'Positional handler arguments, a JSON array stored verbatim.';
comment on column ojs_job.meta is 'Client metadata (trace ids, tenant, ...), a JSON object stored verbatim.';
comment on column ojs_job.priority is 'Priority within the queue: lower is more urgent; 0 first, default 2.';
comment on column ojs_job.state is 'Current lifecycle state.';
comment on column ojs_job.attempt is 'Number of claims so far; incremented by every FETCH that hands the job out.';
comment on column ojs_job.max_attempts is 'Effective retry.max_attempts: total attempts allowed (0 behaves like 1).';
comment on column ojs_job.retry is 'Effective retry policy (defaults merged in, durations in ISO 8601 form).';
comment on column ojs_job.timeout_ms is 'Resolved execution timeout in milliseconds.';
comment on column ojs_job.visibility_timeout_ms is 'Job-level reservation length in milliseconds; null uses the server default.';
comment on column ojs_job.scheduled_at is 'Earliest time the job may run (client scheduled_at / delay_until).';
comment on column ojs_job.scheduled_at_input is 'scheduled_at exactly as the client wrote it (echoed verbatim); null when given relatively.';
comment on column ojs_job.expires_at is 'Deadline after which the job must not start; it is discarded instead.';
comment on column ojs_job.expires_at_input is 'expires_at exactly as the client wrote it (echoed verbatim); null when given relatively.';
comment on column ojs_job.enqueue_ttl_secs is 'Seconds after created_at within which the job must be claimed for the first time.';
comment on column ojs_job.total_timeout_secs is 'Seconds after created_at by which the job must have finished, across all attempts.';
comment on column ojs_job.tags is 'Client tags, for filtering.';
comment on column ojs_job.schema_uri is 'Client schema attribute (a URI for args); preserved, not validated.';
comment on column ojs_job.unique_policy is 'Unique policy as given by the client (echoed as "unique").';
comment on column ojs_job.unique_key is 'SHA-256 fingerprint of the unique dimensions; jobs sharing it are duplicates.';
comment on column ojs_job.extra is 'Unknown top-level envelope attributes, kept verbatim and in the order received.';
comment on column ojs_job.created_at is 'When the server received the job.';
comment on column ojs_job.enqueued_at is 'Most recent entry into available; null while the job has never been available.';
comment on column ojs_job.activated_at is 'When a pending job was activated.';
comment on column ojs_job.started_at is 'Most recent claim; cleared when a reservation is lost.';
comment on column ojs_job.visible_until is 'Reservation deadline of the current claim (active jobs).';
comment on column ojs_job.reservation_ms is 'Reservation length chosen at the most recent claim; a heartbeat extends by it.';
comment on column ojs_job.worker_id is 'Worker that holds (or last held) the reservation, if it named itself.';
comment on column ojs_job.next_retry_at is 'When a retryable job becomes available again.';
comment on column ojs_job.retry_delay_ms is 'Backoff delay most recently computed, after jitter and caps.';
comment on column ojs_job.completed_at is 'Set on completed and on every transition to discarded.';
comment on column ojs_job.cancelled_at is 'Set on cancelled.';
comment on column ojs_job.discarded_at is 'Set on discarded.';
comment on column ojs_job.dead_lettered_at is 'Set when the job entered the dead-letter queue (a subset of discarded jobs).';
comment on column ojs_job.result is 'Handler result sent with ACK, verbatim.';
comment on column ojs_job.error is 'Most recent error {code, type, message, ...}; removed on ACK.';
comment on column ojs_job.errors is 'Error history, oldest first: one entry per failed attempt, with attempt and occurred_at.';

-- Operator views ---------------------------------------------------------------------------

create view ojs_job_counts as
    select queue,
           state,
           count(*)        as jobs,
           min(created_at) as oldest_created_at,
           max(created_at) as newest_created_at
      from ojs_job
     group by queue, state;

comment on view ojs_job_counts is 'Number of jobs per queue and state (scans the whole table; filter by queue for big tables).';
comment on column ojs_job_counts.queue is 'Queue name.';
comment on column ojs_job_counts.state is 'Job state.';
comment on column ojs_job_counts.jobs is 'Number of jobs of the queue in that state.';
comment on column ojs_job_counts.oldest_created_at is 'created_at of the oldest such job.';
comment on column ojs_job_counts.newest_created_at is 'created_at of the newest such job.';

create view ojs_job_overdue as
    select id,
           queue,
           type,
           worker_id,
           attempt,
           max_attempts,
           started_at,
           visible_until,
           now() - visible_until as overdue_by
      from ojs_job
     where state = 'active'
       and visible_until < now();

comment on view ojs_job_overdue is 'Active jobs whose reservation deadline has passed: the worker neither acknowledged, failed nor heartbeated them in time.';
comment on column ojs_job_overdue.id is 'Job id.';
comment on column ojs_job_overdue.queue is 'Queue name.';
comment on column ojs_job_overdue.type is 'Job type.';
comment on column ojs_job_overdue.worker_id is 'Worker holding the expired reservation, if known.';
comment on column ojs_job_overdue.attempt is 'Attempt number of the expired claim.';
comment on column ojs_job_overdue.max_attempts is 'Attempts allowed in total.';
comment on column ojs_job_overdue.started_at is 'When the expired claim was made.';
comment on column ojs_job_overdue.visible_until is 'The reservation deadline that passed.';
comment on column ojs_job_overdue.overdue_by is 'How long ago the deadline passed.';

create view ojs_dead_letter as
    select id,
           queue,
           type,
           attempt,
           error ->> 'code'    as error_code,
           error ->> 'message' as error_message,
           created_at,
           dead_lettered_at
      from ojs_job
     where state = 'discarded'
       and dead_lettered_at is not null;

comment on view ojs_dead_letter is 'Jobs in the dead-letter queue: discarded by their own failure with on_exhaustion = dead_letter (or the DEAD_LETTER directive).';
comment on column ojs_dead_letter.id is 'Job id.';
comment on column ojs_dead_letter.queue is 'Queue name.';
comment on column ojs_dead_letter.type is 'Job type.';
comment on column ojs_dead_letter.attempt is 'Attempts made.';
comment on column ojs_dead_letter.error_code is 'Code of the last error.';
comment on column ojs_dead_letter.error_message is 'Message of the last error.';
comment on column ojs_dead_letter.created_at is 'When the job was received.';
comment on column ojs_dead_letter.dead_lettered_at is 'When it entered the dead-letter queue.';
