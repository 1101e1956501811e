//! `server`: where the HTTP server listens, how many connections and threads it runs, its
//! time limits, and who this replica is.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, bail};

use super::values::{
    ResponseContentType, is_name_char, millis, millis_default, seconds, seconds_default,
};

pub const DEFAULT_LISTEN_ADDR: &str = "127.0.0.1:8080";
pub const DEFAULT_MAX_CONNECTIONS: usize = 2_048;
pub const DEFAULT_HTTP_IDLE_TIMEOUT_SECS: &str = "30";
pub const DEFAULT_REQUEST_TIMEOUT_SECS: &str = "60";
pub const DEFAULT_SHUTDOWN_TIMEOUT_SECS: &str = "30";
pub const DEFAULT_SERVICE_NAME: &str = "ojs-server";
pub const DEFAULT_EVENT_POLL_INTERVAL_MS: &str = "250";

#[derive(Debug, Clone, clap::Args)]
pub struct Server {
    /// Address the HTTP server listens on.
    #[arg(long, env = "OJS_LISTEN_ADDR", default_value = DEFAULT_LISTEN_ADDR)]
    pub listen_addr: SocketAddr,

    /// Threads that run requests and database work. Default: one less than the cores this
    /// process may use, at least 1 (the database usually shares the host); `TOKIO_WORKER_THREADS`
    /// is honoured when this is not set.
    #[arg(long, env = "OJS_WORKER_THREADS")]
    pub worker_threads: Option<usize>,

    /// Most client connections open at once; past it, new connections wait in the listen
    /// backlog until one closes.
    #[arg(long, env = "OJS_MAX_CONNECTIONS", default_value_t = DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,

    /// How long a connection may take to send a request's headers, counted from when it is
    /// ready for the next request, so an idle keep-alive connection is closed after this too;
    /// a request body from which nothing arrives for this long is answered 408 (seconds).
    #[arg(
        long = "http-idle-timeout-secs",
        id = "http_idle_timeout_secs",
        env = "OJS_HTTP_IDLE_TIMEOUT_SECS",
        value_parser = seconds,
        default_value = DEFAULT_HTTP_IDLE_TIMEOUT_SECS,
    )]
    pub http_idle_timeout: Duration,

    /// A request running longer than this is answered 503 (seconds; above the 30 s long poll).
    #[arg(
        long = "request-timeout-secs",
        id = "request_timeout_secs",
        env = "OJS_REQUEST_TIMEOUT_SECS",
        value_parser = seconds,
        default_value = DEFAULT_REQUEST_TIMEOUT_SECS,
    )]
    pub request_timeout: Duration,

    /// On SIGTERM/SIGINT, how long in-flight requests may take to finish (seconds).
    #[arg(
        long = "shutdown-timeout-secs",
        id = "shutdown_timeout_secs",
        env = "OJS_SHUTDOWN_TIMEOUT_SECS",
        value_parser = seconds,
        default_value = DEFAULT_SHUTDOWN_TIMEOUT_SECS,
    )]
    pub shutdown_timeout: Duration,

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

    /// How often event streams (SSE) look for new events (ms).
    #[arg(
        long = "event-poll-interval-ms",
        id = "event_poll_interval_ms",
        env = "OJS_EVENT_POLL_INTERVAL_MS",
        value_parser = millis,
        default_value = DEFAULT_EVENT_POLL_INTERVAL_MS,
    )]
    pub event_poll_interval: Duration,

    /// Enable test-only behaviour (POST /ojs/v1/admin/reset, which deletes everything).
    /// Needed by the conformance suite; never enable it in production.
    #[arg(long, env = "OJS_TEST_HOOKS", value_parser = clap::builder::BoolishValueParser::new())]
    pub test_hooks: bool,
}

impl Default for Server {
    fn default() -> Self {
        Server {
            listen_addr: DEFAULT_LISTEN_ADDR.parse().expect("valid default address"),
            worker_threads: None,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            http_idle_timeout: seconds_default(DEFAULT_HTTP_IDLE_TIMEOUT_SECS),
            request_timeout: seconds_default(DEFAULT_REQUEST_TIMEOUT_SECS),
            shutdown_timeout: seconds_default(DEFAULT_SHUTDOWN_TIMEOUT_SECS),
            response_content_type: ResponseContentType::Openjobspec,
            admin_ui_dir: None,
            instance_id: None,
            service_name: DEFAULT_SERVICE_NAME.to_owned(),
            event_poll_interval: millis_default(DEFAULT_EVENT_POLL_INTERVAL_MS),
            test_hooks: false,
        }
    }
}

impl Server {
    /// Checks the settings against each other; `longest_fetch_wait` is the longest long poll.
    pub fn validate(&self, longest_fetch_wait: Duration) -> anyhow::Result<()> {
        if self.http_idle_timeout.is_zero() || self.max_connections == 0 {
            bail!("OJS_HTTP_IDLE_TIMEOUT_SECS and OJS_MAX_CONNECTIONS must be positive");
        }
        if self.request_timeout <= longest_fetch_wait {
            bail!(
                "OJS_REQUEST_TIMEOUT_SECS must exceed the longest fetch wait ({} s)",
                longest_fetch_wait.as_secs()
            );
        }
        if self.event_poll_interval.is_zero() {
            bail!("maintenance intervals and OJS_MAINTENANCE_BATCH_SIZE must be positive");
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
        Ok(())
    }

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
}

/// See [`Server::runtime_worker_threads`]. One less than the cores by default: on the small
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

#[cfg(test)]
mod tests {
    use super::*;

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
