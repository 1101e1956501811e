//! `/ojs/v1/admin/keys`: API keys (see [`crate::auth`]). The key itself is in the answer to its
//! creation only; lists show its first characters.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;

use crate::auth::{KeyRequest, Role};
use crate::broker::keys::KeyRow;
use crate::http::error::ApiError;
use crate::http::extract::JsonBody;
use crate::http::{AppState, Ojs, ok};
use crate::job::id_schema::QueueName;
use crate::wire::timestamp;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(revoke))
}

/// A key as lists show it.
#[derive(Serialize, ToSchema)]
#[schema(as = ApiKey)]
pub struct WireKey {
    id: String,
    name: String,
    /// `producer`, `worker` or `admin`.
    role: String,
    /// The queues the key may use; absent: every queue.
    #[serde(skip_serializing_if = "Option::is_none")]
    queues: Option<Vec<String>>,
    /// The tenant the key acts as; absent: any tenant (or none).
    #[serde(skip_serializing_if = "Option::is_none")]
    tenant: Option<String>,
    /// The key's first characters, to recognise it.
    prefix: String,
    created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    revoked_at: Option<String>,
}

impl WireKey {
    pub fn of(row: &KeyRow) -> WireKey {
        WireKey {
            id: row.id.to_string(),
            name: row.name.clone(),
            role: row.role.clone(),
            queues: row.queues.clone(),
            tenant: row.tenant.clone(),
            prefix: row.key_prefix.clone(),
            created_at: timestamp::format(row.created_at),
            revoked_at: row.revoked_at.map(timestamp::format),
        }
    }
}

/// `{"keys": [...]}`.
#[derive(Serialize, ToSchema)]
struct KeyList {
    keys: Vec<WireKey>,
}

/// `GET /ojs/v1/admin/keys`: every key, active ones first, newest first.
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/keys",
    tag = "admin",
    operation_id = "admin_list_keys",
    summary = "List API keys",
    responses((status = 200, body = KeyList))
)]
async fn list(State(state): State<AppState>) -> Result<Response, ApiError> {
    let keys = state.broker().keys().await?;
    Ok(ok(KeyList {
        keys: keys.iter().map(WireKey::of).collect(),
    })
    .into_response())
}

/// A key to create: a `producer` (enqueue, read and cancel jobs) or `worker` key (the worker
/// protocol), optionally limited to some queues and bound to a tenant, or an `admin` key (every endpoint and every
/// queue, so never limited); `name` says what it is for.
struct CreateKeyRequest;

impl utoipa::PartialSchema for CreateKeyRequest {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        let name = serde_json::json!({
            "type": ["string", "null"], "maxLength": 200,
            "description": "What the key is for (at most 200 characters)."
        });
        let queue = serde_json::to_value(<QueueName as utoipa::PartialSchema>::schema())
            .unwrap_or_default();
        let limited = serde_json::json!({
            "type": "object",
            "required": ["role"],
            "properties": {
                "role": {"type": "string", "enum": [Role::Producer.as_str(), Role::Worker.as_str()]},
                "queues": {
                    "type": ["array", "null"], "items": queue, "minItems": 1, "maxItems": 100,
                    "description": "The queues the key may use (1 to 100); every queue when left out."
                },
                "tenant": {
                    "type": ["string", "null"], "maxLength": 255,
                    "pattern": "^[a-zA-Z0-9][a-zA-Z0-9._:-]*$",
                    "description": "The tenant the key acts as (X-OJS-Tenant): its jobs are tagged with it, and it sees only that tenant's jobs."
                },
                "name": name,
            },
        });
        let admin = serde_json::json!({
            "type": "object",
            "required": ["role"],
            "properties": {
                "role": {"type": "string", "enum": [Role::Admin.as_str()]},
                "queues": {"type": "null"},
                "tenant": {
                    "type": ["string", "null"], "maxLength": 255,
                    "pattern": "^[a-zA-Z0-9][a-zA-Z0-9._:-]*$",
                    "description": "The tenant the key administers alone: its admin routes see only that tenant's part, and those acting on what every tenant shares are refused."
                },
                "name": name,
            },
        });
        serde_json::from_value(serde_json::json!({"oneOf": [limited, admin]}))
            .expect("the key request schema is a schema")
    }
}

impl ToSchema for CreateKeyRequest {}

/// The created key: the secret is shown here only.
#[derive(Serialize, ToSchema)]
#[schema(as = CreatedApiKey)]
struct Created {
    /// The key to send as `Authorization: Bearer <key>`. Store it now: it cannot be shown again.
    key: String,
    #[serde(flatten)]
    listed: WireKey,
}

/// `POST /ojs/v1/admin/keys`: 201 with the new key.
#[utoipa::path(
    post,
    path = "/ojs/v1/admin/keys",
    tag = "admin",
    operation_id = "admin_create_key",
    summary = "Create an API key",
    request_body = CreateKeyRequest,
    responses(
        (status = 201, body = Created),
        (status = 400, description = "A field is invalid."),
    )
)]
async fn create(State(state): State<AppState>, body: JsonBody) -> Result<Response, ApiError> {
    let fields = body.object()?;
    let request = KeyRequest::new(
        &fields.required_string("role")?,
        fields.strings("queues")?,
        fields.string("tenant")?,
        fields.string("name")?,
    )
    .map_err(|(field, message)| ApiError::invalid_field(field, message))?;
    let created = state.broker().create_key(&request).await?;
    state.broker().reload_keys(&state.gate().ring).await?;
    Ok(Ojs(
        StatusCode::CREATED,
        Created {
            key: created.key,
            listed: WireKey::of(&created.row),
        },
    )
    .into_response())
}

/// The key id of a path.
#[derive(serde::Deserialize, IntoParams)]
#[into_params(names("id"), parameter_in = Path)]
struct KeyIdPath(
    /// The key's id (not the key).
    String,
);

/// `DELETE /ojs/v1/admin/keys/{id}`: revokes the key on every replica within a second.
#[utoipa::path(
    delete,
    path = "/ojs/v1/admin/keys/{id}",
    tag = "admin",
    operation_id = "admin_revoke_key",
    summary = "Revoke an API key",
    params(KeyIdPath),
    responses(
        (status = 200, description = "Revoked (or already revoked).", body = WireKey),
        (status = 404, description = "No such key."),
    )
)]
async fn revoke(
    State(state): State<AppState>,
    Path(KeyIdPath(id)): Path<KeyIdPath>,
) -> Result<Response, ApiError> {
    let row = match id.parse::<Uuid>() {
        Ok(uuid) => state.broker().revoke_key(uuid).await?,
        Err(_) => None,
    };
    let row = row.ok_or_else(|| ApiError::not_found("api_key", &id))?;
    state.broker().reload_keys(&state.gate().ring).await?;
    Ok(ok(WireKey::of(&row)).into_response())
}
