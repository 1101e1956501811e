//! `/ojs/manifest`, health and readiness.

use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{AppState, Ojs, ok};
use crate::scheduling::Strategy;
use crate::wire::names;

/// How long a health probe waits for the database before calling it unhealthy.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Database latency above which the server reports itself degraded.
const DEGRADED_LATENCY: Duration = Duration::from_secs(1);

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(manifest))
        .routes(routes!(health))
        .routes(routes!(root_health))
        .routes(routes!(ready))
        .routes(routes!(root_ready))
        .routes(routes!(metrics))
        .routes(routes!(middleware))
}

/// `GET /ojs/manifest`: what this server implements.
#[derive(Serialize, ToSchema)]
struct Manifest {
    specversion: &'static str,
    ojs_version: &'static str,
    implementation: Implementation,
    conformance_level: i32,
    conformance_tier: &'static str,
    protocols: &'static [&'static str],
    backend: &'static str,
    /// Feature name to whether it is served.
    capabilities: Capabilities,
    /// The names of the extensions served (the binding's form, which the Rust and Go SDKs
    /// parse as strings).
    extensions: Vec<&'static str>,
    /// The same extensions with their URIs, versions and endpoints.
    extension_details: ExtensionDetails,
    schema_validation: bool,
    unique_job_strength: &'static str,
    /// The priority model.
    priority: PriorityModel,
    /// Request limits.
    limits: Limits,
    endpoints: Endpoints,
}

/// The manifest's `implementation`.
#[derive(Serialize, ToSchema)]
struct Implementation {
    name: &'static str,
    version: &'static str,
    language: &'static str,
    homepage: &'static str,
}

/// The manifest's `capabilities`: only what is complete is `true`.
#[derive(Serialize, ToSchema)]
struct Capabilities {
    batch_enqueue: bool,
    /// Cron entries (the key the OJS admin UI reads to show its cron page).
    cron: bool,
    /// The same as `cron`.
    cron_jobs: bool,
    dead_letter: bool,
    delayed_jobs: bool,
    job_ttl: bool,
    priority_queues: bool,
    rate_limiting: bool,
    /// `args` checked against the job type's registered schema on PUSH.
    schema_validation: bool,
    /// The schema registry, versions named by a job's `version` (the key the OJS admin UI
    /// reads to show its schemas page).
    job_versioning: bool,
    /// Tenants (`X-OJS-Tenant`, API keys bound to a tenant; the key the OJS admin UI reads to
    /// show its tenants page).
    multi_tenancy: bool,
    /// Webhook subscriptions delivered from the event log (the key the OJS admin UI reads).
    webhooks: bool,
    unique_jobs: bool,
    workflows: bool,
    pause_resume: bool,
    fair_scheduling: bool,
    queue_config: bool,
    events: bool,
    long_poll_fetch: bool,
    /// Checkpoints a retried job resumes from (OJS durable execution).
    durable_execution: bool,
    /// Results read, awaited (`?wait=true`) and streamed; `result_ttl` (OJS results).
    results: bool,
    /// A job's attempts, transitions and lineage from the event log (OJS execution history).
    execution_history: bool,
    /// Steps recorded once and handed to later attempts (ojsd's steps-and-signals).
    steps: bool,
    /// Waits for a signal or a time, and the signals that end them (ojsd's steps-and-signals).
    signals: bool,
}

/// The extensions served: OJS's own (`official`) and ojsd's (`experimental`).
#[derive(Serialize, ToSchema)]
struct ExtensionDetails {
    official: &'static [Extension],
    experimental: &'static [Extension],
}

/// One extension.
#[derive(Serialize, ToSchema)]
struct Extension {
    name: &'static str,
    uri: &'static str,
    version: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'static str>,
    /// The routes it adds.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    endpoints: &'static [&'static str],
}

/// The manifest's `priority`.
#[derive(Serialize, ToSchema)]
struct PriorityModel {
    default: i32,
    min: i32,
    max: i32,
    /// `ascending`: smaller numbers are more urgent.
    order: &'static str,
    model: &'static str,
    strategies: &'static [Strategy],
    default_strategy: Strategy,
    /// Whether the server's strategy replaces the one a FETCH asks for.
    strategy_enforced: bool,
    aging: bool,
    #[schema(required = true)]
    aging_interval_ms: Option<i64>,
}

/// The manifest's `limits`.
#[derive(Serialize, ToSchema)]
struct Limits {
    max_envelope_bytes: usize,
    max_batch_size: usize,
    max_fetch_count: usize,
    max_wait_ms: u64,
}

