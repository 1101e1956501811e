//! The schema registry over HTTP (admin), in two bindings over one store (see
//! [`crate::job::schema`] for what a schema checks):
//!
//! - `/ojs/v1/admin/schemas/...`, as the conformance suite and the admin UI call it: `PUT` and
//!   `GET`/`DELETE` `/{type}/{version}`, `GET /{type}` (the latest), `GET /{type}/versions`,
//!   `GET /` (every version of every type). Answers are the schema object itself.
//! - `/ojs/v1/schemas/...`, the extension's own: `POST /` with `job_type` and `version` in the
//!   body, `GET /{type}`, `GET /{type}/versions`, `DELETE /{type}/{version}`. Answers wrap the
//!   schema object as `{"schema": ...}`.
//!
//! A version is `N`, `N.N` or `N.N.N`, shown as a number when registered as one.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::broker::{SchemaRegistration, SchemaRow};
use crate::http::error::ApiError;
use crate::http::extract::{Fields, JsonBody};
use crate::http::{AppState, Ojs, ok};
use crate::job::schema::ValidationMode;
use crate::wire::timestamp;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(latest))
        .routes(routes!(versions))
        .routes(routes!(show, register, remove))
        .routes(routes!(spec_register))
        .routes(routes!(spec_latest))
        .routes(routes!(spec_versions))
        .routes(routes!(spec_remove))
}

/// The job type of a path.
#[derive(serde::Deserialize, IntoParams)]
#[into_params(names("type"), parameter_in = Path)]
struct TypePath(
    /// The job type.
    String,
);

/// The job type and schema version of a path.
#[derive(serde::Deserialize, IntoParams)]
#[into_params(names("type", "version"), parameter_in = Path)]
struct TypeVersionPath(
    /// The job type.
    String,
    /// `N`, `N.N` or `N.N.N`; anything else is 400.
    #[param(pattern = r"^(0|[1-9][0-9]{0,8})(\.(0|[1-9][0-9]{0,8})){0,2}$")]
    String,
);

/// A registered schema version.
#[derive(Serialize, ToSchema)]
#[schema(as = JobSchema)]
struct View {
    /// The job type.
    r#type: String,
    /// The same (the extension's name).
    job_type: String,
    /// As registered: a number when registered as one (`2`), else a string (`"2.1.0"`).
    version: VersionName,
    /// The JSON Schema of the type's `args`.
    #[schema(value_type = Object)]
    schema: Value,
    /// What a PUSH whose args fail it gets (the server's default when registered without one).
    validation: ValidationMode,
    /// Whether the schema was registered with its own `validation` (else the server's default
    /// applies, and follows it).
    validation_explicit: bool,
    created_at: String,
}

/// A schema version: a number (`2`) or a string (`"2.1.0"`).
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
#[schema(as = JobSchemaVersionName)]
enum VersionName {
    Number(u64),
    Text(String),
}

impl VersionName {
    /// The version as registered: a number when it is one.
    fn of(version: &str) -> VersionName {
        match version.parse::<u64>() {
            Ok(n) if !version.contains('.') => VersionName::Number(n),
            _ => VersionName::Text(version.to_owned()),
        }
    }
}

/// One version in a list of versions.
#[derive(Serialize, ToSchema)]
#[schema(as = JobSchemaVersion)]
struct VersionView {
    version: VersionName,
    created_at: String,
    /// Whether it is the type's latest (highest) version.
    is_latest: bool,
    validation: ValidationMode,
}

/// `{"type": ..., "versions": [...]}`, the latest first.
#[derive(Serialize, ToSchema)]
#[schema(as = JobSchemaVersions)]
struct Versions {
    r#type: String,
    versions: Vec<VersionView>,
}

/// `{"schemas": [...]}`: every registered version, by type, the latest first.
#[derive(Serialize, ToSchema)]
#[schema(as = JobSchemaList)]
struct List {
    schemas: Vec<View>,
}

/// `{"schema": ...}` (the extension's binding).
#[derive(Serialize, ToSchema)]
#[schema(as = JobSchemaBody)]
struct Wrapped {
    schema: View,
}

fn view(state: &AppState, row: SchemaRow) -> View {
    let explicit = row
        .validation
        .as_deref()
        .and_then(ValidationMode::from_name);
    View {
        version: VersionName::of(&row.version),
        job_type: row.job_type.clone(),
        r#type: row.job_type,
        schema: row.schema,
        validation: explicit.unwrap_or(state.broker().settings().schema_validation),
        validation_explicit: explicit.is_some(),
        created_at: timestamp::format(row.created_at),
    }
}

fn versions_of(state: &AppState, job_type: String, rows: Vec<SchemaRow>) -> Versions {
    let default = state.broker().settings().schema_validation;
    Versions {
        r#type: job_type,
        versions: rows
            .into_iter()
            .enumerate()
            .map(|(i, r)| VersionView {
                version: VersionName::of(&r.version),
                created_at: timestamp::format(r.created_at),
                is_latest: i == 0,
                validation: r
                    .validation
                    .as_deref()
                    .and_then(ValidationMode::from_name)
                    .unwrap_or(default),
            })
            .collect(),
    }
}

