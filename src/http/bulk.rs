//! What the bulk and retry routes of several resources read alike: the `confirm: true` a bulk
//! change requires, timestamps inside bodies, and a retry's override of the job's queue, priority or
//! retry policy.

use utoipa::ToSchema;

use crate::broker::RetryOverride;
use crate::error::Error;
use crate::http::AppState;
use crate::http::error::ApiError;
use crate::http::extract::Fields;
use crate::job::envelope::{self, Rejection};
use crate::job::id_schema::QueueName;
use crate::wire::Violation;
use crate::wire::json::{self, Object};
use crate::wire::timestamp;

/// A timestamp field of a request body.
pub(crate) fn body_timestamp(
    fields: &Fields<'_>,
    key: &str,
    path: &str,
) -> Result<Option<chrono::DateTime<chrono::Utc>>, ApiError> {
    match fields.string(key)? {
        None => Ok(None),
        Some(text) => timestamp::parse_client(&text)
            .ok()
            .and_then(|t| t.absolute())
            .map(Some)
            .ok_or_else(|| {
                ApiError::invalid_field(
                    &format!("{path}.{key}"),
                    format!("'{key}' must be an RFC 3339 timestamp with a zone"),
                )
            }),
    }
}

/// The body of a retry (of a discarded job, or of a dead letter): an optional override.
#[derive(ToSchema)]
#[allow(dead_code)] // a schema: read by `parse_override`
pub(crate) struct RetryRequest {
    /// Fields of the retried job to replace, validated as on enqueue.
    #[schema(nullable = false)]
    r#override: Option<RetryOverrideSchema>,
}

/// What a retry may replace instead of the job's own values (nothing else may be given); each
/// is checked as on enqueue.
#[derive(ToSchema)]
#[schema(as = RetryOverride)]
#[allow(dead_code)] // a schema: read by `parse_override`
struct RetryOverrideSchema {
    #[schema(value_type = Option<QueueName>)]
    queue: Option<String>,
    #[schema(value_type = Option<Object>)]
    meta: Option<serde_json::Value>,
    #[schema(value_type = Option<crate::http::openapi::RetryPolicy>)]
    retry: Option<serde_json::Value>,
    /// As `priority` of a priority change.
    #[schema(value_type = Option<crate::http::openapi::values::Priority>)]
    priority: Option<serde_json::Value>,
    /// The job's arguments.
    #[schema(value_type = Option<Vec<serde_json::Value>>)]
    args: Option<Vec<serde_json::Value>>,
}

/// Validates `override` like an enqueue envelope and keeps the fields it sets.
pub(crate) fn parse_override(
    state: &AppState,
    raw: &serde_json::value::RawValue,
) -> Result<RetryOverride, ApiError> {
    let obj = Object::from_raw(raw)
        .map_err(|_| ApiError::invalid_field("$.override", "'override' must be an object"))?;
    const FIELDS: [&str; 5] = ["queue", "meta", "retry", "priority", "args"];
    if let Some((key, _)) = obj.iter().find(|(k, _)| !FIELDS.contains(k)) {
        return Err(ApiError::invalid_field(
            &format!("$.override.{key}"),
            format!("'override' may set queue, meta, retry, priority and args, not {key:?}"),
        ));
    }
    // A placeholder type keeps the envelope valid; only the override's own fields are used.
    let mut members: Vec<(&str, &serde_json::value::RawValue)> = obj.iter().collect();
    let placeholder_type = json::raw("\"dead_letter.retry\"".to_owned());
    let empty_args = json::raw("[]".to_owned());
    members.push(("type", &placeholder_type));
    if obj.get("args").is_none() {
        members.push(("args", &empty_args));
    }
    let text = json::object_text(members);
    let envelope_obj = Object::parse(&text).map_err(|e| ApiError::internal(e.to_string()))?;
    let job =
        envelope::parse(&envelope_obj, &state.broker().settings().limits).map_err(|rejection| {
            ApiError::from(Error::Rejected {
                index: None,
                rejection: under_override(rejection),
            })
        })?;
    let has = |key: &str| obj.get(key).is_some();
    Ok(RetryOverride {
        queue: has("queue").then(|| job.queue.clone()),
        meta: has("meta").then(|| job.meta.clone()),
        retry: has("retry").then(|| (job.retry.to_stored(), job.retry.max_attempts)),
        priority: has("priority").then_some(job.priority),
        args: has("args").then(|| job.args.clone()),
    })
}

/// A rejection of the synthetic envelope, with its paths pointing into `override`.
fn under_override(rejection: Rejection) -> Rejection {
    let rename = |v: Violation| Violation::new(v.path.replacen("$.", "$.override.", 1), v.message);
    match rejection {
        Rejection::Invalid(v) => Rejection::Invalid(v.into_iter().map(rename).collect()),
        Rejection::InvalidRetry(v) => Rejection::InvalidRetry(v.into_iter().map(rename).collect()),
        Rejection::PriorityOutOfRange {
            violation,
            value,
            max,
        } => Rejection::PriorityOutOfRange {
            violation: rename(violation),
            value,
            max,
        },
        other => other,
    }
}

pub(crate) fn require_confirm(fields: &Fields<'_>) -> Result<(), ApiError> {
    if fields.boolean("confirm")? != Some(true) {
        return Err(ApiError::invalid_field(
            "$.confirm",
            "this acts on many jobs at once: send \"confirm\": true",
        ));
    }
    Ok(())
}
