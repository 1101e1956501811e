//! Server configuration: environment variables, each overridable by a flag (`ojsd --help`).
//!
//! Every setting has a default that works on a development machine with a local Postgres.

use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use anyhow::{Context, bail};
use sqlx::postgres::PgConnectOptions;

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

/// Most jobs one FETCH may claim.
pub const MAX_FETCH_COUNT: usize = 1_000;
/// Longest long-poll a FETCH may ask for.
pub const MAX_FETCH_WAIT: Duration = Duration::from_secs(30);

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
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

    /// Log format.
    #[arg(long, env = "OJS_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            database_url: DEFAULT_DATABASE_URL.to_owned(),
            listen_addr: DEFAULT_LISTEN_ADDR.parse().expect("valid default address"),
            db_max_connections: DEFAULT_DB_MAX_CONNECTIONS,
            db_min_connections: DEFAULT_DB_MIN_CONNECTIONS,
            db_acquire_timeout_ms: DEFAULT_DB_ACQUIRE_TIMEOUT_MS,
            skip_migrations: false,
            test_hooks: false,
            max_priority: DEFAULT_MAX_PRIORITY,
            default_timeout_secs: DEFAULT_TIMEOUT_SECS,
            default_visibility_timeout_secs: DEFAULT_VISIBILITY_TIMEOUT_SECS,
            heartbeat_interval_secs: DEFAULT_HEARTBEAT_INTERVAL_SECS,
            max_envelope_bytes: DEFAULT_MAX_ENVELOPE_BYTES,
            max_batch_size: DEFAULT_MAX_BATCH_SIZE,
            max_batch_bytes: DEFAULT_MAX_BATCH_BYTES,
            fetch_poll_interval_ms: DEFAULT_FETCH_POLL_INTERVAL_MS,
            request_timeout_secs: DEFAULT_REQUEST_TIMEOUT_SECS,
            shutdown_timeout_secs: DEFAULT_SHUTDOWN_TIMEOUT_SECS,
            log_format: LogFormat::Text,
        }
    }
}

impl Config {
    /// Checks the settings against each other and the contract's minimums.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.max_priority < DEFAULT_MAX_PRIORITY {
            bail!("OJS_MAX_PRIORITY must be at least {DEFAULT_MAX_PRIORITY}");
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
        if Duration::from_secs(self.request_timeout_secs) <= MAX_FETCH_WAIT {
            bail!(
                "OJS_REQUEST_TIMEOUT_SECS must exceed the longest fetch wait ({} s)",
                MAX_FETCH_WAIT.as_secs()
            );
        }
        self.connect_options()?;
        Ok(())
    }

    /// Connection options from `database_url`.
    pub fn connect_options(&self) -> anyhow::Result<PgConnectOptions> {
        Ok(PgConnectOptions::from_str(&self.database_url)
            .context("DATABASE_URL is not a valid PostgreSQL URL")?
            .application_name("ojsd"))
    }
}
