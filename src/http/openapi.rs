//! The OpenAPI 3.1 document of the HTTP API, served at `GET /ojs/openapi.json`.
//!
//! The document is not written by hand: every route is registered through
//! [`utoipa_axum::routes!`] from its handler's `#[utoipa::path]` annotation, so the router and
//! the document come out of the same list. `finish` adds what every operation shares (the
//! OJS media types, the error body on every failure status). The schemas of bodies the server
//! writes with its own serializers (a job, an error) are declared here; the integration suite
//! validates every request it makes and every response it gets against the document, so a
//! schema that drifts from the code fails the tests.

use std::sync::Arc;

use axum::Extension;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use utoipa::openapi::path::Operation;
use utoipa::openapi::{Content, OpenApi, RefOr, ResponseBuilder};
use utoipa::{OpenApi as _, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{AppState, OJS_JSON};

/// Media types a JSON request body may be sent as.
const REQUEST_TYPES: [&str; 2] = ["application/json", OJS_JSON];

#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "ojsd",
        description = "An Open Job Spec job server on PostgreSQL: the OJS HTTP binding (jobs, \
                       workers, queues, dead letters, events) and its admin API.\n\nEvery JSON \
                       body is read whole and refused (400) when any string or member name in \
                       it holds U+0000 or half of a UTF-16 surrogate pair, when it nests deeper \
                       than 32 levels, or when a number is beyond what a double holds.",
        license(name = "Apache-2.0", identifier = "Apache-2.0")
    ),
    components(schemas(super::error::ErrorBody<'static>, Job, JobError, RetryPolicy, UniquePolicy, crate::job::JobState, values::Priority)),
    tags(
        (name = "system", description = "Manifest, health, readiness and metrics."),
        (name = "jobs", description = "Enqueue, read, cancel and reprioritise jobs."),
        (name = "workers", description = "The worker protocol: fetch, ack, nack, heartbeat."),
        (name = "queues", description = "Queues, their statistics and configuration."),
        (name = "dead-letter", description = "Jobs that failed for good."),
        (name = "events", description = "The job event log and its streams."),
        (name = "admin", description = "Operator endpoints."),
    )
)]
struct Base;

/// The serialized document, shared with the handler that serves it.
#[derive(Clone)]
struct Document(Arc<[u8]>);

/// The limits of this server that its schemas state (they are settings, so the document is
/// completed when the server starts).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Most jobs one FETCH may ask for.
    pub max_fetch_count: usize,
    /// Most items of a batch (enqueue, ACK, NACK).
    pub max_batch_jobs: usize,
    /// The largest priority.
    pub max_priority: i32,
}

/// Routes `GET /ojs/openapi.json` and completes `api`'s document; returns the router with the
/// document attached, and the document.
pub fn serve(api: OpenApiRouter<AppState>, limits: Limits) -> (axum::Router<AppState>, Value) {
    let (router, mut doc) = OpenApiRouter::with_openapi(Base::openapi())
        .routes(routes!(openapi_json))
        .merge(api)
        .split_for_parts();
    finish(&mut doc);
    let mut doc = serde_json::to_value(&doc).expect("the document serializes");
    with_limits(&mut doc, limits);
    let bytes = serde_json::to_vec(&doc).unwrap_or_default();
    (router.layer(Extension(Document(bytes.into()))), doc)
}

/// The document as `ojsd` would serve it with `api`'s routes (for tests and tooling).
pub fn document(api: OpenApiRouter<AppState>, limits: Limits) -> Value {
    serve(api, limits).1
}