/// The manifest's `endpoints`.
#[derive(Serialize, ToSchema)]
struct Endpoints {
    base_url: &'static str,
    manifest: &'static str,
    health: &'static str,
}

/// `GET /ojs/v1/health` (and `/health`).
#[derive(Serialize, ToSchema)]
struct Health<'a> {
    status: HealthStatus,
    version: &'static str,
    uptime_seconds: u64,
    backend: HealthBackend,
    /// This replica (absent when unhealthy).
    #[serde(skip_serializing_if = "Option::is_none")]
    instance: Option<Instance<'a>>,
    /// When the database could count them.
    #[serde(skip_serializing_if = "Option::is_none")]
    queues: Option<QueueTotals>,
    /// When the database could count them.
    #[serde(skip_serializing_if = "Option::is_none")]
    workers: Option<WorkerTotals>,
    /// `true` while maintenance mode is on (then `status` is `degraded`).
    #[serde(skip_serializing_if = "Option::is_none")]
    maintenance: Option<bool>,
}

/// `ok`, `degraded` (slow database, shutting down, or maintenance mode) or `unhealthy`.
#[derive(Debug, Clone, Copy)]
enum HealthStatus {
    Ok,
    Degraded,
    Unhealthy,
}

names!(HealthStatus {
    Ok => "ok",
    Degraded => "degraded",
    Unhealthy => "unhealthy",
});

/// The database, as the health probe found it.
#[derive(Serialize, ToSchema)]
struct HealthBackend {
    r#type: &'static str,
    /// `ok` or `unhealthy`.
    status: HealthStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    latency_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'static str>,
}

/// This replica: its id and whether it leads maintenance.
#[derive(Serialize, ToSchema)]
struct Instance<'a> {
    id: &'a str,
    leader: bool,
}

/// Queues in all and paused.
#[derive(Serialize, ToSchema)]
struct QueueTotals {
    total: i64,
    paused: i64,
}

/// Workers in all, live and stale.
#[derive(Serialize, ToSchema)]
struct WorkerTotals {
    total: i64,
    active: i64,
    stale: i64,
}

/// `GET /ojs/v1/ready` (and `/ready`).
#[derive(Serialize, ToSchema)]
struct Readiness {
    /// `ready` or `not_ready`.
    #[schema(pattern = "^(ready|not_ready)$")]
    status: &'static str,
    /// Why not: `shutting down` or `database unreachable`.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
}

/// `GET /ojs/v1/middleware`: the server-side middleware chains (none).
#[derive(Serialize, ToSchema)]
struct Middleware {
    #[schema(value_type = Vec<Object>)]
    enqueue: [(); 0],
    #[schema(value_type = Vec<Object>)]
    execution: [(); 0],
}

/// `GET /ojs/v1/middleware`: the server-side middleware chains the OJS admin UI lists. ojsd
/// runs none: enqueue and execution middleware belong to the SDKs, in the client's process.
#[utoipa::path(
    get,
    path = "/ojs/v1/middleware",
    tag = "system",
    summary = "Server-side middleware chains (always empty)",
    responses((status = 200, body = Middleware))
)]
async fn middleware() -> Ojs<Middleware> {
    ok(Middleware {
        enqueue: [],
        execution: [],
    })
}

