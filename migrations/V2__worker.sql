-- ojsd schema, part 2: workers.
--
-- Workers are remote HTTP clients. A worker becomes known when it heartbeats (or registers);
-- the row records what it said about itself and what the server wants from it.

create table ojs_worker (
    id                 text        not null,
    state              text        not null default 'running',
    directive          text        not null default '',
    hostname           text,
    pid                integer,
    queues             text[],
    concurrency        integer,
    labels             json,
    pool               text,
    started_at         timestamptz,
    registered_at      timestamptz not null default now(),
    last_heartbeat_at  timestamptz not null default now(),

    constraint ojs_worker_pkey primary key (id),
    constraint ojs_worker_id_format
        check (char_length(id) between 1 and 255 and id !~ '[[:cntrl:]]'),
    constraint ojs_worker_state_known check (state in ('running', 'quiet', 'terminate', 'drain')),
    constraint ojs_worker_directive_known check (directive in ('', 'quiet', 'terminate')),
    constraint ojs_worker_concurrency_non_negative check (concurrency is null or concurrency >= 0)
);

comment on table ojs_worker is 'Workers that have heartbeated or registered, with their self-reported state and the server directive for them.';
comment on column ojs_worker.id is 'Worker id chosen by the worker (a new id per process).';
comment on column ojs_worker.state is 'State the worker last reported: running, quiet, terminate or drain.';
comment on column ojs_worker.directive is 'Server-side directive for the worker: empty, quiet or terminate (directives only escalate).';
comment on column ojs_worker.hostname is 'Host name the worker reported.';
comment on column ojs_worker.pid is 'Process id the worker reported.';
comment on column ojs_worker.queues is 'Queues the worker said it consumes.';
comment on column ojs_worker.concurrency is 'Jobs the worker said it runs at once.';
comment on column ojs_worker.labels is 'Free-form labels the worker reported.';
comment on column ojs_worker.pool is 'Worker pool the worker said it belongs to.';
comment on column ojs_worker.started_at is 'When the worker process says it started.';
comment on column ojs_worker.registered_at is 'When the server first heard from the worker.';
comment on column ojs_worker.last_heartbeat_at is 'When the server last heard a heartbeat (or registration) from the worker.';
