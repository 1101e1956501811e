//! Webhook subscriptions (admin): `/ojs/v1/webhooks/subscriptions` — create, list, read,
//! change (`PATCH` as the conformance suite sends, `PUT` as the admin UI sends: both change
//! only the fields given), delete, and `POST …/{id}/test`. See [`crate::broker::webhooks`] for
//! how events are delivered, and [`crate::webhook`] for the rules.
//!
//! Answers carry the subscription's fields at the top level (what the admin UI reads) and again
//! under `subscription` (what the suite reads); a list has `items` and `subscriptions`. The
//! secret is shown only in the answer that created it.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};
use uuid::Uuid;

use super::error::ApiError;
use super::extract::{Fields, JsonBody, OptionalJsonBody};
use super::query::{ADMIN, Page, Pagination, QueryParams};
use super::{AppState, Ojs, ok};
use crate::broker::webhooks::{Attempt, WebhookInput};
use crate::broker::{WebhookChange, WebhookRow};
use crate::webhook;
use crate::wire::Violation;
use crate::wire::timestamp;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(show, patch, put, remove))
        .routes(routes!(test))
}

/// The subscription of a path.
#[derive(serde::Deserialize, IntoParams)]
#[into_params(names("id"), parameter_in = Path)]
struct SubscriptionPath(
    /// The subscription id (anything but a UUID is 400).
    #[param(
        pattern = "^([0-9a-fA-F]{32}|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$"
    )]
    String,
);

/// A subscription.
#[derive(Serialize, ToSchema, Clone)]
#[schema(as = WebhookSubscription)]
struct Wire {
    id: String,
    url: String,
    /// Event type filters: `job.completed`, `job.*`, `*`.
    events: Vec<String>,
    /// Whether events are delivered.
    active: bool,
    /// `active` or `paused`.
    state: &'static str,
    /// Why it is paused (the operator, or the last failed delivery).
    #[serde(skip_serializing_if = "Option::is_none")]
    paused_reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    paused_at: Option<String>,
    #[schema(value_type = Object)]
    metadata: Value,
    /// The HMAC-SHA256 key: only in the answer that created the subscription.
    #[serde(skip_serializing_if = "Option::is_none")]
    secret: Option<String>,
    /// Events delivered (2xx).
    delivered: i64,
    /// Failed attempts since the last success.
    failure_count: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_delivery_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_delivery_status: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_error: Option<String>,
    /// When the next delivery is tried (after a failure: its backoff).
    next_attempt_at: String,
    /// Matching events pruned before they could be delivered (paused or behind for longer
    /// than the event retention), in all; `gap_at` says when it last happened.
    gap_events: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    gap_at: Option<String>,
    created_at: String,
    updated_at: String,
}

impl Wire {
    /// The subscription as shown (`secret`: the secret in clear, only when it was just made).
    fn of(row: WebhookRow, secret: Option<String>) -> Wire {
        Wire {
            id: row.id.to_string(),
            url: row.url,
            events: row.events,
            active: row.active,
            state: if row.active { "active" } else { "paused" },
            paused_reason: row.paused_reason,
            paused_at: row.paused_at.map(timestamp::format),
            metadata: row.metadata,
            secret,
            delivered: row.delivered,
            failure_count: row.failure_count,
            last_delivery_at: row.last_delivery_at.map(timestamp::format),
            last_delivery_status: row.last_delivery_status,
            last_error: row.last_error,
            next_attempt_at: timestamp::format(row.next_attempt_at),
            gap_events: row.gap_events,
            gap_at: row.gap_at.map(timestamp::format),
            created_at: timestamp::format(row.created_at),
            updated_at: timestamp::format(row.updated_at),
        }
    }
}

/// The subscription, bare and under `subscription`.
#[derive(Serialize, ToSchema)]
#[schema(as = WebhookSubscriptionBody)]
struct Both {
    #[serde(flatten)]
    bare: Wire,
    subscription: Wire,
}

fn both(row: WebhookRow, secret: Option<String>) -> Both {
    let wire = Wire::of(row, secret);
    Both {
        bare: wire.clone(),
        subscription: wire,
    }
}

/// A page of subscriptions, oldest first, as `items` and again as `subscriptions`.
#[derive(Serialize, ToSchema)]
#[schema(as = WebhookSubscriptionList)]
struct List {
    items: Vec<Wire>,
    subscriptions: Vec<Wire>,
    pagination: Pagination,
}

fn invalid(v: Violation) -> ApiError {
    ApiError::invalid_field(&v.path, v.message)
}

fn subscription_id(id: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(id).map_err(|_| {
        ApiError::invalid_field(
            "path.id",
            format!("{id:?} is not a subscription id (a UUID)"),
        )
    })
}