/// Prometheus text exposition. The content type is exactly `text/plain`, without the usual
/// `version` parameter, because the conformance suite compares the header literally.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "system",
    summary = "Prometheus metrics",
    responses((status = 200, description = "The Prometheus text format.", body = String, content_type = "text/plain"))
)]
async fn metrics(State(state): State<AppState>) -> Response {
    state.broker().refresh_gauges().await;
    crate::telemetry::maintenance_mode(state.broker().hold().is_on());
    crate::telemetry::database_up(!state.health().is_down());
    (
        [(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"))],
        crate::telemetry::metrics().render(),
    )
        .into_response()
}

/// What this server implements. Capabilities are listed only once they are complete.
#[utoipa::path(
    get,
    path = "/ojs/manifest",
    tag = "system",
    summary = "What this server implements",
    responses((status = 200, body = Manifest))
)]
async fn manifest(State(state): State<AppState>) -> Ojs<Manifest> {
    let s = state.settings();
    let broker = state.broker().settings();
    let limits = broker.limits;
    ok(Manifest {
        specversion: "1.0",
        ojs_version: "1.0",
        implementation: Implementation {
            name: "ojsd",
            version: env!("CARGO_PKG_VERSION"),
            language: "rust",
            homepage: "https://openjobspec.org",
        },
        conformance_level: 3,
        conformance_tier: "runtime",
        protocols: &["http"],
        backend: "postgres",
        capabilities: Capabilities {
            batch_enqueue: true,
            cron: true,
            cron_jobs: true,
            dead_letter: true,
            delayed_jobs: true,
            job_ttl: true,
            priority_queues: true,
            rate_limiting: true,
            schema_validation: true,
            job_versioning: true,
            multi_tenancy: true,
            webhooks: true,
            unique_jobs: true,
            workflows: true,
            pause_resume: true,
            fair_scheduling: true,
            queue_config: true,
            events: true,
            long_poll_fetch: true,
            durable_execution: true,
            results: true,
            execution_history: true,
            steps: true,
            signals: true,
        },
        extensions: EXTENSIONS
            .official
            .iter()
            .chain(EXTENSIONS.experimental)
            .map(|e| e.name)
            .collect(),
        extension_details: EXTENSIONS,
        schema_validation: true,
        unique_job_strength: "strong",
        priority: PriorityModel {
            default: crate::job::DEFAULT_PRIORITY,
            min: 0,
            max: limits.max_priority,
            order: "ascending",
            model: "0 is the most urgent; a queue dispatches by priority, then by the time a job became available (FIFO)",
            strategies: &[Strategy::Strict, Strategy::Weighted, Strategy::RoundRobin],
            default_strategy: broker.fetch_strategy.unwrap_or_default(),
            strategy_enforced: broker.fetch_strategy.is_some(),
            aging: limits.priority_aging_ms.is_some(),
            aging_interval_ms: limits.priority_aging_ms,
        },
        limits: Limits {
            max_envelope_bytes: s.max_envelope_bytes,
            max_batch_size: s.max_batch_jobs,
            max_fetch_count: s.max_fetch_count,
            max_wait_ms: s.max_wait.as_millis() as u64,
        },
        endpoints: Endpoints {
            base_url: "/ojs/v1",
            manifest: "/ojs/manifest",
            health: "/ojs/v1/health",
        },
    })
}

/// An extension of the OJS specification, by name: its URI is `urn:ojs:ext:<name>`.
macro_rules! official {
    ($name:literal) => {
        Extension {
            name: $name,
            uri: concat!("urn:ojs:ext:", $name),
            version: "1.0.0-rc.1",
            description: None,
            endpoints: &[],
        }
    };
}

/// The extensions this server serves.
const EXTENSIONS: ExtensionDetails = ExtensionDetails {
    official: &[
        official!("priority"),
        official!("queue-config"),
        official!("fair-scheduling"),
        official!("dead-letter"),
        official!("backpressure"),
        official!("graceful-shutdown"),
        official!("timeouts"),
        official!("cron"),
        official!("workflows"),
        official!("rate-limiting"),
        official!("schema-registry"),
        official!("multi-tenancy"),
        official!("webhooks"),
        official!("durable-execution"),
        official!("results"),
        official!("execution-history"),
    ],
    // ojsd's own extensions (not part of OJS).
    experimental: &[
        Extension {
            name: "batch-ack",
            uri: "urn:ojsd:ext:batch-ack",
            version: "0.1.0",
            description: Some(
                "ACK or NACK many jobs in one request and one commit; every item is answered as a single ACK/NACK would be.",
            ),
            endpoints: &[
                "POST /ojs/v1/workers/ack/batch",
                "POST /ojs/v1/workers/nack/batch",
            ],
        },
        Extension {
            name: "steps-and-signals",
            uri: "urn:ojsd:ext:steps-and-signals",
            version: "0.1.0",
            description: Some(
                "Steps recorded once by the worker holding the current attempt and handed to every later attempt by FETCH; attempts that end with a wait for a signal or a time instead of ACK or NACK; signals, over HTTP or from SQL (ojs_signal), that end a wait once or are kept for the next one.",
            ),
            endpoints: &[
                "POST /ojs/v1/jobs/{id}/steps/{name}",
                "GET /ojs/v1/jobs/{id}/steps",
                "POST /ojs/v1/workers/wait",
                "POST /ojs/v1/jobs/{id}/signals/{name}",
                "GET /ojs/v1/jobs/{id}/signals",
            ],
        },
    ],
};

