-- Webhooks (`/ojs/v1/webhooks/subscriptions`): each subscription is delivered the events of the
-- log (`ojs_event`) that match its filter, one at a time, in log order, at least once. Its
-- cursor is the position of the last event delivered (or skipped as not matching); the
-- leader's deliverer (`broker::webhooks`) reads the next events after it, POSTs each, and
-- moves the cursor only after a 2xx. A failed delivery is retried with backoff
-- (`next_attempt_at`, `attempt`); after the last retry the subscription is paused with the
-- reason, and resumes from the same event when it is turned on again. A cursor older than the
-- oldest retained event resumes from the oldest one: the pruner, deleting events a subscription
-- had not reached yet that match its filter, records the gap (`gap_at`, `gap_events`) and writes
-- `webhook.events_pruned`.

create table ojs_webhook (
    id uuid primary key,
    url text not null,
    events text[] not null,
    secret text not null,
    metadata jsonb not null default '{}',
    active boolean not null default true,
    paused_reason text,
    paused_at timestamptz,
    cursor_xid bigint not null,
    cursor_seq bigint not null,
    attempt integer not null default 0,
    next_attempt_at timestamptz not null default now(),
    failure_count integer not null default 0,
    delivered bigint not null default 0,
    last_delivery_at timestamptz,
    last_delivery_status integer,
    last_error text,
    gap_at timestamptz,
    gap_events bigint not null default 0,
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now(),
    constraint ojs_webhook_url_length check (octet_length(url) <= 2048),
    constraint ojs_webhook_events_count check (cardinality(events) between 1 and 100),
    constraint ojs_webhook_secret_length check (octet_length(secret) between 1 and 1024)
);

-- The deliverer's scan: active subscriptions by when they are due.
create index ojs_webhook_due_idx on ojs_webhook (next_attempt_at) where active;

comment on table ojs_webhook is 'Webhook subscriptions: the events of ojs_event matching events are POSTed to url, in log order, at least once, signed with secret (HMAC-SHA256). Written through /ojs/v1/webhooks/subscriptions; delivered by the leader (broker::webhooks).';
comment on column ojs_webhook.id is 'The subscription id.';
comment on column ojs_webhook.url is 'Where events are POSTed (http or https). Addresses in private, loopback and link-local ranges are refused at delivery unless OJS_WEBHOOK_ALLOW_PRIVATE is set.';
comment on column ojs_webhook.events is 'Event type filters: an exact type (job.completed), a prefix (job.*), or * for every event.';
comment on column ojs_webhook.secret is 'The HMAC-SHA256 key of X-OJS-Signature. Never shown after the subscription is created.';
comment on column ojs_webhook.metadata is 'What the operator attached to the subscription (shown, never sent).';
comment on column ojs_webhook.active is 'Whether events are delivered; false: paused by the operator or after the last retry failed (paused_reason).';
comment on column ojs_webhook.paused_reason is 'Why the subscription is paused; null while active.';
comment on column ojs_webhook.paused_at is 'When it was paused; null while active.';
comment on column ojs_webhook.cursor_xid is 'Position (transaction) of the last event delivered or passed over; the next delivery is the first matching event after it.';
comment on column ojs_webhook.cursor_seq is 'Position (sequence) of the last event delivered or passed over.';
comment on column ojs_webhook.attempt is 'Failed attempts at the next event (0: none).';
comment on column ojs_webhook.next_attempt_at is 'When the deliverer next looks at the subscription (the backoff of a failed delivery).';
comment on column ojs_webhook.failure_count is 'Failed delivery attempts since the last success.';
comment on column ojs_webhook.delivered is 'Events delivered (2xx) since the subscription was created.';
comment on column ojs_webhook.last_delivery_at is 'When the last delivery attempt ended.';
comment on column ojs_webhook.last_delivery_status is 'HTTP status of the last attempt (null: no answer).';
comment on column ojs_webhook.last_error is 'What went wrong with the last failed attempt; null after a success.';
comment on column ojs_webhook.gap_at is 'When the pruner last deleted events matching the filter that had not been delivered yet (the subscription was paused or behind for longer than the event retention).';
comment on column ojs_webhook.gap_events is 'How many matching events were pruned before they could be delivered, in all.';
comment on column ojs_webhook.created_at is 'When the subscription was created.';
comment on column ojs_webhook.updated_at is 'When the subscription was last changed by an operator.';
