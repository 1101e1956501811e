//! The schema registry's operations (see [`crate::job::schema`]). A change is in force on this
//! replica when the call returns, and on the others at their next enqueue after it commits:
//! it bumps the configuration generation, which every enqueue statement checks.

use super::Broker;
use crate::error::{Error, Result};
use crate::job::is_valid_type;
use crate::job::schema::{self, SchemaVersion, ValidationMode};
use crate::store;
use crate::store::schema::{NewSchema, SchemaRow};

/// What to register.
#[derive(Debug, Clone)]
pub struct SchemaRegistration {
    pub job_type: String,
    /// `N`, `N.N` or `N.N.N`.
    pub version: String,
    pub schema: serde_json::Value,
    /// `None`: the server's default (`OJS_SCHEMA_VALIDATION`).
    pub validation: Option<ValidationMode>,
}

impl Broker {
    /// Every registered version, by type, the latest first; only `job_type`'s when given.
    pub async fn schemas(&self, job_type: Option<&str>) -> Result<Vec<SchemaRow>> {
        Ok(match job_type {
            // Nothing is registered under a name that is not a job type (one with a NUL byte
            // could not even be looked up).
            Some(t) if !self.is_job_type(t) => Vec::new(),
            Some(t) => store::schema::of_type(&self.db, t).await?,
            None => store::schema::all(&self.db).await?,
        })
    }

    fn is_job_type(&self, job_type: &str) -> bool {
        is_valid_type(job_type, self.settings.limits.hyphenated_types)
    }

    /// The version `version` of `job_type` (its latest when `None`).
    pub async fn schema(&self, job_type: &str, version: Option<&str>) -> Result<SchemaRow> {
        let key = version.map(|v| self.schema_version(v)).transpose()?;
        let found = match self.is_job_type(job_type) {
            true => store::schema::get(&self.db, job_type, key).await?,
            false => None,
        };
        found.ok_or_else(|| Error::SchemaNotFound {
            job_type: job_type.to_owned(),
            version: version.map(str::to_owned),
        })
    }

    /// Registers a schema version: the type must be a valid job type, the version new, and the
    /// schema a JSON Schema this server can compile.
    pub async fn register_schema(&self, r: &SchemaRegistration) -> Result<SchemaRow> {
        if !self.is_job_type(&r.job_type) {
            return Err(Error::InvalidRequest {
                field: "type".to_owned(),
                message: format!(
                    "'{}' is not a valid job type: dot-separated lowercase segments, each starting with a letter",
                    r.job_type
                ),
            });
        }
        let key = self.schema_version(&r.version)?;
        schema::compile(&r.schema).map_err(|e| Error::InvalidRequest {
            field: "$.schema".to_owned(),
            message: format!("schema {e}"),
        })?;
        let registered = store::schema::register(
            &self.db,
            &NewSchema {
                job_type: &r.job_type,
                version: &r.version,
                key,
                schema: &r.schema,
                validation: r.validation,
            },
        )
        .await?
        .ok_or_else(|| Error::SchemaExists {
            job_type: r.job_type.clone(),
            version: r.version.clone(),
        })?;
        self.configs.reload(&self.db).await?;
        Ok(registered)
    }

    /// Deletes a schema version; jobs of the type are then checked against the latest left.
    pub async fn delete_schema(&self, job_type: &str, version: &str) -> Result<SchemaRow> {
        let key = self.schema_version(version)?;
        let deleted = match self.is_job_type(job_type) {
            true => store::schema::delete(&self.db, job_type, key).await?,
            false => None,
        };
        let deleted = deleted.ok_or_else(|| Error::SchemaNotFound {
            job_type: job_type.to_owned(),
            version: Some(version.to_owned()),
        })?;
        self.configs.reload(&self.db).await?;
        Ok(deleted)
    }

    fn schema_version(&self, version: &str) -> Result<SchemaVersion> {
        SchemaVersion::parse(version).ok_or_else(|| Error::InvalidRequest {
            field: "version".to_owned(),
            message: format!(
                "'{version}' is not a schema version: N, N.N or N.N.N (for example 2 or 2.1.0)"
            ),
        })
    }
}
