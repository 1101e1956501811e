//! `/ojs/manifest`, health and readiness.

use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{AppState, Ojs, ok};

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

/// `GET /ojs/manifest`.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)] // documentation: the body is built in `manifest`
struct Manifest {
    specversion: String,
    ojs_version: String,
    #[schema(value_type = Object)]
    implementation: serde_json::Value,
    conformance_level: i32,
    conformance_tier: String,
    protocols: Vec<String>,
    backend: String,
    /// Feature name to whether it is served.
    capabilities: std::collections::BTreeMap<String, bool>,
    /// The names of the extensions served.
    extensions: Vec<String>,
    /// The same extensions with their URIs, versions and endpoints: `official` and
    /// `experimental` lists.
    #[schema(value_type = Object)]
    extension_details: serde_json::Value,
    schema_validation: bool,
    unique_job_strength: String,
    /// The priority model: `default`, `min`, `max`, `order`, strategies, aging.
    #[schema(value_type = Object)]
    priority: serde_json::Value,
    /// Request limits: `max_envelope_bytes`, `max_batch_size`, `max_fetch_count`, `max_wait_ms`.
    #[schema(value_type = Object)]
    limits: serde_json::Value,
    #[schema(value_type = Object)]
    endpoints: serde_json::Value,
}

/// `GET /ojs/v1/health`.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)] // documentation: the body is built in `health`
struct Health {
    /// `ok`, `degraded` (slow database, or shutting down) or `unhealthy`.
    status: String,
    version: String,
    uptime_seconds: u64,
    backend: HealthBackend,
    /// This replica: `id` and whether it leads maintenance (absent when unhealthy).
    #[schema(value_type = Option<Object>)]
    instance: Option<serde_json::Value>,
    /// `total` and `paused` (when the database could count them).
    #[schema(value_type = Option<Object>)]
    queues: Option<serde_json::Value>,
    /// `total`, `active` and `stale` (when the database could count them).
    #[schema(value_type = Option<Object>)]
    workers: Option<serde_json::Value>,
}

#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)]
struct HealthBackend {
    r#type: String,
    /// `ok` or `unhealthy`.
    status: String,
    latency_ms: Option<u64>,
    error: Option<String>,
}

/// `GET /ojs/v1/ready`.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)] // documentation: the body is built in `ready`
struct Readiness {
    /// `ready` or `not_ready`.
    status: String,
    /// Why not: `shutting down` or `database unreachable`.
    reason: Option<String>,
}

