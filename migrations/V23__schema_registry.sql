-- The schema registry (`/ojs/v1/admin/schemas`, `/ojs/v1/schemas`): JSON Schemas of a job
-- type's `args`, one row per registered version. A PUSH of a type with schemas is checked
-- against the version it names (`version`), else the latest; how a failure is answered is the
-- row's `validation` mode (null: the server's `OJS_SCHEMA_VALIDATION`).
--
-- Versions are `N`, `N.N` or `N.N.N` (the conformance suites use integers, the extension
-- SemVer); `1`, `1.0` and `1.0.0` are one version, ordered by their numbers, and the text is
-- kept as registered. Every change bumps the configuration generation in its transaction, so
-- the enqueue statement refuses a job checked against an older set of schemas and the server
-- checks it again (`broker::configs`).

create table ojs_job_schema (
    job_type text not null,
    version text not null,
    major integer not null,
    minor integer not null,
    patch integer not null,
    schema jsonb not null,
    validation text,
    created_at timestamptz not null default now(),
    constraint ojs_job_schema_pkey primary key (job_type, major, minor, patch),
    constraint ojs_job_schema_version_numbers check (major >= 0 and minor >= 0 and patch >= 0),
    constraint ojs_job_schema_validation_known check (validation in ('strict', 'warn', 'off'))
);

comment on table ojs_job_schema is 'Schema registry: a JSON Schema for the args of each registered version of a job type. Written through /ojs/v1/admin/schemas (or /ojs/v1/schemas); kept until deleted. Changes bump ojs_queue_config_generation and write schema.registered / schema.deleted events.';
comment on column ojs_job_schema.job_type is 'The job type the schema describes.';
comment on column ojs_job_schema.version is 'The version as registered (N, N.N or N.N.N); a job names it in its top-level version attribute.';
comment on column ojs_job_schema.major is 'First number of the version (ordering and identity: 1, 1.0 and 1.0.0 are one version).';
comment on column ojs_job_schema.minor is 'Second number of the version (0 when absent).';
comment on column ojs_job_schema.patch is 'Third number of the version (0 when absent).';
comment on column ojs_job_schema.schema is 'The JSON Schema (draft 2020-12 unless its $schema names another), checked when registered.';
comment on column ojs_job_schema.validation is 'What a PUSH whose args fail it gets: strict (400 schema_validation), warn (accepted, with warnings), off (not checked); null: the server default (OJS_SCHEMA_VALIDATION).';
comment on column ojs_job_schema.created_at is 'When the version was registered.';