/// What a change may name: any of these, each checked when present; the others keep their
/// values.
#[derive(ToSchema)]
#[schema(as = WebhookSubscriptionChange)]
struct Given {
    url: Option<String>,
    events: Option<Vec<String>>,
    secret: Option<String>,
    #[schema(value_type = Option<Object>)]
    metadata: Option<Value>,
    /// `false` pauses it; `true` resumes it from where it stopped, trying the next event at
    /// once.
    active: Option<bool>,
}

fn given(fields: &Fields<'_>) -> Result<Given, ApiError> {
    let url = fields.string("url")?;
    if let Some(url) = &url {
        webhook::check_url(url).map_err(invalid)?;
    }
    let events = fields.strings("events")?;
    if let Some(events) = &events {
        webhook::check_filters(events).map_err(invalid)?;
    }
    let secret = fields.string("secret")?;
    if let Some(secret) = &secret {
        webhook::check_secret(secret).map_err(invalid)?;
    }
    let metadata = match fields.raw("metadata") {
        None => None,
        Some(raw) => match serde_json::from_str::<Value>(raw.get()) {
            Ok(v @ Value::Object(_)) if raw.get().len() <= 16 * 1024 => Some(v),
            _ => {
                return Err(ApiError::invalid_field(
                    "$.metadata",
                    "'metadata' must be an object of at most 16 KiB",
                ));
            }
        },
    };
    Ok(Given {
        url,
        events,
        secret,
        metadata,
        active: fields.boolean("active")?,
    })
}

/// A subscription to create (documentation).
#[derive(ToSchema)]
#[schema(as = WebhookSubscriptionRequest)]
#[allow(dead_code)]
struct CreateRequest {
    /// Where events are POSTed: an absolute http or https URL.
    url: String,
    /// Event type filters (1 to 100): `job.completed`, `job.*`, `*`.
    events: Vec<String>,
    /// The HMAC-SHA256 key (1 to 1,024 bytes); generated when absent.
    secret: Option<String>,
    /// Anything to keep with the subscription (an object, up to 16 KiB).
    #[schema(value_type = Option<Object>)]
    metadata: Option<Value>,
    /// Default `true`; `false` creates it paused.
    active: Option<bool>,
}

/// `POST /ojs/v1/webhooks/subscriptions`.
#[utoipa::path(
    post,
    path = "/ojs/v1/webhooks/subscriptions",
    tag = "webhooks",
    summary = "Create a webhook subscription",
    description = "Delivered the matching events that come after it, in order, at least once, \
                   signed (X-OJS-Signature) with its secret. The answer is the only one that \
                   shows the secret.",
    request_body = CreateRequest,
    responses(
        (status = 201, body = Both),
        (status = 400, description = "A field is missing or invalid."),
    )
)]
async fn create(State(state): State<AppState>, body: JsonBody) -> Result<Response, ApiError> {
    let fields = body.object()?;
    let g = given(&fields)?;
    let url = g.url.ok_or_else(|| {
        ApiError::invalid_field("$.url", "'url' is required: where events are POSTed")
    })?;
    let events = g.events.ok_or_else(|| {
        ApiError::invalid_field(
            "$.events",
            "'events' is required: the event types to deliver (job.completed, job.*, *)",
        )
    })?;
    let (row, secret) = state
        .broker()
        .create_webhook(WebhookInput {
            url,
            events,
            secret: g.secret,
            metadata: g.metadata.unwrap_or_else(|| serde_json::json!({})),
            active: g.active.unwrap_or(true),
        })
        .await?;
    Ok(Ojs(StatusCode::CREATED, both(row, Some(secret))).into_response())
}

/// `GET /ojs/v1/webhooks/subscriptions`.
#[utoipa::path(
    get,
    path = "/ojs/v1/webhooks/subscriptions",
    tag = "webhooks",
    summary = "List webhook subscriptions",
    params(Page),
    responses(
        (status = 200, body = List),
        (status = 400, description = "A page parameter is invalid."),
    )
)]
async fn list(State(state): State<AppState>, query: QueryParams) -> Result<Response, ApiError> {
    let page = Page::from_query(&query, ADMIN)?;
    let (rows, total) = state.broker().webhooks(page.limit, page.offset).await?;
    let items: Vec<Wire> = rows.into_iter().map(|r| Wire::of(r, None)).collect();
    Ok(ok(List {
        subscriptions: items.clone(),
        items,
        pagination: page.describe(total),
    })
    .into_response())
}

