-- Checkpoints (OJS durable execution): the latest state a job saved, handed to its next
-- attempt so that a retried job resumes where it stopped instead of starting over.
--
-- A table of its own, like ojs_job_progress (V12): a save rewrites a small row here and leaves
-- ojs_job, its indexes and the statements that read it untouched. No foreign key, so finishing
-- or deleting a job pays no lookup here; the pruner removes the rows whose job is gone. Only
-- the latest checkpoint of a job is kept; `sequence` counts the saves since the row was made,
-- so a checkpoint deleted and saved again starts at 1 (the conformance suite asks for this).
--
-- The claim statement reads this table for the jobs it claims, and hands their checkpoint to
-- the FETCH that gets them. It reads it only when the table holds a row at all (a one-time
-- check per statement), so jobs that never checkpoint pay nothing for it.

create table ojs_job_checkpoint (
    job_id     uuid not null,
    state      jsonb not null,
    sequence   integer not null,
    size_bytes integer not null,
    attempt    integer not null,
    worker_id  text,
    created_at timestamptz not null default now(),
    constraint ojs_job_checkpoint_pkey primary key (job_id),
    constraint ojs_job_checkpoint_sequence_positive check (sequence > 0),
    constraint ojs_job_checkpoint_size_not_negative check (size_bytes >= 0)
);

comment on table ojs_job_checkpoint is
    'The latest checkpoint of each job (OJS durable execution: PUT or POST /ojs/v1/jobs/{id}/checkpoint), handed to the job''s next attempt by FETCH and kept, read-only, until the job itself is pruned. Rows of jobs that no longer exist are pruned.';
comment on column ojs_job_checkpoint.job_id is 'The job (ojs_job.id; no foreign key, see the table comment).';
comment on column ojs_job_checkpoint.state is 'The state the job saved: any JSON value.';
comment on column ojs_job_checkpoint.sequence is 'Saves since this row was made: 1 for the first, one more for each later save (a delete starts again at 1).';
comment on column ojs_job_checkpoint.size_bytes is 'The size of the saved state as the client sent it, in bytes.';
comment on column ojs_job_checkpoint.attempt is 'The job''s attempt when the state was saved.';
comment on column ojs_job_checkpoint.worker_id is 'The worker that saved it, when it said (or the worker holding the job).';
comment on column ojs_job_checkpoint.created_at is 'When this checkpoint was saved.';
