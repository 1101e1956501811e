//! A queue's configuration ([OJS queue configuration]), read and changed under
//! `/ojs/v1/queues/{name}/config` and `/ojs/v1/admin/queues/{name}/config` alike; `_default`
//! names the configuration every queue inherits.
//!
//! [OJS queue configuration]: https://github.com/openjobspec/spec/blob/main/spec/ojs-queue-config.md

use std::borrow::Cow;

use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::openapi::schema::{AnyOfBuilder, Schema};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{IntoParams, PartialSchema, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::body::QueueBody;
use crate::http::error::ApiError;
use crate::http::extract::{JsonBody, check_queue_name, path_segment};
use crate::http::openapi::values::{Duration, NonEmpty, Seconds};
use crate::http::{AppState, ok};
use crate::job::id_schema::QueueName;
use crate::queue_config::{DEFAULT_LAYER, OverflowPolicy, WireConfig};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(show_config, put_config))
        .routes(routes!(admin_show_config, admin_put_config))
}

/// A queue's `rate_limit`: `{"limit", "period"}`, or the shorthands `{"rate": {"limit",
/// "period"}}`, `{"rate": N, "period"}` and `{"max_per_second": N}`, or `null` to reset it.
/// (A `PUT` may also give one member, or reset one with `null`, and keep the other as set
/// before; the schema asks for both.)
fn rate_limit_schema() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{
        AdditionalProperties, ObjectBuilder, OneOfBuilder, Schema, Type,
    };
    let limit = || {
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .minimum(Some(1))
            .maximum(Some(i64::MAX))
    };
    let period = crate::http::openapi::values::rate_period;
    let plain = || {
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .property("limit", limit())
            .property("period", period())
            .required("limit")
            .required("period")
            .additional_properties(Some(AdditionalProperties::FreeForm(false)))
    };
    let object = |name: &str, value: ObjectBuilder| {
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .property(name, value)
            .required(name)
    };
    Schema::OneOf(
        OneOfBuilder::new()
            .item(plain())
            .item(
                object("rate", plain().schema_type(Type::Object))
                    .additional_properties(Some(AdditionalProperties::FreeForm(false))),
            )
            .item(
                object("rate", limit())
                    .property("period", period())
                    .required("period")
                    .additional_properties(Some(AdditionalProperties::FreeForm(false))),
            )
            .item(
                object("max_per_second", limit())
                    .additional_properties(Some(AdditionalProperties::FreeForm(false))),
            )
            .item(ObjectBuilder::new().schema_type(Type::Null))
            .description(Some(
                "`{\"limit\": N, \"period\": \"PT1M\"}` (`period` may also be `second`, \
                 `minute`, `hour` or `day`); also accepted as `{\"rate\": {\"limit\", \
                 \"period\"}}`, `{\"rate\": N, \"period\"}` or `{\"max_per_second\": N}`.",
            ))
            .build(),
    )
}

/// The queue name of a configuration path: a queue, or `_default` for the configuration every
/// queue inherits; any other name is refused with 400.
#[derive(IntoParams)]
#[into_params(names("name"), parameter_in = Path)]
struct ConfigPath(
    /// A queue name, or `_default` for the configuration every queue inherits.
    #[param(pattern = r"^(_default|[a-z0-9][a-z0-9.-]{0,127})$", max_length = 128)]
    String,
);

impl<S: Send + Sync> FromRequestParts<S> for ConfigPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let name = path_segment(parts, state).await?;
        if name != DEFAULT_LAYER {
            check_queue_name("path.name", &name)?;
        }
        Ok(ConfigPath(name))
    }
}

