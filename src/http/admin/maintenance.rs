//! Maintenance mode: `GET`/`POST /ojs/v1/admin/system/maintenance` (admin). While it is on,
//! no replica hands out work, the promoter and the cron firer pause, and health says
//! `degraded`; enqueues, heartbeats, ACKs and NACKs go on (see [`crate::hold`]).
//!
//! The body takes both the admin UI's `{enabled, reason, duration}` and the contract's
//! `estimated_duration`; the answer carries both spellings (`enabled`/`maintenance`,
//! `started_at`/`enabled_at`, `ends_at`/`estimated_end`).

use std::time::Duration;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::broker::HoldRow;
use crate::http::error::ApiError;
use crate::http::extract::{Fields, JsonBody};
use crate::http::{AppState, ok};
use crate::wire::json::{self, Kind};
use crate::wire::{duration, timestamp};

/// Longest `reason`, in bytes.
const MAX_REASON_BYTES: usize = 1000;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(status, set))
}

/// Maintenance mode as it stands.
#[derive(Serialize, ToSchema)]
#[schema(as = MaintenanceStatus)]
struct Status {
    /// Whether maintenance mode is on.
    enabled: bool,
    /// The same (the contract's name).
    maintenance: bool,
    /// What it is for, as given.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// When it was turned on.
    #[serde(skip_serializing_if = "Option::is_none")]
    started_at: Option<String>,
    /// The same (the contract's name).
    #[serde(skip_serializing_if = "Option::is_none")]
    enabled_at: Option<String>,
    /// When it ends by itself (absent: when turned off).
    #[serde(skip_serializing_if = "Option::is_none")]
    ends_at: Option<String>,
    /// The same (the contract's name).
    #[serde(skip_serializing_if = "Option::is_none")]
    estimated_end: Option<String>,
}

impl Status {
    fn of(row: HoldRow) -> Status {
        // A hold past its end that no replica has cleared yet is over all the same.
        let on = row.enabled && row.lifts_in_ms.is_none_or(|ms| ms > 0);
        let started = row.started_at.filter(|_| on).map(timestamp::format);
        let ends = row.ends_at.filter(|_| on).map(timestamp::format);
        Status {
            enabled: on,
            maintenance: on,
            reason: row.reason.filter(|_| on),
            started_at: started.clone(),
            enabled_at: started,
            ends_at: ends.clone(),
            estimated_end: ends,
        }
    }
}

/// `GET /ojs/v1/admin/system/maintenance`.
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/system/maintenance",
    tag = "admin",
    summary = "Maintenance mode",
    responses((status = 200, body = Status))
)]
async fn status(State(state): State<AppState>) -> Result<Response, ApiError> {
    let row = state.broker().maintenance().await?;
    Ok(ok(Status::of(row)).into_response())
}

/// The request body.
#[derive(ToSchema)]
#[schema(as = MaintenanceRequest)]
struct SetRequest {
    /// Turn maintenance mode on or off.
    enabled: bool,
    /// What it is for (up to 1,000 bytes); ignored when turning it off.
    reason: Option<String>,
    /// How long it lasts before it ends by itself. Absent (or `""`): until turned off.
    #[schema(value_type = Option<Lasting>)]
    duration: Option<Duration>,
    /// The same (the contract's name).
    #[schema(value_type = Option<Lasting>)]
    estimated_duration: Option<Duration>,
}

impl SetRequest {
    fn read(fields: &Fields<'_>) -> Result<SetRequest, ApiError> {
        let enabled = fields.boolean("enabled")?.ok_or_else(|| {
            ApiError::invalid_field(
                "$.enabled",
                "'enabled' is required: true to turn maintenance mode on, false to turn it off",
            )
        })?;
        let reason = fields.string("reason")?;
        if let Some(reason) = &reason
            && reason.len() > MAX_REASON_BYTES
        {
            return Err(ApiError::invalid_field(
                "$.reason",
                format!(
                    "'reason' may hold up to {MAX_REASON_BYTES} bytes, got {}",
                    reason.len()
                ),
            ));
        }
        Ok(SetRequest {
            enabled,
            reason,
            duration: lasting(fields, "duration")?,
            estimated_duration: lasting(fields, "estimated_duration")?,
        })
    }
}

/// A duration (`15m`, `1h`, `PT30M`) or whole seconds (documentation).
#[derive(ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
#[schema(as = MaintenanceDuration)]
enum Lasting {
    Duration(String),
    Seconds(u64),
}

/// `POST /ojs/v1/admin/system/maintenance`: `{"enabled": true, "reason"?, "duration"?}` turns
/// maintenance mode on (again: a new reason or end, the start kept), `{"enabled": false}` off.
#[utoipa::path(
    post,
    path = "/ojs/v1/admin/system/maintenance",
    tag = "admin",
    summary = "Turn maintenance mode on or off",
    description = "While on, no replica hands out work (FETCH answers empty, long polls wait), \
                   scheduled jobs are not promoted and cron entries do not fire; enqueues, \
                   heartbeats, ACKs and NACKs go on, and health reports `degraded`. In force \
                   on every replica within half a second; ends by itself after `duration`.",
    request_body = SetRequest,
    responses(
        (status = 200, body = Status),
        (status = 400, description = "A field is invalid."),
    )
)]
async fn set(State(state): State<AppState>, body: JsonBody) -> Result<Response, ApiError> {
    let SetRequest {
        enabled,
        reason,
        duration,
        estimated_duration,
    } = SetRequest::read(&body.object()?)?;
    let lasts = match (duration, estimated_duration) {
        (Some(a), Some(b)) if a != b => {
            return Err(ApiError::invalid_field(
                "$.estimated_duration",
                "'duration' and 'estimated_duration' name the same thing; give one, or the same",
            ));
        }
        (a, b) => a.or(b),
    };
    let reason = reason
        .map(|r| r.trim().to_owned())
        .filter(|r| !r.is_empty());
    let row = state
        .broker()
        .set_maintenance(
            enabled,
            reason.as_deref().filter(|_| enabled),
            lasts.filter(|_| enabled),
        )
        .await?;
    Ok(ok(Status::of(row)).into_response())
}

/// How long maintenance mode is to last, from `key`: a duration string or whole seconds, more
/// than zero.
fn lasting(fields: &Fields<'_>, key: &str) -> Result<Option<Duration>, ApiError> {
    let Some(raw) = fields.raw(key) else {
        return Ok(None);
    };
    let invalid = |why: String| {
        ApiError::invalid_field(
            &format!("$.{key}"),
            format!(
                "'{key}' must be a duration such as \"15m\", \"1h\" or \"PT30M\", or whole seconds: {why}"
            ),
        )
    };
    let ms = match Kind::of(raw) {
        Kind::String => {
            let text: String = json::decode(raw).map_err(|_| invalid("not a string".into()))?;
            if text.trim().is_empty() {
                // The admin UI sends "" for "until turned off".
                return Ok(None);
            }
            duration::parse_ms(&text).map_err(invalid)?
        }
        Kind::Number => {
            let secs = json::as_integer(raw)
                .filter(|s| *s > 0)
                .ok_or_else(|| invalid("seconds must be a whole number above zero".into()))?;
            u64::try_from(secs)
                .ok()
                .and_then(|s| s.checked_mul(1000))
                .filter(|ms| *ms <= duration::MAX_MS)
                .ok_or_else(|| invalid("longer than 100 years".into()))?
        }
        other => return Err(invalid(format!("got {}", other.article_name()))),
    };
    if ms == 0 {
        return Err(invalid("it must be longer than zero".into()));
    }
    Ok(Some(Duration::from_millis(ms)))
}
