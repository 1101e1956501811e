//! [`AppState`], what every handler is given: the broker, the [`HttpSettings`], and the
//! process's [`Services`] (event tail, database health, leadership, keys, tracer).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::broker::Broker;
use crate::db::DbHealth;
use crate::events::EventTail;
use crate::leadership::Role;

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
    /// Label JSON responses `application/json` instead of [`OJS_JSON`](super::OJS_JSON).
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

    pub(super) fn accepting(&self) -> bool {
        self.inner.accepting.load(Ordering::SeqCst) && !self.inner.shutdown.is_cancelled()
    }

    pub(super) fn uptime(&self) -> Duration {
        self.inner.started.elapsed()
    }
}
