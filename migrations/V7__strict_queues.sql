-- ojsd schema, part 7: refusing enqueues to unknown queues when the deployment asks for it
-- (OJS_STRICT_QUEUES; queue configuration extension).

-- Raised by an enqueue into a queue that does not exist while strict_queues is on (SQLSTATE
-- OJ002, the queue name as the message); the server answers 400 invalid_request.
create function ojs_queue_unknown_error(queue text) returns boolean
    language plpgsql
as $$
begin
    raise exception using errcode = 'OJ002', message = queue;
end;
$$;

comment on function ojs_queue_unknown_error(text) is
    'Aborts an enqueue into a queue that does not exist while strict_queues is on (SQLSTATE OJ002, message = queue name).';
