//! The [OJS HTTP binding]: routes, shared state and the request middleware.
//!
//! Every response carries `OJS-Version: 1.0` and `X-Request-Id`; every JSON body (errors
//! included) is `application/openjobspec+json`, or `application/json` when
//! `OJS_RESPONSE_CONTENT_TYPE` says so. Handlers are thin: parse the request, call one
//! [`Broker`] operation, render the result.
//!
//! [OJS HTTP binding]: https://github.com/openjobspec/spec/blob/main/spec/ojs-http-binding.md

// What every route shares (each line says what the module holds).
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
// Probes, manifest, metrics.
mod system;
// The worker protocol: registration, FETCH, ACK/NACK, heartbeats.
mod workers;
// Workflows: chain, group and batch.
mod webhooks;
mod workflows;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use utoipa_axum::router::OpenApiRouter;

use crate::broker::Broker;
use crate::db::DbHealth;
use crate::events::EventTail;
use crate::leadership::Role;
use error::{ApiError, PendingError};

/// Media type of every JSON response.
pub const OJS_JSON: &str = "application/openjobspec+json";
/// The `OJS-Version` the server speaks.
pub const OJS_VERSION: &str = "1.0";

static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
static OJS_VERSION_HEADER: HeaderName = HeaderName::from_static("ojs-version");

/// HTTP-level settings.
#[derive(Debug, Clone)]
pub struct HttpSettings {
    /// Largest enqueue envelope (compact JSON), in bytes.
    pub max_envelope_bytes: usize,
    /// Largest request body read by default (leaves room for whitespace), in bytes.
    pub max_request_bytes: usize,
    /// Largest batch enqueue body, in bytes.
    pub max_batch_bytes: usize,
    /// Most jobs in one batch enqueue.
    pub max_batch_jobs: usize,
    /// Most jobs one FETCH may ask for.
    pub max_fetch_count: usize,
    /// Longest long-poll a FETCH may ask for.
    pub max_wait: Duration,
    /// Heartbeat cadence told to workers, in seconds.
    pub heartbeat_interval_secs: u32,
    /// A request running longer than this is answered 503.
    pub request_timeout: Duration,
    /// A request body from which no data arrives for this long is answered 408.
    pub body_idle_timeout: Duration,
    /// Whether the test-only endpoints and behaviours are on.
    pub test_hooks: bool,
    /// How long in-flight requests get on shutdown (announced to event streams).
    pub shutdown_timeout: Duration,
    /// How long discarded (and dead-lettered) jobs are kept.
    pub dead_letter_retention: Duration,
    /// This process's instance id.
    pub instance_id: String,
    /// Label JSON responses `application/json` instead of [`OJS_JSON`].
    pub plain_json: bool,
    /// A built admin UI served at `/ojs/admin/`.
    pub admin_ui_dir: Option<std::path::PathBuf>,
}

/// Process-wide services the handlers use besides the broker.
#[derive(Clone)]
pub struct Services {
    /// Feeds the event streams.
    pub events: EventTail,
    /// Whether the database is reachable.
    pub health: DbHealth,
    /// Whether this replica leads maintenance.
    pub role: tokio::sync::watch::Receiver<Role>,
    /// Which requests need an API key, and the keys.
    pub gate: crate::auth::Gate,
    /// Job spans (off unless an OTLP endpoint is configured).
    pub traces: crate::telemetry::traces::JobTracer,
}

/// State shared by every handler.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

struct Inner {
    broker: Broker,
    settings: HttpSettings,
    services: Services,
    started: Instant,
    /// Cancelled when the server starts shutting down (ends long polls early).
    shutdown: CancellationToken,
    /// False while shutting down: `/ready` answers 503.
    accepting: AtomicBool,
}

impl AppState {
    pub fn new(
        broker: Broker,
        settings: HttpSettings,
        services: Services,
        shutdown: CancellationToken,
    ) -> AppState {
        AppState {
            inner: Arc::new(Inner {
                broker,
                settings,
                services,
                started: Instant::now(),
                shutdown,
                accepting: AtomicBool::new(true),
            }),
        }
    }

    pub fn broker(&self) -> &Broker {
        &self.inner.broker
    }

    pub fn settings(&self) -> &HttpSettings {
        &self.inner.settings
    }

    pub fn shutdown(&self) -> &CancellationToken {
        &self.inner.shutdown
    }

    /// The event tail feeding SSE streams.
    pub fn events(&self) -> &EventTail {
        &self.inner.services.events
    }

    /// Database reachability.
    pub fn health(&self) -> &DbHealth {
        &self.inner.services.health
    }

