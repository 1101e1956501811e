//! `ojs_job_schema`: the schema registry (migration V23). Every change bumps the configuration
//! generation in its statement, so the enqueue statement refuses a job checked against the
//! schemas of an older generation (see `broker::configs`), and writes `schema.registered` or
//! `schema.deleted`.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

use crate::job::schema::{SchemaVersion, Stored, ValidationMode};

/// One registered version.
#[derive(Debug, Clone)]
pub struct SchemaRow {
    pub job_type: String,
    /// As registered.
    pub version: String,
    pub schema: serde_json::Value,
    /// `None`: the server's default.
    pub validation: Option<String>,
    pub created_at: DateTime<Utc>,
}

impl SchemaRow {
    /// The row as the registry compiles it.
    pub fn stored(self) -> Stored {
        Stored {
            validation: self
                .validation
                .as_deref()
                .and_then(ValidationMode::from_name),
            job_type: self.job_type,
            version: self.version,
            schema: self.schema,
        }
    }
}

/// Every registered version, by type, the latest first.
pub async fn all(db: impl PgExecutor<'_>) -> Result<Vec<SchemaRow>, sqlx::Error> {
    sqlx::query_as!(
        SchemaRow,
        r#"
        select job_type, version, schema, validation, created_at
          from ojs_job_schema
         order by job_type, major desc, minor desc, patch desc
        "#
    )
    .fetch_all(db)
    .await
}

/// Every registered version of `job_type`, the latest first.
pub async fn of_type(
    db: impl PgExecutor<'_>,
    job_type: &str,
) -> Result<Vec<SchemaRow>, sqlx::Error> {
    sqlx::query_as!(
        SchemaRow,
        r#"
        select job_type, version, schema, validation, created_at
          from ojs_job_schema
         where job_type = $1
         order by major desc, minor desc, patch desc
        "#,
        job_type,
    )
    .fetch_all(db)
    .await
}

/// The version `version` of `job_type`, or its latest when `version` is `None`.
pub async fn get(
    db: impl PgExecutor<'_>,
    job_type: &str,
    version: Option<SchemaVersion>,
) -> Result<Option<SchemaRow>, sqlx::Error> {
    let v = version.unwrap_or(SchemaVersion {
        major: -1,
        minor: -1,
        patch: -1,
    });
    sqlx::query_as!(
        SchemaRow,
        r#"
        select job_type, version, schema, validation, created_at
          from ojs_job_schema
         where job_type = $1
           and ($2 < 0 or (major, minor, patch) = ($2, $3, $4))
         order by major desc, minor desc, patch desc
         limit 1
        "#,
        job_type,
        v.major,
        v.minor,
        v.patch,
    )
    .fetch_optional(db)
    .await
}

/// What to register.
#[derive(Debug, Clone)]
pub struct NewSchema<'a> {
    pub job_type: &'a str,
    /// As the client wrote it.
    pub version: &'a str,
    pub key: SchemaVersion,
    pub schema: &'a serde_json::Value,
    pub validation: Option<ValidationMode>,
}

/// Registers a version; `None` when the type already has it (`1`, `1.0` and `1.0.0` are one
/// version). Bumps the configuration generation and writes `schema.registered`.
pub async fn register(
    db: impl PgExecutor<'_>,
    s: &NewSchema<'_>,
) -> Result<Option<SchemaRow>, sqlx::Error> {
    sqlx::query_as!(
        SchemaRow,
        r#"
        with registered as (
            insert into ojs_job_schema (job_type, version, major, minor, patch, schema, validation)
            values ($1, $2, $3, $4, $5, $6, $7)
            on conflict (job_type, major, minor, patch) do nothing
            returning job_type, version, schema, validation, created_at
        ),
        bumped as (
            update ojs_queue_config_generation set generation = generation + 1
             where exists (select from registered)
        ),
        logged as (
            insert into ojs_event (type, subject, data)
            select 'schema.registered', r.job_type,
                   jsonb_build_object('job_type', r.job_type, 'version', r.version,
                                      'validation', r.validation)
              from registered r
        )
        select job_type as "job_type!", version as "version!", schema as "schema!",
               validation, created_at as "created_at!"
          from registered
        "#,
        s.job_type,
        s.version,
        s.key.major,
        s.key.minor,
        s.key.patch,
        s.schema,
        s.validation.map(ValidationMode::as_str),
    )
    .fetch_optional(db)
    .await
}

/// Deletes a version; `None` when there is no such version. Bumps the configuration
/// generation and writes `schema.deleted`.
pub async fn delete(
    db: impl PgExecutor<'_>,
    job_type: &str,
    version: SchemaVersion,
) -> Result<Option<SchemaRow>, sqlx::Error> {
    sqlx::query_as!(
        SchemaRow,
        r#"
        with deleted as (
            delete from ojs_job_schema
             where job_type = $1 and (major, minor, patch) = ($2, $3, $4)
            returning job_type, version, schema, validation, created_at
        ),
        bumped as (
            update ojs_queue_config_generation set generation = generation + 1
             where exists (select from deleted)
        ),
        logged as (
            insert into ojs_event (type, subject, data)
            select 'schema.deleted', d.job_type,
                   jsonb_build_object('job_type', d.job_type, 'version', d.version)
              from deleted d
        )
        select job_type as "job_type!", version as "version!", schema as "schema!",
               validation, created_at as "created_at!"
          from deleted
        "#,
        job_type,
        version.major,
        version.minor,
        version.patch,
    )
    .fetch_optional(db)
    .await
}

/// Deletes every schema (test hook reset only; the reset reloads the configuration).
pub async fn delete_all(db: impl PgExecutor<'_>) -> Result<(), sqlx::Error> {
    sqlx::query!("delete from ojs_job_schema")
        .execute(db)
        .await?;
    Ok(())
}
