//! Server configuration: environment variables, each overridable by a flag (`ojsd --help`).
//!
//! Every setting has a default that works on a development machine with a local Postgres.

use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use anyhow::{Context, bail};
use sqlx::postgres::{PgConnectOptions, PgSslMode};

use crate::db::DbTarget;
use crate::db::target::split_url;
use crate::telemetry::LogFormat;

pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/ojs";
pub const DEFAULT_LISTEN_ADDR: &str = "127.0.0.1:8080";
pub const DEFAULT_DB_MAX_CONNECTIONS: u32 = 20;
pub const DEFAULT_DB_MIN_CONNECTIONS: u32 = 2;
pub const DEFAULT_DB_ACQUIRE_TIMEOUT_MS: u64 = 5_000;
pub const DEFAULT_MAX_PRIORITY: i32 = 255;
pub const DEFAULT_TIMEOUT_SECS: u64 = 1_800;
pub const DEFAULT_VISIBILITY_TIMEOUT_SECS: u64 = 1_800;
pub const DEFAULT_HEARTBEAT_INTERVAL_SECS: u32 = 15;
pub const DEFAULT_MAX_ENVELOPE_BYTES: usize = 1024 * 1024;
pub const DEFAULT_MAX_BATCH_SIZE: usize = 10_000;
pub const DEFAULT_MAX_BATCH_BYTES: usize = 32 * 1024 * 1024;
pub const DEFAULT_FETCH_POLL_INTERVAL_MS: u64 = 500;
pub const DEFAULT_REQUEST_TIMEOUT_SECS: u64 = 60;
pub const DEFAULT_SHUTDOWN_TIMEOUT_SECS: u64 = 30;
pub const DEFAULT_HTTP_IDLE_TIMEOUT_SECS: u64 = 30;
pub const DEFAULT_MAX_CONNECTIONS: usize = 2_048;
pub const DEFAULT_DB_STATEMENT_TIMEOUT_SECS: u64 = 30;
pub const DEFAULT_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECS: u64 = 60;
pub const DEFAULT_SERVICE_NAME: &str = "ojs-server";
pub const DEFAULT_LEADER_LEASE_MS: u64 = 10_000;
pub const DEFAULT_LEADER_RENEW_INTERVAL_MS: u64 = 3_000;
pub const DEFAULT_LEADER_ELECT_INTERVAL_MS: u64 = 2_000;
pub const DEFAULT_PROMOTE_INTERVAL_MS: u64 = 250;
pub const DEFAULT_REAP_INTERVAL_MS: u64 = 500;
pub const DEFAULT_EXPIRE_INTERVAL_MS: u64 = 500;
pub const DEFAULT_STALE_CHECK_INTERVAL_MS: u64 = 2_000;
pub const DEFAULT_PRUNE_INTERVAL_MS: u64 = 60_000;
pub const DEFAULT_MAINTENANCE_BATCH_SIZE: u32 = 1_000;
pub const DEFAULT_RETENTION_COMPLETED: &str = "P7D";
pub const DEFAULT_RETENTION_CANCELLED: &str = "P7D";
pub const DEFAULT_RETENTION_DISCARDED: &str = "P30D";
pub const DEFAULT_EVENT_RETENTION: &str = "P7D";
pub const DEFAULT_EVENT_MAX_COUNT: u64 = 1_000_000;
pub const DEFAULT_STALE_WORKER_RETENTION: &str = "P1D";
/// How long cron run-ledger rows are kept.
pub const DEFAULT_CRON_HISTORY_RETENTION: &str = "P7D";
pub const DEFAULT_EVENT_POLL_INTERVAL_MS: u64 = 250;

/// Most jobs one FETCH may claim.
pub const MAX_FETCH_COUNT: usize = 1_000;
/// Longest long-poll a FETCH may ask for.
pub const MAX_FETCH_WAIT: Duration = Duration::from_secs(30);

/// Characters allowed in instance ids and service names (they appear in URIs and in
/// connection options).
fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

/// A duration setting: ISO 8601 (`P7D`, `PT30S`) or the short form (`168h`, `30s`, `500ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span(pub Duration);

impl FromStr for Span {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        crate::wire::duration::parse_ms(s).map(|ms| Span(Duration::from_millis(ms)))
    }
}

impl Span {
    fn parse_default(text: &str) -> Span {
        text.parse().expect("valid default duration")
    }
}

/// The `Content-Type` of JSON responses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ResponseContentType {
    /// `application/openjobspec+json`, as the OJS HTTP binding requires.
    #[default]
    #[value(name = "application/openjobspec+json")]
    Openjobspec,
    /// `application/json`, for clients that only read responses labelled so (the official
    /// Python SDK).
    #[value(name = "application/json")]
    Json,
}

/// ojsd's settings. Log verbosity is set with `RUST_LOG` (default `info`).
#[derive(Debug, Clone, clap::Args)]
pub struct Config {
    /// PostgreSQL connection URL. The database is created if it does not exist (and the user
    /// may create databases).
    #[arg(long, env = "DATABASE_URL", default_value = DEFAULT_DATABASE_URL, hide_env_values = true)]
    pub database_url: String,