/// Writes this server's limits into the schemas that depend on them, and makes optional
/// request bodies that may be left out, but are never `null`, say so.
fn with_limits(value: &mut Value, limits: Limits) {
    let schemas = &mut value["components"]["schemas"];
    let mut set = |pointer: &str, member: &str, to: Value| {
        if let Some(Value::Object(schema)) = schemas.pointer_mut(pointer) {
            schema.insert(member.to_owned(), to);
        }
    };
    set("/FetchCount", "maximum", limits.max_fetch_count.into());
    for batch in [
        "/BatchRequest/properties/jobs",
        "/AckBatchRequest/properties/acks",
        "/NackBatchRequest/properties/nacks",
    ] {
        set(batch, "maxItems", limits.max_batch_jobs.into());
    }
    set("/Priority/oneOf/0", "maximum", limits.max_priority.into());
    either_or(schemas);
    // An optional body (`request_body = Option<T>`) comes out as `T` or `null`; the server
    // reads a body that is there as an object, so `null` is not one of its forms.
    if let Some(Value::Object(paths)) = value.get_mut("paths") {
        for operation in paths.values_mut().filter_map(Value::as_object_mut) {
            for operation in operation.values_mut() {
                let Some(Value::Object(content)) = operation.pointer_mut("/requestBody/content")
                else {
                    continue;
                };
                for media in content.values_mut() {
                    let Some(schema) = media.get_mut("schema") else {
                        continue;
                    };
                    if let Some(Value::Array(items)) = schema.get("oneOf") {
                        let not_null: Vec<&Value> =
                            items.iter().filter(|i| i["type"] != "null").collect();
                        if not_null.len() == 1 && items.len() == 2 {
                            *schema = not_null[0].clone();
                        }
                    }
                }
            }
        }
    }
}

/// Writes the request rules a derived schema cannot state: which members stand in for each
/// other. Each component named here must exist (a test checks).
fn either_or(schemas: &mut Value) {
    let required = |member: &str| serde_json::json!({"required": [member]});
    let requeued =
        serde_json::json!({"required": ["requeue"], "properties": {"requeue": {"const": true}}});
    for (component, any_of) in [
        // A NACK's `error` may be left out only to requeue.
        (
            "NackRequestSchema",
            vec![required("error"), requeued.clone()],
        ),
        ("NackBatchItem", vec![required("error"), requeued]),
        // A progress report gives a fraction or a percentage.
        (
            "ProgressReportRequest",
            vec![required("progress"), required("percentage")],
        ),
        // A worker registers under `worker_id` or `id`.
        (
            "RegisterFields",
            vec![required("worker_id"), required("id")],
        ),
    ] {
        if let Some(Value::Object(schema)) = schemas.get_mut(component) {
            schema.insert("anyOf".to_owned(), Value::Array(any_of));
        }
    }
    // Moving a queue's jobs needs the queue they move to.
    if let Some(Value::Object(delete)) = schemas.get_mut("QueueDeleteRequest") {
        delete.insert(
            "anyOf".to_owned(),
            serde_json::json!([
                {"properties": {"strategy": {"enum": ["reject", "discard"]}}},
                {"required": ["target_queue"]},
            ]),
        );
    }
    // A registration is the fields, or the same fields wrapped as `{"worker": {...}}`.
    if let Some(Value::Object(register)) = schemas.get_mut("RegisterRequest") {
        let fields = serde_json::json!({"$ref": "#/components/schemas/RegisterFields"});
        register.remove("allOf");
        register.insert(
            "anyOf".to_owned(),
            serde_json::json!([
                fields,
                {"type": "object", "required": ["worker"], "properties": {"worker": fields}},
            ]),
        );
    }
}

/// This document.
#[utoipa::path(
    get,
    path = "/ojs/openapi.json",
    tag = "system",
    responses((status = 200, description = "The OpenAPI 3.1 document of this server.", body = Object))
)]
async fn openapi_json(Extension(doc): Extension<Document>) -> Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            axum::http::HeaderValue::from_static("application/json"),
        )],
        doc.0.to_vec(),
    )
        .into_response()
}

