//! `database`: where PostgreSQL is, how many connections ojsd keeps, and the time limits of
//! its sessions.

use std::str::FromStr;
use std::time::Duration;

use anyhow::{Context, bail};
use sqlx::postgres::{PgConnectOptions, PgSslMode};

use super::values::{millis, millis_default, seconds, seconds_default};
use crate::db::target::split_url;
use crate::db::{DbTarget, PoolSettings};

pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/ojs";
pub const DEFAULT_DB_MAX_CONNECTIONS: u32 = 20;
pub const DEFAULT_DB_MIN_CONNECTIONS: u32 = 2;
pub const DEFAULT_DB_ACQUIRE_TIMEOUT_MS: &str = "5000";
pub const DEFAULT_DB_STATEMENT_TIMEOUT_SECS: &str = "30";
pub const DEFAULT_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECS: &str = "60";

#[derive(Debug, Clone, clap::Args)]
pub struct Database {
    /// PostgreSQL connection URL. The database is created if it does not exist (and the user
    /// may create databases).
    #[arg(
        long = "database-url",
        id = "database_url",
        env = "DATABASE_URL",
        default_value = DEFAULT_DATABASE_URL,
        hide_env_values = true,
    )]
    pub url: String,

    /// Most database connections this process opens.
    #[arg(
        long = "db-max-connections",
        id = "db_max_connections",
        env = "OJS_DB_MAX_CONNECTIONS",
        default_value_t = DEFAULT_DB_MAX_CONNECTIONS,
    )]
    pub max_connections: u32,

    /// Database connections kept open even when idle.
    #[arg(
        long = "db-min-connections",
        id = "db_min_connections",
        env = "OJS_DB_MIN_CONNECTIONS",
        default_value_t = DEFAULT_DB_MIN_CONNECTIONS,
    )]
    pub min_connections: u32,

    /// How long a request waits for a free database connection before answering 503 (ms).
    #[arg(
        long = "db-acquire-timeout-ms",
        id = "db_acquire_timeout_ms",
        env = "OJS_DB_ACQUIRE_TIMEOUT_MS",
        value_parser = millis,
        default_value = DEFAULT_DB_ACQUIRE_TIMEOUT_MS,
    )]
    pub acquire_timeout: Duration,

    /// `statement_timeout` of the server's database sessions: no statement holds locks longer
    /// (seconds; a statement cut short answers 503, retryable).
    #[arg(
        long = "db-statement-timeout-secs",
        id = "db_statement_timeout_secs",
        env = "OJS_DB_STATEMENT_TIMEOUT_SECS",
        value_parser = seconds,
        default_value = DEFAULT_DB_STATEMENT_TIMEOUT_SECS,
    )]
    pub statement_timeout: Duration,

    /// `idle_in_transaction_session_timeout` of the server's database sessions: a transaction
    /// left open and idle this long is ended, so it cannot hold locks or pin vacuum (seconds).
    #[arg(
        long = "db-idle-in-transaction-timeout-secs",
        id = "db_idle_in_transaction_timeout_secs",
        env = "OJS_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECS",
        value_parser = seconds,
        default_value = DEFAULT_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECS,
    )]
    pub idle_in_transaction_timeout: Duration,

    /// Do not apply pending migrations at start (apply them with `ojsd migrate` instead).
    #[arg(
        long,
        env = "OJS_SKIP_MIGRATIONS",
        value_parser = clap::builder::BoolishValueParser::new(),
    )]
    pub skip_migrations: bool,
}

impl Default for Database {
    fn default() -> Self {
        Database {
            url: DEFAULT_DATABASE_URL.to_owned(),
            max_connections: DEFAULT_DB_MAX_CONNECTIONS,
            min_connections: DEFAULT_DB_MIN_CONNECTIONS,
            acquire_timeout: millis_default(DEFAULT_DB_ACQUIRE_TIMEOUT_MS),
            statement_timeout: seconds_default(DEFAULT_DB_STATEMENT_TIMEOUT_SECS),
            idle_in_transaction_timeout: seconds_default(
                DEFAULT_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECS,
            ),
            skip_migrations: false,
        }
    }
}

impl Database {
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.max_connections < 2 || self.min_connections > self.max_connections {
            bail!(
                "need 2 <= OJS_DB_MAX_CONNECTIONS and OJS_DB_MIN_CONNECTIONS <= OJS_DB_MAX_CONNECTIONS"
            );
        }
        if self.statement_timeout.is_zero() || self.idle_in_transaction_timeout.is_zero() {
            bail!(
                "OJS_DB_STATEMENT_TIMEOUT_SECS and OJS_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECS must be positive"
            );
        }
        self.target()?;
        Ok(())
    }

    /// The pool's size and the acquire timeout.
    pub fn pool(&self) -> PoolSettings {
        PoolSettings {
            max_connections: self.max_connections,
            min_connections: self.min_connections,
            acquire_timeout: self.acquire_timeout,
        }
    }

    /// The database hosts `url` names (one, or several: see [`crate::db::target`]), with their
    /// connection options. A database on this host (a loopback address or a Unix socket) is
    /// reached without TLS unless the URL or `PGSSLMODE` asks for a mode: the default mode,
    /// `prefer`, would encrypt every message to a server on the same machine, which protects
    /// nothing and cost a tenth of the throughput of one-ACK-per-job draining (Postgres and
    /// ojsd each encrypt and decrypt every statement and answer).
    pub fn target(&self) -> anyhow::Result<DbTarget> {
        let split = split_url(&self.url).map_err(|why| anyhow::anyhow!("DATABASE_URL: {why}"))?;
        let mode_given = std::env::var_os("PGSSLMODE").is_some() || url_names_ssl_mode(&self.url);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The SSL mode `target` gives a URL (when `PGSSLMODE` is not set).
    fn ssl_mode_of(url: &str) -> Option<PgSslMode> {
        if std::env::var_os("PGSSLMODE").is_some() {
            return None;
        }
        let database = Database {
            url: url.to_owned(),
            ..Database::default()
        };
        Some(database.target().expect("valid URL").hosts()[0].get_ssl_mode())
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
}