    /// Address the HTTP server listens on.
    #[arg(long, env = "OJS_LISTEN_ADDR", default_value = DEFAULT_LISTEN_ADDR)]
    pub listen_addr: SocketAddr,

    /// Threads that run requests and database work. Default: one less than the cores this
    /// process may use, at least 1 (the database usually shares the host); `TOKIO_WORKER_THREADS`
    /// is honoured when this is not set.
    #[arg(long, env = "OJS_WORKER_THREADS")]
    pub worker_threads: Option<usize>,

    /// Most database connections this process opens.
    #[arg(long, env = "OJS_DB_MAX_CONNECTIONS", default_value_t = DEFAULT_DB_MAX_CONNECTIONS)]
    pub db_max_connections: u32,

    /// Database connections kept open even when idle.
    #[arg(long, env = "OJS_DB_MIN_CONNECTIONS", default_value_t = DEFAULT_DB_MIN_CONNECTIONS)]
    pub db_min_connections: u32,

    /// How long a request waits for a free database connection before answering 503 (ms).
    #[arg(long, env = "OJS_DB_ACQUIRE_TIMEOUT_MS", default_value_t = DEFAULT_DB_ACQUIRE_TIMEOUT_MS)]
    pub db_acquire_timeout_ms: u64,

    /// Do not apply pending migrations at start (apply them with `ojsd migrate` instead).
    #[arg(long, env = "OJS_SKIP_MIGRATIONS", value_parser = clap::builder::BoolishValueParser::new())]
    pub skip_migrations: bool,

    /// Enable test-only behaviour (POST /ojs/v1/admin/reset, which deletes everything).
    /// Needed by the conformance suite; never enable it in production.
    #[arg(long, env = "OJS_TEST_HOOKS", value_parser = clap::builder::BoolishValueParser::new())]
    pub test_hooks: bool,

    /// Largest accepted job priority (lowest urgency; 0 is the most urgent). At least 255.
    #[arg(long, env = "OJS_MAX_PRIORITY", default_value_t = DEFAULT_MAX_PRIORITY)]
    pub max_priority: i32,

    /// Priority aging (off when unset): a waiting job gains one step of urgency per interval,
    /// for ordering only (the stored priority never changes). Applies to jobs enqueued while
    /// it is set. ISO 8601 (`PT60S`) or short form (`60s`, `500ms`).
    #[arg(long, env = "OJS_PRIORITY_AGING_INTERVAL")]
    pub priority_aging_interval: Option<Span>,

    /// Queue consumption strategy imposed on every FETCH (`strict`, `weighted`,
    /// `round-robin`); unset: each FETCH chooses (default `strict`). Server configuration wins
    /// over what a worker asks for.
    #[arg(long, env = "OJS_FETCH_STRATEGY", value_enum)]
    pub fetch_strategy: Option<crate::scheduling::Strategy>,

    /// Refuse enqueues to queues that do not exist (400 `unknown_queue`) instead of creating
    /// them; queues are then created with `POST /ojs/v1/queues` (or pause/resume).
    #[arg(long, env = "OJS_STRICT_QUEUES", value_parser = clap::builder::BoolishValueParser::new())]
    pub strict_queues: bool,

    /// What a PUSH whose `args` fail its type's registered schema gets, for schemas registered
    /// without a `validation` of their own: `strict` (400 `schema_validation`), `warn`
    /// (accepted, with `warnings` in the answer) or `off` (not checked). Job types without a
    /// registered schema are never checked.
    #[arg(long, env = "OJS_SCHEMA_VALIDATION", default_value = "strict", value_parser = parse_validation_mode)]
    pub schema_validation: crate::job::schema::ValidationMode,

    /// Let webhook deliveries reach private, loopback and link-local addresses (by default
    /// they are refused, checked on every resolved address, so a webhook cannot reach into the
    /// network ojsd runs in).
    #[arg(long, env = "OJS_WEBHOOK_ALLOW_PRIVATE", value_parser = clap::builder::BoolishValueParser::new())]
    pub webhook_allow_private: bool,

    /// How long a webhook receiver has to answer one delivery, in milliseconds.
    #[arg(long, env = "OJS_WEBHOOK_TIMEOUT_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(100..=120_000))]
    pub webhook_timeout_ms: u64,

    /// Webhook subscriptions delivered to at once (by the leader).
    #[arg(long, env = "OJS_WEBHOOK_CONCURRENCY", default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub webhook_concurrency: u64,

    /// The key secrets are sealed with at rest (webhook subscriptions' HMAC keys): 32 bytes as
    /// 64 hex digits or in base64 (`ojsd secret-key` prints a new one). Without it, webhook
    /// subscriptions cannot be created or given a new secret. Every replica needs the same.
    #[arg(long, env = "OJS_SECRET_KEY", hide_env_values = true)]
    pub secret_key: Option<Redacted>,

    /// Earlier secret keys (comma-separated), which still open what they sealed: a rotation
    /// moves the old key here and a new one into OJS_SECRET_KEY; each server seals the secrets
    /// again under the new key when it starts.
    #[arg(
        long,
        env = "OJS_SECRET_KEY_PREVIOUS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub secret_key_previous: Vec<Redacted>,