    /// The job tracer.
    pub fn traces(&self) -> &crate::telemetry::traces::JobTracer {
        &self.inner.services.traces
    }

    /// API keys and whether they are required.
    pub fn gate(&self) -> &crate::auth::Gate {
        &self.inner.services.gate
    }

    /// Whether this replica currently leads maintenance.
    pub fn is_leader(&self) -> bool {
        self.inner.services.role.borrow().is_leader()
    }

    /// Marks the server as draining: `/ready` turns 503 so load balancers stop sending work.
    pub fn stop_accepting(&self) {
        self.inner.accepting.store(false, Ordering::SeqCst);
    }

    fn accepting(&self) -> bool {
        self.inner.accepting.load(Ordering::SeqCst) && !self.inner.shutdown.is_cancelled()
    }

    fn uptime(&self) -> Duration {
        self.inner.started.elapsed()
    }
}

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
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::authorize,
        ))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(on_panic))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            ojs_middleware,
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

/// A client-supplied request id if usable (1–200 printable ASCII characters), else a new one.
fn request_id(req: &Request) -> String {
    req.headers()
        .get(&X_REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| (1..=200).contains(&v.len()) && v.bytes().all(|b| (0x20..0x7f).contains(&b)))
        .map(str::to_owned)
        .unwrap_or_else(|| format!("req_{}", uuid::Uuid::now_v7()))
}

/// Accepts `OJS-Version` 1.0 in any patch/pre-release spelling (`1.0`, `1.0.0`, `1.0.0-rc.1`).
fn version_supported(value: &str) -> bool {
    let mut parts = value.trim().split(['.', '-', '+']);
    parts.next() == Some("1") && parts.next() == Some("0")
}

/// Per request: request id, version negotiation, tracing span, time limit, and the final
/// rendering of error bodies.
async fn ojs_middleware(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let request_id = request_id(&req);
    let method = req.method().clone();
    let route = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    // A debug span: at the default level an info span cost ~4 of the 27 µs of CPU a small
    // request takes (its fields are formatted when it is made); a failure's log line names
    // the request itself (below).
    let span = tracing::debug_span!(
        "request",
        method = %req.method(),
        path = %req.uri().path(),
        request_id = %request_id,
    );
    let started = Instant::now();
    // What a response leaves unread of the body is discarded, so the connection lives on
    // (or the response says `Connection: close`): see `unread`.
    let (req, unread) = unread::watch(req);
    let mut response = async {
        if let Some(version) = req.headers().get(&OJS_VERSION_HEADER)
            && !version.to_str().is_ok_and(version_supported)
        {
            return ApiError::unsupported(format!(
                "OJS-Version '{}' is not supported; this server speaks {OJS_VERSION}.",
                version.to_str().unwrap_or("?")
            ))
            .into_response();
        }
        let database = needs_database(req.uri().path());
        if database && state.health().is_down() {
            return db_unavailable();
        }
        let run = tokio::time::timeout(state.settings().request_timeout, next.run(req));
        let outcome = if database {
            // A request waiting on the database when it goes away is answered now, not when its
            // connection attempts give up.
            tokio::select! {
                biased;
                outcome = run => outcome,
                () = state.health().went_down() => return db_unavailable(),
            }
        } else {
            run.await
        };
        match outcome {
            Ok(response) => response,
            Err(_) => ApiError::unavailable(
                "The request took too long; retry shortly.",
                Some("request timed out".to_owned()),
            )
            .into_response(),
        }
    }
    .instrument(span.clone())
    .await;
    unread.settle(&mut response);

    let status = response.status();
    if let Some(PendingError(error)) = response.extensions_mut().remove::<PendingError>() {
        if error.connection_lost {
            state.health().report_lost();
        }
        let body = serde_json::to_vec(&error.body(&request_id)).unwrap_or_default();
        *response.body_mut() = body.into();
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(OJS_JSON));
        span.in_scope(|| {
            if status == StatusCode::SERVICE_UNAVAILABLE {
                // An outage answers every request 503 (the prober logs its start and end);
                // one line every few seconds says how many, instead of one per request.
                if let Some(suppressed) = UNAVAILABLE_LOG.admit(UNAVAILABLE_LOG_EVERY) {
                    tracing::warn!(
                        %method,
                        route,
                        request_id,
                        code = error.code,
                        cause = error.cause.as_deref().unwrap_or(&error.message),
                        suppressed,
                        "request answered 503 (later ones within {}s are counted, not logged)",
                        UNAVAILABLE_LOG_EVERY.as_secs()
                    );
                }
            } else if status.is_server_error() {
                tracing::error!(
                    %method,
                    route,
                    request_id,
                    status = status.as_u16(),
                    code = error.code,
                    cause = error.cause.as_deref().unwrap_or(&error.message),
                    "request failed"
                );
            } else {
                tracing::debug!(status = status.as_u16(), code = error.code, message = %error.message, "request refused");
            }
        });
    } else {
        span.in_scope(|| {
            tracing::debug!(
                status = status.as_u16(),
                elapsed_ms = started.elapsed().as_millis() as u64,
                "request done"
            );
        });
    }
    crate::telemetry::http_request(method.as_str(), &route, status.as_u16(), started.elapsed());
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        headers.insert(X_REQUEST_ID.clone(), value);
    }
    headers.insert(
        OJS_VERSION_HEADER.clone(),
        HeaderValue::from_static(OJS_VERSION),
    );
    if state.settings().plain_json
        && headers
            .get(header::CONTENT_TYPE)
            .is_some_and(|t| t == OJS_JSON)
    {
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    response
}

