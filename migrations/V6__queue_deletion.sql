-- ojsd schema, part 6: deleting queues (queue configuration extension, seed 003 §5).

alter table ojs_job add column original_queue text;

comment on column ojs_job.original_queue is
    'The queue the job was in before that queue was deleted with strategy move.';

alter table ojs_queue add column deletion jsonb;

comment on column ojs_queue.deletion is
    'While draining: how the queue is being deleted ({"strategy", "target_queue", "jobs_affected"}), for its queue.deleted event once its last active job ends.';

-- Aborts an enqueue the queue refuses, with the queue name as the message and `code` as the
-- SQLSTATE: OJ001 for a draining queue (409 conflict), OJ002 for a queue that does not exist
-- while strict queues are on (400 invalid_request). Called only for the queues that refuse.
create function ojs_queue_refused(queue text, code text) returns boolean
    language plpgsql
as $$
begin
    raise exception using errcode = code, message = queue;
end;
$$;

comment on function ojs_queue_refused(text, text) is
    'Aborts an enqueue its queue refuses (SQLSTATE OJ001: draining; OJ002: unknown under strict queues; message = queue name).';
