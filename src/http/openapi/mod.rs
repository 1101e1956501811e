//! The OpenAPI 3.1 document of the HTTP API, served at `GET /ojs/openapi.json`.
//!
//! The document is not written by hand: every route is registered through
//! [`utoipa_axum::routes!`] from its handler's `#[utoipa::path]` annotation, so the router and
//! the document come out of the same list. `finish` adds what every operation shares (the
//! OJS media types, the error body on every failure status), and `with_limits` what only the
//! running server knows (its limits) and what a derive cannot say (members that stand in for
//! each other). Named schemas of request values are in [`values`]; the schemas of bodies that
//! hand-written code reads or writes (a job, the envelope) in `shapes.rs`. The integration suite
//! validates every request it makes and every response it gets against the document, so a
//! schema that drifts from the code fails the tests.

use std::sync::Arc;

use axum::Extension;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use utoipa::OpenApi as _;
use utoipa::openapi::path::Operation;
use utoipa::openapi::{Content, OpenApi, RefOr, ResponseBuilder};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{AppState, OJS_JSON};

mod shapes;
pub mod values;

pub use shapes::{
    DurationSchema, Enqueue, EnqueueOptions, Job, JobError, RetryPolicy, UniquePolicy,
};

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
        (name = "webhooks", description = "Webhook subscriptions: events delivered by HTTP POST, signed, in order, at least once."),
        (name = "schemas", description = "The schema registry: JSON Schemas of job types' args, checked on PUSH."),
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
    // A cron registration names its schedule (under one of three names) and its job (as
    // `job_template` or by its top-level `type`).
    if let Some(Value::Object(cron)) = schemas.get_mut("CronRequest") {
        let rules = [
            serde_json::json!({"anyOf": [required("expression"), required("cron"), required("schedule")]}),
            serde_json::json!({"anyOf": [required("job_template"), required("type")]}),
        ];
        match cron.get_mut("allOf") {
            Some(Value::Array(all)) => all.extend(rules),
            _ => {
                cron.insert("allOf".to_owned(), Value::Array(rules.to_vec()));
            }
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

#[cfg(test)]
pub(crate) mod tests {
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

    pub(crate) fn every_route() -> HttpSettings {
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