    /// Queue weights for the `weighted` strategy, e.g. `critical=5,default=2,low=1`. When set
    /// they replace the weights a FETCH sends; queues not named weigh 1, weight 0 = never.
    #[arg(long, env = "OJS_QUEUE_WEIGHTS", value_parser = crate::scheduling::parse_weights_setting)]
    pub queue_weights: Option<crate::scheduling::Weights>,

    /// Execution timeout of jobs that do not set one (seconds).
    #[arg(long, env = "OJS_DEFAULT_TIMEOUT_SECS", default_value_t = DEFAULT_TIMEOUT_SECS)]
    pub default_timeout_secs: u64,

    /// Reservation length of a claimed job when neither the fetch nor the job sets one
    /// (seconds). A worker extends it by heartbeating.
    #[arg(long, env = "OJS_DEFAULT_VISIBILITY_TIMEOUT_SECS", default_value_t = DEFAULT_VISIBILITY_TIMEOUT_SECS)]
    pub default_visibility_timeout_secs: u64,

    /// Heartbeat cadence announced to workers (seconds).
    #[arg(long, env = "OJS_HEARTBEAT_INTERVAL_SECS", default_value_t = DEFAULT_HEARTBEAT_INTERVAL_SECS)]
    pub heartbeat_interval_secs: u32,

    /// Largest job envelope accepted, compact JSON (bytes). At least 1 MiB.
    #[arg(long, env = "OJS_MAX_ENVELOPE_BYTES", default_value_t = DEFAULT_MAX_ENVELOPE_BYTES)]
    pub max_envelope_bytes: usize,

    /// Most jobs in one batch enqueue. At least 1000.
    #[arg(long, env = "OJS_MAX_BATCH_SIZE", default_value_t = DEFAULT_MAX_BATCH_SIZE)]
    pub max_batch_size: usize,

    /// Largest batch enqueue body (bytes).
    #[arg(long, env = "OJS_MAX_BATCH_BYTES", default_value_t = DEFAULT_MAX_BATCH_BYTES)]
    pub max_batch_bytes: usize,

    /// How often a long-polling FETCH (wait_ms) checks for work without a notification (ms).
    #[arg(long, env = "OJS_FETCH_POLL_INTERVAL_MS", default_value_t = DEFAULT_FETCH_POLL_INTERVAL_MS)]
    pub fetch_poll_interval_ms: u64,

    /// A request running longer than this is answered 503 (seconds; above the 30 s long poll).
    #[arg(long, env = "OJS_REQUEST_TIMEOUT_SECS", default_value_t = DEFAULT_REQUEST_TIMEOUT_SECS)]
    pub request_timeout_secs: u64,

    /// On SIGTERM/SIGINT, how long in-flight requests may take to finish (seconds).
    #[arg(long, env = "OJS_SHUTDOWN_TIMEOUT_SECS", default_value_t = DEFAULT_SHUTDOWN_TIMEOUT_SECS)]
    pub shutdown_timeout_secs: u64,

    /// `keys`: requests need an API key (`Authorization: Bearer`) once any key exists, and
    /// always when listening beyond loopback, where the server refuses to start without a key;
    /// `disabled`: no key is checked (logged as a warning beyond loopback).
    #[arg(long, env = "OJS_AUTH", value_enum, default_value_t = crate::auth::AuthMode::Keys)]
    pub auth: crate::auth::AuthMode,

    /// `/metrics` needs an admin key too (it is open by default, for scrapers).
    #[arg(long, env = "OJS_METRICS_AUTH", default_value_t = false)]
    pub metrics_auth: bool,

    /// How long a connection may take to send a request's headers, counted from when it is
    /// ready for the next request, so an idle keep-alive connection is closed after this too;
    /// a request body from which nothing arrives for this long is answered 408 (seconds).
    #[arg(long, env = "OJS_HTTP_IDLE_TIMEOUT_SECS", default_value_t = DEFAULT_HTTP_IDLE_TIMEOUT_SECS)]
    pub http_idle_timeout_secs: u64,

    /// Most client connections open at once; past it, new connections wait in the listen
    /// backlog until one closes.
    #[arg(long, env = "OJS_MAX_CONNECTIONS", default_value_t = DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,

    /// `statement_timeout` of the server's database sessions: no statement holds locks longer
    /// (seconds; a statement cut short answers 503, retryable).
    #[arg(long, env = "OJS_DB_STATEMENT_TIMEOUT_SECS", default_value_t = DEFAULT_DB_STATEMENT_TIMEOUT_SECS)]
    pub db_statement_timeout_secs: u64,

    /// `idle_in_transaction_session_timeout` of the server's database sessions: a transaction
    /// left open and idle this long is ended, so it cannot hold locks or pin vacuum (seconds).
    #[arg(long, env = "OJS_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECS", default_value_t = DEFAULT_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECS)]
    pub db_idle_in_transaction_timeout_secs: u64,