/// The body of a registration: `schema` (a JSON Schema object) and an optional `validation`.
fn registration(
    job_type: String,
    version: String,
    fields: &Fields<'_>,
) -> Result<SchemaRegistration, ApiError> {
    let schema = match fields.raw("schema") {
        None => {
            return Err(ApiError::invalid_field(
                "$.schema",
                "'schema' is required: the JSON Schema of the job type's args",
            ));
        }
        Some(raw) => serde_json::from_str::<Value>(raw.get())
            .map_err(|_| ApiError::invalid_field("$.schema", "'schema' is not valid JSON"))?,
    };
    let validation = match fields.string("validation")? {
        None => None,
        Some(name) => Some(ValidationMode::from_name(&name).ok_or_else(|| {
            ApiError::invalid_field(
                "$.validation",
                format!("'validation' must be strict, warn or off, got '{name}'"),
            )
        })?),
    };
    Ok(SchemaRegistration {
        job_type,
        version,
        schema,
        validation,
    })
}

/// `GET /ojs/v1/admin/schemas`.
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/schemas",
    tag = "schemas",
    summary = "Every registered schema version",
    responses((status = 200, body = List))
)]
async fn list(State(state): State<AppState>) -> Result<Response, ApiError> {
    let rows = state.broker().schemas(None).await?;
    let schemas = rows.into_iter().map(|r| view(&state, r)).collect();
    Ok(ok(List { schemas }).into_response())
}

/// `GET /ojs/v1/admin/schemas/{type}`: the type's latest version.
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/schemas/{type}",
    tag = "schemas",
    summary = "A job type's latest schema",
    params(TypePath),
    responses(
        (status = 200, body = View),
        (status = 404, description = "The type has no schema."),
    )
)]
async fn latest(
    State(state): State<AppState>,
    Path(TypePath(job_type)): Path<TypePath>,
) -> Result<Response, ApiError> {
    let row = state.broker().schema(&job_type, None).await?;
    Ok(ok(view(&state, row)).into_response())
}

/// `GET /ojs/v1/admin/schemas/{type}/versions`.
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/schemas/{type}/versions",
    tag = "schemas",
    summary = "A job type's schema versions",
    description = "The latest first; an empty list when the type has none.",
    params(TypePath),
    responses((status = 200, body = Versions))
)]
async fn versions(
    State(state): State<AppState>,
    Path(TypePath(job_type)): Path<TypePath>,
) -> Result<Response, ApiError> {
    let rows = state.broker().schemas(Some(&job_type)).await?;
    Ok(ok(versions_of(&state, job_type, rows)).into_response())
}

/// `GET /ojs/v1/admin/schemas/{type}/{version}`.
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/schemas/{type}/{version}",
    tag = "schemas",
    summary = "One schema version",
    params(TypeVersionPath),
    responses(
        (status = 200, body = View),
        (status = 400, description = "The version is not `N`, `N.N` or `N.N.N`."),
        (status = 404, description = "No such version."),
    )
)]
async fn show(
    State(state): State<AppState>,
    Path(TypeVersionPath(job_type, version)): Path<TypeVersionPath>,
) -> Result<Response, ApiError> {
    let row = state.broker().schema(&job_type, Some(&version)).await?;
    Ok(ok(view(&state, row)).into_response())
}

/// `PUT /ojs/v1/admin/schemas/{type}/{version}`: `{"schema": {...}, "validation"?: "strict"}`.
#[utoipa::path(
    put,
    path = "/ojs/v1/admin/schemas/{type}/{version}",
    tag = "schemas",
    summary = "Register a schema version",
    description = "A registered version never changes: registering it again is a 409. The \
                   schema is read as the draft its `$schema` names, else 2020-12 (or 2019-09 \
                   for the tuple form of `items`). In force for PUSHes on every replica as soon \
                   as this answers.",
    params(TypeVersionPath),
    request_body = RegisterRequest,
    responses(
        (status = 201, body = View),
        (status = 400, description = "No `schema`, not a JSON Schema, or a bad type or version."),
        (status = 409, description = "The version is already registered."),
    )
)]
async fn register(
    State(state): State<AppState>,
    Path(TypeVersionPath(job_type, version)): Path<TypeVersionPath>,
    body: JsonBody,
) -> Result<Response, ApiError> {
    let fields = body.object()?;
    let r = registration(job_type, version, &fields)?;
    let row = state.broker().register_schema(&r).await?;
    Ok(Ojs(StatusCode::CREATED, view(&state, row)).into_response())
}

