-- ojsd schema, part 4: the priority extension (seed 000). Priority aging, and the dispatch
-- order that both plain priority and aged priority share.

---------------------------------------------------------------------------------------------
-- Priority aging (seed 000 §8.2, contract §5.0.1). A job enqueued while aging is configured
-- records the interval in effect: one step of urgency is gained per `priority_aging_ms` of
-- waiting. NULL means no aging. Changing the configuration applies to jobs enqueued afterwards;
-- stored rows are never rewritten.
---------------------------------------------------------------------------------------------
alter table ojs_job
    add column priority_aging_ms int8
        constraint ojs_job_priority_aging_positive
        check (priority_aging_ms is null or priority_aging_ms > 0);

comment on column ojs_job.priority_aging_ms is
    'Priority aging interval (ms) in effect when the job was enqueued; NULL = no aging.';

---------------------------------------------------------------------------------------------
-- Dispatch order. Without aging: priority, then the time the job became available, then seq.
-- With aging the effective priority is `priority - waited / interval`; ordering jobs by it is
-- the same as ordering them by `became_available + priority * interval`, a value fixed when the
-- job becomes available, so an index can hold it and FETCH stays a range scan however large
-- the backlog. Both orders live in one index as (class, rank, seq):
--   class = priority without aging, 0 with aging;
--   rank  = milliseconds since 1970 of enqueued_at, plus priority * interval with aging.
-- The claim orders by exactly these expressions (src/store/job.rs, `claim`).
---------------------------------------------------------------------------------------------
create index ojs_job_dispatch_idx on ojs_job (
    queue,
    (case when priority_aging_ms is null then priority else 0 end),
    (date_part('epoch', enqueued_at - timestamptz '1970-01-01 00:00:00+00') * 1000
     + coalesce(priority * priority_aging_ms, 0)),
    seq)
    where state = 'available';

drop index ojs_job_fetch_idx;