    /// `Content-Type` of JSON responses: `application/openjobspec+json` (the OJS HTTP binding)
    /// or `application/json`, for deployments whose clients accept only that (the official
    /// Python SDK ignores every other response body).
    #[arg(
        long,
        env = "OJS_RESPONSE_CONTENT_TYPE",
        value_enum,
        default_value = "application/openjobspec+json"
    )]
    pub response_content_type: ResponseContentType,

    /// Log format.
    #[arg(long, env = "OJS_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Accept job types whose segments contain hyphens after the first letter
    /// (`retry.exponential-backoff`). The OJS core specification allows only
    /// `[a-z][a-z0-9_]*` per segment; the conformance suite's own jobs use hyphens. Defaults to
    /// on when OJS_TEST_HOOKS is on, off otherwise.
    #[arg(long, env = "OJS_ALLOW_HYPHENATED_TYPES", value_parser = clap::builder::BoolishValueParser::new())]
    pub allow_hyphenated_types: Option<bool>,

    /// A built OJS admin UI (`openjobspec/ojs-admin-ui`, `npm run build:app` → `dist-app`) to
    /// serve at `/ojs/admin/`, on the API's own origin as the UI expects. Unset: not served.
    #[arg(long, env = "OJS_ADMIN_UI_DIR")]
    pub admin_ui_dir: Option<std::path::PathBuf>,

    /// This process's identity among the replicas (leader id, event source). Default:
    /// `<hostname>-<pid>-<random>`, new at every start.
    #[arg(long, env = "OJS_INSTANCE_ID")]
    pub instance_id: Option<String>,

    /// Service name in event sources (`ojs://<service>/<component>/<instance>`).
    #[arg(long, env = "OJS_SERVICE_NAME", default_value = DEFAULT_SERVICE_NAME)]
    pub service_name: String,

    /// Whether this process may lead, i.e. run the maintenance services (promotion, reclaiming,
    /// expiry, retention, stale workers) when elected. Keep it on for at least one replica.
    #[arg(long, env = "OJS_MAINTENANCE", default_value_t = true, action = clap::ArgAction::Set, value_parser = clap::builder::BoolishValueParser::new())]
    pub maintenance: bool,

    /// Leadership lease length (ms). A leader renews it well before it runs out; if the leader
    /// dies, another replica takes over at most this long after the last renewal.
    #[arg(long, env = "OJS_LEADER_LEASE_MS", default_value_t = DEFAULT_LEADER_LEASE_MS)]
    pub leader_lease_ms: u64,

    /// How often the leader renews its lease (ms); at most a third of the lease.
    #[arg(long, env = "OJS_LEADER_RENEW_INTERVAL_MS", default_value_t = DEFAULT_LEADER_RENEW_INTERVAL_MS)]
    pub leader_renew_interval_ms: u64,

    /// How often a follower tries to become leader (ms). It also tries the moment the current
    /// lease runs out or its holder resigns.
    #[arg(long, env = "OJS_LEADER_ELECT_INTERVAL_MS", default_value_t = DEFAULT_LEADER_ELECT_INTERVAL_MS)]
    pub leader_elect_interval_ms: u64,

    /// Promoter: how often due scheduled and retryable jobs are made available (ms).
    #[arg(long, env = "OJS_PROMOTE_INTERVAL_MS", default_value_t = DEFAULT_PROMOTE_INTERVAL_MS)]
    pub promote_interval_ms: u64,

    /// Reaper: how often active jobs past their reservation, execution timeout or total timeout
    /// are reclaimed (ms).
    #[arg(long, env = "OJS_REAP_INTERVAL_MS", default_value_t = DEFAULT_REAP_INTERVAL_MS)]
    pub reap_interval_ms: u64,

    /// Expirer: how often waiting jobs past expires_at, enqueue_ttl or total_timeout are
    /// discarded (ms).
    #[arg(long, env = "OJS_EXPIRE_INTERVAL_MS", default_value_t = DEFAULT_EXPIRE_INTERVAL_MS)]
    pub expire_interval_ms: u64,

    /// Stale-worker detector: how often workers silent for the heartbeat timeout are declared
    /// stale and their jobs released (ms).
    #[arg(long, env = "OJS_STALE_CHECK_INTERVAL_MS", default_value_t = DEFAULT_STALE_CHECK_INTERVAL_MS)]
    pub stale_check_interval_ms: u64,

    /// Pruner: how often finished jobs, old events and long-stale workers are deleted (ms).
    #[arg(long, env = "OJS_PRUNE_INTERVAL_MS", default_value_t = DEFAULT_PRUNE_INTERVAL_MS)]
    pub prune_interval_ms: u64,

    /// Rows a maintenance service handles per statement (each runs several per pass when
    /// there is a backlog, yielding in between).
    #[arg(long, env = "OJS_MAINTENANCE_BATCH_SIZE", default_value_t = DEFAULT_MAINTENANCE_BATCH_SIZE)]
    pub maintenance_batch_size: u32,

    /// How long completed jobs are kept.
    #[arg(long, env = "OJS_RETENTION_COMPLETED", default_value = DEFAULT_RETENTION_COMPLETED)]
    pub retention_completed: Span,

    /// How long cancelled jobs are kept.
    #[arg(long, env = "OJS_RETENTION_CANCELLED", default_value = DEFAULT_RETENTION_CANCELLED)]
    pub retention_cancelled: Span,

    /// How long discarded jobs (dead-lettered or not) are kept.
    #[arg(long, env = "OJS_RETENTION_DISCARDED", default_value = DEFAULT_RETENTION_DISCARDED)]
    pub retention_discarded: Span,

    /// How long events are kept.
    #[arg(long, env = "OJS_EVENT_RETENTION", default_value = DEFAULT_EVENT_RETENTION)]
    pub event_retention: Span,

    /// Most events kept; older ones beyond it are pruned.
    #[arg(long, env = "OJS_EVENT_MAX_COUNT", default_value_t = DEFAULT_EVENT_MAX_COUNT)]
    pub event_max_count: u64,

    /// How long a stale worker stays listed before it is deleted.
    #[arg(long, env = "OJS_STALE_WORKER_RETENTION", default_value = DEFAULT_STALE_WORKER_RETENTION)]
    pub stale_worker_retention: Span,

    /// How long the cron run ledger (`ojs_cron_run`, one row per occurrence of each entry)
    /// keeps a row; rows of runs that may still be running are kept.
    #[arg(long, env = "OJS_CRON_HISTORY_RETENTION", default_value = DEFAULT_CRON_HISTORY_RETENTION)]
    pub cron_history_retention: Span,

    /// A worker without a heartbeat for this long is stale and loses its jobs (seconds).
    /// Default: three heartbeat intervals.
    #[arg(long, env = "OJS_HEARTBEAT_TIMEOUT_SECS")]
    pub heartbeat_timeout_secs: Option<u32>,

    /// How often event streams (SSE) look for new events (ms).
    #[arg(long, env = "OJS_EVENT_POLL_INTERVAL_MS", default_value_t = DEFAULT_EVENT_POLL_INTERVAL_MS)]
    pub event_poll_interval_ms: u64,

    /// Job traces: the standard OpenTelemetry variables.
    #[command(flatten)]
    pub otel: crate::telemetry::traces::OtelVariables,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            database_url: DEFAULT_DATABASE_URL.to_owned(),
            listen_addr: DEFAULT_LISTEN_ADDR.parse().expect("valid default address"),
            worker_threads: None,
            db_max_connections: DEFAULT_DB_MAX_CONNECTIONS,
            db_min_connections: DEFAULT_DB_MIN_CONNECTIONS,
            db_acquire_timeout_ms: DEFAULT_DB_ACQUIRE_TIMEOUT_MS,
            skip_migrations: false,
            test_hooks: false,
            max_priority: DEFAULT_MAX_PRIORITY,
            priority_aging_interval: None,
            fetch_strategy: None,
            queue_weights: None,
            strict_queues: false,
            schema_validation: crate::job::schema::ValidationMode::Strict,
            webhook_allow_private: false,
            webhook_timeout_ms: 10_000,
            webhook_concurrency: 8,
            secret_key: None,
            secret_key_previous: Vec::new(),
            default_timeout_secs: DEFAULT_TIMEOUT_SECS,
            default_visibility_timeout_secs: DEFAULT_VISIBILITY_TIMEOUT_SECS,
            heartbeat_interval_secs: DEFAULT_HEARTBEAT_INTERVAL_SECS,
            max_envelope_bytes: DEFAULT_MAX_ENVELOPE_BYTES,
            max_batch_size: DEFAULT_MAX_BATCH_SIZE,
            max_batch_bytes: DEFAULT_MAX_BATCH_BYTES,
            fetch_poll_interval_ms: DEFAULT_FETCH_POLL_INTERVAL_MS,
            request_timeout_secs: DEFAULT_REQUEST_TIMEOUT_SECS,
            shutdown_timeout_secs: DEFAULT_SHUTDOWN_TIMEOUT_SECS,
            auth: crate::auth::AuthMode::Keys,
            metrics_auth: false,
            http_idle_timeout_secs: DEFAULT_HTTP_IDLE_TIMEOUT_SECS,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            db_statement_timeout_secs: DEFAULT_DB_STATEMENT_TIMEOUT_SECS,
            db_idle_in_transaction_timeout_secs: DEFAULT_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECS,
            response_content_type: ResponseContentType::Openjobspec,
            log_format: LogFormat::Text,
            allow_hyphenated_types: None,
            admin_ui_dir: None,
            instance_id: None,
            service_name: DEFAULT_SERVICE_NAME.to_owned(),
            maintenance: true,
            leader_lease_ms: DEFAULT_LEADER_LEASE_MS,
            leader_renew_interval_ms: DEFAULT_LEADER_RENEW_INTERVAL_MS,
            leader_elect_interval_ms: DEFAULT_LEADER_ELECT_INTERVAL_MS,
            promote_interval_ms: DEFAULT_PROMOTE_INTERVAL_MS,
            reap_interval_ms: DEFAULT_REAP_INTERVAL_MS,
            expire_interval_ms: DEFAULT_EXPIRE_INTERVAL_MS,
            stale_check_interval_ms: DEFAULT_STALE_CHECK_INTERVAL_MS,
            prune_interval_ms: DEFAULT_PRUNE_INTERVAL_MS,
            maintenance_batch_size: DEFAULT_MAINTENANCE_BATCH_SIZE,
            retention_completed: Span::parse_default(DEFAULT_RETENTION_COMPLETED),
            retention_cancelled: Span::parse_default(DEFAULT_RETENTION_CANCELLED),
            retention_discarded: Span::parse_default(DEFAULT_RETENTION_DISCARDED),
            event_retention: Span::parse_default(DEFAULT_EVENT_RETENTION),
            event_max_count: DEFAULT_EVENT_MAX_COUNT,
            stale_worker_retention: Span::parse_default(DEFAULT_STALE_WORKER_RETENTION),
            cron_history_retention: Span::parse_default(DEFAULT_CRON_HISTORY_RETENTION),
            heartbeat_timeout_secs: None,
            event_poll_interval_ms: DEFAULT_EVENT_POLL_INTERVAL_MS,
            otel: crate::telemetry::traces::OtelVariables::default(),
        }
    }
}

