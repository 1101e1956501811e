-- ojsd schema, part 13: API keys.
--
-- A client authenticates with `Authorization: Bearer <key>`. Only a SHA-256 of each key is
-- stored: keys are 256 random bits, so a fast hash is enough (there is nothing to brute-force),
-- and a leaked table does not leak a usable key. Every replica reloads the active keys every
-- second, so a created or revoked key takes effect everywhere within about a second.

create table ojs_api_key (
    id          uuid not null,
    name        text not null default '',
    role        text not null,
    queues      text[],
    key_hash    bytea not null,
    key_prefix  text not null,
    created_at  timestamptz not null default now(),
    revoked_at  timestamptz,
    constraint ojs_api_key_pkey primary key (id),
    constraint ojs_api_key_hash_unique unique (key_hash),
    constraint ojs_api_key_role_known check (role in ('producer', 'worker', 'admin')),
    constraint ojs_api_key_hash_is_sha256 check (length(key_hash) = 32),
    constraint ojs_api_key_queues_listed check (queues is null or cardinality(queues) between 1 and 100),
    constraint ojs_api_key_name_short check (length(name) <= 200)
);

comment on table ojs_api_key is
    'API keys (Authorization: Bearer). Create, list and revoke them with `ojsd keys` or /ojs/v1/admin/keys; replicas reload the active ones every second.';
comment on column ojs_api_key.id is 'The key''s id (UUIDv7), which names it in lists and revocations; not secret.';
comment on column ojs_api_key.name is 'What the operator called the key (e.g. the service that uses it).';
comment on column ojs_api_key.role is 'producer (enqueue, read and cancel jobs), worker (the worker protocol) or admin (everything).';
comment on column ojs_api_key.queues is 'The queues the key may use; null: every queue.';
comment on column ojs_api_key.key_hash is 'SHA-256 of the key; the key itself is shown once, when created, and never stored.';
comment on column ojs_api_key.key_prefix is 'The key''s first characters, to recognise it in lists without revealing it.';
comment on column ojs_api_key.created_at is 'When the key was created.';
comment on column ojs_api_key.revoked_at is 'When the key was revoked; a revoked key authenticates nothing.';
