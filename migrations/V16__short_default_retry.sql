-- The default retry policy is stored as '{}'.
--
-- Nearly every job has the default policy, and its 199 bytes of JSON were half of a job's row:
-- written at enqueue, again by every claim (an update writes the whole row) and again by the
-- move to ojs_job_done. The server now writes '{}' for it, and reads '{}' as the default
-- (OJS retry: max_attempts 3, initial_interval PT1S, backoff_coefficient 2.0, max_interval
-- PT5M, jitter, exponential, dead_letter on exhaustion); any other policy is stored in full as
-- before. Rows written before this version keep their long form, which reads the same: no row
-- is rewritten here.

comment on column ojs_job.retry is 'Effective retry policy (defaults merged in, durations in ISO 8601 form); ''{}'' is the default policy (max_attempts 3, initial_interval PT1S, backoff_coefficient 2.0, max_interval PT5M, jitter, exponential, dead_letter on exhaustion), which the server writes that way.';
comment on column ojs_job_done.retry is 'Effective retry policy (defaults merged in, durations in ISO 8601 form); ''{}'' is the default policy (max_attempts 3, initial_interval PT1S, backoff_coefficient 2.0, max_interval PT5M, jitter, exponential, dead_letter on exhaustion), which the server writes that way.';
