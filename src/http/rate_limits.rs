//! `/ojs/v1/rate-limits` ([OJS rate limiting] §10): the rate limits in force — queues whose
//! configuration sets a `rate_limit` (`kind: "queue"`, `key` = the queue's name) and the
//! rate-limit keys of jobs (`kind: "key"`) — with their use.
//!
//! [OJS rate limiting]: https://github.com/openjobspec/spec/blob/main/spec/ojs-rate-limiting.md

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::broker::RateOverride;
use crate::http::error::ApiError;
use crate::http::extract::JsonBody;
use crate::http::query::{ADMIN, Page, Pagination, QueryParams};
use crate::http::rate_key::render;
use crate::http::{AppState, ok};
use crate::rate_limit::{self, Window};
use crate::wire::duration;
use crate::wire::json::Object;
use crate::wire::violation::Violation;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(show, put_override))
        .routes(routes!(delete_override))
}

/// A page of rate limits.
#[derive(Serialize, ToSchema)]
struct RateLimitList {
    /// Queue limits first (by name), then keys (by key).
    #[schema(value_type = Vec<Object>)]
    items: Vec<Value>,
    pagination: Pagination,
}

/// The rate-limit key of a path.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(names("key"), parameter_in = Path)]
struct RateKeyPath(
    /// The key, as jobs name it in `rate_limit.key` (`queue:<name>` for a policy without one).
    #[param(pattern = "^[a-zA-Z0-9][a-zA-Z0-9._:-]{0,254}$")]
    String,
);

/// `GET /ojs/v1/rate-limits`.
#[utoipa::path(
    get,
    path = "/ojs/v1/rate-limits",
    tag = "admin",
    operation_id = "admin_list_rate_limits",
    summary = "List rate limits: rate-limited queues and rate-limit keys",
    description = "Queues whose configuration sets a `rate_limit` (`kind: \"queue\"`, `key` and \
                   `queue` the queue's name, `limit` jobs per `period`, `active` the jobs \
                   started within the last period, `waiting` its available jobs), then the \
                   rate-limit keys of jobs (`kind: \"key\"`, as `GET /ojs/v1/rate-limits/{key}` \
                   shows each), by key.",
    params(Page),
    responses(
        (status = 200, body = RateLimitList),
        (status = 400, description = "A page parameter is invalid."),
    )
)]
async fn list(State(state): State<AppState>, query: QueryParams) -> Result<Response, ApiError> {
    let page = Page::from_query(&query, ADMIN)?;
    let broker = state.broker();
    let (queues, queue_total) = broker.rate_limits(i64::MAX, 0).await?;
    let mut items: Vec<Value> = queues
        .iter()
        .skip(usize::try_from(page.offset).unwrap_or(usize::MAX))
        .take(usize::try_from(page.limit).unwrap_or(usize::MAX))
        .map(|r| {
            json!({
                "kind": "queue",
                "key": r.queue,
                "queue": r.queue,
                "limit": r.limit,
                "period": duration::format_iso(r.period_ms),
                "active": r.started,
                "waiting": r.waiting,
                "rate": {"limit": r.limit, "period": duration::format_iso(r.period_ms),
                         "current_count": r.started},
                "waiting_count": r.waiting,
            })
        })
        .collect();
    let left = page.limit - items.len() as i64;
    let key_offset = (page.offset - queue_total).max(0);
    let (keys, key_total) = broker.rate_keys(left.max(0), key_offset).await?;
    if left > 0 {
        items.extend(keys.iter().map(render));
    }
    Ok(ok(RateLimitList {
        items,
        pagination: page.describe(queue_total + key_total),
    })
    .into_response())
}

/// `GET /ojs/v1/rate-limits/{key}`.
#[utoipa::path(
    get,
    path = "/ojs/v1/rate-limits/{key}",
    tag = "admin",
    operation_id = "admin_get_rate_limit",
    summary = "A rate-limit key's limits and use",
    description = "`concurrency` {limit, active, available}, `rate` {limit, period, \
                   current_count, window_resets_at}, `throttle` {limit, period, \
                   next_allowed_at} (each only when set; with an override, the stricter of the \
                   two), `waiting_count` (jobs held for the key), `blocked_until`, `on_limit`, \
                   and the key's own `policy` and `override`.",
    params(RateKeyPath),
    responses(
        (status = 200, body = Object),
        (status = 404, description = "No job or override has named the key."),
    )
)]
async fn show(
    State(state): State<AppState>,
    Path(RateKeyPath(key)): Path<RateKeyPath>,
) -> Result<Response, ApiError> {
    let usage = state.broker().rate_key(known_key(&key)?).await?;
    Ok(ok(render(&usage)).into_response())
}

/// An override: `concurrency`, `rate` and `throttle` as in a job's policy, and when it lapses
/// (absent: until removed); or the admin UI's form, a rate of `limit` per `period`. An override
/// without limits overrides nothing.
struct OverrideRequest;