/// Probes the database; returns the round-trip time or the failure.
async fn probe(state: &AppState) -> Result<Duration, String> {
    state.health().round_trip(PROBE_TIMEOUT).await
}

fn with_retry_after(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    response
}

/// Liveness plus backend status: 200 `ok`/`degraded`, or 503 `unhealthy`. While the database
/// answers, `queues` (`total`, `paused`) and `workers` (`total`, `active`, `stale`) too, as the
/// OJS admin UI shows them; they are left out if counting fails.
#[utoipa::path(
    get,
    path = "/ojs/v1/health",
    tag = "system",
    summary = "Liveness and backend status",
    responses(
        (status = 200, description = "`ok` or `degraded`.", body = Health<'_>),
        (status = 503, description = "`unhealthy`: the database does not answer.", body = Health<'_>),
    )
)]
async fn health(State(state): State<AppState>) -> Response {
    let uptime = state.uptime().as_secs();
    match probe(&state).await {
        Ok(latency) => {
            let held = state.broker().hold().is_on();
            let degraded = latency > DEGRADED_LATENCY || !state.accepting() || held;
            let counts = state.broker().health_counts().await.ok();
            ok(Health {
                status: if degraded {
                    HealthStatus::Degraded
                } else {
                    HealthStatus::Ok
                },
                version: super::OJS_VERSION,
                uptime_seconds: uptime,
                backend: HealthBackend {
                    r#type: "postgres",
                    status: HealthStatus::Ok,
                    latency_ms: Some(latency.as_millis() as u64),
                    error: None,
                },
                instance: Some(Instance {
                    id: &state.settings().instance_id,
                    leader: state.is_leader(),
                }),
                queues: counts.as_ref().map(|c| QueueTotals {
                    total: c.queues,
                    paused: c.paused_queues,
                }),
                workers: counts.as_ref().map(|c| WorkerTotals {
                    total: c.workers,
                    active: c.workers - c.stale_workers,
                    stale: c.stale_workers,
                }),
                maintenance: held.then_some(true),
            })
            .into_response()
        }
        Err(error) => {
            tracing::warn!(%error, "health probe failed");
            let body = Health {
                status: HealthStatus::Unhealthy,
                version: super::OJS_VERSION,
                uptime_seconds: uptime,
                backend: HealthBackend {
                    r#type: "postgres",
                    status: HealthStatus::Unhealthy,
                    latency_ms: None,
                    error: Some("database unreachable"),
                },
                instance: None,
                queues: None,
                workers: None,
                maintenance: None,
            };
            with_retry_after(Ojs(StatusCode::SERVICE_UNAVAILABLE, body).into_response())
        }
    }
}

/// Readiness: the database answers and the server is not shutting down. (Migrations are
/// applied before the server starts listening.)
#[utoipa::path(
    get,
    path = "/ojs/v1/ready",
    tag = "system",
    summary = "Readiness",
    responses(
        (status = 200, body = Readiness),
        (status = 503, description = "Not ready; `reason` says why.", body = Readiness),
    )
)]
async fn ready(State(state): State<AppState>) -> Response {
    let reason = if !state.accepting() {
        Some("shutting down")
    } else if probe(&state).await.is_err() {
        Some("database unreachable")
    } else {
        None
    };
    match reason {
        None => ok(Readiness {
            status: "ready",
            reason: None,
        })
        .into_response(),
        Some(reason) => with_retry_after(
            Ojs(
                StatusCode::SERVICE_UNAVAILABLE,
                Readiness {
                    status: "not_ready",
                    reason: Some(reason),
                },
            )
            .into_response(),
        ),
    }
}

/// `GET /health`: the same as `/ojs/v1/health`.
#[utoipa::path(
    get,
    path = "/health",
    tag = "system",
    summary = "Liveness and backend status (alias of /ojs/v1/health)",
    responses(
        (status = 200, description = "`ok` or `degraded`.", body = Health<'_>),
        (status = 503, description = "`unhealthy`: the database does not answer.", body = Health<'_>),
    )
)]
async fn root_health(state: State<AppState>) -> Response {
    health(state).await
}

/// `GET /ready`: the same as `/ojs/v1/ready`.
#[utoipa::path(
    get,
    path = "/ready",
    tag = "system",
    summary = "Readiness (alias of /ojs/v1/ready)",
    responses(
        (status = 200, body = Readiness),
        (status = 503, description = "Not ready; `reason` says why.", body = Readiness),
    )
)]
async fn root_ready(state: State<AppState>) -> Response {
    ready(state).await
}