/// `GET /ojs/v1/webhooks/subscriptions/{id}`.
#[utoipa::path(
    get,
    path = "/ojs/v1/webhooks/subscriptions/{id}",
    tag = "webhooks",
    summary = "Read a webhook subscription",
    params(SubscriptionPath),
    responses(
        (status = 200, body = Both),
        (status = 400, description = "The id is not a UUID."),
        (status = 404, description = "No such subscription."),
    )
)]
async fn show(
    State(state): State<AppState>,
    Path(SubscriptionPath(id)): Path<SubscriptionPath>,
) -> Result<Response, ApiError> {
    let row = state.broker().webhook(subscription_id(&id)?).await?;
    Ok(ok(both(row, None)).into_response())
}

async fn change(state: &AppState, id: &str, body: OptionalJsonBody) -> Result<Response, ApiError> {
    let id = subscription_id(id)?;
    let g = match &body.0 {
        Some(body) => given(&body.object()?)?,
        None => Given {
            url: None,
            events: None,
            secret: None,
            metadata: None,
            active: None,
        },
    };
    let row = state
        .broker()
        .update_webhook(
            id,
            &WebhookChange {
                url: g.url.as_deref(),
                events: g.events.as_deref(),
                secret: g.secret.as_deref(),
                metadata: g.metadata.as_ref(),
                active: g.active,
            },
        )
        .await?;
    Ok(ok(both(row, None)).into_response())
}

/// `PATCH /ojs/v1/webhooks/subscriptions/{id}`.
#[utoipa::path(
    patch,
    path = "/ojs/v1/webhooks/subscriptions/{id}",
    tag = "webhooks",
    summary = "Change a webhook subscription",
    params(SubscriptionPath),
    request_body = Given,
    responses(
        (status = 200, body = Both),
        (status = 400, description = "A field is invalid."),
        (status = 404, description = "No such subscription."),
    )
)]
async fn patch(
    State(state): State<AppState>,
    Path(SubscriptionPath(id)): Path<SubscriptionPath>,
    body: OptionalJsonBody,
) -> Result<Response, ApiError> {
    change(&state, &id, body).await
}

/// `PUT /ojs/v1/webhooks/subscriptions/{id}`: as `PATCH` (the fields given change).
#[utoipa::path(
    put,
    path = "/ojs/v1/webhooks/subscriptions/{id}",
    tag = "webhooks",
    summary = "Change a webhook subscription (as PATCH)",
    params(SubscriptionPath),
    request_body = Given,
    responses(
        (status = 200, body = Both),
        (status = 400, description = "A field is invalid."),
        (status = 404, description = "No such subscription."),
    )
)]
async fn put(
    State(state): State<AppState>,
    Path(SubscriptionPath(id)): Path<SubscriptionPath>,
    body: OptionalJsonBody,
) -> Result<Response, ApiError> {
    change(&state, &id, body).await
}

/// `DELETE /ojs/v1/webhooks/subscriptions/{id}`: 204; nothing more is delivered.
#[utoipa::path(
    delete,
    path = "/ojs/v1/webhooks/subscriptions/{id}",
    tag = "webhooks",
    summary = "Delete a webhook subscription",
    params(SubscriptionPath),
    responses(
        (status = 204, description = "Deleted."),
        (status = 400, description = "The id is not a UUID."),
        (status = 404, description = "No such subscription."),
    )
)]
async fn remove(
    State(state): State<AppState>,
    Path(SubscriptionPath(id)): Path<SubscriptionPath>,
) -> Result<Response, ApiError> {
    state.broker().delete_webhook(subscription_id(&id)?).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// What a test delivery did.
#[derive(Serialize, ToSchema)]
#[schema(as = WebhookTestResult)]
struct Tested {
    /// Whether the receiver answered 2xx.
    success: bool,
    /// The receiver's HTTP status (0: no answer).
    status: u16,
    /// The same (the extension's name); absent without an answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    status_code: Option<u16>,
    response_time_ms: u64,
    /// The start of the receiver's answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    response_body: Option<String>,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// `POST /ojs/v1/webhooks/subscriptions/{id}/test`: sends a `webhook.test` event now.
#[utoipa::path(
    post,
    path = "/ojs/v1/webhooks/subscriptions/{id}/test",
    tag = "webhooks",
    summary = "Send a test event",
    description = "Signed as any delivery; the subscription's state and cursor do not change. \
                   An address that deliveries may not reach fails the same way here.",
    params(SubscriptionPath),
    responses(
        (status = 200, body = Tested),
        (status = 404, description = "No such subscription."),
    )
)]
async fn test(
    State(state): State<AppState>,
    Path(SubscriptionPath(id)): Path<SubscriptionPath>,
) -> Result<Response, ApiError> {
    let Attempt {
        status,
        elapsed,
        error,
        body,
    } = state.broker().test_webhook(subscription_id(&id)?).await?;
    Ok(ok(Tested {
        success: error.is_none(),
        status: status.unwrap_or(0),
        status_code: status,
        response_time_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
        response_body: body,
        error,
    })
    .into_response())
}