/// A configuration `PUT` (or the `config` of a new queue): the fields to set; `null` resets a
/// field to the inherited value, and the members of `retention`, `default_retry` and
/// `rate_limit` merge one by one with those already set.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // documentation: read by `queue_config::apply_patch`
pub(super) struct QueueConfigUpdate {
    /// Most jobs waiting in the queue.
    #[schema(minimum = 1)]
    max_size: Option<i64>,
    /// Most bytes of waiting job envelopes.
    #[schema(minimum = 1)]
    max_size_bytes: Option<i64>,
    /// What an enqueue past the bound does (`drop-oldest` is also accepted for `drop_oldest`).
    #[schema(value_type = Option<OverflowPolicy>)]
    overflow_policy: Option<String>,
    /// Fraction of the bound from which responses carry the pressure headers.
    #[schema(minimum = 0, maximum = 1)]
    warning_threshold: Option<f64>,
    /// Most jobs of the queue active at once.
    #[schema(minimum = 0)]
    concurrency: Option<i64>,
    /// `{"limit": N, "period": "PT1M"}` (`period` may also be `second`, `minute`, `hour` or
    /// `day`); also accepted as `{"rate": {"limit", "period"}}`, `{"rate": N, "period"}` or
    /// `{"max_per_second": N}`.
    #[schema(schema_with = rate_limit_schema)]
    rate_limit: Option<serde_json::Value>,
    /// Integer seconds (at least 1) or an ISO 8601 duration of at least a second.
    #[schema(value_type = Option<Seconds>, inline)]
    visibility_timeout: Option<serde_json::Value>,
    /// Integer seconds (at least 1) or an ISO 8601 duration of at least a second.
    #[schema(value_type = Option<Seconds>, inline)]
    default_timeout: Option<serde_json::Value>,
    /// Retry policy fields jobs of the queue get when they set none of their own.
    #[schema(value_type = Option<Object>)]
    default_retry: Option<serde_json::Value>,
    /// How long terminal jobs are kept.
    retention: Option<QueueRetentionUpdate>,
    /// Seconds a result is served after its job ended, for jobs that name no `result_ttl` of
    /// their own (0: not stored, -1: as long as the job is kept); applied at enqueue.
    #[schema(minimum = -1, maximum = 2147483647)]
    result_ttl: Option<i64>,
    /// The queue that receives the queue's dead letters (not the queue itself).
    #[schema(value_type = Option<QueueName>)]
    dead_letter_queue: Option<String>,
    #[schema(minimum = 1)]
    dead_letter_max_size: Option<i64>,
    /// ISO 8601 duration.
    #[schema(value_type = Option<Duration>, inline)]
    dead_letter_ttl: Option<String>,
    /// Job type patterns the queue accepts (`*` matches any run of characters).
    #[schema(min_items = 1, value_type = Option<Vec<NonEmpty>>)]
    allowed_job_types: Option<Vec<String>>,
    /// Producer patterns the queue accepts (`OJS-Producer`; `*` accepts any).
    #[schema(min_items = 1, value_type = Option<Vec<NonEmpty>>)]
    producers: Option<Vec<String>>,
    /// Alias of `max_size` (`max_depth`, 0 meaning unlimited), `max_size_bytes`,
    /// `overflow_policy` (`strategy`) and `warning_threshold`; the plain fields win.
    #[schema(nullable = false)]
    backpressure: Option<QueueBackpressureUpdate>,
}

/// Retention of terminal jobs: ISO 8601 durations, `null` to reset one.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // documentation
struct QueueRetentionUpdate {
    #[schema(value_type = Option<Duration>, inline)]
    completed: Option<String>,
    #[schema(value_type = Option<Duration>, inline)]
    discarded: Option<String>,
    #[schema(value_type = Option<Duration>, inline)]
    cancelled: Option<String>,
}

/// The backpressure alias of a configuration update.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // documentation
struct QueueBackpressureUpdate {
    /// `max_size`; 0 means unlimited.
    #[schema(minimum = 0)]
    max_depth: Option<i64>,
    #[schema(minimum = 1)]
    max_size_bytes: Option<i64>,
    /// `overflow_policy`.
    #[schema(value_type = Option<OverflowPolicy>)]
    strategy: Option<String>,
    #[schema(minimum = 0, maximum = 1)]
    warning_threshold: Option<f64>,
}

/// The queue and its configuration: `{"config", "name"}`.
#[derive(Serialize, ToSchema)]
#[schema(as = NamedQueueConfig)]
struct ConfigBody<'a> {
    config: WireConfig<'a>,
    name: &'a str,
}

/// `GET /ojs/v1/queues/{name}/config` (and `_default`, and the admin alias): the resolved
/// configuration.
#[utoipa::path(
    get,
    path = "/ojs/v1/queues/{name}/config",
    tag = "queues",
    summary = "Read a queue's configuration",
    params(ConfigPath),
    responses(
        (status = 200, description = "The resolved configuration.", body = ConfigBody<'_>),
        (status = 400, description = "The queue name is invalid."),
        (status = 404, description = "No such queue."),
    )
)]
async fn show_config(
    State(state): State<AppState>,
    ConfigPath(name): ConfigPath,
) -> Result<Response, ApiError> {
    let config = state.broker().queue_config(&name).await?;
    Ok(ok(ConfigBody {
        config: config.wire(),
        name: &name,
    })
    .into_response())
}

