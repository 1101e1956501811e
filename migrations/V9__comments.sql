-- ojsd schema, part 9: comments only. No behaviour changes.
--
-- Applied migrations cannot be edited (refinery checks their checksums), so this migration
-- corrects what they left out or got wrong:
--   * the functions of V7 and V8 had no COMMENT ON FUNCTION;
--   * no trigger had a COMMENT ON TRIGGER;
--   * the V3 comment on ojs_event said events are written by triggers. Only worker events are.
-- migrations/README.md lists the other stale comments, which are SQL comments and not stored
-- in the database.

---------------------------------------------------------------------------------------------
-- Functions of V7 (queue bounds) and V8 (fair scheduling).
---------------------------------------------------------------------------------------------
comment on function ojs_job_size(json, json) is
    'Size a job counts for against its queue''s max_size_bytes: bytes of args plus bytes of meta, as stored. Used by the capacity triggers and when a queue becomes bounded or drops its oldest jobs; the enqueue statement computes the same sum from its input.';

comment on function ojs_job_capacity_move() is
    'Trigger function of ojs_job_capacity_move. Subtracts a counted job from its queue''s ojs_queue_capacity row when it leaves the unfinished states or the queue, adds it to its new queue''s row when it enters them or another queue and that queue is bounded; capacity_tracked then says whether it was added.';

comment on function ojs_job_capacity_delete() is
    'Trigger function of ojs_job_capacity_delete. Subtracts a deleted job that was counted and unfinished from its queue''s ojs_queue_capacity row.';

comment on function ojs_queue_full(text, bigint, bigint, bigint, bigint, text) is
    'Aborts an enqueue that would take a bounded queue past max_size or max_size_bytes (SQLSTATE OJ003; message = queue name; detail = JSON {depth, bound, bytes, bound_bytes, policy}, depth and bytes as before the enqueue). Called by the enqueue statement; the server then rejects, drops the oldest jobs or waits, per the policy.';

comment on function ojs_tenant_weight(ojs_fair_queue, text) is
    'Weight of a tenant in a tenant-fair queue: fair.weights->''tenant:<tenant>'', else fair.default_weight. Used by ojs_job_fair_tag and when a queue becomes tenant-fair (its available jobs are tagged then).';

comment on function ojs_job_fair_tag() is
    'Trigger function of ojs_job_fair_tag_insert and ojs_job_fair_tag_update. For a job that becomes available in a tenant-fair queue, sets tenant (meta.tenant_id, empty for none) and fair_key = max(smallest fair_key among the available jobs of its queue and priority, largest fair_key of its tenant among them) + 1 / weight. In a queue that is not tenant-fair it clears tenant_fair, tenant and fair_key.';

comment on function ojs_config_generation_locked() is
    'The queue configuration generation, read after taking advisory lock (7081, 1) shared until the transaction ends. The enqueue statement compares it with the generation its jobs were prepared from (SQLSTATE OJ004 when they differ); pool changes take the same lock exclusively.';

---------------------------------------------------------------------------------------------
-- Triggers.
---------------------------------------------------------------------------------------------
comment on trigger ojs_worker_events_before on ojs_worker is
    'Runs ojs_worker_events() before every insert, update and delete of a worker: writes worker.started, worker.quiet, worker.stopped and the sampled worker.heartbeat for updates and deletes, and stamps heartbeat_event_at on inserts.';

comment on trigger ojs_worker_events_after on ojs_worker is
    'Runs ojs_worker_events() after an insert: worker.started and worker.heartbeat for a new worker that heartbeated. An upsert that ends in an update does not fire it.';

comment on trigger ojs_job_capacity_move on ojs_job is
    'Runs ojs_job_capacity_move() when an update of state or queue takes a job into or out of the unfinished states, or to another queue, so ojs_queue_capacity stays exact.';

comment on trigger ojs_job_capacity_delete on ojs_job is
    'Runs ojs_job_capacity_delete() after a counted unfinished job is deleted, so ojs_queue_capacity stays exact.';

comment on trigger ojs_job_fair_tag_insert on ojs_job is
    'Runs ojs_job_fair_tag() for a job inserted as available with tenant_fair set (the enqueue sets it for the queues in ojs_fair_queue).';

comment on trigger ojs_job_fair_tag_update on ojs_job is
    'Runs ojs_job_fair_tag() when a tenant_fair job becomes available (promotion, activation, release, manual retry) or moves to another queue while available.';

---------------------------------------------------------------------------------------------
-- ojs_event: who writes events (the V3 comment said triggers).
---------------------------------------------------------------------------------------------
comment on table ojs_event is
    'Lifecycle events (OJS event vocabulary). Job and dead-letter events are written by an events CTE in the same SQL statement that changes the job, worker events by the ojs_worker_events triggers, queue changes (queue.created, queue.paused, ...) in the statement that makes them, and queue.full, backpressure, pool and scheduling events by inserts of their own. Served by GET /ojs/v1/events and the SSE streams; pruned after 7 days or beyond 1,000,000 events (the defaults).';

---------------------------------------------------------------------------------------------
-- Stored comments that went stale or cited documents outside the repository.
---------------------------------------------------------------------------------------------
comment on table ojs_queue is
    'One row per queue: its lifecycle state and its own configuration layer (queue configuration, over the _default row). Jobs name their queue by text; a queue without a row behaves as active with the default configuration.';

comment on table ojs_leader is
    'Leadership leases. The row named maintenance says which ojsd instance runs the maintenance services (promotion with dead-letter routing, reclaiming, expiry with draining-queue completion, stale workers, retention, the starvation watch). The lease is held while expires_at > now().';
