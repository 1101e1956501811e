-- ojsd schema, part 5: queues as rows (queue configuration extension, seed 003). A queue exists
-- once a job was enqueued to it, it was paused or resumed, or it was created explicitly.

create type ojs_queue_state as enum ('active', 'paused', 'draining');

comment on type ojs_queue_state is
    'Queue lifecycle: active (fetched), paused (accepts jobs, FETCH skips it), draining (being deleted).';

create table ojs_queue (
    name        text             not null,
    state       ojs_queue_state  not null default 'active',
    config      jsonb            not null default '{}',
    created_at  timestamptz      not null default now(),
    updated_at  timestamptz      not null default now(),
    paused_at   timestamptz,
    resumed_at  timestamptz,

    constraint ojs_queue_pkey primary key (name),
    constraint ojs_queue_name_format
        check (name = '_default'
               or (char_length(name) between 1 and 128 and name ~ '^[a-z0-9][a-z0-9.-]*$')),
    constraint ojs_queue_config_is_object check (jsonb_typeof(config) = 'object'),
    constraint ojs_queue_paused_has_paused_at check (state <> 'paused' or paused_at is not null)
);

comment on table ojs_queue is
    'One row per queue: its lifecycle state and its own configuration (seed 003). Jobs name their queue by text; a queue without a row behaves as active with the default configuration.';
comment on column ojs_queue.name is 'Queue name (the job''s queue), or _default for the policy every queue inherits.';
comment on column ojs_queue.state is 'active, paused (FETCH skips it; enqueues are accepted) or draining.';
comment on column ojs_queue.config is 'The queue''s own configuration values (only those set explicitly); the resolved configuration layers them over _default and the system defaults.';
comment on column ojs_queue.created_at is 'When the queue came into existence (first enqueue, pause/resume, or explicit creation).';
comment on column ojs_queue.updated_at is 'Last change of state or configuration.';
comment on column ojs_queue.paused_at is 'When the queue was last paused (kept after a resume).';
comment on column ojs_queue.resumed_at is 'When the queue was last resumed.';

-- Every queue that has jobs today.
insert into ojs_queue (name)
select distinct queue from ojs_job
on conflict do nothing;
