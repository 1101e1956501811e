-- ojsd schema, part 6: deleting queues (queue configuration extension, seed 003 §5).

alter table ojs_job add column original_queue text;

comment on column ojs_job.original_queue is
    'The queue the job was in before that queue was deleted with strategy move.';

alter table ojs_queue add column deletion jsonb;

comment on column ojs_queue.deletion is
    'While draining: how the queue is being deleted ({"strategy", "target_queue", "jobs_affected"}), for its queue.deleted event once its last active job ends.';

-- Raised by an enqueue into a draining queue (SQLSTATE OJ001, the queue name as the message);
-- the server answers 409 conflict. Called only for queues found draining.
create function ojs_queue_draining_error(queue text) returns boolean
    language plpgsql
as $$
begin
    raise exception using errcode = 'OJ001', message = queue;
end;
$$;

comment on function ojs_queue_draining_error(text) is
    'Aborts an enqueue into a draining queue (SQLSTATE OJ001, message = queue name).';