/// 503 with `Retry-After`: the database is unreachable.
/// How often a 503 is logged at most.
const UNAVAILABLE_LOG_EVERY: Duration = Duration::from_secs(5);

/// Throttles the log lines of 503 answers.
static UNAVAILABLE_LOG: LogThrottle = LogThrottle::new();

/// Lets one log line through per period and counts the others.
struct LogThrottle {
    /// Milliseconds since the process started at which the last line was let through, + 1
    /// (0: never).
    last: std::sync::atomic::AtomicU64,
    suppressed: std::sync::atomic::AtomicU64,
}

impl LogThrottle {
    const fn new() -> LogThrottle {
        LogThrottle {
            last: std::sync::atomic::AtomicU64::new(0),
            suppressed: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// `Some(lines suppressed since the last one)` when this line may be logged: the first,
    /// and then the first `every` after the last one let through.
    fn admit(&self, every: Duration) -> Option<u64> {
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        let now = START.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1;
        let last = self.last.load(Ordering::Relaxed);
        let every = every.as_millis() as u64;
        if (last == 0 || now >= last + every)
            && self
                .last
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            return Some(self.suppressed.swap(0, Ordering::Relaxed));
        }
        self.suppressed.fetch_add(1, Ordering::Relaxed);
        None
    }
}

fn db_unavailable() -> Response {
    ApiError::unavailable("The database is unavailable; retry shortly.", None).into_response()
}

/// Whether a path is answered from the database (probes and metrics answer without it, or
/// report on it themselves).
fn needs_database(path: &str) -> bool {
    !matches!(
        path,
        "/health"
            | "/ready"
            | "/metrics"
            | "/ojs/v1/health"
            | "/ojs/v1/ready"
            | "/ojs/manifest"
            | "/ojs/openapi.json"
    ) && !admin_ui::serves(path)
}

/// A JSON response with the OJS media type.
pub struct Ojs<T>(pub StatusCode, pub T);

impl<T: Serialize> IntoResponse for Ojs<T> {
    fn into_response(self) -> Response {
        match serde_json::to_vec(&self.1) {
            Ok(body) => (
                self.0,
                [(header::CONTENT_TYPE, HeaderValue::from_static(OJS_JSON))],
                body,
            )
                .into_response(),
            Err(e) => {
                ApiError::internal(format!("response serialization failed: {e}")).into_response()
            }
        }
    }
}

/// A 200 JSON response.
pub fn ok<T: Serialize>(body: T) -> Ojs<T> {
    Ojs(StatusCode::OK, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_negotiation() {
        for ok in ["1.0", "1.0.0", "1.0.0-rc.1", " 1.0 ", "1.0.7"] {
            assert!(version_supported(ok), "{ok}");
        }
        for bad in ["2.0", "1.1", "1", "", "10.0", "abc"] {
            assert!(!version_supported(bad), "{bad}");
        }
    }

    #[test]
    fn a_throttled_log_lets_one_line_through_per_period_and_counts_the_rest() {
        let throttle = LogThrottle::new();
        let hour = Duration::from_secs(3600);
        assert_eq!(throttle.admit(hour), Some(0));
        assert_eq!(throttle.admit(hour), None);
        assert_eq!(throttle.admit(hour), None);
        // Once the period is over, the next line goes out with the count of those held back.
        assert_eq!(throttle.admit(Duration::ZERO), Some(2));
        assert_eq!(throttle.admit(Duration::ZERO), Some(0));
    }
}