/// Completes the document: JSON request bodies may come as either JSON media type, JSON
/// responses are `application/openjobspec+json`, and every operation documents the error body
/// for the failures any request can meet (a refused body or header, the database away, a
/// timeout).
fn finish(doc: &mut OpenApi) {
    let error = ResponseBuilder::new()
        .description(
            "An OJS error: `error.code` says what went wrong, `error.retryable` whether the same \
             request may succeed later.",
        )
        .content(
            OJS_JSON,
            Content::new(Some(RefOr::Ref(schema_ref("ErrorBody")))),
        )
        .build();
    // Handlers in different modules share names (`list`, `show`); an operation id must be
    // unique, so a shared one becomes the method and path.
    let mut seen = std::collections::HashMap::<String, usize>::new();
    for item in doc.paths.paths.values_mut() {
        for operation in operations(item) {
            if let Some(id) = &operation.operation_id {
                *seen.entry(id.clone()).or_default() += 1;
            }
        }
    }
    for (path, item) in doc.paths.paths.iter_mut() {
        for (method, operation) in methods(item) {
            if operation
                .operation_id
                .as_ref()
                .is_none_or(|id| seen.get(id).copied().unwrap_or(0) > 1)
            {
                operation.operation_id = Some(slug(method, path));
            }
        }
    }
    for item in doc.paths.paths.values_mut() {
        for operation in operations(item) {
            if let Some(body) = operation.request_body.as_mut()
                && let Some(content) = body.content.remove("application/json")
            {
                for media in REQUEST_TYPES {
                    body.content.insert(media.to_owned(), content.clone());
                }
            }
            for (status, response) in operation.responses.responses.iter_mut() {
                let RefOr::T(response) = response else {
                    continue;
                };
                if let Some(content) = response.content.shift_remove("application/json") {
                    response.content.insert(OJS_JSON.to_owned(), content);
                }
                if status.starts_with(['4', '5']) && response.content.is_empty() {
                    response
                        .content
                        .insert(OJS_JSON.to_owned(), error.content[OJS_JSON].clone());
                }
            }
            operation
                .responses
                .responses
                .entry("default".to_owned())
                .or_insert_with(|| RefOr::T(error.clone()));
        }
    }
}

fn schema_ref(name: &str) -> utoipa::openapi::Ref {
    utoipa::openapi::Ref::from_schema_name(name)
}

/// `get_ojs_v1_jobs_id` for `GET /ojs/v1/jobs/{id}`.
fn slug(method: &str, path: &str) -> String {
    let mut id = method.to_owned();
    for part in path.split(|c: char| !c.is_ascii_alphanumeric()) {
        if !part.is_empty() {
            id.push('_');
            id.push_str(part);
        }
    }
    id
}

fn methods(
    item: &mut utoipa::openapi::PathItem,
) -> impl Iterator<Item = (&'static str, &mut Operation)> {
    [
        ("get", item.get.as_mut()),
        ("put", item.put.as_mut()),
        ("post", item.post.as_mut()),
        ("delete", item.delete.as_mut()),
        ("options", item.options.as_mut()),
        ("head", item.head.as_mut()),
        ("patch", item.patch.as_mut()),
        ("trace", item.trace.as_mut()),
    ]
    .into_iter()
    .filter_map(|(method, operation)| operation.map(|o| (method, o)))
}

fn operations(item: &mut utoipa::openapi::PathItem) -> impl Iterator<Item = &mut Operation> {
    methods(item).map(|(_, operation)| operation)
}

/// A job in its OJS JSON form, as every endpoint returns it. Attributes the client sent that
/// the server does not interpret come back unchanged beside these.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)]
pub struct Job {
    /// Always `1.0.0-rc.1`.
    specversion: String,
    /// UUIDv7.
    id: String,
    r#type: String,
    queue: String,
    #[schema(value_type = Vec<Value>)]
    args: Vec<Value>,
    #[schema(value_type = Object)]
    meta: Value,
    /// 0 is the most urgent.
    priority: i32,
    /// Seconds (rounded up from `timeout_ms`).
    timeout: i64,
    timeout_ms: i64,
    retry: RetryPolicy,
    unique: Option<UniquePolicy>,
    tags: Option<Vec<String>>,
    schema: Option<String>,
    /// RFC 3339, as the client sent it.
    scheduled_at: Option<String>,
    expires_at: Option<String>,
    visibility_timeout_ms: Option<i64>,
    enqueue_ttl: Option<i64>,
    total_timeout: Option<i64>,
    #[schema(value_type = crate::job::JobState)]
    state: String,
    /// The state before this request changed it (cancel, activate).
    #[schema(value_type = Option<crate::job::JobState>)]
    previous_state: Option<String>,
    attempt: i32,
    max_attempts: i32,
    created_at: String,
    enqueued_at: Option<String>,
    activated_at: Option<String>,
    re_enqueued_at: Option<String>,
    original_queue: Option<String>,
    started_at: Option<String>,
    worker_id: Option<String>,
    /// While active: when the claim lapses unless extended.
    visible_until: Option<String>,
    /// While retryable: when the next attempt becomes available.
    next_retry_at: Option<String>,
    next_attempt_at: Option<String>,
    retry_delay_ms: Option<i64>,
    completed_at: Option<String>,
    cancelled_at: Option<String>,
    discarded_at: Option<String>,
    dead_lettered_at: Option<String>,
    /// What the worker's ACK reported.
    result: Option<Value>,
    /// The last attempt's error.
    error: Option<JobError>,
    /// Every attempt's error, oldest first; `[]` before any failure.
    errors: Vec<JobError>,
    unique_key: Option<String>,
    /// True when a unique policy returned an existing job instead of creating one.
    deduplicated: Option<bool>,
    /// Admin job detail only: the `retry` policy again.
    retry_policy: Option<RetryPolicy>,
    /// Admin job detail only: the lifecycle timestamps the job has.
    #[schema(value_type = Option<Object>)]
    metadata: Option<Value>,
}