/// `GET /ojs/v1/middleware`.
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)] // documentation: the body is built in `middleware`
struct Middleware {
    #[schema(value_type = Vec<Object>)]
    enqueue: Vec<serde_json::Value>,
    #[schema(value_type = Vec<Object>)]
    execution: Vec<serde_json::Value>,
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
async fn middleware() -> Ojs<serde_json::Value> {
    ok(json!({"enqueue": [], "execution": []}))
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
async fn manifest(State(state): State<AppState>) -> Ojs<serde_json::Value> {
    let s = state.settings();
    let limits = state.broker().settings().limits;
    let details = json!({
        "official": [
            {"name": "priority", "uri": "urn:ojs:ext:priority", "version": "1.0.0-rc.1"},
            {"name": "queue-config", "uri": "urn:ojs:ext:queue-config", "version": "1.0.0-rc.1"},
            {"name": "fair-scheduling", "uri": "urn:ojs:ext:fair-scheduling", "version": "1.0.0-rc.1"},
            {"name": "dead-letter", "uri": "urn:ojs:ext:dead-letter", "version": "1.0.0-rc.1"},
            {"name": "backpressure", "uri": "urn:ojs:ext:backpressure", "version": "1.0.0-rc.1"},
            {"name": "graceful-shutdown", "uri": "urn:ojs:ext:graceful-shutdown", "version": "1.0.0-rc.1"},
            {"name": "timeouts", "uri": "urn:ojs:ext:timeouts", "version": "1.0.0-rc.1"},
        ],
        // ojsd's own extensions (not part of OJS).
        "experimental": [
            {
                "name": "batch-ack",
                "uri": "urn:ojsd:ext:batch-ack",
                "version": "0.1.0",
                "description": "ACK or NACK many jobs in one request and one commit; every item is answered as a single ACK/NACK would be.",
                "endpoints": [
                    "POST /ojs/v1/workers/ack/batch",
                    "POST /ojs/v1/workers/nack/batch",
                ],
            },
        ],
    });
    let names: Vec<&str> = ["official", "experimental"]
        .iter()
        .filter_map(|group| details[group].as_array())
        .flatten()
        .filter_map(|e| e["name"].as_str())
        .collect();
    ok(json!({
        "specversion": "1.0",
        "ojs_version": "1.0",
        "implementation": {
            "name": "ojsd",
            "version": env!("CARGO_PKG_VERSION"),
            "language": "rust",
            "homepage": "https://openjobspec.org",
        },
        "conformance_level": 1,
        "conformance_tier": "runtime",
        "protocols": ["http"],
        "backend": "postgres",
        "capabilities": {
            "batch_enqueue": true,
            "cron_jobs": false,
            "dead_letter": true,
            "delayed_jobs": true,
            "job_ttl": true,
            "priority_queues": true,
            "rate_limiting": true,
            "schema_validation": false,
            "unique_jobs": true,
            "workflows": false,
            "pause_resume": true,
            "fair_scheduling": true,
            "queue_config": true,
            "events": true,
            "long_poll_fetch": true,
        },
        // The binding's form: the names alone, which the Rust and Go SDKs parse as strings. The
        // same extensions with their URIs, versions and endpoints are in `extension_details`.
        "extensions": names,
        "extension_details": details,
        "schema_validation": false,
        "unique_job_strength": "strong",
        "priority": {
            "default": crate::job::DEFAULT_PRIORITY,
            "min": 0,
            "max": limits.max_priority,
            "order": "ascending",
            "model": "0 is the most urgent; a queue dispatches by priority, then by the time a job became available (FIFO)",
            "strategies": ["strict", "weighted", "round-robin"],
            "default_strategy": state.broker().settings().fetch_strategy.unwrap_or_default().as_str(),
            "strategy_enforced": state.broker().settings().fetch_strategy.is_some(),
            "aging": limits.priority_aging_ms.is_some(),
            "aging_interval_ms": limits.priority_aging_ms,
        },
        "limits": {
            "max_envelope_bytes": s.max_envelope_bytes,
            "max_batch_size": s.max_batch_jobs,
            "max_fetch_count": s.max_fetch_count,
            "max_wait_ms": s.max_wait.as_millis() as u64,
        },
        "endpoints": {
            "base_url": "/ojs/v1",
            "manifest": "/ojs/manifest",
            "health": "/ojs/v1/health",
        },
    }))
}

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
        (status = 200, description = "`ok` or `degraded`.", body = Health),
        (status = 503, description = "`unhealthy`: the database does not answer.", body = Health),
    )
)]
async fn health(State(state): State<AppState>) -> Response {
    let uptime = state.uptime().as_secs();
    match probe(&state).await {
        Ok(latency) => {
            let degraded = latency > DEGRADED_LATENCY || !state.accepting();
            let counts = state.broker().health_counts().await.ok();
            let mut body = json!({
                "status": if degraded { "degraded" } else { "ok" },
                "version": super::OJS_VERSION,
                "uptime_seconds": uptime,
                "backend": {
                    "type": "postgres",
                    "status": "ok",
                    "latency_ms": latency.as_millis() as u64,
                },
                "instance": {
                    "id": state.settings().instance_id,
                    "leader": state.is_leader(),
                },
            });
            if let Some(c) = counts {
                body["queues"] = json!({"total": c.queues, "paused": c.paused_queues});
                body["workers"] = json!({
                    "total": c.workers,
                    "active": c.workers - c.stale_workers,
                    "stale": c.stale_workers,
                });
            }
            ok(body).into_response()
        }
        Err(error) => {
            tracing::warn!(%error, "health probe failed");
            with_retry_after(
                Ojs(
                    StatusCode::SERVICE_UNAVAILABLE,
                    json!({
                        "status": "unhealthy",
                        "version": super::OJS_VERSION,
                        "uptime_seconds": uptime,
                        "backend": {
                            "type": "postgres",
                            "status": "unhealthy",
                            "error": "database unreachable",
                        },
                    }),
                )
                .into_response(),
            )
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
        None => ok(json!({"status": "ready"})).into_response(),
        Some(reason) => with_retry_after(
            Ojs(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({"status": "not_ready", "reason": reason}),
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
        (status = 200, description = "`ok` or `degraded`.", body = Health),
        (status = 503, description = "`unhealthy`: the database does not answer.", body = Health),
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
