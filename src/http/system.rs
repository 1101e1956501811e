//! `/ojs/manifest`, health and readiness.

use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use super::{AppState, Ojs, ok};

/// How long a health probe waits for the database before calling it unhealthy.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Database latency above which the server reports itself degraded.
const DEGRADED_LATENCY: Duration = Duration::from_secs(1);

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ojs/manifest", get(manifest))
        .route("/ojs/v1/health", get(health))
        .route("/health", get(health))
        .route("/ojs/v1/ready", get(ready))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .route("/ojs/v1/middleware", get(middleware))
}

/// `GET /ojs/v1/middleware`: the server-side middleware chains the OJS admin UI lists. ojsd
/// runs none: enqueue and execution middleware belong to the SDKs, in the client's process.
async fn middleware() -> Ojs<serde_json::Value> {
    ok(json!({"enqueue": [], "execution": []}))
}

/// Prometheus text exposition. The content type is exactly `text/plain`, without the usual
/// `version` parameter, because the conformance suite compares the header literally.
async fn metrics(State(state): State<AppState>) -> Response {
    state.broker().refresh_gauges().await;
    (
        [(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"))],
        crate::telemetry::metrics().render(),
    )
        .into_response()
}

/// What this server implements. Capabilities are listed only once they are complete.
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
