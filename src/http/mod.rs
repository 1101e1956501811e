//! The [OJS HTTP binding]: routes, shared state and the request middleware.
//!
//! Every response carries `OJS-Version: 1.0` and `X-Request-Id`; every JSON body (errors
//! included) is `application/openjobspec+json`, or `application/json` when
//! `OJS_RESPONSE_CONTENT_TYPE` says so. Handlers are thin: parse the request, call one
//! [`Broker`](crate::broker::Broker) operation, render the result.
//!
//! [OJS HTTP binding]: https://github.com/openjobspec/spec/blob/main/spec/ojs-http-binding.md

// What every route shares (each line says what the module holds).
// The state every handler is given: the broker, the HTTP settings, the process's services.
mod state;
// The JSON response with the OJS media type (`Ojs`, `ok`).
mod respond;
// Per request: request id, version negotiation, span, time limit, the database gate.
mod middleware;
// Which role each route needs, and the caller's key (`Caller`) with its queue limits.
pub mod auth;
// `ApiError`, the OJS error body, and how every domain error maps to a status and code.
pub mod error;
// Request extractors: JSON bodies read once and kept verbatim (`JsonBody`, `Fields`), ids and
// queue names from paths.
pub mod extract;
// The OpenAPI document, assembled from the routes' annotations, and the schemas of shapes
// that no Rust type writes.
pub mod openapi;
// Query strings: parameters, pages and cursors.
pub mod query;
// The connection loop: hyper with header-read timeouts and a connection cap.
pub mod server;
// Tenant scope: the rule of every route for a request acting as a tenant, and its middleware.
pub mod tenancy;
// Path parameters, the wrapped job, job counts and throughput: shapes several resources answer.
mod shapes;
// A page of jobs as the admin listings answer it: filter, order, summaries.
mod job_listing;
// A rate-limit key's usage as the routes show it: its JSON view and `X-RateLimit-*` headers.
mod rate_key;
// What bulk and retry routes read alike: `confirm`, timestamps in bodies, the retry override.
mod bulk;
// Server-sent event streams: a job's or a queue's events, a job's progress.
mod sse;
// The rest of a request body a response left unread, discarded so the connection lives on.
mod unread;

// The routes. A resource keeps its `/ojs/v1/admin` routes next to the others, in `admin.rs`.
// The admin routes with no data-plane twin: statistics, API keys, worker pools, reset.
mod admin;
// The built admin UI's files, when `OJS_ADMIN_UI_DIR` names them.
mod admin_ui;
// Cron entries, at /ojs/v1/cron and (the admin UI's shapes) /ojs/v1/crons.
mod cron;
// The dead-letter queue.
mod dead_letter;
// The event log, polled with a cursor or paged, and the SSE routes of jobs and queues.
mod events;
// Jobs: PUSH, INFO, CANCEL, ACTIVATE, priority, progress, unique-key holders.
pub(crate) mod jobs;
// Queues: lifecycle, statistics, configuration, pause and resume.
mod queues;
// Rate limits: rate-limited queues and the rate-limit keys of jobs.
mod rate_limits;
// What to scale workers on, per queue (KEDA's metrics-api scaler reads it).
mod scaling;
// Probes, manifest, metrics.
mod system;
// The worker protocol: registration, FETCH, ACK/NACK, heartbeats.
mod workers;
// Webhook subscriptions and their test delivery.
mod webhooks;
// Workflows: chain, group, batch and dag.
mod workflows;

use axum::Router;
use axum::http::{Method, Uri};
use axum::middleware as layer;
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;

use error::ApiError;
pub use respond::{OJS_JSON, OJS_VERSION, Ojs, ok};
pub use state::{AppState, HttpSettings, Services};

/// Every route of the HTTP API, each with its OpenAPI operation.
pub fn api(settings: &HttpSettings) -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .merge(system::router())
        .merge(jobs::router(settings))
        .merge(workers::router())
        .merge(dead_letter::router())
        .merge(cron::router())
        .merge(workflows::router())
        .merge(events::router())
        .merge(queues::router())
        .merge(scaling::router())
        .merge(rate_limits::router())
        .merge(webhooks::router())
        .merge(admin::router(settings.test_hooks))
        .merge(admin_ui::router(settings.admin_ui_dir.is_some()).into())
}

/// The whole HTTP API, with `GET /ojs/openapi.json` describing it.
pub fn router(state: AppState) -> Router {
    let limits = openapi::Limits {
        max_fetch_count: state.settings().max_fetch_count,
        max_batch_jobs: state.settings().max_batch_jobs,
        max_priority: state.broker().settings().limits.max_priority,
    };
    let (routes, _) = openapi::serve(api(state.settings()), limits);
    routes
        // The key, then the tenant scope (`tenancy::enforce`, which `authorize` calls).
        .route_layer(layer::from_fn_with_state(state.clone(), auth::authorize))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(on_panic))
        .layer(layer::from_fn_with_state(
            state.clone(),
            middleware::ojs_middleware,
        ))
        .with_state(state)
}

async fn not_found(uri: Uri) -> ApiError {
    ApiError::route_not_found(uri.path())
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::method_not_allowed(method.as_str(), uri.path())
}

#[allow(clippy::needless_pass_by_value)] // the signature CatchPanicLayer::custom requires
fn on_panic(payload: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let message = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("panic");
    ApiError::internal(format!("handler panicked: {message}")).into_response()
}