/// A failed attempt's error, as the worker reported it.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)]
struct JobError {
    code: Option<String>,
    message: Option<String>,
    retryable: Option<bool>,
    #[schema(value_type = Option<Object>)]
    details: Option<Value>,
    attempt: Option<i32>,
    timestamp: Option<String>,
}

/// How a failed job is retried. Durations are ISO 8601 (`PT1S`); `*_ms` spellings are accepted
/// on enqueue.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)]
pub struct RetryPolicy {
    max_attempts: Option<i32>,
    initial_interval: Option<String>,
    /// Accepted on enqueue for `initial_interval`.
    initial_interval_ms: Option<i64>,
    backoff_coefficient: Option<f64>,
    max_interval: Option<String>,
    /// Accepted on enqueue for `max_interval`.
    max_interval_ms: Option<i64>,
    jitter: Option<bool>,
    non_retryable_errors: Option<Vec<String>>,
    on_exhaustion: Option<String>,
}

/// At most one job per key: how the key is made and what a duplicate does.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)]
pub struct UniquePolicy {
    /// Which of `type`, `queue`, `args` and `meta` make the key.
    keys: Option<Vec<String>>,
    /// Args field names (or, when only dimension names, the same as `keys`).
    key: Option<Vec<String>>,
    period: Option<String>,
    /// Accepted on enqueue for `period`.
    period_ms: Option<i64>,
    states: Option<Vec<String>>,
    on_conflict: Option<String>,
}

/// `{"job": {...}}`.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)]
pub struct JobBody {
    job: Job,
}

/// Named schemas of request values whose rules are written in code rather than in a Rust type
/// (the parsers read them from the request's JSON), each built from the constants the parser
/// checks against; `finish` fills in the limits that are server settings.
pub mod values {
    use utoipa::openapi::RefOr;
    use utoipa::openapi::schema::{
        KnownFormat, ObjectBuilder, OneOfBuilder, Schema, SchemaFormat, Type,
    };

    use crate::wire::duration;

    /// A positive number of milliseconds, at most 100 years.
    pub struct Milliseconds;

    impl utoipa::PartialSchema for Milliseconds {
        fn schema() -> RefOr<Schema> {
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .minimum(Some(1))
                .maximum(Some(duration::MAX_MS))
                .description(Some("Milliseconds, from 1 to 100 years."))
                .into()
        }
    }

    impl utoipa::ToSchema for Milliseconds {}

    /// How many jobs a FETCH may ask for: 1 to the server's `limits.max_fetch_count`.
    pub struct FetchCount;

    impl utoipa::PartialSchema for FetchCount {
        fn schema() -> RefOr<Schema> {
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .minimum(Some(1))
                .description(Some("1 to the server's `limits.max_fetch_count`."))
                .into()
        }
    }

    impl utoipa::ToSchema for FetchCount {}

    /// An RFC 3339 timestamp with a zone.
    pub struct Timestamp;

