-- Maintenance mode (`/ojs/v1/admin/system/maintenance`), called the system hold in the code and
-- here, apart from the leader's maintenance services: while it is in force no replica hands out
-- work (FETCH answers empty, long polls wait), the promoter and the cron firer pause, and
-- enqueues, heartbeats, ACKs and NACKs go on.
--
-- One row. It is in force while `enabled` and `ends_at` (when set) is in the future; every
-- replica reads it every half second, and reads the end from `ends_at` itself, so a hold with
-- an end lifts on time everywhere. The first replica to find it past its end clears it and
-- writes `server.maintenance_ended` (the update is the lock: one event).

create table ojs_system_hold (
    id boolean primary key default true check (id),
    enabled boolean not null default false,
    reason text,
    started_at timestamptz,
    ends_at timestamptz,
    updated_at timestamptz not null default now(),
    constraint ojs_system_hold_started check (not enabled or started_at is not null),
    constraint ojs_system_hold_reason_length check (octet_length(reason) <= 1000)
);
insert into ojs_system_hold default values;

comment on table ojs_system_hold is 'Maintenance mode (the system hold): one row. In force while enabled and ends_at, if set, is in the future: no replica hands out work (FETCH answers empty, long polls wait), the promoter and the cron firer pause; enqueues, heartbeats, ACKs and NACKs go on. Set with POST /ojs/v1/admin/system/maintenance; changes write server.maintenance_started, server.maintenance_updated and server.maintenance_ended events.';
comment on column ojs_system_hold.id is 'Always true: the table has exactly one row.';
comment on column ojs_system_hold.enabled is 'Whether maintenance mode was turned on (and not yet off or past ends_at and cleared).';
comment on column ojs_system_hold.reason is 'What the operator said it is for (up to 1,000 bytes); null when off.';
comment on column ojs_system_hold.started_at is 'When it was turned on (kept when an operator changes the reason or end of a hold in force); null when off.';
comment on column ojs_system_hold.ends_at is 'When it lifts by itself; null: until turned off.';
comment on column ojs_system_hold.updated_at is 'When the row last changed.';
