-- ojsd schema, part 10: the job events of the hot statements are written per statement.
--
-- ENQUEUE, the claim of a FETCH and ACK used to write one ojs_event row per job, with a JSON
-- payload built in SQL; that was about half of those statements' time and WAL. They now write
-- one row per statement (per queue, job type and event type): the batch's job ids and the
-- per-job values that differ, in arrays. The server renders each job's OJS event from such a row
-- when it serves events, so the events API and the SSE streams are unchanged. Every other event
-- is still one row per event.
--
-- Positions: a row takes a block of 16,384 positions from the sequence (its seq and the next
-- 16,383 values); the i-th job of a batch row (from 0) is the event at seq + i. Event ids and
-- cursors are made of these positions as before, so they stay valid across this migration.
-- Statements with more jobs than a block write several rows.
--
-- Operators read events one row per event from the view ojs_event_log.

alter sequence ojs_event_seq_seq increment by 16384;

alter table ojs_event
    add column job_ids uuid[],
    add column trace_ids text[],
    add column attempts int4[],
    add column priorities int4[],
    add column unique_keys text[],
    add column scheduled_ats timestamptz[],
    add column durations_ms int8[],
    add column results json[],
    add column worker_id text,
    add constraint ojs_event_batch_shape check (
        job_ids is null
        or (job_id is null and cardinality(job_ids) between 1 and 16384));

-- The events of one job in batch rows (GET /ojs/v1/events?job_id=, job streams): a job's events
-- are written after it was, so a reader scans the batch rows from the job's created_at on (an
-- index per row, not per job: a GIN index on job_ids cost ~90 bytes and a microsecond per job).
create index ojs_event_batch_time_idx on ojs_event (time) where job_ids is not null;

comment on column ojs_event.job_ids is
    'Batch row: the jobs of the statement that wrote it, in job order; the i-th (from 1) is the event at seq + i - 1. Null for a row of one event.';
comment on column ojs_event.trace_ids is
    'Batch row: each job''s trace id (meta.trace_id, else the trace id of meta.traceparent), or null.';
comment on column ojs_event.attempts is 'Batch row: each job''s attempt (job.started, job.completed).';
comment on column ojs_event.priorities is 'Batch row: each job''s priority (job.enqueued).';
comment on column ojs_event.unique_keys is 'Batch row: each job''s unique key, or null (job.enqueued).';
comment on column ojs_event.scheduled_ats is 'Batch row: each job''s scheduled_at, or null (job.enqueued, job.scheduled).';
comment on column ojs_event.durations_ms is 'Batch row: each attempt''s duration in milliseconds (job.completed).';
comment on column ojs_event.results is 'Batch row: each job''s result when at most 64 KiB, else null (job.completed).';
comment on column ojs_event.worker_id is 'Batch row: the worker that claimed the jobs (job.started).';
comment on column ojs_event.seq is
    'Position of the row among all events; each row takes a block of 16,384 positions, and the events of a batch row are at seq, seq + 1, ... The event id sent to clients (evt_<UUIDv7>) is made of time and position.';

-- One row per event: batch rows expanded, each with the payload the server sends.
create view ojs_event_log as
select e.seq, e.xid, e.type, e.source, e.time, e.subject, e.job_id, e.queue, e.job_type,
       e.from_state, e.to_state, e.data
  from ojs_event e
 where e.job_ids is null
union all
select e.seq + b.n - 1, e.xid, e.type, e.source, e.time, b.job_id::text, b.job_id, e.queue,
       e.job_type, e.from_state, e.to_state,
       jsonb_build_object('job_id', b.job_id, 'job_type', e.job_type, 'queue', e.queue,
                          'state', e.to_state)
       || jsonb_strip_nulls(jsonb_build_object(
              'trace_id', b.trace_id, 'priority', b.priority, 'unique_key', b.unique_key,
              'worker_id', e.worker_id, 'attempt', b.attempt, 'duration_ms', b.duration_ms,
              'result', b.result::jsonb))
       || case when b.scheduled_at is not null
               then jsonb_build_object('scheduled_at',
                        to_char(b.scheduled_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
               else '{}' end
  from ojs_event e
 cross join lateral unnest(e.job_ids, e.trace_ids, e.attempts, e.priorities, e.unique_keys,
                           e.scheduled_ats, e.durations_ms, e.results)
       with ordinality as b(job_id, trace_id, attempt, priority, unique_key, scheduled_at,
                            duration_ms, result, n)
 where e.job_ids is not null;

comment on view ojs_event_log is
    'Every retained event, one row per event, in the shape of ojs_event before batch rows (V10): batch rows are expanded, with the data the server sends. Order by (xid, seq) for delivery order.';
comment on column ojs_event_log.seq is 'Position of the event (for a batch row''s events: the row''s seq plus the job''s index in it).';
comment on column ojs_event_log.xid is 'Transaction that wrote the event.';
comment on column ojs_event_log.type is 'Event type, e.g. job.completed.';
comment on column ojs_event_log.source is 'ojs://<service>/<component>/<instance> of the writer.';
comment on column ojs_event_log.time is 'When the change happened (the transaction time of the writer).';
comment on column ojs_event_log.subject is 'What the event is about: a job id, worker id, queue name, ...';
comment on column ojs_event_log.job_id is 'The job, for job events.';
comment on column ojs_event_log.queue is 'The queue, for job and queue events.';
comment on column ojs_event_log.job_type is 'The job''s type, for job events.';
comment on column ojs_event_log.from_state is 'State before a job transition.';
comment on column ojs_event_log.to_state is 'State after a job transition.';
comment on column ojs_event_log.data is 'The event''s data object, as the server sends it.';