    impl utoipa::PartialSchema for Timestamp {
        fn schema() -> RefOr<Schema> {
            ObjectBuilder::new()
                .schema_type(Type::String)
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime)))
                .min_length(Some(20))
                .pattern(Some(crate::wire::timestamp::PATTERN))
                .description(Some("RFC 3339, with a zone (`Z` or `±hh:mm`)."))
                .into()
        }
    }

    impl utoipa::ToSchema for Timestamp {}

    /// A duration: ISO 8601 (`PT30S`, `P1DT2H`) or the short form (`500ms`, `30s`, `5m`).
    pub struct Duration;

    impl utoipa::PartialSchema for Duration {
        fn schema() -> RefOr<Schema> {
            ObjectBuilder::new()
                .schema_type(Type::String)
                .min_length(Some(1))
                .pattern(Some(duration::pattern()))
                .description(Some(
                    "ISO 8601 (`PT30S`, `P1DT2H`, weeks and days but no months or years) or one \
                     number and unit (`500ms`, `30s`, `5m`, `2h`, `7d`).",
                ))
                .into()
        }
    }

    impl utoipa::ToSchema for Duration {}

    /// A whole number of seconds from 1, or a duration of at least a second.
    pub struct Seconds;

    impl utoipa::PartialSchema for Seconds {
        fn schema() -> RefOr<Schema> {
            OneOfBuilder::new()
                .item(
                    ObjectBuilder::new()
                        .schema_type(Type::Integer)
                        .minimum(Some(1))
                        .maximum(Some(duration::MAX_MS / 1_000)),
                )
                .item(
                    ObjectBuilder::new()
                        .schema_type(Type::String)
                        .min_length(Some(2))
                        .pattern(Some(duration::pattern_at_least_a_second())),
                )
                .description(Some(
                    "Whole seconds from 1, or a duration of at least a second (`PT30S`, `5m`).",
                ))
                .into()
        }
    }

    impl utoipa::ToSchema for Seconds {}

    /// A string that is not empty.
    pub struct NonEmpty;

    impl utoipa::PartialSchema for NonEmpty {
        fn schema() -> RefOr<Schema> {
            ObjectBuilder::new()
                .schema_type(Type::String)
                .min_length(Some(1))
                .into()
        }
    }

    impl utoipa::ToSchema for NonEmpty {}

    /// `true`: the request acts on many jobs at once, and says so.
    pub struct Confirm;

    impl utoipa::PartialSchema for Confirm {
        fn schema() -> RefOr<Schema> {
            ObjectBuilder::new()
                .schema_type(Type::Boolean)
                .enum_values(Some([true]))
                .description(Some(
                    "Must be `true`: the request acts on many jobs at once.",
                ))
                .into()
        }
    }

    impl utoipa::ToSchema for Confirm {}

    /// A priority: an integer from 0 (most urgent) to the server's maximum (the manifest's
    /// `priority.max`), or an alias name in any case.
    pub struct Priority;

    impl utoipa::PartialSchema for Priority {
        fn schema() -> RefOr<Schema> {
            // Each letter of each name either way round: `^([cC][rR]...|...)$`.
            let names: Vec<String> = crate::job::PRIORITY_ALIASES
                .iter()
                .map(|(name, _)| {
                    name.chars()
                        .map(|c| format!("[{}{}]", c, c.to_ascii_uppercase()))
                        .collect()
                })
                .collect();
            let aliases: Vec<String> = crate::job::PRIORITY_ALIASES
                .iter()
                .map(|(name, n)| format!("`{name}` ({n})"))
                .collect();
            OneOfBuilder::new()
                .item(
                    ObjectBuilder::new()
                        .schema_type(Type::Integer)
                        .minimum(Some(0))
                        .description(Some("0 (most urgent) to the server's `priority.max`.")),
                )
                .item(
                    ObjectBuilder::new()
                        .schema_type(Type::String)
                        .pattern(Some(format!("^({})$", names.join("|"))))
                        .description(Some(format!("{}, in any case.", aliases.join(", ")))),
                )
                .into()
        }
    }

    impl utoipa::ToSchema for Priority {}
}

/// A number of seconds, or an ISO 8601 duration (`PT30S`); `*_ms` spellings take milliseconds.
#[derive(ToSchema, serde::Deserialize)]
#[schema(as = Duration)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum DurationSchema {
    Number(i64),
    Text(String),
}