/// The 200 body of a configuration `PUT`: the queue object, or for `_default` the
/// configuration with its name ([`ConfigBody`]). Both have `name` and `config`, so the
/// schema is an `anyOf` (a `oneOf` would match a queue object twice).
struct PutConfigResult;

impl PartialSchema for PutConfigResult {
    fn schema() -> RefOr<Schema> {
        AnyOfBuilder::new()
            .item(Ref::from_schema_name(QueueBody::name()))
            .item(Ref::from_schema_name(ConfigBody::name()))
            .description(Some(
                "The queue object; for `_default`, `{\"config\", \"name\"}`.",
            ))
            .into()
    }
}

impl ToSchema for PutConfigResult {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("QueueConfigPutResult")
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((QueueBody::name().into(), QueueBody::schema()));
        QueueBody::schemas(schemas);
        schemas.push((ConfigBody::name().into(), ConfigBody::schema()));
        ConfigBody::schemas(schemas);
    }
}

/// `PUT /ojs/v1/queues/{name}/config` (and `_default`, and the admin alias): merges the body
/// into the queue's own configuration (creating an unknown queue); 200 with the queue object.
#[utoipa::path(
    put,
    path = "/ojs/v1/queues/{name}/config",
    tag = "queues",
    summary = "Change a queue's configuration",
    params(ConfigPath),
    request_body = QueueConfigUpdate,
    responses(
        (status = 200, description = "The queue object (for `_default`, its configuration).", body = PutConfigResult),
        (status = 400, description = "A field is unknown or invalid."),
        (status = 422, description = "`default_retry` is not a valid retry policy."),
    )
)]
async fn put_config(
    State(state): State<AppState>,
    ConfigPath(name): ConfigPath,
    body: JsonBody,
) -> Result<Response, ApiError> {
    body.object()?;
    let value: serde_json::Value = serde_json::from_str(body.text())
        .map_err(|_| ApiError::invalid_field("$", "the body must be a JSON object"))?;
    let broker = state.broker();
    let config = broker.set_queue_config(&name, &value).await?;
    if name == DEFAULT_LAYER {
        return Ok(ok(ConfigBody {
            config: config.wire(),
            name: &name,
        })
        .into_response());
    }
    let queue = broker.queue(&name).await?;
    let configs = broker.queue_configs().await?;
    Ok(ok(QueueBody::of(&queue, &configs)).into_response())
}

/// `GET /ojs/v1/admin/queues/{name}/config`: [`show_config`].
#[utoipa::path(
    get,
    path = "/ojs/v1/admin/queues/{name}/config",
    tag = "admin",
    summary = "Read a queue's configuration",
    description = "The same as `GET /ojs/v1/queues/{name}/config`.",
    params(ConfigPath),
    responses(
        (status = 200, description = "The resolved configuration.", body = ConfigBody<'_>),
        (status = 400, description = "The queue name is invalid."),
        (status = 404, description = "No such queue."),
    )
)]
async fn admin_show_config(state: State<AppState>, name: ConfigPath) -> Result<Response, ApiError> {
    show_config(state, name).await
}

/// `PUT /ojs/v1/admin/queues/{name}/config`: [`put_config`].
#[utoipa::path(
    put,
    path = "/ojs/v1/admin/queues/{name}/config",
    tag = "admin",
    summary = "Change a queue's configuration",
    description = "The same as `PUT /ojs/v1/queues/{name}/config`.",
    params(ConfigPath),
    request_body = QueueConfigUpdate,
    responses(
        (status = 200, description = "The queue object (for `_default`, its configuration).", body = PutConfigResult),
        (status = 400, description = "A field is unknown or invalid."),
        (status = 422, description = "`default_retry` is not a valid retry policy."),
    )
)]
async fn admin_put_config(
    state: State<AppState>,
    name: ConfigPath,
    body: JsonBody,
) -> Result<Response, ApiError> {
    put_config(state, name, body).await
}
