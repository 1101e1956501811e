-- Which replicas listen for notifications, kept in a table instead of read from
-- pg_stat_activity (by the listening connection's application_name, until now). A replica
-- sends a NOTIFY only while another one listens: it used to find them in pg_stat_activity, which
-- a connection pooler hides (the sessions there are the pooler's, under its names) and which a
-- managed Postgres may restrict to its own role's sessions. Each replica's listening connection
-- registers here when its LISTEN is in place, renews its row with every ping (every 2 s), and
-- removes it when the replica stops; a row not renewed for 10 s (a replica that died) no longer
-- counts, and the next registration removes rows an hour old.
--
-- Upgrade: adds a table. Replicas of earlier releases go on looking in pg_stat_activity (the
-- listening connection keeps its name `ojsd-listener`, so they still see this release's); this
-- release does not see theirs, so while both run, an enqueue through a new replica may reach an
-- old replica's long polls at its next poll rather than at once.

create table ojs_listener (
    instance_id text primary key,
    backend_pid integer not null,
    started_at  timestamptz not null default now(),
    seen_at     timestamptz not null default now(),
    constraint ojs_listener_instance_id_length check (length(instance_id) between 1 and 255)
);

comment on table ojs_listener is
    'The replicas whose notification listener is connected (LISTEN in place), one row per replica: registered by the listener when it starts listening, renewed with each of its pings (every 2 s), deleted when the replica stops. An enqueue sends a NOTIFY only while another replica''s row was renewed in the last 10 s. Read instead of pg_stat_activity, which a connection pooler or a managed Postgres may hide (migration V34).';
comment on column ojs_listener.instance_id is 'The replica (OJS_INSTANCE_ID; unique per replica).';
comment on column ojs_listener.backend_pid is 'The backend pid of its listening connection.';
comment on column ojs_listener.started_at is 'When this listening connection registered.';
comment on column ojs_listener.seen_at is 'When it last answered a ping: a row older than 10 s is a listener that is gone.';