/// A job to enqueue (the OJS job envelope). The options may also be given inside `options`;
/// attributes the server does not interpret are kept and returned with the job.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)]
pub struct Enqueue {
    /// Dot-separated lowercase segments, e.g. `email.send`.
    r#type: String,
    /// The job's arguments.
    #[schema(value_type = Vec<Value>)]
    args: Vec<Value>,
    /// A client-chosen UUIDv7; generated when left out.
    id: Option<String>,
    /// `1.0.0-rc.1` or `1.0`.
    specversion: Option<String>,
    #[schema(value_type = Option<Object>)]
    meta: Option<Value>,
    /// The same options, nested.
    options: Option<EnqueueOptions>,
    #[serde(flatten)]
    top: EnqueueOptions,
}

/// Options of an enqueued job.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)]
pub struct EnqueueOptions {
    /// Default `default`.
    queue: Option<String>,
    /// Default 2; negative values are refused.
    #[schema(value_type = Option<values::Priority>)]
    priority: Option<serde_json::Value>,
    timeout: Option<DurationSchema>,
    timeout_ms: Option<i64>,
    visibility_timeout: Option<DurationSchema>,
    visibility_timeout_ms: Option<i64>,
    /// RFC 3339: run no earlier than this.
    scheduled_at: Option<String>,
    delay_until: Option<String>,
    /// RFC 3339: discard instead of running after this.
    expires_at: Option<String>,
    enqueue_ttl: Option<DurationSchema>,
    total_timeout: Option<DurationSchema>,
    /// Stage the job until `POST /ojs/v1/jobs/{id}/activate`.
    pending: Option<bool>,
    tags: Option<Vec<String>>,
    schema: Option<String>,
    retry: Option<RetryPolicy>,
    retry_policy: Option<RetryPolicy>,
    unique: Option<UniquePolicy>,
    max_attempts: Option<i32>,
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::time::Duration;

    use super::*;
    use crate::http::HttpSettings;

    /// Settings under which every optional route is on.
    const LIMITS: Limits = Limits {
        max_fetch_count: 100,
        max_batch_jobs: 100,
        max_priority: 255,
    };

    pub(super) fn every_route() -> HttpSettings {
        HttpSettings {
            max_envelope_bytes: 1 << 20,
            max_request_bytes: 2 << 20,
            max_batch_bytes: 8 << 20,
            max_batch_jobs: 100,
            max_fetch_count: 100,
            max_wait: Duration::from_secs(30),
            heartbeat_interval_secs: 5,
            request_timeout: Duration::from_secs(30),
            body_idle_timeout: Duration::from_secs(30),
            test_hooks: true,
            shutdown_timeout: Duration::from_secs(5),
            dead_letter_retention: Duration::from_secs(3600),
            instance_id: "test".to_owned(),
            plain_json: false,
            admin_ui_dir: Some("/nonexistent".into()),
        }
    }

    /// The `(METHOD, path)` pairs an axum router routes, read from its `Debug` form: axum keeps
    /// no public list of its routes. The route ids tie `node: Node { paths: {RouteId(n): "/p"} }`
    /// to `RouteId(n): MethodRouter(... allow_header: Bytes(b"GET,HEAD,POST") })`.
    fn routed(router: &axum::Router<AppState>) -> BTreeSet<(String, String)> {
        let debug = format!("{router:?}");
        // The first route table is the router's own; the fallback router's follows it.
        let table = &debug[..debug
            .find("fallback_router")
            .expect("a Router's Debug form")];
        let paths_at = table
            .find("node: Node { paths: {")
            .expect("the route paths");
        let mut paths = std::collections::HashMap::new();
        for entry in table[paths_at..].split("RouteId(").skip(1) {
            let (id, rest) = entry.split_once("): \"").expect("RouteId(n): \"path\"");
            let path = &rest[..rest.find('"').expect("a quoted path")];
            paths.insert(id.to_owned(), path.to_owned());
        }
        let mut routes = BTreeSet::new();
        for entry in table[..paths_at].split("RouteId(").skip(1) {
            let (id, rest) = entry.split_once(')').expect("RouteId(n)");
            let methods = rest
                .split_once("allow_header: Bytes(b\"")
                .and_then(|(_, m)| m.split_once('"'))
                .expect("each route lists its methods")
                .0;
            for method in methods.split(',').filter(|m| *m != "HEAD") {
                routes.insert((method.to_owned(), paths[id].clone()));
            }
        }
        routes
    }

