-- Cron entries (OJS cron extension) and their run ledger.
--
-- An entry enqueues a job from its template at every occurrence of its schedule. The leader's
-- cron firer picks entries whose next occurrence is due, and for each writes, in one
-- transaction: the occurrence's row in ojs_cron_run (its primary key, entry and instant, makes
-- a second job for one occurrence impossible, whatever the number of firers), the job, its
-- events, and the entry's next occurrence. A firer that dies mid-way leaves nothing; the next
-- one fires the occurrence. After downtime an entry fires once for all the occurrences it
-- missed (the latest one), then goes on with its schedule.

create table ojs_cron (
    name            text not null,
    expression      text not null,
    timezone        text not null default 'UTC',
    overlap_policy  text not null default 'skip',
    enabled         boolean not null default true,
    description     text,
    job_template    json not null,
    next_run_at     timestamptz,
    next_local      timestamp,
    last_run_at     timestamptz,
    run_count       bigint not null default 0,
    created_at      timestamptz not null default now(),
    updated_at      timestamptz not null default now(),
    constraint ojs_cron_pkey primary key (name),
    constraint ojs_cron_name_format check (name ~ '^[a-z0-9][a-z0-9.-]*$' and length(name) <= 255),
    constraint ojs_cron_overlap_policy_known
        check (overlap_policy in ('skip', 'allow', 'cancel_previous', 'enqueue')),
    constraint ojs_cron_disabled_not_due check (enabled or next_run_at is null),
    constraint ojs_cron_next_both_or_neither check ((next_run_at is null) = (next_local is null)),
    constraint ojs_cron_template_object check (json_typeof(job_template) = 'object')
);

-- The firer's scan: enabled entries by next occurrence.
create index ojs_cron_due_idx on ojs_cron (next_run_at) where enabled and next_run_at is not null;

comment on table ojs_cron is
    'Cron entries: a job template enqueued at every occurrence of a schedule. Managed with /ojs/v1/cron; fired by the leader (ojs_cron_run records each occurrence).';
comment on column ojs_cron.name is 'The entry''s name and key: lowercase letters, digits, ''-'' and ''.''.';
comment on column ojs_cron.expression is 'The schedule as registered: 5 cron fields, 6 with leading seconds, an @ alias or @every <duration>.';
comment on column ojs_cron.timezone is 'IANA zone the fields are read in (wall-clock time); @every ignores it.';
comment on column ojs_cron.overlap_policy is 'What an occurrence does while an earlier run is active: skip (no run), allow, cancel_previous (cancel the active runs first) or enqueue (run held pending until earlier runs finish).';
comment on column ojs_cron.enabled is 'A disabled entry fires nothing and has no next occurrence.';
comment on column ojs_cron.description is 'What the entry is for, as registered.';
comment on column ojs_cron.job_template is 'The enqueue body (POST /ojs/v1/jobs, without id) each run is made from; runs also get meta.cron_name and meta.cron_triggered_at.';
comment on column ojs_cron.next_run_at is 'When the next occurrence falls due; null when disabled or when the schedule never fires again. For a wall-clock time skipped by a change to daylight saving time, the instant of the change (it is then recorded as skipped, and the API shows the next occurrence that fires).';
comment on column ojs_cron.next_local is 'The next occurrence''s wall-clock time in the entry''s zone (UTC for @every).';
comment on column ojs_cron.last_run_at is 'The occurrence (scheduled instant) of the latest run enqueued.';
comment on column ojs_cron.run_count is 'Runs enqueued since the entry was registered.';
comment on column ojs_cron.created_at is 'When the entry was first registered.';
comment on column ojs_cron.updated_at is 'When the entry was last registered again, changed, enabled or disabled.';

create table ojs_cron_run (
    cron_name     text not null,
    scheduled_at  timestamptz not null,
    outcome       text not null,
    reason        text,
    job_id        uuid,
    missed        bigint not null default 0,
    error         jsonb,
    fired_at      timestamptz not null,
    open          boolean not null default false,
    held          boolean not null default false,
    constraint ojs_cron_run_pkey primary key (cron_name, scheduled_at),
    constraint ojs_cron_run_outcome_known check (
        (outcome = 'enqueued' and reason is null and job_id is not null)
        or (outcome = 'skipped' and reason in ('overlap_skip', 'enqueue_failed') and not open)
    ),
    constraint ojs_cron_run_held_is_open check (open or not held)
);

-- Runs that may not have finished: what overlap policies look at.
create index ojs_cron_run_open_idx on ojs_cron_run (cron_name, scheduled_at) where open;
-- Retention: the oldest rows first.
create index ojs_cron_run_fired_idx on ojs_cron_run (fired_at);

comment on table ojs_cron_run is
    'The run ledger: one row per occurrence of a cron entry that came due and existed, written in the transaction that enqueued its job (or decided not to). Its key makes a second job for one occurrence impossible. Kept OJS_CRON_HISTORY_RETENTION (7 days by default); rows of runs that may still be running are kept.';
comment on column ojs_cron_run.cron_name is 'The entry (rows outlive a deleted entry until retention removes them, so a re-registered entry never repeats an occurrence).';
comment on column ojs_cron_run.scheduled_at is 'The occurrence: the instant the schedule names (meta.cron_triggered_at of its job), not when it was fired.';
comment on column ojs_cron_run.outcome is 'enqueued (a job was made) or skipped (none was: see reason).';
comment on column ojs_cron_run.reason is 'Why a skipped occurrence made no job: overlap_skip (an earlier run was active) or enqueue_failed (the queue refused it: see error).';
comment on column ojs_cron_run.job_id is 'The job enqueued for the occurrence.';
comment on column ojs_cron_run.missed is 'Earlier occurrences this run stands for (fired once after downtime).';
comment on column ojs_cron_run.error is 'For enqueue_failed: the OJS error the enqueue got.';
comment on column ojs_cron_run.fired_at is 'When the occurrence was handled.';
comment on column ojs_cron_run.open is 'The job may not have finished: overlap policies check it; cleared once the job is seen finished or gone.';
comment on column ojs_cron_run.held is 'overlap_policy enqueue: the job waits pending until every earlier run of the entry has finished, then the firer makes it available.';

comment on table ojs_event is
    'Lifecycle events (OJS event vocabulary). Job and dead-letter events are written by an events CTE in the same SQL statement that changes the job, worker events by the ojs_worker_events triggers, queue changes (queue.created, queue.paused, ...) in the statement that makes them, cron.triggered and cron.skipped by the cron firer in the transaction of the occurrence, and queue.full, backpressure, pool and scheduling events by inserts of their own. Served by GET /ojs/v1/events and the SSE streams; pruned after 7 days or beyond 1,000,000 events (the defaults).';