/// A registration body (documentation).
#[derive(ToSchema)]
#[schema(as = JobSchemaRequest)]
#[allow(dead_code)]
struct RegisterRequest {
    /// The JSON Schema of the type's `args` (an object: `{"type": "array", ...}`, or
    /// `{"type": "object", ...}` for the one object argument).
    #[schema(value_type = Object)]
    schema: Value,
    /// `strict`, `warn` or `off`; absent: the server's default (`OJS_SCHEMA_VALIDATION`).
    validation: Option<ValidationMode>,
}

/// `DELETE /ojs/v1/admin/schemas/{type}/{version}`.
#[utoipa::path(
    delete,
    path = "/ojs/v1/admin/schemas/{type}/{version}",
    tag = "schemas",
    summary = "Delete a schema version",
    description = "Jobs of the type are then checked against the latest version left (none: \
                   not checked). Answers the deleted version.",
    params(TypeVersionPath),
    responses(
        (status = 200, body = View),
        (status = 404, description = "No such version."),
    )
)]
async fn remove(
    State(state): State<AppState>,
    Path(TypeVersionPath(job_type, version)): Path<TypeVersionPath>,
) -> Result<Response, ApiError> {
    let row = state.broker().delete_schema(&job_type, &version).await?;
    Ok(ok(view(&state, row)).into_response())
}

/// `POST /ojs/v1/schemas`: `{"job_type", "version", "schema", "validation"?}`.
#[utoipa::path(
    post,
    path = "/ojs/v1/schemas",
    tag = "schemas",
    summary = "Register a schema version (the extension's binding)",
    request_body = SpecRegisterRequest,
    responses(
        (status = 201, body = Wrapped),
        (status = 400, description = "A field is missing or invalid."),
        (status = 409, description = "The version is already registered."),
    )
)]
async fn spec_register(
    State(state): State<AppState>,
    body: JsonBody,
) -> Result<Response, ApiError> {
    let fields = body.object()?;
    let job_type = fields.required_string("job_type")?;
    let version = match fields.raw("version") {
        None => {
            return Err(ApiError::invalid_field(
                "$.version",
                "'version' is required: N, N.N or N.N.N",
            ));
        }
        Some(raw) => match serde_json::from_str::<Value>(raw.get()) {
            Ok(Value::String(s)) => s,
            Ok(Value::Number(n)) if n.is_u64() => n.to_string(),
            _ => {
                return Err(ApiError::invalid_field(
                    "$.version",
                    "'version' must be a string (N, N.N or N.N.N) or a non-negative integer",
                ));
            }
        },
    };
    let r = registration(job_type, version, &fields)?;
    let row = state.broker().register_schema(&r).await?;
    Ok(Ojs(
        StatusCode::CREATED,
        Wrapped {
            schema: view(&state, row),
        },
    )
    .into_response())
}

/// The extension's registration body (documentation).
#[derive(ToSchema)]
#[schema(as = JobSchemaSpecRequest)]
#[allow(dead_code)]
struct SpecRegisterRequest {
    job_type: String,
    /// `N`, `N.N` or `N.N.N` (or a non-negative integer).
    #[schema(value_type = VersionName)]
    version: Value,
    #[schema(value_type = Object)]
    schema: Value,
    validation: Option<ValidationMode>,
}

/// `GET /ojs/v1/schemas/{type}`.
#[utoipa::path(
    get,
    path = "/ojs/v1/schemas/{type}",
    tag = "schemas",
    summary = "A job type's latest schema (the extension's binding)",
    params(TypePath),
    responses(
        (status = 200, body = Wrapped),
        (status = 404, description = "The type has no schema."),
    )
)]
async fn spec_latest(
    State(state): State<AppState>,
    Path(TypePath(job_type)): Path<TypePath>,
) -> Result<Response, ApiError> {
    let row = state.broker().schema(&job_type, None).await?;
    Ok(ok(Wrapped {
        schema: view(&state, row),
    })
    .into_response())
}

/// `GET /ojs/v1/schemas/{type}/versions`.
#[utoipa::path(
    get,
    path = "/ojs/v1/schemas/{type}/versions",
    tag = "schemas",
    summary = "A job type's schema versions (the extension's binding)",
    params(TypePath),
    responses((status = 200, body = Versions))
)]
async fn spec_versions(
    State(state): State<AppState>,
    Path(TypePath(job_type)): Path<TypePath>,
) -> Result<Response, ApiError> {
    versions(State(state), Path(TypePath(job_type))).await
}

/// `DELETE /ojs/v1/schemas/{type}/{version}`.
#[utoipa::path(
    delete,
    path = "/ojs/v1/schemas/{type}/{version}",
    tag = "schemas",
    summary = "Delete a schema version (the extension's binding)",
    params(TypeVersionPath),
    responses(
        (status = 200, body = Wrapped),
        (status = 404, description = "No such version."),
    )
)]
async fn spec_remove(
    State(state): State<AppState>,
    Path(TypeVersionPath(job_type, version)): Path<TypeVersionPath>,
) -> Result<Response, ApiError> {
    let row = state.broker().delete_schema(&job_type, &version).await?;
    Ok(ok(Wrapped {
        schema: view(&state, row),
    })
    .into_response())
}