    fn documented(doc: &Value) -> BTreeSet<(String, String)> {
        let mut operations = BTreeSet::new();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for method in ["get", "post", "put", "patch", "delete"] {
                if item.get(method).is_some() {
                    operations.insert((method.to_uppercase(), path.clone()));
                }
            }
        }
        operations
    }

    #[test]
    fn the_servers_limits_are_in_the_schemas_and_optional_bodies_are_objects() {
        let doc = document(crate::http::api(&every_route()), LIMITS);
        let schemas = &doc["components"]["schemas"];
        assert_eq!(schemas["FetchCount"]["maximum"], 100);
        assert_eq!(schemas["Priority"]["oneOf"][0]["maximum"], 255);
        assert_eq!(
            schemas["BatchRequest"]["properties"]["jobs"]["maxItems"],
            100
        );
        for component in [
            "NackRequestSchema",
            "NackBatchItem",
            "ProgressReportRequest",
            "RegisterFields",
            "RegisterRequest",
        ] {
            assert!(
                schemas[component]["anyOf"].is_array(),
                "{component} states which members stand in for each other"
            );
        }
        let delete = &doc["paths"]["/ojs/v1/queues/{name}"]["delete"]["requestBody"];
        assert_eq!(
            delete["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/QueueDeleteRequest"
        );
    }

    #[test]
    fn every_route_of_the_router_is_in_the_document() {
        let (router, doc) = serve(crate::http::api(&every_route()), LIMITS);
        // The admin UI's routes serve its files, not the API.
        let routed: BTreeSet<_> = routed(&router)
            .into_iter()
            .filter(|(_, path)| !crate::http::admin_ui::serves(path))
            .collect();
        assert!(routed.len() > 60, "read too few routes: {routed:?}");
        let documented = documented(&doc);
        let undocumented: Vec<_> = routed.difference(&documented).collect();
        assert!(
            undocumented.is_empty(),
            "routes missing from the document: {undocumented:?}"
        );
        let unrouted: Vec<_> = documented.difference(&routed).collect();
        assert!(
            unrouted.is_empty(),
            "documented but not routed: {unrouted:?}"
        );
    }

    #[test]
    fn the_route_reader_sees_routes_added_without_a_document() {
        let router: axum::Router<AppState> = axum::Router::new()
            .route("/a/{id}", axum::routing::get(|| async {}).post(|| async {}))
            .route("/b", axum::routing::delete(|| async {}));
        let routed = routed(&router);
        let expected: BTreeSet<_> = [("GET", "/a/{id}"), ("POST", "/a/{id}"), ("DELETE", "/b")]
            .into_iter()
            .map(|(m, p)| (m.to_owned(), p.to_owned()))
            .collect();
        assert_eq!(routed, expected);
    }

    #[test]
    fn operation_ids_are_unique() {
        let doc = document(crate::http::api(&every_route()), LIMITS);
        let json = doc;
        let mut ids = BTreeSet::new();
        for (path, item) in json["paths"].as_object().expect("paths") {
            for (method, operation) in item.as_object().expect("path item") {
                let id = operation["operationId"].as_str().expect("an operationId");
                assert!(
                    ids.insert(id.to_owned()),
                    "{method} {path}: {id} is not unique"
                );
            }
        }
    }

    #[test]
    fn every_operation_documents_the_error_body_and_ojs_media_types() {
        let doc = document(crate::http::api(&every_route()), LIMITS);
        let json = doc;
        assert_eq!(json["openapi"], "3.1.0");
        for (path, item) in json["paths"].as_object().expect("paths") {
            for (method, operation) in item.as_object().expect("path item") {
                let default = &operation["responses"]["default"]["content"][OJS_JSON]["schema"];
                assert_eq!(
                    default["$ref"], "#/components/schemas/ErrorBody",
                    "{method} {path}"
                );
                if let Some(body) = operation.get("requestBody") {
                    for media in REQUEST_TYPES {
                        assert!(body["content"].get(media).is_some(), "{method} {path}");
                    }
                }
            }
        }
    }
}
