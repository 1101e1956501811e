-- ojsd schema, part 12: job progress, as workers report it while they run a job.
--
-- A table of its own rather than columns of ojs_job: a report rewrites a small row here and
-- leaves the hot table, its indexes and the statements that read it untouched. There is no
-- foreign key to ojs_job, so finishing or deleting a job (the ACK path) pays no lookup here;
-- the pruner removes the rows whose job is gone.

create table ojs_job_progress (
    job_id     uuid not null,
    attempt    integer not null,
    worker_id  text,
    progress   double precision not null,
    message    text,
    data       jsonb,
    updated_at timestamptz not null default now(),
    constraint ojs_job_progress_pkey primary key (job_id),
    constraint ojs_job_progress_in_range check (progress >= 0 and progress <= 1)
);

comment on table ojs_job_progress is
    'The latest progress report of each job, for the attempt that made it (OJS progress: PUT /ojs/v1/jobs/{id}/progress, POST /ojs/v1/workers/progress). Rows of jobs that no longer exist are pruned.';
comment on column ojs_job_progress.job_id is 'The job (ojs_job.id; no foreign key, see the table comment).';
comment on column ojs_job_progress.attempt is 'The attempt that reported: a report of an earlier attempt is not the current attempt''s progress.';
comment on column ojs_job_progress.worker_id is 'The worker that reported, when it said.';
comment on column ojs_job_progress.progress is 'Fraction done, 0 to 1 (reports outside are clamped; percentages are divided by 100).';
comment on column ojs_job_progress.message is 'What the worker said it is doing, if anything.';
comment on column ojs_job_progress.data is 'Structured detail the worker attached (a JSON object), if any.';
comment on column ojs_job_progress.updated_at is 'When the latest report arrived.';