impl Config {
    /// The runtime's worker threads: `OJS_WORKER_THREADS`, else `TOKIO_WORKER_THREADS`, else
    /// one less than the cores this process may use (at least 1).
    pub fn runtime_worker_threads(&self) -> anyhow::Result<usize> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        worker_threads(
            self.worker_threads,
            std::env::var("TOKIO_WORKER_THREADS").ok().as_deref(),
            cores,
        )
    }

    /// Checks the settings against each other and against ojsd's floors: a maximum priority of
    /// at least 255 (as the [OJS priority levels] require), envelopes of at least 1 MiB and
    /// batches of at least 1,000 jobs.
    ///
    /// [OJS priority levels]: https://github.com/openjobspec/spec/blob/main/spec/ojs-priority.md#51-priority-levels
    /// The keyring of `OJS_SECRET_KEY` and `OJS_SECRET_KEY_PREVIOUS` (`None` without a key).
    pub fn secret_keyring(&self) -> anyhow::Result<Option<crate::webhook::secret::Keyring>> {
        let Some(current) = self.secret_key.as_ref().filter(|k| !k.0.trim().is_empty()) else {
            if !self.secret_key_previous.is_empty() {
                bail!("OJS_SECRET_KEY_PREVIOUS is set without OJS_SECRET_KEY");
            }
            return Ok(None);
        };
        let previous: Vec<String> = self
            .secret_key_previous
            .iter()
            .map(|k| k.0.clone())
            .collect();
        crate::webhook::secret::Keyring::new(&current.0, &previous)
            .map(Some)
            .map_err(|e| anyhow::anyhow!(e))
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        self.secret_keyring()?;
        if self.max_priority < DEFAULT_MAX_PRIORITY {
            bail!("OJS_MAX_PRIORITY must be at least {DEFAULT_MAX_PRIORITY}");
        }
        if self
            .priority_aging_interval
            .is_some_and(|Span(d)| d < Duration::from_millis(1))
        {
            bail!("OJS_PRIORITY_AGING_INTERVAL must be at least 1ms");
        }
        if self.max_envelope_bytes < DEFAULT_MAX_ENVELOPE_BYTES {
            bail!("OJS_MAX_ENVELOPE_BYTES must be at least {DEFAULT_MAX_ENVELOPE_BYTES} (1 MiB)");
        }
        if self.max_batch_size < 1_000 {
            bail!("OJS_MAX_BATCH_SIZE must be at least 1000");
        }
        if self.max_batch_bytes < self.max_envelope_bytes {
            bail!("OJS_MAX_BATCH_BYTES must be at least OJS_MAX_ENVELOPE_BYTES");
        }
        if self.db_max_connections < 2 || self.db_min_connections > self.db_max_connections {
            bail!(
                "need 2 <= OJS_DB_MAX_CONNECTIONS and OJS_DB_MIN_CONNECTIONS <= OJS_DB_MAX_CONNECTIONS"
            );
        }
        if self.default_timeout_secs == 0 || self.default_visibility_timeout_secs == 0 {
            bail!("default timeouts must be positive");
        }
        if self.fetch_poll_interval_ms == 0 || self.heartbeat_interval_secs == 0 {
            bail!("OJS_FETCH_POLL_INTERVAL_MS and OJS_HEARTBEAT_INTERVAL_SECS must be positive");
        }
        if self.http_idle_timeout_secs == 0 || self.max_connections == 0 {
            bail!("OJS_HTTP_IDLE_TIMEOUT_SECS and OJS_MAX_CONNECTIONS must be positive");
        }
        if self.db_statement_timeout_secs == 0 || self.db_idle_in_transaction_timeout_secs == 0 {
            bail!(
                "OJS_DB_STATEMENT_TIMEOUT_SECS and OJS_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECS must be positive"
            );
        }
        if Duration::from_secs(self.request_timeout_secs) <= MAX_FETCH_WAIT {
            bail!(
                "OJS_REQUEST_TIMEOUT_SECS must exceed the longest fetch wait ({} s)",
                MAX_FETCH_WAIT.as_secs()
            );
        }
        if self.leader_renew_interval_ms == 0
            || self.leader_elect_interval_ms == 0
            || self.leader_renew_interval_ms * 3 > self.leader_lease_ms
        {
            bail!(
                "need 0 < OJS_LEADER_RENEW_INTERVAL_MS <= OJS_LEADER_LEASE_MS / 3 and a positive OJS_LEADER_ELECT_INTERVAL_MS"
            );
        }
        if [
            self.promote_interval_ms,
            self.reap_interval_ms,
            self.expire_interval_ms,
            self.stale_check_interval_ms,
            self.prune_interval_ms,
            self.event_poll_interval_ms,
        ]
        .contains(&0)
            || self.maintenance_batch_size == 0
        {
            bail!("maintenance intervals and OJS_MAINTENANCE_BATCH_SIZE must be positive");
        }
        if self.heartbeat_timeout() <= Duration::from_secs(u64::from(self.heartbeat_interval_secs))
        {
            bail!("OJS_HEARTBEAT_TIMEOUT_SECS must exceed OJS_HEARTBEAT_INTERVAL_SECS");
        }
        if let Some(id) = &self.instance_id
            && (id.is_empty() || id.len() > 128 || !id.chars().all(is_name_char))
        {
            bail!("OJS_INSTANCE_ID must be 1-128 characters of letters, digits, '.', '_' and '-'");
        }
        if self.service_name.is_empty()
            || self.service_name.len() > 128
            || !self.service_name.chars().all(is_name_char)
        {
            bail!("OJS_SERVICE_NAME must be 1-128 characters of letters, digits, '.', '_' and '-'");
        }
        self.database_target()?;
        Ok(())
    }

    /// Whether job types may contain hyphens (explicit setting, else the test-hooks setting).
    pub fn hyphenated_types(&self) -> bool {
        self.allow_hyphenated_types.unwrap_or(self.test_hooks)
    }

    /// How long a worker may stay silent before it is declared stale.
    pub fn heartbeat_timeout(&self) -> Duration {
        Duration::from_secs(u64::from(
            self.heartbeat_timeout_secs
                .unwrap_or(self.heartbeat_interval_secs.saturating_mul(3)),
        ))
    }

    /// This process's instance id: the configured one, else host, pid and a random suffix.
    pub fn resolved_instance_id(&self) -> String {
        if let Some(id) = &self.instance_id {
            return id.clone();
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| "ojsd".to_owned());
        let host: String = host
            .chars()
            .take(64)
            .map(|c| if is_name_char(c) { c } else { '_' })
            .collect();
        let suffix: u16 = rand::random();
        format!("{host}-{}-{suffix:04x}", std::process::id())
    }

    /// The database hosts `database_url` names (one, or several: see [`crate::db::target`]),
    /// with their connection options. A database on this host (a loopback address or a Unix
    /// socket) is reached without TLS unless the URL or `PGSSLMODE` asks for a mode: the
    /// default mode, `prefer`, would encrypt every message to a server on the same machine,
    /// which protects nothing and cost a tenth of the throughput of one-ACK-per-job draining
    /// (Postgres and ojsd each encrypt and decrypt every statement and answer).
    pub fn database_target(&self) -> anyhow::Result<DbTarget> {
        let split =
            split_url(&self.database_url).map_err(|why| anyhow::anyhow!("DATABASE_URL: {why}"))?;
        let mode_given =
            std::env::var_os("PGSSLMODE").is_some() || url_names_ssl_mode(&self.database_url);
        let hosts = split
            .urls
            .iter()
            .map(|url| {
                let options = PgConnectOptions::from_str(url)
                    .context("DATABASE_URL is not a valid PostgreSQL URL")?
                    .application_name("ojsd");
                let local = options.get_socket().is_some() || on_this_host(options.get_host());
                Ok(if !mode_given && local {
                    options.ssl_mode(PgSslMode::Disable)
                } else {
                    options
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(DbTarget::new(hosts, split.attrs))
    }
}

/// Whether a PostgreSQL URL's query names an SSL mode (`sslmode`, or sqlx's `ssl-mode`).
fn url_names_ssl_mode(url: &str) -> bool {
    url.split_once('?').is_some_and(|(_, query)| {
        query.split('&').any(|pair| {
            let key = pair.split_once('=').map_or(pair, |(k, _)| k);
            key.eq_ignore_ascii_case("sslmode") || key.eq_ignore_ascii_case("ssl-mode")
        })
    })
}

/// Whether a connection's host is this machine: a Unix socket directory, `localhost` or a
/// loopback address.
fn on_this_host(host: &str) -> bool {
    host.starts_with('/')
        || host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// See [`Config::runtime_worker_threads`]. One less than the cores by default: on the small
/// hosts where ojsd shares the machine with PostgreSQL, a second busy runtime thread mostly
/// wakes up for nothing, and PostgreSQL needs the core more (it spends 2–3× ojsd's CPU per job).
fn worker_threads(
    configured: Option<usize>,
    tokio_env: Option<&str>,
    cores: usize,
) -> anyhow::Result<usize> {
    let threads = match (configured, tokio_env) {
        (Some(n), _) => n,
        (None, Some(text)) => text
            .trim()
            .parse()
            .with_context(|| format!("TOKIO_WORKER_THREADS must be a number, not {text:?}"))?,
        (None, None) => cores.saturating_sub(1).max(1),
    };
    if threads == 0 {
        bail!("OJS_WORKER_THREADS (or TOKIO_WORKER_THREADS) must be at least 1");
    }
    Ok(threads)
}

fn parse_validation_mode(s: &str) -> Result<crate::job::schema::ValidationMode, String> {
    crate::job::schema::ValidationMode::from_name(s)
        .ok_or_else(|| format!("'{s}' is not a validation mode: strict, warn or off"))
}

/// A setting's value that logs and `Debug` never show (a secret key).
#[derive(Clone, PartialEq, Eq)]
pub struct Redacted(pub String);

impl std::fmt::Debug for Redacted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl std::str::FromStr for Redacted {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Redacted, Self::Err> {
        Ok(Redacted(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use clap::{Args, Command, FromArgMatches};

    use super::*;

    /// The SSL mode `connect_options` gives a URL (when `PGSSLMODE` is not set).
    fn ssl_mode_of(url: &str) -> Option<PgSslMode> {
        if std::env::var_os("PGSSLMODE").is_some() {
            return None;
        }
        let config = Config {
            database_url: url.to_owned(),
            ..parsed_defaults()
        };
        Some(config.database_target().expect("valid URL").hosts()[0].get_ssl_mode())
    }

    #[test]
    fn a_database_on_this_host_is_reached_without_tls_unless_the_url_names_a_mode() {
        for url in [
            "postgres://postgres@127.0.0.1:5432/ojs",
            "postgres://postgres@localhost/ojs",
            "postgres://postgres@[::1]:5432/ojs",
            "postgres://postgres@127.0.0.2/ojs?application_name=x",
            "postgres:///ojs?host=/var/run/postgresql",
        ] {
            if let Some(mode) = ssl_mode_of(url) {
                assert!(matches!(mode, PgSslMode::Disable), "{url}: {mode:?}");
            }
        }
        for (url, expected) in [
            (
                "postgres://postgres@127.0.0.1/ojs?sslmode=require",
                "Require",
            ),
            ("postgres://postgres@localhost/ojs?sslmode=prefer", "Prefer"),
            ("postgres://postgres@db.example.com/ojs", "Prefer"),
            ("postgres://postgres@10.0.0.5:5432/ojs", "Prefer"),
        ] {
            if let Some(mode) = ssl_mode_of(url) {
                assert_eq!(format!("{mode:?}"), expected, "{url}");
            }
        }
    }

    #[test]
    fn only_an_sslmode_key_counts_as_naming_a_mode() {
        assert!(url_names_ssl_mode("postgres://h/db?sslmode=disable"));
        assert!(url_names_ssl_mode("postgres://h/db?a=b&SSLMODE=require"));
        assert!(url_names_ssl_mode("postgres://h/db?ssl-mode=require"));
        assert!(!url_names_ssl_mode("postgres://h/db"));
        assert!(!url_names_ssl_mode(
            "postgres://h/db?application_name=sslmode"
        ));
        assert!(!url_names_ssl_mode("postgres://h/db?sslrootcert=x"));
    }

    /// The settings as `ojsd` with no flags parses them, ignoring the environment.
    fn parsed_defaults() -> Config {
        let command = Config::augment_args(Command::new("ojsd"))
            .mut_args(|arg| arg.env(None::<&'static str>));
        let matches = command
            .try_get_matches_from(["ojsd"])
            .expect("no flag is required");
        Config::from_arg_matches(&matches).expect("defaults parse")
    }

    #[test]
    fn the_written_out_defaults_are_the_flags_defaults() {
        // `Config::default()` (used by tests and embedders) mirrors every `default_value`.
        assert_eq!(
            format!("{:?}", Config::default()),
            format!("{:?}", parsed_defaults())
        );
        Config::default()
            .validate()
            .expect("the defaults are valid");
    }

    #[test]
    fn the_response_content_type_is_named_by_its_media_type() {
        let parse = |value: &str| {
            let command = Config::augment_args(Command::new("ojsd"))
                .mut_args(|arg| arg.env(None::<&'static str>));
            command
                .try_get_matches_from(["ojsd", "--response-content-type", value])
                .ok()
                .and_then(|m| Config::from_arg_matches(&m).ok())
                .map(|c| c.response_content_type)
        };
        assert_eq!(parse("application/json"), Some(ResponseContentType::Json));
        assert_eq!(
            parse("application/openjobspec+json"),
            Some(ResponseContentType::Openjobspec)
        );
        assert_eq!(parse("text/plain"), None);
    }

    #[test]
    fn worker_threads_leave_a_core_to_the_database_unless_told() {
        assert_eq!(worker_threads(None, None, 1).unwrap(), 1);
        assert_eq!(worker_threads(None, None, 2).unwrap(), 1);
        assert_eq!(worker_threads(None, None, 8).unwrap(), 7);
        assert_eq!(worker_threads(None, Some("3"), 2).unwrap(), 3);
        assert_eq!(worker_threads(Some(4), Some("3"), 2).unwrap(), 4);
        assert!(worker_threads(Some(0), None, 8).is_err());
        assert!(worker_threads(None, Some("0"), 8).is_err());
        assert!(worker_threads(None, Some("many"), 8).is_err());
    }
}