impl utoipa::PartialSchema for OverrideRequest {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{
            AdditionalProperties, ObjectBuilder, OneOfBuilder, Schema, SchemaFormat, Type,
        };
        let expires_at = || {
            ObjectBuilder::new()
                .schema_type(Type::String)
                .format(Some(SchemaFormat::KnownFormat(
                    utoipa::openapi::schema::KnownFormat::DateTime,
                )))
                .description(Some("When the override lapses (absent: until removed)."))
        };
        let policy = ObjectBuilder::new()
            .schema_type(Type::Object)
            .property(
                "concurrency",
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .minimum(Some(0))
                    .maximum(Some(i64::from(i32::MAX))),
            )
            .property("rate", crate::http::openapi::values::rate_window())
            .property("throttle", crate::http::openapi::values::rate_window())
            .property("expires_at", expires_at())
            .additional_properties(Some(AdditionalProperties::FreeForm(false)));
        let ui = match crate::http::openapi::values::rate_window() {
            Schema::Object(window) => {
                let mut form: ObjectBuilder = window.into();
                form = form.property("expires_at", expires_at());
                form
            }
            _ => ObjectBuilder::new(),
        };
        Schema::OneOf(OneOfBuilder::new().item(policy).item(ui).build()).into()
    }
}

impl ToSchema for OverrideRequest {}

/// `PUT /ojs/v1/rate-limits/{key}`: a temporary override.
#[utoipa::path(
    put,
    path = "/ojs/v1/rate-limits/{key}",
    tag = "admin",
    operation_id = "admin_override_rate_limit",
    summary = "Override a rate-limit key's limits for a while",
    description = "`concurrency`, `rate` {limit, period} and `throttle` {limit, period} (or the                    admin UI's `limit` + `period`, a rate) apply besides the key's own limits —                    the stricter wins — until `expires_at` (absent: until removed). Jobs the key                    had released and not started are held again and released as the override                    allows. A key no job has named yet is created. An override without limits \
                   overrides nothing.",
    params(RateKeyPath),
    request_body = OverrideRequest,
    responses(
        (status = 200, description = "The key as it stands.", body = Object),
        (status = 400, description = "The override or the key is invalid."),
    )
)]
async fn put_override(
    State(state): State<AppState>,
    Path(RateKeyPath(key)): Path<RateKeyPath>,
    body: JsonBody,
) -> Result<Response, ApiError> {
    if !rate_limit::valid_key(&key) {
        return Err(ApiError::invalid_field(
            "key",
            "a rate-limit key is 1 to 255 letters, digits and . _ : - (starting with a letter or digit)",
        ));
    }
    let fields = body.object()?;
    let o = parse_override(fields.object())
        .map_err(|v| crate::error::Error::from(crate::job::envelope::Rejection::Invalid(v)))?;
    let usage = state.broker().override_rate_key(&key, &o).await?;
    Ok(ok(render(&usage)).into_response())
}

/// `DELETE /ojs/v1/rate-limits/{key}/override`.
#[utoipa::path(
    delete,
    path = "/ojs/v1/rate-limits/{key}/override",
    tag = "admin",
    operation_id = "admin_delete_rate_limit_override",
    summary = "Remove a rate-limit key's override",
    params(RateKeyPath),
    responses(
        (status = 204, description = "Removed (or there was none); the key's own limits apply."),
        (status = 404, description = "No job or override has named the key."),
    )
)]
async fn delete_override(
    State(state): State<AppState>,
    Path(RateKeyPath(key)): Path<RateKeyPath>,
) -> Result<Response, ApiError> {
    state.broker().clear_rate_override(known_key(&key)?).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

fn parse_override(obj: &Object<'_>) -> Result<RateOverride, Vec<Violation>> {
    let mut v = Vec::new();
    let mut o = RateOverride::default();
    let window_of = |w: Window| (w.limit, w.period_ms);
    for (name, raw) in obj.iter() {
        if obj.get(name).is_none() {
            // null: not given
            continue;
        }
        match name {
            "concurrency" => match crate::wire::json::as_integer(raw) {
                Some(n) if (0..=i64::from(i32::MAX)).contains(&n) => o.concurrency = Some(n as i32),
                _ => v.push(Violation::new("$.concurrency", "'concurrency' must be an integer >= 0")),
            },
            "rate" | "throttle" => match rate_limit::window(raw, &format!("$.{name}")) {
                Ok(w) if name == "rate" => o.rate = Some(window_of(w)),
                Ok(w) => o.throttle = Some(window_of(w)),
                Err(e) => v.extend(e),
            },
            "limit" | "period" => {}
            "expires_at" => match crate::wire::json::decode::<String>(raw)
                .ok()
                .and_then(|t| DateTime::parse_from_rfc3339(&t).ok())
            {
                Some(t) => o.expires_at = Some(t.with_timezone(&Utc)),
                None => v.push(Violation::new("$.expires_at", "'expires_at' must be an RFC 3339 timestamp")),
            },
            other => v.push(Violation::new(
                format!("$.{other}"),
                format!("unknown override field '{other}' (concurrency, rate, throttle, limit, period, expires_at)"),
            )),
        }
    }
    // The admin UI's form: a rate of `limit` per `period`.
    if obj.get("limit").is_some() || obj.get("period").is_some() {
        let text = crate::wire::json::object_text(
            obj.iter().filter(|(k, _)| *k == "limit" || *k == "period"),
        );
        match rate_limit::window(&crate::wire::json::raw(text), "$") {
            Ok(_) if o.rate.is_some() => v.push(Violation::new(
                "$.limit",
                "give 'rate' or 'limit' with 'period', not both",
            )),
            Ok(w) => o.rate = Some(window_of(w)),
            Err(e) => v.extend(e),
        }
    }
    if v.is_empty() { Ok(o) } else { Err(v) }
}

/// A path segment that cannot be a key names none: 404.
fn known_key(key: &str) -> Result<&str, ApiError> {
    if rate_limit::valid_key(key) {
        Ok(key)
    } else {
        Err(ApiError::not_found("rate-limit key", key))
    }
}
